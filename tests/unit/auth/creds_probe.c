/*
 * creds_probe.c - resolves the credentials chain from this process's own
 * environment and prints what it found, without secrets:
 *
 *   source=<source> access_key=<id> expiration=<epoch>
 *
 * Exit status 0 on success, 1 (with the reason on stderr) when no source
 * yields credentials. Used by tests/integration/auth/test_creds_sts_moto.py;
 * not a unit test. Optional argv[1]: the region.
 */
#include <stdio.h>
#include <string.h>

#include "auth/creds.h"

int main(int argc, char **argv)
{
	char err[1024] = "";
	struct creds_provider *p = creds_provider_create(NULL, argc > 1 ? argv[1] : NULL, 60, err, sizeof err);
	if (!p) {
		fprintf(stderr, "creds_probe: %s\n", err);
		return 1;
	}
	struct creds c;
	creds_provider_get(p, &c);
	printf("source=%s access_key=%s expiration=%lld\n", creds_provider_source(p), c.access_key,
	       (long long)c.expiration);
	explicit_bzero(&c, sizeof c);
	creds_provider_destroy(p);
	return 0;
}

/*
 * fuzz_authz.c - sv4_parse on arbitrary Authorization headers and
 * presigned query strings.
 *
 * The input is used three ways: as the Authorization header value (with a
 * fixed X-Amz-Date and payload hash), as the raw query string of a request
 * without that header, and, split at the first newline, as both at once.
 * Whatever parses is also put through sv4_verify, which must not crash.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "auth/sigv4.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const struct sv4_request *req)
{
	struct sv4_auth a;
	enum sv4_status st = sv4_parse(req, &a);
	if (st != SV4_OK)
		return;
	/* Every field is NUL-terminated inside its array. */
	if (memchr(a.access_key, 0, sizeof a.access_key) == NULL ||
	    memchr(a.signed_headers, 0, sizeof a.signed_headers) == NULL ||
	    memchr(a.payload_hash, 0, sizeof a.payload_hash) == NULL)
		abort();
	unsigned char key[32];
	sv4_verify(req, &a, "secret", 1369353600, 900, key);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1);
	if (!s)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';

	struct sv4_header h[4] = {
		{ "Host", "bucket.s3.amazonaws.com" },
		{ "X-Amz-Date", "20130524T000000Z" },
		{ "x-amz-content-sha256", SV4_UNSIGNED_PAYLOAD },
		{ "Authorization", s },
	};
	struct sv4_request req = { "GET", "/key", "", h, 4 };
	check(&req);

	req.query = s;
	req.n_headers = 3;
	check(&req);

	char *nl = strchr(s, '\n');
	if (nl) {
		*nl = '\0';
		h[3].value = s;
		req.query = nl + 1;
		req.n_headers = 4;
		check(&req);
		h[1].name = "Date";
		h[1].value = nl + 1;
		req.query = "";
		check(&req);
	}
	free(s);
	return 0;
}

/*
 * fuzz_config.c - config/config.c on arbitrary INI text and environment.
 *
 * Input: an INI text, then optionally a line "%%" followed by environment
 * entries, one "NAME=value" per line (at most MAX_ENV). A NUL byte ends the
 * part it is in, as it would end a C string.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"

#define MAX_ENV 16

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char sep[] = "\n%%\n";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *copy = malloc(size + 1);
	if (!copy)
		return 0;
	memcpy(copy, data, size);
	copy[size] = '\0';

	const char *env[MAX_ENV + 1];
	size_t n_env = 0;
	char *line = NULL;
	char *split = memmem(copy, size, sep, sizeof sep - 1);
	if (split) {
		*split = '\0';
		line = split + sizeof sep - 1;
	} else if (strncmp(copy, sep + 1, sizeof sep - 2) == 0) {
		line = copy + sizeof sep - 2;  /* no INI text, only environment */
		copy[0] = '\0';
	}
	if (line) {
		while (n_env < MAX_ENV && *line) {
			char *nl = strchr(line, '\n');
			if (nl)
				*nl = '\0';
			env[n_env++] = line;
			if (!nl)
				break;
			line = nl + 1;
		}
	}
	env[n_env] = NULL;

	char err[256];
	struct cfg *c = cfg_load_text(copy, env, err, sizeof err);
	if (c) {
		/* Walk what was loaded, so bad pointers show up under ASan. */
		for (size_t i = 0; i < c->n_keys; i++) {
			if (cfg_find_key(c, c->keys[i].id) == NULL)
				abort();
			for (size_t j = 0; j < c->keys[i].n_grants; j++)
				if (!c->keys[i].grants[j].bucket || !c->keys[i].grants[j].prefix)
					abort();
		}
		for (size_t i = 0; i < c->n_bucket_regions; i++)
			if (!cfg_bucket_region(c, c->bucket_regions[i].bucket))
				abort();
		cfg_free(c);
	} else if (!memchr(err, '\0', sizeof err) || err[0] == '\0') {
		abort();  /* a failure always says why */
	}
	free(copy);
	return 0;
}

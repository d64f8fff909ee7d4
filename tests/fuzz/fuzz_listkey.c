/*
 * fuzz_listkey.c - the LIST cache's key (gateway/listcache.c,
 * listcache_key), built from a client's query string before the cache is
 * asked: two requests share a cached answer exactly when their keys match.
 * Checks: a key is "bucket\n" and the query's parameters, each a listing
 * parameter, none twice, sorted; the key's own query gives the key again;
 * the same parameters in another order give the same key.
 *
 * Input: the bucket, a newline, the query.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_text.h"
#include "gateway/listcache.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const params[] = { "list-type", "prefix", "delimiter", "max-keys",
	"continuation-token", "start-after", "fetch-owner", "encoding-type", "marker" };

static void fail(const char *what, const char *bucket, const char *query, const char *key)
{
	fprintf(stderr, "%s: bucket \"%s\" query \"%s\" key \"%s\"\n", what, bucket, query,
	        key ? key : "(none)");
	abort();
}

/* Whether the part of a key after its bucket reads as sorted, distinct
 * listing parameters. */
static int key_ok(const char *q)
{
	char *copy = strdup(q), *save = NULL, *prev = NULL;
	int ok = copy != NULL, n = 0;
	const char *names[16];
	size_t lens[16];
	for (char *t = ok ? strtok_r(copy, "&", &save) : NULL; ok && t;
	     t = strtok_r(NULL, "&", &save)) {
		size_t nl = strcspn(t, "=");
		int known = 0;
		for (size_t i = 0; i < sizeof params / sizeof params[0]; i++)
			known |= strlen(params[i]) == nl && memcmp(params[i], t, nl) == 0;
		for (int i = 0; known && i < n; i++)
			if (lens[i] == nl && memcmp(names[i], t, nl) == 0)
				known = 0;
		if (!known || n == 16 || (prev && strcmp(prev, t) > 0))
			ok = 0;
		else {
			names[n] = t;
			lens[n++] = nl;
		}
		prev = t;
	}
	free(copy);
	return ok;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = fz_cstr(data, size, 4096);
	if (!s)
		return 0;
	char *part[2];
	fz_split(s, part, 2);
	const char *bucket = part[0], *query = part[1];
	char *key = listcache_key(bucket, query);

	/* The same parameters in reverse order. */
	size_t ql = strlen(query);
	char *rev = malloc(ql + 2), *copy = strdup(query);
	if (rev && copy) {
		char *tok[4096], *save = NULL;
		size_t n = 0;
		for (char *t = strtok_r(copy, "&", &save); t && n < 4096;
		     t = strtok_r(NULL, "&", &save))
			tok[n++] = t;
		size_t at = 0;
		for (size_t i = n; i-- > 0;) {
			size_t tl = strlen(tok[i]);
			memcpy(rev + at, tok[i], tl);
			at += tl;
			if (i)
				rev[at++] = '&';
		}
		rev[at] = '\0';
		char *k2 = listcache_key(bucket, rev);
		if (!key != !k2 || (key && strcmp(key, k2) != 0))
			fail("order changed the key", bucket, query, key);
		free(k2);
	}
	free(rev);
	free(copy);

	if (key) {
		size_t bl = strlen(bucket);
		if (strncmp(key, bucket, bl) != 0 || key[bl] != '\n')
			fail("key does not start with the bucket", bucket, query, key);
		if (!key_ok(key + bl + 1))
			fail("key holds a parameter not a listing's, twice, or unsorted", bucket,
			     query, key);
		char *again = listcache_key(bucket, key + bl + 1);
		if (!again || strcmp(again, key) != 0)
			fail("key's own query gives another key", bucket, query, key);
		free(again);
	}
	free(key);
	free(s);
	return 0;
}

/*
 * fuzz_deletexml.c - the DeleteObjects body parser (s3_delete_keys) on
 * arbitrary bytes: a client with a prefix grant sends this body, and
 * larder parses it before deciding whether to forward it.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "gateway/s3req.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Every key handed over is a string the parser built: read all of it, and
 * stop on the third so the early-stop path runs too. */
static int each(void *arg, const char *key)
{
	unsigned *n = arg;
	volatile size_t len = strlen(key);
	(void)len;
	return ++*n == 3 ? 5 : 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	unsigned n = 0;
	int rc = s3_delete_keys((const char *)data, size, each, &n);
	if (rc != 0 && rc != -1 && rc != 5)
		__builtin_trap();
	return 0;
}

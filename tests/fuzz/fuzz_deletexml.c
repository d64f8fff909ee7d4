/*
 * fuzz_deletexml.c - the request bodies larder reads before it forwards
 * them, on arbitrary bytes: DeleteObjects (s3_delete_keys; a client with a
 * prefix grant sends it) and RestoreObject (s3_restore_output; any client
 * with write access).
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "gateway/s3req.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Every key handed over is a string the parser built: read all of it, and
 * stop on the third so the early-stop path runs too. */
static int each(void *arg, const char *key, bool version)
{
	(void)version;
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
	rc = s3_restore_output((const char *)data, size);
	if (rc != 0 && rc != -1 && rc != 1)
		__builtin_trap();
	return 0;
}

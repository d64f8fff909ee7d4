/*
 * fuzz_purgemsg.c - a purge heard from another node of a cluster: the key
 * of a CLUSTER_PURGE message on larder:invalidate (gateway/purge_msg.c,
 * purge_msg_parse), "k|p BUCKET/WHAT", which anybody who can write to
 * Redis and holds the secret chooses.
 *
 * Each input is read twice. As a message: taken exactly when it starts
 * with k or p and has 1-255 bytes before its first slash, and then the
 * parts put back together are the message. As the fields of a purge
 * POST /admin/purge sends (a valid bucket name, newline, what): the
 * message it publishes is read back as that purge.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_text.h"
#include "gateway/purge_msg.h"
#include "gateway/s3req.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what)
{
	fprintf(stderr, "%s\n", what);
	abort();
}

static void as_message(const char *msg)
{
	struct purge_msg p;
	bool ok = purge_msg_parse(msg, &p);
	const char *slash = strchr(msg, '/');
	size_t bl = slash && slash > msg ? (size_t)(slash - msg - 1) : 0;
	bool want = (msg[0] == 'k' || msg[0] == 'p') && bl >= 1 && bl <= 255;
	if (ok != want)
		fail(ok ? "a malformed purge message taken"
		        : "a well-formed purge message refused");
	if (!ok)
		return;
	if (p.key != (msg[0] == 'k') || p.what != slash + 1 || strlen(p.bucket) != bl ||
	    memcmp(p.bucket, msg + 1, bl) != 0)
		fail("a purge message's parts are not the message");
}

static void as_purge(char *fields)
{
	char *part[2];
	fz_split(fields, part, 2);
	const char *bucket = part[0], *what = part[1];
	if (!s3_bucket_name_ok(bucket, strlen(bucket)) || strlen(what) > S3_MAX_KEY_BYTES)
		return;
	for (int key = 0; key < 2; key++) {
		char *msg = NULL; /* as admin.c writes it */
		if (asprintf(&msg, "%c%s/%s", key ? 'k' : 'p', bucket, what) < 0)
			return;
		struct purge_msg p;
		if (!purge_msg_parse(msg, &p))
			fail("a purge sent by POST /admin/purge refused");
		if (p.key != key || strcmp(p.bucket, bucket) != 0 || strcmp(p.what, what) != 0)
			fail("a purge sent is not the purge read");
		free(msg);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct purge_msg p;
	if (purge_msg_parse(NULL, &p))
		fail("no message taken");
	char *s = fz_cstr(data, size, 4096);
	if (!s)
		return 0;
	as_message(s);
	as_purge(s);
	free(s);
	return 0;
}

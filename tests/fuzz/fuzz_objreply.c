/*
 * fuzz_objreply.c - the answer a cached GET/HEAD builds from metadata
 * (gateway/objreply.c): the conditional headers (If-Match / If-None-Match
 * lists, If-Modified-Since / If-Unmodified-Since dates), objreply_query_ok,
 * and objreply_headers (response-* overrides decoded from the query, the
 * object's replayed header lines, learnt checksum lines, Content-Range).
 *
 * Input lines: ETAG \n IF-MATCH \n IF-NONE-MATCH \n IF-UNMODIFIED-SINCE \n
 * IF-MODIFIED-SINCE \n QUERY \n then the object's header lines (as the
 * cache keeps them, "Name: value"). A field that is a single "-" is absent.
 */
#include <stdio.h>
#include <microhttpd.h>
#include "fuzz_text.h"
#include "gateway/objreply.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The wall clock the dates are read at (RFC 850's two-digit years). */
#define ENOW ((time_t)1748736000)

static const char *opt(const char *s) { return strcmp(s, "-") == 0 ? NULL : s; }

static enum MHD_Result check_hdr(void *cls, enum MHD_ValueKind kind, const char *k, const char *v)
{
	(void)cls;
	(void)kind;
	if (strpbrk(k, "\r\n") || (v && strpbrk(v, "\r\n")))
		abort(); /* header injection into the answer */
	return MHD_YES;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = fz_cstr(data, size, 32768);
	if (!s)
		return 0;
	/* The object's header lines are everything after the sixth newline. */
	char *part[7];
	fz_split(s, part, 7);
	const char *etag = part[0][0] ? part[0] : "\"d41d8cd98f00b204e9800998ecf8427e\"";
	if (strlen(etag) >= 130)
		etag = "\"x\"";
	struct obj_meta *m = meta_new(1000, etag, 1700000000, part[6], 1.0);
	if (!m) {
		free(s);
		return 0;
	}
	int pc = objreply_preconditions(m, opt(part[1]), opt(part[2]), opt(part[3]), opt(part[4]),
	                                ENOW);
	if (pc != 0 && pc != 304 && pc != 412)
		abort();
	/* If-Match: * and If-Match: the etag itself always pass, for an ETag
	 * as S3 writes them ("..." with no quote, comma or blank inside). */
	size_t el = strlen(etag);
	bool s3like = el >= 2 && etag[0] == '"' && etag[el - 1] == '"' &&
	              strcspn(etag + 1, "\", \t") == el - 2;
	if (opt(part[1]) && (strcmp(part[1], "*") == 0 || (s3like && strcmp(part[1], etag) == 0)) &&
	    pc == 412)
		abort();
	/* If-None-Match: the etag itself (strong or W/) means 304. */
	if (s3like && opt(part[2]) && !opt(part[1]) && pc == 0 &&
	    (strcmp(part[2], etag) == 0 ||
	     (strncmp(part[2], "W/", 2) == 0 && strcmp(part[2] + 2, etag) == 0)))
		abort();
	objreply_query_ok(part[5]);
	meta_set_checksums(m, "x-amz-checksum-crc32: AAAAAA==\n");
	static const unsigned statuses[] = { 200, 206, 304 };
	for (int i = 0; i < 3; i++) {
		struct MHD_Response *r = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
		if (!r)
			break;
		struct objreply a = { .status = statuses[i], .first = 0, .last = 999, .part = 0,
		                      .checksums = true };
		objreply_headers(r, part[5], m, &a);
		MHD_get_response_headers(r, check_hdr, NULL);
		MHD_destroy_response(r);
	}
	meta_unref(m);
	free(s);
	return 0;
}

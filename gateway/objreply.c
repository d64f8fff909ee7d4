/*
 * objreply.c - what S3 answers a GET or HEAD of an object from its metadata
 * alone (see objreply.h).
 */
#include "gateway/objreply.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "base/buf.h"
#include "base/httpdate.h"
#include "gateway/range.h"
#include "gateway/req.h"
#include "gateway/s3req.h"

bool objreply_query_ok(const char *q)
{
	while (q && *q) {
		size_t len = strcspn(q, "&");
		size_t klen = strcspn(q, "=&");
		bool ok = klen == 0 || (klen > 9 && strncmp(q, "response-", 9) == 0) ||
		          (klen == 4 && strncmp(q, "x-id", 4) == 0) ||
		          (klen == 10 && strncmp(q, "partNumber", 10) == 0) ||
		          (klen > 6 && strncasecmp(q, "X-Amz-", 6) == 0) ||
		          (klen == 14 && strncmp(q, "AWSAccessKeyId", 14) == 0) ||
		          (klen == 9 && strncmp(q, "Signature", 9) == 0) ||
		          (klen == 7 && strncmp(q, "Expires", 7) == 0);
		if (!ok)
			return false;
		q += len;
		if (*q == '&')
			q++;
	}
	return true;
}

/* If-Match / If-None-Match lists: "*", or quoted ETags separated by commas.
 * If-Match compares strongly (RFC 9110 13.1.1): a weak tag never matches
 * there, as S3's ETags are strong. If-None-Match compares weakly. */
static bool etag_listed(const char *list, const char *etag, bool strong)
{
	const char *bare = etag[0] == '"' ? etag + 1 : etag;
	size_t blen = strlen(bare);
	if (blen && bare[blen - 1] == '"')
		blen--;
	for (const char *p = list; *p;) {
		while (*p == ' ' || *p == ',')
			p++;
		if (*p == '*')
			return true;
		bool weak = strncmp(p, "W/", 2) == 0;
		if (weak)
			p += 2;
		const char *q = p;
		if (*q == '"')
			q++;
		size_t n = strcspn(q, "\",");
		if (n == blen && strncmp(q, bare, n) == 0 && !(weak && strong))
			return true;
		p = q + n;
		if (*p == '"')
			p++;
	}
	return false;
}

int objreply_preconditions(const struct obj_meta *m, const char *im, const char *inm,
                           const char *if_unmodified_since, const char *if_modified_since,
                           time_t now)
{
	time_t ius = (time_t)-1, ims = (time_t)-1; /* -1: absent or not a date */
	httpdate_parse_any(if_unmodified_since, now, &ius);
	httpdate_parse_any(if_modified_since, now, &ims);
	if (im) {
		if (!etag_listed(im, m->etag, true))
			return 412;
	} else if (ius != (time_t)-1 && m->last_modified && m->last_modified > ius) {
		return 412;
	}
	if (inm) {
		if (etag_listed(inm, m->etag, false))
			return 304;
	} else if (ims != (time_t)-1 && m->last_modified && m->last_modified <= ims) {
		return 304;
	}
	return 0;
}

bool objreply_if_range(const struct obj_meta *m, const char *if_range, time_t now)
{
	if (!if_range)
		return true;
	struct slice v = slice_trim(slice_cstr(if_range));
	if (v.len && v.p[0] == '"') /* a weak tag (W/"...") never matches */
		return slice_eq(v, slice_cstr(m->etag));
	time_t t;
	return httpdate_parse_any(if_range, now, &t) == 0 && m->last_modified &&
	       t == m->last_modified;
}

/* The object's headers, replayed; response-* overrides win. A 304 (!full)
 * takes only the overrides of the headers it carries (Cache-Control,
 * Expires), never a Content-* one. */
static void add_object_headers(struct MHD_Response *resp, const char *query,
                               const struct obj_meta *m, bool full)
{
	static const struct { const char *param, *header; bool on_304; } overrides[] = {
		{ "response-content-type", "Content-Type", false },
		{ "response-content-language", "Content-Language", false },
		{ "response-expires", "Expires", true },
		{ "response-cache-control", "Cache-Control", true },
		{ "response-content-disposition", "Content-Disposition", false },
		{ "response-content-encoding", "Content-Encoding", false },
	};
	struct buf v;
	buf_init(&v, 8192);
	bool overridden[6] = { false };
	for (size_t i = 0; i < 6; i++) {
		buf_reset(&v);
		/* An empty override is no override (S3 ignores it), nor is one
		 * libmicrohttpd refuses (a line break): the object's own header
		 * stays rather than the answer losing it. */
		if ((full || overrides[i].on_304) &&
		    s3_query_get(query, overrides[i].param, &v) == 1 && v.len > 0 &&
		    MHD_add_response_header(resp, overrides[i].header, buf_cstr(&v)) == MHD_YES)
			overridden[i] = true;
	}
	buf_fini(&v);
	if (full) {
		const char *skip[6] = { NULL };
		for (size_t i = 0; i < 6; i++)
			skip[i] = overridden[i] ? overrides[i].header : NULL;
		req_add_header_lines(resp, m->headers, skip, 6, false);
	} else {
		/* A 304 carries what a cache in front needs to update its copy
		 * (RFC 9110 15.4.5: Cache-Control, Expires) and the version's
		 * identity, as S3's does; no representation headers. */
		const char *keep[] = {
			overridden[3] ? NULL : "Cache-Control", overridden[2] ? NULL : "Expires",
			"x-amz-version-id", "x-amz-server-side-encryption",
			"x-amz-server-side-encryption-aws-kms-key-id",
			"x-amz-server-side-encryption-bucket-key-enabled", "x-amz-tagging-count",
		};
		req_add_header_lines(resp, m->headers, keep, sizeof keep / sizeof keep[0], true);
		if (m->last_modified) {
			char date[HTTPDATE_SIZE];
			httpdate_format(m->last_modified, date);
			MHD_add_response_header(resp, "Last-Modified", date);
		}
	}
	MHD_add_response_header(resp, "ETag", m->etag);
}

void objreply_headers(struct MHD_Response *resp, const char *query, const struct obj_meta *m,
                      const struct objreply *a)
{
	add_object_headers(resp, query, m, a->status != 304);
	if (a->status != 304)
		MHD_add_response_header(resp, "Accept-Ranges", "bytes");
	if (a->status == 206) {
		char cr[CONTENT_RANGE_SIZE];
		content_range_format(cr, a->first, a->last, m->size);
		MHD_add_response_header(resp, "Content-Range", cr);
	}
	if ((a->status == 200 || a->status == 206) && a->checksums && !a->part && m->checksums)
		req_add_header_lines(resp, m->checksums, NULL, 0, false); /* the checksums learnt */
	if (a->part && m->parts_count) {
		char n[U64_DEC_MAX + 1];
		*u64_dec(n, m->parts_count, 1) = '\0';
		MHD_add_response_header(resp, "x-amz-mp-parts-count", n);
	}
}

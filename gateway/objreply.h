/*
 * objreply.h - what S3 answers a GET or HEAD of an object from its
 * metadata alone: which queries such an answer serves, the conditionals
 * (RFC 9110 section 13.2.2, with S3's precedence), and the response's
 * headers (the object's own, replayed; response-* overrides; Range, part
 * and checksum headers). The cached read path (cache.c) builds its answers
 * with it; nothing here looks at the bytes.
 */
#ifndef LARDER_OBJREPLY_H
#define LARDER_OBJREPLY_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "store/meta.h"

/* Whether a GET with this raw query may be answered from the cache: the
 * response overrides (they change headers, not bytes), the SDKs' x-id
 * marker, partNumber, and the parameters of a presigned URL. */
bool objreply_query_ok(const char *query);

/* 0: proceed; 304 or 412: answer that (S3's precedence, see GetObject).
 * Each header's value, or NULL when the request has none; a date in any
 * of the three HTTP-date forms (httpdate_parse_any, now: the wall clock). */
int objreply_preconditions(const struct obj_meta *m, const char *if_match,
                           const char *if_none_match, const char *if_unmodified_since,
                           const char *if_modified_since, time_t now);

/* If-Range (RFC 9110 13.1.5), NULL when absent: whether the Range may be
 * served. It holds for the object's ETag, compared strongly, or for its
 * Last-Modified exactly; any other value means the whole object (a 200),
 * as it does from S3: a client resuming a download of a version that has
 * since changed must not get the new version's bytes spliced onto its own. */
bool objreply_if_range(const struct obj_meta *m, const char *if_range, time_t now);

/* The answer being built. */
struct objreply {
	unsigned status;          /* 200, 206 or 304 */
	uint64_t first, last;     /* 206: the bytes sent */
	uint32_t part;            /* ?partNumber=N, or 0 */
	bool checksums;           /* add the learnt checksums: S3 sends them with
	                             x-amz-checksum-mode for a whole object's 200
	                             (larder's peers for chunk 0's 206 too) */
};

/* Adds the object's headers to resp (a 304: only ETag and Last-Modified),
 * query's response-* overrides first, then Accept-Ranges, Content-Range,
 * the learnt checksums of a whole object, x-amz-mp-parts-count. */
void objreply_headers(struct MHD_Response *resp, const char *query, const struct obj_meta *m,
                      const struct objreply *a);

#endif

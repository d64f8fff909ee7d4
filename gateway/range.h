/*
 * range.h - the Range header of a GET, read as S3 reads it.
 *
 *   "bytes=a-b", "bytes=a-", "bytes=-n"   one range (spaces around the
 *                                          numbers are allowed)
 *   anything else: ignored, the whole object is served with 200. That
 *   covers other units, several ranges ("bytes=0-1,4-5": S3 serves no
 *   multi-range requests), a reversed range ("bytes=9-3"), signs, and
 *   numbers that do not fit in 64 bits (RFC 9110 lets a server ignore an
 *   invalid Range; S3 does).
 * Against the object's size a valid range is then satisfiable (206 with
 * [start, end], end clamped to the last byte) or not (416 InvalidRange):
 * a first byte at or past the end, a suffix of 0 bytes, a range of an empty
 * object that names a first byte. A suffix of n > 0 bytes of an empty
 * object is the whole object, answered 200 with no bytes, as S3 answers it
 * (RFC 9110 14.1.1: such a suffix is satisfiable; 206 would need a byte).
 *
 * Also here: the Content-Range of an upstream's 206, read strictly, and the
 * Range and Content-Range headers larder writes, without printf.
 */
#ifndef LARDER_RANGE_H
#define LARDER_RANGE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/buf.h" /* U64_DEC_MAX */

struct byte_range {
	bool suffix;    /* "-n": the last b bytes */
	uint64_t a, b;  /* "a-b"; b = UINT64_MAX when open ("a-") */
};

/* 1: a single valid range in *out; 0: absent or ignored (v may be NULL). */
int range_parse(const char *v, struct byte_range *out);

enum range_fit { RANGE_PART, RANGE_UNSATISFIABLE, RANGE_WHOLE };

/* Resolves a parsed range against an object of size bytes: RANGE_PART
 * sets start <= end < size; RANGE_WHOLE (a suffix of an empty object): the
 * whole object with 200, start and end untouched. */
enum range_fit range_resolve(const struct byte_range *r, uint64_t size, uint64_t *start,
                             uint64_t *end);

/* Content-Range of a 206 as S3 sends it: "bytes first-last/size", with
 * first <= last < size, digits only (no signs, no "*"). True when v is
 * that (v may be NULL). */
bool content_range_parse(const char *v, uint64_t *first, uint64_t *last, uint64_t *size);

/* "bytes first-last/size", terminated, into out. */
#define CONTENT_RANGE_SIZE (6 + 3 * U64_DEC_MAX + 3)
void content_range_format(char out[CONTENT_RANGE_SIZE], uint64_t first, uint64_t last,
                          uint64_t size);

/* "bytes=first-last" (last = UINT64_MAX: "bytes=first-"), terminated, into
 * out: the Range header of a request. */
void range_format(char out[CONTENT_RANGE_SIZE], uint64_t first, uint64_t last);

#endif

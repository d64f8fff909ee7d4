/*
 * buf.h - length-tracked strings with a hard cap.
 *
 * Every growable buffer in larder gets its maximum size when it is set up;
 * growth past it fails with -E2BIG instead of allocating. That cap is the
 * defence against oversized headers, queries and XML bodies.
 */
#ifndef LARDER_BUF_H
#define LARDER_BUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A borrowed byte range; not NUL-terminated. */
struct slice {
	const char *p;
	size_t len;
};

#define SLICE_LIT(s) ((struct slice){ (s), sizeof(s) - 1 })
struct slice slice_cstr(const char *s);
bool slice_eq(struct slice a, struct slice b);
bool slice_eq_nocase(struct slice a, struct slice b);
/* The slice without leading and trailing ASCII white space. */
struct slice slice_trim(struct slice s);

/* An owned, NUL-terminated, growable string. Zero-initialised is not valid:
 * call buf_init() with the cap. */
struct buf {
	char *p;      /* always NUL-terminated once anything was appended */
	size_t len;
	size_t cap;   /* allocated */
	size_t max;   /* hard limit on len */
};

void buf_init(struct buf *b, size_t max);
void buf_fini(struct buf *b);
void buf_reset(struct buf *b);
/* Cuts the string back to its first len bytes (len <= b->len). */
void buf_truncate(struct buf *b, size_t len);
/* Makes room for n more bytes at once, for a string whose usual size is
 * known: one allocation instead of a doubling per append. 0, -E2BIG or
 * -ENOMEM as the appends; on failure the buffer is unchanged. */
int buf_reserve(struct buf *b, size_t n);
/* Append functions return 0, or -E2BIG when the cap would be passed
 * (the buffer is left unchanged), or -ENOMEM. */
int buf_append(struct buf *b, const void *p, size_t n);
int buf_puts(struct buf *b, const char *s);
int buf_putc(struct buf *b, char c);
int buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends v in decimal (without printf: for paths run per request). */
int buf_put_u64(struct buf *b, uint64_t v);
/* Returns the string (never NULL: "" when empty). */
const char *buf_cstr(const struct buf *b);
/* Hands the string to the caller (free() it); the buffer becomes empty.
 * NULL only when the buffer was empty and memory is short. */
char *buf_steal(struct buf *b);

/* The decimal digits of v at out, zero-padded to at least width digits
 * (width <= U64_DEC_MAX; out has room for U64_DEC_MAX); no terminator.
 * Returns the end of the digits. For paths run per request: no printf. */
#define U64_DEC_MAX 20
char *u64_dec(char *out, uint64_t v, unsigned width);

/* Copies the string s into out (n bytes, n > 0), cut to fit, terminated;
 * snprintf(out, n, "%s", s) without the format parser. */
void str_copy(char *out, size_t n, const char *s);

/* The value of a hex digit (either case), or -1. */
int hex_digit(int c);

/* Lower-case hex of n bytes into out (2n+1 bytes, NUL-terminated). */
void hex_encode(const unsigned char *in, size_t n, char *out);

/* Constant-time comparison of two equal-length byte strings; different
 * lengths compare unequal (the length itself is not secret). */
bool ct_equal(const void *a, size_t alen, const void *b, size_t blen);

#endif

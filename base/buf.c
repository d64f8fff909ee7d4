/* buf.c - capped growable strings, slices, hex, constant-time compare. */
#include "base/buf.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/alloc.h"

struct slice slice_cstr(const char *s)
{
	return (struct slice){ s, s ? strlen(s) : 0 };
}

bool slice_eq(struct slice a, struct slice b)
{
	return a.len == b.len && (a.len == 0 || memcmp(a.p, b.p, a.len) == 0);
}

bool slice_eq_nocase(struct slice a, struct slice b)
{
	return a.len == b.len && (a.len == 0 || strncasecmp(a.p, b.p, a.len) == 0);
}

struct slice slice_trim(struct slice s)
{
	static const char ws[] = " \t\r\n\v\f";
	while (s.len && strchr(ws, s.p[0]))
		s.p++, s.len--;
	while (s.len && strchr(ws, s.p[s.len - 1]))
		s.len--;
	return s;
}

int hex_digit(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

void buf_init(struct buf *b, size_t max)
{
	b->p = NULL;
	b->len = 0;
	b->cap = 0;
	b->max = max;
}

void buf_fini(struct buf *b)
{
	free(b->p);
	b->p = NULL;
	b->len = b->cap = 0;
}

void buf_reset(struct buf *b)
{
	b->len = 0;
	if (b->p)
		b->p[0] = '\0';
}

void buf_truncate(struct buf *b, size_t len)
{
	if (len < b->len) {
		b->len = len;
		b->p[len] = '\0';
	}
}

/* Makes room for n more bytes plus the NUL. */
static int reserve(struct buf *b, size_t n)
{
	if (n > b->max || b->len > b->max - n)
		return -E2BIG;
	size_t need = b->len + n + 1;
	if (need <= b->cap)
		return 0;
	size_t cap = b->cap ? b->cap : 64;
	while (cap < need)
		cap *= 2;
	char *p = mem_realloc(b->p, cap);
	if (!p)
		return -ENOMEM;
	b->p = p;
	b->cap = cap;
	return 0;
}

int buf_reserve(struct buf *b, size_t n)
{
	return reserve(b, n);
}

int buf_append(struct buf *b, const void *p, size_t n)
{
	int rc = reserve(b, n);
	if (rc)
		return rc;
	if (n)
		memcpy(b->p + b->len, p, n);
	b->len += n;
	b->p[b->len] = '\0';
	return 0;
}

int buf_puts(struct buf *b, const char *s)
{
	return buf_append(b, s, strlen(s));
}

int buf_putc(struct buf *b, char c)
{
	return buf_append(b, &c, 1);
}

char *u64_dec(char *out, uint64_t v, unsigned width)
{
	unsigned n = 1;
	for (uint64_t x = v; x >= 10; x /= 10)
		n++;
	if (n < width)
		n = width;
	for (unsigned i = n; i > 0; i--, v /= 10)
		out[i - 1] = (char)('0' + v % 10);
	return out + n;
}

int buf_put_u64(struct buf *b, uint64_t v)
{
	char d[U64_DEC_MAX];
	return buf_append(b, d, (size_t)(u64_dec(d, v, 1) - d));
}

void str_copy(char *out, size_t n, const char *s)
{
	size_t len = strnlen(s, n - 1);
	memcpy(out, s, len);
	out[len] = '\0';
}

int buf_printf(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0)
		return -EINVAL;
	int rc = reserve(b, (size_t)n);
	if (rc)
		return rc;
	va_start(ap, fmt);
	vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
	return 0;
}

const char *buf_cstr(const struct buf *b)
{
	return b->p ? b->p : "";
}

char *buf_steal(struct buf *b)
{
	char *p = b->p ? b->p : mem_strdup("");
	b->p = NULL;
	b->len = b->cap = 0;
	return p;
}

void hex_encode(const unsigned char *in, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[in[i] >> 4];
		out[2 * i + 1] = digits[in[i] & 15];
	}
	out[2 * n] = '\0';
}

bool ct_equal(const void *a, size_t alen, const void *b, size_t blen)
{
	if (alen != blen)
		return false;
	const volatile unsigned char *x = a, *y = b;
	unsigned char d = 0;
	for (size_t i = 0; i < alen; i++)
		d |= x[i] ^ y[i];
	return d == 0;
}

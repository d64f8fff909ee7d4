/*
 * range.c - the Range header (see range.h). Digits are read by hand:
 * strtoull would accept a sign ("0--5" as 0 to 2^64 - 5) and leading
 * blanks where S3 accepts neither. The same holds for an upstream's
 * Content-Range, which sscanf's %llu would read "-1" in as 2^64 - 1.
 */
#include "gateway/range.h"

#include <stddef.h>
#include <string.h>
#include <strings.h>

static const char *skip_spaces(const char *p)
{
	while (*p == ' ' || *p == '\t')
		p++;
	return p;
}

/* Decimal digits at *p: false when there are none or they overflow. */
static bool read_number(const char **p, uint64_t *out)
{
	const char *s = *p;
	uint64_t v = 0;
	if (*s < '0' || *s > '9')
		return false;
	for (; *s >= '0' && *s <= '9'; s++) {
		unsigned d = (unsigned)(*s - '0');
		if (v > (UINT64_MAX - d) / 10)
			return false;
		v = v * 10 + d;
	}
	*p = s;
	*out = v;
	return true;
}

int range_parse(const char *v, struct byte_range *out)
{
	if (!v)
		return 0;
	v = skip_spaces(v);
	if (strncasecmp(v, "bytes=", 6) != 0)
		return 0;
	const char *p = skip_spaces(v + 6);
	struct byte_range r = { .suffix = false, .a = 0, .b = UINT64_MAX };
	if (*p == '-') {
		p = skip_spaces(p + 1);
		if (!read_number(&p, &r.b))
			return 0;
		r.suffix = true;
	} else {
		if (!read_number(&p, &r.a))
			return 0;
		p = skip_spaces(p);
		if (*p != '-')
			return 0;
		p = skip_spaces(p + 1);
		if (*p && !read_number(&p, &r.b))
			return 0;
		if (r.b < r.a)
			return 0;
	}
	if (*skip_spaces(p) != '\0')
		return 0; /* a second range, or trailing bytes */
	*out = r;
	return 1;
}

enum range_fit range_resolve(const struct byte_range *r, uint64_t size, uint64_t *start,
                             uint64_t *end)
{
	if (r->suffix && r->b == 0)
		return RANGE_UNSATISFIABLE;
	if (size == 0) /* a tail read of an empty object: S3's 200, no bytes */
		return r->suffix ? RANGE_WHOLE : RANGE_UNSATISFIABLE;
	if (r->suffix) {
		*start = r->b >= size ? 0 : size - r->b;
		*end = size - 1;
		return RANGE_PART;
	}
	if (r->a >= size)
		return RANGE_UNSATISFIABLE;
	*start = r->a;
	*end = r->b < size ? r->b : size - 1;
	return RANGE_PART;
}

bool content_range_parse(const char *v, uint64_t *first, uint64_t *last, uint64_t *size)
{
	if (!v)
		return false;
	const char *p = skip_spaces(v);
	uint64_t a, b, n;
	if (strncasecmp(p, "bytes ", 6) != 0)
		return false;
	p += 6;
	if (!read_number(&p, &a) || *p++ != '-' || !read_number(&p, &b) || *p++ != '/' ||
	    !read_number(&p, &n) || *skip_spaces(p) != '\0' || a > b || b >= n)
		return false;
	*first = a;
	*last = b;
	*size = n;
	return true;
}

void content_range_format(char out[CONTENT_RANGE_SIZE], uint64_t first, uint64_t last,
                          uint64_t size)
{
	memcpy(out, "bytes ", 6);
	char *p = u64_dec(out + 6, first, 1);
	*p++ = '-';
	p = u64_dec(p, last, 1);
	*p++ = '/';
	p = u64_dec(p, size, 1);
	*p = '\0';
}

void range_format(char out[CONTENT_RANGE_SIZE], uint64_t first, uint64_t last)
{
	memcpy(out, "bytes=", 6);
	char *p = u64_dec(out + 6, first, 1);
	*p++ = '-';
	if (last != UINT64_MAX)
		p = u64_dec(p, last, 1);
	*p = '\0';
}

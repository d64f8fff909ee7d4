/* fuzz_text.h - the input as text, and split into lines, for the fuzz targets. */
#ifndef LARDER_FUZZ_TEXT_H
#define LARDER_FUZZ_TEXT_H
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A NUL-terminated copy of the input; NULL when it is longer than max (the
 * target's inputs stay small) or out of memory. */
static inline char *fz_cstr(const uint8_t *d, size_t n, size_t max)
{
	char *s = n <= max ? malloc(n + 1) : NULL;
	if (s) {
		memcpy(s, d, n);
		s[n] = '\0';
	}
	return s;
}

/* Splits s in place at its first max-1 newlines; returns the count of parts
 * (missing parts are set to ""). */
static inline int fz_split(char *s, char **part, int max)
{
	int n = 0;
	for (int i = 0; i < max; i++)
		part[i] = "";
	char *p = s;
	while (p && n < max) {
		part[n++] = p;
		if (n == max)
			break;
		p = strchr(p, '\n');
		if (p)
			*p++ = '\0';
	}
	return n;
}
#endif

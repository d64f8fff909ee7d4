/*
 * fnv.h - FNV-1a, 64-bit (Fowler, Noll, Vo), over a C string.
 */
#ifndef LARDER_FNV_H
#define LARDER_FNV_H

#include <stdint.h>

#define FNV1A64_OFFSET UINT64_C(0xcbf29ce484222325)
#define FNV1A64_PRIME UINT64_C(0x100000001b3)

static inline uint64_t fnv1a64(const char *s)
{
	uint64_t h = FNV1A64_OFFSET;
	for (const unsigned char *p = (const unsigned char *)s; *p; p++)
		h = (h ^ *p) * FNV1A64_PRIME;
	return h;
}

#endif

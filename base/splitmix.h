/*
 * splitmix.h - splitmix64 (Steele, Lea, Flood 2014): its output function as
 * a 64-bit mixer, and the generator built on it, which gives the same
 * sequence for a seed on every platform.
 */
#ifndef LARDER_SPLITMIX_H
#define LARDER_SPLITMIX_H

#include <stdint.h>

#define SPLITMIX_GAMMA UINT64_C(0x9e3779b97f4a7c15)

static inline uint64_t splitmix_mix(uint64_t x)
{
	x ^= x >> 30;
	x *= UINT64_C(0xbf58476d1ce4e5b9);
	x ^= x >> 27;
	x *= UINT64_C(0x94d049bb133111eb);
	x ^= x >> 31;
	return x;
}

/* The next value of the generator whose state is *s. */
static inline uint64_t splitmix_next(uint64_t *s)
{
	return splitmix_mix(*s += SPLITMIX_GAMMA);
}

#endif

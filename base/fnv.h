/*
 * fnv.h - FNV-1a, 64-bit (Fowler, Noll, Vo): a fast, non-cryptographic hash
 * for in-memory tables (slots, shards) and rendezvous placement.
 *
 * Values are part of behaviour where they leave one process: rdv_node_hash
 * (cluster/rendezvous.c) must give every node the same placement, so the
 * offset basis and prime below never change.
 */
#ifndef LARDER_FNV_H
#define LARDER_FNV_H

#include <stddef.h>
#include <stdint.h>

#define FNV1A64_OFFSET UINT64_C(0xcbf29ce484222325)
#define FNV1A64_PRIME UINT64_C(0x100000001b3)

/* Continues hash h over n bytes: start with FNV1A64_OFFSET, pass the
 * result back in for the next piece. */
static inline uint64_t fnv1a64_add(uint64_t h, const void *p, size_t n)
{
	const unsigned char *b = p;
	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * FNV1A64_PRIME;
	return h;
}

/* The hash of a C string (its bytes, not the NUL). */
static inline uint64_t fnv1a64(const char *s)
{
	uint64_t h = FNV1A64_OFFSET;
	for (const unsigned char *p = (const unsigned char *)s; *p; p++)
		h = (h ^ *p) * FNV1A64_PRIME;
	return h;
}

#endif

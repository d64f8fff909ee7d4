/*
 * idmap.h - a map from chunk id to struct chunk *, keyed by the id inside
 * the chunk itself: open addressing with linear probing and backward-shift
 * deletion, so no tombstones pile up. Not thread-safe: its owner locks it.
 * Private to store/.
 */
#ifndef LARDER_IDMAP_H
#define LARDER_IDMAP_H

#include <stddef.h>

#include "store/chunk.h"

/* Zeroed: an empty map. Free with free(m->slot) once its chunks are gone. */
struct idmap {
	struct chunk **slot;
	size_t cap;     /* a power of two, or 0 */
	size_t n;
};

/* The chunk mapped to id, or NULL. */
struct chunk *idmap_get(const struct idmap *m, const struct chunk_id *id);

/* Adds c (its id must be absent). Keeps the load at or under 1/2; if
 * growing fails it carries on up to 7/8 before giving up with -ENOMEM. */
int idmap_put(struct idmap *m, struct chunk *c);

/* Removes and returns the chunk mapped to id, or NULL. */
struct chunk *idmap_del(struct idmap *m, const struct chunk_id *id);

#endif

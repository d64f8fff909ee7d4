/*
 * pinset.h - a set of pinned chunk ids with their lengths, each counted
 * up per pin, under a byte cap: what a tier (ram.c, disk.c) keeps to know
 * which of its chunks eviction must skip. Not locked: the tier's lock
 * guards it.
 */
#ifndef LARDER_PINSET_H
#define LARDER_PINSET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/chunk.h"

struct pin_node;

struct pinset {
	struct pin_node **b;        /* chained hash; n_buckets a power of two */
	size_t n_buckets, n;
	uint64_t limit;             /* bytes of pinned ids allowed */
	uint64_t held;              /* bytes of pinned ids */
};

/* Pins id once more. Returns 1 when id is newly pinned, 0 when it was
 * already (its count goes up: never refused), -ENOSPC when its len would
 * take held past limit, or -ENOMEM. */
int pinset_add(struct pinset *p, const struct chunk_id *id, uint64_t len);

/* Takes one pin off id; true when that was its last (it is unpinned).
 * An id not pinned: false. */
bool pinset_remove(struct pinset *p, const struct chunk_id *id);

bool pinset_has(const struct pinset *p, const struct chunk_id *id);

void pinset_free(struct pinset *p);

#endif

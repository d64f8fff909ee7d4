/*
 * tier.h - what a cache tier offers the store (store.c): the RAM tier
 * (ram.c) and the NVMe tier (disk.c) both sit behind these operations, so
 * the store asks "do you hold it", "keep this", "forget that" and "how full
 * are you" the same way of each.
 *
 * What only one tier can do stays in its own header: the RAM tier hands out
 * the chunk it holds (a hit costs no copy) and reserves room for chunks
 * being produced (ram.h); the NVMe tier reads bytes back, orders entries in
 * time and keeps tombstones (disk.h).
 *
 * Deferred release. The store calls some operations with its own locks held
 * (an in-flight shard's). A tier that evicts chunk objects then must not
 * drop its references there (the last one frees the bytes): it links them
 * on *gone instead, and the caller runs tier_release(gone) once unlocked.
 * The list is intrusive: nothing is allocated for it. A tier that holds no
 * chunk objects (NVMe) never adds to it, and accepts gone == NULL.
 */
#ifndef LARDER_TIER_H
#define LARDER_TIER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/chunk.h"
#include "store/store.h"

/* One evicted chunk awaiting release; embedded in the tier's entry. */
struct tier_gone {
	struct tier_gone *next;
	void (*release)(struct tier_gone *g); /* drops the tier's reference, frees the entry */
};

static inline void tier_release(struct tier_gone *g)
{
	while (g) {
		struct tier_gone *next = g->next;
		g->release(g);
		g = next;
	}
}

struct tier_stats {
	uint64_t used;        /* bytes, reservations included */
	uint64_t reserved;    /* bytes promised to chunks being produced (RAM) */
	uint64_t capacity;
	uint64_t entries;
	uint64_t evictions;   /* for room, and (RAM) drops */
	uint64_t overcommits; /* reservations that pushed used past capacity (RAM) */
	uint64_t corrupt;     /* entries that failed their checksum (NVMe) */
	uint64_t pinned;      /* bytes of pinned chunks held */
	uint64_t pin_held;    /* bytes of pinned ids, held or still to come */
	uint64_t pin_limit;   /* the most pin_held may reach */
};

struct tier_ops {
	/* Whether the tier holds id complete, with its length in *len (len may
	 * be NULL). A snapshot; not an access for the policy. */
	bool (*holds)(void *t, const struct chunk_id *id, size_t *len);
	/*
	 * Offers c, READY with c->len bytes: the tier keeps it when its
	 * admission policy does, evicting others (onto *gone) for room. o names
	 * it (the NVMe tier persists it). RAM: c's reservation (ram_reserve)
	 * ends here. NVMe: blocks on file I/O, so only I/O threads call it.
	 * Returns 0 (kept or declined) or negative errno (the tier failed).
	 */
	int (*admit)(void *t, struct chunk *c, const struct chunk_origin *o, struct tier_gone **gone);
	/* Forgets id (readers holding its bytes keep them). */
	void (*drop)(void *t, const struct chunk_id *id, struct tier_gone **gone);
	void (*get_stats)(void *t, struct tier_stats *out);
	/* cb(arg, id) for every chunk evicted from now on, called with the
	 * tier's lock held: it must only note the id. */
	void (*on_evict)(void *t, store_change_cb cb, void *arg);
	void (*close)(void *t);
};

/* A tier: its operations and its state. ops NULL: no such tier. */
struct tier {
	const struct tier_ops *ops;
	void *t;
};

static inline bool tier_holds(const struct tier *t, const struct chunk_id *id, size_t *len)
{
	return t->ops->holds(t->t, id, len);
}

static inline int tier_admit(const struct tier *t, struct chunk *c, const struct chunk_origin *o,
                             struct tier_gone **gone)
{
	return t->ops->admit(t->t, c, o, gone);
}

static inline void tier_drop(const struct tier *t, const struct chunk_id *id, struct tier_gone **gone)
{
	t->ops->drop(t->t, id, gone);
}

static inline void tier_get_stats(const struct tier *t, struct tier_stats *out)
{
	t->ops->get_stats(t->t, out);
}

static inline void tier_on_evict(const struct tier *t, store_change_cb cb, void *arg)
{
	t->ops->on_evict(t->t, cb, arg);
}

static inline void tier_close(struct tier *t)
{
	if (t->ops)
		t->ops->close(t->t);
	t->ops = NULL;
	t->t = NULL;
}

#endif

/*
 * ram.c - the RAM tier (see ram.h): an id -> chunk map and the policy,
 * under one lock.
 */
#include "store/ram.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "store/idmap.h"
#include "store/pinset.h"

#define container_of(p, type, member) ((type *)(void *)((char *)(p) - offsetof(type, member)))

struct ram_entry {
	struct policy_entry pe;     /* in the policy unless pinned */
	struct policy_entry ce;     /* in its charge's policy unless pinned or charge 0 */
	struct chunk *c;
	struct tier_gone gone;      /* on a release list after eviction */
	unsigned charge;            /* who its bytes count against (ram.h); 0: nobody */
	bool copy;                  /* a cluster node's copy of another node's chunk */
	bool pinned;                /* held outside the policy: never a victim */
};

/* One charge's chunks (ram.h), ranked among themselves. */
struct ram_charge {
	struct policy *policy;      /* NULL until first used */
	uint64_t max;               /* 0: no limit */
};

struct ram_tier {
	pthread_mutex_t lock;       /* guards everything below */
	struct idmap map;
	struct policy *policy;
	uint64_t capacity;
	uint64_t filling;           /* reserved by chunks being produced */
	uint64_t evictions, overcommits;
	struct pinset pins;         /* pinned ids, whether or not their chunks are here yet */
	uint64_t pinned;            /* bytes of pinned chunks here (outside the policy) */
	store_change_cb evicted;
	void *evicted_arg;
	enum policy_kind kind;      /* for the charges' policies */
	double stale_after_s;
	struct ram_charge *charges; /* n_charges, indexed by charge */
	unsigned n_charges;
};

/* What a chunk counts against the capacity while it is filled and once it
 * is held unpinned: its bytes and the memory that keeps it
 * (RAM_ENTRY_COST), so that many tiny objects are bounded by the capacity
 * as their bytes are. Pinned chunks count their bytes only: the pin limit
 * bounds them, in bytes; so do a key's (max_resident_bytes). */
static uint64_t cost(const struct chunk *c)
{
	return c->len + RAM_ENTRY_COST;
}

static void entry_release(struct tier_gone *g)
{
	struct ram_entry *e = container_of(g, struct ram_entry, gone);
	chunk_unref(e->c);
	free(e);
}

/* Lock held. The charge's state, made on first use; NULL for charge 0,
 * one out of range, or out of memory (the chunk is then charged to nobody). */
static struct ram_charge *charge_get(struct ram_tier *r, unsigned charge)
{
	if (charge == 0 || charge > RAM_CHARGE_MAX)
		return NULL;
	if (charge >= r->n_charges) {
		unsigned n = charge + 16 > RAM_CHARGE_MAX + 1 ? RAM_CHARGE_MAX + 1 : charge + 16;
		struct ram_charge *a = realloc(r->charges, n * sizeof *a);
		if (!a)
			return NULL;
		memset(a + r->n_charges, 0, (n - r->n_charges) * sizeof *a);
		r->charges = a;
		r->n_charges = n;
	}
	struct ram_charge *ch = &r->charges[charge];
	if (!ch->policy)
		ch->policy = policy_create(r->kind, UINT64_MAX, r->stale_after_s);
	return ch->policy ? ch : NULL;
}

/* Lock held. Takes e out of its charge's policy (a pinned one is in none). */
static void charge_remove(struct ram_tier *r, struct ram_entry *e)
{
	if (e->charge && !e->pinned)
		policy_remove(r->charges[e->charge].policy, &e->ce);
}

static void evict(struct ram_tier *r, struct ram_entry *e, struct tier_gone **gone);

/* Lock held. Evicts ch's lowest-ranked chunks until extra more bytes of
 * it fit its limit. */
static void charge_trim(struct ram_tier *r, struct ram_charge *ch, uint64_t extra, double now,
                        struct tier_gone **gone)
{
	struct policy_entry *v;
	while (ch->max && policy_used(ch->policy) + extra > ch->max &&
	       (v = policy_victim(ch->policy, now)))
		evict(r, container_of(v, struct ram_entry, ce), gone);
}

/* Lock held. */
static void evict(struct ram_tier *r, struct ram_entry *e, struct tier_gone **gone)
{
	if (r->evicted)
		r->evicted(r->evicted_arg, &e->c->id);
	idmap_del(&r->map, &e->c->id);
	charge_remove(r, e);
	if (e->pinned)
		r->pinned -= e->c->len;
	else
		policy_remove(r->policy, &e->pe);
	e->c->tier_priv = NULL;
	e->gone.release = entry_release;
	e->gone.next = *gone;
	*gone = &e->gone;
	r->evictions++;
}

/* Lock held. Bytes not the policy's to give: chunks being filled, and
 * pinned chunks. */
static uint64_t outside_policy(const struct ram_tier *r)
{
	return r->filling + r->pinned;
}

/* Lock held. Evicts until READY + filling + extra fits, or nothing
 * evictable is left. */
static bool make_room(struct ram_tier *r, uint64_t extra, double now, struct tier_gone **gone)
{
	struct policy_entry *v;
	while (policy_used(r->policy) + outside_policy(r) + extra > r->capacity &&
	       (v = policy_victim(r->policy, now)))
		evict(r, container_of(v, struct ram_entry, pe), gone);
	return policy_used(r->policy) + outside_policy(r) + extra <= r->capacity;
}

/* ---- pinned ids ---- */

/* Lock held. Takes e out of the policy, or puts it back. */
static void entry_pin(struct ram_tier *r, struct ram_entry *e, bool on, double now)
{
	if (e->pinned == on)
		return;
	if (on) {
		charge_remove(r, e);
		policy_remove(r->policy, &e->pe);
		r->pinned += e->c->len;
	} else {
		r->pinned -= e->c->len;
		uint64_t rank = policy_rank(chunk_id_hash(&e->c->id), e->copy);
		policy_insert(r->policy, &e->pe, rank, cost(e->c), now);
		if (e->charge)
			policy_insert(r->charges[e->charge].policy, &e->ce, rank, e->c->len, now);
	}
	e->pinned = on;
}

void ram_pin_limit(struct ram_tier *r, uint64_t bytes)
{
	pthread_mutex_lock(&r->lock);
	r->pins.limit = bytes;
	pthread_mutex_unlock(&r->lock);
}

int ram_pin(struct ram_tier *r, const struct chunk_id *id, uint64_t len)
{
	pthread_mutex_lock(&r->lock);
	int rc = pinset_add(&r->pins, id, len);
	struct chunk *c = rc == 1 ? idmap_get(&r->map, id) : NULL;
	if (c)
		entry_pin(r, c->tier_priv, true, 0);
	pthread_mutex_unlock(&r->lock);
	return rc < 0 ? rc : 0;
}

void ram_unpin(struct ram_tier *r, const struct chunk_id *id)
{
	pthread_mutex_lock(&r->lock);
	struct chunk *c = pinset_remove(&r->pins, id) ? idmap_get(&r->map, id) : NULL;
	if (c)
		entry_pin(r, c->tier_priv, false, clock_mono_s());
	pthread_mutex_unlock(&r->lock);
}

bool ram_pinned(struct ram_tier *r, const struct chunk_id *id)
{
	pthread_mutex_lock(&r->lock);
	bool on = pinset_has(&r->pins, id);
	pthread_mutex_unlock(&r->lock);
	return on;
}

struct ram_tier *ram_open(uint64_t capacity, enum policy_kind policy, double stale_after_s)
{
	struct ram_tier *r = calloc(1, sizeof *r);
	if (!r)
		return NULL;
	r->policy = policy_create(policy, capacity, stale_after_s);
	if (!r->policy) {
		free(r);
		return NULL;
	}
	r->capacity = capacity;
	r->kind = policy;
	r->stale_after_s = stale_after_s;
	pthread_mutex_init(&r->lock, NULL);
	return r;
}

int ram_charge_limit(struct ram_tier *r, unsigned charge, uint64_t max, double now,
                     struct tier_gone **gone)
{
	if (charge == 0 || charge > RAM_CHARGE_MAX)
		return -EINVAL;
	pthread_mutex_lock(&r->lock);
	struct ram_charge *ch = charge_get(r, charge);
	if (ch) {
		ch->max = max;
		policy_set_capacity(ch->policy, max ? max : UINT64_MAX);
		charge_trim(r, ch, 0, now, gone);
	}
	pthread_mutex_unlock(&r->lock);
	return ch ? 0 : -ENOMEM;
}

uint64_t ram_charged(struct ram_tier *r, unsigned charge)
{
	pthread_mutex_lock(&r->lock);
	uint64_t n = charge && charge < r->n_charges && r->charges[charge].policy
	                     ? policy_used(r->charges[charge].policy)
	                     : 0;
	pthread_mutex_unlock(&r->lock);
	return n;
}

struct chunk *ram_lookup(struct ram_tier *r, const struct chunk_id *id, size_t len, double now,
                         struct tier_gone **gone)
{
	pthread_mutex_lock(&r->lock);
	struct chunk *c = idmap_get(&r->map, id);
	if (c && c->len != len) {
		evict(r, c->tier_priv, gone);
		c = NULL;
	} else if (c) {
		struct ram_entry *e = c->tier_priv;
		if (!e->pinned)
			policy_touch(r->policy, &e->pe, now);
		if (!e->pinned && e->charge)
			policy_touch(r->charges[e->charge].policy, &e->ce, now);
		chunk_ref(c);
		atomic_fetch_add_explicit(&c->hits, 1, memory_order_relaxed);
	}
	pthread_mutex_unlock(&r->lock);
	return c;
}

void ram_reserve(struct ram_tier *r, uint64_t len, double now, struct tier_gone **gone)
{
	pthread_mutex_lock(&r->lock);
	r->filling += len + RAM_ENTRY_COST;
	if (!make_room(r, 0, now, gone))
		r->overcommits++;
	pthread_mutex_unlock(&r->lock);
}

void ram_unreserve(struct ram_tier *r, uint64_t len)
{
	pthread_mutex_lock(&r->lock);
	r->filling -= len + RAM_ENTRY_COST;
	pthread_mutex_unlock(&r->lock);
}

/* ---- the tier interface ---- */

static bool ram_holds(void *t, const struct chunk_id *id, size_t *len)
{
	struct ram_tier *r = t;
	pthread_mutex_lock(&r->lock);
	struct chunk *c = idmap_get(&r->map, id);
	if (c && len)
		*len = c->len;
	pthread_mutex_unlock(&r->lock);
	return c != NULL;
}

static int ram_admit(void *t, struct chunk *c, const struct chunk_origin *o, struct tier_gone **gone)
{
	struct ram_tier *r = t;
	double now = clock_mono_s();
	uint64_t rank = policy_rank(chunk_id_hash(&c->id), o && o->copy);

	pthread_mutex_lock(&r->lock);
	r->filling -= cost(c);
	/* A pinned chunk is always kept (the pin limit bounds them), and
	 * evicts whatever the policy ranks lowest. */
	bool pinned = pinset_has(&r->pins, &c->id);
	struct ram_charge *ch = pinned || !o ? NULL : charge_get(r, o->charge);
	uint64_t counts = pinned ? c->len : cost(c);
	if (idmap_get(&r->map, &c->id) ||
	    (!pinned && !policy_admit_reserved(r->policy, rank, counts, outside_policy(r), now)) ||
	    (ch && ch->max && !policy_admit(ch->policy, rank, c->len, now)))
		goto out;
	struct ram_entry *e = calloc(1, sizeof *e);
	if (!e)
		goto out; /* not caching it is always allowed */
	/* Admission said every entry that goes ranks below c: its charge's
	 * own first, then the tier's. */
	if (ch)
		charge_trim(r, ch, c->len, now, gone);
	make_room(r, counts, now, gone);
	e->c = c;
	if (idmap_put(&r->map, c) < 0) {
		free(e);
		goto out;
	}
	chunk_ref(c);
	c->tier_priv = e;
	e->copy = o && o->copy;
	if (pinned) {
		e->pinned = true;
		r->pinned += c->len;
	} else {
		policy_insert(r->policy, &e->pe, rank, counts, now);
		if (ch) {
			e->charge = o->charge;
			policy_insert(ch->policy, &e->ce, rank, c->len, now);
		}
	}
out:
	pthread_mutex_unlock(&r->lock);
	return 0;
}

static void ram_drop(void *t, const struct chunk_id *id, struct tier_gone **gone)
{
	struct ram_tier *r = t;
	pthread_mutex_lock(&r->lock);
	struct chunk *c = idmap_get(&r->map, id);
	if (c)
		evict(r, c->tier_priv, gone);
	pthread_mutex_unlock(&r->lock);
}

static void ram_get_stats(void *t, struct tier_stats *out)
{
	struct ram_tier *r = t;
	pthread_mutex_lock(&r->lock);
	*out = (struct tier_stats){
		.used = policy_used(r->policy) + outside_policy(r),
		.reserved = r->filling,
		.capacity = r->capacity,
		.entries = r->map.n,
		.pinned = r->pinned,
		.pin_held = r->pins.held,
		.pin_limit = r->pins.limit,
		.evictions = r->evictions,
		.overcommits = r->overcommits,
	};
	pthread_mutex_unlock(&r->lock);
}

static void ram_on_evict(void *t, store_change_cb cb, void *arg)
{
	struct ram_tier *r = t;
	pthread_mutex_lock(&r->lock);
	r->evicted = cb;
	r->evicted_arg = arg;
	pthread_mutex_unlock(&r->lock);
}

static void ram_close(void *t)
{
	struct ram_tier *r = t;
	if (!r)
		return;
	for (size_t k = 0; k < r->map.cap; k++) {
		struct chunk *c = r->map.slot[k];
		if (!c)
			continue;
		free(c->tier_priv);
		c->tier_priv = NULL;
		chunk_unref(c);
	}
	free(r->map.slot);
	pinset_free(&r->pins);
	for (unsigned i = 0; i < r->n_charges; i++)
		policy_destroy(r->charges[i].policy);
	free(r->charges);
	policy_destroy(r->policy);
	pthread_mutex_destroy(&r->lock);
	free(r);
}

const struct tier_ops ram_tier_ops = {
	.holds = ram_holds,
	.admit = ram_admit,
	.drop = ram_drop,
	.get_stats = ram_get_stats,
	.on_evict = ram_on_evict,
	.close = ram_close,
};

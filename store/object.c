/*
 * object.c - reading an object through the store (see object.h).
 *
 * The want count lives in the chunk (struct chunk.wants): a reader's
 * reference says the bytes must stay valid, a want says the chunk is still
 * worth producing. They differ: the in-flight table, the RAM tier, the
 * producer and a zero-copy response hold references without wanting.
 */
#include "store/object.h"

#include <assert.h>
#include <math.h>
#include <stdatomic.h>

/* ---- geometry ----------------------------------------------------------- */

uint64_t obj_chunk_count(uint64_t size, uint64_t chunk_bytes)
{
	assert(chunk_bytes > 0);
	return size / chunk_bytes + (size % chunk_bytes != 0);
}

uint64_t obj_chunk_index(uint64_t pos, uint64_t chunk_bytes)
{
	assert(chunk_bytes > 0);
	return pos / chunk_bytes;
}

uint64_t obj_chunk_offset(uint64_t i, uint64_t chunk_bytes)
{
	return i * chunk_bytes;
}

size_t obj_chunk_len(uint64_t size, uint64_t i, uint64_t chunk_bytes)
{
	if (i >= obj_chunk_count(size, chunk_bytes))
		return 0;
	uint64_t left = size - i * chunk_bytes;
	return (size_t)(left < chunk_bytes ? left : chunk_bytes);
}

bool obj_chunk_span(uint64_t size, uint64_t chunk_bytes, uint64_t a, uint64_t b,
                    uint64_t *first, uint64_t *last)
{
	if (a > b || b >= size)
		return false;
	*first = obj_chunk_index(a, chunk_bytes);
	*last = obj_chunk_index(b, chunk_bytes);
	return true;
}

/* ---- the layer ---------------------------------------------------------- */

void objects_init(struct objects *o, struct store *s, struct meta_cache *mc,
                  uint64_t chunk_bytes, long metadata_ttl_s, unsigned negative_ttl_s)
{
	o->store = s;
	o->meta = mc;
	o->chunk_bytes = chunk_bytes;
	o->ttl_s = metadata_ttl_s < 0 ? -1.0 : (double)metadata_ttl_s;
	o->negative_ttl_s = (double)negative_ttl_s;
}

void obj_chunk_id(const struct obj_ref *ref, uint64_t i, struct chunk_id *out)
{
	chunk_id_make(ref->bucket, ref->key, ref->meta->etag, i, out);
}

/* ---- acquire or produce ------------------------------------------------- */

struct chunk *obj_acquire(const struct objects *o, const struct obj_ref *ref, uint64_t i,
                          unsigned charge, obj_produce_fn produce, void *arg,
                          enum store_role *role)
{
	size_t len = obj_chunk_len(ref->meta->size, i, o->chunk_bytes);
	if (len == 0)
		return NULL;
	struct chunk_id id;
	obj_chunk_id(ref, i, &id);
	enum store_role r;
	struct chunk *c = store_acquire_charged(o->store, &id, len, charge, &r);
	if (!c)
		return NULL;
	/* Counted before the producer runs: it may ask obj_wanted at once. */
	atomic_fetch_add(&c->wants, 1);
	if (r == STORE_PRODUCE) {
		int rc = produce(arg, c, i);
		if (rc < 0)
			store_complete(o->store, c, false, rc, NULL);
	}
	if (role)
		*role = r;
	return c;
}

/* ---- who wants a chunk -------------------------------------------------- */

void obj_want(struct chunk *c)
{
	chunk_ref(c);
	atomic_fetch_add(&c->wants, 1);
}

void obj_unwant(struct chunk *c, bool gave_up)
{
	/* Before the count drops: a producer that sees no want left also sees
	 * why the last one went. */
	atomic_store(&c->abandoned, gave_up);
	int before = atomic_fetch_sub(&c->wants, 1);
	assert(before > 0);
	(void)before;
	chunk_unref(c);
}

bool obj_wanted(const struct chunk *c)
{
	return atomic_load(&c->wants) > 0 || !atomic_load(&c->abandoned);
}

int obj_wants(const struct chunk *c)
{
	return atomic_load(&c->wants);
}

/* ---- metadata ----------------------------------------------------------- */

enum obj_meta_step obj_meta_step(const struct objects *o, const char *bucket, const char *key,
                                 struct obj_meta_ask *a, obj_load_fn load, void *arg, double now,
                                 struct obj_meta **out, long *status)
{
	*out = NULL;
	/* The load it waited for gave up on an upstream failure: so does this
	 * reader, at once, instead of starting its own into the same storm (10
	 * readers made 40 GETs, the last one waited 10 s). Asked before the
	 * lookup, which would make it the next loader. */
	if (a->share_failures && a->wait_since &&
	    meta_load_failed(o->meta, bucket, key, a->wait_since, status))
		return OBJ_META_FAILED;
	/* Another's load that asks a node (marked before it asks, so before any
	 * request it caused arrives), which this request may not wait for. */
	if (a->hop && !a->loaded && !obj_may_wait(a->hop, meta_loading_ask_hop(o->meta, bucket, key)))
		return OBJ_META_CYCLE;
	struct obj_meta *m = NULL;
	bool recheck = a->recheck && !a->loaded && !a->wait_since;
	double ttl = recheck ? 0 : o->ttl_s, negative_ttl = recheck ? 0 : o->negative_ttl_s;
	if (a->asked_at) {
		/* What the load it started or waited for published is its answer,
		 * however short the TTL: with 0 (revalidate every read) the reader
		 * found the entry it had just learnt stale, learnt it again, and so
		 * on without end. An entry learnt at or after asked_at is younger
		 * than this limit. */
		double since = nextafter(now - a->asked_at, INFINITY);
		if (ttl >= 0 && ttl < since)
			ttl = since;
		if (negative_ttl >= 0 && negative_ttl < since)
			negative_ttl = since;
	}
	enum meta_role role = meta_lookup(o->meta, bucket, key, now, ttl, negative_ttl, a->waiter,
	                                  &m);
	if (role == META_FRESH) {
		*out = m;
		a->asked_at = 0; /* a later step (a version change seen) asks anew */
		return OBJ_META_READY;
	}
	if (!a->asked_at)
		a->asked_at = now;
	if (role == META_WAIT) {
		if (!a->wait_since)
			a->wait_since = now;
		a->waiting = true;
		return OBJ_META_WAIT;
	}
	/* META_LOAD: this reader learns it (m: the stale entry, revalidated). */
	int rc = load(arg, m ? m->etag : NULL);
	meta_unref(m);
	if (rc < 0) {
		meta_publish(o->meta, bucket, key, NULL);
		*status = rc;
		return OBJ_META_NO_LOAD;
	}
	a->loaded = true;
	return OBJ_META_LOADING;
}

void obj_meta_cancel(const struct objects *o, const char *bucket, const char *key,
                     struct obj_meta_ask *a)
{
	if (a->waiting)
		meta_unwait(o->meta, bucket, key, a->waiter);
	a->waiting = false;
}

void obj_forget(const struct objects *o, const struct obj_ref *ref)
{
	uint64_t n = obj_chunk_count(ref->meta->size, o->chunk_bytes);
	for (uint64_t i = 0; i < n; i++) {
		struct chunk_id id;
		obj_chunk_id(ref, i, &id);
		store_drop(o->store, &id);
	}
	meta_drop(o->meta, ref->bucket, ref->key);
}

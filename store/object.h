/*
 * object.h - reading an object through the store: which chunks hold which
 * bytes, a chunk from a tier or produced for the reader, the object's
 * metadata (fresh, revalidated or learnt), and who still wants a chunk.
 *
 * The layer knows nothing of upstream. A reader hands it a producer (starts
 * filling a chunk) and a loader (starts learning the metadata): the
 * gateway's start fetches. Client reads, warming jobs, purges and the
 * metadata learning all go through here, so chunk boundaries, the TTLs and
 * coalescing are decided once.
 *
 * Thread-safe, as the store and the metadata cache under it.
 */
#ifndef LARDER_OBJECT_H
#define LARDER_OBJECT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/chunk.h"
#include "store/meta.h"
#include "store/store.h"

/* ---- geometry ----------------------------------------------------------
 * Chunk i of an object covers bytes [i * chunk_bytes, +len), len being
 * chunk_bytes except for the last chunk; an empty object has no chunk.
 * chunk_bytes > 0. */

/* How many chunks an object of size bytes has (0 when it is empty). */
uint64_t obj_chunk_count(uint64_t size, uint64_t chunk_bytes);
/* The chunk holding byte pos. */
uint64_t obj_chunk_index(uint64_t pos, uint64_t chunk_bytes);
/* The first byte of chunk i. */
uint64_t obj_chunk_offset(uint64_t i, uint64_t chunk_bytes);
/* Chunk i's length: 0 when the object has no chunk i. */
size_t obj_chunk_len(uint64_t size, uint64_t i, uint64_t chunk_bytes);
/* The chunks [*first, *last] holding bytes [a, b] of the object; false
 * (nothing set) when the range is empty or not inside the object. */
bool obj_chunk_span(uint64_t size, uint64_t chunk_bytes, uint64_t a, uint64_t b,
                    uint64_t *first, uint64_t *last);

/* ---- the layer ---------------------------------------------------------- */

struct objects {
	struct store *store;
	struct meta_cache *meta;
	uint64_t chunk_bytes;
	double ttl_s;            /* metadata is trusted this long; < 0: for ever */
	double negative_ttl_s;   /* the same for a remembered 404 */
};

/* metadata_ttl_s < 0 means "immutable" (LARDER_METADATA_TTL). */
void objects_init(struct objects *o, struct store *s, struct meta_cache *mc,
                  uint64_t chunk_bytes, long metadata_ttl_s, unsigned negative_ttl_s);

/* One version of one object. */
struct obj_ref {
	const char *bucket, *key;
	const struct obj_meta *meta; /* its ETag and size */
};

/* chunk i of the version ref names. */
void obj_chunk_id(const struct obj_ref *ref, uint64_t i, struct chunk_id *out);

/* ---- acquire or produce ------------------------------------------------- */

/* Starts producing chunk i into c (FILLING; the producer takes its own
 * reference if it keeps it, and ends with store_complete). Returns 0, or a
 * negative reason: c then fails with it, and whoever waits on it sees it. */
typedef int (*obj_produce_fn)(void *arg, struct chunk *c, uint64_t i);

/*
 * Chunk i of ref, for a reader that wants it: a reference that counts as a
 * want (let go with obj_unwant). The chunk is held (READY in RAM, or read
 * from NVMe by the store), produced by someone else, or nobody had it: then
 * it was created and produce(arg, c, i) called before this returns. Of
 * concurrent acquirers only the first one's producer runs; the others get
 * the same chunk. *role (may be NULL) says which. charge: the reader's
 * store charge (its fills' chunk_origin.charge; 0: nobody), which a chunk
 * read back from NVMe for it enters RAM with (store_acquire_charged). NULL
 * when out of memory or when i is past the object's end.
 */
struct chunk *obj_acquire(const struct objects *o, const struct obj_ref *ref, uint64_t i,
                          unsigned charge, obj_produce_fn produce, void *arg,
                          enum store_role *role);

/* ---- who wants a chunk --------------------------------------------------
 * Readers, read-ahead and warming jobs each count as one want while they
 * hold a chunk; its producer asks obj_wanted before each piece. */

/* One more want, with its own reference. */
void obj_want(struct chunk *c);
/* Drops one want and its reference. gave_up: this one left before it had
 * what it wanted (its client went away); a reader that took its bytes and
 * left still wants the chunk kept for the next one. */
void obj_unwant(struct chunk *c, bool gave_up);
/* Whether the producer should go on: false only once nobody wants the
 * chunk and the last one to let go gave up. A chunk nobody ever wanted (a
 * meta fetch warming chunk 0 for nobody) goes on. */
bool obj_wanted(const struct chunk *c);
/* How many want it now (a snapshot). */
int obj_wants(const struct chunk *c);

/* ---- waits between the nodes of a cluster ------------------------------
 * A chunk's producer, or a metadata load, may ask another node of a
 * cluster at some hop (cluster/peer.h); a request from a node has a hop.
 * Nodes waiting for each other must not close a cycle (each would wait out
 * the upstream timeout), so a request at hop may wait only for a producer
 * that asks S3 (ask_hop 0) or asks at a higher hop than its own. A request
 * that starts its own fetch asks at a higher hop too, so along any chain of
 * waits the hop rises, and no chain comes back to where it began. A client's
 * request (hop 0) waits for anything. */
static inline bool obj_may_wait(unsigned hop, unsigned ask_hop)
{
	return ask_hop == 0 || ask_hop > hop;
}

/* ---- metadata ----------------------------------------------------------- */

/* Starts learning the object's metadata: revalidate is the expired entry's
 * ETag (to send as If-None-Match), or NULL. The load ends in meta_publish,
 * meta_refresh or meta_publish_failure. Returns 0, or negative when it
 * could not start (the layer then publishes the failure). */
typedef int (*obj_load_fn)(void *arg, const char *revalidate);

/* One reader's search for an object's metadata, across calls. Zero it and
 * set waiter (and share_failures) before the first call. */
struct obj_meta_ask {
	struct chunk_waiter *waiter;
	bool share_failures;     /* a failed load it waited on fails it too */
	unsigned hop;            /* a request from another node of a cluster: its hop
	                            (cluster/peer.h; 0: a client's), see obj_may_wait */
	bool recheck;            /* the entry is revalidated however fresh, unless this
	                            asker waited for a load (a peer's request while this
	                            node may have missed invalidations) */
	bool waiting;            /* registered with the metadata cache: clear it when
	                            woken, or cancel with obj_meta_cancel */
	bool loaded;             /* private: it started a load (it waits for its own) */
	double wait_since;       /* when it began waiting for another's load (0: not yet) */
	double asked_at;         /* private: when it started a load or began waiting for
	                            one (0: not since its last READY); an entry learnt
	                            since is fresh for it whatever the TTL */
};

enum obj_meta_step {
	OBJ_META_READY,   /* *out: the metadata, fresh (maybe negative) */
	OBJ_META_WAIT,    /* being learnt: the waiter is woken when it is */
	OBJ_META_LOADING, /* load was called: step again (to wait for it) */
	OBJ_META_NO_LOAD, /* load returned *status (< 0): it could not start */
	OBJ_META_FAILED,  /* the load it waited for failed: *status is upstream's
	                     (0: unreachable; META_NOT_CACHEABLE) */
	OBJ_META_CYCLE,   /* the running load asks another node, and this request, from
	                     a node, may not wait for it (obj_may_wait) */
};

/* One step: fresh metadata, or a wait for whoever learns it, or a load by
 * this reader (stale: a revalidation). now: clock_mono_s(). */
enum obj_meta_step obj_meta_step(const struct objects *o, const char *bucket, const char *key,
                                 struct obj_meta_ask *a, obj_load_fn load, void *arg, double now,
                                 struct obj_meta **out, long *status);
/* Stops waiting, if it was. */
void obj_meta_cancel(const struct objects *o, const char *bucket, const char *key,
                     struct obj_meta_ask *a);

/* Forgets every chunk of the version ref names, in every tier, and its
 * metadata entry (see store_drop, meta_drop). */
void obj_forget(const struct objects *o, const struct obj_ref *ref);

#endif

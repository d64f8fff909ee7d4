/*
 * fetch.h - one upstream GET that fills the cache: either the first read of
 * an object (one chunk as a range, chunk 0 or the one a reader's range
 * starts in, which also teaches its size, ETag and headers) or one chunk
 * of a known version (a range with If-Match, so
 * chunks of different versions never mix).
 *
 * A fetch belongs to the worker that started it and outlives any one
 * reader: a reader that disconnects leaves it running for the others. It
 * stops early when nobody holds its chunk any more, retries 5xx and
 * SlowDown with capped exponential backoff and jitter (resuming from the
 * bytes it has), and reports failure to every waiter through the chunk.
 */
#ifndef LARDER_FETCH_H
#define LARDER_FETCH_H

#include <stdbool.h>
#include <stdint.h>

#include "base/hdrs.h"
#include "gateway/server.h"
#include "store/chunk.h"
#include "store/meta.h"

#define FETCH_MAGIC 0x66657463u

/* Why a chunk failed (chunk->fail_reason). */
#define FETCH_ERR_UPSTREAM  (-1001) /* upstream error or unreachable after retries */
#define FETCH_ERR_CHANGED   (-1002) /* 412 on If-Match: the object changed */
#define FETCH_ERR_CANCELLED (-1003) /* nobody wanted it any more */
#define FETCH_ERR_SLOWDOWN  (-1004) /* no slot to the S3 prefix in time (gateway/shaper.h) */

struct fetch;

/* What a meta fetch tells the reader that started it (its owner, the void *
 * each hook gets), on the worker's thread. The owner must fetch_disown a
 * fetch it stops caring about (it goes away, or starts learning again)
 * before it forgets the pointer: the hooks run until the fetch ends. */
struct fetch_owner_ops {
	/* The object is learnt (status: upstream's, for the access log). c0:
	 * chunk index (0 unless fetch_meta_start was given another), which
	 * this fetch fills, or NULL. c0 comes with one want
	 * (store/object.h) the owner may keep: true when it did (it will read
	 * the chunk and obj_unwant it), false to let the fetch drop it. A small
	 * object's chunk may complete before the owner gets to it, and
	 * admission may decline to keep it; it must not be fetched twice. */
	bool (*learnt)(void *owner, long status, struct chunk *c0, uint64_t index);
	/* Upstream's own answer when the object could not be learnt (404, 403,
	 * ...; status 0: never reached), for the owner's client as it is. */
	void (*upstream_error)(void *owner, long status, const struct hdrs *h, const char *body,
	                       size_t len);
	/* The object is not cacheable (no usable ETag, SSE-C): pass it through. */
	void (*pass_through)(void *owner);
	/* The fetch is over: the owner forgets it. */
	void (*detach)(void *owner, struct fetch *f);
};

/* Starts learning (bucket, key): GET chunk first_chunk as a range (on a
 * node of a cluster, from the object's owner node, which learns it from
 * S3 with the same range and keeps that chunk; a revalidation there, and
 * a node learning it for another node's request, ask for chunk 0). A
 * reader of a range gives the chunk its range starts in, so that a small
 * read far into a cold object costs one GET and one first byte; the other
 * readers give 0. Past the object's end (S3's 416) chunk 0 is asked
 * instead. from: the reader's first byte in that chunk; one an eighth of a
 * chunk in (at least 256 KiB) is asked for from there on, and the chunk's
 * bytes before it by a second GET at once (fetch.c, split_fill).
 * FETCH_LAST_CHUNK (a suffix range, bytes=-n): the object's last
 * chunk-size bytes, of which the last chunk is kept. Only chunk 0's NVMe
 * entry carries the metadata (a restart knows the object again from it).
 * revalidate: the
 * expired entry's ETag to send as If-None-Match, or NULL. owner (with its
 * ops; NULL for none): the reader that asked; it may go away first
 * (fetch_disown). hop as for struct fetch_producer. charge: the reader's
 * req_charge, which the chunk it fills is charged to in the store, and
 * whose turn it waits for in its prefix's window (shaper_slot_tenant).
 * Returns NULL when the transfer could not start. */
#define FETCH_LAST_CHUNK UINT64_MAX
struct fetch *fetch_meta_start(struct worker *w, const struct fetch_owner_ops *ops, void *owner,
                               unsigned hop, unsigned charge, const char *bucket,
                               const char *key, const char *revalidate, uint64_t first_chunk,
                               uint64_t from);
/* What a meta fetch's 206 with Content-Range first-last/size (as
 * content_range_parse reads it: first <= last < size) is, for the fetch
 * that asked for chunk index of cs bytes each (FETCH_LAST_CHUNK: bytes=-cs).
 * False: not the range asked for. Else k: the chunk its body fills, inside
 * the object; skip (< cs): the body's bytes before that chunk's first;
 * whole: the body holds that chunk to its end. */
bool fetch_learnt_span(uint64_t cs, uint64_t index, uint64_t first, uint64_t last,
                       uint64_t size, uint64_t *k, uint64_t *skip, bool *whole);
/* The same for a warm job (no owner, hop 0). pin: NULL, or for a pinned
 * job a pins_peer_header() (gateway/pins.h) its request to the chunk's owner
 * carries. whole: learn the object as fetch_meta_start_checksums does, so
 * that its checksums are known to the readers the job warms it for. */
struct fetch *fetch_meta_start_job(struct worker *w, const char *bucket, const char *key,
                                   const char *revalidate, const char *pin, bool whole);

/* The same for a reader that sent x-amz-checksum-mode: ENABLED: GET the
 * whole object with the mode, so that the metadata published carries its
 * x-amz-checksum-* headers (obj_meta.checksums), as S3 gives them for a
 * whole GET and never for a range. Chunk 0 is filled from the answer's
 * first bytes; the transfer stops there (the object's other chunks are
 * fetched as ranges). Another node is asked for chunk 0 as a range with the
 * mode; a larder answers that with the checksums it knows. */
struct fetch *fetch_meta_start_checksums(struct worker *w, const struct fetch_owner_ops *ops,
                                         void *owner, unsigned hop, unsigned charge,
                                         const char *bucket, const char *key,
                                         const char *revalidate);

/* The key an object's first read goes by, before its ETag is known (the
 * metadata fetch, chunk 0): its owner, and the directory key of its chunk
 * 0. The id of (bucket, key, "", 0), hashed. */
uint64_t fetch_object_key(const char *bucket, const char *key);

/* A write through this node changed (bucket, key) at now (monotonic
 * seconds), or a fetch here saw it changed upstream (a 412); key "": any
 * key of the bucket (DeleteObjects). Until
 * FETCH_WRITTEN_S later, a meta fetch of it learns the object from S3, not
 * from another node: the invalidation may not have reached that node yet,
 * and what it still holds is the old version, which this node would keep.
 * Thread-safe; a bounded table (a mark it overwrites is forgotten). */
#define FETCH_WRITTEN_S 90.0
void fetch_written(const char *bucket, const char *key, double now);
/* This node's invalidation subscription started at now (monotonic
 * seconds): it may have missed some, and revalidates all it caches. Until
 * FETCH_RESYNC_S later, a meta fetch that revalidates learns the object
 * from S3, not from another node: the owner may have missed the same
 * invalidations, and its 304 would make this node keep the old version.
 * An owner that knows it is not listening asks S3 itself (cache.c); this
 * covers one whose subscriber has not noticed its loss yet (two PING
 * periods, 10 s) or subscribes again a moment later. Thread-safe. */
#define FETCH_RESYNC_S 15.0
void fetch_resynced(double now);
/* S3 showed (bucket, key) changed since it was learnt (a 412 on If-Match, an
 * answer for another ETag): what is known of it is forgotten, on NVMe too,
 * and on the other nodes. dropped: the caller dropped its metadata already. */
void fetch_changed(struct gw *gw, const char *bucket, const char *key, bool dropped);

/*
 * Objects whose ETag will not hold still: some S3-compatible stores and
 * proxies name the same, unchanged object by another ETag in every answer.
 * A chunk fetch (If-Match, and its check of the answer's ETag) takes each
 * answer for a version change, so every read of more than one chunk was cut
 * short and the object learnt again, without end. fetch_unsteady_moved
 * notes that a chunk fetch saw (bucket, key), known as etag, size bytes and
 * last_modified (0: unknown), change; fetch_unsteady_learnt is asked when
 * the object is learnt again, and returns true (then counts it, and logs
 * it) when that was within FETCH_UNSTEADY_SEEN_S and the answer names
 * another ETag with the same size and Last-Modified: the ETag moved, not
 * the object. Such an object is not cached for FETCH_UNSTEADY_S: its
 * reads go through the pass-through (fetch_unsteady), then caching is tried
 * again. now: monotonic seconds (fetch_unsteady reads the clock itself, and
 * only once some object was passed through). Thread-safe; bounded tables.
 */
#define FETCH_UNSTEADY_S 600.0
#define FETCH_UNSTEADY_SEEN_S 60.0
void fetch_unsteady_moved(const char *bucket, const char *key, const char *etag, uint64_t size,
                          time_t last_modified, double now);
bool fetch_unsteady_learnt(const char *bucket, const char *key, const char *etag,
                           uint64_t size, time_t last_modified, double now);
bool fetch_unsteady(const char *bucket, const char *key);

/* The object version a reader's chunk fetches are for. */
struct fetch_producer {
	struct worker *w;
	const char *bucket, *key;
	const struct obj_meta *meta;
	unsigned hop;                /* 0 for this node's own readers, else the hop of the
	                              * peer request that wants the chunk (cluster/peer.h) */
	const char *pin;             /* a pinned warm job's pins_peer_header(), or NULL */
	bool background;             /* a warm job's: after demand reads (gateway/shaper.h) */
	unsigned charge;             /* the store charge of the chunks (req_charge); 0: nobody */
	uint64_t from;               /* the reader's first byte in the chunk: one deep in it
	                              * is not kept waiting for those before (fetch.c) */
	const char *slot_key;        /* a key id whose max_upstream_requests slot the caller
	                              * took for this fetch (a read-ahead), or NULL: the
	                              * fetch gives it back when it ends (limits.h) */
};
/* An obj_produce_fn (store/object.h) with arg a struct fetch_producer:
 * starts producing chunk c (a reference is taken) of the version
 * p->meta; FETCH_ERR_UPSTREAM when it could not start (p->slot_key's slot
 * is then still the caller's). */
int fetch_produce(void *arg, struct chunk *c, uint64_t index);

/* The owner is gone: its fetch goes on for the other readers. */
void fetch_disown(struct fetch *f);

/* Whether chunk memory (the chunks held, process-wide) plus extra would pass
 * its bound: the RAM tier's size plus LARDER_INFLIGHT_SIZE (0: the tier's
 * size again; never less than two chunks, so one reader always gets
 * through). A reader that has not answered yet gets 503 SlowDown past it. */
bool fetch_memory_over(const struct gw *gw, uint64_t extra);

/* Shutdown: stops every fetch of the worker. */
void fetch_abort_all(struct worker *w);

#endif

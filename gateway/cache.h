/*
 * cache.h - GET and HEAD of objects answered from the chunk cache: what
 * the request's life (request.c) asks of the cached read path, and the
 * writes and purges that make the cache forget. A meta fetch reports to the
 * reader that owns it through fetch_owner_ops (gateway/fetch.h), which
 * cache.c implements.
 *
 * A request's cached-read state (struct cread, gateway/cread.h) is private
 * to cache.c and cache_body.c; the
 * request holds it from cache_wants to cache_free.
 */
#ifndef LARDER_CACHE_H
#define LARDER_CACHE_H

#include <ev.h>
#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/hdrs.h"

struct req;
struct gw;
struct fetch;
struct chunk;

/* ---- the request's life (request.c) -------------------------------------- */

/* After authentication: whether this GET/HEAD is answered from the cache
 * (then the request holds its cached-read state). */
bool cache_wants(struct req *r);
void cache_begin(struct req *r);               /* first call */
/* Whether the request is answered from the cache: cache_wants said yes,
 * and it was not handed back to the pass-through (cache_passes). */
bool cache_active(const struct req *r);
bool cache_passes(struct req *r);              /* the pass-through serves it after all */
enum MHD_Result cache_respond(struct req *r);  /* the body is in: answer (or wait) */
/* "hit" or "miss", for x-larder-cache and the access log: a miss when the
 * metadata was learnt or revalidated for this request, when some byte of the
 * body came from upstream, or when a chunk it needed was not held (an error
 * answer after its fetch failed, or was refused at the memory bound). */
const char *cache_outcome(const struct req *r);
void cache_learn(struct req *r);               /* upstream's headers: a part, checksums */
void cache_end(struct req *r);                 /* the request is over */
void cache_free(struct req *r);                /* the request is freed */
void cache_wake_cb(struct ev_loop *loop, ev_async *a, int revents); /* worker->wake_async */

/* ---- forgetting ------------------------------------------------------------ */

/* Forgets objects of bucket: the key (exact) or every key under prefix:
 * their chunks in every tier and their metadata, so the next read goes
 * upstream. The NVMe tombstone is written first, or, for a purge heard
 * from another node (heard), queued for an I/O thread once memory forgot
 * (store_invalidate_queued). Thread-safe. *objects gets how many were
 * known. Returns 0. */
int cache_purge(struct gw *gw, const char *bucket, const char *prefix, bool exact, bool heard,
                uint64_t *objects);

/* Writes (PUT, POST, DELETE, copy) that succeeded, or whose outcome is
 * unknown (an answer never heard, upstream status 0, or a 5xx: they may
 * have landed), drop what the cache knows of the key and the listings it
 * is in; a DeleteObjects drops the bucket's metadata. A multipart upload's
 * start, parts and abort change nothing and drop nothing. */
void cache_invalidate(struct req *r);
/* Whether r is a write cache_invalidate would drop something for (not a
 * multipart upload's start, part or abort). */
bool cache_write_changes(const struct req *r);
/* Before a write that may change an object goes upstream: its tombstone on
 * NVMe (store_write_begin), so that a crash before S3's answer (S3 may have
 * applied it) cannot give the old version back at the next start, not even
 * one a reader learnt meanwhile; cache_invalidate writes another once the
 * answer is in, newer than what readers learnt meanwhile. */
void cache_write_begins(struct req *r);
/* The write is over (answered, or given up): what readers learn from now
 * on is dated as usual. Safe to call when no write began. */
void cache_write_ends(struct req *r);

#endif

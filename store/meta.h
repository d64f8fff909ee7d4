/*
 * meta.h - object metadata: what a GET or HEAD of (bucket, key) answers
 * besides the bytes, kept so hits need no upstream request.
 *
 * An entry is learnt from the first chunk fetch of an object (a ranged GET
 * that returns size, ETag and headers in one round trip) and trusted for a
 * TTL (or for ever: "immutable"); after that the next reader revalidates it.
 * A 404 may be remembered too (negative entries), for a shorter time.
 *
 * Loading is coalesced like chunks: the first reader of an unknown or
 * expired object becomes its loader, the others wait and are woken when it
 * publishes (or fails, and one of them loads again).
 *
 * Thread-safe. Entries are reference-counted and immutable once published.
 */
#ifndef LARDER_META_H
#define LARDER_META_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "base/buf.h"
#include "base/hdrs.h"
#include "store/chunk.h"

/* A part's bytes, as an upstream answer to ?partNumber=N gave them. */
struct meta_part {
	uint32_t number;
	uint64_t first, last;
};

/* Parts remembered per object: what readers that read by part use (a CRT
 * reads part 1 first); beyond this, parts go to upstream each time. */
#define META_PARTS_MAX 64

struct obj_meta {
	_Atomic int refs;
	bool negative;        /* a remembered 404 */
	uint64_t size;
	char etag[130];       /* as upstream sent it, quotes included */
	time_t last_modified; /* 0 when unknown */
	char *headers;        /* "Name: value\n" lines replayed on hits (Content-Type,
	                         Last-Modified, x-amz-meta-*, ...); never NULL */
	double learnt;        /* monotonic seconds when learnt or last revalidated */
	time_t learnt_wall;   /* the same in wall-clock time: persisted, so a restart
	                         trusts an entry only for what is left of its TTL */
	uint32_t parts_count; /* x-amz-mp-parts-count; 0: not uploaded in parts, or
	                         no part learnt yet */
	uint32_t nparts;      /* parts learnt (not persisted: learnt again) */
	struct meta_part *parts; /* NULL until one is learnt (most objects: never) */
	char *checksums;      /* "Name: value\n" x-amz-checksum-* lines of a whole-object
	                         answer to x-amz-checksum-mode: ENABLED ("" when it had
	                         none); NULL: not learnt (not persisted either) */
};

/* A new entry with refs = 1. headers is copied (NULL means none). */
struct obj_meta *meta_new(uint64_t size, const char *etag, time_t last_modified,
                          const char *headers, double now);
/* A remembered 404 NoSuchKey. headers: "Name: value\n" lines S3's answer
 * carried that every answer given for it must carry too (a delete marker's
 * x-amz-delete-marker and x-amz-version-id), or NULL. */
struct obj_meta *meta_new_negative(const char *headers, double now);
void meta_ref(struct obj_meta *m);
void meta_unref(struct obj_meta *m);

/* The blob persisted with chunk 0 on NVMe, and back. decode returns NULL
 * on a malformed blob. */
int meta_encode(const struct obj_meta *m, struct buf *out);
struct obj_meta *meta_decode(const void *blob, size_t len, double now);

struct meta_cache;

struct meta_cache *meta_cache_create(size_t max_entries);
void meta_cache_destroy(struct meta_cache *mc);

enum meta_role {
	META_FRESH, /* *out: a current entry (maybe negative) */
	META_LOAD,  /* the caller loads it, then meta_publish (NULL: failed);
	               *out: the expired entry to revalidate, or NULL */
	META_WAIT,  /* another reader loads it: w will be woken; look up again */
};

/*
 * ttl: seconds an entry is trusted (< 0: for ever); negative_ttl: the same
 * for negative entries. With META_WAIT, w stays registered until woken or
 * meta_unwait; *out is NULL.
 */
enum meta_role meta_lookup(struct meta_cache *mc, const char *bucket, const char *key,
                           double now, double ttl, double negative_ttl,
                           struct chunk_waiter *w, struct obj_meta **out);

/* The loader's result: m (a reference is taken) becomes the entry, or
 * with m == NULL the load failed; either way the waiters are woken. */
void meta_publish(struct meta_cache *mc, const char *bucket, const char *key,
                  struct obj_meta *m);
/* The load failed on upstream (status: upstream's HTTP status, 0 when
 * unreachable, or META_NOT_CACHEABLE): as meta_publish(NULL), and the entry
 * remembers when and why, so that the readers that waited for this load
 * share its failure (meta_load_failed) rather than each start one of their
 * own into the same storm. now: the clock meta_load_failed is asked with. */
void meta_publish_failure(struct meta_cache *mc, const char *bucket, const char *key,
                          long status, double now);
/* The status meta_publish_failure gets when the object is not cacheable
 * (no usable ETag, an SSE-C answer): its readers go through the
 * pass-through instead. */
#define META_NOT_CACHEABLE (-1L)
/* Whether a load of (bucket, key) failed at or after since; *status gets
 * its status. The record lives as long as the entry (an entry evicted or
 * dropped since only costs its readers a load of their own). */
bool meta_load_failed(struct meta_cache *mc, const char *bucket, const char *key, double since,
                      long *status);

/* Revalidated unchanged (a 304): the entry's clock restarts, and its
 * waiters are woken. last_modified: the 304's Last-Modified (0: none);
 * said: its headers (NULL: none). Returns false, and leaves the entry
 * loading, when they name another version than the entry's: the same ETag
 * (the same bytes), but another object (copied onto itself with new
 * headers, put again, its tags changed), which the caller learns again
 * (then meta_publish). Compared: Last-Modified, x-amz-version-id and
 * x-amz-tagging-count, each where both name one (a tag count also where
 * only the 304 does). */
bool meta_refresh(struct meta_cache *mc, const char *bucket, const char *key,
                  time_t last_modified, const struct hdrs *said, double now);

/* The running load of (bucket, key) asks another node of a cluster at
 * hop ask_hop (cluster/peer.h), or S3 (0); every load starts at 0. Nothing
 * when no load runs. */
void meta_set_ask_hop(struct meta_cache *mc, const char *bucket, const char *key,
                      unsigned ask_hop);
/* The ask_hop of the running load of (bucket, key); 0 when none runs. */
unsigned meta_loading_ask_hop(struct meta_cache *mc, const char *bucket, const char *key);

/* Cancels a META_WAIT registration; after it returns w is not woken. */
void meta_unwait(struct meta_cache *mc, const char *bucket, const char *key,
                 struct chunk_waiter *w);

/* Part n of the object is bytes [first, last] of its size bytes, and it has
 * count parts (0: S3 named no count, the object was not uploaded in parts).
 * Kept in the entry only while it still holds that ETag and size: a copy
 * with the part replaces it (entries stay immutable for their readers). */
void meta_learn_part(struct meta_cache *mc, const char *bucket, const char *key,
                     const char *etag, uint64_t size, uint32_t n, uint64_t first, uint64_t last,
                     uint32_t count);
/* The x-amz-checksum-* lines S3 answered a HEAD or whole GET with checksum
 * mode on with (see obj_meta.checksums), kept like a part. */
void meta_learn_checksums(struct meta_cache *mc, const char *bucket, const char *key,
                          const char *etag, uint64_t size, const char *lines);
/* The headers of an upstream answer h that a cached answer replays
 * (obj_meta.headers: the object's, not that response's or connection's),
 * as "Name: value" lines appended to out; a line that does not fit out's
 * cap is left out whole. */
void meta_replayed_lines(const struct hdrs *h, struct buf *out);
/* The x-amz-checksum-* headers of h as obj_meta.checksums lines, appended
 * to out. Returns 0, or buf_printf's error. */
int meta_checksum_lines(const struct hdrs *h, struct buf *out);
/* The checksum lines of m (see obj_meta.checksums) while m is its maker's
 * alone, before meta_publish. Returns 0, or -ENOMEM (m unchanged). */
int meta_set_checksums(struct obj_meta *m, const char *lines);
/* Part n's bytes in m, when learnt. */
bool meta_part(const struct obj_meta *m, uint32_t n, uint64_t *first, uint64_t *last);

/* Invalidation: a write through larder, or a version change seen upstream.
 * A load in progress is not disturbed, but what it publishes is kept only
 * if no drop happened since it began. */
void meta_drop(struct meta_cache *mc, const char *bucket, const char *key);
/* meta_drop, when the entry knows another version than (etag, size): an
 * answer S3 gave for the object named those. Returns whether it dropped. */
bool meta_drop_other(struct meta_cache *mc, const char *bucket, const char *key,
                     const char *etag, uint64_t size);
void meta_drop_bucket(struct meta_cache *mc, const char *bucket);
/* Every entry, negative ones included, is revalidated before it is trusted
 * again, whatever its TTL (immutable too), and so is what a load running
 * now publishes: for when invalidations may have been missed. The entries
 * stay, so a revalidation is a conditional request and keeps the chunks. */
void meta_expire_all(struct meta_cache *mc);

/* Calls cb for every settled entry of bucket whose key starts with prefix
 * (exact: equals it), remembered 404s included, outside the cache's locks,
 * each with a reference the callee may keep (meta_unref it). Returns how
 * many. */
typedef void (*meta_visit_cb)(void *arg, const char *key, struct obj_meta *m);
size_t meta_collect(struct meta_cache *mc, const char *bucket, const char *prefix, bool exact,
                    meta_visit_cb cb, void *arg);

size_t meta_cache_count(struct meta_cache *mc);

#endif

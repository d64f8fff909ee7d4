/*
 * directory.h - this node's part of the placement directory: the copies it
 * holds that hashing would not find, published in Redis.
 *
 * Hashing already says where a chunk lives: its owner (cluster/cluster.h)
 * fetched it and keeps it. What hashing cannot tell is where a chunk is
 * once its owner changed. So a node lists a chunk it holds and does not
 * own when either
 *  - it got the chunk as its owner (from S3, from another holder, or alone
 *    while Redis was away), and ownership moved since: a node joined or
 *    came back, or the cluster formed again; or
 *  - the copy is one it streamed from the chunk's owner (a reader's copy),
 *    and that node has since left the cluster (or died): its copy is gone,
 *    so the readers' copies are what is left.
 * Readers' copies whose source is alive are never listed: the source has
 * them. So the directory stays a small fraction of what is cached. While
 * membership is stable it lists only the chunks an object's owner node
 * fetched from S3 for the object's first read without owning them
 * (gateway/fetch.c, learnt_past_chunk0): one per such object at most.
 *
 * In Redis, larder:dir:<16 hex digits of the key> is a set of node ids with
 * a TTL (ttl_ms) that every listed holder refreshes while the entry holds.
 * A chunk is listed under the key that routes it, which its ownership is
 * computed from: chunk_id_hash() of its id, except for chunk 0, which goes
 * by its object's metadata key (chunk_id_make(bucket, key, "", 0)) like the
 * first read of the object, which fetches it before the ETag is known.
 *
 * The directory decides nothing on the caller's thread: dir_fetched and
 * dir_changed only queue the id (any thread, never blocking on I/O, cheap
 * enough under the store's locks), and dir_recovered, called only before
 * the first flush, only fills the table. The cluster's heartbeat thread calls
 * dir_flush with its connection and its view of ownership; each chunk's
 * entry is then made to match what holds() and owns() say now.
 *
 * Bounds: at most max_entries chunks tracked per node (fetched and still
 * held, listed or not) and 65,536 queued notes; past either, notes
 * are dropped and counted. A dead node's entries expire after ttl_ms;
 * readers skip ids that are not live members meanwhile.
 */
#ifndef LARDER_DIRECTORY_H
#define LARDER_DIRECTORY_H

#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/chunk.h"

#define DIR_KEY_PREFIX "larder:dir:"
#define DIR_KEY_MAX (sizeof DIR_KEY_PREFIX + 16)

typedef bool (*dir_holds_fn)(void *arg, const struct chunk_id *id);

/* What the cluster knows of ownership and members, for dir_flush. */
struct dir_owners {
	/* whether this node owns key now */
	bool (*owns)(void *arg, uint64_t key);
	/* whether the node with this tag (cluster_member_tag) is no longer a
	 * live member */
	bool (*gone)(void *arg, uint32_t tag);
	void *arg;
};

struct dir_config {
	unsigned ttl_ms;        /* entry lifetime in Redis; 0: one hour */
	size_t max_entries;     /* chunks tracked; 0: 1 << 20 */
	dir_holds_fn holds;     /* whether this node's tiers hold a chunk now */
	void *holds_arg;
};

struct directory;

struct directory *dir_create(const struct dir_config *c);
void dir_destroy(struct directory *d);

/* The Redis key of a directory key ("larder:dir:<hex>"), in buf. */
void dir_key_name(uint64_t key, char buf[DIR_KEY_MAX]);

/* This node fetched chunk id and stored it: as its owner (from S3 or from
 * a holder) or, as_owner false, as a reader's copy streamed from the node
 * tagged src (cluster_member_tag; 0: unknown). key: chunk_id_hash(id);
 * alias: the key that routes it when that is not key (chunk 0: its
 * object's metadata key), else 0. */
void dir_fetched(struct directory *d, uint64_t key, uint64_t alias, const struct chunk_id *id,
                 bool as_owner, uint32_t src);

/* At start, before the cluster flushes for the first time, on the thread
 * that made d: this node holds the chunk keyed key (as dir_fetched) since
 * before it started (its NVMe tier recovered it), got as its owner or as
 * a reader's copy, whose source is not known: such a copy is not listed,
 * as if its source were alive. Tracked as dir_fetched would, with no queue
 * between (a tier holds far more chunks than the queue). The first flush
 * is a recheck (no flush has seen Redis yet: the cluster passes recheck),
 * which reconciles every one, so the entries the node listed before it
 * stopped are refreshed, not left to expire. Past max_entries, dropped and
 * counted. */
void dir_recovered(struct directory *d, uint64_t key, uint64_t alias, bool as_owner);

/* Chunk id may have entered or left a tier (evicted, purged, ...). */
void dir_changed(struct directory *d, const struct chunk_id *id);

/*
 * Heartbeat thread: applies the notes queued since the last call, and
 * reconciles a share of the tracked chunks with o (who owns a key now,
 * whose owner left) and Redis, refreshing TTLs, all pipelined on c as node
 * self. recheck: ownership changed or Redis may have lost the directory:
 * reconcile every chunk now (SWEEP_MAX per call). Returns 0, or -1 with
 * why filled when the connection failed.
 */
int dir_flush(struct directory *d, redisContext *c, const char *self, bool recheck,
              const struct dir_owners *o, char *why, size_t whylen);

struct dir_stats {
	uint64_t entries;        /* keys this node lists in Redis now */
	uint64_t tracked;        /* chunks it fetched and still holds */
	uint64_t published;      /* keys listed (SADD of a new entry), since start */
	uint64_t withdrawn;      /* keys withdrawn (SREM) */
	uint64_t refreshed;      /* SADD + PEXPIRE of keys already listed */
	uint64_t dropped;        /* notes lost: queue or table full */
};
void dir_get_stats(struct directory *d, struct dir_stats *out);

#endif

/*
 * directory.h - this node's part of the placement directory: which chunks
 * it holds, published in Redis so that other nodes can find them.
 *
 * In Redis, larder:dir:<16 hex digits of the directory key> is a set of
 * the ids of the nodes that hold the chunk, with a TTL (ttl_ms) that every
 * holder refreshes while it holds it. The directory key of a chunk is
 * chunk_id_hash() of its id; chunk 0 of an object is also listed under
 * the key of the object's metadata (chunk_id_make(bucket, key, "", 0)), so
 * a node that does not know an object yet can find who does.
 *
 * The directory never decides anything itself: it is told that a chunk
 * may have entered or left this node's tiers (dir_note, from any thread,
 * never blocking on I/O), and asks holds() when it flushes. Flushing is
 * done by the cluster's heartbeat thread (store/cluster.c) on its own
 * blocking connection: SADD + PEXPIRE for a chunk newly held, SREM for one
 * no longer held, and, spread over every quarter of ttl_ms, SADD + PEXPIRE
 * again for everything held (which also rebuilds the directory after Redis
 * lost it). Readers ask the directory from the workers' loops
 * (gateway/placement.h).
 *
 * Bounds: at most max_entries published chunks per node and a queue of
 * pending notes; past either, notes are dropped and counted. A node that
 * dies leaves its entries behind until they expire; readers skip ids that
 * are not live members, so they cost nothing meanwhile.
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

struct dir_config {
	unsigned ttl_ms;        /* entry lifetime in Redis; 0: one hour */
	size_t max_entries;     /* 0: 1 << 20 */
	dir_holds_fn holds;     /* whether this node's tiers hold a chunk now */
	void *holds_arg;
};

struct directory;

struct directory *dir_create(const struct dir_config *c);
void dir_destroy(struct directory *d);

/* The Redis key of a directory key ("larder:dir:<hex>"), in buf. */
void dir_key_name(uint64_t key, char buf[DIR_KEY_MAX]);

/*
 * Chunk id may have entered or left this node's tiers. key: its directory
 * key; alias: a second key to list it under (chunk 0's metadata key), or 0.
 * A note for a chunk that is not published and carries no alias is taken
 * only when it may be new; cheap enough for every eviction.
 */
void dir_note(struct directory *d, uint64_t key, uint64_t alias, const struct chunk_id *id);

/*
 * Heartbeat thread: sends what changed since the last call and the share
 * of refreshes due, as node self, pipelined on c. resync: Redis may have
 * lost the directory (it was unreachable): refresh everything now.
 * Returns 0, or -1 with why filled when the connection failed.
 */
int dir_flush(struct directory *d, redisContext *c, const char *self, bool resync, char *why,
              size_t whylen);

struct dir_stats {
	uint64_t entries;        /* chunks published by this node */
	uint64_t published;      /* SADDs of new entries, since start */
	uint64_t withdrawn;      /* SREMs */
	uint64_t refreshed;      /* SADD + PEXPIRE of entries already published */
	uint64_t dropped;        /* notes lost: queue or table full */
};
void dir_get_stats(struct directory *d, struct dir_stats *out);

#endif

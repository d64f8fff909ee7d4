/*
 * policy.h - which chunks a tier keeps: admission and eviction.
 *
 * Training reads the whole dataset once per epoch in a new random order.
 * When the dataset is larger than the cache, recency is worthless (LRU
 * evicts exactly what the next epoch needs: measured 0.15 hit ratio at
 * dataset = 2 x cache, SIEVE 0.23, S3-FIFO 0.17 in epoch 3). What works is
 * to hold a stable subset: POLICY_SUBSET keeps the chunks with the smallest
 * chunk_id_hash() values - a consistent sample of whatever is being read -
 * and admits a new chunk only if its hash is below the largest it holds,
 * which it then evicts. From the second epoch on the hit ratio is
 * cache/dataset, the ideal. Chunks idle for longer than stale_after
 * seconds are evicted first, oldest first, so a finished job's data
 * gives way to the next job's.
 *
 * POLICY_LRU is plain LRU, kept for comparison in benchmarks; it ignores
 * ranks.
 *
 * Not thread-safe: the tier that owns a policy serialises calls.
 */
#ifndef LARDER_POLICY_STORE_H
#define LARDER_POLICY_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum policy_kind { POLICY_SUBSET = 0, POLICY_LRU = 1 };

/* Parses "subset" or "lru"; returns the kind or -1. */
int policy_kind_parse(const char *s);
const char *policy_kind_name(enum policy_kind k);

/*
 * The rank a tier keeps a chunk by: POLICY_SUBSET keeps the smallest.
 * A chunk's rank is its chunk_id_hash(), except that a copy (a cluster
 * node's copy of a chunk another node owns, struct chunk_origin) ranks
 * after every chunk that is not: a node's tier holds the chunks it owns
 * first and copies only in the room they leave, so the copies a node's
 * readers make never push out the chunks the other nodes come to it for
 * (each would be fetched from S3 again). Among each kind, hash order, so
 * each is a consistent subset.
 */
static inline uint64_t policy_rank(uint64_t hash, bool copy)
{
	return copy ? hash | UINT64_C(1) << 63 : hash >> 1;
}

/* Embedded in each tier entry; the policy owns its fields (hash: the rank
 * it was inserted with, policy_rank). */
struct policy_entry {
	uint64_t hash;
	uint64_t bytes;
	double last_access;
	size_t heap_index;                       /* private */
	struct policy_entry *lru_prev, *lru_next; /* private: most recent at head */
};

struct policy;

struct policy *policy_create(enum policy_kind k, uint64_t capacity_bytes, double stale_after_s);
void policy_destroy(struct policy *p);

/*
 * Should a new chunk (hash, bytes) be admitted at time now? True when it
 * fits, or when making room would only evict entries the policy ranks
 * below it. The caller then evicts policy_victim() until policy_used() +
 * bytes <= capacity, and inserts.
 */
bool policy_admit(const struct policy *p, uint64_t hash, uint64_t bytes, double now);
/* The same question when `reserved` bytes of the capacity are taken by
 * things outside the policy (the RAM tier's chunks being filled): the
 * caller then evicts until used + reserved + bytes <= capacity. */
bool policy_admit_reserved(const struct policy *p, uint64_t hash, uint64_t bytes,
                           uint64_t reserved, double now);

void policy_insert(struct policy *p, struct policy_entry *e, uint64_t hash, uint64_t bytes,
                   double now);
void policy_touch(struct policy *p, struct policy_entry *e, double now);
void policy_remove(struct policy *p, struct policy_entry *e);

/* The entry to evict next, or NULL when empty. Does not remove it.
 * SUBSET: the least recently used entry if it is stale, else the one with
 * the largest hash. LRU: the least recently used. stale_after_s <= 0
 * means nothing is ever stale. O(1); insert/touch/remove are O(log n). */
struct policy_entry *policy_victim(const struct policy *p, double now);

uint64_t policy_used(const struct policy *p);
uint64_t policy_capacity(const struct policy *p);
/* A new capacity for admission (nothing is evicted here: the caller
 * evicts policy_victim() until policy_used() fits, if it must). */
void policy_set_capacity(struct policy *p, uint64_t capacity_bytes);
size_t policy_count(const struct policy *p);

/* Checks internal invariants (heap order, list links, byte totals);
 * returns 0 or -1. For tests. */
int policy_check(const struct policy *p);

#endif

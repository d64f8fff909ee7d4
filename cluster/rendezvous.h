/*
 * rendezvous.h - weighted rendezvous (highest-random-weight) hashing.
 *
 * Every node scores every key; the key belongs to the node with the highest
 * score. Scores depend only on (node, key, weight), so:
 *   - every node that knows the same member set picks the same owner,
 *     whatever order it lists the members in;
 *   - removing a node moves only the keys it owned; adding one moves only
 *     the keys it now owns (about weight / total weight of them), never a
 *     key between two nodes that were already there.
 *
 * Weighting follows "Weighted distributed hash tables" (Schindelhauer and
 * Schomaker, 2005): score = -weight / ln(u), u uniform in (0, 1) from a hash
 * of (node, key), gives each node a share of keys proportional to its weight.
 *
 * Pure functions, no I/O, no state: safe from any thread.
 */
#ifndef LARDER_RENDEZVOUS_H
#define LARDER_RENDEZVOUS_H

#include <stddef.h>
#include <stdint.h>

/* A stable 64-bit hash of a node id (a NUL-terminated string). Every node
 * computes the same value for the same id, on any platform. */
uint64_t rdv_node_hash(const char *node_id);

/*
 * The index in [0, n) of the node that owns key, given each node's hash
 * (from rdv_node_hash) and weight. A node whose weight is not a positive
 * finite number is never picked. Returns SIZE_MAX when n == 0 or no node
 * can be picked. The key should already be a uniform 64-bit hash (e.g.
 * chunk_id_hash()); it is mixed again anyway, so small integers work too.
 */
size_t rdv_pick(const uint64_t *node_hashes, const double *weights, size_t n, uint64_t key);

#endif

/*
 * rendezvous.c - weighted rendezvous hashing (see rendezvous.h).
 *
 * Hashing. A node's id goes through 64-bit FNV-1a and then the splitmix64
 * finaliser (FNV alone mixes its last bytes poorly, and ids often differ
 * only in a trailing digit). The key goes through the same finaliser once
 * per pick, and each node's score through it again over node ^ mixed key:
 * the finaliser is a bijection with full avalanche, so u is uniform and
 * independent between nodes for a given key, and between keys for a node.
 *
 * Score. u in (0, 1) is the top 53 bits plus a half step, so it is never
 * 0 or 1 and -ln(u) is finite and positive. Then -w / ln(u) is the inverse
 * of an exponential variate with rate 1/w, whose maximum over nodes lands
 * on node i with probability w_i / sum(w).
 */
#include "cluster/rendezvous.h"

#include <math.h>

#include "base/fnv.h"
#include "base/splitmix.h"

uint64_t rdv_node_hash(const char *node_id)
{
	return splitmix_mix(fnv1a64(node_id));
}

size_t rdv_pick(const uint64_t *node_hashes, const double *weights, size_t n, uint64_t key)
{
	uint64_t k = splitmix_mix(key + SPLITMIX_GAMMA);
	size_t best = SIZE_MAX;
	double best_score = 0;

	for (size_t i = 0; i < n; i++) {
		double w = weights[i];
		if (!(w > 0) || !isfinite(w))
			continue;
		uint64_t h = splitmix_mix(node_hashes[i] ^ k);
		double u = ((double)(h >> 11) + 0.5) * 0x1p-53;
		double score = -w / log(u);
		/* Ties (vanishingly rare) go to the larger node hash, so the
		 * answer never depends on the order nodes are listed in. */
		if (best == SIZE_MAX || score > best_score ||
		    (score == best_score && node_hashes[i] > node_hashes[best])) {
			best = i;
			best_score = score;
		}
	}
	return best;
}

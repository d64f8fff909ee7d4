/*
 * policy_sim.c - replays training epochs through the tier policies
 * (store/policy.h) and reports hit ratios per epoch.
 *
 * The workload design.md warns about: N chunks read once per epoch, each
 * epoch in a new random order (a seeded Fisher-Yates shuffle), through a
 * cache of C chunks' worth of bytes. Every access is handled the way a
 * tier does it: a hit touches the entry; a miss asks policy_admit, then
 * evicts policy_victim() until the newcomer fits, then inserts. Chunk
 * hashes are the real chunk_id_hash of chunk_id_make, so SUBSET sees the
 * same values it sees in production.
 *
 * With sizes=mixed, chunks are 1 to 8 units (the tail chunks of objects
 * are short) and the cache holds C/N of the total bytes; both the hit
 * ratio (accesses) and the byte hit ratio are reported. The ideal for a
 * policy that cannot see the future order is the fraction of the data
 * that fits: C/N.
 *
 * Usage: policy_sim [-n chunks] [-c cache] [-e epochs] [-s seed]
 *                   [-z uniform|mixed] [out.json]
 * Prints a table to stdout; writes JSON to out.json when given.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/splitmix.h"
#include "store/chunk.h"
#include "store/policy.h"

struct sim_chunk {
	struct policy_entry pe;
	uint64_t hash;
	uint64_t bytes;
	bool in;
};

struct result {
	const char *name;
	double *hit;        /* per epoch: hits / accesses */
	double *byte_hit;   /* per epoch: bytes hit / bytes read */
};

static uint64_t rng;

static uint64_t rnd(void)
{
	return splitmix_next(&rng);
}

/* Uniform in [0, n) without modulo bias. */
static uint64_t rnd_below(uint64_t n)
{
	uint64_t limit = UINT64_MAX - UINT64_MAX % n, v;
	do
		v = rnd();
	while (v >= limit);
	return v % n;
}

static void shuffle(uint32_t *perm, size_t n)
{
	for (size_t i = n - 1; i > 0; i--) {
		size_t j = (size_t)rnd_below(i + 1);
		uint32_t t = perm[i];
		perm[i] = perm[j];
		perm[j] = t;
	}
}

static int parse_u64(const char *s, uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s || *end || s[0] == '-')
		return -1;
	*out = v;
	return 0;
}

static void usage(void)
{
	fprintf(stderr, "usage: policy_sim [-n chunks] [-c cache] [-e epochs] [-s seed] "
	        "[-z uniform|mixed] [out.json]\n");
}

/* Runs all epochs for one policy; the orders come from the seed, so every
 * policy sees the same sequence. Returns 0 or -1 (out of memory). */
static int run(enum policy_kind kind, struct sim_chunk *ch, size_t n, uint64_t capacity,
               unsigned epochs, uint64_t seed, struct result *res)
{
	uint32_t *perm = malloc(n * sizeof *perm);
	struct policy *p = policy_create(kind, capacity, 0); /* nothing goes stale */
	if (!perm || !p) {
		free(perm);
		policy_destroy(p);
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		perm[i] = (uint32_t)i;
		ch[i].in = false;
	}
	rng = seed;
	double now = 0;
	for (unsigned e = 0; e < epochs; e++) {
		uint64_t hits = 0, bytes = 0, bytes_hit = 0;
		shuffle(perm, n);
		for (size_t k = 0; k < n; k++) {
			struct sim_chunk *c = &ch[perm[k]];
			now += 0.001;
			bytes += c->bytes;
			if (c->in) {
				hits++;
				bytes_hit += c->bytes;
				policy_touch(p, &c->pe, now);
				continue;
			}
			if (!policy_admit(p, c->hash, c->bytes, now))
				continue;
			while (policy_used(p) + c->bytes > policy_capacity(p)) {
				struct sim_chunk *v = (struct sim_chunk *)(void *)policy_victim(p, now);
				if (!v)
					break;
				policy_remove(p, &v->pe);
				v->in = false;
			}
			policy_insert(p, &c->pe, c->hash, c->bytes, now);
			c->in = true;
		}
		res->hit[e] = (double)hits / (double)n;
		res->byte_hit[e] = bytes ? (double)bytes_hit / (double)bytes : 0;
	}
	int rc = policy_check(p);
	policy_destroy(p);
	free(perm);
	return rc;
}

static void json_array(FILE *f, const double *v, unsigned n)
{
	fputc('[', f);
	for (unsigned i = 0; i < n; i++)
		fprintf(f, "%s%.6f", i ? ", " : "", v[i]);
	fputc(']', f);
}

static int write_json(const char *path, uint64_t n, uint64_t c, unsigned epochs, uint64_t seed,
                      bool mixed, double ideal, const struct result *res, size_t nres)
{
	FILE *f = fopen(path, "w");
	if (!f) {
		fprintf(stderr, "policy_sim: %s: fopen() failed: %s\n", path, strerror(errno));
		return -1;
	}
	fprintf(f, "{\n  \"chunks\": %" PRIu64 ",\n  \"cache\": %" PRIu64 ",\n  \"epochs\": %u,\n"
	        "  \"seed\": %" PRIu64 ",\n  \"sizes\": \"%s\",\n  \"ideal\": %.6f,\n"
	        "  \"policies\": {\n", n, c, epochs, seed, mixed ? "mixed" : "uniform", ideal);
	for (size_t r = 0; r < nres; r++) {
		fprintf(f, "    \"%s\": {\"hit_ratio\": ", res[r].name);
		json_array(f, res[r].hit, epochs);
		fprintf(f, ", \"byte_hit_ratio\": ");
		json_array(f, res[r].byte_hit, epochs);
		fprintf(f, "}%s\n", r + 1 < nres ? "," : "");
	}
	fprintf(f, "  }\n}\n");
	if (fclose(f) != 0) {
		fprintf(stderr, "policy_sim: %s: fclose() failed: %s\n", path, strerror(errno));
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	uint64_t n = 20000, c = 10000, e = 3, seed = 1;
	bool mixed = false;
	int opt;

	while ((opt = getopt(argc, argv, "n:c:e:s:z:h")) != -1) {
		uint64_t *dst = NULL;
		switch (opt) {
		case 'n': dst = &n; break;
		case 'c': dst = &c; break;
		case 'e': dst = &e; break;
		case 's': dst = &seed; break;
		case 'z':
			if (strcmp(optarg, "mixed") == 0)
				mixed = true;
			else if (strcmp(optarg, "uniform") != 0) {
				usage();
				return 2;
			}
			continue;
		default:
			usage();
			return opt == 'h' ? 0 : 2;
		}
		if (parse_u64(optarg, dst) < 0) {
			fprintf(stderr, "policy_sim: -%c: not a number: %s\n", opt, optarg);
			return 2;
		}
	}
	if (argc - optind > 1 || n == 0 || n > UINT32_MAX || c == 0 || e == 0 || e > 1000) {
		usage();
		return 2;
	}
	const char *json = optind < argc ? argv[optind] : NULL;
	unsigned epochs = (unsigned)e;

	struct sim_chunk *ch = calloc((size_t)n, sizeof *ch);
	double *vals = calloc(4 * (size_t)epochs, sizeof *vals);
	if (!ch || !vals) {
		fprintf(stderr, "policy_sim: out of memory\n");
		return 1;
	}
	rng = seed ^ 0x5eedull;
	uint64_t total = 0;
	for (uint64_t i = 0; i < n; i++) {
		char key[32];
		struct chunk_id id;
		snprintf(key, sizeof key, "shard-%06" PRIu64, i);
		chunk_id_make("dataset", key, "\"etag\"", 0, &id);
		ch[i].hash = chunk_id_hash(&id);
		ch[i].bytes = mixed ? 1 + rnd_below(8) : 1;
		total += ch[i].bytes;
	}
	/* The cache holds C of N chunks: C/N of the bytes. */
	uint64_t capacity = mixed ? total * c / n : c;
	double ideal = c >= n ? 1.0 : (double)c / (double)n;

	struct result res[2] = {
		{ "subset", vals, vals + epochs },
		{ "lru", vals + 2 * epochs, vals + 3 * epochs },
	};
	const enum policy_kind kinds[2] = { POLICY_SUBSET, POLICY_LRU };
	for (int r = 0; r < 2; r++) {
		if (run(kinds[r], ch, (size_t)n, capacity, epochs, seed, &res[r]) < 0) {
			fprintf(stderr, "policy_sim: %s: out of memory or broken invariants\n",
			        res[r].name);
			return 1;
		}
	}

	printf("policy_sim: N=%" PRIu64 " chunks, C=%" PRIu64 ", %u epochs, seed %" PRIu64
	       ", sizes %s\n", n, c, epochs, seed, mixed ? "mixed (1-8 units)" : "uniform");
	printf("%-6s %10s %10s %10s", "epoch", "subset", "lru", "ideal");
	if (mixed)
		printf(" %12s %12s", "subset-bytes", "lru-bytes");
	printf("\n");
	for (unsigned i = 0; i < epochs; i++) {
		printf("%-6u %10.4f %10.4f %10.4f", i + 1, res[0].hit[i], res[1].hit[i], ideal);
		if (mixed)
			printf(" %12.4f %12.4f", res[0].byte_hit[i], res[1].byte_hit[i]);
		printf("\n");
	}
	int rc = 0;
	if (json && write_json(json, n, c, epochs, seed, mixed, ideal, res, 2) < 0)
		rc = 1;
	free(ch);
	free(vals);
	return rc;
}

/*
 * test_store_policy.c - the tier admission/eviction policy (store/policy.h):
 * invariants under random operations, SUBSET's stable subset, staleness,
 * LRU order.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "store/policy.h"

static uint64_t rng_state;

static uint64_t rnd(void)
{
	/* splitmix64: reproducible across libcs */
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

struct ent {
	struct policy_entry pe;
	bool in;
	uint64_t hash;
};

#define ENT(pe) ((struct ent *)(void *)(pe))

/* Admit-evict-insert, the way a tier uses the policy. Returns admitted. */
static bool offer(struct policy *p, struct ent *e, uint64_t bytes, double now)
{
	if (!policy_admit(p, e->hash, bytes, now))
		return false;
	while (policy_used(p) + bytes > policy_capacity(p)) {
		struct policy_entry *v = policy_victim(p, now);
		assert_non_null(v);
		policy_remove(p, v);
		ENT(v)->in = false;
	}
	policy_insert(p, &e->pe, e->hash, bytes, now);
	e->in = true;
	return true;
}

static void test_parse(void **state)
{
	(void)state;
	assert_int_equal(policy_kind_parse("subset"), POLICY_SUBSET);
	assert_int_equal(policy_kind_parse("LRU"), POLICY_LRU);
	assert_int_equal(policy_kind_parse("fifo"), -1);
	assert_int_equal(policy_kind_parse(NULL), -1);
	assert_string_equal(policy_kind_name(POLICY_SUBSET), "subset");
	assert_string_equal(policy_kind_name(POLICY_LRU), "lru");
}

static void random_ops(enum policy_kind k)
{
	enum { N = 400, OPS = 20000 };
	struct ent *e = calloc(N, sizeof *e);
	assert_non_null(e);
	rng_state = 42 + (uint64_t)k;
	struct policy *p = policy_create(k, 1000, 50);
	assert_non_null(p);
	for (int i = 0; i < N; i++)
		e[i].hash = rnd() % 1000; /* duplicates on purpose */

	double now = 0;
	for (int op = 0; op < OPS; op++) {
		struct ent *x = &e[rnd() % N];
		now += (double)(rnd() % 100) / 10.0;
		switch (rnd() % 4) {
		case 0: case 1:
			if (x->in)
				policy_touch(p, &x->pe, now);
			else
				offer(p, x, 1 + rnd() % 20, now);
			break;
		case 2:
			if (x->in) {
				policy_remove(p, &x->pe);
				x->in = false;
			}
			break;
		case 3: {
			struct policy_entry *v = policy_victim(p, now);
			if (v && rnd() % 2) {
				policy_remove(p, v);
				ENT(v)->in = false;
			}
			break;
		}
		}
		assert_int_equal(policy_check(p), 0);
		assert_true(policy_used(p) <= policy_capacity(p));
	}
	size_t n = 0;
	uint64_t bytes = 0;
	for (int i = 0; i < N; i++)
		if (e[i].in) {
			n++;
			bytes += e[i].pe.bytes;
		}
	assert_int_equal(n, policy_count(p));
	assert_int_equal(bytes, policy_used(p));
	policy_destroy(p);
	free(e);
}

static void test_random_subset(void **state)
{
	(void)state;
	random_ops(POLICY_SUBSET);
}

static void test_random_lru(void **state)
{
	(void)state;
	random_ops(POLICY_LRU);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* Whatever the order of arrival, SUBSET ends up holding the C smallest. */
static void test_subset_keeps_lowest(void **state)
{
	(void)state;
	enum { N = 2000, C = 100 };
	struct ent *e = calloc(N, sizeof *e);
	uint64_t *sorted = calloc(N, sizeof *sorted);
	assert_non_null(e);
	assert_non_null(sorted);
	rng_state = 7;
	for (int i = 0; i < N; i++)
		sorted[i] = e[i].hash = rnd();
	qsort(sorted, N, sizeof *sorted, cmp_u64);

	struct policy *p = policy_create(POLICY_SUBSET, C, 0); /* never stale */
	for (int pass = 0; pass < 2; pass++)
		for (int i = 0; i < N; i++) {
			struct ent *x = &e[(size_t)(i * 7919 + pass * 13) % N];
			if (x->in)
				policy_touch(p, &x->pe, 1.0 * i);
			else
				offer(p, x, 1, 1.0 * i);
		}
	assert_int_equal(policy_count(p), C);
	assert_int_equal(policy_check(p), 0);
	for (int i = 0; i < N; i++)
		assert_int_equal(e[i].in, e[i].hash <= sorted[C - 1]);
	/* A newcomer above the largest held is refused, below it admitted. */
	assert_false(policy_admit(p, sorted[C - 1] + 1, 1, 0));
	assert_true(policy_admit(p, sorted[C - 1] - 1, 1, 0));
	policy_destroy(p);
	free(e);
	free(sorted);
}

static void test_subset_admit_sizes(void **state)
{
	(void)state;
	struct ent e[3] = { { .hash = 10 }, { .hash = 20 }, { .hash = 30 } };
	struct policy *p = policy_create(POLICY_SUBSET, 6, 0);
	for (int i = 0; i < 3; i++)
		assert_true(offer(p, &e[i], 2, 0));
	assert_int_equal(policy_used(p), 6);
	assert_true(policy_admit(p, 25, 2, 0));  /* evicts 30 */
	assert_false(policy_admit(p, 35, 2, 0)); /* would evict 30 */
	assert_true(policy_admit(p, 15, 4, 0));  /* evicts 30 and 20 */
	assert_false(policy_admit(p, 25, 4, 0)); /* would evict 20 too */
	assert_false(policy_admit(p, 1, 7, 0));  /* larger than the tier */
	assert_true(policy_admit(p, 1, 6, 0));
	/* With 2 bytes reserved by others, a newcomer of 2 needs 4 evicted. */
	assert_true(policy_admit_reserved(p, 15, 2, 2, 0));
	assert_false(policy_admit_reserved(p, 25, 2, 2, 0));
	assert_false(policy_admit_reserved(p, 1, 6, 2, 0));
	assert_false(policy_admit_reserved(p, 1, 1, 100, 0));
	assert_ptr_equal(policy_victim(p, 0), &e[2].pe);
	policy_destroy(p);
}

static void test_staleness(void **state)
{
	(void)state;
	struct ent e[4] = { { .hash = 1 }, { .hash = 2 }, { .hash = 3 }, { .hash = 4 } };
	struct policy *p = policy_create(POLICY_SUBSET, 4, 10);
	for (int i = 0; i < 4; i++)
		assert_true(offer(p, &e[i], 1, (double)i));
	/* Nothing stale yet: the largest hash goes first; 99 is refused. */
	assert_ptr_equal(policy_victim(p, 5), &e[3].pe);
	assert_false(policy_admit(p, 99, 1, 5));
	/* At t=12.5, e[0] (t=0), e[1] (t=1) and e[2] (t=2) are idle > 10;
	 * e[0] was touched at t=5, so e[1] is the oldest stale one. */
	policy_touch(p, &e[0].pe, 5);
	assert_ptr_equal(policy_victim(p, 12.5), &e[1].pe);
	assert_true(policy_admit(p, 99, 1, 12.5));
	assert_true(policy_admit(p, 99, 2, 12.5));  /* e[1], e[2] */
	assert_false(policy_admit(p, 99, 3, 12.5)); /* would need e[0] or e[3]: fresh */
	assert_true(policy_admit(p, 3, 3, 12.5));   /* e[1], e[2] stale, then e[3] (4 > 3) */
	/* Evicting drains stale entries oldest first, then by hash. */
	struct ent n = { .hash = 99 };
	assert_true(offer(p, &n, 2, 12.5));
	assert_false(e[1].in);
	assert_false(e[2].in);
	assert_true(e[0].in && e[3].in);
	assert_int_equal(policy_check(p), 0);
	policy_destroy(p);
}

static void test_lru_order(void **state)
{
	(void)state;
	struct ent e[5];
	struct policy *p = policy_create(POLICY_LRU, 5, 0);
	for (int i = 0; i < 5; i++) {
		e[i] = (struct ent){ .hash = (uint64_t)(5 - i) };
		assert_true(offer(p, &e[i], 1, (double)i));
	}
	policy_touch(p, &e[1].pe, 10);
	policy_touch(p, &e[0].pe, 11);
	/* LRU admits everything that fits the tier. */
	assert_true(policy_admit(p, UINT64_MAX, 5, 12));
	assert_false(policy_admit(p, 0, 6, 12));
	const int order[5] = { 2, 3, 4, 1, 0 };
	for (int i = 0; i < 5; i++) {
		struct policy_entry *v = policy_victim(p, 12);
		assert_ptr_equal(v, &e[order[i]].pe);
		policy_remove(p, v);
		assert_int_equal(policy_check(p), 0);
	}
	assert_null(policy_victim(p, 12));
	assert_int_equal(policy_used(p), 0);
	policy_destroy(p);
}

/* Epochs over a dataset twice the cache: SUBSET hits C/N from epoch 2. */
static void test_subset_epochs(void **state)
{
	(void)state;
	enum { N = 2000, C = 1000 };
	struct ent *e = calloc(N, sizeof *e);
	int *perm = calloc(N, sizeof *perm);
	assert_non_null(e);
	assert_non_null(perm);
	rng_state = 99;
	for (int i = 0; i < N; i++) {
		e[i].hash = rnd();
		perm[i] = i;
	}
	struct policy *p = policy_create(POLICY_SUBSET, C, 0);
	double now = 0;
	int hits = 0;
	for (int epoch = 0; epoch < 3; epoch++) {
		for (int i = N - 1; i > 0; i--) {
			int j = (int)(rnd() % (uint64_t)(i + 1)), t = perm[i];
			perm[i] = perm[j];
			perm[j] = t;
		}
		hits = 0;
		for (int i = 0; i < N; i++) {
			struct ent *x = &e[perm[i]];
			now += 1;
			if (x->in) {
				hits++;
				policy_touch(p, &x->pe, now);
			} else {
				offer(p, x, 1, now);
			}
		}
	}
	assert_int_equal(hits, C); /* exactly the subset, every time */
	policy_destroy(p);
	free(e);
	free(perm);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse),
		cmocka_unit_test(test_random_subset),
		cmocka_unit_test(test_random_lru),
		cmocka_unit_test(test_subset_keeps_lowest),
		cmocka_unit_test(test_subset_admit_sizes),
		cmocka_unit_test(test_staleness),
		cmocka_unit_test(test_lru_order),
		cmocka_unit_test(test_subset_epochs),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

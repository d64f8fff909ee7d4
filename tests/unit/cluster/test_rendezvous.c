/* test_rendezvous.c - weighted rendezvous hashing: balance, weights,
 * minimal movement, determinism. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "cluster/rendezvous.h"

#define KEYS 100000
#define MAXN 16
#define TOLERANCE 0.05 /* each node's share within +-5% (relative) of its weight share */

static void make_nodes(size_t n, uint64_t *h)
{
	for (size_t i = 0; i < n; i++) {
		char id[32];
		snprintf(id, sizeof id, "node-%zu", i);
		h[i] = rdv_node_hash(id);
	}
}

/* Counts keys per node and checks each share against its weight share. */
static void check_balance(size_t n, const double *w, const char *label)
{
	uint64_t h[MAXN];
	size_t count[MAXN] = { 0 };
	double total = 0, worst = 0;
	make_nodes(n, h);
	for (size_t i = 0; i < n; i++)
		total += w[i];
	for (uint64_t k = 0; k < KEYS; k++) {
		size_t i = rdv_pick(h, w, n, k);
		assert_true(i < n);
		count[i]++;
	}
	for (size_t i = 0; i < n; i++) {
		double want = w[i] / total, got = (double)count[i] / KEYS;
		double dev = got / want - 1;
		if (dev < 0 ? -dev > worst : dev > worst)
			worst = dev < 0 ? -dev : dev;
		if (dev > TOLERANCE || dev < -TOLERANCE)
			fail_msg("%s: node %zu has %.4f of keys, weight share %.4f", label, i, got, want);
	}
	print_message("balance %s: worst node %.2f%% off its weight share\n", label, worst * 100);
}

static void test_balance_equal(void **state)
{
	double w[MAXN];
	for (size_t i = 0; i < MAXN; i++)
		w[i] = 1;
	check_balance(3, w, "3 equal");
	check_balance(5, w, "5 equal");
	check_balance(10, w, "10 equal");
	/* The scale of weights does not matter, only their ratios. */
	for (size_t i = 0; i < MAXN; i++)
		w[i] = 64.0 * 1024 * 1024 * 1024;
	check_balance(5, w, "5 equal, 64 GiB each");
}

static void test_weights(void **state)
{
	double w3[] = { 1, 2, 1 };
	check_balance(3, w3, "3 weighted 1:2:1");
	double w5[] = { 1, 2, 3, 4, 5 };
	check_balance(5, w5, "5 weighted 1..5");
	double w10[] = { 1, 1, 2, 2, 3, 3, 4, 4, 8, 8 };
	check_balance(10, w10, "10 weighted 1..8");

	/* Weight 2 gets about twice what weight 1 gets. */
	uint64_t h[2];
	double w[2] = { 1, 2 };
	size_t c[2] = { 0 };
	make_nodes(2, h);
	for (uint64_t k = 0; k < KEYS; k++)
		c[rdv_pick(h, w, 2, k)]++;
	double ratio = (double)c[1] / (double)c[0];
	print_message("weight 2 vs 1: %.3fx the keys\n", ratio);
	assert_true(ratio > 1.9 && ratio < 2.1);

	/* A node with no usable weight never owns anything. */
	double wz[3] = { 1, 0, -1 };
	uint64_t hz[3];
	make_nodes(3, hz);
	for (uint64_t k = 0; k < 1000; k++)
		assert_int_equal(rdv_pick(hz, wz, 3, k), 0);
	double wnone[2] = { 0, 0 };
	assert_int_equal(rdv_pick(hz, wnone, 2, 1), SIZE_MAX);
}

static void test_empty(void **state)
{
	assert_int_equal(rdv_pick(NULL, NULL, 0, 42), SIZE_MAX);
	uint64_t h = rdv_node_hash("only");
	double w = 1;
	assert_int_equal(rdv_pick(&h, &w, 1, 42), 0);
}

/* Removing one of n nodes moves exactly the keys it owned. */
static void check_remove(size_t n, size_t gone)
{
	uint64_t h[MAXN], h2[MAXN];
	double w[MAXN], w2[MAXN];
	size_t map[MAXN];
	make_nodes(n, h);
	size_t m = 0;
	for (size_t i = 0; i < n; i++) {
		w[i] = 1 + (double)(i % 3);
		if (i == gone)
			continue;
		h2[m] = h[i];
		w2[m] = w[i];
		map[m++] = i;
	}
	size_t moved = 0, owned = 0;
	for (uint64_t k = 0; k < KEYS; k++) {
		size_t before = rdv_pick(h, w, n, k), after = map[rdv_pick(h2, w2, m, k)];
		if (before == gone) {
			owned++;
			assert_int_not_equal(after, gone);
		} else {
			assert_int_equal(before, after);
		}
		moved += before != after;
	}
	assert_int_equal(moved, owned);
}

/* Adding a node to n moves only keys to it, about w_new / total of them. */
static void check_add(size_t n)
{
	uint64_t h[MAXN];
	double w[MAXN];
	make_nodes(n + 1, h);
	for (size_t i = 0; i <= n; i++)
		w[i] = 1;
	size_t moved = 0;
	for (uint64_t k = 0; k < KEYS; k++) {
		size_t before = rdv_pick(h, w, n, k), after = rdv_pick(h, w, n + 1, k);
		if (before != after) {
			assert_int_equal(after, n); /* never between existing nodes */
			moved++;
		}
	}
	double frac = (double)moved / KEYS, want = 1.0 / (double)(n + 1);
	print_message("adding node %zu to %zu moved %.4f of keys (ideal %.4f)\n", n + 1, n, frac,
	              want);
	assert_true(frac > want * (1 - TOLERANCE) && frac < want * (1 + TOLERANCE));
}

static void test_minimal_movement(void **state)
{
	check_remove(3, 0);
	check_remove(5, 2);
	check_remove(10, 9);
	check_add(3);
	check_add(5);
	check_add(10);
}

static void test_deterministic(void **state)
{
	/* Fixed values: the hash is part of the wire contract between nodes of
	 * different builds, so it must never change by accident. */
	assert_true(rdv_node_hash("node-a") == UINT64_C(0x82995e46723a0e5f));
	assert_true(rdv_node_hash("") == UINT64_C(0xf52a15e9a9b5e89b));
	uint64_t g[3] = { rdv_node_hash("node-a"), rdv_node_hash("node-b"), rdv_node_hash("node-c") };
	double gw[3] = { 1, 2, 3 };
	static const char owners[] = "2011120220222222";
	for (uint64_t k = 0; k < 16; k++)
		assert_int_equal(rdv_pick(g, gw, 3, k), owners[k] - '0');

	/* The owner does not depend on the order nodes are listed in. */
	uint64_t h[10], r[10];
	double w[10], rw[10];
	make_nodes(10, h);
	for (size_t i = 0; i < 10; i++) {
		w[i] = 1 + (double)i;
		r[9 - i] = h[i];
		rw[9 - i] = w[i];
	}
	for (uint64_t k = 0; k < 10000; k++) {
		size_t a = rdv_pick(h, w, 10, k * UINT64_C(0x9e3779b97f4a7c15));
		size_t b = rdv_pick(r, rw, 10, k * UINT64_C(0x9e3779b97f4a7c15));
		assert_int_equal(a, 9 - b);
		assert_int_equal(a, rdv_pick(h, w, 10, k * UINT64_C(0x9e3779b97f4a7c15)));
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_balance_equal),
		cmocka_unit_test(test_weights),
		cmocka_unit_test(test_empty),
		cmocka_unit_test(test_minimal_movement),
		cmocka_unit_test(test_deterministic),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

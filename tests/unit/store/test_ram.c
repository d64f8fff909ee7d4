/*
 * test_ram.c - the RAM tier (store/ram.h) through the tier interface
 * (store/tier.h): admission, hits that hand out the held chunk, the bound
 * with reservations, eviction onto the release list, drops and stats.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "store/ram.h"
#include "store/tier.h"

enum { CLEN = 4096, COST = CLEN + RAM_ENTRY_COST }; /* what a held chunk counts */

static struct chunk_id cid(uint64_t i)
{
	struct chunk_id id;
	chunk_id_make("bucket", "key", "\"etag\"", i, &id);
	return id;
}

/* A READY chunk i of CLEN bytes, reserved as the store reserves it. */
static struct chunk *ready(struct ram_tier *r, uint64_t i, struct tier_gone **gone)
{
	struct chunk_id id = cid(i);
	struct chunk *c = chunk_new(&id, CLEN);
	assert_non_null(c);
	unsigned char b[CLEN];
	memset(b, (int)i, sizeof b);
	chunk_append(c, b, sizeof b);
	chunk_set_state(c, CHUNK_READY, 0);
	ram_reserve(r, CLEN, 0.0, gone);
	return c;
}

static struct tier open_tier(uint64_t capacity)
{
	struct ram_tier *r = ram_open(capacity, POLICY_LRU, 0);
	assert_non_null(r);
	return (struct tier){ .ops = &ram_tier_ops, .t = r };
}

static int evicted_n;
static struct chunk_id evicted_last;

static void on_evicted(void *arg, const struct chunk_id *id)
{
	evicted_n++;
	evicted_last = *id;
}

static void t_admit_and_hit(void **state)
{
	struct tier t = open_tier(4 * COST);
	struct tier_gone *gone = NULL;
	struct chunk *c = ready(t.t, 1, &gone);
	struct tier_stats st;
	tier_get_stats(&t, &st);
	assert_int_equal(st.reserved, COST);
	assert_int_equal(st.used, COST);
	assert_int_equal(st.entries, 0);

	assert_int_equal(tier_admit(&t, c, NULL, &gone), 0);
	assert_null(gone);
	tier_get_stats(&t, &st);
	assert_int_equal(st.reserved, 0);
	assert_int_equal(st.used, COST);
	assert_int_equal(st.entries, 1);

	struct chunk_id id = cid(1);
	size_t len = 0;
	assert_true(tier_holds(&t, &id, &len));
	assert_int_equal(len, CLEN);
	/* A hit is the held chunk itself, with a reference for the caller. */
	struct chunk *h = ram_lookup(t.t, &id, CLEN, 1.0, &gone);
	assert_ptr_equal(h, c);
	assert_int_equal(chunk_refs(c), 3); /* ours, the tier's, the hit's */
	chunk_unref(h);
	chunk_unref(c);
	tier_close(&t);
}

/* Tiny objects cost memory beyond their bytes (the chunk, its entry): a
 * tier that counted their bytes only held a million one-byte chunks in a
 * megabyte, and hundreds of megabytes of heap. */
static void t_tiny_chunks_bounded_by_what_they_cost(void **state)
{
	struct tier t = open_tier(64 * 1024);
	for (uint64_t i = 0; i < 1000; i++) {
		struct tier_gone *gone = NULL;
		struct chunk_id id = cid(1000 + i);
		struct chunk *c = chunk_new(&id, 1);
		assert_non_null(c);
		chunk_append(c, "x", 1);
		chunk_set_state(c, CHUNK_READY, 0);
		ram_reserve(t.t, 1, 0.0, &gone);
		assert_int_equal(tier_admit(&t, c, NULL, &gone), 0);
		chunk_unref(c);
		tier_release(gone);
	}
	struct tier_stats st;
	tier_get_stats(&t, &st);
	assert_int_equal(st.entries, 64 * 1024 / (1 + RAM_ENTRY_COST));
	assert_true(st.used <= st.capacity);
	assert_int_equal(st.used, st.entries * (1 + RAM_ENTRY_COST));
	tier_close(&t);
}

static void t_wrong_length_is_evicted(void **state)
{
	struct tier t = open_tier(4 * COST);
	struct tier_gone *gone = NULL;
	struct chunk *c = ready(t.t, 2, &gone);
	tier_admit(&t, c, NULL, &gone);
	struct chunk_id id = cid(2);
	assert_null(ram_lookup(t.t, &id, CLEN - 1, 1.0, &gone));
	assert_non_null(gone);
	assert_int_equal(chunk_refs(c), 2); /* not released under the caller's locks */
	tier_release(gone);
	assert_int_equal(chunk_refs(c), 1);
	assert_false(tier_holds(&t, &id, NULL));
	chunk_unref(c);
	tier_close(&t);
}

static void t_bound_evicts_onto_release_list(void **state)
{
	struct tier t = open_tier(2 * COST);
	evicted_n = 0;
	tier_on_evict(&t, on_evicted, NULL);
	struct chunk *c[3];
	for (uint64_t i = 0; i < 3; i++) {
		struct tier_gone *gone = NULL;
		c[i] = ready(t.t, 10 + i, &gone);
		tier_admit(&t, c[i], NULL, &gone);
		tier_release(gone);
	}
	struct tier_stats st;
	tier_get_stats(&t, &st);
	assert_true(st.used <= 2 * COST);
	assert_int_equal(st.entries, 2);
	assert_int_equal(st.evictions, 1);
	assert_int_equal(evicted_n, 1);
	struct chunk_id first = cid(10);
	assert_memory_equal(&evicted_last, &first, sizeof first); /* LRU: the oldest */
	assert_false(tier_holds(&t, &first, NULL));
	assert_int_equal(chunk_refs(c[0]), 1);
	for (int i = 0; i < 3; i++)
		chunk_unref(c[i]);
	tier_close(&t);
}

static void t_overcommit_and_unreserve(void **state)
{
	struct tier t = open_tier(COST);
	struct tier_gone *gone = NULL;
	ram_reserve(t.t, CLEN, 0.0, &gone);
	ram_reserve(t.t, CLEN, 0.0, &gone);
	struct tier_stats st;
	tier_get_stats(&t, &st);
	assert_int_equal(st.reserved, 2 * COST);
	assert_int_equal(st.overcommits, 1);
	ram_unreserve(t.t, CLEN);
	ram_unreserve(t.t, CLEN);
	tier_get_stats(&t, &st);
	assert_int_equal(st.reserved, 0);
	assert_int_equal(st.used, 0);
	assert_null(gone);
	tier_close(&t);
}

static void t_drop(void **state)
{
	struct tier t = open_tier(4 * COST);
	struct tier_gone *gone = NULL;
	struct chunk *c = ready(t.t, 3, &gone);
	tier_admit(&t, c, NULL, &gone);
	struct chunk_id id = cid(3);
	tier_drop(&t, &id, &gone);
	tier_release(gone);
	assert_false(tier_holds(&t, &id, NULL));
	struct tier_stats st;
	tier_get_stats(&t, &st);
	assert_int_equal(st.entries, 0);
	assert_int_equal(st.used, 0);
	assert_int_equal(st.evictions, 1); /* a drop counts, as the store reports it */
	assert_int_equal(chunk_refs(c), 1);
	gone = NULL;
	tier_drop(&t, &id, &gone); /* not held: nothing happens */
	assert_null(gone);
	chunk_unref(c);
	tier_close(&t);
}

/* Admits chunk i (reserved as the store does); releases what went. */
static void admit(struct tier *t, uint64_t i)
{
	struct tier_gone *gone = NULL;
	struct chunk *c = ready(t->t, i, &gone);
	assert_int_equal(tier_admit(t, c, NULL, &gone), 0);
	chunk_unref(c);
	tier_release(gone);
}

static bool holds(struct tier *t, uint64_t i)
{
	struct chunk_id id = cid(i);
	return tier_holds(t, &id, NULL);
}

static void t_pinned_chunks_are_never_victims(void **state)
{
	struct tier t = open_tier(4 * COST);
	ram_pin_limit(t.t, 2 * CLEN);
	admit(&t, 1);
	admit(&t, 2);
	struct chunk_id one = cid(1);
	assert_int_equal(ram_pin(t.t, &one, CLEN), 0);
	assert_int_equal(ram_pin(t.t, &one, CLEN), 0); /* a second pin of it counts up */
	/* Chunk 1 is the least recent: LRU would evict it first. */
	for (uint64_t i = 3; i < 20; i++)
		admit(&t, i);
	assert_true(holds(&t, 1));
	assert_false(holds(&t, 2));
	struct tier_stats st;
	tier_get_stats(&t, &st);
	assert_int_equal(st.pinned, CLEN);
	assert_int_equal(st.pin_held, CLEN);
	assert_int_equal(st.used, CLEN + 3 * COST); /* pinned chunks count their bytes only */
	assert_int_equal(st.entries, 4);

	ram_unpin(t.t, &one);
	admit(&t, 20);
	admit(&t, 21);
	assert_true(holds(&t, 1)); /* still pinned once */
	ram_unpin(t.t, &one);
	tier_get_stats(&t, &st);
	assert_int_equal(st.pinned, 0);
	assert_int_equal(st.pin_held, 0);
	/* Back in the policy as just used: three newer chunks push it out. */
	for (uint64_t i = 22; i < 25; i++)
		admit(&t, i);
	assert_true(holds(&t, 1));
	admit(&t, 25);
	assert_false(holds(&t, 1));
	tier_close(&t);
}

static void t_pin_limit_and_pin_before_arrival(void **state)
{
	struct tier t = open_tier(4 * COST);
	struct chunk_id a = cid(1), b = cid(2), c = cid(3);
	assert_int_equal(ram_pin(t.t, &a, CLEN), -ENOSPC); /* no limit set: none allowed */
	ram_pin_limit(t.t, 2 * CLEN);
	assert_int_equal(ram_pin(t.t, &a, CLEN), 0);
	assert_int_equal(ram_pin(t.t, &b, CLEN), 0);
	assert_int_equal(ram_pin(t.t, &c, CLEN), -ENOSPC);
	/* Fill the tier with others, then the pinned ids arrive: admitted,
	 * evicting the others, and kept through more traffic. */
	for (uint64_t i = 10; i < 14; i++)
		admit(&t, i);
	admit(&t, 1);
	admit(&t, 2);
	for (uint64_t i = 14; i < 30; i++)
		admit(&t, i);
	assert_true(holds(&t, 1));
	assert_true(holds(&t, 2));
	struct tier_stats st;
	tier_get_stats(&t, &st);
	assert_int_equal(st.pinned, 2 * CLEN);
	assert_int_equal(st.used, 2 * CLEN + 2 * COST);
	/* A drop (purge) still removes a pinned chunk; the pin stays. */
	struct tier_gone *gone = NULL;
	tier_drop(&t, &a, &gone);
	tier_release(gone);
	assert_false(holds(&t, 1));
	tier_get_stats(&t, &st);
	assert_int_equal(st.pinned, CLEN);
	assert_int_equal(st.pin_held, 2 * CLEN);
	tier_close(&t);
}

/* Admits chunk i charged to charge (as a key's read would). */
static void admit_charged(struct tier *t, uint64_t i, unsigned charge)
{
	struct tier_gone *gone = NULL;
	struct chunk *c = ready(t->t, i, &gone);
	struct chunk_origin o = { .bucket = "bucket", .key = "key", .charge = charge };
	assert_int_equal(tier_admit(t, c, &o, &gone), 0);
	chunk_unref(c);
	tier_release(gone);
}

static void t_charge_limit_evicts_its_own_chunks(void **state)
{
	struct tier t = open_tier(16 * COST);
	/* Charge 2 (no limit) holds 6 chunks, read first. */
	for (uint64_t i = 100; i < 106; i++)
		admit_charged(&t, i, 2);
	assert_int_equal(ram_charge_limit(t.t, 1, 4 * CLEN, 0, NULL), 0);
	/* Charge 1 reads 20 chunks: it stays at its 4, the others all stay
	 * (there would have been room for 10 of charge 1's). */
	for (uint64_t i = 0; i < 20; i++)
		admit_charged(&t, i, 1);
	assert_int_equal(ram_charged(t.t, 1), 4 * CLEN);
	assert_int_equal(ram_charged(t.t, 2), 6 * CLEN);
	for (uint64_t i = 100; i < 106; i++)
		assert_true(holds(&t, i));
	for (uint64_t i = 16; i < 20; i++) /* LRU: its most recent */
		assert_true(holds(&t, i));
	/* A hit counts in the charge's own ranking too: chunk 16, just read,
	 * outlives 17 when the charge needs room. */
	struct tier_gone *hitgone = NULL;
	struct chunk_id sixteen = cid(16);
	struct chunk *hit = ram_lookup(t.t, &sixteen, CLEN, 1.0, &hitgone);
	assert_non_null(hit);
	chunk_unref(hit);
	admit_charged(&t, 20, 1);
	assert_true(holds(&t, 16));
	assert_false(holds(&t, 17));
	/* A hit by someone else does not move the charge; a chunk already
	 * here keeps its first charge. */
	admit_charged(&t, 100, 1);
	assert_int_equal(ram_charged(t.t, 2), 6 * CLEN);
	/* A lower limit evicts down to it at once; 0 lifts it. */
	struct tier_gone *gone = NULL;
	assert_int_equal(ram_charge_limit(t.t, 1, 2 * CLEN, 0, &gone), 0);
	tier_release(gone);
	assert_int_equal(ram_charged(t.t, 1), 2 * CLEN);
	assert_int_equal(ram_charge_limit(t.t, 1, 0, 0, NULL), 0);
	for (uint64_t i = 30; i < 34; i++)
		admit_charged(&t, i, 1);
	assert_int_equal(ram_charged(t.t, 1), 6 * CLEN);
	/* A limit below one chunk keeps nothing of it; pinned chunks count
	 * against no charge. */
	assert_int_equal(ram_charge_limit(t.t, 3, CLEN / 2, 0, NULL), 0);
	admit_charged(&t, 40, 3);
	assert_false(holds(&t, 40));
	ram_pin_limit(t.t, 4 * CLEN);
	struct chunk_id p = cid(41);
	assert_int_equal(ram_pin(t.t, &p, CLEN), 0);
	admit_charged(&t, 41, 3);
	assert_true(holds(&t, 41));
	assert_int_equal(ram_charged(t.t, 3), 0);
	/* Charge numbers are bounded; 0 is nobody. */
	assert_int_equal(ram_charge_limit(t.t, 0, CLEN, 0, NULL), -EINVAL);
	assert_int_equal(ram_charge_limit(t.t, RAM_CHARGE_MAX + 1, CLEN, 0, NULL), -EINVAL);
	assert_int_equal(ram_charged(t.t, 0), 0);
	tier_close(&t);
}

struct charger {
	struct tier *t;
	unsigned charge;
};

static void *charge_many(void *arg)
{
	struct charger *c = arg;
	for (uint64_t i = 0; i < 200; i++) {
		admit_charged(c->t, 1000 * c->charge + i, c->charge);
		if (i % 16 == 0) {
			struct tier_gone *gone = NULL;
			ram_charge_limit(c->t->t, 3 - c->charge, (i % 32 ? 2 : 3) * CLEN, i, &gone);
			tier_release(gone);
		}
		(void)ram_charged(c->t->t, 3 - c->charge);
	}
	return NULL;
}

/* Two threads charge, limit and read each other's charge (for TSan). */
static void t_charges_from_two_threads(void **state)
{
	struct tier t = open_tier(8 * COST);
	struct charger a = { &t, 1 }, b = { &t, 2 };
	pthread_t ta, tb;
	assert_int_equal(pthread_create(&ta, NULL, charge_many, &a), 0);
	assert_int_equal(pthread_create(&tb, NULL, charge_many, &b), 0);
	pthread_join(ta, NULL);
	pthread_join(tb, NULL);
	assert_true(ram_charged(t.t, 1) <= 3 * CLEN);
	assert_true(ram_charged(t.t, 2) <= 3 * CLEN);
	tier_close(&t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(t_admit_and_hit),
		cmocka_unit_test(t_wrong_length_is_evicted),
		cmocka_unit_test(t_bound_evicts_onto_release_list),
		cmocka_unit_test(t_overcommit_and_unreserve),
		cmocka_unit_test(t_drop),
		cmocka_unit_test(t_pinned_chunks_are_never_victims),
		cmocka_unit_test(t_pin_limit_and_pin_before_arrival),
		cmocka_unit_test(t_tiny_chunks_bounded_by_what_they_cost),
		cmocka_unit_test(t_charge_limit_evicts_its_own_chunks),
		cmocka_unit_test(t_charges_from_two_threads),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

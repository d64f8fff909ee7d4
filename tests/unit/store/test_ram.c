/*
 * test_ram.c - the RAM tier (store/ram.h) through the tier interface
 * (store/tier.h): admission, hits that hand out the held chunk, the bound
 * with reservations, eviction onto the release list, drops and stats.
 */
#include <errno.h>
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

enum { CLEN = 4096 };

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
	struct tier t = open_tier(4 * CLEN);
	struct tier_gone *gone = NULL;
	struct chunk *c = ready(t.t, 1, &gone);
	struct tier_stats st;
	tier_get_stats(&t, &st);
	assert_int_equal(st.reserved, CLEN);
	assert_int_equal(st.used, CLEN);
	assert_int_equal(st.entries, 0);

	assert_int_equal(tier_admit(&t, c, NULL, &gone), 0);
	assert_null(gone);
	tier_get_stats(&t, &st);
	assert_int_equal(st.reserved, 0);
	assert_int_equal(st.used, CLEN);
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

static void t_wrong_length_is_evicted(void **state)
{
	struct tier t = open_tier(4 * CLEN);
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
	struct tier t = open_tier(2 * CLEN);
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
	assert_true(st.used <= 2 * CLEN);
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
	struct tier t = open_tier(CLEN);
	struct tier_gone *gone = NULL;
	ram_reserve(t.t, CLEN, 0.0, &gone);
	ram_reserve(t.t, CLEN, 0.0, &gone);
	struct tier_stats st;
	tier_get_stats(&t, &st);
	assert_int_equal(st.reserved, 2 * CLEN);
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
	struct tier t = open_tier(4 * CLEN);
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
	struct tier t = open_tier(4 * CLEN);
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
	assert_int_equal(st.used, 4 * CLEN);
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
	struct tier t = open_tier(4 * CLEN);
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
	assert_int_equal(st.used, 4 * CLEN);
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
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

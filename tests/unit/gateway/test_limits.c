/* test_limits.c - the queue of a key's requests waiting for one of its
 * max_upstream_requests slots (gateway/limits.c): first come, first served,
 * and the oldest waiter woken when a slot is free for it, so that nobody
 * polls for one. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "gateway/limits.h"

struct waiter {
	struct limits_place place;
	int woken;
};

static void wake(void *arg)
{
	((struct waiter *)arg)->woken++;
}

static void waiter_init(struct waiter *w)
{
	*w = (struct waiter){ .place = { .wake = wake, .arg = w } };
}

/* A slot given back wakes the oldest waiter only; it takes it, and a
 * newcomer cannot go before the ones still waiting. */
static void test_give_wakes_the_oldest(void **state)
{
	(void)state;
	const char *key = "give";
	struct waiter a, b;
	waiter_init(&a);
	waiter_init(&b);
	assert_true(limits_upstream_take(key, 1));
	assert_false(limits_upstream_queue(key, 1, &a.place));
	assert_false(limits_upstream_queue(key, 1, &b.place));
	assert_true(a.place.queued && b.place.queued);
	limits_upstream_give(key);
	assert_int_equal(a.woken, 1);
	assert_int_equal(b.woken, 0);
	assert_false(limits_upstream_take(key, 1)); /* behind a and b */
	assert_false(limits_upstream_queue(key, 1, &b.place)); /* not its turn */
	assert_true(limits_upstream_queue(key, 1, &a.place));
	assert_false(a.place.queued);
	assert_int_equal(b.woken, 0); /* the slot a took was the only one */
	limits_upstream_give(key);
	assert_int_equal(b.woken, 1);
	assert_true(limits_upstream_queue(key, 1, &b.place));
	limits_upstream_give(key);
	assert_int_equal(a.woken, 1);
	assert_int_equal(b.woken, 1);
}

/* The oldest waiter leaving (its client gone, another reader fetched its
 * chunk) wakes the next when a slot is free; a later one leaving wakes
 * nobody. */
static void test_the_oldest_leaving_wakes_the_next(void **state)
{
	(void)state;
	const char *key = "leave";
	struct waiter a, b, c;
	waiter_init(&a);
	waiter_init(&b);
	waiter_init(&c);
	assert_true(limits_upstream_take(key, 1));
	assert_false(limits_upstream_queue(key, 1, &a.place));
	assert_false(limits_upstream_queue(key, 1, &b.place));
	assert_false(limits_upstream_queue(key, 1, &c.place));
	limits_upstream_unqueue(key, &b.place); /* not the oldest, no slot: nobody */
	assert_int_equal(a.woken + c.woken, 0);
	limits_upstream_unqueue(key, &a.place); /* the oldest, but no slot free */
	assert_int_equal(c.woken, 0);
	limits_upstream_give(key);
	assert_int_equal(c.woken, 1);
	struct waiter d;
	waiter_init(&d);
	assert_false(limits_upstream_queue(key, 1, &d.place)); /* behind c */
	limits_upstream_unqueue(key, &c.place); /* c went without: d's turn, a slot free */
	assert_int_equal(d.woken, 1);
	assert_true(limits_upstream_queue(key, 1, &d.place));
	limits_upstream_give(key);
	limits_upstream_unqueue(key, &d.place); /* not queued: no-op */
	assert_false(d.place.queued);
}

/* Two slots given back at once: the first waiter to take one wakes the
 * next, which fits too. */
static void test_a_taker_wakes_the_next_when_it_fits(void **state)
{
	(void)state;
	const char *key = "two";
	struct waiter a, b;
	waiter_init(&a);
	waiter_init(&b);
	assert_true(limits_upstream_take(key, 2));
	assert_true(limits_upstream_take(key, 2));
	assert_false(limits_upstream_queue(key, 2, &a.place));
	assert_false(limits_upstream_queue(key, 2, &b.place));
	limits_upstream_give(key);
	limits_upstream_give(key);
	assert_true(a.woken >= 1);
	assert_int_equal(b.woken, 0); /* a, first, has not taken yet */
	assert_true(limits_upstream_queue(key, 2, &a.place));
	assert_int_equal(b.woken, 1);
	assert_true(limits_upstream_queue(key, 2, &b.place));
	limits_upstream_give(key);
	limits_upstream_give(key);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_give_wakes_the_oldest),
		cmocka_unit_test(test_the_oldest_leaving_wakes_the_next),
		cmocka_unit_test(test_a_taker_wakes_the_next_when_it_fits),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

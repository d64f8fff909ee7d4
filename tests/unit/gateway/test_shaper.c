/* test_shaper.c - the per-prefix AIMD windows of gateway/shaper.c, and the order
 * in which waiting requests get a slot. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>
#include <pthread.h>

#include "gateway/shaper.h"

static struct shaper *make(unsigned max, unsigned min)
{
	struct shaper_settings s = { .window_max = max, .window_min = min, .wait_s = 2 };
	char err[128];
	struct shaper *sh = shaper_create(&s, err, sizeof err);
	assert_non_null(sh);
	return sh;
}

static void test_bad_settings(void **state)
{
	(void)state;
	char err[128];
	struct shaper_settings s = { .window_max = 4, .window_min = 0, .wait_s = 1 };
	assert_null(shaper_create(&s, err, sizeof err));
	s.window_min = 8;
	assert_null(shaper_create(&s, err, sizeof err));
}

/* Up to the window goes; the next waits; a release lets it go. */
static void test_window_bounds_inflight(void **state)
{
	(void)state;
	struct shaper *sh = make(4, 1);
	struct shaper_slot s[5];
	for (int i = 0; i < 5; i++)
		shaper_slot_init(&s[i], false);
	for (int i = 0; i < 4; i++)
		assert_int_equal(shaper_acquire(sh, &s[i], "b", "p/k", 0), SHAPER_GO);
	assert_int_equal(shaper_acquire(sh, &s[4], "b", "p/other", 0), SHAPER_WAIT);
	/* another prefix, another bucket: their own windows */
	struct shaper_slot o;
	shaper_slot_init(&o, false);
	assert_int_equal(shaper_acquire(sh, &o, "b", "q/k", 0), SHAPER_GO);
	shaper_release(sh, &o, 200, 0);
	shaper_slot_init(&o, false);
	assert_int_equal(shaper_acquire(sh, &o, "c", "p/k", 0), SHAPER_GO);
	shaper_release(sh, &o, 200, 0);
	shaper_release(sh, &s[0], 200, 0);
	assert_int_equal(shaper_acquire(sh, &s[4], "b", "p/k", 0.1), SHAPER_GO);
	assert_int_equal(shaper_waits(sh), 1);
	for (int i = 1; i < 5; i++)
		shaper_release(sh, &s[i], 200, 0);
	shaper_destroy(sh);
}

/* A SlowDown halves what was in flight, once for the requests sent
 * together; successes add one per window; the floor holds. */
static void test_aimd(void **state)
{
	(void)state;
	struct shaper *sh = make(64, 2);
	struct shaper_slot s[12];
	for (int i = 0; i < 12; i++) {
		shaper_slot_init(&s[i], false);
		assert_int_equal(shaper_acquire(sh, &s[i], "b", "p/k", 0), SHAPER_GO);
	}
	shaper_release(sh, &s[0], 503, 0);
	assert_true(shaper_window(sh, "b", "p/x") == 6);
	for (int i = 1; i < 12; i++)
		shaper_release(sh, &s[i], 503, 0); /* the same burst: no further cut */
	assert_true(shaper_window(sh, "b", "p/x") == 6);
	assert_int_equal(shaper_throttled(sh), 12);

	/* a new burst throttled: halved again, down to the floor */
	for (int round = 0; round < 3; round++) {
		struct shaper_slot t;
		shaper_slot_init(&t, false);
		assert_int_equal(shaper_acquire(sh, &t, "b", "p/k", 1), SHAPER_GO);
		shaper_release(sh, &t, 503, 1);
	}
	assert_true(shaper_window(sh, "b", "p/x") == 2);

	/* a window's worth of successes (2) grows 2 -> 3; the next window's
	 * worth within 200 ms of that does not */
	for (int i = 0; i < 4; i++) {
		struct shaper_slot t;
		shaper_slot_init(&t, false);
		assert_int_equal(shaper_acquire(sh, &t, "b", "p/k", 2), SHAPER_GO);
		shaper_release(sh, &t, 200, 2 + i * 0.01);
		assert_true(shaper_window(sh, "b", "p/x") == (i == 0 ? 2 : 3));
	}
	/* later it does, and never past the maximum */
	for (int i = 0; i < 10000; i++) {
		struct shaper_slot t;
		shaper_slot_init(&t, false);
		assert_int_equal(shaper_acquire(sh, &t, "b", "p/k", 3), SHAPER_GO);
		shaper_release(sh, &t, 404, 3 + i * 0.05);
		if (i == 0)
			assert_true(shaper_window(sh, "b", "p/x") == 4);
	}
	assert_true(shaper_window(sh, "b", "p/x") == 64);
	shaper_destroy(sh);
}

/* Background requests leave a quarter to demand reads and never go
 * while a demand read waits. */
static void test_demand_first(void **state)
{
	(void)state;
	struct shaper *sh = make(4, 1);
	struct shaper_slot bg[4], d[2];
	for (int i = 0; i < 4; i++)
		shaper_slot_init(&bg[i], true);
	for (int i = 0; i < 2; i++)
		shaper_slot_init(&d[i], false);
	for (int i = 0; i < 3; i++)
		assert_int_equal(shaper_acquire(sh, &bg[i], "b", "k", 0), SHAPER_GO);
	assert_int_equal(shaper_acquire(sh, &bg[3], "b", "k", 0), SHAPER_WAIT);
	assert_int_equal(shaper_acquire(sh, &d[0], "b", "k", 0), SHAPER_GO);
	assert_int_equal(shaper_acquire(sh, &d[1], "b", "k", 0), SHAPER_WAIT);
	shaper_release(sh, &bg[0], 200, 0);
	/* a slot is free, but a demand read waits: it is the demand read's */
	assert_int_equal(shaper_acquire(sh, &bg[3], "b", "k", 0.1), SHAPER_WAIT);
	assert_int_equal(shaper_acquire(sh, &d[1], "b", "k", 0.1), SHAPER_GO);
	shaper_release(sh, &d[0], 200, 0);
	/* nobody waits, but 3 of 4 are background's share */
	assert_int_equal(shaper_acquire(sh, &bg[3], "b", "k", 0.2), SHAPER_WAIT);
	shaper_release(sh, &bg[1], 200, 0);
	assert_int_equal(shaper_acquire(sh, &bg[3], "b", "k", 0.3), SHAPER_GO);
	for (int i = 2; i < 4; i++)
		shaper_release(sh, &bg[i], 200, 0);
	shaper_release(sh, &d[1], 200, 0);
	shaper_destroy(sh);
}

/* Waiting is bounded; giving up frees the demand read's place. */
static void test_wait_times_out(void **state)
{
	(void)state;
	struct shaper *sh = make(1, 1);
	struct shaper_slot a, b, c;
	shaper_slot_init(&a, false);
	shaper_slot_init(&b, false);
	shaper_slot_init(&c, true);
	assert_int_equal(shaper_acquire(sh, &a, "b", "k", 10), SHAPER_GO);
	assert_int_equal(shaper_acquire(sh, &b, "b", "k", 10), SHAPER_WAIT);
	assert_int_equal(shaper_acquire(sh, &b, "b", "k", 11), SHAPER_WAIT);
	assert_int_equal(shaper_acquire(sh, &b, "b", "k", 12), SHAPER_TIMEOUT);
	shaper_release(sh, &a, 200, 0);
	/* b gave up: a background request is not held back by it */
	assert_int_equal(shaper_acquire(sh, &c, "b", "k", 12), SHAPER_GO);
	shaper_release(sh, &c, 200, 0);
	/* a cancelled waiter too */
	assert_int_equal(shaper_acquire(sh, &a, "b", "k", 13), SHAPER_GO);
	shaper_slot_init(&b, false);
	assert_int_equal(shaper_acquire(sh, &b, "b", "k", 13), SHAPER_WAIT);
	shaper_cancel(sh, &b);
	shaper_release(sh, &a, 200, 0);
	shaper_slot_init(&c, true);
	assert_int_equal(shaper_acquire(sh, &c, "b", "k", 13), SHAPER_GO);
	shaper_release(sh, &c, 200, 0);
	shaper_destroy(sh);
}

/* Many prefixes: the table is bounded and idle entries are reused. */
static void test_many_prefixes(void **state)
{
	(void)state;
	struct shaper *sh = make(2, 1);
	char key[32];
	for (int i = 0; i < 100000; i++) {
		struct shaper_slot t;
		shaper_slot_init(&t, false);
		snprintf(key, sizeof key, "p%d/k", i);
		assert_int_equal(shaper_acquire(sh, &t, "b", key, 0), SHAPER_GO);
		shaper_release(sh, &t, 200, 0);
	}
	shaper_destroy(sh);
}

struct racer {
	struct shaper *sh;
	int n;
};

static void *race(void *arg)
{
	struct racer *r = arg;
	for (int i = 0; i < r->n; i++) {
		struct shaper_slot t;
		shaper_slot_init(&t, i % 3 == 0);
		double now = 0;
		enum shaper_verdict v;
		while ((v = shaper_acquire(r->sh, &t, "b", "p/k", now)) == SHAPER_WAIT)
			now += 0.001;
		if (v == SHAPER_GO)
			shaper_release(r->sh, &t, i % 7 == 0 ? 503 : 200, 0);
	}
	return NULL;
}

/* Two threads on one prefix: the counts come back to nothing in flight. */
static void test_threads(void **state)
{
	(void)state;
	struct shaper *sh = make(4, 1);
	struct racer r = { sh, 20000 };
	pthread_t a, b;
	pthread_create(&a, NULL, race, &r);
	pthread_create(&b, NULL, race, &r);
	pthread_join(a, NULL);
	pthread_join(b, NULL);
	struct shaper_slot s[4];
	double w = shaper_window(sh, "b", "p/k");
	for (unsigned i = 0; i < (unsigned)w; i++) {
		shaper_slot_init(&s[i], false);
		assert_int_equal(shaper_acquire(sh, &s[i], "b", "p/k", 0), SHAPER_GO);
	}
	for (unsigned i = 0; i < (unsigned)w; i++)
		shaper_release(sh, &s[i], 200, 0);
	shaper_destroy(sh);
}

/* A freed slot goes to the request that has waited longest, not to the
 * first to ask: under a burst, no reader waits out wait_s while later ones
 * go ahead. */
/* A freed slot goes to the request that has waited longest (a second or
 * more), not to the first to ask: under a burst, no reader waits out wait_s
 * while later ones go ahead. Waiters younger than that hold nobody up. */
static void test_waiters_served_in_order(void **state)
{
	(void)state;
	struct shaper *sh = make(2, 1); /* wait_s 2: the line counts from 1 s */
	struct shaper_slot held[2], w[4];
	for (int i = 0; i < 2; i++) {
		shaper_slot_init(&held[i], false);
		assert_int_equal(shaper_acquire(sh, &held[i], "b", "p/k", 0), SHAPER_GO);
	}
	for (int i = 0; i < 4; i++) {
		shaper_slot_init(&w[i], false);
		assert_int_equal(shaper_acquire(sh, &w[i], "b", "p/k", 0.1 * i), SHAPER_WAIT);
	}
	shaper_release(sh, &held[0], 200, 1.5);
	assert_int_equal(shaper_acquire(sh, &w[3], "b", "p/k", 1.5), SHAPER_WAIT);
	assert_int_equal(shaper_acquire(sh, &w[2], "b", "p/k", 1.5), SHAPER_WAIT);
	assert_int_equal(shaper_acquire(sh, &w[0], "b", "p/k", 1.5), SHAPER_GO);
	/* A newcomer queues behind the three still waiting. */
	struct shaper_slot late;
	shaper_slot_init(&late, false);
	shaper_release(sh, &held[1], 200, 1.6);
	assert_int_equal(shaper_acquire(sh, &late, "b", "p/k", 1.6), SHAPER_WAIT);
	assert_int_equal(shaper_acquire(sh, &w[2], "b", "p/k", 1.6), SHAPER_WAIT);
	assert_int_equal(shaper_acquire(sh, &w[1], "b", "p/k", 1.6), SHAPER_GO);
	/* One that gives up while it waits is out of the line. */
	shaper_cancel(sh, &w[2]);
	shaper_release(sh, &w[0], 200, 1.7);
	assert_int_equal(shaper_acquire(sh, &late, "b", "p/k", 1.7), SHAPER_WAIT);
	assert_int_equal(shaper_acquire(sh, &w[3], "b", "p/k", 1.7), SHAPER_GO);
	/* Only young waiters ahead: the first to ask takes the slot. */
	shaper_release(sh, &w[1], 200, 1.8);
	struct shaper_slot quick;
	shaper_slot_init(&quick, false);
	assert_int_equal(shaper_acquire(sh, &quick, "b", "p/k", 1.8), SHAPER_GO);
	shaper_release(sh, &quick, 200, 1.9);
	assert_int_equal(shaper_acquire(sh, &late, "b", "p/k", 1.9), SHAPER_GO);
	shaper_release(sh, &w[3], 200, 2.0);
	shaper_release(sh, &late, 200, 2.0);
	shaper_destroy(sh);
}

/* The line is per kind: a background request waiting ahead does not hold
 * up a demand read, and giving up its place frees no slot. */
static void test_background_in_line(void **state)
{
	(void)state;
	struct shaper *sh = make(4, 1);
	struct shaper_slot held[4], bg, d;
	for (int i = 0; i < 4; i++) {
		shaper_slot_init(&held[i], false);
		assert_int_equal(shaper_acquire(sh, &held[i], "b", "p/k", 0), SHAPER_GO);
	}
	shaper_slot_init(&bg, true);
	shaper_slot_init(&d, false);
	assert_int_equal(shaper_acquire(sh, &bg, "b", "p/k", 0), SHAPER_WAIT);
	assert_int_equal(shaper_acquire(sh, &d, "b", "p/k", 0.1), SHAPER_WAIT);
	shaper_release(sh, &held[0], 200, 0.2);
	assert_int_equal(shaper_acquire(sh, &bg, "b", "p/k", 0.2), SHAPER_WAIT);
	assert_int_equal(shaper_acquire(sh, &d, "b", "p/k", 0.2), SHAPER_GO);
	shaper_cancel(sh, &bg); /* it held nothing: still 4 in flight */
	struct shaper_slot more;
	shaper_slot_init(&more, false);
	assert_int_equal(shaper_acquire(sh, &more, "b", "p/k", 0.3), SHAPER_WAIT);
	shaper_cancel(sh, &more);
	for (int i = 1; i < 4; i++)
		shaper_release(sh, &held[i], 200, 0.4);
	shaper_release(sh, &d, 200, 0.4);
	shaper_destroy(sh);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bad_settings),
		cmocka_unit_test(test_window_bounds_inflight),
		cmocka_unit_test(test_aimd),
		cmocka_unit_test(test_demand_first),
		cmocka_unit_test(test_wait_times_out),
		cmocka_unit_test(test_waiters_served_in_order),
		cmocka_unit_test(test_background_in_line),
		cmocka_unit_test(test_many_prefixes),
		cmocka_unit_test(test_threads),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_shaper.c - the per-prefix AIMD windows of gateway/shaper.c, and the order
 * in which waiting requests get a slot. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>

#include "base/clock.h"
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
		shaper_slot_init(&s[i], false, NULL, NULL);
	for (int i = 0; i < 4; i++)
		assert_int_equal(shaper_acquire(sh, &s[i], "b", "p/k", 0), SHAPER_GO);
	assert_int_equal(shaper_acquire(sh, &s[4], "b", "p/other", 0), SHAPER_WAIT);
	/* another prefix, another bucket: their own windows */
	struct shaper_slot o;
	shaper_slot_init(&o, false, NULL, NULL);
	assert_int_equal(shaper_acquire(sh, &o, "b", "q/k", 0), SHAPER_GO);
	shaper_release(sh, &o, 200, 0);
	shaper_slot_init(&o, false, NULL, NULL);
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
		shaper_slot_init(&s[i], false, NULL, NULL);
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
		shaper_slot_init(&t, false, NULL, NULL);
		assert_int_equal(shaper_acquire(sh, &t, "b", "p/k", 1), SHAPER_GO);
		shaper_release(sh, &t, 503, 1);
	}
	assert_true(shaper_window(sh, "b", "p/x") == 2);

	/* a window's worth of successes (2) grows 2 -> 3; the next window's
	 * worth within 200 ms of that does not */
	for (int i = 0; i < 4; i++) {
		struct shaper_slot t;
		shaper_slot_init(&t, false, NULL, NULL);
		assert_int_equal(shaper_acquire(sh, &t, "b", "p/k", 2), SHAPER_GO);
		shaper_release(sh, &t, 200, 2 + i * 0.01);
		assert_true(shaper_window(sh, "b", "p/x") == (i == 0 ? 2 : 3));
	}
	/* later it does, and never past the maximum */
	for (int i = 0; i < 10000; i++) {
		struct shaper_slot t;
		shaper_slot_init(&t, false, NULL, NULL);
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
		shaper_slot_init(&bg[i], true, NULL, NULL);
	for (int i = 0; i < 2; i++)
		shaper_slot_init(&d[i], false, NULL, NULL);
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
	shaper_slot_init(&a, false, NULL, NULL);
	shaper_slot_init(&b, false, NULL, NULL);
	shaper_slot_init(&c, true, NULL, NULL);
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
	shaper_slot_init(&b, false, NULL, NULL);
	assert_int_equal(shaper_acquire(sh, &b, "b", "k", 13), SHAPER_WAIT);
	shaper_cancel(sh, &b);
	shaper_release(sh, &a, 200, 0);
	shaper_slot_init(&c, true, NULL, NULL);
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
		shaper_slot_init(&t, false, NULL, NULL);
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
		shaper_slot_init(&t, i % 3 == 0, NULL, NULL);
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
		shaper_slot_init(&s[i], false, NULL, NULL);
		assert_int_equal(shaper_acquire(sh, &s[i], "b", "p/k", 0), SHAPER_GO);
	}
	for (unsigned i = 0; i < (unsigned)w; i++)
		shaper_release(sh, &s[i], 200, 0);
	shaper_destroy(sh);
}

/* Threads that wait to be told, as workers do: each holds one place at a
 * time in a window of one, so every other acquire waits for the other
 * thread's release to hand its place over. */
struct teller {
	struct shaper_waker wk;
	struct shaper *sh;
	atomic_int wakes;
	bool placed;
	unsigned tenant;
	struct shaper_slot slot;
};

static void teller_wake(struct shaper_waker *wk)
{
	struct teller *t = (struct teller *)(void *)wk;
	atomic_fetch_add(&t->wakes, 1);
}

static void teller_placed(struct shaper_slot *slot)
{
	struct teller *t = list_item(slot, struct teller, slot);
	t->placed = true;
}

static void *tell_race(void *arg)
{
	struct teller *t = arg;
	for (int i = 0; i < 20000; i++) {
		shaper_slot_init(&t->slot, false, &t->wk, teller_placed);
		shaper_slot_tenant(&t->slot, t->tenant);
		t->placed = false;
		enum shaper_verdict v = shaper_acquire(t->sh, &t->slot, "b", "p/k", 0);
		while (v == SHAPER_WAIT && !t->placed) {
			shaper_tell(t->sh, &t->wk);
			if (!t->placed)
				sched_yield();
		}
		assert_int_equal(shaper_acquire(t->sh, &t->slot, "b", "p/k", 0), SHAPER_GO);
		shaper_release(t->sh, &t->slot, 200, 0);
	}
	return NULL;
}

static void test_threads_told(void **state)
{
	(void)state;
	struct shaper *sh = make(1, 1);
	struct teller t[2];
	pthread_t th[2];
	for (int i = 0; i < 2; i++) {
		memset(&t[i], 0, sizeof t[i]);
		t[i].sh = sh;
		t[i].tenant = (unsigned)i + 1; /* lanes of their own */
		shaper_waker_init(&t[i].wk, teller_wake);
		pthread_create(&th[i], NULL, tell_race, &t[i]);
	}
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	/* the place came back */
	struct shaper_slot x;
	shaper_slot_init(&x, false, NULL, NULL);
	assert_int_equal(shaper_acquire(sh, &x, "b", "p/k", 0), SHAPER_GO);
	shaper_release(sh, &x, 200, 0);
	shaper_destroy(sh);
}

/* A place that frees goes at once to the oldest waiter; a newcomer waits
 * behind the line; one that gives up is out of it. */
static void test_waiters_served_in_order(void **state)
{
	(void)state;
	struct shaper *sh = make(2, 1);
	struct shaper_slot held[2], w[4];
	for (int i = 0; i < 2; i++) {
		shaper_slot_init(&held[i], false, NULL, NULL);
		assert_int_equal(shaper_acquire(sh, &held[i], "b", "p/k", 0), SHAPER_GO);
	}
	for (int i = 0; i < 4; i++) {
		shaper_slot_init(&w[i], false, NULL, NULL);
		assert_int_equal(shaper_acquire(sh, &w[i], "b", "p/k", 0.1 * i), SHAPER_WAIT);
	}
	shaper_release(sh, &held[0], 200, 0.5);
	assert_int_equal(shaper_acquire(sh, &w[3], "b", "p/k", 0.5), SHAPER_WAIT);
	assert_int_equal(shaper_acquire(sh, &w[2], "b", "p/k", 0.5), SHAPER_WAIT);
	assert_int_equal(shaper_acquire(sh, &w[0], "b", "p/k", 0.5), SHAPER_GO);
	/* A newcomer queues behind the three still waiting, though it asks
	 * before the one whose place it is. */
	struct shaper_slot late;
	shaper_slot_init(&late, false, NULL, NULL);
	shaper_release(sh, &held[1], 200, 0.6);
	assert_int_equal(shaper_acquire(sh, &late, "b", "p/k", 0.6), SHAPER_WAIT);
	assert_int_equal(shaper_acquire(sh, &w[2], "b", "p/k", 0.6), SHAPER_WAIT);
	assert_int_equal(shaper_acquire(sh, &w[1], "b", "p/k", 0.6), SHAPER_GO);
	/* One that gives up while it waits is out of the line. */
	shaper_cancel(sh, &w[2]);
	shaper_release(sh, &w[0], 200, 0.7);
	assert_int_equal(shaper_acquire(sh, &late, "b", "p/k", 0.7), SHAPER_WAIT);
	assert_int_equal(shaper_acquire(sh, &w[3], "b", "p/k", 0.7), SHAPER_GO);
	shaper_release(sh, &w[1], 200, 0.8);
	assert_int_equal(shaper_acquire(sh, &late, "b", "p/k", 0.8), SHAPER_GO);
	/* Nobody waits: the first to ask goes. */
	shaper_release(sh, &w[3], 200, 0.9);
	struct shaper_slot quick;
	shaper_slot_init(&quick, false, NULL, NULL);
	assert_int_equal(shaper_acquire(sh, &quick, "b", "p/k", 0.9), SHAPER_GO);
	shaper_release(sh, &quick, 200, 1.0);
	shaper_release(sh, &late, 200, 1.0);
	assert_int_equal(shaper_waits(sh), 5);
	shaper_destroy(sh);
}

/* Which of the n slots that wait (waits[i]) got the place that freed: the
 * one whose acquire goes now (the others ask again and still wait). */
static int placed_one(struct shaper *sh, struct shaper_slot *s, bool *waits, int n, double now)
{
	int got = -1;
	for (int i = 0; i < n; i++)
		if (waits[i] && shaper_acquire(sh, &s[i], "b", "p/k", now) == SHAPER_GO) {
			assert_int_equal(got, -1);
			got = i;
			waits[i] = false;
		}
	return got;
}

/* Tenants take turns: a key with many fetches waiting (a reader's
 * read-ahead) does not keep another key's read waiting behind them all;
 * a tenant's own waiters keep their order, and a waiter that gives up
 * passes its tenant's turn to the next of its tenant's. */
static void test_tenants_take_turns(void **state)
{
	(void)state;
	struct shaper *sh = make(2, 1);
	/* 0, 1: tenant 1's, in flight; 2-7: tenant 1's, waiting (a reader's
	 * read-ahead); 8, 9: tenant 2's, waiting since later; 10: tenant 3's, last */
	struct shaper_slot w[11];
	bool waits[11];
	for (int i = 0; i < 11; i++) {
		shaper_slot_init(&w[i], false, NULL, NULL);
		shaper_slot_tenant(&w[i], i < 8 ? 1 : i < 10 ? 2 : 3);
		assert_int_equal(shaper_acquire(sh, &w[i], "b", "p/k", 0.01 * i),
		                 i < 2 ? SHAPER_GO : SHAPER_WAIT);
		waits[i] = i >= 2;
	}
	/* Each step: one finishes (and one waiting gives up, or -1), and the
	 * place goes to placed. 4 gives up: 5 is next of tenant 1's; then
	 * tenant 1 alone waits, in its order. */
	static const struct { int done, gives_up, placed; } steps[] = {
		{ 0, -1, 2 }, { 1, -1, 8 }, { 2, -1, 10 }, { 8, -1, 3 }, { 10, 4, 9 },
		{ 3, -1, 5 }, { 9, -1, 6 }, { 5, -1, 7 },
	};
	for (size_t k = 0; k < sizeof steps / sizeof steps[0]; k++) {
		double now = 0.1 * (double)(k + 1);
		if (steps[k].gives_up >= 0) {
			shaper_cancel(sh, &w[steps[k].gives_up]);
			waits[steps[k].gives_up] = false;
		}
		shaper_release(sh, &w[steps[k].done], 200, now);
		assert_int_equal(placed_one(sh, w, waits, 11, now), steps[k].placed);
	}
	shaper_release(sh, &w[6], 200, 1);
	shaper_release(sh, &w[7], 200, 1);
	shaper_destroy(sh);
}

/* Many tenants and both kinds waiting, giving up and finishing in a
 * random order: never more than the window in flight, and every waiter
 * that stays gets its place. */
static void test_lanes_random(void **state)
{
	(void)state;
	struct shaper *sh = make(3, 1);
	enum { N = 64 };
	static struct shaper_slot s[N];
	bool waits[N] = { 0 }, holds[N] = { 0 };
	unsigned seed = 7;
	for (int step = 0; step < 20000; step++) {
		seed = seed * 1103515245u + 12345u;
		int i = (int)((seed >> 8) % N);
		if (holds[i]) {
			shaper_release(sh, &s[i], 200, 0);
			holds[i] = false;
		} else if (waits[i] && (seed >> 20) % 4 == 0) {
			shaper_cancel(sh, &s[i]);
			waits[i] = false;
		} else if (!waits[i]) {
			shaper_slot_init(&s[i], (seed >> 24) % 5 == 0, NULL, NULL);
			shaper_slot_tenant(&s[i], (seed >> 16) % 4);
			waits[i] = true;
		}
		int n_held = 0;
		for (int k = 0; k < N; k++) {
			if (waits[k] && shaper_acquire(sh, &s[k], "b", "p/k", 0) == SHAPER_GO) {
				waits[k] = false;
				holds[k] = true;
			}
			n_held += holds[k];
		}
		assert_true(n_held <= 3);
	}
	for (int round = 0; round < N; round++)
		for (int k = 0; k < N; k++) {
			if (holds[k]) {
				shaper_release(sh, &s[k], 200, 0);
				holds[k] = false;
			}
			if (waits[k] && shaper_acquire(sh, &s[k], "b", "p/k", 0) == SHAPER_GO) {
				waits[k] = false;
				holds[k] = true;
			}
		}
	for (int k = 0; k < N; k++)
		assert_false(waits[k] || holds[k]);
	shaper_destroy(sh);
}

/* Lanes across threads, as the workers use them: each thread has its
 * waker and slots of random tenants and kinds, which wait, give up, are
 * told of their places and finish (now and then with a SlowDown, so the
 * window moves). Never more than the maximum in flight, and every waiter
 * that stays is told of its place: at the end all of them have finished. */
enum { LT_THREADS = 3, LT_SLOTS = 12, LT_MAX = 4 };

struct lane_thread {
	struct shaper_waker wk;
	struct shaper *sh;
	atomic_int *in_flight;
	atomic_int *worst;
	unsigned seed;
	struct shaper_slot s[LT_SLOTS];
	bool waits[LT_SLOTS], holds[LT_SLOTS], placed[LT_SLOTS];
	long done;
	bool stuck;             /* a waiter never heard of its place */
};

static void lt_wake(struct shaper_waker *wk)
{
	(void)wk; /* each thread tells its own waker as it goes */
}

static void lt_placed(struct shaper_slot *slot);
static struct lane_thread lts[LT_THREADS];

static void lt_hold(struct lane_thread *t, int i)
{
	t->waits[i] = false;
	t->holds[i] = true;
	int n = atomic_fetch_add(t->in_flight, 1) + 1;
	int w = atomic_load(t->worst);
	while (n > w && !atomic_compare_exchange_weak(t->worst, &w, n))
		;
}

static void lt_placed(struct shaper_slot *slot)
{
	for (int k = 0; k < LT_THREADS; k++)
		if (slot >= lts[k].s && slot < lts[k].s + LT_SLOTS)
			lts[k].placed[slot - lts[k].s] = true;
}

/* Tells the waker, and takes the places it was told of. */
static void lt_take(struct lane_thread *t)
{
	shaper_tell(t->sh, &t->wk);
	for (int i = 0; i < LT_SLOTS; i++)
		if (t->placed[i]) {
			t->placed[i] = false;
			assert_true(t->waits[i]);
			assert_int_equal(shaper_acquire(t->sh, &t->s[i], "b", "p/k", 0), SHAPER_GO);
			lt_hold(t, i);
		}
}

static void lt_release(struct lane_thread *t, int i, long status)
{
	atomic_fetch_sub(t->in_flight, 1);
	t->holds[i] = false;
	shaper_release(t->sh, &t->s[i], status, clock_mono_s());
	t->done++;
}

static void *lanes_thread(void *arg)
{
	struct lane_thread *t = arg;
	double end = clock_mono_s() + 1.5;
	while (clock_mono_s() < end) {
		t->seed = t->seed * 1103515245u + 12345u;
		int i = (int)((t->seed >> 8) % LT_SLOTS);
		if (t->holds[i]) {
			lt_release(t, i, (t->seed >> 20) % 16 == 0 ? 503 : 200);
		} else if (t->waits[i] && (t->seed >> 20) % 4 == 0) {
			shaper_cancel(t->sh, &t->s[i]);
			t->waits[i] = t->placed[i] = false;
		} else if (!t->waits[i]) {
			shaper_slot_init(&t->s[i], (t->seed >> 24) % 5 == 0, &t->wk, lt_placed);
			shaper_slot_tenant(&t->s[i], (t->seed >> 16) % 5);
			t->waits[i] = true;
			if (shaper_acquire(t->sh, &t->s[i], "b", "p/k", 0) == SHAPER_GO)
				lt_hold(t, i);
		}
		lt_take(t);
	}
	/* Finish: what it holds goes back; what waits must hear of its place
	 * as the other threads finish theirs. */
	double give_up = clock_mono_s() + 10;
	for (bool busy = true; busy && !t->stuck;) {
		t->stuck = clock_mono_s() > give_up;
		busy = false;
		for (int i = 0; i < LT_SLOTS; i++) {
			if (t->holds[i])
				lt_release(t, i, 200);
			busy |= t->waits[i];
		}
		lt_take(t);
		if (busy)
			sched_yield();
	}
	return NULL;
}

static void test_lanes_threads(void **state)
{
	(void)state;
	struct shaper *sh = make(LT_MAX, 1);
	atomic_int in_flight = 0, worst = 0;
	pthread_t th[LT_THREADS];
	for (int k = 0; k < LT_THREADS; k++) {
		memset(&lts[k], 0, sizeof lts[k]);
		lts[k].sh = sh;
		lts[k].in_flight = &in_flight;
		lts[k].worst = &worst;
		lts[k].seed = 11u + (unsigned)k;
		shaper_waker_init(&lts[k].wk, lt_wake);
		pthread_create(&th[k], NULL, lanes_thread, &lts[k]);
	}
	long done = 0;
	for (int k = 0; k < LT_THREADS; k++) {
		pthread_join(th[k], NULL);
		done += lts[k].done;
		assert_false(lts[k].stuck);
	}
	assert_true(worst <= LT_MAX);
	assert_int_equal(in_flight, 0);
	assert_true(done > 100 && shaper_waits(sh) > 100); /* the lanes were used */
	/* every place came back: the window's worth go at once */
	double w = shaper_window(sh, "b", "p/k");
	struct shaper_slot x[LT_MAX];
	for (unsigned i = 0; i < (unsigned)w; i++) {
		shaper_slot_init(&x[i], false, NULL, NULL);
		assert_int_equal(shaper_acquire(sh, &x[i], "b", "p/k", 0), SHAPER_GO);
	}
	for (unsigned i = 0; i < (unsigned)w; i++)
		shaper_release(sh, &x[i], 200, 0);
	shaper_destroy(sh);
}

/* A waker per thread, as the gateway has one per worker: it counts its
 * wakes, and shaper_tell says which slots have their places. */
struct test_waker {
	struct shaper_waker wk;
	int wakes;
	struct shaper *sh;
	int told[8];
	int n_told;
};

static struct shaper_slot tslots[8];

static void test_wake(struct shaper_waker *wk)
{
	struct test_waker *t = (struct test_waker *)(void *)wk;
	t->wakes++;
}

static struct test_waker *told_to;

static void test_placed(struct shaper_slot *slot)
{
	/* a placed slot asks again, as the gateway's fetches do: it goes */
	assert_int_equal(shaper_acquire(told_to->sh, slot, "b", "p/k", 1), SHAPER_GO);
	told_to->told[told_to->n_told++] = (int)(slot - tslots);
}

/* A waiter hears of its place from the thread that freed it: its waker is
 * woken under the release, before anybody asks again, and the places go
 * out in the order the waiters came. A waiter that gives up after it was
 * given its place, before it heard, passes the place on. */
static void test_waiters_told(void **state)
{
	(void)state;
	struct shaper *sh = make(2, 1);
	struct test_waker a = { .sh = sh }, b = { .sh = sh };
	shaper_waker_init(&a.wk, test_wake);
	shaper_waker_init(&b.wk, test_wake);
	for (int i = 0; i < 6; i++) {
		shaper_slot_init(&tslots[i], false, i % 2 ? &b.wk : &a.wk, test_placed);
		assert_int_equal(shaper_acquire(sh, &tslots[i], "b", "p/k", 0),
		                 i < 2 ? SHAPER_GO : SHAPER_WAIT);
	}
	assert_true(shaper_wait_left(sh, &tslots[2], 0.5) > 1.49 &&
	            shaper_wait_left(sh, &tslots[2], 0.5) < 1.51);
	assert_int_equal(a.wakes + b.wakes, 0);
	shaper_release(sh, &tslots[0], 200, 0.5); /* to 2 (a's) */
	shaper_release(sh, &tslots[1], 200, 0.5); /* to 3 (b's) */
	assert_int_equal(a.wakes, 1);
	assert_int_equal(b.wakes, 1);
	/* 4 comes next, but gives up before 2's place is passed on */
	shaper_release(sh, &tslots[2], 200, 0.6);
	assert_int_equal(a.wakes, 2);
	shaper_cancel(sh, &tslots[4]); /* a's 4 had the place: now 5 (b's) */
	assert_int_equal(b.wakes, 2);
	told_to = &a;
	shaper_tell(sh, &a.wk);
	assert_int_equal(a.n_told, 0); /* 2 was released, 4 gave up: nothing */
	told_to = &b;
	shaper_tell(sh, &b.wk);
	assert_int_equal(b.n_told, 2);
	assert_int_equal(b.told[0], 3);
	assert_int_equal(b.told[1], 5);
	shaper_release(sh, &tslots[3], 200, 1);
	shaper_release(sh, &tslots[5], 200, 1);
	/* all back: two go at once */
	struct shaper_slot x[2];
	for (int i = 0; i < 2; i++) {
		shaper_slot_init(&x[i], false, NULL, NULL);
		assert_int_equal(shaper_acquire(sh, &x[i], "b", "p/k", 2), SHAPER_GO);
		shaper_release(sh, &x[i], 200, 2);
	}
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
		shaper_slot_init(&held[i], false, NULL, NULL);
		assert_int_equal(shaper_acquire(sh, &held[i], "b", "p/k", 0), SHAPER_GO);
	}
	shaper_slot_init(&bg, true, NULL, NULL);
	shaper_slot_init(&d, false, NULL, NULL);
	assert_int_equal(shaper_acquire(sh, &bg, "b", "p/k", 0), SHAPER_WAIT);
	assert_int_equal(shaper_acquire(sh, &d, "b", "p/k", 0.1), SHAPER_WAIT);
	shaper_release(sh, &held[0], 200, 0.2);
	assert_int_equal(shaper_acquire(sh, &bg, "b", "p/k", 0.2), SHAPER_WAIT);
	assert_int_equal(shaper_acquire(sh, &d, "b", "p/k", 0.2), SHAPER_GO);
	shaper_cancel(sh, &bg); /* it held nothing: still 4 in flight */
	struct shaper_slot more;
	shaper_slot_init(&more, false, NULL, NULL);
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
		cmocka_unit_test(test_tenants_take_turns),
		cmocka_unit_test(test_lanes_random),
		cmocka_unit_test(test_waiters_told),
		cmocka_unit_test(test_background_in_line),
		cmocka_unit_test(test_many_prefixes),
		cmocka_unit_test(test_threads),
		cmocka_unit_test(test_threads_told),
		cmocka_unit_test(test_lanes_threads),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

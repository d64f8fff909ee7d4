/* test_limits.c - the queue of a key's requests waiting for one of its
 * max_upstream_requests slots (gateway/limits.c): first come, first served,
 * and the oldest waiter woken when a slot is free for it, so that nobody
 * polls for one. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "base/clock.h"
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

/* Threads as the workers: each has requests of one key that queue, are
 * woken (from any thread, as slots come back), ask again, give up, or take
 * a slot without queueing. Never more than max slots taken, and every
 * request that stays in the queue is woken and gets its slot: at the end
 * nobody waits. */
enum { QT_THREADS = 3, QT_PLACES = 10, QT_MAX = 3 };

struct qt_req {
	struct limits_place place;
	atomic_int woken;
	bool holds;
};

struct qt_thread {
	atomic_int *taken, *worst;
	unsigned seed;
	struct qt_req r[QT_PLACES];
	long done;
	bool stuck;             /* a request in the queue was never woken */
};

static void qt_wake(void *arg)
{
	atomic_store(&((struct qt_req *)arg)->woken, 1);
}

static void qt_hold(struct qt_thread *t, struct qt_req *q)
{
	q->holds = true;
	int n = atomic_fetch_add(t->taken, 1) + 1;
	int w = atomic_load(t->worst);
	while (n > w && !atomic_compare_exchange_weak(t->worst, &w, n))
		;
}

static void qt_give(struct qt_thread *t, struct qt_req *q)
{
	q->holds = false;
	atomic_fetch_sub(t->taken, 1);
	limits_upstream_give("threads");
	t->done++;
}

/* Woken requests ask again. */
static void qt_ask_again(struct qt_thread *t)
{
	for (int i = 0; i < QT_PLACES; i++) {
		struct qt_req *q = &t->r[i];
		if (q->place.queued && atomic_exchange(&q->woken, 0) &&
		    limits_upstream_queue("threads", QT_MAX, &q->place))
			qt_hold(t, q);
	}
}

static void *queue_thread(void *arg)
{
	struct qt_thread *t = arg;
	double end = clock_mono_s() + 1.5;
	while (clock_mono_s() < end) {
		t->seed = t->seed * 1103515245u + 12345u;
		struct qt_req *q = &t->r[(t->seed >> 8) % QT_PLACES];
		if (q->holds) {
			qt_give(t, q);
		} else if (q->place.queued && (t->seed >> 20) % 4 == 0) {
			limits_upstream_unqueue("threads", &q->place);
		} else if (!q->place.queued && (t->seed >> 20) % 5 == 0) {
			if (limits_upstream_take("threads", QT_MAX))
				qt_hold(t, q);
		} else if (!q->place.queued) {
			atomic_store(&q->woken, 0);
			if (limits_upstream_queue("threads", QT_MAX, &q->place))
				qt_hold(t, q);
		}
		qt_ask_again(t);
	}
	double give_up = clock_mono_s() + 10;
	for (bool busy = true; busy && !t->stuck;) {
		t->stuck = clock_mono_s() > give_up;
		busy = false;
		for (int i = 0; i < QT_PLACES; i++) {
			if (t->r[i].holds)
				qt_give(t, &t->r[i]);
			busy |= t->r[i].place.queued;
		}
		qt_ask_again(t);
		if (busy)
			sched_yield();
	}
	return NULL;
}

static void test_threads(void **state)
{
	(void)state;
	static struct qt_thread th[QT_THREADS];
	atomic_int taken = 0, worst = 0;
	pthread_t id[QT_THREADS];
	for (int k = 0; k < QT_THREADS; k++) {
		th[k] = (struct qt_thread){ .taken = &taken, .worst = &worst, .seed = 5u + (unsigned)k };
		for (int i = 0; i < QT_PLACES; i++)
			th[k].r[i].place = (struct limits_place){ .wake = qt_wake, .arg = &th[k].r[i] };
		pthread_create(&id[k], NULL, queue_thread, &th[k]);
	}
	long done = 0;
	for (int k = 0; k < QT_THREADS; k++) {
		pthread_join(id[k], NULL);
		assert_false(th[k].stuck);
		done += th[k].done;
	}
	assert_true(worst <= QT_MAX);
	assert_int_equal(taken, 0);
	assert_true(done > 100);
	for (int i = 0; i < QT_MAX; i++) /* every slot came back */
		assert_true(limits_upstream_take("threads", QT_MAX));
	assert_false(limits_upstream_take("threads", QT_MAX));
	for (int i = 0; i < QT_MAX; i++)
		limits_upstream_give("threads");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_give_wakes_the_oldest),
		cmocka_unit_test(test_the_oldest_leaving_wakes_the_next),
		cmocka_unit_test(test_a_taker_wakes_the_next_when_it_fits),
		cmocka_unit_test(test_threads),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

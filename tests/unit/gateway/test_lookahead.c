/*
 * test_lookahead.c - gateway/lookahead.c against a stand-in prefetch (the
 * functions of prefetch.h it calls are defined here): where the gate goes as
 * reads arrive, byte windows as sizes are learnt, manifests, the idle and done ends, out-of-memory paths, and
 * reads from two threads at once (run under TSan too).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <ev.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/clock.h"
#include "gateway/lookahead.h"
#include "gateway/prefetch.h"
#include "gateway/server.h"

/* ---- the stand-in prefetch ------------------------------------------------------- */

static pthread_mutex_t stub_lock = PTHREAD_MUTEX_INITIALIZER;
static size_t started_keys, gate, skip_to;
static unsigned started_conc, cancels;
static bool started_gated;
static char job_state[16] = "warming";
static const char *manifest_text; /* NULL: the manifest cannot be read */
static void (*sized_fn)(void *arg, const char *job, size_t index, uint64_t size);
static void *sized_arg;

int prefetch_start(struct prefetch *p, const struct prefetch_req *rq, char id[24], char *err,
                   size_t errlen)
{
	(void)p, (void)err, (void)errlen;
	pthread_mutex_lock(&stub_lock);
	started_keys = rq->n_keys;
	started_conc = rq->concurrency;
	started_gated = rq->gated;
	sized_fn = rq->sized;
	sized_arg = rq->sized_arg;
	gate = skip_to = 0;
	snprintf(id, 24, "pf-1");
	pthread_mutex_unlock(&stub_lock);
	return 0;
}

int prefetch_gate(struct prefetch *p, const char *id, size_t from, size_t n)
{
	(void)p, (void)id;
	pthread_mutex_lock(&stub_lock);
	if (n > gate)
		gate = n;
	if (from > skip_to)
		skip_to = from;
	pthread_mutex_unlock(&stub_lock);
	return 0;
}

int prefetch_get(struct prefetch *p, const char *id, struct prefetch_info *out)
{
	(void)p, (void)id;
	memset(out, 0, sizeof *out);
	pthread_mutex_lock(&stub_lock);
	snprintf(out->state, sizeof out->state, "%s", job_state);
	out->objects_done = gate;
	pthread_mutex_unlock(&stub_lock);
	return 0;
}

int prefetch_cancel(struct prefetch *p, const char *id)
{
	(void)p, (void)id;
	pthread_mutex_lock(&stub_lock);
	cancels++;
	pthread_mutex_unlock(&stub_lock);
	return 0;
}

int prefetch_read_object(struct gw *gw, const char *bucket, const char *key, struct buf *body,
                         char *err, size_t errlen)
{
	(void)gw, (void)bucket;
	if (!manifest_text) {
		snprintf(err, errlen, "reading %s: upstream answered 404", key);
		return -1;
	}
	return buf_puts(body, manifest_text) == 0 ? 0 : -1;
}

static size_t gate_now(void)
{
	pthread_mutex_lock(&stub_lock);
	size_t g = gate;
	pthread_mutex_unlock(&stub_lock);
	return g;
}

/* Keys below it the job skips unless it started them. */
static size_t skip_now(void)
{
	pthread_mutex_lock(&stub_lock);
	size_t s = skip_to;
	pthread_mutex_unlock(&stub_lock);
	return s;
}

/* The job learnt key index's size. */
static void learn(size_t index, uint64_t size)
{
	assert_non_null(sized_fn);
	sized_fn(sized_arg, "pf-1", index, size);
}

/* ---- fixtures ---------------------------------------------------------------------- */

struct fx {
	struct worker w;
	struct lookaheads *l;
};

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof *f);
	f->w.loop = ev_loop_new(EVFLAG_AUTO);
	f->l = lookahead_create(NULL, &f->w, (struct prefetch *)f, 60);
	snprintf(job_state, sizeof job_state, "warming");
	cancels = 0;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;
	lookahead_destroy(f->l);
	ev_loop_destroy(f->w.loop);
	free(f);
	return 0;
}

static const char *const ten[] = { "k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8", "k9" };

static void start_ten(struct fx *f, size_t window, double idle_s, char id[24])
{
	struct lookahead_req rq = {
		.bucket = "b", .keys = ten, .n_keys = 10, .window = window, .idle_s = idle_s
	};
	char err[256];
	assert_int_equal(lookahead_start(f->l, &rq, id, err, sizeof err), 0);
}

static struct lookahead_info info_of(struct fx *f)
{
	struct lookahead_info out[4];
	assert_int_equal(lookahead_list(f->l, out, 4), 1);
	return out[0];
}

/* Runs the loop for about s seconds (the sweep timer). */
static void run_for(struct fx *f, double s)
{
	double end = clock_mono_s() + s;
	while (clock_mono_s() < end) {
		ev_run(f->w.loop, EVRUN_NOWAIT);
		nanosleep(&(struct timespec){ .tv_nsec = 10 * 1000 * 1000 }, NULL);
	}
}

/* ---- tests ------------------------------------------------------------------------- */

static void test_gate_follows_the_furthest_read(void **state)
{
	struct fx *f = *state;
	char id[24];
	start_ten(f, 3, 0, id);
	assert_string_equal(id, "la-1");
	assert_int_equal(started_keys, 10);
	assert_true(started_gated);
	assert_int_equal(started_conc, 32);
	assert_int_equal(gate_now(), 3); /* the first window at once */
	assert_int_equal(skip_now(), 0);
	double now = clock_mono_s();
	lookahead_note_read(f->l, "b", "k2", now);
	assert_int_equal(gate_now(), 6);
	assert_int_equal(skip_now(), 0); /* k0-k2: within a window behind it */
	assert_int_equal(info_of(f).position, 3);
	lookahead_note_read(f->l, "b", "k0", now);     /* behind: nothing */
	lookahead_note_read(f->l, "b", "nope", now);   /* not listed */
	lookahead_note_read(f->l, "other", "k8", now); /* another bucket */
	assert_int_equal(gate_now(), 6);
	assert_int_equal(info_of(f).position, 3);
	lookahead_note_read(f->l, "b", "k8", now); /* a jump: capped at the list's end */
	assert_int_equal(gate_now(), 10);
	assert_int_equal(skip_now(), 8); /* k3-k7 jumped over; one ahead, one behind */
	struct lookahead_info i = info_of(f);
	assert_int_equal(i.position, 9);
	assert_int_equal(i.keys, 10);
	assert_int_equal(i.window, 3);
	assert_string_equal(i.state, "running");
	assert_string_equal(i.bucket, "b");
}

static void start_bytes(struct fx *f, size_t window, uint64_t window_bytes)
{
	struct lookahead_req rq = { .bucket = "b", .keys = ten, .n_keys = 10, .window = window,
		                    .window_bytes = window_bytes };
	char id[24], err[256];
	assert_int_equal(lookahead_start(f->l, &rq, id, err, sizeof err), 0);
}

static void test_byte_window_follows_the_sizes_learnt(void **state)
{
	struct fx *f = *state;
	start_bytes(f, 10, 300);
	assert_int_equal(info_of(f).window_bytes, 300);
	assert_int_equal(gate_now(), 1); /* no size known: one object, until it is */
	learn(0, 100);
	assert_int_equal(gate_now(), 3); /* 100 + two more guessed at the mean, 100 */
	learn(1, 100);
	learn(2, 100);
	assert_int_equal(gate_now(), 3); /* 300 bytes past the furthest read: full */
	double now = clock_mono_s();
	lookahead_note_read(f->l, "b", "k0", now);
	assert_int_equal(gate_now(), 4);
	learn(3, 1000);
	lookahead_note_read(f->l, "b", "k2", now);
	assert_int_equal(gate_now(), 4); /* k3 alone is over the window */
	lookahead_note_read(f->l, "b", "k3", now);
	assert_int_equal(gate_now(), 5); /* k4 unknown: guessed at 1300 / 4, over, but one ahead */
	learn(4, 10);
	assert_int_equal(gate_now(), 7); /* 10, then k5 and k6 guessed at 1310 / 5 = 262 */
	learn(9, 5);     /* not started: taken, no harm */
	learn(4, 7);     /* told twice: the first holds */
	learn(99, 5);    /* not a key */
	sized_fn(sized_arg, "pf-9", 5, 1); /* another job */
	assert_int_equal(gate_now(), 7);
	lookahead_note_read(f->l, "b", "k8", now);
	assert_int_equal(gate_now(), 10);
	assert_int_equal(info_of(f).position, 9);
}

static void test_tighter_of_the_two_windows(void **state)
{
	struct fx *f = *state;
	start_bytes(f, 2, 1u << 30); /* the count is tighter */
	learn(0, 100);
	learn(1, 100);
	assert_int_equal(gate_now(), 2);
	lookahead_note_read(f->l, "b", "k0", clock_mono_s());
	assert_int_equal(gate_now(), 3);
	struct lookahead_info i = info_of(f);
	assert_int_equal(i.window, 2);
	assert_int_equal(i.window_bytes, 1u << 30);
}

static void test_byte_window_smaller_than_an_object(void **state)
{
	struct fx *f = *state;
	start_bytes(f, 10, 1);
	learn(0, 100);
	assert_int_equal(gate_now(), 1);
	lookahead_note_read(f->l, "b", "k0", clock_mono_s());
	assert_int_equal(gate_now(), 2); /* one ahead all the same */
	learn(1, 0); /* failed: it takes no room, so the next may start */
	assert_int_equal(gate_now(), 3);
	lookahead_note_read(f->l, "b", "k1", clock_mono_s());
	assert_int_equal(gate_now(), 3); /* k2, guessed at 100 / 2, is over: the one ahead */
}

static void test_done_only_when_read_to_the_end(void **state)
{
	struct fx *f = *state;
	char id[24];
	start_ten(f, 20, 0, id);
	assert_int_equal(gate_now(), 10);
	snprintf(job_state, sizeof job_state, "done"); /* all warm */
	run_for(f, 0.3);
	assert_string_equal(info_of(f).state, "running"); /* not read to the end yet */
	lookahead_note_read(f->l, "b", "k9", clock_mono_s());
	run_for(f, 0.3);
	struct lookahead_info i = info_of(f);
	assert_string_equal(i.state, "done");
	assert_int_equal(i.objects, 10);
	assert_int_equal(cancels, 0);
	lookahead_note_read(f->l, "b", "k1", clock_mono_s()); /* over: nothing happens */
	assert_int_equal(lookahead_end(f->l, id), -1);
}

static void test_idle_and_end(void **state)
{
	struct fx *f = *state;
	char id[24];
	start_ten(f, 2, 0.1, id);
	run_for(f, 0.4);
	struct lookahead_info i = info_of(f);
	assert_string_equal(i.state, "idle");
	assert_int_equal(cancels, 1);
	assert_int_equal(lookahead_end(f->l, id), -1);

	struct fx *g = f;
	char id2[24];
	start_ten(g, 2, 0, id2);
	assert_string_equal(id2, "la-2");
	assert_int_equal(lookahead_end(g->l, id2), 0);
	struct lookahead_info out[4];
	assert_int_equal(lookahead_list(g->l, out, 4), 2);
	assert_string_equal(out[0].state, "ended"); /* the newest of those that ended first */
	assert_string_equal(out[1].state, "idle");
	assert_int_equal(cancels, 2);
}

static void test_manifest(void **state)
{
	struct fx *f = *state;
	struct lookahead_req rq = { .bucket = "b", .manifest = "m.txt", .window = 1 };
	char id[24], err[256];
	/* A line is its key as written, blanks too (S3 keys may end in one); a
	 * CRLF's CR is dropped. */
	manifest_text = "x/1\r\nx/2  \n\n x/3\nx/1\n";
	assert_int_equal(lookahead_start(f->l, &rq, id, err, sizeof err), 0);
	assert_int_equal(started_keys, 4); /* a key listed twice counts at its first place */
	lookahead_note_read(f->l, "b", "x/2", clock_mono_s()); /* not on the list */
	assert_int_equal(info_of(f).position, 0);
	lookahead_note_read(f->l, "b", "x/2  ", clock_mono_s());
	assert_int_equal(info_of(f).position, 2);
	lookahead_note_read(f->l, "b", "x/1", clock_mono_s());
	assert_int_equal(info_of(f).position, 2);
	lookahead_note_read(f->l, "b", " x/3", clock_mono_s());
	assert_int_equal(info_of(f).position, 3);

	manifest_text = "\n\r\n";
	assert_int_equal(lookahead_start(f->l, &rq, id, err, sizeof err), -1);
	assert_string_equal(err, "the list of keys is empty");
	manifest_text = NULL;
	assert_int_equal(lookahead_start(f->l, &rq, id, err, sizeof err), -1);
	assert_non_null(strstr(err, "404"));
	assert_int_equal(info_of(f).keys, 4); /* the failures added nothing */
}

/* Starts rq failing each allocation in turn: each failure says so and adds
 * nothing to the listed ones, then it starts. */
static void start_failing_each_allocation(struct fx *f, const struct lookahead_req *rq,
                                          size_t listed)
{
	char id[24], err[256];
	for (unsigned long n = 1;; n++) {
		alloc_fail_nth(n);
		int rc = lookahead_start(f->l, rq, id, err, sizeof err);
		bool fired = alloc_fail_fired();
		alloc_fail_nth(0);
		if (!fired) {
			assert_int_equal(rc, 0);
			return;
		}
		assert_int_equal(rc, -1);
		assert_string_equal(err, "out of memory");
		struct lookahead_info out[4];
		assert_int_equal(lookahead_list(f->l, out, 4), listed);
	}
}

static void test_out_of_memory(void **state)
{
	struct fx *f = *state;
	struct lookahead_req rq = { .bucket = "b", .keys = ten, .n_keys = 10, .window = 2 };
	start_failing_each_allocation(f, &rq, 0);
	assert_int_equal(info_of(f).keys, 10);
	assert_int_equal(info_of(f).window_bytes, 0);
	rq.window_bytes = 1000; /* its sizes too */
	start_failing_each_allocation(f, &rq, 1);
}

struct reader {
	struct lookaheads *l;
	int from;
};

static void *read_all(void *arg)
{
	struct reader *r = arg;
	for (int round = 0; round < 2000; round++)
		for (int k = r->from; k < 10; k += 2)
			lookahead_note_read(r->l, "b", ten[k], clock_mono_s());
	return NULL;
}

static void test_reads_from_two_threads(void **state)
{
	struct fx *f = *state;
	char id[24];
	start_ten(f, 1, 0, id);
	struct reader a = { f->l, 0 }, b = { f->l, 1 };
	pthread_t ta, tb;
	pthread_create(&ta, NULL, read_all, &a);
	pthread_create(&tb, NULL, read_all, &b);
	for (int i = 0; i < 200; i++)
		info_of(f);
	pthread_join(ta, NULL);
	pthread_join(tb, NULL);
	assert_int_equal(info_of(f).position, 10);
	assert_int_equal(gate_now(), 10);
}

static void *learn_all(void *arg)
{
	(void)arg;
	for (size_t k = 0; k < 10; k++)
		learn(k, 100 + k);
	return NULL;
}

static void test_sizes_and_reads_from_two_threads(void **state)
{
	struct fx *f = *state;
	start_bytes(f, 10, 250);
	struct reader a = { f->l, 0 };
	pthread_t ta, tb;
	pthread_create(&ta, NULL, read_all, &a);
	pthread_create(&tb, NULL, learn_all, NULL);
	pthread_join(ta, NULL);
	pthread_join(tb, NULL);
	assert_int_equal(info_of(f).position, 9);
	assert_int_equal(gate_now(), 10);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_gate_follows_the_furthest_read, setup,
		                                teardown),
		cmocka_unit_test_setup_teardown(test_byte_window_follows_the_sizes_learnt, setup,
		                                teardown),
		cmocka_unit_test_setup_teardown(test_tighter_of_the_two_windows, setup, teardown),
		cmocka_unit_test_setup_teardown(test_byte_window_smaller_than_an_object, setup,
		                                teardown),
		cmocka_unit_test_setup_teardown(test_done_only_when_read_to_the_end, setup,
		                                teardown),
		cmocka_unit_test_setup_teardown(test_idle_and_end, setup, teardown),
		cmocka_unit_test_setup_teardown(test_manifest, setup, teardown),
		cmocka_unit_test_setup_teardown(test_out_of_memory, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reads_from_two_threads, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sizes_and_reads_from_two_threads, setup,
		                                teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

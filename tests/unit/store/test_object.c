/*
 * test_object.c - the object-read layer (store/object.h): chunk geometry at
 * its edges, acquire-or-produce (one producer for concurrent acquirers),
 * the want count, and metadata resolution (fresh, stale, waits, shared
 * failures).
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "store/object.h"

#define CS 1000u

/* ---- geometry ----------------------------------------------------------- */

static void test_geometry_empty(void **state)
{
	(void)state;
	uint64_t a = 7, b = 7;
	assert_int_equal(obj_chunk_count(0, CS), 0);
	assert_int_equal(obj_chunk_len(0, 0, CS), 0);
	assert_false(obj_chunk_span(0, CS, 0, 0, &a, &b));
	assert_int_equal(a, 7); /* untouched */
}

static void test_geometry_multiple(void **state)
{
	(void)state;
	uint64_t size = 3 * CS, a, b;
	assert_int_equal(obj_chunk_count(size, CS), 3);
	assert_int_equal(obj_chunk_len(size, 0, CS), CS);
	assert_int_equal(obj_chunk_len(size, 2, CS), CS);
	assert_int_equal(obj_chunk_len(size, 3, CS), 0);
	assert_int_equal(obj_chunk_offset(2, CS), 2 * CS);
	assert_true(obj_chunk_span(size, CS, 0, size - 1, &a, &b));
	assert_int_equal(a, 0);
	assert_int_equal(b, 2);
	assert_false(obj_chunk_span(size, CS, 0, size, &a, &b)); /* past the end */
	assert_int_equal(obj_chunk_count(CS, CS), 1);
	assert_int_equal(obj_chunk_count(1, CS), 1);
}

static void test_geometry_partial_last(void **state)
{
	(void)state;
	uint64_t size = 2 * CS + 5, a, b;
	assert_int_equal(obj_chunk_count(size, CS), 3);
	assert_int_equal(obj_chunk_len(size, 1, CS), CS);
	assert_int_equal(obj_chunk_len(size, 2, CS), 5);
	assert_int_equal(obj_chunk_len(size, 3, CS), 0);
	/* the last byte, alone */
	assert_true(obj_chunk_span(size, CS, size - 1, size - 1, &a, &b));
	assert_int_equal(a, 2);
	assert_int_equal(b, 2);
}

static void test_geometry_range_edges(void **state)
{
	(void)state;
	uint64_t size = 10 * CS, a, b;
	assert_int_equal(obj_chunk_index(0, CS), 0);
	assert_int_equal(obj_chunk_index(CS - 1, CS), 0);
	assert_int_equal(obj_chunk_index(CS, CS), 1);
	/* the last byte of one chunk and the first of the next */
	assert_true(obj_chunk_span(size, CS, CS - 1, CS, &a, &b));
	assert_int_equal(a, 0);
	assert_int_equal(b, 1);
	/* exactly one whole chunk */
	assert_true(obj_chunk_span(size, CS, 4 * CS, 5 * CS - 1, &a, &b));
	assert_int_equal(a, 4);
	assert_int_equal(b, 4);
	/* the first byte */
	assert_true(obj_chunk_span(size, CS, 0, 0, &a, &b));
	assert_int_equal(a, 0);
	assert_int_equal(b, 0);
	/* backwards */
	assert_false(obj_chunk_span(size, CS, 5, 4, &a, &b));
}

/* ---- a layer over a RAM store ------------------------------------------- */

struct fixture {
	struct store *s;
	struct meta_cache *mc;
	struct objects o;
	struct obj_meta *m; /* the version read */
	struct obj_ref ref;
};

static int setup(void **state)
{
	static struct fixture f;
	memset(&f, 0, sizeof f);
	char err[256];
	struct store_config cfg = { .ram_bytes = 1 << 20, .policy = POLICY_LRU,
	                            .stale_after_s = 86400 };
	f.s = store_open(&cfg, NULL, NULL, err, sizeof err);
	f.mc = meta_cache_create(1000);
	assert_non_null(f.s);
	assert_non_null(f.mc);
	objects_init(&f.o, f.s, f.mc, CS, 60, 5);
	f.m = meta_new(2 * CS + 5, "\"e1\"", 0, NULL, 100.0);
	f.ref = (struct obj_ref){ "bkt", "key", f.m };
	*state = &f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	meta_unref(f->m);
	store_close(f->s);
	meta_cache_destroy(f->mc);
	return 0;
}

/* ---- acquire or produce ------------------------------------------------- */

struct producer {
	atomic_int calls;
	int result;
	struct store *s;
	struct chunk *c;   /* the chunk it was asked for (a reference) */
};

static int produce(void *arg, struct chunk *c, uint64_t i)
{
	struct producer *p = arg;
	(void)i;
	atomic_fetch_add(&p->calls, 1);
	if (p->result == 0) {
		chunk_ref(c);
		p->c = c;
	}
	return p->result;
}

static void test_acquire_produces_once(void **state)
{
	struct fixture *f = *state;
	struct producer p = { .s = f->s };
	enum store_role r1, r2;
	struct chunk *a = obj_acquire(&f->o, &f->ref, 2, 0, produce, &p, &r1);
	struct chunk *b = obj_acquire(&f->o, &f->ref, 2, 0, produce, &p, &r2);
	assert_non_null(a);
	assert_ptr_equal(a, b);
	assert_int_equal(r1, STORE_PRODUCE);
	assert_int_equal(r2, STORE_WAIT);
	assert_int_equal(atomic_load(&p.calls), 1);
	assert_int_equal(a->len, 5); /* the last, partial chunk */
	assert_int_equal(obj_wants(a), 2);
	/* the producer fills it; the next acquirer gets a hit */
	chunk_append(p.c, "abcde", 5);
	store_complete(f->s, p.c, true, 0, NULL);
	chunk_unref(p.c);
	struct chunk *c = obj_acquire(&f->o, &f->ref, 2, 0, produce, &p, &r1);
	assert_int_equal(r1, STORE_HIT);
	assert_int_equal(atomic_load(&p.calls), 1);
	obj_unwant(a, false);
	obj_unwant(b, false);
	obj_unwant(c, false);
	/* past the end: nothing */
	assert_null(obj_acquire(&f->o, &f->ref, 3, 0, produce, &p, &r1));
}

struct racer {
	struct fixture *f;
	struct producer *p;
	pthread_barrier_t *go;
	struct chunk *got;
};

static void *race(void *arg)
{
	struct racer *r = arg;
	pthread_barrier_wait(r->go);
	r->got = obj_acquire(&r->f->o, &r->f->ref, 0, 0, produce, r->p, NULL);
	return NULL;
}

static void test_acquire_concurrent(void **state)
{
	struct fixture *f = *state;
	for (int round = 0; round < 50; round++) {
		struct obj_meta *m = meta_new(CS, round % 2 ? "\"x\"" : "\"y\"", 0, NULL, 0);
		char key[16];
		snprintf(key, sizeof key, "k%d", round);
		struct fixture g = *f;
		g.ref = (struct obj_ref){ "bkt", key, m };
		struct producer p = { .s = f->s };
		pthread_barrier_t go;
		pthread_barrier_init(&go, NULL, 2);
		struct racer a = { &g, &p, &go, NULL }, b = { &g, &p, &go, NULL };
		pthread_t ta, tb;
		pthread_create(&ta, NULL, race, &a);
		pthread_create(&tb, NULL, race, &b);
		pthread_join(ta, NULL);
		pthread_join(tb, NULL);
		assert_int_equal(atomic_load(&p.calls), 1);
		assert_ptr_equal(a.got, b.got);
		assert_int_equal(obj_wants(a.got), 2);
		store_complete(f->s, p.c, false, -1, NULL);
		chunk_unref(p.c);
		obj_unwant(a.got, false);
		obj_unwant(b.got, false);
		pthread_barrier_destroy(&go);
		meta_unref(m);
	}
}

static void test_acquire_producer_fails(void **state)
{
	struct fixture *f = *state;
	struct producer p = { .s = f->s, .result = -1234 };
	enum store_role role;
	struct chunk *c = obj_acquire(&f->o, &f->ref, 1, 0, produce, &p, &role);
	assert_non_null(c);
	assert_int_equal(role, STORE_PRODUCE);
	assert_int_equal(chunk_state(c), CHUNK_FAILED);
	assert_int_equal(c->fail_reason, -1234);
	obj_unwant(c, false);
	/* it left the in-flight table: the next acquirer produces again */
	p.result = 0;
	c = obj_acquire(&f->o, &f->ref, 1, 0, produce, &p, &role);
	assert_int_equal(role, STORE_PRODUCE);
	assert_int_equal(atomic_load(&p.calls), 2);
	store_complete(f->s, p.c, false, -1, NULL);
	chunk_unref(p.c);
	obj_unwant(c, false);
}

/* ---- wants -------------------------------------------------------------- */

static void test_wants(void **state)
{
	(void)state;
	struct chunk_id id = { { 1 } };
	struct chunk *c = chunk_new(&id, 10);
	assert_int_equal(obj_wants(c), 0);
	assert_true(obj_wanted(c)); /* never wanted: a warm-up goes on */
	obj_want(c);                /* a reader */
	obj_want(c);                /* its read-ahead, or a warming job */
	assert_int_equal(obj_wants(c), 2);
	assert_int_equal(chunk_refs(c), 3);
	obj_unwant(c, true);        /* one gives up: the other still wants it */
	assert_true(obj_wanted(c));
	obj_unwant(c, true);        /* the last gives up: stop */
	assert_false(obj_wanted(c));
	obj_want(c);                /* a new reader comes */
	assert_true(obj_wanted(c));
	obj_unwant(c, false);       /* took its bytes and left: keep going */
	assert_true(obj_wanted(c));
	assert_int_equal(obj_wants(c), 0);
	assert_int_equal(chunk_refs(c), 1);
	chunk_unref(c);
}

/* ---- metadata ----------------------------------------------------------- */

struct loader {
	int calls;
	int result;
	char revalidate[64];
};

static int load(void *arg, const char *revalidate)
{
	struct loader *l = arg;
	l->calls++;
	snprintf(l->revalidate, sizeof l->revalidate, "%s", revalidate ? revalidate : "");
	return l->result;
}

static void nowake(void *arg)
{
	(void)arg;
}

static void test_meta_learn_wait_fresh(void **state)
{
	struct fixture *f = *state;
	struct chunk_waiter w1 = { .wake = nowake }, w2 = { .wake = nowake };
	struct obj_meta_ask a1 = { .waiter = &w1 }, a2 = { .waiter = &w2 };
	struct loader l = { 0 };
	struct obj_meta *m;
	long st;
	assert_int_equal(obj_meta_step(&f->o, "b", "k", &a1, load, &l, 100, &m, &st),
	                 OBJ_META_LOADING);
	assert_int_equal(l.calls, 1);
	assert_string_equal(l.revalidate, "");
	/* the loader, and another reader, wait for it */
	assert_int_equal(obj_meta_step(&f->o, "b", "k", &a1, load, &l, 100, &m, &st),
	                 OBJ_META_WAIT);
	assert_int_equal(obj_meta_step(&f->o, "b", "k", &a2, load, &l, 100, &m, &st),
	                 OBJ_META_WAIT);
	assert_true(a2.waiting);
	assert_int_equal(l.calls, 1);
	struct obj_meta *learnt = meta_new(10, "\"e\"", 0, NULL, 100);
	meta_publish(f->mc, "b", "k", learnt);
	a1.waiting = a2.waiting = false; /* woken */
	assert_int_equal(obj_meta_step(&f->o, "b", "k", &a2, load, &l, 159, &m, &st),
	                 OBJ_META_READY);
	assert_ptr_equal(m, learnt);
	meta_unref(m);
	/* past the TTL (60 s): revalidated by the next reader, with its ETag
	 * (a1 is still the loader of the entry, which is fresh for it) */
	struct obj_meta_ask a3 = { .waiter = &w1 };
	assert_int_equal(obj_meta_step(&f->o, "b", "k", &a3, load, &l, 161, &m, &st),
	                 OBJ_META_LOADING);
	assert_int_equal(l.calls, 2);
	assert_string_equal(l.revalidate, "\"e\"");
	meta_refresh(f->mc, "b", "k", 0, NULL, 161);
	assert_int_equal(obj_meta_step(&f->o, "b", "k", &a3, load, &l, 162, &m, &st),
	                 OBJ_META_READY);
	meta_unref(m);
	meta_unref(learnt);
}

/* LARDER_METADATA_TTL=0: every read revalidates, but what its own load (or
 * the one it waited for) published is its answer; it was found stale and
 * learnt again, without end. An entry from before it asked is not. */
static void test_meta_ttl_zero(void **state)
{
	struct fixture *f = *state;
	struct objects every;
	objects_init(&every, f->s, f->mc, CS, 0, 0);
	struct chunk_waiter w1 = { .wake = nowake }, w2 = { .wake = nowake };
	struct obj_meta_ask a1 = { .waiter = &w1 }, a2 = { .waiter = &w2 };
	struct loader l = { 0 };
	struct obj_meta *m;
	long st;
	assert_int_equal(obj_meta_step(&every, "b", "z", &a1, load, &l, 100, &m, &st),
	                 OBJ_META_LOADING);
	assert_int_equal(obj_meta_step(&every, "b", "z", &a1, load, &l, 100, &m, &st),
	                 OBJ_META_WAIT);
	assert_int_equal(obj_meta_step(&every, "b", "z", &a2, load, &l, 100.5, &m, &st),
	                 OBJ_META_WAIT);
	struct obj_meta *learnt = meta_new(10, "\"z\"", 0, NULL, 101);
	meta_publish(f->mc, "b", "z", learnt);
	a1.waiting = a2.waiting = false; /* woken */
	assert_int_equal(obj_meta_step(&every, "b", "z", &a1, load, &l, 101, &m, &st),
	                 OBJ_META_READY);
	assert_ptr_equal(m, learnt);
	meta_unref(m);
	assert_int_equal(obj_meta_step(&every, "b", "z", &a2, load, &l, 102, &m, &st),
	                 OBJ_META_READY);
	meta_unref(m);
	assert_int_equal(l.calls, 1);
	/* a new reader revalidates it */
	struct obj_meta_ask a3 = { .waiter = &w1 };
	assert_int_equal(obj_meta_step(&every, "b", "z", &a3, load, &l, 102, &m, &st),
	                 OBJ_META_LOADING);
	assert_int_equal(l.calls, 2);
	assert_string_equal(l.revalidate, "\"z\"");
	/* the load gives up (the entry learnt before a3 asked stays): learnt again */
	meta_publish(f->mc, "b", "z", NULL);
	assert_int_equal(obj_meta_step(&every, "b", "z", &a3, load, &l, 103, &m, &st),
	                 OBJ_META_LOADING);
	assert_int_equal(l.calls, 3);
	meta_refresh(f->mc, "b", "z", 0, NULL, 104);
	assert_int_equal(obj_meta_step(&every, "b", "z", &a3, load, &l, 104, &m, &st),
	                 OBJ_META_READY);
	meta_unref(m);
	meta_unref(learnt);
}

static void test_meta_ttls(void **state)
{
	struct fixture *f = *state;
	struct objects forever;
	objects_init(&forever, f->s, f->mc, CS, -1, 0);
	assert_true(forever.ttl_s < 0);
	struct chunk_waiter w = { .wake = nowake };
	struct obj_meta_ask a = { .waiter = &w };
	struct loader l = { 0 };
	struct obj_meta *m;
	long st;
	struct obj_meta *e = meta_new(1, "\"i\"", 0, NULL, 0);
	meta_publish(f->mc, "b", "imm", e);
	assert_int_equal(obj_meta_step(&forever, "b", "imm", &a, load, &l, 1e9, &m, &st),
	                 OBJ_META_READY);
	meta_unref(m);
	meta_unref(e);
	/* a remembered 404 lasts negative_ttl_s (5 s here) */
	struct obj_meta *neg = meta_new_negative(NULL, 100);
	meta_publish(f->mc, "b", "gone", neg);
	assert_int_equal(obj_meta_step(&f->o, "b", "gone", &a, load, &l, 104, &m, &st),
	                 OBJ_META_READY);
	assert_true(m->negative);
	meta_unref(m);
	assert_int_equal(obj_meta_step(&f->o, "b", "gone", &a, load, &l, 106, &m, &st),
	                 OBJ_META_LOADING);
	assert_string_equal(l.revalidate, ""); /* a 404 is not revalidated */
	meta_publish(f->mc, "b", "gone", NULL);
	meta_unref(neg);
}

static void test_meta_shared_failure(void **state)
{
	struct fixture *f = *state;
	struct chunk_waiter w1 = { .wake = nowake }, w2 = { .wake = nowake };
	struct obj_meta_ask loader_ask = { .waiter = &w1 };
	struct obj_meta_ask waiter_ask = { .waiter = &w2, .share_failures = true };
	struct loader l = { 0 };
	struct obj_meta *m;
	long st = 0;
	assert_int_equal(obj_meta_step(&f->o, "b", "f", &loader_ask, load, &l, 10, &m, &st),
	                 OBJ_META_LOADING);
	assert_int_equal(obj_meta_step(&f->o, "b", "f", &waiter_ask, load, &l, 11, &m, &st),
	                 OBJ_META_WAIT);
	assert_true(waiter_ask.wait_since == 11);
	meta_publish_failure(f->mc, "b", "f", 503, 12);
	waiter_ask.waiting = false;
	assert_int_equal(obj_meta_step(&f->o, "b", "f", &waiter_ask, load, &l, 12, &m, &st),
	                 OBJ_META_FAILED);
	assert_int_equal(st, 503);
	assert_int_equal(l.calls, 1);
	/* a reader that did not wait for that load loads again */
	struct obj_meta_ask fresh = { .waiter = &w1, .share_failures = true };
	assert_int_equal(obj_meta_step(&f->o, "b", "f", &fresh, load, &l, 13, &m, &st),
	                 OBJ_META_LOADING);
	assert_int_equal(l.calls, 2);
	meta_publish(f->mc, "b", "f", NULL);
}

/* A request from a node waits only for a load that asks S3 or a node at a
 * higher hop than its own; the loader waits for its own, a client's reader
 * for anybody's, and every load starts as asking S3. */
static void test_meta_wait_only_up_the_hops(void **state)
{
	struct fixture *f = *state;
	struct chunk_waiter w1 = { .wake = nowake }, w2 = { .wake = nowake };
	struct obj_meta_ask loader = { .waiter = &w1, .hop = 1 };
	struct loader l = { 0 };
	struct obj_meta *m;
	long st = 0;
	assert_true(obj_may_wait(0, 1) && obj_may_wait(2, 0) && obj_may_wait(1, 2));
	assert_false(obj_may_wait(1, 1) || obj_may_wait(2, 2) || obj_may_wait(2, 1));
	meta_set_ask_hop(f->mc, "b", "p", 2); /* no load runs: nothing */
	assert_int_equal(meta_loading_ask_hop(f->mc, "b", "p"), 0);
	assert_int_equal(obj_meta_step(&f->o, "b", "p", &loader, load, &l, 10, &m, &st),
	                 OBJ_META_LOADING);
	meta_set_ask_hop(f->mc, "b", "p", 2); /* the loader asks a holder */
	assert_int_equal(obj_meta_step(&f->o, "b", "p", &loader, load, &l, 10, &m, &st),
	                 OBJ_META_WAIT);
	struct obj_meta_ask last = { .waiter = &w2, .hop = 2 };
	assert_int_equal(obj_meta_step(&f->o, "b", "p", &last, load, &l, 10, &m, &st),
	                 OBJ_META_CYCLE);
	assert_false(last.waiting);
	struct obj_meta_ask first = { .waiter = &w2, .hop = 1 };
	assert_int_equal(obj_meta_step(&f->o, "b", "p", &first, load, &l, 10, &m, &st),
	                 OBJ_META_WAIT);
	meta_unwait(f->mc, "b", "p", &w2);
	meta_set_ask_hop(f->mc, "b", "p", 1); /* now its owner */
	struct obj_meta_ask again = { .waiter = &w2, .hop = 1 };
	assert_int_equal(obj_meta_step(&f->o, "b", "p", &again, load, &l, 10, &m, &st),
	                 OBJ_META_CYCLE);
	struct obj_meta_ask client = { .waiter = &w2 };
	assert_int_equal(obj_meta_step(&f->o, "b", "p", &client, load, &l, 10, &m, &st),
	                 OBJ_META_WAIT);
	meta_unwait(f->mc, "b", "p", &w2);
	meta_set_ask_hop(f->mc, "b", "p", 0); /* fell back to S3 */
	struct obj_meta_ask after = { .waiter = &w2, .hop = 2 };
	assert_int_equal(obj_meta_step(&f->o, "b", "p", &after, load, &l, 10, &m, &st),
	                 OBJ_META_WAIT);
	meta_unwait(f->mc, "b", "p", &w2);
	meta_set_ask_hop(f->mc, "b", "p", 1);
	meta_publish(f->mc, "b", "p", NULL);
	assert_int_equal(meta_loading_ask_hop(f->mc, "b", "p"), 0);
	struct obj_meta_ask next = { .waiter = &w1, .hop = 2 };
	assert_int_equal(obj_meta_step(&f->o, "b", "p", &next, load, &l, 11, &m, &st),
	                 OBJ_META_LOADING);
	assert_int_equal(meta_loading_ask_hop(f->mc, "b", "p"), 0);
	assert_int_equal(l.calls, 2);
	meta_publish(f->mc, "b", "p", NULL);
}

static void test_meta_load_cannot_start(void **state)
{
	struct fixture *f = *state;
	struct chunk_waiter w = { .wake = nowake };
	struct obj_meta_ask a = { .waiter = &w };
	struct loader l = { .result = -EBUSY };
	struct obj_meta *m;
	long st = 0;
	assert_int_equal(obj_meta_step(&f->o, "b", "n", &a, load, &l, 10, &m, &st),
	                 OBJ_META_NO_LOAD);
	assert_int_equal(st, -EBUSY);
	/* published as failed: the next reader is the loader, not a waiter */
	l.result = 0;
	assert_int_equal(obj_meta_step(&f->o, "b", "n", &a, load, &l, 10, &m, &st),
	                 OBJ_META_LOADING);
	meta_publish(f->mc, "b", "n", NULL);
}

static void test_forget(void **state)
{
	struct fixture *f = *state;
	struct producer p = { .s = f->s };
	for (uint64_t i = 0; i < 3; i++) {
		p.calls = 0;
		struct chunk *c = obj_acquire(&f->o, &f->ref, i, 0, produce, &p, NULL);
		char bytes[CS];
		memset(bytes, 'x', sizeof bytes);
		chunk_append(p.c, bytes, c->len);
		store_complete(f->s, p.c, true, 0, NULL);
		chunk_unref(p.c);
		obj_unwant(c, false);
	}
	meta_publish(f->mc, "bkt", "key", f->m);
	struct chunk_id id;
	obj_chunk_id(&f->ref, 2, &id);
	assert_true(store_holds(f->s, &id));
	obj_forget(&f->o, &f->ref);
	for (uint64_t i = 0; i < 3; i++) {
		obj_chunk_id(&f->ref, i, &id);
		assert_false(store_holds(f->s, &id));
	}
	assert_int_equal(meta_cache_count(f->mc), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_geometry_empty),
		cmocka_unit_test(test_geometry_multiple),
		cmocka_unit_test(test_geometry_partial_last),
		cmocka_unit_test(test_geometry_range_edges),
		cmocka_unit_test(test_wants),
		cmocka_unit_test_setup_teardown(test_acquire_produces_once, setup, teardown),
		cmocka_unit_test_setup_teardown(test_acquire_concurrent, setup, teardown),
		cmocka_unit_test_setup_teardown(test_acquire_producer_fails, setup, teardown),
		cmocka_unit_test_setup_teardown(test_meta_learn_wait_fresh, setup, teardown),
		cmocka_unit_test_setup_teardown(test_meta_ttls, setup, teardown),
		cmocka_unit_test_setup_teardown(test_meta_ttl_zero, setup, teardown),
		cmocka_unit_test_setup_teardown(test_meta_shared_failure, setup, teardown),
		cmocka_unit_test_setup_teardown(test_meta_wait_only_up_the_hops, setup, teardown),
		cmocka_unit_test_setup_teardown(test_meta_load_cannot_start, setup, teardown),
		cmocka_unit_test_setup_teardown(test_forget, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * test_store.c - the tiered store (store/store.h): coalescing, failure
 * fan-out, the RAM bound with chunks being filled, drops, and the NVMe
 * tier (write-through, recovery, promotion, corruption, a dying disk).
 *
 * The NVMe tests work in a fresh directory under $TMPDIR and remove it.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <pthread.h>

#include "store/ram.h"
#include "store/store.h"

/* ---- helpers ------------------------------------------------------------ */

enum { CLEN = 4096, COST = CLEN + RAM_ENTRY_COST }; /* what a RAM chunk counts */

static struct chunk_id cid(uint64_t i)
{
	struct chunk_id id;
	chunk_id_make("bucket", "dir/object", "\"0123abcd\"", i, &id);
	return id;
}

static unsigned char pat(uint64_t i, size_t off)
{
	return (unsigned char)((i * 131 + off * 7 + (off >> 8)) ^ (i >> 3));
}

static void fill(struct chunk *c, uint64_t i)
{
	unsigned char buf[512];
	for (size_t off = 0; off < c->len; off += sizeof buf) {
		size_t n = c->len - off < sizeof buf ? c->len - off : sizeof buf;
		for (size_t k = 0; k < n; k++)
			buf[k] = pat(i, off + k);
		chunk_append(c, buf, n);
	}
}

static bool data_ok(struct chunk *c, uint64_t i)
{
	unsigned char buf[4096];
	for (size_t off = 0; off < c->len; off += sizeof buf) {
		size_t n = c->len - off < sizeof buf ? c->len - off : sizeof buf;
		if (chunk_read(c, off, buf, n) != 0)
			return false;
		for (size_t k = 0; k < n; k++)
			if (buf[k] != pat(i, off + k))
				return false;
	}
	return true;
}

static struct chunk_origin origin(uint64_t i)
{
	return (struct chunk_origin){ .bucket = "bucket", .key = "dir/object",
	                              .etag = "\"0123abcd\"", .index = i };
}

/* Chunk i of len bytes, produced; copy: a cluster node's copy of a chunk
 * another node owns (struct chunk_origin). */
static void produce_as(struct store *s, uint64_t i, size_t len, bool copy)
{
	enum store_role role;
	struct chunk_id id = cid(i);
	struct chunk *c = store_acquire(s, &id, len, &role);
	assert_non_null(c);
	assert_int_equal(role, STORE_PRODUCE);
	fill(c, i);
	struct chunk_origin o = origin(i);
	o.copy = copy;
	store_complete(s, c, true, 0, &o);
	chunk_unref(c);
}

static void produce_len(struct store *s, uint64_t i, size_t len)
{
	produce_as(s, i, len, false);
}

static void produce(struct store *s, uint64_t i)
{
	produce_len(s, i, CLEN);
}

static bool holds(struct store *s, uint64_t i)
{
	struct chunk_id id = cid(i);
	return store_holds(s, &id);
}

static void msleep(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

/* Blocks until c leaves FILLING. */
struct tw {
	struct chunk_waiter w;
	pthread_mutex_t m;
	pthread_cond_t cv;
	bool flag;
	atomic_int wakes;
};

static void tw_wake(void *arg)
{
	struct tw *t = arg;
	atomic_fetch_add(&t->wakes, 1);
	pthread_mutex_lock(&t->m);
	t->flag = true;
	pthread_cond_signal(&t->cv);
	pthread_mutex_unlock(&t->m);
}

static void tw_init(struct tw *t)
{
	memset(t, 0, sizeof *t);
	t->w = (struct chunk_waiter){ .wake = tw_wake, .arg = t };
	pthread_mutex_init(&t->m, NULL);
	pthread_cond_init(&t->cv, NULL);
}

static void tw_fini(struct tw *t)
{
	pthread_mutex_destroy(&t->m);
	pthread_cond_destroy(&t->cv);
}

static enum chunk_state wait_done(struct chunk *c)
{
	struct tw t;
	tw_init(&t);
	chunk_wait(c, &t.w, 0);
	while (chunk_state(c) == CHUNK_FILLING) {
		pthread_mutex_lock(&t.m);
		while (!t.flag)
			pthread_cond_wait(&t.cv, &t.m);
		t.flag = false;
		pthread_mutex_unlock(&t.m);
	}
	chunk_unwait(c, &t.w);
	tw_fini(&t);
	return chunk_state(c);
}

static struct store *open_ram(uint64_t ram, enum policy_kind k)
{
	char err[256];
	struct store_config cfg = { .ram_bytes = ram, .policy = k, .stale_after_s = 86400 };
	struct store *s = store_open(&cfg, NULL, NULL, err, sizeof err);
	assert_non_null(s);
	return s;
}

static struct store_stats stats(struct store *s)
{
	struct store_stats st;
	store_get_stats(s, &st);
	return st;
}

/* ---- RAM tier and in-flight table ------------------------------------------ */

static void test_ram_only_roles(void **state)
{
	(void)state;
	struct store *s = open_ram(1 << 20, POLICY_SUBSET);
	struct chunk_id id = cid(1);
	enum store_role role;

	assert_false(store_holds(s, &id));
	struct chunk *p = store_acquire(s, &id, CLEN, &role);
	assert_int_equal(role, STORE_PRODUCE);
	assert_false(store_holds(s, &id)); /* being produced is not held */
	struct chunk *w[9];
	for (int i = 0; i < 9; i++) {
		w[i] = store_acquire(s, &id, CLEN, &role);
		assert_int_equal(role, STORE_WAIT);
		assert_ptr_equal(w[i], p); /* coalesced: the same chunk */
	}
	struct store_stats st = stats(s);
	assert_int_equal(st.misses, 1);
	assert_int_equal(st.coalesced, 9);
	assert_int_equal(st.inflight, 1);
	assert_false(st.disk_ok);

	fill(p, 1);
	struct chunk_origin o = origin(1);
	store_complete(s, p, true, 0, &o);
	chunk_unref(p);
	for (int i = 0; i < 9; i++) {
		assert_int_equal(chunk_state(w[i]), CHUNK_READY);
		assert_true(data_ok(w[i], 1));
		chunk_unref(w[i]);
	}
	assert_true(store_holds(s, &id));
	assert_int_equal(atomic_load(&p->hits), 0); /* waiting on its fetch is no hit */
	struct chunk *h = store_acquire(s, &id, CLEN, &role);
	assert_int_equal(role, STORE_HIT);
	assert_ptr_equal(h, p);
	assert_true(data_ok(h, 1));
	assert_int_equal(atomic_load(&h->hits), 1); /* the gateway maps it from its third */
	chunk_unref(h);
	st = stats(s);
	assert_int_equal(st.hits_ram, 1);
	assert_int_equal(st.inflight, 0);
	assert_int_equal(st.ram_entries, 1);
	assert_int_equal(st.ram_used, COST);
	assert_int_equal(st.ram_filling, 0);
	store_close(s);
}

/* Bytes of the arena's pages (chunk_fd) in memory now. */
static uint64_t arena_bytes(int fd)
{
	struct stat st;
	assert_int_equal(fstat(fd, &st), 0);
	return (uint64_t)st.st_blocks * 512;
}

/* A large chunk's bytes are kept outside the process's memory, in the
 * arena, and its pages go back when its last reference does. */
static void test_large_chunk_in_arena(void **state)
{
	(void)state;
	enum { BIG = 16 << 20 };
	struct store *s = open_ram(64 << 20, POLICY_LRU);
	struct chunk_id id = cid(40);
	enum store_role role;
	struct chunk *c = store_acquire(s, &id, BIG, &role);
	assert_non_null(c);
	assert_int_equal(role, STORE_PRODUCE);
	uint64_t off;
	int fd = chunk_fd(c, &off);
	assert_true(fd >= 0);
	assert_null(c->data);
	uint64_t before = arena_bytes(fd);
	fill(c, 40);
	assert_true(arena_bytes(fd) >= before + BIG);
	struct chunk_origin o = origin(40);
	store_complete(s, c, true, 0, &o);
	assert_true(data_ok(c, 40));
	store_close(s); /* the RAM tier lets go; this test's reference is the last */
	assert_true(arena_bytes(fd) >= before + BIG);
	chunk_unref(c);
	assert_true(arena_bytes(fd) <= before);
	/* A small chunk stays on the heap. */
	struct chunk *small = chunk_new(&id, 4096);
	assert_non_null(small);
	assert_int_equal(chunk_fd(small, &off), -1);
	assert_non_null(small->data);
	chunk_unref(small);
}

static void test_failure_fanout(void **state)
{
	(void)state;
	struct store *s = open_ram(1 << 20, POLICY_SUBSET);
	struct chunk_id id = cid(2);
	enum store_role role;
	struct chunk *p = store_acquire(s, &id, CLEN, &role);
	assert_int_equal(role, STORE_PRODUCE);

	enum { W = 5 };
	struct chunk *w[W];
	struct tw t[W];
	for (int i = 0; i < W; i++) {
		w[i] = store_acquire(s, &id, CLEN, &role);
		assert_int_equal(role, STORE_WAIT);
		tw_init(&t[i]);
		chunk_wait(w[i], &t[i].w, 0);
	}
	chunk_append(p, "partial", 7);
	store_complete(s, p, false, -EIO, NULL);
	chunk_unref(p);
	for (int i = 0; i < W; i++) {
		assert_true(atomic_load(&t[i].wakes) >= 2); /* the bytes, then the failure */
		assert_int_equal(chunk_state(w[i]), CHUNK_FAILED);
		assert_int_equal(w[i]->fail_reason, -EIO);
		chunk_unwait(w[i], &t[i].w);
		tw_fini(&t[i]);
		chunk_unref(w[i]);
	}
	/* Never stored; the next reader produces again. */
	struct store_stats st = stats(s);
	assert_int_equal(st.ram_entries, 0);
	assert_int_equal(st.ram_used, 0);
	assert_int_equal(st.inflight, 0);
	struct chunk *again = store_acquire(s, &id, CLEN, &role);
	assert_int_equal(role, STORE_PRODUCE);
	assert_int_equal(chunk_state(again), CHUNK_FILLING);
	store_complete(s, again, false, 503, NULL);
	chunk_unref(again);
	store_close(s);
}

static void ram_bound(enum policy_kind k)
{
	const uint64_t cap = 16 * CLEN;
	struct store *s = open_ram(cap, k);
	enum store_role role;
	uint64_t hits = 0;
	for (uint64_t n = 0; n < 2000; n++) {
		uint64_t i = (n * 7) % 101; /* revisits, so some hits */
		struct chunk_id id = cid(i);
		struct chunk *c = store_acquire(s, &id, CLEN, &role);
		assert_non_null(c);
		if (role == STORE_PRODUCE) {
			assert_true(stats(s).ram_used <= cap);
			fill(c, i);
			struct chunk_origin o = origin(i);
			store_complete(s, c, true, 0, &o);
		} else {
			assert_int_equal(role, STORE_HIT);
			assert_true(data_ok(c, i));
			hits++;
		}
		chunk_unref(c);
		struct store_stats st = stats(s);
		assert_true(st.ram_used <= cap);
		assert_true(st.ram_entries <= 16);
	}
	struct store_stats st = stats(s);
	assert_int_equal(st.ram_overcommits, 0);
	assert_true(st.evictions_ram > 0);
	assert_int_equal(st.hits_ram, hits);
	if (k == POLICY_SUBSET)
		assert_true(hits > 0); /* a stable subset of the 101 is kept */
	store_close(s);
}

static void test_ram_bound_subset(void **state)
{
	(void)state;
	ram_bound(POLICY_SUBSET);
}

static void test_ram_bound_lru(void **state)
{
	(void)state;
	ram_bound(POLICY_LRU);
}

/* A node's copies of other nodes' chunks fill only the room its own
 * chunks leave, and go first when its own need room, whatever their
 * hashes: else the owner itself would have to fetch its chunks from S3
 * again (loadtest g in full mode, 1.65 GETs per chunk before). */
static void test_copies_kept_after_own(void **state)
{
	(void)state;
	struct store *s = open_ram(8 * COST, POLICY_SUBSET);
	for (uint64_t i = 0; i < 6; i++)
		produce_as(s, i, CLEN, false);
	for (uint64_t i = 100; i < 120; i++)
		produce_as(s, i, CLEN, true);
	for (uint64_t i = 0; i < 6; i++)
		assert_true(holds(s, i));
	assert_int_equal(stats(s).ram_entries, 8); /* two copies in the room left */

	for (uint64_t i = 200; i < 208; i++)
		produce_as(s, i, CLEN, false);
	unsigned own = 0;
	for (uint64_t i = 0; i < 208; i++) {
		if (i >= 100 && i < 120)
			assert_false(holds(s, i));
		else
			own += holds(s, i);
	}
	assert_int_equal(own, 8);
	assert_int_equal(stats(s).ram_overcommits, 0);
	store_close(s);
}

static void test_inflight_bytes(void **state)
{
	(void)state;
	const uint64_t cap = 4 * COST;
	struct store *s = open_ram(cap, POLICY_LRU);
	enum store_role role;
	for (uint64_t i = 0; i < 4; i++)
		produce(s, i);
	assert_int_equal(stats(s).ram_used, cap);

	/* Two being filled: two READY chunks make room, bytes counted. */
	struct chunk_id a = cid(10), b = cid(11), c3 = cid(12);
	struct chunk *ca = store_acquire(s, &a, CLEN, &role);
	struct chunk *cb = store_acquire(s, &b, CLEN, &role);
	struct store_stats st = stats(s);
	assert_int_equal(st.inflight, 2);
	assert_int_equal(st.ram_filling, 2 * COST);
	assert_int_equal(st.ram_entries, 2);
	assert_int_equal(st.ram_used, cap);
	assert_int_equal(st.evictions_ram, 2);
	assert_int_equal(st.ram_overcommits, 0);

	/* An evicted chunk a reader holds keeps its bytes. */
	struct chunk_id k3 = cid(3);
	struct chunk *held = store_acquire(s, &k3, CLEN, &role);
	assert_int_equal(role, STORE_HIT);
	struct chunk *cc = store_acquire(s, &c3, CLEN, &role);
	struct chunk_id d = cid(13), e = cid(14);
	struct chunk *cd = store_acquire(s, &d, CLEN, &role);
	st = stats(s);
	assert_int_equal(st.ram_entries, 0);
	assert_int_equal(st.ram_filling, 4 * COST);
	assert_true(data_ok(held, 3));
	chunk_unref(held);

	/* Nothing left to evict: the fifth overshoots, and says so. */
	struct chunk *ce = store_acquire(s, &e, CLEN, &role);
	st = stats(s);
	assert_int_equal(st.ram_overcommits, 1);
	assert_int_equal(st.ram_used, 5 * COST);

	struct chunk *all[5] = { ca, cb, cc, cd, ce };
	for (int i = 0; i < 5; i++) {
		fill(all[i], 10 + (uint64_t)i);
		store_complete(s, all[i], true, 0, NULL);
		chunk_unref(all[i]);
		assert_true(stats(s).ram_used <= 5 * COST);
	}
	st = stats(s);
	assert_int_equal(st.ram_filling, 0);
	assert_int_equal(st.inflight, 0);
	assert_true(st.ram_used <= cap);
	store_close(s);
}

static void test_drop(void **state)
{
	(void)state;
	struct store *s = open_ram(1 << 20, POLICY_SUBSET);
	enum store_role role;
	produce(s, 1);
	struct chunk_id id = cid(1);
	store_drop(s, &id);
	struct chunk *c = store_acquire(s, &id, CLEN, &role);
	assert_int_equal(role, STORE_PRODUCE);

	/* Dropped while being produced: waiters still get it, nobody keeps it. */
	struct chunk *w = store_acquire(s, &id, CLEN, &role);
	assert_int_equal(role, STORE_WAIT);
	store_drop(s, &id);
	assert_int_equal(stats(s).inflight, 0);
	fill(c, 1);
	store_complete(s, c, true, 0, NULL);
	chunk_unref(c);
	assert_int_equal(chunk_state(w), CHUNK_READY);
	assert_true(data_ok(w, 1));
	chunk_unref(w);
	assert_int_equal(stats(s).ram_entries, 0);
	c = store_acquire(s, &id, CLEN, &role);
	assert_int_equal(role, STORE_PRODUCE);
	store_complete(s, c, false, -ECONNRESET, NULL);
	chunk_unref(c);
	store_close(s);
}

/* ---- threads: one producer per chunk, whatever the interleaving ------------------ */

enum { T_THREADS = 8, T_IDS = 64, T_ROUNDS = 6 };

struct tshared {
	struct store *s;
	atomic_int produced[T_IDS];
	atomic_int bad;
};

struct targ {
	struct tshared *sh;
	int n;
};

static void *worker(void *arg)
{
	struct targ *a = arg;
	enum store_role role;
	for (int r = 0; r < T_ROUNDS; r++) {
		for (int k = 0; k < T_IDS; k++) {
			uint64_t i = (uint64_t)((k * (a->n + 1) * 5 + r) % T_IDS);
			struct chunk_id id = cid(i);
			struct chunk *c = store_acquire(a->sh->s, &id, CLEN, &role);
			if (!c) {
				atomic_fetch_add(&a->sh->bad, 1);
				continue;
			}
			if (role == STORE_PRODUCE) {
				atomic_fetch_add(&a->sh->produced[i], 1);
				sched_yield(); /* let others pile up on it */
				fill(c, i);
				store_complete(a->sh->s, c, true, 0, NULL);
			} else if (wait_done(c) != CHUNK_READY || !data_ok(c, i)) {
				atomic_fetch_add(&a->sh->bad, 1);
			}
			chunk_unref(c);
		}
	}
	return NULL;
}

static void test_threads_coalesce(void **state)
{
	(void)state;
	struct tshared *sh = calloc(1, sizeof *sh);
	assert_non_null(sh);
	sh->s = open_ram((uint64_t)(T_IDS + T_THREADS) * CLEN, POLICY_SUBSET);
	pthread_t th[T_THREADS];
	struct targ args[T_THREADS];
	for (int i = 0; i < T_THREADS; i++) {
		args[i] = (struct targ){ sh, i };
		assert_int_equal(pthread_create(&th[i], NULL, worker, &args[i]), 0);
	}
	for (int i = 0; i < T_THREADS; i++)
		pthread_join(th[i], NULL);
	assert_int_equal(atomic_load(&sh->bad), 0);
	/* Everything fits, so each chunk was fetched exactly once. */
	for (int i = 0; i < T_IDS; i++)
		assert_int_equal(atomic_load(&sh->produced[i]), 1);
	struct store_stats st = stats(sh->s);
	assert_int_equal(st.misses, T_IDS);
	assert_int_equal(st.hits_ram + st.coalesced + st.misses,
	                 (uint64_t)T_THREADS * T_ROUNDS * T_IDS);
	assert_int_equal(st.inflight, 0);
	assert_int_equal(st.ram_filling, 0);
	store_close(sh->s);
	free(sh);
}

/* ---- NVMe tier -------------------------------------------------------------------- */

static char tmpdir[512];

static int setup_dir(void **state)
{
	(void)state;
	const char *t = getenv("TMPDIR");
	snprintf(tmpdir, sizeof tmpdir, "%s/larder-store-XXXXXX", t && *t ? t : P_tmpdir);
	return mkdtemp(tmpdir) ? 0 : -1;
}

static void rm_rf(const char *path)
{
	DIR *d = opendir(path);
	if (d) {
		struct dirent *e;
		while ((e = readdir(d))) {
			if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
				continue;
			char sub[1024];
			snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
			rm_rf(sub);
		}
		closedir(d);
		rmdir(path);
	} else {
		unlink(path);
	}
}

static int teardown_dir(void **state)
{
	(void)state;
	rm_rf(tmpdir);
	return 0;
}

static struct store *open_disk(const char *dir, uint64_t seg, store_recover_cb cb, void *arg)
{
	char err[256] = "";
	struct store_config cfg = {
		.ram_bytes = 64 * CLEN, .disk_bytes = 4 << 20, .dir = dir,
		.policy = POLICY_SUBSET, .stale_after_s = 86400, .io_threads = 2,
		.segment_bytes = seg,
	};
	struct store *s = store_open(&cfg, cb, arg, err, sizeof err);
	if (!s)
		print_error("store_open: %s\n", err);
	assert_non_null(s);
	return s;
}

/* Polls until n NVMe writes were done (they are asynchronous), for 30 s
 * at most: a loaded machine took more than the 5 s this once allowed. */
static void wait_writes(struct store *s, uint64_t n)
{
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		if (stats(s).disk_writes >= n)
			break;
		msleep(1);
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while (t.tv_sec - t0.tv_sec < 30);
	assert_int_equal(stats(s).disk_writes, n);
}

static void recover_cb(void *arg, const struct chunk_origin *o)
{
	int *n = arg;
	if (o->index == 0 && strcmp(o->key, "dir/object") == 0)
		(*n)++;
}

static void test_disk_roundtrip(void **state)
{
	(void)state;
	char dir[600];
	snprintf(dir, sizeof dir, "%s/a/b", tmpdir); /* made with its parents */
	enum store_role role;

	struct store *s = open_disk(dir, 0, NULL, NULL);
	assert_true(stats(s).disk_ok);
	for (uint64_t i = 0; i < 4; i++)
		produce(s, i);
	wait_writes(s, 4);
	assert_int_equal(stats(s).disk_entries, 4);
	store_close(s);

	int recovered = 0;
	s = open_disk(dir, 0, recover_cb, &recovered);
	assert_int_equal(recovered, 1); /* chunk 0 only */
	struct chunk_id id3 = cid(3);
	assert_true(store_holds(s, &id3)); /* on NVMe */
	for (uint64_t i = 0; i < 4; i++) {
		struct chunk_id id = cid(i);
		struct chunk *c = store_acquire(s, &id, CLEN, &role);
		/* Read in this thread: the page cache has what was just written
		 * (test_disk_uncached_read_goes_to_io_threads drops it). */
		assert_int_equal(role, STORE_HIT);
		assert_int_equal(atomic_load(&c->state), CHUNK_READY);
		assert_true(data_ok(c, i));
		struct chunk *again = store_acquire(s, &id, CLEN, &role); /* promoted to RAM */
		assert_int_equal(role, STORE_HIT);
		assert_ptr_equal(again, c);
		chunk_unref(c);
		chunk_unref(again);
	}
	for (int k = 0; k < 1000 && stats(s).ram_entries < 4; k++)
		msleep(1);
	struct store_stats st = stats(s);
	assert_int_equal(st.ram_entries, 4);
	assert_int_equal(st.hits_disk, 4);
	assert_int_equal(st.hits_ram, 4);
	assert_int_equal(st.coalesced, 0);
	assert_int_equal(st.disk_writes, 0); /* nothing written back */
	/* A wrong length is neither the RAM copy nor the NVMe entry. */
	struct chunk_id id0 = cid(0);
	struct chunk *c = store_acquire(s, &id0, CLEN - 1, &role);
	assert_int_equal(role, STORE_PRODUCE);
	store_complete(s, c, false, -EIO, NULL);
	chunk_unref(c);
	store_close(s);
}

/* What a restart recovered, for the cluster's directory: every NVMe entry
 * (store_each_nvme) with whether it is a chunk 0 and a reader's copy, and
 * the recover callback's chunk 0 with its copy flag. */
struct seen {
	unsigned n, chunk0, copies; /* bit i: chunk i */
	bool copy0;                 /* the recover callback's chunk 0 is a copy */
};

static void seen_recovered(void *arg, const struct chunk_origin *o)
{
	struct seen *v = arg;
	v->copy0 = o->copy;
}

static void seen_entry(void *arg, const struct chunk_id *id, bool chunk0, bool copy)
{
	struct seen *v = arg;
	for (unsigned i = 0; i < 8; i++) {
		struct chunk_id want = cid(i);
		if (chunk_id_eq(id, &want)) {
			v->n++;
			v->chunk0 |= (unsigned)chunk0 << i;
			v->copies |= (unsigned)copy << i;
		}
	}
}

static void test_each_nvme_entry_after_restart(void **state)
{
	(void)state;
	char dir[600];
	snprintf(dir, sizeof dir, "%s/each", tmpdir);
	struct store *s = open_disk(dir, 0, NULL, NULL);
	for (uint64_t i = 0; i < 6; i++)
		produce_as(s, i, CLEN, i == 0 || i == 3);
	wait_writes(s, 6);
	store_close(s);

	struct seen v = { 0 };
	s = open_disk(dir, 0, seen_recovered, &v);
	assert_true(v.copy0);
	store_each_nvme(s, seen_entry, &v);
	assert_int_equal(v.n, 6);
	assert_int_equal(v.chunk0, 1u);
	assert_int_equal(v.copies, 1u | 1u << 3);
	store_close(s);

	/* A RAM tier only: nothing. */
	struct store_config cfg = { .ram_bytes = 64 * CLEN, .policy = POLICY_SUBSET };
	char err[256];
	s = store_open(&cfg, NULL, NULL, err, sizeof err);
	assert_non_null(s);
	produce(s, 1);
	struct seen none = { 0 };
	store_each_nvme(s, seen_entry, &none);
	assert_int_equal(none.n, 0);
	store_close(s);
}

/* A fetch's chunk keeps a copy of its bytes while it fills (chunk_keep).
 * The NVMe write reads the copy and then gives it back, and the entry
 * holds the bytes; a chunk that is not written (it failed, or there is no
 * NVMe tier) gives it back when it completes. */
static void test_kept_copy_written_and_given_back(void **state)
{
	(void)state;
	enum { LEN = 100 * 1024 };
	char dir[600];
	snprintf(dir, sizeof dir, "%s/kept", tmpdir);
	enum store_role role;
	struct store *s = open_disk(dir, 0, NULL, NULL);
	struct chunk_id id = cid(40);
	struct chunk *c = store_acquire(s, &id, LEN, &role);
	assert_int_equal(role, STORE_PRODUCE);
	chunk_keep(c);
	if (!atomic_load(&c->kept)) { /* no arena here */
		store_complete(s, c, false, -EIO, NULL);
		chunk_unref(c);
		store_close(s);
		skip();
	}
	fill(c, 40);
	assert_int_equal(chunk_filled(c), 0); /* in the copy only */
	assert_int_equal(chunk_flush(c), 0);
	struct chunk_origin o = origin(40);
	store_complete(s, c, true, 0, &o);
	wait_writes(s, 1);
	for (int i = 0; i < 1000 && atomic_load(&c->kept); i++)
		msleep(1);
	assert_null(atomic_load(&c->kept));
	assert_true(data_ok(c, 40));
	chunk_unref(c);

	struct chunk_id failed = cid(41);
	c = store_acquire(s, &failed, LEN, &role);
	assert_int_equal(role, STORE_PRODUCE);
	chunk_keep(c);
	assert_non_null(atomic_load(&c->kept));
	fill(c, 41);
	store_complete(s, c, false, -EIO, NULL);
	assert_null(atomic_load(&c->kept));
	chunk_unref(c);
	store_close(s);

	s = open_disk(dir, 0, NULL, NULL); /* the entry, from NVMe */
	c = store_acquire(s, &id, LEN, &role);
	assert_int_equal(role, STORE_HIT);
	assert_true(data_ok(c, 40));
	chunk_unref(c);
	store_close(s);

	s = open_ram(1 << 20, POLICY_SUBSET);
	c = store_acquire(s, &id, LEN, &role);
	assert_int_equal(role, STORE_PRODUCE);
	chunk_keep(c);
	assert_non_null(atomic_load(&c->kept));
	fill(c, 40);
	assert_int_equal(chunk_flush(c), 0);
	store_complete(s, c, true, 0, &o);
	assert_null(atomic_load(&c->kept));
	assert_true(data_ok(c, 40));
	chunk_unref(c);
	store_close(s);
}

/* Pins fill the RAM cap first (those chunks held in both tiers), then the
 * NVMe cap alone; past both, -ENOSPC. RAM lets the NVMe-only ones go,
 * NVMe keeps them; unpinning with the tiers store_pin gave frees both. The
 * NVMe cap counts entries as they lie on disk: 8 KiB for a 4 KiB chunk. */
static void test_pins_in_both_tiers(void **state)
{
	(void)state;
	char err[256] = "";
	const uint64_t entry = store_pin_nvme_bytes(CLEN, CLEN);
	assert_int_equal(entry, 8192);
	assert_int_equal(store_pin_nvme_bytes(0, CLEN), 0); /* an empty object has no chunk */
	assert_int_equal(store_pin_nvme_bytes(2 * CLEN + 1, CLEN), 2 * entry + 4096);
	struct store_config cfg = {
		.ram_bytes = 8 * CLEN, .disk_bytes = 4 << 20, .dir = tmpdir,
		.policy = POLICY_LRU, .stale_after_s = 86400, .io_threads = 2,
		.pin_bytes = 2 * CLEN, .pin_nvme_bytes = 5 * entry,
	};
	struct store *s = store_open(&cfg, NULL, NULL, err, sizeof err);
	assert_non_null(s);
	int tiers[5];
	for (uint64_t i = 0; i < 5; i++) {
		struct chunk_id id = cid(i);
		tiers[i] = store_pin(s, &id, CLEN);
		assert_int_equal(tiers[i], i < 2 ? STORE_PIN_RAM | STORE_PIN_NVME : STORE_PIN_NVME);
	}
	struct chunk_id id5 = cid(5);
	assert_int_equal(store_pin(s, &id5, CLEN), -ENOSPC);
	struct store_stats st = stats(s);
	assert_int_equal(st.pin_held, 2 * CLEN);
	assert_int_equal(st.nvme_pin_held, 5 * entry);
	assert_int_equal(st.nvme_pin_limit, 5 * entry);
	for (uint64_t i = 0; i < 5; i++)
		produce(s, i);
	wait_writes(s, 5);
	for (uint64_t i = 100; i < 140; i++) /* five times the RAM tier */
		produce(s, i);
	st = stats(s);
	assert_int_equal(st.ram_pinned, 2 * CLEN);
	assert_int_equal(st.nvme_pinned, 5 * entry); /* on disk, within the cap */
	for (uint64_t i = 0; i < 5; i++) {
		enum store_role role;
		struct chunk_id id = cid(i);
		struct chunk *c = store_acquire(s, &id, CLEN, &role);
		assert_int_equal(role, STORE_HIT); /* RAM, or NVMe through the page cache */
		assert_int_equal(wait_done(c), CHUNK_READY);
		assert_true(data_ok(c, i));
		chunk_unref(c);
	}
	for (uint64_t i = 0; i < 5; i++) {
		struct chunk_id id = cid(i);
		store_unpin(s, &id, tiers[i]);
	}
	st = stats(s);
	assert_int_equal(st.pin_held + st.nvme_pin_held + st.ram_pinned + st.nvme_pinned, 0);
	store_close(s);
}

/* Flips one byte of chunk i's data in whichever segment holds it. */
/* fn(fd, size, arg) for every regular file in dir (opened read-write)
 * until it returns true; returns whether one did. */
static bool each_file(const char *dir, bool (*fn)(int fd, size_t size, void *arg), void *arg)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	bool done = false;
	while (d && !done && (e = readdir(d))) {
		char path[1024];
		snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
		int fd = open(path, O_RDWR);
		struct stat st;
		if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
			done = fn(fd, (size_t)st.st_size, arg);
		if (fd >= 0)
			close(fd);
	}
	if (d)
		closedir(d);
	return done;
}

/* each_file: flips a byte of chunk *arg's data if this file holds it. */
static bool corrupt_in(int fd, size_t size, void *arg)
{
	/* The whole chunk: its first bytes alone also occur inside another
	 * chunk's pattern, which the file may hold first. */
	uint64_t i = *(const uint64_t *)arg;
	unsigned char want[CLEN];
	for (size_t k = 0; k < sizeof want; k++)
		want[k] = pat(i, k);
	unsigned char *buf = malloc(size + 1);
	ssize_t n = buf ? pread(fd, buf, size, 0) : -1;
	bool done = false;
	for (ssize_t off = 0; n > 0 && off + (ssize_t)sizeof want <= n; off++) {
		if (memcmp(buf + off, want, sizeof want) == 0) {
			unsigned char b = buf[off + 10] ^ 0xff;
			done = pwrite(fd, &b, 1, off + 10) == 1;
			break;
		}
	}
	free(buf);
	return done;
}

static bool corrupt(const char *dir, uint64_t i)
{
	return each_file(dir, corrupt_in, &i);
}

static void test_disk_corrupt_refetch(void **state)
{
	(void)state;
	char dir[600];
	snprintf(dir, sizeof dir, "%s/c", tmpdir);
	enum store_role role;
	struct store *s = open_disk(dir, 0, NULL, NULL);
	produce(s, 5);
	produce(s, 6);
	wait_writes(s, 2);
	store_close(s);
	assert_true(corrupt(dir, 5));

	s = open_disk(dir, 0, NULL, NULL);
	struct chunk_id id = cid(5);
	struct chunk *c = store_acquire(s, &id, CLEN, &role);
	assert_int_equal(role, STORE_WAIT); /* failed already: acquire again */
	assert_int_equal(wait_done(c), CHUNK_FAILED);
	assert_int_equal(c->fail_reason, STORE_ERR_REFETCH);
	chunk_unref(c);
	assert_int_equal(stats(s).disk_read_errors, 1);
	c = store_acquire(s, &id, CLEN, &role);
	assert_int_equal(role, STORE_PRODUCE); /* the bad copy is forgotten */
	fill(c, 5);
	store_complete(s, c, true, 0, NULL);
	chunk_unref(c);
	/* The neighbour is intact. */
	struct chunk_id id6 = cid(6);
	c = store_acquire(s, &id6, CLEN, &role);
	assert_int_equal(role, STORE_HIT);
	assert_int_equal(wait_done(c), CHUNK_READY);
	assert_true(data_ok(c, 6));
	chunk_unref(c);
	store_close(s);
}

/* Whether an RWF_NOWAIT read finds its pages absent (__wrap_preadv64v2):
 * what the kernel answers for pages the page cache does not hold. */
static atomic_bool nowait_misses;

ssize_t __real_preadv64v2(int fd, const struct iovec *iov, int n, off_t off, int flags);
ssize_t __wrap_preadv64v2(int fd, const struct iovec *iov, int n, off_t off, int flags);
ssize_t __wrap_preadv64v2(int fd, const struct iovec *iov, int n, off_t off, int flags)
{
	if ((flags & RWF_NOWAIT) && atomic_load(&nowait_misses)) {
		errno = EAGAIN;
		return -1;
	}
	return __real_preadv64v2(fd, iov, n, off, flags);
}

/* An entry the page cache does not hold is read by the I/O threads, not
 * in the acquiring thread, which must not wait on the device: the inline
 * read asks with RWF_NOWAIT, and its EAGAIN sends the read to them. The
 * kernel's answer is made here: on this project's virtual disks (8 MiB of
 * read-ahead, the host's cache behind them) a dropped page was often read
 * by the time the kernel looked, and 32 dropped entries in a row were all
 * hits on a loaded machine. A cached entry is a hit in the acquiring
 * thread (test_disk_tier_and_restart's reads, among others). */
static void test_disk_uncached_read_goes_to_io_threads(void **state)
{
	(void)state;
	char dir[600];
	snprintf(dir, sizeof dir, "%s/u", tmpdir);
	struct store *s = open_disk(dir, 0, NULL, NULL);
	produce(s, 7);
	wait_writes(s, 1);
	store_close(s);
	s = open_disk(dir, 0, NULL, NULL);
	atomic_store(&nowait_misses, true);
	enum store_role role;
	struct chunk_id id = cid(7);
	struct chunk *c = store_acquire(s, &id, CLEN, &role);
	atomic_store(&nowait_misses, false);
	assert_int_equal(role, STORE_WAIT);
	assert_int_equal(wait_done(c), CHUNK_READY);
	assert_true(data_ok(c, 7));
	chunk_unref(c);
	assert_int_equal(stats(s).hits_disk, 1);
	store_close(s);
}

/* Chunk i read back from NVMe for a reader of charge (0: nobody): its
 * bytes checked, and the RAM tier offered it (the I/O thread that may
 * have read it does so just after the chunk turns READY). */
static void promote(struct store *s, uint64_t i, unsigned charge)
{
	enum store_role role;
	struct chunk_id id = cid(i);
	uint64_t disk_hits = stats(s).hits_disk;
	struct chunk *c = store_acquire_charged(s, &id, CLEN, charge, &role);
	assert_non_null(c);
	assert_true(role == STORE_HIT || role == STORE_WAIT);
	assert_int_equal(wait_done(c), CHUNK_READY);
	assert_true(data_ok(c, i));
	chunk_unref(c);
	assert_int_equal(stats(s).hits_disk, disk_hits + 1);
	for (int k = 0; k < 2000 && stats(s).inflight > 0; k++)
		msleep(1);
	assert_int_equal(stats(s).inflight, 0);
}

/* A chunk read back from NVMe into RAM counts against the charge of the
 * reader that caused it, as a fetch would: with a limit, the charge's own
 * chunks make room and its bytes stay at it (a key's re-read of its data
 * set from NVMe, every epoch after the first, filled RAM uncharged). A
 * later reader of another charge does not move it; a pinned chunk counts
 * against no charge; store_acquire charges nobody. */
static void test_promotion_charged(void **state)
{
	(void)state;
	char dir[600];
	snprintf(dir, sizeof dir, "%s/charged", tmpdir);
	struct store *s = open_disk(dir, 0, NULL, NULL);
	for (uint64_t i = 0; i < 8; i++)
		produce(s, 20 + i); /* charged to nobody */
	wait_writes(s, 8);
	store_close(s);

	s = open_disk(dir, 0, NULL, NULL); /* RAM empty, NVMe full */
	assert_int_equal(stats(s).ram_entries, 0);
	assert_int_equal(store_charge_limit(s, 1, 2 * CLEN), 0);
	for (uint64_t i = 0; i < 4; i++)
		promote(s, 20 + i, 1);
	assert_int_equal(store_charged(s, 1), 2 * CLEN);
	assert_int_equal(stats(s).ram_entries, 2);

	/* Another charge's read of what charge 1 holds is a RAM hit. */
	uint64_t ram_hits = stats(s).hits_ram;
	for (uint64_t i = 0; i < 4; i++) {
		enum store_role role;
		struct chunk_id id = cid(20 + i);
		struct chunk *c = store_acquire_charged(s, &id, CLEN, 2, &role);
		assert_non_null(c);
		if (role != STORE_HIT) { /* one charge 1 did not keep: read for charge 2 */
			assert_int_equal(role, STORE_WAIT);
			assert_int_equal(wait_done(c), CHUNK_READY);
		}
		chunk_unref(c);
	}
	for (int k = 0; k < 2000 && stats(s).inflight > 0; k++)
		msleep(1);
	assert_int_equal(stats(s).hits_ram, ram_hits + 2);
	assert_int_equal(store_charged(s, 1), 2 * CLEN);
	assert_int_equal(store_charged(s, 2), 2 * CLEN);

	/* Pinned: kept, charged to nobody. Uncharged reader: nobody either. */
	struct chunk_id id = cid(24);
	assert_true(store_pin(s, &id, CLEN) & STORE_PIN_RAM);
	promote(s, 24, 1);
	promote(s, 25, 0);
	assert_int_equal(store_charged(s, 1), 2 * CLEN);
	assert_int_equal(stats(s).ram_entries, 6);
	assert_int_equal(stats(s).ram_pinned, CLEN);
	store_unpin(s, &id, store_pinned(s, &id));
	store_close(s);
}

/* A reader's copy of another node's chunk, read back from NVMe, is still a
 * copy in RAM: it goes before this node's own chunks (it entered RAM ranked
 * as one of them, and pushed one out where the cluster's rule keeps it). */
static void test_promoted_copy_ranks_after_own(void **state)
{
	(void)state;
	char dir[600];
	snprintf(dir, sizeof dir, "%s/copies", tmpdir);
	struct store *s = open_disk(dir, 0, NULL, NULL);
	for (uint64_t i = 0; i < 4; i++)
		produce_as(s, 300 + i, CLEN, true);
	wait_writes(s, 4);
	store_close(s);

	s = open_disk(dir, 0, NULL, NULL); /* RAM empty */
	for (uint64_t i = 0; i < 4; i++)
		promote(s, 300 + i, 0);
	assert_int_equal(stats(s).ram_entries, 4);
	for (uint64_t i = 0; i < 64; i++) /* RAM holds 64: four must go */
		produce(s, 400 + i);
	uint64_t ram_hits = stats(s).hits_ram;
	for (uint64_t i = 0; i < 4; i++)
		promote(s, 300 + i, 0); /* from NVMe each: the copies went first */
	assert_int_equal(stats(s).hits_ram, ram_hits);
	store_close(s);
}

/* The directory vanishes under the store: writes fail, the tier is
 * switched off, RAM keeps serving. */
static void test_disk_failing(void **state)
{
	(void)state;
	char dir[600];
	snprintf(dir, sizeof dir, "%s/gone", tmpdir);
	enum store_role role;
	/* One entry per segment, so every write needs a new file. */
	struct store *s = open_disk(dir, 4096, NULL, NULL);
	rm_rf(dir);
	for (uint64_t i = 0; i < 12; i++) {
		produce(s, 100 + i);
		for (int k = 0; k < 2000; k++) {
			struct store_stats st = stats(s);
			if (st.disk_write_errors + st.disk_writes + st.disk_writes_dropped > i || !st.disk_ok)
				break;
			msleep(1);
		}
	}
	struct store_stats st = stats(s);
	assert_false(st.disk_ok);
	assert_true(st.disk_write_errors >= 5);
	struct chunk_id id = cid(100);
	struct chunk *c = store_acquire(s, &id, CLEN, &role);
	assert_int_equal(role, STORE_HIT);
	chunk_unref(c);
	produce(s, 200); /* no NVMe: not queued */
	store_close(s);
}

/* Writes fail for a while (a file size limit stands in for a full or
 * failing device): the tier is switched off, and comes back by itself
 * once writes work again. */
static void test_disk_comes_back(void **state)
{
	(void)state;
	char dir[600];
	snprintf(dir, sizeof dir, "%s/back", tmpdir);
	struct store *s = open_disk(dir, 0, NULL, NULL);
	produce(s, 300);
	wait_writes(s, 1);
	struct rlimit old, lim;
	assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
	lim = old;
	lim.rlim_cur = 2 * CLEN; /* the first entry fits, no second one */
	void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
	for (uint64_t i = 0; i < 12 && stats(s).disk_ok; i++) {
		produce(s, 301 + i);
		for (int k = 0; k < 2000 && stats(s).disk_write_errors <= i && stats(s).disk_ok; k++)
			msleep(1);
	}
	struct store_stats st = stats(s);
	assert_false(st.disk_ok);
	assert_true(st.disk_write_errors >= 5);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
	signal(SIGXFSZ, prev);

	/* The device is fine again: new chunks reach NVMe within seconds. */
	for (uint64_t i = 0; i < 200 && !(stats(s).disk_ok && stats(s).disk_writes > 1); i++) {
		produce(s, 400 + i);
		msleep(50);
	}
	st = stats(s);
	assert_true(st.disk_ok);
	assert_true(st.disk_writes > 1);
	store_close(s);
}

/* test_store links with -Wl,--wrap=posix_memalign. While io_out_of_memory
 * is set, the store's I/O threads get no aligned memory (ENOMEM), so an
 * NVMe write of a large chunk finds no buffer for its bytes. */
int __real_posix_memalign(void **p, size_t align, size_t len);
int __wrap_posix_memalign(void **p, size_t align, size_t len);
static atomic_bool io_out_of_memory;

int __wrap_posix_memalign(void **p, size_t align, size_t len)
{
	char name[16] = "";
	if (atomic_load(&io_out_of_memory) && pthread_getname_np(pthread_self(), name, sizeof name) == 0 &&
	    strcmp(name, "larder-io") == 0)
		return ENOMEM;
	return __real_posix_memalign(p, align, len);
}

/* Writes that fail for want of memory say nothing of the device: however
 * many there are, the NVMe tier stays on, and the next write lands. */
static void test_disk_write_without_memory(void **state)
{
	(void)state;
	enum { BIG = 1 << 20, N = 8 };
	char dir[600], err[256] = "";
	snprintf(dir, sizeof dir, "%s/nomem", tmpdir);
	struct store_config cfg = {
		.ram_bytes = 32 << 20, .disk_bytes = 64 << 20, .dir = dir,
		.policy = POLICY_LRU, .stale_after_s = 86400, .io_threads = 2,
	};
	struct store *s = store_open(&cfg, NULL, NULL, err, sizeof err);
	assert_non_null(s);
	atomic_store(&io_out_of_memory, true);
	for (uint64_t i = 0; i < N; i++) {
		produce_len(s, 500 + i, BIG);
		for (int k = 0; k < 2000 && stats(s).disk_write_errors <= i; k++)
			msleep(1);
	}
	atomic_store(&io_out_of_memory, false);
	struct store_stats st = stats(s);
	assert_int_equal(st.disk_write_errors, N);
	assert_int_equal(st.disk_writes, 0);
	assert_true(st.disk_ok);
	produce_len(s, 600, BIG);
	wait_writes(s, 1);
	store_close(s);
}

static void test_ram_only_with_dir(void **state)
{
	(void)state;
	char dir[600], err[256];
	snprintf(dir, sizeof dir, "%s/unused", tmpdir);
	struct store_config cfg = { .ram_bytes = 1 << 20, .disk_bytes = 0, .dir = dir };
	struct store *s = store_open(&cfg, NULL, NULL, err, sizeof err);
	assert_non_null(s);
	struct stat st;
	assert_int_equal(stat(dir, &st), -1); /* never created */
	produce(s, 1);
	assert_false(stats(s).disk_ok);
	store_close(s);
}

/* A chunk-0 fetch that began before an invalidation of its object and ends
 * after it holds the version the invalidation removed (or one S3 replaced
 * while it ran): after a restart it must not give its metadata back. */
static void test_fetch_begun_before_invalidation_not_recovered(void **state)
{
	(void)state;
	char dir[600];
	snprintf(dir, sizeof dir, "%s/race", tmpdir);
	enum store_role role;
	struct store *s = open_disk(dir, 0, NULL, NULL);
	struct chunk_id id = cid(0);
	struct chunk *c = store_acquire(s, &id, CLEN, &role);
	assert_int_equal(role, STORE_PRODUCE);
	struct chunk_origin o = origin(0);
	assert_int_equal(store_invalidate(s, o.bucket, o.key, false), 0);
	fill(c, 0);
	store_complete(s, c, true, 0, &o);
	chunk_unref(c);
	wait_writes(s, 1);
	store_close(s);

	int recovered = 0;
	s = open_disk(dir, 0, recover_cb, &recovered);
	assert_int_equal(recovered, 0);
	store_close(s);
}

/* Produces chunk 0 of o's object and waits until n entries were written. */
static void produce_chunk0(struct store *s, const struct chunk_origin *o, uint64_t n)
{
	enum store_role role;
	struct chunk_id id = cid(0);
	struct chunk *c = store_acquire(s, &id, CLEN, &role);
	assert_int_equal(role, STORE_PRODUCE);
	fill(c, 0);
	store_complete(s, c, true, 0, o);
	chunk_unref(c);
	wait_writes(s, n);
}

/* A chunk 0 that begins and ends while a write to its object is under way
 * may hold the version the write replaces (S3 had not applied it yet). If
 * the process dies before the write's answer, only the tombstone
 * store_write_begin wrote is on disk: it must cover that chunk. Once the
 * write is over, a chunk 0 begun afterwards is recovered as usual. */
static void test_chunk_during_a_write_not_recovered(void **state)
{
	(void)state;
	char dir[600];
	snprintf(dir, sizeof dir, "%s/writing", tmpdir);
	struct store *s = open_disk(dir, 0, NULL, NULL);
	struct chunk_origin o = origin(0);
	assert_int_equal(store_write_begin(s, 7, o.bucket, o.key, false), 0);
	produce_chunk0(s, &o, 1);
	store_close(s); /* as a crash: no store_write_end, no second tombstone */

	int recovered = 0;
	s = open_disk(dir, 0, recover_cb, &recovered);
	assert_int_equal(recovered, 0);
	assert_int_equal(store_write_begin(s, 8, o.bucket, o.key, false), 0);
	store_write_end(s, 8);
	produce_chunk0(s, &o, 1);
	store_close(s);
	s = open_disk(dir, 0, recover_cb, &recovered);
	assert_int_equal(recovered, 1);
	store_close(s);
}

/* A tombstone queued for the I/O threads (store_invalidate_queued) covers
 * the chunk 0 written before it once it is on disk, and store_close writes
 * those still queued: a restart recovers neither object's metadata. */
static void test_queued_invalidation_not_recovered(void **state)
{
	(void)state;
	char dir[600];
	snprintf(dir, sizeof dir, "%s/queued", tmpdir);
	struct store *s = open_disk(dir, 0, NULL, NULL);
	struct chunk_origin o = origin(0);
	produce_chunk0(s, &o, 1);
	assert_int_equal(store_invalidate_queued(s, o.bucket, o.key, false), 0);
	store_close(s); /* at once: the tombstone may still be queued */

	int recovered = 0;
	s = open_disk(dir, 0, recover_cb, &recovered);
	assert_int_equal(recovered, 0);
	produce_chunk0(s, &o, 1);
	assert_int_equal(store_invalidate_queued(s, o.bucket, "dir/", true), 0);
	store_close(s);
	s = open_disk(dir, 0, recover_cb, &recovered);
	assert_int_equal(recovered, 0);
	store_close(s);
}

/* The changed callback of the test below: parks the I/O thread inside its
 * first write until the test lets it go, so the writes queued meanwhile
 * wait in the queue. */
struct gate {
	pthread_t main;
	pthread_mutex_t m;
	pthread_cond_t cv;
	bool parked, open;
};

static void gate_changed(void *arg, const struct chunk_id *id)
{
	struct gate *g = arg;
	(void)id;
	if (pthread_equal(pthread_self(), g->main))
		return; /* store_complete's own call, not the I/O thread's */
	pthread_mutex_lock(&g->m);
	g->parked = true;
	pthread_cond_broadcast(&g->cv);
	while (!g->open)
		pthread_cond_wait(&g->cv, &g->m);
	pthread_mutex_unlock(&g->m);
}

/* Parks the I/O thread after its first write until the gate opens. */
static void gate_wait_parked(struct gate *g)
{
	pthread_mutex_lock(&g->m);
	while (!g->parked)
		pthread_cond_wait(&g->cv, &g->m);
	pthread_mutex_unlock(&g->m);
}

static void gate_open(struct gate *g)
{
	pthread_mutex_lock(&g->m);
	g->open = true;
	pthread_cond_broadcast(&g->cv);
	pthread_mutex_unlock(&g->m);
}

/* A store with one I/O thread, its NVMe tier in tmpdir/name, whose writes
 * go through the gate g (made here; gate_fini when done). */
static struct store *open_gated(const char *name, uint64_t ram, struct gate *g,
                                struct store_config *cfg, char *dir, size_t dirlen)
{
	char err[256] = "";
	snprintf(dir, dirlen, "%s/%s", tmpdir, name);
	*g = (struct gate){ .main = pthread_self() };
	pthread_mutex_init(&g->m, NULL);
	pthread_cond_init(&g->cv, NULL);
	*cfg = (struct store_config){
		.ram_bytes = ram, .disk_bytes = 4 << 20, .dir = dir,
		.policy = POLICY_LRU, .stale_after_s = 86400, .io_threads = 1,
		.changed = gate_changed, .changed_arg = g,
	};
	struct store *s = store_open(cfg, NULL, NULL, err, sizeof err);
	assert_non_null(s);
	return s;
}

static void gate_fini(struct gate *g)
{
	pthread_mutex_destroy(&g->m);
	pthread_cond_destroy(&g->cv);
}

/* A chunk larger than the write queue's byte bound (a quarter of RAM) is
 * written when little waits before it: a small chunk's write still queued
 * (the object's 10-byte tail, done first) must not cost chunk 0 its NVMe
 * copy, and with it the object's metadata after a restart. */
static void test_big_write_behind_small_one(void **state)
{
	(void)state;
	char dir[600];
	struct gate g;
	struct store_config cfg;
	struct store *s = open_gated("queue", 8 * CLEN, &g, &cfg, dir, sizeof dir);

	produce_len(s, 5, 10);    /* the I/O thread takes it and parks */
	gate_wait_parked(&g);
	produce_len(s, 1, 10);    /* waits in the queue */
	produce_len(s, 0, 4 * CLEN); /* twice the byte bound */

	gate_open(&g);
	assert_int_equal(stats(s).disk_writes_dropped, 0);
	wait_writes(s, 3);
	store_close(s);
	gate_fini(&g);
}

static void *close_store(void *arg)
{
	store_close(arg);
	return NULL;
}

/* A stop writes what is queued: chunks fetched just before SIGTERM are on
 * NVMe after the restart. (Writes wait to be batched, so a stop often
 * finds some queued.) If store_close has not said stop when the gate
 * opens, the queued writes are written anyway: the test passes, it cannot
 * fail wrongly. */
static void test_close_writes_what_is_queued(void **state)
{
	(void)state;
	char dir[600], err[256] = "";
	struct gate g;
	struct store_config cfg;
	struct store *s = open_gated("close", 64 * CLEN, &g, &cfg, dir, sizeof dir);
	produce(s, 0); /* the I/O thread takes it (once its batch is due) and parks */
	gate_wait_parked(&g);
	produce(s, 100);
	produce(s, 101);

	pthread_t closer;
	assert_int_equal(pthread_create(&closer, NULL, close_store, s), 0);
	msleep(50); /* store_close has said stop and waits for the thread */
	gate_open(&g);
	pthread_join(closer, NULL);

	cfg.changed = NULL;
	s = store_open(&cfg, NULL, NULL, err, sizeof err);
	assert_non_null(s);
	struct chunk_id z = cid(0), a = cid(100), b = cid(101);
	assert_true(store_holds(s, &z));
	assert_true(store_holds(s, &a));
	assert_true(store_holds(s, &b));
	store_close(s);
	gate_fini(&g);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ram_only_roles),
		cmocka_unit_test(test_failure_fanout),
		cmocka_unit_test(test_ram_bound_subset),
		cmocka_unit_test(test_ram_bound_lru),
		cmocka_unit_test(test_copies_kept_after_own),
		cmocka_unit_test(test_inflight_bytes),
		cmocka_unit_test(test_drop),
		cmocka_unit_test(test_threads_coalesce),
		cmocka_unit_test_setup_teardown(test_disk_roundtrip, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(test_kept_copy_written_and_given_back, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(test_each_nvme_entry_after_restart, setup_dir,
		                                teardown_dir),
		cmocka_unit_test_setup_teardown(test_disk_corrupt_refetch, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(test_disk_uncached_read_goes_to_io_threads, setup_dir,
		                                teardown_dir),
		cmocka_unit_test_setup_teardown(test_promotion_charged, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(test_promoted_copy_ranks_after_own, setup_dir,
		                                teardown_dir),
		cmocka_unit_test_setup_teardown(test_disk_failing, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(test_disk_comes_back, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(test_disk_write_without_memory, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(test_ram_only_with_dir, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(test_pins_in_both_tiers, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(test_fetch_begun_before_invalidation_not_recovered,
		                                setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(test_chunk_during_a_write_not_recovered, setup_dir,
		                                teardown_dir),
		cmocka_unit_test_setup_teardown(test_queued_invalidation_not_recovered, setup_dir,
		                                teardown_dir),
		cmocka_unit_test_setup_teardown(test_close_writes_what_is_queued, setup_dir,
		                                teardown_dir),
		cmocka_unit_test_setup_teardown(test_big_write_behind_small_one, setup_dir,
		                                teardown_dir),
		cmocka_unit_test(test_large_chunk_in_arena),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

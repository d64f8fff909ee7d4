/*
 * test_chunk.c - chunk identity, waiters and the producer/reader protocol
 * (store/chunk.h), including the threaded cases.
 */
#include <errno.h>
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
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <openssl/evp.h>
#include <pthread.h>

#include "base/sha256.h"
#include "store/chunk.h"

/* ---- helpers ------------------------------------------------------------ */

/* A waiter that counts its wakes and lets a thread sleep until one comes. */
struct tw {
	struct chunk_waiter w;
	pthread_mutex_t m;
	pthread_cond_t cv;
	int wakes;
	bool flag;
};

static void tw_wake(void *arg)
{
	struct tw *t = arg;
	pthread_mutex_lock(&t->m);
	t->wakes++;
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

static int tw_wakes(struct tw *t)
{
	pthread_mutex_lock(&t->m);
	int n = t->wakes;
	pthread_mutex_unlock(&t->m);
	return n;
}

/* Sleeps until the next wake, consuming it. */
static void tw_sleep(struct tw *t)
{
	pthread_mutex_lock(&t->m);
	while (!t->flag)
		pthread_cond_wait(&t->cv, &t->m);
	t->flag = false;
	pthread_mutex_unlock(&t->m);
}

static struct chunk *mk(size_t len)
{
	struct chunk_id id;
	chunk_id_make("b", "k", "\"etag\"", 0, &id);
	struct chunk *c = chunk_new(&id, len);
	assert_non_null(c);
	return c;
}

static void msleep(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

/* ---- identity ------------------------------------------------------------ */

/* The id as its definition says, with OpenSSL's one-shot digest: SHA-256 of
 * bucket, key and etag, each after its length as 8 bytes big-endian, then
 * the index as 8 bytes big-endian, truncated to CHUNK_ID_LEN bytes. */
static void id_by_hand(const char *bucket, const char *key, const char *etag, uint64_t index,
                       struct chunk_id *out)
{
	unsigned char msg[1024], md[32];
	size_t n = 0;
	const char *f[] = { bucket, key, etag };
	for (int i = 0; i < 3; i++) {
		size_t l = strlen(f[i]);
		for (int b = 7; b >= 0; b--)
			msg[n++] = (unsigned char)((uint64_t)l >> (8 * b));
		memcpy(msg + n, f[i], l);
		n += l;
	}
	for (int b = 7; b >= 0; b--)
		msg[n++] = (unsigned char)(index >> (8 * b));
	unsigned int ml = 0;
	assert_int_equal(EVP_Digest(msg, n, md, &ml, EVP_sha256(), NULL), 1);
	memcpy(out->b, md, CHUNK_ID_LEN);
}

/* Ids and sha256() share each thread's one digest context: hashes made
 * between ids, of other lengths, leave no trace in the next. */
static void test_id_is_its_definition(void **state)
{
	(void)state;
	static const char two_blocks[] = "a much longer key, past one block of SHA-256's "
	                                 "64 bytes, so that it takes two";
	static const char *const keys[] = { "", "k", "dir/object", two_blocks };
	for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
		for (uint64_t index = 0; index < 3; index++) {
			struct chunk_id got, want;
			chunk_id_make("bucket", keys[i], "\"0123\"", index * 1000003, &got);
			id_by_hand("bucket", keys[i], "\"0123\"", index * 1000003, &want);
			assert_memory_equal(got.b, want.b, CHUNK_ID_LEN);

			unsigned char in[sizeof two_blocks + 2] = { 0 }, a[32], b[32];
			unsigned int bl = 0;
			size_t n = strlen(keys[i]) + index; /* 0-2 zero bytes past the key */
			memcpy(in, keys[i], strlen(keys[i]));
			sha256(in, n, a);
			EVP_Digest(in, n, b, &bl, EVP_sha256(), NULL);
			assert_memory_equal(a, b, 32);
		}
	}
}

#define ID_THREADS 4
#define ID_ROUNDS 2000

static void *make_ids(void *arg)
{
	const struct chunk_id *want = arg;
	for (int r = 0; r < 3; r++)
		for (uint64_t i = 0; i < ID_ROUNDS; i++) {
			struct chunk_id id;
			chunk_id_make("b", "threads", "\"e\"", i, &id);
			if (!chunk_id_eq(&id, &want[i]))
				return (void *)1;
		}
	return NULL;
}

/* Threads making ids at once each get the ids one thread makes alone. */
static void test_ids_across_threads(void **state)
{
	(void)state;
	static struct chunk_id want[ID_ROUNDS];
	for (uint64_t i = 0; i < ID_ROUNDS; i++)
		id_by_hand("b", "threads", "\"e\"", i, &want[i]);
	pthread_t t[ID_THREADS];
	for (int i = 0; i < ID_THREADS; i++)
		assert_int_equal(pthread_create(&t[i], NULL, make_ids, want), 0);
	for (int i = 0; i < ID_THREADS; i++) {
		void *bad = (void *)1;
		pthread_join(t[i], &bad);
		assert_null(bad);
	}
}

static void test_id(void **state)
{
	(void)state;
	struct chunk_id a, b, c, d;
	chunk_id_make("bucket", "key", "etag", 3, &a);
	chunk_id_make("bucket", "key", "etag", 3, &b);
	assert_true(chunk_id_eq(&a, &b));
	chunk_id_make("bucket", "key", "etag", 4, &c);
	assert_false(chunk_id_eq(&a, &c));
	/* Length prefixes: moving a byte across a field boundary changes the id. */
	chunk_id_make("ab", "c", "etag", 0, &c);
	chunk_id_make("a", "bc", "etag", 0, &d);
	assert_false(chunk_id_eq(&c, &d));
	chunk_id_make("bucket", "key", "etag2", 3, &c);
	assert_false(chunk_id_eq(&a, &c));

	uint64_t h = 0;
	for (int i = 0; i < 8; i++)
		h = h << 8 | a.b[i];
	assert_int_equal(chunk_id_hash(&a), h);

	/* The NVMe tier finds its entries by these ids after a restart and an
	 * upgrade: the first 16 bytes of SHA-256 over the length-prefixed
	 * tuple, as computed apart from this code (Python's hashlib). */
	static const uint8_t want[CHUNK_ID_LEN] = {
		0xcd, 0xd2, 0xd6, 0x70, 0x1f, 0x0c, 0x41, 0xd8,
		0xac, 0x0f, 0x79, 0xc6, 0x36, 0x7d, 0x8b, 0x77,
	};
	assert_memory_equal(a.b, want, CHUNK_ID_LEN);
}

static void test_new_unref(void **state)
{
	(void)state;
	struct chunk *c = mk(0);
	assert_int_equal(chunk_refs(c), 1);
	assert_int_equal(chunk_state(c), CHUNK_FILLING);
	chunk_set_state(c, CHUNK_READY, 0); /* filled == len == 0 */
	chunk_ref(c);
	assert_int_equal(chunk_refs(c), 2);
	chunk_unref(c);
	chunk_unref(c);
	chunk_unref(NULL);
}

/* ---- waiters ------------------------------------------------------------- */

/* The process-wide count of chunk bytes that bounds read-ahead
 * (gateway/cache.c) follows every chunk from creation to its last unref. */
static void test_live_bytes(void **state)
{
	(void)state;
	struct chunk_id id = { { 7 } };
	uint64_t before = chunk_live_bytes();
	struct chunk *a = chunk_new(&id, 1000);
	struct chunk *b = chunk_new(&id, 24);
	assert_non_null(a);
	assert_non_null(b);
	assert_int_equal(chunk_live_bytes(), before + 1024);
	chunk_ref(a);
	chunk_unref(a);
	assert_int_equal(chunk_live_bytes(), before + 1024);
	chunk_unref(a);
	assert_int_equal(chunk_live_bytes(), before + 24);
	chunk_unref(b);
	assert_int_equal(chunk_live_bytes(), before);
}

static void test_wake_on_append_and_state(void **state)
{
	(void)state;
	struct chunk *c = mk(8);
	struct tw t;
	tw_init(&t);

	chunk_wait(c, &t.w, 0);
	assert_int_equal(tw_wakes(&t), 0); /* nothing happened yet */
	chunk_append(c, "abcd", 4);
	assert_int_equal(tw_wakes(&t), 1);
	assert_int_equal(chunk_filled(c), 4);
	char got[4];
	assert_int_equal(chunk_read(c, 0, got, 4), 0);
	assert_memory_equal(got, "abcd", 4);
	chunk_wait(c, &t.w, 4); /* already registered: a no-op, nothing new */
	assert_int_equal(tw_wakes(&t), 1);
	chunk_append(c, "efgh", 4);
	assert_int_equal(tw_wakes(&t), 2);
	chunk_set_state(c, CHUNK_READY, 0);
	assert_int_equal(tw_wakes(&t), 3);
	assert_int_equal(chunk_state(c), CHUNK_READY);

	chunk_unwait(c, &t.w);
	chunk_unref(c);
	tw_fini(&t);
}

static void test_failed_reason(void **state)
{
	(void)state;
	struct chunk *c = mk(8);
	struct tw t[3];
	for (int i = 0; i < 3; i++) {
		tw_init(&t[i]);
		chunk_wait(c, &t[i].w, 0);
	}
	chunk_append(c, "ab", 2);
	chunk_set_state(c, CHUNK_FAILED, -5);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(tw_wakes(&t[i]), 2);
		chunk_unwait(c, &t[i].w);
		tw_fini(&t[i]);
	}
	assert_int_equal(chunk_state(c), CHUNK_FAILED);
	assert_int_equal(c->fail_reason, -5);
	chunk_unref(c);
}

/* Registering after the event: the wake comes from chunk_wait itself. */
static void test_no_lost_wakeup(void **state)
{
	(void)state;
	struct chunk *c = mk(8);
	struct tw t;
	tw_init(&t);

	chunk_append(c, "abcd", 4);
	chunk_wait(c, &t.w, 0);        /* saw 0, there are 4 */
	assert_int_equal(tw_wakes(&t), 1);
	chunk_unwait(c, &t.w);
	chunk_wait(c, &t.w, 4);        /* saw everything: no wake */
	assert_int_equal(tw_wakes(&t), 1);
	chunk_unwait(c, &t.w);

	chunk_append(c, "efgh", 4);
	chunk_set_state(c, CHUNK_READY, 0);
	chunk_wait(c, &t.w, 8);        /* all bytes seen, but the state changed */
	assert_int_equal(tw_wakes(&t), 2);
	chunk_unwait(c, &t.w);

	chunk_unref(c);
	tw_fini(&t);
}

static void test_unwait_stops_wakes(void **state)
{
	(void)state;
	struct chunk *c = mk(8);
	struct tw a, b;
	tw_init(&a);
	tw_init(&b);
	chunk_wait(c, &a.w, 0);
	chunk_wait(c, &b.w, 0);
	chunk_unwait(c, &a.w);
	chunk_unwait(c, &a.w); /* twice is harmless */
	chunk_append(c, "x", 1);
	assert_int_equal(tw_wakes(&a), 0);
	assert_int_equal(tw_wakes(&b), 1);
	/* A waiter can be reused on another chunk. */
	struct chunk *d = mk(1);
	chunk_wait(d, &a.w, 0);
	chunk_append(d, "y", 1);
	assert_int_equal(tw_wakes(&a), 1);
	chunk_unwait(d, &a.w);
	chunk_unwait(c, &b.w);
	chunk_unref(d);
	chunk_unref(c);
	tw_fini(&a);
	tw_fini(&b);
}

/* More waiters than one wake batch: every one is called. */
static void test_many_waiters(void **state)
{
	(void)state;
	enum { N = 50 };
	struct chunk *c = mk(4);
	struct tw *t = calloc(N, sizeof *t);
	assert_non_null(t);
	for (int i = 0; i < N; i++) {
		tw_init(&t[i]);
		chunk_wait(c, &t[i].w, 0);
	}
	chunk_append(c, "abcd", 4);
	for (int i = 0; i < N; i++)
		assert_int_equal(tw_wakes(&t[i]), 1);
	for (int i = 0; i < N; i += 2)
		chunk_unwait(c, &t[i].w);
	chunk_set_state(c, CHUNK_READY, 0);
	for (int i = 0; i < N; i++) {
		assert_int_equal(tw_wakes(&t[i]), i % 2 ? 2 : 1);
		chunk_unwait(c, &t[i].w);
		tw_fini(&t[i]);
	}
	free(t);
	chunk_unref(c);
}

/* ---- unwait while a wake is in flight ---------------------------------------- */

struct slow {
	struct chunk_waiter w;
	atomic_int entered, left, calls;
};

static void slow_wake(void *arg)
{
	struct slow *s = arg;
	atomic_fetch_add(&s->calls, 1);
	atomic_store(&s->entered, 1);
	msleep(100);
	atomic_store(&s->left, 1);
}

static void *append_one(void *arg)
{
	chunk_append(arg, "z", 1);
	return NULL;
}

static void test_unwait_waits_for_wake(void **state)
{
	(void)state;
	struct chunk *c = mk(4);
	struct slow *s = calloc(1, sizeof *s);
	assert_non_null(s);
	s->w = (struct chunk_waiter){ .wake = slow_wake, .arg = s };
	chunk_wait(c, &s->w, 0);

	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, append_one, c), 0);
	while (!atomic_load(&s->entered))
		msleep(1);
	chunk_unwait(c, &s->w);
	/* The call that was running when we left has returned... */
	assert_int_equal(atomic_load(&s->left), 1);
	int calls = atomic_load(&s->calls);
	free(s); /* ...so the waiter may go: ASan would catch a later call. */
	chunk_append(c, "z", 1);
	assert_int_equal(calls, 1);
	pthread_join(th, NULL);
	chunk_unref(c);
}

/* ---- one producer, many readers --------------------------------------------------- */

enum { STRESS_LEN = 1 << 20, PIECE = 1024, READERS = 8 };

static unsigned char expect_byte(size_t i)
{
	return (unsigned char)((i * 2654435761u) >> 13);
}

struct reader {
	pthread_t th;
	struct chunk *c;
	int start_delay_ms;
	unsigned char *copy;
	size_t got;
	int wakes_used;
};

static void *reader_main(void *arg)
{
	struct reader *r = arg;
	struct tw t;
	tw_init(&t);
	if (r->start_delay_ms)
		msleep(r->start_delay_ms);
	chunk_ref(r->c);
	chunk_wait(r->c, &t.w, 0);
	for (;;) {
		/* State before filled: READY seen means filled == len is visible. */
		enum chunk_state st = chunk_state(r->c);
		size_t f = chunk_filled(r->c);
		assert_int_equal(chunk_read(r->c, r->got, r->copy + r->got, f - r->got), 0);
		r->got = f;
		if (st != CHUNK_FILLING)
			break;
		tw_sleep(&t);
		r->wakes_used++;
	}
	chunk_unwait(r->c, &t.w);
	chunk_unref(r->c);
	tw_fini(&t);
	return NULL;
}

static void test_stress_readers(void **state)
{
	(void)state;
	struct chunk *c = mk(STRESS_LEN);
	unsigned char *src = malloc(STRESS_LEN);
	assert_non_null(src);
	for (size_t i = 0; i < STRESS_LEN; i++)
		src[i] = expect_byte(i);

	struct reader r[READERS];
	for (int i = 0; i < READERS; i++) {
		r[i] = (struct reader){ .c = c, .start_delay_ms = i % 3 == 2 ? 5 * i : 0 };
		r[i].copy = malloc(STRESS_LEN);
		assert_non_null(r[i].copy);
		assert_int_equal(pthread_create(&r[i].th, NULL, reader_main, &r[i]), 0);
	}
	for (size_t off = 0; off < STRESS_LEN; off += PIECE) {
		chunk_append(c, src + off, PIECE);
		if (off % (64 * PIECE) == 0)
			sched_yield();
	}
	chunk_set_state(c, CHUNK_READY, 0);
	for (int i = 0; i < READERS; i++) {
		pthread_join(r[i].th, NULL);
		assert_int_equal(r[i].got, STRESS_LEN);
		assert_memory_equal(r[i].copy, src, STRESS_LEN);
		free(r[i].copy);
	}
	assert_int_equal(chunk_refs(c), 1);
	chunk_unref(c);
	free(src);
}

/* A large chunk's bytes go to the arena; when it refuses them (a memory
 * cgroup's limit: ENOSPC; here a file size limit: EFBIG), the append
 * fails and publishes nothing, and the bytes before stay readable. */
static void test_append_refused(void **state)
{
	(void)state;
	struct chunk *c = mk(1 << 20);
	uint64_t off;
	if (chunk_fd(c, &off) < 0) {
		chunk_unref(c);
		skip(); /* no memfd: the bytes are on the heap */
	}
	struct rlimit was, lim;
	assert_int_equal(getrlimit(RLIMIT_FSIZE, &was), 0);
	lim = (struct rlimit){ off + 4096, was.rlim_max };
	void (*old)(int) = signal(SIGXFSZ, SIG_IGN);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
	char buf[8192];
	memset(buf, 'x', sizeof buf);
	int first = chunk_append(c, buf, 4096), second = chunk_append(c, buf, sizeof buf);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &was), 0);
	signal(SIGXFSZ, old);
	assert_int_equal(first, 0);
	assert_int_equal(second, -EFBIG);
	assert_int_equal(chunk_filled(c), 4096);
	char got[4096];
	assert_int_equal(chunk_read(c, 0, got, sizeof got), 0);
	assert_memory_equal(got, buf, sizeof got);
	chunk_set_state(c, CHUNK_FAILED, -ENOSPC);
	chunk_unref(c);
}

/* Appending nothing (a producer whose chunk is already full, handed more
 * bytes) succeeds and publishes nothing, in the arena and on the heap. */
static void test_append_nothing(void **state)
{
	(void)state;
	struct chunk *c = mk(128 * 1024), *h = mk(100);
	char b[16] = "x";
	assert_int_equal(chunk_append(c, b, 0), 0);
	assert_int_equal(chunk_append(h, b, 0), 0);
	assert_int_equal(chunk_filled(c), 0);
	assert_int_equal(chunk_filled(h), 0);
	chunk_unref(c);
	chunk_unref(h);
}

/* This process's write system calls so far (/proc/self/io's syscw; reading
 * the file is no write). */
static long writes_so_far(void)
{
	FILE *f = fopen("/proc/self/io", "r");
	assert_non_null(f);
	char line[128];
	long n = -1;
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "syscw: %ld", &n) == 1)
			break;
	fclose(f);
	assert_true(n >= 0);
	return n;
}

/* An arena chunk of 115 KiB with a copy kept (chunk_keep), or NULL (and
 * the test skipped) when there is no arena. */
static struct chunk *mk_kept(size_t len)
{
	struct chunk *c = mk(len);
	uint64_t off;
	if (chunk_fd(c, &off) < 0) {
		chunk_unref(c);
		return NULL;
	}
	chunk_keep(c);
	assert_non_null(atomic_load(&c->kept));
	return c;
}

/* A fetch hands its bytes over 16 KiB at a time. With a copy kept they
 * reach the arena in one write per flush, and readers are told of them
 * then, not before; the NVMe write's view of the chunk is the copy; and
 * once the copy is given back the bytes are the arena's as before. */
static void test_keep_coalesces(void **state)
{
	(void)state;
	enum { LEN = 115 * 1024, CURL_PIECE = 16 * 1024 };
	static char src[LEN], got[LEN];
	for (size_t i = 0; i < LEN; i++)
		src[i] = (char)(i * 7 + i / 4096);
	struct chunk *c = mk_kept(LEN);
	if (!c)
		skip(); /* no memfd: the bytes are on the heap */
	struct tw t;
	tw_init(&t);
	chunk_wait(c, &t.w, 0);
	long w0 = writes_so_far();
	for (size_t d = 0; d < LEN; d += CURL_PIECE)
		assert_int_equal(chunk_append(c, src + d, LEN - d < CURL_PIECE ? LEN - d : CURL_PIECE), 0);
	assert_int_equal(writes_so_far() - w0, 0);
	assert_int_equal(chunk_filled(c), 0);
	assert_int_equal(chunk_produced(c), LEN);
	assert_int_equal(t.wakes, 0);
	chunk_flush_pending();
	assert_int_equal(writes_so_far() - w0, 1);
	assert_int_equal(chunk_filled(c), LEN);
	assert_true(t.wakes >= 1);
	chunk_flush_pending(); /* nothing left: no write */
	assert_int_equal(chunk_flush(c), 0);
	assert_int_equal(writes_so_far() - w0, 1);
	chunk_unwait(c, &t.w);
	tw_fini(&t);
	chunk_set_state(c, CHUNK_READY, 0);

	const char *v = chunk_view(c);
	assert_ptr_equal(v, atomic_load(&c->kept));
	assert_memory_equal(v, src, LEN);
	chunk_unkeep(c);
	assert_null(atomic_load(&c->kept));
	v = chunk_view(c);
	assert_non_null(v);
	assert_memory_equal(v, src, LEN);
	assert_int_equal(chunk_read(c, 0, got, LEN), 0);
	assert_memory_equal(got, src, LEN);
	chunk_unref(c);
}

/* A flush the arena refuses (here a file size limit: EFBIG) publishes
 * nothing, and its error reaches the producer at its next append and at
 * chunk_flush, never a chunk with a hole in it. */
static void test_keep_flush_refused(void **state)
{
	(void)state;
	struct chunk *c = mk_kept(128 * 1024);
	if (!c)
		skip();
	uint64_t off;
	assert_true(chunk_fd(c, &off) >= 0);
	char buf[16384];
	memset(buf, 'k', sizeof buf);
	assert_int_equal(chunk_append(c, buf, sizeof buf), 0);
	struct rlimit was, lim;
	assert_int_equal(getrlimit(RLIMIT_FSIZE, &was), 0);
	lim = (struct rlimit){ off + 4096, was.rlim_max };
	void (*old)(int) = signal(SIGXFSZ, SIG_IGN);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
	chunk_flush_pending();
	int flushed = chunk_flush(c);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &was), 0);
	signal(SIGXFSZ, old);
	/* pwrite stops at the limit: the 4 KiB before it may be written, but
	 * none is published */
	assert_int_equal(flushed, -EFBIG);
	assert_int_equal(chunk_filled(c), 0);
	assert_int_equal(chunk_append(c, buf, sizeof buf), -EFBIG);
	assert_int_equal(chunk_flush(c), -EFBIG);
	chunk_set_state(c, CHUNK_FAILED, -ENOSPC);
	chunk_unkeep(c);
	chunk_unref(c);
}

/* The copies are a bounded pool: past CHUNK_KEEP_POOL chunks at once,
 * a chunk gets none and its appends go straight to the arena. A chunk
 * over CHUNK_KEEP_MAX, or on the heap, never gets one. Copies given back
 * are used again. */
static void test_keep_bounded(void **state)
{
	(void)state;
	enum { N = CHUNK_KEEP_POOL + 2, LEN = 100 * 1024 };
	static struct chunk *c[N];
	static char buf[LEN];
	int kept = 0;
	for (int i = 0; i < N; i++) {
		c[i] = mk(LEN);
		uint64_t off;
		if (chunk_fd(c[i], &off) < 0) {
			for (int k = 0; k <= i; k++)
				chunk_unref(c[k]);
			skip();
		}
		chunk_keep(c[i]);
		kept += atomic_load(&c[i]->kept) != NULL;
		memset(buf, 'a' + i % 26, sizeof buf);
		assert_int_equal(chunk_append(c[i], buf, sizeof buf), 0);
		/* without a copy the bytes are published at once */
		assert_int_equal(chunk_filled(c[i]), atomic_load(&c[i]->kept) ? 0 : LEN);
	}
	assert_int_equal(kept, CHUNK_KEEP_POOL);
	chunk_flush_pending();
	for (int i = 0; i < N; i++) {
		assert_int_equal(chunk_filled(c[i]), LEN);
		chunk_set_state(c[i], CHUNK_READY, 0);
		memset(buf, 'a' + i % 26, sizeof buf);
		assert_memory_equal(chunk_view(c[i]), buf, LEN);
		chunk_unref(c[i]); /* gives its copy back */
	}
	struct chunk *big = mk(CHUNK_KEEP_MAX + 4096), *small = mk(4096), *again = mk(LEN);
	chunk_keep(big);
	chunk_keep(small);
	chunk_keep(again);
	assert_null(atomic_load(&big->kept));
	assert_null(atomic_load(&small->kept));
	assert_non_null(atomic_load(&again->kept));
	chunk_unref(big);
	chunk_unref(small);
	chunk_unref(again);
}

/* Mappings of the arena in this process: lines of /proc/self/maps naming it. */
static int arena_mappings(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	assert_non_null(f);
	char line[512];
	int n = 0;
	while (fgets(line, sizeof line, f))
		n += strstr(line, "memfd:larder-chunks") != NULL;
	fclose(f);
	return n;
}

/* A hit reads arena chunks through one read-only mapping per window of
 * the arena, not one per chunk (the kernel allows a process 65,530), and a
 * window is unmapped once its chunks are gone and ranges come from a later
 * one. */
static void test_map(void **state)
{
	(void)state;
	enum { N = 300, LEN = 128 * 1024 };
	static struct chunk *c[N];
	static char buf[LEN];
	uint64_t off;
	int before = arena_mappings();
	for (int i = 0; i < N; i++) {
		c[i] = mk(LEN);
		if (chunk_fd(c[i], &off) < 0) {
			for (int k = 0; k <= i; k++)
				chunk_unref(c[k]);
			skip(); /* no memfd: the bytes are on the heap */
		}
		memset(buf, 'a' + i % 26, sizeof buf);
		buf[i] = '!';
		assert_int_equal(chunk_append(c[i], buf, sizeof buf), 0);
		chunk_set_state(c[i], CHUNK_READY, 0);
	}
	for (int i = 0; i < N; i++) {
		const char *m = chunk_map(c[i]);
		assert_non_null(m);
		memset(buf, 'a' + i % 26, sizeof buf);
		buf[i] = '!';
		assert_memory_equal(m, buf, sizeof buf);
	}
	int mapped = arena_mappings() - before;
	assert_in_range(mapped, 1, 2); /* 38 MiB of chunks: one window, two if it crosses */
	for (int i = 0; i < N; i++)
		chunk_unref(c[i]);
	/* Ranges past the window: 64 MiB chunks, never written, take no memory. */
	for (int i = 0; i < 40; i++)
		chunk_unref(mk(64u << 20));
	assert_int_equal(arena_mappings(), before);
}

/* Readers that leave half-way (client disconnects) while the producer goes on. */
struct quitter {
	pthread_t th;
	struct chunk *c;
	size_t leave_at;
};

static void *quitter_main(void *arg)
{
	struct quitter *q = arg;
	struct tw t;
	tw_init(&t);
	chunk_wait(q->c, &t.w, 0);
	while (chunk_filled(q->c) < q->leave_at && chunk_state(q->c) == CHUNK_FILLING)
		tw_sleep(&t);
	chunk_unwait(q->c, &t.w);
	tw_fini(&t); /* the waiter's memory goes with the thread's stack */
	return NULL;
}

static void test_stress_unwait(void **state)
{
	(void)state;
	enum { N = 6, LEN = 256 * PIECE };
	static char piece[PIECE];
	for (int round = 0; round < 20; round++) {
		struct chunk *c = mk(LEN);
		struct quitter q[N];
		for (int i = 0; i < N; i++) {
			q[i] = (struct quitter){ .c = c, .leave_at = (size_t)(i + 1) * LEN / (N + 1) };
			assert_int_equal(pthread_create(&q[i].th, NULL, quitter_main, &q[i]), 0);
		}
		for (size_t off = 0; off < LEN; off += PIECE)
			chunk_append(c, piece, PIECE);
		chunk_set_state(c, CHUNK_READY, 0);
		for (int i = 0; i < N; i++)
			pthread_join(q[i].th, NULL);
		chunk_unref(c);
	}
}

/* Two parts at once (chunk_split): the second part's bytes are readable as
 * they come, before the first part's; the parts meet into one run, and
 * every append to either part wakes the waiters. On the heap and in the
 * arena. */
static void split_fill(size_t len)
{
	struct chunk *c = mk(len);
	size_t at = len / 2 + 3;
	char *want = malloc(len), *got = malloc(len);
	assert_non_null(want);
	assert_non_null(got);
	for (size_t i = 0; i < len; i++)
		want[i] = (char)(i * 7 + 1);
	struct tw t;
	tw_init(&t);
	chunk_split(c, at);
	assert_int_equal(chunk_readable(c, 0), 0);
	assert_int_equal(chunk_readable(c, at), at);
	size_t seen = chunk_progress(c);
	chunk_wait(c, &t.w, seen);
	assert_int_equal(tw_wakes(&t), 0);

	assert_int_equal(chunk_append_tail(c, want + at, 10), 0); /* tail first */
	assert_int_equal(tw_wakes(&t), 1);
	assert_true(chunk_progress(c) > seen);
	assert_int_equal(chunk_filled(c), 0);
	assert_int_equal(chunk_readable(c, at), at + 10);
	assert_int_equal(chunk_readable(c, at + 4), at + 10);
	assert_int_equal(chunk_readable(c, at + 10), at + 10); /* not there yet */
	assert_int_equal(chunk_readable(c, at - 1), at - 1);
	assert_int_equal(chunk_read(c, at + 2, got, 8), 0);
	assert_memory_equal(got, want + at + 2, 8);

	assert_int_equal(chunk_append(c, want, at - 1), 0); /* the head, but one byte */
	assert_int_equal(tw_wakes(&t), 2);
	assert_int_equal(chunk_filled(c), at - 1);
	assert_int_equal(chunk_readable(c, 0), at - 1);
	assert_int_equal(chunk_readable(c, at - 1), at - 1);
	seen = chunk_progress(c);
	assert_int_equal(chunk_append(c, want + at - 1, 1), 0); /* the parts meet */
	assert_int_equal(tw_wakes(&t), 3);
	assert_true(chunk_progress(c) > seen);
	assert_int_equal(chunk_filled(c), at + 10);
	assert_int_equal(chunk_readable(c, 0), at + 10);
	assert_int_equal(chunk_produced(c), at + 10);

	assert_int_equal(chunk_append_tail(c, want + at + 10, len - at - 10), 0); /* after */
	assert_int_equal(tw_wakes(&t), 4);
	assert_int_equal(chunk_filled(c), len);
	assert_int_equal(chunk_tail_produced(c), len);
	chunk_set_state(c, CHUNK_READY, 0);
	assert_int_equal(chunk_read(c, 0, got, len), 0);
	assert_memory_equal(got, want, len);

	chunk_unwait(c, &t.w);
	chunk_unref(c);
	tw_fini(&t);
	free(want);
	free(got);
}

static void test_split_heap(void **state)
{
	(void)state;
	split_fill(100);
}

static void test_split_arena(void **state)
{
	(void)state;
	split_fill(1 << 20);
}

/* The head done first, then the tail: one run once the tail ends. */
static void test_split_head_first(void **state)
{
	(void)state;
	struct chunk *c = mk(16);
	chunk_split(c, 6);
	assert_int_equal(chunk_append(c, "abcdef", 6), 0);
	assert_int_equal(chunk_filled(c), 6);
	assert_int_equal(chunk_readable(c, 6), 6);
	assert_int_equal(chunk_append_tail(c, "ghij", 4), 0);
	assert_int_equal(chunk_filled(c), 10);
	assert_int_equal(chunk_append_tail(c, "klmnop", 6), 0);
	assert_int_equal(chunk_filled(c), 16);
	chunk_set_state(c, CHUNK_READY, 0);
	char got[16];
	assert_int_equal(chunk_read(c, 0, got, 16), 0);
	assert_memory_equal(got, "abcdefghijklmnop", 16);
	chunk_unref(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_id),
		cmocka_unit_test(test_id_is_its_definition),
		cmocka_unit_test(test_ids_across_threads),
		cmocka_unit_test(test_new_unref),
		cmocka_unit_test(test_live_bytes),
		cmocka_unit_test(test_wake_on_append_and_state),
		cmocka_unit_test(test_failed_reason),
		cmocka_unit_test(test_no_lost_wakeup),
		cmocka_unit_test(test_unwait_stops_wakes),
		cmocka_unit_test(test_many_waiters),
		cmocka_unit_test(test_unwait_waits_for_wake),
		cmocka_unit_test(test_stress_readers),
		cmocka_unit_test(test_append_refused),
		cmocka_unit_test(test_append_nothing),
		cmocka_unit_test(test_keep_coalesces),
		cmocka_unit_test(test_keep_flush_refused),
		cmocka_unit_test(test_keep_bounded),
		cmocka_unit_test(test_map),
		cmocka_unit_test(test_stress_unwait),
		cmocka_unit_test(test_split_heap),
		cmocka_unit_test(test_split_arena),
		cmocka_unit_test(test_split_head_first),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * chunk.c - chunk identity, reference counts, and the waiter list that
 * lets readers on other threads follow a chunk while it fills.
 *
 * Waking without the lock. A wake() hands the news to another thread
 * (ev_async_send takes that loop's own locks), so it must not run under
 * c->lock: a reader registering or leaving on its own thread would then
 * wait on a producer that waits on the reader's loop. Instead a wake
 * round marks every registered waiter `queued` under the lock, then
 * repeatedly takes a small batch of queued waiters, marks them `calling`,
 * drops the lock, calls them, and retakes the lock to clear `calling`.
 * Waiters stay linked the whole time, so the list is only ever walked
 * under the lock and a waiter registering or leaving never races a walk.
 *
 * The unwait guarantee. chunk_unwait unlinks the waiter and then sleeps
 * on c->woke while its `calling` is set: a round that picked the waiter
 * before it left is still inside (or about to enter) its wake(), and the
 * waiter's memory must outlive that call. Once `calling` is clear and the
 * waiter is off the list no round can reach it again, so after
 * chunk_unwait returns wake() is never called for it. The wait is per
 * waiter, so a producer appending in a tight loop cannot starve it.
 *
 * Two rounds may overlap (an append and a state change from different
 * threads, in principle): a waiter that is `calling` in one round is
 * skipped by the other but left `queued`, and the round that owns the
 * call rescans after clearing `calling`, so the later event is still
 * delivered by a call that starts after it.
 */
#include "store/chunk.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "base/file.h"
#include "base/log.h"
#include "base/sha256.h"

/* Waiters called per lock release; more are handled in further batches. */
#define WAKE_BATCH 16

/* ---- identity ------------------------------------------------------------ */

static void put_be64(uint8_t *p, uint64_t v)
{
	for (int i = 7; i >= 0; i--) {
		p[i] = (uint8_t)v;
		v >>= 8;
	}
}

/* Each string is preceded by its length as 8 bytes big-endian, so no
 * choice of bytes inside a key can make two different tuples collide
 * (a separator such as '/' or NUL could appear in a key). */
static void digest_field(EVP_MD_CTX *md, const char *s)
{
	uint8_t len[8];
	size_t n = s ? strlen(s) : 0;
	put_be64(len, n);
	EVP_DigestUpdate(md, len, sizeof len);
	if (n)
		EVP_DigestUpdate(md, s, n);
}

void chunk_id_make(const char *bucket, const char *key, const char *etag, uint64_t index,
                   struct chunk_id *out)
{
	unsigned char h[EVP_MAX_MD_SIZE];
	unsigned int hl = 0;
	uint8_t idx[8];
	EVP_MD_CTX *md = sha256_begin();

	/* The id has no error path: without a digest context we cannot name
	 * any chunk, and an id that is not the hash would break coalescing
	 * and the NVMe index, so out of memory here is fatal. */
	if (!md) {
		log_error("store", "chunk_id_make: no SHA-256 context");
		abort();
	}
	digest_field(md, bucket);
	digest_field(md, key);
	digest_field(md, etag);
	put_be64(idx, index);
	EVP_DigestUpdate(md, idx, sizeof idx);
	EVP_DigestFinal_ex(md, h, &hl);
	assert(hl >= CHUNK_ID_LEN);
	memcpy(out->b, h, CHUNK_ID_LEN);
}

/* Big-endian so the value (and so the SUBSET policy's choice of chunks)
 * is the same on every host. */
uint64_t chunk_id_hash(const struct chunk_id *id)
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v = (v << 8) | id->b[i];
	return v;
}

bool chunk_id_eq(const struct chunk_id *a, const struct chunk_id *b)
{
	return memcmp(a->b, b->b, CHUNK_ID_LEN) == 0;
}

/* ---- lifetime -------------------------------------------------------------- */

static _Atomic uint64_t live_bytes;

uint64_t chunk_live_bytes(void)
{
	return atomic_load_explicit(&live_bytes, memory_order_relaxed);
}

/* ---- where the bytes live -------------------------------------------------- */

/* Chunks of this size or more keep their bytes in the arena: one memfd for
 * the process. Producers write it with pwrite and the reader callback reads
 * it with pread, so a chunk's pages are never new memory of the process;
 * hits send them with sendfile or, once a chunk is hit often, through a
 * read-only mapping (chunk_map) that the socket's send copies from. Each chunk has its own page-aligned range,
 * taken from a counter that only grows (offsets are never reused, so a
 * range can only ever hold its own chunk's bytes), and its pages are
 * punched out when the chunk is freed. Page-cache pages nobody maps cost
 * this VM 0.5 us each; a new page of the process's own memory 12-22 us
 * across its fault and first accesses (docs/benchmarks.md, "Chunk bytes
 * outside the process's memory"). Smaller chunks stay on the heap: a few
 * pages, often reused, where a page-aligned range would waste most of its
 * last page. */
#define ARENA_MIN (64 * 1024)

static pthread_once_t arena_once = PTHREAD_ONCE_INIT;
static int arena_fd = -1;
static uint64_t page_mask = 4095;
static _Atomic uint64_t arena_live, arena_peak; /* bytes of ranges in use, and their most */

uint64_t chunk_arena_bytes(void)
{
	return atomic_load_explicit(&arena_live, memory_order_relaxed);
}

uint64_t chunk_arena_peak_bytes(void)
{
	return atomic_load_explicit(&arena_peak, memory_order_relaxed);
}

static void arena_count(uint64_t span)
{
	uint64_t now = atomic_fetch_add_explicit(&arena_live, span, memory_order_relaxed) + span;
	uint64_t peak = atomic_load_explicit(&arena_peak, memory_order_relaxed);
	while (now > peak && !atomic_compare_exchange_weak_explicit(&arena_peak, &peak, now,
	                                                            memory_order_relaxed,
	                                                            memory_order_relaxed))
		;
}

static void arena_open(void)
{
	long pg = sysconf(_SC_PAGESIZE);
	if (pg > 0)
		page_mask = (uint64_t)pg - 1;
	arena_fd = memfd_create("larder-chunks", MFD_CLOEXEC);
	if (arena_fd < 0)
		log_warn("chunk", "memfd_create() failed: %s; chunk bytes stay on the heap",
		         strerror(errno));
}

static uint64_t arena_span(size_t len)
{
	return ((uint64_t)len + page_mask) & ~page_mask;
}

/* The arena's file is cut into windows of ARENA_WINDOW bytes, taken in
 * order, and a chunk's range never crosses one (a chunk is at most
 * 1 GiB: config/settings.c). A hit maps a window read-only, whole, the
 * first time it needs bytes of it in memory (chunk_map), and the window is
 * unmapped when its last chunk is freed and ranges are taken from a later
 * one. One mapping per window, not per chunk: a mapping per 115 KiB chunk
 * would pass the kernel's vm.max_map_count (65,530) at 7 GiB of chunks. */
#define ARENA_WINDOW (1ull << 30)

struct arena_window {
	uint64_t base;
	_Atomic int refs;      /* its chunks, and one while ranges are taken from it */
	_Atomic(char *) map;   /* mapped read-only, or NULL */
};

static pthread_mutex_t arena_lock = PTHREAD_MUTEX_INITIALIZER;
static struct arena_window *arena_win; /* ranges are taken from it, at arena_next */
static uint64_t arena_next;

static void window_unref(struct arena_window *w)
{
	if (!w || atomic_fetch_sub_explicit(&w->refs, 1, memory_order_acq_rel) != 1)
		return;
	char *m = atomic_load_explicit(&w->map, memory_order_relaxed);
	if (m)
		munmap(m, ARENA_WINDOW);
	free(w);
}

/* A range of span bytes for c (c->off, c->win), or false when a new
 * window could not be had. */
static bool arena_take(struct chunk *c, uint64_t span)
{
	struct arena_window *w, *left = NULL;
	pthread_mutex_lock(&arena_lock);
	w = arena_win;
	if (!w || arena_next + span > w->base + ARENA_WINDOW) {
		struct arena_window *n = calloc(1, sizeof *n);
		if (!n) {
			pthread_mutex_unlock(&arena_lock);
			return false;
		}
		n->base = w ? w->base + ARENA_WINDOW : 0;
		atomic_init(&n->refs, 1);
		left = w;
		arena_win = w = n;
		arena_next = n->base;
	}
	c->off = arena_next;
	arena_next += span;
	atomic_fetch_add_explicit(&w->refs, 1, memory_order_relaxed);
	pthread_mutex_unlock(&arena_lock);
	window_unref(left);
	c->win = w;
	return true;
}

const void *chunk_map(struct chunk *c)
{
	assert(chunk_in_arena(c) && chunk_filled(c) == c->len);
	struct arena_window *w = c->win;
	char *m = atomic_load_explicit(&w->map, memory_order_acquire);
	if (!m) {
		void *n = mmap(NULL, ARENA_WINDOW, PROT_READ, MAP_SHARED, arena_fd, (off_t)w->base);
		if (n == MAP_FAILED)
			return NULL;
		if (atomic_compare_exchange_strong(&w->map, &m, n))
			m = n;
		else
			munmap(n, ARENA_WINDOW); /* another thread's came first */
	}
	char *p = m + (c->off - w->base);
#ifdef MADV_POPULATE_READ /* Linux 5.14; without it the pages fault in */
	if (!atomic_load_explicit(&c->mapped_in, memory_order_relaxed) &&
	    !atomic_exchange(&c->mapped_in, true))
		(void)madvise(p, arena_span(c->len), MADV_POPULATE_READ);
#endif
	return p;
}

int chunk_fd(const struct chunk *c, uint64_t *off)
{
	if (!chunk_in_arena(c))
		return -1;
	*off = c->off;
	return arena_fd;
}

/* A buffer of at least len bytes private to the calling thread, kept for
 * its next calls (a thread's first use of new memory is what the arena
 * avoids), freed when the thread ends. Page-aligned: the NVMe tier writes
 * large entries from it with O_DIRECT (store/disk.c). */
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;

struct scratch {
	size_t cap;
	void *b;
};

static void scratch_free(void *p)
{
	struct scratch *sc = p;
	free(sc->b);
	free(sc);
}

static void scratch_make_key(void)
{
	if (pthread_key_create(&scratch_key, scratch_free) != 0)
		abort();
}

void *chunk_scratch(size_t len)
{
	pthread_once(&scratch_once, scratch_make_key);
	struct scratch *sc = pthread_getspecific(scratch_key);
	if (sc && sc->cap >= len)
		return sc->b;
	void *b = NULL;
	if (posix_memalign(&b, (size_t)page_mask + 1, len ? len : 1) != 0)
		return NULL;
	if (!sc && ((sc = calloc(1, sizeof *sc)) == NULL || pthread_setspecific(scratch_key, sc) != 0)) {
		free(sc);
		free(b);
		return NULL;
	}
	free(sc->b);
	sc->b = b;
	sc->cap = len;
	return b;
}

void *chunk_stage(struct chunk *c)
{
	return chunk_in_arena(c) ? chunk_scratch(c->len) : c->data;
}

const void *chunk_view(struct chunk *c)
{
	assert(chunk_filled(c) == c->len);
	if (!chunk_in_arena(c))
		return c->data;
	char *k = atomic_load_explicit(&c->kept, memory_order_acquire);
	if (k)
		return k;
	void *b = chunk_scratch(c->len);
	return b && chunk_read(c, 0, b, c->len) == 0 ? b : NULL;
}

int chunk_read(struct chunk *c, size_t off, void *out, size_t n)
{
	assert(off + n <= chunk_readable(c, off));
	if (!chunk_in_arena(c)) {
		memcpy(out, c->data + off, n);
		return 0;
	}
	return file_pread_all(arena_fd, out, n, c->off + off);
}

struct chunk *chunk_new(const struct chunk_id *id, size_t len)
{
	struct chunk *c = calloc(1, sizeof *c);
	if (!c)
		return NULL;
	pthread_once(&arena_once, arena_open);
	if (len >= ARENA_MIN && arena_fd >= 0 && arena_take(c, arena_span(len))) {
		arena_count(arena_span(len));
	} else {
		/* malloc(0) may return NULL; a zero-length object still gets a chunk. */
		c->data = malloc(len ? len : 1);
		if (!c->data) {
			free(c);
			return NULL;
		}
	}
	if (pthread_mutex_init(&c->lock, NULL) != 0) {
		free(c->data);
		free(c);
		return NULL;
	}
	if (pthread_cond_init(&c->woke, NULL) != 0) {
		pthread_mutex_destroy(&c->lock);
		free(c->data);
		free(c);
		return NULL;
	}
	c->id = *id;
	c->len = len;
	atomic_fetch_add_explicit(&live_bytes, len, memory_order_relaxed);
	atomic_init(&c->filled, 0);
	atomic_init(&c->split, 0);
	atomic_init(&c->tail, 0);
	atomic_init(&c->state, CHUNK_FILLING);
	atomic_init(&c->ask_hop, 0);
	atomic_init(&c->refs, 1);
	return c;
}

void chunk_ref(struct chunk *c)
{
	int old = atomic_fetch_add_explicit(&c->refs, 1, memory_order_relaxed);
	assert(old > 0);
	(void)old;
}

void chunk_unref(struct chunk *c)
{
	if (!c)
		return;
	/* acq_rel: every access through other references happens before the
	 * free below. */
	int old = atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel);
	assert(old > 0);
	if (old != 1)
		return;
	/* A waiter still linked would be woken through freed memory later:
	 * readers unwait before they drop their reference. */
	assert(list_empty(&c->waiters));
	pthread_cond_destroy(&c->woke);
	pthread_mutex_destroy(&c->lock);
	atomic_fetch_sub_explicit(&live_bytes, c->len, memory_order_relaxed);
	chunk_unkeep(c);
	if (chunk_in_arena(c)) {
		(void)fallocate(arena_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)c->off,
		                (off_t)arena_span(c->len));
		atomic_fetch_sub_explicit(&arena_live, arena_span(c->len), memory_order_relaxed);
		window_unref(c->win);
	}
	free(c->data);
	free(c);
}

int chunk_refs(const struct chunk *c)
{
	return atomic_load_explicit(&c->refs, memory_order_relaxed);
}

/* ---- waiters --------------------------------------------------------------- */

void chunk_wait(struct chunk *c, struct chunk_waiter *w, size_t seen)
{
	size_t filled;
	int state;

	assert(w->wake);
	pthread_mutex_lock(&c->lock);
	if (!w->linked) {
		list_push_front(&c->waiters, &w->link);
		w->linked = true;
		w->queued = false;
	}
	/* Read under the lock, after linking: a producer publishes before it
	 * takes the lock to mark waiters, so either it finds w linked or we
	 * see what it published. That is why no wake-up can be lost. */
	filled = chunk_progress(c);
	state = atomic_load_explicit(&c->state, memory_order_acquire);
	pthread_mutex_unlock(&c->lock);

	if (filled > seen || state != CHUNK_FILLING)
		w->wake(w->arg);
}

void chunk_unwait(struct chunk *c, struct chunk_waiter *w)
{
	pthread_mutex_lock(&c->lock);
	if (w->linked) {
		list_unlink(&c->waiters, &w->link);
		w->linked = false;
	}
	w->queued = false;
	/* A round on another thread may hold w in its batch: wait until its
	 * wake() returned. Unlinked, w cannot be picked by any later round. */
	while (w->calling)
		pthread_cond_wait(&c->woke, &c->lock);
	pthread_mutex_unlock(&c->lock);
}

/* Delivers one event to every waiter registered now (see the top of the
 * file). Called after the event was published. */
static void wake_all(struct chunk *c)
{
	struct chunk_waiter *batch[WAKE_BATCH];

	pthread_mutex_lock(&c->lock);
	for (struct list_node *n = c->waiters.first; n; n = n->next)
		list_item(n, struct chunk_waiter, link)->queued = true;
	for (;;) {
		size_t n = 0;
		for (struct list_node *l = c->waiters.first; l && n < WAKE_BATCH; l = l->next) {
			struct chunk_waiter *w = list_item(l, struct chunk_waiter, link);
			if (w->queued && !w->calling) {
				w->queued = false;
				w->calling = true;
				batch[n++] = w;
			}
		}
		if (n == 0)
			break;
		pthread_mutex_unlock(&c->lock);
		/* wake and arg are fixed while the waiter is registered, and
		 * `calling` keeps chunk_unwait (and so the owner's free) away. */
		for (size_t i = 0; i < n; i++)
			batch[i]->wake(batch[i]->arg);
		pthread_mutex_lock(&c->lock);
		for (size_t i = 0; i < n; i++)
			batch[i]->calling = false;
		pthread_cond_broadcast(&c->woke);
	}
	pthread_mutex_unlock(&c->lock);
}

/* ---- producer -------------------------------------------------------------- */

static void chunk_publish(struct chunk *c, size_t n)
{
	/* Only the producer writes filled, so a relaxed read of our own
	 * value is enough; the release store publishes the bytes. */
	size_t f = atomic_load_explicit(&c->filled, memory_order_relaxed);
	size_t s = atomic_load_explicit(&c->split, memory_order_relaxed);
	size_t end = s && f < s ? s : c->len; /* the first part ends at split */
	assert(n <= end - f);
	assert(atomic_load_explicit(&c->state, memory_order_relaxed) == CHUNK_FILLING);
	if (n == 0)
		return;
	f += n;
	if (s && f == s) /* the two parts meet: all of [0, tail) is there */
		f = atomic_load_explicit(&c->tail, memory_order_relaxed);
	atomic_store_explicit(&c->filled, f, memory_order_release);
	wake_all(c);
}

/* ---- producer's copies ------------------------------------------------------ */

/* Buffers of CHUNK_KEEP_MAX bytes, made on demand up to CHUNK_KEEP_POOL
 * and then reused, never freed: their pages stay the process's, so a fill
 * costs a copy into memory already present (docs/benchmarks.md, "Fills in
 * one write"). */
static pthread_mutex_t keep_lock = PTHREAD_MUTEX_INITIALIZER;
static char *keep_free[CHUNK_KEEP_POOL];
static unsigned keep_nfree, keep_made;
/* The chunks this thread appended to and has not flushed (one reference
 * each). Initial-exec, as base/log.c's: the general-dynamic model would
 * make the binary need ld.so itself (__tls_get_addr). */
static __thread __attribute__((tls_model("initial-exec"))) struct chunk *pending_head;

void chunk_keep(struct chunk *c)
{
	if (!chunk_in_arena(c) || c->len > CHUNK_KEEP_MAX ||
	    atomic_load_explicit(&c->kept, memory_order_relaxed) ||
	    atomic_load_explicit(&c->filled, memory_order_relaxed) != 0)
		return;
	char *k = NULL;
	bool make = false;
	pthread_mutex_lock(&keep_lock);
	if (keep_nfree > 0)
		k = keep_free[--keep_nfree];
	else if (keep_made < CHUNK_KEEP_POOL)
		make = true, keep_made++;
	pthread_mutex_unlock(&keep_lock);
	if (make && !(k = malloc(CHUNK_KEEP_MAX))) {
		pthread_mutex_lock(&keep_lock);
		keep_made--;
		pthread_mutex_unlock(&keep_lock);
	}
	c->staged = 0;
	atomic_store_explicit(&c->kept, k, memory_order_relaxed);
}

void chunk_unkeep(struct chunk *c)
{
	char *k = atomic_exchange_explicit(&c->kept, NULL, memory_order_acq_rel);
	if (!k)
		return;
	pthread_mutex_lock(&keep_lock);
	assert(keep_nfree < CHUNK_KEEP_POOL);
	keep_free[keep_nfree++] = k;
	pthread_mutex_unlock(&keep_lock);
}

size_t chunk_produced(const struct chunk *c)
{
	return atomic_load_explicit(&c->kept, memory_order_relaxed)
	               ? c->staged
	               : atomic_load_explicit(&c->filled, memory_order_relaxed);
}

int chunk_flush(struct chunk *c)
{
	char *k = atomic_load_explicit(&c->kept, memory_order_relaxed);
	size_t f = atomic_load_explicit(&c->filled, memory_order_relaxed);
	if (!k || c->flush_err || c->staged == f ||
	    atomic_load_explicit(&c->state, memory_order_relaxed) != CHUNK_FILLING)
		return c->flush_err;
	struct iovec iov = { k + f, c->staged - f };
	int rc = file_pwritev_all(arena_fd, &iov, 1, c->off + f);
	if (rc < 0) /* ENOSPC, ENOMEM: the memory cgroup's limit */
		return c->flush_err = rc;
	chunk_publish(c, c->staged - f);
	return 0;
}

void chunk_flush_pending(void)
{
	struct chunk *c;
	while ((c = pending_head) != NULL) {
		pending_head = c->pending_next;
		c->pending_next = NULL;
		c->pending = false;
		(void)chunk_flush(c); /* a failure is the producer's to see */
		chunk_unref(c);
	}
}

/* Copies n bytes to c's [at, at + n), not published yet: 0, or -errno
 * when the arena refused them (the memory cgroup's limit). */
static int chunk_store(struct chunk *c, size_t at, const void *data, size_t n)
{
	if (!chunk_in_arena(c)) {
		if (n && data != c->data + at) /* not staged in place (chunk_stage) */
			memcpy(c->data + at, data, n);
		return 0;
	}
	struct iovec iov = { (void *)(uintptr_t)data, n };
	return file_pwritev_all(arena_fd, &iov, 1, c->off + at);
}

int chunk_append(struct chunk *c, const void *data, size_t n)
{
	if (n == 0)
		return 0; /* a write of nothing would fail (file_pwritev_all) */
	char *k = atomic_load_explicit(&c->kept, memory_order_relaxed);
	if (k) {
		assert(n <= c->len - c->staged);
		if (c->flush_err)
			return c->flush_err;
		memcpy(k + c->staged, data, n);
		c->staged += n;
		if (!c->pending) {
			chunk_ref(c);
			c->pending = true;
			c->pending_next = pending_head;
			pending_head = c;
		}
		return 0;
	}
	size_t f = atomic_load_explicit(&c->filled, memory_order_relaxed);
	assert(n <= c->len - f);
	int rc = chunk_store(c, f, data, n);
	if (rc == 0)
		chunk_publish(c, n);
	return rc;
}

void chunk_set_state(struct chunk *c, enum chunk_state s, int reason)
{
	assert(s == CHUNK_READY || s == CHUNK_FAILED);
	assert(atomic_load_explicit(&c->state, memory_order_relaxed) == CHUNK_FILLING);
	if (s == CHUNK_READY)
		assert(atomic_load_explicit(&c->filled, memory_order_relaxed) == c->len);
	else
		c->fail_reason = reason; /* published by the release store below */
	atomic_store_explicit(&c->state, (int)s, memory_order_release);
	wake_all(c);
}

/* ---- two parts at once -------------------------------------------------------- */

void chunk_split(struct chunk *c, size_t at)
{
	assert(at > 0 && at < c->len);
	assert(atomic_load_explicit(&c->filled, memory_order_relaxed) == 0);
	assert(!atomic_load_explicit(&c->kept, memory_order_relaxed));
	assert(!atomic_load_explicit(&c->split, memory_order_relaxed));
	atomic_store_explicit(&c->tail, at, memory_order_relaxed);
	atomic_store_explicit(&c->split, at, memory_order_release); /* tail before it */
}

size_t chunk_tail_produced(const struct chunk *c)
{
	return atomic_load_explicit(&c->tail, memory_order_relaxed);
}

int chunk_append_tail(struct chunk *c, const void *data, size_t n)
{
	size_t s = atomic_load_explicit(&c->split, memory_order_relaxed);
	size_t t = atomic_load_explicit(&c->tail, memory_order_relaxed);
	assert(s && n <= c->len - t);
	assert(atomic_load_explicit(&c->state, memory_order_relaxed) == CHUNK_FILLING);
	if (n == 0)
		return 0;
	int rc = chunk_store(c, t, data, n);
	if (rc < 0)
		return rc;
	atomic_store_explicit(&c->tail, t + n, memory_order_release);
	/* The first part is in: one run from 0, which filled says. */
	if (atomic_load_explicit(&c->filled, memory_order_relaxed) >= s)
		atomic_store_explicit(&c->filled, t + n, memory_order_release);
	wake_all(c);
	return 0;
}

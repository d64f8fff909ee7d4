/*
 * store.c - the in-flight table and the I/O threads that move chunks
 * between the RAM tier (store/ram.c) and the NVMe tier (store/disk.c),
 * both reached through the tier interface (store/tier.h).
 *
 * In-flight table. An id -> chunk map (store/idmap.h) split into 64
 * shards by one byte of the id, each with its own mutex, so workers
 * starting or joining different fetches do not meet on one lock.
 *
 * Lock order: shard -> the RAM tier's lock; q_lock is taken alone. Nothing
 * calls a waiter's wake() or frees a chunk's bytes under the RAM tier's
 * lock or a shard's: evicted chunks are collected on a release list
 * (tier.h) and released after unlocking.
 *
 * References. The in-flight table holds one reference to each chunk it
 * maps, the RAM tier one to each chunk it keeps, each I/O job one; every
 * caller of store_acquire gets its own. So eviction never frees bytes
 * someone reads: it drops the tier's reference only.
 *
 * RAM bound. Every chunk being produced reserves its length in RAM when
 * it enters the in-flight table (ram_reserve); on completion the RAM tier
 * is offered it, which returns the reservation (see store/ram.h), so RAM
 * use (READY + filling) stays within ram_bytes whenever it can.
 *
 * Transitions for one id are serialised by its shard lock: acquire checks
 * the in-flight table and re-checks RAM under it, completion removes the
 * chunk from the table and inserts it in RAM under it, so an acquirer
 * never finds the chunk in neither place between the two (which would
 * start a second fetch). A completed chunk is READY before it reaches
 * RAM; a failed one leaves the table before it turns FAILED, so nobody
 * new attaches to a failure.
 */
#include "store/store.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"
#include "store/disk.h"
#include "store/idmap.h"
#include "store/object.h"
#include "store/ram.h"
#include "store/tier.h"

#define INFLIGHT_SHARDS 64
#define DEFAULT_IO_THREADS 2
#define DEFAULT_SEGMENT_BYTES ((uint64_t)64 << 20)
/* Consecutive failed NVMe writes after which the tier is switched off. */
#define DISK_FAIL_LIMIT 5
#define DISK_RETRY_MIN_MS 1000u   /* a disabled NVMe tier is tried again after this, */
#define DISK_RETRY_MAX_MS 60000u  /* doubling up to this while it keeps failing */
/* Read jobs each stand for a FILLING chunk already counted in RAM. */
#define READ_QUEUE_MAX 1024
/* NVMe chunks up to this size are read in the acquiring thread when the
 * page cache holds all of them (store_acquire); a larger one's copy and
 * checksum would hold a worker's loop, so the I/O threads read it. Larger
 * entries are written past the page cache for the same bound. */
#define INLINE_READ_MAX DISK_DIRECT_ABOVE
/* Write jobs pin chunks the RAM tier may have let go, outside its bound:
 * keep them few, and their bytes within a quarter of the RAM tier plus one
 * chunk (a write is queued while the bytes before it are under the quarter:
 * a chunk larger than the quarter still goes behind a small one). */
#define WRITE_QUEUE_MAX 64
/* Writes are handed to the I/O threads in batches: a thread wakes for them
 * once WRITE_BATCH are queued (or WRITE_BATCH_BYTES), or WRITE_DELAY_MS
 * after the first, and then writes until the queue is empty. One wake-up
 * and its two context switches per cold 115 KiB object were what the
 * write-through cost the workers on two cores (docs/benchmarks.md). */
#define WRITE_BATCH 8
#define WRITE_BATCH_BYTES ((uint64_t)1 << 20)
#define WRITE_DELAY_MS 5
/* Tombstones queued (store_invalidate_queued) while the device is slow to
 * sync them; past this many, the caller writes its own. */
#define TOMB_QUEUE_MAX 4096

/* ---- the store --------------------------------------------------------------- */

enum job_kind { JOB_READ, JOB_WRITE };

struct job {
	enum job_kind kind;
	struct chunk *c;            /* a reference */
	struct chunk_origin o;      /* JOB_WRITE: strings copied into names[]; JOB_READ: the
	                             * charge (store_acquire_charged) and copy (the entry's) */
	bool dropped;               /* store_drop ran while it was active */
	struct job *next;
	char names[];
};

struct job_list {
	struct job *head, *tail;
	size_t n;
	uint64_t bytes;
};

/* A tombstone an I/O thread is to write (store_invalidate_queued). */
struct tomb_job {
	struct tomb_job *next;
	bool prefix;
	char *key;                  /* in names[], after the bucket */
	char names[];
};

struct shard {
	pthread_mutex_t lock;
	struct idmap map;
};

/* A write through this node that has gone, or is about to go, upstream
 * (store_write_begin): gen, taken before its tombstone's, is older. */
struct writing {
	uint64_t owner, gen;
	bool prefix;
	char *bucket, *key;        /* one allocation, bucket first */
};

#define STORE_MAGIC 0x73746f72u /* "stor" */

struct store {
	unsigned magic;             /* STORE_MAGIC: handed to the I/O threads */
	struct store_config cfg;
	struct shard inflight[INFLIGHT_SHARDS];

	struct tier ram;            /* always there */
	struct ram_tier *ram_t;     /* ram.t, for hits and reservations */
	struct tier nvme;           /* ops NULL: RAM only */
	struct disk *disk;          /* nvme.t, for reads, generations, tombstones; NULL: RAM only */
	atomic_bool disk_ok;
	atomic_uint disk_fail_streak;
	_Atomic uint64_t disk_retry_at_ms; /* disabled: when to try a write again */
	atomic_uint disk_retry_ms;         /* the wait after the last failed try */

	pthread_mutex_t q_lock;     /* guards the queues, active, stopping */
	pthread_cond_t q_cv;
	struct job_list reads, writes, active;
	uint64_t write_bytes_max;
	double writes_since_s;      /* when the first write now queued was queued */
	bool writes_flushing;       /* a batch is being written: go on till empty */
	struct tomb_job *tombs, *tombs_tail;
	size_t ntombs;
	bool tomb_writing;          /* one thread at a time: the others go on reading */
	bool stopping;
	pthread_t *threads;
	unsigned nthreads;

	pthread_mutex_t w_lock;     /* guards writing, nwriting, wcap */
	struct writing *writing;
	size_t nwriting, wcap;
	atomic_size_t writing_n;    /* nwriting, read without the lock */

	atomic_uint_fast64_t inflight_n, hits_ram, hits_disk, misses, coalesced;
	atomic_uint_fast64_t disk_writes, disk_writes_dropped, disk_write_errors, disk_read_errors;
};


static void count(atomic_uint_fast64_t *v)
{
	atomic_fetch_add_explicit(v, 1, memory_order_relaxed);
}

static struct shard *shard_of(struct store *s, const struct chunk_id *id)
{
	/* A byte outside chunk_id_hash()'s eight, so the shard and the slot
	 * inside it are chosen by independent bits. */
	return &s->inflight[id->b[8] % INFLIGHT_SHARDS];
}

static uint64_t now_ms(void)
{
	return (uint64_t)(clock_mono_s() * 1000.0);
}

/* On, or off after write errors but due for another try: the writes (and
 * reads) made then are the probe that switches it back on. */
static bool disk_usable(struct store *s)
{
	if (!s->disk)
		return false;
	return atomic_load_explicit(&s->disk_ok, memory_order_relaxed) ||
	       now_ms() >= atomic_load_explicit(&s->disk_retry_at_ms, memory_order_relaxed);
}

static void changed(const struct store *s, const struct chunk_id *id)
{
	if (s->cfg.changed)
		s->cfg.changed(s->cfg.changed_arg, id);
}

/* ---- I/O jobs --------------------------------------------------------------- */

static void list_push(struct job_list *l, struct job *j)
{
	j->next = NULL;
	if (l->tail)
		l->tail->next = j;
	else
		l->head = j;
	l->tail = j;
	l->n++;
	l->bytes += j->c->len;
}

static struct job *list_pop(struct job_list *l)
{
	struct job *j = l->head;
	if (!j)
		return NULL;
	l->head = j->next;
	if (!l->head)
		l->tail = NULL;
	l->n--;
	l->bytes -= j->c->len;
	j->next = NULL;
	return j;
}

/* Unlinks j (which must be on l); the lists are short. */
static void list_remove(struct job_list *l, struct job *j)
{
	struct job *prev = NULL;
	for (struct job *k = l->head; k; prev = k, k = k->next) {
		if (k != j)
			continue;
		if (prev)
			prev->next = k->next;
		else
			l->head = k->next;
		if (l->tail == k)
			l->tail = prev;
		l->n--;
		l->bytes -= k->c->len;
		k->next = NULL;
		return;
	}
}

static void job_free(struct job *j)
{
	if (j->kind == JOB_WRITE)
		chunk_unkeep(j->c); /* the write had what it needed of the copy */
	chunk_unref(j->c);
	free(j);
}

/*
 * The generation chunk 0 of (bucket, key) goes to NVMe with: gen, or older
 * than the tombstone of a write to that object under way through this node.
 * S3 applies such a write at a moment larder does not see, before its
 * answer; a read meanwhile may learn the old version, and its chunk 0 (the
 * object's metadata) would outrank that tombstone. The answer's tombstone
 * (store_invalidate) covers it, but a crash before the answer leaves only
 * the first one: then it must.
 */
static uint64_t written_floor(struct store *s, const char *bucket, const char *key,
                              uint64_t gen)
{
	if (atomic_load(&s->writing_n) == 0)
		return gen;
	pthread_mutex_lock(&s->w_lock);
	for (size_t i = 0; i < s->nwriting; i++) {
		const struct writing *w = &s->writing[i];
		bool covers = strcmp(w->bucket, bucket) == 0 &&
		              (w->prefix ? strncmp(w->key, key, strlen(w->key)) == 0
		                         : strcmp(w->key, key) == 0);
		if (covers && w->gen < gen)
			gen = w->gen; /* never 0, which names no generation */
	}
	pthread_mutex_unlock(&s->w_lock);
	return gen;
}

/* A write job with the origin's strings and metadata copied: the caller's
 * die when store_complete returns. */
static struct job *write_job_new(struct store *s, struct chunk *c, const struct chunk_origin *o)
{
	const char *bucket = o && o->bucket ? o->bucket : "";
	const char *key = o && o->key ? o->key : "";
	const char *etag = o && o->etag ? o->etag : "";
	size_t lb = strlen(bucket) + 1, lk = strlen(key) + 1, le = strlen(etag) + 1;
	size_t lm = o && o->meta ? o->meta_len : 0;
	struct job *j = malloc(sizeof *j + lb + lk + le + lm);
	if (!j)
		return NULL;
	memset(j, 0, sizeof *j);
	j->kind = JOB_WRITE;
	/* Taken at store_acquire, whenever there is a disk; or earlier, when
	 * the request for its bytes was sent before it was acquired. */
	j->o.gen = o && o->gen && o->gen < c->gen ? o->gen : c->gen;
	char *p = j->names;
	memcpy(p, bucket, lb);
	j->o.bucket = p;
	p += lb;
	memcpy(p, key, lk);
	j->o.key = p;
	p += lk;
	memcpy(p, etag, le);
	j->o.etag = p;
	p += le;
	if (lm) {
		memcpy(p, o->meta, lm);
		j->o.meta = p;
		j->o.meta_len = lm;
	}
	j->o.index = o ? o->index : 0;
	if (j->o.index == 0)
		j->o.gen = written_floor(s, j->o.bucket, j->o.key, j->o.gen);
	j->o.copy = o && o->copy;
	chunk_ref(c);
	j->c = c;
	return j;
}

/* Whether the queued writes make a batch to write now, whatever their
 * age (q_lock held). */
static bool writes_batch_full(const struct store *s)
{
	return s->writes_flushing || s->writes.n >= WRITE_BATCH ||
	       s->writes.bytes >= WRITE_BATCH_BYTES;
}

/* When the queued writes are due however few (q_lock held). */
static double writes_deadline_s(const struct store *s)
{
	return s->writes_since_s + WRITE_DELAY_MS / 1e3;
}

/* Queues j unless its queue is full (force: a write past the bound);
 * returns whether it was queued. */
static bool job_queue(struct store *s, struct job *j, bool force)
{
	bool ok;
	pthread_mutex_lock(&s->q_lock);
	if (j->kind == JOB_READ)
		ok = !s->stopping && s->reads.n < READ_QUEUE_MAX;
	else
		ok = !s->stopping && (force || (s->writes.n < WRITE_QUEUE_MAX &&
		     (s->writes.n == 0 || s->writes.bytes < s->write_bytes_max)));
	if (ok && j->kind == JOB_READ) {
		list_push(&s->reads, j);
		pthread_cond_signal(&s->q_cv);
	} else if (ok) {
		if (!s->writes.head)
			s->writes_since_s = clock_mono_s();
		list_push(&s->writes, j);
		/* The first wakes a thread to time the batch; the one that
		 * fills it wakes one to write it. */
		if (s->writes.n == 1 || writes_batch_full(s))
			pthread_cond_signal(&s->q_cv);
	}
	pthread_mutex_unlock(&s->q_lock);
	return ok;
}

static void finish(struct store *s, struct chunk *c, bool ok, int reason,
                   const struct chunk_origin *o, bool write_through);

/* Reads c from NVMe into its bytes (disk_read, or with cached_only
 * disk_read_cached), and whether the entry is a copy into *copy: 0, the
 * read's -errno, or -ENOMEM when there was no memory for the bytes. */
static int read_chunk(struct store *s, struct chunk *c, bool cached_only, bool *copy)
{
	if (!disk_usable(s))
		return -ENOENT;
	void *b = chunk_stage(c);
	if (!b)
		return -ENOMEM;
	int r = cached_only ? disk_read_cached(s->disk, &c->id, b, c->len, copy)
	                    : disk_read(s->disk, &c->id, b, c->len, copy);
	/* One append for the whole chunk: NVMe reads are fast next to the
	 * network the readers send it to. */
	return r == 0 && chunk_append(c, b, c->len) != 0 ? -ENOMEM : r;
}

/* The end of a read of c from NVMe, r its result (not -EAGAIN); o names
 * only the charge the reader that caused it brings (store_acquire_charged)
 * and whether the entry is a copy, which RAM keeps after its own chunks. */
static void read_done(struct store *s, struct chunk *c, int r, const struct chunk_origin *o)
{
	if (r == 0) {
		finish(s, c, true, 0, o, false);
		return;
	}
	count(&s->disk_read_errors);
	log_debug("store", "disk_read() failed: %s; refetching", strerror(-r));
	/* -EIO already dropped the entry; for anything else forget it too, or
	 * the next acquire would find it and fail the same way. Not when the
	 * bytes found no memory: the entry is sound. */
	if (s->disk && r != -EIO && r != -ENOMEM)
		tier_drop(&s->nvme, &c->id, NULL);
	finish(s, c, false, STORE_ERR_REFETCH, NULL, false);
}

static void run_read(struct store *s, struct job *j)
{
	read_done(s, j->c, read_chunk(s, j->c, false, &j->o.copy), &j->o);
}

static void run_write(struct store *s, struct job *j)
{
	if (!disk_usable(s))
		return;
	int r = tier_admit(&s->nvme, j->c, &j->o, NULL);
	if (r == 0) {
		atomic_store(&s->disk_fail_streak, 0);
		count(&s->disk_writes);
		changed(s, &j->c->id);
		if (!atomic_exchange(&s->disk_ok, true))
			log_info("store", "NVMe tier back: a write succeeded again");
		return;
	}
	count(&s->disk_write_errors);
	log_warn("store", "disk_write() failed: %s", strerror(-r));
	if (r == -ENOMEM)
		return; /* the process's want, not the device's: no verdict on it */
	unsigned streak = atomic_fetch_add(&s->disk_fail_streak, 1) + 1;
	if (!atomic_load(&s->disk_ok)) { /* a try while disabled: wait longer */
		if (now_ms() < atomic_load(&s->disk_retry_at_ms))
			return; /* another write of the same try already did */
		unsigned wait = atomic_load(&s->disk_retry_ms) * 2;
		wait = wait > DISK_RETRY_MAX_MS ? DISK_RETRY_MAX_MS : wait;
		atomic_store(&s->disk_retry_ms, wait);
		atomic_store(&s->disk_retry_at_ms, now_ms() + wait);
	} else if (streak >= DISK_FAIL_LIMIT) {
		atomic_store(&s->disk_retry_ms, DISK_RETRY_MIN_MS);
		atomic_store(&s->disk_retry_at_ms, now_ms() + DISK_RETRY_MIN_MS);
		if (atomic_exchange(&s->disk_ok, false))
			log_error("store", "NVMe tier disabled after %u consecutive write failures (%s); "
			          "serving from RAM only, trying again in %u s", streak, strerror(-r),
			          DISK_RETRY_MIN_MS / 1000);
	}
}

static void *io_thread(void *arg)
{
	struct store *s = arg;
	assert(s->magic == STORE_MAGIC);
	pthread_setname_np(pthread_self(), "larder-io");

	pthread_mutex_lock(&s->q_lock);
	for (;;) {
		/* Reads first: a client waits on them; then tombstones (the
		 * memory already forgot what they cover); writes only warm NVMe.
		 * At a stop, what is queued to be written still is. */
		struct job *j = NULL;
		if (!s->stopping && s->reads.head) {
			j = list_pop(&s->reads);
		} else if (s->tombs && !s->tomb_writing) {
			struct tomb_job *t = s->tombs;
			s->tombs = t->next;
			if (!s->tombs)
				s->tombs_tail = NULL;
			s->ntombs--;
			s->tomb_writing = true;
			pthread_mutex_unlock(&s->q_lock);
			disk_invalidate(s->disk, t->names, t->key, t->prefix);
			free(t);
			pthread_mutex_lock(&s->q_lock);
			s->tomb_writing = false;
			continue;
		} else if (s->writes.head && (s->stopping || writes_batch_full(s) ||
		                              clock_mono_s() >= writes_deadline_s(s))) {
			s->writes_flushing = true;
			j = list_pop(&s->writes);
		} else if (s->stopping) {
			break;
		} else if (s->writes.head) {
			double at = writes_deadline_s(s);
			struct timespec ts = { (time_t)at, (long)((at - (double)(time_t)at) * 1e9) };
			pthread_cond_timedwait(&s->q_cv, &s->q_lock, &ts);
			continue;
		} else {
			s->writes_flushing = false;
			pthread_cond_wait(&s->q_cv, &s->q_lock);
			continue;
		}
		list_push(&s->active, j);
		pthread_mutex_unlock(&s->q_lock);

		if (j->kind == JOB_READ)
			run_read(s, j);
		else
			run_write(s, j);

		pthread_mutex_lock(&s->q_lock);
		list_remove(&s->active, j);
		bool dropped = j->dropped;
		pthread_mutex_unlock(&s->q_lock);
		/* store_drop ran during the write and may have dropped the entry
		 * before it existed: drop it again now that it does. */
		if (dropped && j->kind == JOB_WRITE && s->disk)
			tier_drop(&s->nvme, &j->c->id, NULL);
		job_free(j);
		pthread_mutex_lock(&s->q_lock);
	}
	pthread_mutex_unlock(&s->q_lock);
	return NULL;
}

/* ---- open / close -------------------------------------------------------------- */

/* mkdir -p; returns 0 or -errno. */
static int mkdir_p(const char *dir)
{
	char path[4096];
	size_t n = strlen(dir);
	if (n == 0 || n >= sizeof path)
		return -ENAMETOOLONG;
	memcpy(path, dir, n + 1);
	for (char *p = path + 1; ; p++) {
		if (*p != '/' && *p != '\0')
			continue;
		char saved = *p;
		*p = '\0';
		if (mkdir(path, 0750) < 0 && errno != EEXIST)
			return -errno;
		*p = saved;
		if (!saved)
			break;
	}
	struct stat st;
	if (stat(dir, &st) < 0)
		return -errno;
	return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

struct store *store_open(const struct store_config *cfg, store_recover_cb cb, void *cb_arg,
                         char *err, size_t errlen)
{
	struct store *s = calloc(1, sizeof *s);
	if (!s) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	s->magic = STORE_MAGIC;
	s->cfg = *cfg;
	s->cfg.dir = NULL; /* not ours to keep; disk_open copies what it needs */
	if (!s->cfg.io_threads)
		s->cfg.io_threads = DEFAULT_IO_THREADS;
	if (!s->cfg.segment_bytes)
		s->cfg.segment_bytes = DEFAULT_SEGMENT_BYTES;
	s->write_bytes_max = s->cfg.ram_bytes / 4;
	for (size_t i = 0; i < INFLIGHT_SHARDS; i++)
		pthread_mutex_init(&s->inflight[i].lock, NULL);
	pthread_mutex_init(&s->q_lock, NULL);
	pthread_mutex_init(&s->w_lock, NULL);
	pthread_condattr_t ca; /* the batch deadline is on the monotonic clock */
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->q_cv, &ca);
	pthread_condattr_destroy(&ca);

	s->ram_t = ram_open(cfg->ram_bytes, cfg->policy, cfg->stale_after_s);
	if (!s->ram_t) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	s->ram = (struct tier){ .ops = &ram_tier_ops, .t = s->ram_t };
	ram_pin_limit(s->ram_t, cfg->pin_bytes ? cfg->pin_bytes : cfg->ram_bytes / 2);
	if (cfg->changed)
		tier_on_evict(&s->ram, cfg->changed, cfg->changed_arg);
	if (cfg->disk_bytes > 0 && cfg->dir && cfg->dir[0]) {
		int r = mkdir_p(cfg->dir);
		if (r < 0) {
			snprintf(err, errlen, "cache directory %s: mkdir() failed: %s", cfg->dir,
			         strerror(-r));
			goto fail;
		}
		s->disk = disk_open(cfg->dir, cfg->disk_bytes, s->cfg.segment_bytes, cfg->chunk_bytes,
		                    cfg->policy, cfg->stale_after_s, cb, cb_arg, err, errlen);
		if (!s->disk)
			goto fail;
		s->nvme = (struct tier){ .ops = &disk_tier_ops, .t = s->disk };
		/* The tier's size: disk_bytes, or less where its file system
		 * has less room (disk_open cuts it to fit). */
		struct disk_stats ds;
		disk_get_stats(s->disk, &ds);
		uint64_t nvme_pin = cfg->pin_nvme_bytes ? cfg->pin_nvme_bytes : ds.capacity / 2;
		disk_pin_limit(s->disk, nvme_pin < ds.capacity ? nvme_pin : ds.capacity);
		if (cfg->changed)
			tier_on_evict(&s->nvme, cfg->changed, cfg->changed_arg);
		atomic_store(&s->disk_ok, true);

		s->threads = calloc(s->cfg.io_threads, sizeof *s->threads);
		if (!s->threads) {
			snprintf(err, errlen, "out of memory");
			goto fail;
		}
		for (unsigned i = 0; i < s->cfg.io_threads; i++) {
			int r2 = pthread_create(&s->threads[i], NULL, io_thread, s);
			if (r2 != 0) {
				snprintf(err, errlen, "pthread_create() failed: %s", strerror(r2));
				goto fail;
			}
			s->nthreads++;
		}
	}
	return s;
fail:
	store_close(s);
	return NULL;
}

void store_close(struct store *s)
{
	if (!s)
		return;
	pthread_mutex_lock(&s->q_lock);
	s->stopping = true;
	pthread_cond_broadcast(&s->q_cv);
	pthread_mutex_unlock(&s->q_lock);
	for (unsigned i = 0; i < s->nthreads; i++)
		pthread_join(s->threads[i], NULL);
	free(s->threads);

	/* The threads are gone, having written what was queued (tombstones
	 * too: none is queued without them): the reads left never ran.
	 * Writes are left only if no thread ever started. */
	struct job *j;
	while ((j = list_pop(&s->reads))) {
		finish(s, j->c, false, STORE_ERR_REFETCH, NULL, false);
		job_free(j);
	}
	while ((j = list_pop(&s->writes)))
		job_free(j);

	for (size_t i = 0; i < INFLIGHT_SHARDS; i++) {
		struct idmap *m = &s->inflight[i].map;
		for (size_t k = 0; k < m->cap; k++) {
			if (!m->slot[k])
				continue;
			log_warn("store", "store_close: a chunk is still being produced");
			chunk_unref(m->slot[k]);
		}
		free(m->slot);
		pthread_mutex_destroy(&s->inflight[i].lock);
	}
	tier_close(&s->ram);
	tier_close(&s->nvme);
	pthread_mutex_destroy(&s->q_lock);
	pthread_cond_destroy(&s->q_cv);
	for (size_t i = 0; i < s->nwriting; i++)
		free(s->writing[i].bucket);
	free(s->writing);
	pthread_mutex_destroy(&s->w_lock);
	s->magic = 0;
	free(s);
}

/* ---- acquire / complete ----------------------------------------------------------- */

struct chunk *store_acquire(struct store *s, const struct chunk_id *id, size_t len,
                            enum store_role *role)
{
	return store_acquire_charged(s, id, len, 0, role);
}

struct chunk *store_acquire_charged(struct store *s, const struct chunk_id *id, size_t len,
                                    unsigned charge, enum store_role *role)
{
	struct tier_gone *dead = NULL;
	double now = clock_mono_s();
	struct chunk *c;

	/* The common case, a RAM hit, takes only the RAM tier's lock. */
	c = ram_lookup(s->ram_t, id, len, now, &dead);
	if (c) {
		tier_release(dead);
		count(&s->hits_ram);
		*role = STORE_HIT;
		return c;
	}

	struct shard *sh = shard_of(s, id);
	pthread_mutex_lock(&sh->lock);
	c = idmap_get(&sh->map, id);
	if (c) {
		chunk_ref(c);
		pthread_mutex_unlock(&sh->lock);
		tier_release(dead);
		count(&s->coalesced);
		*role = STORE_WAIT;
		return c;
	}
	/* Completion moves a chunk from the table to RAM under this lock, so
	 * look again now that we hold it. */
	c = ram_lookup(s->ram_t, id, len, now, &dead);
	if (c) {
		pthread_mutex_unlock(&sh->lock);
		tier_release(dead);
		count(&s->hits_ram);
		*role = STORE_HIT;
		return c;
	}

	c = chunk_new(id, len);
	if (!c || idmap_put(&sh->map, c) < 0) {
		pthread_mutex_unlock(&sh->lock);
		chunk_unref(c);
		tier_release(dead);
		return NULL;
	}
	atomic_fetch_add(&s->inflight_n, 1);
	chunk_ref(c); /* the caller's; the table keeps the first */
	/* Its place in NVMe time order is when its fetch began: a fetch that
	 * began before an invalidation may bring the bytes it removed, so its
	 * entry must count as older than the tombstone, however late it ends. */
	c->gen = s->disk ? disk_next_gen(s->disk) : 0;

	/* Reserve before anyone can complete it (an I/O thread may, as soon
	 * as the read job is queued). */
	ram_reserve(s->ram_t, len, now, &dead);

	*role = STORE_PRODUCE;
	size_t dlen;
	bool on_disk = disk_usable(s) && tier_holds(&s->nvme, id, &dlen) && dlen == len;
	pthread_mutex_unlock(&sh->lock);
	tier_release(dead);
	if (!on_disk) {
		count(&s->misses);
		return c;
	}
	/* Held on NVMe. A small chunk whose bytes the page cache has is read
	 * here and now: handing it to an I/O thread and back costs more than
	 * the copy (two wake-ups and a suspended request; docs/benchmarks.md,
	 * "NVMe hits from the page cache"). Whoever joins meanwhile waits on
	 * c as on any producer. */
	struct chunk_origin promoted = { .charge = charge };
	int r = len <= INLINE_READ_MAX ? read_chunk(s, c, true, &promoted.copy) : -EAGAIN;
	if (r != -EAGAIN) {
		read_done(s, c, r, &promoted);
		*role = r == 0 ? STORE_HIT : STORE_WAIT; /* failed: the caller acquires again */
	} else {
		struct job *j = calloc(1, sizeof *j);
		if (j) {
			j->kind = JOB_READ;
			j->o = promoted;
			chunk_ref(c);
			j->c = c;
			if (job_queue(s, j, false))
				*role = STORE_WAIT;
			else
				job_free(j); /* queue full: the caller fetches it */
		}
	}
	count(*role == STORE_PRODUCE ? &s->misses : &s->hits_disk);
	return c;
}

/* Completion for callers and for NVMe reads (which are not written back). */
static void finish(struct store *s, struct chunk *c, bool ok, int reason,
                   const struct chunk_origin *o, bool write_through)
{
	struct tier_gone *dead = NULL;
	struct shard *sh = shard_of(s, &c->id);

	if (ok)
		chunk_set_state(c, CHUNK_READY, 0);

	pthread_mutex_lock(&sh->lock);
	/* Not in the table: store_drop took it out, so it must not be kept. */
	bool in_table = idmap_get(&sh->map, &c->id) == c;
	if (in_table) {
		idmap_del(&sh->map, &c->id);
		atomic_fetch_sub(&s->inflight_n, 1);
	}
	/* Either way the RAM reservation taken at acquire ends here. */
	if (ok && in_table)
		tier_admit(&s->ram, c, o, &dead);
	else
		ram_unreserve(s->ram_t, c->len);
	pthread_mutex_unlock(&sh->lock);

	if (!ok)
		chunk_set_state(c, CHUNK_FAILED, reason);
	if (ok && in_table && write_through && disk_usable(s)) {
		/* A chunk pinned on NVMe is written whatever the queue holds:
		 * once RAM lets it go, NVMe is where its pin keeps it. The job
		 * gives the producer's copy back (job_free). */
		struct job *j = write_job_new(s, c, o);
		if (!j || !(job_queue(s, j, false) ||
		            (disk_pinned(s->disk, &c->id) && job_queue(s, j, true)))) {
			count(&s->disk_writes_dropped);
			if (j)
				job_free(j);
			else
				chunk_unkeep(c);
		}
	} else {
		chunk_unkeep(c);
	}
	if (ok && in_table)
		changed(s, &c->id);
	if (in_table)
		chunk_unref(c); /* the table's reference */
	tier_release(dead);
}

void store_complete(struct store *s, struct chunk *c, bool ok, int reason,
                    const struct chunk_origin *o)
{
	finish(s, c, ok, reason, o, true);
}

bool store_doubtful(const struct store *s)
{
	return s->disk && disk_doubtful(s->disk);
}

bool store_holds(struct store *s, const struct chunk_id *id)
{
	return tier_holds(&s->ram, id, NULL) || (disk_usable(s) && tier_holds(&s->nvme, id, NULL));
}

void store_each_nvme(struct store *s, store_each_fn fn, void *arg)
{
	if (s->disk)
		disk_each(s->disk, fn, arg);
}

void store_drop(struct store *s, const struct chunk_id *id)
{
	struct tier_gone *dead = NULL;
	struct shard *sh = shard_of(s, id);

	tier_drop(&s->ram, id, &dead);
	tier_release(dead);

	pthread_mutex_lock(&sh->lock);
	struct chunk *c = idmap_del(&sh->map, id);
	if (c)
		atomic_fetch_sub(&s->inflight_n, 1);
	pthread_mutex_unlock(&sh->lock);
	chunk_unref(c);

	if (!s->disk)
		return;
	struct job *gone = NULL;
	pthread_mutex_lock(&s->q_lock);
	for (struct job *j = s->writes.head, *next; j; j = next) {
		next = j->next;
		if (chunk_id_eq(&j->c->id, id)) {
			list_remove(&s->writes, j);
			j->next = gone;
			gone = j;
		}
	}
	for (struct job *j = s->active.head; j; j = j->next)
		if (chunk_id_eq(&j->c->id, id))
			j->dropped = true;
	pthread_mutex_unlock(&s->q_lock);
	while (gone) {
		struct job *next = gone->next;
		job_free(gone);
		gone = next;
	}
	tier_drop(&s->nvme, id, NULL);
	changed(s, id);
}

int store_pin(struct store *s, const struct chunk_id *id, size_t len)
{
	return store_pin_in(s, id, len, STORE_PIN_RAM | STORE_PIN_NVME);
}

int store_pin_in(struct store *s, const struct chunk_id *id, size_t len, int tiers_allowed)
{
	int r = tiers_allowed & STORE_PIN_RAM ? ram_pin(s->ram_t, id, len) : -ENOSPC;
	int d = s->disk && (tiers_allowed & STORE_PIN_NVME) ? disk_pin(s->disk, id, len) : -ENOSPC;
	int tiers = (r == 0 ? STORE_PIN_RAM : 0) | (d == 0 ? STORE_PIN_NVME : 0);
	if (tiers)
		return tiers;
	return r == -ENOMEM || d == -ENOMEM ? -ENOMEM : -ENOSPC;
}

int store_pinned(struct store *s, const struct chunk_id *id)
{
	return (ram_pinned(s->ram_t, id) ? STORE_PIN_RAM : 0) |
	       (s->disk && disk_pinned(s->disk, id) ? STORE_PIN_NVME : 0);
}

void store_unpin(struct store *s, const struct chunk_id *id, int tiers)
{
	if (tiers & STORE_PIN_RAM)
		ram_unpin(s->ram_t, id);
	if ((tiers & STORE_PIN_NVME) && s->disk)
		disk_unpin(s->disk, id);
}

/* Whether a write of id waits in the queue or runs. */
static bool write_pending(struct store *s, const struct chunk_id *id)
{
	bool found = false;
	pthread_mutex_lock(&s->q_lock);
	for (struct job *j = s->writes.head; j && !found; j = j->next)
		found = chunk_id_eq(&j->c->id, id);
	for (struct job *j = s->active.head; j && !found; j = j->next)
		found = j->kind == JOB_WRITE && chunk_id_eq(&j->c->id, id);
	pthread_mutex_unlock(&s->q_lock);
	return found;
}

void store_pin_write(struct store *s, struct chunk *c, const struct chunk_origin *o)
{
	if (!disk_usable(s) || atomic_load(&c->state) != CHUNK_READY ||
	    !disk_pinned(s->disk, &c->id) || tier_holds(&s->nvme, &c->id, NULL) ||
	    write_pending(s, &c->id))
		return;
	struct job *j = write_job_new(s, c, o);
	if (j && !job_queue(s, j, true))
		job_free(j);
}

uint64_t store_pin_nvme_bytes(uint64_t size, uint64_t chunk)
{
	uint64_t n = obj_chunk_count(size, chunk); /* an empty object has none */
	return n ? (n - 1) * disk_pin_bytes(chunk) +
	               disk_pin_bytes(obj_chunk_len(size, n - 1, chunk))
	         : 0;
}

int store_charge_limit(struct store *s, unsigned charge, uint64_t max)
{
	struct tier_gone *dead = NULL;
	int rc = ram_charge_limit(s->ram_t, charge, max, clock_mono_s(), &dead);
	tier_release(dead);
	return rc;
}

uint64_t store_charged(struct store *s, unsigned charge)
{
	return ram_charged(s->ram_t, charge);
}

uint64_t store_next_gen(struct store *s)
{
	return s->disk ? disk_next_gen(s->disk) : 0;
}

int store_invalidate(struct store *s, const char *bucket, const char *key, bool prefix)
{
	/* Even when the tier is disabled: its entries are still recovered at
	 * the next start. */
	return s->disk ? disk_invalidate(s->disk, bucket, key, prefix) : 0;
}

int store_write_begin(struct store *s, uint64_t owner, const char *bucket, const char *key,
                      bool prefix)
{
	if (!s->disk)
		return 0;
	size_t bl = strlen(bucket) + 1, kl = strlen(key) + 1;
	char *names = malloc(bl + kl);
	pthread_mutex_lock(&s->w_lock);
	if (names && s->nwriting == s->wcap) {
		size_t cap = s->wcap ? s->wcap * 2 : 16;
		struct writing *nw = realloc(s->writing, cap * sizeof *nw);
		if (nw) {
			s->writing = nw;
			s->wcap = cap;
		}
	}
	if (names && s->nwriting < s->wcap) {
		memcpy(names, bucket, bl);
		memcpy(names + bl, key, kl);
		/* Taken under w_lock: a chunk 0 whose generation is newer looks
		 * (written_floor) after this entry is in. */
		s->writing[s->nwriting++] = (struct writing){
			.owner = owner, .gen = disk_next_gen(s->disk), .prefix = prefix,
			.bucket = names, .key = names + bl,
		};
		atomic_store(&s->writing_n, s->nwriting);
		names = NULL;
	}
	pthread_mutex_unlock(&s->w_lock);
	if (names) {
		free(names);
		log_warn("store", "no memory to note a write to %s/%s%s under way: a crash before "
		         "its answer may give back the version it replaced", bucket, key,
		         prefix ? "*" : "");
	}
	return store_invalidate(s, bucket, key, prefix);
}

void store_write_end(struct store *s, uint64_t owner)
{
	if (!s->disk || atomic_load(&s->writing_n) == 0)
		return;
	pthread_mutex_lock(&s->w_lock);
	for (size_t i = 0; i < s->nwriting;) {
		if (s->writing[i].owner == owner) {
			free(s->writing[i].bucket);
			s->writing[i] = s->writing[--s->nwriting];
		} else {
			i++;
		}
	}
	atomic_store(&s->writing_n, s->nwriting);
	pthread_mutex_unlock(&s->w_lock);
}

int store_invalidate_queued(struct store *s, const char *bucket, const char *key, bool prefix)
{
	if (!s->disk)
		return 0;
	size_t bl = strlen(bucket) + 1, kl = strlen(key) + 1;
	struct tomb_job *t = malloc(sizeof *t + bl + kl);
	if (t) {
		t->next = NULL;
		t->prefix = prefix;
		memcpy(t->names, bucket, bl);
		t->key = t->names + bl;
		memcpy(t->key, key, kl);
	}
	pthread_mutex_lock(&s->q_lock);
	bool queued = t && !s->stopping && s->nthreads && s->ntombs < TOMB_QUEUE_MAX;
	if (queued) {
		*(s->tombs_tail ? &s->tombs_tail->next : &s->tombs) = t;
		s->tombs_tail = t;
		s->ntombs++;
		pthread_cond_signal(&s->q_cv);
	}
	pthread_mutex_unlock(&s->q_lock);
	if (queued)
		return 0;
	free(t);
	return store_invalidate(s, bucket, key, prefix);
}

int store_invalidate_seen(struct store *s, const char *bucket, const char *key)
{
	return s->disk ? disk_invalidate_unsynced(s->disk, bucket, key) : 0;
}

void store_get_stats(struct store *s, struct store_stats *out)
{
	memset(out, 0, sizeof *out);
	struct tier_stats t;
	tier_get_stats(&s->ram, &t);
	out->ram_used = t.used;
	out->ram_filling = t.reserved;
	out->ram_capacity = t.capacity;
	out->ram_entries = t.entries;
	out->evictions_ram = t.evictions;
	out->ram_overcommits = t.overcommits;
	out->ram_pinned = t.pinned;
	out->pin_held = t.pin_held;
	out->pin_limit = t.pin_limit;

	out->inflight = atomic_load(&s->inflight_n);
	out->hits_ram = atomic_load(&s->hits_ram);
	out->hits_disk = atomic_load(&s->hits_disk);
	out->misses = atomic_load(&s->misses);
	out->coalesced = atomic_load(&s->coalesced);
	out->disk_writes = atomic_load(&s->disk_writes);
	out->disk_writes_dropped = atomic_load(&s->disk_writes_dropped);
	out->disk_write_errors = atomic_load(&s->disk_write_errors);
	out->disk_read_errors = atomic_load(&s->disk_read_errors);
	out->disk_ok = s->disk && atomic_load(&s->disk_ok);
	if (s->disk) {
		tier_get_stats(&s->nvme, &t);
		out->disk_used = t.used;
		out->disk_capacity = t.capacity;
		out->disk_entries = t.entries;
		out->evictions_disk = t.evictions;
		out->disk_corrupt = t.corrupt;
		out->nvme_pinned = t.pinned;
		out->nvme_pin_held = t.pin_held;
		out->nvme_pin_limit = t.pin_limit;
	}
}

/*
 * prefetch.c - cache-warming jobs (see prefetch.h).
 *
 * A job lives in two places: the registry (under p->lock; what the admin
 * thread reads and what keeps finished jobs for their status) and, while it
 * runs, the first worker's loop, which advances every running job on a
 * short timer. Listing and manifest transfers run on that worker's curl
 * multi handle; object metadata and chunks come through the metadata cache
 * and the store exactly as for client reads. Counters the admin thread
 * reads are atomics; everything else belongs to the worker.
 *
 * This file owns the jobs: the registry, the loop's timers and the
 * per-object stepping (metadata, chunks, pins). The listing and manifest
 * transfers and their XML parsing, and the one-off bucket check and object
 * read, are prefetch_list.c's; what the two share is prefetch_internal.h.
 */
#include "gateway/prefetch.h"
#include "gateway/prefetch_internal.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <openssl/rand.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "auth/sigv4.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/splitmix.h"
#include "gateway/fetch.h"
#include "gateway/pins.h"
#include "gateway/server.h"
#include "gateway/upstream.h"
#include "store/meta.h"
#include "store/object.h"
#include "store/store.h"

#define PF_KEEP_FINISHED 64  /* finished jobs kept for their status */
_Static_assert(PF_KEEP_FINISHED + PREFETCH_RUNNING_MAX <= PREFETCH_LIST_MAX,
               "prefetch_list's callers size their arrays by PREFETCH_LIST_MAX");
#define PF_TICK 0.005        /* a small object takes two steps: its meta fetch, then chunk 0 */
#define LIST_BODY_MAX (64u << 20)

static const char *const state_names[] = { "listing", "warming", "done", "failed", "cancelled" };

void pf_job_fail(struct pf_job *j, const char *msg)
{
	pthread_mutex_lock(&j->p->lock); /* the admin thread reads error under it */
	snprintf(j->error, sizeof j->error, "%s", msg);
	atomic_store(&j->state, PF_FAILED);
	pthread_mutex_unlock(&j->p->lock);
	log_warn("prefetch", "job %s: %s", j->id, j->error);
}

int pf_add_key(struct pf_job *j, const char *key, uint64_t size)
{
	size_t held = atomic_load(&j->n_keys) - j->key_base;
	if (held == j->cap_keys && j->next_key > j->key_base) {
		/* Full: first let go of the room of the keys already taken. */
		size_t taken = j->next_key - j->key_base, left = held - taken;
		memmove(j->keys, j->keys + taken, left * sizeof *j->keys);
		memmove(j->sizes, j->sizes + taken, left * sizeof *j->sizes);
		j->key_base = j->next_key;
		held = left;
	}
	if (held == j->cap_keys) {
		size_t cap = j->cap_keys ? j->cap_keys * 2 : 256;
		char **k = realloc(j->keys, cap * sizeof *k);
		if (!k)
			return -ENOMEM;
		j->keys = k;
		uint64_t *s = realloc(j->sizes, cap * sizeof *s);
		if (!s)
			return -ENOMEM;
		j->sizes = s;
		j->cap_keys = cap;
	}
	if (!(j->keys[held] = strdup(key)))
		return -ENOMEM;
	j->sizes[held] = size;
	atomic_fetch_add(&j->n_keys, 1);
	if (size)
		atomic_fetch_add(&j->bytes_total, size);
	if (j->pin && j->listed)
		j->pin_nvme_want += store_pin_nvme_bytes(size, j->p->gw->objects.chunk_bytes);
	return 0;
}

/* ---- warming objects -------------------------------------------------------- */

static void obj_wake(void *arg)
{
	struct pf_obj *o = arg;
	assert(o->magic == PF_OBJ_MAGIC);
	atomic_store(&o->woken, true);
}

static void obj_release(struct pf_job *j, struct pf_obj *o, bool gave_up)
{
	obj_meta_cancel(&j->p->gw->objects, j->bucket, o->key, &o->ask);
	for (unsigned k = 0; k < o->n_held; k++)
		obj_unwant(o->held[k], gave_up);
	meta_unref(o->meta);
	free(o->key);
	memset(o, 0, sizeof *o);
}

/* Whether the job may start another chunk under its bandwidth cap. */
static bool under_cap(const struct pf_job *j)
{
	if (!j->bytes_per_s)
		return true;
	double elapsed = clock_mono_s() - j->started;
	return (double)atomic_load(&j->bytes_done) <= (double)j->bytes_per_s * elapsed;
}

/* obj_load_fn of a job: a meta fetch with no owner. */
static int start_meta_fetch(void *arg, const char *revalidate)
{
	struct pf_load *l = arg;
	const struct pf_job *j = l->j;
	return fetch_meta_start_job(j->p->w, j->bucket, l->key, revalidate,
	                            j->pin ? j->pin_hdr : NULL, l->whole) ? 0 : -EIO;
}

/* Each tier's pin cap and what is pinned under it, for a refusal. */
static void pin_limits(const struct store_stats *st, char *out, size_t n)
{
	int k = snprintf(out, n, "LARDER_PIN_MAX, %" PRIu64 " bytes, %" PRIu64 " pinned already",
	                 st->pin_limit, st->pin_held);
	if (st->nvme_pin_limit && k > 0 && (size_t)k < n)
		snprintf(out + k, n - (size_t)k, "; LARDER_PIN_MAX_NVME, %" PRIu64 " bytes, %" PRIu64
		         " pinned already", st->nvme_pin_limit, st->nvme_pin_held);
}

/* Pins c, chunk i of o, before it completes (a chunk being produced is
 * kept when it does; one already complete is written to NVMe if its pin is
 * there and NVMe lacks it). A pin that no longer exists (ended early) pins
 * nothing more; one that would pass the limit fails the job. */
static int pin_chunk(struct pf_job *j, const struct pf_obj *o, uint64_t i, struct chunk *c)
{
	int r = pins_add(j->p->gw->pins, j->id, &c->id, c->len);
	if (r == 0) {
		struct obj_ref ref = { j->bucket, o->key, o->meta };
		pins_keep_on_nvme(j->p->gw->store, &ref, i, c);
	}
	if (r == -ENOSPC && !atomic_exchange(&j->pin_refused, true)) {
		struct store_stats st;
		store_get_stats(j->p->gw->store, &st);
		char msg[300];
		char lim[200];
		pin_limits(&st, lim, sizeof lim);
		snprintf(msg, sizeof msg, "pin refused: it passes the pin limit (%s)", lim);
		pf_job_fail(j, msg);
	}
	return r;
}

/* Whether a listed pin fits in what is left of the pin limit, beside what
 * other pin jobs still warming will pin: refused up front when it does
 * not, before anything is fetched; taken, its room is kept for it. */
static bool pin_fits(struct pf_job *j)
{
	uint64_t want = atomic_load(&j->bytes_total), others;
	int rc = pins_reserve(j->p->gw->pins, j->id, want, j->pin_nvme_want, &others);
	if (rc != -ENOSPC)
		return true; /* -ENOENT: ended already; the next chunk ends the job */
	atomic_store(&j->pin_refused, true);
	struct store_stats st;
	store_get_stats(j->p->gw->store, &st);
	char msg[400];
	char lim[200];
	pin_limits(&st, lim, sizeof lim);
	snprintf(msg, sizeof msg, "pin refused: %" PRIu64 " bytes (%" PRIu64 " as NVMe entries, "
	         "each chunk's padded to 4 KiB), but the pin limits (%s; %" PRIu64 " more "
	         "bytes for pin jobs still warming) have room for neither", want, j->pin_nvme_want,
	         lim, others);
	pf_job_fail(j, msg);
	return false;
}

/* n more bytes of j are warm: the job's figure and the counter of all. */
static void count_warmed(struct pf_job *j, uint64_t n)
{
	atomic_fetch_add(&j->bytes_done, n);
	atomic_fetch_add(&j->p->warmed, n);
}

uint64_t prefetch_warmed(struct prefetch *p)
{
	return atomic_load(&p->warmed);
}

/* Tells the job's sized callback (prefetch_req) o's size, 0: it failed. */
static void tell_size(const struct pf_job *j, const struct pf_obj *o, uint64_t size)
{
	if (j->sized)
		j->sized(j->sized_arg, j->id, o->index, size);
}

/* One step for one object; true when it is finished: warm whole, or
 * failed (o->failed: a chunk or its metadata did not come, or its pin was
 * refused). */
static bool obj_step(struct pf_job *j, struct pf_obj *o)
{
	const struct objects *ob = &j->p->gw->objects;
	while (!o->meta) {
		if (o->ask.waiting && !atomic_load(&o->woken))
			return false;
		o->ask.waiting = false;
		atomic_store(&o->woken, false);
		if (o->meta_tries++ > 2) {
			atomic_fetch_add(&j->errors, 1);
			tell_size(j, o, 0);
			o->failed = true;
			return true;
		}
		o->waiter.wake = obj_wake;
		o->waiter.arg = o;
		o->ask.waiter = &o->waiter;
		/* Learnt whole unless it is known to be bigger than a chunk: then
		 * readers with x-amz-checksum-mode get S3's checksums from the
		 * cache, at no cost for a one-chunk object (docs/cache.md). */
		struct pf_load l = { j, o->key, !o->sized || o->n_chunks <= 1 };
		long st;
		enum obj_meta_step step = obj_meta_step(ob, j->bucket, o->key, &o->ask,
		                                        start_meta_fetch, &l, clock_mono_s(),
		                                        &o->meta, &st);
		if (step == OBJ_META_WAIT)
			return false;
	}
	if (o->meta->negative) {
		atomic_fetch_add(&j->errors, 1);
		tell_size(j, o, 0);
		o->failed = true;
		return true;
	}
	if (!o->sized) {
		o->sized = true;
		o->listed = o->meta->size; /* counted once: the check below is for listed sizes */
		tell_size(j, o, o->meta->size);
		atomic_fetch_add(&j->bytes_total, o->meta->size);
		o->n_chunks = obj_chunk_count(o->meta->size, ob->chunk_bytes);
		/* A key list's pin is sized object by object: refused as soon as one
		 * does not fit, before its chunks are fetched (it pinned and then
		 * let go of the limit's worth of a large object). */
		if (j->pin && !j->listed) {
			j->pin_nvme_want += store_pin_nvme_bytes(o->meta->size, ob->chunk_bytes);
			if (!pin_fits(j)) {
				o->failed = true;
				return true;
			}
		}
	} else if (o->listed != o->meta->size) {
		/* Replaced since it was listed: warm what a read gets now. */
		atomic_fetch_add(&j->bytes_total, o->meta->size);
		atomic_fetch_sub(&j->bytes_total, o->listed);
		o->listed = o->meta->size;
		tell_size(j, o, o->meta->size);
		o->n_chunks = obj_chunk_count(o->meta->size, ob->chunk_bytes);
	}
	/* Settle what arrived. */
	for (unsigned k = 0; k < o->n_held;) {
		struct chunk *c = o->held[k];
		int st = atomic_load(&c->state);
		if (st == CHUNK_FILLING) {
			k++;
			continue;
		}
		if (st == CHUNK_READY) {
			count_warmed(j, c->len);
		} else {
			atomic_fetch_add(&j->errors, 1);
			o->failed = true;
			if (j->pin) /* pinned as it began: the pin holds what arrived */
				pins_drop(j->p->gw->pins, j->id, &c->id);
		}
		obj_unwant(c, false);
		o->held[k] = o->held[--o->n_held];
	}
	/* Start more. */
	struct obj_ref ref = { j->bucket, o->key, o->meta };
	struct fetch_producer fp = { j->p->w, j->bucket, o->key, o->meta, 0,
	                             j->pin ? j->pin_hdr : NULL, true, 0, 0, NULL };
	while (o->n_held < PF_HELD && o->next_chunk < o->n_chunks && under_cap(j)) {
		uint64_t i = o->next_chunk;
		enum store_role role;
		struct chunk *c = obj_acquire(ob, &ref, i, 0, fetch_produce, &fp, &role);
		if (!c)
			break;
		if (j->pin && pin_chunk(j, o, i, c) == -ENOSPC) {
			obj_unwant(c, true);
			o->failed = true;
			return true;
		}
		o->next_chunk++;
		if (role == STORE_HIT) {
			count_warmed(j, c->len);
			obj_unwant(c, false);
			continue;
		}
		o->held[o->n_held++] = c;
	}
	return o->next_chunk == o->n_chunks && o->n_held == 0;
}

/* The keys a job never took, let go of as it ends (and at job_free): it
 * stays in the registry (its status) until 64 newer jobs have finished,
 * and a cancelled job's list held its keys all that time (about 9 MiB for
 * 300,000 keys, test_prefetch.CancelledJobKeys). */
static void drop_untaken_keys(struct pf_job *j)
{
	size_t n = atomic_load(&j->n_keys);
	for (size_t i = j->next_key; i < n; i++)
		free(j->keys[i - j->key_base]);
	free(j->keys);
	free(j->sizes);
	j->keys = NULL;
	j->sizes = NULL;
	j->cap_keys = 0;
	j->next_key = j->key_base = n;
}

/* A gated job lets go of the keys its reader went past before it started
 * them: a lookahead's reader that jumps ahead (a job resumed far into its
 * list) would otherwise have every key it skipped fetched for nothing. */
static void skip_passed_keys(struct pf_job *j)
{
	size_t to = j->gated ? atomic_load(&j->skip_to) : 0, n = atomic_load(&j->n_keys);
	for (; j->next_key < to && j->next_key < n; j->next_key++) {
		size_t at = j->next_key - j->key_base;
		free(j->keys[at]);
		j->keys[at] = NULL;
	}
}

/* Advances one running job; false when it has finished. */
static bool job_step(struct pf_job *j)
{
	if (atomic_load(&j->cancel) && atomic_load(&j->state) < PF_DONE)
		atomic_store(&j->state, PF_CANCELLED);
	int state = atomic_load(&j->state);
	if (state >= PF_DONE) {
		for (unsigned k = 0; k < j->concurrency; k++)
			if (j->active[k].key)
				obj_release(j, &j->active[k], true);
		pf_list_stop(j);
		drop_untaken_keys(j);
		if (j->pin && state != PF_DONE)
			pins_end(j->p->gw->pins, j->id);
		else if (j->pin)
			pins_settle(j->p->gw->pins, j->id);
		log_info("prefetch", "job %s %s: %" PRIu64 " objects, %" PRIu64 " bytes, %" PRIu64
		         " errors", j->id, state_names[state], atomic_load(&j->objects_done),
		         atomic_load(&j->bytes_done), atomic_load(&j->errors));
		return false;
	}
	if (j->pin && !pins_has(j->p->gw->pins, j->id)) {
		/* Its pin ended early (unpin): the rest warms unpinned, and its
		 * fetches stop asking the owners to pin, which would hold what
		 * they fetch from now on until the pin's time, past the unpin. */
		j->pin = false;
		log_info("prefetch", "job %s: its pin ended; warming on unpinned", j->id);
	}
	pf_list_step(j);
	if (atomic_load(&j->listing_done) && state == PF_LISTING) {
		/* A listed pin knows its size now: refuse it before warming. */
		if (j->pin && j->listed && !pin_fits(j))
			return job_step(j);
		atomic_store(&j->state, PF_WARMING);
	}
	if (j->pin && j->listed && !atomic_load(&j->listing_done))
		return true; /* a listed pin warms once its whole size is known */
	skip_passed_keys(j);
	unsigned active = 0;
	for (unsigned k = 0; k < j->concurrency; k++) {
		struct pf_obj *o = &j->active[k];
		if (!o->key && j->next_key < atomic_load(&j->n_keys) &&
		    (!j->gated || j->next_key < atomic_load(&j->gate))) {
			size_t at = j->next_key - j->key_base;
			o->magic = PF_OBJ_MAGIC;
			o->key = j->keys[at]; /* the object's now */
			j->keys[at] = NULL;
			o->index = j->next_key;
			o->listed = j->sizes[at];
			o->sized = o->listed != 0;
			if (o->sized)
				o->n_chunks = obj_chunk_count(j->sizes[at], j->p->gw->objects.chunk_bytes);
			j->next_key++;
			if (j->pin)
				pins_add_object(j->p->gw->pins, j->id);
		}
		if (!o->key)
			continue;
		if (obj_step(j, o)) {
			if (!o->failed) /* objects warmed, not objects tried */
				atomic_fetch_add(&j->objects_done, 1);
			obj_release(j, o, false);
		} else {
			active++;
		}
	}
	if (atomic_load(&j->state) == PF_FAILED) /* its pin was refused */
		return job_step(j);
	if (j->list_paused)
		pf_list_more(j);
	if (atomic_load(&j->listing_done) && j->next_key == atomic_load(&j->n_keys) && active == 0) {
		atomic_store(&j->state, PF_DONE);
		return job_step(j);
	}
	return true;
}

static void tick_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct prefetch *p = t->data;
	assert(p->magic == PF_MAGIC);
	(void)revents;
	struct pf_job **pp = &p->running;
	while (*pp) {
		struct pf_job *j = *pp;
		if (job_step(j)) {
			pp = &j->run_next;
		} else {
			/* Off the loop: from here the registry may free it. */
			*pp = j->run_next;
			pthread_mutex_lock(&p->lock);
			j->finished = clock_mono_s();
			pthread_mutex_unlock(&p->lock);
		}
	}
	if (!p->running)
		ev_timer_stop(loop, t);
}

static void async_cb(struct ev_loop *loop, ev_async *a, int revents)
{
	struct prefetch *p = a->data;
	assert(p->magic == PF_MAGIC);
	(void)revents;
	pthread_mutex_lock(&p->lock);
	struct pf_job *q = p->queued;
	p->queued = NULL;
	for (struct pf_job *j = q; j; j = j->run_next)
		j->started = clock_mono_s();
	pthread_mutex_unlock(&p->lock);
	while (q) {
		struct pf_job *j = q;
		q = j->run_next;
		if (!atomic_load(&j->listing_done) && pf_start_listing(j) != 0) {
			pf_job_fail(j, "cannot start listing upstream");
			atomic_store(&j->listing_done, true);
		}
		j->run_next = p->running;
		p->running = j;
	}
	if (p->running && !ev_is_active(&p->tick))
		ev_timer_again(loop, &p->tick);
}

static void pin_tick_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct prefetch *p = t->data;
	(void)loop;
	(void)revents;
	if (p->gw->pins)
		pins_expire(p->gw->pins, (int64_t)time(NULL));
}

/* ---- the registry -------------------------------------------------------- */

struct prefetch *prefetch_create(struct gw *gw, struct worker *w)
{
	struct prefetch *p = calloc(1, sizeof *p);
	if (!p)
		return NULL;
	p->magic = PF_MAGIC;
	p->gw = gw;
	p->w = w;
	/* Job ids name pins, which outlive the process on peers and in pin
	 * files, and clients hold them: counted from 1 again on each start,
	 * an old id would name a new job. A random tag per run keeps them
	 * apart (pf-TAG-N). */
	unsigned char r[3];
	if (RAND_bytes(r, sizeof r) != 1) {
		uint64_t x = splitmix_mix((uint64_t)getpid() ^ (uint64_t)time(NULL) << 20);
		memcpy(r, &x, sizeof r);
	}
	snprintf(p->run_tag, sizeof p->run_tag, "%02x%02x%02x", r[0], r[1], r[2]);
	pthread_mutex_init(&p->lock, NULL);
	ev_async_init(&p->async, async_cb);
	p->async.data = p;
	ev_async_start(w->loop, &p->async);
	ev_timer_init(&p->pin_tick, pin_tick_cb, 1.0, 1.0);
	p->pin_tick.data = p;
	ev_timer_start(w->loop, &p->pin_tick);
	ev_init(&p->tick, tick_cb);
	p->tick.repeat = PF_TICK;
	p->tick.data = p;
	return p;
}

static void job_free(struct pf_job *j)
{
	drop_untaken_keys(j);
	transfer_fini(&j->x);
	up_target_fini(&j->target);
	buf_fini(&j->body);
	free(j->token);
	free(j->token_seen);
	free(j->active);
	free(j->bucket);
	free(j->prefix);
	free(j->manifest);
	free(j);
}

/* Runs on the worker's thread after its loop ended (shutdown). */
void prefetch_destroy(struct prefetch *p)
{
	if (!p)
		return;
	for (struct pf_job *j = p->running; j; j = j->run_next) {
		atomic_store(&j->cancel, true);
		job_step(j);
	}
	for (struct pf_job *j = p->jobs, *next; j; j = next) {
		next = j->next;
		job_free(j);
	}
	pthread_mutex_destroy(&p->lock);
	p->magic = 0;
	free(p);
}

/* Jobs not finished. Call with p->lock held. */
static size_t running(const struct prefetch *p)
{
	size_t n = 0;
	for (const struct pf_job *j = p->jobs; j; j = j->next)
		n += atomic_load(&j->state) < PF_DONE;
	return n;
}

/* A job of rq, not yet registered (it has no id); NULL when out of memory. */
static struct pf_job *job_new(struct prefetch *p, const struct prefetch_req *rq)
{
	struct pf_job *j = calloc(1, sizeof *j);
	if (!j)
		return NULL;
	j->magic = PREFETCH_MAGIC;
	j->p = p;
	j->concurrency = rq->concurrency ? rq->concurrency : 4;
	if (j->concurrency > 64)
		j->concurrency = 64;
	j->bytes_per_s = rq->bytes_per_s;
	j->pin = rq->pin_seconds > 0 && p->gw->pins;
	j->active = calloc(j->concurrency, sizeof *j->active);
	j->bucket = strdup(rq->bucket);
	j->prefix = strdup(rq->prefix ? rq->prefix : "");
	j->manifest = rq->manifest ? strdup(rq->manifest) : NULL;
	struct transfer_retry policy = upstream_retry_policy(p->gw->up);
	transfer_init(&j->x, &pf_list_ops, j, p->w->curl, &policy);
	shaper_slot_init(&j->slot, true, NULL, NULL); /* pf_list_step asks on every tick */
	up_target_init(&j->target);
	buf_init(&j->body, LIST_BODY_MAX);
	bool ok = j->active && j->bucket && j->prefix && (!rq->manifest || j->manifest);
	for (size_t i = 0; ok && i < rq->n_keys; i++)
		ok = pf_add_key(j, rq->keys[i], 0) == 0;
	if (!ok) {
		job_free(j);
		return NULL;
	}
	atomic_store(&j->listing_done, rq->keys != NULL);
	j->gated = rq->gated;
	j->sized = rq->sized;
	j->sized_arg = rq->sized_arg;
	j->listed = !rq->keys && !rq->manifest;
	atomic_store(&j->state, PF_LISTING);
	return j;
}

/* Gives j its id and begins its pin, until pin_seconds from now. Call with
 * p->lock held. 0, or -1 when out of memory. */
static int job_name(struct prefetch *p, struct pf_job *j, uint64_t pin_seconds)
{
	do /* a pin restored at start keeps its job's id */
		snprintf(j->id, sizeof j->id, "pf-%s-%u", p->run_tag, ++p->next_id);
	while (pins_has(p->gw->pins, j->id));
	int64_t until = (int64_t)time(NULL) + (int64_t)pin_seconds;
	pins_peer_header(j->pin_hdr, p->gw->cfg->node_id ? p->gw->cfg->node_id : "", j->id, until);
	if (j->pin && pins_begin(p->gw->pins, j->id, j->bucket, j->listed ? j->prefix : NULL,
	                         until) != 0)
		return -1;
	return 0;
}

int prefetch_start(struct prefetch *p, const struct prefetch_req *rq, char id[24], char *err,
                   size_t errlen)
{
	char ids[1][24];
	int rc = prefetch_start_all(p, rq, 1, ids, err, errlen);
	if (rc == 0)
		memcpy(id, ids[0], sizeof ids[0]);
	return rc;
}

int prefetch_start_all(struct prefetch *p, const struct prefetch_req *rqs, size_t n,
                       char (*ids)[24], char *err, size_t errlen)
{
	struct pf_job **js = calloc(n ? n : 1, sizeof *js);
	size_t made = 0, named = 0;
	while (js && made < n && (js[made] = job_new(p, &rqs[made])))
		made++;
	int rc = made == n ? 0 : -1;
	pthread_mutex_lock(&p->lock);
	/* Room for all of them, taken at once, or none is started: a caller's
	 * jobs checked one by one could each fit and then not all together. */
	if (rc == 0 && running(p) + n > PREFETCH_RUNNING_MAX)
		rc = -EBUSY;
	while (rc == 0 && named < n)
		if (job_name(p, js[named], rqs[named].pin_seconds) == 0)
			named++;
		else
			rc = -1;
	for (size_t i = 0; rc == 0 && i < n; i++) {
		struct pf_job *j = js[i];
		memcpy(ids[i], j->id, sizeof j->id);
		j->next = p->jobs;
		p->jobs = j;
		j->run_next = p->queued;
		p->queued = j;
	}
	/* Keep the registry bounded: forget the oldest finished jobs. */
	size_t kept = 0;
	for (struct pf_job **pp = &p->jobs; rc == 0 && *pp;) {
		struct pf_job *x = *pp;
		if (++kept > PF_KEEP_FINISHED && atomic_load(&x->state) >= PF_DONE &&
		    x->finished > 0) {
			*pp = x->next;
			job_free(x);
		} else {
			pp = &x->next;
		}
	}
	pthread_mutex_unlock(&p->lock);
	if (rc != 0) {
		for (size_t i = 0; i < named; i++)
			if (js[i]->pin)
				pins_end(p->gw->pins, js[i]->id);
		for (size_t i = 0; i < made; i++)
			job_free(js[i]);
		free(js);
		if (rc == -EBUSY)
			snprintf(err, errlen, "%d warm jobs and lookaheads are running, the most at "
			         "once: wait for one to end, or cancel one", PREFETCH_RUNNING_MAX);
		else
			snprintf(err, errlen, "out of memory");
		return rc;
	}
	free(js);
	ev_async_send(p->w->loop, &p->async);
	for (size_t i = 0; i < n; i++)
		log_info("prefetch", "job %s: bucket %s, %s", ids[i], rqs[i].bucket,
		         rqs[i].manifest ? "manifest" : rqs[i].keys ? "key list" : "prefix listing");
	return 0;
}

static void info_of(const struct pf_job *j, struct prefetch_info *out)
{
	memset(out, 0, sizeof *out);
	snprintf(out->id, sizeof out->id, "%s", j->id);
	snprintf(out->state, sizeof out->state, "%s", state_names[atomic_load(&j->state)]);
	snprintf(out->bucket, sizeof out->bucket, "%s", j->bucket);
	snprintf(out->error, sizeof out->error, "%s", j->error);
	out->objects_done = atomic_load(&j->objects_done);
	out->objects_total = atomic_load(&j->n_keys);
	out->bytes_done = atomic_load(&j->bytes_done);
	out->bytes_total = atomic_load(&j->bytes_total);
	out->errors = atomic_load(&j->errors);
	out->listing_done = atomic_load(&j->listing_done);
	out->pin_refused = atomic_load(&j->pin_refused);
	out->gated = j->gated;
	double end = j->finished > 0 ? j->finished : clock_mono_s();
	out->elapsed_s = j->started > 0 ? end - j->started : 0;
	out->rate_bps = out->elapsed_s > 0 ? (double)out->bytes_done / out->elapsed_s : 0;
	out->eta_s = -1;
	if (out->listing_done && out->rate_bps > 0 && out->bytes_total >= out->bytes_done)
		out->eta_s = (double)(out->bytes_total - out->bytes_done) / out->rate_bps;
}

int prefetch_get(struct prefetch *p, const char *id, struct prefetch_info *out)
{
	int rc = -1;
	pthread_mutex_lock(&p->lock);
	for (struct pf_job *j = p->jobs; j; j = j->next)
		if (strcmp(j->id, id) == 0) {
			info_of(j, out);
			rc = 0;
			break;
		}
	pthread_mutex_unlock(&p->lock);
	return rc;
}

int prefetch_gate(struct prefetch *p, const char *id, size_t from, size_t n)
{
	int rc = -1;
	pthread_mutex_lock(&p->lock);
	for (struct pf_job *j = p->jobs; j; j = j->next)
		if (strcmp(j->id, id) == 0) {
			size_t g = atomic_load(&j->gate);
			while (g < n && !atomic_compare_exchange_weak(&j->gate, &g, n))
				;
			g = atomic_load(&j->skip_to);
			while (g < from && !atomic_compare_exchange_weak(&j->skip_to, &g, from))
				;
			rc = 0;
			break;
		}
	pthread_mutex_unlock(&p->lock);
	return rc;
}

int prefetch_cancel(struct prefetch *p, const char *id)
{
	int rc = -ENOENT;
	pthread_mutex_lock(&p->lock);
	for (struct pf_job *j = p->jobs; j; j = j->next)
		if (strcmp(j->id, id) == 0) {
			int state = atomic_load(&j->state);
			rc = state == PF_LISTING || state == PF_WARMING ? 0 : -EALREADY;
			if (rc == 0)
				atomic_store(&j->cancel, true);
			break;
		}
	pthread_mutex_unlock(&p->lock);
	return rc;
}

size_t prefetch_list(struct prefetch *p, struct prefetch_info *out, size_t max)
{
	size_t n = 0;
	pthread_mutex_lock(&p->lock);
	for (struct pf_job *j = p->jobs; j && n < max; j = j->next)
		if (!j->gated)
			info_of(j, &out[n++]);
	pthread_mutex_unlock(&p->lock);
	return n;
}

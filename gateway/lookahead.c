/*
 * lookahead.c - read-order lookahead (see lookahead.h).
 *
 * The registry (under l->lock) holds the running lookaheads and a few
 * ended ones for their status. Each has its key list and an index from key
 * to its first place in the list, so a read is one hash lookup per running
 * lookahead of the bucket. The warming itself is the gated prefetch job;
 * this file only moves its gate and ends it. With a byte window the job
 * tells it each key's size as it learns it (la_sized), which may move the
 * gate on. A timer on the first worker's
 * loop ends the idle ones, and those whose list is warm and read to its end.
 */
#include "gateway/lookahead.h"

#include <assert.h>
#include <errno.h>
#include <ev.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/clock.h"
#include "base/fnv.h"
#include "base/log.h"
#include "gateway/prefetch.h"
#include "gateway/server.h"

#define LOOKAHEADS_MAGIC 0x6c6b6168u /* "lkah" */
#define LA_KEEP_ENDED 16
#define LA_SWEEP_S 0.25
#define LA_UNKNOWN UINT64_MAX /* a size not learnt yet */

enum la_state {
	LA_RUNNING,
	LA_DONE,
	LA_IDLE,
	LA_ENDED
};
static const char *const state_names[] = { "running", "done", "idle", "ended" };

struct la {
	struct la *next; /* newest first */
	char id[24];
	char job[24]; /* the gated prefetch job */
	char *bucket;
	char **keys;
	size_t n_keys;
	size_t *slots; /* place + 1 of a key, 0: empty; n_slots a power of 2 */
	size_t n_slots;
	size_t window, position;
	size_t gate;           /* keys [0, gate) may be warmed */
	uint64_t window_bytes; /* 0: none */
	uint64_t *sizes;       /* with window_bytes: each key's, or LA_UNKNOWN */
	uint64_t learnt_bytes, learnt; /* the sizes learnt, for an estimate */
	double idle_s, last_read;
	enum la_state state;
	uint64_t objects, bytes; /* what the job warmed, once it ended */
};

struct lookaheads {
	unsigned magic;
	struct gw *gw;
	struct prefetch *p;
	pthread_mutex_t lock;
	struct la *list;
	atomic_uint running; /* how many run: reads skip the lock when none */
	unsigned next_id;
	double idle_s;
	ev_timer sweep;
	uint64_t ended_objects, ended_bytes; /* warmed by the lookaheads that ended */
	uint64_t reads, reads_ahead;         /* lookahead_stats */
};

static void la_free(struct la *a)
{
	if (!a)
		return;
	for (size_t i = 0; i < a->n_keys; i++)
		free(a->keys[i]);
	free(a->keys);
	free(a->sizes);
	free(a->slots);
	free(a->bucket);
	free(a);
}

/* The place of key in a's list, or -1. */
static long la_find(const struct la *a, const char *key)
{
	size_t mask = a->n_slots - 1;
	for (size_t s = fnv1a64(key) & mask; a->slots[s]; s = (s + 1) & mask)
		if (strcmp(a->keys[a->slots[s] - 1], key) == 0)
			return (long)(a->slots[s] - 1);
	return -1;
}

/* Indexes the keys; a key listed twice counts at its first place. */
static int la_index(struct la *a)
{
	a->n_slots = 16;
	while (a->n_slots < 2 * a->n_keys)
		a->n_slots *= 2;
	a->slots = mem_calloc(a->n_slots, sizeof *a->slots);
	if (!a->slots)
		return -ENOMEM;
	for (size_t i = 0; i < a->n_keys; i++) {
		if (la_find(a, a->keys[i]) >= 0)
			continue;
		size_t s = fnv1a64(a->keys[i]) & (a->n_slots - 1);
		while (a->slots[s])
			s = (s + 1) & (a->n_slots - 1);
		a->slots[s] = i + 1;
	}
	return 0;
}

static int la_add_key(struct la *a, const char *key, size_t len, size_t *cap)
{
	if (a->n_keys == *cap) {
		size_t n = *cap ? *cap * 2 : 256;
		char **k = mem_realloc(a->keys, n * sizeof *k);
		if (!k)
			return -ENOMEM;
		a->keys = k;
		*cap = n;
	}
	if (!(a->keys[a->n_keys] = mem_strndup(key, len)))
		return -ENOMEM;
	a->n_keys++;
	return 0;
}

/* The manifest's lines as written (a key may end in a blank), a trailing CR
 * dropped, empty lines skipped. */
static int la_parse_manifest(struct la *a, const char *s, size_t len)
{
	size_t cap = 0;
	const char *end = s + len;
	while (s < end) {
		const char *nl = memchr(s, '\n', (size_t)(end - s));
		const char *e = nl ? nl : end;
		size_t l = (size_t)(e - s);
		if (l && s[l - 1] == '\r')
			l--;
		if (l && la_add_key(a, s, l, &cap) != 0)
			return -ENOMEM;
		s = nl ? nl + 1 : end;
	}
	return 0;
}

/* Where a's gate goes: the window past its furthest read, which in a byte
 * window ends at the first key that starts once the keys before it
 * (position on) add up to window_bytes. A size not learnt yet counts as the
 * mean of those learnt, or fills the window before any is. The first key
 * past the furthest read always may start. */
static size_t la_gate(const struct la *a)
{
	size_t end = a->position + a->window < a->n_keys ? a->position + a->window : a->n_keys;
	if (!a->window_bytes)
		return end;
	uint64_t sum = 0;
	size_t k = a->position;
	while (k < end && (k == a->position || sum < a->window_bytes)) {
		uint64_t size = a->sizes[k++];
		if (size == LA_UNKNOWN && !a->learnt)
			break;
		sum += size == LA_UNKNOWN ? a->learnt_bytes / a->learnt : size;
	}
	return k;
}

/* Moves a's job's gate to where la_gate says (under l->lock). Keys further
 * behind the furthest read than the window reaches ahead of it, not started
 * yet, are skipped: a reader that jumps ahead (a job resumed far into its
 * list) does not have every key it jumped over fetched; a few keys behind,
 * which readers slightly out of order may still take, are warmed. */
static void la_move(struct lookaheads *l, struct la *a)
{
	size_t gate = la_gate(a);
	size_t back = gate > a->position ? gate - a->position : a->window;
	if (gate > a->gate)
		a->gate = gate;
	prefetch_gate(l->p, a->job, a->position > back ? a->position - back : 0, a->gate);
}

/* The job's sized callback (prefetch.h), on the prefetch loop's thread. */
static void la_sized(void *arg, const char *job, size_t index, uint64_t size)
{
	struct lookaheads *l = arg;
	assert(l->magic == LOOKAHEADS_MAGIC);
	pthread_mutex_lock(&l->lock);
	for (struct la *a = l->list; a; a = a->next) {
		if (strcmp(a->job, job) != 0)
			continue;
		if (a->state == LA_RUNNING && a->sizes && index < a->n_keys &&
		    a->sizes[index] == LA_UNKNOWN) {
			a->sizes[index] = size;
			a->learnt_bytes += size;
			a->learnt++;
			la_move(l, a);
		}
		break;
	}
	pthread_mutex_unlock(&l->lock);
}

/* What a's job has warmed so far, kept in a (under l->lock): the prefetch
 * registry forgets a finished job once 64 newer ones ended, and a running
 * lookahead's figures, and the counters they add to, must not fall back. */
static void la_progress(struct lookaheads *l, struct la *a)
{
	struct prefetch_info pi;
	if (a->state == LA_RUNNING && prefetch_get(l->p, a->job, &pi) == 0 &&
	    pi.objects_done >= a->objects && pi.bytes_done >= a->bytes) {
		a->objects = pi.objects_done;
		a->bytes = pi.bytes_done;
	}
}

/* Takes a off the running set (under l->lock): keeps what its job warmed. */
static void la_stop(struct lookaheads *l, struct la *a, enum la_state why)
{
	la_progress(l, a);
	if (why != LA_DONE)
		prefetch_cancel(l->p, a->job);
	a->state = why;
	l->ended_objects += a->objects;
	l->ended_bytes += a->bytes;
	atomic_fetch_sub(&l->running, 1);
	log_info("lookahead", "%s %s: %zu of %zu keys read, %llu objects warmed", a->id,
	         state_names[why], a->position, a->n_keys, (unsigned long long)a->objects);
}

static void sweep_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct lookaheads *l = t->data;
	(void)loop;
	(void)revents;
	assert(l->magic == LOOKAHEADS_MAGIC);
	if (!atomic_load(&l->running))
		return;
	double now = clock_mono_s();
	pthread_mutex_lock(&l->lock);
	for (struct la *a = l->list; a; a = a->next) {
		if (a->state != LA_RUNNING)
			continue;
		struct prefetch_info pi;
		bool warming = prefetch_get(l->p, a->job, &pi) == 0 &&
		               (strcmp(pi.state, "warming") == 0 ||
		                strcmp(pi.state, "listing") == 0);
		if (!warming && a->position == a->n_keys)
			la_stop(l, a, LA_DONE);
		else if (now - a->last_read > a->idle_s)
			la_stop(l, a, LA_IDLE);
	}
	/* Keep a few ended ones for their status. */
	size_t ended = 0;
	for (struct la **pp = &l->list; *pp;) {
		struct la *a = *pp;
		if (a->state != LA_RUNNING && ++ended > LA_KEEP_ENDED) {
			*pp = a->next;
			la_free(a);
		} else {
			pp = &a->next;
		}
	}
	pthread_mutex_unlock(&l->lock);
}

struct lookaheads *lookahead_create(struct gw *gw, struct worker *w, struct prefetch *p,
                                    double idle_s)
{
	if (!p)
		return NULL;
	struct lookaheads *l = xcalloc(1, sizeof *l);
	l->magic = LOOKAHEADS_MAGIC;
	l->gw = gw;
	l->p = p;
	l->idle_s = idle_s;
	pthread_mutex_init(&l->lock, NULL);
	ev_timer_init(&l->sweep, sweep_cb, LA_SWEEP_S, LA_SWEEP_S);
	l->sweep.data = l;
	ev_timer_start(w->loop, &l->sweep);
	return l;
}

void lookahead_destroy(struct lookaheads *l)
{
	if (!l)
		return;
	for (struct la *a = l->list, *next; a; a = next) {
		next = a->next;
		la_free(a);
	}
	pthread_mutex_destroy(&l->lock);
	l->magic = 0;
	free(l);
}

int lookahead_start(struct lookaheads *l, const struct lookahead_req *rq, char id[24], char *err,
                    size_t errlen)
{
	struct la *a = mem_calloc(1, sizeof *a);
	if (!a || !(a->bucket = mem_strdup(rq->bucket)))
		goto oom;
	if (rq->manifest) {
		struct buf body;
		buf_init(&body, LOOKAHEAD_MANIFEST_MAX);
		int rc = prefetch_read_object(l->gw, rq->bucket, rq->manifest, &body, err, errlen);
		if (rc == 0 && la_parse_manifest(a, body.p ? body.p : "", body.len) != 0)
			rc = -ENOMEM;
		buf_fini(&body);
		if (rc == -ENOMEM)
			goto oom;
		if (rc < 0) {
			la_free(a);
			return -1;
		}
	} else {
		size_t cap = 0;
		for (size_t i = 0; i < rq->n_keys; i++)
			if (la_add_key(a, rq->keys[i], strlen(rq->keys[i]), &cap) != 0)
				goto oom;
	}
	if (!a->n_keys) {
		snprintf(err, errlen, "the list of keys is empty");
		la_free(a);
		return -1;
	}
	if (la_index(a) != 0)
		goto oom;
	a->window = rq->window;
	a->window_bytes = rq->window_bytes;
	if (a->window_bytes) {
		if (!(a->sizes = mem_calloc(a->n_keys, sizeof *a->sizes)))
			goto oom;
		for (size_t i = 0; i < a->n_keys; i++)
			a->sizes[i] = LA_UNKNOWN;
	}
	a->idle_s = rq->idle_s > 0 ? rq->idle_s : l->idle_s;
	a->last_read = clock_mono_s(); /* the idle clock starts now */
	struct prefetch_req pr = {
		.bucket = rq->bucket,
		.keys = (const char *const *)a->keys,
		.n_keys = a->n_keys,
		.concurrency = rq->concurrency ? rq->concurrency : 32,
		.gated = true,
		.sized = a->window_bytes ? la_sized : NULL,
		.sized_arg = l,
	};
	int rc = prefetch_start(l->p, &pr, a->job, err, errlen); /* -EBUSY, -1 */
	if (rc != 0) {
		la_free(a);
		return rc;
	}
	pthread_mutex_lock(&l->lock);
	snprintf(a->id, sizeof a->id, "la-%u", ++l->next_id);
	memcpy(id, a->id, sizeof a->id);
	a->next = l->list;
	l->list = a;
	atomic_fetch_add(&l->running, 1);
	/* Listed before the gate opens, for la_sized. Nothing read yet: the
	 * first window warms at once. */
	la_move(l, a);
	pthread_mutex_unlock(&l->lock);
	log_info("lookahead", "%s: bucket %s, %zu keys, window %zu, %llu bytes (job %s)", a->id,
	         a->bucket, a->n_keys, a->window, (unsigned long long)a->window_bytes, a->job);
	return 0;
oom:
	la_free(a);
	snprintf(err, errlen, "out of memory");
	return -1;
}

int lookahead_end(struct lookaheads *l, const char *id)
{
	int rc = -1;
	pthread_mutex_lock(&l->lock);
	for (struct la *a = l->list; a; a = a->next)
		if (a->state == LA_RUNNING && strcmp(a->id, id) == 0) {
			la_stop(l, a, LA_ENDED);
			rc = 0;
			break;
		}
	pthread_mutex_unlock(&l->lock);
	return rc;
}

static void info_of(struct lookaheads *l, struct la *a, struct lookahead_info *out)
{
	la_progress(l, a);
	memset(out, 0, sizeof *out);
	snprintf(out->id, sizeof out->id, "%s", a->id);
	snprintf(out->state, sizeof out->state, "%s", state_names[a->state]);
	snprintf(out->bucket, sizeof out->bucket, "%s", a->bucket);
	out->keys = a->n_keys;
	out->position = a->position;
	out->window = a->window;
	out->window_bytes = a->window_bytes;
	out->idle_s = a->idle_s;
	out->objects = a->objects;
	out->bytes = a->bytes;
}

size_t lookahead_list(struct lookaheads *l, struct lookahead_info *out, size_t max)
{
	size_t n = 0;
	pthread_mutex_lock(&l->lock);
	for (int pass = 0; pass < 2; pass++)
		for (struct la *a = l->list; a && n < max; a = a->next)
			if ((a->state == LA_RUNNING) == (pass == 0))
				info_of(l, a, &out[n++]);
	pthread_mutex_unlock(&l->lock);
	return n;
}

void lookahead_get_stats(struct lookaheads *l, struct lookahead_stats *out)
{
	memset(out, 0, sizeof *out);
	pthread_mutex_lock(&l->lock);
	out->objects = l->ended_objects;
	out->bytes = l->ended_bytes;
	out->reads = l->reads;
	out->reads_ahead = l->reads_ahead;
	for (struct la *a = l->list; a; a = a->next) {
		if (a->state != LA_RUNNING)
			continue;
		out->running++;
		la_progress(l, a);
		out->objects += a->objects;
		out->bytes += a->bytes;
	}
	pthread_mutex_unlock(&l->lock);
}

void lookahead_note_read(struct lookaheads *l, const char *bucket, const char *key, double now)
{
	if (!l || !atomic_load(&l->running))
		return;
	pthread_mutex_lock(&l->lock);
	for (struct la *a = l->list; a; a = a->next) {
		if (a->state != LA_RUNNING || strcmp(a->bucket, bucket) != 0)
			continue;
		long at = la_find(a, key);
		if (at < 0)
			continue;
		a->last_read = now;
		l->reads++;
		l->reads_ahead += (size_t)at < a->gate;
		if ((size_t)at < a->position)
			continue;
		a->position = (size_t)at + 1;
		la_move(l, a);
	}
	pthread_mutex_unlock(&l->lock);
}

/*
 * shaper.c - per-prefix AIMD windows on upstream requests (shaper.h).
 *
 * The table is open addressing over a fixed array; an entry is free again
 * when nothing is in flight or waiting and its window is back at the
 * maximum (it then says nothing a fresh entry would not).
 */
#include "gateway/shaper.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/fnv.h"
#include "gateway/metrics.h"

#define SHAPER_SLOTS 4096
#define SHAPER_PROBE 16
#define SHAPER_GROW_S 0.2

struct entry {
	uint64_t key;           /* 0: free */
	unsigned inflight;
	unsigned waiting;       /* on queue */
	unsigned demand_waiting; /* the demand reads among them */
	unsigned epoch;
	double window;
	double credit;          /* successes since it last grew, in windows */
	double grown_at;        /* when it last grew or was cut */
	struct list queue;      /* the first waiter of each lane (shaper_slot.link, leads),
	                         * in line for their turns (shaper.h) */
};

struct shaper {
	struct shaper_settings set;
	pthread_mutex_t lock;
	struct entry table[SHAPER_SLOTS];
	atomic_uint_fast64_t throttled, waits;
};

struct shaper *shaper_create(const struct shaper_settings *s, char *err, size_t errlen)
{
	if (s->window_min < 1 || s->window_max < s->window_min) {
		snprintf(err, errlen, "upstream window: need 1 <= window_min (%u) <= window_max (%u)",
		         s->window_min, s->window_max);
		return NULL;
	}
	struct shaper *sh = xcalloc(1, sizeof *sh);
	sh->set = *s;
	pthread_mutex_init(&sh->lock, NULL);
	return sh;
}

void shaper_destroy(struct shaper *sh)
{
	if (!sh)
		return;
	pthread_mutex_destroy(&sh->lock);
	free(sh);
}

void shaper_slot_init(struct shaper_slot *slot, bool background, struct shaper_waker *waker,
                      void (*placed)(struct shaper_slot *slot))
{
	memset(slot, 0, sizeof *slot);
	slot->background = background;
	slot->since = -1;
	slot->waker = waker;
	slot->placed = placed;
}

void shaper_slot_tenant(struct shaper_slot *slot, unsigned tenant)
{
	slot->tenant = tenant;
}

void shaper_waker_init(struct shaper_waker *wk, void (*wake)(struct shaper_waker *wk))
{
	memset(wk, 0, sizeof *wk);
	wk->wake = wake;
}

/* The prefix S3 throttles by, as far as larder can tell: the bucket and
 * the key up to its first '/' (the whole bucket for keys without one). */
static uint64_t prefix_key(const char *bucket, const char *key)
{
	uint64_t h = fnv1a64_add(FNV1A64_OFFSET, bucket, strlen(bucket) + 1);
	const char *slash = strchr(key, '/');
	if (slash)
		h = fnv1a64_add(h, key, (size_t)(slash - key));
	return h ? h : 1;
}

static bool entry_idle(const struct shaper *sh, const struct entry *e)
{
	return e->inflight == 0 && list_empty(&e->queue) && e->window >= sh->set.window_max;
}

/* The slot that leads s's lane on e's queue (a tenant's waiters of one
 * kind), or NULL: none of them waits. Under the lock. */
static struct shaper_slot *lead_of(const struct entry *e, const struct shaper_slot *s)
{
	for (struct list_node *n = e->queue.first; n; n = n->next) {
		struct shaper_slot *l = list_item(n, struct shaper_slot, link);
		if (l->tenant == s->tenant && l->background == s->background)
			return l;
	}
	return NULL;
}

/* s waits: last of its lane, or a new lane's first, last in line. */
static void enqueue(struct entry *e, struct shaper_slot *s)
{
	struct shaper_slot *lead = lead_of(e, s);
	if (lead) {
		list_push_back(&lead->lane, &s->link);
	} else {
		list_push_back(&e->queue, &s->link);
		s->leads = true;
	}
	s->queued = true;
	e->waiting++;
	if (!s->background)
		e->demand_waiting++;
}

/* s waits no more (it has its place, or gave up). When it led its lane,
 * the next of the lane leads it, last in line: a lane served waits for
 * the others' turns. */
static void dequeue(struct entry *e, struct shaper_slot *s)
{
	if (!s->queued)
		return;
	if (s->leads) {
		list_unlink(&e->queue, &s->link);
		s->leads = false;
		struct list_node *n = s->lane.first;
		if (n) {
			struct shaper_slot *next = list_item(n, struct shaper_slot, link);
			list_unlink(&s->lane, n);
			next->lane = s->lane; /* the rest: the nodes know no list */
			next->leads = true;
			list_push_back(&e->queue, n);
		}
		s->lane = (struct list){ 0 };
	} else {
		list_unlink(&lead_of(e, s)->lane, &s->link);
	}
	s->queued = false;
	e->waiting--;
	if (!s->background)
		e->demand_waiting--;
}

/* The entry of key; with create, a new one if there is room. Under the lock. */
static struct entry *find(struct shaper *sh, uint64_t key, bool create)
{
	struct entry *free_e = NULL;
	for (unsigned i = 0; i < SHAPER_PROBE; i++) {
		struct entry *e = &sh->table[(key + i) % SHAPER_SLOTS];
		if (e->key == key)
			return e;
		if (!free_e && (e->key == 0 || entry_idle(sh, e)))
			free_e = e;
	}
	if (!create || !free_e)
		return NULL;
	memset(free_e, 0, sizeof *free_e);
	free_e->key = key;
	free_e->window = sh->set.window_max;
	return free_e;
}

static unsigned limit_of(const struct shaper_slot *slot, const struct entry *e)
{
	unsigned w = (unsigned)e->window;
	if (!slot->background)
		return w;
	if (e->demand_waiting > 0)
		return 0;
	unsigned bg = w - w / 4;
	return bg ? bg : 1;
}

/* Whether slot may take a place now: the window has room for its kind,
 * and nobody of its kind waits ahead of it. Under the lock. */
static bool may_go(const struct entry *e, const struct shaper_slot *slot)
{
	if (e->inflight >= limit_of(slot, e))
		return false;
	if (slot->queued)
		return true; /* grant_waiters passes them in turn; a queued
		              * slot asking again found none of this room */
	return slot->background ? e->waiting == 0 : e->demand_waiting == 0;
}

static void take_place(struct entry *e, struct shaper_slot *slot)
{
	dequeue(e, slot);
	e->inflight++;
	slot->epoch = e->epoch;
	slot->held = true;
}

/* Gives the places e has room for, one at a time, to the first waiter of
 * the first lane in line that may take it, and tells their wakers. A
 * background lane that may not go (demand reads wait, or background's
 * share is taken) is passed over. Under the lock. */
static void grant_waiters(struct entry *e)
{
	while (e->inflight < (unsigned)e->window) {
		struct shaper_slot *s = NULL;
		for (struct list_node *n = e->queue.first; n && !s; n = n->next)
			if (may_go(e, list_item(n, struct shaper_slot, link)))
				s = list_item(n, struct shaper_slot, link);
		if (!s)
			return; /* the window, or background's share of it, is full */
		take_place(e, s);
		if (s->waker) {
			list_push_back(&s->waker->granted, &s->link);
			s->granted = true;
			s->waker->wake(s->waker);
		}
	}
}

enum shaper_verdict shaper_acquire(struct shaper *sh, struct shaper_slot *slot,
                                   const char *bucket, const char *key, double now)
{
	uint64_t k = prefix_key(bucket, key);
	pthread_mutex_lock(&sh->lock);
	enum shaper_verdict v = SHAPER_GO;
	struct entry *e = slot->held ? NULL : find(sh, k, true);
	if (slot->held) { /* it asks again after it was given its place */
		if (slot->granted) {
			list_unlink(&slot->waker->granted, &slot->link);
			slot->granted = false;
		}
	} else if (!e) { /* the table is full: not shaped */
		slot->key = 0;
		slot->held = true;
	} else if (may_go(e, slot)) {
		slot->key = k;
		take_place(e, slot);
	} else if (slot->since >= 0 && now - slot->since >= sh->set.wait_s) {
		dequeue(e, slot);
		slot->since = -1;
		v = SHAPER_TIMEOUT;
		grant_waiters(e); /* background may go now */
	} else {
		if (slot->since < 0) {
			slot->since = now;
			atomic_fetch_add(&sh->waits, 1);
			metrics_upstream_shaped_wait();
		}
		if (!slot->queued)
			enqueue(e, slot);
		slot->key = k;
		v = SHAPER_WAIT;
	}
	if (v == SHAPER_GO)
		slot->since = -1;
	pthread_mutex_unlock(&sh->lock);
	return v;
}

double shaper_wait_left(struct shaper *sh, const struct shaper_slot *slot, double now)
{
	pthread_mutex_lock(&sh->lock);
	double left = slot->since < 0 ? sh->set.wait_s : slot->since + sh->set.wait_s - now;
	pthread_mutex_unlock(&sh->lock);
	return left > 0.001 ? left : 0.001;
}

void shaper_tell(struct shaper *sh, struct shaper_waker *wk)
{
	for (;;) {
		pthread_mutex_lock(&sh->lock);
		struct list_node *n = wk->granted.first;
		struct shaper_slot *s = n ? list_item(n, struct shaper_slot, link) : NULL;
		if (s) {
			list_unlink(&wk->granted, n);
			s->granted = false;
		}
		pthread_mutex_unlock(&sh->lock);
		if (!s)
			return;
		s->placed(s); /* it acquires again: SHAPER_GO */
	}
}

static void count_throttled(struct shaper *sh)
{
	atomic_fetch_add(&sh->throttled, 1);
	metrics_upstream_throttled();
}

/* The slot's request is over (outcome: with upstream's status) or given
 * up: its place, or its place in the line, goes to the next waiters. */
static void done(struct shaper *sh, struct shaper_slot *slot, long status, bool outcome,
                 double now)
{
	if (slot->key == 0) { /* not shaped: only its owner's thread knows it */
		if (outcome && slot->held && status == 503)
			count_throttled(sh);
		slot->held = false;
		return;
	}
	pthread_mutex_lock(&sh->lock);
	if (outcome && !slot->held) {
		pthread_mutex_unlock(&sh->lock);
		return;
	}
	if (outcome && status == 503)
		count_throttled(sh);
	if (slot->granted) { /* given up before it heard of its place */
		list_unlink(&slot->waker->granted, &slot->link);
		slot->granted = false;
	}
	struct entry *e = slot->held || slot->queued ? find(sh, slot->key, false) : NULL;
	if (e && slot->queued) {
		dequeue(e, slot);
	} else if (e && slot->held) {
		unsigned before = e->inflight--;
		double max = sh->set.window_max, min = sh->set.window_min;
		if (outcome && status == 503 && slot->epoch == e->epoch) {
			/* Halve what was really in flight: the window may be
			 * far above it. Later answers to requests sent before
			 * this one are the same news: the epoch moves on. */
			double w = e->window < before ? e->window : before;
			e->window = w / 2 < min ? min : w / 2;
			e->epoch++;
			e->credit = 0;
			e->grown_at = now;
		} else if (outcome && status >= 200 && status < 500) {
			/* One more slot per window's worth of successes, at most
			 * one per SHAPER_GROW_S: S3 raises a prefix's rate
			 * gradually, and probing faster only buys SlowDowns. */
			e->credit += 1.0 / e->window;
			if (e->credit > 1)
				e->credit = 1;
			if (e->credit >= 1 && now - e->grown_at >= SHAPER_GROW_S) {
				e->window = e->window + 1 > max ? max : e->window + 1;
				e->credit = 0;
				e->grown_at = now;
			}
		}
	}
	if (e)
		grant_waiters(e);
	slot->held = false;
	slot->since = -1;
	pthread_mutex_unlock(&sh->lock);
}

void shaper_release(struct shaper *sh, struct shaper_slot *slot, long status, double now)
{
	done(sh, slot, status, true, now);
}

void shaper_cancel(struct shaper *sh, struct shaper_slot *slot)
{
	done(sh, slot, 0, false, 0);
}

double shaper_window(struct shaper *sh, const char *bucket, const char *key)
{
	pthread_mutex_lock(&sh->lock);
	struct entry *e = find(sh, prefix_key(bucket, key), false);
	double w = e ? e->window : sh->set.window_max;
	pthread_mutex_unlock(&sh->lock);
	return w;
}

bool shaper_throttling(struct shaper *sh, const char *bucket, const char *key)
{
	pthread_mutex_lock(&sh->lock);
	struct entry *e = find(sh, prefix_key(bucket, key), false);
	bool cut = e && e->window < sh->set.window_max;
	pthread_mutex_unlock(&sh->lock);
	return cut;
}

uint64_t shaper_throttled(struct shaper *sh)
{
	return atomic_load(&sh->throttled);
}

uint64_t shaper_waits(struct shaper *sh)
{
	return atomic_load(&sh->waits);
}

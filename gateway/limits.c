/*
 * limits.c - per-key counters by key id (limits.h): a short array under one
 * mutex; a key's entry stays once made (one per configured key at most).
 * Every worker's readers of a key take from one bucket.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "gateway/limits.h"
#include "auth/grant.h"
#include "gateway/metrics.h"
#include "store/store.h"

struct key_count {
	char *id;
	unsigned upstream; /* upstream requests in flight */
	double tokens;     /* bytes the key may send now */
	double t_fill;     /* when tokens was last brought up to date */
	bool charged;      /* its fills carry its charge: its index + 1 */
	uint64_t max_resident; /* its max_resident_bytes (0: no limit) */
	struct list *queue;    /* limits_place of requests waiting for a slot, oldest first
	                        * (its own allocation: the table moves when it grows) */
	unsigned max;          /* the max its last waiter asked with (wake_head) */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct key_count *counts;
static size_t n_counts, cap_counts;

/* The entry of id, made when missing (ids are of configured keys: the
 * table stays small). Under lock. */
static struct key_count *entry(const char *id)
{
	for (size_t i = 0; i < n_counts; i++)
		if (strcmp(counts[i].id, id) == 0)
			return &counts[i];
	if (n_counts == cap_counts) {
		size_t cap = cap_counts ? cap_counts * 2 : 16;
		counts = xrealloc(counts, cap * sizeof *counts);
		cap_counts = cap;
	}
	counts[n_counts] = (struct key_count){ .id = xstrdup(id),
	                                        .queue = xcalloc(1, sizeof(struct list)) };
	return &counts[n_counts++];
}

/* Whether e has a slot free for a request that waits behind nobody. Under lock. */
static bool slot_free(const struct key_count *e, unsigned max)
{
	return max == 0 || e->upstream < max;
}

/* Wakes e's oldest waiter when a slot is free for it. Under lock, which a
 * place leaves its queue under before its request ends: the waiter is alive. */
static void wake_head(const struct key_count *e)
{
	if (list_empty(e->queue) || !slot_free(e, e->max))
		return;
	struct limits_place *head = list_item(e->queue->first, struct limits_place, link);
	if (head->wake)
		head->wake(head->arg);
}

bool limits_upstream_take(const char *key_id, unsigned max)
{
	pthread_mutex_lock(&lock);
	struct key_count *e = entry(key_id);
	bool ok = slot_free(e, max) && list_empty(e->queue);
	if (ok)
		e->upstream++;
	pthread_mutex_unlock(&lock);
	return ok;
}

bool limits_upstream_queue(const char *key_id, unsigned max, struct limits_place *p)
{
	pthread_mutex_lock(&lock);
	struct key_count *e = entry(key_id);
	e->max = max;
	bool first = p->queued ? e->queue->first == &p->link : list_empty(e->queue);
	bool ok = first && slot_free(e, max);
	if (ok) {
		e->upstream++;
		if (p->queued)
			list_unlink(e->queue, &p->link);
		p->queued = false;
		wake_head(e); /* the next may fit too */
	} else if (!p->queued) {
		list_push_back(e->queue, &p->link);
		p->queued = true;
	}
	pthread_mutex_unlock(&lock);
	return ok;
}

void limits_upstream_unqueue(const char *key_id, struct limits_place *p)
{
	pthread_mutex_lock(&lock);
	if (p->queued) {
		struct key_count *e = entry(key_id);
		bool was_head = e->queue->first == &p->link;
		list_unlink(e->queue, &p->link);
		if (was_head)
			wake_head(e);
	}
	p->queued = false;
	pthread_mutex_unlock(&lock);
}

void limits_upstream_give(const char *key_id)
{
	pthread_mutex_lock(&lock);
	struct key_count *e = entry(key_id);
	if (e->upstream)
		e->upstream--;
	wake_head(e);
	pthread_mutex_unlock(&lock);
}

/* The smallest send worth waking for: a read that can go waits until this
 * much (or the whole bucket, at low rates) has come back. */
#define MIN_SEND 16384.0

size_t limits_bytes_take(const char *key_id, uint64_t rate, size_t want, double now,
                         double *wait_s)
{
	double cap = (double)rate / 20;
	double least = cap < MIN_SEND ? cap : MIN_SEND;
	pthread_mutex_lock(&lock);
	struct key_count *e = entry(key_id);
	if (e->t_fill == 0)
		e->tokens = cap;
	else if (now > e->t_fill)
		e->tokens += (now - e->t_fill) * (double)rate;
	if (e->tokens > cap)
		e->tokens = cap;
	e->t_fill = now;
	size_t n = 0;
	if (e->tokens >= least || e->tokens >= (double)want) {
		n = e->tokens < (double)want ? (size_t)e->tokens : want;
		e->tokens -= (double)n;
	} else {
		*wait_s = (least - e->tokens) / (double)rate;
	}
	pthread_mutex_unlock(&lock);
	return n;
}

/* An entry's charge: its place in the table, which never moves. Under lock. */
static unsigned charge_of(const struct key_count *e)
{
	size_t i = (size_t)(e - counts) + 1;
	return i <= STORE_CHARGE_MAX ? (unsigned)i : 0;
}

/* key_id's charge; charge: it is charged from now on. */
static unsigned number(const char *key_id, bool charge)
{
	if (!key_id || !*key_id)
		return 0;
	pthread_mutex_lock(&lock);
	struct key_count *e = entry(key_id);
	unsigned c = charge_of(e);
	if (charge)
		e->charged = c != 0;
	pthread_mutex_unlock(&lock);
	return c;
}

unsigned limits_charge(const char *key_id)
{
	return number(key_id, true);
}

unsigned limits_tenant(const char *key_id)
{
	return number(key_id, false);
}

void limits_resident_apply(struct store *s, const struct client_key *keys, size_t n)
{
	pthread_mutex_lock(&lock);
	for (size_t i = 0; i < n_counts; i++)
		counts[i].max_resident = 0;
	for (size_t i = 0; i < n; i++)
		if (keys[i].max_resident_bytes) {
			struct key_count *e = entry(keys[i].id);
			e->max_resident = keys[i].max_resident_bytes;
			e->charged = charge_of(e) != 0;
		}
	/* Under the lock: a reload racing this one must not undo it. The
	 * store takes its own lock inside; it never takes this one. */
	for (size_t i = 0; i < n_counts; i++)
		if (counts[i].charged &&
		    store_charge_limit(s, charge_of(&counts[i]), counts[i].max_resident) < 0)
			log_error("limits", "key %s: out of memory setting its max_resident_bytes",
			          counts[i].id);
	pthread_mutex_unlock(&lock);
}

struct metrics_resident *limits_resident(struct store *s, size_t *n)
{
	*n = 0;
	pthread_mutex_lock(&lock);
	struct metrics_resident *out = n_counts ? mem_calloc(n_counts, sizeof *out) : NULL;
	for (size_t i = 0; out && i < n_counts; i++) {
		if (!counts[i].charged)
			continue;
		struct metrics_resident *m = &out[(*n)++];
		snprintf(m->key_id, sizeof m->key_id, "%s", counts[i].id);
		m->bytes = store_charged(s, charge_of(&counts[i]));
		m->max_bytes = counts[i].max_resident;
	}
	pthread_mutex_unlock(&lock);
	return out;
}

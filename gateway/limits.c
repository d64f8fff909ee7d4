/*
 * limits.c - per-key counters by key id (limits.h): a short array under one
 * mutex; a key's entry stays once made (one per configured key at most).
 * Every worker's readers of a key take from one bucket.
 */
#include <pthread.h>
#include <string.h>

#include "base/alloc.h"
#include "gateway/limits.h"

struct key_count {
	char *id;
	unsigned upstream; /* upstream requests in flight */
	double tokens;     /* bytes the key may send now */
	double t_fill;     /* when tokens was last brought up to date */
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
	counts[n_counts] = (struct key_count){ .id = xstrdup(id) };
	return &counts[n_counts++];
}

bool limits_upstream_take(const char *key_id, unsigned max)
{
	pthread_mutex_lock(&lock);
	struct key_count *e = entry(key_id);
	bool ok = max == 0 || e->upstream < max;
	if (ok)
		e->upstream++;
	pthread_mutex_unlock(&lock);
	return ok;
}

void limits_upstream_give(const char *key_id)
{
	pthread_mutex_lock(&lock);
	struct key_count *e = entry(key_id);
	if (e->upstream)
		e->upstream--;
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

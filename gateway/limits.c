/*
 * limits.c - per-key counters by key id (limits.h): a short array under one
 * mutex; a key's entry stays once made (one per configured key at most).
 */
#include <pthread.h>
#include <string.h>

#include "base/alloc.h"
#include "gateway/limits.h"

struct key_count {
	char *id;
	unsigned upstream; /* upstream requests in flight */
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

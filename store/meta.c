/*
 * meta.c - the object metadata cache (see meta.h).
 *
 * 64 shards, each a chained hash table plus a FIFO list for the entry
 * bound, under one mutex. A shard's waiters are woken outside that mutex
 * but under the shard's wake_lock, which meta_unwait also passes through:
 * once meta_unwait returns, no wake of that waiter is running or to come.
 * Lock order: shard lock, then wake_lock.
 */
#include "store/meta.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/buf.h"
#include "base/fnv.h"
#include "base/list.h"

#define SHARDS 64
#define BUCKETS_PER_SHARD 4096

struct mentry {
	struct mentry *hnext;
	struct list_node fifo;
	uint64_t h;
	char *name;            /* bucket '\0' key */
	size_t name_len;
	struct obj_meta *m;    /* NULL while the first load runs */
	bool loading;
	unsigned ask_hop;      /* while loading: the hop the load asks a node at (meta_set_ask_hop);
	                          0 when a load starts */
	bool dropped;          /* dropped while loading: do not keep what is published */
	uint64_t gen;          /* the cache's generation m was learnt or checked in */
	uint64_t load_gen;     /* the generation when the running load began */
	bool failed;           /* a load failed (meta_publish_failure): */
	double failed_at;      /* when, */
	long failed_status;    /* and why */
	struct list waiters;   /* struct chunk_waiter */
};

/* The entry on a shard's FIFO at n, or NULL. */
static struct mentry *fifo_entry(struct list_node *n)
{
	return n ? list_item(n, struct mentry, fifo) : NULL;
}

struct shard {
	pthread_mutex_t lock;
	pthread_mutex_t wake_lock;
	struct mentry *table[BUCKETS_PER_SHARD];
	struct list fifo;                     /* struct mentry, oldest first */
	size_t count;
};

struct meta_cache {
	size_t max_per_shard;
	_Atomic uint64_t gen;  /* meta_expire_all: entries of older ones are not fresh */
	struct shard shards[SHARDS];
};

/* ---- entries ---------------------------------------------------------- */

struct obj_meta *meta_new(uint64_t size, const char *etag, time_t last_modified,
                          const char *headers, double now)
{
	struct obj_meta *m = calloc(1, sizeof *m);
	if (!m)
		return NULL;
	m->headers = strdup(headers ? headers : "");
	if (!m->headers) {
		free(m);
		return NULL;
	}
	atomic_init(&m->refs, 1);
	m->size = size;
	str_copy(m->etag, sizeof m->etag, etag ? etag : "");
	m->last_modified = last_modified;
	m->learnt = now;
	m->learnt_wall = time(NULL);
	return m;
}

struct obj_meta *meta_new_negative(const char *headers, double now)
{
	struct obj_meta *m = meta_new(0, "", 0, headers, now);
	if (m)
		m->negative = true;
	return m;
}

void meta_ref(struct obj_meta *m)
{
	atomic_fetch_add(&m->refs, 1);
}

void meta_unref(struct obj_meta *m)
{
	if (m && atomic_fetch_sub(&m->refs, 1) == 1) {
		free(m->headers);
		free(m->parts);
		free(m->checksums);
		free(m);
	}
}

/* A time in decimal, with its sign. */
static int put_time(struct buf *out, time_t t)
{
	int rc = t < 0 ? buf_putc(out, '-') : 0;
	return rc ? rc : buf_put_u64(out, t < 0 ? 0 - (uint64_t)t : (uint64_t)t);
}

/* Blob: "larder-meta 2\n" size "\n" last_modified "\n" etag "\n"
 * learnt_wall "\n" headers. */
int meta_encode(const struct obj_meta *m, struct buf *out)
{
	/* Piece by piece, not printf: it runs for every object fetched. */
	int rc = buf_puts(out, "larder-meta 2\n");
	rc = rc ? rc : buf_put_u64(out, m->size);
	rc = rc ? rc : buf_putc(out, '\n');
	rc = rc ? rc : put_time(out, m->last_modified);
	rc = rc ? rc : buf_putc(out, '\n');
	rc = rc ? rc : buf_puts(out, m->etag);
	rc = rc ? rc : buf_putc(out, '\n');
	rc = rc ? rc : put_time(out, m->learnt_wall);
	rc = rc ? rc : buf_putc(out, '\n');
	return rc ? rc : buf_puts(out, m->headers);
}

struct obj_meta *meta_decode(const void *blob, size_t len, double now)
{
	char *s = strndup(blob, len);
	if (!s || strlen(s) != len) {
		free(s);
		return NULL;
	}
	struct obj_meta *m = NULL;
	char *line[5];
	char *p = s;
	for (int i = 0; i < 5; i++) {
		line[i] = p;
		p = strchr(p, '\n');
		if (!p)
			goto out;
		*p++ = '\0';
	}
	if (strcmp(line[0], "larder-meta 2") != 0)
		goto out;
	char *end;
	errno = 0;
	unsigned long long size = strtoull(line[1], &end, 10);
	if (errno || *end || end == line[1])
		goto out;
	long long lm = strtoll(line[2], &end, 10);
	if (errno || *end || end == line[2] || strlen(line[3]) >= sizeof m->etag)
		goto out;
	long long lw = strtoll(line[4], &end, 10);
	if (errno || *end || end == line[4] || lw < 0) /* learnt before 1970: not ours */
		goto out;
	m = meta_new(size, line[3], (time_t)lm, p, now);
	if (m) {
		/* As old as it was when written: the TTL does not restart. In
		 * doubles: a learnt time from a damaged file cannot overflow. */
		double age = (double)time(NULL) - (double)lw;
		m->learnt = now - (age > 0 ? age : 0.0);
		m->learnt_wall = (time_t)lw;
	}
out:
	free(s);
	return m;
}

/* ---- the table -------------------------------------------------------- */

static uint64_t name_hash(const char *bucket, const char *key)
{
	/* FNV-1a over bucket, a separator byte no name holds, key. Only picks
	 * a shard and a bucket in memory: nothing persists it. */
	uint64_t h = fnv1a64_add(FNV1A64_OFFSET, bucket, strlen(bucket));
	h = fnv1a64_add(h, "\xff", 1);
	h = fnv1a64_add(h, key, strlen(key));
	return h ^ (h >> 29);
}

struct meta_cache *meta_cache_create(size_t max_entries)
{
	struct meta_cache *mc = calloc(1, sizeof *mc);
	if (!mc)
		return NULL;
	mc->max_per_shard = max_entries / SHARDS + 1;
	for (int i = 0; i < SHARDS; i++) {
		pthread_mutex_init(&mc->shards[i].lock, NULL);
		pthread_mutex_init(&mc->shards[i].wake_lock, NULL);
	}
	return mc;
}

static void entry_free(struct mentry *e)
{
	meta_unref(e->m);
	free(e->name);
	free(e);
}

void meta_cache_destroy(struct meta_cache *mc)
{
	if (!mc)
		return;
	for (int i = 0; i < SHARDS; i++) {
		struct shard *sh = &mc->shards[i];
		for (struct mentry *e = fifo_entry(sh->fifo.first), *next; e; e = next) {
			next = fifo_entry(e->fifo.next);
			entry_free(e);
		}
		pthread_mutex_destroy(&sh->lock);
		pthread_mutex_destroy(&sh->wake_lock);
	}
	free(mc);
}

static struct shard *shard_of(struct meta_cache *mc, uint64_t h)
{
	return &mc->shards[h % SHARDS];
}

static struct mentry **slot_of(struct shard *sh, uint64_t h)
{
	return &sh->table[(h / SHARDS) % BUCKETS_PER_SHARD];
}

static struct mentry *find(struct shard *sh, uint64_t h, const char *bucket, const char *key)
{
	size_t bl = strlen(bucket);
	for (struct mentry *e = *slot_of(sh, h); e; e = e->hnext)
		if (e->h == h && strcmp(e->name, bucket) == 0 && strcmp(e->name + bl + 1, key) == 0 &&
		    e->name_len == bl + 1 + strlen(key))
			return e;
	return NULL;
}

static void unlink_entry(struct shard *sh, struct mentry *e)
{
	struct mentry **pp = slot_of(sh, e->h);
	while (*pp != e)
		pp = &(*pp)->hnext;
	*pp = e->hnext;
	list_unlink(&sh->fifo, &e->fifo);
	sh->count--;
}

static struct mentry *insert(struct meta_cache *mc, struct shard *sh, uint64_t h,
                             const char *bucket, const char *key)
{
	/* Bound: the oldest settled entries go (never one being loaded:
	 * it has waiters). */
	for (struct mentry *e = fifo_entry(sh->fifo.first); e && sh->count >= mc->max_per_shard;) {
		struct mentry *next = fifo_entry(e->fifo.next);
		if (!e->loading) {
			unlink_entry(sh, e);
			entry_free(e);
		}
		e = next;
	}
	struct mentry *e = calloc(1, sizeof *e);
	size_t bl = strlen(bucket), kl = strlen(key);
	if (!e || !(e->name = malloc(bl + kl + 2))) {
		free(e);
		return NULL;
	}
	memcpy(e->name, bucket, bl + 1);
	memcpy(e->name + bl + 1, key, kl + 1);
	e->name_len = bl + 1 + kl;
	e->h = h;
	struct mentry **slot = slot_of(sh, h);
	e->hnext = *slot;
	*slot = e;
	list_push_back(&sh->fifo, &e->fifo);
	sh->count++;
	return e;
}

static bool fresh(const struct mentry *e, uint64_t gen, double now, double ttl,
                  double negative_ttl)
{
	double limit = e->m->negative ? negative_ttl : ttl;
	return e->gen == gen && (limit < 0 || now - e->m->learnt < limit);
}

enum meta_role meta_lookup(struct meta_cache *mc, const char *bucket, const char *key,
                           double now, double ttl, double negative_ttl,
                           struct chunk_waiter *w, struct obj_meta **out)
{
	uint64_t h = name_hash(bucket, key);
	struct shard *sh = shard_of(mc, h);
	enum meta_role role;
	*out = NULL;
	pthread_mutex_lock(&sh->lock);
	uint64_t gen = atomic_load(&mc->gen);
	struct mentry *e = find(sh, h, bucket, key);
	if (!e) {
		e = insert(mc, sh, h, bucket, key);
		if (e) {
			e->loading = true;
			e->load_gen = gen;
		}
		role = META_LOAD; /* out of memory: load without coalescing */
	} else if (e->loading) {
		list_push_front(&e->waiters, &w->link);
		w->queued = true;
		role = META_WAIT;
	} else if (e->m && fresh(e, gen, now, ttl, negative_ttl)) {
		meta_ref(e->m);
		*out = e->m;
		role = META_FRESH;
	} else {
		e->loading = true;
		e->ask_hop = 0;
		e->load_gen = gen;
		e->dropped = false;
		if (e->m && !e->m->negative) {
			meta_ref(e->m);
			*out = e->m;
		}
		role = META_LOAD;
	}
	pthread_mutex_unlock(&sh->lock);
	return role;
}

/* Wakes the waiters of list, detached under sh->lock; called with sh->lock
 * held, returns with it released. */
static void wake_list_and_unlock(struct shard *sh, struct list_node *list)
{
	for (struct list_node *n = list; n; n = n->next)
		list_item(n, struct chunk_waiter, link)->queued = false;
	pthread_mutex_lock(&sh->wake_lock);
	pthread_mutex_unlock(&sh->lock);
	for (struct list_node *n = list, *next; n; n = next) {
		next = n->next; /* read before wake: the waiter may be reused after */
		struct chunk_waiter *w = list_item(n, struct chunk_waiter, link);
		w->wake(w->arg);
	}
	pthread_mutex_unlock(&sh->wake_lock);
}

/* Detaches e's waiters under sh->lock and wakes them; called with sh->lock
 * held, returns with it released. */
static void wake_all_and_unlock(struct shard *sh, struct mentry *e)
{
	struct list_node *list = e ? e->waiters.first : NULL;
	if (e)
		e->waiters = (struct list){ 0 };
	wake_list_and_unlock(sh, list);
}

/* meta_publish, and with failure the load's failure remembered. */
static void publish(struct meta_cache *mc, const char *bucket, const char *key,
                    struct obj_meta *m, const struct mentry *failure)
{
	uint64_t h = name_hash(bucket, key);
	struct shard *sh = shard_of(mc, h);
	pthread_mutex_lock(&sh->lock);
	struct mentry *e = find(sh, h, bucket, key);
	if (!e && m && (e = insert(mc, sh, h, bucket, key)))
		e->load_gen = atomic_load(&mc->gen); /* no load ran: learnt at start */
	if (e) {
		e->loading = false;
		if (m && !e->dropped) {
			meta_ref(m);
			meta_unref(e->m);
			e->m = m;
			e->gen = e->load_gen;
		}
		e->dropped = false;
		if (failure) {
			e->failed = true;
			e->failed_at = failure->failed_at;
			e->failed_status = failure->failed_status;
		}
		/* Nothing learnt and no failure to share with waiters: nothing
		 * to keep (a 404 not remembered, whose own reader had come back
		 * to wait, left one entry per missing key before). Its waiters,
		 * woken, look it up again. */
		if (!e->m && (!e->failed || list_empty(&e->waiters))) {
			struct list_node *waiters = e->waiters.first;
			unlink_entry(sh, e);
			entry_free(e);
			wake_list_and_unlock(sh, waiters);
			return;
		}
	}
	wake_all_and_unlock(sh, e);
}

void meta_publish(struct meta_cache *mc, const char *bucket, const char *key,
                  struct obj_meta *m)
{
	publish(mc, bucket, key, m, NULL);
}

void meta_publish_failure(struct meta_cache *mc, const char *bucket, const char *key,
                          long status, double now)
{
	struct mentry failure = { .failed_at = now, .failed_status = status };
	publish(mc, bucket, key, NULL, &failure);
}

bool meta_load_failed(struct meta_cache *mc, const char *bucket, const char *key, double since,
                      long *status)
{
	uint64_t h = name_hash(bucket, key);
	struct shard *sh = shard_of(mc, h);
	pthread_mutex_lock(&sh->lock);
	struct mentry *e = find(sh, h, bucket, key);
	bool hit = e && e->failed && e->failed_at >= since;
	if (hit)
		*status = e->failed_status;
	pthread_mutex_unlock(&sh->lock);
	return hit;
}

/* The value header lines ("Name: value\n") give name, as a length and a
 * pointer into lines; NULL when they do not name it. */
static const char *line_value(const char *lines, const char *name, size_t *len)
{
	size_t nl = strlen(name);
	for (const char *p = lines; p && *p;) {
		const char *end = strchr(p, '\n');
		size_t n = end ? (size_t)(end - p) : strlen(p);
		if (n > nl && p[nl] == ':' && strncasecmp(p, name, nl) == 0) {
			const char *v = p + nl + 1;
			while (*v == ' ')
				v++;
			*len = (size_t)(p + n - v);
			return v;
		}
		p = end ? end + 1 : NULL;
	}
	return NULL;
}

/* Whether a 304 (its headers: said) vouches for another version than m:
 * another Last-Modified, another version id, or another tag count (tags
 * change neither). What it does not name is not compared, but for a tag
 * count it names where m has none (tags added). */
static bool another_version(const struct obj_meta *m, time_t last_modified,
                            const struct hdrs *said)
{
	if (last_modified && m->last_modified && m->last_modified != last_modified)
		return true;
	static const char *const names[] = { "x-amz-version-id", "x-amz-tagging-count" };
	for (size_t i = 0; said && i < 2; i++) {
		const char *theirs = hdrs_get(said, names[i]);
		size_t len = 0;
		const char *ours = line_value(m->headers, names[i], &len);
		if (theirs && ours && (len != strlen(theirs) || strncmp(ours, theirs, len) != 0))
			return true;
		if (theirs && !ours && i == 1) /* tags added */
			return true;
	}
	return false;
}

bool meta_refresh(struct meta_cache *mc, const char *bucket, const char *key,
                  time_t last_modified, const struct hdrs *said, double now)
{
	uint64_t h = name_hash(bucket, key);
	struct shard *sh = shard_of(mc, h);
	pthread_mutex_lock(&sh->lock);
	struct mentry *e = find(sh, h, bucket, key);
	if (e && e->m && !e->dropped && another_version(e->m, last_modified, said)) {
		pthread_mutex_unlock(&sh->lock); /* still loading: learnt again */
		return false;
	}
	if (e && e->m && !e->dropped) {
		e->m->learnt = now;
		e->m->learnt_wall = time(NULL);
		e->gen = e->load_gen;
	}
	if (e)
		e->loading = false;
	wake_all_and_unlock(sh, e);
	return true;
}

/* A copy of m with everything learnt so far, refs = 1. */
static struct obj_meta *meta_copy(const struct obj_meta *m)
{
	struct obj_meta *c = meta_new(m->size, m->etag, m->last_modified, m->headers, m->learnt);
	if (!c)
		return NULL;
	c->learnt_wall = m->learnt_wall;
	c->parts_count = m->parts_count;
	c->nparts = m->nparts;
	c->parts = m->nparts ? malloc(m->nparts * sizeof m->parts[0]) : NULL;
	c->checksums = m->checksums ? strdup(m->checksums) : NULL;
	if ((m->nparts && !c->parts) || (m->checksums && !c->checksums)) {
		meta_unref(c);
		return NULL;
	}
	if (m->nparts)
		memcpy(c->parts, m->parts, m->nparts * sizeof m->parts[0]);
	return c;
}

/* The entry of (bucket, key) while it holds etag and size, under its
 * shard's lock (held on return, also when NULL). */
static struct mentry *learning(struct meta_cache *mc, const char *bucket, const char *key,
                               const char *etag, uint64_t size, struct shard **sh)
{
	uint64_t h = name_hash(bucket, key);
	*sh = shard_of(mc, h);
	pthread_mutex_lock(&(*sh)->lock);
	struct mentry *e = find(*sh, h, bucket, key);
	if (!e || e->dropped || !e->m || e->m->negative || e->m->size != size ||
	    strcmp(e->m->etag, etag) != 0)
		return NULL;
	return e;
}

void meta_learn_part(struct meta_cache *mc, const char *bucket, const char *key,
                     const char *etag, uint64_t size, uint32_t n, uint64_t first, uint64_t last,
                     uint32_t count)
{
	struct shard *sh;
	struct mentry *e = learning(mc, bucket, key, etag, size, &sh);
	uint64_t f, l;
	if (e && !meta_part(e->m, n, &f, &l) && e->m->nparts < META_PARTS_MAX) {
		struct obj_meta *c = meta_copy(e->m);
		struct meta_part *more = c ? realloc(c->parts, (c->nparts + 1) * sizeof *more) : NULL;
		if (more) {
			c->parts = more;
			c->parts[c->nparts++] = (struct meta_part){ n, first, last };
			c->parts_count = count;
			meta_unref(e->m);
			e->m = c;
		} else {
			meta_unref(c);
		}
	}
	pthread_mutex_unlock(&sh->lock);
}

/* Everything that describes the object, nothing that describes this one
 * response or connection. */
static bool replayed_header(const char *name)
{
	static const char *const dropped[] = {
		"content-length", "content-range", "date", "x-amz-request-id", "x-amz-id-2",
		"x-amzn-requestid", "server", "accept-ranges", "etag", "x-amz-bucket-region",
		"access-control-allow-origin", NULL,
	};
	if (hdr_hop_by_hop(name))
		return false;
	for (int i = 0; dropped[i]; i++)
		if (strcasecmp(name, dropped[i]) == 0)
			return false;
	/* A checksum of the whole object is not the checksum of a range; a
	 * peer's own headers describe its response, not the object. */
	return strncasecmp(name, "x-amz-checksum-", 15) != 0 && strncasecmp(name, "x-larder-", 9) != 0;
}

void meta_replayed_lines(const struct hdrs *h, struct buf *out)
{
	for (size_t i = 0; i < h->n; i++)
		if (replayed_header(h->v[i].name)) {
			size_t len = out->len; /* a line that does not fit is left out whole */
			if (buf_puts(out, h->v[i].name) || buf_append(out, ": ", 2) ||
			    buf_puts(out, h->v[i].value) || buf_putc(out, '\n'))
				buf_truncate(out, len);
		}
}

int meta_checksum_lines(const struct hdrs *h, struct buf *out)
{
	int rc = 0;
	for (size_t i = 0; i < h->n && !rc; i++)
		if (strncasecmp(h->v[i].name, "x-amz-checksum-", 15) == 0)
			rc = buf_printf(out, "%s: %s\n", h->v[i].name, h->v[i].value);
	return rc;
}

int meta_set_checksums(struct obj_meta *m, const char *lines)
{
	char *copy = strdup(lines);
	if (!copy)
		return -ENOMEM;
	free(m->checksums);
	m->checksums = copy;
	return 0;
}

void meta_learn_checksums(struct meta_cache *mc, const char *bucket, const char *key,
                          const char *etag, uint64_t size, const char *lines)
{
	struct shard *sh;
	struct mentry *e = learning(mc, bucket, key, etag, size, &sh);
	if (e && !e->m->checksums) {
		struct obj_meta *c = meta_copy(e->m);
		if (c && (c->checksums = strdup(lines)) != NULL) {
			meta_unref(e->m);
			e->m = c;
		} else {
			meta_unref(c);
		}
	}
	pthread_mutex_unlock(&sh->lock);
}

bool meta_part(const struct obj_meta *m, uint32_t n, uint64_t *first, uint64_t *last)
{
	for (uint32_t i = 0; i < m->nparts; i++)
		if (m->parts[i].number == n) {
			*first = m->parts[i].first;
			*last = m->parts[i].last;
			return true;
		}
	return false;
}

void meta_unwait(struct meta_cache *mc, const char *bucket, const char *key,
                 struct chunk_waiter *w)
{
	uint64_t h = name_hash(bucket, key);
	struct shard *sh = shard_of(mc, h);
	pthread_mutex_lock(&sh->lock);
	struct mentry *e = find(sh, h, bucket, key);
	if (w->queued && e) {
		list_unlink(&e->waiters, &w->link);
		w->queued = false;
	}
	pthread_mutex_unlock(&sh->lock);
	/* A wake of w that was already detached finishes before this returns. */
	pthread_mutex_lock(&sh->wake_lock);
	pthread_mutex_unlock(&sh->wake_lock);
}

void meta_set_ask_hop(struct meta_cache *mc, const char *bucket, const char *key,
                      unsigned ask_hop)
{
	uint64_t h = name_hash(bucket, key);
	struct shard *sh = shard_of(mc, h);
	pthread_mutex_lock(&sh->lock);
	struct mentry *e = find(sh, h, bucket, key);
	if (e && e->loading)
		e->ask_hop = ask_hop;
	pthread_mutex_unlock(&sh->lock);
}

unsigned meta_loading_ask_hop(struct meta_cache *mc, const char *bucket, const char *key)
{
	uint64_t h = name_hash(bucket, key);
	struct shard *sh = shard_of(mc, h);
	pthread_mutex_lock(&sh->lock);
	struct mentry *e = find(sh, h, bucket, key);
	unsigned hop = e && e->loading ? e->ask_hop : 0;
	pthread_mutex_unlock(&sh->lock);
	return hop;
}

/* meta_drop of e, under its shard's lock. */
static void drop_entry(struct shard *sh, struct mentry *e)
{
	if (e->loading) {
		e->dropped = true;
		meta_unref(e->m);
		e->m = NULL;
	} else {
		unlink_entry(sh, e);
		entry_free(e);
	}
}

void meta_drop(struct meta_cache *mc, const char *bucket, const char *key)
{
	uint64_t h = name_hash(bucket, key);
	struct shard *sh = shard_of(mc, h);
	pthread_mutex_lock(&sh->lock);
	struct mentry *e = find(sh, h, bucket, key);
	if (e)
		drop_entry(sh, e);
	pthread_mutex_unlock(&sh->lock);
}

bool meta_drop_other(struct meta_cache *mc, const char *bucket, const char *key,
                     const char *etag, uint64_t size)
{
	uint64_t h = name_hash(bucket, key);
	struct shard *sh = shard_of(mc, h);
	pthread_mutex_lock(&sh->lock);
	struct mentry *e = find(sh, h, bucket, key);
	bool other = e && e->m && (e->m->negative || e->m->size != size ||
	                           strcmp(e->m->etag, etag) != 0);
	if (other)
		drop_entry(sh, e);
	pthread_mutex_unlock(&sh->lock);
	return other;
}

void meta_drop_bucket(struct meta_cache *mc, const char *bucket)
{
	for (int i = 0; i < SHARDS; i++) {
		struct shard *sh = &mc->shards[i];
		pthread_mutex_lock(&sh->lock);
		for (struct mentry *e = fifo_entry(sh->fifo.first), *next; e; e = next) {
			next = fifo_entry(e->fifo.next);
			if (strcmp(e->name, bucket) != 0)
				continue;
			drop_entry(sh, e);
		}
		pthread_mutex_unlock(&sh->lock);
	}
}

void meta_expire_all(struct meta_cache *mc)
{
	atomic_fetch_add(&mc->gen, 1);
}

struct found {
	struct found *next;
	char *key;
	struct obj_meta *m;
};

size_t meta_collect(struct meta_cache *mc, const char *bucket, const char *prefix, bool exact,
                    meta_visit_cb cb, void *arg)
{
	struct found *list = NULL;
	size_t n = 0, pl = strlen(prefix);
	for (int i = 0; i < SHARDS; i++) {
		struct shard *sh = &mc->shards[i];
		pthread_mutex_lock(&sh->lock);
		for (struct mentry *e = fifo_entry(sh->fifo.first); e;
		     e = fifo_entry(e->fifo.next)) {
			const char *key = e->name + strlen(e->name) + 1;
			if (!e->m || strcmp(e->name, bucket) != 0 ||
			    strncmp(key, prefix, pl) != 0 || (exact && key[pl]))
				continue;
			struct found *f = malloc(sizeof *f);
			if (!f || !(f->key = strdup(key))) {
				free(f);
				continue;
			}
			meta_ref(e->m);
			f->m = e->m;
			f->next = list;
			list = f;
		}
		pthread_mutex_unlock(&sh->lock);
	}
	while (list) {
		struct found *f = list;
		list = f->next;
		cb(arg, f->key, f->m);
		free(f->key);
		free(f);
		n++;
	}
	return n;
}

size_t meta_cache_count(struct meta_cache *mc)
{
	size_t n = 0;
	for (int i = 0; i < SHARDS; i++) {
		pthread_mutex_lock(&mc->shards[i].lock);
		n += mc->shards[i].count;
		pthread_mutex_unlock(&mc->shards[i].lock);
	}
	return n;
}

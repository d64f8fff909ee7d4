/*
 * pins.c - the registry of pins (see pins.h): a list under one lock; each
 * pin keeps the ids it pinned so that ending it unpins exactly those.
 */
#include "gateway/pins.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/log.h"
#include "store/meta.h"
#include "store/object.h"
#include "store/pinset.h"
#include "store/store.h"

struct pinned_id {
	struct chunk_id id;
	int tiers;                  /* store_pin's answer */
};

struct pin {
	struct pin *next;
	char id[PIN_ID_MAX];
	char *bucket, *prefix;
	size_t n_keys;
	int64_t until;
	uint64_t bytes;
	struct pinned_id *ids;
	size_t n, cap;
	struct pinset held;         /* the same ids, to pin each once however often it is asked */
};

struct pins {
	struct store *store;
	pthread_mutex_t lock;
	struct pin *list;       /* newest first */
	void (*ended)(void *arg, const char *id);
	void *ended_arg;
};

void pins_on_end(struct pins *p, void (*fn)(void *arg, const char *id), void *arg)
{
	pthread_mutex_lock(&p->lock);
	p->ended = fn;
	p->ended_arg = arg;
	pthread_mutex_unlock(&p->lock);
}

/* Lock held. Tells the hook that this node's own pin x ended early (a
 * peer's NODE/JOB pin is not ours to announce). */
static void tell_ended(struct pins *p, const struct pin *x)
{
	if (p->ended && !strchr(x->id, '/'))
		p->ended(p->ended_arg, x->id);
}

struct pins *pins_create(struct store *s)
{
	struct pins *p = calloc(1, sizeof *p);
	if (!p)
		return NULL;
	p->store = s;
	pthread_mutex_init(&p->lock, NULL);
	return p;
}

/* Lock held (the store's calls never call back here). */
static void pin_free(struct pins *p, struct pin *x)
{
	for (size_t i = 0; i < x->n; i++)
		store_unpin(p->store, &x->ids[i].id, x->ids[i].tiers);
	free(x->ids);
	pinset_free(&x->held);
	free(x->bucket);
	free(x->prefix);
	free(x);
}

void pins_destroy(struct pins *p)
{
	if (!p)
		return;
	for (struct pin *x = p->list, *next; x; x = next) {
		next = x->next;
		pin_free(p, x);
	}
	pthread_mutex_destroy(&p->lock);
	free(p);
}

int pins_begin(struct pins *p, const char *id, const char *bucket, const char *prefix,
               int64_t until)
{
	struct pin *x = calloc(1, sizeof *x);
	if (!x)
		return -ENOMEM;
	snprintf(x->id, sizeof x->id, "%s", id);
	x->bucket = strdup(bucket);
	x->prefix = prefix ? strdup(prefix) : NULL;
	x->until = until;
	if (!x->bucket || (prefix && !x->prefix)) {
		pin_free(p, x);
		return -ENOMEM;
	}
	pthread_mutex_lock(&p->lock);
	x->next = p->list;
	p->list = x;
	pthread_mutex_unlock(&p->lock);
	return 0;
}

/* Lock held. */
static struct pin *find(struct pins *p, const char *id, struct pin ***link)
{
	struct pin **pp = &p->list;
	for (; *pp; pp = &(*pp)->next)
		if (strcmp((*pp)->id, id) == 0)
			break;
	if (link)
		*link = pp;
	return *pp;
}

/* Lock held. Pins cid for x unless x holds it already. */
static int add_locked(struct pins *p, struct pin *x, const struct chunk_id *cid, size_t len)
{
	if (pinset_has(&x->held, cid))
		return 0;
	if (x->n == x->cap) {
		size_t cap = x->cap ? 2 * x->cap : 64;
		struct pinned_id *ids = realloc(x->ids, cap * sizeof *ids);
		if (!ids)
			return -ENOMEM;
		x->ids = ids;
		x->cap = cap;
	}
	x->held.limit = UINT64_MAX;
	int rc = pinset_add(&x->held, cid, len);
	int tiers = rc < 0 ? rc : store_pin(p->store, cid, len);
	if (tiers < 0) {
		if (rc == 1)
			pinset_remove(&x->held, cid);
		return tiers;
	}
	x->ids[x->n++] = (struct pinned_id){ *cid, tiers };
	x->bytes += len;
	return 0;
}

int pins_add(struct pins *p, const char *id, const struct chunk_id *cid, size_t len)
{
	pthread_mutex_lock(&p->lock);
	struct pin *x = find(p, id, NULL);
	int rc = x ? add_locked(p, x, cid, len) : -ENOENT;
	pthread_mutex_unlock(&p->lock);
	return rc;
}

void pins_peer_header(char out[PIN_HEADER_MAX], const char *node, const char *id, int64_t until)
{
	snprintf(out, PIN_HEADER_MAX, "%.120s/%.23s %lld", node, id, (long long)until);
}

bool pins_hold_peer(struct pins *p, const char *bucket, const char *hdr,
                    const struct chunk_id *cid, size_t len)
{
	if (!p || !hdr)
		return false;
	const char *sp = strrchr(hdr, ' ');
	char *end;
	long long until = sp ? strtoll(sp + 1, &end, 10) : 0;
	size_t n = sp ? (size_t)(sp - hdr) : 0;
	char id[PIN_ID_MAX];
	if (!sp || *end || until <= 0 || n == 0 || n >= sizeof id) {
		log_warn("pins", "a peer's %s \"%.64s\" is not \"NODE/JOB UNTIL\": not pinned",
		         PIN_HEADER, hdr);
		return false;
	}
	memcpy(id, hdr, n);
	id[n] = '\0';
	pthread_mutex_lock(&p->lock);
	struct pin *x = find(p, id, NULL);
	int rc = 0;
	if (!x && (x = calloc(1, sizeof *x)) && (x->bucket = strdup(bucket))) {
		memcpy(x->id, id, n + 1);
		x->until = until;
		x->next = p->list;
		p->list = x;
	} else if (!x || !x->bucket) {
		free(x);
		x = NULL;
		rc = -ENOMEM;
	}
	rc = rc ? rc : add_locked(p, x, cid, len);
	pthread_mutex_unlock(&p->lock);
	if (rc)
		log_warn("pins", "pin %s from a peer: a chunk of bucket %s not pinned: %s", id, bucket,
		         strerror(-rc));
	return rc == 0;
}

/* The most an object's encoded metadata may take (as fetch.c allows). */
#define META_BLOB_MAX (128 * 1024)

void pins_keep_on_nvme(struct store *s, const struct obj_ref *ref, uint64_t index, struct chunk *c)
{
	if (atomic_load(&c->state) != CHUNK_READY)
		return; /* its completion writes it */
	struct buf blob;
	buf_init(&blob, META_BLOB_MAX);
	struct chunk_origin o = { .bucket = ref->bucket, .key = ref->key, .etag = ref->meta->etag,
	                          .index = index };
	if (index == 0 && meta_encode(ref->meta, &blob) == 0) {
		o.meta = blob.p;
		o.meta_len = blob.len;
	}
	store_pin_write(s, c, &o);
	buf_fini(&blob);
}

void pins_add_object(struct pins *p, const char *id)
{
	pthread_mutex_lock(&p->lock);
	struct pin *x = find(p, id, NULL);
	if (x && !x->prefix)
		x->n_keys++;
	pthread_mutex_unlock(&p->lock);
}

int pins_end(struct pins *p, const char *id)
{
	pthread_mutex_lock(&p->lock);
	struct pin **link;
	struct pin *x = find(p, id, &link);
	if (x) {
		*link = x->next;
		log_info("pins", "pin %s ended: %zu chunks unpinned", x->id, x->n);
		tell_ended(p, x);
		pin_free(p, x);
	}
	pthread_mutex_unlock(&p->lock);
	return x ? 0 : -ENOENT;
}

static bool expired(const struct pin *x, const void *arg)
{
	return x->until <= *(const int64_t *)arg;
}

/* Lock held. Ends each pin for which fn says so; returns how many. */
static size_t end_where(struct pins *p, bool (*fn)(const struct pin *x, const void *arg),
                        const void *arg, const char *why)
{
	size_t n = 0;
	for (struct pin **pp = &p->list; *pp;) {
		struct pin *x = *pp;
		if (!fn(x, arg)) {
			pp = &x->next;
			continue;
		}
		*pp = x->next;
		log_info("pins", "pin %s %s: %zu chunks unpinned", x->id, why, x->n);
		if (fn != expired)
			tell_ended(p, x);
		pin_free(p, x);
		n++;
	}
	return n;
}

struct prefix_match {
	const char *bucket, *prefix;
};

static bool under_prefix(const struct pin *x, const void *arg)
{
	const struct prefix_match *m = arg;
	return strcmp(x->bucket, m->bucket) == 0 && x->prefix &&
	       strncmp(x->prefix, m->prefix, strlen(m->prefix)) == 0;
}

size_t pins_end_prefix(struct pins *p, const char *bucket, const char *prefix)
{
	struct prefix_match m = { bucket, prefix };
	pthread_mutex_lock(&p->lock);
	size_t n = end_where(p, under_prefix, &m, "ended");
	pthread_mutex_unlock(&p->lock);
	return n;
}

void pins_expire(struct pins *p, int64_t now)
{
	pthread_mutex_lock(&p->lock);
	end_where(p, expired, &now, "expired");
	pthread_mutex_unlock(&p->lock);
}

size_t pins_list(struct pins *p, struct pin_info *out, size_t max)
{
	size_t n = 0;
	pthread_mutex_lock(&p->lock);
	for (struct pin *x = p->list; x && n < max; x = x->next) {
		struct pin_info *i = &out[n++];
		memset(i, 0, sizeof *i);
		snprintf(i->id, sizeof i->id, "%s", x->id);
		snprintf(i->bucket, sizeof i->bucket, "%s", x->bucket);
		i->prefix = x->prefix ? strdup(x->prefix) : NULL;
		i->n_keys = x->n_keys;
		i->bytes = x->bytes;
		i->until = x->until;
	}
	pthread_mutex_unlock(&p->lock);
	return n;
}

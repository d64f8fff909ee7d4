/*
 * listcache.c - see listcache.h.
 */
#include "gateway/listcache.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/clock.h"
#include "base/fnv.h"
#include "base/list.h"
#include "gateway/req.h"

#define LC_SLOTS 4096
#define LC_MAX_ANSWER (1024 * 1024) /* 1,000 keys of 1,024 bytes, in XML */

struct lc_entry {
	struct lc_entry *hnext;          /* slot chain */
	uint64_t h;                      /* fnv1a64(key): its slot */
	struct list_node age;            /* on the age list */
	char *key;                       /* bucket '\n' sorted query */
	char *bucket, *prefix;
	char *body;
	size_t len, cost;
	char ctype[128];
	char region[64];
	double expires;
};

struct listcache {
	pthread_mutex_t lock;
	size_t max_bytes, bytes;
	struct lc_entry *slots[LC_SLOTS];
	struct list ages;                /* struct lc_entry, oldest first */
	atomic_uint_fast64_t generation; /* bumped by every invalidation */
};

/* A request's part: what it needs to answer from, or fill, the cache. */
struct list_req {
	bool hit;
	char *key;
	unsigned ttl_s;
	uint64_t generation;
	struct buf body;                 /* upstream's answer as it streams */
	bool too_big;
	char *hit_body;
	size_t hit_len;
	char ctype[128];
	char region[64];
};

struct listcache *listcache_create(size_t max_bytes)
{
	struct listcache *lc = calloc(1, sizeof *lc);
	if (!lc)
		return NULL;
	pthread_mutex_init(&lc->lock, NULL);
	lc->max_bytes = max_bytes;
	return lc;
}

static void entry_free(struct lc_entry *e)
{
	free(e->key);
	free(e->bucket);
	free(e->prefix);
	free(e->body);
	free(e);
}

/* The entry on the age list at n, or NULL. */
static struct lc_entry *age_entry(struct list_node *n)
{
	return n ? list_item(n, struct lc_entry, age) : NULL;
}

/* Unlinks e from its slot and the age list; lock held. */
static void unlink_entry(struct listcache *lc, struct lc_entry *e)
{
	struct lc_entry **pp = &lc->slots[e->h % LC_SLOTS];
	while (*pp != e)
		pp = &(*pp)->hnext;
	*pp = e->hnext;
	list_unlink(&lc->ages, &e->age);
	lc->bytes -= e->cost;
	entry_free(e);
}

void listcache_destroy(struct listcache *lc)
{
	if (!lc)
		return;
	while (!list_empty(&lc->ages))
		unlink_entry(lc, age_entry(lc->ages.first));
	pthread_mutex_destroy(&lc->lock);
	free(lc);
}

static struct lc_entry *find(struct listcache *lc, const char *key, uint64_t h)
{
	for (struct lc_entry *e = lc->slots[h % LC_SLOTS]; e; e = e->hnext)
		if (e->h == h && strcmp(e->key, key) == 0)
			return e;
	return NULL;
}

void listcache_invalidate(struct listcache *lc, const char *bucket, const char *key)
{
	if (!lc)
		return;
	pthread_mutex_lock(&lc->lock);
	atomic_fetch_add(&lc->generation, 1);
	for (struct lc_entry *e = age_entry(lc->ages.first), *next; e; e = next) {
		next = age_entry(e->age.next);
		if ((!bucket || strcmp(e->bucket, bucket) == 0) &&
		    (!key || !*key || strncmp(key, e->prefix, strlen(e->prefix)) == 0))
			unlink_entry(lc, e);
	}
	pthread_mutex_unlock(&lc->lock);
}

/* ------------------------------------------------------------------ */
/* which requests */

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The parameters a ListObjects (V1 or V2) call may carry; any other one
 * (versions, uploads, acl, ...) is some other request. */
static bool list_param(const char *p, size_t n)
{
	static const char *const names[] = { "list-type", "prefix", "delimiter", "max-keys",
		"continuation-token", "start-after", "fetch-owner", "encoding-type", "marker", NULL };
	for (int i = 0; names[i]; i++)
		if (strlen(names[i]) == n && memcmp(p, names[i], n) == 0)
			return true;
	return false;
}

char *listcache_key(const char *bucket, const char *query)
{
	char *q = strdup(query), *save = NULL;
	size_t n = 0;
	const char *items[16];
	bool ok = q != NULL;
	for (char *t = q ? strtok_r(q, "&", &save) : NULL; ok && t; t = strtok_r(NULL, "&", &save)) {
		size_t name_len = strcspn(t, "=");
		if (n == 16 || !list_param(t, name_len))
			ok = false;
		else if (name_len == 9 && strncmp(t, "list-type", 9) == 0 && strcmp(t, "list-type=2"))
			ok = false;
		for (size_t i = 0; ok && i < n; i++)
			if (strncmp(items[i], t, name_len) == 0 && strchr("=", items[i][name_len]))
				ok = false; /* given twice: upstream might take either */
		if (ok)
			items[n++] = t;
	}
	struct buf k;
	buf_init(&k, strlen(bucket) + strlen(query) + 2);
	if (ok) {
		qsort(items, n, sizeof *items, cmp_str);
		buf_printf(&k, "%s\n", bucket);
		for (size_t i = 0; i < n; i++)
			buf_printf(&k, "%s%s", i ? "&" : "", items[i]);
	}
	free(q);
	char *out = ok ? buf_steal(&k) : NULL;
	buf_fini(&k);
	return out;
}

/* x-amz-* request headers that never change a listing's answer; any other
 * (x-amz-request-payer, x-amz-expected-bucket-owner, ...) goes upstream. */
static enum MHD_Result check_header(void *cls, enum MHD_ValueKind kind, const char *name,
                                    const char *value)
{
	bool *ok = cls;
	(void)kind;
	(void)value;
	if (strncasecmp(name, "x-amz-", 6) == 0 && strcasecmp(name, "x-amz-date") != 0 &&
	    strcasecmp(name, "x-amz-content-sha256") != 0 &&
	    strcasecmp(name, "x-amz-user-agent") != 0) {
		*ok = false;
		return MHD_NO;
	}
	return MHD_YES;
}

/* Whether r is a listing the cache may answer or keep: its TTL, or 0. */
static unsigned cacheable(struct req *r)
{
	struct gw *gw = req_gw(r);
	const struct s3req *s3 = req_s3(r);
	if (!gw->lists || !req_authorized(r) || req_presigned(r) || req_peer_hop(r) ||
	    req_has_body(r) || s3->target != S3T_BUCKET || !s3->listing ||
	    strcmp(req_method(r), "GET") != 0)
		return 0;
	unsigned ttl = cfg_list_ttl(gw->cfg, s3->bucket, buf_cstr(&s3->list_prefix));
	bool ok = ttl > 0;
	if (ok)
		MHD_get_connection_values(req_connection(r), MHD_HEADER_KIND, check_header, &ok);
	return ok ? ttl : 0;
}

bool listcache_wants(struct req *r)
{
	return cacheable(r) > 0;
}

bool listcache_begin(struct req *r)
{
	struct gw *gw = req_gw(r);
	const struct s3req *s3 = req_s3(r);
	unsigned ttl = cacheable(r);
	char *key = ttl ? listcache_key(s3->bucket, req_query(r)) : NULL;
	if (!key)
		return false;
	struct list_req *l = calloc(1, sizeof *l);
	if (!l) {
		free(key);
		return false;
	}
	l->key = key;
	l->ttl_s = ttl;
	buf_init(&l->body, LC_MAX_ANSWER);
	req_set_list(r, l);

	struct listcache *lc = gw->lists;
	pthread_mutex_lock(&lc->lock);
	l->generation = atomic_load(&lc->generation);
	struct lc_entry *e = find(lc, key, fnv1a64(key));
	if (e && e->expires <= clock_mono_s()) {
		unlink_entry(lc, e);
		e = NULL;
	}
	/* A listing that gave up waiting for the read barrier is not served
	 * from the cache: a write through another node may have changed it. */
	if (e && !req_barrier_lapsed(r) && (l->hit_body = malloc(e->len ? e->len : 1))) {
		memcpy(l->hit_body, e->body, e->len);
		l->hit_len = e->len;
		memcpy(l->ctype, e->ctype, sizeof l->ctype);
		memcpy(l->region, e->region, sizeof l->region);
		l->hit = true;
	}
	pthread_mutex_unlock(&lc->lock);
	return l->hit;
}

bool listcache_hit(const struct req *r)
{
	return req_list(r) && req_list(r)->hit;
}

/* A shaped key's cached listing goes out at its max_bytes_per_second. */
static ssize_t shaped_read(void *cls, uint64_t pos, char *out, size_t max)
{
	struct req *r = cls;
	const struct list_req *l = req_list(r);
	if (req_gone(r))
		return MHD_CONTENT_READER_END_WITH_ERROR; /* its client left meanwhile */
	if (pos >= l->hit_len)
		return MHD_CONTENT_READER_END_OF_STREAM;
	size_t n = l->hit_len - (size_t)pos < max ? l->hit_len - (size_t)pos : max;
	if (!(n = req_shape(r, n)))
		return 0; /* waits for tokens */
	memcpy(out, l->hit_body + pos, n);
	req_count_out(r, n);
	return (ssize_t)n;
}

static void shaped_done(void *cls)
{
	req_unref(cls);
}

enum MHD_Result listcache_respond(struct req *r)
{
	struct list_req *l = req_list(r);
	bool shaped = req_shaped(r);
	struct MHD_Response *resp =
		shaped ? MHD_create_response_from_callback(l->hit_len, 16384, shaped_read, r,
		                                           shaped_done)
		       : MHD_create_response_from_buffer(l->hit_len, l->hit_body, MHD_RESPMEM_MUST_FREE);
	if (!resp)
		return MHD_NO;
	if (shaped)
		req_ref(r); /* the reader's: the body is freed with r */
	else
		l->hit_body = NULL;
	if (l->ctype[0])
		MHD_add_response_header(resp, "Content-Type", l->ctype);
	if (l->region[0])
		MHD_add_response_header(resp, "x-amz-bucket-region", l->region);
	MHD_add_response_header(resp, "x-amz-request-id", req_id(r));
	MHD_add_response_header(resp, "x-larder-cache", "hit");
	req_add_common_headers(r, resp);
	if (!shaped)
		req_count_out(r, l->hit_len);
	return req_queue_response(r, 200, resp);
}

void listcache_capture(struct req *r, const char *data, size_t len)
{
	struct list_req *l = req_list(r);
	if (l && !l->hit && !l->too_big && buf_append(&l->body, data, len) != 0)
		l->too_big = true;
}

/* The prefix a write must start with to drop this listing. A raw '+' is
 * a space to upstream ("c+d/" lists "c d/"): keep only what both
 * readings share, so a write under either drops it. */
static char *invalidation_prefix(const struct s3req *s3)
{
	const char *p = buf_cstr(&s3->list_prefix);
	size_t n = strlen(p);
	if (s3->list_prefix_plus) {
		const char *spaced = buf_cstr(&s3->list_prefix_spaced);
		n = 0;
		while (p[n] && p[n] == spaced[n])
			n++;
	}
	return strndup(p, n);
}

void listcache_store(struct req *r)
{
	struct list_req *l = req_list(r);
	struct listcache *lc = req_gw(r)->lists;
	uint64_t len = req_upstream_length(r);
	if (!l || l->hit || l->too_big || req_upstream_status(r) != 200 ||
	    (len != MHD_SIZE_UNKNOWN && len != l->body.len))
		return;
	const char *ct = hdrs_get(req_upstream_headers(r), "Content-Type");
	const char *region = hdrs_get(req_upstream_headers(r), "x-amz-bucket-region");
	struct lc_entry *e = calloc(1, sizeof *e);
	if (!e)
		return;
	e->key = strdup(l->key);
	e->h = fnv1a64(l->key);
	e->bucket = strdup(req_bucket(r));
	e->prefix = invalidation_prefix(req_s3(r));
	e->len = l->body.len;
	e->body = malloc(e->len ? e->len : 1);
	if (!e->key || !e->bucket || !e->prefix || !e->body) {
		entry_free(e);
		return;
	}
	memcpy(e->body, l->body.p, e->len);
	snprintf(e->ctype, sizeof e->ctype, "%s", ct ? ct : "");
	snprintf(e->region, sizeof e->region, "%s", region ? region : "");
	e->cost = sizeof *e + strlen(e->key) * 2 + e->len + 64;
	e->expires = clock_mono_s() + l->ttl_s;

	pthread_mutex_lock(&lc->lock);
	/* A write that completed while this listing was in flight may not be
	 * in it: such an answer is served once, never kept. */
	if (e->cost > lc->max_bytes || atomic_load(&lc->generation) != l->generation) {
		pthread_mutex_unlock(&lc->lock);
		entry_free(e);
		return;
	}
	struct lc_entry *old = find(lc, e->key, e->h);
	if (old)
		unlink_entry(lc, old);
	while (!list_empty(&lc->ages) && lc->bytes + e->cost > lc->max_bytes)
		unlink_entry(lc, age_entry(lc->ages.first));
	struct lc_entry **slot = &lc->slots[e->h % LC_SLOTS];
	e->hnext = *slot;
	*slot = e;
	list_push_back(&lc->ages, &e->age);
	lc->bytes += e->cost;
	pthread_mutex_unlock(&lc->lock);
}

void listcache_end(struct req *r)
{
	struct list_req *l = req_list(r);
	if (!l)
		return;
	free(l->key);
	free(l->hit_body);
	buf_fini(&l->body);
	free(l);
	req_set_list(r, NULL);
}

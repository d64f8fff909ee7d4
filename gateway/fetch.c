/*
 * fetch.c - upstream GETs that fill the cache (see fetch.h).
 *
 * A meta fetch asks for bytes 0..chunk-1 without knowing the ETag. When
 * upstream's headers arrive it publishes the object's metadata (waking the
 * readers that waited for it), then asks the store for chunk 0 under its
 * real id: if nobody has it, the rest of this response fills it; if
 * someone does, the transfer stops. A chunk fetch asks for one chunk's
 * range with If-Match: a 412 means the object changed under us, so the
 * metadata is dropped and the chunk fails: never a mix of versions.
 */
#include "gateway/fetch.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "auth/sigv4.h"
#include "base/clock.h"
#include "base/log.h"
#include "gateway/metrics.h"
#include "gateway/cache.h"
#include "gateway/req.h"
#include "cluster/peer.h"
#include "cluster/placement.h"
#include "gateway/upstream.h"
#include "cluster/cluster.h"
#include "cluster/directory.h"
#include "store/object.h"
#include "store/store.h"

#define ERRBODY_MAX (64 * 1024)
#define RESP_HEADERS_MAX (64 * 1024)

struct fetch {
	unsigned magic;
	struct worker *w;
	struct fetch *prev, *next;   /* the worker's fetches */
	bool meta_kind;              /* learning the object; else one chunk */
	char *bucket, *key;
	char etag[130];              /* chunk fetches: If-Match */
	char *revalidate;            /* meta fetches: If-None-Match */
	uint64_t index, start;       /* chunk index and its first byte */
	uint64_t size;               /* the object's size, as its metadata says */
	struct chunk *c;             /* the chunk being filled (a reference) */
	struct obj_meta *meta;       /* what the meta fetch learnt (chunk 0's origin) */
	struct req *owner;           /* meta fetch: answered with upstream's error */

	CURL *easy;
	struct curl_slist *slist;
	struct up_target target;
	long status;
	struct hdrs resp;
	size_t resp_bytes;
	bool hdrs_done;
	bool discard;                /* the body is not wanted */
	bool cancelled;              /* stopped because nobody wanted the chunk */
	bool no_range;               /* meta fetch of an empty object: a plain GET */
	bool region_retry;           /* send again, signed for the region upstream named */
	bool region_retried;
	unsigned hop;                /* 0: for this node's clients; 1+: for a peer's request */
	bool to_peer;                /* this attempt asks another node, not S3 */
	bool peer_failed;            /* the owner did not answer: S3 from now on */
	struct placement_ask *ask;   /* a directory lookup under way, before the first try */
	char holder[CLUSTER_NAME_MAX]; /* a node the directory says holds it, or "" */
	bool to_holder;              /* this attempt asks that holder */
	bool holder_failed;          /* it failed: the owner next (S3 if that is the holder) */
	bool failed_headers;         /* a response that is not what we asked for */
	bool changed;                /* an answer for another version: as good as a 412 */
	bool uncacheable;            /* meta fetch: an answer the cache cannot keep */
	bool fills_chunk0;           /* meta fetch: its answer is chunk 0 whole */
	struct buf errbody;
	char curl_err[CURL_ERROR_SIZE];
	unsigned attempts;
	ev_timer retry_timer;
};


static uint64_t object_hash(const char *bucket, const char *key)
{
	struct chunk_id oid;
	chunk_id_make(bucket, key, "", 0, &oid);
	return chunk_id_hash(&oid);
}

static void fetch_free(struct fetch *f)
{
	struct worker *w = f->w;
	if (f->prev)
		f->prev->next = f->next;
	else
		w->fetches = f->next;
	if (f->next)
		f->next->prev = f->prev;
	if (f->owner)
		cache_owner_detach(f->owner, f);
	if (f->ask)
		placement_cancel(f->ask);
	if (f->easy)
		curl_easy_cleanup(f->easy);
	curl_slist_free_all(f->slist);
	up_target_fini(&f->target);
	hdrs_fini(&f->resp);
	buf_fini(&f->errbody);
	if (f->c)
		chunk_unref(f->c);
	meta_unref(f->meta);
	free(f->bucket);
	free(f->key);
	free(f->revalidate);
	f->magic = 0;
	free(f);
}

static struct fetch *fetch_new(struct worker *w, const char *bucket, const char *key)
{
	struct fetch *f = calloc(1, sizeof *f);
	if (!f)
		return NULL;
	f->magic = FETCH_MAGIC;
	f->w = w;
	f->bucket = strdup(bucket);
	f->key = strdup(key);
	up_target_init(&f->target);
	hdrs_init(&f->resp);
	buf_init(&f->errbody, ERRBODY_MAX);
	f->next = w->fetches;
	if (w->fetches)
		w->fetches->prev = f;
	w->fetches = f;
	if (!f->bucket || !f->key) {
		fetch_free(f);
		return NULL;
	}
	return f;
}

/* ---- the transfer ----------------------------------------------------- */

static uint64_t chunk_bytes(const struct fetch *f)
{
	return f->w->gw->cfg->chunk_bytes;
}

/* A header value of the response, or NULL. */
static const char *resp_header(const struct fetch *f, const char *name)
{
	return hdrs_get(&f->resp, name);
}

/* "bytes a-b/size" -> a, b, size; */
static bool parse_content_range(const char *v, uint64_t *a, uint64_t *b, uint64_t *size)
{
	unsigned long long x, y, z;
	char tail;
	if (!v || sscanf(v, "bytes %llu-%llu/%llu%c", &x, &y, &z, &tail) != 3 || y < x || y >= z)
		return false;
	*a = x;
	*b = y;
	*size = z;
	return true;
}

static time_t parse_http_date(const char *v)
{
	struct tm tm;
	memset(&tm, 0, sizeof tm);
	if (!v || !strptime(v, "%a, %d %b %Y %H:%M:%S GMT", &tm))
		return 0;
	return timegm(&tm);
}

/* The response headers a hit replays: everything that describes the object,
 * nothing that describes this one response or connection. */
static bool replayed_header(const char *name)
{
	static const char *const dropped[] = {
		"content-length", "content-range", "date", "connection", "keep-alive",
		"transfer-encoding", "x-amz-request-id", "x-amz-id-2", "x-amzn-requestid",
		"server", "accept-ranges", "etag", "proxy-connection", "te", "trailer",
		"upgrade", "x-amz-bucket-region", "access-control-allow-origin", NULL,
	};
	for (int i = 0; dropped[i]; i++)
		if (strcasecmp(name, dropped[i]) == 0)
			return false;
	/* A checksum of the whole object is not the checksum of a range; a
	 * peer's own headers describe its response, not the object. */
	return strncasecmp(name, "x-amz-checksum-", 15) != 0 && strncasecmp(name, "x-larder-", 9) != 0;
}

static int start_transfer(struct fetch *f);

/* Another node, asked path style on its client port: https when ours
 * serves TLS (every node of a cluster is configured alike). */
static int peer_target(const char *addr, bool tls, const char *bucket, const char *key,
                       struct up_target *t)
{
	buf_reset(&t->url);
	buf_reset(&t->host);
	buf_reset(&t->path);
	int rc = buf_puts(&t->host, addr);
	rc = rc ? rc : buf_putc(&t->path, '/');
	rc = rc ? rc : sv4_uri_encode(bucket, strlen(bucket), false, &t->path);
	rc = rc ? rc : buf_putc(&t->path, '/');
	rc = rc ? rc : sv4_uri_encode(key, strlen(key), true, &t->path);
	rc = rc ? rc : buf_printf(&t->url, "%s://%s%s", tls ? "https" : "http", addr,
	                          buf_cstr(&t->path));
	return rc;
}

/* A transfer that could not start outside fetch_*_start: fail its waiters. */
static void start_or_fail(struct fetch *f)
{
	if (start_transfer(f) != 0) {
		if (f->c)
			store_complete(f->w->gw->store, f->c, false, FETCH_ERR_UPSTREAM, NULL);
		if (f->meta_kind && !f->c)
			meta_publish(f->w->gw->meta, f->bucket, f->key, NULL);
		fetch_free(f);
	}
}

static void retry_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	(void)loop;
	(void)revents;
	start_or_fail(t->data);
}

/* The directory answered: a holder to ask first, or nobody. */
static void asked_cb(void *arg, const char *addr)
{
	struct fetch *f = arg;
	f->ask = NULL;
	if (addr)
		snprintf(f->holder, sizeof f->holder, "%s", addr);
	start_or_fail(f);
}

/* The key that routes what f fetches (its owner, its directory entry):
 * chunk_id_hash of its chunk, except for chunk 0 and the first read of an
 * object (which fetches chunk 0), routed by the object's metadata key, so
 * that both go to the same node whether or not the ETag is known. */
static uint64_t dir_key_of(const struct fetch *f)
{
	if (f->c && f->index > 0)
		return chunk_id_hash(&f->c->id);
	return object_hash(f->bucket, f->key);
}

/* The first try. Where it would go to S3 (this node owns the chunk, and
 * the reader is its own client or a peer that came to the owner), ask the
 * placement directory first whether another node holds it already: after
 * a membership change the new owner finds the old copies. Only there: a
 * lookup costs a Redis round trip, small against S3's first byte but not
 * against a peer's, and a node that does not own a chunk asks its owner,
 * who looks. */
static int begin(struct fetch *f)
{
	if (f->w->placement && f->hop < PEER_MAX_HOP) {
		uint64_t key = dir_key_of(f);
		if (!cluster_owner(f->w->gw->cluster, key, NULL, 0) &&
		    (f->ask = placement_ask(f->w->placement, key, asked_cb, f)))
			return 0;
	}
	return start_transfer(f);
}

/* Capped exponential backoff with jitter: 100 ms doubling to 2 s, each
 * delay drawn from its upper half so retries of many chunks spread out. */
static bool schedule_retry(struct fetch *f)
{
	if (f->attempts > f->w->gw->cfg->upstream_retries)
		return false;
	double base = 0.1 * (double)(1u << (f->attempts < 5 ? f->attempts : 5));
	if (base > 2.0)
		base = 2.0;
	double delay = base * (0.5 + 0.5 * ((double)rand() / RAND_MAX));
	log_info("fetch", "%s/%s chunk %" PRIu64 ": upstream %ld, retry %u in %.0f ms", f->bucket,
	         f->key, f->index, f->status, f->attempts, delay * 1000);
	ev_timer_init(&f->retry_timer, retry_cb, delay, 0.);
	f->retry_timer.data = f;
	ev_timer_start(f->w->loop, &f->retry_timer);
	return true;
}

static bool retryable(long status)
{
	return status == 0 || status == 500 || status == 502 || status == 503 || status == 504;
}

/* obj_produce_fn of a meta fetch: the rest of its response fills chunk 0
 * when it is chunk 0's whole range. */
static int claim_chunk0(void *arg, struct chunk *c, uint64_t index)
{
	struct fetch *f = arg;
	if (!f->fills_chunk0)
		return FETCH_ERR_CANCELLED;
	chunk_ref(c);
	f->c = c;
	f->index = index;
	f->start = 0;
	return 0;
}

/* Meta fetch, headers in: what is this object? */
static void learn(struct fetch *f)
{
	struct gw *gw = f->w->gw;
	double now = clock_mono_s();
	if (f->status == 304 && f->revalidate) {
		meta_refresh(gw->meta, f->bucket, f->key, now);
		f->discard = true;
		return;
	}
	uint64_t a = 0, b = 0, size = 0;
	bool ok = false;
	if (f->status == 206)
		ok = parse_content_range(resp_header(f, "Content-Range"), &a, &b, &size) && a == 0;
	else if (f->status == 200 && resp_header(f, "Content-Length"))
		ok = (size = strtoull(resp_header(f, "Content-Length"), NULL, 10), true);
	const char *etag = resp_header(f, "ETag");
	if (!ok || !etag || !*etag || strlen(etag) >= sizeof f->etag ||
	    resp_header(f, "x-amz-server-side-encryption-customer-algorithm")) {
		/* No ETag to name its chunks by (or one past the limit), no size,
		 * or encrypted with a customer's key (which must reach S3 on every
		 * read, whatever this upstream did with it): not cacheable. Its
		 * readers get the pass-through. */
		f->discard = true;
		f->failed_headers = true;
		f->uncacheable = true;
		return;
	}
	struct buf hb;
	buf_init(&hb, RESP_HEADERS_MAX);
	for (size_t i = 0; i < f->resp.n; i++)
		if (replayed_header(f->resp.v[i].name))
			buf_printf(&hb, "%s: %s\n", f->resp.v[i].name, f->resp.v[i].value);
	f->size = size;
	f->meta = meta_new(size, etag, parse_http_date(resp_header(f, "Last-Modified")),
	                   buf_cstr(&hb), now);
	buf_fini(&hb);
	if (!f->meta) {
		f->discard = true;
		f->failed_headers = true;
		return;
	}
	if (f->owner)
		req_set_upstream_status(f->owner, f->status); /* for its access-log line */
	snprintf(f->etag, sizeof f->etag, "%s", etag);
	/* Chunk 0 under its real id, claimed before the metadata is published:
	 * a reader woken by the metadata then joins this fetch instead of
	 * starting its own. */
	if (size > 0) {
		struct obj_ref ref = { f->bucket, f->key, f->meta };
		size_t len0 = obj_chunk_len(size, 0, chunk_bytes(f));
		f->fills_chunk0 = f->status == 206 && b + 1 == len0;
		struct chunk *c = obj_acquire(&gw->objects, &ref, 0, claim_chunk0, f, NULL);
		/* The reader that asked holds chunk 0 from here: a small object's
		 * chunk may complete before that reader gets to it, and admission
		 * may decline to keep it; it must not be fetched twice. */
		if (c && !(f->c == c && f->owner && cache_owner_chunk(f->owner, c)))
			obj_unwant(c, false);
	}
	if (!f->c)
		f->discard = true;
	meta_publish(gw->meta, f->bucket, f->key, f->meta);
}

static size_t on_header(char *data, size_t size, size_t n, void *arg)
{
	struct fetch *f = arg;
	size_t len = size * n;
	assert(f->magic == FETCH_MAGIC);
	if (len >= 5 && strncmp(data, "HTTP/", 5) == 0) {
		hdrs_fini(&f->resp);
		f->resp_bytes = 0;
		const char *sp = memchr(data, ' ', len);
		f->status = sp ? strtol(sp + 1, NULL, 10) : 0;
		return len;
	}
	if (len <= 2) {
		if (f->status < 200)
			return len;
		f->hdrs_done = true;
		/* Signed for the wrong region (S3 names the right one): learn it
		 * and send the request again, once. */
		const char *br = resp_header(f, "x-amz-bucket-region");
		if (br && (f->status == 301 || f->status == 400) && !f->region_retried &&
		    upstream_learn_region(f->w->gw->up, f->bucket, br)) {
			f->region_retry = true;
			f->discard = true;
			return len;
		}
		if (f->meta_kind && !f->meta && !f->c) {
			if (f->status == 206 || f->status == 200 || f->status == 304)
				learn(f);
			else
				f->discard = true; /* an error: kept for the owner, below */
		} else if (f->status == 412) {
			f->discard = true;
		} else if (f->status != 206) {
			f->discard = true;
			if (!retryable(f->status))
				f->failed_headers = true;
		} else {
			uint64_t a, b, total;
			const char *etag = resp_header(f, "ETag");
			if (!parse_content_range(resp_header(f, "Content-Range"), &a, &b, &total) ||
			    a != f->start + atomic_load(&f->c->filled) || b + 1 != f->start + f->c->len) {
				f->discard = true;
				f->failed_headers = true;
			} else if (!etag || strcmp(etag, f->etag) != 0 || total != f->size) {
				/* An upstream (or a proxy, or a peer) that did not honour
				 * If-Match answered for another version: the object
				 * changed, whatever its status says (a peer's answer: that
				 * node failed, see fetch_curl_done). Never these bytes. */
				f->discard = true;
				f->changed = true;
			}
		}
		return len;
	}
	f->resp_bytes += len;
	if (f->resp_bytes > RESP_HEADERS_MAX)
		return 0;
	return hdrs_add_line(&f->resp, data, len) == 0 ? len : 0;
}

static size_t on_body(char *data, size_t size, size_t n, void *arg)
{
	struct fetch *f = arg;
	size_t len = size * n;
	assert(f->magic == FETCH_MAGIC);
	if (f->discard) {
		if (f->region_retry)
			return len;
		if (f->meta_kind && !f->meta && f->status >= 300)
			buf_append(&f->errbody, data, len); /* capped: the rest is dropped */
		return f->meta || f->failed_headers || f->changed || f->status == 304 ? 0 : len;
	}
	if (!f->c)
		return 0;
	/* Nobody wants this chunk any more, and the last reader gave up on it
	 * (its client went away): stop fetching it. */
	if (!obj_wanted(f->c)) {
		f->cancelled = true;
		return 0;
	}
	size_t room = f->c->len - atomic_load(&f->c->filled);
	if (len > room)
		return 0; /* more than the range asked for: refuse it all */
	chunk_append(f->c, data, len);
	return len;
}

static int start_transfer(struct fetch *f)
{
	struct gw *gw = f->w->gw;
	f->attempts++;
	f->status = 0;
	f->hdrs_done = false;
	f->discard = false;
	f->failed_headers = false;
	f->changed = false;
	buf_reset(&f->errbody);
	/* In a cluster, a chunk (or an object's metadata) comes from a node
	 * the directory says holds it, else from its owner node, which fetches
	 * it from S3 once for everybody. */
	char peer[CLUSTER_NAME_MAX];
	f->to_holder = f->holder[0] && !f->holder_failed && f->hop < PEER_MAX_HOP;
	if (f->to_holder)
		snprintf(peer, sizeof peer, "%s", f->holder);
	f->to_peer = f->to_holder ||
	             (gw->cluster && f->hop < PEER_MAX_HOP && !f->peer_failed &&
	              cluster_owner(gw->cluster, dir_key_of(f), peer, sizeof peer) &&
	              !(f->holder_failed && strcmp(peer, f->holder) == 0));
	bool tls = gw->tls_cert != NULL;
	if (f->to_peer ? peer_target(peer, tls, f->bucket, f->key, &f->target) != 0
	               : upstream_target(gw->up, f->bucket, f->key, "", &f->target) != 0)
		return -E2BIG;
	struct hdrs h;
	hdrs_init(&h);
	char range[80];
	range[0] = '\0';
	if (f->meta_kind && !f->c && !f->no_range)
		snprintf(range, sizeof range, "bytes=0-%" PRIu64, chunk_bytes(f) - 1);
	else if (f->meta_kind && !f->c)
		; /* the whole (empty) object */
	else
		snprintf(range, sizeof range, "bytes=%" PRIu64 "-%" PRIu64,
		         f->start + atomic_load(&f->c->filled), f->start + f->c->len - 1);
	int rc = hdrs_add(&h, "Host", buf_cstr(&f->target.host));
	if (range[0])
		rc = rc ? rc : hdrs_add(&h, "Range", range);
	if (f->etag[0])
		rc = rc ? rc : hdrs_add(&h, "If-Match", f->etag);
	else if (f->revalidate)
		rc = rc ? rc : hdrs_add(&h, "If-None-Match", f->revalidate);
	if (f->to_peer)
		/* A holder is asked at the last hop: if it lost the chunk
		 * meanwhile it fetches it from S3 itself rather than asking
		 * its owner, which is us, waiting for it. */
		rc = rc ? rc : peer_sign(gw->cfg->cluster_secret, gw->cfg->node_id, peer, "GET",
		                         buf_cstr(&f->target.path),
		                         f->to_holder ? PEER_MAX_HOP : f->hop + 1, time(NULL), &h);
	else
		rc = rc ? rc : hdrs_add(&h, "X-Amz-Content-SHA256", SV4_EMPTY_SHA256);
	if (!f->to_peer)
		rc = rc ? rc : upstream_sign(gw->up, "GET", &f->target, "", &h);
	if (!rc) {
		curl_slist_free_all(f->slist);
		f->slist = hdrs_to_curl(&h);
		if (!f->slist)
			rc = -ENOMEM;
	}
	hdrs_fini(&h);
	if (rc)
		return rc;
	if (upstream_easy_prepare(&f->easy, gw->up, &f->target, f->slist, on_header, on_body, f,
	                          f->curl_err) != 0)
		return -ENOMEM;
	if (f->to_peer && tls) { /* peers are verified, whatever upstream's settings */
		const char *ca = gw->cfg->cluster_ca_file ? gw->cfg->cluster_ca_file
		                                          : gw->cfg->tls_cert;
		curl_easy_setopt(f->easy, CURLOPT_SSL_VERIFYPEER, 1L);
		curl_easy_setopt(f->easy, CURLOPT_SSL_VERIFYHOST, 2L);
		curl_easy_setopt(f->easy, CURLOPT_CAINFO, ca);
	}
	return curlev_add(f->w->curl, f->easy) == 0 ? 0 : -EIO;
}

struct fetch *fetch_meta_start(struct worker *w, struct req *owner, const char *bucket,
                               const char *key, const char *revalidate)
{
	struct fetch *f = fetch_new(w, bucket, key);
	if (!f)
		return NULL;
	f->meta_kind = true;
	f->owner = owner;
	f->hop = owner ? req_peer_hop(owner) : 0;
	if (revalidate && !(f->revalidate = strdup(revalidate))) {
		f->owner = NULL;
		fetch_free(f);
		return NULL;
	}
	if (begin(f) != 0) {
		f->owner = NULL;
		fetch_free(f);
		return NULL;
	}
	return f;
}

int fetch_chunk_start(struct worker *w, struct chunk *c, const char *bucket, const char *key,
                      const struct obj_meta *m, uint64_t index, unsigned hop)
{
	struct fetch *f = fetch_new(w, bucket, key);
	if (!f)
		return -ENOMEM;
	f->hop = hop;
	chunk_ref(c);
	f->c = c;
	f->index = index;
	f->start = obj_chunk_offset(index, chunk_bytes(f));
	snprintf(f->etag, sizeof f->etag, "%s", m->etag);
	f->size = m->size;
	if (index == 0) {
		meta_ref((struct obj_meta *)m);
		f->meta = (struct obj_meta *)m;
	}
	if (begin(f) != 0) {
		fetch_free(f);
		return -EIO;
	}
	return 0;
}

int fetch_produce(void *arg, struct chunk *c, uint64_t index)
{
	const struct fetch_producer *p = arg;
	return fetch_chunk_start(p->w, c, p->bucket, p->key, p->meta, index, p->hop) == 0
	               ? 0
	               : FETCH_ERR_UPSTREAM;
}

void fetch_disown(struct fetch *f)
{
	f->owner = NULL;
}

/* The chunk is complete: into the tiers, named for the NVMe tier (chunk 0
 * carries the object's metadata, so a restart knows the object). */
static void complete_ok(struct fetch *f)
{
	struct gw *gw = f->w->gw;
	struct buf blob;
	buf_init(&blob, 2 * RESP_HEADERS_MAX);
	struct chunk_origin o = {
		.bucket = f->bucket, .key = f->key, .etag = f->etag, .index = f->index,
	};
	if (f->index == 0 && f->meta && meta_encode(f->meta, &blob) == 0) {
		o.meta = blob.p;
		o.meta_len = blob.len;
	}
	store_complete(gw->store, f->c, true, 0, &o);
	buf_fini(&blob);
	/* If its owner changes or dies, the placement directory will have to
	 * say where it is (cluster/directory.h): fetched as its owner (from S3,
	 * or from a holder), or as a reader's copy from its owner. Chunk 0
	 * goes by its object's metadata key. */
	if (gw->dir) {
		bool as_owner = !f->to_peer || f->to_holder;
		dir_fetched(gw->dir, chunk_id_hash(&f->c->id), f->index == 0 ? dir_key_of(f) : 0,
		            &f->c->id, as_owner,
		            as_owner ? 0 : cluster_member_tag(gw->cluster, buf_cstr(&f->target.host)));
	}
}

void fetch_curl_done(struct fetch *f, CURLcode result)
{
	struct gw *gw = f->w->gw;
	assert(f->magic == FETCH_MAGIC);
	bool meta_only = f->meta_kind && !f->c;
	metrics_upstream_curl(f->easy, f->status, result, f->attempts > 1);
	if (f->to_peer && !f->cancelled &&
	    (f->changed || result != CURLE_OK || f->status == 0 || f->status >= 500 ||
	     f->status == 401 || f->status == 403) &&
	    !(f->c && atomic_load(&f->c->filled) == f->c->len)) {
		/* The node is gone, refused, or broke off: a holder's failure
		 * sends us to the owner, the owner's to S3, from the bytes
		 * already received. So does a node that answered for another
		 * ETag or size: a node honours If-Match (412), so that answer
		 * is the node's fault, not news of a version change; S3 tells. */
		log_info("fetch", "%s/%s: %s node failed (%ld, %s); fetching from %s", f->bucket,
		         f->key, f->to_holder ? "holder" : "owner", f->status,
		         f->changed ? "answered for another ETag or size" : curl_easy_strerror(result),
		         f->to_holder ? "its owner" : "S3");
		if (f->to_holder)
			f->holder_failed = true;
		else
			f->peer_failed = true;
		f->attempts--;
		if (start_transfer(f) == 0)
			return;
	}
	if (f->region_retry) {
		f->region_retry = false;
		f->region_retried = true;
		f->attempts--;
		if (start_transfer(f) == 0)
			return;
	}

	if (meta_only && !f->meta && f->status == 416 && !f->no_range) {
		/* No byte 0: an empty object (or one that just became empty).
		 * Ask for it whole to learn its ETag and headers. */
		f->no_range = true;
		f->attempts--;
		if (start_transfer(f) == 0)
			return;
	}
	if (meta_only && !f->meta && f->uncacheable) {
		if (f->owner)
			cache_owner_pass_through(f->owner);
		meta_publish_failure(gw->meta, f->bucket, f->key, META_NOT_CACHEABLE, clock_mono_s());
		fetch_free(f);
		return;
	}
	if (meta_only && !f->meta) {
		/* Never learnt the object: a 5xx is retried; anything else is
		 * upstream's answer for the owner (a 404, a 403, ...). */
		if ((retryable(f->status) || result != CURLE_OK) && f->status != 304 &&
		    !f->failed_headers && schedule_retry(f))
			return;
		if (f->status == 404 && gw->cfg->negative_ttl_s > 0) {
			struct obj_meta *neg = meta_new_negative(clock_mono_s());
			if (neg) {
				meta_publish(gw->meta, f->bucket, f->key, neg);
				meta_unref(neg);
			}
		} else if (f->status != 304) {
			bool shared = (retryable(f->status) || result != CURLE_OK) && !f->failed_headers;
			if (f->owner)
				cache_owner_upstream_error(f->owner, f->status, &f->resp,
				                           buf_cstr(&f->errbody), f->errbody.len);
			if (shared) /* its waiters fail too, rather than each try again */
				meta_publish_failure(gw->meta, f->bucket, f->key, f->status, clock_mono_s());
			else
				meta_publish(gw->meta, f->bucket, f->key, NULL);
		}
		fetch_free(f);
		return;
	}
	if (!f->c) { /* learnt, chunk 0 is someone else's (or the object is empty) */
		fetch_free(f);
		return;
	}
	size_t filled = atomic_load(&f->c->filled);
	if (filled == f->c->len) {
		complete_ok(f);
	} else if (f->status == 412 || f->changed) {
		log_info("fetch", "%s/%s changed upstream (%s, asked If-Match %s)", f->bucket, f->key,
		         f->changed ? "answer for another ETag or size" : "412", f->etag);
		meta_drop(gw->meta, f->bucket, f->key);
		if (gw->cluster)
			cluster_publish_invalidate(gw->cluster, f->bucket, f->key);
		store_complete(gw->store, f->c, false, FETCH_ERR_CHANGED, NULL);
	} else if (f->cancelled) {
		store_complete(gw->store, f->c, false, FETCH_ERR_CANCELLED, NULL);
	} else if (!f->failed_headers && schedule_retry(f)) {
		return; /* resumes from `filled` */
	} else {
		log_warn("fetch", "%s/%s chunk %" PRIu64 " failed: status %ld, %s", f->bucket, f->key,
		         f->index, f->status, f->curl_err[0] ? f->curl_err : curl_easy_strerror(result));
		store_complete(gw->store, f->c, false, FETCH_ERR_UPSTREAM, NULL);
	}
	fetch_free(f);
}

void fetch_abort_all(struct worker *w)
{
	while (w->fetches) {
		struct fetch *f = w->fetches;
		if (ev_is_active(&f->retry_timer))
			ev_timer_stop(w->loop, &f->retry_timer);
		if (f->easy)
			curlev_remove(w->curl, f->easy);
		if (f->c && atomic_load(&f->c->state) == CHUNK_FILLING)
			store_complete(w->gw->store, f->c, false, FETCH_ERR_CANCELLED, NULL);
		if (f->meta_kind && !f->meta && !f->c)
			meta_publish(w->gw->meta, f->bucket, f->key, NULL);
		fetch_free(f);
	}
}

/*
 * cache.c - GET and HEAD of objects, answered from the chunk cache.
 *
 * A request that qualifies (cache_wants) goes through three steps:
 *   1. metadata: fresh in the meta cache, or learnt by a meta fetch that
 *      also brings chunk 0 (readers of the same cold object wait for one);
 *   2. the answer S3 would give from that metadata alone: conditionals
 *      (RFC 9110 section 13.2.2, with S3's precedence), Range (206, or
 *      416 InvalidRange), response-* overrides, the object's own headers;
 *   3. the body, chunk after chunk: each chunk comes from RAM, from NVMe
 *      through the store's I/O threads, or from upstream (a chunk fetch,
 *      joined by every other reader of it: coalescing). Bytes go to the
 *      client as they arrive; the next chunks are fetched ahead.
 * The policy was checked before any of this (proxy.c), so a hit never
 * bypasses it.
 *
 * GET/HEAD ?partNumber=N (current CRTs read part 1 first) goes upstream
 * until an answer for that part told its bytes (Content-Range, and
 * x-amz-mp-parts-count for an object uploaded in parts); from then on it is
 * a 206 of those bytes from the cache, with the same headers.
 *
 * What is not cached, and goes through the pass-through instead: requests
 * with versionId or other sub-resources, SSE-C (the customer's
 * key must reach S3 every time), and objects whose first answer cannot be
 * kept (no usable ETag or size, or an SSE-C answer: fetch.c decides, and
 * cache_owner_pass_through / the waiters hand the request back to proxy.c).
 * A multi-range request is served the whole object, as S3 does.
 *
 * x-amz-checksum-mode: ENABLED (current SDKs send it on every GetObject)
 * is served from the cache. S3 returns no whole-object checksum for the
 * ranged GETs that fill the cache, so the object's x-amz-checksum-* headers
 * are learnt from the first HEAD with the mode (passed through once; a CRT
 * validating checksums sends one first), or from a whole GET that went
 * upstream; after that a HEAD or whole GET with the mode carries them, as
 * at S3, and a range or part never does. Until then an answer has none and
 * an SDK skips its validation. Cached bytes are guarded by If-Match per
 * chunk and a CRC32C per NVMe entry as well.
 */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <time.h>
#include <linux/sockios.h>

#include "base/clock.h"
#include "base/log.h"
#include "gateway/fetch.h"
#include "gateway/listcache.h"
#include "gateway/range.h"
#include "gateway/req.h"
#include "cluster/cluster.h"
#include "store/store.h"

/* ---- which requests ----------------------------------------------------- */

/* Query parameters a cached GET may carry: the response overrides (they
 * change headers, not bytes), the SDKs' x-id marker, and partNumber (see
 * part_number). */
static bool cacheable_query(const char *q)
{
	while (q && *q) {
		size_t len = strcspn(q, "&");
		size_t klen = strcspn(q, "=&");
		bool ok = klen == 0 || (klen > 9 && strncmp(q, "response-", 9) == 0) ||
		          (klen == 4 && strncmp(q, "x-id", 4) == 0) ||
		          (klen == 10 && strncmp(q, "partNumber", 10) == 0) ||
		          (klen > 6 && strncasecmp(q, "X-Amz-", 6) == 0) ||
		          (klen == 14 && strncmp(q, "AWSAccessKeyId", 14) == 0) ||
		          (klen == 9 && strncmp(q, "Signature", 9) == 0) ||
		          (klen == 7 && strncmp(q, "Expires", 7) == 0);
		if (!ok)
			return false;
		q += len;
		if (*q == '&')
			q++;
	}
	return true;
}

/* ?partNumber=N: N in 1..10000, or 0 when absent; -1 when not valid,
 * or with a Range (S3 answers those with an error: pass-through). */
static long part_number(struct req *r)
{
	struct buf v;
	buf_init(&v, 64);
	long n = 0;
	int rc = s3_query_get(r->query, "partNumber", &v);
	if (rc == 1) {
		char *end;
		n = strtol(buf_cstr(&v), &end, 10);
		if (*end || end == buf_cstr(&v) || n < 1 || n > 10000 || req_header(r, "Range"))
			n = -1;
	} else if (rc < 0) {
		n = -1;
	}
	buf_fini(&v);
	return n;
}

bool cache_wants(struct req *r)
{
	struct gw *gw = r->w->gw;
	if (!gw->store || r->s3.target != S3T_OBJECT || r->body != BODY_NONE)
		return false;
	bool head = strcmp(r->method, "HEAD") == 0;
	if (!head && strcmp(r->method, "GET") != 0)
		return false;
	if (!cacheable_query(r->query))
		return false;
	long part = part_number(r);
	if (part < 0)
		return false;
	if (req_header(r, "x-amz-server-side-encryption-customer-algorithm") ||
	    req_header(r, "x-amz-server-side-encryption-customer-key") ||
	    req_header(r, "x-amz-server-side-encryption-customer-key-MD5"))
		return false;
	r->cache.want_range = range_parse(req_header(r, "Range"), &r->cache.range) == 1;
	r->cache.head = head;
	r->cache.part = (uint32_t)part;
	const char *mode = req_header(r, "x-amz-checksum-mode");
	r->cache.want_checksums = mode && strcasecmp(mode, "ENABLED") == 0;
	return true;
}

static void release_chunks(struct req *r);

/* A part read goes upstream until the part's bytes are known: S3 alone
 * knows where the parts of a multipart object begin. So does a HEAD with
 * x-amz-checksum-mode until the object's checksums are known: the ranged
 * GETs that fill the cache never carry them. The answer teaches them
 * (cache_learn); the next such read is the cache's. A whole GET with the
 * mode is not sent upstream for them (its bytes would not be cached): it
 * gets them once a HEAD (a CRT validating checksums sends one first)
 * taught them. */
bool cache_passes(struct req *r)
{
	struct cread *c = &r->cache;
	const struct obj_meta *m = c->meta;
	uint64_t first, last;
	if (!m || m->negative || c->has_uerr || r->has_err)
		return c->pass_through;
	bool part_unknown = c->part && !meta_part(m, c->part, &first, &last);
	bool sums_unknown = c->want_checksums && c->head && !c->part && !c->want_range &&
	                    !m->checksums;
	if (part_unknown || sums_unknown) {
		/* chunk 0, which came with the metadata, stays wanted */
		release_chunks(r);
		c->pass_through = true;
	}
	return c->pass_through;
}

/* x-amz-checksum-* lines of upstream's answer (its Content-Length is
 * r->resp_len, which proxy.c parsed just before). */
static void learn_checksums(struct req *r)
{
	const char *etag = hdrs_get(&r->uresp, "ETag");
	uint64_t size = r->resp_len;
	if (!etag || size == MHD_SIZE_UNKNOWN)
		return;
	struct buf lines;
	buf_init(&lines, 4096);
	int rc = 0;
	for (size_t i = 0; i < r->uresp.n && !rc; i++)
		if (strncasecmp(r->uresp.v[i].name, "x-amz-checksum-", 15) == 0)
			rc = buf_printf(&lines, "%s: %s\n", r->uresp.v[i].name, r->uresp.v[i].value);
	if (!rc)
		meta_learn_checksums(r->w->gw->meta, r->s3.bucket, buf_cstr(&r->s3.key), etag,
		                     size, buf_cstr(&lines));
	buf_fini(&lines);
}

void cache_learn(struct req *r)
{
	struct gw *gw = r->w->gw;
	if (!gw->meta)
		return;
	/* a whole object's answer (never a range's or a part's) */
	if (r->cache.want_checksums && r->ustatus == 200 && !r->cache.part &&
	    !req_header(r, "Range"))
		learn_checksums(r);
	if (!r->cache.part || r->ustatus != 206)
		return;
	const char *cr = hdrs_get(&r->uresp, "Content-Range");
	const char *etag = hdrs_get(&r->uresp, "ETag");
	const char *count = hdrs_get(&r->uresp, "x-amz-mp-parts-count");
	uint64_t first, last, size;
	unsigned long n = count ? strtoul(count, NULL, 10) : 0;
	if (!cr || !etag || n > 10000 ||
	    sscanf(cr, "bytes %" SCNu64 "-%" SCNu64 "/%" SCNu64, &first, &last, &size) != 3 ||
	    first > last || last >= size)
		return;
	meta_learn_part(gw->meta, r->s3.bucket, buf_cstr(&r->s3.key), etag, size, r->cache.part,
	                first, last, (uint32_t)n);
}

/* ---- waking ----------------------------------------------------------- */

/* chunk_waiter.wake: runs on whichever thread changed the chunk or the
 * metadata; only queues the request for its own worker. */
static void waiter_wake(void *arg)
{
	struct req *r = arg;
	struct worker *w = r->w;
	pthread_mutex_lock(&w->wake_lock);
	if (!r->cache.wake_queued) {
		r->cache.wake_queued = true;
		r->cache.wake_next = w->wake_head;
		w->wake_head = r;
	}
	pthread_mutex_unlock(&w->wake_lock);
	ev_async_send(w->loop, &w->wake_async);
}

static void resolve(struct req *r);
static bool over_budget(const struct req *r, uint64_t extra);

void cache_wake_cb(struct ev_loop *loop, ev_async *a, int revents)
{
	struct worker *w = a->data;
	(void)loop;
	(void)revents;
	pthread_mutex_lock(&w->wake_lock);
	struct req *list = w->wake_head;
	w->wake_head = NULL;
	for (struct req *r = list; r; r = r->cache.wake_next)
		r->cache.wake_queued = false;
	pthread_mutex_unlock(&w->wake_lock);
	while (list) {
		struct req *r = list;
		list = r->cache.wake_next;
		if (!r->conn)
			continue;
		if (r->cache.ask.waiting) {
			r->cache.ask.waiting = false;
			resolve(r);
		}
		if (r->cache.chunk_waiting) {
			chunk_unwait(r->cache.wait_chunk, &r->cache.waiter);
			r->cache.chunk_waiting = false;
		}
		req_wake(r);
	}
}

/* ---- step 1: metadata --------------------------------------------------- */

/* obj_load_fn: this request learns the object with a meta fetch. */
static int start_meta_fetch(void *arg, const char *revalidate)
{
	struct req *r = arg;
	struct cread *c = &r->cache;
	c->meta_loaded = true;
	/* Learning brings chunk 0: not past the memory bound. */
	if (over_budget(r, r->w->gw->objects.chunk_bytes))
		return -EBUSY;
	c->meta_fetch = fetch_meta_start(r->w, r, r->s3.bucket, buf_cstr(&r->s3.key), revalidate);
	return c->meta_fetch ? 0 : -EIO;
}

/* Finds the object's metadata, or starts learning it, or waits. */
static void resolve(struct req *r)
{
	struct gw *gw = r->w->gw;
	struct cread *c = &r->cache;
	for (int tries = 0; tries < 3 && !c->meta && !c->has_uerr && !c->pass_through && !r->has_err;
	     tries++) {
		long st = 0;
		switch (obj_meta_step(&gw->objects, r->s3.bucket, buf_cstr(&r->s3.key), &c->ask,
		                      start_meta_fetch, r, clock_mono_s(), &c->meta, &st)) {
		case OBJ_META_READY:
			return;
		case OBJ_META_WAIT:
			c->meta_loaded = true;
			return;
		case OBJ_META_LOADING: /* this request learns it, then waits like the others */
			continue;
		case OBJ_META_NO_LOAD:
			req_fail(r, st == -EBUSY ? S3E_SLOW_DOWN : S3E_SERVICE_UNAVAILABLE, NULL);
			return;
		case OBJ_META_FAILED: /* the fetch it waited for gave up: so does this reader */
			if (st == META_NOT_CACHEABLE)
				c->pass_through = true;
			else
				req_fail(r, st == 503 ? S3E_SLOW_DOWN : S3E_SERVICE_UNAVAILABLE, NULL);
			return;
		}
	}
}

void cache_owner_detach(struct req *owner, struct fetch *f)
{
	if (owner->cache.meta_fetch == f)
		owner->cache.meta_fetch = NULL;
}

bool cache_owner_chunk(struct req *owner, struct chunk *c)
{
	if (owner->cache.cur)
		return false;
	owner->cache.cur = c;
	owner->cache.cur_index = 0;
	return true;
}

void cache_owner_pass_through(struct req *owner)
{
	owner->cache.pass_through = true;
}

void cache_owner_upstream_error(struct req *owner, long status, const struct hdrs *h,
                                const char *body, size_t len)
{
	struct cread *c = &owner->cache;
	if (c->has_uerr || !owner->conn)
		return;
	if (status == 0) { /* never reached upstream */
		req_fail(owner, S3E_SERVICE_UNAVAILABLE, NULL);
		return;
	}
	c->has_uerr = true;
	c->uerr_status = status;
	hdrs_init(&c->uerr_headers);
	for (size_t i = 0; i < h->n; i++)
		hdrs_add(&c->uerr_headers, h->v[i].name, h->v[i].value);
	c->uerr_body = malloc(len ? len : 1);
	if (c->uerr_body)
		memcpy(c->uerr_body, body, len);
	c->uerr_len = c->uerr_body ? len : 0;
}

void cache_begin(struct req *r)
{
	struct cread *c = &r->cache;
	c->active = true;
	c->waiter.wake = waiter_wake;
	c->waiter.arg = r;
	c->ask.waiter = &c->waiter;
	c->ask.share_failures = true;
	resolve(r);
}

/* ---- step 2: the answer from metadata ----------------------------------- */

static time_t http_date(const char *v)
{
	struct tm tm;
	memset(&tm, 0, sizeof tm);
	if (!v || !strptime(v, "%a, %d %b %Y %H:%M:%S GMT", &tm))
		return (time_t)-1;
	return timegm(&tm);
}

/* If-Match / If-None-Match lists: "*", or quoted ETags separated by commas. */
static bool etag_listed(const char *list, const char *etag)
{
	const char *bare = etag[0] == '"' ? etag + 1 : etag;
	size_t blen = strlen(bare);
	if (blen && bare[blen - 1] == '"')
		blen--;
	for (const char *p = list; *p;) {
		while (*p == ' ' || *p == ',')
			p++;
		if (*p == '*')
			return true;
		if (strncmp(p, "W/", 2) == 0)
			p += 2;
		const char *q = p;
		if (*q == '"')
			q++;
		size_t n = strcspn(q, "\",");
		if (n == blen && strncmp(q, bare, n) == 0)
			return true;
		p = q + n;
		if (*p == '"')
			p++;
	}
	return false;
}

/* 0: proceed; 304 or 412: answer that (S3's precedence, see GetObject). */
static int preconditions(struct req *r, const struct obj_meta *m)
{
	const char *im = req_header(r, "If-Match");
	const char *inm = req_header(r, "If-None-Match");
	time_t ius = http_date(req_header(r, "If-Unmodified-Since"));
	time_t ims = http_date(req_header(r, "If-Modified-Since"));
	if (im) {
		if (!etag_listed(im, m->etag))
			return 412;
	} else if (ius != (time_t)-1 && m->last_modified && m->last_modified > ius) {
		return 412;
	}
	if (inm) {
		if (etag_listed(inm, m->etag))
			return 304;
	} else if (ims != (time_t)-1 && m->last_modified && m->last_modified <= ims) {
		return 304;
	}
	return 0;
}

/* Stored header lines ("name: value\n": obj_meta.headers, .checksums) as
 * headers of resp, but for the names in skip (NULL entries ignored). */
static void add_header_lines(struct MHD_Response *resp, const char *lines,
                             const char *const *skip, size_t nskip)
{
	for (const char *p = lines; *p;) {
		const char *nl = strchr(p, '\n');
		size_t len = nl ? (size_t)(nl - p) : strlen(p);
		const char *colon = memchr(p, ':', len);
		if (colon) {
			char name[256];
			size_t n = (size_t)(colon - p);
			bool skipped = n >= sizeof name;
			if (!skipped) {
				memcpy(name, p, n);
				name[n] = '\0';
				for (size_t i = 0; i < nskip; i++)
					skipped |= skip[i] && strcasecmp(name, skip[i]) == 0;
			}
			const char *val = colon + 1;
			while (*val == ' ')
				val++;
			char *value = strndup(val, len - (size_t)(val - p));
			if (!skipped && value)
				req_add_response_header(resp, name, value);
			free(value);
		}
		p += len + (nl ? 1 : 0);
	}
}

/* The object's headers, replayed; response-* overrides win. */
static void add_object_headers(struct req *r, struct MHD_Response *resp, const struct obj_meta *m,
                               bool full)
{
	static const struct { const char *param, *header; } overrides[] = {
		{ "response-content-type", "Content-Type" },
		{ "response-content-language", "Content-Language" },
		{ "response-expires", "Expires" },
		{ "response-cache-control", "Cache-Control" },
		{ "response-content-disposition", "Content-Disposition" },
		{ "response-content-encoding", "Content-Encoding" },
	};
	struct buf v;
	buf_init(&v, 8192);
	bool overridden[6] = { false };
	for (size_t i = 0; i < 6; i++) {
		buf_reset(&v);
		if (s3_query_get(r->query, overrides[i].param, &v) == 1) {
			MHD_add_response_header(resp, overrides[i].header, buf_cstr(&v));
			overridden[i] = true;
		}
	}
	buf_fini(&v);
	if (full) {
		const char *skip[6] = { NULL };
		for (size_t i = 0; i < 6; i++)
			skip[i] = overridden[i] ? overrides[i].header : NULL;
		add_header_lines(resp, m->headers, skip, 6);
	} else if (m->last_modified) {
		char date[64];
		struct tm tm;
		gmtime_r(&m->last_modified, &tm);
		strftime(date, sizeof date, "%a, %d %b %Y %H:%M:%S GMT", &tm);
		MHD_add_response_header(resp, "Last-Modified", date);
	}
	MHD_add_response_header(resp, "ETag", m->etag);
}

/* libmicrohttpd's buffer for a body copied out of the chunks. */
#define BODY_BLOCK (256 * 1024)

static uint64_t chunk_size(const struct req *r)
{
	return r->w->gw->objects.chunk_bytes;
}

/* The version this request reads. */
static struct obj_ref obj_of(const struct req *r)
{
	return (struct obj_ref){ r->s3.bucket, buf_cstr(&r->s3.key), r->cache.meta };
}

/* Whether every chunk of [start, end] is held (RAM or NVMe): a hit. */
static bool all_held(struct req *r, const struct obj_meta *m)
{
	if (r->cache.head || m->size == 0)
		return true;
	struct obj_ref ref = obj_of(r);
	uint64_t first, last;
	if (!obj_chunk_span(m->size, chunk_size(r), r->cache.start, r->cache.end, &first, &last))
		return true;
	for (uint64_t i = first; i <= last; i++) {
		struct chunk_id id;
		obj_chunk_id(&ref, i, &id);
		if (!store_holds(r->w->gw->store, &id))
			return false;
	}
	return true;
}

static ssize_t read_body(void *cls, uint64_t pos, char *out, size_t max);
static struct chunk *chunk_for(struct req *r, uint64_t i);
static struct MHD_Response *zero_copy_response(struct req *r);

/* Whether chunk i, found failed, may be fetched again: three times per
 * chunk (not per response, so a read meeting many corrupt NVMe entries
 * is not cut short). */
static bool refetch_allowed(struct cread *c, uint64_t i)
{
	if (c->refetch_index != i + 1) {
		c->refetch_index = i + 1;
		c->refetches = 0;
	}
	return c->refetches++ < 3;
}

static void body_done(void *cls)
{
	req_unref(cls);
}

static enum MHD_Result respond_s3(struct req *r, enum s3err e, const struct obj_meta *m)
{
	req_fail(r, e, NULL);
	if (e == S3E_INVALID_RANGE && m) { /* S3 names the range asked for and the size */
		char size[24];
		snprintf(size, sizeof size, "%" PRIu64, m->size);
		const char *range = req_header(r, "Range");
		req_err_element(r, "RangeRequested", range ? range : "");
		req_err_element(r, "ActualObjectSize", size);
		r->err_sized = true;
		r->err_object_size = m->size;
	}
	return req_respond_error(r);
}

static enum MHD_Result respond_upstream_error(struct req *r)
{
	struct cread *c = &r->cache;
	struct MHD_Response *resp = MHD_create_response_from_buffer(
		c->uerr_len, c->uerr_body ? c->uerr_body : (char *)"", MHD_RESPMEM_MUST_COPY);
	if (!resp)
		return MHD_NO;
	for (size_t i = 0; i < c->uerr_headers.n; i++) {
		const char *n = c->uerr_headers.v[i].name;
		if (strcasecmp(n, "content-length") && strcasecmp(n, "transfer-encoding") &&
		    strcasecmp(n, "connection") && strcasecmp(n, "keep-alive") &&
		    strcasecmp(n, "content-range"))
			MHD_add_response_header(resp, n, c->uerr_headers.v[i].value);
	}
	if (!hdrs_get(&c->uerr_headers, "x-amz-request-id"))
		MHD_add_response_header(resp, "x-amz-request-id", r->id);
	MHD_add_response_header(resp, "x-larder-cache", "miss");
	req_add_common_headers(r, resp);
	r->ustatus = c->uerr_status;
	r->status_sent = (int)c->uerr_status;
	enum MHD_Result ret = MHD_queue_response(r->conn, (unsigned)c->uerr_status, resp);
	MHD_destroy_response(resp);
	r->responded = true;
	return ret;
}

enum MHD_Result cache_respond(struct req *r)
{
	struct cread *c = &r->cache;
	if (r->has_err)
		return req_respond_error(r);
	if (c->has_uerr)
		return respond_upstream_error(r);
	if (!c->meta) {
		req_suspend(r); /* woken when the metadata is known */
		return MHD_YES;
	}
	const struct obj_meta *m = c->meta;
	if (m->negative)
		return respond_s3(r, S3E_NO_SUCH_KEY, NULL);

	int pre = preconditions(r, m);
	if (pre == 412)
		return respond_s3(r, S3E_PRECONDITION_FAILED, m);

	unsigned status = 200;
	c->start = 0;
	c->end = m->size ? m->size - 1 : 0;
	if (pre == 0 && c->want_range) {
		if (range_resolve(&c->range, m->size, &c->start, &c->end) == RANGE_UNSATISFIABLE)
			return respond_s3(r, S3E_INVALID_RANGE, m);
		status = 206;
	}
	if (pre == 0 && c->part) { /* known: cache_passes sent it upstream otherwise */
		if (!meta_part(m, c->part, &c->start, &c->end))
			return respond_s3(r, S3E_INTERNAL, NULL);
		status = 206;
	}
	uint64_t len = m->size ? c->end - c->start + 1 : 0;
	if (pre == 304) {
		status = 304;
		len = 0;
	}
	c->pos = c->start;

	/* Headers wait for the first chunk: its bytes are the time to first
	 * byte anyway, and its fate decides the answer. A version change seen
	 * there (412 on If-Match) means learning the object again and
	 * answering with the new version, rather than cutting a response
	 * already announced with the old ETag. */
	if (!c->head && status != 304 && len > 0) {
		uint64_t first = obj_chunk_index(c->start, chunk_size(r));
		struct chunk *ch = chunk_for(r, first);
		if (!ch)
			return respond_s3(r, c->busy ? S3E_SLOW_DOWN : S3E_INTERNAL, NULL);
		size_t filled = atomic_load_explicit(&ch->filled, memory_order_acquire);
		int state = atomic_load(&ch->state);
		uint64_t off = c->start - obj_chunk_offset(c->cur_index, chunk_size(r));
		if (state == CHUNK_FAILED) {
			int reason = ch->fail_reason;
			release_chunks(r);
			if (reason == FETCH_ERR_CHANGED && c->restarts++ < 2) {
				meta_unref(c->meta);
				c->meta = NULL;
				c->meta_loaded = true;
				resolve(r);
				return cache_respond(r);
			}
			if (reason != FETCH_ERR_UPSTREAM &&
			    refetch_allowed(c, first))
				return cache_respond(r);
			return respond_s3(r, S3E_SERVICE_UNAVAILABLE, NULL);
		}
		if (state == CHUNK_FILLING && filled <= off) {
			c->wait_chunk = ch;
			c->chunk_waiting = true;
			chunk_wait(ch, &c->waiter, filled);
			req_suspend(r);
			return MHD_YES;
		}
	}
	/* A full RAM hit goes out as an iovec over the chunks; that it could is
	 * itself the proof of the hit, so the chunks are looked up once. */
	struct MHD_Response *resp = NULL;
	bool hit;
	if (!c->meta_loaded && !c->miss && !c->head && status != 304 && len > 0 &&
	    (resp = zero_copy_response(r)) != NULL)
		hit = true;
	else
		hit = !c->meta_loaded && !c->miss && (status == 304 || all_held(r, m));
	c->miss = !hit;

	if (resp) {
		c->pos = c->end + 1; /* all of it handed over */
	} else if (c->head || status == 304 || len == 0) {
		/* No body: MHD still announces a HEAD's length from the size given. */
		resp = MHD_create_response_from_callback(status == 304 ? 0 : len, 4096, read_body, r,
		                                         body_done);
	} else {
		resp = MHD_create_response_from_callback(len, BODY_BLOCK, read_body, r, body_done);
	}
	if (!resp)
		return MHD_NO;
	if (c->pos <= c->end || len == 0)
		req_ref(r); /* the reader callback's; an iovec response holds chunks instead */
	add_object_headers(r, resp, m, status != 304);
	if (status != 304)
		MHD_add_response_header(resp, "Accept-Ranges", "bytes");
	if (status == 206) {
		char cr[96];
		snprintf(cr, sizeof cr, "bytes %" PRIu64 "-%" PRIu64 "/%" PRIu64, c->start, c->end,
		         m->size);
		MHD_add_response_header(resp, "Content-Range", cr);
	}
	if (status == 200 && c->want_checksums && !c->part && m->checksums)
		add_header_lines(resp, m->checksums, NULL, 0); /* the checksums learnt */
	if (c->part && m->parts_count) {
		char n[16];
		snprintf(n, sizeof n, "%" PRIu32, m->parts_count);
		MHD_add_response_header(resp, "x-amz-mp-parts-count", n);
	}
	MHD_add_response_header(resp, "x-amz-request-id", r->id);
	MHD_add_response_header(resp, "x-larder-cache", hit ? "hit" : "miss");
	req_add_common_headers(r, resp);
	r->status_sent = (int)status;
	enum MHD_Result ret = MHD_queue_response(r->conn, status, resp);
	MHD_destroy_response(resp);
	r->responded = true;
	return ret;
}

/* ---- step 3: the body ------------------------------------------------- */

static struct chunk *get_chunk(struct req *r, uint64_t i);

/* The chunks an iovec response points into, released when MHD is done. */
struct iov_hold {
	unsigned n;
	struct chunk *c[];
};

static void iov_done(void *cls)
{
	struct iov_hold *h = cls;
	for (unsigned k = 0; k < h->n; k++)
		obj_unwant(h->c[k], false);
	free(h);
}

/* A hit whose chunks are all READY in RAM goes out as an iovec over the
 * chunk buffers themselves: MHD writes them with writev, no copy. NULL
 * when some chunk is not in RAM (the reader callback serves it). */
static struct MHD_Response *zero_copy_response(struct req *r)
{
	struct cread *c = &r->cache;
	uint64_t cs = chunk_size(r), first, last;
	if (!obj_chunk_span(c->meta->size, cs, c->start, c->end, &first, &last) ||
	    last - first >= 4096)
		return NULL;
	unsigned n = (unsigned)(last - first + 1);
	struct iov_hold *h = malloc(sizeof *h + n * sizeof h->c[0]);
	struct MHD_IoVec *iov = calloc(n, sizeof *iov);
	if (!h || !iov) {
		free(h);
		free(iov);
		return NULL;
	}
	h->n = 0;
	bool ok = true;
	for (uint64_t i = first; i <= last && ok; i++) {
		struct chunk *ch = get_chunk(r, i);
		if (!ch)
			break;
		h->c[h->n++] = ch;
		ok = atomic_load(&ch->state) == CHUNK_READY;
		uint64_t from = i == first ? c->start - obj_chunk_offset(i, cs) : 0;
		uint64_t to = i == last ? c->end - obj_chunk_offset(i, cs) + 1 : ch->len;
		iov[i - first].iov_base = ch->data + from;
		iov[i - first].iov_len = (size_t)(to - from);
	}
	struct MHD_Response *resp = NULL;
	if (ok && h->n == n)
		resp = MHD_create_response_from_iovec(iov, n, iov_done, h);
	free(iov);
	if (!resp)
		iov_done(h);
	else
		r->bytes_out += c->end - c->start + 1;
	return resp;
}

/* Lets go of the chunks held, saying whether this reader gave up on them. */
static void release_chunks_as(struct req *r, bool gave_up)
{
	struct cread *c = &r->cache;
	if (c->cur)
		obj_unwant(c->cur, gave_up);
	c->cur = NULL;
	for (unsigned k = 0; k < READAHEAD_MAX; k++)
		if (c->ahead[k]) {
			obj_unwant(c->ahead[k], gave_up);
			c->ahead[k] = NULL;
		}
}

static void release_chunks(struct req *r)
{
	release_chunks_as(r, false);
}

/* Whether chunk memory (the RAM tier, fetches, read-ahead and what readers
 * hold, process-wide) plus extra would pass its bound: the RAM tier's size
 * plus LARDER_INFLIGHT_SIZE (0: the tier's size again; never less than two
 * chunks, so one reader always gets through). */
static bool over_budget(const struct req *r, uint64_t extra)
{
	const struct cfg *cfg = r->w->gw->cfg;
	uint64_t budget = cfg->inflight_bytes ? cfg->inflight_bytes : cfg->ram_cache_bytes;
	if (budget < 2 * (uint64_t)cfg->chunk_bytes)
		budget = 2 * (uint64_t)cfg->chunk_bytes;
	return chunk_live_bytes() + extra > cfg->ram_cache_bytes + budget;
}

/* obj_produce_fn of a reader: a chunk fetch, unless chunk memory is at its
 * bound before the reader answered. */
struct producing {
	struct req *r;
	bool declined;
};

static int produce(void *arg, struct chunk *ch, uint64_t i)
{
	struct producing *p = arg;
	struct req *r = p->r;
	if (!r->responded && over_budget(r, 0)) {
		p->declined = true;
		return FETCH_ERR_CANCELLED;
	}
	r->cache.miss = true;
	struct fetch_producer fp = { r->w, r->s3.bucket, buf_cstr(&r->s3.key), r->cache.meta,
	                             r->peer_hop };
	return fetch_produce(&fp, ch, i);
}

/* A want of chunk i of the object, fetching it if nobody has it.
 * NULL also when a fetch would pass the memory bound before this reader
 * answered (c->busy: it gets 503 SlowDown); a reader halfway through its
 * response still gets its next chunk, one per connection. */
static struct chunk *get_chunk(struct req *r, uint64_t i)
{
	struct obj_ref ref = obj_of(r);
	struct producing p = { r, false };
	struct chunk *ch = obj_acquire(&r->w->gw->objects, &ref, i, produce, &p, NULL);
	if (ch && p.declined) {
		obj_unwant(ch, false);
		r->cache.busy = true;
		return NULL;
	}
	return ch;
}

/* Bytes handed to the kernel for this client that it has not taken yet
 * (the socket's send queue: several MiB that a client that stopped reading
 * still seems to have taken). 0 when unknown. */
static uint64_t unsent_bytes(const struct req *r)
{
#ifdef SIOCOUTQ
	const union MHD_ConnectionInfo *ci =
		r->conn ? MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD) : NULL;
	int queued = 0;
	if (ci && ioctl(ci->connect_fd, SIOCOUTQ, &queued) == 0 && queued > 0)
		return (uint64_t)queued;
#else
	(void)r;
#endif
	return 0;
}

/* How many chunks to keep ahead of the client: as many as it has shown it
 * reads. One at first, one more for every 1/(4 x LARDER_READAHEAD) of a
 * chunk its client took (bytes sent minus the socket's send queue and
 * libmicrohttpd's buffer), so a client that reads has the whole read-ahead
 * once it took a quarter chunk (what readahead 8 bought for a cold shard
 * is kept: a window that grew per whole chunk cost a 64 MiB read 20%), and
 * one that stops holds two chunks, not 1 + LARDER_READAHEAD. */
static unsigned ahead_wanted(const struct req *r)
{
	const struct cread *c = &r->cache;
	unsigned n = r->w->gw->cfg->readahead_chunks;
	if (n > READAHEAD_MAX)
		n = READAHEAD_MAX;
	if (c->window >= n)
		return n; /* it never shrinks: no need to ask the kernel */
	uint64_t sent = c->pos - c->start, unsent = unsent_bytes(r) + BODY_BLOCK;
	uint64_t taken = sent > unsent ? sent - unsent : 0;
	uint64_t step = chunk_size(r) / (4 * (n ? n : 1));
	uint64_t want = 1 + taken / (step ? step : 1);
	return want < n ? (unsigned)want : n;
}

/* Keeps the next chunks of the range in flight (bounded, in parallel), so
 * one client reading a large object gets several upstream connections:
 * n of them (ahead_wanted, which the caller asked once). None is started
 * while chunk memory is at its bound: it is fetched when the reader gets
 * there. */
static void read_ahead(struct req *r, uint64_t i, unsigned n)
{
	struct cread *c = &r->cache;
	uint64_t cs = chunk_size(r), last = obj_chunk_index(c->end, cs);
	c->window = n;
	for (unsigned k = 0; k < READAHEAD_MAX; k++)
		if (c->ahead[k] && (c->ahead_index[k] <= i || c->ahead_index[k] > i + n)) {
			obj_unwant(c->ahead[k], false);
			c->ahead[k] = NULL;
		}
	for (uint64_t j = i + 1; j <= last && j <= i + n; j++) {
		unsigned free_slot = READAHEAD_MAX;
		bool have = false;
		for (unsigned k = 0; k < READAHEAD_MAX; k++) {
			if (c->ahead[k] && c->ahead_index[k] == j)
				have = true;
			else if (!c->ahead[k] && free_slot == READAHEAD_MAX)
				free_slot = k;
		}
		if (have || free_slot == READAHEAD_MAX)
			continue;
		if (over_budget(r, cs))
			break;
		c->ahead[free_slot] = get_chunk(r, j);
		c->ahead_index[free_slot] = j;
	}
}

/* Moves the reader to chunk i, taking it from the read-ahead if there. */
static struct chunk *chunk_for(struct req *r, uint64_t i)
{
	struct cread *c = &r->cache;
	if (c->cur && c->cur_index == i) {
		/* Handed over by the fetch that learnt the object: start the
		 * read-ahead now; widen it as the client reads. */
		if (!c->head) {
			unsigned n = ahead_wanted(r); /* one SIOCOUTQ per body block at most */
			if (c->ahead_from != i + 1 || n > c->window) {
				c->ahead_from = i + 1;
				read_ahead(r, i, n);
			}
		}
		return c->cur;
	}
	if (c->cur)
		obj_unwant(c->cur, false); /* read through: done with it */
	c->cur = NULL;
	for (unsigned k = 0; k < READAHEAD_MAX; k++)
		if (c->ahead[k] && c->ahead_index[k] == i) {
			c->cur = c->ahead[k];
			c->ahead[k] = NULL;
		}
	if (!c->cur)
		c->cur = get_chunk(r, i);
	c->cur_index = i;
	if (c->cur && !c->head) {
		c->ahead_from = i + 1;
		read_ahead(r, i, ahead_wanted(r));
	}
	return c->cur;
}

static ssize_t read_body(void *cls, uint64_t pos, char *out, size_t max)
{
	struct req *r = cls;
	struct cread *c = &r->cache;
	(void)pos;
	if (c->head || r->status_sent == 304 || !c->meta || c->meta->size == 0 || c->pos > c->end)
		return MHD_CONTENT_READER_END_OF_STREAM;
	uint64_t cs = chunk_size(r);
	for (;;) {
		uint64_t i = obj_chunk_index(c->pos, cs);
		struct chunk *ch = chunk_for(r, i);
		if (!ch)
			return MHD_CONTENT_READER_END_WITH_ERROR;
		uint64_t off = c->pos - obj_chunk_offset(i, cs);
		size_t filled = atomic_load_explicit(&ch->filled, memory_order_acquire);
		if (off < filled) {
			uint64_t n = filled - off;
			if (n > max)
				n = max;
			if (n > c->end + 1 - c->pos)
				n = c->end + 1 - c->pos;
			memcpy(out, ch->data + off, (size_t)n);
			c->pos += n;
			r->bytes_out += n;
			return (ssize_t)n;
		}
		int state = atomic_load(&ch->state);
		if (state == CHUNK_FAILED) {
			/* A reader of a failed chunk may fetch it again (a cancelled
			 * fetch, or a corrupt NVMe entry); a version change or an
			 * upstream that keeps failing ends this response: the client
			 * sees a short body, never other bytes. */
			if (ch->fail_reason == FETCH_ERR_CHANGED || ch->fail_reason == FETCH_ERR_UPSTREAM ||
			    !refetch_allowed(c, i))
				return MHD_CONTENT_READER_END_WITH_ERROR;
			obj_unwant(c->cur, false);
			c->cur = NULL;
			continue;
		}
		if (state == CHUNK_READY) /* cannot be short of its length */
			return MHD_CONTENT_READER_END_WITH_ERROR;
		c->wait_chunk = ch;
		c->chunk_waiting = true;
		chunk_wait(ch, &c->waiter, filled);
		req_suspend(r);
		return 0;
	}
}

/* ---- end ----------------------------------------------------------------- */

void cache_end(struct req *r)
{
	struct cread *c = &r->cache;
	if (!c->active)
		return;
	struct gw *gw = r->w->gw;
	obj_meta_cancel(&gw->objects, r->s3.bucket, buf_cstr(&r->s3.key), &c->ask);
	if (c->chunk_waiting)
		chunk_unwait(c->wait_chunk, &c->waiter);
	c->chunk_waiting = false;
	pthread_mutex_lock(&r->w->wake_lock);
	if (c->wake_queued) {
		struct req **pp = &r->w->wake_head;
		while (*pp != r)
			pp = &(*pp)->cache.wake_next;
		*pp = r->cache.wake_next;
		c->wake_queued = false;
	}
	pthread_mutex_unlock(&r->w->wake_lock);
	if (c->meta_fetch)
		fetch_disown(c->meta_fetch);
	c->meta_fetch = NULL;
	/* Whether this reader leaves its chunks wanted or given up on: a
	 * response sent in full leaves them to be cached for the next reader. */
	bool gave_up = !c->head && c->meta && c->meta->size > 0 && c->pos <= c->end &&
	               (!r->responded || r->status_sent / 100 == 2);
	release_chunks_as(r, gave_up);
	meta_unref(c->meta);
	c->meta = NULL;
	if (c->has_uerr) {
		hdrs_fini(&c->uerr_headers);
		free(c->uerr_body);
		c->has_uerr = false;
	}
	c->active = false;
}

/* Whether a successful write can have changed the object: not a
 * multipart upload's start (POST ?uploads) or one of its parts (PUT
 * ?uploadId): only its completion does. */
static bool changes_object(const struct req *r)
{
	struct buf v;
	buf_init(&v, 1024);
	bool part = (strcmp(r->method, "PUT") == 0 && s3_query_get(r->query, "uploadId", &v) != 0) ||
	            (strcmp(r->method, "POST") == 0 && s3_query_get(r->query, "uploads", &v) != 0);
	buf_fini(&v);
	return !part;
}

void cache_invalidate(struct req *r)
{
	struct gw *gw = r->w->gw;
	if (r->ustatus < 200 || r->ustatus >= 300 || r->s3.access != POL_WRITE)
		return;
	/* Any write to a bucket may change its listings: a key under their
	 * prefix, or (bucket-level requests, DeleteObjects) any of them. */
	if (r->s3.bucket[0])
		listcache_invalidate(gw->lists, r->s3.bucket,
		                     r->s3.target == S3T_OBJECT ? buf_cstr(&r->s3.key) : NULL);
	if (!gw->meta)
		return;
	const char *key = r->s3.target == S3T_OBJECT ? buf_cstr(&r->s3.key) : "";
	bool bucket_wide = r->s3.target == S3T_BUCKET && strcmp(r->method, "POST") == 0;
	if (r->s3.target != S3T_OBJECT && !bucket_wide)
		return;
	/* On NVMe first, so a restart cannot bring the old version back (an
	 * fdatasync of one small record; the upstream write took far longer).
	 * DeleteObjects names its keys in the body: the whole bucket goes. */
	if (gw->store && changes_object(r))
		store_invalidate(gw->store, r->s3.bucket, key, bucket_wide);
	if (bucket_wide)
		meta_drop_bucket(gw->meta, r->s3.bucket);
	else
		meta_drop(gw->meta, r->s3.bucket, key);
	if (gw->cluster) /* every node forgets it too */
		cluster_publish_invalidate(gw->cluster, r->s3.bucket, key);
}

struct purge_ctx {
	struct gw *gw;
	const char *bucket;
};

static void purge_one(void *arg, const char *key, struct obj_meta *m)
{
	struct purge_ctx *p = arg;
	struct obj_ref ref = { p->bucket, key, m };
	obj_forget(&p->gw->objects, &ref);
	meta_unref(m);
}

int cache_purge(struct gw *gw, const char *bucket, const char *prefix, bool exact,
                uint64_t *objects)
{
	struct purge_ctx p = { gw, bucket };
	/* Durable first: a restart must not give back what was purged. */
	int rc = store_invalidate(gw->store, bucket, prefix ? prefix : "", !exact);
	if (rc < 0)
		log_error("cache", "purge of %s under \"%s\": the NVMe tier could not record it (%s); "
		          "a restart may bring the purged metadata back", bucket, prefix ? prefix : "",
		          strerror(-rc));
	*objects = meta_collect(gw->meta, bucket, prefix ? prefix : "", exact, purge_one, &p);
	log_info("cache", "purged %" PRIu64 " objects of %s under \"%s\"", *objects, bucket,
	         prefix ? prefix : "");
	return 0;
}

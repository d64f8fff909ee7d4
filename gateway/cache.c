/*
 * cache.c - GET and HEAD of objects, answered from the chunk cache.
 *
 * A request that qualifies (cache_wants) goes through three steps:
 *   1. metadata: fresh in the meta cache, or learnt by a meta fetch that
 *      also brings chunk 0 (readers of the same cold object wait for one);
 *   2. the answer S3 would give from that metadata alone: conditionals
 *      (RFC 9110 section 13.2.2, with S3's precedence), Range (206, or
 *      416 InvalidRange), response-* overrides, the object's own headers
 *      (the conditionals and headers: objreply.c);
 *   3. the body, chunk after chunk: each chunk comes from RAM, from NVMe
 *      through the store's I/O threads, or from upstream (a chunk fetch,
 *      joined by every other reader of it: coalescing). Bytes go to the
 *      client as they arrive; the next chunks are fetched ahead
 *      (cache_body.c).
 * Chunks, metadata and coalescing go through the object-read layer
 * (store/object.h); this file gives it the producer and the loader that
 * start fetches.
 * The policy was checked before any of this (authn.c), so a hit never
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
 * the pass_through owner callback / the waiters hand the request back to the
 * pass-through).
 * A multi-range request is served the whole object, as S3 does.
 *
 * x-amz-checksum-mode: ENABLED (current SDKs send it on every GetObject)
 * is served from the cache. S3 returns no whole-object checksum for a
 * ranged GET, so a whole GET or HEAD with the mode of an object not known
 * yet learns it with a whole-object GET with the mode (fetch.h), whose
 * x-amz-checksum-* headers come with the metadata: its first reader has
 * them. An object learnt otherwise (a ranged meta fetch) gets them from the
 * first HEAD with the mode (passed through once), or from a whole GET that
 * went upstream. A HEAD or whole GET with the mode then carries them, as at
 * S3, and a range or part never does. Until then an answer has none and an
 * SDK skips its validation. Cached bytes are guarded by If-Match per chunk
 * and a CRC32C per NVMe entry as well.
 */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "base/clock.h"
#include "base/hdrs.h"
#include "base/log.h"
#include "gateway/cache.h"
#include "gateway/cread.h"
#include "gateway/fetch.h"
#include "gateway/listcache.h"
#include "gateway/lookahead.h"
#include "gateway/objreply.h"
#include "gateway/passthrough.h"
#include "gateway/pins.h"
#include "gateway/range.h"
#include "gateway/req.h"
#include "gateway/s3req.h"
#include "cluster/cluster.h"
#include "cluster/peer.h"
#include "store/object.h"
#include "store/store.h"

/* ---- which requests ----------------------------------------------------- */

/* ?partNumber=N: N in 1..10000, or 0 when absent; -1 when not valid,
 * or with a Range (S3 answers those with an error: pass-through). */
static long part_number(struct req *r)
{
	struct buf v;
	buf_init(&v, 64);
	long n = 0;
	int rc = s3_query_get(req_query(r), "partNumber", &v);
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

/* Whether r carries header name: sent as one, or in a presigned URL as the
 * query parameter S3 takes for it (gateway/passthrough.h). */
static bool sends_header(struct req *r, const char *name)
{
	if (req_header(r, name))
		return true;
	if (!req_presigned(r) || !strcasestr(req_query(r), name))
		return false;
	struct buf v;
	buf_init(&v, S3_MAX_QUERY_BYTES);
	bool found = pass_query_header(r, name, &v) > 0;
	buf_fini(&v);
	return found;
}

bool cache_wants(struct req *r)
{
	struct gw *gw = req_gw(r);
	if (!gw->store || req_s3(r)->target != S3T_OBJECT || req_has_body(r))
		return false;
	bool head = strcmp(req_method(r), "HEAD") == 0;
	if (!head && strcmp(req_method(r), "GET") != 0)
		return false;
	if (!objreply_query_ok(req_query(r)))
		return false;
	long part = part_number(r);
	/* A Range or If-* header sent twice: the signature covers every line
	 * (their values joined), S3 reads them all, req_header the first only. */
	if (part < 0 || req_repeats_read_header(r))
		return false;
	/* SSE-C reads are never cached; a hit knows nothing of the bucket's
	 * owner or of who pays, which S3 checks against these. */
	static const char *const bypass[] = {
		"x-amz-server-side-encryption-customer-algorithm",
		"x-amz-server-side-encryption-customer-key",
		"x-amz-server-side-encryption-customer-key-MD5",
		"x-amz-expected-bucket-owner", "x-amz-request-payer",
	};
	for (size_t i = 0; i < sizeof bypass / sizeof bypass[0]; i++)
		if (sends_header(r, bypass[i]))
			return false;
	/* An upstream that names it by another ETag in each answer: not
	 * cached for a while (fetch.h). */
	if (fetch_unsteady(req_bucket(r), req_key(r)))
		return false;
	struct cread *c = calloc(1, sizeof *c);
	if (!c)
		return false; /* the pass-through serves it */
	c->want_range = range_parse(req_header(r, "Range"), &c->range) == 1;
	c->head = head;
	c->part = (uint32_t)part;
	const char *mode = req_header(r, "x-amz-checksum-mode");
	c->want_checksums = mode && strcasecmp(mode, "ENABLED") == 0;
	req_set_cread(r, c);
	return true;
}

bool cache_active(const struct req *r)
{
	return req_cread(r) && req_cread(r)->active;
}

const char *cache_outcome(const struct req *r)
{
	const struct cread *c = req_cread(r);
	return c->meta_loaded || c->miss || c->busy ? "miss" : "hit";
}

void cache_free(struct req *r)
{
	cache_end(r);
	free(req_cread(r));
	req_set_cread(r, NULL);
}


/* A part read goes upstream until the part's bytes are known: S3 alone
 * knows where the parts of a multipart object begin. So does a HEAD with
 * x-amz-checksum-mode until the object's checksums are known (an object
 * learnt by a ranged meta fetch: a reader with the mode learns them with
 * the object). The answer teaches them (cache_learn); the next such read is
 * the cache's. A whole GET with the mode is not sent upstream for them (its
 * bytes would not be cached): it gets them once a HEAD taught them. */
bool cache_passes(struct req *r)
{
	struct cread *c = req_cread(r);
	const struct obj_meta *m = c->meta;
	uint64_t first, last;
	/* S3 answers the HEAD of an object whose GET it refuses with a 403
	 * (an archived object's InvalidObjectState, a KMS key the caller may
	 * not decrypt with): the GET that tried to learn the object is not
	 * the HEAD's answer. */
	if (c->has_uerr && c->head && c->uerr_status == 403)
		c->pass_through = true;
	if (!m || m->negative || c->has_uerr || req_failed(r))
		return c->pass_through;
	bool part_unknown = c->part && !meta_part(m, c->part, &first, &last);
	bool sums_unknown = c->want_checksums && c->head && !c->part && !c->want_range &&
	                    !m->checksums;
	if (part_unknown || sums_unknown) {
		/* chunk 0, which came with the metadata, stays wanted */
		cread_release(r);
		c->pass_through = true;
	}
	return c->pass_through;
}

/* x-amz-checksum-* lines of upstream's answer (its Content-Length is
 * req_upstream_length(r), which the pass-through parsed just before). */
static void learn_checksums(struct req *r)
{
	const char *etag = hdrs_get(req_upstream_headers(r), "ETag");
	uint64_t size = req_upstream_length(r);
	if (!etag || size == MHD_SIZE_UNKNOWN)
		return;
	struct buf lines;
	buf_init(&lines, 4096);
	int rc = meta_checksum_lines(req_upstream_headers(r), &lines);
	if (!rc)
		meta_learn_checksums(req_gw(r)->meta, req_bucket(r), req_key(r), etag,
		                     size, buf_cstr(&lines));
	buf_fini(&lines);
}

/* The object this answer of S3's is for (its ETag and size; a 206's byte
 * range in *first, *last), or false when it says neither plainly: a 200's
 * Content-Length, a 206's Content-Range. */
static bool answer_version(struct req *r, const char **etag, uint64_t *first, uint64_t *last,
                           uint64_t *size)
{
	long status = req_upstream_status(r);
	*etag = hdrs_get(req_upstream_headers(r), "ETag");
	if (!*etag)
		return false;
	if (status == 206)
		return content_range_parse(hdrs_get(req_upstream_headers(r), "Content-Range"),
		                           first, last, size);
	*size = req_upstream_length(r);
	/* S3 answers a part of a multipart object with 206; a store that
	 * answers 200 and names the parts (moto) sent the part alone. */
	if (req_cread(r)->part && hdrs_get(req_upstream_headers(r), "x-amz-mp-parts-count"))
		return false;
	return status == 200 && !req_header(r, "Range") && *size != MHD_SIZE_UNKNOWN;
}

void cache_learn(struct req *r)
{
	struct gw *gw = req_gw(r);
	if (!gw->meta || !req_cread(r)) /* not a read the cache wanted */
		return;
	/* An answer for another version than the one the cache knows (a HEAD
	 * with the checksum mode, a part read, sent upstream by cache_passes),
	 * or a 404: the object changed upstream. It is forgotten, as after a
	 * chunk fetch's 412 or 404: the reads after this one, which may send
	 * If-Match with this answer's ETag, must not be judged against the old
	 * one. A 404 names no version ("" and 0, which no entry holds). */
	const char *etag = NULL;
	uint64_t first = 0, last = 0, size = 0;
	bool gone = req_upstream_status(r) == 404;
	bool known = !gone && answer_version(r, &etag, &first, &last, &size);
	if ((gone || known) &&
	    meta_drop_other(gw->meta, req_bucket(r), req_key(r), gone ? "" : etag, size)) {
		log_info("cache", "%s/%s changed upstream (an answer for %s)", req_bucket(r),
		         req_key(r), gone ? "none: 404" : etag);
		fetch_changed(gw, req_bucket(r), req_key(r), true);
	}
	/* a whole object's answer (never a range's or a part's) */
	if (req_cread(r)->want_checksums && req_upstream_status(r) == 200 && !req_cread(r)->part &&
	    !req_header(r, "Range"))
		learn_checksums(r);
	/* A part's bytes, from the range answer_version read. */
	if (!known || !req_cread(r)->part || req_upstream_status(r) != 206)
		return;
	const char *count = hdrs_get(req_upstream_headers(r), "x-amz-mp-parts-count");
	unsigned long n = count ? strtoul(count, NULL, 10) : 0;
	if (n > 10000)
		return;
	meta_learn_part(gw->meta, req_bucket(r), req_key(r), etag, size, req_cread(r)->part,
	                first, last, (uint32_t)n);
}

/* ---- waking ----------------------------------------------------------- */

/* chunk_waiter.wake: runs on whichever thread changed the chunk or the
 * metadata; only queues the request for its own worker. */
static void waiter_wake(void *arg)
{
	struct req *r = arg;
	assert(req_valid(r));
	struct worker *w = req_worker(r);
	pthread_mutex_lock(&w->wake_lock);
	if (!req_cread(r)->wake_queued) {
		req_cread(r)->wake_queued = true;
		req_cread(r)->wake_next = w->wake_head;
		w->wake_head = r;
	}
	pthread_mutex_unlock(&w->wake_lock);
	ev_async_send(w->loop, &w->wake_async);
}

static void resolve(struct req *r);

void cache_wake_cb(struct ev_loop *loop, ev_async *a, int revents)
{
	struct worker *w = a->data;
	assert(w->magic == WORKER_MAGIC);
	(void)loop;
	(void)revents;
	/* One at a time under the lock: once off the list a request can be
	 * queued again from another thread (which rewrites its wake_next), so
	 * a list taken whole would lose the requests behind it. */
	for (;;) {
		pthread_mutex_lock(&w->wake_lock);
		struct req *r = w->wake_head;
		if (r) {
			w->wake_head = req_cread(r)->wake_next;
			req_cread(r)->wake_queued = false;
		}
		pthread_mutex_unlock(&w->wake_lock);
		if (!r)
			break;
		if (!req_alive(r))
			continue;
		if (req_cread(r)->ask.waiting) {
			req_cread(r)->ask.waiting = false;
			resolve(r);
		}
		if (req_cread(r)->chunk_waiting) {
			chunk_unwait(req_cread(r)->wait_chunk, &req_cread(r)->waiter);
			req_cread(r)->chunk_waiting = false;
		}
		req_wake(r);
	}
}

/* ---- step 1: metadata --------------------------------------------------- */

static const struct fetch_owner_ops owner_ops;

/* The reader stops caring about its meta fetch (it goes away, or learns
 * the object again): the fetch, which may still be bringing chunk 0, no
 * longer reports to it (fetch.h). */
static void let_go_of_meta_fetch(struct cread *c)
{
	if (c->meta_fetch)
		fetch_disown(c->meta_fetch);
	c->meta_fetch = NULL;
}

/* The chunk a meta fetch for r asks for: the one its range starts in, when
 * that is known before the object's size (bytes=a-b, bytes=a-), the last
 * one for a suffix of at most a chunk (bytes=-n: a Parquet footer), when
 * the range is served whatever the object (no If-Range); else chunk 0. A
 * small read far into a cold object then costs one upstream GET and one
 * first byte, not chunk 0's as well. */
static uint64_t first_chunk(struct req *r)
{
	const struct cread *c = req_cread(r);
	if (c->head || c->part || !c->want_range || req_header(r, "If-Range"))
		return 0;
	if (c->range.suffix)
		return c->range.b && c->range.b <= cread_chunk_bytes(r) ? FETCH_LAST_CHUNK : 0;
	return obj_chunk_index(c->range.a, cread_chunk_bytes(r));
}

/* Where r's first byte is in the chunk first_chunk(r) names, when it is
 * the chunk its range starts in; else 0. */
static uint64_t first_from(struct req *r)
{
	const struct cread *c = req_cread(r);
	if (c->head || c->part || !c->want_range || c->range.suffix || req_header(r, "If-Range"))
		return 0;
	return c->range.a - obj_chunk_offset(first_chunk(r), cread_chunk_bytes(r));
}

/* obj_load_fn: this request learns the object with a meta fetch. */
static int start_meta_fetch(void *arg, const char *revalidate)
{
	struct req *r = arg;
	struct cread *c = req_cread(r);
	c->meta_loaded = true;
	/* Learning again (it changed under a chunk fetch): one fetch at a
	 * time reports to a reader, and cache_end lets go of the one it knows. */
	let_go_of_meta_fetch(c);
	/* Learning brings chunk 0: not past the memory bound. */
	if (cread_over_budget(r, req_gw(r)->objects.chunk_bytes) || !req_upstream_wait(r))
		return -EBUSY;
	/* A whole read with checksum mode learns the object's checksums with
	 * it (one whole GET, fetch.h); a range or part never gets them. */
	if (c->want_checksums && (!c->want_range || req_peer_hop(r) > 0) && !c->part)
		c->meta_fetch = fetch_meta_start_checksums(req_worker(r), &owner_ops, r,
		                                           req_peer_hop(r), req_charge(r),
		                                           req_bucket(r), req_key(r), revalidate);
	else
		c->meta_fetch = fetch_meta_start(req_worker(r), &owner_ops, r, req_peer_hop(r),
		                                 req_charge(r), req_bucket(r), req_key(r),
		                                 revalidate, first_chunk(r), first_from(r));
	return c->meta_fetch ? 0 : -EIO;
}

/* Chunk 0 handed over by the fetch that learnt the object (cache_owner_
 * learnt) is of the version that fetch saw. A write meanwhile drops what
 * that fetch learnt (store/meta.c), and the reader may learn another
 * version: then the chunk is not this version's, and is let go. */
static void drop_other_version(struct req *r)
{
	struct cread *c = req_cread(r);
	if (!c->meta || !c->cur)
		return;
	struct obj_ref ref = { req_bucket(r), req_key(r), c->meta };
	struct chunk_id id;
	obj_chunk_id(&ref, c->cur_index, &id);
	if (!chunk_id_eq(&id, &c->cur->id)) {
		obj_unwant(c->cur, false);
		c->cur = NULL;
	}
}

/* Finds the object's metadata, or starts learning it, or waits. */
static void resolve(struct req *r)
{
	struct gw *gw = req_gw(r);
	struct cread *c = req_cread(r);
	for (int tries = 0; tries < 3 && !c->meta && !c->has_uerr && !c->pass_through && !req_failed(r);
	     tries++) {
		long st = 0;
		switch (obj_meta_step(&gw->objects, req_bucket(r), req_key(r), &c->ask,
		                      start_meta_fetch, r, clock_mono_s(), &c->meta, &st)) {
		case OBJ_META_READY:
			req_upstream_unwait(r); /* another's load taught it while it waited */
			drop_other_version(r);
			return;
		case OBJ_META_WAIT: /* for another's load (woken by it), not for a slot */
			req_upstream_unwait(r);
			c->meta_loaded = true;
			return;
		case OBJ_META_LOADING: /* this request learns it, then waits like the others */
			continue;
		case OBJ_META_NO_LOAD:
			if (req_upstream_waits(r))
				return; /* for a slot of its key's: asked again (cache_respond) */
			req_fail(r, st == -EBUSY ? S3E_SLOW_DOWN : S3E_SERVICE_UNAVAILABLE, NULL);
			return;
		case OBJ_META_CYCLE: /* the asking node asks again soon (gateway/fetch.c) */
			req_err_headers(r, PEER_LEARNING_HEADER ": 1\n");
			req_fail(r, S3E_SLOW_DOWN, NULL);
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

/* ---- what a meta fetch (fetch.c) reports to the reader that owns it ---- */

static void cache_owner_detach(void *arg, struct fetch *f)
{
	struct req *owner = arg;
	assert(req_valid(owner));
	if (req_cread(owner)->meta_fetch == f)
		req_cread(owner)->meta_fetch = NULL;
}

/* Keeps the want of the chunk learnt with (index) unless this reader holds
 * a chunk already. */
static bool cache_owner_learnt(void *arg, long status, struct chunk *c0, uint64_t index)
{
	struct req *owner = arg;
	assert(req_valid(owner));
	req_set_upstream_status(owner, status); /* for its access-log line */
	if (!c0 || req_cread(owner)->cur)
		return false;
	if (req_peer_hop(owner) > 0 && req_connection(owner)) /* a pinned job's, from a peer */
		pins_hold_peer(req_gw(owner)->pins, req_bucket(owner), MHD_lookup_connection_value(
		               req_connection(owner), MHD_HEADER_KIND, PIN_HEADER), &c0->id, c0->len);
	req_cread(owner)->cur = c0;
	req_cread(owner)->cur_index = index;
	return true;
}

static void cache_owner_pass_through(void *arg)
{
	struct req *owner = arg;
	assert(req_valid(owner));
	req_cread(owner)->pass_through = true;
}

static void cache_owner_upstream_error(void *arg, long status, const struct hdrs *h,
                                       const char *body, size_t len)
{
	struct req *owner = arg;
	assert(req_valid(owner));
	struct cread *c = req_cread(owner);
	if (c->has_uerr || !req_alive(owner))
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

static const struct fetch_owner_ops owner_ops = {
	.learnt = cache_owner_learnt,
	.upstream_error = cache_owner_upstream_error,
	.pass_through = cache_owner_pass_through,
	.detach = cache_owner_detach,
};

void cache_begin(struct req *r)
{
	struct cread *c = req_cread(r);
	c->active = true;
	c->waiter.wake = waiter_wake;
	c->waiter.arg = r;
	c->ask.waiter = &c->waiter;
	c->ask.share_failures = true;
	c->ask.hop = req_peer_hop(r);
	/* Not hearing invalidations (its subscriber lost Redis): what it
	 * trusts may be a version a write through another node replaced, and
	 * a node learning the object from it would keep it for good. That node
	 * may have heard nothing either (it subscribed again first, or never
	 * had the object). A chunk fetch names its version (If-Match): the
	 * answer is checked against it, not learnt. */
	c->ask.recheck = c->ask.hop && !req_header(r, "If-Match") &&
	                 !cluster_listening(req_gw(r)->cluster);
	/* It gave up waiting for this node to apply what other nodes wrote
	 * (request.c, "The read barrier"): what it trusts may be replaced. */
	c->ask.recheck |= req_barrier_lapsed(r);
	if (!c->head && !req_peer_hop(r)) /* a client's read, not a peer fetching for one */
		lookahead_note_read(req_gw(r)->lookahead, req_bucket(r), req_key(r), clock_mono_s());
	resolve(r);
}

/* ---- step 2: the answer from metadata ----------------------------------- */

static void body_done(void *cls)
{
	assert(req_valid(cls));
	req_unref(cls);
}

static enum MHD_Result respond_s3(struct req *r, enum s3err e, const struct obj_meta *m)
{
	req_fail(r, e, NULL);
	if (e == S3E_NO_SUCH_KEY) /* as S3's: the key, the condition that failed */
		req_err_element(r, "Key", req_key(r));
	if (e == S3E_PRECONDITION_FAILED)
		req_err_element(r, "Condition",
		                req_header(r, "If-Match") ? "If-Match" : "If-Unmodified-Since");
	if (e == S3E_INVALID_RANGE && m) { /* S3 names the range asked for and the size */
		char size[24];
		snprintf(size, sizeof size, "%" PRIu64, m->size);
		const char *range = req_header(r, "Range");
		req_err_element(r, "RangeRequested", range ? range : "");
		req_err_element(r, "ActualObjectSize", size);
		req_err_object_size(r, m->size);
	}
	return req_respond_error(r);
}

static enum MHD_Result respond_upstream_error(struct req *r)
{
	struct cread *c = req_cread(r);
	struct MHD_Response *resp = MHD_create_response_from_buffer(
		c->uerr_len, c->uerr_body ? c->uerr_body : (char *)"", MHD_RESPMEM_MUST_COPY);
	if (!resp)
		return MHD_NO;
	for (size_t i = 0; i < c->uerr_headers.n; i++) {
		const char *n = c->uerr_headers.v[i].name;
		if (strcasecmp(n, "content-length") && !hdr_hop_by_hop(n) &&
		    strcasecmp(n, "content-range"))
			MHD_add_response_header(resp, n, c->uerr_headers.v[i].value);
	}
	if (!hdrs_get(&c->uerr_headers, "x-amz-request-id"))
		MHD_add_response_header(resp, "x-amz-request-id", req_id(r));
	MHD_add_response_header(resp, "x-larder-cache", "miss");
	req_add_common_headers(r, resp);
	req_set_upstream_status(r, c->uerr_status);
	if (!c->head)
		req_count_out(r, c->uerr_len);
	return req_queue_response(r, (unsigned)c->uerr_status, resp);
}

enum MHD_Result cache_respond(struct req *r)
{
	struct cread *c = req_cread(r);
	if (!c->meta && req_upstream_waits(r)) /* for a slot to learn it: asks again */
		resolve(r);
	if (req_failed(r))
		return req_respond_error(r);
	if (c->has_uerr)
		return respond_upstream_error(r);
	if (!c->meta) {
		req_suspend(r); /* woken when the metadata is known */
		return MHD_YES;
	}
	const struct obj_meta *m = c->meta;
	if (m->negative) { /* with what S3's 404 said of it (a delete marker) */
		req_err_headers(r, m->headers);
		return respond_s3(r, S3E_NO_SUCH_KEY, NULL);
	}

	time_t now = time(NULL);
	int pre = objreply_preconditions(m, req_header(r, "If-Match"), req_header(r, "If-None-Match"),
	                                 req_header(r, "If-Unmodified-Since"),
	                                 req_header(r, "If-Modified-Since"), now);
	if (pre == 412)
		return respond_s3(r, S3E_PRECONDITION_FAILED, m);

	unsigned status = 200;
	c->start = 0;
	c->end = m->size ? m->size - 1 : 0;
	if (pre == 0 && c->want_range && objreply_if_range(m, req_header(r, "If-Range"), now)) {
		enum range_fit fit = range_resolve(&c->range, m->size, &c->start, &c->end);
		if (fit == RANGE_UNSATISFIABLE)
			return respond_s3(r, S3E_INVALID_RANGE, m);
		if (fit == RANGE_PART)
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
	 * already announced with the old ETag. A small answer waits for all
	 * its bytes (cread_small), at most BODY_BLOCK, to go out without the
	 * reader callback's buffer. */
	bool body = !c->head && status != 304 && len > 0;
	bool small = body && cread_small(r);
	if (body) {
		uint64_t first = obj_chunk_index(c->start, cread_chunk_bytes(r));
		struct chunk *ch = cread_chunk_for(r, first);
		if (!ch && req_upstream_waits(r)) { /* for a slot to fetch it: asked again */
			c->busy = false;
			req_suspend(r);
			return MHD_YES;
		}
		if (!ch)
			return respond_s3(r, c->busy ? S3E_SLOW_DOWN : S3E_INTERNAL, NULL);
		size_t seen = chunk_progress(ch); /* before the bytes are looked at */
		int state = atomic_load(&ch->state);
		uint64_t off = c->start - obj_chunk_offset(c->cur_index, cread_chunk_bytes(r));
		if (state == CHUNK_FAILED) {
			int reason = ch->fail_reason;
			cread_release(r);
			if (reason == FETCH_ERR_CHANGED && c->restarts++ < 2) {
				meta_unref(c->meta);
				c->meta = NULL;
				c->meta_loaded = true;
				resolve(r);
				return cache_respond(r);
			}
			if (reason != FETCH_ERR_UPSTREAM && reason != FETCH_ERR_SLOWDOWN &&
			    cread_refetch_allowed(c, first))
				return cache_respond(r);
			return respond_s3(r, reason == FETCH_ERR_SLOWDOWN ? S3E_SLOW_DOWN
			                                                  : S3E_SERVICE_UNAVAILABLE, NULL);
		}
		if (state == CHUNK_FILLING && chunk_readable(ch, off) < off + (small ? len : 1)) {
			/* Filling but not held: on its way from upstream, not
			 * being read from NVMe. */
			if (!c->miss && !cread_all_held(r, m))
				c->miss = true;
			c->wait_chunk = ch;
			c->chunk_waiting = true;
			chunk_wait(ch, &c->waiter, seen);
			req_suspend(r);
			return MHD_YES;
		}
	}
	/* An answer whose bytes are all in memory goes out as an iovec over
	 * the chunks. For a full RAM hit, that it could is itself the proof of
	 * the hit, so the chunks are looked up once. */
	struct MHD_Response *resp = NULL;
	if (body && (small || (!c->meta_loaded && !c->miss)))
		resp = cread_zero_copy(r);
	bool hit = !c->meta_loaded && !c->miss && (resp || status == 304 || cread_all_held(r, m));
	c->miss = !hit;

	if (resp) {
		c->pos = c->end + 1; /* all of it handed over */
	} else if (c->head || status == 304 || len == 0) {
		/* No body: MHD still announces the size given as Content-Length,
		 * a HEAD's and a 304's alike; a 304's must be what a 200 would
		 * carry (RFC 9110 8.6), never 0 for an object that is not. */
		resp = MHD_create_response_from_callback(status == 304 ? m->size : len, 4096,
		                                         cread_read, r, body_done);
	} else {
		resp = MHD_create_response_from_callback(len, BODY_BLOCK, cread_read, r, body_done);
	}
	if (!resp)
		return MHD_NO;
	if (c->pos <= c->end || len == 0)
		req_ref(r); /* the reader callback's; an iovec response holds chunks instead */
	/* A peer's ranged GET with the mode is another node learning the
	 * object (fetch.h): it gets the checksums with chunk 0. */
	bool sums = c->want_checksums && (status == 200 || (status == 206 && req_peer_hop(r) > 0));
	struct objreply a = { status, c->start, c->end, c->part, sums };
	objreply_headers(resp, req_query(r), m, &a);
	MHD_add_response_header(resp, "x-amz-request-id", req_id(r));
	MHD_add_response_header(resp, "x-larder-cache", hit ? "hit" : "miss");
	req_add_common_headers(r, resp);
	return req_queue_response(r, status, resp);
}

/* ---- end ----------------------------------------------------------------- */

void cache_end(struct req *r)
{
	struct cread *c = req_cread(r);
	if (!c || !c->active)
		return;
	struct gw *gw = req_gw(r);
	/* Off its key's queue: it waits for no slot any more. */
	req_upstream_unwait(r);
	obj_meta_cancel(&gw->objects, req_bucket(r), req_key(r), &c->ask);
	if (c->chunk_waiting)
		chunk_unwait(c->wait_chunk, &c->waiter);
	c->chunk_waiting = false;
	pthread_mutex_lock(&req_worker(r)->wake_lock);
	if (c->wake_queued) {
		struct req **pp = &req_worker(r)->wake_head;
		while (*pp != r)
			pp = &req_cread(*pp)->wake_next;
		*pp = req_cread(r)->wake_next;
		c->wake_queued = false;
	}
	pthread_mutex_unlock(&req_worker(r)->wake_lock);
	let_go_of_meta_fetch(c);
	/* Whether this reader leaves its chunks wanted or given up on: a
	 * response sent in full leaves them to be cached for the next reader. */
	bool gave_up = !c->head && c->meta && c->meta->size > 0 && c->pos <= c->end &&
	               (!req_responded(r) || req_status_sent(r) / 100 == 2);
	cread_release_as(r, gave_up);
	meta_unref(c->meta);
	c->meta = NULL;
	if (c->has_uerr) {
		hdrs_fini(&c->uerr_headers);
		free(c->uerr_body);
		c->has_uerr = false;
	}
	c->active = false;
}

/* Whether a successful write can have changed the object or a listing:
 * not a multipart upload's start (POST ?uploads), one of its parts (PUT
 * ?uploadId) or its abort (DELETE ?uploadId): only its completion does. */
static bool changes_object(const struct req *r)
{
	struct buf v;
	buf_init(&v, 1024);
	const char *method = req_method(r), *query = req_query(r);
	bool part = ((strcmp(method, "PUT") == 0 || strcmp(method, "DELETE") == 0) &&
	             s3_query_get(query, "uploadId", &v) != 0) ||
	            (strcmp(method, "POST") == 0 && s3_query_get(query, "uploads", &v) != 0);
	buf_fini(&v);
	return !part;
}

/* What a write through this node changed, (bucket, key) or with
 * bucket_wide the whole bucket, forgotten: on NVMe first, so a restart
 * cannot bring the old version back (an fdatasync of one small record;
 * the upstream write took far longer); marked written before the
 * metadata drop, so a load that starts after it does not learn the old
 * version from a node the invalidation has not reached yet; then every
 * node is told, and the write's answer ends once they are. */
static void forget_object(struct req *r, const char *bucket, const char *key, bool bucket_wide)
{
	struct gw *gw = req_gw(r);
	if (gw->store)
		store_invalidate(gw->store, bucket, key, bucket_wide);
	if (gw->cluster)
		fetch_written(bucket, key, clock_mono_s());
	if (bucket_wide)
		meta_drop_bucket(gw->meta, bucket);
	else
		meta_drop(gw->meta, bucket, key);
	if (gw->cluster)
		req_telling_others(r, cluster_publish_invalidate(gw->cluster, bucket, key));
}

static int forget_source(void *arg, const char *bucket, const char *key)
{
	listcache_invalidate(req_gw(arg)->lists, bucket, key);
	forget_object(arg, bucket, key, false);
	return 0;
}

static int tombstone_source(void *arg, const char *bucket, const char *key)
{
	struct req *r = arg;
	store_write_begin(req_gw(r)->store, (uint64_t)(uintptr_t)r, bucket, key, false);
	return 0;
}

/* RenameObject (directory buckets) removes its source, named by
 * x-amz-rename-source (in a presigned URL, a parameter of that name):
 * each is passed to fn (with r) as well, however S3 reads it
 * (s3_source_objects). */
static void each_rename_source(struct req *r, int (*fn)(void *, const char *, const char *))
{
	if (req_s3(r)->target != S3T_OBJECT || strcmp(req_method(r), "PUT") != 0)
		return;
	struct buf q;
	buf_init(&q, S3_MAX_QUERY_BYTES);
	const char *src = req_header(r, "x-amz-rename-source");
	if (!src && s3_query_get(req_query(r), "x-amz-rename-source", &q) == 1)
		src = buf_cstr(&q);
	if (src)
		s3_source_objects(src, fn, r);
	buf_fini(&q);
}

/* The object a write may change: its key, or with *bucket_wide the whole
 * bucket (DeleteObjects, whose keys are in the body; DeleteBucket, which
 * held nothing else but listings the other nodes must drop). False for a
 * write that changes no object (other bucket-level ones). */
static bool written_object(struct req *r, const char **key, bool *bucket_wide)
{
	*key = req_s3(r)->target == S3T_OBJECT ? req_key(r) : "";
	*bucket_wide = req_s3(r)->target == S3T_BUCKET &&
	               (strcmp(req_method(r), "POST") == 0 ||
	                (strcmp(req_method(r), "DELETE") == 0 && !req_query(r)[0]));
	return req_s3(r)->target == S3T_OBJECT || *bucket_wide;
}

bool cache_write_changes(const struct req *r)
{
	return req_s3(r)->access == POL_WRITE && changes_object(r);
}

void cache_write_begins(struct req *r)
{
	struct gw *gw = req_gw(r);
	const char *key;
	bool bucket_wide;
	if (!gw->store || req_s3(r)->access != POL_WRITE || !changes_object(r) ||
	    !req_bucket(r)[0] || !written_object(r, &key, &bucket_wide))
		return;
	store_write_begin(gw->store, (uint64_t)(uintptr_t)r, req_bucket(r), key, bucket_wide);
	each_rename_source(r, tombstone_source);
}

void cache_write_ends(struct req *r)
{
	if (req_gw(r)->store)
		store_write_end(req_gw(r)->store, (uint64_t)(uintptr_t)r);
}

void cache_invalidate(struct req *r)
{
	struct gw *gw = req_gw(r);
	long status = req_upstream_status(r);
	/* 0: no answer was heard (passthrough.c), and a 5xx (InternalError,
	 * ServiceUnavailable) tells nothing of the outcome: the write may have
	 * landed. Only what S3 refused (a 3xx or 4xx) changed nothing. */
	bool refused = status != 0 && status < 500 && (status < 200 || status >= 300);
	if (refused || req_s3(r)->access != POL_WRITE || !changes_object(r))
		return;
	/* Any write to a bucket may change its listings: a key under their
	 * prefix, or (bucket-level requests, DeleteObjects) any of them. */
	if (req_bucket(r)[0])
		listcache_invalidate(gw->lists, req_bucket(r),
		                     req_s3(r)->target == S3T_OBJECT ? req_key(r) : NULL);
	const char *key;
	bool bucket_wide;
	if (!gw->meta || !written_object(r, &key, &bucket_wide))
		return;
	forget_object(r, req_bucket(r), key, bucket_wide);
	each_rename_source(r, forget_source);
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

int cache_purge(struct gw *gw, const char *bucket, const char *prefix, bool exact, bool heard,
                uint64_t *objects)
{
	struct purge_ctx p = { gw, bucket };
	const char *what = prefix ? prefix : "";
	/* Durable first: a restart must not give back what was purged. Heard
	 * from another node, the memory goes first and an I/O thread writes
	 * the tombstone: the thread that hears the cluster's messages must not
	 * wait on the disk (see cluster_invalidated in server.c). */
	int rc = heard ? 0 : store_invalidate(gw->store, bucket, what, !exact);
	*objects = meta_collect(gw->meta, bucket, what, exact, purge_one, &p);
	if (heard)
		rc = store_invalidate_queued(gw->store, bucket, what, !exact);
	if (rc < 0)
		log_error("cache", "purge of %s under \"%s\": the NVMe tier could not record it (%s); "
		          "a restart may bring the purged metadata back", bucket, what, strerror(-rc));
	log_info("cache", "purged %" PRIu64 " objects of %s under \"%s\"", *objects, bucket,
	         prefix ? prefix : "");
	return 0;
}

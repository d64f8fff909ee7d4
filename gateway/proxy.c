/*
 * proxy.c - the pass-through: every S3 request, verified, re-signed and
 * streamed to upstream and back (see proxy.h for the flow-control rule).
 *
 * A request's life:
 *   proxy_uri_cb        raw URI kept; struct req created (ref: connection)
 *   access cb, 1st call headers: parse, SigV4, policy; start curl (ref: curl)
 *   access cb, uploads  body bytes -> verify (hash / aws-chunked) -> upbuf
 *   access cb, last     body verified; once upstream's headers are in,
 *                       queue the response (ref: response)
 *   reader cb           downbuf -> client
 *   completed cb        access-log line; upstream cancelled if still running
 * The struct is freed when the last of its three references goes.
 */
#include "gateway/proxy.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "auth/chunked.h"
#include "auth/policy.h"
#include "auth/sigv2.h"
#include "auth/sigv4.h"
#include "base/clock.h"
#include "base/log.h"
#include "gateway/s3err.h"
#include "gateway/fetch.h"
#include "gateway/listcache.h"
#include "cluster/peer.h"
#include "gateway/metrics.h"
#include "gateway/prefetch.h"
#include "gateway/cache.h"
#include "gateway/req.h"
#include "gateway/s3req.h"

static size_t pbuf_used(const struct pbuf *b) { return b->len - b->off; }
static size_t pbuf_room(const struct pbuf *b) { return PIPE_CAP - pbuf_used(b); }

static int pbuf_put(struct pbuf *b, const void *data, size_t n)
{
	if (!b->p && !(b->p = malloc(PIPE_CAP)))
		return -ENOMEM;
	if (n > PIPE_CAP - b->len) {
		memmove(b->p, b->p + b->off, b->len - b->off);
		b->len -= b->off;
		b->off = 0;
	}
	assert(n <= PIPE_CAP - b->len);
	memcpy(b->p + b->len, data, n);
	b->len += n;
	return 0;
}

static size_t pbuf_take(struct pbuf *b, void *out, size_t max)
{
	size_t n = pbuf_used(b) < max ? pbuf_used(b) : max;
	memcpy(out, b->p + b->off, n);
	b->off += n;
	if (b->off == b->len)
		b->off = b->len = 0;
	return n;
}

/* ------------------------------------------------------------------ */
/* lifetime */

void req_ref(struct req *r)
{
	r->refs++;
}

void req_unref(struct req *r)
{
	assert(r->magic == REQ_MAGIC && r->refs > 0);
	if (--r->refs > 0)
		return;
	assert(!r->easy_running && !r->in_pending);
	if (r->easy)
		curl_easy_cleanup(r->easy);
	curl_slist_free_all(r->slist);
	if (r->sha)
		EVP_MD_CTX_free(r->sha);
	ack_destroy(r->ack);
	buf_fini(&r->delete_body);
	buf_fini(&r->err_extra);
	listcache_end(r);
	cache_free(r);
	s3req_fini(&r->s3);
	up_target_fini(&r->target);
	hdrs_fini(&r->uresp);
	free(r->upbuf.p);
	free(r->downbuf.p);
	free(r->uri);
	free(r->path);
	free(r->up_query);
	r->magic = 0;
	free(r);
}

/* Resumes the client connection if it waits: whatever it waited for may
 * now be possible; if not, the callback suspends it again. */
void req_wake(struct req *r)
{
	if (r->suspended && r->conn) {
		r->suspended = false;
		MHD_resume_connection(r->conn);
		r->w->mhd_kick = true;
	}
}

void req_suspend(struct req *r)
{
	if (!r->suspended && r->conn) {
		r->suspended = true;
		MHD_suspend_connection(r->conn);
	}
}

static void want_unpause(struct req *r)
{
	if (r->in_pending || !r->easy_running)
		return;
	r->in_pending = true;
	r->refs++;
	r->next_pending = r->w->pending;
	r->w->pending = r;
}

void proxy_run_pending(struct worker *w)
{
	while (w->pending) {
		struct req *r = w->pending;
		w->pending = r->next_pending;
		r->in_pending = false;
		if (r->easy_running && (r->read_paused || r->write_paused)) {
			r->read_paused = r->write_paused = false;
			curl_easy_pause(r->easy, CURLPAUSE_CONT);
		}
		req_unref(r);
	}
}

static void stop_upstream(struct req *r)
{
	if (!r->easy_running)
		return;
	curlev_remove(r->w->curl, r->easy);
	r->easy_running = false;
	r->udone = true;
	if (r->uresult == CURLE_OK)
		r->uresult = CURLE_ABORTED_BY_CALLBACK;
	req_unref(r);
}

/* ------------------------------------------------------------------ */
/* errors larder raises */

void req_fail(struct req *r, enum s3err e, const char *msg)
{
	if (r->has_err)
		return;
	r->has_err = true;
	r->err = e;
	snprintf(r->err_msg, sizeof r->err_msg, "%s", msg ? msg : "");
}

void req_err_element(struct req *r, const char *name, const char *text)
{
	/* All or nothing: a cut element would leave the XML broken. */
	size_t mark = r->err_extra.len;
	if (buf_printf(&r->err_extra, "<%s>", name) != 0 || xml_escape(text, &r->err_extra) != 0 ||
	    buf_printf(&r->err_extra, "</%s>", name) != 0) {
		r->err_extra.len = mark;
		if (r->err_extra.p)
			r->err_extra.p[mark] = '\0';
	}
}

/* libmicrohttpd refuses a header whose value is empty, and S3 sends such
 * headers (x-amz-meta-x with an empty value is part of the object). A lone
 * space goes instead: HTTP trims it, so the client reads the empty value. */
void req_add_response_header(struct MHD_Response *resp, const char *name, const char *value)
{
	MHD_add_response_header(resp, name, value[0] ? value : " ");
}

void req_add_common_headers(struct req *r, struct MHD_Response *resp)
{
	MHD_add_response_header(resp, "x-larder-request-id", r->id);
}

/* True while the client may still be sending a body larder will not read. */
static bool unread_body(struct req *r)
{
	if (r->client_body_done)
		return false;
	const char *cl = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Content-Length");
	return (cl && strcmp(cl, "0") != 0) ||
	       MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Transfer-Encoding");
}

enum MHD_Result req_respond_error(struct req *r)
{
	struct buf body;
	buf_init(&body, 8192);
	/* S3's 416 names the range and the size, not the resource. */
	if (s3err_xml(r->err, r->err_msg[0] ? r->err_msg : NULL, r->err_sized ? NULL : r->path,
	              r->id, r->err_extra.len ? buf_cstr(&r->err_extra) : NULL, &body) != 0) {
		buf_fini(&body);
		return MHD_NO;
	}
	struct MHD_Response *resp = MHD_create_response_from_buffer(body.len, body.p,
	                                                            MHD_RESPMEM_MUST_COPY);
	buf_fini(&body);
	if (!resp)
		return MHD_NO;
	char date[64];
	time_t t = time(NULL);
	struct tm tm;
	gmtime_r(&t, &tm);
	strftime(date, sizeof date, "%a, %d %b %Y %H:%M:%S GMT", &tm);
	MHD_add_response_header(resp, "Content-Type", "application/xml");
	MHD_add_response_header(resp, "Date", date);
	MHD_add_response_header(resp, "Server", "larder");
	MHD_add_response_header(resp, "x-amz-request-id", r->id);
	if (r->err_sized) {
		char cr[64];
		snprintf(cr, sizeof cr, "bytes */%" PRIu64, r->err_object_size);
		MHD_add_response_header(resp, "Content-Range", cr);
	}
	if (cache_active(r))
		MHD_add_response_header(resp, "x-larder-cache", cache_outcome(r, false));
	req_add_common_headers(r, resp);
	/* A body we did not read, or a refused connection over the limit:
	 * close rather than try to find the next request in the stream. */
	if (unread_body(r) || r->err == S3E_SLOW_DOWN)
		MHD_add_response_header(resp, "Connection", "close");
	r->status_sent = (int)s3err_status(r->err);
	enum MHD_Result ret = MHD_queue_response(r->conn, (unsigned)r->status_sent, resp);
	MHD_destroy_response(resp);
	r->responded = true;
	return ret;
}

/* ------------------------------------------------------------------ */
/* authentication and policy */

/* Decoded aws-chunked payload bytes, on their way upstream. */
static int chunk_sink(void *arg, const char *data, size_t len)
{
	struct req *r = arg;
	if (r->up_queued + len > (uint64_t)r->up_len)
		return -1;
	r->up_queued += len;
	return pbuf_put(&r->upbuf, data, len);
}

struct hdr_collect {
	struct sv4_header *v;
	size_t n, cap;
};

static enum MHD_Result collect_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                      const char *value)
{
	struct hdr_collect *c = cls;
	if (c->n == c->cap) {
		size_t cap = c->cap ? c->cap * 2 : 32;
		struct sv4_header *v = realloc(c->v, cap * sizeof *v);
		if (!v)
			return MHD_NO;
		c->v = v;
		c->cap = cap;
	}
	c->v[c->n].name = key;
	c->v[c->n].value = value ? value : "";
	c->n++;
	(void)kind;
	return MHD_YES;
}

const char *req_header(struct req *r, const char *name)
{
	return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}

static enum s3err sv4_to_s3err(enum sv4_status s, bool presigned)
{
	switch (s) {
	case SV4_MALFORMED: return presigned ? S3E_AUTH_QUERY_ERROR : S3E_AUTH_HEADER_MALFORMED;
	case SV4_UNSUPPORTED: return S3E_INVALID_REQUEST;
	case SV4_SKEWED: return S3E_REQUEST_TIME_SKEWED;
	case SV4_EXPIRED: return S3E_ACCESS_DENIED;
	case SV4_NOT_YET_VALID: return S3E_ACCESS_DENIED;
	case SV4_MISSING_HEADER: return presigned ? S3E_AUTH_QUERY_ERROR : S3E_AUTH_HEADER_MALFORMED;
	case SV4_BAD_SIGNATURE: return S3E_SIGNATURE_MISMATCH;
	case SV4_UNSIGNED_HEADER: return S3E_ACCESS_DENIED;
	case SV4_BAD_EXPIRES: return S3E_ACCESS_DENIED;
	default: return S3E_ACCESS_DENIED;
	}
}

/* The x-amz-copy-source of CopyObject / UploadPartCopy: "bucket/key" or
 * "/bucket/key", URL-encoded, optionally "?versionId=...". The key needs
 * read access there too. */
static bool copy_source_allowed(const struct cfg_key *k, const char *src)
{
	struct buf dec;
	buf_init(&dec, 8192);
	size_t len = strcspn(src, "?");
	bool ok = false;
	if (sv4_uri_decode(src, len, &dec) == 0) {
		const char *s = buf_cstr(&dec);
		if (*s == '/')
			s++;
		const char *slash = strchr(s, '/');
		if (slash && slash > s && slash[1]) {
			char bucket[256];
			size_t bl = (size_t)(slash - s);
			if (bl < sizeof bucket) {
				memcpy(bucket, s, bl);
				bucket[bl] = '\0';
				ok = pol_allows(k, POL_READ, bucket, slash + 1, NULL);
			}
		}
	}
	buf_fini(&dec);
	return ok;
}

static const char *peer_header(void *r, const char *name)
{
	return req_header(r, name);
}

/* A request from another node of the cluster (cluster/peer.h): it may
 * only read objects, and is answered from this node's cache or from S3. */
static void authenticate_peer(struct req *r)
{
	struct gw *gw = r->w->gw;
	char why[160];
	unsigned hop = 0;
	const char *node = req_header(r, "X-Larder-Peer");
	if (peer_verify(gw->cfg->cluster_secret, gw->cfg->advertise, r->method, r->uri, peer_header,
	                r, time(NULL), &hop, why, sizeof why) != 0) {
		log_warn("peer", "id=%s refused a peer request from %s: %s", r->id,
		         node ? node : "?", why);
		req_fail(r, S3E_ACCESS_DENIED, why);
		return;
	}
	snprintf(r->key_id, sizeof r->key_id, "peer:%.120s", node);
	if (r->s3.target != S3T_OBJECT || r->s3.access != POL_READ) {
		req_fail(r, S3E_ACCESS_DENIED, "peers may only read objects");
		return;
	}
	r->peer_hop = hop;
	r->authorized = true;
	r->body = BODY_NONE;
	r->body_verified = true;
}

/*
 * Headers-only checks of a new request. On success the request may go
 * upstream; its body (if any) is verified as it streams.
 */
static int start_upstream(struct req *r);

/* DeleteObjects: POST ?delete on a bucket. Its keys are in the body. */
static bool is_delete_objects(const struct req *r)
{
	struct buf v;
	buf_init(&v, 64);
	bool yes = r->s3.target == S3T_BUCKET && strcmp(r->method, "POST") == 0 &&
	           s3_query_get(r->query, "delete", &v) == 1;
	buf_fini(&v);
	return yes;
}

struct delete_check {
	const struct cfg_key *k;
	const char *bucket;
};

static int delete_key_allowed(void *arg, const char *key)
{
	const struct delete_check *dc = arg;
	return pol_allows(dc->k, POL_WRITE, dc->bucket, key, NULL) ? 0 : 1;
}

/* The whole DeleteObjects body is in and verified: may this key delete
 * every object it names? Fails the request if not, else sends it on. */
static void check_delete_body(struct req *r)
{
	struct gw *gw = r->w->gw;
	pthread_rwlock_rdlock(&gw->keys_lock);
	const struct cfg *keys = gw->keys;
	struct delete_check dc = {
		.k = r->key_id[0] ? cfg_find_key(keys, r->key_id) : &keys->anonymous,
		.bucket = r->s3.bucket,
	};
	int rc = dc.k ? s3_delete_keys(r->delete_body.p, r->delete_body.len, delete_key_allowed, &dc)
	              : 1; /* the key went away in a reload */
	pthread_rwlock_unlock(&gw->keys_lock);
	if (rc < 0)
		req_fail(r, S3E_MALFORMED_XML, NULL);
	else if (rc > 0)
		req_fail(r, S3E_ACCESS_DENIED, NULL);
	else if (start_upstream(r) != 0)
		req_fail(r, S3E_INTERNAL, NULL);
}


/* Why a verification failed, in S3's words where S3 has them. */
static void fail_verify(struct req *r, enum sv4_status st, const struct sv4_request *sreq,
                        const struct sv4_auth *auth, bool v2)
{
	char msg[160];
	const char *m = NULL;
	if (st == SV4_EXPIRED) {
		m = "Request has expired";
	} else if (st == SV4_UNSIGNED_HEADER) {
		struct buf names;
		/* Twice the default header limit; a longer list is left out, never cut. */
		buf_init(&names, 32 * 1024);
		if (sv4_unsigned_amz_headers(sreq, auth, &names) > 0)
			req_err_element(r, "HeadersNotSigned", buf_cstr(&names));
		buf_fini(&names);
		m = sv4_status_str(st);
	} else if (st == SV4_BAD_EXPIRES && v2) {
		m = "Expires must be less than a week (in seconds) from now; that is, at most "
		    "604800 seconds in the future";
	} else if (st == SV4_BAD_EXPIRES) {
		snprintf(msg, sizeof msg, auth->expires < 1 ? "X-Amz-Expires must be non-negative"
		         : "X-Amz-Expires must be less than a week (in seconds); that is, the given "
		           "X-Amz-Expires must be less than %d seconds", SV4_MAX_PRESIGN_EXPIRES);
		m = msg;
	}
	req_fail(r, sv4_to_s3err(st, auth->presigned), m);
}

/*
 * The credential scope must name s3 and a region larder answers for: the
 * upstream region, the one configured for the request's bucket, or
 * us-east-1, which docs/clients.md has always told clients to use. S3
 * refuses other regions; so does larder, so that a signature made for
 * another endpoint (another service, or a gateway elsewhere that shares
 * the key) is not honoured here.
 */
static bool scope_ok(struct req *r, const struct sv4_auth *auth)
{
	const struct cfg *cfg = r->w->gw->cfg;
	const char *lead = auth->presigned ? "Error parsing the X-Amz-Credential parameter;"
	                                   : "The authorization header is malformed;";
	char msg[256];
	if (strcmp(auth->service, "s3") != 0) {
		snprintf(msg, sizeof msg, "%s incorrect service \"%s\". This endpoint belongs to \"s3\".",
		         lead, auth->service);
		req_fail(r, sv4_to_s3err(SV4_MALFORMED, auth->presigned), msg);
		return false;
	}
	const char *want = cfg->upstream_region ? cfg->upstream_region : "us-east-1";
	const char *bucket_region = r->s3.bucket[0] ? cfg_bucket_region(cfg, r->s3.bucket) : NULL;
	if (strcmp(auth->region, want) == 0 || strcmp(auth->region, "us-east-1") == 0 ||
	    (bucket_region && strcmp(auth->region, bucket_region) == 0))
		return true;
	if (bucket_region)
		want = bucket_region;
	snprintf(msg, sizeof msg, "%s the region '%s' is wrong; expecting '%s'", lead, auth->region,
	         want);
	req_fail(r, sv4_to_s3err(SV4_MALFORMED, auth->presigned), msg);
	req_err_element(r, "Region", want);
	return false;
}

/* S3 ignores nothing of a response-* override: on a request nobody
 * signed it refuses them. */
static bool has_response_override(const char *query)
{
	static const char *const names[] = {
		"response-cache-control", "response-content-disposition", "response-content-encoding",
		"response-content-language", "response-content-type", "response-expires", NULL,
	};
	struct buf v;
	buf_init(&v, S3_MAX_QUERY_BYTES);
	bool yes = false;
	for (int i = 0; names[i] && !yes; i++)
		yes = s3_query_get(query, names[i], &v) != 0;
	buf_fini(&v);
	return yes;
}

static int forward_query_headers(struct req *r, struct hdrs *h);

static void authenticate(struct req *r)
{
	struct gw *gw = r->w->gw;
	struct hdr_collect hc = { 0 };
	MHD_get_connection_values(r->conn, MHD_HEADER_KIND, collect_header, &hc);
	/* LARDER_MAX_HEADER_SIZE bounds the request line plus headers as sent
	 * ("Name: value\r\n"); MHD's memory pool is only the hard backstop. */
	size_t header_bytes = strlen(r->method) + strlen(r->uri) + 12;
	for (size_t i = 0; i < hc.n; i++)
		header_bytes += strlen(hc.v[i].name) + strlen(hc.v[i].value) + 4;
	if (header_bytes > gw->cfg->max_header_bytes) {
		free(hc.v);
		req_fail(r, S3E_HEADER_TOO_LARGE, NULL);
		return;
	}
	if (!s3_query_names_plain(r->query)) {
		free(hc.v);
		req_fail(r, S3E_INVALID_ARGUMENT, "Query parameter names must not be percent-encoded.");
		return;
	}
	enum s3err e;
	if (s3req_parse(&r->s3, r->method, req_header(r, "Host"), r->path, r->query,
	                gw->cfg->base_domain, &e) != 0) {
		free(hc.v);
		req_fail(r, e, NULL);
		return;
	}
	if (req_header(r, "X-Larder-Peer-Auth")) {
		free(hc.v);
		authenticate_peer(r);
		return;
	}
	struct sv4_request sreq = {
		.method = r->method, .path = r->path, .query = r->query,
		.headers = hc.v, .n_headers = hc.n,
	};
	struct sv4_auth auth;
	enum sv4_status st = sv4_parse(&sreq, &auth);
	/* boto3 and the AWS CLI still presign with SigV2 for a custom
	 * endpoint, and old clients sign headers with it. */
	struct sv2_auth v2;
	bool sigv2 = (st == SV4_NO_AUTH || st == SV4_UNSUPPORTED) && sv2_parse(&sreq, &v2) == SV4_OK;

	pthread_rwlock_rdlock(&gw->keys_lock);
	const struct cfg *keys = gw->keys;
	const struct cfg_key *k = NULL;
	unsigned char signing_key[32];
	if (sigv2) {
		if (!(k = cfg_find_key(keys, v2.access_key))) {
			req_fail(r, S3E_INVALID_ACCESS_KEY, NULL);
		} else {
			snprintf(r->key_id, sizeof r->key_id, "%s", v2.access_key);
			struct buf resource;
			buf_init(&resource, strlen(r->path) + sizeof r->s3.bucket + 2);
			buf_printf(&resource, "%s%s%s", r->s3.virtual_host ? "/" : "",
			           r->s3.virtual_host ? r->s3.bucket : "", r->path);
			enum sv4_status v = sv2_verify(&sreq, &v2, buf_cstr(&resource), k->secret,
			                               time(NULL), gw->cfg->max_skew_s);
			buf_fini(&resource);
			if (v != SV4_OK) {
				auth.presigned = v2.presigned;
				fail_verify(r, v, &sreq, &auth, true);
				k = NULL;
			}
		}
		st = SV4_OK;
		auth.presigned = true; /* SigV2 signs no payload hash: the body is unsigned */
		r->presigned_v2 = r->presigned = v2.presigned;
	} else if (st == SV4_NO_AUTH) {
		if (keys->anonymous.n_grants)
			k = &keys->anonymous;
		else
			req_fail(r, S3E_ACCESS_DENIED, NULL);
	} else if (st != SV4_OK) {
		req_fail(r, sv4_to_s3err(st, auth.presigned), sv4_status_str(st));
	} else if (!scope_ok(r, &auth)) {
		k = NULL;
	} else if (!(k = cfg_find_key(keys, auth.access_key))) {
		req_fail(r, S3E_INVALID_ACCESS_KEY, NULL);
	} else {
		snprintf(r->key_id, sizeof r->key_id, "%s", auth.access_key);
		r->presigned = auth.presigned;
		st = sv4_verify(&sreq, &auth, k->secret, time(NULL), gw->cfg->max_skew_s, signing_key);
		if (st != SV4_OK) {
			fail_verify(r, st, &sreq, &auth, false);
			k = NULL;
		}
	}
	size_t n_copy = 0;
	sv4_header(&sreq, SLICE_LIT("x-amz-copy-source"), &n_copy);
	if (k && !r->has_err && n_copy > 1) {
		/* The policy would check one source and upstream see another. */
		req_fail(r, S3E_INVALID_ARGUMENT, "Only one x-amz-copy-source header is allowed");
		k = NULL;
	}
	if (k && !r->has_err && r->presigned && forward_query_headers(r, NULL) != 0) {
		req_fail(r, S3E_INVALID_ARGUMENT, "A header carried in the query is not a valid "
		         "header");
		k = NULL;
	}
	if (k == &keys->anonymous && !r->has_err && has_response_override(r->query)) {
		req_fail(r, S3E_INVALID_REQUEST, "Request specific response headers cannot be used "
		         "for anonymous GET requests.");
		k = NULL;
	}
	if (k && !r->has_err) {
		const char *bucket = r->s3.target == S3T_SERVICE ? NULL : r->s3.bucket;
		const char *key = r->s3.target == S3T_OBJECT ? buf_cstr(&r->s3.key) : NULL;
		const char *list_prefix = r->s3.listing ? buf_cstr(&r->s3.list_prefix) : NULL;
		const char *copy = req_header(r, "x-amz-copy-source");
		bool allowed = pol_allows(k, r->s3.access, bucket, key, list_prefix);
		/* A key with a prefix grant may delete many objects at once when
		 * each is under its grant: decided once the body is in. */
		if (!allowed && is_delete_objects(r)) {
			r->check_delete = allowed = true;
			buf_init(&r->delete_body, DELETE_BODY_MAX);
		}
		if (!allowed || (copy && !copy_source_allowed(k, copy)))
			req_fail(r, S3E_ACCESS_DENIED, NULL);
		else
			r->authorized = true;
	}
	pthread_rwlock_unlock(&gw->keys_lock);
	free(hc.v);
	if (r->has_err)
		return;

	/* What the body is and how it is checked. */
	const char *cl = req_header(r, "Content-Length");
	const char *te = req_header(r, "Transfer-Encoding");
	const char *claimed = st == SV4_OK && !auth.presigned ? auth.payload_hash : SV4_UNSIGNED_PAYLOAD;
	int64_t len = 0;
	if (cl) {
		char *end;
		errno = 0;
		long long v = strtoll(cl, &end, 10);
		if (errno || *end || v < 0 || end == cl) {
			req_fail(r, S3E_INVALID_ARGUMENT, "Content-Length is not a number");
			return;
		}
		len = v;
	} else if (te) {
		len = -1; /* chunked: the length is known when the body ends */
	}
	if (!claimed[0]) {
		req_fail(r, S3E_INVALID_REQUEST,
		     "Missing required header for this request: x-amz-content-sha256");
		return;
	}
	int mode = ack_mode_from_payload_hash(claimed);
	if (mode >= 0) {
		const char *dl = req_header(r, "x-amz-decoded-content-length");
		char *end = NULL;
		long long v = dl ? strtoll(dl, &end, 10) : -1;
		if (!dl || *end || v < 0) {
			req_fail(r, S3E_MISSING_CONTENT_LENGTH,
			     "aws-chunked uploads need x-amz-decoded-content-length");
			return;
		}
		char scope[160];
		snprintf(scope, sizeof scope, "%s/%s/%s/aws4_request", auth.date, auth.region,
		         auth.service);
		r->ack = ack_create((enum ack_mode)mode, signing_key, auth.signature, auth.amz_date,
		                    scope, v, req_header(r, "x-amz-trailer"), chunk_sink, r);
		if (!r->ack) {
			req_fail(r, S3E_INTERNAL, NULL);
			return;
		}
		r->body = BODY_CHUNKED;
		r->up_len = v;
	} else if (len != 0) {
		/* A Transfer-Encoding: chunked body of unknown length (S3 takes it)
		 * goes upstream chunked too: up_len < 0. */
		r->body = BODY_RAW;
		r->up_len = len;
		if (strcmp(claimed, SV4_UNSIGNED_PAYLOAD) != 0) {
			if (strlen(claimed) != 64 || strspn(claimed, "0123456789abcdefABCDEF") != 64) {
				req_fail(r, S3E_INVALID_ARGUMENT, "x-amz-content-sha256 must be UNSIGNED-PAYLOAD, "
				     "STREAMING-AWS4-HMAC-SHA256-PAYLOAD or a valid sha256 value.");
				return;
			}
			memcpy(r->want_sha, claimed, 65);
			r->sha = EVP_MD_CTX_new();
			if (!r->sha || !EVP_DigestInit_ex(r->sha, EVP_sha256(), NULL)) {
				req_fail(r, S3E_INTERNAL, NULL);
				return;
			}
		}
	} else {
		r->body = BODY_NONE;
		r->up_len = 0;
		if (strcmp(claimed, SV4_UNSIGNED_PAYLOAD) != 0 &&
		    strcasecmp(claimed, SV4_EMPTY_SHA256) != 0) {
			req_fail(r, S3E_BAD_DIGEST, NULL);
			return;
		}
	}
	if (r->check_delete && (r->body != BODY_RAW || r->up_len < 0 || r->up_len > DELETE_BODY_MAX)) {
		req_fail(r, S3E_ACCESS_DENIED, "DeleteObjects under a key prefix grant needs a plain "
		         "body of at most 2 MiB");
		return;
	}
	/* A body of unknown length is whole (so verified) only when it ends. */
	r->body_verified = r->body == BODY_NONE ||
	                   (r->body == BODY_RAW && !r->sha && !r->check_delete && r->up_len >= 0);
}

/* ------------------------------------------------------------------ */
/* upstream transfer */

static bool hop_by_hop(const char *name)
{
	static const char *const names[] = {
		"connection", "keep-alive", "proxy-authorization", "proxy-authenticate",
		"proxy-connection", "te", "trailer", "trailers", "transfer-encoding", "upgrade", NULL,
	};
	for (int i = 0; names[i]; i++)
		if (strcasecmp(name, names[i]) == 0)
			return true;
	return false;
}

/* Client headers that larder replaces or that only meant something on
 * the client's hop. */
static bool dropped_request_header(const char *name, bool chunked)
{
	static const char *const names[] = {
		"host", "authorization", "expect", "content-length", "x-amz-date", "date",
		"x-amz-content-sha256", "x-amz-security-token", NULL,
	};
	if (hop_by_hop(name))
		return true;
	for (int i = 0; names[i]; i++)
		if (strcasecmp(name, names[i]) == 0)
			return true;
	return chunked && (strcasecmp(name, "x-amz-decoded-content-length") == 0 ||
	                   strcasecmp(name, "x-amz-trailer") == 0 ||
	                   strcasecmp(name, "x-amz-sdk-checksum-algorithm") == 0);
}

/* Content-Encoding without the aws-chunked token (larder decodes it). */
static void strip_aws_chunked(const char *v, char *out, size_t n)
{
	out[0] = '\0';
	size_t used = 0;
	while (*v) {
		size_t len = strcspn(v, ",");
		const char *s = v;
		size_t l = len;
		while (l && (*s == ' ' || *s == '\t')) { s++; l--; }
		while (l && (s[l - 1] == ' ' || s[l - 1] == '\t')) l--;
		if (l && !(l == 11 && strncasecmp(s, "aws-chunked", 11) == 0) && used + l + 2 < n) {
			if (used)
				out[used++] = ',';
			memcpy(out + used, s, l);
			used += l;
			out[used] = '\0';
		}
		v += len;
		if (*v == ',')
			v++;
	}
}

struct fwd_ctx {
	struct hdrs *h;
	bool chunked;
	int rc;
};

static enum MHD_Result forward_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                      const char *value)
{
	struct fwd_ctx *f = cls;
	(void)kind;
	if (f->rc || dropped_request_header(key, f->chunked))
		return MHD_YES;
	if (f->chunked && strcasecmp(key, "content-encoding") == 0) {
		char ce[256];
		strip_aws_chunked(value ? value : "", ce, sizeof ce);
		if (ce[0])
			f->rc = hdrs_add(f->h, key, ce);
		return MHD_YES;
	}
	f->rc = hdrs_add(f->h, key, value ? value : "");
	return MHD_YES;
}

/* A decoded name that is an RFC 9110 token and a value without control
 * bytes (a CR or LF would add a header of the client's own upstream). */
static bool header_field_ok(const struct buf *name, const struct buf *value)
{
	if (!sv4_is_token(name->p, name->len))
		return false;
	for (size_t i = 0; i < value->len; i++) {
		unsigned char c = (unsigned char)value->p[i];
		if ((c < ' ' && c != '\t') || c == 0x7f)
			return false;
	}
	return true;
}

/*
 * A presigned URL may carry x-amz-* headers as query parameters: botocore's
 * SigV2 HmacV1QueryAuth moves them there, the JavaScript SDK's presigner
 * hoists them under SigV4, and S3 applies them as headers. They are covered
 * by the signature (SigV2: as amz headers when the request does not send
 * that header itself; SigV4: in the canonical query), so they go upstream
 * as headers, which larder signs. Those larder replaces are left out.
 * h NULL only checks them: -EINVAL for one that cannot be a header.
 */
static int forward_query_headers(struct req *r, struct hdrs *h)
{
	const char *q = r->query;
	struct buf name, value;
	buf_init(&name, 256);
	buf_init(&value, S3_MAX_QUERY_BYTES);
	int rc = 0;
	while (*q && !rc) {
		size_t len = strcspn(q, "&");
		const char *eq = memchr(q, '=', len);
		size_t klen = eq ? (size_t)(eq - q) : len;
		buf_reset(&name);
		buf_reset(&value);
		bool amz = klen > 6 && strncasecmp(q, "x-amz-", 6) == 0;
		if (amz && (sv4_uri_decode(q, klen, &name) != 0 ||
		            (eq && sv4_uri_decode(eq + 1, len - klen - 1, &value) != 0) ||
		            !header_field_ok(&name, &value)))
			rc = -EINVAL;
		else if (amz && h && !dropped_request_header(buf_cstr(&name), false) &&
		         !sv4_is_query_auth_param(buf_cstr(&name)) && !req_header(r, buf_cstr(&name)))
			rc = hdrs_add(h, buf_cstr(&name), buf_cstr(&value));
		q += len;
		if (*q == '&')
			q++;
	}
	buf_fini(&name);
	buf_fini(&value);
	return rc;
}

static bool is_v2_presign_param(const char *q, size_t len)
{
	static const char *const names[] = { "AWSAccessKeyId", "Signature", "Expires", NULL };
	for (int i = 0; names[i]; i++) {
		size_t n = strlen(names[i]);
		if (len >= n && strncmp(q, names[i], n) == 0 && (len == n || q[n] == '='))
			return true;
	}
	return false;
}

/* The query sent upstream: the client's, byte for byte, minus the
 * parameters of a presigned URL (larder signs with a header). */
static char *upstream_query(const char *q, bool presigned_v2)
{
	size_t n = strlen(q);
	char *out = malloc(n + 1);
	if (!out)
		return NULL;
	size_t used = 0;
	while (*q) {
		size_t len = strcspn(q, "&");
		bool presign = (len >= 6 && strncasecmp(q, "X-Amz-", 6) == 0) ||
		               (presigned_v2 && is_v2_presign_param(q, len));
		if (!presign && len) {
			if (used)
				out[used++] = '&';
			memcpy(out + used, q, len);
			used += len;
		}
		q += len;
		if (*q == '&')
			q++;
	}
	out[used] = '\0';
	return out;
}

static size_t on_upstream_header(char *data, size_t size, size_t n, void *arg)
{
	struct req *r = arg;
	size_t len = size * n;
	assert(r->magic == REQ_MAGIC);
	if (len >= 5 && strncmp(data, "HTTP/", 5) == 0) {
		/* A new status line (after a 1xx, or a retry): start over. */
		hdrs_fini(&r->uresp);
		r->uresp_bytes = 0;
		const char *sp = memchr(data, ' ', len);
		r->ustatus = sp ? strtol(sp + 1, NULL, 10) : 0;
		return len;
	}
	if (len <= 2 && (len == 0 || data[0] == '\r' || data[0] == '\n')) {
		if (r->ustatus < 200)
			return len; /* end of an interim response */
		const char *br = hdrs_get(&r->uresp, "x-amz-bucket-region");
		if (br && r->s3.bucket[0] && upstream_learn_region(r->w->gw->up, r->s3.bucket, br) &&
		    (r->ustatus == 301 || r->ustatus == 400) && r->body == BODY_NONE && r->retries == 0) {
			r->retry = true; /* signed for the wrong region: send again */
			return len;
		}
		const char *cl = hdrs_get(&r->uresp, "Content-Length");
		r->resp_len = MHD_SIZE_UNKNOWN;
		if (cl) {
			char *end;
			unsigned long long v = strtoull(cl, &end, 10);
			if (*end == '\0' && end != cl)
				r->resp_len = v;
		}
		r->uhdrs_done = true;
		cache_learn(r);
		req_wake(r);
		return len;
	}
	r->uresp_bytes += len;
	if (r->uresp_bytes > MAX_UPSTREAM_HEADER_BYTES)
		return 0; /* fails the transfer: larder answers 503 */
	return hdrs_add_line(&r->uresp, data, len) == 0 ? len : 0;
}

static size_t on_upstream_body(char *data, size_t size, size_t n, void *arg)
{
	struct req *r = arg;
	size_t len = size * n;
	assert(r->magic == REQ_MAGIC);
	if (r->retry)
		return len; /* the wrong-region error body: dropped */
	if (!r->conn)
		return 0;   /* client gone */
	if (len > pbuf_room(&r->downbuf)) {
		r->write_paused = true;
		return CURL_WRITEFUNC_PAUSE;
	}
	if (pbuf_put(&r->downbuf, data, len) != 0)
		return 0;
	listcache_capture(r, data, len);
	req_wake(r);
	return len;
}

static size_t on_upstream_read(char *out, size_t size, size_t n, void *arg)
{
	struct req *r = arg;
	size_t max = size * n;
	assert(r->magic == REQ_MAGIC);
	if (r->has_err)
		return CURL_READFUNC_ABORT;
	size_t avail = pbuf_used(&r->upbuf);
	/* Hold back the last byte until the body is verified: upstream stores
	 * nothing from a request whose body stops short. */
	if (r->check_delete) { /* the whole body, checked, waits in delete_body */
		size_t left = r->delete_body.len - (size_t)r->up_sent;
		size_t got = left < max ? left : max;
		memcpy(out, r->delete_body.p + r->up_sent, got);
		r->up_sent += got;
		return got;
	}
	if (r->up_len < 0) { /* chunked upstream: the body ends when the client's does */
		if (r->body_verified && avail == 0)
			return 0;
		if (!r->body_verified && avail)
			avail--;
	} else {
		uint64_t left = (uint64_t)r->up_len - r->up_sent;
		if (!r->body_verified && avail >= left)
			avail = left ? (size_t)left - 1 : 0;
	}
	if (avail == 0) {
		r->read_paused = true;
		return CURL_READFUNC_PAUSE;
	}
	size_t got = pbuf_take(&r->upbuf, out, avail < max ? avail : max);
	r->up_sent += got;
	req_wake(r); /* the upload may have been waiting for room */
	return got;
}

static int start_upstream(struct req *r)
{
	struct gw *gw = r->w->gw;
	struct hdrs h;
	hdrs_init(&h);
	int rc = 0;
	if (!r->up_query && !(r->up_query = upstream_query(r->query, r->presigned_v2)))
		rc = -ENOMEM;
	if (!rc)
		rc = upstream_target(gw->up, r->s3.bucket,
		                     r->s3.target == S3T_OBJECT ? buf_cstr(&r->s3.key) : NULL,
		                     r->up_query, &r->target);
	struct fwd_ctx f = { &h, r->body == BODY_CHUNKED, 0 };
	if (!rc) {
		MHD_get_connection_values(r->conn, MHD_HEADER_KIND, forward_header, &f);
		rc = f.rc;
	}
	if (!rc && r->presigned)
		rc = forward_query_headers(r, &h);
	/* The payload hash upstream checks: the client's own when it signed
	 * the body (so S3 verifies it again), else UNSIGNED-PAYLOAD. */
	const char *payload = r->sha ? r->want_sha
	                    : r->body == BODY_NONE ? SV4_EMPTY_SHA256 : SV4_UNSIGNED_PAYLOAD;
	rc = rc ? rc : hdrs_add(&h, "Host", buf_cstr(&r->target.host));
	rc = rc ? rc : hdrs_add(&h, "X-Amz-Content-SHA256", payload);
	rc = rc ? rc : upstream_sign(gw->up, r->method, &r->target, r->up_query, &h);
	if (rc) {
		hdrs_fini(&h);
		return rc;
	}

	curl_slist_free_all(r->slist);
	r->slist = hdrs_to_curl(&h);
	hdrs_fini(&h);
	if (!r->slist)
		return -ENOMEM;

	if (upstream_easy_prepare(&r->easy, gw->up, &r->target, r->slist, on_upstream_header,
	                          on_upstream_body, r, r->curl_err) != 0)
		return -ENOMEM;
	CURL *e = r->easy;
	if (strcmp(r->method, "HEAD") == 0) {
		curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
	} else if (r->body != BODY_NONE || strcmp(r->method, "PUT") == 0 ||
	           strcmp(r->method, "POST") == 0) {
		/* Any method with a body: curl's upload machinery, method named. */
		curl_easy_setopt(e, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(e, CURLOPT_INFILESIZE_LARGE, (curl_off_t)r->up_len);
		curl_easy_setopt(e, CURLOPT_READFUNCTION, on_upstream_read);
		curl_easy_setopt(e, CURLOPT_READDATA, r);
		if (strcmp(r->method, "PUT") != 0)
			curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, r->method);
	} else if (strcmp(r->method, "GET") != 0) {
		curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, r->method);
	}
	r->uhdrs_done = false;
	r->udone = false;
	r->uresult = CURLE_OK;
	r->ustatus = 0;
	r->retry = false;
	r->read_paused = r->write_paused = false;
	hdrs_fini(&r->uresp);
	if (curlev_add(r->w->curl, e) != 0)
		return -EIO;
	r->easy_running = true;
	r->refs++;
	return 0;
}

void proxy_curl_done(CURL *easy, CURLcode result, void *arg)
{
	struct req *r = NULL;
	curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&r);
	if (r && *(unsigned *)r == FETCH_MAGIC) { /* a cache fill, not a client's request */
		fetch_curl_done((struct fetch *)r, result);
		return;
	}
	if (r && *(unsigned *)r == PREFETCH_MAGIC) { /* a prefetch job's listing */
		prefetch_curl_done(r, (int)result);
		return;
	}
	assert(r && r->magic == REQ_MAGIC && r->easy == easy);
	(void)arg;
	r->easy_running = false;
	if (r->retry && r->conn && !r->has_err) {
		r->retries++;
		log_info("upstream", "id=%s retrying in region %s", r->id, r->target.region);
		if (start_upstream(r) == 0) {
			req_unref(r); /* start_upstream took a new reference */
			return;
		}
	}
	r->udone = true;
	metrics_upstream_curl(easy, r->ustatus, result, false);
	r->uresult = result;
	if (result == CURLE_OK) {
		cache_invalidate(r);
		listcache_store(r);
	}
	if (result != CURLE_OK)
		log_warn("upstream", "id=%s %s %s: %s", r->id, r->method, buf_cstr(&r->target.url),
		         r->curl_err[0] ? r->curl_err : curl_easy_strerror(result));
	req_wake(r);
	req_unref(r);
}

/* ------------------------------------------------------------------ */
/* request body */


/* Takes as much of the client's body as there is room for; returns the
 * number of bytes consumed. */
static size_t take_body(struct req *r, const char *data, size_t len)
{
	if (r->has_err || r->udone) {
		r->bytes_in += len; /* nobody will use it: read and drop */
		return len;
	}
	size_t room = pbuf_room(&r->upbuf);
	size_t n = len < room ? len : room;
	if (n == 0)
		return 0;
	if (r->body == BODY_CHUNKED) {
		/* Decoded bytes never outnumber encoded ones, so n fits. */
		enum ack_status st = ack_feed(r->ack, data, n);
		if (st < 0) {
			req_fail(r, st == ACK_ERR_SIGNATURE ? S3E_SIGNATURE_MISMATCH
			      : st == ACK_ERR_CHECKSUM ? S3E_BAD_CHECKSUM
			      : st == ACK_ERR_LENGTH ? S3E_INCOMPLETE_BODY : S3E_INVALID_CHUNK, NULL);
			stop_upstream(r);
		} else if (st == ACK_DONE) {
			r->body_verified = true;
		}
	} else {
		if (r->up_len >= 0 && r->up_queued + n > (uint64_t)r->up_len) {
			req_fail(r, S3E_INCOMPLETE_BODY, NULL);
			stop_upstream(r);
			r->bytes_in += len;
			return len;
		}
		if (r->sha)
			EVP_DigestUpdate(r->sha, data, n);
		if (r->check_delete)
			buf_append(&r->delete_body, data, n); /* fits: up_len <= its max */
		else
			pbuf_put(&r->upbuf, data, n);
		r->up_queued += n;
	}
	r->bytes_in += n;
	if (r->read_paused)
		want_unpause(r);
	return n;
}

/* The client's body has ended: is it what was signed? */
static void finish_body(struct req *r)
{
	r->client_body_done = true;
	if (r->has_err || r->body == BODY_NONE)
		return;
	if (r->body == BODY_CHUNKED) {
		if (!r->body_verified && ack_finish(r->ack) != ACK_DONE)
			req_fail(r, S3E_INCOMPLETE_BODY, NULL);
		else
			r->body_verified = true;
	} else if (r->up_len >= 0 && r->up_queued != (uint64_t)r->up_len) {
		req_fail(r, S3E_INCOMPLETE_BODY, NULL);
	} else if (r->sha) {
		unsigned char md[32];
		char hex[65];
		unsigned mdlen = 0;
		EVP_DigestFinal_ex(r->sha, md, &mdlen);
		hex_encode(md, 32, hex);
		if (strcasecmp(hex, r->want_sha) != 0)
			req_fail(r, S3E_BAD_DIGEST, NULL);
		else
			r->body_verified = true;
	} else {
		r->body_verified = true;
	}
	if (r->check_delete && !r->has_err)
		check_delete_body(r);
	if (r->has_err)
		stop_upstream(r);
	else if (r->read_paused)
		want_unpause(r);
}

/* ------------------------------------------------------------------ */
/* response */

static ssize_t read_response(void *cls, uint64_t pos, char *out, size_t max)
{
	struct req *r = cls;
	assert(r->magic == REQ_MAGIC);
	(void)pos;
	if (pbuf_used(&r->downbuf)) {
		size_t n = pbuf_take(&r->downbuf, out, max);
		r->bytes_out += n;
		if (r->write_paused)
			want_unpause(r);
		return (ssize_t)n;
	}
	if (r->udone) {
		bool complete = r->uresult == CURLE_OK &&
		                (r->resp_len == MHD_SIZE_UNKNOWN || r->bytes_out == r->resp_len);
		return complete ? MHD_CONTENT_READER_END_OF_STREAM : MHD_CONTENT_READER_END_WITH_ERROR;
	}
	if (r->write_paused)
		want_unpause(r);
	req_suspend(r);
	return 0;
}

static void response_done(void *cls)
{
	req_unref(cls);
}

static enum MHD_Result respond_upstream(struct req *r)
{
	bool bodyless = strcmp(r->method, "HEAD") == 0 || r->ustatus == 204 || r->ustatus == 304;
	uint64_t size = r->resp_len;
	if (bodyless && size == MHD_SIZE_UNKNOWN)
		size = 0;
	struct MHD_Response *resp = MHD_create_response_from_callback(size, 64 * 1024, read_response,
	                                                              r, response_done);
	if (!resp)
		return MHD_NO;
	r->refs++;
	for (size_t i = 0; i < r->uresp.n; i++) {
		const char *n = r->uresp.v[i].name;
		if (hop_by_hop(n) || strcasecmp(n, "content-length") == 0)
			continue;
		req_add_response_header(resp, n, r->uresp.v[i].value);
	}
	if (r->w->gw->store && r->s3.target == S3T_OBJECT &&
	    (strcmp(r->method, "GET") == 0 || strcmp(r->method, "HEAD") == 0))
	{
		MHD_add_response_header(resp, "x-larder-cache", "bypass");
		r->bypass_logged = true;
	}
	/* S3 always names its request; an S3-compatible upstream may not. */
	if (!hdrs_get(&r->uresp, "x-amz-request-id"))
		MHD_add_response_header(resp, "x-amz-request-id", r->id);
	req_add_common_headers(r, resp);
	r->status_sent = (int)r->ustatus;
	enum MHD_Result ret = MHD_queue_response(r->conn, (unsigned)r->ustatus, resp);
	MHD_destroy_response(resp);
	r->responded = true;
	return ret;
}

/* ------------------------------------------------------------------ */
/* MHD callbacks */

void *proxy_uri_cb(void *cls, const char *uri, struct MHD_Connection *conn)
{
	struct worker *w = cls;
	struct req *r = calloc(1, sizeof *r);
	if (!r)
		return NULL;
	r->magic = REQ_MAGIC;
	r->refs = 1;
	r->w = w;
	buf_init(&r->err_extra, 64 * 1024); /* a Range header or a list of header names, escaped */
	r->conn = conn;
	r->t_start = clock_mono_s();
	r->uri = strdup(uri ? uri : "/");
	r->path = r->uri ? strdup(r->uri) : NULL;
	if (!r->uri || !r->path) {
		free(r->uri);
		free(r->path);
		free(r);
		return NULL;
	}
	char *q = strchr(r->path, '?');
	if (q)
		*q++ = '\0';
	r->query = q ? q : r->path + strlen(r->path);
	snprintf(r->id, sizeof r->id, "%02X%06lX%08lX", w->index & 0xff, (w->next_id++) & 0xffffff,
	         (unsigned long)((unsigned)time(NULL) ^ (unsigned)random()) & 0xffffffffUL);
	s3req_init(&r->s3);
	up_target_init(&r->target);
	hdrs_init(&r->uresp);
	r->resp_len = MHD_SIZE_UNKNOWN;
	r->next = w->live;
	if (w->live)
		w->live->prev = r;
	w->live = r;
	w->n_live++;
	return r;
}

enum MHD_Result proxy_access_cb(void *cls, struct MHD_Connection *conn, const char *url,
                                const char *method, const char *version,
                                const char *upload_data, size_t *upload_data_size,
                                void **req_cls)
{
	struct worker *w = cls;
	struct req *r = *req_cls;
	(void)conn;
	(void)url;
	(void)version;
	if (!r || r->magic != REQ_MAGIC)
		return MHD_NO;
	if (!r->started) {
		r->started = true;
		snprintf(r->method, sizeof r->method, "%s", method);
		if (atomic_load(&w->gw->open_connections) > w->gw->cfg->max_connections)
			req_fail(r, S3E_SLOW_DOWN, NULL);
		else
			authenticate(r);
		if (r->has_err)
			return req_respond_error(r);
		if (cache_wants(r)) {
			cache_begin(r);
			return MHD_YES;
		}
		if (listcache_begin(r))
			return MHD_YES; /* answered from the LIST cache below */
		if (r->check_delete)
			return MHD_YES; /* upstream once the body is in and checked */
		if (start_upstream(r) != 0) {
			req_fail(r, S3E_INTERNAL, NULL);
			return req_respond_error(r);
		}
		return MHD_YES;
	}
	if (*upload_data_size) {
		size_t used = take_body(r, upload_data, *upload_data_size);
		*upload_data_size -= used;
		if (*upload_data_size)
			req_suspend(r); /* no room: wait for curl to drain */
		return MHD_YES;
	}
	if (r->responded)
		return MHD_YES;
	if (!r->client_body_done)
		finish_body(r);
	if (cache_active(r) && cache_passes(r)) {
		/* The object turned out not cacheable (no usable ETag, SSE-C),
		 * or it asks for a part whose bytes are not known yet: the
		 * pass-through serves this request as it would any other. */
		cache_end(r);
		if (start_upstream(r) != 0) {
			req_fail(r, S3E_INTERNAL, NULL);
			return req_respond_error(r);
		}
		req_suspend(r);
		return MHD_YES;
	}
	if (cache_active(r))
		return cache_respond(r);
	if (listcache_hit(r) && !r->has_err)
		return listcache_respond(r);
	if (r->has_err)
		return req_respond_error(r);
	if (r->uhdrs_done)
		return respond_upstream(r);
	if (r->udone) {
		req_fail(r, S3E_SERVICE_UNAVAILABLE, NULL);
		return req_respond_error(r);
	}
	req_suspend(r);
	return MHD_YES;
}

static const char *toe_str(enum MHD_RequestTerminationCode toe)
{
	switch (toe) {
	case MHD_REQUEST_TERMINATED_COMPLETED_OK: return NULL;
	case MHD_REQUEST_TERMINATED_TIMEOUT_REACHED: return "client-timeout";
	case MHD_REQUEST_TERMINATED_CLIENT_ABORT: return "client-abort";
	case MHD_REQUEST_TERMINATED_READ_ERROR: return "client-read-error";
	case MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN: return "shutdown";
	default: return "error";
	}
}

void proxy_completed_cb(void *cls, struct MHD_Connection *conn, void **req_cls,
                        enum MHD_RequestTerminationCode toe)
{
	struct worker *w = cls;
	struct req *r = *req_cls;
	(void)conn;
	if (!r || r->magic != REQ_MAGIC)
		return;
	*req_cls = NULL;
	r->conn = NULL;
	r->suspended = false;
	stop_upstream(r); /* the client is gone or done: nothing more to fetch */
	if (r->started) {
		const char *err = r->has_err ? s3err_code(r->err) : toe_str(toe);
		if (!err && r->udone && r->uresult != CURLE_OK && r->uresult != CURLE_ABORTED_BY_CALLBACK)
			err = "upstream-error";
		struct log_access_rec rec = {
			.request_id = r->id,
			.key_id = r->key_id[0] ? r->key_id : NULL,
			.method = r->method,
			.bucket = r->s3.bucket[0] ? r->s3.bucket : NULL,
			.key = r->s3.target == S3T_OBJECT ? buf_cstr(&r->s3.key) : NULL,
			.status = r->status_sent,
			.bytes_in = r->bytes_in,
			.bytes_out = r->bytes_out,
			.duration_ms = (clock_mono_s() - r->t_start) * 1000.0,
			.upstream_status = (int)r->ustatus,
			.error_code = err,
			.cache = cache_active(r) ? cache_outcome(r, true)
			       : r->bypass_logged ? "bypass" : listcache_hit(r) ? "hit" : NULL,
		};
		log_access(&rec);
		metrics_request(s3_operation(r->method, (int)r->s3.target, r->query,
		                             MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
		                                                         "x-amz-copy-source") != NULL),
		                rec.status, r->authorized ? rec.bucket : NULL, rec.key_id,
		                listcache_hit(r) ? NULL : rec.cache, /* object reads only */
		                rec.bytes_out, rec.bytes_in);
	}
	cache_end(r);
	if (r->prev)
		r->prev->next = r->next;
	else
		w->live = r->next;
	if (r->next)
		r->next->prev = r->prev;
	w->n_live--;
	req_unref(r);
}

void proxy_abort_all(struct worker *w)
{
	for (struct req *r = w->live; r; r = r->next) {
		stop_upstream(r);
		req_wake(r);
	}
}

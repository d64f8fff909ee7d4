/*
 * authn.c - who sent a request and what it may do: the request line and
 * headers in (SigV4, SigV2, a peer's signature, or anonymous; the scope,
 * the key's grants), the principal (key_id, authorized) and the body plan
 * out (how the body is framed, how long, how it is verified). Everything
 * here runs once, on the first access callback, before any byte of the
 * body; DeleteObjects under a prefix grant and RestoreObject are decided
 * again when their body is in (authn_check_body).
 */
#include "gateway/authn.h"

#include <errno.h>
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
#include "base/buf.h"
#include "base/hdrs.h"
#include "base/log.h"
#include "base/sha256.h"
#include "cluster/peer.h"
#include "gateway/passthrough.h"
#include "gateway/request_internal.h"
#include "gateway/s3err.h"
#include "gateway/s3req.h"

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

/* strlen(v); *line_break set when v holds a CR or LF. libmicrohttpd keeps
 * a bare CR inside a value, and an upstream that takes it for a line end
 * would read what follows as another header: one that larder never checked
 * (x-amz-copy-source) nor signed. Both scans are glibc's vector ones: this
 * runs over every header of every request. */
static size_t value_len(const char *v, bool *line_break)
{
	size_t n = strlen(v);
	if (strcspn(v, "\r\n") != n)
		*line_break = true;
	return n;
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

/* Why a read a prefix grant covers in its plain form is refused
 * (POL_INSPECT). */
#define INSPECT_DENIED "Reading an object's earlier versions, ACL, tags or lock needs a grant " \
	"of the whole bucket"

struct source_check {
	const struct client_key *k;
	enum pol_access access;
};

static int source_object_allowed(void *arg, const char *bucket, const char *key)
{
	const struct source_check *sc = arg;
	return pol_allows(sc->k, sc->access, bucket, key, NULL) ? 0 : 1;
}

/* Whether k may act (access) on every object a copy or rename source
 * names, however S3 reads it (s3_source_objects). */
static bool source_allowed(const struct client_key *k, const char *src, enum pol_access access)
{
	struct source_check sc = { k, access };
	return s3_source_objects(src, source_object_allowed, &sc) == 0;
}

/* Headers that name another object S3 acts on, and what the key needs
 * there: CopyObject and UploadPartCopy read their source; RenameObject
 * (directory buckets) reads and removes it. */
static const struct {
	const char *name;
	bool write;
	const char *twice; /* the message when a request names two */
} source_headers[] = {
	{ "x-amz-copy-source", false, "Only one x-amz-copy-source header is allowed" },
	{ "x-amz-rename-source", true, "Only one x-amz-rename-source header is allowed" },
};

/* Whether every source r names is within k's grants. A source counts as
 * a header, or in a presigned URL as the query parameter passthrough
 * forwards as that header (pass_query_headers); one of each kind at most,
 * so the policy checks the one S3 sees. Fails r when not. */
static bool sources_allowed(struct req *r, const struct client_key *k,
                            const struct sv4_request *sreq)
{
	struct buf q;
	buf_init(&q, S3_MAX_QUERY_BYTES);
	for (size_t i = 0; !r->has_err && i < sizeof source_headers / sizeof source_headers[0]; i++) {
		const char *name = source_headers[i].name;
		size_t n = 0;
		const char *src = sv4_header(sreq, slice_cstr(name), &n);
		unsigned nq = r->presigned ? pass_query_header(r, name, &q) : 0;
		if (n + nq > 1)
			req_fail(r, S3E_INVALID_ARGUMENT, source_headers[i].twice);
		else if (nq)
			src = buf_cstr(&q);
		if (r->has_err || !src)
			continue;
		/* "bucket/key?versionId=...": an earlier version (inspects_object) */
		enum pol_access read = strchr(src, '?') ? POL_INSPECT : POL_READ;
		if (!source_allowed(k, src, read) ||
		    (source_headers[i].write && !source_allowed(k, src, POL_WRITE)))
			req_fail(r, S3E_ACCESS_DENIED, read == POL_INSPECT &&
			         source_allowed(k, src, POL_READ) ? INSPECT_DENIED : NULL);
	}
	buf_fini(&q);
	return !r->has_err;
}

static const char *peer_header(void *r, const char *name)
{
	return req_header(r, name);
}

/* POST Object: a POST to a bucket whose body is an HTML form. */
static bool is_form_upload(struct req *r)
{
	const char *ct = req_header(r, "Content-Type");
	return strcmp(r->method, "POST") == 0 && r->s3.target == S3T_BUCKET && ct &&
	       strncasecmp(ct, "multipart/form-data", 19) == 0;
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
	r->key_verified = true;
	r->from_peer = true;
	if (r->s3.target != S3T_OBJECT || r->s3.access != POL_READ) {
		req_fail(r, S3E_ACCESS_DENIED, "peers may only read objects");
		return;
	}
	r->peer_hop = hop;
	r->authorized = true;
	r->body = BODY_NONE;
	r->body_verified = true;
}

/* Whether r is a POST on a target of kind t carrying the subresource
 * param: DeleteObjects (POST /bucket?delete), whose keys are in the body,
 * and RestoreObject (POST /bucket/key?restore), whose body may name where
 * a SELECT restore writes. Both bodies are checked (authn_check_body). */
static bool is_post_of(const struct req *r, enum s3_target t, const char *param)
{
	struct buf v;
	buf_init(&v, 64);
	bool yes = r->s3.target == t && strcmp(r->method, "POST") == 0 &&
	           s3_query_get(r->query, param, &v) == 1;
	buf_fini(&v);
	return yes;
}

/* CreateSession (GET /bucket?session, directory buckets) answers with
 * temporary credentials of whoever signed it: upstream, that is larder's
 * own identity, read-write by default. A client holding them would act on
 * the bucket past its grant and past larder. No key gets them. */
static bool is_create_session(const struct req *r)
{
	struct buf v;
	buf_init(&v, S3_MAX_QUERY_BYTES);
	bool yes = r->s3.target == S3T_BUCKET && s3_query_get(r->query, "session", &v) != 0;
	buf_fini(&v);
	return yes;
}

/* Whether the query names any of names (NULL-terminated), with or without
 * a value. Most requests have no query: that answers at once. */
static bool query_has_any(const char *query, const char *const names[])
{
	if (!query || !*query)
		return false;
	struct buf v;
	buf_init(&v, S3_MAX_QUERY_BYTES);
	bool yes = false;
	for (size_t i = 0; names[i] && !yes; i++)
		yes = s3_query_get(query, names[i], &v) != 0;
	buf_fini(&v);
	return yes;
}

/* The subresources that hold what governs an object: written, they govern
 * it (governs_object); read, they inspect it (inspects_object). */
static const char *const object_settings[] = { "acl", "tagging", "retention", "legal-hold", NULL };

/*
 * Whether a write governs an object besides writing or removing it
 * (auth/policy.h, POL_GOVERN): its ACL, tags (IAM policies may decide on
 * them), object lock, or a bypass of a governance lock, as a subresource
 * or as a header of the write, sent or carried in a presigned URL's query
 * (as it would go upstream); or its history: a DELETE of a version, which
 * removes it for good where a plain DELETE of a versioned object leaves a
 * marker (the objects of a DeleteObjects body: check_delete). The canned
 * ACLs "private" and "bucket-owner-full-control" grant nothing past a new
 * object's default and count as plain writes: some clients send one with
 * every upload.
 */
static bool governing_header(const char *name, const char *value)
{
	if (strncasecmp(name, "x-amz-", 6) != 0)
		return false;
	name += 6;
	if (strcasecmp(name, "acl") == 0)
		return strcmp(value, "private") != 0 && strcmp(value, "bucket-owner-full-control") != 0;
	if (strcasecmp(name, "tagging") == 0)
		return value[0] != '\0';
	return strncasecmp(name, "grant-", 6) == 0 || strncasecmp(name, "object-lock-", 12) == 0 ||
	       strcasecmp(name, "bypass-governance-retention") == 0;
}

/*
 * Whether a read inspects what an object was or what governs it
 * (auth/policy.h, POL_INSPECT): an earlier version (bytes that were
 * overwritten or deleted, perhaps on purpose), its ACL, tags, lock or
 * torrent, or a listing of versions. S3 gives each by a permission of its
 * own besides s3:GetObject (s3:GetObjectVersion, s3:GetObjectAcl, ...).
 */
static bool inspects_object(const struct req *r)
{
	/* an earlier version, a torrent */
	static const char *const other[] = { "versionId", "torrent", NULL };
	static const char *const versions[] = { "versions", NULL };
	if (r->s3.access != POL_READ)
		return false;
	if (r->s3.target == S3T_OBJECT)
		return query_has_any(r->query, object_settings) || query_has_any(r->query, other);
	return r->s3.listing && query_has_any(r->query, versions);
}

static bool governs_object(struct req *r, const struct sv4_request *sreq)
{
	static const char *const version[] = { "versionId", NULL };
	if (r->s3.access != POL_WRITE)
		return false;
	bool yes = query_has_any(r->query, object_settings) ||
	           (strcmp(r->method, "DELETE") == 0 && query_has_any(r->query, version));
	for (size_t i = 0; !yes && i < sreq->n_headers; i++)
		yes = governing_header(sreq->headers[i].name, sreq->headers[i].value);
	if (!yes && r->presigned) {
		struct hdrs q;
		hdrs_init(&q);
		if (pass_query_headers(r, &q) != 0)
			yes = true; /* cannot tell: govern, so that a prefix grant is refused */
		for (size_t i = 0; !yes && i < q.n; i++)
			yes = governing_header(q.v[i].name, q.v[i].value);
		hdrs_fini(&q);
	}
	return yes;
}

struct delete_check {
	const struct client_key *k;
	const char *bucket;
};

static int delete_key_allowed(void *arg, const char *key, bool version)
{
	const struct delete_check *dc = arg;
	return pol_allows(dc->k, version ? POL_GOVERN : POL_WRITE, dc->bucket, key, NULL) ? 0 : 1;
}

static int check_delete(struct req *r)
{
	struct gw *gw = r->w->gw;
	pthread_rwlock_rdlock(&gw->keys_lock);
	const struct cfg *keys = gw->keys;
	struct delete_check dc = {
		.k = r->key_id[0] ? cfg_find_key(keys, r->key_id) : &keys->anonymous,
		.bucket = r->s3.bucket,
	};
	int rc = dc.k ? s3_delete_keys(r->held_body.p, r->held_body.len, delete_key_allowed, &dc)
	              : 1; /* the key went away in a reload */
	pthread_rwlock_unlock(&gw->keys_lock);
	if (rc < 0)
		req_fail(r, S3E_MALFORMED_XML, NULL);
	else if (rc > 0)
		req_fail(r, S3E_ACCESS_DENIED, NULL);
	return rc == 0 ? 0 : -EACCES;
}


int authn_check_body(struct req *r)
{
	if (r->body_check == CHECK_DELETE)
		return check_delete(r);
	int rc = s3_restore_output(r->held_body.p, r->held_body.len);
	if (rc < 0)
		req_fail(r, S3E_MALFORMED_XML, NULL);
	else if (rc > 0)
		req_fail(r, S3E_ACCESS_DENIED, "larder does not forward a restore with an "
		         "OutputLocation: it would write where no grant was checked");
	return rc == 0 ? 0 : -EACCES;
}

/* What S3's RequestTimeTooSkewed says besides: the request's date as sent,
 * the server's time and the bound, so that whoever reads it sees how far
 * off the client's clock is. */
static void skew_elements(struct req *r)
{
	const char *sent = req_header(r, "x-amz-date");
	if (!sent)
		sent = req_header(r, "Date");
	if (sent)
		req_err_element(r, "RequestTime", sent);
	time_t now = time(NULL);
	struct tm tm;
	char text[32];
	gmtime_r(&now, &tm);
	strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
	req_err_element(r, "ServerTime", text);
	snprintf(text, sizeof text, "%llu", (unsigned long long)r->w->gw->cfg->max_skew_s * 1000ULL);
	req_err_element(r, "MaxAllowedSkewMilliseconds", text);
}

/* Why a verification failed, in S3's words where S3 has them. */
static void fail_verify(struct req *r, enum sv4_status st, const struct sv4_request *sreq,
                        const struct sv4_auth *auth, bool v2)
{
	char msg[160];
	const char *m = NULL;
	if (st == SV4_EXPIRED) {
		m = "Request has expired";
	} else if (st == SV4_SKEWED) {
		skew_elements(r);
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
	return query_has_any(query, names);
}

/* The headers a request may carry once only: Content-Length and
 * Transfer-Encoding (libmicrohttpd frames the body by the first line, a
 * proxy in front may by another, and the bytes one takes for a body the
 * other takes for a request of its own: request smuggling, RFC 9112 6.3),
 * then the ones a cached read takes one value of (cache.c). */
static const char *const once_headers[] = {
	"Content-Length", "Transfer-Encoding", "Range", "If-Match", "If-None-Match",
	"If-Modified-Since", "If-Unmodified-Since", "If-Range",
};
#define N_ONCE (sizeof once_headers / sizeof once_headers[0])
#define N_FRAMING 2 /* the first two */

/* Its index in once_headers, or -1. */
static int once_header(const char *name)
{
	char c = (char)(name[0] | 0x20);
	if (c != 'c' && c != 't' && c != 'r' && c != 'i')
		return -1;
	for (size_t i = 0; i < N_ONCE; i++)
		if (strcasecmp(name, once_headers[i]) == 0)
			return (int)i;
	return -1;
}

/*
 * Phase 1, the headers as sent: a request line plus headers of at most
 * LARDER_MAX_HEADER_SIZE, Content-Length and Transfer-Encoding once each,
 * no line break in a value, every name a token. Sets r->repeats_read_header.
 * Refuses with InvalidRequest (a repeated framing header; the connection
 * closes after), RequestHeaderSectionTooLarge or InvalidArgument. Returns
 * whether r passed.
 */
static bool screen_headers(struct req *r, const struct hdr_collect *hc)
{
	/* LARDER_MAX_HEADER_SIZE bounds the request line plus headers as sent
	 * ("Name: value\r\n"); MHD's memory pool is only the hard backstop. */
	size_t header_bytes = strlen(r->method) + strlen(r->uri) + 12;
	bool line_break = false, bad_name = false;
	unsigned seen[N_ONCE] = { 0 };
	for (size_t i = 0; i < hc->n; i++) {
		header_bytes += strlen(hc->v[i].name) + value_len(hc->v[i].value, &line_break) + 4;
		bad_name |= !sv4_is_token(hc->v[i].name, strlen(hc->v[i].name));
		int once = once_header(hc->v[i].name);
		if (once >= 0 && seen[once]++ && once >= N_FRAMING)
			r->repeats_read_header = true;
	}
	if (seen[0] > 1 || seen[1] > 1) {
		r->close_after = true;
		req_fail(r, S3E_INVALID_REQUEST, "A request must not carry more than one "
		         "Content-Length or Transfer-Encoding header.");
		return false;
	}
	if (header_bytes > r->w->gw->cfg->max_header_bytes)
		req_fail(r, S3E_HEADER_TOO_LARGE, NULL);
	else if (line_break) /* RFC 9110 5.5: reject, or it may reach S3 as a header of its own */
		req_fail(r, S3E_INVALID_ARGUMENT, "A header value contains a line break.");
	else if (bad_name) /* "Name : v", a control byte, a folded line libmicrohttpd kept */
		req_fail(r, S3E_INVALID_ARGUMENT, "A header name is not a token (RFC 9110 5.1).");
	return !r->has_err;
}

/*
 * Phase 2, what the request names: its query's names must be plain, then
 * s3req_parse reads the bucket, key and operation into r->s3 (path style
 * or a virtual host under LARDER_BASE_DOMAIN). *peer says whether another
 * node sent it. Refuses with InvalidArgument or s3req_parse's error.
 * Returns whether r->s3 is parsed.
 */
static bool parse_target(struct req *r, bool *peer)
{
	if (!s3_query_names_plain(r->query)) {
		req_fail(r, S3E_INVALID_ARGUMENT, "Query parameter names must not be percent-encoded.");
		return false;
	}
	/* Peers always ask path style (fetch.c), with this node's advertised
	 * address as Host: read as a virtual host under LARDER_BASE_DOMAIN, it
	 * would name a bucket of the node's own name. */
	*peer = req_header(r, "X-Larder-Peer-Auth") != NULL;
	enum s3err e;
	if (s3req_parse(&r->s3, r->method, req_header(r, "Host"), r->path, r->query,
	                *peer ? NULL : r->w->gw->cfg->base_domain, &e) != 0) {
		req_fail(r, e, NULL);
		return false;
	}
	r->s3_parsed = true;
	return true;
}

/* What the signature phase leaves for the policy and the body plan. */
struct authn {
	struct sv4_request sreq;
	/* SigV4's, as sv4_parse read it; for SigV2, presigned is set (it
	 * signs no payload hash, so the body is unsigned). */
	struct sv4_auth auth;
	/* SV4_OK once a signature was found (and, for SigV4, verified). */
	enum sv4_status st;
	unsigned char signing_key[32]; /* SigV4's, for aws-chunked bodies */
};

/* Reads the request's signature, if any, into a (sv4_parse); for SigV2
 * into *v2 as well. Returns whether it is SigV2. Refuses nothing: the
 * verdict is authenticate's. */
static bool parse_signature(struct authn *a, struct sv2_auth *v2)
{
	a->st = sv4_parse(&a->sreq, &a->auth);
	/* boto3 and the AWS CLI still presign with SigV2 for a custom
	 * endpoint, and old clients sign headers with it. */
	return (a->st == SV4_NO_AUTH || a->st == SV4_UNSUPPORTED) &&
	       sv2_parse(&a->sreq, v2) == SV4_OK;
}

/* A SigV2 signature (a header, or a presigned URL's query): its key must
 * be one of keys and its signature match. Sets r->key_id (named, verified
 * or not: the access log's key_id; r->key_verified says which, and the
 * metrics count only verified ones as keys), r->presigned(_v2). Refuses
 * with InvalidAccessKeyId or fail_verify's error. Returns the key, or
 * NULL. */
static const struct client_key *verify_v2(struct req *r, struct authn *a,
                                          const struct sv2_auth *v2, const struct cfg *keys)
{
	const struct client_key *k;
	str_copy(r->key_id, sizeof r->key_id, v2->access_key);
	if (!(k = cfg_find_key(keys, v2->access_key))) {
		req_fail(r, S3E_INVALID_ACCESS_KEY, NULL);
	} else {
		struct buf resource;
		buf_init(&resource, strlen(r->path) + sizeof r->s3.bucket + 2);
		buf_printf(&resource, "%s%s%s", r->s3.virtual_host ? "/" : "",
		           r->s3.virtual_host ? r->s3.bucket : "", r->path);
		enum sv4_status v = sv2_verify(&a->sreq, v2, buf_cstr(&resource), k->secret,
		                               time(NULL), r->w->gw->cfg->max_skew_s);
		buf_fini(&resource);
		r->key_verified = v == SV4_OK;
		if (v != SV4_OK) {
			a->auth.presigned = v2->presigned;
			fail_verify(r, v, &a->sreq, &a->auth, true);
			k = NULL;
		}
	}
	a->st = SV4_OK;
	a->auth.presigned = true; /* SigV2 signs no payload hash: the body is unsigned */
	r->presigned_v2 = r->presigned = v2->presigned;
	return k;
}

/* A SigV4 signature sv4_parse read whole (a header, or a presigned URL's
 * query): its scope must be ours (scope_ok), its key one of keys, its
 * signature match (which leaves a->signing_key). Sets r->key_id, as
 * verify_v2 does, and r->presigned. Refuses with scope_ok's error,
 * InvalidAccessKeyId or fail_verify's. Returns the key, or NULL. */
static const struct client_key *verify_v4(struct req *r, struct authn *a,
                                          const struct cfg *keys)
{
	const struct client_key *k;
	if (!scope_ok(r, &a->auth))
		return NULL;
	if (!(k = cfg_find_key(keys, a->auth.access_key))) {
		str_copy(r->key_id, sizeof r->key_id, a->auth.access_key); /* for the log */
		req_fail(r, S3E_INVALID_ACCESS_KEY, NULL);
		return NULL;
	}
	str_copy(r->key_id, sizeof r->key_id, a->auth.access_key);
	r->presigned = a->auth.presigned;
	a->st = sv4_verify(&a->sreq, &a->auth, k->secret, time(NULL), r->w->gw->cfg->max_skew_s,
	                   a->signing_key);
	r->key_verified = a->st == SV4_OK;
	if (a->st != SV4_OK) {
		fail_verify(r, a->st, &a->sreq, &a->auth, false);
		return NULL;
	}
	return k;
}

/*
 * Phase 3, who signed the request (v2 non-NULL: SigV2, parse_signature):
 * SigV2, anonymous (a grant of keys->anonymous; r->anonymous), or SigV4.
 * Refuses, besides verify_v2's and verify_v4's errors: a browser upload
 * (POST Object) with NotImplemented, an anonymous request without
 * anonymous grants with AccessDenied, a SigV4 signature sv4_parse could
 * not read with sv4_to_s3err's. Returns the key whose grants apply, or
 * NULL when refused. Under keys_lock, which the key needs.
 */
static const struct client_key *authenticate(struct req *r, struct authn *a,
                                             const struct sv2_auth *v2, const struct cfg *keys)
{
	if (v2)
		return verify_v2(r, a, v2, keys);
	if (a->st == SV4_NO_AUTH && is_form_upload(r)) {
		/* A browser upload (POST Object) signs its policy document in
		 * the form, which larder does not read: said plainly, not taken
		 * for an anonymous request and refused as such. */
		req_fail(r, S3E_NOT_IMPLEMENTED, "POST Object (browser-based uploads with a signed "
		         "policy, as generate_presigned_post makes) is not supported by larder; "
		         "use a presigned PUT");
		return NULL;
	}
	if (a->st == SV4_NO_AUTH) {
		r->anonymous = true;
		if (keys->anonymous.n_grants)
			return &keys->anonymous;
		req_fail(r, S3E_ACCESS_DENIED, NULL);
		return NULL;
	}
	if (a->st != SV4_OK) {
		req_fail(r, sv4_to_s3err(a->st, a->auth.presigned), sv4_status_str(a->st));
		return NULL;
	}
	return verify_v4(r, a, keys);
}

/*
 * Phase 4, what the query carries besides the signature: the headers a
 * presigned URL holds as query parameters must be valid headers (they go
 * upstream as headers: pass_query_headers), and an anonymous request may
 * not ask for response-* overrides. Refuses with InvalidArgument or
 * InvalidRequest. Returns k, or NULL when refused.
 */
static const struct client_key *screen_query(struct req *r, const struct client_key *k,
                                             const struct cfg *keys)
{
	if (k && !r->has_err && r->presigned && pass_query_headers(r, NULL) != 0) {
		req_fail(r, S3E_INVALID_ARGUMENT, "A header carried in the query is not a valid "
		         "header");
		k = NULL;
	}
	if (k == &keys->anonymous && !r->has_err && has_response_override(r->query)) {
		req_fail(r, S3E_INVALID_REQUEST, "Request specific response headers cannot be used "
		         "for anonymous GET requests.");
		k = NULL;
	}
	return k;
}

/*
 * Phase 5, the policy: whether k's grants allow what r does (the access
 * it needs: POL_GOVERN, POL_INSPECT or r->s3.access; a listing's prefix
 * both ways upstream may read it; every copy or rename source), and no
 * key may CreateSession. A DeleteObjects a prefix grant does not cover
 * as a whole, and every RestoreObject, are decided again on their body
 * (r->body_check; r->held_body is set up for it). Sets r->authorized and
 * the key's limits (r->max_upstream, r->max_rate). Refuses with
 * AccessDenied (a message says when a grant of the whole bucket would
 * do), or sources_allowed's InvalidArgument. Under keys_lock.
 */
static void authorize(struct req *r, const struct client_key *k, const struct sv4_request *sreq)
{
	const char *bucket = r->s3.target == S3T_SERVICE ? NULL : r->s3.bucket;
	const char *key = r->s3.target == S3T_OBJECT ? buf_cstr(&r->s3.key) : NULL;
	const char *list_prefix = r->s3.listing ? buf_cstr(&r->s3.list_prefix) : NULL;
	enum pol_access need = governs_object(r, sreq) ? POL_GOVERN
	                       : inspects_object(r) ? POL_INSPECT : r->s3.access;
	bool allowed = pol_allows(k, need, bucket, key, list_prefix);
	/* "c+d/" is "c d/" to a reader that takes '+' for a space: the
	 * grant must cover the prefix whichever way upstream reads it. */
	if (allowed && r->s3.listing && r->s3.list_prefix_plus)
		allowed = pol_allows(k, r->s3.access, bucket, NULL,
		                     buf_cstr(&r->s3.list_prefix_spaced));
	/* A key with a prefix grant may delete many objects at once when
	 * each is under its grant: decided once the body is in. */
	if (!allowed && need == POL_WRITE && is_post_of(r, S3T_BUCKET, "delete")) {
		r->body_check = CHECK_DELETE;
		allowed = true;
	}
	if (allowed && is_post_of(r, S3T_OBJECT, "restore"))
		r->body_check = CHECK_RESTORE;
	buf_init(&r->held_body, HELD_BODY_MAX);
	if (!allowed && need == POL_GOVERN && pol_allows(k, POL_WRITE, bucket, key, list_prefix))
		req_fail(r, S3E_ACCESS_DENIED, "Changing an object's ACL, tags or lock, or "
		         "removing a version, needs a grant of the whole bucket");
	else if (!allowed && need == POL_INSPECT && pol_allows(k, POL_READ, bucket, key, list_prefix))
		req_fail(r, S3E_ACCESS_DENIED, INSPECT_DENIED);
	else if (!allowed)
		req_fail(r, S3E_ACCESS_DENIED, NULL);
	else if (is_create_session(r))
		req_fail(r, S3E_ACCESS_DENIED, "CreateSession would hand out larder's own "
		         "credentials");
	else if (sources_allowed(r, k, sreq))
		r->authorized = true;
	r->max_upstream = k->max_upstream_requests;
	r->max_rate = k->max_bytes_per_second;
}

/* A SHA-256 in hex, as x-amz-content-sha256 names one. */
static bool is_sha256_hex(const char *s)
{
	return strlen(s) == 64 && strspn(s, "0123456789abcdefABCDEF") == 64;
}

/* The payload hash the request claims: SigV4's signed one; otherwise
 * (a presigned URL, SigV2, anonymous) UNSIGNED-PAYLOAD, or a digest sent
 * in x-amz-content-sha256. Refuses nothing. */
static const char *payload_claim(struct req *r, const struct authn *a)
{
	const char *claimed = a->st == SV4_OK && !a->auth.presigned ? a->auth.payload_hash
	                                                            : SV4_UNSIGNED_PAYLOAD;
	/* A presigned URL (and SigV2) signs no payload hash, but the request
	 * may still send a digest in x-amz-content-sha256 (a presigned URL can
	 * sign that header to fix the body): S3 holds the body to it, and so
	 * does larder, which sends it upstream for S3 to check again. */
	const char *sent = a->auth.presigned ? req_header(r, "x-amz-content-sha256") : NULL;
	if (sent && is_sha256_hex(sent))
		claimed = sent;
	return claimed;
}

/* Whether a payload hash claimed (mode: ack_mode_from_payload_hash) is one
 * S3 takes: a payload mode, UNSIGNED-PAYLOAD or a SHA-256 in hex. Else
 * refuses r as S3 does, whether or not a body comes: InvalidArgument
 * naming the header and its value. */
static bool claim_valid(struct req *r, const char *claimed, int mode)
{
	if (mode >= 0 || strcmp(claimed, SV4_UNSIGNED_PAYLOAD) == 0 || is_sha256_hex(claimed))
		return true;
	req_fail(r, S3E_INVALID_ARGUMENT, "x-amz-content-sha256 must be UNSIGNED-PAYLOAD, "
	         "STREAMING-UNSIGNED-PAYLOAD-TRAILER, STREAMING-AWS4-HMAC-SHA256-PAYLOAD, "
	         "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER or a valid sha256 value.");
	req_err_element(r, "ArgumentName", "x-amz-content-sha256");
	char shown[257]; /* the value, as S3 echoes it; a long one cut */
	str_copy(shown, sizeof shown, claimed);
	req_err_element(r, "ArgumentValue", shown);
	return false;
}

/* How the body is framed (cl, te: the headers, or NULL): *len is its
 * Content-Length, -1 when chunked, 0 when neither is sent. Refuses with
 * InvalidArgument (a Content-Length that is not a number), InvalidRequest
 * (both headers), MissingContentLength (a PUT with neither) or
 * NotImplemented (a coding other than chunked). Returns whether r passed. */
static bool body_framing(struct req *r, const char *cl, const char *te, int64_t *len)
{
	*len = 0;
	if (cl) {
		char *end;
		errno = 0;
		long long v = strtoll(cl, &end, 10);
		if (errno || *end || v < 0 || end == cl) {
			req_fail(r, S3E_INVALID_ARGUMENT, "Content-Length is not a number");
			return false;
		}
		*len = v;
	} else if (te) {
		*len = -1; /* chunked: the length is known when the body ends */
	}
	if (cl && te) {
		/* libmicrohttpd reads the body by Transfer-Encoding (RFC 9112):
		 * planned by Content-Length, it would go upstream as another. */
		req_fail(r, S3E_INVALID_REQUEST,
		     "Content-Length and Transfer-Encoding must not both be sent.");
		return false;
	}
	if (!cl && !te && strcmp(r->method, "PUT") == 0) {
		/* No framing, so no body: S3 answers a PUT without a length 411,
		 * where forwarded (with a length of 0) it would store an empty
		 * object in place of the one the client meant to send. */
		req_fail(r, S3E_MISSING_CONTENT_LENGTH, NULL);
		return false;
	}
	if (te && strcasecmp(te, "chunked") != 0) {
		/* libmicrohttpd decodes "chunked" alone; any other coding it
		 * reads as raw bytes until the client closes, which would go
		 * upstream as the body, framing and all. S3 takes no
		 * Transfer-Encoding at all; its answer: */
		req_fail(r, S3E_NOT_IMPLEMENTED, NULL);
		req_err_element(r, "Header", "Transfer-Encoding");
		return false;
	}
	return true;
}

/* An aws-chunked body (mode: ack_mode_from_payload_hash) of in_len bytes
 * as sent (-1: unknown), each chunk's signature chained from the
 * request's (r->ack); x-amz-decoded-content-length says how long it is
 * decoded (r->up_len). Refuses with MissingContentLength (no decoded
 * length, or not a number) or InternalError. Returns whether r passed. */
static bool plan_aws_chunked(struct req *r, const struct authn *a, int mode, int64_t in_len)
{
	const char *dl = req_header(r, "x-amz-decoded-content-length");
	char *end = NULL;
	errno = 0;
	long long v = dl ? strtoll(dl, &end, 10) : -1;
	/* As Content-Length's (body_framing): an empty value is no length,
	 * nor one past 2^63 (which strtoll makes 2^63-1). */
	if (!dl || errno || *end || v < 0 || end == dl) {
		req_fail(r, S3E_MISSING_CONTENT_LENGTH,
		     "aws-chunked uploads need x-amz-decoded-content-length");
		return false;
	}
	char scope[160];
	snprintf(scope, sizeof scope, "%s/%s/%s/aws4_request", a->auth.date, a->auth.region,
	         a->auth.service);
	r->ack = ack_create((enum ack_mode)mode, a->signing_key, a->auth.signature,
	                    a->auth.amz_date, scope, v, req_header(r, "x-amz-trailer"),
	                    pass_chunk_sink, r);
	if (!r->ack) {
		req_fail(r, S3E_INTERNAL, NULL);
		return false;
	}
	r->body = BODY_CHUNKED;
	r->in_len = in_len;
	r->up_len = v;
	r->start_verified = v == 0;
	pass_plan_trailer(r, req_header(r, "x-amz-trailer"));
	return true;
}

/* A plain body of len bytes (-1: Transfer-Encoding: chunked, of unknown
 * length, which S3 takes: it goes upstream chunked too), hashed as it
 * comes in (r->sha) when claimed is a digest (else UNSIGNED-PAYLOAD:
 * claim_valid). Refuses with InternalError. Returns whether r passed. */
static bool plan_raw(struct req *r, const char *claimed, int64_t len)
{
	r->body = BODY_RAW;
	r->up_len = len;
	if (strcmp(claimed, SV4_UNSIGNED_PAYLOAD) == 0)
		return true;
	memcpy(r->want_sha, claimed, 65);
	r->sha = EVP_MD_CTX_new();
	if (!r->sha || !EVP_DigestInit_ex(r->sha, sha256_md(), NULL)) {
		req_fail(r, S3E_INTERNAL, NULL);
		return false;
	}
	return true;
}

/*
 * Phase 6, the body plan: how the body is framed (body_framing), what
 * hash it claims (payload_claim) and so how it is read and checked:
 * aws-chunked (plan_aws_chunked), plain (plan_raw), or none, which must
 * claim no bytes. A body the policy checks (r->body_check) must be plain
 * and at most HELD_BODY_MAX. Sets r->body_verified when nothing is left
 * to check. Refuses, besides the helpers' errors, with InvalidRequest
 * (no hash claimed), BadDigest (no body but a digest of some) or
 * AccessDenied (a body to check that cannot be held).
 */
static void plan_body(struct req *r, const struct authn *a)
{
	const char *cl = req_header(r, "Content-Length");
	const char *te = req_header(r, "Transfer-Encoding");
	const char *claimed = payload_claim(r, a);
	int64_t len;
	if (!body_framing(r, cl, te, &len))
		return;
	if (!claimed[0]) {
		req_fail(r, S3E_INVALID_REQUEST,
		     "Missing required header for this request: x-amz-content-sha256");
		return;
	}
	int mode = ack_mode_from_payload_hash(claimed);
	if (!claim_valid(r, claimed, mode))
		return;
	if (mode >= 0) {
		if (!plan_aws_chunked(r, a, mode, cl ? len : -1))
			return;
	} else if (len != 0) {
		if (!plan_raw(r, claimed, len))
			return;
	} else {
		r->body = BODY_NONE;
		r->up_len = 0;
		if (strcmp(claimed, SV4_UNSIGNED_PAYLOAD) != 0 &&
		    strcasecmp(claimed, SV4_EMPTY_SHA256) != 0) {
			req_fail(r, S3E_BAD_DIGEST, NULL);
			return;
		}
	}
	if (r->body_check == CHECK_RESTORE && r->body == BODY_NONE)
		r->body_check = CHECK_NONE; /* no body: S3's defaults, nothing written elsewhere */
	if (r->body_check && (r->body != BODY_RAW || r->up_len < 0 || r->up_len > HELD_BODY_MAX)) {
		req_fail(r, S3E_ACCESS_DENIED, r->body_check == CHECK_DELETE ?
		         "DeleteObjects under a key prefix grant needs a plain body of at most 2 MiB" :
		         "RestoreObject needs a plain body of at most 2 MiB");
		return;
	}
	/* A body of unknown length is whole (so verified) only when it ends. */
	r->body_verified = r->body == BODY_NONE ||
	                   (r->body == BODY_RAW && !r->sha && !r->body_check && r->up_len >= 0);
}

/* The phases in order, each a function above that says what it decides:
 * the first refusal (req_fail) ends the request. The keys lock is held
 * from the signature to the policy: k points into gw->keys. */
void authn_request(struct req *r)
{
	struct gw *gw = r->w->gw;
	struct hdr_collect hc = { 0 };
	MHD_get_connection_values(r->conn, MHD_HEADER_KIND, collect_header, &hc);
	bool peer = false;
	if (!screen_headers(r, &hc) || !parse_target(r, &peer)) {
		free(hc.v);
		return;
	}
	if (peer) {
		free(hc.v);
		authenticate_peer(r);
		return;
	}
	struct authn a = {
		.sreq = {
			.method = r->method, .path = r->path, .query = r->query,
			.headers = hc.v, .n_headers = hc.n,
		},
	};
	struct sv2_auth v2;
	bool sigv2 = parse_signature(&a, &v2);

	pthread_rwlock_rdlock(&gw->keys_lock);
	const struct cfg *keys = gw->keys;
	const struct client_key *k = authenticate(r, &a, sigv2 ? &v2 : NULL, keys);
	k = screen_query(r, k, keys);
	if (k && !r->has_err)
		authorize(r, k, &a.sreq);
	pthread_rwlock_unlock(&gw->keys_lock);
	free(hc.v);
	if (r->has_err)
		return;

	plan_body(r, &a);
}

/*
 * passthrough.c - the pass-through: a request larder does not answer
 * itself goes to upstream re-signed, its body streamed up as it is
 * verified, upstream's answer streamed back (see passthrough.h for the
 * flow-control rule). Its exchange with S3 is a transfer (net/transfer.h)
 * built by the S3 layer (gateway/upstream.h).
 */
#include "gateway/passthrough.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "auth/chunked.h"
#include "auth/sigv4.h"
#include "base/clock.h"
#include "base/hdrs.h"
#include "base/log.h"
#include "cluster/cluster.h"
#include "gateway/authn.h"
#include "gateway/cache.h"
#include "gateway/listcache.h"
#include "gateway/request_internal.h"
#include "gateway/s3err.h"

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

/* Decoded aws-chunked payload bytes, on their way upstream. */
int pass_chunk_sink(void *arg, const char *data, size_t len)
{
	struct req *r = arg;
	assert(r->magic == REQ_MAGIC);
	if (r->up_queued + len > (uint64_t)r->up_len)
		return -1;
	r->up_queued += len;
	return pbuf_put(&r->upbuf, data, len);
}

/* Whether curl took every byte of the body. */
static bool body_all_taken(const struct req *r)
{
	if (r->body_check)
		return r->up_sent == r->held_body.len;
	if (r->up_len >= 0 && !r->reframe)
		return r->up_sent >= (uint64_t)r->up_len;
	return r->client_body_done; /* sent chunked, or framed again: it ends with the client's */
}

/* A write whose answer larder never heard (the exchange failed or was
 * stopped once upstream may have had all of it: the body verified, so its
 * last byte may have gone, and every byte taken) may have taken effect,
 * whatever the client was told since: what the cache knows of the key
 * goes, as after a success. cache_invalidate skips what S3 was heard
 * refusing. */
static void forget_unheard_write(struct req *r)
{
	if (r->body_verified && body_all_taken(r))
		cache_invalidate(r);
}

/*
 * A write whose client left after sending all of it (the body in and
 * verified) is carried out by S3 all the same: the client's leaving tells
 * S3 nothing. Stopped here, S3 may still apply it after larder forgot the
 * key (forget_unheard_write), and a read in between learns the old object
 * again, to be served after the write landed. So such a write goes on
 * without its client to S3's answer (the answer's body drained: a
 * CompleteMultipartUpload's outcome is in it), and its invalidation is
 * made then, as a write whose client waits. It keeps its worker's place
 * among its live requests (a drain waits for it), its key's
 * max_upstream_requests slot and its prefix's window slot, and it counts
 * as a client connection; it has no connection. Only writes the cache
 * forgets something for: a multipart upload's part (or start, or abort)
 * stops at once, its client will send it again or abort the upload; so
 * does a write whose body did not all arrive, and everything past the
 * drain's grace period.
 */
bool pass_outlives(struct req *r)
{
	if (r->orphan)
		return true;
	bool pending = r->up.running || ev_is_active(&r->slot_timer);
	if (!pending || r->udone || r->has_err || !r->client_body_done || !r->body_verified ||
	    !r->s3_parsed || r->w->closing || !cache_write_changes(r))
		return false;
	r->orphan = true;
	/* It holds what a client's request holds until S3 answers: counted
	 * as a connection (LARDER_MAX_CONNECTIONS) until it ends (req_unref). */
	atomic_fetch_add(&r->w->gw->open_connections, 1);
	/* Its answer may be held back (paused) for the client that left:
	 * nobody else would let it go on. */
	transfer_unpause(&r->up);
	log_info("upstream", "id=%s %s %s: its client left; the write goes on to S3's answer",
	         r->id, r->method, buf_cstr(&r->target.url));
	return true;
}

void pass_stop(struct req *r)
{
	if (!r->up.running && !ev_is_active(&r->slot_timer) && !ev_is_active(&r->up.retry_timer))
		return;
	bool sent = r->up.running;
	ev_timer_stop(r->w->loop, &r->slot_timer);
	shaper_cancel(r->w->gw->shaper, &r->slot);
	transfer_stop(&r->up);
	r->udone = true;
	if (r->uresult == CURLE_OK)
		r->uresult = CURLE_ABORTED_BY_CALLBACK;
	if (sent)
		forget_unheard_write(r);
	req_unref(r);
}

/* ------------------------------------------------------------------ */
/* the request upstream */

/* Client headers that larder replaces or that only meant something on
 * the client's hop. */
static bool dropped_request_header(const char *name, bool chunked)
{
	static const char *const names[] = {
		"host", "authorization", "expect", "content-length", "x-amz-date", "date",
		"x-amz-content-sha256", "x-amz-security-token", NULL,
	};
	if (hdr_hop_by_hop(name))
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
	bool reframed;     /* the body goes upstream aws-chunked again (pass_plan_trailer) */
	bool encoding_set; /* Content-Encoding added */
};

static enum MHD_Result forward_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                      const char *value)
{
	struct fwd_ctx *f = cls;
	(void)kind;
	if (f->rc || dropped_request_header(key, f->chunked))
		return MHD_YES;
	if (f->chunked && strcasecmp(key, "content-encoding") == 0) {
		char ce[256], both[270];
		strip_aws_chunked(value ? value : "", ce, sizeof ce);
		if (f->reframed && !f->encoding_set) {
			snprintf(both, sizeof both, "aws-chunked%s%s", ce[0] ? "," : "", ce);
			f->rc = hdrs_add(f->h, key, both);
			f->encoding_set = true;
		} else if (ce[0]) {
			f->rc = hdrs_add(f->h, key, ce);
		}
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
int pass_query_headers(struct req *r, struct hdrs *h)
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

unsigned pass_query_header(struct req *r, const char *name, struct buf *value)
{
	const char *q = r->query;
	struct buf n;
	buf_init(&n, 256);
	unsigned found = 0;
	buf_reset(value);
	while (*q) {
		size_t len = strcspn(q, "&");
		const char *eq = memchr(q, '=', len);
		size_t klen = eq ? (size_t)(eq - q) : len;
		buf_reset(&n);
		if (klen > 6 && strncasecmp(q, "x-amz-", 6) == 0 && sv4_uri_decode(q, klen, &n) == 0 &&
		    strcasecmp(buf_cstr(&n), name) == 0 && found++ == 0 && eq)
			sv4_uri_decode(eq + 1, len - klen - 1, value);
		q += len;
		if (*q == '&')
			q++;
	}
	buf_fini(&n);
	return found;
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

/* ---- upstream shaping (gateway/shaper.h) --------------------------- */

/* What S3 throttles it by, with the bucket: an object's key, a listing's prefix. */
static const char *slot_key(struct req *r)
{
	if (r->s3.target == S3T_OBJECT)
		return buf_cstr(&r->s3.key);
	return r->s3.listing ? buf_cstr(&r->s3.list_prefix) : "";
}

/* Sends the prepared request once its S3 prefix's window has room, as a
 * demand read; until then slot_cb asks again. 0, -EBUSY (no room in time:
 * the client gets SlowDown, as S3 would answer) or -EIO. */
static int submit(struct req *r)
{
	enum shaper_verdict v = SHAPER_GO;
	if (r->s3.bucket[0])
		v = shaper_acquire(r->w->gw->shaper, &r->slot, r->s3.bucket, slot_key(r),
		                   clock_mono_s());
	if (v == SHAPER_WAIT) { /* slot_cb comes back here, told or timed out */
		ev_timer_set(&r->slot_timer,
		             shaper_wait_left(r->w->gw->shaper, &r->slot, clock_mono_s()), 0);
		ev_timer_start(r->w->loop, &r->slot_timer);
		return 0;
	}
	if (v == SHAPER_TIMEOUT) {
		req_fail(r, S3E_SLOW_DOWN, NULL);
		return -EBUSY;
	}
	return transfer_submit(&r->up) != 0 ? -EIO : 0;
}

static void slot_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct req *r = w->data;
	assert(r->magic == REQ_MAGIC);
	(void)revents;
	ev_timer_stop(loop, w);
	if (submit(r) == 0)
		return;
	req_fail(r, S3E_INTERNAL, NULL); /* unless SlowDown came first */
	r->udone = true;
	r->uresult = CURLE_ABORTED_BY_CALLBACK;
	req_wake(r);
	req_unref(r); /* the upstream exchange's */
}

static void slot_placed(struct shaper_slot *slot)
{
	struct req *r = list_item(slot, struct req, slot);
	slot_cb(r->w->loop, &r->slot_timer, 0);
}

/* A 503 (SlowDown) to a request without a body, before the client heard
 * anything: its window shrinks, and it is sent again after a backoff
 * (the policy's retries), so the client sees it only when S3 keeps saying it. */
static bool retry_slowdown(struct req *r, struct transfer *t)
{
	return t->status == 503 && r->body == BODY_NONE && !r->body_check && r->conn &&
	       t->retries < t->retry.max;
}

static enum transfer_verdict on_upstream_headers(struct transfer *t, void *arg)
{
	struct req *r = arg;
	assert(r->magic == REQ_MAGIC);
	enum transfer_verdict v = upstream_region_check(r->w->gw->up, r->s3.bucket, t);
	if (v == TRANSFER_RESEND && r->body == BODY_NONE)
		return v; /* signed for the wrong region: send again (a body cannot be) */
	r->err_len = 0;
	r->err_cut = r->err_made = false;
	r->err_since = clock_mono_s();
	if ((r->slowed = retry_slowdown(r, t)))
		return TRANSFER_GO; /* its body is dropped, within the bound */
	r->ustatus = t->status;
	/* The length as curl reads the body: taken as the client's
	 * Content-Length, any other number would end the client's answer
	 * early, complete-looking, or never. */
	_Static_assert(HDRS_LENGTH_UNKNOWN == MHD_SIZE_UNKNOWN, "one unknown length");
	bool head = strcmp(r->method, "HEAD") == 0;
	r->resp_len = hdrs_body_length(&t->resp, head);
	cache_learn(r);
	/* An error answer is S3's XML document, a few hundred bytes: it is
	 * gathered whole, within its bound, before the client hears a byte of
	 * it (pass_error_answer), so that one larger, endless, trickled or
	 * cut short still ends soon, as a whole document. */
	r->err_gather = t->status >= 300 && t->status != 304 && !head && r->resp_len != 0;
	if (r->err_gather)
		return TRANSFER_GO;
	r->uhdrs_done = true;
	req_wake(r);
	return TRANSFER_GO;
}

/* An error answer's body, or a dropped 503's: false once it went past its
 * bound (S3ERR_UPSTREAM_BODY_MAX bytes, S3ERR_UPSTREAM_WAIT_S after its
 * headers), which ends the exchange. */
static bool err_body_take(struct req *r, const char *data, size_t len)
{
	size_t room = S3ERR_UPSTREAM_BODY_MAX - r->err_len, n = len < room ? len : room;
	if (r->err_gather && n && pbuf_put(&r->downbuf, data, n) != 0)
		n = 0;
	r->err_len += n;
	if (n < len || clock_mono_s() - r->err_since > S3ERR_UPSTREAM_WAIT_S)
		r->err_cut = true;
	return !r->err_cut;
}

/* libcurl calls this at least once a second (upstream_curl_defaults sets a
 * low-speed limit), and with every piece of body: an error body that
 * trickles or stalls ends at its time bound too. */
static int pass_progress(struct transfer *t, void *arg)
{
	struct req *r = arg;
	assert(r->magic == REQ_MAGIC);
	(void)t;
	if (!r->err_gather && !r->slowed)
		return 0;
	if (clock_mono_s() - r->err_since > S3ERR_UPSTREAM_WAIT_S)
		r->err_cut = true;
	return r->err_cut ? 1 : 0;
}

/* The gathered error answer is the client's: as it came when it came
 * whole; else (cut at its bound, or ended before its length) a whole S3
 * document with upstream's status, made from what came. */
static void pass_error_answer(struct req *r, struct transfer *t, CURLcode result)
{
	size_t got = pbuf_used(&r->downbuf);
	bool whole = result == CURLE_OK && !r->err_cut &&
	             (r->resp_len == MHD_SIZE_UNKNOWN || got == r->resp_len);
	if (!whole) {
		struct buf doc;
		buf_init(&doc, S3ERR_UPSTREAM_BODY_MAX);
		if (s3err_upstream_xml(t->status, got ? r->downbuf.p + r->downbuf.off : NULL, got,
		                       transfer_header(t, "x-amz-request-id"), &doc) == 0) {
			r->downbuf.off = r->downbuf.len = 0;
			if (pbuf_put(&r->downbuf, doc.p, doc.len) == 0)
				r->err_made = true;
		}
		buf_fini(&doc);
		log_info("upstream", "id=%s %s %s: upstream's %ld answer had a body larder did not "
		         "read whole (%s)", r->id, r->method, buf_cstr(&r->target.url), t->status,
		         r->err_cut ? "past its bound" : transfer_strerror(t, result));
	}
	r->resp_len = pbuf_used(&r->downbuf);
	r->err_gather = false;
	r->uhdrs_done = true;
}

static size_t on_upstream_body(struct transfer *t, void *arg, const char *data, size_t len)
{
	struct req *r = arg;
	assert(r->magic == REQ_MAGIC);
	(void)t;
	/* The client gone: a write it left is heard out (an error body, or a
	 * dropped 503's, within its bound all the same), its connection's end
	 * (request_completed_cb) still to come or not. */
	if (!r->conn && !r->orphan)
		return 0;
	if (r->orphan && !r->slowed && !r->err_gather)
		return len;
	if (r->slowed || r->err_gather)
		return err_body_take(r, data, len) ? len : 0;
	if (len > pbuf_room(&r->downbuf))
		return CURL_WRITEFUNC_PAUSE;
	if (pbuf_put(&r->downbuf, data, len) != 0)
		return 0;
	listcache_capture(r, data, len);
	req_wake(r);
	return len;
}

/* ---- a trailing checksum forwarded (pass_plan_trailer) ---------------- */

#define REFRAME_CHUNK (64 * 1024)

struct reframe {
	char trailer[32];      /* the checksum trailer's name, lower case */
	uint64_t wire_len;     /* the framed body's length upstream */
	uint64_t chunk_left;   /* data bytes of the current upstream chunk still due */
	char frame[112];       /* framing bytes due before more data */
	unsigned frame_len, frame_off;
	bool trailer_sent;
};

/* The base64 length of a checksum trailer's value, or 0 for another name. */
static unsigned checksum_b64_len(const char *name)
{
	static const struct { const char *name; unsigned len; } known[] = {
		{ "x-amz-checksum-crc32", 8 }, { "x-amz-checksum-crc32c", 8 },
		{ "x-amz-checksum-crc64nvme", 12 }, { "x-amz-checksum-sha1", 28 },
		{ "x-amz-checksum-sha256", 44 },
	};
	for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
		if (strcasecmp(name, known[i].name) == 0)
			return known[i].len;
	return 0;
}

static unsigned hex_digits(uint64_t v)
{
	unsigned n = 1;
	while (v >>= 4)
		n++;
	return n;
}

void pass_plan_trailer(struct req *r, const char *names)
{
	if (!names || r->up_len < 0 || r->reframe)
		return;
	while (*names == ' ' || *names == '\t')
		names++;
	size_t n = strcspn(names, " \t,");
	char name[sizeof r->reframe->trailer];
	if (n == 0 || n >= sizeof name || names[n + strspn(names + n, " \t")] != '\0')
		return; /* none, or more than one name */
	memcpy(name, names, n);
	name[n] = '\0';
	unsigned b64 = checksum_b64_len(name);
	struct reframe *f = b64 ? calloc(1, sizeof *f) : NULL;
	if (!f)
		return; /* sent as plain bytes, as for any other trailer */
	for (size_t i = 0; i <= n; i++)
		f->trailer[i] = (char)tolower((unsigned char)name[i]);
	/* "<hex size>\r\n<bytes>\r\n" per chunk of REFRAME_CHUNK, the last one
	 * shorter; then "0\r\n<name>:<value>\r\n\r\n". */
	uint64_t len = (uint64_t)r->up_len, full = len / REFRAME_CHUNK, rest = len % REFRAME_CHUNK;
	f->wire_len = full * (hex_digits(REFRAME_CHUNK) + 4 + REFRAME_CHUNK) +
	              (rest ? hex_digits(rest) + 4 + rest : 0) + 3 + n + 1 + b64 + 4;
	r->reframe = f;
}

/* The framing bytes due next into r->reframe->frame: a chunk's header, the CRLF
 * after its bytes, or (once the body is verified) the end with the
 * trailer. False when nothing is due yet (the body is not verified). */
static bool next_frame(struct req *r)
{
	struct reframe *f = r->reframe;
	f->frame_off = 0;
	f->frame_len = 0;
	uint64_t left = (uint64_t)r->up_len - r->up_sent;
	if (left > 0) {
		uint64_t size = left < REFRAME_CHUNK ? left : REFRAME_CHUNK;
		f->frame_len = (unsigned)snprintf(f->frame, sizeof f->frame, "%" PRIx64 "\r\n", size);
		f->chunk_left = size;
		return true;
	}
	if (f->trailer_sent || !r->body_verified)
		return false;
	const char *v = ack_trailer_checksum(r->ack); /* "<name>: <value>" */
	const char *colon = v ? strchr(v, ':') : NULL;
	if (!colon)
		return false;
	int n = snprintf(f->frame, sizeof f->frame, "0\r\n%s:%s\r\n\r\n", f->trailer, colon + 2);
	if (n < 0 || (size_t)n >= sizeof f->frame)
		return false;
	f->frame_len = (unsigned)n;
	f->trailer_sent = true;
	return true;
}

/* on_upstream_read for a reframed body: the decoded bytes in chunks, the
 * trailer only once the body is verified, so upstream cannot complete an
 * upload whose body was not. */
static size_t reframed_read(struct req *r, char *out, size_t max)
{
	struct reframe *f = r->reframe;
	size_t got = 0;
	while (got < max) {
		if (f->frame_off < f->frame_len) {
			size_t n = f->frame_len - f->frame_off;
			n = n < max - got ? n : max - got;
			memcpy(out + got, f->frame + f->frame_off, n);
			f->frame_off += (unsigned)n;
			got += n;
			continue;
		}
		if (f->chunk_left > 0) {
			size_t avail = pbuf_used(&r->upbuf);
			size_t n = avail < max - got ? avail : max - got;
			n = n < f->chunk_left ? n : (size_t)f->chunk_left;
			if (n == 0)
				break;
			pbuf_take(&r->upbuf, out + got, n);
			got += n;
			r->up_sent += n;
			f->chunk_left -= n;
			if (f->chunk_left == 0) {
				memcpy(f->frame, "\r\n", 2);
				f->frame_len = 2;
				f->frame_off = 0;
			}
			continue;
		}
		if (!next_frame(r))
			break;
	}
	if (got)
		req_wake(r); /* the upload may have been waiting for room */
	else if (f->trailer_sent)
		return 0; /* the end */
	return got ? got : CURL_READFUNC_PAUSE;
}

static size_t on_upstream_read(struct transfer *t, void *arg, char *out, size_t max)
{
	struct req *r = arg;
	assert(r->magic == REQ_MAGIC);
	(void)t;
	if (r->has_err)
		return CURL_READFUNC_ABORT;
	if (r->reframe)
		return reframed_read(r, out, max);
	size_t avail = pbuf_used(&r->upbuf);
	/* Hold back the last byte until the body is verified: upstream stores
	 * nothing from a request whose body stops short. */
	if (r->body_check) { /* the whole body, checked, waits in held_body */
		size_t left = r->held_body.len - (size_t)r->up_sent;
		size_t got = left < max ? left : max;
		memcpy(out, r->held_body.p + r->up_sent, got);
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
	if (avail == 0)
		return CURL_READFUNC_PAUSE;
	size_t got = pbuf_take(&r->upbuf, out, avail < max ? avail : max);
	r->up_sent += got;
	req_wake(r); /* the upload may have been waiting for room */
	return got;
}

int pass_start(struct req *r)
{
	struct gw *gw = r->w->gw;
	if (!req_upstream_take(r))
		return -EBUSY;
	/* Its turn in its prefix's window is its key's, as a cache fill's is. */
	shaper_slot_tenant(&r->slot, r->peer_hop ? 0 : limits_tenant(r->key_id));
	if (!r->write_begun) {
		r->write_begun = true;
		cache_write_begins(r);
	}
	struct hdrs h;
	hdrs_init(&h);
	int rc = 0;
	if (!r->up_query && !(r->up_query = upstream_query(r->query, r->presigned_v2)))
		rc = -ENOMEM;
	struct reframe *rf = r->reframe;
	bool reframed = rf != NULL;
	struct fwd_ctx f = { &h, r->body == BODY_CHUNKED, 0, reframed, false };
	if (!rc) {
		MHD_get_connection_values(r->conn, MHD_HEADER_KIND, forward_header, &f);
		rc = f.rc;
	}
	if (!rc && reframed) {
		char alg[16], dlen[24];
		size_t i = 0;
		for (const char *s = rf->trailer + 15; *s && i + 1 < sizeof alg; s++) /* "x-amz-checksum-" */
			alg[i++] = (char)toupper((unsigned char)*s);
		alg[i] = '\0';
		*u64_dec(dlen, (uint64_t)r->up_len, 0) = '\0';
		rc = f.encoding_set ? 0 : hdrs_add(&h, "Content-Encoding", "aws-chunked");
		rc = rc ? rc : hdrs_add(&h, "x-amz-decoded-content-length", dlen);
		rc = rc ? rc : hdrs_add(&h, "x-amz-trailer", rf->trailer);
		rc = rc ? rc : hdrs_add(&h, "x-amz-sdk-checksum-algorithm", alg);
		r->up_sent = 0;
		rf->chunk_left = 0;
		rf->frame_len = rf->frame_off = 0;
		rf->trailer_sent = false;
	}
	if (!rc && r->presigned)
		rc = pass_query_headers(r, &h);
	/* The payload hash upstream checks: the client's own when it signed
	 * the body (so S3 verifies it again), else UNSIGNED-PAYLOAD. */
	struct up_request rq = {
		.method = r->method,
		.bucket = r->s3.bucket,
		.key = r->s3.target == S3T_OBJECT ? buf_cstr(&r->s3.key) : NULL,
		.query = r->up_query,
		.payload_hash = r->sha ? r->want_sha
		              : r->body == BODY_NONE ? SV4_EMPTY_SHA256
		              : reframed ? "STREAMING-UNSIGNED-PAYLOAD-TRAILER" : SV4_UNSIGNED_PAYLOAD,
		.headers = &h,
		.upload = r->body != BODY_NONE || strcmp(r->method, "PUT") == 0 ||
		          strcmp(r->method, "POST") == 0,
		.upload_len = reframed ? (int64_t)rf->wire_len : r->up_len,
	};
	rc = rc ? rc : upstream_prepare(gw->up, &r->up, &rq, &r->target);
	hdrs_fini(&h);
	if (rc)
		return rc;
	r->uhdrs_done = false;
	r->err_gather = r->slowed = r->err_cut = false;
	r->udone = false;
	r->uresult = CURLE_OK;
	r->ustatus = 0;
	if ((rc = submit(r)) != 0)
		return rc;
	r->refs++;
	return 0;
}

/* Sent again, signed for the region S3 named: only while somebody waits. */
static int resend_upstream(struct transfer *t, void *arg)
{
	struct req *r = arg;
	assert(r->magic == REQ_MAGIC);
	(void)t;
	if (!r->conn || r->has_err)
		return -ECANCELED;
	int rc = pass_start(r);
	if (rc == 0) {
		log_info("upstream", "id=%s retrying in region %s", r->id, r->target.region);
		req_unref(r); /* pass_start took a new reference */
	}
	return rc;
}

static void upstream_done(struct transfer *t, void *arg, CURLcode result)
{
	struct req *r = arg;
	assert(r->magic == REQ_MAGIC && t == &r->up);
	shaper_release(r->w->gw->shaper, &r->slot, t->status, clock_mono_s());
	if (r->slowed) {
		r->slowed = false;
		if (transfer_retry_later(t) >= 0)
			return; /* resend_upstream: the window first, then S3 */
	}
	if (r->err_gather) {
		pass_error_answer(r, t, result);
		result = CURLE_OK; /* S3's answer, heard */
	}
	r->udone = true;
	r->uresult = result;
	if (result == CURLE_OK) {
		cache_invalidate(r);
		listcache_store(r);
	} else {
		forget_unheard_write(r);
	}
	cache_write_ends(r);
	if (result != CURLE_OK)
		log_warn("upstream", "id=%s %s %s: %s", r->id, r->method, buf_cstr(&r->target.url),
		         transfer_strerror(t, result));
	else if (r->orphan)
		log_info("upstream", "id=%s %s %s: answered %ld, its client gone", r->id, r->method,
		         buf_cstr(&r->target.url), r->ustatus);
	req_wake(r);
	req_unref(r);
}

static const struct transfer_ops upstream_ops = {
	.headers = on_upstream_headers,
	.body = on_upstream_body,
	.read = on_upstream_read,
	.progress = pass_progress,
	.restart = resend_upstream,
	.done = upstream_done,
};

/* ------------------------------------------------------------------ */
/* request body */


/* Takes as much of the client's body as there is room for; returns the
 * number of bytes consumed. */
size_t pass_take_body(struct req *r, const char *data, size_t len)
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
			pass_stop(r);
		} else if (st == ACK_DONE && r->in_len >= 0 && r->bytes_in + n < (uint64_t)r->in_len) {
			/* The aws-chunked body ended, and the client says more
			 * follows: data after the end. Refused before the last
			 * byte goes up, so upstream stores nothing. */
			req_fail(r, S3E_INVALID_CHUNK, NULL);
			pass_stop(r);
		} else if (st == ACK_DONE) {
			r->body_verified = true;
		}
	} else {
		if (r->up_len >= 0 && r->up_queued + n > (uint64_t)r->up_len) {
			req_fail(r, S3E_INCOMPLETE_BODY, NULL);
			pass_stop(r);
			r->bytes_in += len;
			return len;
		}
		if (r->sha)
			EVP_DigestUpdate(r->sha, data, n);
		if (r->body_check) {
			buf_append(&r->held_body, data, n); /* fits: up_len <= its max */
		} else if (pbuf_put(&r->upbuf, data, n) != 0) {
			/* Out of memory: upstream must not get a body with a hole. */
			req_fail(r, S3E_INTERNAL, NULL);
			pass_stop(r);
			r->bytes_in += len;
			return len;
		}
		r->up_queued += n;
	}
	r->bytes_in += n;
	if (r->up.read_paused)
		transfer_unpause(&r->up);
	return n;
}

/* The client's body has ended: is it what was signed? */
void pass_finish_body(struct req *r)
{
	r->client_body_done = true;
	/* Upstream answered before the whole body went (it never gets the
	 * held-back last byte, so it stored nothing): its answer is the one. */
	if (r->has_err || r->body == BODY_NONE || r->udone)
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
	if (r->body_check && !r->has_err && authn_check_body(r) == 0 && pass_start(r) != 0)
		req_fail(r, S3E_INTERNAL, NULL);
	if (r->start_verified && !r->has_err && pass_start(r) != 0)
		req_fail(r, S3E_INTERNAL, NULL);
	if (r->has_err)
		pass_stop(r);
	else if (r->up.read_paused)
		transfer_unpause(&r->up);
}

/* ------------------------------------------------------------------ */
/* response */

/*
 * The end of a write's answer. A client that has a write's answer may read
 * the object through any node at once, and S3 would give it the new
 * version. So the answer's end (its last byte, or the end of a chunked
 * body, or the whole answer when it has no body) waits until the write is
 * done upstream (upstream_done forgets what it changed here and queues the
 * invalidation for the others) and Redis answered that invalidation's
 * PUBLISH: by then it is on its way to every other node. Not while Redis
 * is down (nobody can be told), and at most TOLD_WAIT_MAX_S. Polled every
 * millisecond: writes are few, and the heartbeat thread has no way to
 * wake a worker's loop. Returns true when it must wait (woken by the
 * shaping timer, or by upstream_done).
 */
#define TOLD_WAIT_MAX_S 1.0

bool pass_end_waits(struct req *r)
{
	if (!r->s3_parsed || r->s3.access != POL_WRITE || r->has_err)
		return false;
	if (!r->udone)
		return true;
	if (r->uresult != CURLE_OK || !r->told_ticket ||
	    cluster_published(r->w->gw->cluster, r->told_ticket))
		return false;
	double now = clock_mono_s();
	if (!r->told_wait)
		r->told_wait = now;
	if (now - r->told_wait > TOLD_WAIT_MAX_S) {
		cluster_gave_up(r->w->gw->cluster, r->told_ticket);
		r->told_ticket = 0; /* said once */
		return false;
	}
	req_poll_in(r, 0.001);
	return true;
}

static ssize_t read_response(void *cls, uint64_t pos, char *out, size_t max)
{
	struct req *r = cls;
	assert(r->magic == REQ_MAGIC);
	(void)pos;
	if (r->gone)
		return MHD_CONTENT_READER_END_WITH_ERROR; /* gone_cb: the client left */
	if (pbuf_used(&r->downbuf)) {
		if (!(max = req_shape(r, max)))
			return 0; /* the key's max_bytes_per_second: wait for tokens */
		if (r->resp_len != MHD_SIZE_UNKNOWN && r->bytes_out + max >= r->resp_len &&
		    pass_end_waits(r)) {
			max = (size_t)(r->resp_len - r->bytes_out - 1); /* all but the last byte */
			if (!max) {
				req_suspend(r);
				return 0;
			}
		}
		size_t n = pbuf_take(&r->downbuf, out, max);
		r->bytes_out += n;
		if (r->up.write_paused)
			transfer_unpause(&r->up);
		return (ssize_t)n;
	}
	if (r->udone) {
		bool complete = r->uresult == CURLE_OK &&
		                (r->resp_len == MHD_SIZE_UNKNOWN || r->bytes_out == r->resp_len);
		if (complete && pass_end_waits(r)) {
			req_suspend(r);
			return 0;
		}
		if (complete)
			return MHD_CONTENT_READER_END_OF_STREAM;
		req_cut(r, "upstream-error");
		return MHD_CONTENT_READER_END_WITH_ERROR;
	}
	if (r->up.write_paused)
		transfer_unpause(&r->up);
	req_suspend(r);
	return 0;
}

static void response_done(void *cls)
{
	req_unref(cls);
}

uint64_t pass_response_size(const struct req *r)
{
	bool bodyless = strcmp(r->method, "HEAD") == 0 || r->ustatus == 204 || r->ustatus == 304;
	return bodyless && r->resp_len == MHD_SIZE_UNKNOWN ? 0 : r->resp_len;
}

enum MHD_Result pass_respond(struct req *r)
{
	uint64_t size = pass_response_size(r);
	struct MHD_Response *resp = MHD_create_response_from_callback(size, 64 * 1024, read_response,
	                                                              r, response_done);
	if (!resp)
		return MHD_NO;
	r->refs++;
	for (size_t i = 0; i < r->up.resp.n; i++) {
		const char *n = r->up.resp.v[i].name;
		if (hdr_hop_by_hop(n) || strcasecmp(n, "content-length") == 0)
			continue;
		if (r->err_made && strncasecmp(n, "content-", 8) == 0)
			continue; /* they described the body replaced */
		req_add_response_header(resp, n, r->up.resp.v[i].value);
	}
	if (r->err_made)
		MHD_add_response_header(resp, "Content-Type", "application/xml");
	if (r->w->gw->store && r->s3.target == S3T_OBJECT &&
	    (strcmp(r->method, "GET") == 0 || strcmp(r->method, "HEAD") == 0))
	{
		MHD_add_response_header(resp, "x-larder-cache", "bypass");
		r->bypass_logged = true;
	}
	/* S3 always names its request; an S3-compatible upstream may not. */
	if (!hdrs_get(&r->up.resp, "x-amz-request-id"))
		MHD_add_response_header(resp, "x-amz-request-id", r->id);
	req_add_common_headers(r, resp);
	return req_queue_response(r, (unsigned)r->ustatus, resp);
}

void pass_init(struct req *r)
{
	up_target_init(&r->target);
	struct transfer_retry retry = upstream_retry_policy(r->w->gw->up);
	transfer_init(&r->up, &upstream_ops, r, r->w->curl, &retry);
	shaper_slot_init(&r->slot, false, &r->w->slot_waker, slot_placed);
	ev_timer_init(&r->slot_timer, slot_cb, 0, 0);
	r->slot_timer.data = r;
	r->resp_len = MHD_SIZE_UNKNOWN;
}

void pass_fini(struct req *r)
{
	assert(!r->up.running);
	free(r->reframe);
	transfer_fini(&r->up);
	up_target_fini(&r->target);
	free(r->upbuf.p);
	free(r->downbuf.p);
	free(r->up_query);
}

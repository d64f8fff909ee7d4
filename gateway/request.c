/*
 * request.c - one client request, from its first byte to its access-log
 * line, and its one S3 error responder (see request.h).
 *
 * A request's life:
 *   request_uri_cb      raw URI kept; struct req created (ref: connection)
 *   access cb, 1st call headers: authn.c (parse, SigV4, policy, body plan);
 *                       then the cache (cache.c), the LIST cache, or the
 *                       pass-through (passthrough.c: ref while upstream runs)
 *   access cb, uploads  body bytes -> verify (hash / aws-chunked) -> upstream
 *   access cb, last     body verified; once upstream's headers are in,
 *                       queue the response (ref: response)
 *   completed cb        access-log line; upstream cancelled if still running
 * The struct is freed when the last of its three references goes.
 */
#include "gateway/request.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>

#include "auth/chunked.h"
#include "base/buf.h"
#include "base/clock.h"
#include "base/httpdate.h"
#include "base/log.h"
#include "base/splitmix.h"
#include "cluster/cluster.h"
#include "gateway/authn.h"
#include "gateway/limits.h"
#include "gateway/listcache.h"
#include "gateway/metrics.h"
#include "gateway/passthrough.h"
#include "gateway/profiles.h"
#include "gateway/cache.h"
#include "gateway/req.h"
#include "gateway/request_internal.h"
#include "gateway/s3err.h"
#include "gateway/s3req.h"

/* ---- what the rest of gateway/ reads and sets (gateway/req.h) --------- */

bool req_valid(const struct req *r)
{
	return r && r->magic == REQ_MAGIC;
}

struct worker *req_worker(const struct req *r)
{
	return r->w;
}

struct gw *req_gw(const struct req *r)
{
	return r->w->gw;
}

const struct s3req *req_s3(const struct req *r)
{
	return &r->s3;
}

const char *req_bucket(const struct req *r)
{
	return r->s3.bucket;
}

const char *req_key(const struct req *r)
{
	return buf_cstr(&r->s3.key);
}

const char *req_query(const struct req *r)
{
	return r->query;
}

const char *req_method(const struct req *r)
{
	return r->method;
}

const char *req_id(const struct req *r)
{
	return r->id;
}

unsigned req_peer_hop(const struct req *r)
{
	return r->peer_hop;
}

bool req_has_body(const struct req *r)
{
	return r->body != BODY_NONE;
}

bool req_authorized(const struct req *r)
{
	return r->authorized;
}

bool req_repeats_read_header(const struct req *r)
{
	return r->repeats_read_header;
}

bool req_presigned(const struct req *r)
{
	return r->presigned;
}

bool req_alive(const struct req *r)
{
	return r->conn != NULL;
}

struct MHD_Connection *req_connection(const struct req *r)
{
	return r->conn;
}

bool req_failed(const struct req *r)
{
	return r->has_err;
}

bool req_responded(const struct req *r)
{
	return r->responded;
}

int req_status_sent(const struct req *r)
{
	return r->status_sent;
}

void req_count_out(struct req *r, uint64_t n)
{
	r->bytes_out += n;
}

long req_upstream_status(const struct req *r)
{
	return r->ustatus;
}

void req_telling_others(struct req *r, uint64_t ticket)
{
	if (ticket > r->told_ticket)
		r->told_ticket = ticket;
}

void req_set_upstream_status(struct req *r, long s)
{
	r->ustatus = s;
}

const struct hdrs *req_upstream_headers(const struct req *r)
{
	return &r->up.resp;
}

uint64_t req_upstream_length(const struct req *r)
{
	return r->resp_len;
}

bool req_barrier_lapsed(const struct req *r)
{
	return r->barrier_lapsed;
}

struct cread *req_cread(const struct req *r)
{
	return r->cache;
}

void req_set_cread(struct req *r, struct cread *c)
{
	r->cache = c;
}

struct list_req *req_list(const struct req *r)
{
	return r->list;
}

void req_set_list(struct req *r, struct list_req *l)
{
	r->list = l;
}

void req_err_object_size(struct req *r, uint64_t size)
{
	r->err_sized = true;
	r->err_object_size = size;
}

static enum MHD_Result count_header(void *cls, enum MHD_ValueKind kind, const char *name,
                                    const char *value)
{
	size_t *n = cls;
	*n += strlen(name) + strlen(value ? value : "") + 4; /* "name: value\r\n" */
	(void)kind;
	return MHD_YES;
}

/* What r's request holds of its connection's pool (req.h): its line and
 * headers as read, and a record per header and per query parameter. */
static size_t pool_held(const struct req *r)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
	int n = MHD_get_connection_values(r->conn, MHD_HEADER_KIND | MHD_GET_ARGUMENT_KIND,
	                                  NULL, NULL);
	return (ci ? ci->header_size : strlen(r->uri)) +
	       REQ_POOL_PER_HEADER * (size_t)(n > 0 ? n : 0);
}

/* The bytes of resp's header block, with what libmicrohttpd adds (the
 * status line, Content-Length, Connection) and a Date, what r's request
 * holds of the connection's pool, and whether they fit beside it (req.h). */
static bool answer_fits(const struct req *r, struct MHD_Response *resp, size_t *need,
                        size_t *held, size_t *pool)
{
	*need = 256;
	*pool = r->w->gw->cfg->max_header_bytes + REQ_POOL_EXTRA;
	MHD_get_response_headers(resp, count_header, need);
	*held = pool_held(r);
	return *held + *need <= *pool;
}

/* Whether resp's headers fit beside r's request in the connection's pool
 * (req.h, req_queue_response); when not, resp is let go and r failed. */
static bool headers_fit(struct req *r, struct MHD_Response *resp)
{
	size_t need, held, pool;
	if (answer_fits(r, resp, &need, &held, &pool))
		return true;
	MHD_destroy_response(resp);
	log_warn("http", "id=%s an answer's headers (%zu bytes) do not fit beside its request "
	         "(%zu of %zu)", r->id, need, held, pool);
	char msg[200];
	snprintf(msg, sizeof msg, "The upstream answer's headers (%zu bytes) are more than larder "
	         "can relay (%zu).", need, pool > held ? pool - held : 0);
	req_fail(r, S3E_INTERNAL, msg);
	return false;
}

/* Every answer carries the time it was made (RFC 9110 6.6.1), as S3's do:
 * SDKs correct their clocks by it, caches in front compute ages from it.
 * libmicrohttpd's own is off (MHD_USE_SUPPRESS_DATE_NO_CLOCK). */
static void add_date(struct MHD_Response *resp)
{
	char date[HTTPDATE_SIZE];
	httpdate_now(date);
	MHD_add_response_header(resp, "Date", date);
}

/* A signed GET of an object answered 200 or 206 is a read an access profile
 * records. Noted as its answer is queued, not when the last byte has gone:
 * a client holds the whole answer before libmicrohttpd reports the request
 * complete, and may have stopped the profile in between. */
static void note_read(struct req *r, unsigned status)
{
	if (!profiles_recording(r->w->gw->profiles) || (status != 200 && status != 206) ||
	    !r->authorized || r->s3.target != S3T_OBJECT || strcmp(r->method, "GET") != 0)
		return;
	profiles_note(r->w->gw->profiles, r->key_id[0] ? r->key_id : NULL,
	              MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "x-larder-job"),
	              r->s3.bucket, buf_cstr(&r->s3.key), r->t_start);
}

enum MHD_Result req_queue_response(struct req *r, unsigned status, struct MHD_Response *resp)
{
	if (!headers_fit(r, resp))
		return req_respond_error(r);
	if (!MHD_get_response_header(resp, "Date")) /* a pass-through keeps S3's */
		add_date(resp);
	r->status_sent = (int)status;
	req_upstream_unwait(r);
	note_read(r, status);
	enum MHD_Result ret = MHD_queue_response(r->conn, status, resp);
	MHD_destroy_response(resp);
	r->responded = true;
	return ret;
}

/* ------------------------------------------------------------------ */
/* lifetime */

static void account_request(struct req *r, const char *err, bool copy);

void req_ref(struct req *r)
{
	r->refs++;
}

void req_unref(struct req *r)
{
	assert(r->magic == REQ_MAGIC && r->refs > 0);
	if (--r->refs > 0)
		return;
	pass_fini(r);
	if (r->write_begun)
		cache_write_ends(r); /* one stopped before upstream_done */
	ev_timer_stop(r->w->loop, &r->shape_timer);
	ev_io_stop(r->w->loop, &r->gone_watch);
	if (r->orphan) { /* live, and a connection, until now (pass_outlives) */
		account_request(r, r->cut ? r->cut : "client-gone",
		                hdrs_get(&r->kept, "x-amz-copy-source") != NULL);
		list_unlink(&r->w->live, &r->link);
		r->w->n_live--;
		atomic_fetch_sub(&r->w->gw->open_connections, 1);
	}
	req_upstream_unwait(r); /* no slot wakes it now: off the worker's list too */
	pthread_mutex_lock(&r->w->wake_lock);
	if (r->key_woken)
		list_unlink(&r->w->key_woken, &r->key_woken_link);
	pthread_mutex_unlock(&r->w->wake_lock);
	if (r->upstream_slot)
		limits_upstream_give(r->key_id);
	if (r->sha)
		EVP_MD_CTX_free(r->sha);
	ack_destroy(r->ack);
	hdrs_fini(&r->kept);
	buf_fini(&r->held_body);
	buf_fini(&r->err_extra);
	listcache_end(r);
	cache_free(r);
	s3req_fini(&r->s3);
	free(r->uri);
	free(r->path);
	r->magic = 0;
	free(r);
}

static void watch_gone(struct req *r);

/* Resumes the client connection if it waits: whatever it waited for may
 * now be possible; if not, the callback suspends it again. */
void req_wake(struct req *r)
{
	ev_io_stop(r->w->loop, &r->gone_watch);
	if (r->suspended && r->conn) {
		r->suspended = false;
		MHD_resume_connection(r->conn);
		r->w->mhd_kick = true;
	}
}

/* Past the grace period nothing suspends: libmicrohttpd aborts the process
 * when it is stopped with a connection suspended (drain_cb, worker_fini);
 * a request woken then finds its fetch gone and its connection closes. */
void req_suspend(struct req *r)
{
	if (!r->suspended && r->conn && !r->w->closing && !r->gone) {
		r->suspended = true;
		MHD_suspend_connection(r->conn);
		watch_gone(r);
	}
}

/* ------------------------------------------------------------------ */
/* errors larder raises */

#define KEY_SLOTS_TAKEN "Too many requests for this access key are waiting on the origin " \
	"(max_upstream_requests)."

bool req_upstream_take(struct req *r)
{
	if (r->upstream_slot || r->peer_hop)
		return true;
	if (!limits_upstream_take(r->key_id, r->max_upstream)) {
		req_fail(r, S3E_SLOW_DOWN, KEY_SLOTS_TAKEN);
		return false;
	}
	r->upstream_slot = true;
	return true;
}

/* A request waiting for a slot of its key's is woken when one is given
 * back to it (limits_place.wake: key_slot_wake); it also asks again this
 * often, for a max_upstream_requests a reload raised, and to stop waiting. */
#define KEY_SLOT_POLL_S 0.1

/* limits_place.wake: on whichever thread gave a slot back, under limits.c's
 * lock (which req_unref leaves the queue under before r is freed); only
 * queues r for its worker, whose loop resumes it (request_key_wake_cb). */
static void key_slot_wake(void *arg)
{
	struct req *r = arg;
	assert(r->magic == REQ_MAGIC);
	struct worker *w = r->w;
	pthread_mutex_lock(&w->wake_lock);
	if (!r->key_woken) {
		r->key_woken = true;
		list_push_back(&w->key_woken, &r->key_woken_link);
	}
	pthread_mutex_unlock(&w->wake_lock);
	ev_async_send(w->loop, &w->key_async);
}

void request_key_wake_cb(struct ev_loop *loop, ev_async *a, int revents)
{
	struct worker *w = a->data;
	assert(w->magic == WORKER_MAGIC);
	(void)loop;
	(void)revents;
	for (;;) { /* one at a time: another thread may queue them meanwhile */
		pthread_mutex_lock(&w->wake_lock);
		struct list_node *n = w->key_woken.first;
		struct req *r = n ? list_item(n, struct req, key_woken_link) : NULL;
		if (r) {
			list_unlink(&w->key_woken, n);
			r->key_woken = false;
		}
		pthread_mutex_unlock(&w->wake_lock);
		if (!r)
			return;
		req_wake(r);
	}
}

static void key_slot_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	(void)loop;
	(void)revents;
	struct req *r = t->data;
	assert(r->magic == REQ_MAGIC);
	if (r->key_place.queued)
		req_wake(r);
	else
		ev_timer_stop(r->w->loop, t);
}

bool req_upstream_wait(struct req *r)
{
	if (r->upstream_slot || r->peer_hop)
		return true;
	double now = clock_mono_s();
	if (!r->key_place.queued)
		r->key_wait_until = now + r->w->gw->cfg->upstream_slot_wait_ms / 1000.0;
	if (limits_upstream_queue(r->key_id, r->max_upstream, &r->key_place)) {
		ev_timer_stop(r->w->loop, &r->key_timer);
		r->upstream_slot = true;
		return true;
	}
	if (now >= r->key_wait_until) {
		req_upstream_unwait(r);
		req_fail(r, S3E_SLOW_DOWN, KEY_SLOTS_TAKEN);
		return false;
	}
	if (!ev_is_active(&r->key_timer)) {
		ev_timer_set(&r->key_timer, KEY_SLOT_POLL_S, KEY_SLOT_POLL_S);
		ev_timer_start(r->w->loop, &r->key_timer);
	}
	return false;
}

bool req_upstream_waits(const struct req *r)
{
	return r->key_place.queued;
}

void req_upstream_unwait(struct req *r)
{
	if (!r->key_place.queued) /* only r's worker changes it */
		return;
	ev_timer_stop(r->w->loop, &r->key_timer);
	limits_upstream_unqueue(r->key_id, &r->key_place);
}

bool req_upstream_try(struct req *r)
{
	if (!r->upstream_slot && !r->peer_hop && limits_upstream_take(r->key_id, r->max_upstream))
		r->upstream_slot = true;
	return r->upstream_slot || r->peer_hop;
}

bool req_upstream_capped(const struct req *r)
{
	return !r->peer_hop && r->max_upstream;
}

const char *req_upstream_ahead(struct req *r)
{
	if (!req_upstream_capped(r) || !limits_upstream_take(r->key_id, r->max_upstream))
		return NULL;
	return r->key_id;
}

unsigned req_charge(const struct req *r)
{
	return r->peer_hop ? 0 : limits_charge(r->key_id);
}

static void shape_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	(void)loop;
	(void)revents;
	struct req *r = t->data;
	assert(r->magic == REQ_MAGIC);
	req_wake(r);
}

bool req_shaped(const struct req *r)
{
	return r->max_rate != 0;
}

size_t req_shape(struct req *r, size_t want)
{
	if (!r->max_rate || !want)
		return want;
	double wait_s = 0;
	size_t n = limits_bytes_take(r->key_id, r->max_rate, want, clock_mono_s(), &wait_s);
	if (n)
		return n;
	req_poll_in(r, wait_s);
	req_suspend(r);
	return 0;
}

void req_poll_in(struct req *r, double s)
{
	ev_timer_stop(r->w->loop, &r->shape_timer);
	ev_timer_set(&r->shape_timer, s, 0);
	ev_timer_start(r->w->loop, &r->shape_timer);
}

void req_fail(struct req *r, enum s3err e, const char *msg)
{
	if (r->has_err)
		return;
	r->has_err = true;
	r->err = e;
	snprintf(r->err_msg, sizeof r->err_msg, "%s", msg ? msg : "");
}

void req_cut(struct req *r, const char *why)
{
	if (!r->cut)
		r->cut = why;
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

void req_add_header_lines(struct MHD_Response *resp, const char *lines,
                          const char *const *names, size_t n, bool only)
{
	for (const char *p = lines; *p;) {
		const char *nl = strchr(p, '\n');
		size_t len = nl ? (size_t)(nl - p) : strlen(p);
		const char *colon = memchr(p, ':', len);
		/* One copy of the line holds both name and value: a name has
		 * no bound of its own (S3 bounds user metadata as a whole). */
		char *name = colon ? strndup(p, len) : NULL;
		if (name) {
			name[colon - p] = '\0';
			const char *val = name + (colon - p) + 1;
			while (*val == ' ')
				val++;
			bool named = false;
			for (size_t i = 0; i < n; i++)
				named |= names[i] && strcasecmp(name, names[i]) == 0;
			if (named == only)
				req_add_response_header(resp, name, val);
			free(name);
		}
		p += len + (nl ? 1 : 0);
	}
}

void req_err_headers(struct req *r, const char *lines)
{
	r->err_headers = lines;
}

/* Draining (SIGTERM): the connection ends with this answer, so a client
 * opens its next request elsewhere rather than race the close of an idle
 * connection at the end of the drain (and lose that request unanswered). */
static bool closing_after(const struct req *r)
{
	return atomic_load(&r->w->gw->draining);
}

void req_add_common_headers(struct req *r, struct MHD_Response *resp)
{
	MHD_add_response_header(resp, "x-larder-request-id", r->id);
	if (closing_after(r))
		MHD_add_response_header(resp, "Connection", "close");
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

/* Longest path an answer written past libmicrohttpd names as its
 * <Resource>: the socket's buffer must take the answer whole at once. */
#define RAW_RESOURCE_MAX 1024

/* Writes r's error as its answer straight to its socket fd, past
 * libmicrohttpd, and shuts that for writing: for an answer libmicrohttpd
 * will not send, its pool full with the request. The client reads the
 * error and the end of the answer, then closes, and libmicrohttpd with it.
 * The socket is idle (libmicrohttpd is reading the request): its buffer
 * takes these few hundred bytes whole. Over TLS nothing can be written
 * past libmicrohttpd: the connection is closed with no answer. */
static void answer_raw(struct req *r, MHD_socket fd)
{
	r->responded = true;
	if (r->w->gw->tls_cert) {
		shutdown(fd, SHUT_RDWR);
		return;
	}
	const char *resource = strlen(r->path) <= RAW_RESOURCE_MAX ? r->path : NULL;
	struct buf body;
	buf_init(&body, 6 * RAW_RESOURCE_MAX + sizeof r->err_msg + 1024);
	if (s3err_xml(r->err, r->err_msg[0] ? r->err_msg : NULL, resource, r->id, NULL,
	              &body) == 0) {
		unsigned status = s3err_status(r->err);
		char date[HTTPDATE_SIZE], head[512];
		httpdate_now(date);
		int n = snprintf(head, sizeof head, "HTTP/1.1 %u %s\r\nConnection: close\r\n"
		                 "Content-Type: application/xml\r\nDate: %s\r\nServer: larder\r\n"
		                 "x-amz-request-id: %s\r\nx-larder-request-id: %s\r\n"
		                 "Content-Length: %zu\r\n\r\n", status,
		                 MHD_get_reason_phrase_for(status), date, r->id, r->id, body.len);
		size_t body_out = strcmp(r->method, "HEAD") != 0 ? body.len : 0;
		struct iovec iov[2] = { { head, (size_t)n }, { body.p, body_out } };
		struct msghdr msg = { .msg_iov = iov, .msg_iovlen = 2 };
		if (sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT) == n + (ssize_t)body_out) {
			r->status_sent = (int)status;
			r->bytes_out = body_out;
		}
	}
	buf_fini(&body);
	shutdown(fd, SHUT_WR);
}

enum MHD_Result req_respond_error(struct req *r)
{
	/* Bounded by what it can hold: the path, escaped (a byte may become
	 * six), within the header limit, and the elements err_extra holds. */
	struct buf body;
	buf_init(&body, 6 * (size_t)r->w->gw->cfg->max_header_bytes + r->err_extra.max + 4096);
	/* S3's 416 names the range and the size, not the resource. */
	if (s3err_xml(r->err, r->err_msg[0] ? r->err_msg : NULL, r->err_sized ? NULL : r->path,
	              r->id, r->err_extra.len ? buf_cstr(&r->err_extra) : NULL, &body) != 0) {
		buf_fini(&body);
		return MHD_NO;
	}
	struct MHD_Response *resp = MHD_create_response_from_buffer(body.len, body.p,
	                                                            MHD_RESPMEM_MUST_COPY);
	size_t body_len = body.len;
	buf_fini(&body);
	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, "Content-Type", "application/xml");
	add_date(resp);
	MHD_add_response_header(resp, "Server", "larder");
	MHD_add_response_header(resp, "x-amz-request-id", r->id);
	if (r->err_headers)
		req_add_header_lines(resp, r->err_headers, NULL, 0, false);
	r->err_headers = NULL;
	if (r->err_sized) {
		char cr[64];
		snprintf(cr, sizeof cr, "bytes */%" PRIu64, r->err_object_size);
		MHD_add_response_header(resp, "Content-Range", cr);
	}
	if (cache_active(r))
		MHD_add_response_header(resp, "x-larder-cache", cache_outcome(r));
	req_add_common_headers(r, resp);
	if (r->err == S3E_SLOW_DOWN) { /* as S3 does: when to try again */
		char after[16];
		snprintf(after, sizeof after, "%d", LIMITS_RETRY_AFTER_S);
		MHD_add_response_header(resp, "Retry-After", after);
	}
	/* A body we did not read, a refused connection over the limit, or a
	 * request whose end is in doubt: close rather than try to find the
	 * next request in the stream. */
	if ((unread_body(r) || r->err == S3E_SLOW_DOWN || r->close_after) && !closing_after(r))
		MHD_add_response_header(resp, "Connection", "close");
	req_upstream_unwait(r);
	size_t need, held, pool;
	if (!answer_fits(r, resp, &need, &held, &pool)) {
		/* libmicrohttpd would close the connection with no answer: a
		 * request refused as too large may fill the pool itself. */
		MHD_destroy_response(resp);
		const union MHD_ConnectionInfo *ci =
			MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
		if (ci)
			answer_raw(r, ci->connect_fd);
		return MHD_NO;
	}
	if (strcmp(r->method, "HEAD") != 0) /* counted as S3's log counts it: the body sent */
		r->bytes_out += body_len;
	r->status_sent = (int)s3err_status(r->err);
	enum MHD_Result ret = MHD_queue_response(r->conn, (unsigned)r->status_sent, resp);
	MHD_destroy_response(resp);
	r->responded = true;
	return ret;
}

const char *req_header(struct req *r, const char *name)
{
	if (!r->conn) /* an orphaned write's end (cache_invalidate): what it kept */
		return hdrs_get(&r->kept, name);
	return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}

/* ------------------------------------------------------------------ */
/* MHD callbacks */

/* The low `digits` hex digits of v, upper case (a snprintf of the request id
 * cost a request about 1% of its user-space instructions). */
static void put_hex(char *out, uint64_t v, int digits)
{
	for (int i = digits - 1; i >= 0; i--, v >>= 4)
		out[i] = "0123456789ABCDEF"[v & 15];
}

/* A client connection: its request that MHD has not said it completed
 * (NULL: none), and since when it waits for a request's headers. */
struct conn_slot {
	struct req *pending;
	struct list_node link;    /* the worker's conns */
	double awaiting_since;    /* clock_mono_s() when it began to wait; 0: handled */
	MHD_socket fd;
};

/* What one look at a client's socket (a recv() peek) finds: nothing yet,
 * bytes to read, or its end: nothing more can be read (its FIN is next,
 * no byte left before it, or an error). */
enum sock_look { SOCK_QUIET, SOCK_BYTES, SOCK_ENDED };

static enum sock_look socket_look(int fd)
{
	char c;
	ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
	if (n > 0)
		return SOCK_BYTES;
	return n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
	       ? SOCK_ENDED : SOCK_QUIET;
}

static bool socket_ended(int fd)
{
	return socket_look(fd) == SOCK_ENDED;
}

/* Whether r's client closed its connection, its socket found as look.
 * Bytes to read tell nothing (a pipelined next request), except over TLS
 * when the FIN came after them: a client's close_notify alert (a TLS
 * client does not half-close). */
static bool client_closed(struct req *r, int fd, enum sock_look look)
{
	if (look != SOCK_BYTES)
		return look == SOCK_ENDED;
	struct pollfd p = { .fd = fd, .events = POLLRDHUP };
	return r->w->gw->tls_cert && poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP));
}

/*
 * A client that leaves while its request waits (for S3's first byte, a slot
 * in its prefix's window, a fetch another reader started, or, its answer
 * queued, for the next bytes of its body or its key's byte rate):
 * libmicrohttpd watches no suspended connection, so nothing would notice
 * until the wait ends, up to LARDER_UPSTREAM_TIMEOUT, while the request
 * holds its connection slot, its key's max_upstream_requests slot, and a
 * pass-through's request to S3. So the connection is watched while it
 * waits: readable and closed (client_closed) ends the request as
 * libmicrohttpd does a client abort, closing the connection with no answer
 * (or the answer cut short: its body's reader ends it, req_gone), as nginx
 * does unless told to ignore client aborts; its exchange with S3 stops,
 * unless it is a write S3 has all of (pass_outlives). Readable with bytes (a
 * pipelined next request) tells nothing: the watch stops. Only once the
 * request's body is in.
 */
static enum MHD_Result keep_header(void *cls, enum MHD_ValueKind kind, const char *name,
                                   const char *value)
{
	(void)kind;
	return hdrs_add(cls, name, value ? value : "") == 0 ? MHD_YES : MHD_NO;
}

/* Whether r goes on without its client, whose connection conn is about to
 * go (pass_outlives). Its end reads its headers (the source a RenameObject
 * removes): they are kept. */
static bool outlives_client(struct req *r, struct MHD_Connection *conn)
{
	if (r->orphan)
		return true;
	if (!conn || !pass_outlives(r))
		return false;
	MHD_get_connection_values(conn, MHD_HEADER_KIND, keep_header, &r->kept);
	return true;
}

static void client_left(struct req *r)
{
	r->gone = true;
	req_cut(r, "client-gone");
	log_debug("server", "id=%s the client left %s its answer", r->id,
	          r->responded ? "during" : "before");
	if (!outlives_client(r, r->conn))
		pass_stop(r);
	req_wake(r);
}

static void gone_cb(struct ev_loop *loop, ev_io *io, int revents)
{
	struct req *r = io->data;
	assert(r->magic == REQ_MAGIC);
	(void)revents;
	enum sock_look look = socket_look(io->fd);
	if (look == SOCK_QUIET)
		return; /* woken for nothing */
	ev_io_stop(loop, io); /* on bytes too: it would wake for them again and again */
	if (client_closed(r, io->fd, look))
		client_left(r);
}

static void watch_gone(struct req *r)
{
	if (!r->client_body_done || !r->conn_slot || ev_is_active(&r->gone_watch))
		return;
	ev_io_set(&r->gone_watch, r->conn_slot->fd, EV_READ);
	ev_io_start(r->w->loop, &r->gone_watch);
}

bool req_gone(const struct req *r)
{
	return r->gone;
}

enum MHD_Result request_accept_cb(void *cls, const struct sockaddr *addr, socklen_t len)
{
	struct worker *w = cls;
	assert(w->magic == WORKER_MAGIC);
	(void)addr;
	(void)len;
	return atomic_load(&w->gw->open_connections) < w->gw->cfg->max_connections + CONN_SLACK
	       ? MHD_YES : MHD_NO;
}

void request_connection_cb(void *cls, struct MHD_Connection *conn, void **socket_context,
                           enum MHD_ConnectionNotificationCode toe)
{
	struct worker *w = cls;
	assert(w->magic == WORKER_MAGIC);
	if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
		atomic_fetch_add(&w->gw->open_connections, 1);
		const union MHD_ConnectionInfo *ci =
			MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
		struct conn_slot *slot = calloc(1, sizeof *slot); /* NULL: not tracked */
		if (slot && ci) {
			slot->fd = ci->connect_fd;
			slot->awaiting_since = clock_mono_s();
			list_push_front(&w->conns, &slot->link);
		} else {
			free(slot);
			slot = NULL;
		}
		*socket_context = slot;
		return;
	}
	atomic_fetch_sub(&w->gw->open_connections, 1);
	struct conn_slot *slot = *socket_context;
	*socket_context = NULL;
	if (!slot)
		return;
	/* Created, never completed: MHD let it go. Without conn: by now MHD
	 * has freed the pool its header and argument records were in. */
	if (slot->pending)
		request_completed_cb(w, NULL, (void **)&slot->pending,
		                     MHD_REQUEST_TERMINATED_WITH_ERROR);
	list_unlink(&w->conns, &slot->link);
	free(slot);
}

/*
 * What the watch above cannot see, looked at once a second (the sweep):
 * - a request waiting suspended whose watch stopped on bytes, when its
 *   client closed after them (over TLS: a close_notify, then the FIN);
 * - a body libmicrohttpd still waits for, its client gone: the FIN came
 *   with its last bytes, libmicrohttpd took the socket for drained and
 *   would wait for the client timeout. left_mid_body tells at once when the
 *   body's length says more is due; a chunked body's end may be in
 *   libmicrohttpd's buffer then, unparsed. By the sweep it has parsed what
 *   it holds: the body still not in, nothing unread on the socket and its
 *   end reached, the client is gone. shutdown() makes libmicrohttpd look
 *   again, and it ends the request as a client abort (seen at two sweeps
 *   in a row, so within 2 s). Not over TLS, where
 *   GnuTLS may hold bytes it read (and libmicrohttpd sees its FIN there).
 */
static void sweep_left(struct req *r, int fd)
{
	if (!r->started || r->gone)
		return;
	if (r->suspended && r->client_body_done && !ev_is_active(&r->gone_watch)) {
		if (client_closed(r, fd, socket_look(fd)))
			client_left(r);
		return;
	}
	if (r->suspended || r->responded || r->body == BODY_NONE || r->client_body_done ||
	    r->w->gw->tls_cert || !socket_ended(fd)) {
		r->sweep_ended = false;
		return;
	}
	/* So at two sweeps in a row, with no body byte taken between: not a
	 * request woken in this loop pass whose last bytes libmicrohttpd has
	 * yet to parse (audit round 10). */
	if (!r->sweep_ended || r->sweep_bytes_in != r->bytes_in) {
		r->sweep_ended = true;
		r->sweep_bytes_in = r->bytes_in;
		return;
	}
	r->gone = true;
	req_cut(r, "client-abort");
	log_debug("server", "id=%s the client left in the middle of its body", r->id);
	shutdown(fd, SHUT_RDWR);
}

static void header_deadline_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct worker *w = t->data;
	(void)loop;
	(void)revents;
	double now = clock_mono_s(), limit = (double)w->gw->cfg->client_timeout_s;
	for (struct list_node *n = w->conns.first; n; n = n->next) {
		struct conn_slot *slot = list_item(n, struct conn_slot, link);
		if (slot->awaiting_since && now - slot->awaiting_since > limit) {
			slot->awaiting_since = 0;
			shutdown(slot->fd, SHUT_RDWR);
		} else if (slot->pending) {
			sweep_left(slot->pending, slot->fd);
		}
	}
}

void request_header_deadline_start(struct worker *w)
{
	ev_timer_init(&w->header_timer, header_deadline_cb, 1., 1.);
	w->header_timer.data = w;
	ev_timer_start(w->loop, &w->header_timer);
}

/*
 * A query of many parameters. libmicrohttpd 0.9.75 keeps a record of 64
 * bytes (56, aligned) per parameter in the connection's pool, beside the
 * bytes of the request it has read: up to its read buffer, half the pool,
 * or the request line where that is longer. When the records do not fit it
 * gives the request up without a word (the 431 it means to send is never
 * sent) and the client waits for LARDER_CLIENT_TIMEOUT. So a query of more
 * parameters than the rest of the pool holds is refused here, before
 * libmicrohttpd parses it: at the default LARDER_MAX_HEADER_SIZE, 240.
 */
#define MHD_POOL_SLACK 1024 /* what else it holds by then: ~500 bytes */

static size_t query_params_max(const struct worker *w, size_t uri_len)
{
	size_t pool = w->gw->cfg->max_header_bytes + REQ_POOL_EXTRA;
	size_t held = (uri_len > pool / 2 ? uri_len : pool / 2) + MHD_POOL_SLACK;
	return held < pool ? (pool - held) / REQ_POOL_PER_HEADER : 0;
}

/* The parameters libmicrohttpd makes of a query: one per '&' and one more. */
static size_t query_params(const char *query)
{
	size_t n = *query ? 1 : 0;
	for (const char *p = strchr(query, '&'); p; p = strchr(p + 1, '&'))
		n++;
	return n;
}

/* Answers r, which libmicrohttpd has not parsed and will not hand on
 * (answer_raw). Its access-log line is written as the connection closes. */
static void answer_unparsed(struct req *r, MHD_socket fd)
{
	r->started = true; /* logged as it completes */
	r->gone = true;    /* should libmicrohttpd hand it on after all: not again */
	str_copy(r->method, sizeof r->method, "-"); /* not known yet */
	answer_raw(r, fd);
}

void *request_uri_cb(void *cls, const char *uri, struct MHD_Connection *conn)
{
	struct worker *w = cls;
	struct req *r = calloc(1, sizeof *r);
	if (!r)
		return NULL;
	r->magic = REQ_MAGIC;
	r->refs = 1;
	r->w = w;
	ev_timer_init(&r->shape_timer, shape_cb, 0, 0);
	r->shape_timer.data = r;
	ev_timer_init(&r->key_timer, key_slot_cb, 0, 0);
	r->key_timer.data = r;
	r->key_place.wake = key_slot_wake;
	r->key_place.arg = r;
	ev_io_init(&r->gone_watch, gone_cb, -1, EV_READ);
	r->gone_watch.data = r;
	hdrs_init(&r->kept);
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
	/* Unique, not secret: the worker, its counter, and a mix of the time,
	 * the counter and the worker's random salt, so ids differ across restarts
	 * and across the nodes of a cluster, whose logs are read together. */
	uint64_t mix = splitmix_mix(((uint64_t)time(NULL) << 32) ^ ((uint64_t)w->index << 24) ^
	                            w->next_id ^ w->id_salt);
	put_hex(r->id, w->index, 2);
	put_hex(r->id + 2, w->next_id++, 6);
	put_hex(r->id + 8, mix, 8);
	r->id[16] = '\0';
	s3req_init(&r->s3);
	pass_init(r);
	list_push_front(&w->live, &r->link);
	w->n_live++;
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	if (ci && ci->socket_context) {
		r->conn_slot = ci->socket_context;
		r->conn_slot->pending = r;
	}
	size_t params = query_params(r->query), most = query_params_max(w, strlen(r->uri));
	if (params > most && r->conn_slot) {
		char msg[160];
		snprintf(msg, sizeof msg, "The request has %zu query parameters; larder takes at "
		         "most %zu (LARDER_MAX_HEADER_SIZE).", params, most);
		req_fail(r, S3E_HEADER_TOO_LARGE, msg);
		answer_unparsed(r, r->conn_slot->fd);
	}
	return r;
}

/* Sends r upstream through the pass-through. One without a body first waits
 * for a slot of its key's, as a cached read does (req_upstream_wait), in
 * the same queue; suspend: it waits suspended (woken to ask again; not in
 * the first call, which libmicrohttpd follows with another at once). One
 * with a body is refused at once when the key has none free (pass_start):
 * its client may be sending the body, which a wait would leave unread. */
static enum MHD_Result pass_or_wait(struct req *r, bool suspend)
{
	if (r->body == BODY_NONE && !req_upstream_wait(r)) {
		if (r->has_err)
			return req_respond_error(r);
	} else if (pass_start(r) != 0) {
		req_fail(r, S3E_INTERNAL, NULL);
		return req_respond_error(r);
	}
	if (suspend)
		req_suspend(r);
	return MHD_YES;
}

/*
 * The read barrier. A write through another node waits only for the nodes
 * it counts as members, and may not count this one yet (cluster_joining: it
 * started, or got Redis back, a heartbeat or three ago). Its answer may then
 * go out before this node applied its invalidation, and a read the client
 * sends here after it would get the version it replaced (for good, with
 * LARDER_METADATA_TTL=immutable). So meanwhile a read the cache could answer
 * from what this node trusts (a cached GET or HEAD, a listing the LIST cache
 * may hold) first waits for the cluster's read barrier: until this node
 * applied every message Redis pushed to it before the read came. That costs
 * a Redis round trip and no S3 request. The wait is polled (every
 * millisecond for BARRIER_FAST_S, a round trip; then every BARRIER_POLL_S,
 * while the listening thread is busy) and lasts at most BARRIER_WAIT_MAX_S:
 * past that, or when the subscription was lost meanwhile, the read goes on
 * but asks S3 (req_barrier_lapsed), as does one past the grace period of a
 * drain (nothing may wait then). Returns true while r must wait.
 */
#define BARRIER_WAIT_MAX_S 1.0
#define BARRIER_FAST_S 0.01
#define BARRIER_POLL_S 0.01

static bool barrier_waits(struct req *r)
{
	struct cluster *cl = r->w->gw->cluster;
	double waited = clock_mono_s() - r->barrier_since;
	enum cluster_barrier st = cluster_barrier_state(cl, r->barrier);
	if (st == CLUSTER_BARRIER_WAIT && waited <= BARRIER_WAIT_MAX_S && !r->w->closing) {
		req_poll_in(r, waited < BARRIER_FAST_S ? 0.001 : BARRIER_POLL_S);
		return true;
	}
	if (st != CLUSTER_BARRIER_PASSED) {
		r->barrier_lapsed = true;
		cluster_barrier_gave_up(cl);
	}
	r->barrier = 0;
	return false;
}

/*
 * A client that sends part of its body and closes its connection: when its
 * FIN arrives with the last bytes, libmicrohttpd reads those in pieces of
 * its buffer's size, takes the socket for drained once a read brings less
 * than it asked for (edge-triggered epoll, no new edge for the FIN) and
 * never reads the FIN. The request then held its connection, its key's
 * upstream slot and the PUT to S3 until the client timeout (60 s), and a
 * SIGTERM's drain waited for it. So once every byte read is taken and the
 * body's length says more are due, a peek tells whether the client is
 * gone. Not over TLS: GnuTLS may hold bytes it read from the socket.
 */
static bool left_mid_body(struct req *r)
{
	int64_t due = r->body == BODY_CHUNKED ? r->in_len : r->body == BODY_RAW ? r->up_len : -1;
	if (due < 0 || r->bytes_in >= (uint64_t)due || !r->conn_slot || r->w->gw->tls_cert ||
	    !socket_ended(r->conn_slot->fd))
		return false;
	r->gone = true;
	req_cut(r, "client-abort");
	log_debug("server", "id=%s the client left in the middle of its body", r->id);
	return true;
}

enum MHD_Result request_access_cb(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **req_cls)
{
	struct worker *w = cls;
	struct req *r = *req_cls;
	(void)conn;
	(void)url;
	(void)version;
	if (!r || r->magic != REQ_MAGIC || r->gone)
		return MHD_NO;
	if (!r->started) {
		r->started = true;
		if (r->conn_slot) /* its headers are in */
			r->conn_slot->awaiting_since = 0;
		str_copy(r->method, sizeof r->method, method);
		if (atomic_load(&w->gw->open_connections) > w->gw->cfg->max_connections)
			req_fail(r, S3E_SLOW_DOWN, NULL); /* before its path is read */
		else
			authn_request(r);
		if (r->has_err)
			return req_respond_error(r);
		bool cached = cache_wants(r);
		if ((cached || listcache_wants(r)) && (r->barrier = cluster_barrier(w->gw->cluster))) {
			r->barrier_since = clock_mono_s();
			return MHD_YES; /* called again at once: it waits below */
		}
		if (cached) {
			cache_begin(r);
			return MHD_YES;
		}
		if (listcache_begin(r))
			return MHD_YES; /* answered from the LIST cache below */
		if (r->body_check || r->start_verified)
			return MHD_YES; /* upstream once the body is in and checked */
		return pass_or_wait(r, false);
	}
	if (*upload_data_size) {
		size_t used = pass_take_body(r, upload_data, *upload_data_size);
		*upload_data_size -= used;
		if (*upload_data_size)
			req_suspend(r); /* no room: wait for curl to drain */
		else if (left_mid_body(r))
			return MHD_NO; /* closes it, as libmicrohttpd does a client abort */
		return MHD_YES;
	}
	if (r->responded)
		return MHD_YES;
	if (r->barrier) { /* a read (no body) waiting for the read barrier */
		if (barrier_waits(r)) {
			req_suspend(r);
			return MHD_YES;
		}
		if (req_cread(r))
			cache_begin(r); /* answered below */
		else if (!listcache_begin(r))
			return pass_or_wait(r, true);
	}
	if (!r->client_body_done)
		pass_finish_body(r);
	if (cache_active(r) && cache_passes(r)) {
		/* The object turned out not cacheable (no usable ETag, SSE-C),
		 * or it asks for a part whose bytes are not known yet: the
		 * pass-through serves this request as it would any other. */
		cache_end(r);
		return pass_or_wait(r, true);
	}
	if (cache_active(r))
		return cache_respond(r);
	if (req_upstream_waits(r)) /* a pass-through woken, or its wait is over */
		return pass_or_wait(r, true);
	if (listcache_hit(r) && !r->has_err)
		return listcache_respond(r);
	if (r->has_err)
		return req_respond_error(r);
	/* An answer with no body is whole once queued: a write's waits (passthrough.c). */
	if (r->uhdrs_done && !(pass_response_size(r) == 0 && pass_end_waits(r)))
		return pass_respond(r);
	if (r->udone && !r->uhdrs_done) {
		req_fail(r, S3E_SERVICE_UNAVAILABLE, NULL);
		return req_respond_error(r);
	}
	req_suspend(r);
	return MHD_YES;
}

/* The access log's error for how libmicrohttpd ended a request. */
static const char *toe_str(enum MHD_RequestTerminationCode toe)
{
	switch (toe) {
	case MHD_REQUEST_TERMINATED_COMPLETED_OK: return NULL;
	case MHD_REQUEST_TERMINATED_WITH_ERROR: return "send-error"; /* larder's cuts: r->cut */
	case MHD_REQUEST_TERMINATED_TIMEOUT_REACHED: return "client-timeout";
	case MHD_REQUEST_TERMINATED_CLIENT_ABORT: return "client-abort";
	case MHD_REQUEST_TERMINATED_READ_ERROR: return "client-read-error";
	case MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN: return "shutdown";
	default: return "error";
	}
}

/* A request's access-log line and its count in the metrics: when its
 * client's connection is done with it, or for a write that outlived its
 * client (pass_outlives), when S3 answered it, with S3's status. copy: a
 * CopyObject or UploadPartCopy. */
static void account_request(struct req *r, const char *err, bool copy)
{
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
		.cache = cache_active(r) ? cache_outcome(r)
		       : r->bypass_logged ? "bypass" : listcache_hit(r) ? "hit" : NULL,
	};
	log_access(&rec);
	/* A key's row counts what was signed with its secret, the anonymous
	 * row (NULL) what was unsigned, and the rest is a row of its own: a
	 * key id that names no key, a wrong signature (which anyone who knows
	 * a key id can send), refused before its signature was read. */
	const char *client = r->key_verified ? rec.key_id
	                     : r->anonymous ? NULL : METRICS_UNAUTHENTICATED;
	int target = r->s3_parsed ? (int)r->s3.target : -1; /* -1: Other */
	if (r->from_peer) /* a node fetching for its client: not a client request */
		metrics_peer_served(rec.key_id + strlen("peer:"), rec.cache, rec.bytes_out);
	else
		metrics_request(s3_operation(r->method, target, r->query, copy), rec.status,
		                r->authorized ? rec.bucket : NULL, client,
		                listcache_hit(r) ? NULL : rec.cache, /* object reads only */
		                rec.bytes_out, rec.bytes_in);
}

void request_completed_cb(void *cls, struct MHD_Connection *conn, void **req_cls,
                          enum MHD_RequestTerminationCode toe)
{
	struct worker *w = cls;
	struct req *r = *req_cls;
	(void)conn;
	if (!r || r->magic != REQ_MAGIC)
		return;
	*req_cls = NULL;
	if (r->conn_slot && r->conn_slot->pending == r) {
		r->conn_slot->pending = NULL;
		r->conn_slot->awaiting_since = clock_mono_s(); /* the next request's headers */
	}
	bool outlives = outlives_client(r, conn);
	r->conn_slot = NULL;
	r->conn = NULL;
	r->suspended = false;
	ev_io_stop(r->w->loop, &r->gone_watch);
	if (!outlives)
		pass_stop(r); /* the client is gone or done: nothing more to fetch */
	if (r->started && !r->orphan) { /* an orphaned write's at its end (req_unref) */
		const char *err = r->has_err ? s3err_code(r->err) : r->cut ? r->cut : toe_str(toe);
		if (!err && r->udone && r->uresult != CURLE_OK && r->uresult != CURLE_ABORTED_BY_CALLBACK)
			err = "upstream-error";
		account_request(r, err, conn && MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
		                                                            "x-amz-copy-source"));
	}
	cache_end(r);
	if (!r->orphan) { /* an orphaned write stays live until it ends (req_unref) */
		list_unlink(&w->live, &r->link);
		w->n_live--;
	}
	req_unref(r);
}

unsigned request_count_started(const struct worker *w)
{
	unsigned n = 0;
	for (const struct list_node *l = w->live.first; l; l = l->next)
		n += list_item(l, struct req, link)->started;
	return n;
}

void request_abort_all(struct worker *w)
{
	for (struct list_node *n = w->live.first, *next; n; n = next) {
		next = n->next;
		struct req *r = list_item(n, struct req, link);
		req_ref(r); /* an orphaned write's last other reference is its transfer's */
		pass_stop(r);
		req_wake(r);
		req_unref(r);
	}
}

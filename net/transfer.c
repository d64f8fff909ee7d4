/*
 * transfer.c - one HTTP exchange run by curl (see transfer.h).
 */
#include "net/transfer.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/splitmix.h"
#include "net/curlev.h"

void transfer_init(struct transfer *t, const struct transfer_ops *ops, void *owner,
                   struct curlev *ev, const struct transfer_retry *retry)
{
	memset(t, 0, sizeof *t);
	t->magic = TRANSFER_MAGIC;
	t->ops = ops;
	t->owner = owner;
	t->ev = ev;
	if (retry)
		t->retry = *retry;
	hdrs_init(&t->resp);
}

/* Request headers may hold a token (a session token, a metadata
 * service's): wiped before they are freed. */
static void free_headers(struct curl_slist *list)
{
	for (struct curl_slist *s = list; s; s = s->next)
		explicit_bzero(s->data, strlen(s->data));
	curl_slist_free_all(list);
}

void transfer_fini(struct transfer *t)
{
	if (t->magic != TRANSFER_MAGIC)
		return; /* never initialised (a zeroed owner) */
	transfer_stop(t);
	if (t->easy)
		curl_easy_cleanup(t->easy);
	free_headers(t->headers);
	hdrs_fini(&t->resp);
	t->magic = 0;
}

static size_t on_header(char *data, size_t size, size_t n, void *arg)
{
	struct transfer *t = arg;
	size_t len = size * n;
	assert(t->magic == TRANSFER_MAGIC);
	if (len >= 5 && strncmp(data, "HTTP/", 5) == 0) {
		/* A new status line (after a 1xx, or a redirect curl follows):
		 * start over. */
		hdrs_fini(&t->resp);
		t->resp_bytes = 0;
		t->hdrs_done = false;
		const char *sp = memchr(data, ' ', len);
		t->status = sp ? strtol(sp + 1, NULL, 10) : 0;
		return len;
	}
	if (len <= 2 && (len == 0 || data[0] == '\r' || data[0] == '\n')) {
		if (t->status < 200)
			return len; /* the end of an interim response */
		t->hdrs_done = true;
		if (t->ops->headers && t->ops->headers(t, t->owner) == TRANSFER_RESEND) {
			t->resend = true;
			t->drain_since = clock_mono_s();
		}
		return len;
	}
	t->resp_bytes += len;
	if (t->resp_bytes > TRANSFER_HEADERS_MAX)
		return 0;
	return hdrs_add_line(&t->resp, data, len) == 0 ? len : 0;
}

static size_t on_body(char *data, size_t size, size_t n, void *arg)
{
	struct transfer *t = arg;
	size_t len = size * n;
	assert(t->magic == TRANSFER_MAGIC);
	if (t->resend) { /* an answer nobody reads (the wrong region's error) */
		t->drained += len; /* its time bound: on_progress, called after this */
		return t->drained <= TRANSFER_DRAIN_MAX ? len : 0;
	}
	if (!t->ops->body)
		return len;
	size_t rc = t->ops->body(t, t->owner, data, len);
	if (rc == CURL_WRITEFUNC_PAUSE)
		t->write_paused = true;
	return rc;
}

/* curl calls this with every piece of body and, with a low-speed limit
 * set, at least once a second: a drained answer that trickles, or stalls,
 * is cut at its time bound here (on_body sees only the bytes that come),
 * and sent again (transfer_finished, transfer_perform). */
static int on_progress(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow)
{
	struct transfer *t = arg;
	(void)dltotal;
	(void)dlnow;
	(void)ultotal;
	(void)ulnow;
	assert(t->magic == TRANSFER_MAGIC);
	if (t->resend && clock_mono_s() - t->drain_since > TRANSFER_DRAIN_WAIT_S)
		return 1;
	return t->ops->progress ? t->ops->progress(t, t->owner) : 0;
}

static size_t on_read(char *out, size_t size, size_t n, void *arg)
{
	struct transfer *t = arg;
	assert(t->magic == TRANSFER_MAGIC);
	size_t rc = t->ops->read(t, t->owner, out, size * n);
	if (rc == CURL_READFUNC_PAUSE)
		t->read_paused = true;
	return rc;
}

int transfer_prepare(struct transfer *t, const char *url, struct curl_slist *headers)
{
	if (t->easy) {
		curl_easy_reset(t->easy);
	} else if (!(t->easy = curl_easy_init())) {
		free_headers(headers);
		return -ENOMEM;
	}
	free_headers(t->headers); /* the reset handle no longer points at them */
	t->headers = headers;
	CURL *e = t->easy;
	curl_easy_setopt(e, CURLOPT_URL, url);
	curl_easy_setopt(e, CURLOPT_PRIVATE, t);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, headers);
	curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(e, CURLOPT_HEADERDATA, t);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, t);
	curl_easy_setopt(e, CURLOPT_XFERINFOFUNCTION, on_progress);
	curl_easy_setopt(e, CURLOPT_XFERINFODATA, t);
	curl_easy_setopt(e, CURLOPT_NOPROGRESS, 0L);
	if (t->ops->read) {
		curl_easy_setopt(e, CURLOPT_READFUNCTION, on_read);
		curl_easy_setopt(e, CURLOPT_READDATA, t);
	}
	curl_easy_setopt(e, CURLOPT_ERRORBUFFER, t->err);
	return 0;
}

/* A new exchange: nothing of the previous answer is left. */
static void reset_response(struct transfer *t)
{
	t->status = 0;
	hdrs_fini(&t->resp);
	t->resp_bytes = 0;
	t->drained = 0;
	t->drain_since = 0;
	t->hdrs_done = false;
	t->resend = false;
	t->read_paused = t->write_paused = false;
	t->err[0] = '\0';
}

int transfer_submit(struct transfer *t)
{
	assert(t->ev && t->easy && !t->running);
	reset_response(t);
	if (curlev_add(t->ev, t->easy) != 0)
		return -EIO;
	t->running = true;
	return 0;
}

void transfer_stop(struct transfer *t)
{
	if (t->ev && ev_is_active(&t->retry_timer))
		ev_timer_stop(curlev_loop(t->ev), &t->retry_timer);
	if (t->ev)
		curlev_unqueue(t->ev, t);
	if (t->running)
		curlev_remove(t->ev, t->easy);
	t->running = false;
}

/* Gives up: the owner hears of it as a transfer that could not start. */
static void failed_to_start(struct transfer *t)
{
	t->last_result = CURLE_FAILED_INIT;
	t->ops->done(t, t->owner, CURLE_FAILED_INIT);
}

static void retry_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct transfer *t = w->data;
	(void)loop;
	(void)revents;
	assert(t->magic == TRANSFER_MAGIC);
	if (t->ops->restart(t, t->owner) != 0)
		failed_to_start(t);
}

/* Failures that the same request would meet again at once: the upstream's
 * certificate (or the CA file, or the URL) is wrong until someone fixes it.
 * Retrying them only delays the client's error. */
static bool retry_helps(CURLcode r)
{
	switch (r) {
	case CURLE_FAILED_INIT:
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_CACERT_BADFILE:
	case CURLE_SSL_CERTPROBLEM:
	case CURLE_SSL_CRL_BADFILE:
	case CURLE_SSL_ISSUER_ERROR:
	case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
	case CURLE_URL_MALFORMAT:
	case CURLE_UNSUPPORTED_PROTOCOL:
		return false;
	default:
		return true;
	}
}

void transfer_restart_in(struct transfer *t, double delay)
{
	assert(t->ev);
	ev_timer_init(&t->retry_timer, retry_cb, delay, 0.);
	t->retry_timer.data = t;
	ev_timer_start(curlev_loop(t->ev), &t->retry_timer);
}

double transfer_retry_later(struct transfer *t)
{
	if (!t->ev || t->retries >= t->retry.max || !retry_helps(t->last_result))
		return -1.0;
	double base = t->retry.base_s;
	for (unsigned i = 0; i < t->retries && base < t->retry.cap_s; i++)
		base *= 2;
	if (base > t->retry.cap_s)
		base = t->retry.cap_s;
	/* Jitter in [0.5, 1) of the delay, so retries of many transfers that
	 * failed together spread out; per thread, no lock. */
	static __thread __attribute__((tls_model("initial-exec"))) uint64_t jitter;
	if (!jitter)
		jitter = (uint64_t)(uintptr_t)&jitter ^ (uint64_t)(clock_mono_s() * 1e9);
	double u = (double)(splitmix_next(&jitter) >> 11) / (double)(UINT64_C(1) << 53);
	double delay = base * (0.5 + 0.5 * u);
	t->retries++;
	transfer_restart_in(t, delay);
	return delay;
}

void transfer_unpause(struct transfer *t)
{
	if (t->running && t->ev)
		curlev_queue_unpause(t->ev, t);
}

void transfer_resume(struct transfer *t)
{
	if (t->running && (t->read_paused || t->write_paused)) {
		t->read_paused = t->write_paused = false;
		curl_easy_pause(t->easy, CURLPAUSE_CONT);
	}
}

/* libcurl ends an answer whose connection closed inside its headers as if
 * the headers had ended there, and with no length the (empty) body too:
 * CURLE_OK. That is no answer, whatever its status line said. */
static CURLcode checked(const struct transfer *t, CURLcode result)
{
	return result == CURLE_OK && t->status >= 200 && !t->hdrs_done ? CURLE_RECV_ERROR : result;
}

void transfer_finished(struct transfer *t, CURLcode result)
{
	assert(t->magic == TRANSFER_MAGIC);
	t->running = false;
	curlev_unqueue(t->ev, t);
	result = checked(t, result);
	t->last_result = result;
	if (t->resend) { /* drained to its end, or cut at a bound: sent again alike */
		t->resend = false;
		t->resends++;
		if (t->ops->restart(t, t->owner) == 0)
			return;
		/* Not sent again: the owner sees the answer that asked for it. */
	}
	t->ops->done(t, t->owner, result); /* t may be gone after this */
}

CURLcode transfer_perform(struct transfer *t)
{
	for (;;) {
		reset_response(t);
		CURLcode rc = checked(t, curl_easy_perform(t->easy));
		t->last_result = rc;
		if (!t->resend)
			return rc;
		t->resend = false;
		t->resends++;
		/* restart builds the request again; on a blocking transfer it
		 * only prepares (there is no loop to submit to). */
		if (t->ops->restart(t, t->owner) != 0)
			return CURLE_FAILED_INIT;
	}
}

const char *transfer_header(const struct transfer *t, const char *name)
{
	return hdrs_get(&t->resp, name);
}

const char *transfer_strerror(const struct transfer *t, CURLcode result)
{
	return t->err[0] ? t->err : curl_easy_strerror(result);
}

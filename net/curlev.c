/*
 * curlev.c - libcurl's multi-socket API on libev: curl asks to watch a
 * socket (socket_cb) or to be called after a delay (timer_cb); we turn
 * those into ev_io and ev_timer watchers and report readiness back with
 * curl_multi_socket_action. Same shape as curl's evhiperfifo example.
 */
#include "net/curlev.h"

#include <assert.h>
#include <stdlib.h>

#include "base/log.h"
#include "net/transfer.h"

#define CURLEV_MAGIC 0x63757276u
#define SOCKWATCH_MAGIC 0x736f636bu /* "sock" */

struct curlev {
	unsigned magic;
	struct ev_loop *loop;
	CURLM *multi;
	ev_timer timer;
	curlev_observe_cb observe;
	void *observe_arg;
	struct transfer *pending;  /* transfers to unpause (transfer.pending_next) */
};

struct sockwatch {
	ev_io io;                  /* first: io_cb casts the watcher back */
	unsigned magic;
	struct curlev *c;
	curl_socket_t fd;
};

static void check_done(struct curlev *c)
{
	CURLMsg *m;
	int left;
	while ((m = curl_multi_info_read(c->multi, &left)) != NULL) {
		if (m->msg != CURLMSG_DONE)
			continue;
		CURL *easy = m->easy_handle;
		CURLcode rc = m->data.result;
		curl_multi_remove_handle(c->multi, easy);
		struct transfer *t = NULL;
		curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&t);
		assert(t && t->magic == TRANSFER_MAGIC && t->easy == easy);
		if (c->observe)
			c->observe(t, rc, c->observe_arg);
		transfer_finished(t, rc);
	}
}

static void io_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct sockwatch *s = (struct sockwatch *)w;
	assert(s->magic == SOCKWATCH_MAGIC);
	struct curlev *c = s->c;
	assert(c->magic == CURLEV_MAGIC);
	int action = ((revents & EV_READ) ? CURL_CSELECT_IN : 0) |
	             ((revents & EV_WRITE) ? CURL_CSELECT_OUT : 0);
	int still;
	curl_multi_socket_action(c->multi, s->fd, action, &still);
	check_done(c);
	(void)loop;
}

static void timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct curlev *c = w->data;
	assert(c->magic == CURLEV_MAGIC);
	int still;
	curl_multi_socket_action(c->multi, CURL_SOCKET_TIMEOUT, 0, &still);
	check_done(c);
	(void)loop;
	(void)revents;
}

/* CURLMOPT_TIMERFUNCTION: -1 deletes the timer; 0 means "call me now",
 * which we still do from the loop, never from inside curl. */
static int multi_timer_cb(CURLM *multi, long timeout_ms, void *arg)
{
	struct curlev *c = arg;
	assert(c->magic == CURLEV_MAGIC);
	ev_timer_stop(c->loop, &c->timer);
	if (timeout_ms >= 0) {
		ev_timer_set(&c->timer, (double)timeout_ms / 1000.0, 0.);
		ev_timer_start(c->loop, &c->timer);
	}
	(void)multi;
	return 0;
}

/* CURLMOPT_SOCKETFUNCTION */
static int multi_sock_cb(CURL *easy, curl_socket_t fd, int what, void *arg, void *sockp)
{
	struct curlev *c = arg;
	struct sockwatch *s = sockp;
	assert(c->magic == CURLEV_MAGIC && (!s || s->magic == SOCKWATCH_MAGIC));
	if (what == CURL_POLL_REMOVE) {
		if (s) {
			ev_io_stop(c->loop, &s->io);
			s->magic = 0;
			free(s);
			curl_multi_assign(c->multi, fd, NULL);
		}
		return 0;
	}
	int events = ((what & CURL_POLL_IN) ? EV_READ : 0) | ((what & CURL_POLL_OUT) ? EV_WRITE : 0);
	if (!s) {
		s = calloc(1, sizeof *s);
		if (!s)
			return -1;
		s->magic = SOCKWATCH_MAGIC;
		s->c = c;
		s->fd = fd;
		curl_multi_assign(c->multi, fd, s);
	} else {
		ev_io_stop(c->loop, &s->io);
	}
	ev_io_init(&s->io, io_cb, fd, events);
	ev_io_start(c->loop, &s->io);
	(void)easy;
	return 0;
}

struct curlev *curlev_create(struct ev_loop *loop, curlev_observe_cb observe, void *arg)
{
	struct curlev *c = calloc(1, sizeof *c);
	if (!c)
		return NULL;
	c->magic = CURLEV_MAGIC;
	c->loop = loop;
	c->observe = observe;
	c->observe_arg = arg;
	c->multi = curl_multi_init();
	if (!c->multi) {
		free(c);
		return NULL;
	}
	ev_init(&c->timer, timer_cb);
	c->timer.data = c;
	curl_multi_setopt(c->multi, CURLMOPT_SOCKETFUNCTION, multi_sock_cb);
	curl_multi_setopt(c->multi, CURLMOPT_SOCKETDATA, c);
	curl_multi_setopt(c->multi, CURLMOPT_TIMERFUNCTION, multi_timer_cb);
	curl_multi_setopt(c->multi, CURLMOPT_TIMERDATA, c);
	/* Keep idle upstream connections for reuse: S3's time to first byte
	 * is the cost larder exists to hide, a new TLS handshake adds to it. */
	curl_multi_setopt(c->multi, CURLMOPT_MAXCONNECTS, 256L);
	return c;
}

void curlev_destroy(struct curlev *c)
{
	if (!c)
		return;
	ev_timer_stop(c->loop, &c->timer);
	curl_multi_cleanup(c->multi);
	c->magic = 0;
	free(c);
}

int curlev_add(struct curlev *c, CURL *easy)
{
	CURLMcode rc = curl_multi_add_handle(c->multi, easy);
	if (rc != CURLM_OK) {
		log_error("upstream", "curl_multi_add_handle() failed: %s", curl_multi_strerror(rc));
		return -1;
	}
	return 0;
}

void curlev_remove(struct curlev *c, CURL *easy)
{
	if (curl_multi_remove_handle(c->multi, easy) != CURLM_OK)
		return;
	/* Stopped by its owner: it was sent all the same (S3 counts it), so
	 * the observer sees it end too, as one larder broke off. */
	struct transfer *t = NULL;
	curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&t);
	if (c->observe && t && t->magic == TRANSFER_MAGIC)
		c->observe(t, CURLE_ABORTED_BY_CALLBACK, c->observe_arg);
}

struct ev_loop *curlev_loop(const struct curlev *c)
{
	return c->loop;
}

void curlev_queue_unpause(struct curlev *c, struct transfer *t)
{
	if (t->pending)
		return;
	t->pending = true;
	t->pending_next = c->pending;
	c->pending = t;
}

void curlev_unqueue(struct curlev *c, struct transfer *t)
{
	if (!t->pending)
		return;
	for (struct transfer **p = &c->pending; *p; p = &(*p)->pending_next)
		if (*p == t) {
			*p = t->pending_next;
			break;
		}
	t->pending = false;
}

void curlev_run_pending(struct curlev *c)
{
	while (c->pending) {
		struct transfer *t = c->pending;
		c->pending = t->pending_next;
		t->pending = false;
		transfer_resume(t);
	}
}

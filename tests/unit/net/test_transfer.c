/*
 * test_transfer.c - the transfer engine (net/transfer.h, net/curlev.h)
 * against a scripted HTTP server on 127.0.0.1: each connection reads one
 * request and gets the next canned answer, then is closed (or, held, left
 * open with its answer unfinished until the server stops).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/clock.h"
#include "net/curlev.h"
#include "net/transfer.h"

/* ---- the scripted server ------------------------------------------------ */

#define MAX_ANSWERS 4

struct server {
	int fd;
	unsigned short port;
	pthread_t thread;
	const char *answers[MAX_ANSWERS];
	bool hold[MAX_ANSWERS];      /* left open after its bytes: a body that stalls */
	int held[MAX_ANSWERS];       /* their connections, closed by server_stop */
	unsigned n_answers;
	unsigned served;             /* read it after server_stop (the client can be done first) */
};

static void *serve(void *arg)
{
	struct server *s = arg;
	for (unsigned i = 0; i < s->n_answers; i++) {
		int c = accept(s->fd, NULL, NULL);
		if (c < 0)
			break;
		char req[8192];
		size_t got = 0;
		while (got < sizeof req - 1) { /* the request head: enough for these tests */
			ssize_t n = read(c, req + got, sizeof req - 1 - got);
			if (n <= 0)
				break;
			got += (size_t)n;
			req[got] = '\0';
			if (strstr(req, "\r\n\r\n"))
				break;
		}
		const char *a = s->answers[i];
		size_t left = strlen(a);
		while (left) {
			ssize_t n = send(c, a, left, MSG_NOSIGNAL); /* curl may hang up first */
			if (n <= 0)
				break;
			a += n;
			left -= (size_t)n;
		}
		s->served++;
		if (s->hold[i])
			s->held[i] = c;
		else
			close(c);
	}
	return NULL;
}

static void server_start(struct server *s)
{
	s->fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(s->fd >= 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	assert_int_equal(bind(s->fd, (struct sockaddr *)&a, sizeof a), 0);
	socklen_t len = sizeof a;
	assert_int_equal(getsockname(s->fd, (struct sockaddr *)&a, &len), 0);
	s->port = ntohs(a.sin_port);
	assert_int_equal(listen(s->fd, 8), 0);
	for (unsigned i = 0; i < MAX_ANSWERS; i++)
		s->held[i] = -1;
	assert_int_equal(pthread_create(&s->thread, NULL, serve, s), 0);
}

static void server_stop(struct server *s)
{
	shutdown(s->fd, SHUT_RDWR);
	pthread_join(s->thread, NULL);
	close(s->fd);
	for (unsigned i = 0; i < MAX_ANSWERS; i++)
		if (s->held[i] >= 0)
			close(s->held[i]);
}

/* ---- an owner ------------------------------------------------------------- */

struct owner {
	struct transfer t;
	struct server *srv;
	char body[256];
	size_t body_len;
	unsigned headers_seen, done_calls, restarts, progress_calls;
	CURLcode result;
	long status;                 /* as done saw them */
	unsigned retries;
	bool resend_on_400;
	bool retry_5xx;
	bool on_loop;
	bool stop_in_progress;       /* its progress hook ends the transfer */
};

static int owner_prepare(struct owner *o)
{
	char url[64];
	snprintf(url, sizeof url, "http://127.0.0.1:%u/x", o->srv->port);
	struct curl_slist *h = curl_slist_append(NULL, "X-Test: 1");
	int rc = transfer_prepare(&o->t, url, h);
	if (rc == 0) {
		curl_easy_setopt(o->t.easy, CURLOPT_NOSIGNAL, 1L);
		/* As upstream_curl_defaults: curl then looks at a transfer that
		 * gets no byte at least once a second. */
		curl_easy_setopt(o->t.easy, CURLOPT_LOW_SPEED_LIMIT, 1L);
		curl_easy_setopt(o->t.easy, CURLOPT_LOW_SPEED_TIME, 30L);
	}
	return rc;
}

static enum transfer_verdict on_headers(struct transfer *t, void *arg)
{
	struct owner *o = arg;
	o->headers_seen++;
	return o->resend_on_400 && t->status == 400 ? TRANSFER_RESEND : TRANSFER_GO;
}

static size_t on_body(struct transfer *t, void *arg, const char *data, size_t len)
{
	struct owner *o = arg;
	(void)t;
	if (o->body_len + len > sizeof o->body)
		return 0;
	memcpy(o->body + o->body_len, data, len);
	o->body_len += len;
	return len;
}

static int on_progress(struct transfer *t, void *arg)
{
	struct owner *o = arg;
	(void)t;
	o->progress_calls++;
	return o->stop_in_progress ? 1 : 0;
}

static int on_restart(struct transfer *t, void *arg)
{
	struct owner *o = arg;
	(void)t;
	o->restarts++;
	o->body_len = 0;
	int rc = owner_prepare(o);
	if (rc == 0 && o->on_loop)
		rc = transfer_submit(&o->t);
	return rc;
}

static void on_done(struct transfer *t, void *arg, CURLcode result)
{
	struct owner *o = arg;
	if (o->retry_5xx && result == CURLE_OK && t->status >= 500 && transfer_retry_later(t) >= 0)
		return;
	o->done_calls++;
	o->result = result;
	o->status = t->status;
	o->retries = t->retries;
}

static const struct transfer_ops ops = {
	.headers = on_headers,
	.body = on_body,
	.progress = on_progress,
	.restart = on_restart,
	.done = on_done,
};

/* ---- tests ------------------------------------------------------------------ */

static void test_perform_parses_status_and_headers(void **state)
{
	(void)state;
	struct server srv = {
		.answers = { "HTTP/1.1 100 Continue\r\n\r\n"
		             "HTTP/1.1 200 OK\r\nX-A: one\r\nContent-Length: 5\r\n\r\nhello" },
		.n_answers = 1,
	};
	server_start(&srv);
	struct owner o = { .srv = &srv };
	transfer_init(&o.t, &ops, &o, NULL, NULL);
	assert_int_equal(owner_prepare(&o), 0);
	assert_int_equal(transfer_perform(&o.t), CURLE_OK);
	assert_int_equal(o.t.status, 200);
	assert_true(o.t.hdrs_done);
	assert_string_equal(transfer_header(&o.t, "x-a"), "one");
	assert_int_equal(o.headers_seen, 1); /* not for the interim 100 */
	assert_int_equal(o.body_len, 5);
	assert_memory_equal(o.body, "hello", 5);
	assert_int_equal(o.done_calls, 0); /* perform returns instead */
	transfer_fini(&o.t);
	server_stop(&srv);
}

static void test_resend_drains_the_first_answer(void **state)
{
	(void)state;
	struct server srv = {
		.answers = { "HTTP/1.1 400 Bad Request\r\nContent-Length: 5\r\n\r\nwrong",
		             "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nright" },
		.n_answers = 2,
	};
	server_start(&srv);
	struct owner o = { .srv = &srv, .resend_on_400 = true };
	transfer_init(&o.t, &ops, &o, NULL, NULL);
	assert_int_equal(owner_prepare(&o), 0);
	assert_int_equal(transfer_perform(&o.t), CURLE_OK);
	assert_int_equal(o.t.status, 200);
	assert_int_equal(o.t.resends, 1);
	assert_int_equal(o.restarts, 1);
	assert_int_equal(o.body_len, 5);
	assert_memory_equal(o.body, "right", 5);
	transfer_fini(&o.t);
	server_stop(&srv);
}

static void test_oversized_head_fails(void **state)
{
	(void)state;
	static char big[TRANSFER_HEADERS_MAX + 4096];
	int n = snprintf(big, sizeof big, "HTTP/1.1 200 OK\r\n");
	while ((size_t)n < sizeof big - 200)
		n += snprintf(big + n, sizeof big - (size_t)n, "X-Pad: %0100d\r\n", 0);
	snprintf(big + n, sizeof big - (size_t)n, "Content-Length: 0\r\n\r\n");
	struct server srv = { .answers = { big }, .n_answers = 1 };
	server_start(&srv);
	struct owner o = { .srv = &srv };
	transfer_init(&o.t, &ops, &o, NULL, NULL);
	assert_int_equal(owner_prepare(&o), 0);
	assert_int_not_equal(transfer_perform(&o.t), CURLE_OK);
	assert_false(o.t.hdrs_done);
	transfer_fini(&o.t);
	server_stop(&srv);
}

struct observed {
	unsigned exchanges;
	long statuses[4];
};

static void observe(const struct transfer *t, CURLcode result, void *arg)
{
	struct observed *ob = arg;
	(void)result;
	if (ob->exchanges < 4)
		ob->statuses[ob->exchanges] = t->status;
	ob->exchanges++;
}

/* Runs o's transfer to its end on a loop of its own, under policy. */
static void run_on_loop(struct owner *o, const struct transfer_retry *policy,
                        curlev_observe_cb observe_cb, void *observe_arg)
{
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct curlev *ev = curlev_create(loop, observe_cb, observe_arg);
	assert_non_null(ev);
	o->retry_5xx = o->on_loop = true;
	transfer_init(&o->t, &ops, o, ev, policy);
	assert_int_equal(owner_prepare(o), 0);
	assert_int_equal(transfer_submit(&o->t), 0);
	for (int i = 0; i < 500 && !o->done_calls; i++)
		ev_run(loop, EVRUN_ONCE);
	assert_int_equal(o->done_calls, 1);
	assert_false(o->t.running);
	transfer_fini(&o->t);
	curlev_destroy(ev);
	ev_loop_destroy(loop);
}

static void test_loop_retries_with_backoff_and_observes_each(void **state)
{
	(void)state;
	struct server srv = {
		.answers = { "HTTP/1.1 503 Slow Down\r\nContent-Length: 0\r\n\r\n",
		             "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok" },
		.n_answers = 2,
	};
	server_start(&srv);
	struct observed ob = { 0 };
	struct owner o = { .srv = &srv };
	struct transfer_retry policy = { .max = 2, .base_s = 0.01, .cap_s = 0.02 };
	run_on_loop(&o, &policy, observe, &ob);
	assert_int_equal(o.result, CURLE_OK);
	assert_int_equal(o.status, 200);
	assert_int_equal(o.retries, 1);
	assert_int_equal(ob.exchanges, 2);
	assert_int_equal(ob.statuses[0], 503);
	assert_int_equal(ob.statuses[1], 200);
	server_stop(&srv);
}

static void test_retries_are_bounded(void **state)
{
	(void)state;
	struct server srv = {
		.answers = { "HTTP/1.1 500 Oops\r\nContent-Length: 0\r\n\r\n",
		             "HTTP/1.1 500 Oops\r\nContent-Length: 0\r\n\r\n" },
		.n_answers = 2,
	};
	server_start(&srv);
	struct owner o = { .srv = &srv };
	struct transfer_retry policy = { .max = 1, .base_s = 0.01, .cap_s = 0.01 };
	run_on_loop(&o, &policy, NULL, NULL);
	assert_int_equal(o.status, 500); /* the policy's one retry, then the owner hears */
	assert_int_equal(o.retries, 1);
	server_stop(&srv);
	assert_int_equal(srv.served, 2);
}

/* The wrong region's answer whose body stops coming (held open, most of
 * its Content-Length unsent): the drain ends at its time bound, not at
 * curl's stall rule (30 s here), and the request goes again. */
#define STALLED_400 "HTTP/1.1 400 Bad Request\r\nContent-Length: 1000\r\n\r\nwrong"
#define RIGHT_200 "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nright"

/* A server that holds its first answer (STALLED_400) open, then answers
 * RIGHT_200. */
static void start_stalled_then_right(struct server *srv)
{
	*srv = (struct server){
		.answers = { STALLED_400, RIGHT_200 },
		.hold = { true, false },
		.n_answers = 2,
	};
	server_start(srv);
}

static void assert_resent_after_the_drain_bound(struct owner *o, double took)
{
	assert_int_equal(o->t.status, 200);
	assert_int_equal(o->t.resends, 1);
	assert_int_equal(o->restarts, 1);
	assert_int_equal(o->body_len, 5);
	assert_memory_equal(o->body, "right", 5);
	assert_true(took >= TRANSFER_DRAIN_WAIT_S);
	assert_true(took < TRANSFER_DRAIN_WAIT_S + 3.0);
}

static void test_perform_drain_has_a_time_bound(void **state)
{
	(void)state;
	struct server srv;
	start_stalled_then_right(&srv);
	struct owner o = { .srv = &srv, .resend_on_400 = true };
	transfer_init(&o.t, &ops, &o, NULL, NULL);
	assert_int_equal(owner_prepare(&o), 0);
	double began = clock_mono_s();
	assert_int_equal(transfer_perform(&o.t), CURLE_OK);
	assert_resent_after_the_drain_bound(&o, clock_mono_s() - began);
	transfer_fini(&o.t);
	server_stop(&srv);
}

static void test_loop_drain_has_a_time_bound(void **state)
{
	(void)state;
	struct server srv;
	start_stalled_then_right(&srv);
	struct observed ob = { 0 };
	struct owner o = { .srv = &srv, .resend_on_400 = true };
	double began = clock_mono_s();
	run_on_loop(&o, NULL, observe, &ob);
	assert_int_equal(o.result, CURLE_OK);
	assert_resent_after_the_drain_bound(&o, clock_mono_s() - began);
	assert_int_equal(ob.exchanges, 2); /* the cut one counted too */
	assert_int_equal(ob.statuses[0], 400);
	server_stop(&srv);
}

static void test_owner_progress_hook_is_called_and_can_stop(void **state)
{
	(void)state;
	struct server srv = {
		.answers = { "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\nsome" },
		.hold = { true },
		.n_answers = 1,
	};
	server_start(&srv);
	struct owner o = { .srv = &srv, .stop_in_progress = true };
	transfer_init(&o.t, &ops, &o, NULL, NULL);
	assert_int_equal(owner_prepare(&o), 0);
	assert_int_equal(transfer_perform(&o.t), CURLE_ABORTED_BY_CALLBACK);
	assert_true(o.progress_calls >= 1);
	transfer_fini(&o.t);
	server_stop(&srv);
}

int main(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_perform_parses_status_and_headers),
		cmocka_unit_test(test_resend_drains_the_first_answer),
		cmocka_unit_test(test_oversized_head_fails),
		cmocka_unit_test(test_loop_retries_with_backoff_and_observes_each),
		cmocka_unit_test(test_retries_are_bounded),
		cmocka_unit_test(test_perform_drain_has_a_time_bound),
		cmocka_unit_test(test_loop_drain_has_a_time_bound),
		cmocka_unit_test(test_owner_progress_hook_is_called_and_can_stop),
	};
	int rc = cmocka_run_group_tests(tests, NULL, NULL);
	curl_global_cleanup();
	return rc;
}

/*
 * transfer.h - one HTTP exchange with a server, run by curl: on a worker's
 * loop (net/curlev.h) or blocking on the caller's thread (transfer_perform).
 * It knows nothing of S3: its owner builds the request (the URL, the
 * headers, the method) and plugs in through an ops table.
 *
 * What the engine does once for every owner: the status line and the
 * response headers (interim 1xx answers skipped, a bound on their size),
 * pausing and unpausing either direction, a resend asked for by the
 * headers hook (the response is drained, within a bound of bytes and of
 * time, and the request sent again), and retries with capped exponential
 * backoff under a policy the owner gives. It owns curl's progress callback
 * (CURLOPT_XFERINFOFUNCTION): an owner plugs into it through ops->progress
 * and never sets it itself, or the drain's time bound is lost.
 *
 * Every hook gets the owner as its void *; owners check their magic.
 * All of it runs on one thread: the loop's, or the caller's for perform.
 */
#ifndef LARDER_TRANSFER_H
#define LARDER_TRANSFER_H

#include <curl/curl.h>
#include <ev.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/hdrs.h"

#define TRANSFER_MAGIC 0x78666572u
#define TRANSFER_HEADERS_MAX (64 * 1024) /* a longer response head fails the transfer */
/* The body of an answer a resend replaces (the wrong region's error) is read
 * this far and for this long after its headers, the bounds the gateway
 * gives an error body it reads (gateway/s3err.h); its connection is then
 * kept. One larger, endless, trickled or stalled is cut at either bound and
 * the request is sent again all the same, on a new connection: the answer
 * it replaces said what it had to in its headers. */
#define TRANSFER_DRAIN_MAX (64 * 1024)
#define TRANSFER_DRAIN_WAIT_S 2.0

struct transfer;
struct curlev;

/* What the headers hook wants done with the response whose headers are in. */
enum transfer_verdict {
	TRANSFER_GO,      /* its body goes to the body hook */
	TRANSFER_RESEND,  /* drain it; once it ends, send the request again (ops->restart) */
};

struct transfer_ops {
	/* The final status and headers are in t->status and t->resp. May be NULL. */
	enum transfer_verdict (*headers)(struct transfer *t, void *owner);
	/* Response bytes: returns len, 0 to fail the transfer, or
	 * CURL_WRITEFUNC_PAUSE (unpause with transfer_unpause). May be NULL:
	 * the body is dropped. */
	size_t (*body)(struct transfer *t, void *owner, const char *data, size_t len);
	/* Request body bytes for an upload: returns how many were written to
	 * out, 0 at the end, CURL_READFUNC_PAUSE or CURL_READFUNC_ABORT. */
	size_t (*read)(struct transfer *t, void *owner, char *out, size_t max);
	/* Called as curl's progress callback: with every piece of body, and at
	 * least once a second while a low-speed limit is set (as
	 * upstream_curl_defaults sets one; the drain's time bound counts on
	 * that too). Nonzero ends the transfer (CURLE_ABORTED_BY_CALLBACK).
	 * May be NULL. */
	int (*progress)(struct transfer *t, void *owner);
	/* Builds the request again and submits it (a resend, a retry): 0 or
	 * negative errno, and then the transfer ends with CURLE_FAILED_INIT. */
	int (*restart)(struct transfer *t, void *owner);
	/* The exchange is over, for good: not called for a transfer stopped by
	 * transfer_stop or transfer_fini. The owner may free t in it. */
	void (*done)(struct transfer *t, void *owner, CURLcode result);
};

/* Retries after failures the owner judges transient: the n-th retry waits
 * min(base_s * 2^(n-1), cap_s), drawn from the upper half of that so that
 * many transfers failing together spread out. */
struct transfer_retry {
	unsigned max;     /* retries after the first try */
	double base_s, cap_s;
};

struct transfer {
	unsigned magic;
	const struct transfer_ops *ops;
	void *owner;
	struct curlev *ev;             /* NULL: only transfer_perform */
	struct transfer_retry retry;
	CURL *easy;
	struct curl_slist *headers;    /* the request's, owned */
	bool running;                  /* submitted, not finished */
	bool peer;                     /* to another node of the cluster, not upstream */
	bool read_paused, write_paused;
	bool pending;                  /* queued for unpausing (curlev) */
	struct transfer *pending_next;
	bool resend;                   /* the headers hook asked for it */
	unsigned resends;              /* resends since transfer_init */
	unsigned retries;              /* backoff retries since transfer_init */
	CURLcode last_result;
	ev_timer retry_timer;

	/* The response (the last one, after any resend or retry). */
	long status;                   /* 0 until a status line came */
	struct hdrs resp;
	size_t resp_bytes;
	size_t drained;                /* body bytes of an answer a resend replaces */
	double drain_since;            /* when its headers came (clock_mono_s) */
	bool hdrs_done;                /* the final headers are in */
	char err[CURL_ERROR_SIZE];     /* curl's message for a failure, or "" */
};

void transfer_init(struct transfer *t, const struct transfer_ops *ops, void *owner,
                   struct curlev *ev, const struct transfer_retry *retry);
/* Stops it if running (done is not called) and frees what it holds. */
void transfer_fini(struct transfer *t);

/* Readies the easy handle (created, or reset for another try) for url
 * with these request headers (t takes them, also on failure): the hooks
 * (the progress callback among them), t as CURLOPT_PRIVATE, the error
 * buffer. The caller then sets the method, body and connection options on
 * t->easy, not the progress callback (ops->progress). Returns 0 or -ENOMEM. */
int transfer_prepare(struct transfer *t, const char *url, struct curl_slist *headers);

/* Starts the prepared request on t->ev. Returns 0 or -EIO. */
int transfer_submit(struct transfer *t);

/* Stops a running transfer (or a pending retry); done is not called. */
void transfer_stop(struct transfer *t);

/* Called from the done hook after a transient failure: schedules
 * ops->restart after the policy's delay. Returns the delay in seconds, or
 * a negative number when the retries are spent (or the request could not
 * even be built). */
double transfer_retry_later(struct transfer *t);

/* Called from the done hook: schedules ops->restart after delay seconds,
 * not counted as a retry (the answer was no failure of the request). */
void transfer_restart_in(struct transfer *t, double delay);

/* A hook returned a pause: let curl go on (from the loop, soon). */
void transfer_unpause(struct transfer *t);

/* Runs the prepared request on this thread and returns when it is over;
 * resends asked for by the headers hook happen inside. done is not called. */
CURLcode transfer_perform(struct transfer *t);

/* A response header's value (any case), or NULL. */
const char *transfer_header(const struct transfer *t, const char *name);

/* What went wrong, for a log line. */
const char *transfer_strerror(const struct transfer *t, CURLcode result);

/* For net/curlev.c only. */
void transfer_finished(struct transfer *t, CURLcode result);
void transfer_resume(struct transfer *t);

#endif

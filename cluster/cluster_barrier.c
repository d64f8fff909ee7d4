/*
 * cluster_barrier.c - the read barrier of a node that may not be counted
 * yet by the others (cluster_joining; cluster.h).
 *
 * A write through another node waits only for the acknowledgements of the
 * members it knows. A node whose membership entry has not landed, or
 * landed less than JOIN_HEARTBEATS heartbeats ago, hears the channel but
 * may not be waited for: the write's answer may go out before it applied
 * the invalidation. So a read on such a node first waits until its
 * subscriber has applied every message Redis pushed to it before the read
 * came: the subscriber sends PING on its subscribed connection, Redis
 * queues the answer behind every message it already pushed to that
 * connection, and the subscriber applies messages in order. Once the PONG
 * of a PING sent after a read asked is read, the read may go on.
 *
 * Tickets count up. A PING covers every ticket handed out before it was
 * sent; one PING is in flight at a time (a keepalive PING counts too, as
 * PONGs come back in order and each answers one), and the tickets asked
 * meanwhile share the next. A connection lost loses its PING: the tickets
 * it could not cover are lost (the reads revalidate instead, as the new
 * subscription resyncs anyway).
 */
#include "cluster/cluster_internal.h"

#include <errno.h>
#include <unistd.h>

#include "base/clock.h"

/* ---- the bookkeeping (no lock, no I/O) ---- */

bool cl_bar_ask(struct read_barrier *b, uint64_t *ticket)
{
	*ticket = ++b->asked;
	if (b->in_flight || b->woken)
		return false; /* the PONG, or the wake already sent, leads to its PING */
	b->woken = true;
	return true;
}

bool cl_bar_ping(struct read_barrier *b, bool keepalive)
{
	if (b->in_flight || (!keepalive && b->asked <= b->done))
		return false;
	b->in_flight = true;
	b->covers = b->asked;
	return true;
}

void cl_bar_pong(struct read_barrier *b)
{
	if (!b->in_flight)
		return; /* no PING of ours: not counted */
	b->in_flight = false;
	if (b->covers > b->done)
		b->done = b->covers;
}

void cl_bar_lost(struct read_barrier *b)
{
	b->in_flight = false;
	b->woken = false;
	b->lost = b->asked;
}

enum cluster_barrier cl_bar_state(const struct read_barrier *b, uint64_t ticket)
{
	if (ticket <= b->done)
		return CLUSTER_BARRIER_PASSED;
	if (ticket <= b->lost)
		return CLUSTER_BARRIER_LOST;
	return CLUSTER_BARRIER_WAIT;
}

/* ---- the cluster's ---- */

bool cl_joining_locked(const struct cluster *cl)
{
	return cl->subscribed &&
	       (cl->state != REDIS_UP ||
	        clock_mono_ms() - cl->up_since_ms < JOIN_HEARTBEATS * (double)cl->heartbeat_ms);
}

bool cluster_joining(struct cluster *cl)
{
	if (!cl)
		return false;
	pthread_mutex_lock(&cl->lock);
	bool joining = cl_joining_locked(cl);
	pthread_mutex_unlock(&cl->lock);
	return joining;
}

uint64_t cluster_barrier(struct cluster *cl)
{
	if (!cl)
		return 0;
	uint64_t ticket = 0;
	bool wake = false;
	pthread_mutex_lock(&cl->lock);
	if (cl_joining_locked(cl)) {
		wake = cl_bar_ask(&cl->bar, &ticket);
		cl->bar_waits++;
	}
	pthread_mutex_unlock(&cl->lock);
	uint64_t one = 1;
	/* The eventfd counts: a full one (never, at 2^64 - 2) is awake anyway. */
	while (wake && write(cl->bar_fd, &one, sizeof one) < 0 && errno == EINTR)
		;
	return ticket;
}

enum cluster_barrier cluster_barrier_state(struct cluster *cl, uint64_t ticket)
{
	if (!cl || !ticket)
		return CLUSTER_BARRIER_PASSED;
	pthread_mutex_lock(&cl->lock);
	enum cluster_barrier st = cl_bar_state(&cl->bar, ticket);
	pthread_mutex_unlock(&cl->lock);
	return st;
}

void cluster_barrier_gave_up(struct cluster *cl)
{
	if (!cl)
		return;
	pthread_mutex_lock(&cl->lock);
	cl->bar_lapsed++;
	pthread_mutex_unlock(&cl->lock);
}

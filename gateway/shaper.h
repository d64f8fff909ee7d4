/*
 * shaper.h - upstream shaping: how many requests larder keeps in flight to
 * one S3 prefix, learnt from S3's answers. S3 answers 503 SlowDown when a
 * prefix gets more than it serves; each (bucket, first key segment) has a
 * window that halves on a SlowDown (once per window's worth of requests)
 * and grows by one request per window of successes (at most one per
 * 200 ms), between the floor and the maximum (additive increase,
 * multiplicative decrease).
 *
 * Demand reads (a client waits) come first: a background request (warm
 * jobs, lookahead) gets a slot only while no demand read waits for one,
 * and leaves a quarter of the window to demand reads.
 *
 * Waiting requests wait in lanes: a lane is one tenant's waiters of one
 * kind (a tenant: the client key a request is for, shaper_slot_tenant),
 * oldest first. Lanes take turns: a place that frees (or a window that
 * grows) goes at once to the oldest waiter of the first lane in line that
 * may take it (demand reads before background ones), which is then told
 * through its waker (below), and its lane goes to the back of the line.
 * So a key with many requests waiting (a reader's read-ahead) delays
 * another key's by at most one place per other lane, not by all of its
 * own. A newcomer waits behind waiters of its kind.
 *
 * Shared by all workers; thread-safe (one lock; the table is bounded: a
 * prefix that finds it full is not shaped).
 */
#ifndef LARDER_SHAPER_H
#define LARDER_SHAPER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/list.h"

struct shaper;

struct shaper_settings {
	unsigned window_max;    /* the start and the ceiling */
	unsigned window_min;    /* the floor, >= 1 */
	double wait_s;          /* how long a request waits for a slot */
};

/* How a slot that waits hears that it has its place: wake runs under the
 * shaper's lock on whichever thread freed the place, so it only arranges
 * for shaper_tell(sh, waker) to run on the waiters' own thread (the
 * gateway's is an ev_async per worker). */
struct shaper_waker {
	void (*wake)(struct shaper_waker *wk);
	struct list granted;    /* slots given their place, not yet taken (under the lock) */
};

/* One request's place: shaper_slot_init before its first acquire. Its
 * fields are the shaper's, under its lock. */
struct shaper_slot {
	uint64_t key;           /* the prefix's hash; 0: not shaped */
	unsigned epoch;         /* the window's epoch when it got the slot */
	bool held;              /* it holds a slot */
	bool queued;            /* it waits: on its prefix's queue */
	bool granted;           /* given a place while it waited: on its waker's list */
	bool background;
	unsigned tenant;        /* whose request (shaper_slot_tenant) */
	bool leads;             /* it waits first of its lane: on its prefix's queue */
	double since;           /* when it first asked, for the wait bound; < 0: not yet */
	struct shaper_waker *waker; /* NULL: it finds its place when it asks again */
	void (*placed)(struct shaper_slot *slot); /* with a waker: told by shaper_tell */
	struct list_node link;  /* on its prefix's queue of lanes (leads), on the lane
	                         * of the slot that leads it, or on its waker's list */
	struct list lane;       /* while it leads: the rest of its lane, oldest first */
};

enum shaper_verdict {
	SHAPER_GO,              /* it holds a slot: send the request */
	SHAPER_WAIT,            /* wait: the waker says when it has its place; ask
	                         * again then, or after shaper_wait_left */
	SHAPER_TIMEOUT,         /* waited wait_s: answer 503 SlowDown */
};

/* NULL only with a message in err (bad settings). */
struct shaper *shaper_create(const struct shaper_settings *s, char *err, size_t errlen);
void shaper_destroy(struct shaper *sh);

/* waker and placed: how the slot hears of its place while it waits; or
 * NULL, NULL for a caller that asks again on a tick of its own. */
void shaper_slot_init(struct shaper_slot *slot, bool background, struct shaper_waker *waker,
                      void (*placed)(struct shaper_slot *slot));
void shaper_waker_init(struct shaper_waker *wk, void (*wake)(struct shaper_waker *wk));
/* Whose request the slot is for (0, as shaper_slot_init leaves it: nobody's):
 * waiters of different tenants take turns. Before it asks, or while it
 * neither waits nor holds a place. */
void shaper_slot_tenant(struct shaper_slot *slot, unsigned tenant);

/* Asks for a slot to bucket's prefix of key at time now (monotonic
 * seconds). After SHAPER_TIMEOUT the slot starts over. */
enum shaper_verdict shaper_acquire(struct shaper *sh, struct shaper_slot *slot,
                                   const char *bucket, const char *key, double now);

/* The seconds until a slot that waits (SHAPER_WAIT) would time out: when
 * to ask again if its waker has not said anything by then. */
double shaper_wait_left(struct shaper *sh, const struct shaper_slot *slot, double now);

/* Calls placed for each of wk's slots that has its place now (whose
 * acquire will say SHAPER_GO). On the waiters' thread, after wk->wake. */
void shaper_tell(struct shaper *sh, struct shaper_waker *wk);

/* The request is over with upstream's status (0: no answer) at time now:
 * frees the slot and updates the window. A no-op for a slot not held. */
void shaper_release(struct shaper *sh, struct shaper_slot *slot, long status, double now);

/* Gives up: frees a held slot without an outcome, or stops waiting. */
void shaper_cancel(struct shaper *sh, struct shaper_slot *slot);

/* The window of bucket's prefix of key now (window_max when unknown). */
double shaper_window(struct shaper *sh, const char *bucket, const char *key);
/* Whether S3 throttles that prefix now: a 503 SlowDown cut its window,
 * which has not grown back to window_max yet. */
bool shaper_throttling(struct shaper *sh, const char *bucket, const char *key);

/* Counters for the metrics page. */
uint64_t shaper_throttled(struct shaper *sh); /* 503 SlowDown answers seen */
uint64_t shaper_waits(struct shaper *sh);     /* requests that had to wait for a slot */

#endif

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
 * A request that has waited a second (or half of wait_s, if less) goes
 * before younger ones, in the order they began to wait, demand reads among
 * demand reads and background among background. Younger waiters take a
 * freed slot as they ask for it: keeping it for the oldest, which asks only
 * every SHAPER_POLL_S, would leave it idle meanwhile (a quarter of the
 * throughput at 1,000 waiters). Without the rule, under such a burst some
 * readers waited out wait_s (503 SlowDown) while later ones went ahead.
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

/* One request's place: shaper_slot_init before its first acquire. */
struct shaper_slot {
	uint64_t key;           /* the prefix's hash; 0: not shaped */
	unsigned epoch;         /* the window's epoch when it got the slot */
	bool held;              /* it holds a slot */
	bool queued;            /* it waits: on its prefix's queue */
	bool background;
	double since;           /* when it first asked, for the wait bound; < 0: not yet */
	struct list_node link;  /* on its prefix's queue, oldest first */
};

enum shaper_verdict {
	SHAPER_GO,              /* it holds a slot: send the request */
	SHAPER_WAIT,            /* ask again in SHAPER_POLL_S */
	SHAPER_TIMEOUT,         /* waited wait_s: answer 503 SlowDown */
};

#define SHAPER_POLL_S 0.01

/* NULL only with a message in err (bad settings). */
struct shaper *shaper_create(const struct shaper_settings *s, char *err, size_t errlen);
void shaper_destroy(struct shaper *sh);

void shaper_slot_init(struct shaper_slot *slot, bool background);

/* Asks for a slot to bucket's prefix of key at time now (monotonic
 * seconds). After SHAPER_TIMEOUT the slot starts over. */
enum shaper_verdict shaper_acquire(struct shaper *sh, struct shaper_slot *slot,
                                   const char *bucket, const char *key, double now);

/* The request is over with upstream's status (0: no answer) at time now:
 * frees the slot and updates the window. A no-op for a slot not held. */
void shaper_release(struct shaper *sh, struct shaper_slot *slot, long status, double now);

/* Gives up: frees a held slot without an outcome, or stops waiting. */
void shaper_cancel(struct shaper *sh, struct shaper_slot *slot);

/* The window of bucket's prefix of key now (window_max when unknown). */
double shaper_window(struct shaper *sh, const char *bucket, const char *key);

/* Counters for the metrics page. */
uint64_t shaper_throttled(struct shaper *sh); /* 503 SlowDown answers seen */
uint64_t shaper_waits(struct shaper *sh);     /* requests that had to wait for a slot */

#endif

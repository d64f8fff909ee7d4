/*
 * limits.h - per-key limits that outlive a key set: the counters behind a
 * [key ID] section's max_upstream_requests, kept by key id in one small
 * table shared by every worker (with the token bucket behind its
 * max_bytes_per_second and the store charge behind its
 * max_resident_bytes), so a SIGHUP that swaps the keys keeps the requests
 * already in flight counted and the chunks already cached charged.
 */
#ifndef LARDER_LIMITS_H
#define LARDER_LIMITS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* No other header of ours here: -Igateway puts this file before the
 * system's <limits.h> for the libraries that include that (curl does);
 * base/list.h includes only <stdbool.h> and <stddef.h>. */
#include "base/list.h"

struct client_key;
struct metrics_resident;
struct store;

/* Seconds a client refused for its key's limit is told to wait (Retry-After). */
#define LIMITS_RETRY_AFTER_S 1

/* Takes one of key_id's upstream slots: false when max (> 0) are taken
 * already, or when requests queue for them (limits_upstream_queue: a
 * newcomer does not go before them). max 0 means no limit (the slot is
 * still counted). */
bool limits_upstream_take(const char *key_id, unsigned max);
/* Gives back a slot limits_upstream_take or limits_upstream_queue gave. */
void limits_upstream_give(const char *key_id);

/* A request's place in its key's queue for a slot (zeroed: not queued).
 * link and queued are limits.c's, under its lock. wake(arg) is called,
 * on whichever thread gave a slot back and under limits.c's lock, when the
 * place is the oldest and a slot is free: it must only queue the request to
 * ask again (take no lock that is held while calling into limits.h). */
struct limits_place {
	struct list_node link;
	bool queued;
	void (*wake)(void *arg);
	void *arg;
};
/* As limits_upstream_take, but a request refused joins the key's queue
 * (first in, first served): asked again (woken), it gets a slot once it is
 * the oldest waiter and one is free. True: it holds one (and left the queue). */
bool limits_upstream_queue(const char *key_id, unsigned max, struct limits_place *p);
/* Leaves the queue (a request that gave up waiting, or ended); no-op when
 * not queued. */
void limits_upstream_unqueue(const char *key_id, struct limits_place *p);

/* Of want bytes key_id would send now, how many its token bucket (rate
 * bytes a second, refilled continuously; it holds at most 50 ms of rate so
 * reads come smoothly, never in bursts) lets go: taken from the bucket.
 * 0 when it is empty: *wait_s is then when enough for a send returns. */
size_t limits_bytes_take(const char *key_id, uint64_t rate, size_t want, double now,
                         double *wait_s);

/* The store charge (store/store.h) of key_id's cache fills: one number per
 * id for the process's life, so chunks stay charged across a SIGHUP. 0
 * (nobody) for NULL or "" (unsigned requests) and past STORE_CHARGE_MAX ids. */
unsigned limits_charge(const char *key_id);
/* The same number, charging nothing to key_id (it is not listed among the
 * keys charged so far): whose request it is, for the shaper's turns. */
unsigned limits_tenant(const char *key_id);

/* Gives every key of keys (n of them) its max_resident_bytes in the store,
 * and every other key charged so far no limit (a SIGHUP dropped it or its
 * limit). At start and after each reload. */
void limits_resident_apply(struct store *s, const struct client_key *keys, size_t n);

/* The keys charged so far, with the bytes of theirs the RAM tier holds and
 * their limits: a new array of *n (free it), or NULL (none, or out of memory). */
struct metrics_resident *limits_resident(struct store *s, size_t *n);

#endif

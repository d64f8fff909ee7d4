/*
 * limits.h - per-key limits that outlive a key set: the counters behind a
 * [key ID] section's max_upstream_requests, kept by key id in one small
 * table shared by every worker (with the token bucket behind its
 * max_bytes_per_second), so a SIGHUP that swaps the keys keeps the
 * requests already in flight counted.
 */
#ifndef LARDER_LIMITS_H
#define LARDER_LIMITS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Seconds a client refused for its key's limit is told to wait (Retry-After). */
#define LIMITS_RETRY_AFTER_S 1

/* Takes one of key_id's upstream slots: false when max (> 0) are taken
 * already. max 0 means no limit (the slot is still counted). */
bool limits_upstream_take(const char *key_id, unsigned max);
/* Gives back a slot limits_upstream_take gave. */
void limits_upstream_give(const char *key_id);

/* Of want bytes key_id would send now, how many its token bucket (rate
 * bytes a second, refilled continuously; it holds at most 50 ms of rate so
 * reads come smoothly, never in bursts) lets go: taken from the bucket.
 * 0 when it is empty: *wait_s is then when enough for a send returns. */
size_t limits_bytes_take(const char *key_id, uint64_t rate, size_t want, double now,
                         double *wait_s);

#endif

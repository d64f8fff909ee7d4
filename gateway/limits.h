/*
 * limits.h - per-key limits that outlive a key set: the counters behind a
 * [key ID] section's max_upstream_requests, kept by key id in one small
 * table shared by every worker, so a SIGHUP that swaps the keys keeps the
 * requests already in flight counted.
 */
#ifndef LARDER_LIMITS_H
#define LARDER_LIMITS_H

#include <stdbool.h>

/* Seconds a client refused for its key's limit is told to wait (Retry-After). */
#define LIMITS_RETRY_AFTER_S 1

/* Takes one of key_id's upstream slots: false when max (> 0) are taken
 * already. max 0 means no limit (the slot is still counted). */
bool limits_upstream_take(const char *key_id, unsigned max);
/* Gives back a slot limits_upstream_take gave. */
void limits_upstream_give(const char *key_id);

#endif

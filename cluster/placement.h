/*
 * placement.h - the placement directory (cluster/directory.h) read from a
 * worker's own loop: which other node holds a chunk.
 *
 * Each worker has its own Redis connection, driven by hiredis's async API
 * on the worker's libev loop, so a lookup costs the loop nothing while it
 * waits. A lookup is one SMEMBERS; the answer is narrowed to live members
 * other than this node and ranked by rendezvous hashing
 * (cluster_pick_holder), so every node that asks picks the same holder.
 *
 * A lookup is a hint and may not cost more than a hint: it is not even
 * tried while there is no connection (the last attempt failed less than a
 * second ago) or too many lookups wait (placement_ask returns NULL and the
 * caller goes on as if nobody held the chunk), and one that takes longer
 * than ASK_TIMEOUT_MS (100 ms) answers "nobody". After a few lookups in a
 * row time out, the connection is dropped and made again later. The
 * connection is made when the worker starts.
 */
#ifndef LARDER_PLACEMENT_H
#define LARDER_PLACEMENT_H

#include <ev.h>
#include <stdint.h>

struct cluster;
struct placement;
struct placement_ask;

/* addr: the holder's advertise address, or NULL when no other live node
 * is known to hold the chunk (or the directory did not answer in time). */
typedef void (*placement_cb)(void *arg, const char *addr);

/* For one worker's loop; connects on first use, from that loop's thread. */
struct placement *placement_create(struct ev_loop *loop, struct cluster *cl);
/* With the loop stopped and every ask answered or cancelled. */
void placement_destroy(struct placement *p);

/* Asks who holds directory key `key`. cb runs later on the loop, exactly
 * once unless cancelled; NULL: no lookup possible now (cb never runs). */
struct placement_ask *placement_ask(struct placement *p, uint64_t key, placement_cb cb,
                                    void *arg);
/* cb will not run. a must be a pending ask. */
void placement_cancel(struct placement_ask *a);

/* Lists node self as a holder of directory key `key` now (SADD, and the
 * entry's TTL), not at the directory's next flush: for a chunk this node
 * fetches without owning it, which its owner's lookups must find before
 * the heartbeat (gateway/fetch.c). A hint like the lookups: not sent while
 * there is no connection or too many lookups wait; the flush that follows
 * the chunk's completion lists it (or withdraws it) as for any chunk. */
void placement_list(struct placement *p, uint64_t key, const char *self, unsigned ttl_ms);

struct placement_counts {
	unsigned long found;    /* a holder other than this node */
	unsigned long none;     /* nobody (live) holds it */
	unsigned long failed;   /* timeout or error: treated as nobody */
	unsigned long skipped;  /* not asked: no connection, or too many asks pending */
};
/* Totals over every worker since start. */
void placement_get_counts(struct placement_counts *out);

#endif

/*
 * pins.h - what warm jobs with a pin hold in the cache, and until when.
 *
 * A pin is a warm job's (prefetch.h): its id is the job's id. The job pins
 * each chunk it warms (store_pin) and records its id here; the pin ends
 * (every chunk is unpinned: the policy may evict them again) when its time
 * is up (pins_expire, run every second), when it is ended by id or by
 * bucket and prefix (POST /admin/unpin), or when the job fails or is
 * cancelled.
 *
 * Durability: with a cache directory each pin is saved to a file of its
 * own under DIR/pins (its id, bucket, prefix, objects, expiry as unix
 * seconds, and the chunk ids with their lengths), rewritten atomically
 * (file_replace) by a saver thread within a second of a change, and
 * removed when the pin ends. At start the unexpired pins found there pin
 * their chunks again: those the NVMe tier recovered are held from now
 * on, the rest are kept when a read brings them. Expired pins' files are
 * removed; a file that is not a saved pin is logged and ignored. Without
 * a cache directory pins live in memory only.
 *
 * In a cluster a pin holds its chunks on their owners too: a pinned job's
 * chunk fetches to an owner carry the header X-Larder-Pin: "NODE/JOB
 * UNTIL" (pins_peer_header), and the owner, serving a verified peer
 * request with it, pins the chunk under a pin of its own named NODE/JOB
 * until UNTIL (pins_hold_peer). An owner's pin ends at that time, or when
 * the posting node announces that it ended early (pins_on_end: the server
 * publishes it on the cluster's invalidation channel, CLUSTER_UNPIN).
 *
 * Every function is thread-safe.
 */
#ifndef LARDER_PINS_H
#define LARDER_PINS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/chunk.h"

#define PIN_HEADER "X-Larder-Pin"
#define PIN_HEADER_MAX 192
#define PIN_ID_MAX 160            /* a job id, or a peer's NODE/JOB */
#define PIN_SECONDS_MAX (30 * 86400) /* the longest a pin may be asked for */

struct store;
struct pins;
struct obj_ref;

struct pin_info {
	char id[PIN_ID_MAX];
	char bucket[256];
	char *prefix;          /* listing pins: the prefix (free it), else NULL */
	size_t n_keys;         /* key-list and manifest pins: objects (so far), else 0 */
	uint64_t bytes;        /* bytes of the chunks pinned so far */
	int64_t until;         /* unix seconds */
};

/* The registry, with the pins saved under dir/pins pinned again (dir
 * NULL: memory only). NULL with err set when dir/pins cannot be made or
 * read, or out of memory. */
struct pins *pins_create(struct store *s, const char *dir, char *err, size_t errlen);
/* Saves every pin as it is now and stops saving: pins that end from now
 * on (the warm jobs a shutdown cancels) keep their files. Call before the
 * warm jobs are cancelled; pins_destroy calls it too. */
void pins_shutdown(struct pins *p);
/* Unpins everything left (their files stay). */
void pins_destroy(struct pins *p);
/* Whether pin id exists (a new warm job takes an id no pin has: pins
 * restored at start keep theirs). */
bool pins_has(struct pins *p, const char *id);

/* A new pin until `until` (unix seconds); prefix NULL for keys or a
 * manifest. Returns 0, or -ENOMEM. */
int pins_begin(struct pins *p, const char *id, const char *bucket, const char *prefix,
               int64_t until);
/* Pins one more chunk of pin id. Returns 0, -ENOENT when the pin has
 * ended, -ENOSPC when the pin limit would be passed, or -ENOMEM. */
int pins_add(struct pins *p, const char *id, const struct chunk_id *cid, size_t len);
/* Takes chunk cid out of pin id (its fetch failed: the object changed or
 * went, or S3 failed): it is unpinned and no longer counted. 0, or -ENOENT
 * (no such pin, or the pin does not hold it). */
int pins_drop(struct pins *p, const char *id, const struct chunk_id *cid);
/* A prefix pin sized by its listing asks for its room up front: ram_bytes
 * of RAM pin room or nvme_bytes of NVMe pin room (each chunk counted as its
 * entry: store_pin_nvme_bytes), beside
 * what is pinned and what other pins took this way and have not pinned
 * yet. Taken, that room is kept from other pins (pins_add pins theirs
 * where it is not) until its job ends (pins_settle) or the pin does.
 * Returns 0, -ENOSPC (no room: *spoken_for is the RAM bytes other pins
 * took and have not pinned yet) or -ENOENT. */
int pins_reserve(struct pins *p, const char *id, uint64_t ram_bytes, uint64_t nvme_bytes,
                 uint64_t *spoken_for);
/* Pin id's job has ended: it keeps what it pinned, no more room. */
void pins_settle(struct pins *p, const char *id);
/* One more object (for n_keys). */
void pins_add_object(struct pins *p, const char *id);
/* fn(arg, id) is called, under the registry's lock (it must not call
 * back here), when one of this node's pins ends before its time (unpin, a
 * failed job): a cluster tells the owners holding chunks for it. */
void pins_on_end(struct pins *p, void (*fn)(void *arg, const char *id), void *arg);
/* Ends pin id; 0, or -ENOENT. */
int pins_end(struct pins *p, const char *id);
/* Ends every pin of bucket whose prefix starts with prefix; returns how
 * many. */
size_t pins_end_prefix(struct pins *p, const char *bucket, const char *prefix);
/* Ends the pins whose time is up. */
void pins_expire(struct pins *p, int64_t now);
/* The X-Larder-Pin value of job id (posted to node) pinned until until. */
void pins_peer_header(char out[PIN_HEADER_MAX], const char *node, const char *id, int64_t until);
/* A peer asked for chunk cid (len bytes) of bucket with X-Larder-Pin
 * value hdr (NULL: none): pins it, under a pin named after the peer's,
 * created as needed; true when it is pinned. Not pinning it (a bad value,
 * past the pin limits) is logged, never an error for the read. */
bool pins_hold_peer(struct pins *p, const char *bucket, const char *hdr,
                    const struct chunk_id *cid, size_t len);
/* c, chunk index of ref, was just pinned: if it is complete already
 * (pinning it could not catch its completion's write) and pinned on NVMe,
 * it is written there unless NVMe holds it (store_pin_write). */
void pins_keep_on_nvme(struct store *s, const struct obj_ref *ref, uint64_t index, struct chunk *c);
/* Up to max pins, newest first; returns how many. Free each prefix. */
size_t pins_list(struct pins *p, struct pin_info *out, size_t max);
/* How many pins there are. */
size_t pins_count(struct pins *p);

#endif

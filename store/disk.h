/*
 * disk.h - the NVMe tier: a log of segment files under the cache directory.
 *
 * Layout: <dir>/seg-<16 hex digits>.log, each up to segment_bytes, written
 * append-only. An entry is a fixed header (magic, version, chunk id, index,
 * name and metadata lengths, data length, CRC32C of the data, CRC32C of the
 * header) followed by the names (bucket, key, ETag), the optional metadata
 * blob and the data. Object keys never become file paths.
 *
 * open scans every segment: entries whose header checksum fails end that
 * segment's scan (a torn tail); the index (id -> segment, offset, length)
 * is rebuilt in memory. Every entry carries a generation (its time order);
 * the recover callback hears only the newest chunk-0 entry per (bucket,
 * key), and none that a later tombstone (disk_invalidate) covers. A
 * directory written in an older format is discarded. Data checksums are verified on every read, so a
 * corrupt entry reads as -EIO and is dropped, never served.
 *
 * Space: used bytes count whole segment files. When writing would pass
 * capacity, the tier frees space: per-chunk eviction follows the policy
 * (store/policy.h) and marks entries dead; a segment whose live bytes fall
 * low is reclaimed (its live entries copied to the head, the file
 * removed). used never exceeds capacity.
 *
 * Blocking calls: run them on I/O threads, never on a worker loop.
 * Thread-safe (one lock for the index; file I/O outside it).
 */
#ifndef LARDER_DISK_H
#define LARDER_DISK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/chunk.h"
#include "store/policy.h"
#include "store/store.h"

struct disk;
struct tier_ops;

/* The tier interface (store/tier.h) over a struct disk: holds is
 * disk_lookup, admit is disk_write (c's bytes, c->len, named by o), drop is
 * disk_drop, close is disk_close. */
extern const struct tier_ops disk_tier_ops;

/* chunk_bytes: the size objects are cut to (LARDER_CHUNK_SIZE). The
 * directory records it (CHUNK_SIZE_NAME); entries cut to another size are
 * discarded at open, as an index names other bytes then. 0: not checked. */
struct disk *disk_open(const char *dir, uint64_t capacity, uint64_t segment_bytes,
                       uint64_t chunk_bytes, enum policy_kind policy, double stale_after_s,
                       store_recover_cb cb, void *cb_arg, char *err, size_t errlen);
void disk_close(struct disk *d);
/* Whether the open found tombstones lost (a bad record in the file, or no
 * file beside entries): an object recovered may be stale, and must be
 * revalidated before it is served. */
bool disk_doubtful(const struct disk *d);

/* Writes a chunk (admission per policy: returns 0 without writing when the
 * policy declines it, or when it cannot fit even after eviction). A write
 * of an id already held replaces it. Returns 0, -EINVAL (a name over
 * 65535 bytes, metadata over 1 MiB, len over 4 GiB - 1), -ENOMEM, or
 * negative errno on I/O failure (-ENOSPC, -EIO, ...); the index stays
 * consistent either way. data must not be the calling thread's chunk
 * buffer (chunk_view, chunk_stage): a large entry is laid out in it. */
int disk_write(struct disk *d, const struct chunk_id *id, const struct chunk_origin *o,
               const void *data, size_t len);
/* Entries of more data than this are written with O_DIRECT where the file
 * system takes it (through the page cache where it does not). */
#define DISK_DIRECT_ABOVE ((size_t)512 << 10)

/* Reads a chunk's data into out (len bytes, the entry's length), and into
 * *copy (when not NULL) whether the entry is a reader's copy of another
 * node's chunk (chunk_origin.copy). Returns 0, -ENOENT (not held), -EINVAL
 * (len is not the entry's length), -EIO (checksum failure: the entry is
 * dropped), or another negative errno (the entry is dropped). */
int disk_read(struct disk *d, const struct chunk_id *id, void *out, size_t len, bool *copy);
/* disk_read from the page cache only, for a caller that must not wait on
 * the device (a worker loop): -EAGAIN when a byte of the entry is not
 * cached (or the file system cannot tell), with the entry kept and nothing
 * counted; otherwise as disk_read. */
int disk_read_cached(struct disk *d, const struct chunk_id *id, void *out, size_t len,
                     bool *copy);

/* Calls fn for every entry the tier holds (store_each_nvme), under the
 * index lock: fn must not call into the tier. */
void disk_each(struct disk *d, store_each_fn fn, void *arg);

/* Remembers, durably (fdatasync'd before it returns), that the object
 * (bucket, key) changed, or with prefix every key of bucket starting with
 * key: after a restart, no chunk-0 entry whose generation was taken before
 * this call gives its metadata back. Blocks for one small synchronous write. Returns 0 or
 * negative errno. */
int disk_invalidate(struct disk *d, const char *bucket, const char *key, bool prefix);

/* The same without the fdatasync: the record is in the page cache when it
 * returns, so it outlives the process (kill -9) but not the machine
 * (until the kernel writes it back, or the next disk_invalidate syncs the
 * file). For a change a reader's thread sees, which must not wait for
 * the device. Returns 0 or negative errno. */
int disk_invalidate_unsynced(struct disk *d, const char *bucket, const char *key);

/* A generation (chunk_origin.gen): the store takes one when a chunk is
 * created, before its fetch begins, so a tombstone written while the fetch
 * runs or the write waits in the queue counts as newer than the chunk. */
uint64_t disk_next_gen(struct disk *d);

/* Pins (store_pin): a pinned entry is never evicted for room (reclaim
 * moves it like any live entry), and a pinned id written later is always
 * admitted. disk_pin: 0, -ENOSPC when the bytes of pinned ids would pass
 * the limit (0 until disk_pin_limit sets one; at most what writes may use,
 * capacity less the reclaim reserve), or -ENOMEM; pins on one id
 * count up, and disk_unpin takes one off. len is the chunk's length; a pin
 * counts what its entry takes on disk (disk_pin_bytes), so that pinned
 * entries stay within the limit however small they are. */
void disk_pin_limit(struct disk *d, uint64_t bytes);
int disk_pin(struct disk *d, const struct chunk_id *id, size_t len);
/* What a pinned chunk of len bytes counts: its entry's header and data
 * padded to 4 KiB (its names, at most a few hundred bytes, mostly fit in
 * the padding). */
uint64_t disk_pin_bytes(uint64_t len);
void disk_unpin(struct disk *d, const struct chunk_id *id);
bool disk_pinned(struct disk *d, const struct chunk_id *id);

/* Whether the chunk is held, and its length. */
bool disk_lookup(struct disk *d, const struct chunk_id *id, size_t *len);

void disk_drop(struct disk *d, const struct chunk_id *id);

/* cb(arg, id) is called for every entry evicted for room from now on,
 * with the disk's lock held: it must not call back into the disk. */
void disk_on_evict(struct disk *d, store_change_cb cb, void *arg);

struct disk_stats {
	uint64_t used, capacity, live_bytes, entries, segments;
	uint64_t evictions, reclaimed_segments, write_errors, read_errors, corrupt;
	uint64_t pinned, pin_held, pin_limit; /* pinned entries' bytes here; pinned ids'; their cap */
};
void disk_get_stats(struct disk *d, struct disk_stats *out);

/* Checks internal invariants (index, per-segment live lists and byte
 * counts, the policy's totals, used <= capacity); returns 0 or -1. For
 * tests. */
int disk_check(struct disk *d);

#endif

/*
 * store.h - the tiered chunk store: an in-flight table, a RAM tier and an
 * NVMe tier, shared by every worker.
 *
 *   store_acquire(id) -> STORE_HIT      the chunk is READY: in RAM, or just
 *                                       read from NVMe through the page cache
 *                     -> STORE_WAIT     someone produces it (an upstream fetch
 *                                       elsewhere, or the store's I/O threads
 *                                       reading it from NVMe): read it as it fills
 *                     -> STORE_PRODUCE  nobody has it: the caller fetches it
 *                                       and calls store_complete()
 * Concurrent acquirers of one chunk get the same struct chunk: that is
 * coalescing. A completed chunk is offered to the RAM tier and written
 * through to the NVMe tier (each by its admission policy); a chunk read
 * back from NVMe is promoted to RAM. A torn or corrupt NVMe entry fails
 * its checksum and reads as a miss.
 *
 * Bounds: RAM use (READY chunks plus chunks being filled) stays within
 * ram_bytes, except that chunks being filled or read are never freed
 * under a reader (they are counted, and the tier evicts others first).
 * Disk use stays within disk_bytes.
 *
 * Every function is thread-safe. None waits on the device: NVMe writes,
 * and reads of bytes the page cache does not hold, run on the store's own
 * I/O threads; store_acquire reads a small chunk itself only when every
 * byte of it is in the page cache (preadv2 RWF_NOWAIT).
 */
#ifndef LARDER_STORE_H
#define LARDER_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/chunk.h"
#include "store/policy.h"

/* A chunk may have entered or left a tier (completed, promoted from NVMe,
 * written to NVMe, evicted). Called with store locks held: it must only
 * note the id and return, never call into the store. */
typedef void (*store_change_cb)(void *arg, const struct chunk_id *id);

struct store_config {
	uint64_t ram_bytes;          /* LARDER_RAM_CACHE_SIZE */
	uint64_t disk_bytes;         /* LARDER_DISK_CACHE_SIZE; 0: no NVMe tier */
	const char *dir;             /* LARDER_CACHE_DIR (required when disk_bytes > 0) */
	enum policy_kind policy;     /* LARDER_CACHE_POLICY */
	double stale_after_s;        /* LARDER_CACHE_STALE_AFTER */
	unsigned io_threads;         /* NVMe readers/writers; 0: 2 */
	uint64_t segment_bytes;      /* NVMe segment file size; 0: 64 MiB */
	uint64_t chunk_bytes;        /* LARDER_CHUNK_SIZE: NVMe entries cut to another are
	                              * discarded at open (disk_open); 0: not checked */
	uint64_t pin_bytes;          /* LARDER_PIN_MAX: pinned bytes allowed; 0: ram_bytes / 2 */
	uint64_t pin_nvme_bytes;     /* LARDER_PIN_MAX_NVME: the same on NVMe; 0: disk_bytes / 2 */
	store_change_cb changed;     /* may be NULL */
	void *changed_arg;
};

/* Who a chunk belongs to: persisted with it on NVMe so a restart can
 * rebuild object metadata, and purges can find it by name. */
struct chunk_origin {
	const char *bucket;
	const char *key;
	const char *etag;
	uint64_t index;
	const void *meta;            /* opaque object metadata (chunk 0 only), or NULL */
	size_t meta_len;
	uint64_t gen;                /* NVMe time order (store_next_gen) when the bytes were
	                              * asked for, if before the chunk was acquired; 0: the
	                              * store's, taken at store_acquire */
	unsigned charge;             /* who its RAM bytes count against (store_charge_limit) */
	bool copy;                   /* a reader's copy of a chunk another cluster node owns:
	                              * the tiers keep it after their own (policy_rank) */
};

/* Called once per chunk-0 entry found on NVMe at store_open, so the
 * caller can rebuild its metadata cache (o->copy is kept too). */
typedef void (*store_recover_cb)(void *arg, const struct chunk_origin *o);

/* One chunk on the NVMe tier (store_each_nvme): whether it is a chunk 0
 * and a reader's copy (chunk_origin.copy). */
typedef void (*store_each_fn)(void *arg, const struct chunk_id *id, bool chunk0, bool copy);

struct store;

/* Opens (and recovers) the store. Returns NULL with err set when the
 * cache directory cannot be used; a directory that later fails (full,
 * unwritable) only disables the NVMe tier for a while (it is tried again,
 * backing off), reported in store_stats. */
struct store *store_open(const struct store_config *c, store_recover_cb cb, void *cb_arg,
                         char *err, size_t errlen);
/* Stops the I/O threads (pending NVMe writes are abandoned, pending NVMe
 * reads fail with STORE_ERR_REFETCH) and drops the store's references;
 * chunks callers still hold stay valid until they release them. Every
 * producer must have called store_complete before. */
void store_close(struct store *s);

enum store_role { STORE_HIT, STORE_WAIT, STORE_PRODUCE };

/* fail_reason of a chunk the store itself was producing from NVMe and
 * could not (checksum failure, entry gone, I/O error, store closing): not
 * an error to report. Release the chunk and store_acquire() again; the
 * NVMe copy is forgotten, so you will be told to fetch it (PRODUCE) or
 * join whoever does. Distinct from every errno value and HTTP status. */
#define STORE_ERR_REFETCH (-100000)

/*
 * The chunk id of length len (its true length, from the object's size).
 * Returns a reference (release with chunk_unref), or NULL when out of
 * memory. c->len is authoritative: a chunk already being produced keeps
 * the length its producer asked for. With STORE_PRODUCE the caller must eventually store_complete()
 * it, successfully or not.
 */
struct chunk *store_acquire(struct store *s, const struct chunk_id *id, size_t len,
                            enum store_role *role);
/* The same for a reader whose fills count against charge (store_charge_limit;
 * 0: nobody): a chunk this call has the store read back from NVMe enters
 * RAM charged to it, as if that reader had fetched it. */
struct chunk *store_acquire_charged(struct store *s, const struct chunk_id *id, size_t len,
                                    unsigned charge, enum store_role *role);

/*
 * The producer is done (the producer then still releases its reference). ok: the chunk is READY (filled == len), leaves
 * the in-flight table, and is offered to the tiers; o names it for NVMe.
 * !ok: FAILED with reason, leaves the in-flight table (the next acquire
 * produces again); never stored. Wakes every waiter either way.
 */
void store_complete(struct store *s, struct chunk *c, bool ok, int reason,
                    const struct chunk_origin *o);

/* Whether a tier holds the chunk complete (READY in RAM, or on NVMe):
 * store_acquire would answer HIT or read it from NVMe. A snapshot: it may
 * be evicted the next moment. Does not count as an access. */
bool store_holds(struct store *s, const struct chunk_id *id);
/* Whether the NVMe tier's recovery found invalidations lost (disk_doubtful):
 * the metadata it rebuilt must then be revalidated before it is served. */
bool store_doubtful(const struct store *s);

/* Calls fn for every chunk the NVMe tier holds (none without one): at
 * start, right after store_open, what it recovered. fn runs under the
 * tier's lock and must not call into the store. */
void store_each_nvme(struct store *s, store_each_fn fn, void *arg);

/* A place in NVMe time order, now (0 without an NVMe tier). A fetch that
 * learns an object names its chunk 0 only once the answer is in, after
 * store_acquire; it takes one before it asks and passes it in chunk 0's
 * origin, so an invalidation that lands meanwhile counts as newer than
 * that chunk (store_invalidate). Any thread. */
uint64_t store_next_gen(struct store *s);

/* An object (or with prefix, every key of bucket under key) changed: its
 * metadata on NVMe is made unrecoverable, durably, before this returns
 * (one small synchronous write: call it where blocking for it is fine).
 * Chunks stay (they name one version). Returns 0, or negative errno. */
int store_invalidate(struct store *s, const char *bucket, const char *key, bool prefix);

/* As store_invalidate, but the record is written and synced by an I/O
 * thread after this returns, for a caller that must not wait on the device
 * (the cluster's subscriber thread: a write through another node waits for
 * its acknowledgement): it forgets the object in memory first, and the
 * tombstone follows (store_close writes those still queued). A crash
 * before it is synced loses it, as it does one store_invalidate is
 * syncing. Past a bound on those queued (a device stalled for long), it is
 * written here, as store_invalidate does. Returns 0, or negative errno. */
int store_invalidate_queued(struct store *s, const char *bucket, const char *key, bool prefix);

/* A write through this node to (bucket, key), or with prefix to every key
 * of bucket under key, is about to go upstream: as store_invalidate, and
 * until store_write_end(owner) a chunk 0 of an object it covers reaches
 * NVMe as older than that tombstone. S3 applies the write at some moment
 * before its answer, and a read meanwhile may learn the old version: if
 * larder dies before the answer (and the store_invalidate it brings), this
 * tombstone must cover that chunk. owner names the request (one may begin
 * several). Any thread. Returns 0, or negative errno. */
int store_write_begin(struct store *s, uint64_t owner, const char *bucket, const char *key,
                      bool prefix);

/* The writes owner began are over: answered (and invalidated), or given up. */
void store_write_end(struct store *s, uint64_t owner);

/* A read found the object (bucket, key) changed upstream (a 412 on
 * If-Match): as store_invalidate, but the caller (a worker) waits for no
 * device: the record outlives a crash of the process, not of the machine
 * (disk_invalidate_unsynced). Returns 0, or negative errno. */
int store_invalidate_seen(struct store *s, const char *bucket, const char *key);

/* Forgets a chunk in every tier (readers holding it keep their bytes).
 * A chunk being produced leaves the in-flight table (its waiters still get
 * its bytes) and is not stored when it completes; a pending NVMe write of
 * it is cancelled. */
void store_drop(struct store *s, const struct chunk_id *id);

/*
 * Pins (a warm job's --pin). Each tier has its own cap on the bytes of
 * ids pinned there (pin_bytes, pin_nvme_bytes), and an id is pinned in
 * every tier whose cap has room for it: a chunk pinned in RAM stays in RAM
 * however much else is read; one pinned on NVMe is written there whatever
 * the write queue holds and stays there (RAM may let it go: a read brings
 * it back from NVMe). So the first pin_bytes of pinned ids are held in
 * both tiers, the rest on NVMe only, and a pin fails only where neither
 * tier has room. Pin an id before (or while) it is acquired and it is
 * kept when it completes; one already held is held from now on (a chunk
 * already complete in RAM but not on NVMe is written there by
 * store_pin_write). Pins on one id count up.
 * Returns the tiers pinned (STORE_PIN_RAM | STORE_PIN_NVME, never 0): hand
 * them to store_unpin; -ENOSPC when neither tier has room; or -ENOMEM.
 */
#define STORE_PIN_RAM 1
#define STORE_PIN_NVME 2
int store_pin(struct store *s, const struct chunk_id *id, size_t len);
/* The same in tiers_allowed only (STORE_PIN_RAM | STORE_PIN_NVME): the
 * others' room is spoken for (gateway/pins.c, pins_reserve). */
int store_pin_in(struct store *s, const struct chunk_id *id, size_t len, int tiers_allowed);
/* The tiers where id is pinned already (by any pin): 0 when none. */
int store_pinned(struct store *s, const struct chunk_id *id);
void store_unpin(struct store *s, const struct chunk_id *id, int tiers);
/* c (READY, named by o) was pinned on NVMe after it completed: writes it
 * there unless NVMe holds it or a write of it is pending (its completion's
 * write may have been dropped with the write queue full). */
void store_pin_write(struct store *s, struct chunk *c, const struct chunk_origin *o);

/*
 * Charges: a client key's share of the RAM tier (max_resident_bytes). A
 * chunk completed with chunk_origin.charge = n counts against charge n
 * while it stays in RAM, whoever reads it later; with a limit, charge n's
 * own chunks make room for its new ones, so its bytes settle at the limit
 * while other charges' stay (store/ram.h). A chunk read back from NVMe
 * counts against the charge of the reader whose store_acquire_charged
 * started the read (0: nobody); NVMe entries themselves carry no charge.
 * n is 1..STORE_CHARGE_MAX.
 * store_charge_limit: 0, -EINVAL (n out of range) or -ENOMEM; max 0 is no
 * limit. store_charged: the bytes charged to n now.
 */
#define STORE_CHARGE_MAX 65535u
int store_charge_limit(struct store *s, unsigned charge, uint64_t max);
uint64_t store_charged(struct store *s, unsigned charge);

struct store_stats {
	uint64_t ram_used, ram_capacity, ram_entries;  /* ram_used includes ram_filling */
	uint64_t ram_filling;            /* bytes reserved by chunks being produced */
	uint64_t ram_overcommits;        /* reservations that pushed ram_used past capacity */
	uint64_t ram_pinned;             /* bytes of pinned chunks in RAM (in ram_used) */
	uint64_t pin_held, pin_limit;    /* bytes of ids pinned in RAM (held or to come); their cap */
	uint64_t nvme_pinned;            /* bytes of pinned entries on NVMe (in disk_used) */
	uint64_t nvme_pin_held, nvme_pin_limit; /* the same on NVMe, counted as entries (disk_pin) */
	uint64_t disk_used, disk_capacity, disk_entries;
	uint64_t inflight;               /* chunks being produced */
	uint64_t hits_ram, hits_disk, misses, coalesced;
	uint64_t evictions_ram, evictions_disk;
	uint64_t disk_write_errors, disk_read_errors, disk_corrupt;
	uint64_t disk_writes, disk_writes_dropped; /* done; skipped as the queue was full */
	bool disk_ok;                    /* false while the NVMe tier is disabled (write errors) */
};
void store_get_stats(struct store *s, struct store_stats *out);

/* What an object of size bytes, in chunks of chunk bytes, counts against
 * the NVMe tier's pin cap. */
uint64_t store_pin_nvme_bytes(uint64_t size, uint64_t chunk);

#endif

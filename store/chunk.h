/*
 * chunk.h - the unit of caching, fetching and coalescing.
 *
 * A chunk is a byte range [index * chunk_size, +len) of one object version,
 * named by a 16-byte id derived from (bucket, key, ETag, index). One struct
 * chunk stands for it while it is being produced (from upstream or from the
 * NVMe tier) and afterwards while it sits in the RAM tier: readers on any
 * thread read bytes [0, filled) while the producer appends, and are woken
 * as bytes arrive. A chunk may also fill as two parts at once (chunk_split:
 * a reader's bytes deep in it, fetched with the bytes before them as two
 * upstream requests): then [split, tail) is readable as well. Chunks are
 * reference-counted; the bytes stay valid for as long as a reader holds a
 * reference, even after eviction.
 *
 * Thread safety: every function here may be called from any thread.
 */
#ifndef LARDER_CHUNK_H
#define LARDER_CHUNK_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/list.h"

#define CHUNK_ID_LEN 16

struct chunk_id {
	uint8_t b[CHUNK_ID_LEN];
};

/* SHA-256 of the length-prefixed fields, truncated: identity never depends
 * on a separator that could appear in a key. */
void chunk_id_make(const char *bucket, const char *key, const char *etag, uint64_t index,
                   struct chunk_id *out);
/* A stable 64-bit value of the id, uniform: used for hashing and by the
 * admission policy. */
uint64_t chunk_id_hash(const struct chunk_id *id);
bool chunk_id_eq(const struct chunk_id *a, const struct chunk_id *b);

enum chunk_state {
	CHUNK_FILLING = 0, /* a producer is appending */
	CHUNK_READY = 1,   /* complete: filled == len */
	CHUNK_FAILED = 2,  /* the producer gave up: readers must fetch again or fail */
};

/*
 * Notified when a chunk grows or changes state. wake() runs on the
 * producer's thread with no store or chunk lock held: it must only hand
 * the news to the waiter's own thread (e.g. ev_async_send) and return; it
 * must not call chunk_wait/chunk_unwait on the same chunk.
 *
 * A waiter stays registered until chunk_unwait: after every append or
 * state change, each waiter registered at that moment gets at least one
 * wake() that starts after it (several events may share one call), so on
 * each wake the reader consumes everything up to `filled` and checks the
 * state. Set wake and arg and zero the private fields before the first
 * chunk_wait (a designated initialiser does it); chunk_unwait leaves them
 * zeroed again, so a waiter can be reused for another chunk.
 */
struct chunk_waiter {
	void (*wake)(void *arg);
	void *arg;
	struct list_node link;            /* private */
	bool queued;                      /* private: an event is due to it */
	bool calling;                     /* private: wake() is running now */
	bool linked;                      /* private: on a chunk's list */
};

struct chunk {
	/* read-only after creation */
	struct chunk_id id;
	size_t len;                  /* final length in bytes */
	/* Where the bytes are: len bytes of the heap at data, or (data NULL)
	 * at off in the arena (chunk_fd). Read them with chunk_read. */
	char *data;
	uint64_t off;
	struct arena_window *win;    /* private: the arena's window holding off */

	_Atomic size_t filled;
	/* A chunk filled as two parts (chunk_split): split is the first byte
	 * of the second part (0: one part, in order), [split, tail) the bytes
	 * it has; once the first part reaches split, filled jumps to tail and
	 * both grow together. */
	_Atomic size_t split, tail;
	_Atomic int state;           /* enum chunk_state */
	/* Set by the last reader to let go: true when it left before it had
	 * what it wanted (its client went away). A producer whose chunk nobody
	 * holds any more stops only then: a reader that took its few bytes and
	 * left still wants the chunk cached for the next one. */
	_Atomic bool abandoned;
	/* The hop at which its producer asks another node of a cluster for
	 * the bytes (cluster/peer.h), 0 while it asks S3: who may wait for it
	 * (obj_may_wait). Set before the producer asks. */
	_Atomic unsigned ask_hop;
	/* How many still want it (readers, read-ahead, warming jobs: see
	 * store/object.h), as opposed to merely holding a reference. */
	_Atomic int wants;
	/* RAM hits: times the RAM tier gave it, READY, to a reader (ram_lookup). */
	_Atomic unsigned hits;
	_Atomic bool mapped_in;      /* private: its pages are in the arena window's page tables */

	/* private to store/ */
	_Atomic int refs;
	pthread_mutex_t lock;        /* guards waiters and their private fields */
	pthread_cond_t woke;         /* a wake() call finished (for chunk_unwait) */
	struct list waiters;         /* struct chunk_waiter */
	int fail_reason;             /* negative errno-style, or an HTTP status */
	void *tier_priv;             /* the RAM tier's bookkeeping */
	uint64_t gen;                /* NVMe time order, taken when it was created */

	/* The producer's copy of an arena chunk's bytes (chunk_keep), or
	 * NULL: appends land here first and reach the arena in one write
	 * per flush. Written by the producer's thread only; after READY, by
	 * whoever chunk_unkeep()s it, once. */
	_Atomic(char *) kept;
	size_t staged;               /* producer: bytes in kept, >= filled */
	int flush_err;               /* producer: a failed flush's -errno */
	bool pending;                /* producer: on its thread's flush list */
	struct chunk *pending_next;
};

/* A new chunk in state FILLING with refs = 1 and len bytes allocated.
 * Returns NULL on allocation failure. */
struct chunk *chunk_new(const struct chunk_id *id, size_t len);
void chunk_ref(struct chunk *c);
/* Bytes of chunk data allocated now, process-wide (every chunk from
 * chunk_new until its last reference goes): what readers, fetches and the
 * RAM tier together hold. */
uint64_t chunk_live_bytes(void);
/* Of those, the bytes whose chunks keep them in the arena (a memfd, not
 * in the process's RSS), page-rounded, now and at most since start. */
uint64_t chunk_arena_bytes(void);
uint64_t chunk_arena_peak_bytes(void);
void chunk_unref(struct chunk *c);
int chunk_refs(const struct chunk *c);

/* Registers w (a no-op if it already is); if the chunk already changed
 * since the caller last looked (chunk_progress > seen, or not FILLING)
 * w->wake is called on this thread before this returns, so a waiter never
 * misses the last event. */
void chunk_wait(struct chunk *c, struct chunk_waiter *w, size_t seen);
/* Removes w if registered. When it returns, w->wake is not running and
 * will not be called again for this registration, even if a producer on
 * another thread was waking the waiters at that moment (this call waits
 * for that wake() to return); w may then be freed. Never call it from
 * inside w->wake. */
void chunk_unwait(struct chunk *c, struct chunk_waiter *w);

/* Reader side: the bytes readable now, and the state (acquire loads, so
 * bytes [0, chunk_filled()) are readable once read). */
static inline size_t chunk_filled(struct chunk *c)
{
	return atomic_load_explicit(&c->filled, memory_order_acquire);
}
/* Grows with every append to either part (filled, for a chunk of one
 * part): read before looking at the bytes, it is the `seen` of chunk_wait. */
static inline size_t chunk_progress(struct chunk *c)
{
	return atomic_load_explicit(&c->tail, memory_order_acquire) +
	       atomic_load_explicit(&c->filled, memory_order_acquire);
}
/* The end of the bytes readable from off on: [off, end) may be read; off
 * when byte off is not there yet. */
static inline size_t chunk_readable(struct chunk *c, size_t off)
{
	size_t f = atomic_load_explicit(&c->filled, memory_order_acquire);
	if (off < f)
		return f;
	size_t s = atomic_load_explicit(&c->split, memory_order_acquire);
	size_t t = s && off >= s ? atomic_load_explicit(&c->tail, memory_order_acquire) : 0;
	return off < t ? t : off;
}
static inline enum chunk_state chunk_state(struct chunk *c)
{
	return (enum chunk_state)atomic_load_explicit(&c->state, memory_order_acquire);
}

/* Whether c's bytes are in the arena (chunk_fd), not on the heap. */
static inline bool chunk_in_arena(const struct chunk *c)
{
	return c->data == NULL;
}
/* Copies bytes [off, off + n) of c, all readable (chunk_readable), to out.
 * 0, or -errno (a pread of the arena failed). */
int chunk_read(struct chunk *c, size_t off, void *out, size_t n);
/* The arena's fd and c's offset in it; -1 when c's bytes are on the heap
 * (c->data). The fd is the process's. Only bytes below chunk_filled() are
 * c's, and only while a reference to c is held. */
int chunk_fd(const struct chunk *c, uint64_t *off);
/* A READY arena chunk's bytes, mapped read-only, valid while a reference
 * to c is held; the first call maps its pages in. NULL if the mapping
 * failed. For a response without a copy: the socket's send copies from
 * it. */
const void *chunk_map(struct chunk *c);
/* All of a READY chunk's bytes in memory: c->data, or a copy in a buffer
 * of the calling thread's, valid until its next chunk_view or
 * chunk_stage. NULL if the copy failed. */
const void *chunk_view(struct chunk *c);
/* That buffer: at least len bytes, page-aligned, kept for the calling
 * thread's next calls and freed when it ends. NULL on allocation failure. */
void *chunk_scratch(size_t len);

/* Producer side. append copies n bytes at filled (n <= len - filled) and
 * wakes the waiters; 0, or -errno when the arena refused the bytes (the
 * memory cgroup's limit): nothing is published then, and the producer
 * fails the chunk. Readers see bytes only after append has published
 * them (release/acquire on filled). finish sets READY (filled must equal
 * len) or FAILED (reason recorded) and wakes them. */
int chunk_append(struct chunk *c, const void *data, size_t n);
/* A buffer for a producer that fills a whole chunk at once (an NVMe
 * read): c->data itself, or the calling thread's buffer, as for
 * chunk_view. Write len bytes there, then chunk_append them (from
 * c->data, no copy is made). NULL on allocation failure. */
void *chunk_stage(struct chunk *c);
void chunk_set_state(struct chunk *c, enum chunk_state s, int reason);

/* Two producers on one thread: from here on chunk_append fills [0, at)
 * and chunk_append_tail [at, len), each in order; the chunk is complete
 * (filled == len) when both are. Only on a chunk nothing was appended to
 * and that is not kept (chunk_keep), with 0 < at < len. */
void chunk_split(struct chunk *c, size_t at);
int chunk_append_tail(struct chunk *c, const void *data, size_t n);
/* The end of the second part's bytes (split before the first arrives). */
size_t chunk_tail_produced(const struct chunk *c);

/*
 * A producer's copy (docs/cache.md, "Tiers"). A producer that appends in
 * many small pieces (a fetch: libcurl hands over 16 KiB at a time) gives
 * an arena chunk of at most CHUNK_KEEP_MAX bytes a buffer of its own:
 * chunk_keep. Appends are then copied there and written to the arena,
 * and published, by chunk_flush: on the producer's thread when it calls
 * chunk_flush_pending (a worker does before its loop sleeps), or
 * chunk_flush(c). The copy stays after READY so that the NVMe write reads
 * it (chunk_view) instead of the arena, and goes with chunk_unkeep.
 * Buffers come from a bounded pool; without one, appends write through.
 */
#define CHUNK_KEEP_MAX (256u << 10)
#define CHUNK_KEEP_POOL 128 /* copies at most, made as needed and kept */
void chunk_keep(struct chunk *c);
/* Bytes the producer has appended (filled, plus those not flushed). */
size_t chunk_produced(const struct chunk *c);
/* Writes c's unflushed bytes and publishes them: 0, or the -errno of this
 * or an earlier failed flush (then nothing more is published). */
int chunk_flush(struct chunk *c);
/* chunk_flush of every chunk the calling thread appended to since. */
void chunk_flush_pending(void);
/* Gives c's copy back to the pool. */
void chunk_unkeep(struct chunk *c);

#endif

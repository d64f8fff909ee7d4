/*
 * cread.h - a request's cached read (struct cread) and the body half of
 * the cached read path. Private to cache.c (the request's steps: which
 * requests, metadata, the answer) and cache_body.c (its bytes, chunk after
 * chunk); everything else goes through gateway/cache.h.
 */
#ifndef LARDER_CREAD_H
#define LARDER_CREAD_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/hdrs.h"
#include "gateway/range.h"
#include "store/chunk.h"
#include "store/meta.h"
#include "store/object.h"

struct req;
struct fetch;

/* The cached read path's part of a request. READAHEAD_MAX is also the
 * largest LARDER_READAHEAD config/settings.c accepts. */
#define READAHEAD_MAX 16
struct cread {
	bool active;                    /* this GET/HEAD is answered from the cache */
	bool head;
	struct obj_meta *meta;          /* the object, once known */
	bool meta_loaded;               /* learnt or revalidated for this request: a miss */
	struct fetch *meta_fetch;       /* the metadata fetch this request owns */
	struct chunk_waiter waiter;     /* woken from any thread (wake_async) */
	struct obj_meta_ask ask;        /* finding the metadata (store/object.h) */
	bool chunk_waiting;
	struct chunk *wait_chunk;       /* the chunk waited on */
	bool wake_queued;               /* on the worker's wake list (under wake_lock) */
	struct req *wake_next;

	/* Range: [start, end] of the object, want_range when a valid one came */
	bool want_range;
	struct byte_range range;        /* as asked (gateway/range.h) */
	uint64_t start, end;            /* resolved; end < size */
	uint64_t pos;                   /* next byte to send */
	struct chunk *cur;              /* wanted until the reader moves on or the request
	                                 * ends: an arena hit's sendfile reads it till then */
	uint64_t cur_index;
	uint64_t ahead_from;            /* 1 + the chunk read-ahead last started from */
	unsigned window;                /* chunks read ahead now: grows as the client reads */
	bool busy;                      /* refused a fetch: chunk memory is at its bound */
	struct chunk *ahead[READAHEAD_MAX];
	uint64_t ahead_index[READAHEAD_MAX];
	unsigned refetches;             /* of the chunk refetch_index - 1 */
	uint64_t refetch_index;
	unsigned restarts;              /* learnt again after a version change */
	bool miss;                      /* some byte came from upstream (this
	                                 * reader's fetch or one it waited on) */
	bool pass_through;              /* not cacheable after all: the pass-through serves it */
	uint32_t part;                  /* ?partNumber=N (0: none): answered once learnt */
	bool want_checksums;            /* x-amz-checksum-mode: ENABLED */

	/* upstream's own answer when the object could not be learnt (404, 403,
	 * ...): passed to the client unchanged */
	bool has_uerr;
	long uerr_status;
	struct hdrs uerr_headers;
	char *uerr_body;
	size_t uerr_len;
};

/* libmicrohttpd's buffer for a body copied out of the chunks. Each
 * callback response callocs one; jemalloc zeroes a recycled extent that
 * large by handing its pages back to the kernel (MADV_DONTNEED), so every
 * page the body touches faults again: why small answers skip it
 * (cread_small). */
#define BODY_BLOCK (256 * 1024)

/* ---- cache_body.c ---------------------------------------------------------- */

uint64_t cread_chunk_bytes(const struct req *r);
/* Whether every chunk of [start, end] is held (RAM or NVMe): a hit. */
bool cread_all_held(struct req *r, const struct obj_meta *m);
/* Whether chunk i, found failed, may be fetched again. */
bool cread_refetch_allowed(struct cread *c, uint64_t i);
/* Whether chunk memory plus extra would pass its bound. */
bool cread_over_budget(const struct req *r, uint64_t extra);
/* Moves the reader to chunk i (fetched if nobody has it; the read-ahead
 * follows). NULL when it could not be had (c->busy: chunk memory is at its
 * bound). */
struct chunk *cread_chunk_for(struct req *r, uint64_t i);
/* The range as an iovec over the chunks themselves, or NULL: when every
 * chunk of it is in memory with the range's bytes filled, and its reads
 * are not shaped. A chunk not whole yet makes the answer a miss (c->miss). */
struct MHD_Response *cread_zero_copy(struct req *r);
/* Whether the answer waits for all its bytes and goes out as an iovec
 * (cread_zero_copy) rather than streaming through libmicrohttpd's reader
 * callback: when the range lies in one chunk and is no longer than
 * BODY_BLOCK, the one block the callback would have copied it into. */
bool cread_small(const struct req *r);
/* libmicrohttpd's reader callback of a body (cls: the request). */
ssize_t cread_read(void *cls, uint64_t pos, char *out, size_t max);
/* Lets go of the chunks held; gave_up: the reader left before it had
 * what it wanted. cread_release: it did not give up. */
void cread_release_as(struct req *r, bool gave_up);
void cread_release(struct req *r);

#endif

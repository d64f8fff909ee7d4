/*
 * fetch.h - one upstream GET that fills the cache: either the first read of
 * an object (chunk 0 as a range, which also teaches its size, ETag and
 * headers) or one chunk of a known version (a range with If-Match, so
 * chunks of different versions never mix).
 *
 * A fetch belongs to the worker that started it and outlives any one
 * reader: a reader that disconnects leaves it running for the others. It
 * stops early when nobody holds its chunk any more, retries 5xx and
 * SlowDown with capped exponential backoff and jitter (resuming from the
 * bytes it has), and reports failure to every waiter through the chunk.
 */
#ifndef LARDER_FETCH_H
#define LARDER_FETCH_H

#include <curl/curl.h>
#include <stdbool.h>
#include <stdint.h>

#include "gateway/server.h"
#include "store/chunk.h"
#include "store/meta.h"

#define FETCH_MAGIC 0x66657463u

/* Why a chunk failed (chunk->fail_reason). */
#define FETCH_ERR_UPSTREAM  (-1001) /* upstream error or unreachable after retries */
#define FETCH_ERR_CHANGED   (-1002) /* 412 on If-Match: the object changed */
#define FETCH_ERR_CANCELLED (-1003) /* nobody wanted it any more */

struct req;
struct fetch;

/* Starts learning (bucket, key): GET chunk 0 as a range. revalidate: the
 * expired entry's ETag to send as If-None-Match, or NULL. owner: the reader
 * whose client gets upstream's own answer when it is not cacheable (404,
 * 403, ...); it may go away first (fetch_disown). Returns NULL when the
 * transfer could not start. */
struct fetch *fetch_meta_start(struct worker *w, struct req *owner, const char *bucket,
                               const char *key, const char *revalidate);

/* The object version a reader's chunk fetches are for. */
struct fetch_producer {
	struct worker *w;
	const char *bucket, *key;
	const struct obj_meta *meta;
	unsigned hop;                /* as fetch_chunk_start's */
};
/* An obj_produce_fn (store/object.h): fetch_chunk_start with arg a struct
 * fetch_producer; FETCH_ERR_UPSTREAM when it could not start. */
int fetch_produce(void *arg, struct chunk *c, uint64_t index);

/* Starts producing chunk c (a reference is taken) of the object version m.
 * hop: 0 for this node's own readers, else the hop of the peer request
 * that wants it (see cluster/peer.h). */
int fetch_chunk_start(struct worker *w, struct chunk *c, const char *bucket, const char *key,
                      const struct obj_meta *m, uint64_t index, unsigned hop);

/* The owner is gone: its fetch goes on for the other readers. */
void fetch_disown(struct fetch *f);

/* curlev done callback for a fetch's transfer. */
void fetch_curl_done(struct fetch *f, CURLcode result);

/* Shutdown: stops every fetch of the worker. */
void fetch_abort_all(struct worker *w);

#endif

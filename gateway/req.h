/*
 * req.h - one client request, as the rest of gateway/ sees it: opaque.
 * Its fields are the request module's own (request.c, authn.c,
 * passthrough.c: gateway/request_internal.h); the others go through these
 * functions, defined in request.c. Private to gateway/.
 */
#ifndef LARDER_REQ_H
#define LARDER_REQ_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/hdrs.h"
#include "gateway/s3err.h"
#include "gateway/s3req.h"
#include "gateway/server.h"

struct req;
struct cread;    /* the cached read of a request: private to cache.c (gateway/cread.h) */
struct list_req; /* a listing the LIST cache may answer or keep (listcache.c) */

/* For a callback handed a request as a void *: assert(req_valid(r)). */
bool req_valid(const struct req *r);

/* What the rest of gateway/ reads and sets of a request. */
struct worker *req_worker(const struct req *r);
struct gw *req_gw(const struct req *r);
const struct s3req *req_s3(const struct req *r);
const char *req_bucket(const struct req *r);
const char *req_key(const struct req *r);
const char *req_query(const struct req *r);
const char *req_method(const struct req *r);
const char *req_id(const struct req *r);
unsigned req_peer_hop(const struct req *r);
bool req_has_body(const struct req *r);
/* signature (or anonymous grant) and policy passed */
bool req_authorized(const struct req *r);
/* SigV2 or SigV4 query auth */
bool req_presigned(const struct req *r);
/* false once libmicrohttpd is done with the connection */
bool req_alive(const struct req *r);
struct MHD_Connection *req_connection(const struct req *r);
bool req_failed(const struct req *r);
bool req_responded(const struct req *r);
/* its client left while it waited (request.c, gone_cb): a body's reader ends the
 * answer (MHD_CONTENT_READER_END_WITH_ERROR) */
bool req_gone(const struct req *r);
int req_status_sent(const struct req *r);
void req_count_out(struct req *r, uint64_t n);
/* upstream's answer, as far as it came (status 0: none yet) */
long req_upstream_status(const struct req *r);
void req_set_upstream_status(struct req *r, long s);
/* The other nodes are being told of what this write changed (the
 * cluster's ticket): the end of its answer waits until they are
 * (passthrough.c, "The end of a write's answer"). */
void req_telling_others(struct req *r, uint64_t ticket);
/* A read that gave up waiting for the cluster's read barrier (request.c,
 * "The read barrier"): it must not be answered from what this node trusts
 * without asking (cache.c revalidates, the LIST cache is not read). */
bool req_barrier_lapsed(const struct req *r);
const struct hdrs *req_upstream_headers(const struct req *r);
/* its Content-Length; MHD_SIZE_UNKNOWN when not known */
uint64_t req_upstream_length(const struct req *r);
/* A 416 that names the object's size (Content-Range, <ActualObjectSize>). */
void req_err_object_size(struct req *r, uint64_t size);
/* Queues resp (and lets go of it) as the answer, with status.
 * libmicrohttpd keeps a connection's request and the header block of its
 * answer in one pool of LARDER_MAX_HEADER_SIZE + REQ_POOL_EXTRA bytes, and
 * closes the connection with no answer at all when the block does not
 * fit. The request holds its own bytes there and a record of
 * REQ_POOL_PER_HEADER bytes per header and per query parameter. An
 * S3-compatible upstream can send that many header bytes (S3 allows 2 KiB
 * of user metadata): an answer whose headers do not fit beside the request
 * is let go, and r answered 500 InternalError, saying so, instead. An error
 * that does not fit either (a request refused as too large can fill the
 * pool itself) is written to the socket past libmicrohttpd, and the
 * connection closed (req_respond_error). */
#define REQ_POOL_EXTRA (16 * 1024)
#define REQ_POOL_PER_HEADER 64
enum MHD_Result req_queue_response(struct req *r, unsigned status, struct MHD_Response *resp);
/* The cached read (cache.c), once cache_wants said yes; NULL before. */
struct cread *req_cread(const struct req *r);
void req_set_cread(struct req *r, struct cread *c);
/* The listing the LIST cache answers or keeps (listcache.c); NULL if none. */
struct list_req *req_list(const struct req *r);
void req_set_list(struct req *r, struct list_req *l);

/* Helpers request.c lends to the rest of gateway/. */
void req_ref(struct req *r);
void req_unref(struct req *r);
void req_wake(struct req *r);     /* resume the client connection if suspended */
/* Wakes r in s seconds (on r's timer, which body shaping shares): a wait polled. */
void req_poll_in(struct req *r, double s);
void req_suspend(struct req *r);
void req_fail(struct req *r, enum s3err e, const char *msg);
/* The body is ended short by larder, for why (a static string: the
 * access log's error, e.g. "upstream-error"), not by the client. */
void req_cut(struct req *r, const char *why);
/* Before r first goes upstream (a miss, a pass-through): takes one of its
 * key's max_upstream_requests slots, held until r ends. False (and r
 * failed with 503 SlowDown) when the key has them all. */
bool req_upstream_take(struct req *r);
/* The same for a cached read before its answer, which waits for a slot
 * rather than being refused at once, as a fetch waits for its prefix's
 * window: false while it waits (req_upstream_waits; it is woken to ask
 * again: its caller suspends it), and false with r failed (503 SlowDown)
 * once it waited LARDER_UPSTREAM_SLOT_WAIT_MS. */
bool req_upstream_wait(struct req *r);
bool req_upstream_waits(const struct req *r);
/* Stops waiting for a slot (it no longer needs one now); no-op when not. */
void req_upstream_unwait(struct req *r);
/* A slot if there is one free, never refused: for a reader whose answer
 * has begun (it goes on without), and read-ahead (skipped without). */
bool req_upstream_try(struct req *r);
/* For one read-ahead fetch of r, when r's key has max_upstream_requests:
 * takes a slot of the key for that fetch alone, returning the key id it is
 * given back by (limits_upstream_give) when the fetch ends; NULL when none
 * is free or requests wait for one (the chunk is fetched when the reader
 * gets there). Also NULL, taking nothing, for a key without a limit and for
 * another node's request: req_upstream_capped says which. */
bool req_upstream_capped(const struct req *r);
const char *req_upstream_ahead(struct req *r);
/* The store charge of r's cache fills: its key's (limits_charge), 0 for an
 * unsigned request or another node's. */
unsigned req_charge(const struct req *r);
/* Of want response bytes, how many r's key's max_bytes_per_second lets it
 * send now (want when unlimited). 0: r is suspended until tokens return. */
size_t req_shape(struct req *r, size_t want);
/* True when r's key has a max_bytes_per_second (its body goes through req_shape). */
bool req_shaped(const struct req *r);
/* Adds <name>text</name> (text escaped) to the error's XML, after the
 * elements every error has (S3's <Region>, <HeadersNotSigned>,
 * <RangeRequested>...). */
void req_err_element(struct req *r, const char *name, const char *text);
enum MHD_Result req_respond_error(struct req *r);
const char *req_header(struct req *r, const char *name);
/* Whether Range, If-Match, If-None-Match, If-Modified-Since or
 * If-Unmodified-Since came more than once (req_header gives the first). */
bool req_repeats_read_header(const struct req *r);
void req_add_common_headers(struct req *r, struct MHD_Response *resp);
/* MHD_add_response_header that keeps a header with an empty value. */
void req_add_response_header(struct MHD_Response *resp, const char *name, const char *value);
/* Stored header lines ("name: value\n": obj_meta.headers, .checksums) as
 * headers of resp: only those of the n names (only = true), or all but
 * them (false). NULL entries in names are ignored. */
void req_add_header_lines(struct MHD_Response *resp, const char *lines,
                          const char *const *names, size_t n, bool only);
/* Header lines ("name: value\n") the error answer carries too, as S3's 404
 * for a delete marker names it. Borrowed: valid until req_respond_error. */
void req_err_headers(struct req *r, const char *lines);

#endif

/*
 * req.h - one client request, as the pass-through (proxy.c) and the
 * cached read path (cache.c) share it. Private to gateway/.
 *
 * Every field belongs to the worker thread that accepted the request,
 * except where a comment says otherwise.
 */
#ifndef LARDER_REQ_H
#define LARDER_REQ_H

#include <curl/curl.h>
#include <microhttpd.h>
#include <openssl/evp.h>
#include <stdbool.h>
#include <stdint.h>

#include "auth/chunked.h"
#include "gateway/range.h"
#include "gateway/s3err.h"
#include "gateway/s3req.h"
#include "gateway/server.h"
#include "gateway/upstream.h"
#include "store/chunk.h"
#include "store/meta.h"
#include "store/object.h"

#define REQ_MAGIC 0x6c617272u
#define PIPE_CAP (256 * 1024)
#define DELETE_BODY_MAX (2 * 1024 * 1024) /* 1,000 keys of 1,024 bytes, in XML */
#define MAX_UPSTREAM_HEADER_BYTES (64 * 1024)

/* A bounded byte queue: data lives in [off, len). */
struct pbuf {
	char *p;
	size_t off, len;
};

enum body_mode { BODY_NONE, BODY_RAW, BODY_CHUNKED };

/* The cached read path's part of a request (cache.c). */
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
	struct chunk *cur;
	uint64_t cur_index;
	uint64_t ahead_from;            /* 1 + the chunk read-ahead last started from */
	unsigned window;                /* chunks read ahead now: grows as the client reads */
	bool busy;                      /* refused a fetch: chunk memory is at its bound */
	struct chunk *ahead[READAHEAD_MAX];
	uint64_t ahead_index[READAHEAD_MAX];
	unsigned refetches;             /* of the chunk refetch_index - 1 */
	uint64_t refetch_index;
	unsigned restarts;              /* learnt again after a version change */
	bool miss;                      /* some byte came from upstream */
	bool pass_through;              /* not cacheable after all: proxy.c serves it */
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

struct req {
	unsigned magic;
	int refs;
	struct worker *w;
	struct MHD_Connection *conn;    /* NULL once MHD is done with it */
	struct req *prev, *next;        /* worker's live list */
	struct req *next_pending;
	bool in_pending;
	char id[24];
	double t_start;
	char *uri;                      /* raw: path?query */
	char *path, *query;             /* raw parts of uri */
	char method[24];
	bool started;
	unsigned peer_hop;              /* a request from another node: its hop (0: a client) */
	bool presigned_v2;              /* drop its AWSAccessKeyId/Signature/Expires upstream */
	bool presigned;                 /* SigV2 or SigV4 query auth: x-amz-* params are headers */

	char key_id[129];
	bool authorized;                /* signature (or anonymous grant) and policy passed */
	struct s3req s3;
	bool has_err;
	enum s3err err;
	char err_msg[256];
	struct buf err_extra;           /* XML elements S3 adds to this error (<Region>...) */
	bool err_sized;                 /* a 416 that names the object's size: */
	uint64_t err_object_size;       /* sent as Content-Range and <ActualObjectSize> */

	/* request body */
	enum body_mode body;
	int64_t up_len;                 /* bytes upstream will receive */
	uint64_t up_queued;             /* bytes put into upbuf so far */
	uint64_t up_sent;               /* bytes curl has taken */
	uint64_t bytes_in;              /* raw body bytes from the client */
	EVP_MD_CTX *sha;                /* signed payload: running SHA-256 */
	char want_sha[65];
	struct ack_decoder *ack;
	bool client_body_done;
	bool body_verified;             /* the last byte may go upstream */
	/* DeleteObjects under a prefix grant: the body is held whole until
	 * every key in it is checked against the grants (delete_body). */
	bool check_delete;
	struct buf delete_body;
	struct pbuf upbuf;

	/* upstream */
	CURL *easy;
	bool easy_running;
	bool read_paused, write_paused;
	struct curl_slist *slist;
	struct up_target target;
	char *up_query;                 /* query sent upstream */
	int retries;
	bool retry;                     /* region learnt: send again */
	long ustatus;
	struct hdrs uresp;              /* upstream response headers */
	size_t uresp_bytes;
	bool uhdrs_done;
	bool udone;
	CURLcode uresult;
	char curl_err[CURL_ERROR_SIZE];
	struct pbuf downbuf;
	uint64_t resp_len;              /* MHD_SIZE_UNKNOWN when not known */

	struct cread cache;
	struct list_req *list;          /* a listing the LIST cache may answer or keep (listcache.c) */
	bool bypass_logged;             /* a GET/HEAD of an object not answered from the cache */

	/* client response */
	bool responded;
	bool suspended;
	int status_sent;
	uint64_t bytes_out;
};

/* Helpers proxy.c lends to cache.c. */
void req_ref(struct req *r);
void req_unref(struct req *r);
void req_wake(struct req *r);     /* resume the client connection if suspended */
void req_suspend(struct req *r);
void req_fail(struct req *r, enum s3err e, const char *msg);
/* Adds <name>text</name> (text escaped) to the error's XML, after the
 * elements every error has (S3's <Region>, <HeadersNotSigned>,
 * <RangeRequested>...). */
void req_err_element(struct req *r, const char *name, const char *text);
enum MHD_Result req_respond_error(struct req *r);
const char *req_header(struct req *r, const char *name);
void req_add_common_headers(struct req *r, struct MHD_Response *resp);
/* MHD_add_response_header that keeps a header with an empty value. */
void req_add_response_header(struct MHD_Response *resp, const char *name, const char *value);

/* cache.c: GET and HEAD of objects from the chunk cache. */
bool cache_wants(struct req *r);               /* after authentication */
void cache_begin(struct req *r);               /* first call */
enum MHD_Result cache_respond(struct req *r);  /* the body is in: answer (or wait) */
void cache_end(struct req *r);                 /* the request is over */
void cache_wake_cb(struct ev_loop *loop, ev_async *a, int revents); /* worker->wake_async */
void cache_owner_detach(struct req *owner, struct fetch *f);
void cache_owner_upstream_error(struct req *owner, long status, const struct hdrs *h,
                                const char *body, size_t len);
void cache_owner_pass_through(struct req *owner); /* upstream's answer is not cacheable */
/* The meta fetch claimed chunk 0 (c, with a want: obj_acquire): its owner
 * takes it over and returns true, unless it holds a chunk already. */
bool cache_owner_chunk(struct req *owner, struct chunk *c);
bool cache_passes(struct req *r);              /* proxy.c serves it after all */
void cache_learn(struct req *r);               /* upstream's headers: a part, checksums */
/* Forgets objects of bucket: the key (exact) or every key under prefix:
 * their chunks in every tier and their metadata, so the next read goes
 * upstream. Thread-safe. *objects gets how many were known. Returns 0. */
int cache_purge(struct gw *gw, const char *bucket, const char *prefix, bool exact,
                uint64_t *objects);

/* Writes (PUT, POST, DELETE, copy) that succeeded drop what the cache
 * knows of the key; a DeleteObjects drops the bucket's metadata. */
void cache_invalidate(struct req *r);

#endif

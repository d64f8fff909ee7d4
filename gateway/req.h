/*
 * req.h - one client request, as request.c, authn.c, passthrough.c and the
 * cached read path (cache.c, gateway/cache.h) share it. Private to gateway/.
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
#include "net/transfer.h"
#include "store/chunk.h"
#include "store/meta.h"

#define REQ_MAGIC 0x6c617272u
#define PIPE_CAP (256 * 1024)
#define DELETE_BODY_MAX (2 * 1024 * 1024) /* 1,000 keys of 1,024 bytes, in XML */
#define MAX_UPSTREAM_HEADER_BYTES (64 * 1024)

struct cread; /* the cached read of a request: private to cache.c (gateway/cread.h) */

/* A bounded byte queue: data lives in [off, len). */
struct pbuf {
	char *p;
	size_t off, len;
};

enum body_mode { BODY_NONE, BODY_RAW, BODY_CHUNKED };

struct req {
	unsigned magic;
	int refs;
	struct worker *w;
	struct MHD_Connection *conn;    /* NULL once MHD is done with it */
	struct req *prev, *next;        /* worker's live list */
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

	/* upstream: the pass-through's exchange (its response headers in up.resp) */
	struct transfer up;
	struct up_target target;
	char *up_query;                 /* query sent upstream */
	long ustatus;                   /* upstream's status, for the access log */
	bool uhdrs_done;                /* its headers are in: the client may be answered */
	bool udone;
	CURLcode uresult;
	struct pbuf downbuf;
	uint64_t resp_len;              /* MHD_SIZE_UNKNOWN when not known */

	struct cread *cache;            /* the cached read (cache.c), once cache_wants said yes */
	struct list_req *list;          /* a listing the LIST cache may answer or keep (listcache.c) */
	bool bypass_logged;             /* a GET/HEAD of an object not answered from the cache */

	/* client response */
	bool responded;
	bool suspended;
	int status_sent;
	uint64_t bytes_out;
};

/* What the cached read path (cache.c, cache_body.c) reads and sets of a
 * request: through these rather than the fields, so that struct req can
 * become the request module's own. */
static inline struct worker *req_worker(const struct req *r) { return r->w; }
static inline struct gw *req_gw(const struct req *r) { return r->w->gw; }
static inline const struct s3req *req_s3(const struct req *r) { return &r->s3; }
static inline const char *req_bucket(const struct req *r) { return r->s3.bucket; }
static inline const char *req_key(const struct req *r) { return buf_cstr(&r->s3.key); }
static inline const char *req_query(const struct req *r) { return r->query; }
static inline const char *req_method(const struct req *r) { return r->method; }
static inline const char *req_id(const struct req *r) { return r->id; }
static inline unsigned req_peer_hop(const struct req *r) { return r->peer_hop; }
static inline bool req_has_body(const struct req *r) { return r->body != BODY_NONE; }
/* false once libmicrohttpd is done with the connection */
static inline bool req_alive(const struct req *r) { return r->conn != NULL; }
static inline struct MHD_Connection *req_connection(const struct req *r) { return r->conn; }
static inline bool req_failed(const struct req *r) { return r->has_err; }
static inline bool req_responded(const struct req *r) { return r->responded; }
static inline int req_status_sent(const struct req *r) { return r->status_sent; }
static inline void req_count_out(struct req *r, uint64_t n) { r->bytes_out += n; }
/* upstream's answer, as far as it came (status 0: none yet) */
static inline long req_upstream_status(const struct req *r) { return r->ustatus; }
static inline void req_set_upstream_status(struct req *r, long s) { r->ustatus = s; }
static inline const struct hdrs *req_upstream_headers(const struct req *r) { return &r->up.resp; }
/* its Content-Length; MHD_SIZE_UNKNOWN when not known */
static inline uint64_t req_upstream_length(const struct req *r) { return r->resp_len; }
/* A 416 that names the object's size (Content-Range, <ActualObjectSize>). */
static inline void req_err_object_size(struct req *r, uint64_t size)
{
	r->err_sized = true;
	r->err_object_size = size;
}
/* Queues resp (and lets go of it) as the answer, with status. */
static inline enum MHD_Result req_queue_response(struct req *r, unsigned status,
                                                 struct MHD_Response *resp)
{
	r->status_sent = (int)status;
	enum MHD_Result ret = MHD_queue_response(r->conn, status, resp);
	MHD_destroy_response(resp);
	r->responded = true;
	return ret;
}

/* Helpers request.c lends to the rest of gateway/. */
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

#endif

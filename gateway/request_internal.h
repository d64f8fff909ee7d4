/*
 * request_internal.h - struct req, one client request: the request
 * module's own (request.c, authn.c, passthrough.c). The rest of gateway/
 * sees it opaque, through gateway/req.h.
 *
 * Every field belongs to the worker thread that accepted the request,
 * except where a comment says otherwise.
 */
#ifndef LARDER_REQUEST_INTERNAL_H
#define LARDER_REQUEST_INTERNAL_H

#include <curl/curl.h>
#include <openssl/evp.h>

#include "auth/chunked.h"
#include "base/hdrs.h"
#include "gateway/limits.h"
#include "gateway/range.h"
#include "gateway/shaper.h"
#include "gateway/req.h"
#include "gateway/upstream.h"
#include "net/transfer.h"
#include "store/chunk.h"
#include "store/meta.h"

#define REQ_MAGIC 0x6c617272u
#define PIPE_CAP (256 * 1024)
#define HELD_BODY_MAX (2 * 1024 * 1024) /* DeleteObjects: 1,000 keys of 1,024 bytes, in XML */

/* A bounded byte queue: data lives in [off, len). */
struct pbuf {
	char *p;
	size_t off, len;
};

enum body_mode {
	BODY_NONE,
	BODY_RAW,
	BODY_CHUNKED
};

struct req {
	unsigned magic;
	int refs;
	struct worker *w;
	struct MHD_Connection *conn; /* NULL once MHD is done with it */
	struct conn_slot *conn_slot; /* its connection's, until MHD is done with it */
	struct list_node link;       /* worker's live list */
	char id[24];
	double t_start;
	char *uri;          /* raw: path?query */
	char *path, *query; /* raw parts of uri */
	char method[24];
	bool started;
	unsigned peer_hop; /* a request from another node: its hop (0: a client) */
	bool presigned_v2; /* drop its AWSAccessKeyId/Signature/Expires upstream */
	bool presigned;    /* SigV2 or SigV4 query auth: x-amz-* params are headers */

	char key_id[129];  /* as the request names it (the access log's) */
	bool key_verified; /* its signature matched key_id's secret */
	bool from_peer;    /* another node's, its peer signature verified (key_id "peer:NODE") */
	bool anonymous;    /* unsigned: the anonymous key's grants apply */
	bool authorized;   /* signature (or anonymous grant) and policy passed */
	unsigned max_upstream; /* the key's max_upstream_requests (0: no limit) */
	bool upstream_slot;    /* holds one of them (limits.h) until it ends */
	struct limits_place key_place; /* waits for one (req_upstream_wait) */
	ev_timer key_timer;    /* asks again for it while it waits */
	struct list_node key_woken_link; /* on its worker's key_woken (under wake_lock) */
	bool key_woken;
	double key_wait_until; /* when it stops waiting: 503 SlowDown */
	uint64_t max_rate;     /* the key's max_bytes_per_second (0: no limit) */
	ev_timer shape_timer;  /* wakes the response when the key's tokens return */
	ev_io gone_watch;      /* its connection while it waits (watch_gone) */
	bool gone;             /* the client left: close, answer nothing more */
	bool sweep_ended;      /* the last sweep saw its body unfinished, the socket at its end */
	uint64_t sweep_bytes_in; /* and bytes_in then (sweep_left) */
	struct s3req s3;
	bool has_err;
	enum s3err err;
	char err_msg[256];
	struct buf err_extra;     /* XML elements S3 adds to this error (<Region>...) */
	bool err_sized;           /* a 416 that names the object's size: */
	uint64_t err_object_size; /* sent as Content-Range and <ActualObjectSize> */
	const char *err_headers;  /* req_err_headers: borrowed, NULL when none */

	/* request body */
	enum body_mode body;
	int64_t up_len;     /* bytes upstream will receive */
	uint64_t up_queued; /* bytes put into upbuf so far */
	uint64_t up_sent;   /* bytes curl has taken */
	uint64_t bytes_in;  /* raw body bytes from the client */
	int64_t in_len;     /* how many it said it sends (Content-Length), -1: chunked */
	EVP_MD_CTX *sha;    /* signed payload: running SHA-256 */
	char want_sha[65];
	struct ack_decoder *ack;
	bool client_body_done;
	bool write_begun;   /* cache_write_begins ran (the first pass_start) */
	bool body_verified; /* the last byte may go upstream */
	/* Upstream starts only once the body is verified: an aws-chunked body
	 * of no bytes leaves no last byte to hold back, and curl would send
	 * the empty upload at once. */
	bool start_verified;
	/* An aws-chunked body whose trailer names a checksum goes upstream
	 * framed again as STREAMING-UNSIGNED-PAYLOAD-TRAILER, with that
	 * checksum in its trailer (passthrough.c, pass_plan_trailer); NULL
	 * for every other body. */
	struct reframe *reframe;
	/* A body held whole (held_body) until it is checked: DeleteObjects
	 * under a prefix grant (every key in it against the grants), and
	 * RestoreObject (no output location: authn_check_body). */
	enum body_check { CHECK_NONE, CHECK_DELETE, CHECK_RESTORE } body_check;
	struct buf held_body;
	struct pbuf upbuf;

	/* upstream: the pass-through's exchange (its response headers in up.resp) */
	struct transfer up;
	struct shaper_slot slot;   /* its place in the S3 prefix's window (passthrough.c) */
	ev_timer slot_timer;       /* waiting for that place */
	bool slowed;               /* upstream said 503: answer dropped, request retried */
	/* An error answer (or a dropped 503's) body: gathered in downbuf up to
	 * S3ERR_UPSTREAM_BODY_MAX bytes, for S3ERR_UPSTREAM_WAIT_S after its
	 * headers, and only then answered (pass_error_answer). */
	bool err_gather;
	bool err_cut;              /* its body went past that bound */
	bool err_made;             /* the client gets s3err_upstream_xml's document */
	size_t err_len;            /* its bytes read so far */
	double err_since;          /* when its headers came */
	struct up_target target;
	char *up_query;  /* query sent upstream */
	long ustatus;    /* upstream's status, for the access log */
	bool uhdrs_done; /* its headers are in: the client may be answered */
	bool udone;
	CURLcode uresult;
	bool orphan;     /* a write its client left, going on to S3's answer (pass_outlives) */
	struct hdrs kept; /* an orphan's request headers, for req_header (outlives_client) */
	struct pbuf downbuf;
	uint64_t resp_len; /* MHD_SIZE_UNKNOWN when not known */
	uint64_t told_ticket; /* a write's invalidation for the other nodes (cluster_publish_...) */
	double told_wait;     /* when its answer's end began to wait for it (0: not yet) */
	uint64_t barrier;     /* a read waiting for the cluster's read barrier (0: none) */
	double barrier_since; /* when it began to */
	bool barrier_lapsed;  /* it gave up waiting: what this node trusts is revalidated */

	struct cread *cache;   /* the cached read (cache.c), once cache_wants said yes */
	struct list_req *list; /* a listing the LIST cache may answer or keep (listcache.c) */
	bool bypass_logged;    /* a GET/HEAD of an object not answered from the cache */
	const char *cut;       /* why larder ended the body early (req_cut), or NULL */
	bool s3_parsed;        /* s3 holds what it asks (else its operation is unknown) */
	bool close_after;      /* its framing is in doubt: answer, then close */
	bool repeats_read_header; /* Range or an If-* header came twice (cache.c) */

	/* client response */
	bool responded;
	bool suspended;
	int status_sent;
	uint64_t bytes_out;
};

#endif

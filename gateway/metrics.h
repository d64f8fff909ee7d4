/*
 * metrics.h - process-wide counters behind GET /metrics (Prometheus text
 * format) and GET /admin/stats (JSON).
 *
 * One registry per process, shared by every worker and the admin thread:
 * plain atomic counters, no locks on the request path. Per-bucket and
 * per-client-key rows live in bounded tables (METRICS_MAX_ROWS each); names
 * past the bound are added to a row named "(other)". Gauges (tier usage,
 * entries, in-flight fetches) are not kept here: the caller reads them at
 * render time and passes them in (struct metrics_gauges).
 *
 * Every function is thread-safe except metrics_reset (tests only).
 */
#ifndef LARDER_METRICS_H
#define LARDER_METRICS_H

#include <curl/curl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "cluster/placement.h"
#include "cluster/directory.h"
#include "gateway/lookahead.h"

struct store_stats;
struct pin_info;
struct json_t;

#define METRICS_MAX_ROWS 1024
#define METRICS_OTHER "(other)"          /* the row past METRICS_MAX_ROWS */
#define METRICS_ANONYMOUS "(anonymous)"  /* the client row of unsigned requests */
/* The client row of requests larder could not tie to a key: their key id
 * names none, their signature is not its secret's, or they were refused
 * before it was read (max_connections, a malformed request). */
#define METRICS_UNAUTHENTICATED "(unauthenticated)"

/*
 * The S3 operation a request is, for the requests_total{op} label:
 * GetObject, HeadObject, PutObject, CopyObject, DeleteObject, UploadPart,
 * CreateMultipartUpload, CompleteMultipartUpload, ListObjectsV2,
 * ListObjects, ListBuckets, or Other. target is an enum s3_target
 * (gateway/s3req.h); query is the raw query without '?' (may be NULL);
 * copy_source: the request has an x-amz-copy-source header.
 * Returns a static string.
 */
const char *s3_operation(const char *method, int target, const char *query, bool copy_source);

/*
 * One client request is over (called beside its access-log line).
 * op: from s3_operation (anything else counts as "Other"); status: sent to
 * the client, 0 when none was; bucket: NULL for the service; key_id: NULL
 * for an unsigned request; cache: "hit", "miss", "bypass" or NULL (not an
 * object read). Bytes are body bytes.
 */
void metrics_request(const char *op, int status, const char *bucket, const char *key_id,
                     const char *cache, uint64_t bytes_out, uint64_t bytes_in);

/*
 * One upstream transfer is over. status: upstream's HTTP status, 0 when
 * the transfer failed (no response, or it broke off): counted as an
 * error, as is a 5xx. bytes: response body bytes received; seconds: the
 * transfer's total time; retry: it repeated an earlier attempt.
 */
void metrics_upstream(int status, uint64_t bytes, double seconds, bool retry);

/* The same from a finished curl handle: bytes and time from curl, and a
 * failed result (other than larder cancelling it itself) counts as status 0.
 * One larder stopped (the client left: CURLE_ABORTED_BY_CALLBACK) counts with
 * the status it had, and is no error.
 * peer: it asked another node of the cluster, not upstream: counted in the
 * peer figures (metrics_peer_fetch) instead. */
void metrics_upstream_curl(CURL *easy, long status, CURLcode result, bool retry, bool peer);

/* A chunk fetch this node sent to another node is over: its status (0: no
 * answer, or broken off) and the body bytes received. */
void metrics_peer_fetch(int status, uint64_t bytes);

/*
 * A request another node sent this node is over (called beside its
 * access-log line, instead of metrics_request: a peer's fetch for its own
 * client is not a client request here, and summed over the nodes the
 * client figures count each client request once). node: the peer's name;
 * cache as for metrics_request.
 */
void metrics_peer_served(const char *node, const char *cache, uint64_t bytes_out);

/* Upstream shaping (gateway/shaper.h): a 503 SlowDown answer; a request
 * that had to wait for a slot. */
void metrics_upstream_throttled(void);
void metrics_upstream_shaped_wait(void);
/* An object whose upstream names it by another ETag in each answer
 * (gateway/fetch.h: fetch_unsteady) was found, and is passed through. */
void metrics_upstream_unsteady_etag(void);

/* Values read at render time. */
/* A client key's share of the RAM tier (max_resident_bytes). */
struct metrics_resident {
	char key_id[129];
	uint64_t bytes;                   /* its chunks in the RAM tier */
	uint64_t max_bytes;               /* its limit; 0: none */
};

struct metrics_gauges {
	const struct store_stats *store;  /* NULL: no store figures */
	uint64_t meta_entries;            /* objects in the metadata cache */
	uint64_t open_connections;        /* client connections */
	bool clustered;                   /* in a cluster: the cluster_* figures below count */
	bool redis_up;
	uint64_t cluster_members;         /* live nodes this node sees, itself included */
	uint64_t invalidations_sent, invalidations_received, invalidations_rejected;
	uint64_t invalidations_dropped;   /* queued while Redis was down, past the bound */
	uint64_t invalidations_unacknowledged; /* a write went on without every node's ack */
	uint64_t resyncs;                 /* all metadata revalidated: invalidations maybe missed */
	uint64_t read_barriers;           /* reads that waited for the read barrier (joining) */
	uint64_t read_barriers_lapsed;    /* of those, reads that gave up on it and revalidated */
	uint64_t redis_reconnects;
	uint64_t members_rejected;        /* membership entries not signed with the secret */
	bool clock_known;                 /* clock_offset_ms was measured */
	double clock_offset_ms;           /* this node's wall clock minus Redis's */
	uint64_t directory_entries;       /* placement entries of all members */
	struct dir_stats dir;             /* this node's directory publishing */
	struct placement_counts lookups;  /* this node's directory lookups */
	uint64_t jobs_running, jobs_done, jobs_failed, jobs_cancelled; /* prefetch */
	uint64_t prefetch_bytes;          /* bytes warmed by the jobs still listed */
	uint64_t prefetch_bytes_total;    /* bytes warmed by every job since start */
	const struct pin_info *pins;      /* the pins (gateway/pins.h), n_pins of them */
	size_t n_pins;
	bool lookaheads;                  /* lookahead (gateway/lookahead.h) is on: its figures */
	struct lookahead_stats lookahead;
	const struct metrics_resident *resident; /* client keys charged, n_resident of them */
	size_t n_resident;
};

/* Appends the whole exposition (text format 0.0.4: # HELP, # TYPE, one
 * family after another) to out. Returns 0, or -E2BIG / -ENOMEM from out. */
int metrics_render_prometheus(struct buf *out, const struct metrics_gauges *g);

/*
 * The /admin/stats document, a new reference (json_decref it), or NULL when
 * out of memory:
 *   { "total": ROW, "buckets": { NAME: ROW, ... }, "clients": { ID: ROW, ... },
 *     "peers": { NODE: ROW, ... } (requests other nodes sent this one),
 *     "upstream": {...}, "peer_fetches": {requests, bytes, errors}, "cache": {...},
 *     "pins": [ {id, bucket, prefix | keys (a count), bytes, until (unix s)}, ... ],
 *     "resident": { KEY ID: {bytes, max_bytes (0: no limit)}, ... } }
 * ROW: requests, hits, misses, bypass, hit_ratio (hits / (hits + misses),
 * null when neither), bytes_served, upstream_bytes_saved (bytes served by
 * hits), bytes_received.
 */
struct json_t *metrics_stats_json(const struct metrics_gauges *g);

/* Forgets everything (tests; no other thread may be using the registry). */
void metrics_reset(void);

#endif

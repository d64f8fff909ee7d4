/*
 * upstream.h - the real S3 behind larder: where a request goes (endpoint,
 * addressing style, the bucket's region) and how it is signed (SigV4 with
 * the upstream credentials). Shared by all workers; thread-safe.
 *
 * It is also the S3 layer over the transfer engine (net/transfer.h), the
 * one place that knows how an S3 request is built (upstream_prepare),
 * which answers are worth a retry and when a request is sent again for a
 * bucket's real region (upstream_region_check). The pass-through, the
 * cache fills and the prefetch listings all go through it.
 */
#ifndef LARDER_UPSTREAM_H
#define LARDER_UPSTREAM_H

#include <stdbool.h>
#include <stddef.h>

#include <curl/curl.h>

#include "auth/creds.h"
#include "base/buf.h"
#include "base/hdrs.h"
#include "config/config.h"
#include "net/transfer.h"

struct upstream;

/* Reads the [upstream] settings; creds is borrowed and must outlive it.
 * Returns NULL with a message in err on a bad URL. */
struct upstream *upstream_create(const struct cfg *cfg, struct creds_provider *creds,
                                 char *err, size_t errlen);
void upstream_destroy(struct upstream *u);

/* Where a request goes. */
struct up_target {
	struct buf url;    /* full URL: scheme://host/path?query */
	struct buf host;   /* Host header value */
	struct buf path;   /* the encoded path sent (and signed) */
	char region[64];   /* region to sign for */
};
void up_target_init(struct up_target *t);
void up_target_fini(struct up_target *t);

/*
 * Fills t for bucket (NULL or "" for the service), key (decoded; NULL or ""
 * for the bucket) and raw query (sent as is; "" for none). The key is
 * encoded once with S3's rules, so what is signed is what is sent.
 * Returns 0 or -E2BIG.
 */
int upstream_target(struct upstream *u, const char *bucket, const char *key, const char *query,
                    struct up_target *t);

/*
 * Signs a request for upstream: appends X-Amz-Date, X-Amz-Security-Token
 * (temporary credentials) and Authorization to h, which must already hold
 * Host and X-Amz-Content-Sha256 and every other header to send.
 * Returns 0 or negative errno.
 */
int upstream_sign(struct upstream *u, const char *method, const struct up_target *t,
                  const char *query, struct hdrs *h);

/* Records a bucket's region, learnt from x-amz-bucket-region. Returns true
 * if that changed what larder knew (a request signed for the old region
 * may be retried). Only a region's name is taken (lower-case letters,
 * digits, inner hyphens): it becomes part of the upstream host name. */
bool upstream_learn_region(struct upstream *u, const char *bucket, const char *region);

/* The headers as a curl list, plus the empty "Expect:" (and "Accept:"
 * when h has none) that stop curl adding its own. NULL when out of memory. */
struct curl_slist *hdrs_to_curl(const struct hdrs *h);

/* The options every upstream transfer shares: no signals, paths sent as
 * they are, HTTP/1.1 keep-alive, buffer sizes, timeouts, TLS checks. */
void upstream_curl_defaults(const struct upstream *u, CURL *e);

/* One S3 request, as upstream_prepare builds it. */
struct up_request {
	const char *method;            /* "GET", "HEAD", "PUT", ... */
	const char *bucket, *key;      /* as upstream_target */
	const char *query;             /* raw, sent and signed as is; "" or NULL: none */
	const char *payload_hash;      /* X-Amz-Content-SHA256 */
	struct hdrs *headers;          /* the others to send; Host, the payload hash and
	                                * the signature are appended to it */
	bool upload;                   /* a body goes up, from the transfer's read hook */
	long long upload_len;          /* its length; -1: unknown (sent chunked) */
};

/* Readies t for rq: fills target (which must outlive the transfer),
 * signs, and sets the URL, headers, method, body and the connection
 * options of upstream_curl_defaults. The caller submits it. Returns 0 or
 * negative errno. */
int upstream_prepare(struct upstream *u, struct transfer *t, const struct up_request *rq,
                     struct up_target *target);

/* For a transfer's headers hook: learns the bucket's region when S3 names
 * it, and asks for the request to go again (signed for that region, once)
 * when S3 refused it for being signed for another. */
enum transfer_verdict upstream_region_check(struct upstream *u, const char *bucket,
                                            const struct transfer *t);

/* An answer worth retrying: none at all (0), 500, 502, 503 (SlowDown), 504. */
bool upstream_retryable(long status);

/* The retry policy of upstream transfers: LARDER_UPSTREAM_RETRIES retries,
 * 200 ms doubling to 2 s. */
struct transfer_retry upstream_retry_policy(const struct upstream *u);

/* TLS settings for an easy handle. */
bool upstream_tls_verify(const struct upstream *u);
const char *upstream_ca_file(const struct upstream *u);
unsigned upstream_timeout_s(const struct upstream *u);

#endif

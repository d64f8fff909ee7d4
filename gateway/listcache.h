/*
 * listcache.h - LIST answers (ListObjects V1 and V2) reused for a short,
 * opt-in time: [bucket NAME] list_cache_ttl (and list_cache_prefixes).
 * FUSE clients such as Mountpoint ask, for every path they look up, a HEAD
 * and a ListObjectsV2 with max-keys=1; with a TTL those cost S3 one LIST
 * per path and TTL instead of one per lookup.
 *
 * An answer is found by bucket and the request's query (its parameters
 * sorted), and only for a request that passed its signature and policy
 * checks: the cache never decides who may list what. Writes and deletes
 * through larder (and invalidations from other nodes) drop the answers
 * they could change; a listing that was in flight when one happened is not
 * stored. Memory is bounded by LARDER_LIST_CACHE_SIZE (oldest go first).
 * Thread-safe (one mutex).
 */
#ifndef LARDER_LISTCACHE_H
#define LARDER_LISTCACHE_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>

struct listcache;
struct req;

struct listcache *listcache_create(size_t max_bytes);
void listcache_destroy(struct listcache *lc);

/* Drops the cached listings of bucket that could show key (those whose
 * prefix it starts with), or all of the bucket's when key is NULL or "";
 * with bucket NULL, every listing. */
void listcache_invalidate(struct listcache *lc, const char *bucket, const char *key);

/* The cache key of a listing of bucket with query (as received): "bucket\n"
 * and the query's parameters sorted, malloc'd; NULL when the query is not a
 * plain listing (another parameter, one given twice, more than 16, a
 * list-type other than 2) or out of memory. */
char *listcache_key(const char *bucket, const char *query);

/* The proxy's side, on the request's worker. listcache_begin, after the
 * request was authorised: true when the cache answers it (then
 * listcache_respond queues that answer); otherwise a cacheable listing
 * records what it needs to keep upstream's answer. */
bool listcache_begin(struct req *r);
/* Whether r is a listing listcache_begin may answer or keep (no lookup). */
bool listcache_wants(struct req *r);
bool listcache_hit(const struct req *r);
enum MHD_Result listcache_respond(struct req *r);
void listcache_capture(struct req *r, const char *data, size_t len); /* upstream body bytes */
void listcache_store(struct req *r);  /* the upstream transfer ended well */
void listcache_end(struct req *r);    /* frees the request's part */

#endif

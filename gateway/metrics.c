/*
 * metrics.c - the counters, their tables, and the two renderings.
 *
 * Request-path cost: a handful of relaxed atomic adds, plus one lookup in
 * each of the bucket and client tables. Those tables are open-addressed
 * hash tables whose rows are never removed, so a lookup needs no lock: a
 * row goes EMPTY -> CLAIMED (compare-and-swap, by the thread adding the
 * name) -> READY (name written, release store). A reader that finds a row
 * CLAIMED waits the few instructions until it is READY, since it may hold
 * the very name being looked up.
 *
 * Names follow the Prometheus conventions
 * (https://prometheus.io/docs/practices/naming/): the larder_ prefix, base
 * units in the name (_bytes, _seconds), _total on counters. The exposition
 * format is https://prometheus.io/docs/instrumenting/exposition_formats/.
 */
#include "gateway/metrics.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/fnv.h"
#include "gateway/pins.h"
#include "gateway/s3req.h"
#include "store/store.h"

typedef atomic_uint_fast64_t counter;

static inline void add(counter *c, uint64_t n)
{
	atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

static inline uint64_t get(const counter *c)
{
	return atomic_load_explicit((counter *)c, memory_order_relaxed);
}

/* ---- operations ------------------------------------------------------------ */

enum op {
	OP_GET, OP_HEAD, OP_PUT, OP_COPY, OP_DELETE, OP_UPLOAD_PART, OP_CREATE_MPU,
	OP_COMPLETE_MPU, OP_LIST_V2, OP_LIST, OP_LIST_BUCKETS, OP_OTHER, N_OPS
};

static const char *const op_names[N_OPS] = {
	"GetObject", "HeadObject", "PutObject", "CopyObject", "DeleteObject", "UploadPart",
	"CreateMultipartUpload", "CompleteMultipartUpload", "ListObjectsV2", "ListObjects",
	"ListBuckets", "Other",
};

/* Whether the raw query has a parameter called name (with or without a
 * value). Parameter names of the S3 API are never percent-encoded. */
static bool has_param(const char *query, const char *name)
{
	size_t n = strlen(name);
	for (const char *p = query; p && *p;) {
		size_t len = strcspn(p, "&");
		if (len >= n && strncmp(p, name, n) == 0 && (len == n || p[n] == '='))
			return true;
		p += len + (p[len] == '&');
	}
	return false;
}

/* Whether the raw query has name=value exactly. */
static bool param_is(const char *query, const char *name, const char *value)
{
	size_t n = strlen(name), v = strlen(value);
	for (const char *p = query; p && *p;) {
		size_t len = strcspn(p, "&");
		if (len == n + 1 + v && strncmp(p, name, n) == 0 && p[n] == '=' &&
		    strncmp(p + n + 1, value, v) == 0)
			return true;
		p += len + (p[len] == '&');
	}
	return false;
}

/* Sub-resources that make an object GET, PUT or DELETE another operation
 * (GetObjectAcl, PutObjectTagging, ...): counted as Other. versionId,
 * partNumber and response-* still read the object. */
static bool object_subresource(const char *query)
{
	static const char *const sub[] = {
		"acl", "tagging", "attributes", "retention", "legal-hold", "torrent", "restore",
		"select", "uploadId", "uploads",
	};
	for (size_t i = 0; i < sizeof sub / sizeof sub[0]; i++)
		if (has_param(query, sub[i]))
			return true;
	return false;
}

/* Bucket sub-resources (GetBucketAcl, ListMultipartUploads, ...). */
static bool bucket_subresource(const char *query)
{
	static const char *const sub[] = {
		"acl", "tagging", "policy", "location", "versioning", "versions", "uploads", "cors",
		"lifecycle", "website", "logging", "notification", "replication", "encryption",
		"delete", "object-lock", "ownershipControls", "publicAccessBlock", "requestPayment",
		"accelerate", "analytics", "inventory", "metrics", "intelligent-tiering",
	};
	for (size_t i = 0; i < sizeof sub / sizeof sub[0]; i++)
		if (has_param(query, sub[i]))
			return true;
	return false;
}

static enum op operation(const char *method, int target, const char *query, bool copy_source)
{
	if (!method)
		return OP_OTHER;
	bool get = strcmp(method, "GET") == 0;
	switch (target) {
	case S3T_SERVICE:
		return get ? OP_LIST_BUCKETS : OP_OTHER;
	case S3T_BUCKET:
		if (!get || bucket_subresource(query))
			return OP_OTHER;
		return param_is(query, "list-type", "2") ? OP_LIST_V2 : OP_LIST;
	case S3T_OBJECT:
		break;
	default:
		return OP_OTHER;
	}
	bool upload_id = has_param(query, "uploadId");
	if (strcmp(method, "PUT") == 0) {
		if (upload_id && has_param(query, "partNumber"))
			return OP_UPLOAD_PART;  /* UploadPartCopy too */
		if (object_subresource(query))
			return OP_OTHER;
		return copy_source ? OP_COPY : OP_PUT;
	}
	if (strcmp(method, "POST") == 0) {
		if (has_param(query, "uploads"))
			return OP_CREATE_MPU;
		return upload_id ? OP_COMPLETE_MPU : OP_OTHER;
	}
	if (object_subresource(query))
		return OP_OTHER;  /* ListParts, AbortMultipartUpload, GetObjectAcl, ... */
	if (get)
		return OP_GET;
	if (strcmp(method, "HEAD") == 0)
		return OP_HEAD;
	if (strcmp(method, "DELETE") == 0)
		return OP_DELETE;
	return OP_OTHER;
}

const char *s3_operation(const char *method, int target, const char *query, bool copy_source)
{
	return op_names[operation(method, target, query, copy_source)];
}

static enum op op_index(const char *name)
{
	for (int i = 0; name && i < N_OPS; i++)
		if (strcmp(op_names[i], name) == 0)
			return (enum op)i;
	return OP_OTHER;
}

/* ---- per-name rows ----------------------------------------------------------- */

enum { ROW_EMPTY, ROW_CLAIMED, ROW_READY };
#define TABLE_SLOTS (2 * METRICS_MAX_ROWS)  /* a power of two, at most half full */
#define NAME_MAX_BYTES 255

struct row {
	atomic_int state;
	char name[NAME_MAX_BYTES + 1];
	counter requests, hits, misses, bypass;
	counter bytes_out, hit_bytes, bytes_in;
};

struct table {
	struct row slots[TABLE_SLOTS];
	atomic_uint used;
	struct row other;
};

/* The registry. Static storage: zero is a valid empty state. */
static struct {
	counter requests[N_OPS][600];      /* [op][status]; status 0: none sent */
	counter req_bytes_out[N_OPS], req_bytes_in[N_OPS];
	counter cache_requests[3], cache_bytes[3];  /* hit, miss, bypass */

	counter up_requests[600];          /* [status]; 0: no response */
	counter up_bytes, up_errors, up_retries;
	counter up_throttled, up_shaped_waits, up_unsteady;
	counter up_hist[12];               /* per bucket (not cumulative); [11]: +Inf */
	counter up_sum_us;

	counter peer_requests[600];        /* chunk fetches sent to other nodes, [status] */
	counter peer_bytes;
	counter peer_served[4];            /* requests of other nodes: hit, miss, bypass, other */
	counter peer_served_bytes;

	struct table buckets, clients, peers;
} M;

static const double hist_bounds[11] = {
	0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
};
static const char *const hist_le[12] = {
	"0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "+Inf",
};

/* The row for name (created when new), or the table's "(other)" row. */
static struct row *row_for(struct table *t, const char *name)
{
	size_t n = strnlen(name, NAME_MAX_BYTES);
	uint64_t h = fnv1a64_add(FNV1A64_OFFSET, name, n);
	for (size_t probe = 0; probe < TABLE_SLOTS; probe++) {
		struct row *r = &t->slots[(h + probe) & (TABLE_SLOTS - 1)];
		int st = atomic_load_explicit(&r->state, memory_order_acquire);
		if (st == ROW_EMPTY) {
			if (atomic_load_explicit(&t->used, memory_order_relaxed) >= METRICS_MAX_ROWS)
				return &t->other;
			if (!atomic_compare_exchange_strong(&r->state, &st, ROW_CLAIMED))
				goto claimed;  /* st now holds what another thread put there */
			if (atomic_fetch_add(&t->used, 1) >= METRICS_MAX_ROWS) {
				/* lost the race for the last row: leave the slot claimed
				 * but nameless; it is skipped when rendering. */
				r->name[0] = '\0';
				atomic_store_explicit(&r->state, ROW_READY, memory_order_release);
				return &t->other;
			}
			memcpy(r->name, name, n);
			r->name[n] = '\0';
			atomic_store_explicit(&r->state, ROW_READY, memory_order_release);
			return r;
		}
claimed:
		while (st == ROW_CLAIMED) {
			sched_yield();
			st = atomic_load_explicit(&r->state, memory_order_acquire);
		}
		if (r->name[0] && strncmp(r->name, name, n) == 0 && r->name[n] == '\0')
			return r;
	}
	return &t->other;
}

static void row_add(struct row *r, int cache, uint64_t bytes_out, uint64_t bytes_in)
{
	add(&r->requests, 1);
	add(&r->bytes_out, bytes_out);
	add(&r->bytes_in, bytes_in);
	if (cache == 0) {
		add(&r->hits, 1);
		add(&r->hit_bytes, bytes_out);
	} else if (cache == 1) {
		add(&r->misses, 1);
	} else if (cache == 2) {
		add(&r->bypass, 1);
	}
}

/* name cut to NAME_MAX_BYTES, with anything but visible ASCII as '?': rows
 * become JSON object keys, which must be UTF-8. Returns out. */
static const char *printable(const char *name, char out[NAME_MAX_BYTES + 1])
{
	size_t i = 0;
	for (; name[i] && i < NAME_MAX_BYTES; i++)
		out[i] = (unsigned char)name[i] > ' ' && (unsigned char)name[i] < 0x7f ? name[i] : '?';
	out[i] = '\0';
	return out;
}

/* ---- the calls from the gateway ---------------------------------------------- */

/* 0 hit, 1 miss, 2 bypass, -1 none */
static int cache_index(const char *cache)
{
	return !cache ? -1 : strcmp(cache, "hit") == 0 ? 0 : strcmp(cache, "miss") == 0 ? 1
	     : strcmp(cache, "bypass") == 0 ? 2 : -1;
}

void metrics_request(const char *op, int status, const char *bucket, const char *key_id,
                     const char *cache, uint64_t bytes_out, uint64_t bytes_in)
{
	enum op o = op_index(op);
	if (status < 0 || status >= 600)
		status = 0;
	add(&M.requests[o][status], 1);
	add(&M.req_bytes_out[o], bytes_out);
	add(&M.req_bytes_in[o], bytes_in);
	int c = cache_index(cache);
	if (c >= 0) {
		add(&M.cache_requests[c], 1);
		add(&M.cache_bytes[c], bytes_out);
	}
	char name[NAME_MAX_BYTES + 1];
	if (bucket && *bucket)
		row_add(row_for(&M.buckets, printable(bucket, name)), c, bytes_out, bytes_in);
	row_add(row_for(&M.clients, key_id && *key_id ? printable(key_id, name)
	                                              : METRICS_ANONYMOUS),
	        c, bytes_out, bytes_in);
}

/* error: it failed (metrics_upstream's errors), not stopped by larder. */
static void count_upstream(int status, uint64_t bytes, double seconds, bool retry, bool error)
{
	if (status < 0 || status >= 600)
		status = 0;
	add(&M.up_requests[status], 1);
	add(&M.up_bytes, bytes);
	if (error)
		add(&M.up_errors, 1);
	if (retry)
		add(&M.up_retries, 1);
	if (!(seconds >= 0))  /* also NaN */
		seconds = 0;
	int i = 0;
	while (i < 11 && seconds > hist_bounds[i])
		i++;
	add(&M.up_hist[i], 1);
	add(&M.up_sum_us, (uint64_t)(seconds * 1e6 + 0.5));
}

void metrics_upstream(int status, uint64_t bytes, double seconds, bool retry)
{
	count_upstream(status, bytes, seconds, retry, status <= 0 || status >= 500);
}

void metrics_peer_fetch(int status, uint64_t bytes)
{
	add(&M.peer_requests[status < 0 || status >= 600 ? 0 : status], 1);
	add(&M.peer_bytes, bytes);
}

void metrics_peer_served(const char *node, const char *cache, uint64_t bytes_out)
{
	int c = cache_index(cache);
	add(&M.peer_served[c < 0 ? 3 : c], 1);
	add(&M.peer_served_bytes, bytes_out);
	char name[NAME_MAX_BYTES + 1];
	row_add(row_for(&M.peers, printable(node && *node ? node : "?", name)), c, bytes_out, 0);
}

void metrics_upstream_throttled(void)
{
	add(&M.up_throttled, 1);
}

void metrics_upstream_shaped_wait(void)
{
	add(&M.up_shaped_waits, 1);
}

void metrics_upstream_unsteady_etag(void)
{
	add(&M.up_unsteady, 1);
}

void metrics_upstream_curl(CURL *easy, long status, CURLcode result, bool retry, bool peer)
{
	curl_off_t bytes = 0, us = 0;
	curl_easy_getinfo(easy, CURLINFO_SIZE_DOWNLOAD_T, &bytes);
	curl_easy_getinfo(easy, CURLINFO_TOTAL_TIME_T, &us);
	/* larder stops transfers itself (the client left, a body it does not
	 * want): from a callback, which curl reports as one of these. */
	bool ours = result == CURLE_ABORTED_BY_CALLBACK || result == CURLE_WRITE_ERROR ||
	            result == CURLE_READ_ERROR;
	if (result != CURLE_OK && !ours)
		status = 0;
	if (peer) {
		metrics_peer_fetch((int)status, bytes > 0 ? (uint64_t)bytes : 0);
		return;
	}
	/* One larder stopped before an answer came is no upstream failure. */
	count_upstream((int)status, bytes > 0 ? (uint64_t)bytes : 0,
	               us > 0 ? (double)us / 1e6 : 0.0, retry,
	               (status == 0 && !ours) || status >= 500);
}

void metrics_reset(void)
{
	memset(&M, 0, sizeof M);
}

/* ---- Prometheus text ---------------------------------------------------------- */

static int family(struct buf *b, const char *name, const char *type, const char *help)
{
	return buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static int sample(struct buf *b, const char *name, const char *labels, uint64_t v)
{
	return buf_printf(b, "%s%s%s%s %" PRIu64 "\n", name, labels ? "{" : "", labels ? labels : "",
	                  labels ? "}" : "", v);
}

/* A family of one unlabelled sample. */
static int single(struct buf *b, const char *name, const char *type, uint64_t v, const char *help)
{
	int r = family(b, name, type, help);
	return r ? r : sample(b, name, NULL, v);
}

/* A label value as the text format wants it: backslash, double quote and
 * newline escaped (a pin's id comes from a client or another node). */
static int label_value(struct buf *b, const char *v)
{
	int r = 0;
	for (; *v && !r; v++)
		r = *v == '\\' ? buf_puts(b, "\\\\")
		  : *v == '"'   ? buf_puts(b, "\\\"")
		  : *v == '\n'  ? buf_puts(b, "\\n")
		                : buf_putc(b, *v);
	return r;
}

/* Peer fetches answered 5xx. */
static uint64_t peer_errors_5xx(void)
{
	uint64_t n = 0;
	for (int s = 500; s < 600; s++)
		n += get(&M.peer_requests[s]);
	return n;
}

/* A family whose samples differ by the value of one label. */
#define LABELED_MAX 4
struct labeled {
	const char *name, *type, *help, *label;
	const char *values[LABELED_MAX]; /* NULL-terminated when fewer */
	uint64_t v[LABELED_MAX];
};

static int render_labeled(struct buf *b, const struct labeled *l)
{
	int r = family(b, l->name, l->type, l->help);
	for (int i = 0; i < LABELED_MAX && l->values[i] && !r; i++)
		r = buf_printf(b, "%s{%s=\"%s\"} %" PRIu64 "\n", l->name, l->label, l->values[i],
		               l->v[i]);
	return r;
}

static int render_requests(struct buf *b)
{
	int r = family(b, "larder_requests_total", "counter",
	               "Client requests by S3 operation and the HTTP status sent (0: none).");
	for (int o = 0; o < N_OPS && !r; o++)
		for (int s = 0; s < 600 && !r; s++) {
			uint64_t v = get(&M.requests[o][s]);
			if (v)
				r = buf_printf(b, "larder_requests_total{op=\"%s\",status=\"%d\"} %" PRIu64
				               "\n", op_names[o], s, v);
		}
	static const struct { const char *name, *help; counter *v; } per_op[] = {
		{ "larder_response_body_bytes_total", "Response body bytes sent to clients.",
		  M.req_bytes_out },
		{ "larder_request_body_bytes_total", "Request body bytes received from clients.",
		  M.req_bytes_in },
	};
	for (size_t f = 0; f < 2 && !r; f++) {
		r = family(b, per_op[f].name, "counter", per_op[f].help);
		for (int o = 0; o < N_OPS && !r; o++) {
			char l[64];
			snprintf(l, sizeof l, "op=\"%s\"", op_names[o]);
			r = sample(b, per_op[f].name, l, get(&per_op[f].v[o]));
		}
	}
	return r;
}

static int render_cache(struct buf *b, const struct store_stats *st)
{
	static const char *const res[3] = { "hit", "miss", "bypass" };
	int r = family(b, "larder_cache_requests_total", "counter",
	               "Object reads (GET, HEAD) by cache result: hit (no upstream request), "
	               "miss, or bypass (not cacheable).");
	for (int i = 0; i < 3 && !r; i++) {
		char l[32];
		snprintf(l, sizeof l, "result=\"%s\"", res[i]);
		r = sample(b, "larder_cache_requests_total", l, get(&M.cache_requests[i]));
	}
	if (!r)
		r = family(b, "larder_cache_response_bytes_total", "counter",
		           "Object body bytes sent to clients by cache result; hit bytes are upstream "
		           "bytes saved.");
	for (int i = 0; i < 3 && !r; i++) {
		char l[32];
		snprintf(l, sizeof l, "result=\"%s\"", res[i]);
		r = sample(b, "larder_cache_response_bytes_total", l, get(&M.cache_bytes[i]));
	}
	if (r || !st)
		return r;
	const struct labeled per_tier[] = {
		{ "larder_cache_chunk_hits_total", "counter", "Chunk lookups answered by a tier.",
		  "tier", { "ram", "nvme" }, { st->hits_ram, st->hits_disk } },
		{ "larder_cache_evictions_total", "counter", "Chunks evicted by tier.", "tier",
		  { "ram", "nvme" }, { st->evictions_ram, st->evictions_disk } },
		{ "larder_cache_used_bytes", "gauge",
		  "Bytes held by tier (RAM: 512 more per chunk, and chunks being filled).", "tier",
		  { "ram", "nvme" },
		  { st->ram_used, st->disk_used } },
		{ "larder_cache_capacity_bytes", "gauge",
		  "Size by tier (NVMe: less than configured where its file system has less room).",
		  "tier", { "ram", "nvme" }, { st->ram_capacity, st->disk_capacity } },
		{ "larder_cache_chunks", "gauge", "Chunks held by tier.", "tier", { "ram", "nvme" },
		  { st->ram_entries, st->disk_entries } },
		{ "larder_nvme_errors_total", "counter",
		  "NVMe tier failures: write, read, or corrupt (checksum) entries.", "kind",
		  { "write", "read", "corrupt" },
		  { st->disk_write_errors, st->disk_read_errors, st->disk_corrupt } },
		{ "larder_nvme_writes_total", "counter",
		  "Chunk writes to NVMe: done, or dropped because the queue was full.", "result",
		  { "written", "dropped" }, { st->disk_writes, st->disk_writes_dropped } },
	};
	for (size_t i = 0; i < sizeof per_tier / sizeof per_tier[0]; i++)
		r = r ? r : render_labeled(b, &per_tier[i]);
	r = r ? r : single(b, "larder_cache_chunk_misses_total", "counter", st->misses,
	                   "Chunk lookups no tier held (an upstream fetch).");
	r = r ? r : single(b, "larder_coalesced_waiters_total", "counter", st->coalesced,
	                   "Chunk lookups that joined a fetch or NVMe read already in flight.");
	r = r ? r : single(b, "larder_inflight_fetches", "gauge", st->inflight,
	                   "Chunks being produced right now (upstream fetches and NVMe reads).");
	r = r ? r : single(b, "larder_cache_filling_bytes", "gauge", st->ram_filling,
	                   "RAM reserved by chunks being filled (512 bytes more each).");
	r = r ? r : single(b, "larder_cache_ram_overcommits_total", "counter", st->ram_overcommits,
	                   "Chunk reservations that took RAM use past its capacity.");
	r = r ? r : single(b, "larder_chunk_arena_bytes", "gauge", chunk_arena_bytes(),
	                   "Chunk bytes held in larder's memfd (64 KiB chunks and larger: the "
	                   "RAM tier, fetches, readers), which the process's RSS does not show.");
	r = r ? r : single(b, "larder_chunk_arena_peak_bytes", "gauge", chunk_arena_peak_bytes(),
	                   "The most larder_chunk_arena_bytes has been since start.");
	r = r ? r : family(b, "larder_pinned_bytes", "gauge",
	                   "Bytes of pinned chunks held, by tier.");
	r = r ? r : sample(b, "larder_pinned_bytes", "tier=\"ram\"", st->ram_pinned);
	if (st->disk_capacity)
		r = r ? r : sample(b, "larder_pinned_bytes", "tier=\"nvme\"", st->nvme_pinned);
	r = r ? r : family(b, "larder_pin_limit_bytes", "gauge",
	                   "The most bytes pins may hold, by tier (LARDER_PIN_MAX, "
	                   "LARDER_PIN_MAX_NVME).");
	r = r ? r : sample(b, "larder_pin_limit_bytes", "tier=\"ram\"", st->pin_limit);
	if (st->disk_capacity)
		r = r ? r : sample(b, "larder_pin_limit_bytes", "tier=\"nvme\"", st->nvme_pin_limit);
	if (st->disk_capacity) { /* no NVMe tier configured: nothing to be up or down */
		r = r ? r : single(b, "larder_nvme_up", "gauge", st->disk_ok ? 1 : 0,
		                   "1 while the NVMe tier is in use, 0 once disabled after write "
		                   "failures.");
	}
	return r;
}

/* A counter family by HTTP status: the statuses counted so far. */
static int by_status(struct buf *b, const char *name, const char *help, const counter *v)
{
	int r = family(b, name, "counter", help);
	for (int s = 0; s < 600 && !r; s++)
		if (get(&v[s]))
			r = buf_printf(b, "%s{status=\"%d\"} %" PRIu64 "\n", name, s, get(&v[s]));
	return r;
}

static int render_upstream(struct buf *b)
{
	int r = by_status(b, "larder_upstream_requests_total",
	                  "Requests sent upstream (pass-through and cache fills) by HTTP status "
	                  "(0: no response).", M.up_requests);
	r = r ? r : single(b, "larder_upstream_response_bytes_total", "counter", get(&M.up_bytes),
	                   "Response body bytes received from upstream.");
	r = r ? r : single(b, "larder_upstream_errors_total", "counter", get(&M.up_errors),
	                   "Upstream requests that failed: no response, broken off, or a 5xx.");
	r = r ? r : single(b, "larder_upstream_retries_total", "counter", get(&M.up_retries),
	                   "Upstream requests that repeated an earlier attempt.");
	r = r ? r : single(b, "larder_upstream_throttled_total", "counter", get(&M.up_throttled),
	                   "Upstream answers 503 SlowDown, each one lowering its prefix's window.");
	r = r ? r : single(b, "larder_upstream_shaped_waits_total", "counter", get(&M.up_shaped_waits),
	                   "Upstream requests that waited for a slot in their prefix's window.");
	r = r ? r : single(b, "larder_upstream_unsteady_etags_total", "counter",
	                   get(&M.up_unsteady), "Objects found named by another ETag in each "
	                   "upstream answer, then passed through uncached for a while.");
	r = r ? r : family(b, "larder_upstream_request_duration_seconds", "histogram",
	                   "Time of whole upstream requests.");
	uint64_t cum = 0;
	for (int i = 0; i < 12 && !r; i++) {
		cum += get(&M.up_hist[i]);
		r = buf_printf(b, "larder_upstream_request_duration_seconds_bucket{le=\"%s\"} %" PRIu64
		               "\n", hist_le[i], cum);
	}
	r = r ? r : buf_printf(b, "larder_upstream_request_duration_seconds_sum %.6f\n",
	                       (double)get(&M.up_sum_us) / 1e6);
	r = r ? r : sample(b, "larder_upstream_request_duration_seconds_count", NULL, cum);
	return r;
}

/* What went between this node and the others of its cluster. */
static int render_peers(struct buf *b)
{
	int r = by_status(b, "larder_peer_requests_total",
	                  "Chunk fetches this node sent to other nodes of the cluster (not to "
	                  "upstream) by HTTP status (0: no answer).", M.peer_requests);
	r = r ? r : single(b, "larder_peer_response_bytes_total", "counter", get(&M.peer_bytes),
	                   "Response body bytes received from other nodes.");
	const struct labeled served = {
		"larder_peer_served_total", "counter",
		"Requests other nodes sent this node, by cache result (other: not answered "
		"from the cache, e.g. refused); not in larder_requests_total.", "result",
		{ "hit", "miss", "bypass", "other" },
		{ get(&M.peer_served[0]), get(&M.peer_served[1]), get(&M.peer_served[2]),
		  get(&M.peer_served[3]) },
	};
	r = r ? r : render_labeled(b, &served);
	r = r ? r : single(b, "larder_peer_served_bytes_total", "counter",
	                   get(&M.peer_served_bytes), "Response body bytes sent to other nodes.");
	return r;
}

static int render_lookahead(struct buf *b, const struct lookahead_stats *l)
{
	int r = single(b, "larder_lookaheads", "gauge", l->running,
                    "Read-order lookaheads running.");
	r = r ? r : single(b, "larder_lookahead_objects_total", "counter", l->objects,
	                   "Objects warmed ahead of their readers by lookaheads.");
	r = r ? r : single(b, "larder_lookahead_bytes_total", "counter", l->bytes,
	                   "Bytes warmed ahead of their readers by lookaheads.");
	r = r ? r : family(b, "larder_lookahead_reads_total", "counter",
	                   "Reads of keys a running lookahead lists, by whether the lookahead had "
	                   "asked for the key before the read (ahead) or not (behind).");
	r = r ? r : sample(b, "larder_lookahead_reads_total", "warmed=\"ahead\"", l->reads_ahead);
	r = r ? r : sample(b, "larder_lookahead_reads_total", "warmed=\"behind\"",
	                   l->reads - l->reads_ahead);
	return r;
}

int metrics_render_prometheus(struct buf *out, const struct metrics_gauges *g)
{
	int r = render_requests(out);
	r = r ? r : render_cache(out, g ? g->store : NULL);
	r = r ? r : render_upstream(out);
	if (!r && g) {
		r = single(out, "larder_metadata_objects", "gauge", g->meta_entries,
		                   "Objects in the metadata cache.");
		r = r ? r : single(out, "larder_client_connections", "gauge", g->open_connections,
		                   "Open client connections, and writes still running whose "
		                   "client left.");
		r = r ? r : family(out, "larder_prefetch_jobs", "gauge",
		                   "Prefetch jobs known, by state (finished ones are kept for a while).");
		r = r ? r : sample(out, "larder_prefetch_jobs", "state=\"running\"", g->jobs_running);
		r = r ? r : sample(out, "larder_prefetch_jobs", "state=\"done\"", g->jobs_done);
		r = r ? r : sample(out, "larder_prefetch_jobs", "state=\"failed\"", g->jobs_failed);
		r = r ? r : sample(out, "larder_prefetch_jobs", "state=\"cancelled\"",
		                   g->jobs_cancelled);
		r = r ? r : single(out, "larder_prefetch_bytes", "gauge", g->prefetch_bytes,
		                   "Bytes warmed by the prefetch jobs still listed.");
		r = r ? r : single(out, "larder_prefetch_bytes_total", "counter",
		                   g->prefetch_bytes_total,
		                   "Bytes warm jobs and lookaheads have warmed since start.");
		r = r ? r : single(out, "larder_pins", "gauge", g->n_pins,
		                   "Pins in force (warm jobs with --pin, until they end).");
		r = r ? r : family(out, "larder_pin_bytes", "gauge",
		                   "Bytes of the chunks each pin holds so far, by pin id.");
		for (size_t i = 0; i < g->n_pins && !r; i++) {
			r = buf_puts(out, "larder_pin_bytes{pin=\"");
			r = r ? r : label_value(out, g->pins[i].id);
			r = r ? r : buf_printf(out, "\"} %" PRIu64 "\n", g->pins[i].bytes);
		}
		r = r ? r : family(out, "larder_key_resident_bytes", "gauge",
		                   "Bytes of the RAM tier charged to a client key (the chunks its "
		                   "misses brought).");
		for (size_t i = 0; i < g->n_resident && !r; i++)
			r = buf_printf(out, "larder_key_resident_bytes{key=\"%s\"} %" PRIu64 "\n",
			               g->resident[i].key_id, g->resident[i].bytes);
		r = r ? r : family(out, "larder_key_resident_limit_bytes", "gauge",
		                   "A client key's max_resident_bytes (keys with one).");
		for (size_t i = 0; i < g->n_resident && !r; i++)
			if (g->resident[i].max_bytes)
				r = buf_printf(out, "larder_key_resident_limit_bytes{key=\"%s\"} "
				               "%" PRIu64 "\n", g->resident[i].key_id,
				               g->resident[i].max_bytes);
	}
	if (!r && g && g->lookaheads)
		r = render_lookahead(out, &g->lookahead);
	if (!r && g && g->clustered) {
		r = single(out, "larder_cluster_redis_up", "gauge", g->redis_up ? 1 : 0,
		                   "1 when this node reaches Redis (0: it serves alone).");
		r = r ? r : single(out, "larder_cluster_members", "gauge", g->cluster_members,
		                   "Live nodes this node sees, itself included.");
		r = r ? r : family(out, "larder_cluster_invalidations_total", "counter",
		                   "Invalidations published to and received from the other nodes, "
		                   "rejected (not signed), dropped unsent (queued past the bound "
		                   "while Redis was down), and published by a write whose answer "
		                   "went on without every node's acknowledgement (unacknowledged).");
		r = r ? r : sample(out, "larder_cluster_invalidations_total", "direction=\"sent\"",
		                   g->invalidations_sent);
		r = r ? r : sample(out, "larder_cluster_invalidations_total",
		                   "direction=\"received\"", g->invalidations_received);
		r = r ? r : sample(out, "larder_cluster_invalidations_total",
		                   "direction=\"rejected\"", g->invalidations_rejected);
		r = r ? r : sample(out, "larder_cluster_invalidations_total",
		                   "direction=\"dropped\"", g->invalidations_dropped);
		r = r ? r : sample(out, "larder_cluster_invalidations_total",
		                   "direction=\"unacknowledged\"", g->invalidations_unacknowledged);
		r = r ? r : single(out, "larder_cluster_resyncs_total", "counter", g->resyncs,
		                   "Times this node revalidated all it caches because it may have "
		                   "missed invalidations (it subscribed again, or another node "
		                   "dropped some).");
		r = r ? r : family(out, "larder_cluster_read_barriers_total", "counter",
		                   "Reads that waited, while the other nodes may not count this one "
		                   "yet, for it to apply what Redis had sent it: passed, or lapsed "
		                   "(they gave up after 1 s, and revalidated with S3).");
		r = r ? r : sample(out, "larder_cluster_read_barriers_total", "result=\"passed\"",
		                   g->read_barriers - g->read_barriers_lapsed);
		r = r ? r : sample(out, "larder_cluster_read_barriers_total", "result=\"lapsed\"",
		                   g->read_barriers_lapsed);
		r = r ? r : family(out, "larder_cluster_redis_reconnects_total", "counter",
		                   "Reconnections to Redis.");
		r = r ? r : sample(out, "larder_cluster_redis_reconnects_total", NULL,
		                   g->redis_reconnects);
		r = r ? r : family(out, "larder_cluster_members_rejected_total", "counter",
		                   "Membership entries in Redis ignored (not signed with the cluster "
		                   "secret, expired or malformed), each heartbeat that read one.");
		r = r ? r : sample(out, "larder_cluster_members_rejected_total", NULL,
		                   g->members_rejected);
		if (g->clock_known) {
			r = r ? r : family(out, "larder_cluster_clock_offset_seconds", "gauge",
			                   "This node's wall clock minus Redis's, at the last heartbeat "
			                   "(nodes more than 30 s apart drop each other's invalidations).");
			r = r ? r : buf_printf(out, "larder_cluster_clock_offset_seconds %.3f\n",
			                       g->clock_offset_ms / 1e3);
		}
		r = r ? r : render_peers(out);
		const struct labeled dir_families[] = {
			{ "larder_directory_entries", "gauge",
			  "Placement directory keys listed: by all members as they last reported "
			  "them, by this node; and the chunks this node fetched and holds (tracked, "
			  "listed when hashing would not find them).", "scope",
			  { "cluster", "self", "tracked" },
			  { g->directory_entries, g->dir.entries, g->dir.tracked } },
			{ "larder_directory_updates_total", "counter",
			  "Placement entries this node published, withdrew and refreshed, and changes "
			  "it dropped (queue or table full).", "op",
			  { "publish", "withdraw", "refresh", "dropped" },
			  { g->dir.published, g->dir.withdrawn, g->dir.refreshed, g->dir.dropped } },
			{ "larder_directory_lookups_total", "counter",
			  "Directory lookups before a fetch, by outcome: another node held it, nobody "
			  "did, no answer in time, or not asked.", "result",
			  { "found", "none", "failed", "skipped" },
			  { g->lookups.found, g->lookups.none, g->lookups.failed, g->lookups.skipped } },
		};
		for (size_t i = 0; i < sizeof dir_families / sizeof dir_families[0]; i++)
			r = r ? r : render_labeled(out, &dir_families[i]);
	}
	return r;
}

/* ---- /admin/stats JSON ---------------------------------------------------------- */

static int set_u64(json_t *o, const char *k, uint64_t v)
{
	return json_object_set_new(o, k, json_integer((json_int_t)(v > INT64_MAX ? INT64_MAX : v)));
}

static json_t *row_json(uint64_t requests, uint64_t hits, uint64_t misses, uint64_t bypass,
                        uint64_t bytes_out, uint64_t hit_bytes, uint64_t bytes_in)
{
	json_t *o = json_object();
	if (!o)
		return NULL;
	int r = set_u64(o, "requests", requests) | set_u64(o, "hits", hits) |
	        set_u64(o, "misses", misses) | set_u64(o, "bypass", bypass) |
	        json_object_set_new(o, "hit_ratio", hits + misses
	                            ? json_real((double)hits / (double)(hits + misses))
	                            : json_null()) |
	        set_u64(o, "bytes_served", bytes_out) | set_u64(o, "upstream_bytes_saved", hit_bytes) |
	        set_u64(o, "bytes_received", bytes_in);
	if (r) {
		json_decref(o);
		return NULL;
	}
	return o;
}

static json_t *row_of(const struct row *r)
{
	return row_json(get(&r->requests), get(&r->hits), get(&r->misses), get(&r->bypass),
	                get(&r->bytes_out), get(&r->hit_bytes), get(&r->bytes_in));
}

static int by_name(const void *a, const void *b)
{
	return strcmp((*(const struct row *const *)a)->name, (*(const struct row *const *)b)->name);
}

/* { name: ROW } for the table, sorted by name, "(other)" last when used. */
static json_t *table_json(struct table *t)
{
	const struct row **rows = malloc(TABLE_SLOTS * sizeof *rows);
	json_t *o = json_object();
	size_t n = 0;
	if (!rows || !o)
		goto fail;
	for (size_t i = 0; i < TABLE_SLOTS; i++)
		if (atomic_load_explicit(&t->slots[i].state, memory_order_acquire) == ROW_READY &&
		    t->slots[i].name[0])
			rows[n++] = &t->slots[i];
	qsort(rows, n, sizeof *rows, by_name);
	for (size_t i = 0; i < n; i++)
		if (json_object_set_new(o, rows[i]->name, row_of(rows[i])) != 0)
			goto fail;
	if (get(&t->other.requests) &&
	    json_object_set_new(o, METRICS_OTHER, row_of(&t->other)) != 0)
		goto fail;
	free(rows);
	return o;
fail:
	free(rows);
	json_decref(o);
	return NULL;
}

/* [ {id, bucket, prefix | keys, bytes, until}, ... ] */
static json_t *pins_json(const struct pin_info *pins, size_t n)
{
	json_t *a = json_array();
	for (size_t i = 0; a && i < n; i++) {
		const struct pin_info *p = &pins[i];
		json_t *o = json_pack("{s:s,s:s,s:I,s:I}", "id", p->id, "bucket", p->bucket, "bytes",
		                      (json_int_t)p->bytes, "until", (json_int_t)p->until);
		if (o && p->prefix)
			json_object_set_new(o, "prefix", json_string(p->prefix));
		else if (o)
			json_object_set_new(o, "keys", json_integer((json_int_t)p->n_keys));
		if (!o || json_array_append_new(a, o) != 0) {
			json_decref(a);
			return NULL;
		}
	}
	return a;
}

/* { key id: {bytes, max_bytes}, ... }; max_bytes 0: no limit */
static json_t *resident_json(const struct metrics_resident *res, size_t n)
{
	json_t *o = json_object();
	for (size_t i = 0; o && i < n; i++) {
		json_t *row = json_pack("{s:I,s:I}", "bytes", (json_int_t)res[i].bytes, "max_bytes",
		                        (json_int_t)res[i].max_bytes);
		if (json_object_set_new(o, res[i].key_id, row) != 0) {
			json_decref(o);
			return NULL;
		}
	}
	return o;
}

json_t *metrics_stats_json(const struct metrics_gauges *g)
{
	uint64_t req = 0, out = 0, in = 0;
	for (int o = 0; o < N_OPS; o++) {
		for (int s = 0; s < 600; s++)
			req += get(&M.requests[o][s]);
		out += get(&M.req_bytes_out[o]);
		in += get(&M.req_bytes_in[o]);
	}
	uint64_t up_req = 0;
	for (int s = 0; s < 600; s++)
		up_req += get(&M.up_requests[s]);

	json_t *doc = json_object(), *up = json_object(), *cache = NULL;
	int r = !doc || !up;
	r = r ? r : json_object_set_new(doc, "total",
	                                row_json(req, get(&M.cache_requests[0]),
	                                         get(&M.cache_requests[1]),
	                                         get(&M.cache_requests[2]), out,
	                                         get(&M.cache_bytes[0]), in));
	r = r ? r : json_object_set_new(doc, "buckets", table_json(&M.buckets));
	r = r ? r : json_object_set_new(doc, "clients", table_json(&M.clients));
	r = r ? r : json_object_set_new(doc, "peers", table_json(&M.peers));
	if (!r) {
		r = set_u64(up, "requests", up_req) | set_u64(up, "bytes", get(&M.up_bytes)) |
		    set_u64(up, "errors", get(&M.up_errors)) | set_u64(up, "retries", get(&M.up_retries));
		r = r ? r : json_object_set(doc, "upstream", up);
	}
	if (!r) {
		uint64_t peer_req = 0;
		for (int s = 0; s < 600; s++)
			peer_req += get(&M.peer_requests[s]);
		r = json_object_set_new(doc, "peer_fetches",
		                        json_pack("{s:I,s:I,s:I}", "requests", (json_int_t)peer_req,
		                                  "bytes", (json_int_t)get(&M.peer_bytes),
		                                  "errors", (json_int_t)(get(&M.peer_requests[0]) +
		                                                         peer_errors_5xx())));
	}
	const struct store_stats *st = g ? g->store : NULL;
	if (!r && st) {
		cache = json_pack("{s:{s:I,s:I,s:I,s:I},s:{s:I,s:I,s:I,s:I,s:b},s:I,s:I}",
		                  "ram", "used_bytes", (json_int_t)st->ram_used,
		                  "capacity_bytes", (json_int_t)st->ram_capacity,
		                  "chunks", (json_int_t)st->ram_entries,
		                  "hits", (json_int_t)st->hits_ram,
		                  "nvme", "used_bytes", (json_int_t)st->disk_used,
		                  "capacity_bytes", (json_int_t)st->disk_capacity,
		                  "chunks", (json_int_t)st->disk_entries,
		                  "hits", (json_int_t)st->hits_disk, "up", st->disk_ok,
		                  "inflight_fetches", (json_int_t)st->inflight,
		                  "metadata_objects", (json_int_t)g->meta_entries);
		r = !cache || json_object_set_new(doc, "cache", cache) != 0;
		r = r ? r : json_object_set_new(cache, "pinned_bytes", json_integer((json_int_t)st->ram_pinned));
		r = r ? r : json_object_set_new(cache, "pin_limit_bytes",
		                                json_integer((json_int_t)st->pin_limit));
		json_t *nvme = json_object_get(cache, "nvme");
		r = r ? r : json_object_set_new(nvme, "pinned_bytes",
		                                json_integer((json_int_t)st->nvme_pinned));
		r = r ? r : json_object_set_new(nvme, "pin_limit_bytes",
		                                json_integer((json_int_t)st->nvme_pin_limit));
	}
	if (!r && g)
		r = json_object_set_new(doc, "pins", pins_json(g->pins, g->n_pins)) != 0;
	if (!r && g)
		r = json_object_set_new(doc, "resident",
		                        resident_json(g->resident, g->n_resident)) != 0;
	json_decref(up);
	if (r) {
		json_decref(doc);
		return NULL;
	}
	return doc;
}

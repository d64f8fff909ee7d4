/*
 * admin.c - the admin listener: routes, the bearer token, JSON in and out.
 *
 * One libmicrohttpd daemon in internal-thread mode (epoll, so the file
 * descriptors of thousands of client connections never trouble it). A
 * request is routed and its token checked on the headers alone: a refusal
 * (404, 405, 401, 403, or 413 for a body larger than its route takes) is
 * queued before a byte of the body is read, so unauthenticated clients
 * cannot make the listener buffer anything. Only then is the body
 * collected, capped at the route's limit; an error answer is decided
 * before anything is changed.
 *
 * Bearer tokens: RFC 6750 section 2.1 (the "Bearer" scheme name is
 * case-insensitive per RFC 9110 section 11.1); a missing or wrong token gets
 * 401 with WWW-Authenticate (RFC 6750 section 3).
 */
#include "gateway/admin.h"

#include <assert.h>
#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "auth/creds.h"
#include "base/buf.h"
#include "base/clock.h"
#include "base/log.h"
#include "gateway/metrics.h"
#include "cluster/placement.h"
#include "gateway/pins.h"
#include "gateway/cluster_profiles.h"
#include "gateway/prefetch.h"
#include "gateway/lookahead.h"
#include "gateway/profiles.h"
#include "gateway/cache.h"
#include "gateway/req.h"
#include "gateway/s3req.h"
#include "gateway/server.h"
#include "gateway/ui.h"
#include "cluster/cluster.h"
#include "cluster/directory.h"
#include "store/meta.h"
#include "store/store.h"

#define ADMIN_MAGIC 0x61646d6eu
#define AREQ_MAGIC 0x61726571u
#define PREFETCH_BODY_MAX (8u << 20) /* a prefetch may list its keys */
#define PIN_SECONDS_MAX (30 * 86400)
#define PIN_WAIT_S 10.0             /* how long a pin's listing may take before 202 */
#define SMALL_BODY_MAX 4096          /* unpin, profiles */
#define GAUGE_PINS 256              /* pins shown in stats */
#define PROFILES_SHOWN 1024
#define PURGE_BODY_MAX (16u << 10)   /* a bucket and a key, JSON-escaped */
#define METRICS_MAX (16u << 20)

struct admin {
	unsigned magic;
	struct gw *gw;
	struct MHD_Daemon *mhd;
};

/* One admin request (MHD's req_cls). */
struct areq {
	unsigned magic;
	bool first_seen;
	bool too_big;
	struct buf body;
	const struct route *route;
	const char *rest;     /* the path after a prefix route, e.g. a job id */
};

/* ---- responses ------------------------------------------------------------------ */

/* Queues body (taken: free()d by MHD) with status and content type. */
static enum MHD_Result send_body(struct MHD_Connection *c, unsigned status, const char *ctype,
                                 char *body, size_t len, const char *www_auth)
{
	struct MHD_Response *resp = body ? MHD_create_response_from_buffer(len, body,
	                                                                   MHD_RESPMEM_MUST_FREE)
	                                 : NULL;
	if (!resp) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(resp, "Content-Type", ctype);
	MHD_add_response_header(resp, "Cache-Control", "no-store");
	if (www_auth)
		MHD_add_response_header(resp, "WWW-Authenticate", www_auth);
	enum MHD_Result r = MHD_queue_response(c, status, resp);
	MHD_destroy_response(resp);
	return r;
}

/* Sends doc (its reference is taken) as JSON. */
static enum MHD_Result send_json(struct MHD_Connection *c, unsigned status, json_t *doc,
                                 const char *www_auth)
{
	size_t flags = JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6);
	char *text = doc ? json_dumps(doc, flags) : NULL;
	json_decref(doc);
	if (!text) {
		static const char oom[] = "{\"error\":\"internal\",\"message\":\"out of memory\"}\n";
		return send_body(c, 500, "application/json", strdup(oom), sizeof oom - 1, NULL);
	}
	size_t n = strlen(text);
	char *withnl = realloc(text, n + 2);
	if (withnl) {
		withnl[n++] = '\n';
		withnl[n] = '\0';
		text = withnl;
	}
	return send_body(c, status, "application/json", text, n, www_auth);
}

__attribute__((format(printf, 5, 6)))
static enum MHD_Result send_error(struct MHD_Connection *c, unsigned status, const char *code,
                                  const char *www_auth, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	/* The message may quote client input: keep it valid UTF-8 for jansson. */
	for (char *p = msg; *p; p++)
		if ((unsigned char)*p < ' ' || (unsigned char)*p >= 0x7f)
			*p = '?';
	return send_json(c, status, json_pack("{s:s,s:s}", "error", code, "message", msg),
	                 www_auth);
}

/* ---- handlers ------------------------------------------------------------------- */

typedef enum MHD_Result (*route_fn)(struct admin *a, struct MHD_Connection *c,
                                    struct areq *q);

static enum MHD_Result healthz(struct admin *a, struct MHD_Connection *c, struct areq *q)
{
	(void)a;
	(void)q;
	return send_json(c, 200, json_pack("{s:s}", "status", "ok"), NULL);
}

static enum MHD_Result readyz(struct admin *a, struct MHD_Connection *c, struct areq *q)
{
	struct gw *gw = a->gw;
	(void)q;
	struct creds cr;
	creds_provider_get(gw->creds, &cr);
	bool creds_ok = cr.access_key[0] && cr.secret_key[0] &&
	                (cr.expiration == 0 || cr.expiration > time(NULL));
	explicit_bzero(&cr, sizeof cr);
	bool store_ok = gw->store && gw->meta;
	bool draining = atomic_load(&gw->draining);
	bool ready = creds_ok && store_ok && !draining;
	return send_json(c, ready ? 200 : 503,
	                 json_pack("{s:b,s:{s:b,s:b,s:b}}", "ready", ready, "checks",
	                           "upstream_credentials", creds_ok, "store_loaded", store_ok,
	                           "draining", draining),
	                 NULL);
}

static void gauges_of(struct gw *gw, struct store_stats *st, struct metrics_gauges *g)
{
	store_get_stats(gw->store, st);
	*g = (struct metrics_gauges){
		.store = st,
		.meta_entries = meta_cache_count(gw->meta),
		.open_connections = atomic_load(&gw->open_connections),
	};
	if (gw->cluster) {
		struct cluster_view v;
		cluster_get_view(gw->cluster, &v);
		g->clustered = true;
		g->redis_up = v.redis_up;
		g->cluster_members = v.members;
		g->invalidations_sent = v.invalidations_sent;
		g->invalidations_received = v.invalidations_received;
		g->redis_reconnects = v.redis_reconnects;
		g->members_rejected = v.members_rejected;
		g->directory_entries = v.directory_entries;
		dir_get_stats(gw->dir, &g->dir);
		placement_get_counts(&g->lookups);
	}
	struct prefetch_info jobs[64];
	size_t n = gw->prefetch ? prefetch_list(gw->prefetch, jobs, 64) : 0;
	for (size_t i = 0; i < n; i++) {
		const char *s = jobs[i].state;
		if (strcmp(s, "done") == 0)
			g->jobs_done++;
		else if (strcmp(s, "failed") == 0)
			g->jobs_failed++;
		else if (strcmp(s, "cancelled") == 0)
			g->jobs_cancelled++;
		else
			g->jobs_running++;
		g->prefetch_bytes += jobs[i].bytes_done;
	}
	struct pin_info *pins = gw->pins ? calloc(GAUGE_PINS, sizeof *pins) : NULL;
	g->n_pins = pins ? pins_list(gw->pins, pins, GAUGE_PINS) : 0;
	g->pins = pins;
}

static void gauges_fini(struct metrics_gauges *g)
{
	struct pin_info *pins = (struct pin_info *)g->pins;
	for (size_t i = 0; i < g->n_pins; i++)
		free(pins[i].prefix);
	free(pins);
}

static enum MHD_Result metrics(struct admin *a, struct MHD_Connection *c, struct areq *q)
{
	(void)q;
	struct store_stats st;
	struct metrics_gauges g;
	gauges_of(a->gw, &st, &g);
	struct buf out;
	buf_init(&out, METRICS_MAX);
	int r = metrics_render_prometheus(&out, &g);
	gauges_fini(&g);
	if (r != 0) {
		buf_fini(&out);
		log_error("admin", "rendering /metrics failed: %s", strerror(-r));
		return send_error(c, 500, "internal", NULL, "rendering the metrics failed: %s",
		                  strerror(-r));
	}
	size_t len = out.len;
	return send_body(c, 200, "text/plain; version=0.0.4; charset=utf-8", buf_steal(&out), len,
	                 NULL);
}

static json_t *lookahead_json(const struct lookahead_info *i)
{
	return json_pack("{s:s,s:s,s:s,s:I,s:I,s:I,s:I,s:I,s:f}", "id", i->id, "state", i->state,
	                 "bucket", i->bucket, "keys", (json_int_t)i->keys,
	                 "position", (json_int_t)i->position, "window", (json_int_t)i->window,
	                 "objects", (json_int_t)i->objects, "bytes", (json_int_t)i->bytes,
	                 "idle_seconds", i->idle_s);
}

/* The lookaheads, running ones only or all (with up to 16 ended). */
static json_t *lookaheads_json(struct gw *gw, bool running_only)
{
	enum { MAX = 256 };
	json_t *arr = json_array();
	struct lookahead_info *infos = calloc(MAX, sizeof *infos);
	size_t n = infos && gw->lookahead ? lookahead_list(gw->lookahead, infos, MAX) : 0;
	for (size_t i = 0; arr && i < n; i++)
		if (!running_only || strcmp(infos[i].state, "running") == 0)
			json_array_append_new(arr, lookahead_json(&infos[i]));
	free(infos);
	return arr;
}

static enum MHD_Result stats(struct admin *a, struct MHD_Connection *c, struct areq *q)
{
	(void)q;
	struct store_stats st;
	struct metrics_gauges g;
	gauges_of(a->gw, &st, &g);
	json_t *doc = metrics_stats_json(&g);
	gauges_fini(&g);
	if (!doc)
		return send_error(c, 500, "internal", NULL, "out of memory");
	json_object_set_new(doc, "lookaheads", lookaheads_json(a->gw, true));
	return send_json(c, 200, doc, NULL);
}

/* A string member of o, or NULL when absent. *bad is set when present but
 * not a string. */
static const char *member_str(json_t *o, const char *name, bool *bad)
{
	json_t *v = json_object_get(o, name);
	if (!v)
		return NULL;
	if (!json_is_string(v)) {
		*bad = true;
		return NULL;
	}
	return json_string_value(v);
}

static enum MHD_Result purge(struct admin *a, struct MHD_Connection *c, struct areq *q)
{
	if (q->body.len == 0)
		return send_error(c, 400, "bad_request", NULL,
		                  "expected a JSON body: {\"bucket\": ..., \"prefix\": ...} or "
		                  "{\"bucket\": ..., \"key\": ...}");
	json_error_t jerr;
	json_t *doc = json_loadb(q->body.p, q->body.len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY,
	                         &jerr);
	if (!doc)
		return send_error(c, 400, "bad_request", NULL, "malformed JSON at line %d column %d: %s",
		                  jerr.line, jerr.column, jerr.text);
	enum MHD_Result ret;
	if (!json_is_object(doc)) {
		ret = send_error(c, 400, "bad_request", NULL, "expected a JSON object");
		goto out;
	}
	const char *name;
	json_t *v;
	json_object_foreach(doc, name, v) {
		if (strcmp(name, "bucket") != 0 && strcmp(name, "prefix") != 0 &&
		    strcmp(name, "key") != 0) {
			ret = send_error(c, 400, "bad_request", NULL,
			                 "unknown field \"%.100s\" (expected bucket, prefix or key)", name);
			goto out;
		}
	}
	bool bad = false;
	const char *bucket = member_str(doc, "bucket", &bad);
	const char *prefix = member_str(doc, "prefix", &bad);
	const char *key = member_str(doc, "key", &bad);
	if (bad) {
		ret = send_error(c, 400, "bad_request", NULL, "bucket, prefix and key must be strings");
		goto out;
	}
	if (!bucket) {
		ret = send_error(c, 400, "bad_request", NULL, "bucket is missing");
		goto out;
	}
	if (!s3_bucket_name_ok(bucket, strlen(bucket))) {
		ret = send_error(c, 400, "bad_request", NULL, "invalid bucket name \"%.255s\"", bucket);
		goto out;
	}
	if (prefix && key) {
		ret = send_error(c, 400, "bad_request", NULL, "give a prefix or a key, not both");
		goto out;
	}
	const char *what = key ? key : prefix ? prefix : "";
	if ((key && !*key) || strlen(what) > S3_MAX_KEY_BYTES) {
		ret = send_error(c, 400, "bad_request", NULL, "%s must be 1-%d bytes", key ? "key"
		                 : "prefix", S3_MAX_KEY_BYTES);
		goto out;
	}
	uint64_t objects = 0;
	if (cache_purge(a->gw, bucket, what, key != NULL, &objects) != 0) {
		ret = send_error(c, 500, "internal", NULL, "the purge failed");
		goto out;
	}
	log_info("admin", "purge of %s \"%s\" in bucket %s: %llu objects",
	         key ? "key" : "prefix", what, bucket, (unsigned long long)objects);
	ret = send_json(c, 200, json_pack("{s:s,s:s,s:I}", "bucket", bucket, key ? "key" : "prefix",
	                                  what, "purged_objects", (json_int_t)objects),
	                NULL);
out:
	json_decref(doc);
	return ret;
}

/* ---- prefetch jobs --------------------------------------------------------------- */

static json_t *job_json(const struct prefetch_info *i)
{
	json_t *o = json_pack("{s:s,s:s,s:s,s:I,s:I,s:I,s:I,s:I,s:b,s:f,s:f}", "id", i->id,
	                      "state", i->state, "bucket", i->bucket,
	                      "objects_done", (json_int_t)i->objects_done,
	                      "objects_total", (json_int_t)i->objects_total,
	                      "bytes_done", (json_int_t)i->bytes_done,
	                      "bytes_total", (json_int_t)i->bytes_total,
	                      "errors", (json_int_t)i->errors, "listing_done", i->listing_done,
	                      "elapsed_seconds", i->elapsed_s, "rate_bytes_per_second", i->rate_bps);
	if (o) {
		json_object_set_new(o, "eta_seconds", i->eta_s < 0 ? json_null() : json_real(i->eta_s));
		json_object_set_new(o, "error", i->error[0] ? json_string(i->error) : json_null());
	}
	return o;
}

/* The first member of o not named in known (NULL-terminated), or NULL. */
static const char *unknown_member(json_t *o, const char *const *known)
{
	const char *name;
	json_t *v;
	json_object_foreach(o, name, v) {
		bool ok = false;
		for (int k = 0; known[k]; k++)
			ok |= strcmp(name, known[k]) == 0;
		if (!ok)
			return name;
	}
	return NULL;
}

/* The keys of the JSON array jkeys (borrowed from it) into *out, to be
 * free()d. false with the error answer queued (*ret) when one is not a key. */
static bool keys_of(struct MHD_Connection *c, json_t *jkeys, const char ***out,
                    enum MHD_Result *ret)
{
	size_t n = json_array_size(jkeys);
	const char **keys = calloc(n ? n : 1, sizeof *keys);
	if (!keys) {
		*ret = send_error(c, 500, "internal", NULL, "out of memory");
		return false;
	}
	for (size_t i = 0; i < n; i++) {
		const char *k = json_string_value(json_array_get(jkeys, i));
		if (!k || !*k || strlen(k) > S3_MAX_KEY_BYTES) {
			free(keys);
			*ret = send_error(c, 400, "bad_request", NULL, "keys[%zu] is not a key of 1-%d bytes",
			                  i, S3_MAX_KEY_BYTES);
			return false;
		}
		keys[i] = k;
	}
	*out = keys;
	return true;
}

/* The checks a job's bucket and key list pass: a valid name, keys (into
 * *keys, see keys_of) and a bucket larder's credentials may read. false
 * with the error answer queued (*ret). */
static bool bucket_and_keys_ok(struct admin *a, struct MHD_Connection *c, const char *bucket,
                               json_t *jkeys, const char ***keys, enum MHD_Result *ret)
{
	if (!s3_bucket_name_ok(bucket, strlen(bucket))) {
		*ret = send_error(c, 400, "bad_request", NULL, "invalid bucket name \"%.255s\"", bucket);
		return false;
	}
	if (jkeys && !keys_of(c, jkeys, keys, ret))
		return false;
	char err[256];
	if (prefetch_check_bucket(a->gw, bucket, err, sizeof err) != 0) {
		*ret = send_error(c, strstr(err, "does not exist") ? 404 : 403, "bucket_unreadable",
		                  NULL, "%s", err);
		return false;
	}
	return true;
}

/* A pin job that lists its objects knows its size once listed: waits
 * (up to PIN_WAIT_S) for that, and says whether the pin was refused. */
static bool pin_refused(struct prefetch *p, const char *id, char *err, size_t errlen)
{
	double give_up = clock_mono_s() + PIN_WAIT_S;
	struct prefetch_info info;
	while (prefetch_get(p, id, &info) == 0 && !info.pin_refused &&
	       strcmp(info.state, "listing") == 0 && clock_mono_s() < give_up) {
		struct timespec ts = { 0, 20 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
	if (!info.pin_refused)
		return false;
	snprintf(err, errlen, "%s", info.error);
	return true;
}

/* Starts a warm job of the keys, or answers the error; id gets its id. */
static enum MHD_Result start_job(struct admin *a, struct MHD_Connection *c,
                                 const struct prefetch_req *rq, char id[24], bool *started)
{
	char err[256];
	*started = false;
	if (prefetch_check_bucket(a->gw, rq->bucket, err, sizeof err) != 0)
		return send_error(c, strstr(err, "does not exist") ? 404 : 403, "bucket_unreadable",
		                  NULL, "%s", err);
	if (prefetch_start(a->gw->prefetch, rq, id, err, sizeof err) != 0)
		return send_error(c, 500, "internal", NULL, "%s", err);
	*started = true;
	return MHD_YES;
}

/* {"profile": NAME, optional "concurrency", "bandwidth_bytes_per_second",
 * "pin_seconds"}: a warm job of the profile's reads in recorded order, one
 * per bucket it read -> 202 {"job": the first, "jobs": all}. */
static enum MHD_Result prefetch_profile(struct admin *a, struct MHD_Connection *c, json_t *doc)
{
	bool bad = false;
	const char *name = member_str(doc, "profile", &bad);
	json_t *jconc = json_object_get(doc, "concurrency");
	json_t *jbw = json_object_get(doc, "bandwidth_bytes_per_second");
	json_t *jpin = json_object_get(doc, "pin_seconds");
	if (bad || !name || json_object_get(doc, "bucket") || json_object_get(doc, "prefix") ||
	    json_object_get(doc, "keys") || json_object_get(doc, "manifest") ||
	    (jconc && (!json_is_integer(jconc) || json_integer_value(jconc) < 1 ||
	               json_integer_value(jconc) > 64)) ||
	    (jbw && (!json_is_integer(jbw) || json_integer_value(jbw) < 0)) ||
	    (jpin && (!json_is_integer(jpin) || json_integer_value(jpin) < 1 ||
	              json_integer_value(jpin) > PIN_SECONDS_MAX)))
		return send_error(c, 400, "bad_request", NULL, "expected {\"profile\": NAME} and "
		                  "optionally \"concurrency\" (1-64), \"bandwidth_bytes_per_second\" "
		                  "and \"pin_seconds\" (1-%d), and no bucket or keys",
		                  PIN_SECONDS_MAX);
	char **buckets, **keys;
	size_t n;
	int r = profiles_get(a->gw->profiles, name, &buckets, &keys, &n);
	if (r == -ENOENT)
		return send_error(c, 404, "no_such_profile", NULL, "no profile %.64s", name);
	if (r)
		return send_error(c, 500, "internal", NULL, "out of memory");
	enum MHD_Result ret = MHD_YES;
	json_t *jobs = json_array();
	const char **sel = calloc(n ? n : 1, sizeof *sel);
	bool ok = jobs && sel;
	/* One job per bucket, each in the order the profile read its keys. */
	for (size_t i = 0; ok && i < n; i++) {
		bool first = true;
		for (size_t k = 0; k < i && first; k++)
			first = strcmp(buckets[k], buckets[i]) != 0;
		if (!first)
			continue;
		size_t m = 0;
		for (size_t k = i; k < n; k++)
			if (strcmp(buckets[k], buckets[i]) == 0)
				sel[m++] = keys[k];
		struct prefetch_req rq = {
			.bucket = buckets[i], .keys = sel, .n_keys = m,
			.concurrency = jconc ? (unsigned)json_integer_value(jconc) : 0,
			.bytes_per_s = jbw ? (uint64_t)json_integer_value(jbw) : 0,
			.pin_seconds = jpin ? (uint64_t)json_integer_value(jpin) : 0,
		};
		char id[24];
		ret = start_job(a, c, &rq, id, &ok);
		if (ok)
			json_array_append_new(jobs, json_string(id));
	}
	if (ok && json_array_size(jobs) == 0)
		ret = send_error(c, 409, "empty_profile", NULL, "profile %.64s recorded no reads", name);
	else if (ok)
		ret = send_json(c, 202, json_pack("{s:O,s:O,s:s,s:I}", "job", json_array_get(jobs, 0),
		                                  "jobs", jobs, "state", "listing", "objects",
		                                  (json_int_t)n), NULL);
	else if (!jobs || !sel)
		ret = send_error(c, 500, "internal", NULL, "out of memory");
	json_decref(jobs);
	free(sel);
	profile_reads_free(buckets, keys, n);
	return ret;
}

/* POST /admin/prefetch {"bucket": b, one of "prefix" | "keys" | "manifest",
 * optional "concurrency" (1-64), "bandwidth_bytes_per_second",
 * "pin_seconds"} -> 202; a pin past the pin limit -> 409. */
static enum MHD_Result prefetch(struct admin *a, struct MHD_Connection *c, struct areq *q)
{
	json_error_t jerr;
	json_t *doc = q->body.len ? json_loadb(q->body.p, q->body.len, JSON_REJECT_DUPLICATES, &jerr)
	                          : NULL;
	if (!doc)
		return send_error(c, 400, "bad_request", NULL,
		                  "expected a JSON object: {\"bucket\": ..., and one of \"prefix\", "
		                  "\"keys\" or \"manifest\"}%s%s", q->body.len ? ": " : "",
		                  q->body.len ? jerr.text : "");
	enum MHD_Result ret;
	const char **keys = NULL;
	static const char *const known[] = { "bucket", "prefix", "keys", "manifest",
		"concurrency", "bandwidth_bytes_per_second", "pin_seconds", "profile", NULL };
	const char *name = unknown_member(doc, known);
	if (name) {
		ret = send_error(c, 400, "bad_request", NULL, "unknown field \"%.100s\"", name);
		goto out;
	}
	bool bad = false;
	if (json_object_get(doc, "profile")) {
		ret = prefetch_profile(a, c, doc);
		goto out;
	}
	const char *bucket = member_str(doc, "bucket", &bad);
	const char *prefix = member_str(doc, "prefix", &bad);
	const char *manifest = member_str(doc, "manifest", &bad);
	json_t *jkeys = json_object_get(doc, "keys");
	json_t *jconc = json_object_get(doc, "concurrency");
	json_t *jbw = json_object_get(doc, "bandwidth_bytes_per_second");
	json_t *jpin = json_object_get(doc, "pin_seconds");
	int sources = (prefix != NULL) + (manifest != NULL) + (jkeys != NULL);
	if (bad || !bucket || sources != 1 || (jkeys && !json_is_array(jkeys)) ||
	    (jconc && (!json_is_integer(jconc) || json_integer_value(jconc) < 1 ||
	               json_integer_value(jconc) > 64)) ||
	    (jbw && (!json_is_integer(jbw) || json_integer_value(jbw) < 0)) ||
	    (jpin && (!json_is_integer(jpin) || json_integer_value(jpin) < 1 ||
	              json_integer_value(jpin) > PIN_SECONDS_MAX))) {
		ret = send_error(c, 400, "bad_request", NULL,
		                 "expected \"bucket\" (a string), exactly one of \"prefix\" (a "
		                 "string), \"keys\" (an array of strings) or \"manifest\" (a key), and "
		                 "optionally \"concurrency\" (1-64), \"bandwidth_bytes_per_second\" and "
		                 "\"pin_seconds\" (1-%d)", PIN_SECONDS_MAX);
		goto out;
	}
	size_t n = jkeys ? json_array_size(jkeys) : 0;
	if (!bucket_and_keys_ok(a, c, bucket, jkeys, &keys, &ret))
		goto out;
	char err[256];
	struct prefetch_req rq = {
		.bucket = bucket, .prefix = prefix, .keys = keys, .n_keys = n, .manifest = manifest,
		.concurrency = jconc ? (unsigned)json_integer_value(jconc) : 0,
		.bytes_per_s = jbw ? (uint64_t)json_integer_value(jbw) : 0,
		.pin_seconds = jpin ? (uint64_t)json_integer_value(jpin) : 0,
	};
	char id[24];
	if (prefetch_start(a->gw->prefetch, &rq, id, err, sizeof err) != 0) {
		ret = send_error(c, 500, "internal", NULL, "%s", err);
		goto out;
	}
	if (jpin && pin_refused(a->gw->prefetch, id, err, sizeof err)) {
		ret = send_error(c, 409, "pin_too_large", NULL, "%s", err);
		goto out;
	}
	char url[64];
	snprintf(url, sizeof url, "/admin/jobs/%s", id);
	ret = send_json(c, 202, json_pack("{s:s,s:s,s:s}", "job", id, "state", "listing",
	                                  "url", url), NULL);
out:
	free(keys);
	json_decref(doc);
	return ret;
}

static enum MHD_Result jobs(struct admin *a, struct MHD_Connection *c, struct areq *q)
{
	(void)q;
	struct prefetch_info *infos = calloc(64, sizeof *infos);
	if (!infos)
		return send_error(c, 500, "internal", NULL, "out of memory");
	size_t n = prefetch_list(a->gw->prefetch, infos, 64);
	json_t *arr = json_array();
	for (size_t i = 0; arr && i < n; i++)
		json_array_append_new(arr, job_json(&infos[i]));
	free(infos);
	return send_json(c, 200, json_pack("{s:o}", "jobs", arr), NULL);
}

static enum MHD_Result job_get(struct admin *a, struct MHD_Connection *c, struct areq *q)
{
	struct prefetch_info info;
	if (prefetch_get(a->gw->prefetch, q->rest, &info) != 0)
		return send_error(c, 404, "not_found", NULL, "no job %.64s", q->rest);
	return send_json(c, 200, job_json(&info), NULL);
}

static enum MHD_Result job_cancel(struct admin *a, struct MHD_Connection *c, struct areq *q)
{
	if (prefetch_cancel(a->gw->prefetch, q->rest) != 0)
		return send_error(c, 404, "not_found", NULL, "no job %.64s", q->rest);
	log_info("admin", "job %s: cancel requested", q->rest);
	return send_json(c, 202, json_pack("{s:s,s:s}", "job", q->rest, "state", "cancelling"),
	                 NULL);
}

/* ---- read-order lookaheads ------------------------------------------------------- */

/* POST /admin/lookahead {"bucket": b, "keys": [...] or "manifest": key, "window": N,
 * optional "concurrency" (1-64), "idle_seconds" (1-86400)} -> 201. */
static enum MHD_Result lookahead(struct admin *a, struct MHD_Connection *c, struct areq *q)
{
	static const char usage[] =
		"expected {\"bucket\": ..., \"keys\": [keys in read order] or \"manifest\": "
		"\"key of a newline list\", \"window\": objects (1-4096), optionally "
		"\"concurrency\" (1-64) and \"idle_seconds\" (1-86400)}";
	json_error_t jerr;
	json_t *doc = q->body.len ? json_loadb(q->body.p, q->body.len, JSON_REJECT_DUPLICATES, &jerr)
	                          : NULL;
	if (!doc)
		return send_error(c, 400, "bad_request", NULL, "%s%s%s", usage,
		                  q->body.len ? ": " : "", q->body.len ? jerr.text : "");
	enum MHD_Result ret;
	const char **keys = NULL;
	static const char *const known[] = { "bucket", "keys", "manifest", "window", "concurrency",
		"idle_seconds", NULL };
	const char *name = unknown_member(doc, known);
	if (name) {
		ret = send_error(c, 400, "bad_request", NULL, "unknown field \"%.100s\"; %s", name,
		                 usage);
		goto out;
	}
	bool bad = false;
	const char *bucket = member_str(doc, "bucket", &bad);
	const char *manifest = member_str(doc, "manifest", &bad);
	json_t *jkeys = json_object_get(doc, "keys");
	json_t *jwin = json_object_get(doc, "window");
	json_t *jconc = json_object_get(doc, "concurrency");
	json_t *jidle = json_object_get(doc, "idle_seconds");
	const char *what = NULL;
	if (bad || !bucket)
		what = "\"bucket\" (a string) is missing";
	else if ((manifest != NULL) + (jkeys != NULL) != 1)
		what = "give exactly one of \"keys\" and \"manifest\"";
	else if (jkeys && !json_is_array(jkeys))
		what = "\"keys\" must be a list of keys";
	else if (jkeys && json_array_size(jkeys) == 0)
		what = "\"keys\" is empty";
	else if (manifest && (!*manifest || strlen(manifest) > S3_MAX_KEY_BYTES))
		what = "\"manifest\" must be a key of 1-1024 bytes";
	else if (!jwin || !json_is_integer(jwin) || json_integer_value(jwin) < 1 ||
	         json_integer_value(jwin) > LOOKAHEAD_WINDOW_MAX)
		what = "\"window\" must be a number of objects, 1-4096";
	else if (jconc && (!json_is_integer(jconc) || json_integer_value(jconc) < 1 ||
	                   json_integer_value(jconc) > 64))
		what = "\"concurrency\" must be 1-64";
	else if (jidle && (!json_is_integer(jidle) || json_integer_value(jidle) < 1 ||
	                   json_integer_value(jidle) > 86400))
		what = "\"idle_seconds\" must be 1-86400";
	if (what) {
		ret = send_error(c, 400, "bad_request", NULL, "%s; %s", what, usage);
		goto out;
	}
	size_t n = jkeys ? json_array_size(jkeys) : 0;
	if (!bucket_and_keys_ok(a, c, bucket, jkeys, &keys, &ret))
		goto out;
	char err[512];
	struct lookahead_req rq = {
		.bucket = bucket, .keys = keys, .n_keys = n, .manifest = manifest,
		.window = (size_t)json_integer_value(jwin),
		.concurrency = jconc ? (unsigned)json_integer_value(jconc) : 0,
		.idle_s = jidle ? (double)json_integer_value(jidle) : 0,
	};
	char id[24];
	if (!a->gw->lookahead) {
		ret = send_error(c, 503, "unavailable", NULL, "lookahead is not running");
		goto out;
	}
	if (lookahead_start(a->gw->lookahead, &rq, id, err, sizeof err) != 0) {
		ret = send_error(c, strstr(err, "out of memory") ? 500 : 400,
		                 strstr(err, "out of memory") ? "internal" : "bad_manifest", NULL, "%s",
		                 err);
		goto out;
	}
	char url[64];
	snprintf(url, sizeof url, "/admin/lookahead/%s", id);
	ret = send_json(c, 201, json_pack("{s:s,s:s,s:s}", "id", id, "state", "running", "url", url),
	                NULL);
out:
	free(keys);
	json_decref(doc);
	return ret;
}

static enum MHD_Result lookahead_get(struct admin *a, struct MHD_Connection *c, struct areq *q)
{
	(void)q;
	return send_json(c, 200, json_pack("{s:o}", "lookaheads", lookaheads_json(a->gw, false)),
	                 NULL);
}

static enum MHD_Result lookahead_delete(struct admin *a, struct MHD_Connection *c, struct areq *q)
{
	if (!a->gw->lookahead || lookahead_end(a->gw->lookahead, q->rest) != 0)
		return send_error(c, 404, "not_found", NULL, "no running lookahead %.64s", q->rest);
	log_info("admin", "lookahead %s: ended", q->rest);
	return send_json(c, 200, json_pack("{s:s,s:s}", "id", q->rest, "state", "ended"), NULL);
}

/* GET /admin/cluster: this node's view of the cluster. */
static enum MHD_Result cluster(struct admin *a, struct MHD_Connection *c, struct areq *q)
{
	(void)q;
	struct gw *gw = a->gw;
	if (!gw->cluster)
		return send_json(c, 200, json_pack("{s:b,s:b,s:[]}", "clustered", 0, "redis_up", 0,
		                                   "members"), NULL);
	struct cluster_view v;
	cluster_get_view(gw->cluster, &v);
	enum { MAX = 256 };
	char (*ids)[128] = calloc(MAX, sizeof *ids);
	char (*addrs)[128] = calloc(MAX, sizeof *addrs);
	double *caps = calloc(MAX, sizeof *caps);
	uint64_t *entries = calloc(MAX, sizeof *entries);
	size_t n = ids && addrs && caps && entries
	                   ? cluster_members(gw->cluster, ids, addrs, caps, entries, MAX)
	                   : 0;
	/* Rendezvous weighted by capacity gives each node this share of the
	 * chunks, to within a few percent (docs/cluster.md). */
	double total = 0;
	for (size_t i = 0; i < n; i++)
		total += caps[i];
	json_t *members = json_array();
	for (size_t i = 0; members && i < n; i++)
		json_array_append_new(members, json_pack("{s:s,s:s,s:f,s:f,s:I}", "id", ids[i],
		                                         "address", addrs[i], "capacity", caps[i],
		                                         "ownership_share",
		                                         total > 0 ? caps[i] / total : 0.0,
		                                         "directory_entries",
		                                         (json_int_t)entries[i]));
	free(ids);
	free(addrs);
	free(caps);
	free(entries);
	struct dir_stats ds;
	dir_get_stats(gw->dir, &ds);
	struct placement_counts pc;
	placement_get_counts(&pc);
	json_t *dir = json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:{s:I,s:I,s:I,s:I}}", "entries",
	                        (json_int_t)v.directory_entries, "self_entries",
	                        (json_int_t)ds.entries, "tracked", (json_int_t)ds.tracked,
	                        "published", (json_int_t)ds.published,
	                        "withdrawn", (json_int_t)ds.withdrawn, "refreshed",
	                        (json_int_t)ds.refreshed, "dropped", (json_int_t)ds.dropped,
	                        "lookups", "found", (json_int_t)pc.found, "none",
	                        (json_int_t)pc.none, "failed", (json_int_t)pc.failed, "skipped",
	                        (json_int_t)pc.skipped);
	return send_json(c, 200, json_pack("{s:b,s:s,s:b,s:o,s:I,s:o,s:I,s:I,s:I}", "clustered",
	                                   1, "self", v.self, "redis_up", v.redis_up, "members",
	                                   members, "members_rejected",
	                                   (json_int_t)v.members_rejected, "directory", dir,
	                                   "redis_reconnects",
	                                   (json_int_t)v.redis_reconnects, "invalidations_sent",
	                                   (json_int_t)v.invalidations_sent,
	                                   "invalidations_received",
	                                   (json_int_t)v.invalidations_received), NULL);
}

/* GET /ui and /ui/{file}: the dashboard. No token: the page holds no data;
 * its script asks the API with the token the user gives it. */
static enum MHD_Result ui(struct admin *a, struct MHD_Connection *c, struct areq *q)
{
	(void)a;
	return ui_respond(c, q->rest);
}
/* POST /admin/unpin {"job": id} or {"bucket": b, "prefix": p} (every pin
 * of b whose prefix starts with p) -> 200 {"unpinned": n}; none: 404. */
static enum MHD_Result unpin(struct admin *a, struct MHD_Connection *c, struct areq *q)
{
	json_error_t jerr;
	json_t *doc = q->body.len ? json_loadb(q->body.p, q->body.len, JSON_REJECT_DUPLICATES, &jerr)
	                          : NULL;
	bool bad = !json_is_object(doc);
	const char *job = bad ? NULL : member_str(doc, "job", &bad);
	const char *bucket = bad ? NULL : member_str(doc, "bucket", &bad);
	const char *prefix = bad ? NULL : member_str(doc, "prefix", &bad);
	if (!bad)
		bad = json_object_size(doc) != (job ? 1u : 0u) + (bucket ? 1u : 0u) + (prefix ? 1u : 0u);
	enum MHD_Result ret;
	if (bad || !job == !bucket || (job && prefix)) {
		ret = send_error(c, 400, "bad_request", NULL,
		                 "expected {\"job\": ID} or {\"bucket\": B, \"prefix\": P}");
		goto out;
	}
	size_t n = job ? pins_end(a->gw->pins, job) == 0 : pins_end_prefix(a->gw->pins, bucket,
	                                                                      prefix ? prefix : "");
	if (n == 0)
		ret = send_error(c, 404, "no_such_pin", NULL, "no pin %s%s%s", job ? job : bucket,
		                 job ? "" : " under ", job ? "" : prefix ? prefix : "");
	else
		ret = send_json(c, 200, json_pack("{s:I}", "unpinned", (json_int_t)n), NULL);
out:
	json_decref(doc);
	return ret;
}
/* ---- access profiles ------------------------------------------------------------ */

/* POST /admin/profiles {"name": n, "key": client key id | "tag": x-larder-job}
 * -> 201; already recording: 409. */
static enum MHD_Result profile_start(struct admin *a, struct MHD_Connection *c, struct areq *q)
{
	json_error_t jerr;
	json_t *doc = q->body.len ? json_loadb(q->body.p, q->body.len, JSON_REJECT_DUPLICATES, &jerr)
	                          : NULL;
	bool bad = !json_is_object(doc);
	const char *name = bad ? NULL : member_str(doc, "name", &bad);
	const char *key = bad ? NULL : member_str(doc, "key", &bad);
	const char *tag = bad ? NULL : member_str(doc, "tag", &bad);
	enum MHD_Result ret;
	if (bad || !name || !key == !tag || json_object_size(doc) != 2 ||
	    strlen(key ? key : tag) > 128 || !*(key ? key : tag)) {
		ret = send_error(c, 400, "bad_request", NULL, "expected {\"name\": N, and \"key\": a "
		                 "client key id, or \"tag\": an x-larder-job value (1-128 bytes)}");
		goto out;
	}
	int r = profiles_start(a->gw->profiles, name, key, tag);
	if (r == -EINVAL)
		ret = send_error(c, 400, "bad_request", NULL, "invalid profile name \"%.64s\": 1-64 of "
		                 "A-Z a-z 0-9 . _ -, not starting with '.'", name);
	else if (r == -EEXIST)
		ret = send_error(c, 409, "profile_recording", NULL, "profile %s is recording already",
		                 name);
	else if (r == -ENOSPC)
		ret = send_error(c, 409, "too_many_profiles", NULL, "%d profiles are kept already: "
		                 "remove some from the cache directory's profiles/", PROFILES_MAX);
	else if (r)
		ret = send_error(c, 500, "internal", NULL, "%s", strerror(-r));
	else {
		cluster_profiles_started(a->gw, name, key, tag);
		ret = send_json(c, 201, json_pack("{s:s,s:b}", "name", name, "recording", 1), NULL);
	}
out:
	json_decref(doc);
	return ret;
}

static enum MHD_Result profile_list(struct admin *a, struct MHD_Connection *c, struct areq *q)
{
	(void)q;
	struct profile_info *infos = calloc(PROFILES_SHOWN, sizeof *infos);
	if (!infos)
		return send_error(c, 500, "internal", NULL, "out of memory");
	size_t n = profiles_list(a->gw->profiles, infos, PROFILES_SHOWN);
	json_t *arr = json_array();
	for (size_t i = 0; i < n; i++) {
		const struct profile_info *p = &infos[i];
		json_array_append_new(arr, json_pack("{s:s,s:b,s:s,s:I,s:I}", "name", p->name,
		                                     "recording", p->recording,
		                                     p->key_id[0] ? "key" : "tag",
		                                     p->key_id[0] ? p->key_id : p->tag,
		                                     "reads", (json_int_t)p->reads,
		                                     "dropped", (json_int_t)p->dropped));
	}
	free(infos);
	return send_json(c, 200, json_pack("{s:o}", "profiles", arr), NULL);
}

static enum MHD_Result profile_stop(struct admin *a, struct MHD_Connection *c, struct areq *q)
{
	char name[PROFILE_NAME_MAX + 1];
	size_t n = strcspn(q->rest, "/");
	snprintf(name, sizeof name, "%.*s", (int)(n < sizeof name ? n : sizeof name - 1), q->rest);
	int r = profiles_stop(a->gw->profiles, name);
	if (r == -ENOENT)
		return send_error(c, 404, "no_such_profile", NULL, "no profile %s", name);
	if (r == -EALREADY)
		return send_error(c, 409, "profile_stopped", NULL, "profile %s is not recording", name);
	if (r)
		return send_error(c, 500, "internal", NULL, "saving profile %s failed: %s", name,
		                  strerror(-r));
	cluster_profiles_stopped(a->gw, name);
	return send_json(c, 200, json_pack("{s:s,s:b}", "name", name, "recording", 0), NULL);
}

/* ---- routing -------------------------------------------------------------------- */

static const struct route {
	const char *path;
	const char *method;   /* GET routes answer HEAD too */
	bool token;
	size_t body_max;      /* bytes of body the route takes; more gets 413 */
	route_fn fn;
} routes[] = {
	{ "/healthz", "GET", false, 0, healthz },
	{ "/readyz", "GET", true, 0, readyz },
	{ "/metrics", "GET", true, 0, metrics },
	{ "/admin/stats", "GET", true, 0, stats },
	{ "/admin/cluster", "GET", true, 0, cluster },
	{ "/admin/purge", "POST", true, PURGE_BODY_MAX, purge },
	{ "/admin/prefetch", "POST", true, PREFETCH_BODY_MAX, prefetch },
	{ "/admin/unpin", "POST", true, SMALL_BODY_MAX, unpin },
	{ "/admin/profiles", "POST", true, SMALL_BODY_MAX, profile_start },
	{ "/admin/profiles", "GET", true, 0, profile_list },
	{ "/admin/profiles/*/stop", "POST", true, 0, profile_stop },
	{ "/admin/jobs", "GET", true, 0, jobs },
	/* A path ending in '/' takes the rest of the URL as its argument; a
	 * '*' takes one path segment. */
	{ "/admin/jobs/", "GET", true, 0, job_get },
	{ "/admin/jobs/", "DELETE", true, 0, job_cancel },
	{ "/admin/lookahead", "POST", true, PREFETCH_BODY_MAX, lookahead },
	{ "/admin/lookahead", "GET", true, 0, lookahead_get },
	{ "/admin/lookahead/", "DELETE", true, 0, lookahead_delete },
	{ "/ui", "GET", false, 0, ui },
	{ "/ui/", "GET", false, 0, ui },
};

#define N_ROUTES (sizeof routes / sizeof routes[0])

/* true when the token is right; else false with the error queued (*ret). */
static bool authorized(struct admin *a, struct MHD_Connection *c, enum MHD_Result *ret)
{
	const char *want = a->gw->cfg->admin_token;
	if (!want) {
		*ret = send_error(c, 403, "forbidden", NULL,
		                  "the admin API needs a token: set LARDER_ADMIN_TOKEN (or [admin] token) "
		                  "on the server");
		return false;
	}
	const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
	if (!h || strncasecmp(h, "Bearer ", 7) != 0) {
		*ret = send_error(c, 401, "unauthorized", "Bearer realm=\"larder-admin\"",
		                  "missing bearer token: send \"Authorization: Bearer "
		                  "<LARDER_ADMIN_TOKEN>\"");
		return false;
	}
	const char *got = h + 7;
	while (*got == ' ')
		got++;
	if (!ct_equal(got, strlen(got), want, strlen(want))) {
		const union MHD_ConnectionInfo *ci =
			MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
		char host[64] = "?";
		if (ci && ci->client_addr)
			getnameinfo(ci->client_addr, ci->client_addr->sa_family == AF_INET6
			            ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in),
			            host, sizeof host, NULL, 0, NI_NUMERICHOST);
		log_warn("admin", "wrong admin token from %s", host);
		*ret = send_error(c, 401, "unauthorized",
		                  "Bearer realm=\"larder-admin\", error=\"invalid_token\"",
		                  "invalid bearer token (it must equal the server's LARDER_ADMIN_TOKEN)");
		return false;
	}
	return true;
}

static enum MHD_Result too_large(struct MHD_Connection *c, const struct route *rt)
{
	return send_error(c, 413, "payload_too_large", NULL,
	                  "the request body is larger than %zu bytes, the most %s takes",
	                  rt->body_max, rt->path);
}

/*
 * Routes a request on its headers alone. Returns NULL with the refusal
 * queued (*ret) when the path or method is unknown, the token is missing
 * or wrong, or the declared body is larger than the route takes; the body
 * is then never read. Else the route, with *rest set.
 */
/* Whether url is path's: the same, or for a path ending in '/' that
 * followed by one segment, or for a path with a '*' one segment there.
 * *arg: the segment (up to the next '/' or the end), or the end of url. */
static bool route_match(const char *path, const char *url, const char **arg)
{
	size_t pl = strlen(path);
	const char *star = strchr(path, '*');
	if (star) {
		size_t pre = (size_t)(star - path), seg = strcspn(url + pre, "/");
		*arg = url + pre;
		return strncmp(path, url, pre) == 0 && seg > 0 && strcmp(url + pre + seg, star + 1) == 0;
	}
	if (path[pl - 1] == '/') {
		*arg = url + pl;
		return strncmp(path, url, pl) == 0 && url[pl] && !strchr(url + pl, '/');
	}
	*arg = url + strlen(url);
	return strcmp(path, url) == 0;
}

static const struct route *route_headers(struct admin *a, struct MHD_Connection *c,
                                         const char *url, const char *method, const char **rest,
                                         enum MHD_Result *ret)
{
	const struct route *path_match = NULL;
	for (size_t i = 0; i < N_ROUTES; i++) {
		const struct route *rt = &routes[i];
		const char *arg;
		if (!route_match(rt->path, url, &arg))
			continue;
		path_match = rt;
		bool ok = strcmp(method, rt->method) == 0 ||
		          (strcmp(rt->method, "GET") == 0 && strcmp(method, "HEAD") == 0);
		if (!ok)
			continue;
		if (rt->token && !authorized(a, c, ret))
			return NULL;
		const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
		                                             MHD_HTTP_HEADER_CONTENT_LENGTH);
		if (cl && strtoull(cl, NULL, 10) > rt->body_max) {
			*ret = too_large(c, rt);
			return NULL;
		}
		*rest = arg;
		return rt;
	}
	if (path_match)
		*ret = send_error(c, 405, "method_not_allowed", NULL, "%s takes %s, not %.32s",
		                  path_match->path, path_match->method, method);
	else
		*ret = send_error(c, 404, "not_found", NULL,
		                  "no route %.32s %.200s (routes: GET /healthz, GET /readyz, GET /metrics, "
		                  "GET /admin/stats, POST /admin/purge, POST /admin/prefetch, "
		                  "GET /admin/jobs, GET|DELETE /admin/jobs/{id}, GET|POST /admin/lookahead, "
		                  "DELETE /admin/lookahead/{id}, POST /admin/unpin, "
		                  "GET|POST /admin/profiles, POST /admin/profiles/{name}/stop, "
		                  "GET /admin/cluster, GET /ui)",
		                  method, url);
	return NULL;
}

static enum MHD_Result access_cb(void *cls, struct MHD_Connection *c, const char *url,
                                 const char *method, const char *version,
                                 const char *upload_data, size_t *upload_data_size,
                                 void **req_cls)
{
	struct admin *a = cls;
	(void)version;
	assert(a->magic == ADMIN_MAGIC);
	struct areq *q = *req_cls;
	if (!q) {
		/* The headers are in: decide now, before any body is read. */
		enum MHD_Result ret;
		const char *rest = NULL;
		const struct route *rt = route_headers(a, c, url, method, &rest, &ret);
		if (!rt)
			return ret;
		q = calloc(1, sizeof *q);
		if (!q)
			return MHD_NO;
		q->magic = AREQ_MAGIC;
		q->route = rt;
		q->rest = rest;
		buf_init(&q->body, rt->body_max);
		*req_cls = q;
		return MHD_YES;
	}
	assert(q->magic == AREQ_MAGIC);
	if (*upload_data_size) {
		/* A body without Content-Length (chunked) is capped as it comes. */
		if (!q->too_big && buf_append(&q->body, upload_data, *upload_data_size) != 0) {
			q->too_big = true;
			buf_reset(&q->body);
		}
		*upload_data_size = 0;
		return MHD_YES;
	}
	if (q->too_big)
		return too_large(c, q->route);
	log_debug("admin", "%s %s", method, url);
	return q->route->fn(a, c, q);
}

static void completed_cb(void *cls, struct MHD_Connection *c, void **req_cls,
                         enum MHD_RequestTerminationCode toe)
{
	struct areq *q = *req_cls;
	(void)cls;
	(void)c;
	(void)toe;
	if (!q)
		return;
	assert(q->magic == AREQ_MAGIC);
	buf_fini(&q->body);
	q->magic = 0;
	free(q);
	*req_cls = NULL;
}

/* ---- lifetime ------------------------------------------------------------------- */

int admin_start(struct gw *gw)
{
	const struct cfg *cfg = gw->cfg;
	gw->admin = NULL;
	if (!cfg->admin_host) {
		log_info("admin", "admin listener off (LARDER_ADMIN_LISTEN=off)");
		return 0;
	}
	struct addrinfo *ai = gw_resolve("LARDER_ADMIN_LISTEN", cfg->admin_host, cfg->admin_port);
	if (!ai)
		return -1;
	struct admin *a = calloc(1, sizeof *a);
	if (!a) {
		freeaddrinfo(ai);
		log_error("admin", "out of memory");
		return -1;
	}
	a->magic = ADMIN_MAGIC;
	a->gw = gw;
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_USE_ERROR_LOG |
	                 (ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0);
	a->mhd = MHD_start_daemon(flags, 0, NULL, NULL, access_cb, a,
	                          MHD_OPTION_EXTERNAL_LOGGER, log_mhd, (void *)"admin",
	                          MHD_OPTION_SOCK_ADDR, ai->ai_addr,
	                          MHD_OPTION_NOTIFY_COMPLETED, completed_cb, a,
	                          MHD_OPTION_CONNECTION_LIMIT, (unsigned)64,
	                          MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)30,
	                          MHD_OPTION_END);
	int err = errno;
	freeaddrinfo(ai);
	if (!a->mhd) {
		log_error("admin", "LARDER_ADMIN_LISTEN: cannot listen on %s:%u (%s); "
		          "set another address, or \"off\"", cfg->admin_host, cfg->admin_port, strerror(err));
		free(a);
		return -1;
	}
	gw->admin = a;
	log_info("admin", "admin listener on http://%s:%u%s", cfg->admin_host, cfg->admin_port,
	         cfg->admin_token ? "" : " (no LARDER_ADMIN_TOKEN: only /healthz answers)");
	return 0;
}

void admin_stop(struct gw *gw)
{
	struct admin *a = gw->admin;
	if (!a)
		return;
	assert(a->magic == ADMIN_MAGIC);
	MHD_stop_daemon(a->mhd);
	a->magic = 0;
	free(a);
	gw->admin = NULL;
}

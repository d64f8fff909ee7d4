/*
 * admin.c - the admin listener: routes, the bearer token, JSON in and out,
 * and the read-mostly routes (health, readiness, metrics, stats, cluster,
 * purge, the dashboard). The job routes (prefetch, jobs, lookahead, unpin,
 * profiles) are in admin_jobs.c; what the two share is admin_internal.h.
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
#include "gateway/admin_internal.h"

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
#include "base/sha256.h"
#include "gateway/metrics.h"
#include "gateway/limits.h"
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
#define ADMIN_CONNECTIONS 64 /* at once; a quarter of them from one address */
#define AREQ_MAGIC 0x61726571u
#define PREFETCH_BODY_MAX (8u << 20) /* a prefetch may list its keys */
#define SMALL_BODY_MAX 4096          /* unpin, profiles */
#define PURGE_BODY_MAX (16u << 10)   /* a bucket and a key, JSON-escaped */
#define METRICS_MAX (16u << 20)

/* ---- responses ------------------------------------------------------------------ */

/* Queues body (taken: free()d by MHD) with status and content type, and
 * header hname: hval when hname is not NULL. */
static enum MHD_Result send_body(struct MHD_Connection *c, unsigned status, const char *ctype,
                                 char *body, size_t len, const char *hname, const char *hval)
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
	if (hname)
		MHD_add_response_header(resp, hname, hval);
	enum MHD_Result r = MHD_queue_response(c, status, resp);
	MHD_destroy_response(resp);
	return r;
}

/* Sends doc (its reference is taken) as JSON, with header hname: hval. */
static enum MHD_Result send_json_with(struct MHD_Connection *c, unsigned status, json_t *doc,
                                      const char *hname, const char *hval)
{
	size_t flags = JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6);
	char *text = doc ? json_dumps(doc, flags) : NULL;
	json_decref(doc);
	if (!text) {
		static const char oom[] = "{\"error\":\"internal\",\"message\":\"out of memory\"}\n";
		return send_body(c, 500, "application/json", strdup(oom), sizeof oom - 1, NULL,
		                 NULL);
	}
	size_t n = strlen(text);
	char *withnl = realloc(text, n + 2);
	if (withnl) {
		withnl[n++] = '\n';
		withnl[n] = '\0';
		text = withnl;
	}
	return send_body(c, status, "application/json", text, n, hname, hval);
}

enum MHD_Result send_json(struct MHD_Connection *c, unsigned status, json_t *doc,
                          const char *www_auth)
{
	return send_json_with(c, status, doc, www_auth ? "WWW-Authenticate" : NULL, www_auth);
}

/* {"error": code, "message": msg}; msg may quote client input, so it is
 * kept valid UTF-8 for jansson (changed in place). */
static json_t *error_doc(const char *code, char *msg)
{
	for (char *p = msg; *p; p++)
		if ((unsigned char)*p < ' ' || (unsigned char)*p >= 0x7f)
			*p = '?';
	return json_pack("{s:s,s:s}", "error", code, "message", msg);
}

enum MHD_Result send_error(struct MHD_Connection *c, unsigned status, const char *code,
                           const char *www_auth, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	return send_json(c, status, error_doc(code, msg), www_auth);
}

/* ---- handlers ------------------------------------------------------------------- */

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
		g->invalidations_rejected = v.invalidations_rejected;
		g->invalidations_dropped = v.invalidations_dropped;
		g->invalidations_unacknowledged = v.invalidations_unacknowledged;
		g->resyncs = v.resyncs;
		g->read_barriers = v.read_barriers;
		g->read_barriers_lapsed = v.read_barriers_lapsed;
		g->redis_reconnects = v.redis_reconnects;
		g->members_rejected = v.members_rejected;
		g->clock_known = v.clock_known;
		g->clock_offset_ms = v.clock_offset_ms;
		g->directory_entries = v.directory_entries;
		dir_get_stats(gw->dir, &g->dir);
		placement_get_counts(&g->lookups);
	}
	struct prefetch_info *jobs = calloc(PREFETCH_LIST_MAX, sizeof *jobs);
	size_t n = gw->prefetch && jobs ? prefetch_list(gw->prefetch, jobs, PREFETCH_LIST_MAX) : 0;
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
	free(jobs);
	g->prefetch_bytes_total = gw->prefetch ? prefetch_warmed(gw->prefetch) : 0;
	/* Every pin (some made meanwhile may be left out of this look). */
	size_t room = gw->pins ? pins_count(gw->pins) + 16 : 0;
	struct pin_info *pins = room ? calloc(room, sizeof *pins) : NULL;
	g->n_pins = pins ? pins_list(gw->pins, pins, room) : 0;
	g->pins = pins;
	g->lookaheads = gw->lookahead != NULL;
	if (gw->lookahead)
		lookahead_get_stats(gw->lookahead, &g->lookahead);
	g->resident = limits_resident(gw->store, &g->n_resident);
}

static void gauges_fini(struct metrics_gauges *g)
{
	struct pin_info *pins = (struct pin_info *)g->pins;
	for (size_t i = 0; i < g->n_pins; i++)
		free(pins[i].prefix);
	free(pins);
	free((struct metrics_resident *)g->resident);
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
	                 NULL, NULL);
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
const char *member_str(json_t *o, const char *name, bool *bad)
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
	if (cache_purge(a->gw, bucket, what, key != NULL, false, &objects) != 0) {
		ret = send_error(c, 500, "internal", NULL, "the purge failed");
		goto out;
	}
	log_info("admin", "purge of %s \"%s\" in bucket %s: %llu objects",
	         key ? "key" : "prefix", what, bucket, (unsigned long long)objects);
	if (a->gw->cluster) { /* every node purges: an owner would serve what this one dropped */
		char *msg = NULL;
		if (asprintf(&msg, "%c%s/%s", key ? 'k' : 'p', bucket, what) > 0)
			cluster_publish_invalidate(a->gw->cluster, CLUSTER_PURGE, msg);
		free(msg);
	}
	ret = send_json(c, 200, json_pack("{s:s,s:s,s:I}", "bucket", bucket, key ? "key" : "prefix",
	                                  what, "purged_objects", (json_int_t)objects),
	                NULL);
out:
	json_decref(doc);
	return ret;
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
	double now = clock_mono_s();
	for (size_t i = 0; members && i < n; i++)
		json_array_append_new(members, json_pack("{s:s,s:s,s:I,s:f,s:I,s:f}", "id", ids[i],
		                                         "address", addrs[i], "capacity",
		                                         (json_int_t)caps[i], /* bytes, whole */
		                                         "ownership_share",
		                                         total > 0 ? caps[i] / total : 0.0,
		                                         "directory_entries",
		                                         (json_int_t)entries[i], "avoided_seconds",
		                                         cluster_avoided(gw->cluster, addrs[i],
		                                                         now)));
	/* Nodes of another protocol (a rolling upgrade): listed, never asked. */
	json_t *others = json_array();
	unsigned *protos = calloc(MAX, sizeof *protos);
	size_t no = ids && addrs && protos ? cluster_others(gw->cluster, ids, addrs, protos, MAX)
	                                   : 0;
	for (size_t i = 0; others && i < no; i++)
		json_array_append_new(others, json_pack("{s:s,s:s,s:I}", "id", ids[i], "address",
		                                        addrs[i], "protocol", (json_int_t)protos[i]));
	free(protos);
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
	json_t *barriers = json_pack("{s:I,s:I}", "waited", (json_int_t)v.read_barriers,
	                             "lapsed", (json_int_t)v.read_barriers_lapsed);
	return send_json(c, 200, json_pack("{s:b,s:s,s:I,s:b,s:I,s:b,s:b,s:o,s:o,s:I,s:o,s:I,s:I,"
	                                   "s:I,s:I,s:I,s:I,s:I,s:o,s:o}",
	                                   "clustered", 1, "self", v.self, "protocol",
	                                   (json_int_t)CLUSTER_PROTOCOL, "redis_up", v.redis_up,
	                                   "heartbeats", (json_int_t)v.heartbeats,
	                                   "subscribed", v.subscribed, "joining", v.joining,
	                                   "members",
	                                   members, "other_protocol", others, "members_rejected",
	                                   (json_int_t)v.members_rejected, "directory", dir,
	                                   "redis_reconnects",
	                                   (json_int_t)v.redis_reconnects, "invalidations_sent",
	                                   (json_int_t)v.invalidations_sent,
	                                   "invalidations_received",
	                                   (json_int_t)v.invalidations_received,
	                                   "invalidations_rejected",
	                                   (json_int_t)v.invalidations_rejected,
	                                   "invalidations_dropped",
	                                   (json_int_t)v.invalidations_dropped,
	                                   "invalidations_unacknowledged",
	                                   (json_int_t)v.invalidations_unacknowledged, "resyncs",
	                                   (json_int_t)v.resyncs, "read_barriers", barriers,
	                                   "clock_offset_ms",
	                                   v.clock_known ? json_integer((json_int_t)v.clock_offset_ms)
	                                                 : json_null()), NULL);
}

/* GET /ui and /ui/{file}: the dashboard. No token: the page holds no data;
 * its script asks the API with the token the user gives it. */
static enum MHD_Result ui(struct admin *a, struct MHD_Connection *c, struct areq *q)
{
	(void)a;
	return ui_respond(c, q->rest);
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
	{ "/admin/prefetch", "POST", true, PREFETCH_BODY_MAX, admin_prefetch },
	{ "/admin/unpin", "POST", true, SMALL_BODY_MAX, admin_unpin },
	{ "/admin/profiles", "POST", true, SMALL_BODY_MAX, admin_profile_start },
	{ "/admin/profiles", "GET", true, 0, admin_profile_list },
	{ "/admin/profiles/*/stop", "POST", true, 0, admin_profile_stop },
	{ "/admin/jobs", "GET", true, 0, admin_jobs },
	/* A path ending in '/' takes the rest of the URL as its argument; a
	 * '*' takes one path segment. */
	{ "/admin/jobs/", "GET", true, 0, admin_job_get },
	{ "/admin/jobs/", "DELETE", true, 0, admin_job_cancel },
	{ "/admin/lookahead", "POST", true, PREFETCH_BODY_MAX, admin_lookahead },
	{ "/admin/lookahead", "GET", true, 0, admin_lookahead_get },
	{ "/admin/lookahead/", "DELETE", true, 0, admin_lookahead_delete },
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
	/* Compared as digests, so the time taken says nothing of the token's
	 * length either (ct_equal returns at once on a length mismatch). */
	unsigned char dg[32], dw[32];
	sha256(got, strlen(got), dg);
	sha256(want, strlen(want), dw);
	if (!ct_equal(dg, sizeof dg, dw, sizeof dw)) {
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

/* 405 for url, whose routes take other methods than method: they go in
 * Allow (RFC 9110 15.5.6), GET with HEAD. */
static enum MHD_Result not_allowed(struct MHD_Connection *c, const struct route *rt,
                                   const char *url, const char *method)
{
	char allow[96] = "";
	size_t n = 0;
	for (size_t i = 0; i < N_ROUTES && n < sizeof allow; i++) {
		const char *arg;
		if (route_match(routes[i].path, url, &arg))
			n += (size_t)snprintf(allow + n, sizeof allow - n, "%s%s%s", n ? ", " : "",
			                      routes[i].method,
			                      strcmp(routes[i].method, "GET") == 0 ? ", HEAD" : "");
	}
	char msg[256];
	snprintf(msg, sizeof msg, "%s takes %s, not %.32s", rt->path, allow, method);
	return send_json_with(c, 405, error_doc("method_not_allowed", msg), "Allow", allow);
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
		*ret = not_allowed(c, path_match, url, method);
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
	/* The listener lasts the drain (health, metrics, jobs); a job started
	 * now would only be cancelled at the stop. */
	if (atomic_load(&a->gw->draining) && (q->route->fn == admin_prefetch ||
	                                       q->route->fn == admin_lookahead ||
	                                       q->route->fn == admin_profile_start))
		return send_error(c, 503, "draining", NULL, "larder is stopping: no new jobs");
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
	/* A thread per connection: some routes block (a warm job's bucket
	 * HEAD, up to the upstream timeout; a prefix pin's listing, up to
	 * PIN_WAIT_S), and /healthz, which liveness probes ask, must not wait
	 * behind them. Every route's calls are thread-safe. */
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
	                 MHD_USE_AUTO | MHD_USE_ERROR_LOG |
	                 (ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0);
	/* A connection counts from its accept, before any token is read: one
	 * address may hold a quarter of them, so a client that opens many and
	 * never ends its headers does not starve the probes of /healthz. */
	a->mhd = MHD_start_daemon(flags, 0, NULL, NULL, access_cb, a,
	                          MHD_OPTION_EXTERNAL_LOGGER, log_mhd, (void *)"admin",
	                          MHD_OPTION_SOCK_ADDR, ai->ai_addr,
	                          MHD_OPTION_NOTIFY_COMPLETED, completed_cb, a,
	                          MHD_OPTION_CONNECTION_LIMIT, (unsigned)ADMIN_CONNECTIONS,
	                          MHD_OPTION_PER_IP_CONNECTION_LIMIT,
	                          (unsigned)(ADMIN_CONNECTIONS / 4),
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
	         cfg->admin_token ? "" : " (no LARDER_ADMIN_TOKEN: only /healthz and /ui answer)");
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

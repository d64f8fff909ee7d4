/*
 * admin_jobs.c - the admin routes that start, watch and end work: prefetch
 * (warm and pin) jobs, lookaheads, unpin and access profiles, with the
 * validation of their JSON bodies. The listener, routing and token check
 * are admin.c's (admin_internal.h).
 */
#include "gateway/admin_internal.h"

#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "gateway/cluster_profiles.h"
#include "gateway/lookahead.h"
#include "gateway/pins.h"
#include "gateway/prefetch.h"
#include "gateway/profiles.h"
#include "gateway/s3req.h"
#include "gateway/server.h"

#define PIN_WAIT_S 10.0             /* how long a pin's listing may take before 202 */
#define PROFILES_SHOWN 1024

/* ---- lookaheads ------------------------------------------------------------------ */

static json_t *lookahead_json(const struct lookahead_info *i)
{
	return json_pack("{s:s,s:s,s:s,s:I,s:I,s:I,s:o,s:I,s:I,s:f}", "id", i->id, "state",
	                 i->state, "bucket", i->bucket, "keys", (json_int_t)i->keys,
	                 "position", (json_int_t)i->position, "window", (json_int_t)i->window,
	                 "window_bytes", i->window_bytes ? json_integer((json_int_t)i->window_bytes)
	                                                 : json_null(),
	                 "objects", (json_int_t)i->objects, "bytes", (json_int_t)i->bytes,
	                 "idle_seconds", i->idle_s);
}

/* The lookaheads, running ones only or all (with up to 16 ended). */
json_t *lookaheads_json(struct gw *gw, bool running_only)
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

/* Whether larder's upstream credentials may read bucket; when not, the
 * refusal queued (*ret): 403 or 404 bucket_unreadable as upstream said, 502
 * or 503 upstream_unavailable when upstream could not say (worth a retry). */
static bool bucket_readable(struct admin *a, struct MHD_Connection *c, const char *bucket,
                            enum MHD_Result *ret)
{
	char err[256];
	int st = prefetch_check_bucket(a->gw, bucket, err, sizeof err);
	if (st)
		*ret = send_error(c, (unsigned)st, st == 403 || st == 404 ? "bucket_unreadable"
		                  : "upstream_unavailable", NULL, "%s", err);
	return st == 0;
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
	return bucket_readable(a, c, bucket, ret);
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

/* The answer to prefetch_start's (or lookahead_start's) refusal rc. */
static enum MHD_Result job_refused(struct MHD_Connection *c, int rc, const char *err)
{
	if (rc == -EBUSY)
		return send_error(c, 429, "too_many_jobs", NULL, "%s", err);
	return send_error(c, 500, "internal", NULL, "%s", err);
}

/* A warm job's optional members: "concurrency" (1-64),
 * "bandwidth_bytes_per_second" (>= 0) and "pin_seconds" (1-PIN_SECONDS_MAX),
 * into rq. false when one is there but out of range. */
static bool job_options(json_t *doc, struct prefetch_req *rq)
{
	json_t *jconc = json_object_get(doc, "concurrency");
	json_t *jbw = json_object_get(doc, "bandwidth_bytes_per_second");
	json_t *jpin = json_object_get(doc, "pin_seconds");
	if ((jconc && (!json_is_integer(jconc) || json_integer_value(jconc) < 1 ||
	               json_integer_value(jconc) > 64)) ||
	    (jbw && (!json_is_integer(jbw) || json_integer_value(jbw) < 0)) ||
	    (jpin && (!json_is_integer(jpin) || json_integer_value(jpin) < 1 ||
	              json_integer_value(jpin) > PIN_SECONDS_MAX)))
		return false;
	rq->concurrency = jconc ? (unsigned)json_integer_value(jconc) : 0;
	rq->bytes_per_s = jbw ? (uint64_t)json_integer_value(jbw) : 0;
	rq->pin_seconds = jpin ? (uint64_t)json_integer_value(jpin) : 0;
	return true;
}

/* Whether buckets[i] is the first of its name among buckets[0..i]. */
static bool first_of(char **buckets, size_t i)
{
	for (size_t k = 0; k < i; k++)
		if (strcmp(buckets[k], buckets[i]) == 0)
			return false;
	return true;
}

/* {"profile": NAME, optional "concurrency", "bandwidth_bytes_per_second",
 * "pin_seconds"}: a warm job of the profile's reads in recorded order, one
 * per bucket it read -> 202 {"job": the first, "jobs": all}. */
static enum MHD_Result prefetch_profile(struct admin *a, struct MHD_Connection *c, json_t *doc)
{
	bool bad = false;
	const char *name = member_str(doc, "profile", &bad);
	struct prefetch_req opts = { 0 };
	if (bad || !name || json_object_get(doc, "bucket") || json_object_get(doc, "prefix") ||
	    json_object_get(doc, "keys") || json_object_get(doc, "manifest") ||
	    !job_options(doc, &opts))
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
	struct prefetch_req *rqs = calloc(n ? n : 1, sizeof *rqs);
	char(*ids)[24] = calloc(n ? n : 1, sizeof *ids);
	bool ok = jobs && sel && rqs && ids;
	/* Every bucket is checked before any job starts, and the jobs start
	 * together or not at all: a refusal changes nothing. */
	size_t distinct = 0;
	for (size_t i = 0; ok && i < n; i++) {
		if (!first_of(buckets, i))
			continue;
		distinct++;
		ok = bucket_readable(a, c, buckets[i], &ret);
	}
	/* One job per bucket, each in the order the profile read its keys:
	 * sel holds them bucket after bucket. */
	size_t d = 0, m = 0;
	for (size_t i = 0; ok && i < n; i++) {
		if (!first_of(buckets, i))
			continue;
		size_t from = m;
		for (size_t k = i; k < n; k++)
			if (strcmp(buckets[k], buckets[i]) == 0)
				sel[m++] = keys[k];
		rqs[d] = opts;
		rqs[d].bucket = buckets[i];
		rqs[d].keys = sel + from;
		rqs[d].n_keys = m - from;
		d++;
	}
	char err[256];
	int rc = ok && distinct ? prefetch_start_all(a->gw->prefetch, rqs, distinct, ids, err,
	                                             sizeof err) : 0;
	if (rc == -EBUSY)
		ret = send_error(c, 429, "too_many_jobs", NULL, "profile %.64s needs %zu warm jobs; "
		                 "%d may run at once: wait for some to end, or cancel some", name,
		                 distinct, PREFETCH_RUNNING_MAX);
	else if (rc != 0)
		ret = send_error(c, 500, "internal", NULL, "%s", err);
	ok = ok && rc == 0;
	for (size_t i = 0; ok && i < distinct; i++)
		json_array_append_new(jobs, json_string(ids[i]));
	if (ok && json_array_size(jobs) == 0)
		ret = send_error(c, 409, "empty_profile", NULL, "profile %.64s recorded no reads", name);
	else if (ok)
		ret = send_json(c, 202, json_pack("{s:O,s:O,s:s,s:I}", "job", json_array_get(jobs, 0),
		                                  "jobs", jobs, "state", "listing", "objects",
		                                  (json_int_t)n), NULL);
	else if (!jobs || !sel || !rqs || !ids)
		ret = send_error(c, 500, "internal", NULL, "out of memory");
	json_decref(jobs);
	free(sel);
	free(rqs);
	free(ids);
	profile_reads_free(buckets, keys, n);
	return ret;
}

/* POST /admin/prefetch {"bucket": b, one of "prefix" | "keys" | "manifest",
 * optional "concurrency" (1-64), "bandwidth_bytes_per_second",
 * "pin_seconds"} -> 202; a pin past the pin limit -> 409. */
enum MHD_Result admin_prefetch(struct admin *a, struct MHD_Connection *c, struct areq *q)
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
	struct prefetch_req rq = { 0 };
	int sources = (prefix != NULL) + (manifest != NULL) + (jkeys != NULL);
	if (manifest && (!*manifest || strlen(manifest) > S3_MAX_KEY_BYTES)) {
		ret = send_error(c, 400, "bad_request", NULL,
		                 "\"manifest\" must be a key of 1-1024 bytes");
		goto out;
	}
	if (prefix && strlen(prefix) > S3_MAX_KEY_BYTES) {
		ret = send_error(c, 400, "bad_request", NULL, "\"prefix\" must be at most 1024 bytes");
		goto out;
	}
	if (bad || !bucket || sources != 1 || (jkeys && !json_is_array(jkeys)) ||
	    !job_options(doc, &rq)) {
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
	rq.bucket = bucket;
	rq.prefix = prefix;
	rq.keys = keys;
	rq.n_keys = n;
	rq.manifest = manifest;
	char id[24];
	int rc = prefetch_start(a->gw->prefetch, &rq, id, err, sizeof err);
	if (rc != 0) {
		ret = job_refused(c, rc, err);
		goto out;
	}
	/* A prefix pin is sized by its listing: refused here. A key list is sized
	 * object by object as it warms, so its refusal is its job's failure,
	 * whenever it comes (answering 409 when it came within the wait would
	 * make the answer depend on timing). */
	if (rq.pin_seconds && prefix && pin_refused(a->gw->prefetch, id, err, sizeof err)) {
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

enum MHD_Result admin_jobs(struct admin *a, struct MHD_Connection *c, struct areq *q)
{
	(void)q;
	struct prefetch_info *infos = calloc(PREFETCH_LIST_MAX, sizeof *infos);
	if (!infos)
		return send_error(c, 500, "internal", NULL, "out of memory");
	size_t n = prefetch_list(a->gw->prefetch, infos, PREFETCH_LIST_MAX);
	json_t *arr = json_array();
	for (size_t i = 0; arr && i < n; i++)
		json_array_append_new(arr, job_json(&infos[i]));
	free(infos);
	return send_json(c, 200, json_pack("{s:o}", "jobs", arr), NULL);
}

/* A warm job's status by id: a lookahead's warming is not one (it is not
 * listed, and its lookahead ends it). */
static bool job_get(struct admin *a, const char *id, struct prefetch_info *info)
{
	return prefetch_get(a->gw->prefetch, id, info) == 0 && !info->gated;
}

enum MHD_Result admin_job_get(struct admin *a, struct MHD_Connection *c, struct areq *q)
{
	struct prefetch_info info;
	if (!job_get(a, q->rest, &info))
		return send_error(c, 404, "not_found", NULL, "no job %.64s", q->rest);
	return send_json(c, 200, job_json(&info), NULL);
}

enum MHD_Result admin_job_cancel(struct admin *a, struct MHD_Connection *c, struct areq *q)
{
	struct prefetch_info info;
	if (!job_get(a, q->rest, &info))
		return send_error(c, 404, "not_found", NULL, "no job %.64s", q->rest);
	int rc = prefetch_cancel(a->gw->prefetch, q->rest);
	if (rc == -EALREADY && prefetch_get(a->gw->prefetch, q->rest, &info) == 0)
		return send_error(c, 409, "job_ended", NULL, "job %.64s has ended: %s", q->rest,
		                  info.state);
	if (rc != 0)
		return send_error(c, 404, "not_found", NULL, "no job %.64s", q->rest);
	log_info("admin", "job %s: cancel requested", q->rest);
	return send_json(c, 202, json_pack("{s:s,s:s}", "job", q->rest, "state", "cancelling"),
	                 NULL);
}

/* ---- read-order lookaheads ------------------------------------------------------- */

/* POST /admin/lookahead {"bucket": b, "keys": [...] or "manifest": key, "window": N
 * and/or "window_bytes": N, optional "concurrency" (1-64), "idle_seconds" (1-86400)} -> 201. */
enum MHD_Result admin_lookahead(struct admin *a, struct MHD_Connection *c, struct areq *q)
{
	static const char usage[] =
		"expected {\"bucket\": ..., \"keys\": [keys in read order] or \"manifest\": "
		"\"key of a newline list\", \"window\": objects (1-4096) and/or "
		"\"window_bytes\": bytes (up to 1 PiB), optionally \"concurrency\" (1-64) and "
		"\"idle_seconds\" (1-86400)}";
	json_error_t jerr;
	json_t *doc = q->body.len ? json_loadb(q->body.p, q->body.len, JSON_REJECT_DUPLICATES, &jerr)
	                          : NULL;
	if (!doc)
		return send_error(c, 400, "bad_request", NULL, "%s%s%s", usage,
		                  q->body.len ? ": " : "", q->body.len ? jerr.text : "");
	enum MHD_Result ret;
	const char **keys = NULL;
	static const char *const known[] = { "bucket", "keys", "manifest", "window", "window_bytes",
		"concurrency", "idle_seconds", NULL };
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
	json_t *jwb = json_object_get(doc, "window_bytes");
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
	else if (!jwin && !jwb)
		what = "give \"window\", \"window_bytes\" or both";
	else if (jwin && (!json_is_integer(jwin) || json_integer_value(jwin) < 1 ||
	                  json_integer_value(jwin) > LOOKAHEAD_WINDOW_MAX))
		what = "\"window\" must be a number of objects, 1-4096";
	else if (jwb && (!json_is_integer(jwb) || json_integer_value(jwb) < 1 ||
	                 (uint64_t)json_integer_value(jwb) > LOOKAHEAD_WINDOW_BYTES_MAX))
		what = "\"window_bytes\" must be a number of bytes, 1-1125899906842624 (1 PiB)";
	else if (jconc && (!json_is_integer(jconc) || json_integer_value(jconc) < 1 ||
	                   json_integer_value(jconc) > 64))
		what = "\"concurrency\" must be 1-64";
	else if (jidle && (!json_is_integer(jidle) || json_integer_value(jidle) < 1 ||
	                   json_integer_value(jidle) > LOOKAHEAD_IDLE_MAX))
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
		.window = jwin ? (size_t)json_integer_value(jwin) : LOOKAHEAD_WINDOW_MAX,
		.window_bytes = jwb ? (uint64_t)json_integer_value(jwb) : 0,
		.concurrency = jconc ? (unsigned)json_integer_value(jconc) : 0,
		.idle_s = jidle ? (double)json_integer_value(jidle) : 0,
	};
	char id[24];
	if (!a->gw->lookahead) {
		ret = send_error(c, 503, "unavailable", NULL, "lookahead is not running");
		goto out;
	}
	int rc = lookahead_start(a->gw->lookahead, &rq, id, err, sizeof err);
	if (rc == -EBUSY) {
		ret = job_refused(c, rc, err);
		goto out;
	}
	if (rc != 0) {
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

enum MHD_Result admin_lookahead_get(struct admin *a, struct MHD_Connection *c, struct areq *q)
{
	(void)q;
	return send_json(c, 200, json_pack("{s:o}", "lookaheads", lookaheads_json(a->gw, false)),
	                 NULL);
}

enum MHD_Result admin_lookahead_delete(struct admin *a, struct MHD_Connection *c, struct areq *q)
{
	if (!a->gw->lookahead || lookahead_end(a->gw->lookahead, q->rest) != 0)
		return send_error(c, 404, "not_found", NULL, "no running lookahead %.64s", q->rest);
	log_info("admin", "lookahead %s: ended", q->rest);
	return send_json(c, 200, json_pack("{s:s,s:s}", "id", q->rest, "state", "ended"), NULL);
}

/* POST /admin/unpin {"job": id} or {"bucket": b, "prefix": p} (every pin
 * of b whose prefix starts with p) -> 200 {"unpinned": n}; none: 404. */
enum MHD_Result admin_unpin(struct admin *a, struct MHD_Connection *c, struct areq *q)
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
enum MHD_Result admin_profile_start(struct admin *a, struct MHD_Connection *c, struct areq *q)
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

enum MHD_Result admin_profile_list(struct admin *a, struct MHD_Connection *c, struct areq *q)
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

enum MHD_Result admin_profile_stop(struct admin *a, struct MHD_Connection *c, struct areq *q)
{
	char name[PROFILE_NAME_MAX + 1];
	size_t n = strcspn(q->rest, "/");
	/* A longer segment is no profile's name: cut short, it could be another's. */
	if (n >= sizeof name)
		return send_error(c, 404, "no_such_profile", NULL, "no profile %.*s",
		                  (int)(n < 200 ? n : 200), q->rest);
	snprintf(name, sizeof name, "%.*s", (int)n, q->rest);
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

/*
 * test_metrics.c - gateway/metrics.c: operation names, the Prometheus text
 * (rendered, then parsed back and checked line by line), the stats JSON with
 * its per-bucket and per-client rows, the bound on rows, and counting from
 * several threads at once.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/metrics.h"
#include "gateway/pins.h"
#include "gateway/s3req.h"
#include "store/store.h"

/* ---- a strict reader of the text format --------------------------------------- */

/* Renders, checks the structure, and returns the text (free it). Checked:
 * every sample belongs to the family of the last "# TYPE" (histograms:
 * _bucket, _sum, _count), every family has HELP then TYPE exactly once,
 * names match [a-zA-Z_:][a-zA-Z0-9_:]*, values parse, counters end in
 * _total, histogram buckets are cumulative and end with +Inf == _count. */
static char *render(const struct metrics_gauges *g)
{
	struct buf b;
	buf_init(&b, 8u << 20);
	assert_int_equal(metrics_render_prometheus(&b, g), 0);
	char *text = buf_steal(&b);
	assert_non_null(text);
	assert_true(strlen(text) > 0 && text[strlen(text) - 1] == '\n');

	char family[128] = "", type[16] = "", help_for[128] = "";
	char seen[64][128];
	size_t n_seen = 0;
	double last_bucket = -1, inf = -1;
	char *copy = strdup(text), *save = NULL;
	for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		if (strncmp(line, "# HELP ", 7) == 0) {
			assert_int_equal(sscanf(line + 7, "%127s", help_for), 1);
			for (size_t i = 0; i < n_seen; i++)
				if (strcmp(seen[i], help_for) == 0)
					fail_msg("family %s appears twice", help_for);
			assert_true(n_seen < 64);
			snprintf(seen[n_seen++], sizeof seen[0], "%s", help_for);
			continue;
		}
		if (strncmp(line, "# TYPE ", 7) == 0) {
			assert_int_equal(sscanf(line + 7, "%127s %15s", family, type), 2);
			assert_string_equal(family, help_for);
			assert_true(strcmp(type, "counter") == 0 || strcmp(type, "gauge") == 0 ||
			            strcmp(type, "histogram") == 0);
			assert_true(strncmp(family, "larder_", 7) == 0);
			if (strcmp(type, "counter") == 0)
				assert_non_null(strstr(family, "_total"));
			last_bucket = -1;
			inf = -1;
			continue;
		}
		assert_true(line[0] != '#');
		size_t nl = strspn(line, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_:");
		assert_true(nl > 0);
		char name[128];
		snprintf(name, sizeof name, "%.*s", (int)nl, line);
		const char *p = line + nl;
		if (*p == '{') {
			const char *end = strchr(p, '}');
			assert_non_null(end);
			p = end + 1;
		}
		assert_true(*p == ' ');
		char *endv;
		double v = strtod(p + 1, &endv);
		assert_true(endv != p + 1 && *endv == '\0');
		assert_true(v >= 0);
		if (strcmp(type, "histogram") == 0) {
			size_t fl = strlen(family);
			assert_int_equal(strncmp(name, family, fl), 0);
			const char *suffix = name + fl;
			assert_true(strcmp(suffix, "_bucket") == 0 || strcmp(suffix, "_sum") == 0 ||
			            strcmp(suffix, "_count") == 0);
			if (strcmp(suffix, "_bucket") == 0) {
				assert_true(v >= last_bucket);
				last_bucket = v;
				if (strstr(line, "le=\"+Inf\""))
					inf = v;
			} else if (strcmp(suffix, "_count") == 0) {
				assert_true(inf == v);
			}
		} else {
			assert_string_equal(name, family);
		}
	}
	free(copy);
	return text;
}

/* The value of the sample "name{labels}" (labels exactly as rendered; NULL:
 * none), or -1 when absent. */
static double value_of(const char *text, const char *name, const char *labels)
{
	char want[512];
	snprintf(want, sizeof want, "\n%s%s%s%s ", name, labels ? "{" : "", labels ? labels : "",
	         labels ? "}" : "");
	const char *p = strstr(text, want);
	return p ? strtod(p + strlen(want), NULL) : -1;
}

static int setup(void **state)
{
	(void)state;
	metrics_reset();
	return 0;
}

/* ---- operations ------------------------------------------------------------------ */

static void test_operations(void **state)
{
	(void)state;
	static const struct {
		const char *method;
		int target;
		const char *query;
		bool copy;
		const char *want;
	} cases[] = {
		{ "GET", S3T_OBJECT, "", false, "GetObject" },
		{ "GET", S3T_OBJECT, "versionId=3&response-content-type=x", false, "GetObject" },
		{ "GET", S3T_OBJECT, "partNumber=2", false, "GetObject" },
		{ "HEAD", S3T_OBJECT, NULL, false, "HeadObject" },
		{ "PUT", S3T_OBJECT, "", false, "PutObject" },
		{ "PUT", S3T_OBJECT, "", true, "CopyObject" },
		{ "PUT", S3T_OBJECT, "partNumber=1&uploadId=abc", false, "UploadPart" },
		{ "PUT", S3T_OBJECT, "uploadId=abc&partNumber=1", true, "UploadPart" },
		{ "PUT", S3T_OBJECT, "tagging", false, "Other" },
		{ "DELETE", S3T_OBJECT, "", false, "DeleteObject" },
		{ "DELETE", S3T_OBJECT, "uploadId=abc", false, "Other" },
		{ "POST", S3T_OBJECT, "uploads", false, "CreateMultipartUpload" },
		{ "POST", S3T_OBJECT, "uploads=", false, "CreateMultipartUpload" },
		{ "POST", S3T_OBJECT, "uploadId=abc", false, "CompleteMultipartUpload" },
		{ "POST", S3T_OBJECT, "restore", false, "Other" },
		{ "GET", S3T_OBJECT, "uploadId=abc", false, "Other" },
		{ "GET", S3T_OBJECT, "acl", false, "Other" },
		{ "GET", S3T_OBJECT, "myuploads=1", false, "GetObject" },
		{ "GET", S3T_BUCKET, "list-type=2&prefix=a", false, "ListObjectsV2" },
		{ "GET", S3T_BUCKET, "prefix=a&list-type=2", false, "ListObjectsV2" },
		{ "GET", S3T_BUCKET, "list-type=20", false, "ListObjects" },
		{ "GET", S3T_BUCKET, "", false, "ListObjects" },
		{ "GET", S3T_BUCKET, "location", false, "Other" },
		{ "GET", S3T_BUCKET, "versions", false, "Other" },
		{ "POST", S3T_BUCKET, "delete", false, "Other" },
		{ "PUT", S3T_BUCKET, "", false, "Other" },
		{ "GET", S3T_SERVICE, "", false, "ListBuckets" },
		{ "PATCH", S3T_OBJECT, "", false, "Other" },
		{ NULL, S3T_OBJECT, "", false, "Other" },
		{ "GET", 99, "", false, "Other" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		const char *got = s3_operation(cases[i].method, cases[i].target, cases[i].query,
		                               cases[i].copy);
		if (strcmp(got, cases[i].want) != 0)
			fail_msg("case %zu: %s %d \"%s\": %s, want %s", i,
			         cases[i].method ? cases[i].method : "(null)", cases[i].target,
			         cases[i].query ? cases[i].query : "(null)", got, cases[i].want);
	}
}

/* ---- Prometheus text ----------------------------------------------------------- */

static void test_render_after_calls(void **state)
{
	(void)state;
	char *text = render(NULL);
	/* Nothing happened yet: zero-valued families are still there. */
	assert_true(value_of(text, "larder_cache_requests_total", "result=\"hit\"") == 0);
	assert_true(value_of(text, "larder_upstream_request_duration_seconds_count", NULL) == 0);
	assert_true(value_of(text, "larder_requests_total", "op=\"GetObject\",status=\"200\"") == -1);
	free(text);

	for (int i = 0; i < 3; i++)
		metrics_request("GetObject", 200, "data", "AK1", "hit", 1000, 0);
	metrics_request("GetObject", 200, "data", "AK1", "miss", 500, 0);
	metrics_request("GetObject", 404, "data", "AK1", "miss", 0, 0);
	metrics_request("PutObject", 200, "data", "AK2", NULL, 0, 4096);
	metrics_request("HeadObject", 200, "data", NULL, "bypass", 0, 0);
	metrics_request("NoSuchOp", 500, NULL, "AK1", NULL, 10, 0);
	metrics_request("GetObject", 0, "data", "AK1", "miss", 0, 0);   /* nothing sent */
	metrics_request("GetObject", 777, "data", "AK1", "miss", 0, 0); /* out of range: 0 */

	metrics_upstream(206, 1 << 20, 0.003, false);
	metrics_upstream(503, 0, 0.2, false);
	metrics_upstream(206, 1 << 20, 0.04, true);
	metrics_upstream(0, 100, 30, true);
	metrics_upstream(200, 5, -1, false); /* a negative time counts as 0 */

	struct store_stats st = {
		.ram_used = 3 << 20, .ram_capacity = 1 << 30, .ram_entries = 3,
		.disk_used = 4096, .disk_capacity = 10ull << 30, .disk_entries = 1,
		.inflight = 2, .hits_ram = 7, .hits_disk = 1, .misses = 4, .coalesced = 5,
		.evictions_ram = 9, .disk_ok = true,
	};
	struct metrics_gauges g = { .store = &st, .meta_entries = 11, .open_connections = 4 };
	text = render(&g);
	assert_true(value_of(text, "larder_requests_total", "op=\"GetObject\",status=\"200\"") == 4);
	assert_true(value_of(text, "larder_requests_total", "op=\"GetObject\",status=\"404\"") == 1);
	assert_true(value_of(text, "larder_requests_total", "op=\"GetObject\",status=\"0\"") == 2);
	assert_true(value_of(text, "larder_requests_total", "op=\"PutObject\",status=\"200\"") == 1);
	assert_true(value_of(text, "larder_requests_total", "op=\"HeadObject\",status=\"200\"") == 1);
	assert_true(value_of(text, "larder_requests_total", "op=\"Other\",status=\"500\"") == 1);
	assert_true(value_of(text, "larder_response_body_bytes_total", "op=\"GetObject\"") == 3500);
	assert_true(value_of(text, "larder_request_body_bytes_total", "op=\"PutObject\"") == 4096);
	assert_true(value_of(text, "larder_cache_requests_total", "result=\"hit\"") == 3);
	assert_true(value_of(text, "larder_cache_requests_total", "result=\"miss\"") == 4);
	assert_true(value_of(text, "larder_cache_requests_total", "result=\"bypass\"") == 1);
	assert_true(value_of(text, "larder_cache_response_bytes_total", "result=\"hit\"") == 3000);
	assert_true(value_of(text, "larder_cache_response_bytes_total", "result=\"miss\"") == 500);

	assert_true(value_of(text, "larder_upstream_requests_total", "status=\"206\"") == 2);
	assert_true(value_of(text, "larder_upstream_requests_total", "status=\"503\"") == 1);
	assert_true(value_of(text, "larder_upstream_requests_total", "status=\"0\"") == 1);
	assert_true(value_of(text, "larder_upstream_response_bytes_total", NULL) ==
	            2 * (1 << 20) + 105);
	assert_true(value_of(text, "larder_upstream_errors_total", NULL) == 2);
	assert_true(value_of(text, "larder_upstream_retries_total", NULL) == 2);
	const char *h = "larder_upstream_request_duration_seconds_bucket";
	assert_true(value_of(text, h, "le=\"0.005\"") == 2);
	assert_true(value_of(text, h, "le=\"0.025\"") == 2);
	assert_true(value_of(text, h, "le=\"0.05\"") == 3);
	assert_true(value_of(text, h, "le=\"0.25\"") == 4);
	assert_true(value_of(text, h, "le=\"10\"") == 4);
	assert_true(value_of(text, h, "le=\"+Inf\"") == 5);
	assert_true(value_of(text, "larder_upstream_request_duration_seconds_count", NULL) == 5);
	double sum = value_of(text, "larder_upstream_request_duration_seconds_sum", NULL);
	assert_true(sum > 30.242 && sum < 30.244);

	assert_true(value_of(text, "larder_cache_chunk_hits_total", "tier=\"ram\"") == 7);
	assert_true(value_of(text, "larder_cache_chunk_hits_total", "tier=\"nvme\"") == 1);
	assert_true(value_of(text, "larder_cache_chunk_misses_total", NULL) == 4);
	assert_true(value_of(text, "larder_coalesced_waiters_total", NULL) == 5);
	assert_true(value_of(text, "larder_inflight_fetches", NULL) == 2);
	assert_true(value_of(text, "larder_cache_evictions_total", "tier=\"ram\"") == 9);
	assert_true(value_of(text, "larder_cache_used_bytes", "tier=\"ram\"") == 3 << 20);
	assert_true(value_of(text, "larder_cache_capacity_bytes", "tier=\"nvme\"") ==
	            (double)(10ull << 30));
	assert_true(value_of(text, "larder_cache_chunks", "tier=\"ram\"") == 3);
	assert_true(value_of(text, "larder_nvme_up", NULL) == 1);
	free(text);
	st.disk_capacity = 0; /* no NVMe tier: no up/down gauge */
	text = render(&g);
	assert_true(value_of(text, "larder_nvme_up", NULL) == -1);
	assert_true(value_of(text, "larder_metadata_objects", NULL) == 11);
	assert_true(value_of(text, "larder_client_connections", NULL) == 4);
	free(text);
}

/* ---- stats JSON ---------------------------------------------------------------- */

static json_t *stats(void)
{
	json_t *doc = metrics_stats_json(NULL);
	assert_non_null(doc);
	/* It must survive a round trip through text. */
	char *s = json_dumps(doc, 0);
	assert_non_null(s);
	json_t *back = json_loads(s, 0, NULL);
	assert_non_null(back);
	assert_true(json_equal(doc, back));
	free(s);
	json_decref(back);
	return doc;
}

static json_int_t field(json_t *doc, const char *group, const char *name, const char *k)
{
	json_t *row = group ? json_object_get(json_object_get(doc, group), name)
	                    : json_object_get(doc, name);
	if (!row)
		fail_msg("no row %s/%s", group ? group : "", name);
	json_t *v = json_object_get(row, k);
	if (!json_is_integer(v))
		fail_msg("row %s/%s has no integer %s", group ? group : "", name, k);
	return json_integer_value(v);
}

static void test_per_bucket(void **state)
{
	(void)state;
	metrics_request("GetObject", 200, "alpha", "AK1", "hit", 100, 0);
	metrics_request("GetObject", 200, "alpha", "AK1", "hit", 100, 0);
	metrics_request("GetObject", 206, "alpha", "AK2", "miss", 50, 0);
	metrics_request("PutObject", 200, "alpha", "AK2", NULL, 0, 70);
	metrics_request("GetObject", 200, "beta", "AK1", "miss", 30, 0);
	metrics_request("ListBuckets", 200, NULL, "AK1", NULL, 900, 0);
	metrics_request("GetObject", 403, "beta", NULL, NULL, 200, 0);
	metrics_request("GetObject", 200, "bad\xff\x01name", "AK1", "bypass", 1, 0);

	json_t *doc = stats();
	assert_int_equal(field(doc, NULL, "total", "requests"), 8);
	assert_int_equal(field(doc, NULL, "total", "hits"), 2);
	assert_int_equal(field(doc, NULL, "total", "misses"), 2);
	assert_int_equal(field(doc, NULL, "total", "bypass"), 1);
	assert_int_equal(field(doc, NULL, "total", "bytes_served"), 1381);
	assert_int_equal(field(doc, NULL, "total", "upstream_bytes_saved"), 200);

	assert_int_equal(field(doc, "buckets", "alpha", "requests"), 4);
	assert_int_equal(field(doc, "buckets", "alpha", "hits"), 2);
	assert_int_equal(field(doc, "buckets", "alpha", "misses"), 1);
	assert_int_equal(field(doc, "buckets", "alpha", "bytes_served"), 250);
	assert_int_equal(field(doc, "buckets", "alpha", "upstream_bytes_saved"), 200);
	assert_int_equal(field(doc, "buckets", "alpha", "bytes_received"), 70);
	json_t *hr = json_object_get(json_object_get(json_object_get(doc, "buckets"), "alpha"),
	                             "hit_ratio");
	assert_true(json_is_real(hr));
	assert_true(json_real_value(hr) > 0.6666 && json_real_value(hr) < 0.6667);
	assert_int_equal(field(doc, "buckets", "beta", "requests"), 2);
	assert_int_equal(field(doc, "buckets", "beta", "hits"), 0);
	/* Not a byte that is not visible ASCII reaches the JSON. */
	assert_int_equal(field(doc, "buckets", "bad??name", "bypass"), 1);
	/* The service has no bucket row. */
	assert_int_equal(json_object_size(json_object_get(doc, "buckets")), 3);

	assert_int_equal(field(doc, "clients", "AK1", "requests"), 5);
	assert_int_equal(field(doc, "clients", "AK1", "upstream_bytes_saved"), 200);
	assert_int_equal(field(doc, "clients", "AK2", "requests"), 2);
	assert_int_equal(field(doc, "clients", METRICS_ANONYMOUS, "requests"), 1);
	json_t *anon = json_object_get(json_object_get(doc, "clients"), METRICS_ANONYMOUS);
	assert_true(json_is_null(json_object_get(anon, "hit_ratio")));
	/* Sorted by name. */
	const char *prev = "", *name;
	json_t *row;
	json_object_foreach(json_object_get(doc, "buckets"), name, row) {
		assert_true(strcmp(prev, name) < 0);
		prev = name;
	}
	json_decref(doc);
}

static void test_rows_are_bounded(void **state)
{
	(void)state;
	char name[32];
	for (int i = 0; i < METRICS_MAX_ROWS + 100; i++) {
		snprintf(name, sizeof name, "bucket-%05d", i);
		metrics_request("GetObject", 200, name, "AK1", "hit", 1, 0);
	}
	/* Existing rows keep counting after the table is full. */
	metrics_request("GetObject", 200, "bucket-00000", "AK1", "hit", 1, 0);
	json_t *doc = stats();
	json_t *buckets = json_object_get(doc, "buckets");
	assert_int_equal(json_object_size(buckets), METRICS_MAX_ROWS + 1);
	assert_int_equal(field(doc, "buckets", METRICS_OTHER, "requests"), 100);
	assert_int_equal(field(doc, "buckets", "bucket-00000", "requests"), 2);
	assert_int_equal(field(doc, NULL, "total", "requests"), METRICS_MAX_ROWS + 101);
	json_decref(doc);
}

/* ---- threads ------------------------------------------------------------------- */

#define THREADS 4
#define PER_THREAD 20000

static void *hammer(void *arg)
{
	int t = (int)(intptr_t)arg;
	char bucket[32], key[32];
	for (int i = 0; i < PER_THREAD; i++) {
		snprintf(bucket, sizeof bucket, "b%02d", (i + t) % 50);
		snprintf(key, sizeof key, "K%d", i % 7);
		metrics_request(i % 2 ? "GetObject" : "HeadObject", 200, bucket, key,
		                i % 3 ? "hit" : "miss", 10, 0);
		if (i % 10 == 0)
			metrics_upstream(206, 10, 0.01, false);
	}
	return NULL;
}

static void test_threads(void **state)
{
	(void)state;
	pthread_t th[THREADS];
	for (int t = 0; t < THREADS; t++)
		assert_int_equal(pthread_create(&th[t], NULL, hammer, (void *)(intptr_t)t), 0);
	for (int t = 0; t < THREADS; t++)
		pthread_join(th[t], NULL);
	json_t *doc = stats();
	assert_int_equal(field(doc, NULL, "total", "requests"), THREADS * PER_THREAD);
	assert_int_equal(json_object_size(json_object_get(doc, "buckets")), 50);
	assert_int_equal(json_object_size(json_object_get(doc, "clients")), 7);
	json_int_t sum = 0;
	const char *name;
	json_t *row;
	json_object_foreach(json_object_get(doc, "buckets"), name, row)
		sum += json_integer_value(json_object_get(row, "requests"));
	assert_int_equal(sum, THREADS * PER_THREAD);
	assert_int_equal(field(doc, NULL, "total", "bytes_served"), THREADS * PER_THREAD * 10);
	json_decref(doc);
	char *text = render(NULL);
	assert_true(value_of(text, "larder_upstream_requests_total", "status=\"206\"") ==
	            THREADS * PER_THREAD / 10);
	free(text);
}

/* A pin's bytes by its id; an id is a client's or another node's text, so
 * its quotes, backslashes and newlines are escaped as the text format says. */
static void test_pin_bytes_escaped(void **state)
{
	(void)state;
	struct store_stats st = { .ram_capacity = 1 << 30 };
	struct pin_info pins[2] = { { .id = "pf-1", .bytes = 5 << 20 },
		                    { .id = "node\"a\\b\nc/pf-2", .bytes = 7 } };
	struct metrics_gauges g = { .store = &st, .pins = pins, .n_pins = 2 };
	char *text = render(&g);
	assert_non_null(strstr(text, "\nlarder_pin_bytes{pin=\"pf-1\"} 5242880\n"));
	assert_non_null(strstr(text, "\nlarder_pin_bytes{pin=\"node\\\"a\\\\b\\nc/pf-2\"} 7\n"));
	free(text);
}

/* What goes between the nodes of a cluster is no client's request and no
 * upstream request: summed over the nodes, those count each one once. */
static void test_peer_traffic_apart(void **state)
{
	(void)state;
	metrics_request("GetObject", 200, "data", "AK1", "miss", 100, 0);
	metrics_peer_served("node-1", "hit", 64);
	metrics_peer_served("node-1", NULL, 200);
	metrics_peer_fetch(206, 64);
	metrics_peer_fetch(0, 0);
	metrics_upstream(206, 36, 0.01, false);
	struct metrics_gauges g = { .clustered = true };
	char *text = render(&g);
	assert_true(value_of(text, "larder_requests_total", "op=\"GetObject\",status=\"200\"") == 1);
	assert_true(value_of(text, "larder_cache_requests_total", "result=\"hit\"") == 0);
	assert_true(value_of(text, "larder_upstream_requests_total", "status=\"206\"") == 1);
	assert_true(value_of(text, "larder_upstream_response_bytes_total", NULL) == 36);
	assert_true(value_of(text, "larder_peer_requests_total", "status=\"206\"") == 1);
	assert_true(value_of(text, "larder_peer_requests_total", "status=\"0\"") == 1);
	assert_true(value_of(text, "larder_peer_response_bytes_total", NULL) == 64);
	assert_true(value_of(text, "larder_peer_served_total", "result=\"hit\"") == 1);
	assert_true(value_of(text, "larder_peer_served_total", "result=\"other\"") == 1);
	assert_true(value_of(text, "larder_peer_served_bytes_total", NULL) == 264);
	free(text);
	json_t *doc = metrics_stats_json(NULL);
	assert_non_null(doc);
	assert_int_equal(json_integer_value(json_object_get(json_object_get(doc, "total"),
	                                                    "requests")), 1);
	assert_null(json_object_get(json_object_get(doc, "clients"), "node-1"));
	json_t *peer = json_object_get(json_object_get(doc, "peers"), "node-1");
	assert_int_equal(json_integer_value(json_object_get(peer, "requests")), 2);
	assert_int_equal(json_integer_value(json_object_get(peer, "hits")), 1);
	json_t *fetches = json_object_get(doc, "peer_fetches");
	assert_int_equal(json_integer_value(json_object_get(fetches, "requests")), 2);
	assert_int_equal(json_integer_value(json_object_get(fetches, "errors")), 1);
	json_decref(doc);
}

/* A transfer larder stopped (its client left) reached upstream: counted, with
 * the status it had, and no error; one that failed by itself is an error. */
static void test_stopped_transfer_counts(void **state)
{
	(void)state;
	CURL *easy = curl_easy_init();
	assert_non_null(easy);
	metrics_upstream_curl(easy, 200, CURLE_ABORTED_BY_CALLBACK, false, false);
	metrics_upstream_curl(easy, 0, CURLE_ABORTED_BY_CALLBACK, false, false);
	metrics_upstream_curl(easy, 0, CURLE_COULDNT_CONNECT, false, false);
	metrics_upstream_curl(easy, 206, CURLE_OK, false, true); /* a peer's: not upstream's */
	curl_easy_cleanup(easy);
	char *text = render(NULL);
	assert_true(value_of(text, "larder_upstream_requests_total", "status=\"200\"") == 1);
	assert_true(value_of(text, "larder_upstream_requests_total", "status=\"0\"") == 2);
	assert_true(value_of(text, "larder_upstream_requests_total", "status=\"206\"") == -1);
	assert_true(value_of(text, "larder_upstream_errors_total", NULL) == 1);
	free(text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_operations, setup),
		cmocka_unit_test_setup(test_render_after_calls, setup),
		cmocka_unit_test_setup(test_per_bucket, setup),
		cmocka_unit_test_setup(test_rows_are_bounded, setup),
		cmocka_unit_test_setup(test_threads, setup),
		cmocka_unit_test_setup(test_pin_bytes_escaped, setup),
		cmocka_unit_test_setup(test_peer_traffic_apart, setup),
		cmocka_unit_test_setup(test_stopped_transfer_counts, setup),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * cli.c - the admin command line: option parsing, the requests to the
 * admin endpoint (libcurl; JSON through jansson), the shared printing
 * helpers, and `larder stats`, `larder cluster` and `larder purge`. The
 * subcommands that start and watch work (warm, jobs, lookahead, unpin,
 * profile) are in cli_jobs.c; what the two share is cli_internal.h.
 *
 * The endpoint is --admin URL, else LARDER_ADMIN_URL, else the server's
 * default listener (http://127.0.0.1:9090). The token comes only from
 * LARDER_ADMIN_TOKEN, never the command line, where other users could read
 * it in the process list.
 *
 * Output is meant for scripts when stdout is not a terminal: tab-separated
 * columns with a header line, raw byte counts, no colour. On a terminal the
 * same table is aligned, with sizes in KiB/MiB/GiB and ratios in percent.
 */
#include "gateway/cli.h"
#include "gateway/cli_internal.h"

#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/buf.h"
#include "gateway/pins.h"
#include "gateway/s3req.h"

#define DEFAULT_ADMIN_URL "http://127.0.0.1:9090"

/* "90", "90s", "30m", "6h", "2d" -> seconds; -1 when not a duration. */
static long long parse_duration(const char *v)
{
	char *end;
	errno = 0;
	long long n = strtoll(v, &end, 10);
	if (end == v || errno || n < 1)
		return -1;
	long long mul = 1;
	switch (*end) {
	case '\0': case 's': break;
	case 'm': mul = 60; break;
	case 'h': mul = 3600; break;
	case 'd': mul = 86400; break;
	default: return -1;
	}
	if (*end && end[1])
		return -1;
	return n > INT64_MAX / mul ? -1 : n * mul;
}

/* The options and the token line every reading subcommand's usage shares. */
#define ADMIN_AND_JSON_OPTIONS \
	"  --admin URL  the admin endpoint (default: $LARDER_ADMIN_URL, else\n" \
	"               " DEFAULT_ADMIN_URL ")\n" \
	"  --json       print the server's JSON document as it is\n" \
	"\n" \
	"The bearer token is read from LARDER_ADMIN_TOKEN. When stdout is not a terminal\n"

static void usage_stats(FILE *f)
{
	fputs("usage: larder stats [--admin URL] [--json]\n"
	      "\n"
	      "Prints what a running larder served: requests, cache hits and misses, hit ratio,\n"
	      "bytes served and upstream bytes saved, in total, per bucket and per client key.\n"
	      "\n"
	      ADMIN_AND_JSON_OPTIONS
	      "the table is tab-separated with raw numbers (hit_ratio \"-\" when there were no\n"
	      "cacheable reads).\n"
	      "Exit status: 0 ok, 1 the server could not be reached or refused, 2 bad usage.\n", f);
}

static void usage_purge(FILE *f)
{
	fputs("usage: larder purge [--admin URL] s3://BUCKET[/PREFIX]\n"
	      "       larder purge [--admin URL] --key s3://BUCKET/KEY\n"
	      "\n"
	      "Makes a running larder forget cached objects, so the next read of each goes\n"
	      "upstream: every object under PREFIX (the whole bucket without one), or with --key\n"
	      "exactly one object.\n"
	      "\n"
	      "  --admin URL  the admin endpoint (default: $LARDER_ADMIN_URL, else\n"
	      "               " DEFAULT_ADMIN_URL ")\n"
	      "  --key        the path names one object, not a prefix\n"
	      "\n"
	      "The bearer token is read from LARDER_ADMIN_TOKEN.\n"
	      "Exit status: 0 ok, 1 the server could not be reached or refused, 2 bad usage.\n", f);
}

/* Parses the options both commands share. Returns -1 to continue, else
 * the exit status (--help: 0; a usage error: 2, reported). */
int cli_parse(struct opts *o, int argc, char **argv, void (*usage)(FILE *))
{
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i];
		if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
			usage(stdout);
			return 0;
		} else if (strcmp(a, "--admin") == 0) {
			if (i + 1 >= argc) {
				fprintf(stderr, "larder %s: --admin needs a URL\n", o->cmd);
				return 2;
			}
			o->admin = argv[++i];
		} else if (strncmp(a, "--admin=", 8) == 0) {
			o->admin = a + 8;
		} else if ((strcmp(o->cmd, "stats") == 0 || strcmp(o->cmd, "jobs") == 0 ||
		            strcmp(o->cmd, "cluster") == 0 || strcmp(o->cmd, "lookahead") == 0 ||
		            strcmp(o->cmd, "profile") == 0) &&
		           strcmp(a, "--json") == 0) {
			o->json = true;
		} else if (strcmp(o->cmd, "purge") == 0 && strcmp(a, "--key") == 0) {
			o->key = true;
		} else if (strcmp(o->cmd, "warm") == 0 && strcmp(a, "--no-wait") == 0) {
			o->no_wait = true;
		} else if ((strcmp(o->cmd, "warm") == 0 && (strcmp(a, "--manifest") == 0 ||
		            strcmp(a, "--concurrency") == 0 || strcmp(a, "--bandwidth") == 0 ||
		            strcmp(a, "--pin") == 0 || strcmp(a, "--profile") == 0)) ||
		           (strcmp(o->cmd, "jobs") == 0 && strcmp(a, "--cancel") == 0)) {
			if (i + 1 >= argc) {
				fprintf(stderr, "larder %s: %s needs a value\n", o->cmd, a);
				return 2;
			}
			const char *v = argv[++i];
			char *end;
			if (strcmp(a, "--manifest") == 0) {
				o->manifest = v;
			} else if (strcmp(a, "--cancel") == 0) {
				o->cancel = v;
			} else if (strcmp(a, "--profile") == 0) {
				o->profile = v;
			} else if (strcmp(a, "--pin") == 0) {
				o->pin_s = parse_duration(v);
				if (o->pin_s < 0 || o->pin_s > PIN_SECONDS_MAX) {
					fprintf(stderr, "larder warm: --pin takes a duration of at most 30d "
					        "(90s, 30m, 6h, 2d), got \"%s\"\n", v);
					return 2;
				}
			} else if (strcmp(a, "--concurrency") == 0) {
				o->concurrency = strtol(v, &end, 10);
				if (*end || o->concurrency < 1 || o->concurrency > 64) {
					fprintf(stderr, "larder warm: --concurrency takes 1-64, got \"%s\"\n", v);
					return 2;
				}
			} else {
				errno = 0;
				o->bandwidth = strtoll(v, &end, 10);
				if (*end || end == v || errno || o->bandwidth < 0) {
					fprintf(stderr, "larder warm: --bandwidth takes bytes per second, got "
					        "\"%s\"\n", v);
					return 2;
				}
			}
		} else if (a[0] == '-' && a[1]) {
			fprintf(stderr, "larder %s: unknown option \"%s\"\n", o->cmd, a);
			usage(stderr);
			return 2;
		} else if ((strcmp(o->cmd, "purge") == 0 || strcmp(o->cmd, "warm") == 0 ||
		            strcmp(o->cmd, "lookahead") == 0 || strcmp(o->cmd, "unpin") == 0) && !o->target) {
			o->target = a;
		} else {
			fprintf(stderr, "larder %s: unexpected argument \"%s\"\n", o->cmd, a);
			usage(stderr);
			return 2;
		}
	}
	if (!o->admin || !*o->admin)
		o->admin = getenv("LARDER_ADMIN_URL");
	if (!o->admin || !*o->admin)
		o->admin = DEFAULT_ADMIN_URL;
	if (strncmp(o->admin, "http://", 7) != 0 && strncmp(o->admin, "https://", 8) != 0) {
		fprintf(stderr, "larder %s: the admin URL must start with http:// or https://, got "
		        "\"%s\"\n", o->cmd, o->admin);
		return 2;
	}
	return -1;
}

/* ---- HTTP ----------------------------------------------------------------------- */

static size_t collect(char *p, size_t size, size_t n, void *arg)
{
	return buf_append(arg, p, size * n) == 0 ? size * n : 0;
}

/*
 * One request to the admin endpoint. Returns 0 with *status and the body in
 * resp, or 1 when it could not be made (reported on stderr).
 */
int cli_call_method(const struct opts *o, const char *method, const char *path,
                    const char *post_body, long *status, struct buf *resp)
{
	char url[2048];
	size_t n = strlen(o->admin);
	while (n && o->admin[n - 1] == '/')
		n--;
	if ((size_t)snprintf(url, sizeof url, "%.*s%s", (int)n, o->admin, path) >= sizeof url) {
		fprintf(stderr, "larder %s: the admin URL is too long\n", o->cmd);
		return 1;
	}
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		fprintf(stderr, "larder %s: cannot initialise libcurl\n", o->cmd);
		return 1;
	}
	CURL *c = curl_easy_init();
	struct curl_slist *h = NULL;
	struct buf auth;
	buf_init(&auth, 1024);
	const char *token = getenv("LARDER_ADMIN_TOKEN");
	int rc = 1;
	if (!c)
		goto out;
	if (token && *token) {
		if (buf_printf(&auth, "Authorization: Bearer %s", token) != 0) {
			fprintf(stderr, "larder %s: LARDER_ADMIN_TOKEN is too long\n", o->cmd);
			goto out;
		}
		h = curl_slist_append(h, buf_cstr(&auth));
	}
	h = curl_slist_append(h, "Accept: application/json");
	if (post_body) {
		h = curl_slist_append(h, "Content-Type: application/json");
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, post_body);
	}
	if (method)
		curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	char errbuf[CURL_ERROR_SIZE] = "";
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, resp);
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 10L);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 120L);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_USERAGENT, "larder-cli");
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	CURLcode res = curl_easy_perform(c);
	if (res != CURLE_OK) {
		fprintf(stderr, "larder %s: cannot reach the admin endpoint %s: %s\n", o->cmd, url,
		        errbuf[0] ? errbuf : curl_easy_strerror(res));
		goto out;
	}
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
	rc = 0;
out:
	if (auth.p)
		explicit_bzero(auth.p, auth.len);
	buf_fini(&auth);
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	curl_global_cleanup();
	return rc;
}

int cli_call(const struct opts *o, const char *path, const char *post_body, long *status,
             struct buf *resp)
{
	return cli_call_method(o, NULL, path, post_body, status, resp);
}

/* A 2xx with a JSON object: returns it. Otherwise reports the server's
 * message (or what came instead) on stderr and returns NULL. */
json_t *cli_json_answer(const struct opts *o, long status, const struct buf *resp)
{
	json_error_t jerr;
	json_t *doc = resp->len ? json_loadb(resp->p, resp->len, 0, &jerr) : NULL;
	if (status >= 200 && status < 300 && json_is_object(doc))
		return doc;
	const char *msg = json_string_value(json_object_get(doc, "message"));
	if (msg) {
		fprintf(stderr, "larder %s: %s (HTTP %ld)\n", o->cmd, msg, status);
	} else {
		int n = (int)(resp->len > 200 ? 200 : resp->len);
		fprintf(stderr, "larder %s: unexpected answer from %s: HTTP %ld%s%.*s\n", o->cmd,
		        o->admin, status, n ? ": " : "", n, resp->len ? resp->p : "");
	}
	if (status == 401 && !getenv("LARDER_ADMIN_TOKEN"))
		fprintf(stderr, "larder %s: LARDER_ADMIN_TOKEN is not set\n", o->cmd);
	json_decref(doc);
	return NULL;
}

json_t *cli_ask(const struct opts *o, const char *method, const char *path, const char *body)
{
	struct buf resp;
	buf_init(&resp, RESPONSE_MAX);
	long status = 0;
	json_t *doc = cli_call_method(o, method, path, body, &status, &resp) == 0
	                      ? cli_json_answer(o, status, &resp)
	                      : NULL;
	buf_fini(&resp);
	return doc;
}

/* ---- stats ---------------------------------------------------------------------- */

uint64_t cli_num(json_t *row, const char *k)
{
	json_int_t v = json_integer_value(json_object_get(row, k));
	return v > 0 ? (uint64_t)v : 0;
}

void cli_human_size(uint64_t n, char *out, size_t len)
{
	static const char *const unit[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
	double v = (double)n;
	int u = 0;
	while (v >= 1024 && u < 5) {
		v /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(out, len, "%llu B", (unsigned long long)n);
	else
		snprintf(out, len, "%.1f %s", v, unit[u]);
}

static const char *const columns[] = {
	"scope", "name", "requests", "hits", "misses", "bypass", "hit_ratio", "bytes_served",
	"upstream_bytes_saved",
};

static void print_row(bool tty, const char *scope, const char *name, json_t *row)
{
	char ratio[32] = "-", served[32], saved[32];
	json_t *hr = json_object_get(row, "hit_ratio");
	if (json_is_number(hr))
		snprintf(ratio, sizeof ratio, tty ? "%.1f%%" : "%.4f",
		         json_number_value(hr) * (tty ? 100 : 1));
	if (tty) {
		cli_human_size(cli_num(row, "bytes_served"), served, sizeof served);
		cli_human_size(cli_num(row, "upstream_bytes_saved"), saved, sizeof saved);
		printf("%-7s %-32s %10llu %10llu %10llu %8llu %9s %12s %12s\n", scope, name,
		       (unsigned long long)cli_num(row, "requests"), (unsigned long long)cli_num(row, "hits"),
		       (unsigned long long)cli_num(row, "misses"), (unsigned long long)cli_num(row, "bypass"),
		       ratio, served, saved);
	} else {
		printf("%s\t%s\t%llu\t%llu\t%llu\t%llu\t%s\t%llu\t%llu\n", scope, name,
		       (unsigned long long)cli_num(row, "requests"), (unsigned long long)cli_num(row, "hits"),
		       (unsigned long long)cli_num(row, "misses"), (unsigned long long)cli_num(row, "bypass"),
		       ratio, (unsigned long long)cli_num(row, "bytes_served"),
		       (unsigned long long)cli_num(row, "upstream_bytes_saved"));
	}
}

static void print_stats(json_t *doc)
{
	bool tty = isatty(STDOUT_FILENO);
	if (tty)
		printf("%-7s %-32s %10s %10s %10s %8s %9s %12s %12s\n", "SCOPE", "NAME", "REQUESTS",
		       "HITS", "MISSES", "BYPASS", "HIT RATIO", "SERVED", "SAVED");
	else
		for (size_t i = 0; i < sizeof columns / sizeof columns[0]; i++)
			printf("%s%c", columns[i], i + 1 < sizeof columns / sizeof columns[0] ? '\t' : '\n');
	print_row(tty, "total", "-", json_object_get(doc, "total"));
	static const char *const groups[][2] = {
		{ "buckets", "bucket" }, { "clients", "client" }, { "peers", "peer" },
	};
	for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++) {
		const char *name;
		json_t *row;
		json_object_foreach(json_object_get(doc, groups[g][0]), name, row)
			print_row(tty, groups[g][1], name, row);
	}
	json_t *cache = json_object_get(doc, "cache");
	if (tty && cache) {
		char ru[32], rc[32], du[32], dc[32];
		json_t *ram = json_object_get(cache, "ram"), *nvme = json_object_get(cache, "nvme");
		cli_human_size(cli_num(ram, "used_bytes"), ru, sizeof ru);
		cli_human_size(cli_num(ram, "capacity_bytes"), rc, sizeof rc);
		cli_human_size(cli_num(nvme, "used_bytes"), du, sizeof du);
		cli_human_size(cli_num(nvme, "capacity_bytes"), dc, sizeof dc);
		printf("\ncache: RAM %s of %s, NVMe %s of %s, %llu objects known, %llu fetches in "
		       "flight\n", ru, rc, du, dc, (unsigned long long)cli_num(cache, "metadata_objects"),
		       (unsigned long long)cli_num(cache, "inflight_fetches"));
	}
}

/* GET path and print the answer: as it is with --json, else with print. */
int cli_get_and_print(const struct opts *o, const char *path, void (*print)(json_t *doc))
{
	struct buf resp;
	buf_init(&resp, RESPONSE_MAX);
	long status = 0;
	json_t *doc = cli_call(o, path, NULL, &status, &resp) == 0
	                      ? cli_json_answer(o, status, &resp)
	                      : NULL;
	int rc = 1;
	if (doc) {
		if (o->json)
			fwrite(resp.p, 1, resp.len, stdout);
		else
			print(doc);
		rc = fflush(stdout) == 0 ? 0 : 1;
	}
	json_decref(doc);
	buf_fini(&resp);
	return rc;
}

int cli_stats(int argc, char **argv)
{
	struct opts o = { .cmd = "stats" };
	int rc = cli_parse(&o, argc, argv, usage_stats);
	return rc >= 0 ? rc : cli_get_and_print(&o, "/admin/stats", print_stats);
}

/* ---- cluster -------------------------------------------------------------------- */

static void usage_cluster(FILE *f)
{
	fputs("usage: larder cluster [--admin URL] [--json]\n"
	      "\n"
	      "Prints a running larder's view of its cluster: whether it reaches Redis, the live\n"
	      "members with their addresses, capacities, share of the chunks they own and the\n"
	      "placement-directory entries they list, and this node's directory lookups.\n"
	      "\n"
	      ADMIN_AND_JSON_OPTIONS
	      "the members are tab-separated rows with raw numbers, after a header line.\n"
	      "Exit status: 0 ok, 1 the server could not be reached or refused, 2 bad usage.\n", f);
}

#define CLUSTER_COLUMNS \
	"id\taddress\tcapacity\townership_share\tdirectory_entries\tavoided_seconds\n"

static void print_cluster(json_t *doc)
{
	bool tty = isatty(STDOUT_FILENO);
	if (!json_is_true(json_object_get(doc, "clustered"))) {
		printf(tty ? "not in a cluster (LARDER_REDIS_URL is not set): this node serves alone\n"
		           : CLUSTER_COLUMNS);
		return;
	}
	const char *self = json_string_value(json_object_get(doc, "self"));
	json_t *members = json_object_get(doc, "members"), *dir = json_object_get(doc, "directory");
	if (tty) {
		json_t *lk = json_object_get(dir, "lookups");
		printf("%s: redis %s, %zu member%s; directory %llu entries (this node %llu, tracking "
		       "%llu chunks); lookups found %llu, none %llu, failed %llu, skipped %llu\n\n",
		       self ? self : "?",
		       json_is_true(json_object_get(doc, "redis_up")) ? "up" : "DOWN (serving alone)",
		       json_array_size(members), json_array_size(members) == 1 ? "" : "s",
		       (unsigned long long)cli_num(dir, "entries"),
		       (unsigned long long)cli_num(dir, "self_entries"),
		       (unsigned long long)cli_num(dir, "tracked"), (unsigned long long)cli_num(lk, "found"),
		       (unsigned long long)cli_num(lk, "none"), (unsigned long long)cli_num(lk, "failed"),
		       (unsigned long long)cli_num(lk, "skipped"));
		printf("%-24s %-28s %10s %7s %10s\n", "ID", "ADDRESS", "CAPACITY", "SHARE", "DIRECTORY");
	} else {
		printf(CLUSTER_COLUMNS);
	}
	size_t i;
	json_t *m;
	json_array_foreach(members, i, m) {
		const char *id = json_string_value(json_object_get(m, "id"));
		const char *addr = json_string_value(json_object_get(m, "address"));
		double cap = json_number_value(json_object_get(m, "capacity"));
		double share = json_number_value(json_object_get(m, "ownership_share"));
		double avoided = json_number_value(json_object_get(m, "avoided_seconds"));
		if (tty) {
			char c[32];
			cli_human_size(cap > 0 ? (uint64_t)cap : 0, c, sizeof c);
			printf("%-24s %-28s %10s %6.1f%% %10llu%s", id ? id : "?", addr ? addr : "?",
			       c, share * 100, (unsigned long long)cli_num(m, "directory_entries"),
			       id && self && strcmp(id, self) == 0 ? "  (this node)" : "");
			if (avoided > 0)
				printf("  (answered nothing: gone past for %.0f s more)", avoided);
			putchar('\n');
		} else {
			printf("%s\t%s\t%.0f\t%.6f\t%llu\t%.1f\n", id ? id : "", addr ? addr : "",
			       cap, share, (unsigned long long)cli_num(m, "directory_entries"),
			       avoided);
		}
	}
	/* Nodes of another protocol (a rolling upgrade): on a terminal only,
	 * so the table's columns stay the members'. */
	json_t *others = json_object_get(doc, "other_protocol");
	json_array_foreach(tty ? others : NULL, i, m) {
		const char *id = json_string_value(json_object_get(m, "id"));
		const char *addr = json_string_value(json_object_get(m, "address"));
		printf("%-24s %-28s  another larder (cluster protocol %llu): no member\n",
		       id ? id : "?", addr ? addr : "?",
		       (unsigned long long)cli_num(m, "protocol"));
	}
}

int cli_cluster(int argc, char **argv)
{
	struct opts o = { .cmd = "cluster" };
	int rc = cli_parse(&o, argc, argv, usage_cluster);
	return rc >= 0 ? rc : cli_get_and_print(&o, "/admin/cluster", print_cluster);
}

/* ---- purge ---------------------------------------------------------------------- */

int cli_purge(int argc, char **argv)
{
	struct opts o = { .cmd = "purge" };
	int rc = cli_parse(&o, argc, argv, usage_purge);
	if (rc >= 0)
		return rc;
	if (!o.target) {
		fprintf(stderr, "larder purge: what to purge is missing: s3://BUCKET[/PREFIX]\n");
		usage_purge(stderr);
		return 2;
	}
	if (strncmp(o.target, "s3://", 5) != 0) {
		fprintf(stderr, "larder purge: expected s3://BUCKET[/PREFIX], got \"%s\"\n", o.target);
		return 2;
	}
	const char *bucket = o.target + 5;
	size_t blen = strcspn(bucket, "/");
	const char *path = bucket[blen] ? bucket + blen + 1 : "";
	if (!s3_bucket_name_ok(bucket, blen)) {
		fprintf(stderr, "larder purge: invalid bucket name \"%.*s\"\n", (int)blen, bucket);
		return 2;
	}
	if (o.key && !*path) {
		fprintf(stderr, "larder purge: --key needs s3://BUCKET/KEY\n");
		return 2;
	}
	if (strlen(path) > S3_MAX_KEY_BYTES) {
		fprintf(stderr, "larder purge: the %s is longer than %d bytes\n", o.key ? "key"
		        : "prefix", S3_MAX_KEY_BYTES);
		return 2;
	}
	json_t *req = json_pack("{s:s%,s:s}", "bucket", bucket, blen, o.key ? "key" : "prefix",
	                        path);
	if (!req) {
		fprintf(stderr, "larder purge: the %s is not valid UTF-8\n", o.key ? "key" : "prefix");
		return 2;
	}
	char *body = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	if (!body) {
		fprintf(stderr, "larder purge: out of memory\n");
		return 1;
	}
	json_t *doc = cli_ask(&o, NULL, "/admin/purge", body);
	free(body);
	if (doc) {
		uint64_t n = cli_num(doc, "purged_objects");
		printf("purged %llu object%s %s s3://%.*s/%s\n", (unsigned long long)n,
		       n == 1 ? "" : "s", o.key ? "at" : "under", (int)blen, bucket, path);
		rc = fflush(stdout) == 0 ? 0 : 1;
	} else {
		rc = 1;
	}
	json_decref(doc);
	return rc;
}

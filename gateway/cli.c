/*
 * cli.c - `larder stats`, `larder purge`, `larder warm` and `larder jobs`:
 * requests to the admin endpoint, with libcurl; JSON through jansson.
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
#include "gateway/s3req.h"

#define DEFAULT_ADMIN_URL "http://127.0.0.1:9090"
#define RESPONSE_MAX (16u << 20)

struct opts {
	const char *cmd;       /* "stats", "purge", "warm" or "jobs", for messages */
	const char *admin;
	bool json;
	bool key;
	const char *target;    /* purge, warm: s3://bucket/prefix */
	const char *manifest;  /* warm: a local file of keys, or s3://bucket/key */
	const char *cancel;    /* jobs: a job to cancel */
	long concurrency;      /* warm */
	long long bandwidth;   /* warm: bytes per second */
	bool no_wait;          /* warm: print the job id and return */
	long long pin_s;       /* warm: pin what it warms this many seconds */
	const char *profile;   /* warm: replay this access profile */
};

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
static int parse(struct opts *o, int argc, char **argv, void (*usage)(FILE *))
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
				if ((o->pin_s = parse_duration(v)) < 0) {
					fprintf(stderr, "larder warm: --pin takes a duration (90s, 30m, 6h, 2d), "
					        "got \"%s\"\n", v);
					return 2;
				}
			} else if (strcmp(a, "--concurrency") == 0) {
				o->concurrency = strtol(v, &end, 10);
				if (*end || o->concurrency < 1 || o->concurrency > 64) {
					fprintf(stderr, "larder warm: --concurrency takes 1-64, got \"%s\"\n", v);
					return 2;
				}
			} else {
				o->bandwidth = strtoll(v, &end, 10);
				if (*end || end == v || o->bandwidth < 0) {
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
static int call_method(const struct opts *o, const char *method, const char *path,
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

static int call(const struct opts *o, const char *path, const char *post_body, long *status,
                struct buf *resp)
{
	return call_method(o, NULL, path, post_body, status, resp);
}

/* A 2xx with a JSON object: returns it. Otherwise reports the server's
 * message (or what came instead) on stderr and returns NULL. */
static json_t *json_answer(const struct opts *o, long status, const struct buf *resp)
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

/* ---- stats ---------------------------------------------------------------------- */

static uint64_t num(json_t *row, const char *k)
{
	json_int_t v = json_integer_value(json_object_get(row, k));
	return v > 0 ? (uint64_t)v : 0;
}

static void human_size(uint64_t n, char *out, size_t len)
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
		human_size(num(row, "bytes_served"), served, sizeof served);
		human_size(num(row, "upstream_bytes_saved"), saved, sizeof saved);
		printf("%-7s %-32s %10llu %10llu %10llu %8llu %9s %12s %12s\n", scope, name,
		       (unsigned long long)num(row, "requests"), (unsigned long long)num(row, "hits"),
		       (unsigned long long)num(row, "misses"), (unsigned long long)num(row, "bypass"),
		       ratio, served, saved);
	} else {
		printf("%s\t%s\t%llu\t%llu\t%llu\t%llu\t%s\t%llu\t%llu\n", scope, name,
		       (unsigned long long)num(row, "requests"), (unsigned long long)num(row, "hits"),
		       (unsigned long long)num(row, "misses"), (unsigned long long)num(row, "bypass"),
		       ratio, (unsigned long long)num(row, "bytes_served"),
		       (unsigned long long)num(row, "upstream_bytes_saved"));
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
	static const char *const groups[][2] = { { "buckets", "bucket" }, { "clients", "client" } };
	for (size_t g = 0; g < 2; g++) {
		const char *name;
		json_t *row;
		json_object_foreach(json_object_get(doc, groups[g][0]), name, row)
			print_row(tty, groups[g][1], name, row);
	}
	json_t *cache = json_object_get(doc, "cache");
	if (tty && cache) {
		char ru[32], rc[32], du[32], dc[32];
		json_t *ram = json_object_get(cache, "ram"), *nvme = json_object_get(cache, "nvme");
		human_size(num(ram, "used_bytes"), ru, sizeof ru);
		human_size(num(ram, "capacity_bytes"), rc, sizeof rc);
		human_size(num(nvme, "used_bytes"), du, sizeof du);
		human_size(num(nvme, "capacity_bytes"), dc, sizeof dc);
		printf("\ncache: RAM %s of %s, NVMe %s of %s, %llu objects known, %llu fetches in "
		       "flight\n", ru, rc, du, dc, (unsigned long long)num(cache, "metadata_objects"),
		       (unsigned long long)num(cache, "inflight_fetches"));
	}
}

/* GET path and print the answer: as it is with --json, else with print. */
static int get_and_print(const struct opts *o, const char *path, void (*print)(json_t *doc))
{
	struct buf resp;
	buf_init(&resp, RESPONSE_MAX);
	long status = 0;
	json_t *doc = call(o, path, NULL, &status, &resp) == 0 ? json_answer(o, status, &resp)
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
	int rc = parse(&o, argc, argv, usage_stats);
	return rc >= 0 ? rc : get_and_print(&o, "/admin/stats", print_stats);
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

static void print_cluster(json_t *doc)
{
	bool tty = isatty(STDOUT_FILENO);
	if (!json_is_true(json_object_get(doc, "clustered"))) {
		printf(tty ? "not in a cluster (LARDER_REDIS_URL is not set): this node serves alone\n"
		           : "id\taddress\tcapacity\townership_share\tdirectory_entries\n");
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
		       (unsigned long long)num(dir, "entries"), (unsigned long long)num(dir, "self_entries"),
		       (unsigned long long)num(dir, "tracked"), (unsigned long long)num(lk, "found"),
		       (unsigned long long)num(lk, "none"), (unsigned long long)num(lk, "failed"),
		       (unsigned long long)num(lk, "skipped"));
		printf("%-24s %-28s %10s %7s %10s\n", "ID", "ADDRESS", "CAPACITY", "SHARE", "DIRECTORY");
	} else {
		printf("id\taddress\tcapacity\townership_share\tdirectory_entries\n");
	}
	size_t i;
	json_t *m;
	json_array_foreach(members, i, m) {
		const char *id = json_string_value(json_object_get(m, "id"));
		const char *addr = json_string_value(json_object_get(m, "address"));
		double cap = json_number_value(json_object_get(m, "capacity"));
		double share = json_number_value(json_object_get(m, "ownership_share"));
		if (tty) {
			char c[32];
			human_size(cap > 0 ? (uint64_t)cap : 0, c, sizeof c);
			printf("%-24s %-28s %10s %6.1f%% %10llu%s\n", id ? id : "?", addr ? addr : "?", c,
			       share * 100, (unsigned long long)num(m, "directory_entries"),
			       id && self && strcmp(id, self) == 0 ? "  (this node)" : "");
		} else {
			printf("%s\t%s\t%.0f\t%.6f\t%llu\n", id ? id : "", addr ? addr : "", cap, share,
			       (unsigned long long)num(m, "directory_entries"));
		}
	}
}

int cli_cluster(int argc, char **argv)
{
	struct opts o = { .cmd = "cluster" };
	int rc = parse(&o, argc, argv, usage_cluster);
	return rc >= 0 ? rc : get_and_print(&o, "/admin/cluster", print_cluster);
}

/* ---- purge ---------------------------------------------------------------------- */

int cli_purge(int argc, char **argv)
{
	struct opts o = { .cmd = "purge" };
	int rc = parse(&o, argc, argv, usage_purge);
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
	struct buf resp;
	buf_init(&resp, RESPONSE_MAX);
	long status = 0;
	rc = call(&o, "/admin/purge", body, &status, &resp);
	free(body);
	json_t *doc = rc == 0 ? json_answer(&o, status, &resp) : NULL;
	if (doc) {
		uint64_t n = num(doc, "purged_objects");
		printf("purged %llu object%s %s s3://%.*s/%s\n", (unsigned long long)n,
		       n == 1 ? "" : "s", o.key ? "at" : "under", (int)blen, bucket, path);
		rc = fflush(stdout) == 0 ? 0 : 1;
	} else {
		rc = 1;
	}
	json_decref(doc);
	buf_fini(&resp);
	return rc;
}

/* ---- warm and jobs -------------------------------------------------------------- */

static void usage_warm(FILE *f)
{
	fputs("usage: larder warm [--admin URL] [--concurrency N] [--bandwidth BYTES_PER_S]\n"
	      "                   [--pin DURATION] [--no-wait] s3://BUCKET[/PREFIX]\n"
	      "       larder warm [options] --manifest FILE|s3://BUCKET/KEY s3://BUCKET\n"
	      "       larder warm [options] --profile NAME\n"
	      "\n"
	      "Starts a prefetch job that reads the objects under PREFIX (or the keys listed\n"
	      "one per line in FILE, or in the manifest object, or what access profile NAME\n"
	      "recorded, in its order: larder profile) into larder's cache, and\n"
	      "follows it: a progress bar on a terminal, a line every two seconds otherwise.\n"
	      "--pin DURATION (90s, 30m, 6h, 2d) keeps what it warms in RAM that long, however\n"
	      "much else is read (up to LARDER_PIN_MAX; larder unpin ends it early).\n"
	      "The admin endpoint and token: --admin / LARDER_ADMIN_URL, LARDER_ADMIN_TOKEN.\n"
	      "\n"
	      "Exit status: 0 the job finished without errors, 1 it failed, was cancelled or\n"
	      "had errors (or the server could not be reached), 2 bad usage.\n", f);
}

static void usage_jobs(FILE *f)
{
	fputs("usage: larder jobs [--admin URL] [--json] [--cancel JOB_ID]\n"
	      "\n"
	      "Lists prefetch jobs (newest first), or cancels one.\n"
	      "Exit status: 0 ok, 1 the server could not be reached or refused, 2 bad usage.\n", f);
}

/* The keys of a local manifest file, as a JSON array; NULL on error (reported). */
static json_t *read_manifest(const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		perror(path);
		return NULL;
	}
	json_t *keys = json_array();
	char line[4096];
	while (keys && fgets(line, sizeof line, f)) {
		size_t n = strcspn(line, "\r\n");
		line[n] = '\0';
		if (n && json_array_append_new(keys, json_string(line)) != 0) {
			fprintf(stderr, "larder warm: %s: a line is not valid UTF-8\n", path);
			json_decref(keys);
			keys = NULL;
		}
	}
	fclose(f);
	return keys;
}

static void progress(const struct opts *o, json_t *job, bool tty)
{
	uint64_t od = num(job, "objects_done"), ot = num(job, "objects_total");
	uint64_t bd = num(job, "bytes_done"), bt = num(job, "bytes_total");
	double rate = json_number_value(json_object_get(job, "rate_bytes_per_second"));
	json_t *eta = json_object_get(job, "eta_seconds");
	const char *state = json_string_value(json_object_get(job, "state"));
	if (!tty) {
		printf("%s\t%s\tobjects %llu/%llu\tbytes %llu/%llu\terrors %llu\n",
		       json_string_value(json_object_get(job, "id")), state ? state : "?",
		       (unsigned long long)od, (unsigned long long)ot, (unsigned long long)bd,
		       (unsigned long long)bt, (unsigned long long)num(job, "errors"));
		fflush(stdout);
		return;
	}
	char done[32], total[32], speed[32];
	human_size(bd, done, sizeof done);
	human_size(bt, total, sizeof total);
	human_size((uint64_t)rate, speed, sizeof speed);
	int width = 30, fill = bt ? (int)((double)bd / (double)bt * width) : 0;
	if (fill > width)
		fill = width;
	printf("\r[%.*s%*s] %3d%% %s/%s %llu/%llu objects %s/s ETA %s%.0fs  ", fill,
	       "##############################", width - fill, "",
	       bt ? (int)(100.0 * (double)bd / (double)bt) : 0, done, total, (unsigned long long)od,
	       (unsigned long long)ot, speed, json_is_number(eta) ? "" : "?",
	       json_is_number(eta) ? json_number_value(eta) : 0.0);
	fflush(stdout);
	(void)o;
}

int cli_warm(int argc, char **argv)
{
	struct opts o = { .cmd = "warm" };
	int rc = parse(&o, argc, argv, usage_warm);
	if (rc >= 0)
		return rc;
	if (o.profile && (o.target || o.manifest)) {
		fprintf(stderr, "larder warm: --profile replays what the profile read: no s3:// path "
		        "or --manifest with it\n");
		return 2;
	}
	if (!o.profile && (!o.target || strncmp(o.target, "s3://", 5) != 0)) {
		fprintf(stderr, "larder warm: expected s3://BUCKET[/PREFIX]\n");
		usage_warm(stderr);
		return 2;
	}
	const char *bucket = o.profile ? "" : o.target + 5;
	size_t blen = strcspn(bucket, "/");
	const char *prefix = bucket[blen] ? bucket + blen + 1 : "";
	if (!o.profile && !s3_bucket_name_ok(bucket, blen)) {
		fprintf(stderr, "larder warm: invalid bucket name \"%.*s\"\n", (int)blen, bucket);
		return 2;
	}
	json_t *req = o.profile ? json_pack("{s:s}", "profile", o.profile)
	                        : json_pack("{s:s%}", "bucket", bucket, blen);
	if (o.profile) {
		if (!req) {
			fprintf(stderr, "larder warm: the profile name is not valid UTF-8\n");
			return 2;
		}
	} else if (o.manifest && strncmp(o.manifest, "s3://", 5) == 0) {
		const char *mb = o.manifest + 5;
		size_t mbl = strcspn(mb, "/");
		if (mbl != blen || strncmp(mb, bucket, blen) != 0 || !mb[mbl] || !mb[mbl + 1]) {
			fprintf(stderr, "larder warm: the manifest object must be s3://%.*s/KEY\n",
			        (int)blen, bucket);
			json_decref(req);
			return 2;
		}
		json_object_set_new(req, "manifest", json_string(mb + mbl + 1));
	} else if (o.manifest) {
		json_t *keys = read_manifest(o.manifest);
		if (!keys) {
			json_decref(req);
			return 2;
		}
		json_object_set_new(req, "keys", keys);
	} else {
		json_object_set_new(req, "prefix", json_string(prefix));
	}
	if (o.concurrency)
		json_object_set_new(req, "concurrency", json_integer(o.concurrency));
	if (o.bandwidth)
		json_object_set_new(req, "bandwidth_bytes_per_second", json_integer(o.bandwidth));
	if (o.pin_s)
		json_object_set_new(req, "pin_seconds", json_integer(o.pin_s));
	char *body = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	struct buf resp;
	buf_init(&resp, RESPONSE_MAX);
	long status = 0;
	rc = body ? call(&o, "/admin/prefetch", body, &status, &resp) : 1;
	free(body);
	json_t *doc = rc == 0 ? json_answer(&o, status, &resp) : NULL;
	const char *id = json_string_value(json_object_get(doc, "job"));
	if (!id) {
		json_decref(doc);
		buf_fini(&resp);
		return 1;
	}
	char path[128];
	snprintf(path, sizeof path, "/admin/jobs/%s", id);
	if (o.no_wait) {
		printf("%s\n", id);
		json_decref(doc);
		buf_fini(&resp);
		return 0;
	}
	bool tty = isatty(STDOUT_FILENO);
	rc = 1;
	for (unsigned polls = 0;; polls++) {
		buf_reset(&resp);
		json_t *job = call(&o, path, NULL, &status, &resp) == 0 ? json_answer(&o, status, &resp)
		                                                        : NULL;
		if (!job)
			break;
		const char *state = json_string_value(json_object_get(job, "state"));
		bool over = state && (strcmp(state, "done") == 0 || strcmp(state, "failed") == 0 ||
		                      strcmp(state, "cancelled") == 0);
		if (tty || over || polls % 4 == 0)
			progress(&o, job, tty);
		if (over) {
			if (tty)
				putchar('\n');
			const char *err = json_string_value(json_object_get(job, "error"));
			if (err)
				fprintf(stderr, "larder warm: job %s %s: %s\n", id, state, err);
			rc = strcmp(state, "done") == 0 && num(job, "errors") == 0 ? 0 : 1;
			if (rc && !err)
				fprintf(stderr, "larder warm: job %s %s with %llu errors\n", id, state,
				        (unsigned long long)num(job, "errors"));
			json_decref(job);
			break;
		}
		json_decref(job);
		nanosleep(&(struct timespec){ .tv_nsec = 500 * 1000 * 1000 }, NULL);
	}
	json_decref(doc);
	buf_fini(&resp);
	return rc;
}

/* The rows of doc's array `name`: id, state and bucket, then the counts
 * named in cols (NULL-terminated), tab-separated under a header line. */
static void print_rows(json_t *doc, const char *name, const char *const *cols)
{
	printf("id\tstate\tbucket");
	for (int k = 0; cols[k]; k++)
		printf("\t%s", cols[k]);
	putchar('\n');
	size_t i;
	json_t *row;
	json_array_foreach(json_object_get(doc, name), i, row) {
		printf("%s\t%s\t%s", json_string_value(json_object_get(row, "id")),
		       json_string_value(json_object_get(row, "state")),
		       json_string_value(json_object_get(row, "bucket")));
		for (int k = 0; cols[k]; k++)
			printf("\t%llu", (unsigned long long)num(row, cols[k]));
		putchar('\n');
	}
}

static void print_jobs(json_t *doc)
{
	static const char *const cols[] = { "objects_done", "objects_total", "bytes_done",
		"bytes_total", "errors", NULL };
	print_rows(doc, "jobs", cols);
}

int cli_jobs(int argc, char **argv)
{
	struct opts o = { .cmd = "jobs" };
	int rc = parse(&o, argc, argv, usage_jobs);
	if (rc >= 0)
		return rc;
	if (!o.cancel)
		return get_and_print(&o, "/admin/jobs", print_jobs);
	char path[128];
	if (strchr(o.cancel, '/') || snprintf(path, sizeof path, "/admin/jobs/%s", o.cancel) >=
	                             (int)sizeof path) {
		fprintf(stderr, "larder jobs: \"%s\" is not a job id\n", o.cancel);
		return 2;
	}
	struct buf resp;
	buf_init(&resp, RESPONSE_MAX);
	long status = 0;
	rc = call_method(&o, "DELETE", path, NULL, &status, &resp);
	json_t *doc = rc == 0 ? json_answer(&o, status, &resp) : NULL;
	if (doc)
		printf("cancelling %s\n", o.cancel);
	rc = doc ? 0 : 1;
	json_decref(doc);
	buf_fini(&resp);
	return rc;
}

/* ---- lookahead ------------------------------------------------------------------ */

static void usage_lookahead(FILE *f)
{
	fputs("usage: larder lookahead [--admin URL] --window N [--concurrency N] [--idle SECONDS]\n"
	      "                        --keys-file FILE|--manifest s3://BUCKET/KEY s3://BUCKET\n"
	      "       larder lookahead [--admin URL] [--json] [--end ID]\n"
	      "\n"
	      "Tells a running larder the order in which a job will read the bucket's objects\n"
	      "(one key a line, in FILE or in the manifest object): as the job reads them,\n"
	      "larder keeps the next N objects of the list warm ahead of the furthest one read.\n"
	      "It ends when the list is warm to its end, or after SECONDS without a read of one\n"
	      "of its keys (default: the server's LARDER_LOOKAHEAD_IDLE). Prints its id.\n"
	      "Without a bucket: lists the lookaheads, or ends one (--end).\n"
	      "The admin endpoint and token: --admin / LARDER_ADMIN_URL, LARDER_ADMIN_TOKEN.\n"
	      "Exit status: 0 ok, 1 the server could not be reached or refused, 2 bad usage.\n", f);
}

static void print_lookaheads(json_t *doc)
{
	static const char *const cols[] = { "keys", "position", "window", "objects", "bytes",
		NULL };
	print_rows(doc, "lookaheads", cols);
}

/* Sends method path [body] and prints the answer's "id"; the exit status. */
static int lookahead_call(const struct opts *o, const char *method, const char *path,
                          const char *body)
{
	struct buf resp;
	buf_init(&resp, RESPONSE_MAX);
	long status = 0;
	int rc = call_method(o, method, path, body, &status, &resp);
	json_t *doc = rc == 0 ? json_answer(o, status, &resp) : NULL;
	if (doc)
		printf("%s\n", json_string_value(json_object_get(doc, "id")));
	rc = doc && fflush(stdout) == 0 ? 0 : 1;
	json_decref(doc);
	buf_fini(&resp);
	return rc;
}

/* ---- unpin ---------------------------------------------------------------------- */

static void usage_unpin(FILE *f)
{
	fputs("usage: larder unpin [--admin URL] JOB_ID\n"
	      "       larder unpin [--admin URL] s3://BUCKET[/PREFIX]\n"
	      "\n"
	      "Ends a pin (larder warm --pin) before its time: the one of job JOB_ID, or every\n"
	      "pin of a prefix listing of BUCKET whose prefix starts with PREFIX. Its chunks\n"
	      "stay cached, but may be evicted again.\n"
	      "The admin endpoint and token: --admin / LARDER_ADMIN_URL, LARDER_ADMIN_TOKEN.\n"
	      "\n"
	      "Exit status: 0 ok, 1 no such pin (or the server could not be reached), 2 bad usage.\n",
	      f);
}

int cli_unpin(int argc, char **argv)
{
	struct opts o = { .cmd = "unpin" };
	int rc = parse(&o, argc, argv, usage_unpin);
	if (rc >= 0)
		return rc;
	if (!o.target) {
		usage_unpin(stderr);
		return 2;
	}
	json_t *req;
	if (strncmp(o.target, "s3://", 5) == 0) {
		const char *bucket = o.target + 5;
		size_t blen = strcspn(bucket, "/");
		if (!s3_bucket_name_ok(bucket, blen)) {
			fprintf(stderr, "larder unpin: invalid bucket name \"%.*s\"\n", (int)blen, bucket);
			return 2;
		}
		req = json_pack("{s:s%,s:s}", "bucket", bucket, blen, "prefix",
		                bucket[blen] ? bucket + blen + 1 : "");
	} else {
		req = json_pack("{s:s}", "job", o.target);
	}
	char *body = req ? json_dumps(req, JSON_COMPACT) : NULL;
	json_decref(req);
	if (!body) {
		fprintf(stderr, "larder unpin: \"%s\" is not valid UTF-8\n", o.target);
		return 2;
	}
	struct buf resp;
	buf_init(&resp, RESPONSE_MAX);
	long status = 0;
	rc = call(&o, "/admin/unpin", body, &status, &resp);
	free(body);
	json_t *doc = rc == 0 ? json_answer(&o, status, &resp) : NULL;
	if (doc)
		printf("unpinned %llu pin%s\n", (unsigned long long)num(doc, "unpinned"),
		       num(doc, "unpinned") == 1 ? "" : "s");
	rc = doc ? 0 : 1;
	json_decref(doc);
	buf_fini(&resp);
	return rc;
}

int cli_lookahead(int argc, char **argv)
{
	struct opts o = { .cmd = "lookahead" };
	const char *keys_file = NULL, *end_id = NULL;
	long window = 0, conc = 0, idle = 0;
	char **rest = calloc((size_t)argc + 1, sizeof *rest);
	int n_rest = 0;
	if (!rest)
		return 1;
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i];
		bool num_opt = strcmp(a, "--window") == 0 || strcmp(a, "--concurrency") == 0 ||
		               strcmp(a, "--idle") == 0;
		if (!num_opt && strcmp(a, "--keys-file") != 0 && strcmp(a, "--manifest") != 0 &&
		    strcmp(a, "--end") != 0) {
			rest[n_rest++] = argv[i];
			continue;
		}
		if (i + 1 >= argc) {
			fprintf(stderr, "larder lookahead: %s needs a value\n", a);
			free(rest);
			return 2;
		}
		const char *v = argv[++i];
		if (!num_opt) {
			*(strcmp(a, "--keys-file") == 0 ? &keys_file
			  : strcmp(a, "--manifest") == 0 ? &o.manifest : &end_id) = v;
			continue;
		}
		char *e;
		long x = strtol(v, &e, 10);
		if (*e || e == v || x < 1) {
			fprintf(stderr, "larder lookahead: %s takes a positive number, got \"%s\"\n", a, v);
			free(rest);
			return 2;
		}
		*(strcmp(a, "--window") == 0 ? &window : strcmp(a, "--idle") == 0 ? &idle : &conc) = x;
	}
	int rc = parse(&o, n_rest, rest, usage_lookahead);
	free(rest);
	if (rc >= 0)
		return rc;
	if (!o.target) {
		if (!end_id)
			return get_and_print(&o, "/admin/lookahead", print_lookaheads);
		char path[128];
		if (strchr(end_id, '/') || snprintf(path, sizeof path, "/admin/lookahead/%s", end_id) >=
		                           (int)sizeof path) {
			fprintf(stderr, "larder lookahead: \"%s\" is not a lookahead id\n", end_id);
			return 2;
		}
		return lookahead_call(&o, "DELETE", path, NULL);
	}
	const char *bucket = o.target + 5;
	size_t blen = strcspn(bucket, "/");
	if (strncmp(o.target, "s3://", 5) != 0 || bucket[blen] || !s3_bucket_name_ok(bucket, blen) ||
	    !window || !keys_file == !o.manifest) {
		fprintf(stderr, "larder lookahead: expected s3://BUCKET, --window N and one of "
		        "--keys-file and --manifest\n");
		usage_lookahead(stderr);
		return 2;
	}
	json_t *req = json_pack("{s:s,s:I}", "bucket", bucket, "window", (json_int_t)window);
	if (o.manifest) {
		size_t ml = strlen(o.target);
		if (strncmp(o.manifest, o.target, ml) != 0 || o.manifest[ml] != '/' ||
		    !o.manifest[ml + 1]) {
			fprintf(stderr, "larder lookahead: the manifest must be %s/KEY\n", o.target);
			json_decref(req);
			return 2;
		}
		json_object_set_new(req, "manifest", json_string(o.manifest + ml + 1));
	} else {
		json_t *keys = read_manifest(keys_file);
		if (!keys) {
			json_decref(req);
			return 2;
		}
		json_object_set_new(req, "keys", keys);
	}
	if (conc)
		json_object_set_new(req, "concurrency", json_integer(conc));
	if (idle)
		json_object_set_new(req, "idle_seconds", json_integer(idle));
	char *body = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	rc = body ? lookahead_call(&o, NULL, "/admin/lookahead", body) : 1;
	free(body);
	return rc;
}

/* ---- access profiles ------------------------------------------------------------ */

static void usage_profile(FILE *f)
{
	fputs("usage: larder profile start NAME --key CLIENT_KEY_ID | --tag JOB_TAG [--admin URL]\n"
	      "       larder profile stop NAME [--admin URL]\n"
	      "       larder profile list [--admin URL] [--json]\n"
	      "\n"
	      "Records what a job reads, in first-read order: every object GET signed with\n"
	      "CLIENT_KEY_ID, or carrying the header x-larder-job: JOB_TAG. stop saves it in the\n"
	      "cache directory; larder warm --profile NAME warms it again, in that order.\n"
	      "The admin endpoint and token: --admin / LARDER_ADMIN_URL, LARDER_ADMIN_TOKEN.\n"
	      "\n"
	      "Exit status: 0 ok, 1 the server could not be reached or refused, 2 bad usage.\n", f);
}

static void print_profiles(json_t *doc)
{
	printf("name\trecording\trecords\treads\n");
	size_t i;
	json_t *p;
	json_array_foreach(json_object_get(doc, "profiles"), i, p) {
		const char *key = json_string_value(json_object_get(p, "key"));
		printf("%s\t%s\t%s %s\t%llu\n", json_string_value(json_object_get(p, "name")),
		       json_is_true(json_object_get(p, "recording")) ? "yes" : "no",
		       key ? "key" : "tag", key ? key : json_string_value(json_object_get(p, "tag")),
		       (unsigned long long)num(p, "reads"));
	}
}

int cli_profile(int argc, char **argv)
{
	struct opts o = { .cmd = "profile" };
	const char *verb = argc > 0 ? argv[0] : "";
	if (strcmp(verb, "--help") == 0 || strcmp(verb, "-h") == 0) {
		usage_profile(stdout);
		return 0;
	}
	/* NAME, --key and --tag are taken out here; parse() takes the rest. */
	const char *name = NULL, *key = NULL, *tag = NULL;
	char **rest = calloc((size_t)argc + 1, sizeof *rest);
	if (!rest)
		return 1;
	int n = 0, rc = -1;
	for (int i = 1; i < argc && rc < 0; i++) {
		bool has = i + 1 < argc;
		if ((strcmp(argv[i], "--key") == 0 || strcmp(argv[i], "--tag") == 0) && !has) {
			fprintf(stderr, "larder profile: %s needs a value\n", argv[i]);
			rc = 2;
		} else if (strcmp(argv[i], "--key") == 0) {
			key = argv[++i];
		} else if (strcmp(argv[i], "--tag") == 0) {
			tag = argv[++i];
		} else if (strcmp(argv[i], "--admin") == 0 && has) {
			rest[n++] = argv[i++];
			rest[n++] = argv[i];
		} else if (argv[i][0] != '-' && !name && strcmp(verb, "list") != 0) {
			name = argv[i];
		} else {
			rest[n++] = argv[i];
		}
	}
	if (rc < 0)
		rc = parse(&o, n, rest, usage_profile);
	free(rest);
	if (rc >= 0)
		return rc;
	bool start = strcmp(verb, "start") == 0, stop = strcmp(verb, "stop") == 0;
	if (strcmp(verb, "list") == 0 && !key && !tag)
		return get_and_print(&o, "/admin/profiles", print_profiles);
	if (!(start || stop) || !name || (start && !key == !tag) || (stop && (key || tag))) {
		usage_profile(stderr);
		return 2;
	}
	char path[128];
	char *body = NULL;
	if (start) {
		snprintf(path, sizeof path, "/admin/profiles");
		json_t *req = json_pack("{s:s,s:s}", "name", name, key ? "key" : "tag", key ? key : tag);
		body = req ? json_dumps(req, JSON_COMPACT) : NULL;
		json_decref(req);
	} else if (strchr(name, '/') || snprintf(path, sizeof path, "/admin/profiles/%s/stop", name) >=
	           (int)sizeof path) {
		fprintf(stderr, "larder profile: \"%s\" is not a profile name\n", name);
		return 2;
	}
	if (start && !body) {
		fprintf(stderr, "larder profile: the name or the key is not valid UTF-8\n");
		return 2;
	}
	struct buf resp;
	buf_init(&resp, RESPONSE_MAX);
	long status = 0;
	rc = call(&o, path, body ? body : "", &status, &resp);
	free(body);
	json_t *doc = rc == 0 ? json_answer(&o, status, &resp) : NULL;
	if (doc)
		printf("profile %s: %s\n", name, start ? "recording" : "stopped and saved");
	rc = doc ? 0 : 1;
	json_decref(doc);
	buf_fini(&resp);
	return rc;
}

/*
 * cli_jobs.c - `larder warm`, `larder jobs`, `larder lookahead`, `larder
 * unpin` and `larder profile`: the subcommands that start, watch and end
 * work on the server. Option parsing, the HTTP calls and the shared
 * printing helpers are cli.c's (cli_internal.h).
 */
#include "gateway/cli.h"
#include "gateway/cli_internal.h"

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
#include "config/config.h"
#include "gateway/lookahead.h"
#include "gateway/s3req.h"

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
	      "follows it: a progress bar on a terminal, a line every two seconds otherwise\n"
	      "(a profile that read several buckets is replayed as a job per bucket, each\n"
	      "followed in turn; --no-wait prints each job's id, one a line, and returns).\n"
	      "--pin DURATION (90s, 30m, 6h, 2d) keeps what it warms cached that long, however\n"
	      "much else is read (in RAM up to LARDER_PIN_MAX, on NVMe up to\n"
	      "LARDER_PIN_MAX_NVME; larder unpin ends it early).\n"
	      "The admin endpoint and token: --admin / LARDER_ADMIN_URL, LARDER_ADMIN_TOKEN.\n"
	      "\n"
	      "Exit status: 0 the job (every job) finished without errors, 1 one failed, was\n"
	      "cancelled or had errors (or the server could not be reached), 2 bad usage.\n", f);
}

static void usage_jobs(FILE *f)
{
	fputs("usage: larder jobs [--admin URL] [--json] [--cancel JOB_ID]\n"
	      "\n"
	      "Lists prefetch jobs (newest first), or cancels one.\n"
	      "Exit status: 0 ok, 1 the server could not be reached or refused, 2 bad usage.\n", f);
}

/* The keys of a local manifest file, as a JSON array; NULL on error
 * (reported). Each line is a key as written, as in a manifest object: a
 * CR inside it is part of the key, a CRLF's CR is dropped. */
static json_t *read_manifest(const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		perror(path);
		return NULL;
	}
	json_t *keys = json_array();
	char *line = NULL;
	size_t cap = 0;
	ssize_t got;
	while (keys && (got = getline(&line, &cap, f)) > 0) {
		size_t n = (size_t)got;
		if (line[n - 1] == '\n')
			n--;
		if (n && line[n - 1] == '\r')
			n--;
		if (n && json_array_append_new(keys, json_stringn(line, n)) != 0) {
			fprintf(stderr, "larder warm: %s: a line is not valid UTF-8\n", path);
			json_decref(keys);
			keys = NULL;
		}
	}
	free(line);
	fclose(f);
	return keys;
}

static void progress(const struct opts *o, json_t *job, bool tty)
{
	uint64_t od = cli_num(job, "objects_done"), ot = cli_num(job, "objects_total");
	uint64_t bd = cli_num(job, "bytes_done"), bt = cli_num(job, "bytes_total");
	double rate = json_number_value(json_object_get(job, "rate_bytes_per_second"));
	json_t *eta = json_object_get(job, "eta_seconds");
	const char *state = json_string_value(json_object_get(job, "state"));
	if (!tty) {
		printf("%s\t%s\tobjects %llu/%llu\tbytes %llu/%llu\terrors %llu\n",
		       json_string_value(json_object_get(job, "id")), state ? state : "?",
		       (unsigned long long)od, (unsigned long long)ot, (unsigned long long)bd,
		       (unsigned long long)bt, (unsigned long long)cli_num(job, "errors"));
		fflush(stdout);
		return;
	}
	char done[32], total[32], speed[32];
	cli_human_size(bd, done, sizeof done);
	cli_human_size(bt, total, sizeof total);
	cli_human_size((uint64_t)rate, speed, sizeof speed);
	int width = 30, fill = bt ? (int)((double)bd / (double)bt * width) : 0;
	if (fill > width)
		fill = width;
	char left[32] = "?"; /* unknown until the listing is done and bytes flow */
	if (json_is_number(eta))
		snprintf(left, sizeof left, "%.0fs", json_number_value(eta));
	printf("\r[%.*s%*s] %3d%% %s/%s %llu/%llu objects %s/s ETA %s  ", fill,
	       "##############################", width - fill, "",
	       bt ? (int)(100.0 * (double)bd / (double)bt) : 0, done, total, (unsigned long long)od,
	       (unsigned long long)ot, speed, left);
	fflush(stdout);
	(void)o;
}

/* Shows job id's progress until it ends; 0 when it is done without errors. */
static int follow_job(const struct opts *o, const char *id, struct buf *resp)
{
	char path[128];
	snprintf(path, sizeof path, "/admin/jobs/%s", id);
	bool tty = isatty(STDOUT_FILENO);
	long status = 0;
	int rc = 1;
	for (unsigned polls = 0;; polls++) {
		buf_reset(resp);
		json_t *job = cli_call(o, path, NULL, &status, resp) == 0
		                      ? cli_json_answer(o, status, resp)
		                      : NULL;
		if (!job)
			break;
		const char *state = json_string_value(json_object_get(job, "state"));
		bool over = state && (strcmp(state, "done") == 0 || strcmp(state, "failed") == 0 ||
		                      strcmp(state, "cancelled") == 0);
		if (tty || over || polls % 4 == 0)
			progress(o, job, tty);
		if (over) {
			if (tty)
				putchar('\n');
			const char *err = json_string_value(json_object_get(job, "error"));
			if (err)
				fprintf(stderr, "larder warm: job %s %s: %s\n", id, state, err);
			rc = strcmp(state, "done") == 0 && cli_num(job, "errors") == 0 ? 0 : 1;
			if (rc && !err)
				fprintf(stderr, "larder warm: job %s %s with %llu errors\n", id, state,
				        (unsigned long long)cli_num(job, "errors"));
			json_decref(job);
			break;
		}
		json_decref(job);
		nanosleep(&(struct timespec){ .tv_nsec = 500 * 1000 * 1000 }, NULL);
	}
	return rc;
}

int cli_warm(int argc, char **argv)
{
	struct opts o = { .cmd = "warm" };
	int rc = cli_parse(&o, argc, argv, usage_warm);
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
	rc = body ? cli_call(&o, "/admin/prefetch", body, &status, &resp) : 1;
	free(body);
	json_t *doc = rc == 0 ? cli_json_answer(&o, status, &resp) : NULL;
	const char *id = json_string_value(json_object_get(doc, "job"));
	if (!id) {
		json_decref(doc);
		buf_fini(&resp);
		return 1;
	}
	/* A profile's replay is a job per bucket: each is printed (--no-wait)
	 * or followed in turn, and any one's errors are the command's. */
	json_t *jobs = json_object_get(doc, "jobs");
	if (o.no_wait) {
		printf("%s\n", id);
		for (size_t k = 1; k < json_array_size(jobs); k++) {
			const char *more = json_string_value(json_array_get(jobs, k));
			printf("%s\n", more ? more : "?");
		}
		json_decref(doc);
		buf_fini(&resp);
		return 0;
	}
	rc = follow_job(&o, id, &resp);
	for (size_t k = 1; k < json_array_size(jobs); k++) {
		const char *more = json_string_value(json_array_get(jobs, k));
		if (more && follow_job(&o, more, &resp) != 0)
			rc = 1;
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
			printf("\t%llu", (unsigned long long)cli_num(row, cols[k]));
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
	int rc = cli_parse(&o, argc, argv, usage_jobs);
	if (rc >= 0)
		return rc;
	if (!o.cancel)
		return cli_get_and_print(&o, "/admin/jobs", print_jobs);
	char path[128];
	if (strchr(o.cancel, '/') || snprintf(path, sizeof path, "/admin/jobs/%s", o.cancel) >=
	                             (int)sizeof path) {
		fprintf(stderr, "larder jobs: \"%s\" is not a job id\n", o.cancel);
		return 2;
	}
	json_t *doc = cli_ask(&o, "DELETE", path, NULL);
	if (doc)
		printf("cancelling %s\n", o.cancel);
	rc = doc ? 0 : 1;
	json_decref(doc);
	return rc;
}

/* ---- lookahead ------------------------------------------------------------------ */

static void usage_lookahead(FILE *f)
{
	fputs("usage: larder lookahead [--admin URL] [--window N] [--window-bytes SIZE]\n"
	      "                        [--concurrency N] [--idle SECONDS]\n"
	      "                        --keys-file FILE|--manifest s3://BUCKET/KEY s3://BUCKET\n"
	      "       larder lookahead [--admin URL] [--json] [--end ID]\n"
	      "\n"
	      "Tells a running larder the order in which a job will read the bucket's objects\n"
	      "(one key a line, in FILE or in the manifest object): as the job reads them,\n"
	      "larder keeps the next N objects of the list warm ahead of the furthest one read,\n"
	      "or as many as fit in SIZE bytes (like 512MiB; at least one), or both (the\n"
	      "tighter bound holds; give at least one of them).\n"
	      "It ends when its last key was read and everything is warm, or after SECONDS\n"
	      "without a read of one of its keys (default: the server's LARDER_LOOKAHEAD_IDLE);\n"
	      "until then it holds one of the server's 64 job slots. Prints its id.\n"
	      "Without a bucket: lists the lookaheads, or ends one (--end).\n"
	      "The admin endpoint and token: --admin / LARDER_ADMIN_URL, LARDER_ADMIN_TOKEN.\n"
	      "Exit status: 0 ok, 1 the server could not be reached or refused, 2 bad usage.\n", f);
}

static void print_lookaheads(json_t *doc)
{
	static const char *const cols[] = { "keys", "position", "window", "window_bytes",
		"objects", "bytes", NULL };
	print_rows(doc, "lookaheads", cols);
}

/* Sends method path [body] and prints the answer's "id"; the exit status. */
static int lookahead_call(const struct opts *o, const char *method, const char *path,
                          const char *body)
{
	json_t *doc = cli_ask(o, method, path, body);
	if (doc)
		printf("%s\n", json_string_value(json_object_get(doc, "id")));
	int rc = doc && fflush(stdout) == 0 ? 0 : 1;
	json_decref(doc);
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
	int rc = cli_parse(&o, argc, argv, usage_unpin);
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
	json_t *doc = cli_ask(&o, NULL, "/admin/unpin", body);
	free(body);
	if (doc)
		printf("unpinned %llu pin%s\n", (unsigned long long)cli_num(doc, "unpinned"),
		       cli_num(doc, "unpinned") == 1 ? "" : "s");
	rc = doc ? 0 : 1;
	json_decref(doc);
	return rc;
}

int cli_lookahead(int argc, char **argv)
{
	struct opts o = { .cmd = "lookahead" };
	const char *keys_file = NULL, *end_id = NULL;
	long window = 0, conc = 0, idle = 0;
	uint64_t window_bytes = 0;
	char **rest = calloc((size_t)argc + 1, sizeof *rest);
	int n_rest = 0;
	if (!rest)
		return 1;
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i];
		bool num_opt = strcmp(a, "--window") == 0 || strcmp(a, "--concurrency") == 0 ||
		               strcmp(a, "--idle") == 0;
		bool size_opt = strcmp(a, "--window-bytes") == 0;
		if (!num_opt && !size_opt && strcmp(a, "--keys-file") != 0 &&
		    strcmp(a, "--manifest") != 0 && strcmp(a, "--end") != 0) {
			rest[n_rest++] = argv[i];
			continue;
		}
		if (i + 1 >= argc) {
			fprintf(stderr, "larder lookahead: %s needs a value\n", a);
			free(rest);
			return 2;
		}
		const char *v = argv[++i];
		if (size_opt) {
			if (cfg_parse_size(v, &window_bytes) != 0 || !window_bytes) {
				fprintf(stderr, "larder lookahead: --window-bytes takes a size like "
				        "512MiB, got \"%s\"\n", v);
				free(rest);
				return 2;
			}
			continue;
		}
		if (!num_opt) {
			*(strcmp(a, "--keys-file") == 0 ? &keys_file
			  : strcmp(a, "--manifest") == 0 ? &o.manifest : &end_id) = v;
			continue;
		}
		char *e;
		long x = strtol(v, &e, 10);
		/* The server's bounds (admin_jobs.c), said here as bad usage. */
		long most = strcmp(a, "--window") == 0 ? LOOKAHEAD_WINDOW_MAX
		            : strcmp(a, "--idle") == 0 ? LOOKAHEAD_IDLE_MAX : 64;
		if (*e || e == v || x < 1 || x > most) {
			fprintf(stderr, "larder lookahead: %s takes 1-%ld, got \"%s\"\n", a, most, v);
			free(rest);
			return 2;
		}
		*(strcmp(a, "--window") == 0 ? &window : strcmp(a, "--idle") == 0 ? &idle : &conc) = x;
	}
	int rc = cli_parse(&o, n_rest, rest, usage_lookahead);
	free(rest);
	if (rc >= 0)
		return rc;
	if (!o.target) {
		if (!end_id)
			return cli_get_and_print(&o, "/admin/lookahead", print_lookaheads);
		char path[128];
		if (strchr(end_id, '/') || snprintf(path, sizeof path, "/admin/lookahead/%s", end_id) >=
		                           (int)sizeof path) {
			fprintf(stderr, "larder lookahead: \"%s\" is not a lookahead id\n", end_id);
			return 2;
		}
		return lookahead_call(&o, "DELETE", path, NULL);
	}
	bool s3url = strncmp(o.target, "s3://", 5) == 0; /* before reading past its 5th byte */
	const char *bucket = s3url ? o.target + 5 : "";
	size_t blen = strcspn(bucket, "/");
	if (!s3url || bucket[blen] || !s3_bucket_name_ok(bucket, blen) ||
	    (!window && !window_bytes) || !keys_file == !o.manifest) {
		fprintf(stderr, "larder lookahead: expected s3://BUCKET, --window N and/or "
		        "--window-bytes SIZE, and one of --keys-file and --manifest\n");
		usage_lookahead(stderr);
		return 2;
	}
	json_t *req = json_pack("{s:s}", "bucket", bucket);
	if (req && window)
		json_object_set_new(req, "window", json_integer(window));
	if (req && window_bytes)
		json_object_set_new(req, "window_bytes", json_integer((json_int_t)window_bytes));
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
	printf("name\trecording\trecords\treads\tdropped\n");
	size_t i;
	json_t *p;
	json_array_foreach(json_object_get(doc, "profiles"), i, p) {
		const char *key = json_string_value(json_object_get(p, "key"));
		printf("%s\t%s\t%s %s\t%llu\t%llu\n", json_string_value(json_object_get(p, "name")),
		       json_is_true(json_object_get(p, "recording")) ? "yes" : "no",
		       key ? "key" : "tag", key ? key : json_string_value(json_object_get(p, "tag")),
		       (unsigned long long)cli_num(p, "reads"),
		       (unsigned long long)cli_num(p, "dropped"));
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
	/* NAME, --key and --tag are taken out here; cli_parse() takes the rest. */
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
		rc = cli_parse(&o, n, rest, usage_profile);
	free(rest);
	if (rc >= 0)
		return rc;
	bool start = strcmp(verb, "start") == 0, stop = strcmp(verb, "stop") == 0;
	if (strcmp(verb, "list") == 0 && !key && !tag)
		return cli_get_and_print(&o, "/admin/profiles", print_profiles);
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
	json_t *doc = cli_ask(&o, NULL, path, body ? body : "");
	free(body);
	if (doc)
		printf("profile %s: %s\n", name, start ? "recording" : "stopped and saved");
	rc = doc ? 0 : 1;
	json_decref(doc);
	return rc;
}

/*
 * loadgen.c - an S3 GET load generator for larder's benchmarks.
 *
 * Keeps --concurrency HTTP/1.1 keep-alive connections busy reading the
 * object keys listed in --keys (one per line) under --url (path-style:
 * URL/key). Each epoch reads every key once in a new seeded random order;
 * epochs are separated by a barrier (the next one starts when the last
 * transfer of the previous one ended), as a training loader's are.
 *
 * One libcurl multi handle driven through its socket API on epoll (work per
 * ready socket, not per connection: curl_multi_perform/poll walk every
 * transfer on every wake-up, which made loadgen itself the bottleneck at
 * 32+ connections), one easy handle per connection slot, each reused for
 * the slot's next request, so every slot keeps its connection.
 * Bodies are counted and dropped. Requests are signed with SigV4 when
 * --sign KEY:SECRET is given (auth/sigv4.h, the code larder verifies with).
 *
 * Reports objects/s, MB/s (10^6 bytes), latency percentiles (time to last
 * byte, log-linear buckets with under 1.6% relative error), errors, the
 * x-larder-cache answers per epoch, its own CPU time, and with --pid the
 * CPU seconds and peak RSS (VmHWM) of the given processes, each with the
 * bytes of larder's chunk memfd at the end added, less those of its pages
 * mapped in then (RSS shows only pages a hit mapped: store/chunk.c). One
 * table line
 * per epoch and one for the run on stdout; a JSON object to --json FILE.
 *
 * Usage: loadgen --url URL --keys FILE [--concurrency N] [--epochs N]
 *                [--seed N] [--range a-b] [--sign KEY:SECRET]
 *                [--region R] [--pid PID[,PID...]] [--json FILE]
 *                [--duration SECONDS] [--timeout SECONDS] [--label TEXT]
 */
#include <curl/curl.h>
#include <errno.h>
#include <getopt.h>
#include <malloc.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "auth/sigv4.h"
#include "base/buf.h"
#include "base/splitmix.h"

#define MAX_PIDS 16
#define MAX_EPOCHS 64

/* ---- latency histogram: 32 sub-buckets per power of two, in microseconds ---- */

#define SUB_BITS 5
#define SUB (1u << SUB_BITS)
#define N_BUCKETS (64 * SUB)

struct hist {
	uint64_t count[N_BUCKETS];
	uint64_t n;
	uint64_t max_us;
	double sum_us;
};

static unsigned hist_index(uint64_t v)
{
	if (v < SUB)
		return (unsigned)v;
	unsigned msb = 63u - (unsigned)__builtin_clzll(v);
	unsigned shift = msb - SUB_BITS;
	return (shift + 1) * SUB + (unsigned)((v >> shift) & (SUB - 1));
}

/* The highest value a bucket holds (a percentile is reported as that). */
static uint64_t hist_upper(unsigned i)
{
	if (i < SUB)
		return i;
	unsigned shift = i / SUB - 1;
	uint64_t base = ((uint64_t)SUB + (i % SUB)) << shift;
	return base + ((1ull << shift) - 1);
}

static void hist_add(struct hist *h, uint64_t us)
{
	h->count[hist_index(us)]++;
	h->n++;
	h->sum_us += (double)us;
	if (us > h->max_us)
		h->max_us = us;
}

static double hist_pct(const struct hist *h, double p)
{
	if (h->n == 0)
		return 0;
	uint64_t want = (uint64_t)ceil(p / 100.0 * (double)h->n);
	if (want == 0)
		want = 1;
	uint64_t seen = 0;
	for (unsigned i = 0; i < N_BUCKETS; i++) {
		seen += h->count[i];
		if (seen >= want) {
			uint64_t u = hist_upper(i);
			return (double)(u < h->max_us ? u : h->max_us) / 1000.0;
		}
	}
	return (double)h->max_us / 1000.0;
}

/* ---- per-epoch counters ---- */

struct epoch {
	uint64_t objects, bytes, errors, hit, miss, bypass, other;
	double t_start, t_end;
	struct hist *lat;
};

/* ---- options and state ---- */

static struct {
	const char *url, *keys, *range, *sign, *region, *json, *label;
	unsigned concurrency, epochs;
	uint64_t seed;
	double duration, timeout;
	int pids[MAX_PIDS];
	int n_pids;
} opt = { .concurrency = 16, .epochs = 1, .seed = 1, .region = "us-east-1", .timeout = 120 };

static char **keys;
static size_t n_keys;
static char *host_hdr;    /* host[:port] as curl sends it */
static char *base_path;   /* path part of --url, no trailing '/' */
static char *base_origin; /* scheme://host[:port] */
static char *sign_key, *sign_secret;

struct slot {
	CURL *e;
	struct curl_slist *hdrs;
	double t0;
	uint64_t bytes;
	int epoch;
	char cache; /* 'h', 'm', 'b', 0 */
	bool busy;
};

static uint64_t rng;

static uint64_t rnd(void)
{
	return splitmix_next(&rng);
}

static void shuffle(size_t *a, size_t n)
{
	for (size_t i = n; i > 1; i--) {
		size_t j = (size_t)(rnd() % i);
		size_t t = a[i - 1];
		a[i - 1] = a[j];
		a[j] = t;
	}
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "loadgen: ");
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(2);
}

/* ---- /proc readings for --pid ---- */

static double proc_cpu_s(int pid)
{
	char path[64], line[1024];
	snprintf(path, sizeof path, "/proc/%d/stat", pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	size_t n = fread(line, 1, sizeof line - 1, f);
	fclose(f);
	line[n] = 0;
	char *p = strrchr(line, ')'); /* the command name may hold spaces */
	if (!p)
		return -1;
	unsigned long long ut = 0, st = 0;
	/* after ") ": state(3) ... utime(14) stime(15) */
	if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
		return -1;
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static long proc_status_kb(int pid, const char *field)
{
	char path[64], line[256];
	snprintf(path, sizeof path, "/proc/%d/status", pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	long kb = -1;
	size_t fl = strlen(field);
	while (fgets(line, sizeof line, f))
		if (strncmp(line, field, fl) == 0 && line[fl] == ':') {
			kb = strtol(line + fl + 1, NULL, 10);
			break;
		}
	fclose(f);
	return kb;
}

/* Bytes in memory of pid's memfds named "larder-chunks" (0 if none). */
static long memfd_kb(int pid)
{
	char dir[64], path[PATH_MAX], link[PATH_MAX];
	snprintf(dir, sizeof dir, "/proc/%d/fd", pid);
	DIR *d = opendir(dir);
	if (!d)
		return 0;
	long kb = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
		ssize_t n = readlink(path, link, sizeof link - 1);
		struct stat st;
		if (n <= 0)
			continue;
		link[n] = 0;
		static const char name[] = "/memfd:larder-chunks";
		if (strncmp(link, name, sizeof name - 1) == 0 && stat(path, &st) == 0)
			kb += (long)(st.st_blocks / 2);
	}
	closedir(d);
	return kb;
}

static double pids_cpu(void)
{
	double s = 0;
	for (int i = 0; i < opt.n_pids; i++) {
		double c = proc_cpu_s(opt.pids[i]);
		if (c > 0)
			s += c;
	}
	return s;
}

static long pids_kb(const char *field)
{
	long s = 0;
	for (int i = 0; i < opt.n_pids; i++) {
		long k = proc_status_kb(opt.pids[i], field);
		if (k <= 0)
			continue;
		/* The memfd's pages that hits mapped in are in k already
		 * (RssShmem at the end: larder maps no other shared memory). */
		long mfd = memfd_kb(opt.pids[i]), mapped = proc_status_kb(opt.pids[i], "RssShmem");
		s += k + mfd - (mapped > 0 && mfd > 0 ? (mapped < mfd ? mapped : mfd) : 0);
	}
	return s;
}

/* ---- curl callbacks ---- */

static size_t on_body(char *p, size_t sz, size_t n, void *ud)
{
	(void)p;
	struct slot *s = ud;
	s->bytes += sz * n;
	return sz * n;
}

static size_t on_header(char *p, size_t sz, size_t n, void *ud)
{
	struct slot *s = ud;
	size_t len = sz * n;
	static const char name[] = "x-larder-cache:";
	if (len > sizeof name && strncasecmp(p, name, sizeof name - 1) == 0) {
		const char *v = p + sizeof name - 1;
		while (*v == ' ')
			v++;
		s->cache = (char)((*v == 'h' || *v == 'm' || *v == 'b') ? *v : '?');
	}
	return len;
}

/* ---- the event loop: curl's socket API on epoll, O(1) work per ready socket ---- */

static int epfd = -1;
static long curl_timeout_ms = -1;

static int on_socket(CURL *e, curl_socket_t fd, int what, void *ud, void *sockp)
{
	(void)e;
	(void)ud;
	(void)sockp;
	struct epoll_event ev = { .data.fd = fd };
	if (what == CURL_POLL_REMOVE) {
		epoll_ctl(epfd, EPOLL_CTL_DEL, fd, NULL);
		return 0;
	}
	ev.events = (what & CURL_POLL_IN ? EPOLLIN : 0) | (what & CURL_POLL_OUT ? EPOLLOUT : 0);
	if (epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &ev) != 0 && errno == ENOENT)
		epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev);
	return 0;
}

static int on_timer(CURLM *m, long timeout_ms, void *ud)
{
	(void)m;
	(void)ud;
	curl_timeout_ms = timeout_ms;
	return 0;
}

/* ---- requests ---- */

static int prepare(struct slot *s, size_t key_idx, struct buf *tmp)
{
	const char *key = keys[key_idx];
	buf_reset(tmp);
	if (buf_puts(tmp, base_path) || buf_putc(tmp, '/') ||
	    sv4_uri_encode(key, strlen(key), true, tmp))
		return -1;
	char path[4096];
	snprintf(path, sizeof path, "%s", buf_cstr(tmp));
	char url[8192];
	snprintf(url, sizeof url, "%s%s", base_origin, path);

	curl_slist_free_all(s->hdrs);
	s->hdrs = NULL;
	char h[512];
	struct sv4_header sh[4];
	size_t nh = 0;
	char range[160] = "";
	if (opt.range) {
		snprintf(range, sizeof range, "bytes=%s", opt.range);
		snprintf(h, sizeof h, "Range: %s", range);
		s->hdrs = curl_slist_append(s->hdrs, h);
	}
	if (sign_key) {
		char amz[17];
		sv4_amz_date(time(NULL), amz);
		sh[nh++] = (struct sv4_header){ "host", host_hdr };
		sh[nh++] = (struct sv4_header){ "x-amz-date", amz };
		sh[nh++] = (struct sv4_header){ "x-amz-content-sha256", SV4_EMPTY_SHA256 };
		if (range[0])
			sh[nh++] = (struct sv4_header){ "range", range };
		struct sv4_request rq = { .method = "GET", .path = path, .query = "",
		                          .headers = sh, .n_headers = nh };
		struct sv4_creds cr = { .access_key = sign_key, .secret_key = sign_secret };
		buf_reset(tmp);
		if (sv4_sign(&rq, &cr, opt.region, "s3", tmp) != 0)
			return -1;
		snprintf(h, sizeof h, "x-amz-date: %s", amz);
		s->hdrs = curl_slist_append(s->hdrs, h);
		s->hdrs = curl_slist_append(s->hdrs, "x-amz-content-sha256: " SV4_EMPTY_SHA256);
		snprintf(h, sizeof h, "Authorization: %s", buf_cstr(tmp));
		s->hdrs = curl_slist_append(s->hdrs, h);
	}
	curl_easy_setopt(s->e, CURLOPT_URL, url);
	curl_easy_setopt(s->e, CURLOPT_HTTPHEADER, s->hdrs);
	s->bytes = 0;
	s->cache = 0;
	return 0;
}

static CURL *new_easy(struct slot *s)
{
	CURL *e = curl_easy_init();
	if (!e)
		return NULL;
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, s);
	curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(e, CURLOPT_HEADERDATA, s);
	curl_easy_setopt(e, CURLOPT_PRIVATE, s);
	curl_easy_setopt(e, CURLOPT_BUFFERSIZE, (long)CURL_MAX_READ_SIZE);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_PATH_AS_IS, 1L);
	curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
	curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)(opt.timeout * 1000));
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
	curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
	return e;
}

/* ---- setup ---- */

static void load_keys(const char *file)
{
	FILE *f = fopen(file, "r");
	if (!f)
		die("cannot open keys file %s", file);
	size_t cap = 1024;
	keys = malloc(cap * sizeof *keys);
	char line[2048];
	while (fgets(line, sizeof line, f)) {
		size_t l = strcspn(line, "\r\n");
		line[l] = 0;
		if (l == 0 || line[0] == '#')
			continue;
		if (n_keys == cap) {
			cap *= 2;
			keys = realloc(keys, cap * sizeof *keys);
		}
		keys[n_keys++] = strdup(line);
	}
	fclose(f);
	if (n_keys == 0)
		die("no keys in %s", file);
}

static void split_url(const char *url)
{
	const char *p = strstr(url, "://");
	if (!p)
		die("--url needs a scheme: %s", url);
	const char *hs = p + 3;
	const char *ps = strchr(hs, '/');
	if (!ps)
		ps = hs + strlen(hs);
	host_hdr = strndup(hs, (size_t)(ps - hs));
	base_origin = strndup(url, (size_t)(ps - url));
	size_t pl = strlen(ps);
	while (pl > 0 && ps[pl - 1] == '/')
		pl--;
	base_path = strndup(ps, pl);
}

static void parse_pids(const char *s)
{
	char *copy = strdup(s), *save = NULL;
	for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		if (opt.n_pids == MAX_PIDS)
			die("too many pids: %s", s);
		char *end;
		long pid = strtol(t, &end, 10);
		if (end == t || *end || pid <= 0 || pid > INT_MAX)
			die("not a pid: %s", t);
		opt.pids[opt.n_pids++] = (int)pid;
	}
	free(copy);
}

static void usage(void)
{
	fprintf(stderr,
	        "usage: loadgen --url URL --keys FILE [--concurrency N] [--epochs N] [--seed N]\n"
	        "               [--range a-b] [--sign KEY:SECRET] [--region R] [--pid PID[,PID]]\n"
	        "               [--json FILE] [--duration S] [--timeout S] [--label TEXT]\n");
	exit(2);
}

/* ---- output ---- */

static void json_epoch(FILE *f, const struct epoch *ep)
{
	double el = ep->t_end - ep->t_start;
	fprintf(f,
	        "{\"objects\": %" PRIu64 ", \"bytes\": %" PRIu64 ", \"seconds\": %.4f, "
	        "\"objects_per_s\": %.2f, \"mb_per_s\": %.2f, \"errors\": %" PRIu64 ", "
	        "\"cache_hit\": %" PRIu64 ", \"cache_miss\": %" PRIu64 ", \"cache_bypass\": %" PRIu64
	        ", \"hit_ratio\": %.4f, \"p50_ms\": %.3f, \"p99_ms\": %.3f, \"p999_ms\": %.3f, \"max_ms\": %.3f}",
	        ep->objects, ep->bytes, el, el > 0 ? (double)ep->objects / el : 0,
	        el > 0 ? (double)ep->bytes / el / 1e6 : 0, ep->errors, ep->hit, ep->miss, ep->bypass,
	        ep->objects ? (double)ep->hit / (double)ep->objects : 0, hist_pct(ep->lat, 50),
	        hist_pct(ep->lat, 99), hist_pct(ep->lat, 99.9), (double)ep->lat->max_us / 1000.0);
}

static void print_line(const char *what, const struct epoch *ep)
{
	double el = ep->t_end - ep->t_start;
	printf("%-22s %9" PRIu64 " %10.1f %9.1f %9.3f %9.3f %9.3f %9.3f %6" PRIu64 " %6" PRIu64
	       " %6" PRIu64 "\n",
	       what, ep->objects, el > 0 ? (double)ep->objects / el : 0,
	       el > 0 ? (double)ep->bytes / el / 1e6 : 0, hist_pct(ep->lat, 50), hist_pct(ep->lat, 99),
	       hist_pct(ep->lat, 99.9), (double)ep->lat->max_us / 1000.0, ep->errors, ep->hit,
	       ep->miss);
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "url", required_argument, 0, 'u' },      { "keys", required_argument, 0, 'k' },
		{ "concurrency", required_argument, 0, 'c' }, { "epochs", required_argument, 0, 'e' },
		{ "seed", required_argument, 0, 's' },     { "range", required_argument, 0, 'r' },
		{ "sign", required_argument, 0, 'S' },     { "region", required_argument, 0, 'R' },
		{ "pid", required_argument, 0, 'p' },      { "json", required_argument, 0, 'j' },
		{ "duration", required_argument, 0, 'd' }, { "timeout", required_argument, 0, 't' },
		{ "label", required_argument, 0, 'l' },    { "help", no_argument, 0, 'h' },
		{ 0, 0, 0, 0 },
	};
	/* libcurl mallocs each transfer's 512 KiB receive buffer and frees it at
	 * the transfer's end. With glibc's defaults a free at the top of the heap
	 * gives the pages back (trim), and the next transfer faults them in again:
	 * whether that happens depends on the heap's layout, so a run's client
	 * cost moved by a fifth from one run to the next (docs/benchmarks.md,
	 * "The client's allocator"). Keep the memory instead. */
	mallopt(M_MMAP_THRESHOLD, 64 << 20);
	mallopt(M_TRIM_THRESHOLD, 1 << 30);
	int c;
	while ((c = getopt_long(argc, argv, "u:k:c:e:s:r:S:R:p:j:d:t:l:h", lo, NULL)) != -1) {
		switch (c) {
		case 'u': opt.url = optarg; break;
		case 'k': opt.keys = optarg; break;
		case 'c': opt.concurrency = (unsigned)strtoul(optarg, NULL, 10); break;
		case 'e': opt.epochs = (unsigned)strtoul(optarg, NULL, 10); break;
		case 's': opt.seed = strtoull(optarg, NULL, 10); break;
		case 'r': opt.range = optarg; break;
		case 'S': opt.sign = optarg; break;
		case 'R': opt.region = optarg; break;
		case 'p': parse_pids(optarg); break;
		case 'j': opt.json = optarg; break;
		case 'd': opt.duration = strtod(optarg, NULL); break;
		case 't': opt.timeout = strtod(optarg, NULL); break;
		case 'l': opt.label = optarg; break;
		default: usage();
		}
	}
	if (!opt.url || !opt.keys || opt.concurrency == 0 || opt.concurrency > 20000 ||
	    opt.epochs == 0 || opt.epochs > MAX_EPOCHS)
		usage();
	if (opt.sign) {
		const char *colon = strchr(opt.sign, ':');
		if (!colon)
			die("--sign wants KEY:SECRET, got %s", opt.sign);
		sign_key = strndup(opt.sign, (size_t)(colon - opt.sign));
		sign_secret = strdup(colon + 1);
	}
	split_url(opt.url);
	load_keys(opt.keys);
	rng = opt.seed;
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0)
		die("%s", "curl_global_init failed");

	CURLM *m = curl_multi_init();
	curl_multi_setopt(m, CURLMOPT_MAXCONNECTS, (long)opt.concurrency + 8);
	curl_multi_setopt(m, CURLMOPT_MAX_HOST_CONNECTIONS, (long)opt.concurrency);
	curl_multi_setopt(m, CURLMOPT_SOCKETFUNCTION, on_socket);
	curl_multi_setopt(m, CURLMOPT_TIMERFUNCTION, on_timer);
	epfd = epoll_create1(EPOLL_CLOEXEC);
	if (epfd < 0)
		die("epoll_create1: %s", strerror(errno));
	struct epoll_event evs[256];

	struct slot *slots = calloc(opt.concurrency, sizeof *slots);
	for (unsigned i = 0; i < opt.concurrency; i++)
		if (!(slots[i].e = new_easy(&slots[i])))
			die("%s", "curl_easy_init failed");

	struct epoch eps[MAX_EPOCHS];
	memset(eps, 0, sizeof eps);
	struct hist *total = calloc(1, sizeof *total);
	size_t *order = malloc(n_keys * sizeof *order);
	struct buf tmp;
	buf_init(&tmp, 1 << 16);

	struct rusage ru0;
	getrusage(RUSAGE_SELF, &ru0);
	double cpu0 = pids_cpu();
	double t_run = now_s();
	double deadline = opt.duration > 0 ? t_run + opt.duration : 0;
	bool capped = false;
	unsigned epochs_run = 0;
	uint64_t curl_errors = 0, http_errors = 0;

	/* Bounded: each epoch issues at most n_keys requests, each bounded by --timeout. */
	for (unsigned ep = 0; ep < opt.epochs && !capped; ep++) {
		struct epoch *E = &eps[ep];
		E->lat = calloc(1, sizeof *E->lat);
		for (size_t i = 0; i < n_keys; i++)
			order[i] = i;
		shuffle(order, n_keys);
		size_t next = 0;
		unsigned busy = 0;
		E->t_start = now_s();
		epochs_run++;
		for (;;) {
			/* fill idle slots */
			for (unsigned i = 0; i < opt.concurrency && next < n_keys && !capped; i++) {
				struct slot *s = &slots[i];
				if (s->busy)
					continue;
				if (deadline > 0 && now_s() >= deadline) {
					capped = true;
					break;
				}
				if (prepare(s, order[next], &tmp) != 0)
					die("cannot build a request for key %s", keys[order[next]]);
				next++;
				s->busy = true;
				s->epoch = (int)ep;
				s->t0 = now_s();
				curl_multi_add_handle(m, s->e);
				busy++;
			}
			if (busy == 0)
				break;
			int running = 0;
			int timeout = curl_timeout_ms < 0 ? 100 : (int)(curl_timeout_ms > 100 ? 100 : curl_timeout_ms);
			int nev = epoll_wait(epfd, evs, 256, timeout);
			if (nev <= 0) {
				curl_multi_socket_action(m, CURL_SOCKET_TIMEOUT, 0, &running);
			} else {
				for (int i = 0; i < nev; i++) {
					int mask = (evs[i].events & EPOLLIN ? CURL_CSELECT_IN : 0) |
					           (evs[i].events & EPOLLOUT ? CURL_CSELECT_OUT : 0) |
					           (evs[i].events & (EPOLLERR | EPOLLHUP) ? CURL_CSELECT_ERR : 0);
					curl_multi_socket_action(m, evs[i].data.fd, mask, &running);
				}
				if (curl_timeout_ms == 0)
					curl_multi_socket_action(m, CURL_SOCKET_TIMEOUT, 0, &running);
			}
			CURLMsg *msg;
			int left;
			while ((msg = curl_multi_info_read(m, &left))) {
				if (msg->msg != CURLMSG_DONE)
					continue;
				struct slot *s = NULL;
				curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&s);
				double t1 = now_s();
				long status = 0;
				curl_easy_getinfo(s->e, CURLINFO_RESPONSE_CODE, &status);
				bool ok = msg->data.result == CURLE_OK && (status == 200 || status == 206);
				if (msg->data.result != CURLE_OK)
					curl_errors++;
				else if (!ok)
					http_errors++;
				curl_multi_remove_handle(m, s->e);
				s->busy = false;
				busy--;
				E->objects++;
				E->bytes += s->bytes;
				if (!ok) {
					E->errors++;
					if (E->errors <= 3)
						fprintf(stderr, "loadgen: error: %s, HTTP %ld\n",
						        curl_easy_strerror(msg->data.result), status);
				}
				switch (s->cache) {
				case 'h': E->hit++; break;
				case 'm': E->miss++; break;
				case 'b': E->bypass++; break;
				case 0: break;
				default: E->other++; break;
				}
				uint64_t us = (uint64_t)((t1 - s->t0) * 1e6);
				hist_add(E->lat, us);
				hist_add(total, us);
			}
		}
		E->t_end = now_s();
	}
	double t_end = now_s();
	double cpu1 = pids_cpu();
	struct rusage ru1;
	getrusage(RUSAGE_SELF, &ru1);
	double my_cpu = (double)(ru1.ru_utime.tv_sec - ru0.ru_utime.tv_sec) +
	                (double)(ru1.ru_utime.tv_usec - ru0.ru_utime.tv_usec) / 1e6 +
	                (double)(ru1.ru_stime.tv_sec - ru0.ru_stime.tv_sec) +
	                (double)(ru1.ru_stime.tv_usec - ru0.ru_stime.tv_usec) / 1e6;

	struct epoch all = { .t_start = t_run, .t_end = t_end, .lat = total };
	for (unsigned i = 0; i < epochs_run; i++) {
		all.objects += eps[i].objects;
		all.bytes += eps[i].bytes;
		all.errors += eps[i].errors;
		all.hit += eps[i].hit;
		all.miss += eps[i].miss;
		all.bypass += eps[i].bypass;
	}
	double gb = (double)all.bytes / 1e9;
	double target_cpu = opt.n_pids ? cpu1 - cpu0 : -1;
	long hwm = opt.n_pids ? pids_kb("VmHWM") : -1, rss = opt.n_pids ? pids_kb("VmRSS") : -1;

	printf("%-22s %9s %10s %9s %9s %9s %9s %9s %6s %6s %6s\n", opt.label ? opt.label : "run",
	       "objects", "objects/s", "MB/s", "p50_ms", "p99_ms", "p999_ms", "max_ms", "errors",
	       "hits", "misses");
	if (epochs_run > 1)
		for (unsigned i = 0; i < epochs_run; i++) {
			char w[32];
			snprintf(w, sizeof w, "  epoch %u", i + 1);
			print_line(w, &eps[i]);
		}
	print_line("  total", &all);
	if (opt.n_pids)
		printf("  target: %.2f CPU s (%.2f s/GB), VmHWM %.1f MiB, VmRSS %.1f MiB; loadgen %.2f CPU s\n",
		       target_cpu, gb > 0 ? target_cpu / gb : 0, (double)hwm / 1024, (double)rss / 1024,
		       my_cpu);
	else
		printf("  loadgen %.2f CPU s\n", my_cpu);
	if (capped)
		printf("  stopped by --duration %.1f s\n", opt.duration);

	if (opt.json) {
		FILE *f = fopen(opt.json, "w");
		if (!f)
			die("cannot write %s", opt.json);
		fprintf(f, "{\"label\": \"%s\", \"url\": \"%s\", \"keys\": %zu, \"concurrency\": %u, "
		           "\"epochs_requested\": %u, \"epochs\": %u, \"seed\": %" PRIu64 ", "
		           "\"range\": \"%s\", \"signed\": %s, \"capped_by_duration\": %s,\n",
		        opt.label ? opt.label : "", opt.url, n_keys, opt.concurrency, opt.epochs,
		        epochs_run, opt.seed, opt.range ? opt.range : "", sign_key ? "true" : "false",
		        capped ? "true" : "false");
		fprintf(f, " \"total\": ");
		json_epoch(f, &all);
		fprintf(f, ",\n \"per_epoch\": [");
		for (unsigned i = 0; i < epochs_run; i++) {
			fprintf(f, i ? ",\n   " : "\n   ");
			json_epoch(f, &eps[i]);
		}
		fprintf(f, "],\n \"curl_errors\": %" PRIu64 ", \"http_errors\": %" PRIu64
		           ", \"loadgen_cpu_s\": %.3f",
		        curl_errors, http_errors, my_cpu);
		if (opt.n_pids)
			fprintf(f, ",\n \"target_cpu_s\": %.3f, \"target_cpu_s_per_gb\": %.3f, "
			           "\"target_vmhwm_kib\": %ld, \"target_vmrss_kib\": %ld",
			        target_cpu, gb > 0 ? target_cpu / gb : 0, hwm, rss);
		fprintf(f, "}\n");
		fclose(f);
	}

	for (unsigned i = 0; i < opt.concurrency; i++) {
		curl_easy_cleanup(slots[i].e);
		curl_slist_free_all(slots[i].hdrs);
	}
	curl_multi_cleanup(m);
	curl_global_cleanup();
	buf_fini(&tmp);
	for (unsigned i = 0; i < epochs_run; i++)
		free(eps[i].lat);
	free(total);
	free(order);
	free(slots);
	for (size_t i = 0; i < n_keys; i++)
		free(keys[i]);
	free(keys);
	return all.errors > 0 ? 1 : 0;
}

/* log.c - diagnostics to stderr and the access log, both line-atomic. */
#include "base/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/buf.h"

int log_current_level = LOG_INFO;


static const char *const level_names[] = { "error", "warn", "info", "debug" };

int log_level_parse(const char *s)
{
	for (int i = 0; i < 4; i++)
		if (strcasecmp(s, level_names[i]) == 0)
			return i;
	if (strcasecmp(s, "warning") == 0)
		return LOG_WARN;
	return -1;
}

void log_set_level(enum log_level l)
{
	log_current_level = l;
}

static void timestamp(char *out, size_t n)
{
	struct timeval tv;
	struct tm tm;
	gettimeofday(&tv, NULL);
	gmtime_r(&tv.tv_sec, &tm);
	size_t k = strftime(out, n, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(out + k, n - k, ".%03ldZ", (long)(tv.tv_usec / 1000));
}

/* A line being formatted: bytes past cap are dropped, and the line is then
 * ended with a newline by its writer (there is always room for one). */
struct line {
	char *p;
	size_t len, cap;
};

static void put_bytes(struct line *l, const char *s, size_t n)
{
	if (n > l->cap - l->len)
		n = l->cap - l->len;
	memcpy(l->p + l->len, s, n);
	l->len += n;
}

/* Writes c, or \xNN for a control byte: the one escape the diagnostic
 * lines and the access log's quoted values share. */
static void put_char(struct line *l, unsigned char c)
{
	if (c < ' ' || c == 0x7f) {
		char esc[5];
		snprintf(esc, sizeof esc, "\\x%02x", c);
		put_bytes(l, esc, 4);
	} else {
		put_bytes(l, (const char *)&c, 1);
	}
}

void log_write(enum log_level l, const char *topic, const char *fmt, ...)
{
	char line[2048], ts[32];
	timestamp(ts, sizeof ts);
	int k = snprintf(line, sizeof line, "%s %-5s [%s] ", ts, level_names[l], topic);
	va_list ap;
	va_start(ap, fmt);
	if (k > 0 && (size_t)k < sizeof line)
		vsnprintf(line + k, sizeof line - (size_t)k, fmt, ap);
	va_end(ap);
	/* Messages quote client-controlled strings (keys, paths): a control
	 * byte among them must not start a forged line or rewrite this one. */
	char safe[sizeof line];
	struct line s = { safe, 0, sizeof safe - 2 };
	for (const unsigned char *p = (const unsigned char *)line; *p && s.len < s.cap; p++)
		put_char(&s, *p);
	/* One fputs per line: stdio locks the stream, so lines never interleave. */
	safe[s.len++] = '\n';
	safe[s.len] = '\0';
	fputs(safe, stderr);
}

void log_mhd(void *cls, const char *fmt, va_list ap)
{
	char msg[512];
	vsnprintf(msg, sizeof msg, fmt, ap);
	size_t n = strlen(msg);
	while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
		msg[--n] = '\0';
	/* A TLS handshake that failed or never began (a load balancer's TCP
	 * check every few seconds) is the client's business; so is a close
	 * larder asked for (its access log says why: a client that left). */
	if (strstr(msg, "handshake") || strstr(msg, "Application reported internal error"))
		log_debug((const char *)cls, "%s", msg);
	else
		log_info((const char *)cls, "%s", msg);
}

/*
 * The access log costs one write(2) per buffer, not one per request, and no
 * lock shared between workers: each thread formats its lines into a buffer
 * of its own (like nginx's buffer=), written whole, with O_APPEND, when the
 * next line would not fit, and by a flusher thread once its oldest line is
 * flush_ms old (nginx's flush=). Lines never interleave: a write carries
 * whole lines. Buffers live as long as the process (threads that log are
 * long-lived), so a thread's pointer to its own never dangles.
 */
struct alog_buf {
	pthread_mutex_t lock;     /* its thread, the flusher, log_access_close */
	char *p;
	size_t used;
	uint64_t oldest_ms;       /* monotonic time of the oldest unwritten line */
	struct alog_buf *next;
};

static _Atomic int access_fd = -1;
static bool access_is_file;
static char access_path[4096]; /* the file's, for log_access_reopen */
static size_t access_buf_bytes;
static unsigned access_flush_ms;
static pthread_mutex_t bufs_lock = PTHREAD_MUTEX_INITIALIZER;
static struct alog_buf *all_bufs;
/* Initial-exec: this code is linked into the executable, never dlopen'ed,
 * so its thread-locals need no __tls_get_addr call (nor ld.so as a NEEDED
 * library, which the Dockerfile check would have to know about). */
#define THREAD_LOCAL __thread __attribute__((tls_model("initial-exec")))
static THREAD_LOCAL struct alog_buf *my_buf;

static pthread_t flusher;
static bool flusher_running;
static pthread_mutex_t flusher_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t flusher_cv;
static bool flusher_stop;

static uint64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Writes n bytes to the access log whole; a failure drops them (a full
 * disk must not stop requests), retrying only on EINTR and short writes. */
static void write_all(int fd, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t k = write(fd, p, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return;
		p += k;
		n -= (size_t)k;
	}
}

/* With b->lock held. */
static void drain(struct alog_buf *b)
{
	int fd = atomic_load(&access_fd);
	if (b->used && fd >= 0)
		write_all(fd, b->p, b->used);
	b->used = 0;
}

static void flush_all(bool only_due)
{
	uint64_t now = mono_ms();
	pthread_mutex_lock(&bufs_lock);
	for (struct alog_buf *b = all_bufs; b; b = b->next) {
		pthread_mutex_lock(&b->lock);
		if (b->used && (!only_due || now - b->oldest_ms >= access_flush_ms))
			drain(b);
		pthread_mutex_unlock(&b->lock);
	}
	pthread_mutex_unlock(&bufs_lock);
}

static void *flusher_main(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "larder-log");
	pthread_mutex_lock(&flusher_lock);
	while (!flusher_stop) {
		struct timespec until;
		clock_gettime(CLOCK_MONOTONIC, &until);
		uint64_t ns = (uint64_t)until.tv_nsec + (uint64_t)(access_flush_ms / 2 + 1) * 1000000;
		until.tv_sec += (time_t)(ns / 1000000000);
		until.tv_nsec = (long)(ns % 1000000000);
		pthread_cond_timedwait(&flusher_cv, &flusher_lock, &until);
		if (flusher_stop)
			break;
		pthread_mutex_unlock(&flusher_lock);
		flush_all(true);
		pthread_mutex_lock(&flusher_lock);
	}
	pthread_mutex_unlock(&flusher_lock);
	return NULL;
}

int log_access_open(const char *where, size_t buffer_bytes, unsigned flush_ms)
{
	log_access_close();
	int fd = -1;
	if (!where || strcmp(where, "-") == 0) {
		fd = STDOUT_FILENO;
	} else if (strcmp(where, "off") == 0) {
		return 0;
	} else {
		fd = open(where, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
		if (fd < 0)
			return -errno;
		access_is_file = true;
		if ((size_t)snprintf(access_path, sizeof access_path, "%s", where) >= sizeof access_path)
			access_path[0] = '\0'; /* too long to keep: not reopened */
	}
	access_buf_bytes = flush_ms ? buffer_bytes : 0;
	access_flush_ms = flush_ms;
	if (access_buf_bytes) {
		pthread_condattr_t ca;
		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		pthread_cond_init(&flusher_cv, &ca);
		pthread_condattr_destroy(&ca);
		flusher_stop = false;
		if (pthread_create(&flusher, NULL, flusher_main, NULL) != 0) {
			pthread_cond_destroy(&flusher_cv);
			access_flush_ms = 0; /* no time bound: write every line */
			access_buf_bytes = 0;
		} else {
			flusher_running = true;
		}
	}
	atomic_store(&access_fd, fd);
	return 0;
}

void log_access_close(void)
{
	if (flusher_running) {
		pthread_mutex_lock(&flusher_lock);
		flusher_stop = true;
		pthread_cond_signal(&flusher_cv);
		pthread_mutex_unlock(&flusher_lock);
		pthread_join(flusher, NULL);
		pthread_cond_destroy(&flusher_cv);
		flusher_running = false;
	}
	flush_all(false);
	int fd = atomic_exchange(&access_fd, -1);
	if (fd >= 0 && access_is_file)
		close(fd);
	access_is_file = false;
}

int log_access_reopen(void)
{
	int fd = atomic_load(&access_fd);
	if (fd < 0 || !access_is_file)
		return 0;
	if (!access_path[0])
		return -ENAMETOOLONG;
	int nfd = open(access_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	if (nfd < 0)
		return -errno;
	flush_all(false); /* what is buffered ends the old file */
	/* The same descriptor number from now on names the new file, so a
	 * thread writing meanwhile writes its line to one or the other. */
	int rc = dup3(nfd, fd, O_CLOEXEC) < 0 ? -errno : 0;
	close(nfd);
	return rc;
}

/* The calling thread's buffer, made on its first line; NULL when memory
 * is short (the line is then written on its own). */
static struct alog_buf *thread_buf(void)
{
	if (my_buf)
		return my_buf;
	struct alog_buf *b = mem_calloc(1, sizeof *b);
	char *p = b ? mem_malloc(access_buf_bytes) : NULL;
	if (!p) {
		free(b);
		return NULL;
	}
	pthread_mutex_init(&b->lock, NULL);
	b->p = p;
	pthread_mutex_lock(&bufs_lock);
	b->next = all_bufs;
	all_bufs = b;
	pthread_mutex_unlock(&bufs_lock);
	my_buf = b;
	return b;
}

static void put_str(struct line *l, const char *s)
{
	put_bytes(l, s, strlen(s));
}

/* Writes v as a logfmt value: bare when safe, else quoted with escapes. */
static void put_value(struct line *l, const char *v)
{
	if (!v || !*v) {
		put_bytes(l, "-", 1);
		return;
	}
	bool bare = true;
	for (const unsigned char *p = (const unsigned char *)v; *p; p++)
		if (*p <= ' ' || *p == '"' || *p == '=' || *p == '\\' || *p >= 0x7f) {
			bare = false;
			break;
		}
	if (bare) {
		put_str(l, v);
		return;
	}
	put_bytes(l, "\"", 1);
	for (const unsigned char *p = (const unsigned char *)v; *p; p++) {
		if (*p == '"' || *p == '\\')
			put_bytes(l, "\\", 1);
		put_char(l, *p);
	}
	put_bytes(l, "\"", 1);
}

static void put_fmt(struct line *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put_fmt(struct line *l, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int k = vsnprintf(l->p + l->len, l->cap - l->len + 1, fmt, ap);
	va_end(ap);
	if (k > 0)
		l->len += (size_t)k < l->cap - l->len ? (size_t)k : l->cap - l->len;
}

/* Decimal integers and the duration by hand: a vsnprintf of them was the
 * access line's largest cost (docs/benchmarks.md, "Per-request CPU"). */
static void put_uint(struct line *l, unsigned long long v, unsigned min_digits)
{
	char d[U64_DEC_MAX];
	put_bytes(l, d, (size_t)(u64_dec(d, v, min_digits) - d));
}

static void put_int(struct line *l, int v)
{
	if (v < 0)
		put_bytes(l, "-", 1);
	put_uint(l, v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v, 1);
}

/* As %.3f would print it, for the non-negative values a duration has. */
static void put_ms(struct line *l, double ms)
{
	if (!(ms >= 0 && ms < 1e15)) {
		put_fmt(l, "%.3f", ms);
		return;
	}
	unsigned long long us = (unsigned long long)(ms * 1000.0 + 0.5);
	put_uint(l, us / 1000, 1);
	put_bytes(l, ".", 1);
	put_uint(l, us % 1000, 3);
}

/* The timestamp: the seconds formatted once a second per thread (gmtime_r
 * and strftime, which need not run for every line), the milliseconds
 * added. */
static void put_ts(struct line *l)
{
	static THREAD_LOCAL time_t last_sec = -1;
	static THREAD_LOCAL char sec_text[24];
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	if (ts.tv_sec != last_sec) {
		struct tm tm;
		gmtime_r(&ts.tv_sec, &tm);
		strftime(sec_text, sizeof sec_text, "%Y-%m-%dT%H:%M:%S", &tm);
		last_sec = ts.tv_sec;
	}
	put_str(l, sec_text);
	put_bytes(l, ".", 1);
	put_uint(l, (unsigned long long)(ts.tv_nsec / 1000000), 3);
	put_bytes(l, "Z", 1);
}

void log_access(const struct log_access_rec *r)
{
	if (atomic_load_explicit(&access_fd, memory_order_relaxed) < 0)
		return;
	/* Keys are at most 1,024 bytes, 4,096 escaped: a line always fits. */
	char text[8192];
	struct line l = { text, 0, sizeof text - 1 };
	put_str(&l, "ts=");
	put_ts(&l);
	put_str(&l, " id=");
	put_value(&l, r->request_id);
	put_str(&l, " key_id=");
	put_value(&l, r->key_id);
	put_str(&l, " method=");
	put_value(&l, r->method);
	put_str(&l, " bucket=");
	put_value(&l, r->bucket);
	put_str(&l, " key=");
	put_value(&l, r->key);
	put_str(&l, " status=");
	put_int(&l, r->status);
	put_str(&l, " bytes_in=");
	put_uint(&l, (unsigned long long)r->bytes_in, 1);
	put_str(&l, " bytes_out=");
	put_uint(&l, (unsigned long long)r->bytes_out, 1);
	put_str(&l, " duration_ms=");
	put_ms(&l, r->duration_ms);
	put_str(&l, " upstream_status=");
	put_int(&l, r->upstream_status);
	put_str(&l, " error=");
	put_value(&l, r->error_code);
	put_str(&l, " cache=");
	put_value(&l, r->cache);
	text[l.len++] = '\n';

	struct alog_buf *b = access_buf_bytes ? thread_buf() : NULL;
	if (!b) {
		int fd = atomic_load(&access_fd);
		if (fd >= 0)
			write_all(fd, text, l.len);
		return;
	}
	pthread_mutex_lock(&b->lock);
	if (b->used + l.len > access_buf_bytes)
		drain(b);
	if (l.len > access_buf_bytes) {
		int fd = atomic_load(&access_fd);
		if (fd >= 0)
			write_all(fd, text, l.len);
	} else {
		if (b->used == 0)
			b->oldest_ms = mono_ms();
		memcpy(b->p + b->used, text, l.len);
		b->used += l.len;
	}
	pthread_mutex_unlock(&b->lock);
}

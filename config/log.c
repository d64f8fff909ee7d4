/* log.c - diagnostics to stderr and the access log, both line-atomic. */
#include "config/log.h"

#include <errno.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdarg.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>

int log_current_level = LOG_INFO;

static FILE *access_fp;
static bool access_is_file;
static pthread_mutex_t access_lock = PTHREAD_MUTEX_INITIALIZER;

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
	size_t used = 0;
	for (const unsigned char *p = (const unsigned char *)line; *p && used + 5 < sizeof safe; p++) {
		if (*p < ' ' || *p == 0x7f)
			used += (size_t)snprintf(safe + used, sizeof safe - used, "\\x%02x", *p);
		else
			safe[used++] = (char)*p;
	}
	safe[used] = '\0';
	memcpy(line, safe, used + 1);
	/* One fputs per line: stdio locks the stream, so lines never interleave. */
	size_t len = strlen(line);
	if (len < sizeof line - 1) {
		line[len] = '\n';
		line[len + 1] = '\0';
	} else {
		line[sizeof line - 2] = '\n';
	}
	fputs(line, stderr);
}

void log_mhd(void *cls, const char *fmt, va_list ap)
{
	char msg[512];
	vsnprintf(msg, sizeof msg, fmt, ap);
	size_t n = strlen(msg);
	while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
		msg[--n] = '\0';
	log_info((const char *)cls, "%s", msg);
}

int log_access_open(const char *where)
{
	log_access_close();
	if (!where || strcmp(where, "-") == 0) {
		access_fp = stdout;
		return 0;
	}
	if (strcmp(where, "off") == 0)
		return 0;
	FILE *f = fopen(where, "a");
	if (!f)
		return -errno;
	setvbuf(f, NULL, _IOLBF, 0);
	access_fp = f;
	access_is_file = true;
	return 0;
}

void log_access_close(void)
{
	if (access_fp && access_is_file)
		fclose(access_fp);
	access_fp = NULL;
	access_is_file = false;
}

/* Writes v as a logfmt value: bare when safe, else quoted with escapes. */
static void put_value(FILE *f, const char *v)
{
	if (!v || !*v) {
		fputc('-', f);
		return;
	}
	bool bare = true;
	for (const unsigned char *p = (const unsigned char *)v; *p; p++)
		if (*p <= ' ' || *p == '"' || *p == '=' || *p == '\\' || *p >= 0x7f) {
			bare = false;
			break;
		}
	if (bare) {
		fputs(v, f);
		return;
	}
	fputc('"', f);
	for (const unsigned char *p = (const unsigned char *)v; *p; p++) {
		if (*p == '"' || *p == '\\')
			fprintf(f, "\\%c", *p);
		else if (*p < ' ' || *p == 0x7f)
			fprintf(f, "\\x%02x", *p);
		else
			fputc(*p, f);
	}
	fputc('"', f);
}

void log_access(const struct log_access_rec *r)
{
	if (!access_fp)
		return;
	char ts[32];
	timestamp(ts, sizeof ts);
	pthread_mutex_lock(&access_lock);
	FILE *f = access_fp;
	fprintf(f, "ts=%s id=", ts);
	put_value(f, r->request_id);
	fputs(" key_id=", f);
	put_value(f, r->key_id);
	fputs(" method=", f);
	put_value(f, r->method);
	fputs(" bucket=", f);
	put_value(f, r->bucket);
	fputs(" key=", f);
	put_value(f, r->key);
	fprintf(f, " status=%d bytes_in=%llu bytes_out=%llu duration_ms=%.3f upstream_status=%d error=",
	        r->status, (unsigned long long)r->bytes_in, (unsigned long long)r->bytes_out,
	        r->duration_ms, r->upstream_status);
	put_value(f, r->error_code);
	fputs(" cache=", f);
	put_value(f, r->cache);
	fputc('\n', f);
	fflush(f);
	pthread_mutex_unlock(&access_lock);
}

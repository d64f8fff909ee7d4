/*
 * log.h - level-filtered diagnostics and the access log.
 *
 * Diagnostics go to stderr as one line each:
 *   2026-11-21T16:20:00.123Z WARN  [topic] message
 * The level is checked before the arguments are evaluated, so a DEBUG line
 * costs one comparison when debug logging is off.
 *
 * The access log is a separate stream (stdout by default, a file, or off):
 * one line per request, written by log_access() into a buffer of the
 * calling thread's and from there to the log in whole lines, when the
 * buffer is full or its oldest line is flush_ms old.
 */
#ifndef LARDER_LOG_H
#define LARDER_LOG_H

#include <stdint.h>
#include <stdarg.h>
#include <stdio.h>

enum log_level { LOG_ERROR = 0, LOG_WARN = 1, LOG_INFO = 2, LOG_DEBUG = 3 };

extern int log_current_level;

/* Parses "error", "warn", "info", "debug". Returns the level, or -1. */
int log_level_parse(const char *s);
void log_set_level(enum log_level l);

/* Opens the access log: "-" is stdout, "off" disables it, anything else is
 * a file opened for append. Each thread's lines wait in a buffer of
 * buffer_bytes (0: every line is written at once) for at most flush_ms
 * (0: no time bound, so no buffer either). Returns 0, or -errno. */
int log_access_open(const char *where, size_t buffer_bytes, unsigned flush_ms);
/* A file access log opened again by its path (SIGHUP: a rotation renamed
 * it), in place of the open one; the lines buffered go to the old one.
 * 0, also for stdout and off; -errno keeps the old file. */
int log_access_reopen(void);
void log_access_close(void);

void log_write(enum log_level l, const char *topic, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#define log_at(l, topic, ...) \
	do { if ((int)(l) <= log_current_level) log_write((l), (topic), __VA_ARGS__); } while (0)
#define log_error(topic, ...) log_at(LOG_ERROR, topic, __VA_ARGS__)
#define log_warn(topic, ...)  log_at(LOG_WARN, topic, __VA_ARGS__)
#define log_info(topic, ...)  log_at(LOG_INFO, topic, __VA_ARGS__)
#define log_debug(topic, ...) log_at(LOG_DEBUG, topic, __VA_ARGS__)

/* libmicrohttpd's external logger (MHD_OPTION_EXTERNAL_LOGGER), at info
 * level; cls is the topic string ("http", "admin"). */
void log_mhd(void *cls, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));

/* One request, as the access log records it. Strings may be NULL ("-"). */
struct log_access_rec {
	const char *request_id;
	const char *key_id;
	const char *method;
	const char *bucket;
	const char *key;
	int status;             /* status sent to the client */
	uint64_t bytes_in;      /* request body bytes received */
	uint64_t bytes_out;     /* response body bytes sent */
	double duration_ms;
	int upstream_status;    /* 0 when no upstream request was made */
	const char *error_code; /* S3 error code larder raised, or NULL */
	const char *cache;      /* "hit", "miss", "bypass", or NULL (not an object read) */
};

/* Writes one access-log line (logfmt: key=value, values quoted as needed). */
void log_access(const struct log_access_rec *r);

#endif

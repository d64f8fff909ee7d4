/*
 * lookahead.h - read-order lookahead: a job tells larder the order in
 * which it will read a bucket's objects, and larder keeps the next
 * `window` objects of that list warm ahead of the furthest one read so far,
 * or (window_bytes) the next objects while their bytes stay under a bound.
 *
 * A lookahead is a gated prefetch job (prefetch.h) over its key list: the
 * gate is the furthest key read plus the window (with window_bytes, as far
 * as the sizes the job has learnt allow), so warming runs at the
 * prefetch's small concurrency, below client reads, and fetches through
 * the chunk owners in a cluster like any warm job. Reads are noted where
 * the cached read path begins a GET (cache.c). A lookahead ends (done) when
 * its last key was read and the list is warm, after idle_s without a read
 * of one of its keys (idle), or when ended by hand.
 *
 * Every function here is thread-safe.
 */
#ifndef LARDER_LOOKAHEAD_H
#define LARDER_LOOKAHEAD_H

#include <stddef.h>
#include <stdint.h>

struct gw;
struct worker;
struct prefetch;
struct lookaheads;

#define LOOKAHEAD_WINDOW_MAX 4096
#define LOOKAHEAD_IDLE_MAX 86400 /* seconds */
#define LOOKAHEAD_MANIFEST_MAX (64u << 20)
#define LOOKAHEAD_WINDOW_BYTES_MAX (1ull << 50) /* 1 PiB */

struct lookahead_req {
	const char *bucket;
	const char *const *keys; /* n_keys keys in read order, or NULL */
	size_t n_keys;
	const char *manifest; /* else: key of an object listing them, one a line */
	size_t window;        /* objects kept warm ahead: 1..LOOKAHEAD_WINDOW_MAX */
	/* 0, or 1..LOOKAHEAD_WINDOW_BYTES_MAX: objects start ahead of the
	 * furthest read only while those started past it add up to fewer bytes
	 * (one whose size is not learnt yet counts as the mean of those learnt,
	 * as the whole window before any is); the first one ahead always starts.
	 * With both bounds the tighter one holds. */
	uint64_t window_bytes;
	unsigned concurrency; /* objects warmed at once; 0: 32 */
	double idle_s;        /* 0: the setting (LARDER_LOOKAHEAD_IDLE) */
};

struct lookahead_info {
	char id[24];
	char state[16]; /* running, done (warm to the end), idle, ended */
	char bucket[256];
	uint64_t keys;     /* keys in the list */
	uint64_t position; /* keys up to the furthest one read */
	uint64_t window, window_bytes; /* window_bytes 0: none */
	uint64_t objects, bytes; /* warmed so far */
	double idle_s;
};

/* Figures for /metrics since start. A read counts once per running
 * lookahead that lists its key; it is "ahead" when the key was inside that
 * lookahead's window when the read began (its warming had been asked for,
 * ahead of the reader), or already passed. */
struct lookahead_stats {
	uint64_t running;         /* lookaheads running now */
	uint64_t objects, bytes;  /* warmed by every lookahead, running or ended */
	uint64_t reads, reads_ahead;
};
void lookahead_get_stats(struct lookaheads *l, struct lookahead_stats *out);

/* Created before the workers run; the idle sweep runs on w's loop.
 * idle_s: the default idle timeout. */
struct lookaheads *lookahead_create(struct gw *gw, struct worker *w, struct prefetch *p,
                                    double idle_s);
/* After the workers stopped, before the prefetch is destroyed. */
void lookahead_destroy(struct lookaheads *l);

/* Starts one (reads a manifest first: blocking, not for worker threads);
 * its id goes to id. Returns 0, or -EBUSY (too many warm jobs running:
 * prefetch_start) or -1, with a message. */
int lookahead_start(struct lookaheads *l, const struct lookahead_req *rq, char id[24], char *err,
                    size_t errlen);
/* 0, or -1 when no running lookahead has that id. */
int lookahead_end(struct lookaheads *l, const char *id);
/* Up to max lookaheads, running ones first, then those ended recently,
 * newest first; returns how many. */
size_t lookahead_list(struct lookaheads *l, struct lookahead_info *out, size_t max);

/* A client (not a peer node) began a GET of bucket/key at monotonic time now (any worker):
 * moves the lookaheads that list the key. Cheap when none runs. */
void lookahead_note_read(struct lookaheads *l, const char *bucket, const char *key, double now);

#endif

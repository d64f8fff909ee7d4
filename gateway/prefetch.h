/*
 * prefetch.h - warming the cache ahead of a job.
 *
 * A job names a bucket and either a prefix (listed with ListObjectsV2, page
 * by page), a list of keys, or a manifest object in the bucket (one key per
 * line). Its objects are read into the cache chunk by chunk through the same
 * store and fetches as client reads: a client reading a chunk the job is
 * fetching joins that fetch, and the job joins a client's. Jobs run on the
 * first worker's loop with bounded concurrency and an optional bandwidth
 * cap, so client traffic keeps priority.
 *
 * Every function here is thread-safe (the admin endpoint calls them from
 * its own thread).
 */
#ifndef LARDER_PREFETCH_H
#define LARDER_PREFETCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct gw;
struct worker;
struct prefetch;
struct buf;

struct prefetch_req {
	const char *bucket;
	const char *prefix;             /* NULL unless listing */
	const char *const *keys;        /* n_keys keys, or NULL */
	size_t n_keys;
	const char *manifest;           /* key of a manifest object, or NULL */
	unsigned concurrency;           /* objects warmed at once; 0: 4 */
	uint64_t bytes_per_s;           /* 0: no cap */
	bool gated;                     /* a lookahead's: only keys below the gate start
	                                   (prefetch_gate); not in prefetch_list */
	uint64_t pin_seconds;           /* > 0: pin what it warms this long (gateway/pins.h) */
	/* Or NULL. Told each key's size (by its place in keys) once the job has
	 * learnt it, or 0 when the object failed; on the loop's thread. */
	void (*sized)(void *arg, const char *job, size_t index, uint64_t size);
	void *sized_arg;
};

struct prefetch_info {
	char id[24];
	char state[16];                 /* listing, warming, done, failed, cancelled */
	char bucket[256];
	char error[256];
	uint64_t objects_done, objects_total, bytes_done, bytes_total, errors;
	bool listing_done;
	bool pin_refused;               /* failed: its pin would pass the pin limit */
	bool gated;                     /* a lookahead's (prefetch_req) */
	double elapsed_s, rate_bps, eta_s; /* eta_s < 0: unknown */
};

/* Created before the workers run; jobs run on w's loop. */
struct prefetch *prefetch_create(struct gw *gw, struct worker *w);
void prefetch_destroy(struct prefetch *p);

/* Checks that larder's upstream credentials may read the bucket (a
 * blocking HEAD; not for worker threads). Returns 0, or with a message the
 * HTTP status to refuse with: 403 or 404 (upstream's answer for the
 * bucket), 503 (upstream answered 503), 502 (unreachable, or another answer). */
int prefetch_check_bucket(struct gw *gw, const char *bucket, char *err, size_t errlen);

/* Jobs that have not finished (gated ones, lookaheads', included) at once:
 * each holds its keys and up to 64 fetches, and an admin call starts one. */
#define PREFETCH_RUNNING_MAX 64

/* Queues a job; its id goes to id. Returns 0, -EBUSY (PREFETCH_RUNNING_MAX
 * jobs are running), or -1, each with a message. */
int prefetch_start(struct prefetch *p, const struct prefetch_req *rq, char id[24], char *err,
                   size_t errlen);
/* Queues the n jobs of rqs, all or none (a profile's replay: a job per
 * bucket); ids[i] gets job i's id. Returns 0, -EBUSY (fewer than n more
 * jobs may run now), or -1, each with a message. */
int prefetch_start_all(struct prefetch *p, const struct prefetch_req *rqs, size_t n,
                       char (*ids)[24], char *err, size_t errlen);
/* 0, or -1 when no such job. */
int prefetch_get(struct prefetch *p, const char *id, struct prefetch_info *out);
/* Asks a running job to stop. 0; -ENOENT, no such job; -EALREADY, it ended. */
int prefetch_cancel(struct prefetch *p, const char *id);
/* Lets a gated job start its keys [from, n): keys below from that it has
 * not started yet are skipped, never warmed (its reader went past them).
 * Both only move forward. Returns 0, or -1 when no such job. */
int prefetch_gate(struct prefetch *p, const char *id, size_t from, size_t n);
/* Reads the object bucket/key into body (blocking, like
 * prefetch_check_bucket). Returns 0, or -1 with a message. */
int prefetch_read_object(struct gw *gw, const char *bucket, const char *key, struct buf *body,
                         char *err, size_t errlen);
/* Up to max jobs that are not gated, newest first; returns how many. Every
 * job kept fits in PREFETCH_LIST_MAX: the 64 newest, whatever their state,
 * and older ones still running (at most PREFETCH_RUNNING_MAX). */
#define PREFETCH_LIST_MAX (2 * PREFETCH_RUNNING_MAX)
/* Bytes every warm job (and lookahead) has warmed since start. */
uint64_t prefetch_warmed(struct prefetch *p);
size_t prefetch_list(struct prefetch *p, struct prefetch_info *out, size_t max);

#endif

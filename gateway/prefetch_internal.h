/*
 * prefetch_internal.h - what prefetch.c and prefetch_list.c share: a job,
 * its objects and the registry, and the few functions one calls in the
 * other. Private to those two files (scripts/check-source.py).
 */
#ifndef LARDER_GATEWAY_PREFETCH_INTERNAL_H
#define LARDER_GATEWAY_PREFETCH_INTERNAL_H

#include <ev.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "gateway/pins.h"
#include "gateway/shaper.h"
#include "gateway/upstream.h"
#include "net/transfer.h"
#include "store/object.h"

#define PF_HELD 2            /* chunks of one object in flight at once */
#define PF_LIST_AHEAD 1000   /* a listing asks for its next page while fewer keys wait */
#define PREFETCH_MAGIC 0x70726566u
#define PF_MAGIC 0x7066636bu     /* "pfck": struct prefetch */
#define PF_OBJ_MAGIC 0x70666f62u /* "pfob" */

enum pf_state { PF_LISTING, PF_WARMING, PF_DONE, PF_FAILED, PF_CANCELLED };

struct pf_obj {
	unsigned magic;              /* PF_OBJ_MAGIC while it has a key */
	char *key;
	size_t index;                /* its place in the job's keys */
	struct obj_meta *meta;
	struct chunk_waiter waiter;
	struct obj_meta_ask ask;
	_Atomic bool woken;
	unsigned meta_tries;
	bool sized;                  /* its size is already in bytes_total */
	uint64_t listed;             /* the size in bytes_total: listed or learnt (0: none) */
	uint64_t next_chunk, n_chunks;
	struct chunk *held[PF_HELD];
	unsigned n_held;
	bool failed;                 /* ended without all its bytes warm: not in objects_done */
};

/* What a job's meta fetch is for. */
struct pf_load {
	struct pf_job *j;
	const char *key;
	bool whole;                  /* learn it whole, with its checksums (fetch.h) */
};

struct pf_job {
	unsigned magic;
	struct prefetch *p;
	struct pf_job *next;         /* registry, newest first */
	struct pf_job *run_next;     /* running on the loop */
	char id[24];
	char *bucket, *prefix, *manifest;
	/* The keys listed and not yet taken: keys[i - key_base] is key i, for
	 * next_key <= i < n_keys (a taken key moves to its pf_obj). */
	char **keys;
	uint64_t *sizes;             /* from the listing; 0 when unknown */
	size_t cap_keys, next_key, key_base;
	_Atomic size_t n_keys;       /* the worker's; the admin thread reads it */
	bool list_paused;            /* the next page waits (pf_list_more) */
	_Atomic int state;
	_Atomic bool cancel;
	_Atomic bool listing_done;   /* read by the admin thread */
	bool gated;                  /* a lookahead's: keys start below the gate only */
	_Atomic size_t gate;
	_Atomic size_t skip_to;      /* a gated job's keys below it not started are skipped */
	bool listed;                 /* its keys come from a listing (not keys, not a manifest) */
	bool pin;                    /* pins what it warms (pins.h; the pin's id is the job's) */
	char pin_hdr[PIN_HEADER_MAX]; /* its chunk fetches to owners ask them to pin too */
	uint64_t pin_nvme_want;      /* a listed pin: what it counts on NVMe (store_pin_nvme_bytes) */
	_Atomic bool pin_refused;
	void (*sized)(void *arg, const char *job, size_t index, uint64_t size); /* prefetch_req */
	void *sized_arg;

	struct transfer x;           /* a listing page or the manifest */
	struct shaper_slot slot;     /* its place in the S3 prefix's window (background) */
	bool slot_wait;              /* prepared, waiting for that place (pf_list_step) */
	struct up_target target;
	struct buf body;
	char *token;                 /* ListObjectsV2 continuation */
	char *token_seen;            /* a token of an earlier page, to catch a loop */
	size_t pages, pages_seen;    /* pages listed; the page token_seen came with */

	struct pf_obj *active;
	unsigned concurrency;
	uint64_t bytes_per_s;
	/* What the admin thread reads (prefetch_get): atomics, or under p->lock. */
	_Atomic uint64_t objects_done, bytes_done, bytes_total, errors;
	double started, finished;    /* under p->lock */
	char error[256];             /* under p->lock */
};

struct prefetch {
	unsigned magic;
	struct gw *gw;
	struct worker *w;
	pthread_mutex_t lock;
	struct pf_job *jobs;
	struct pf_job *queued;       /* started by the admin thread, not yet running */
	struct pf_job *running;      /* the loop's */
	char run_tag[8];             /* this run's part of each job id (prefetch_create) */
	unsigned next_id;
	ev_async async;
	ev_timer tick;
	ev_timer pin_tick;           /* ends pins whose time is up */
	_Atomic uint64_t warmed;     /* bytes every job has warmed since start */
};

/* prefetch.c: fails the job with msg (logged); adds a key to warm. */
void pf_job_fail(struct pf_job *j, const char *msg);
int pf_add_key(struct pf_job *j, const char *key, uint64_t size);

/* prefetch_list.c: asks for the job's next listing page, or its manifest;
 * pf_list_ops are the callbacks of that transfer (j->x). */
int pf_start_listing(struct pf_job *j);
extern const struct transfer_ops pf_list_ops;
/* On each tick of a listing job: sends the page waiting for its slot. */
void pf_list_step(struct pf_job *j);
/* Asks for the listing's next page, or holds it back (list_paused) while
 * PF_LIST_AHEAD listed keys wait: job_step calls again as keys are taken. */
void pf_list_more(struct pf_job *j);
/* Stops the listing (its slot too). */
void pf_list_stop(struct pf_job *j);

#endif

/*
 * server.h - larder's process: W workers, each a libev loop driving its own
 * libmicrohttpd daemon (external epoll, SO_REUSEPORT on the shared port)
 * and its own curl multi handle. A request lives on the worker that
 * accepted it, start to finish. Shared between workers: everything in
 * struct gw (the store, metadata, upstream, shaper, keys swapped on SIGHUP,
 * jobs, cluster); docs/ARCHITECTURE.md "Threads and loops" and "Locks".
 */
#ifndef LARDER_SERVER_H
#define LARDER_SERVER_H

#include <ev.h>
#include <microhttpd.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/list.h"
#include "config/config.h"
#include "net/curlev.h"
#include "gateway/shaper.h"
#include "gateway/upstream.h"
#include "store/object.h"

struct req;
struct fetch;
struct store;
struct meta_cache;
struct listcache;
struct prefetch;
struct lookaheads;
struct cluster;
struct directory;
struct placement;
struct addrinfo;

/* Checked by every callback that gets a gw or a worker back as a void *. */
#define GW_MAGIC 0x67776179u     /* "gway" */
#define WORKER_MAGIC 0x776f726bu /* "work" */

struct gw {
	unsigned magic;
	const struct cfg *cfg;          /* settings fixed for the process's life */
	struct upstream *up;
	struct shaper *shaper;          /* upstream concurrency per S3 prefix (gateway/shaper.h) */
	struct creds_provider *creds;
	struct store *store;            /* the chunk cache, shared by all workers */
	struct meta_cache *meta;        /* object metadata, shared by all workers */
	struct objects objects;         /* reads of objects through both (store/object.h) */
	struct listcache *lists;        /* LIST answers of buckets with list_cache_ttl, or NULL */
	char *tls_cert, *tls_key;       /* PEM text when the client port speaks TLS */
	struct prefetch *prefetch;      /* warming jobs, run on the first worker */
	struct lookaheads *lookahead;   /* read-order lookaheads (gated prefetch jobs) */
	struct pins *pins;              /* what warm jobs pinned (gateway/pins.h) */
	struct profiles *profiles;      /* access profiles (gateway/profiles.h) */
	struct cluster *cluster;        /* the other nodes, or NULL: this node alone */
	struct directory *dir;          /* what this node publishes it holds, or NULL */

	/* Client keys and anonymous grants: replaced whole by SIGHUP. Readers
	 * hold the read lock only while they check one request. */
	pthread_rwlock_t keys_lock;
	struct cfg *keys;
	const char *config_path;
	unsigned max_connections_set;   /* as configured, before fit_open_files lowered it */

	atomic_uint open_connections;
	atomic_bool draining;
	atomic_bool stopping;           /* the drain is over: blocking upstream calls give up */
	unsigned n_workers;
	struct worker *workers;
	struct admin *admin;            /* the admin listener (gateway/admin.h), or NULL */
};

struct worker {
	unsigned magic;
	unsigned index;
	struct gw *gw;
	pthread_t thread;
	struct ev_loop *loop;
	struct MHD_Daemon *mhd;
	ev_io mhd_io;
	ev_timer mhd_timer;
	ev_prepare prepare;
	ev_async stop_async;
	ev_timer drain_timer;
	double drain_deadline;
	struct curlev *curl;
	struct list live;          /* requests in progress on this worker (struct req) */
	struct list conns;         /* its client connections (request.c's struct conn_slot) */
	ev_timer header_timer;     /* closes those whose headers take too long (request.c) */
	unsigned n_live;
	bool mhd_kick;             /* a connection was resumed: run MHD before sleeping */
	bool closing;              /* past the grace period: nothing may wait (req_suspend) */
	struct list fetches;       /* cache fills running on this worker (struct fetch) */
	struct placement *placement; /* directory lookups (cluster only), or NULL */
	/* Readers woken by another thread (a chunk grew, metadata arrived):
	 * queued under wake_lock, handled on this loop by wake_async. */
	pthread_mutex_t wake_lock;
	struct req *wake_head;
	ev_async wake_async;
	/* Requests a slot of their key's was given back to by another thread
	 * (gateway/limits.h), queued under wake_lock too: they ask again on this
	 * loop (key_async, request.c). */
	struct list key_woken;
	ev_async key_async;
	/* Upstream requests given their place in an S3 prefix's window by
	 * another thread (gateway/shaper.h): told on this loop by slot_async. */
	struct shaper_waker slot_waker;
	ev_async slot_async;
	unsigned long next_id;
	uint64_t id_salt;          /* random: request ids differ across nodes and restarts */
};

/* The passive TCP address of a listener (setting names it in the error
 * logged when host does not resolve: then NULL). freeaddrinfo() it. */
struct addrinfo *gw_resolve(const char *setting, const char *host, unsigned port);

/* Blocks SIGTERM, SIGINT and SIGHUP in the calling thread and so in every
 * thread it starts after (gw_run waits for them with sigwait); fills set
 * with them when set is not NULL. Call it before the first thread starts:
 * a thread that does not block them takes them with their default action
 * (the process dies) whenever the main thread is not in sigwait. */
void gw_block_signals(sigset_t *set);
/* Warns when cfg has neither client keys nor anonymous grants: every
 * request would be refused (at start, and after a SIGHUP: a configuration
 * file caught empty mid-write reloads as valid). */
void gw_warn_no_keys(const struct cfg *cfg);
/* Runs larder until SIGTERM/SIGINT (drain, exit 0); SIGHUP reloads keys
 * from config_path (or the environment). Returns the process exit code. */
int gw_run(struct cfg *cfg, const char *config_path);
/* What gw_run would refuse at start that loading the configuration does
 * not check, without binding or starting anything: the TLS files, the
 * cluster settings, the access log's path. Logs each problem; returns 0
 * or -1. For larder serve --check. */
int gw_check(const struct cfg *cfg);


#endif

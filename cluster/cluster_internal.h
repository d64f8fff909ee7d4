/*
 * cluster_internal.h - what the cluster's files (cluster.c,
 * cluster_snapshot.c, cluster_heartbeat.c, cluster_trust.c,
 * cluster_inval.c, inval_msg.c, cluster_redis.c) share: the struct
 * cluster, its member snapshots and invalidation queue, and the functions
 * one file calls in another. Private to cluster/; everything else uses cluster.h.
 */
#ifndef LARDER_CLUSTER_INTERNAL_H
#define LARDER_CLUSTER_INTERNAL_H

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cluster/cluster.h"

#define TOPIC "cluster"
#define CLUSTER_MAGIC 0x434c5354u /* "CLST" */
#define NODE_PREFIX "larder:node:"
#define NODES_SET "larder:nodes"
#define INVAL_CHANNEL "larder:invalidate"
#define IO_TIMEOUT_MS 500
#define QUEUE_MAX 4096
#define MEMBER_SKEW_MS 30000 /* how far apart nodes' clocks may be */
#define CLOCK_WARN_MS 1000   /* a clock this far off Redis's is logged (clock_check) */
#define MEMBER_VAL_MAX 512   /* longer entries are not ours */
#define INVAL_VALID_MS 60000 /* a signed invalidation message is good this long */
#define INVAL_MSG_MAX 8192   /* sender, bucket and key (S3 keys: 1,024 bytes at most) */
#define PEND_MAX 256         /* tickets whose acknowledgements are counted (cluster_published) */
#define ACK_MAC_LEN 16       /* hex digits of a message's mac an ack names */
#define CLUSTER_AVOID_MAX 16 /* nodes avoided at once; past it the soonest to end goes */
#define OTHERS_MAX 64        /* nodes of another protocol listed (cl->others); more are counted */
/* Heartbeats after this node's entry first landed in Redis during which the others may not
 * count it yet (cluster_joining): one until each reads it at its next heartbeat, one for a
 * heartbeat late by its directory flush, one for an SREM racing the SADD (cluster_heartbeat.c). */
#define JOIN_HEARTBEATS 3

struct member {
	char id[CLUSTER_NAME_MAX];
	char addr[CLUSTER_NAME_MAX];
	double cap;
	uint64_t dir_entries;
	unsigned protocol; /* CLUSTER_PROTOCOL, or another: not a member (cl->others) */
};

/* Immutable once published. hash[] and weight[] parallel m[] for rdv_pick. */
struct snapshot {
	atomic_int refs;
	size_t n;
	size_t self; /* index of this node in m[] */
	uint64_t *hash;
	double *weight;
	struct member m[];
};

struct inval {
	struct inval *next;
	uint64_t seq; /* cluster_publish_invalidate's ticket (0: a resync or an ack) */
	bool ack;     /* a CLUSTER_ACK: not counted as an invalidation */
	char mac[ACK_MAC_LEN]; /* the start of its mac, once signed (acks name it) */
	size_t len;
	char msg[]; /* sender \n bucket \n key, not NUL-terminated */
};

enum redis_state { REDIS_UNKNOWN, REDIS_UP, REDIS_DOWN };

/* The read barrier's tickets (cluster_barrier.c). */
struct read_barrier {
	uint64_t asked;  /* the last ticket handed out */
	uint64_t done;   /* every ticket up to this one passed: a later PING's PONG was read */
	uint64_t lost;   /* tickets up to this one were asked on a connection since lost */
	uint64_t covers; /* the last ticket the PING in flight covers */
	bool in_flight;  /* a PING was sent on the subscribed connection, its PONG not yet read */
	bool woken;      /* the subscriber was woken (bar_fd) and has not looked yet */
};

struct cluster {
	unsigned magic;

	/* Configuration, fixed after start. */
	char host[256];
	int port;
	char user[128];
	char password[256];
	int db;
	char secret[257];         /* the cluster secret: signs membership entries */
	struct member self;
	char node_key[sizeof(NODE_PREFIX) + CLUSTER_NAME_MAX];
	char node_val[2 * CLUSTER_NAME_MAX]; /* "<advertise>\t<capacity>": entries follow */
	unsigned heartbeat_ms, ttl_ms;
	struct directory *dir;
	cluster_invalidate_cb cb;
	void *cb_arg;

	pthread_mutex_t lock;
	pthread_cond_t cond;      /* wakes the heartbeat thread: stop or queued work */
	int wake[2];              /* pipe; written once by cluster_stop, wakes the subscriber */
	int bar_fd;               /* eventfd: a read asked for a barrier (wakes the subscriber) */
	pthread_t hb_thread, sub_thread;

	/* Under lock. */
	bool stopping, left;
	struct snapshot *snap;
	unsigned long members_gen; /* bumped when the members (not their counts) change */
	struct inval *q_head, *q_tail;
	size_t q_len;
	uint64_t q_seq;           /* the last ticket handed out */
	enum redis_state state;
	double up_since_ms;       /* clock_mono_ms when state last became REDIS_UP */
	bool subscribed;
	struct read_barrier bar;  /* cluster_barrier */
	unsigned long bar_waits, bar_lapsed; /* reads that waited for it, and gave up on it */
	unsigned long heartbeats;  /* done, placement entries flushed after them */
	bool resync_due;          /* queued invalidations were dropped: tell the others */
	bool dup_warned;
	size_t rejected_last;     /* entries rejected at the last heartbeat */
	/* Signed entries of another protocol at the last heartbeat: the first
	 * OTHERS_MAX, and how many in all. Not members: nothing is asked of
	 * them, and their acknowledgements do not count (cluster_inval.c). */
	struct member others[OTHERS_MAX];
	size_t n_others, others_total;
	unsigned long reconnects, sent, received, dropped, rejected, resyncs;
	unsigned long inval_rejected; /* invalidation messages not signed with the secret */
	unsigned long unacked;        /* tickets given up on (cluster_gave_up) */
	double unacked_warned_ms;     /* when the last of them was logged (clock_mono_ms), or 0 */
	double inval_warned_ms;       /* when the last of them was logged (clock_mono_ms), or 0 */
	bool publish_refused;         /* Redis answered the last batch's PUBLISH with an error */
	bool clock_known, clock_warned;
	double clock_offset_ms;       /* this node's wall clock minus Redis's (clock_check) */

	/* Every ticket up to this one was published (Redis answered PUBLISH), or
	 * refused by Redis: cluster_published. Written by the heartbeat thread. */
	_Atomic uint64_t q_done;
	/* Published tickets, by seq % PEND_MAX, under lock: how many nodes
	 * Redis delivered each to (expect) and how many said they applied it. */
	struct {
		uint64_t seq;
		char mac[ACK_MAC_LEN];
		long expect, acks;
	} pend[PEND_MAX];

	/* Nodes that answered nothing lately (cluster_avoid), under avoid_lock;
	 * n_avoided lets the common case (none) skip the lock. */
	pthread_mutex_t avoid_lock;
	atomic_uint n_avoided;
	struct {
		char addr[CLUSTER_NAME_MAX];
		double until;
	} avoided[CLUSTER_AVOID_MAX];
};

/* ---- snapshots (cluster_snapshot.c) ---- */

/* A snapshot of n members (m[] to fill), one reference; NULL: no memory. */
struct snapshot *cl_snap_new(size_t n);
/* Fills hash[], weight[] and self from m[], which must be sorted by id. */
void cl_snap_finish(struct snapshot *s, const char *self_id);
void cl_snap_unref(struct snapshot *s);
/* A reference to the current snapshot (takes and drops cl->lock). */
struct snapshot *cl_snap_get(struct cluster *cl);
/* Installs s (taking its reference) unless it equals the current one.
 * Call with cl->lock held; logs per-member changes only when asked. */
void cl_snap_install(struct cluster *cl, struct snapshot *s, bool log_members);
/* A snapshot of this node alone; NULL: no memory. */
struct snapshot *cl_snap_alone(struct cluster *cl);

/* ---- Redis connections (cluster_redis.c) ---- */

/* A blocking connection with IO_TIMEOUT_MS for connect and commands,
 * authenticated and on the right database; NULL with why filled. */
redisContext *cl_redis_open(struct cluster *cl, char *why, size_t whylen);
/* Redis failed: the node works alone (logged once per loss). */
void cl_went_down(struct cluster *cl, const char *why);
/* A heartbeat succeeded with the members in s (its reference is taken). */
void cl_went_up(struct cluster *cl, struct snapshot *s);

/* ---- trust (cluster_trust.c) ---- */

/* An id or address as we could have written it: 1 to CLUSTER_NAME_MAX - 1
 * printable characters, no spaces. */
bool cl_id_ok(const char *s, size_t len);
/* Unix milliseconds, now. */
double cl_wall_ms(void);

/* hex HMAC-SHA256(secret, "larder-inval-v1\n" body): the mac of an
 * invalidation message's body (cluster_inval.c). Returns 0, or -ENOMEM
 * with out empty: no mac, which a receiver must take as a mismatch. */
int cl_inval_mac(const char *secret, const char *body, size_t len, char out[65]);

/* hex HMAC-SHA256(secret, "larder-member-v1\n" id "\n" body): the mac of
 * a membership entry. */
void cl_member_mac(const char *secret, const char *id, const char *body, size_t len,
                   char out[65]);
/* A membership entry value read from Redis into m (whose id is set),
 * protocol included (1 for an entry without one); false when forged,
 * stale (now_ms past its expiry + MEMBER_SKEW_MS) or malformed. */
bool cl_parse_member(const struct cluster *cl, const char *v, size_t len, double now_ms,
                     struct member *m);

/* ---- invalidation messages (inval_msg.c) ---- */

/* The parts of a message read from INVAL_CHANNEL, pointing into it (not
 * NUL-terminated): "<mac>\n<expiry>\n<sender>\n<bucket>\n<key>". */
struct inval_msg {
	const char *sender, *bucket, *key;
	size_t sender_len, bucket_len, key_len;
};
enum inval_verdict {
	INVAL_OK,        /* out filled */
	INVAL_FORGED,    /* not signed with secret, or expired at now_ms (unix ms) */
	INVAL_MALFORMED, /* signed, but no sender, bucket and key */
};
/* Reads a message of len bytes as received (any bytes). */
enum inval_verdict cl_inval_parse(const char *secret, const char *signed_msg, size_t len,
                                  double now_ms, struct inval_msg *out);

/* ---- heartbeat (cluster_heartbeat.c) ---- */

/* The heartbeat thread's body (arg: the cluster). */
void *cl_heartbeat_main(void *arg);
/* The nonzero 32-bit tag of a member, from its rdv_node_hash. */
uint32_t cl_tag_of(uint64_t node_hash);

/* ---- the read barrier (cluster_barrier.c); the caller holds cl->lock ---- */

/* A ticket for a read; true when the subscriber must be woken to send its PING. */
bool cl_bar_ask(struct read_barrier *b, uint64_t *ticket);
/* Whether to send a PING now (then noted as in flight, covering every ticket so far): not
 * while one is in flight; a keepalive always, else only for tickets not passed yet. */
bool cl_bar_ping(struct read_barrier *b, bool keepalive);
/* A PONG was read: the tickets its PING covers passed. */
void cl_bar_pong(struct read_barrier *b);
/* The subscribed connection is gone: its PING with it, and what was asked is lost. */
void cl_bar_lost(struct read_barrier *b);
enum cluster_barrier cl_bar_state(const struct read_barrier *b, uint64_t ticket);
/* Whether this node may not be counted by the others yet (cluster_joining). Under cl->lock. */
bool cl_joining_locked(const struct cluster *cl);

/* ---- invalidations (cluster_inval.c) ---- */

/* PUBLISHes everything queued, pipelined. Returns 0, or -1 with why filled
 * (the batch is back in the queue: a resend is harmless). */
int cl_flush_queue(struct cluster *cl, redisContext *c, char *why, size_t whylen);
/* The subscriber thread's body (arg: the cluster). */
void *cl_subscriber_main(void *arg);

#endif

/*
 * cluster.h - membership of the shared warm tier, chunk ownership, and
 * invalidation broadcast, all through one Redis.
 *
 * Each node keeps a key larder:node:<id> = "<advertise>\t<capacity>\t..."
 * alive with a TTL, refreshed every heartbeat, and lists its id in the set
 * larder:nodes. The members are the ids in that set whose key still exists
 * and is signed with the cluster secret (cluster_trust.c, "Trust": Redis alone
 * cannot add a member); a node that stops heartbeating leaves once its key
 * expires (ttl_ms).
 * Every chunk has an owner: the member picked by weighted rendezvous hashing
 * (cluster/rendezvous.h) over the members, weighted by capacity.
 * Invalidations go to every other node by PUBLISH on larder:invalidate.
 *
 * Redis holds hints, never the only copy of anything. While Redis cannot be
 * reached the node works alone: the member set is just this node, so it
 * owns every chunk, and the loss is logged (WARN) and shown in
 * cluster_get_view(). It rejoins by itself when Redis answers again.
 * Invalidations published while no other node can hear them are not
 * replayed to nodes that were cut off: they are best effort.
 *
 * Threads. cluster_start starts two threads, each with its own blocking
 * hiredis connection (500 ms connect and command timeouts): the heartbeat
 * thread (SET, read the members, PUBLISH queued invalidations) and the
 * subscriber. Every other function is thread-safe and never waits on I/O:
 * cluster_owner reads an immutable snapshot of the members.
 *
 * The process must ignore SIGPIPE (hiredis writes with write(2)).
 */
#ifndef LARDER_CLUSTER_H
#define LARDER_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CLUSTER_NAME_MAX 128 /* node ids and addresses, NUL included */

/*
 * The cluster protocol this node speaks, written in its membership entry.
 * Only nodes of the same protocol are members to each other: a node of
 * another one (an older or newer larder in a rolling upgrade) is listed
 * apart (cluster_others), never an owner, holder or node asked, and not
 * waited for. Raise it with any change that makes nodes misread or refuse
 * what the others send or expect: the membership entry, the peer
 * signature (cluster/peer.h), the invalidation channel's messages or
 * their acknowledgements. Entries written before the field existed are
 * protocol 1 (larders up to 2026-11-30).
 */
#define CLUSTER_PROTOCOL 2u

struct directory;

struct cluster_config {
	const char *redis_url;  /* redis://[:password@]host[:port][/db]; NULL or "": no cluster */
	const char *node_id;    /* unique per node; printable, no spaces, < CLUSTER_NAME_MAX */
	const char *secret;     /* the cluster secret, 16-256 characters, the same on every node:
	                         * signs this node's membership entry, checks the others' */
	const char *advertise;  /* host:port peers use to reach this node's client port */
	double capacity;        /* weight (e.g. cache bytes); > 0 */
	unsigned heartbeat_ms;  /* 0: 1000 */
	unsigned ttl_ms;        /* heartbeat key expiry; 0: 5000; must exceed heartbeat_ms */
	struct directory *dir;  /* this node's placement entries (cluster/directory.h), flushed
	                         * by the heartbeat thread; NULL: none. Must outlive cl. */
};

/* Another node invalidated (bucket, key); key "" means the whole bucket.
 * Runs on the subscriber thread: it must not block for long and must not
 * call cluster_stop. The strings are valid only during the call. */
typedef void (*cluster_invalidate_cb)(void *arg, const char *bucket, const char *key);

struct cluster;

/*
 * Validates the configuration and starts the threads; does not wait for
 * Redis (an unreachable Redis is not an error: the node works alone until
 * it answers). Returns the cluster, or NULL with a message in err. With no
 * redis_url it returns NULL and sets err to "": there is no cluster, and
 * every function below accepts the NULL and behaves as a node alone.
 * The config strings are copied; cb may be NULL.
 */
struct cluster *cluster_start(const struct cluster_config *c, cluster_invalidate_cb cb,
                              void *arg, char *err, size_t errlen);
/* What cluster_start would refuse, without starting anything: 0, or -1
 * with the message in err (no redis_url: 0). */
int cluster_check(const struct cluster_config *c, char *err, size_t errlen);

/* Publishes invalidations still queued, deregisters this node (its key
 * and set entry are deleted, so peers drop it at their next heartbeat
 * instead of after ttl_ms) when Redis is up, and joins the threads. From
 * then on the node is alone (it owns every chunk) but every function
 * below still works, so workers may go on using cl while they drain.
 * Returns within about a second even when Redis hangs. Idempotent. */
void cluster_leave(struct cluster *cl);

/* cluster_leave, then frees cl. NULL is a no-op. */
void cluster_stop(struct cluster *cl);

/* Owner of a key (a chunk_id_hash()). Returns true, with the owner's
 * advertise address copied to addr (truncated to addrlen), when it is
 * ANOTHER live node; false when this node owns it or no other node is
 * known. Never blocks on I/O. */
bool cluster_owner(struct cluster *cl, uint64_t key, char *addr, size_t addrlen);

/*
 * The node the placement directory says to fetch key from, among the ids
 * that it lists as holders (ids[i] of length lens[i]): the live member
 * other than this node that rendezvous hashing ranks first among them, so
 * the owner when the owner holds it. Returns true with its address in
 * addr; false when no listed holder is another live member.
 */
bool cluster_pick_holder(struct cluster *cl, uint64_t key, const char *const *ids,
                         const size_t *lens, size_t n, char *addr, size_t addrlen);

/* Redis connection settings, for other connections to the same Redis
 * (cluster/placement.c). host empty: no cluster. */
struct cluster_redis {
	char host[256];
	int port;
	char user[128];
	char password[256];
	int db;
};
void cluster_redis_settings(struct cluster *cl, struct cluster_redis *out);

/* Whether another live node is known. Never blocks on I/O. */
bool cluster_has_peers(struct cluster *cl);

/* Whether this node hears the invalidation channel now (true without a
 * cluster). While it does not, it may be missing writes through other
 * nodes, and what it trusts must not be handed to them (cache.c). */
bool cluster_listening(struct cluster *cl);

/*
 * Whether this node hears the invalidation channel while the others may not
 * count it as a member yet (false without a cluster): its membership entry
 * is not in Redis (its first heartbeat has not run, or Redis refused it),
 * or landed less than three heartbeats ago (each member reads it at its
 * next). A write through another node waits only for its members'
 * acknowledgements (cluster_published), so its answer may go out before
 * this node applied the invalidation.
 */
bool cluster_joining(struct cluster *cl);

/*
 * The read barrier, for reads while cluster_joining: a read first waits
 * until this node applied every message Redis had pushed to it before the
 * read asked (cluster_barrier.c says how). cluster_barrier returns a ticket,
 * or 0 when there is nothing to wait for (not joining, no cluster); it
 * never blocks on I/O (it wakes the subscriber). cluster_barrier_state says
 * whether the ticket passed, still waits (typically a Redis round trip;
 * longer while the listening thread is busy), or was lost with the
 * subscribed connection (the read cannot know what it missed: it
 * revalidates). A reader that stops waiting (its bound passed, or lost)
 * calls cluster_barrier_gave_up once: counted in cluster_view.
 */
enum cluster_barrier { CLUSTER_BARRIER_WAIT, CLUSTER_BARRIER_PASSED, CLUSTER_BARRIER_LOST };
uint64_t cluster_barrier(struct cluster *cl);
enum cluster_barrier cluster_barrier_state(struct cluster *cl, uint64_t ticket);
void cluster_barrier_gave_up(struct cluster *cl);

/* A nonzero 32-bit tag of the live member at advertise address addr (from
 * its id), or 0 when no live member has that address. */
uint32_t cluster_member_tag(struct cluster *cl, const char *addr);

/*
 * A node that answered nothing: a connection to it or a transfer from it
 * timed out, or it refused the connection. For CLUSTER_AVOID_S from now
 * this node's fetches go past it (cluster_avoided): a member that stays
 * in the membership while it answers nothing (its heartbeat alive beside
 * wedged workers, a one-way partition, its own S3 hanging) would
 * otherwise cost every fetch routed to it the whole timeout, on every
 * node, for as long as it is listed. cluster_avoid returns true when it was
 * not avoided already (the caller says so once); cluster_avoided the
 * seconds left (0: not avoided). now: clock_mono_s(). Never block on I/O.
 */
#define CLUSTER_AVOID_S 10.0
bool cluster_avoid(struct cluster *cl, const char *addr, double now);
double cluster_avoided(struct cluster *cl, const char *addr, double now);

/* Queues an invalidation of (bucket, key) for every other node (key ""
 * for the whole bucket); the heartbeat thread PUBLISHes it at once. Never
 * blocks on I/O. While Redis is down up to 4096 are kept and sent when it
 * returns; beyond that the oldest are dropped (counted in the view).
 * Returns a ticket for cluster_published (0: nothing was queued). */
uint64_t cluster_publish_invalidate(struct cluster *cl, const char *bucket, const char *key);
/* Whether waiting for ticket is over: every node that Redis delivered its
 * message to has applied it (each answers with a CLUSTER_ACK once its
 * callback returned), or Redis refused it, or Redis is not up (the
 * message waits in the queue: nobody can be told now), or too many
 * tickets came after it to keep its count (PEND_MAX). */
bool cluster_published(struct cluster *cl, uint64_t ticket);
/* The writer stopped waiting for ticket before cluster_published said so
 * (its bound passed): counted (cluster_view.invalidations_unacknowledged)
 * and logged, at most once a minute, with how many nodes had answered. */
void cluster_gave_up(struct cluster *cl, uint64_t ticket);
/* Messages that are not invalidations ride the same channel under a
 * "bucket" no S3 bucket can be named: CLUSTER_UNPIN with key "NODE/JOB"
 * ends the pin NODE/JOB on every other node. */
#define CLUSTER_UNPIN "!unpin"
/* CLUSTER_PURGE with key "k" or "p", then "BUCKET/KEY-OR-PREFIX": a purge
 * (POST /admin/purge) of a key or a prefix, for every other node to do. */
#define CLUSTER_PURGE "!purge"
/* CLUSTER_ACK with key "NODE MAC16": this node applied NODE's message whose
 * mac starts with MAC16 (cluster_published). Handled inside the cluster:
 * cb never sees one. */
#define CLUSTER_ACK "!ack"
/* cb gets CLUSTER_RESYNC (key "") when this node may have missed
 * invalidations: each time its subscription starts (at start, after a
 * Redis outage), and when another node dropped some it had queued. What
 * it caches may be stale: revalidate before trusting it again. */
#define CLUSTER_RESYNC "!resync"

struct cluster_view {
	bool redis_up;      /* the heartbeat connection works */
	bool subscribed;    /* the subscriber connection is listening */
	size_t members;     /* live nodes, this one included (1 when alone) */
	char self[CLUSTER_NAME_MAX];
	unsigned long redis_reconnects;        /* connections made again after a loss (both threads) */
	unsigned long invalidations_sent;
	unsigned long invalidations_received;  /* from other nodes, handed to cb */
	unsigned long invalidations_rejected;  /* on the channel, not signed with the secret
	                                        * or expired: dropped */
	unsigned long invalidations_dropped;   /* queue overflow while Redis was down */
	unsigned long invalidations_unacknowledged; /* a write's answer went on without every
	                                        * node's acknowledgement (cluster_gave_up) */
	unsigned long resyncs;                 /* CLUSTER_RESYNC handed to cb */
	bool joining;                          /* cluster_joining */
	unsigned long read_barriers;           /* reads that waited for the read barrier */
	unsigned long read_barriers_lapsed;    /* of those, reads that gave up on it and
	                                        * revalidated (its bound passed, or lost) */
	unsigned long members_rejected;        /* entries in Redis ignored: not signed with the
	                                        * secret, expired or malformed (each heartbeat
	                                        * that reads one counts it) */
	size_t others;                         /* nodes of another protocol (CLUSTER_PROTOCOL)
	                                        * signed with the secret: not members */
	uint64_t directory_entries;            /* placement entries of all members, as they
	                                        * last reported them in their heartbeats */
	unsigned long heartbeats;              /* heartbeats done, each with the placement
	                                        * entries flushed after it: a change this
	                                        * node saw is listed two of them later */
	bool clock_known;                      /* clock_offset_ms was measured */
	double clock_offset_ms;                /* this node's wall clock minus Redis's, at the
	                                        * last heartbeat (half its round trip off) */
};

void cluster_get_view(struct cluster *cl, struct cluster_view *out);

/* Lower-case hex HMAC-SHA256(secret, msg) into out: what signs membership
 * entries here and requests between nodes (cluster/peer.c). */
void cluster_mac(const char *secret, const void *msg, size_t len, char out[65]);

/* Copies up to max members (id, advertise address, capacity, directory
 * entries), sorted by id, this node included; any output may be NULL.
 * Returns how many were copied. */
size_t cluster_members(struct cluster *cl, char (*ids)[CLUSTER_NAME_MAX],
                       char (*addrs)[CLUSTER_NAME_MAX], double *caps, uint64_t *dir_entries,
                       size_t max);

/* Copies up to max of the nodes of another protocol seen at the last
 * heartbeat (id, advertise address, protocol); any output may be NULL.
 * Returns how many were copied. */
size_t cluster_others(struct cluster *cl, char (*ids)[CLUSTER_NAME_MAX],
                      char (*addrs)[CLUSTER_NAME_MAX], unsigned *protocols, size_t max);

#endif

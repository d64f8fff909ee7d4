/*
 * cluster.c - membership, ownership and invalidation broadcast over Redis
 * (see cluster.h).
 *
 * Keys. larder:node:<id> = "<advertise>\t<capacity>\t<directory entries>\t
 * <expiry>\t<mac>" with PX ttl_ms (the third field is informative: the
 * cluster view sums it), and the set larder:nodes of ids. Why a set and not
 * SCAN MATCH larder:node:*: SCAN walks the whole keyspace, and the same
 * Redis holds the placement hints (design.md, "Cluster"), possibly
 * millions of keys; reading a set costs the number of members, whatever else Redis holds. The key's TTL
 * is what makes a member live: an id in the set whose key has expired is a
 * dead node, and whoever reads it removes it (SREM). A node that comes back
 * between that read and the SREM is missing from the set for one heartbeat,
 * until its next SADD: harmless, peers just skip it for a moment.
 *
 * Trust. Anyone who can write to Redis can write such a key, so an entry
 * counts only when its mac is hex HMAC-SHA256(cluster secret,
 * "larder-member-v1\n" id "\n" everything before the last tab), and its
 * expiry (unix milliseconds: written as now + ttl_ms) has not passed by
 * more than MEMBER_SKEW_MS. Without the secret nobody can add a member,
 * change a member's address or capacity, or keep a copied entry alive for
 * longer than its expiry. Other entries are counted (members_rejected) and
 * logged, and ignored: no request goes to them.
 *
 * Capacity travels as "%.17g", which round-trips a double exactly: every
 * node must compute bit-identical weights or they would disagree on owners.
 *
 * Snapshot. The member list is an immutable, reference-counted array
 * sorted by id. The heartbeat thread builds a new one when the members
 * change and swaps the pointer under cl->lock; cluster_owner takes a
 * reference under the same lock and picks with no lock held. The array
 * always holds this node, so while Redis is down it is just this node.
 *
 * Heartbeat thread. One pipelined round trip (SET, SADD, SMEMBERS), one
 * MGET of the members' keys, now and then an SREM, then this node's
 * placement directory changes (cluster/directory.h); between heartbeats it
 * sleeps on cl->cond, which cluster_publish_invalidate signals so queued
 * invalidations go out at once. When Redis does not answer it retries with
 * a growing delay (heartbeat_ms doubling up to 4x).
 *
 * Subscriber thread. SUBSCRIBE, then poll() on the socket and on a pipe
 * that cluster_stop writes to, so stopping never waits for Redis. Replies
 * are read with redisBufferRead only when poll says the socket is readable,
 * so a read never blocks. A silent connection is probed with PING every
 * ttl_ms; no answer by the next probe means the connection is dead.
 *
 * Message on larder:invalidate: "<sender id>\n<bucket>\n<key>". Ids and
 * bucket names hold no newline (checked); the key is the rest, whatever it
 * holds. Receivers skip their own messages.
 */
#include "cluster/cluster.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <hiredis/hiredis.h>
#include <math.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/clock.h"
#include "base/log.h"
#include "cluster/directory.h"
#include "cluster/redis_util.h"
#include "cluster/rendezvous.h"

#define TOPIC "cluster"
#define CLUSTER_MAGIC 0x434c5354u /* "CLST" */
#define NODE_PREFIX "larder:node:"
#define NODES_SET "larder:nodes"
#define INVAL_CHANNEL "larder:invalidate"
#define IO_TIMEOUT_MS 500
#define QUEUE_MAX 4096
#define MEMBER_SKEW_MS 30000 /* how far apart nodes' clocks may be */
#define MEMBER_VAL_MAX 512   /* longer entries are not ours */

struct member {
	char id[CLUSTER_NAME_MAX];
	char addr[CLUSTER_NAME_MAX];
	double cap;
	uint64_t dir_entries;
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
	size_t len;
	char msg[]; /* sender \n bucket \n key, not NUL-terminated */
};

enum redis_state { REDIS_UNKNOWN, REDIS_UP, REDIS_DOWN };

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
	pthread_t hb_thread, sub_thread;

	/* Under lock. */
	bool stopping, left;
	struct snapshot *snap;
	unsigned long members_gen; /* bumped when the members (not their counts) change */
	struct inval *q_head, *q_tail;
	size_t q_len;
	enum redis_state state;
	bool subscribed;
	bool dup_warned;
	size_t rejected_last;     /* entries rejected at the last heartbeat */
	unsigned long reconnects, sent, received, dropped, rejected;
};


__attribute__((format(printf, 3, 4)))
static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;
	if (!err || !errlen)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

/* ---- snapshots ---- */

static struct snapshot *snap_new(size_t n)
{
	size_t sz = sizeof(struct snapshot) + n * (sizeof(struct member) + sizeof(uint64_t) +
	                                           sizeof(double));
	struct snapshot *s = calloc(1, sz);
	if (!s)
		return NULL;
	atomic_init(&s->refs, 1);
	s->n = n;
	s->hash = (uint64_t *)(void *)(s->m + n);
	s->weight = (double *)(void *)(s->hash + n);
	return s;
}

/* Fills hash[], weight[] and self from m[], which must be sorted by id. */
static void snap_finish(struct snapshot *s, const char *self_id)
{
	for (size_t i = 0; i < s->n; i++) {
		s->hash[i] = rdv_node_hash(s->m[i].id);
		s->weight[i] = s->m[i].cap;
		if (strcmp(s->m[i].id, self_id) == 0)
			s->self = i;
	}
}

static void snap_unref(struct snapshot *s)
{
	if (s && atomic_fetch_sub(&s->refs, 1) == 1)
		free(s);
}

static struct snapshot *snap_get(struct cluster *cl)
{
	pthread_mutex_lock(&cl->lock);
	struct snapshot *s = cl->snap;
	atomic_fetch_add(&s->refs, 1);
	pthread_mutex_unlock(&cl->lock);
	return s;
}

/* Same members, addresses and capacities: the same owner for every key.
 * counts: the directory entries they report must match too. */
static bool snap_same(const struct snapshot *a, const struct snapshot *b, bool counts)
{
	if (a->n != b->n)
		return false;
	for (size_t i = 0; i < a->n; i++)
		if (strcmp(a->m[i].id, b->m[i].id) || strcmp(a->m[i].addr, b->m[i].addr) ||
		    a->m[i].cap != b->m[i].cap || (counts && a->m[i].dir_entries != b->m[i].dir_entries))
			return false;
	return true;
}

/* Logs who joined, left or moved between two sorted member lists. */
static void log_changes(const struct snapshot *old, const struct snapshot *nw)
{
	size_t i = 0, j = 0;
	while (i < old->n || j < nw->n) {
		int c = i == old->n ? 1 : j == nw->n ? -1 : strcmp(old->m[i].id, nw->m[j].id);
		if (c < 0) {
			log_info(TOPIC, "member %s (%s) left", old->m[i].id, old->m[i].addr);
			i++;
		} else if (c > 0) {
			log_info(TOPIC, "member %s joined at %s, capacity %.6g", nw->m[j].id,
			         nw->m[j].addr, nw->m[j].cap);
			j++;
		} else {
			if (strcmp(old->m[i].addr, nw->m[j].addr) || old->m[i].cap != nw->m[j].cap)
				log_info(TOPIC, "member %s now at %s, capacity %.6g", nw->m[j].id,
				         nw->m[j].addr, nw->m[j].cap);
			i++, j++;
		}
	}
}

/* Installs s (taking its reference) unless it equals the current one.
 * Call with cl->lock held; logs per-member changes only when asked. */
static void snap_install(struct cluster *cl, struct snapshot *s, bool log_members)
{
	struct snapshot *old = cl->snap;
	if (old && snap_same(old, s, true)) {
		snap_unref(s);
		return;
	}
	if (!old || !snap_same(old, s, false))
		cl->members_gen++;
	if (old && log_members)
		log_changes(old, s);
	cl->snap = s;
	snap_unref(old);
}

static struct snapshot *snap_alone(struct cluster *cl)
{
	struct snapshot *s = snap_new(1);
	if (s) {
		s->m[0] = cl->self;
		snap_finish(s, cl->self.id);
	}
	return s;
}

/* ---- Redis state ---- */

static void went_down(struct cluster *cl, const char *why)
{
	struct snapshot *alone = snap_alone(cl);
	pthread_mutex_lock(&cl->lock);
	if (cl->state == REDIS_UP)
		log_warn(TOPIC, "redis %s:%d lost (%s): working alone", cl->host, cl->port, why);
	else if (cl->state == REDIS_UNKNOWN)
		log_warn(TOPIC, "redis %s:%d unreachable (%s): working alone until it answers",
		         cl->host, cl->port, why);
	cl->state = REDIS_DOWN;
	if (alone)
		snap_install(cl, alone, false);
	pthread_mutex_unlock(&cl->lock);
}

/* Called after a successful heartbeat with the members just read. */
static void went_up(struct cluster *cl, struct snapshot *s)
{
	pthread_mutex_lock(&cl->lock);
	enum redis_state was = cl->state;
	cl->state = REDIS_UP;
	if (was == REDIS_DOWN)
		cl->reconnects++;
	snap_install(cl, s, was == REDIS_UP);
	if (was != REDIS_UP)
		log_info(TOPIC, "%s redis %s:%d as %s: %zu member%s",
		         was == REDIS_DOWN ? "back on" : "joined the cluster via", cl->host,
		         cl->port, cl->self.id, cl->snap->n, cl->snap->n == 1 ? "" : "s");
	pthread_mutex_unlock(&cl->lock);
}

/* A blocking connection with IO_TIMEOUT_MS for connect and commands,
 * authenticated and on the right database; NULL with why filled. */
static redisContext *redis_open(struct cluster *cl, char *why, size_t whylen)
{
	struct timeval tv = { .tv_sec = 0, .tv_usec = IO_TIMEOUT_MS * 1000 };
	redisContext *c = redisConnectWithTimeout(cl->host, cl->port, tv);
	if (!c) {
		snprintf(why, whylen, "out of memory");
		return NULL;
	}
	if (c->err) {
		snprintf(why, whylen, "%s", c->errstr);
		redisFree(c);
		return NULL;
	}
	redisSetTimeout(c, tv);
	redisReply *r = NULL;
	if (cl->password[0]) {
		r = cl->user[0] ? redisCommand(c, "AUTH %s %s", cl->user, cl->password)
		                : redisCommand(c, "AUTH %s", cl->password);
		if (!r || r->type == REDIS_REPLY_ERROR)
			goto fail;
		freeReplyObject(r);
	}
	if (cl->db) {
		r = redisCommand(c, "SELECT %d", cl->db);
		if (!r || r->type == REDIS_REPLY_ERROR)
			goto fail;
		freeReplyObject(r);
	}
	return c;
fail:
	snprintf(why, whylen, "%s", r ? r->str : c->errstr);
	if (r)
		freeReplyObject(r);
	redisFree(c);
	return NULL;
}

/* ---- heartbeat thread ---- */

static int member_cmp(const void *a, const void *b)
{
	return strcmp(((const struct member *)a)->id, ((const struct member *)b)->id);
}

/* An id as read back from Redis: something we could have written. */
static bool id_ok(const char *s, size_t len)
{
	if (len == 0 || len >= CLUSTER_NAME_MAX)
		return false;
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)s[i] <= ' ' || s[i] == 0x7f)
			return false;
	return true;
}

static double wall_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

void cluster_mac(const char *secret, const void *msg, size_t len, char out[65])
{
	unsigned char md[32];
	unsigned mdlen = sizeof md;
	HMAC(EVP_sha256(), secret, (int)strlen(secret), msg, len, md, &mdlen);
	hex_encode(md, sizeof md, out);
}

/* hex HMAC-SHA256(secret, "larder-member-v1\n" id "\n" body): the mac of
 * a membership entry (see Trust above). */
static void member_mac(const char *secret, const char *id, const char *body, size_t len,
                       char out[65])
{
	char msg[CLUSTER_NAME_MAX + MEMBER_VAL_MAX + 32];
	int n = snprintf(msg, sizeof msg, "larder-member-v1\n%s\n%.*s", id, (int)len, body);
	cluster_mac(secret, msg, n < 0 ? 0 : (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1,
	            out);
	explicit_bzero(msg, sizeof msg);
}

/* "<addr>\t<capacity>\t<directory entries>\t<expiry>\t<mac>", written by
 * a node with our secret and not expired, into m (whose id is set); false
 * when forged, stale or malformed. */
static bool parse_member(const struct cluster *cl, const char *v, size_t len, double now_ms,
                         struct member *m)
{
	if (len > MEMBER_VAL_MAX || strlen(v) != len)
		return false;
	const char *last = strrchr(v, '\t');
	char want[65];
	if (!last || strlen(last + 1) != 64)
		return false;
	member_mac(cl->secret, m->id, v, (size_t)(last - v), want);
	if (!ct_equal(want, 64, last + 1, 64))
		return false;
	const char *tab = memchr(v, '\t', len);
	if (tab == v || (size_t)(tab - v) >= CLUSTER_NAME_MAX)
		return false;
	memcpy(m->addr, v, (size_t)(tab - v));
	m->addr[tab - v] = '\0';
	char *end;
	errno = 0;
	m->cap = strtod(tab + 1, &end);
	if (errno || end == tab + 1 || !(m->cap > 0) || !isfinite(m->cap) || *end != '\t')
		return false;
	const char *p = end + 1;
	m->dir_entries = strtoull(p, &end, 10);
	if (errno || end == p || *end != '\t')
		return false;
	p = end + 1;
	double expiry = strtod(p, &end);
	if (errno || end == p || end != last)
		return false;
	return now_ms <= expiry + MEMBER_SKEW_MS;
}

/*
 * One heartbeat: refresh our key, read the members. Returns the new
 * snapshot, or NULL with why filled when the connection failed (the caller
 * drops it). Malformed entries written by others are skipped, not fatal.
 */
static struct snapshot *heartbeat(struct cluster *cl, redisContext *c, char *why, size_t whylen)
{
	redisReply *set = NULL, *add = NULL, *ids = NULL, *vals = NULL;
	const char **argv = NULL;
	size_t *argl = NULL;
	char (*keys)[sizeof cl->node_key] = NULL;
	struct snapshot *s = NULL;

	struct dir_stats ds;
	dir_get_stats(cl->dir, &ds);
	char val[MEMBER_VAL_MAX + 1];
	double now_ms = wall_ms();
	int body = snprintf(val, sizeof val, "%s\t%" PRIu64 "\t%.0f", cl->node_val, ds.entries,
	                    now_ms + cl->ttl_ms);
	if (body > 0 && (size_t)body + 65 < sizeof val) {
		val[body] = '\t';
		member_mac(cl->secret, cl->self.id, val, (size_t)body, val + body + 1);
	}
	redisAppendCommand(c, "SET %s %s PX %u", cl->node_key, val, cl->ttl_ms);
	redisAppendCommand(c, "SADD " NODES_SET " %s", cl->self.id);
	redisAppendCommand(c, "SMEMBERS " NODES_SET);
	if (redisGetReply(c, (void **)&set) != REDIS_OK ||
	    redisGetReply(c, (void **)&add) != REDIS_OK ||
	    redisGetReply(c, (void **)&ids) != REDIS_OK) {
		snprintf(why, whylen, "%s", c->errstr);
		goto out;
	}
	if (set->type == REDIS_REPLY_ERROR || add->type == REDIS_REPLY_ERROR ||
	    ids->type != REDIS_REPLY_ARRAY) {
		snprintf(why, whylen, "%s", set->type == REDIS_REPLY_ERROR   ? set->str
		                            : add->type == REDIS_REPLY_ERROR ? add->str
		                            : ids->type == REDIS_REPLY_ERROR ? ids->str
		                                                             : "unexpected reply");
		goto out;
	}

	/* MGET every listed id's key; ids we could not have written are ignored. */
	size_t n = ids->elements;
	argv = calloc(n + 2, sizeof *argv);
	argl = calloc(n + 2, sizeof *argl);
	keys = calloc(n + 1, sizeof *keys);
	if (!argv || !argl || !keys) {
		snprintf(why, whylen, "out of memory");
		goto out;
	}
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		redisReply *e = ids->element[i];
		if (e->type != REDIS_REPLY_STRING || !id_ok(e->str, e->len))
			continue;
		int l = snprintf(keys[k], sizeof keys[k], NODE_PREFIX "%s", e->str);
		argv[k + 1] = keys[k];
		argl[k + 1] = (size_t)l;
		k++;
	}
	argv[0] = "MGET";
	argl[0] = 4;
	if (k) {
		vals = redisCommandArgv(c, (int)k + 1, argv, argl);
		if (!vals || vals->type != REDIS_REPLY_ARRAY || vals->elements != k) {
			snprintf(why, whylen, "%s", !vals ? c->errstr
			                            : vals->type == REDIS_REPLY_ERROR ? vals->str
			                                                              : "unexpected reply");
			goto out;
		}
	}

	s = snap_new(k + 1);
	if (!s) {
		snprintf(why, whylen, "out of memory");
		goto out;
	}
	size_t live = 0, dead = 0, rejected = 0;
	const char *rejected_id = NULL;
	bool dup = false;
	for (size_t i = 0; i < k; i++) {
		redisReply *v = vals->element[i];
		const char *id = keys[i] + strlen(NODE_PREFIX);
		if (strcmp(id, cl->self.id) == 0) {
			/* Our own key: the entry is ours whatever it says, but if it is
			 * not what we wrote, another node uses our id. */
			size_t vl = strlen(cl->node_val);
			dup = v->type == REDIS_REPLY_STRING &&
			      (strncmp(v->str, cl->node_val, vl) != 0 ||
			       (v->str[vl] != '\0' && v->str[vl] != '\t'));
			continue;
		}
		if (v->type != REDIS_REPLY_STRING) {
			/* Expired: a dead node. Reuse argv for the SREM below. */
			argv[2 + dead] = id;
			argl[2 + dead] = strlen(id);
			dead++;
			continue;
		}
		struct member *m = &s->m[live];
		snprintf(m->id, sizeof m->id, "%s", id);
		if (parse_member(cl, v->str, v->len, now_ms, m)) {
			live++;
		} else {
			rejected++;
			rejected_id = id;
		}
	}
	s->m[live] = cl->self;
	s->m[live++].dir_entries = ds.entries;
	s->n = live;
	qsort(s->m, s->n, sizeof s->m[0], member_cmp);
	snap_finish(s, cl->self.id);

	if (dead) {
		argv[0] = "SREM";
		argl[0] = 4;
		argv[1] = NODES_SET;
		argl[1] = strlen(NODES_SET);
		redisReply *r = redisCommandArgv(c, (int)dead + 2, argv, argl);
		if (!r) {
			snprintf(why, whylen, "%s", c->errstr);
			snap_unref(s);
			s = NULL;
			goto out;
		}
		freeReplyObject(r);
	}

	pthread_mutex_lock(&cl->lock);
	if (dup && !cl->dup_warned)
		log_warn(TOPIC, "another node uses the id %s: ownership will flap until one is "
		         "renamed", cl->self.id);
	cl->dup_warned = dup;
	/* Logged when their number changes, not every heartbeat. */
	if (rejected && rejected != cl->rejected_last)
		log_warn(TOPIC, "ignoring %zu membership entr%s not signed with the cluster secret, "
		         "expired or malformed (e.g. %s): someone else writes to redis, or a node has "
		         "another LARDER_CLUSTER_SECRET", rejected, rejected == 1 ? "y" : "ies",
		         rejected_id);
	cl->rejected_last = rejected;
	cl->rejected += rejected;
	pthread_mutex_unlock(&cl->lock);
out:
	if (set)
		freeReplyObject(set);
	if (add)
		freeReplyObject(add);
	if (ids)
		freeReplyObject(ids);
	if (vals)
		freeReplyObject(vals);
	free(argv);
	free(argl);
	free(keys);
	return s;
}

/* Puts a batch back at the head of the queue (after a failed send), dropping
 * the oldest beyond QUEUE_MAX. Call with cl->lock held. */
static void queue_requeue(struct cluster *cl, struct inval *batch)
{
	struct inval *tail = batch;
	size_t n = 1;
	while (tail->next)
		tail = tail->next, n++;
	tail->next = cl->q_head;
	if (!cl->q_head)
		cl->q_tail = tail;
	cl->q_head = batch;
	cl->q_len += n;
	while (cl->q_len > QUEUE_MAX) {
		struct inval *e = cl->q_head;
		cl->q_head = e->next;
		free(e);
		cl->q_len--;
		cl->dropped++;
	}
	if (!cl->q_head)
		cl->q_tail = NULL;
}

/* PUBLISHes everything queued, pipelined. Returns 0, or -1 with why filled
 * (the batch is back in the queue: a resend is harmless). */
static int flush_queue(struct cluster *cl, redisContext *c, char *why, size_t whylen)
{
	pthread_mutex_lock(&cl->lock);
	struct inval *batch = cl->q_head;
	size_t n = cl->q_len;
	cl->q_head = cl->q_tail = NULL;
	cl->q_len = 0;
	pthread_mutex_unlock(&cl->lock);
	if (!batch)
		return 0;

	for (struct inval *e = batch; e; e = e->next)
		redisAppendCommand(c, "PUBLISH " INVAL_CHANNEL " %b", e->msg, e->len);
	int rc = redis_read_replies(c, n, why, whylen);
	pthread_mutex_lock(&cl->lock);
	if (rc == 0) {
		cl->sent += n;
		while (batch) {
			struct inval *e = batch;
			batch = e->next;
			free(e);
		}
	} else {
		queue_requeue(cl, batch);
	}
	pthread_mutex_unlock(&cl->lock);
	return rc;
}

static void deregister(struct cluster *cl, redisContext *c)
{
	redisAppendCommand(c, "DEL %s", cl->node_key);
	redisAppendCommand(c, "SREM " NODES_SET " %s", cl->self.id);
	char why[256];
	if (redis_read_replies(c, 2, why, sizeof why) == 0)
		log_info(TOPIC, "left the cluster as %s", cl->self.id);
}

static void cond_wait_until(struct cluster *cl, double deadline_ms)
{
	struct timespec ts;
	ts.tv_sec = (time_t)(deadline_ms / 1e3);
	ts.tv_nsec = (long)((deadline_ms - (double)ts.tv_sec * 1e3) * 1e6);
	if (ts.tv_nsec >= 1000000000L)
		ts.tv_sec++, ts.tv_nsec -= 1000000000L;
	if (ts.tv_nsec < 0)
		ts.tv_nsec = 0;
	pthread_cond_timedwait(&cl->cond, &cl->lock, &ts);
}

/* dir_owners.owns: whether this node owns key in the current snapshot. */
static bool owned_here(void *arg, uint64_t key)
{
	return !cluster_owner(arg, key, NULL, 0);
}

static uint32_t tag_of(uint64_t node_hash)
{
	uint32_t t = (uint32_t)node_hash;
	return t ? t : 1;
}

/* dir_owners.gone: whether no live member has this tag. */
static bool member_gone(void *arg, uint32_t tag)
{
	struct cluster *cl = arg;
	pthread_mutex_lock(&cl->lock);
	const struct snapshot *s = cl->snap;
	bool gone = true;
	for (size_t i = 0; i < s->n && gone; i++)
		gone = tag_of(s->hash[i]) != tag;
	pthread_mutex_unlock(&cl->lock);
	return gone;
}

static void *hb_main(void *arg)
{
	struct cluster *cl = arg;
	redisContext *c = NULL;
	unsigned long dir_gen = 0;
	unsigned fails = 0;
	double next = clock_mono_ms();
	char why[256];

	pthread_mutex_lock(&cl->lock);
	while (!cl->stopping) {
		if (clock_mono_ms() >= next) {
			pthread_mutex_unlock(&cl->lock);
			struct snapshot *s = NULL;
			if (!c)
				c = redis_open(cl, why, sizeof why);
			if (c && !(s = heartbeat(cl, c, why, sizeof why))) {
				redisFree(c);
				c = NULL;
			}
			if (s) {
				pthread_mutex_lock(&cl->lock);
				bool was_up = cl->state == REDIS_UP;
				pthread_mutex_unlock(&cl->lock);
				went_up(cl, s);
				fails = 0;
				next = clock_mono_ms() + cl->heartbeat_ms;
				/* Placement entries, after the heartbeat so that a big
				 * batch never delays it. All of them are looked at again
				 * when ownership moved or Redis may have lost them. */
				pthread_mutex_lock(&cl->lock);
				bool recheck = !was_up || cl->members_gen != dir_gen;
				dir_gen = cl->members_gen;
				pthread_mutex_unlock(&cl->lock);
				const struct dir_owners owners = {
					.owns = owned_here, .gone = member_gone, .arg = cl,
				};
				if (dir_flush(cl->dir, c, cl->self.id, recheck, &owners, why,
				              sizeof why) < 0) {
					redisFree(c);
					c = NULL;
					went_down(cl, why);
				}
			} else {
				went_down(cl, why);
				fails++;
				next = clock_mono_ms() + (double)cl->heartbeat_ms * (1u << (fails < 3 ? fails - 1 : 2));
			}
			pthread_mutex_lock(&cl->lock);
			continue;
		}
		if (c && cl->q_head) {
			pthread_mutex_unlock(&cl->lock);
			if (flush_queue(cl, c, why, sizeof why) < 0) {
				redisFree(c);
				c = NULL;
				went_down(cl, why);
				next = clock_mono_ms(); /* reconnect now, then back off */
			}
			pthread_mutex_lock(&cl->lock);
			continue;
		}
		cond_wait_until(cl, next);
	}
	pthread_mutex_unlock(&cl->lock);

	if (c) {
		if (flush_queue(cl, c, why, sizeof why) == 0)
			deregister(cl, c);
		redisFree(c);
	}
	return NULL;
}

/* ---- subscriber thread ---- */

static void on_message(struct cluster *cl, const char *msg, size_t len)
{
	const char *nl1 = memchr(msg, '\n', len);
	const char *nl2 = nl1 ? memchr(nl1 + 1, '\n', len - (size_t)(nl1 + 1 - msg)) : NULL;
	if (!nl2 || nl2 == nl1 + 1) {
		log_debug(TOPIC, "malformed invalidation message ignored");
		return;
	}
	size_t idlen = (size_t)(nl1 - msg);
	if (idlen == strlen(cl->self.id) && memcmp(msg, cl->self.id, idlen) == 0)
		return; /* our own */
	size_t blen = (size_t)(nl2 - nl1 - 1), klen = len - (size_t)(nl2 + 1 - msg);
	char *bk = malloc(blen + klen + 2);
	if (!bk)
		return;
	memcpy(bk, nl1 + 1, blen);
	bk[blen] = '\0';
	memcpy(bk + blen + 1, nl2 + 1, klen);
	bk[blen + 1 + klen] = '\0';
	pthread_mutex_lock(&cl->lock);
	cl->received++;
	pthread_mutex_unlock(&cl->lock);
	if (cl->cb)
		cl->cb(cl->cb_arg, bk, bk + blen + 1);
	free(bk);
}

static void on_reply(struct cluster *cl, redisReply *r)
{
	if (r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
	    r->element[0]->type == REDIS_REPLY_STRING && r->element[2]->type == REDIS_REPLY_STRING &&
	    strcmp(r->element[0]->str, "message") == 0)
		on_message(cl, r->element[2]->str, r->element[2]->len);
	/* Anything else: subscribe confirmations and PING answers ("pong"). */
}

/* Waits up to ms for cluster_stop; returns true when stopping. */
static bool sub_sleep(struct cluster *cl, int ms)
{
	struct pollfd p = { .fd = cl->wake[0], .events = POLLIN };
	return poll(&p, 1, ms) > 0;
}

static redisContext *sub_open(struct cluster *cl, char *why, size_t whylen)
{
	redisContext *c = redis_open(cl, why, whylen);
	if (!c)
		return NULL;
	redisReply *r = redisCommand(c, "SUBSCRIBE " INVAL_CHANNEL);
	if (!r || r->type != REDIS_REPLY_ARRAY) {
		snprintf(why, whylen, "%s", !r ? c->errstr
		                            : r->type == REDIS_REPLY_ERROR ? r->str
		                                                           : "unexpected reply");
		if (r)
			freeReplyObject(r);
		redisFree(c);
		return NULL;
	}
	freeReplyObject(r);
	return c;
}

/*
 * Serves one subscribed connection until it fails (returns false, why
 * filled) or cluster_stop (returns true).
 */
static bool sub_serve(struct cluster *cl, redisContext *c, char *why, size_t whylen)
{
	bool ping_out = false;
	for (;;) {
		struct pollfd p[2] = { { .fd = c->fd, .events = POLLIN },
		                       { .fd = cl->wake[0], .events = POLLIN } };
		int n = poll(p, 2, (int)cl->ttl_ms);
		if (n < 0 && errno != EINTR) {
			snprintf(why, whylen, "poll() failed: %s", strerror(errno));
			return false;
		}
		if (p[1].revents)
			return true;
		if (n == 0) {
			if (ping_out) {
				snprintf(why, whylen, "no answer to PING");
				return false;
			}
			int done = 0;
			redisAppendCommand(c, "PING");
			while (!done)
				if (redisBufferWrite(c, &done) != REDIS_OK) {
					snprintf(why, whylen, "%s", c->errstr);
					return false;
				}
			ping_out = true;
			continue;
		}
		if (!p[0].revents)
			continue;
		if (redisBufferRead(c) != REDIS_OK) {
			snprintf(why, whylen, "%s", c->errstr);
			return false;
		}
		ping_out = false; /* anything heard proves the connection alive */
		for (;;) {
			void *r = NULL;
			if (redisGetReplyFromReader(c, &r) != REDIS_OK) {
				snprintf(why, whylen, "%s", c->errstr);
				return false;
			}
			if (!r)
				break;
			on_reply(cl, r);
			freeReplyObject(r);
		}
	}
}

static void set_subscribed(struct cluster *cl, bool on, bool again)
{
	pthread_mutex_lock(&cl->lock);
	cl->subscribed = on;
	if (on && again)
		cl->reconnects++;
	pthread_mutex_unlock(&cl->lock);
}

static void *sub_main(void *arg)
{
	struct cluster *cl = arg;
	unsigned fails = 0;
	bool ever = false, lost_logged = false;
	char why[256];

	for (;;) {
		redisContext *c = sub_open(cl, why, sizeof why);
		if (!c) {
			/* 100 ms doubling, capped at 4 heartbeats. */
			double ms = 100.0 * (double)(1u << (fails < 10 ? fails : 10));
			if (ms > 4.0 * cl->heartbeat_ms)
				ms = 4.0 * cl->heartbeat_ms;
			fails++;
			if (sub_sleep(cl, (int)ms))
				return NULL;
			continue;
		}
		fails = 0;
		set_subscribed(cl, true, ever);
		if (lost_logged)
			log_info(TOPIC, "invalidation subscriber back");
		ever = true;
		lost_logged = false;
		bool stop = sub_serve(cl, c, why, sizeof why);
		redisFree(c);
		set_subscribed(cl, false, false);
		if (stop)
			return NULL;
		log_info(TOPIC, "invalidation subscriber lost (%s): reconnecting", why);
		lost_logged = true;
	}
}

/* ---- configuration ---- */

/* redis://[[user]:password@]host[:port][/db]; host may be [v6 address]. */
static int parse_url(struct cluster *cl, const char *full, char *err, size_t errlen)
{
	const char *p = full;
	/* Errors quote the URL without its credentials. */
	const char *url = strrchr(full, '@') ? strrchr(full, '@') + 1 : full;
	if (strncmp(p, "redis://", 8) != 0) {
		set_err(err, errlen, "cluster: redis url %s: must start with redis://", url);
		return -1;
	}
	p += 8;
	const char *at = strrchr(p, '@');
	if (at) {
		const char *colon = memchr(p, ':', (size_t)(at - p));
		if (!colon || (size_t)(colon - p) >= sizeof cl->user ||
		    (size_t)(at - colon - 1) >= sizeof cl->password) {
			set_err(err, errlen, "cluster: redis url %s: credentials must be "
			        "[user]:password@", url);
			return -1;
		}
		memcpy(cl->user, p, (size_t)(colon - p));
		memcpy(cl->password, colon + 1, (size_t)(at - colon - 1));
		p = at + 1;
	}
	const char *hend;
	if (*p == '[') {
		hend = strchr(p, ']');
		if (!hend)
			goto bad;
		p++;
	} else {
		hend = p + strcspn(p, ":/");
	}
	if (hend == p || (size_t)(hend - p) >= sizeof cl->host)
		goto bad;
	memcpy(cl->host, p, (size_t)(hend - p));
	p = *hend == ']' ? hend + 1 : hend;
	cl->port = 6379;
	if (*p == ':') {
		char *end;
		long v = strtol(p + 1, &end, 10);
		if (end == p + 1 || v < 1 || v > 65535)
			goto bad;
		cl->port = (int)v;
		p = end;
	}
	if (*p == '/' && p[1]) {
		char *end;
		long v = strtol(p + 1, &end, 10);
		if (end == p + 1 || v < 0 || v > 1000000)
			goto bad;
		cl->db = (int)v;
		p = end;
	} else if (*p == '/') {
		p++;
	}
	if (*p == '\0')
		return 0;
bad:
	set_err(err, errlen, "cluster: bad redis url %s", url);
	return -1;
}

static void cluster_free(struct cluster *cl)
{
	while (cl->q_head) {
		struct inval *e = cl->q_head;
		cl->q_head = e->next;
		free(e);
	}
	snap_unref(cl->snap);
	explicit_bzero(cl->secret, sizeof cl->secret);
	explicit_bzero(cl->password, sizeof cl->password);
	if (cl->wake[0] >= 0)
		close(cl->wake[0]);
	if (cl->wake[1] >= 0)
		close(cl->wake[1]);
	pthread_cond_destroy(&cl->cond);
	pthread_mutex_destroy(&cl->lock);
	cl->magic = 0;
	free(cl);
}

struct cluster *cluster_start(const struct cluster_config *c, cluster_invalidate_cb cb,
                              void *arg, char *err, size_t errlen)
{
	if (err && errlen)
		err[0] = '\0';
	if (!c->redis_url || !c->redis_url[0])
		return NULL;
	if (!c->node_id || !id_ok(c->node_id, strlen(c->node_id))) {
		set_err(err, errlen, "cluster: node id \"%s\" must be 1-127 printable characters "
		        "without spaces", c->node_id ? c->node_id : "");
		return NULL;
	}
	if (!c->advertise || !id_ok(c->advertise, strlen(c->advertise))) {
		set_err(err, errlen, "cluster: advertise address \"%s\" must be a host:port of "
		        "1-127 characters", c->advertise ? c->advertise : "");
		return NULL;
	}
	if (!(c->capacity > 0) || !isfinite(c->capacity)) {
		set_err(err, errlen, "cluster: capacity of %s must be positive", c->node_id);
		return NULL;
	}
	if (!c->secret || strlen(c->secret) < 16 || strlen(c->secret) > 256) {
		set_err(err, errlen, "cluster: the cluster secret (16-256 characters) is needed: it "
		        "signs membership entries");
		return NULL;
	}
	unsigned hb = c->heartbeat_ms ? c->heartbeat_ms : 1000;
	unsigned ttl = c->ttl_ms ? c->ttl_ms : 5000;
	if (ttl <= hb || hb > 60000) {
		set_err(err, errlen, "cluster: ttl_ms must exceed heartbeat_ms (node %s), and a "
		        "heartbeat be at most a minute", c->node_id);
		return NULL;
	}

	struct cluster *cl = calloc(1, sizeof *cl);
	if (!cl) {
		set_err(err, errlen, "cluster: %s", "out of memory");
		return NULL;
	}
	cl->magic = CLUSTER_MAGIC;
	cl->wake[0] = cl->wake[1] = -1;
	pthread_mutex_init(&cl->lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&cl->cond, &ca);
	pthread_condattr_destroy(&ca);
	if (parse_url(cl, c->redis_url, err, errlen) < 0)
		goto fail;
	snprintf(cl->secret, sizeof cl->secret, "%s", c->secret);
	snprintf(cl->self.id, sizeof cl->self.id, "%s", c->node_id);
	snprintf(cl->self.addr, sizeof cl->self.addr, "%s", c->advertise);
	/* The capacity as peers will parse it, so everyone's weights match. */
	char capstr[40];
	snprintf(capstr, sizeof capstr, "%.17g", c->capacity);
	cl->self.cap = strtod(capstr, NULL);
	snprintf(cl->node_key, sizeof cl->node_key, NODE_PREFIX "%s", cl->self.id);
	snprintf(cl->node_val, sizeof cl->node_val, "%s\t%s", cl->self.addr, capstr);
	cl->heartbeat_ms = hb;
	cl->dir = c->dir;
	cl->ttl_ms = ttl;
	cl->cb = cb;
	cl->cb_arg = arg;
	cl->state = REDIS_UNKNOWN;
	cl->snap = snap_alone(cl);
	if (!cl->snap) {
		set_err(err, errlen, "cluster: %s", "out of memory");
		goto fail;
	}
	if (pipe2(cl->wake, O_CLOEXEC) < 0) {
		set_err(err, errlen, "cluster: pipe() failed: %s", strerror(errno));
		goto fail;
	}
	log_info(TOPIC, "node %s (%s, capacity %s) using redis %s:%d", cl->self.id,
	         cl->self.addr, capstr, cl->host, cl->port);
	int e = pthread_create(&cl->hb_thread, NULL, hb_main, cl);
	if (e) {
		set_err(err, errlen, "cluster: pthread_create() failed: %s", strerror(e));
		goto fail;
	}
	e = pthread_create(&cl->sub_thread, NULL, sub_main, cl);
	if (e) {
		set_err(err, errlen, "cluster: pthread_create() failed: %s", strerror(e));
		pthread_mutex_lock(&cl->lock);
		cl->stopping = true;
		pthread_cond_signal(&cl->cond);
		pthread_mutex_unlock(&cl->lock);
		pthread_join(cl->hb_thread, NULL);
		goto fail;
	}
	return cl;
fail:
	cluster_free(cl);
	return NULL;
}

void cluster_leave(struct cluster *cl)
{
	if (!cl)
		return;
	if (cl->magic != CLUSTER_MAGIC)
		abort();
	pthread_mutex_lock(&cl->lock);
	bool left = cl->left;
	cl->left = cl->stopping = true;
	pthread_cond_signal(&cl->cond);
	pthread_mutex_unlock(&cl->lock);
	if (left)
		return;
	char b = 1;
	while (write(cl->wake[1], &b, 1) < 0 && errno == EINTR)
		;
	pthread_join(cl->sub_thread, NULL);
	pthread_join(cl->hb_thread, NULL);
	struct snapshot *alone = snap_alone(cl);
	pthread_mutex_lock(&cl->lock);
	cl->state = REDIS_DOWN;
	cl->subscribed = false;
	if (alone)
		snap_install(cl, alone, false);
	pthread_mutex_unlock(&cl->lock);
}

void cluster_stop(struct cluster *cl)
{
	if (!cl)
		return;
	cluster_leave(cl);
	cluster_free(cl);
}

/* ---- queries ---- */

bool cluster_owner(struct cluster *cl, uint64_t key, char *addr, size_t addrlen)
{
	if (!cl)
		return false;
	struct snapshot *s = snap_get(cl);
	size_t i = rdv_pick(s->hash, s->weight, s->n, key);
	bool other = i != SIZE_MAX && i != s->self;
	if (other && addr && addrlen)
		snprintf(addr, addrlen, "%s", s->m[i].addr);
	snap_unref(s);
	return other;
}

bool cluster_has_peers(struct cluster *cl)
{
	if (!cl)
		return false;
	pthread_mutex_lock(&cl->lock);
	bool others = cl->snap->n > 1;
	pthread_mutex_unlock(&cl->lock);
	return others;
}

uint32_t cluster_member_tag(struct cluster *cl, const char *addr)
{
	if (!cl || !addr)
		return 0;
	struct snapshot *s = snap_get(cl);
	uint32_t tag = 0;
	for (size_t i = 0; i < s->n && !tag; i++)
		if (strcmp(s->m[i].addr, addr) == 0)
			tag = tag_of(s->hash[i]);
	snap_unref(s);
	return tag;
}

bool cluster_pick_holder(struct cluster *cl, uint64_t key, const char *const *ids,
                         const size_t *lens, size_t n, char *addr, size_t addrlen)
{
	if (!cl || !n)
		return false;
	struct snapshot *s = snap_get(cl);
	/* Rendezvous over the members with the unlisted ones weighted 0 (never
	 * picked): the same ranking as ownership, restricted to holders. */
	double *w = calloc(s->n, sizeof *w);
	size_t best = SIZE_MAX;
	if (w) {
		for (size_t i = 0; i < s->n; i++) {
			size_t idlen = strlen(s->m[i].id);
			for (size_t j = 0; j < n && i != s->self && !w[i]; j++)
				if (lens[j] == idlen && memcmp(ids[j], s->m[i].id, idlen) == 0)
					w[i] = s->weight[i];
		}
		best = rdv_pick(s->hash, w, s->n, key);
		free(w);
	}
	if (best != SIZE_MAX && addr && addrlen)
		snprintf(addr, addrlen, "%s", s->m[best].addr);
	snap_unref(s);
	return best != SIZE_MAX;
}

void cluster_redis_settings(struct cluster *cl, struct cluster_redis *out)
{
	memset(out, 0, sizeof *out);
	if (!cl)
		return;
	snprintf(out->host, sizeof out->host, "%s", cl->host);
	out->port = cl->port;
	snprintf(out->user, sizeof out->user, "%s", cl->user);
	snprintf(out->password, sizeof out->password, "%s", cl->password);
	out->db = cl->db;
}

void cluster_publish_invalidate(struct cluster *cl, const char *bucket, const char *key)
{
	if (!cl || !bucket || !bucket[0] || strchr(bucket, '\n'))
		return;
	if (!key)
		key = "";
	size_t il = strlen(cl->self.id), bl = strlen(bucket), kl = strlen(key);
	struct inval *e = malloc(sizeof *e + il + bl + kl + 2);
	if (!e)
		return;
	e->next = NULL;
	e->len = il + bl + kl + 2;
	memcpy(e->msg, cl->self.id, il);
	e->msg[il] = '\n';
	memcpy(e->msg + il + 1, bucket, bl);
	e->msg[il + 1 + bl] = '\n';
	memcpy(e->msg + il + bl + 2, key, kl);

	pthread_mutex_lock(&cl->lock);
	if (cl->q_tail)
		cl->q_tail->next = e;
	else
		cl->q_head = e;
	cl->q_tail = e;
	if (++cl->q_len > QUEUE_MAX) {
		struct inval *old = cl->q_head;
		cl->q_head = old->next;
		free(old);
		cl->q_len--;
		cl->dropped++;
	}
	pthread_cond_signal(&cl->cond);
	pthread_mutex_unlock(&cl->lock);
}

void cluster_get_view(struct cluster *cl, struct cluster_view *out)
{
	memset(out, 0, sizeof *out);
	if (!cl) {
		out->members = 1;
		return;
	}
	pthread_mutex_lock(&cl->lock);
	out->redis_up = cl->state == REDIS_UP;
	out->subscribed = cl->subscribed;
	out->members = cl->snap->n;
	snprintf(out->self, sizeof out->self, "%s", cl->self.id);
	out->redis_reconnects = cl->reconnects;
	out->invalidations_sent = cl->sent;
	out->invalidations_received = cl->received;
	out->invalidations_dropped = cl->dropped;
	out->members_rejected = cl->rejected;
	for (size_t i = 0; i < cl->snap->n; i++)
		out->directory_entries += cl->snap->m[i].dir_entries;
	pthread_mutex_unlock(&cl->lock);
}

size_t cluster_members(struct cluster *cl, char (*ids)[CLUSTER_NAME_MAX],
                       char (*addrs)[CLUSTER_NAME_MAX], double *caps, uint64_t *dir_entries,
                       size_t max)
{
	if (!cl)
		return 0;
	struct snapshot *s = snap_get(cl);
	size_t n = s->n < max ? s->n : max;
	for (size_t i = 0; i < n; i++) {
		if (ids)
			memcpy(ids[i], s->m[i].id, CLUSTER_NAME_MAX);
		if (addrs)
			memcpy(addrs[i], s->m[i].addr, CLUSTER_NAME_MAX);
		if (caps)
			caps[i] = s->m[i].cap;
		if (dir_entries)
			dir_entries[i] = s->m[i].dir_entries;
	}
	snap_unref(s);
	return n;
}

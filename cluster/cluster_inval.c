/*
 * cluster_inval.c - invalidations between nodes: the queue that
 * cluster_publish_invalidate fills and the heartbeat thread PUBLISHes, and
 * the subscriber thread that hands other nodes' messages to the callback.
 *
 * Subscriber thread. SUBSCRIBE, then poll() on the socket and on a pipe
 * that cluster_stop writes to, so stopping never waits for Redis. Replies
 * are read with redisBufferRead only when poll says the socket is readable,
 * so a read never blocks. A silent connection is probed with PING every
 * ttl_ms; no answer by the next probe means the connection is dead.
 *
 * Acknowledgements. A node that applied another's message (its callback
 * returned) publishes CLUSTER_ACK with key "<sender> <the message's mac's
 * first ACK_MAC_LEN hex digits>". The sender counts them per ticket
 * against what PUBLISH answered (the subscribers it reached, its own
 * among them, which counts itself), so cluster_published can say when
 * every node that heard a write has forgotten what it replaced. Only the
 * members count, at most as many as there are: a node of another protocol
 * (CLUSTER_PROTOCOL; in a rolling upgrade) hears the message too, but may
 * never acknowledge it (a larder from before acknowledgements), and one
 * that does is no member whose reads the write must wait for; nor are
 * other subscribers of the channel (redis-cli, a cluster with another
 * secret).
 *
 * Message on larder:invalidate: "<mac>\n<expiry>\n<sender id>\n<bucket>\n<key>".
 * Ids and bucket names hold no newline (checked); the key is the rest,
 * whatever it holds (read by inval_msg.c). Receivers skip their own
 * messages.
 *
 * Redis keeps no history: what is published while a node is not
 * subscribed never reaches it, and a queue that overflowed while Redis was
 * down lost messages for everybody. Both end in CLUSTER_RESYNC for the
 * callback: the first at each SUBSCRIBE, the second as a message the
 * dropping node publishes after its queue.
 *
 * Trust. Anyone who can write to Redis can PUBLISH, and the channel carries
 * more than invalidations: pins ending (CLUSTER_UNPIN) and access profiles
 * (CLUSTER_PROFILE), which choose what warm jobs fetch and make nodes
 * report reads. So a message counts only when its mac is hex
 * HMAC-SHA256(cluster secret, "larder-inval-v1\n" + everything after the
 * mac's newline), and its expiry (unix ms, the sender's clock at sending +
 * INVAL_VALID_MS) has not passed by more than MEMBER_SKEW_MS. A copy can be
 * replayed within that time: an invalidation or a profile's read again,
 * nothing new. Others are counted (invalidations_rejected) and dropped.
 */
#include "cluster/cluster_internal.h"

#include <assert.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/clock.h"
#include "base/log.h"
#include "cluster/redis_util.h"

/* A message "sender \n bucket \n key" to queue, or NULL (too long, or no
 * memory). */
static struct inval *inval_new(const struct cluster *cl, const char *bucket, const char *key)
{
	size_t il = strlen(cl->self.id), bl = strlen(bucket), kl = strlen(key);
	if (il + bl + kl + 2 > INVAL_MSG_MAX)
		return NULL;
	struct inval *e = malloc(sizeof *e + il + bl + kl + 2);
	if (!e)
		return NULL;
	e->next = NULL;
	e->seq = 0;
	e->ack = false;
	e->len = il + bl + kl + 2;
	memcpy(e->msg, cl->self.id, il);
	e->msg[il] = '\n';
	memcpy(e->msg + il + 1, bucket, bl);
	e->msg[il + 1 + bl] = '\n';
	memcpy(e->msg + il + bl + 2, key, kl);
	return e;
}

/* Drops e, taken off the queue's head past QUEUE_MAX. A lost invalidation
 * makes the others resync; a lost ack only makes its sender wait its
 * bound. Call with cl->lock held. */
static void drop_queued(struct cluster *cl, struct inval *e)
{
	cl->q_len--;
	if (!e->ack) {
		cl->dropped++;
		cl->resync_due = true;
	}
	free(e);
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
		drop_queued(cl, e);
	}
	if (!cl->q_head)
		cl->q_tail = NULL;
}

/* A ticket about to be published: its acknowledgements count from now on
 * (a fast node may answer before Redis's answer to the PUBLISH is read). */
static void pend_open(struct cluster *cl, const struct inval *e)
{
	pthread_mutex_lock(&cl->lock);
	size_t i = e->seq % PEND_MAX;
	cl->pend[i].seq = e->seq;
	memcpy(cl->pend[i].mac, e->mac, ACK_MAC_LEN);
	cl->pend[i].expect = -1; /* not known until PUBLISH answers */
	cl->pend[i].acks = 0;
	pthread_mutex_unlock(&cl->lock);
}

/* receivers: what PUBLISH answered. The subscribers past the members (this
 * node included) are not waited for: see Acknowledgements above. */
static void pend_expect(struct cluster *cl, const struct inval *e, long long receivers)
{
	pthread_mutex_lock(&cl->lock);
	size_t i = e->seq % PEND_MAX;
	long long members = (long long)cl->snap->n;
	if (receivers > members)
		receivers = members;
	if (cl->pend[i].seq == e->seq)
		cl->pend[i].expect = receivers > 0 ? (long)receivers : 0;
	pthread_mutex_unlock(&cl->lock);
}

/* Whether id (len bytes) is a member: of this protocol, live at the last
 * heartbeat. Call with cl->lock held. */
static bool is_member(const struct cluster *cl, const char *id, size_t len)
{
	const struct snapshot *s = cl->snap;
	for (size_t i = 0; i < s->n; i++)
		if (strlen(s->m[i].id) == len && memcmp(s->m[i].id, id, len) == 0)
			return true;
	return false;
}

/* A node applied the message whose mac starts with mac. Call with cl->lock held. */
static void pend_acked(struct cluster *cl, const char *mac)
{
	for (size_t i = 0; i < PEND_MAX; i++)
		if (cl->pend[i].seq && memcmp(cl->pend[i].mac, mac, ACK_MAC_LEN) == 0) {
			cl->pend[i].acks++;
			return;
		}
}

/* PUBLISHes everything queued, pipelined. Returns 0, or -1 with why filled
 * (the batch is back in the queue: a resend is harmless). */
int cl_flush_queue(struct cluster *cl, redisContext *c, char *why, size_t whylen)
{
	pthread_mutex_lock(&cl->lock);
	struct inval *batch = cl->q_head, *tail = cl->q_tail;
	size_t n = cl->q_len;
	bool resync = cl->resync_due;
	cl->resync_due = false;
	cl->q_head = cl->q_tail = NULL;
	cl->q_len = 0;
	pthread_mutex_unlock(&cl->lock);
	if (resync) {
		/* Some of ours were dropped: the others revalidate everything. */
		struct inval *e = inval_new(cl, CLUSTER_RESYNC, "");
		if (e) {
			*(batch ? &tail->next : &batch) = e;
			n++;
		} else {
			pthread_mutex_lock(&cl->lock);
			cl->resync_due = true; /* the next flush tries again */
			pthread_mutex_unlock(&cl->lock);
		}
	}
	if (!batch)
		return 0;

	/* Signed now, not when queued: a batch that waited out a Redis outage
	 * is as good as a new one. */
	char head[32];
	snprintf(head, sizeof head, "%.0f\n", cl_wall_ms() + INVAL_VALID_MS);
	size_t hl = strlen(head);
	struct buf body;
	buf_init(&body, sizeof head + INVAL_MSG_MAX);
	for (struct inval *e = batch; e; e = e->next) {
		char mac[65] = "";
		buf_reset(&body);
		if (buf_append(&body, head, hl) != 0 || buf_append(&body, e->msg, e->len) != 0 ||
		    cl_inval_mac(cl->secret, body.p, body.len, mac) != 0)
			buf_reset(&body); /* out of memory: an empty message, which receivers drop */
		memcpy(e->mac, mac, ACK_MAC_LEN);
		if (e->seq)
			pend_open(cl, e);
		redisAppendCommand(c, "PUBLISH " INVAL_CHANNEL " %s\n%b", mac, body.p ? body.p : "",
		                   body.len);
	}
	buf_fini(&body);
	/* An error answer (an ACL without PUBLISH, a read-only replica) told
	 * nobody: counted as dropped, not sent, and logged once per run of
	 * them. Sending it again would be refused again. */
	int rc = 0;
	size_t refused = 0, acks = 0;
	for (struct inval *e = batch; e && rc == 0; e = e->next) {
		redisReply *reply;
		if (redisGetReply(c, (void **)&reply) != REDIS_OK) {
			snprintf(why, whylen, "%s", c->errstr);
			rc = -1;
			break;
		}
		acks += e->ack;
		if (reply->type == REDIS_REPLY_ERROR) {
			if (!refused)
				snprintf(why, whylen, "%s", reply->str);
			refused++;
			acks -= e->ack;
		}
		/* PUBLISH answers how many subscribers it reached: the nodes that
		 * will acknowledge (this one's own subscriber among them). */
		if (e->seq)
			pend_expect(cl, e, reply->type == REDIS_REPLY_INTEGER ? reply->integer : 0);
		freeReplyObject(reply);
	}
	pthread_mutex_lock(&cl->lock);
	if (rc == 0) {
		cl->sent += n - refused - acks;
		cl->dropped += refused;
		if (refused && !cl->publish_refused)
			log_warn(TOPIC, "Redis refused %zu invalidation message(s): other nodes may serve "
			         "what this node's writes replaced until their metadata expires: %s",
			         refused, why);
		cl->publish_refused = refused != 0;
		uint64_t done = 0;
		while (batch) {
			struct inval *e = batch;
			batch = e->next;
			done = e->seq > done ? e->seq : done;
			free(e);
		}
		if (done)
			atomic_store(&cl->q_done, done);
	} else {
		queue_requeue(cl, batch);
	}
	pthread_mutex_unlock(&cl->lock);
	return rc;
}

/* Queues e (and takes it) for the heartbeat thread; its ticket, or 0 for an ack. */
static uint64_t queue_push(struct cluster *cl, struct inval *e)
{
	pthread_mutex_lock(&cl->lock);
	uint64_t seq = e->seq = e->ack ? 0 : ++cl->q_seq;
	if (cl->q_tail)
		cl->q_tail->next = e;
	else
		cl->q_head = e;
	cl->q_tail = e;
	if (++cl->q_len > QUEUE_MAX) {
		struct inval *old = cl->q_head;
		cl->q_head = old->next;
		drop_queued(cl, old);
	}
	pthread_cond_signal(&cl->cond);
	pthread_mutex_unlock(&cl->lock);
	return seq;
}

uint64_t cluster_publish_invalidate(struct cluster *cl, const char *bucket, const char *key)
{
	if (!cl || !bucket || !bucket[0] || strchr(bucket, '\n'))
		return 0;
	struct inval *e = inval_new(cl, bucket, key ? key : "");
	return e ? queue_push(cl, e) : 0;
}

bool cluster_published(struct cluster *cl, uint64_t ticket)
{
	if (!cl || !ticket)
		return true;
	bool out = atomic_load(&cl->q_done) >= ticket;
	pthread_mutex_lock(&cl->lock);
	bool over;
	if (!out) {
		/* Before its first heartbeat (up to a second after the start) a
		 * node has no connection to publish on: not Redis down, whose
		 * writes nobody can be told of. Its queue goes out with that
		 * heartbeat, whose answer waits; before, the answer went at once
		 * and the other nodes served the replaced bytes until then. */
		over = cl->state == REDIS_DOWN || cl->stopping;
	} else {
		size_t i = ticket % PEND_MAX;
		over = cl->pend[i].seq != ticket || /* refused, or its place reused */
		       (cl->pend[i].expect >= 0 && cl->pend[i].acks >= cl->pend[i].expect) ||
		       cl->state != REDIS_UP || cl->stopping;
	}
	pthread_mutex_unlock(&cl->lock);
	return over;
}

/* Whether a WARN last said at *last_ms (0: never) may be said again at
 * now_ms, at most once a minute; notes it if so. Call with cl->lock held. */
static bool warn_due(double *last_ms, double now_ms)
{
	if (*last_ms && now_ms - *last_ms < 60e3)
		return false;
	*last_ms = now_ms;
	return true;
}

void cluster_gave_up(struct cluster *cl, uint64_t ticket)
{
	if (!cl || !ticket)
		return;
	pthread_mutex_lock(&cl->lock);
	cl->unacked++;
	size_t i = ticket % PEND_MAX;
	long expect = cl->pend[i].seq == ticket ? cl->pend[i].expect : -1;
	long acks = cl->pend[i].seq == ticket ? cl->pend[i].acks : 0;
	bool say = warn_due(&cl->unacked_warned_ms, clock_mono_ms());
	pthread_mutex_unlock(&cl->lock);
	if (say && expect >= 0)
		log_warn(TOPIC, "a write's answer went on after waiting for the other nodes to apply "
		         "its invalidation: %ld of %ld answered (a node slow to apply it may serve "
		         "the old version a while; said at most once a minute)", acks, expect);
	else if (say)
		log_warn(TOPIC, "a write's answer went on before Redis said who heard its "
		         "invalidation (said at most once a minute)");
}

/* Tells sender that this node applied its message (the mac's start). */
static void ack(struct cluster *cl, const char *sender, size_t sender_len, const char *mac)
{
	char key[CLUSTER_NAME_MAX + ACK_MAC_LEN + 2];
	if (sender_len >= CLUSTER_NAME_MAX)
		return;
	memcpy(key, sender, sender_len);
	key[sender_len] = ' ';
	memcpy(key + sender_len + 1, mac, ACK_MAC_LEN);
	key[sender_len + 1 + ACK_MAC_LEN] = '\0';
	struct inval *e = inval_new(cl, CLUSTER_ACK, key);
	if (e) {
		e->ack = true;
		queue_push(cl, e);
	}
}

static void on_message(struct cluster *cl, const char *signed_msg, size_t len)
{
	struct inval_msg m;
	enum inval_verdict v = cl_inval_parse(cl->secret, signed_msg, len, cl_wall_ms(), &m);
	if (v == INVAL_FORGED) {
		/* A WARN at most once a minute: a node that publishes these is
		 * not heard, so what is written through it stays served here. */
		double now = clock_mono_ms();
		pthread_mutex_lock(&cl->lock);
		cl->inval_rejected++;
		bool warn = warn_due(&cl->inval_warned_ms, now);
		pthread_mutex_unlock(&cl->lock);
		if (warn)
			log_warn(TOPIC, "ignoring invalidation messages not signed with the cluster "
			         "secret, or expired: writes through their sender are not heard here "
			         "(a node with another LARDER_CLUSTER_SECRET, a larder from before "
			         "2026-11-25, which does not sign them, or someone else publishing)");
		else
			log_debug(TOPIC, "an invalidation message not signed with the cluster secret "
			          "ignored");
		return;
	}
	if (v == INVAL_MALFORMED) {
		log_debug(TOPIC, "malformed invalidation message ignored");
		return;
	}
	size_t self_len = strlen(cl->self.id);
	bool own = m.sender_len == self_len && memcmp(m.sender, cl->self.id, self_len) == 0;
	if (m.bucket_len == strlen(CLUSTER_ACK) && memcmp(m.bucket, CLUSTER_ACK, m.bucket_len) == 0) {
		/* "NODE MAC16": counted when NODE is this node, and a member
		 * sent it. */
		if (!own && m.key_len == self_len + 1 + ACK_MAC_LEN &&
		    memcmp(m.key, cl->self.id, self_len) == 0 && m.key[self_len] == ' ') {
			pthread_mutex_lock(&cl->lock);
			if (is_member(cl, m.sender, m.sender_len))
				pend_acked(cl, m.key + self_len + 1);
			pthread_mutex_unlock(&cl->lock);
		}
		return;
	}
	if (own) { /* our own subscriber counts among those PUBLISH reached */
		pthread_mutex_lock(&cl->lock);
		pend_acked(cl, signed_msg);
		pthread_mutex_unlock(&cl->lock);
		return;
	}
	size_t blen = m.bucket_len, klen = m.key_len;
	char *bk = malloc(blen + klen + 2);
	if (!bk)
		return;
	memcpy(bk, m.bucket, blen);
	bk[blen] = '\0';
	memcpy(bk + blen + 1, m.key, klen);
	bk[blen + 1 + klen] = '\0';
	bool resync = strcmp(bk, CLUSTER_RESYNC) == 0;
	pthread_mutex_lock(&cl->lock);
	cl->received++;
	cl->resyncs += resync;
	pthread_mutex_unlock(&cl->lock);
	if (cl->cb)
		cl->cb(cl->cb_arg, bk, bk + blen + 1);
	free(bk);
	ack(cl, m.sender, m.sender_len, signed_msg); /* applied: the sender may answer its client */
}

/* Whether r answers a PING: ["pong", ""] on a subscribed connection. */
static bool is_pong(const redisReply *r)
{
	if (r->type == REDIS_REPLY_STATUS)
		return strcasecmp(r->str, "PONG") == 0;
	return r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
	       r->element[0]->type == REDIS_REPLY_STRING && strcasecmp(r->element[0]->str, "pong") == 0;
}

static void on_reply(struct cluster *cl, redisReply *r)
{
	if (r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
	    r->element[0]->type == REDIS_REPLY_STRING && r->element[2]->type == REDIS_REPLY_STRING &&
	    strcmp(r->element[0]->str, "message") == 0) {
		on_message(cl, r->element[2]->str, r->element[2]->len);
	} else if (is_pong(r)) {
		/* Every message before it was applied, in order: the reads its PING covers pass. */
		pthread_mutex_lock(&cl->lock);
		cl_bar_pong(&cl->bar);
		pthread_mutex_unlock(&cl->lock);
	}
	/* Anything else: subscribe confirmations. */
}

/* Sends PING on the subscribed connection: a keepalive, or for reads waiting
 * for the barrier (cluster_barrier.c) when they want one; one at a time.
 * woken: the barrier's eventfd was read. Returns false, why filled, when the
 * connection failed. */
static bool send_ping(struct cluster *cl, redisContext *c, bool keepalive, bool woken,
                      char *why, size_t whylen)
{
	pthread_mutex_lock(&cl->lock);
	if (woken)
		cl->bar.woken = false;
	bool send = cl_bar_ping(&cl->bar, keepalive);
	pthread_mutex_unlock(&cl->lock);
	if (!send)
		return true;
	int done = 0;
	redisAppendCommand(c, "PING");
	while (!done)
		if (redisBufferWrite(c, &done) != REDIS_OK) {
			snprintf(why, whylen, "%s", c->errstr);
			return false;
		}
	return true;
}

/* Waits up to ms for cluster_stop; returns true when stopping. */
static bool sub_sleep(struct cluster *cl, int ms)
{
	struct pollfd p = { .fd = cl->wake[0], .events = POLLIN };
	return poll(&p, 1, ms) > 0;
}

static redisContext *sub_open(struct cluster *cl, char *why, size_t whylen)
{
	redisContext *c = cl_redis_open(cl, why, whylen);
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
	/* Reads that asked before this connection's first PING (cluster_barrier
	 * woke nobody while the last connection's was in flight). */
	if (!send_ping(cl, c, false, false, why, whylen))
		return false;
	for (;;) {
		struct pollfd p[3] = { { .fd = c->fd, .events = POLLIN },
		                       { .fd = cl->wake[0], .events = POLLIN },
		                       { .fd = cl->bar_fd, .events = POLLIN } };
		int n = poll(p, 3, (int)cl->ttl_ms);
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
			/* A PING in flight for the barrier probes the connection as well. */
			if (!send_ping(cl, c, true, false, why, whylen))
				return false;
			ping_out = true;
			continue;
		}
		if (p[2].revents) {
			uint64_t asks;
			while (read(cl->bar_fd, &asks, sizeof asks) < 0 && errno == EINTR)
				;
			if (!send_ping(cl, c, false, true, why, whylen))
				return false;
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
		/* Reads that asked while a PING was in flight share the next. */
		if (!send_ping(cl, c, false, false, why, whylen))
			return false;
	}
}

/* Listening from now on, or no longer. What was published while this node
 * was not listening is lost (Redis keeps no history): on each start, the
 * callback hears CLUSTER_RESYNC, before any message that follows it, and
 * before cluster_listening says so. */
static void set_subscribed(struct cluster *cl, bool on, bool again)
{
	if (on && cl->cb)
		cl->cb(cl->cb_arg, CLUSTER_RESYNC, "");
	pthread_mutex_lock(&cl->lock);
	cl->subscribed = on;
	if (!on)
		cl_bar_lost(&cl->bar);
	if (on && again)
		cl->reconnects++;
	cl->resyncs += on;
	pthread_mutex_unlock(&cl->lock);
}

void *cl_subscriber_main(void *arg)
{
	struct cluster *cl = arg;
	assert(cl->magic == CLUSTER_MAGIC);
	pthread_setname_np(pthread_self(), "larder-inval");
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

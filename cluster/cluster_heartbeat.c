/*
 * cluster_heartbeat.c - membership: the heartbeat thread, which keeps this node's
 * entry alive, reads the others' into a new snapshot, sends queued
 * invalidations and flushes the placement directory.
 *
 * Keys. larder:node:<id> = "<advertise>\t<capacity>\t<directory entries>\t
 * <expiry>\t<protocol>\t<mac>" with PX ttl_ms (the third field is
 * informative: the cluster view sums it), and the set larder:nodes of ids.
 * An entry of another protocol (CLUSTER_PROTOCOL; none: 1) is no member,
 * only listed in cl->others and logged: in a rolling upgrade the nodes of
 * each version work as a cluster of their own, and read from S3 what the
 * others hold, rather than send requests the others may misread. Why a set and not
 * SCAN MATCH larder:node:*: SCAN walks the whole keyspace, and the same
 * Redis holds the placement hints (design.md, "Cluster"), possibly
 * millions of keys; reading a set costs the number of members, whatever else Redis holds. The key's TTL
 * is what makes a member live: an id in the set whose key has expired is a
 * dead node, and whoever reads it removes it (SREM). A node that comes back
 * between that read and the SREM is missing from the set for one heartbeat,
 * until its next SADD: harmless, peers just skip it for a moment.
 *
 * Heartbeat thread. One pipelined round trip (SET, SADD, SMEMBERS), one
 * MGET of the members' keys, now and then an SREM, then this node's
 * placement directory changes (cluster/directory.h); between heartbeats it
 * sleeps on cl->cond, which cluster_publish_invalidate signals so queued
 * invalidations go out at once. When Redis does not answer it retries with
 * a growing delay (heartbeat_ms doubling up to 4x).
 */
#include "cluster/cluster_internal.h"

#include <assert.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"
#include "cluster/directory.h"
#include "cluster/redis_util.h"

static int member_cmp(const void *a, const void *b)
{
	return strcmp(((const struct member *)a)->id, ((const struct member *)b)->id);
}

double cl_wall_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/*
 * This node's wall clock against Redis's (TIME), halfway through the
 * round trip that asked: members' entries, invalidations and peer
 * requests are dated by the sender's clock and judged by the receiver's,
 * so a node whose clock is off by more than MEMBER_SKEW_MS has its
 * invalidations dropped and its peer requests refused by the others,
 * silently on their side. Said here, where it can be fixed: a WARN when
 * the offset passes CLOCK_WARN_MS (and an INFO when it is back under), and
 * the offset in the view. A reply that is not TIME's (an ACL without it)
 * leaves the offset unknown.
 */
static void clock_check(struct cluster *cl, const redisReply *t, double sent_ms, double got_ms)
{
	if (t->type != REDIS_REPLY_ARRAY || t->elements != 2 ||
	    t->element[0]->type != REDIS_REPLY_STRING || t->element[1]->type != REDIS_REPLY_STRING)
		return;
	double redis_ms = strtod(t->element[0]->str, NULL) * 1e3 +
	                  strtod(t->element[1]->str, NULL) / 1e3;
	double off = (sent_ms + got_ms) / 2 - redis_ms;
	bool off_now = off > CLOCK_WARN_MS || off < -CLOCK_WARN_MS;
	pthread_mutex_lock(&cl->lock);
	if (off_now && !cl->clock_warned)
		log_warn(TOPIC, "this node's clock is %.1f s %s Redis's: the other nodes drop its "
		         "invalidations and refuse its peer requests past %.0f s; keep clocks in "
		         "step (NTP)", (off < 0 ? -off : off) / 1e3, off < 0 ? "behind" : "ahead of",
		         MEMBER_SKEW_MS / 1e3);
	else if (!off_now && cl->clock_warned)
		log_info(TOPIC, "this node's clock agrees with Redis's again (%.0f ms)", off);
	cl->clock_warned = off_now;
	cl->clock_offset_ms = off;
	cl->clock_known = true;
	pthread_mutex_unlock(&cl->lock);
}

/* Whether id is among the first n of list. */
static bool listed(const struct member *list, size_t n, const char *id)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(list[i].id, id) == 0)
			return true;
	return false;
}

/*
 * The nodes of another protocol this heartbeat read (o[0, n)) replace
 * the last ones; each of the first OTHERS_MAX that was not listed before
 * is logged (a WARN: the
 * cluster is split in two until the upgrade ends), and the end of them
 * once (INFO). Call with cl->lock held.
 */
static void others_install(struct cluster *cl, const struct member *o, size_t n)
{
	for (size_t i = 0; i < n && i < OTHERS_MAX; i++)
		if (!listed(cl->others, cl->n_others, o[i].id))
			log_warn(TOPIC, "node %s (%s) speaks cluster protocol %u, this node %u (another "
			         "larder version): it is no member here until both speak the same: "
			         "nothing is asked of it and no write waits for it, and what it "
			         "holds is read from S3 (docs/cluster.md, \"Rolling upgrades\")",
			         o[i].id, o[i].addr, o[i].protocol, CLUSTER_PROTOCOL);
	if (cl->others_total && !n)
		log_info(TOPIC, "every node speaks cluster protocol %u again", CLUSTER_PROTOCOL);
	cl->n_others = n < OTHERS_MAX ? n : OTHERS_MAX;
	memcpy(cl->others, o, cl->n_others * sizeof *o);
	cl->others_total = n;
}

/*
 * One heartbeat: refresh our key, read the members. Returns the new
 * snapshot, or NULL with why filled when the connection failed (the caller
 * drops it). Malformed entries written by others are skipped, not fatal.
 */
static struct snapshot *heartbeat(struct cluster *cl, redisContext *c, char *why, size_t whylen)
{
	redisReply *set = NULL, *add = NULL, *ids = NULL, *vals = NULL, *clock = NULL;
	const char **argv = NULL;
	size_t *argl = NULL;
	char (*keys)[sizeof cl->node_key] = NULL;
	struct member *others = NULL;
	struct snapshot *s = NULL;

	struct dir_stats ds;
	dir_get_stats(cl->dir, &ds);
	char val[MEMBER_VAL_MAX + 1];
	double now_ms = cl_wall_ms();
	int body = snprintf(val, sizeof val, "%s\t%" PRIu64 "\t%.0f\t%u", cl->node_val,
	                    ds.entries, now_ms + cl->ttl_ms, CLUSTER_PROTOCOL);
	if (body > 0 && (size_t)body + 65 < sizeof val) {
		val[body] = '\t';
		cl_member_mac(cl->secret, cl->self.id, val, (size_t)body, val + body + 1);
	}
	redisAppendCommand(c, "SET %s %s PX %u", cl->node_key, val, cl->ttl_ms);
	redisAppendCommand(c, "SADD " NODES_SET " %s", cl->self.id);
	redisAppendCommand(c, "SMEMBERS " NODES_SET);
	redisAppendCommand(c, "TIME");
	if (redisGetReply(c, (void **)&set) != REDIS_OK ||
	    redisGetReply(c, (void **)&add) != REDIS_OK ||
	    redisGetReply(c, (void **)&ids) != REDIS_OK ||
	    redisGetReply(c, (void **)&clock) != REDIS_OK) {
		snprintf(why, whylen, "%s", c->errstr);
		goto out;
	}
	clock_check(cl, clock, now_ms, cl_wall_ms());
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
	others = calloc(n + 1, sizeof *others);
	if (!argv || !argl || !keys || !others) {
		snprintf(why, whylen, "out of memory");
		goto out;
	}
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		redisReply *e = ids->element[i];
		if (e->type != REDIS_REPLY_STRING || !cl_id_ok(e->str, e->len))
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

	s = cl_snap_new(k + 1);
	if (!s) {
		snprintf(why, whylen, "out of memory");
		goto out;
	}
	size_t live = 0, dead = 0, rejected = 0, n_others = 0;
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
		if (!cl_parse_member(cl, v->str, v->len, now_ms, m)) {
			rejected++;
			rejected_id = id;
		} else if (m->protocol != CLUSTER_PROTOCOL) {
			others[n_others++] = *m;
		} else {
			live++;
		}
	}
	s->m[live] = cl->self;
	s->m[live++].dir_entries = ds.entries;
	s->n = live;
	qsort(s->m, s->n, sizeof s->m[0], member_cmp);
	cl_snap_finish(s, cl->self.id);

	if (dead) {
		argv[0] = "SREM";
		argl[0] = 4;
		argv[1] = NODES_SET;
		argl[1] = strlen(NODES_SET);
		redisReply *r = redisCommandArgv(c, (int)dead + 2, argv, argl);
		if (!r) {
			snprintf(why, whylen, "%s", c->errstr);
			cl_snap_unref(s);
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
	others_install(cl, others, n_others);
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
	if (clock)
		freeReplyObject(clock);
	free(argv);
	free(argl);
	free(keys);
	free(others);
	return s;
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
	struct cluster *cl = arg;
	assert(cl->magic == CLUSTER_MAGIC);
	return !cluster_owner(cl, key, NULL, 0);
}

uint32_t cl_tag_of(uint64_t node_hash)
{
	uint32_t t = (uint32_t)node_hash;
	return t ? t : 1;
}

/* dir_owners.gone: whether no live member has this tag. */
static bool member_gone(void *arg, uint32_t tag)
{
	struct cluster *cl = arg;
	assert(cl->magic == CLUSTER_MAGIC);
	pthread_mutex_lock(&cl->lock);
	const struct snapshot *s = cl->snap;
	bool gone = true;
	for (size_t i = 0; i < s->n && gone; i++)
		gone = cl_tag_of(s->hash[i]) != tag;
	pthread_mutex_unlock(&cl->lock);
	return gone;
}

void *cl_heartbeat_main(void *arg)
{
	struct cluster *cl = arg;
	assert(cl->magic == CLUSTER_MAGIC);
	pthread_setname_np(pthread_self(), "larder-cluster");
	redisContext *c = NULL;
	unsigned long dir_gen = 0;
	unsigned fails = 0;
	/* The first heartbeat, which makes this node a member, waits for the
	 * next second of the wall clock: peer requests dated the second this
	 * node started are refused (cluster_start). */
	double next = clock_mono_ms() + 1e3 - fmod(cl_wall_ms(), 1e3);
	char why[256];

	pthread_mutex_lock(&cl->lock);
	while (!cl->stopping) {
		if (clock_mono_ms() >= next) {
			pthread_mutex_unlock(&cl->lock);
			struct snapshot *s = NULL;
			if (!c)
				c = cl_redis_open(cl, why, sizeof why);
			if (c && !(s = heartbeat(cl, c, why, sizeof why))) {
				redisFree(c);
				c = NULL;
			}
			if (s) {
				pthread_mutex_lock(&cl->lock);
				bool was_up = cl->state == REDIS_UP;
				pthread_mutex_unlock(&cl->lock);
				cl_went_up(cl, s);
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
					cl_went_down(cl, why);
				} else {
					pthread_mutex_lock(&cl->lock);
					cl->heartbeats++;
					pthread_mutex_unlock(&cl->lock);
				}
			} else {
				cl_went_down(cl, why);
				fails++;
				next = clock_mono_ms() + (double)cl->heartbeat_ms * (1u << (fails < 3 ? fails - 1 : 2));
			}
			pthread_mutex_lock(&cl->lock);
			continue;
		}
		if (c && cl->q_head) {
			pthread_mutex_unlock(&cl->lock);
			if (cl_flush_queue(cl, c, why, sizeof why) < 0) {
				redisFree(c);
				c = NULL;
				cl_went_down(cl, why);
				next = clock_mono_ms(); /* reconnect now, then back off */
			}
			pthread_mutex_lock(&cl->lock);
			continue;
		}
		cond_wait_until(cl, next);
	}
	pthread_mutex_unlock(&cl->lock);

	if (c) {
		if (cl_flush_queue(cl, c, why, sizeof why) == 0)
			deregister(cl, c);
		redisFree(c);
	}
	return NULL;
}

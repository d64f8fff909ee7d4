/*
 * cluster_redis.c - the Redis connections of the cluster threads: opening one
 * (timeouts, AUTH, SELECT), and what losing Redis or getting it back does
 * to the member set (alone while it is down).
 */
#include "cluster/cluster_internal.h"

#include <stdio.h>
#include <sys/time.h>

#include "base/clock.h"
#include "base/log.h"

void cl_went_down(struct cluster *cl, const char *why)
{
	struct snapshot *alone = cl_snap_alone(cl);
	pthread_mutex_lock(&cl->lock);
	if (cl->state == REDIS_UP)
		log_warn(TOPIC, "redis %s:%d lost (%s): working alone", cl->host, cl->port, why);
	else if (cl->state == REDIS_UNKNOWN)
		log_warn(TOPIC, "redis %s:%d unreachable (%s): working alone until it answers",
		         cl->host, cl->port, why);
	cl->state = REDIS_DOWN;
	if (alone)
		cl_snap_install(cl, alone, false);
	pthread_mutex_unlock(&cl->lock);
}

/* Called after a successful heartbeat with the members just read. */
void cl_went_up(struct cluster *cl, struct snapshot *s)
{
	pthread_mutex_lock(&cl->lock);
	enum redis_state was = cl->state;
	cl->state = REDIS_UP;
	if (was != REDIS_UP) /* its entry just landed: cluster_joining a while yet */
		cl->up_since_ms = clock_mono_ms();
	if (was == REDIS_DOWN)
		cl->reconnects++;
	cl_snap_install(cl, s, was == REDIS_UP);
	if (was != REDIS_UP)
		log_info(TOPIC, "%s redis %s:%d as %s: %zu member%s",
		         was == REDIS_DOWN ? "back on" : "joined the cluster via", cl->host,
		         cl->port, cl->self.id, cl->snap->n, cl->snap->n == 1 ? "" : "s");
	pthread_mutex_unlock(&cl->lock);
}

/* A blocking connection with IO_TIMEOUT_MS for connect and commands,
 * authenticated and on the right database; NULL with why filled. */
redisContext *cl_redis_open(struct cluster *cl, char *why, size_t whylen)
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

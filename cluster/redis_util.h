/*
 * redis_util.h - small helpers shared by the cluster's blocking Redis users
 * (cluster/cluster_*.c, cluster/directory.c).
 */
#ifndef LARDER_REDIS_UTIL_H
#define LARDER_REDIS_UTIL_H

#include <hiredis/hiredis.h>
#include <stdio.h>

/* Reads and discards the replies to n pipelined commands. Returns 0, or -1
 * with why filled when the connection failed (replies left unread). */
static inline int redis_read_replies(redisContext *c, size_t n, char *why, size_t whylen)
{
	for (size_t i = 0; i < n; i++) {
		redisReply *r;
		if (redisGetReply(c, (void **)&r) != REDIS_OK) {
			snprintf(why, whylen, "%s", c->errstr);
			return -1;
		}
		freeReplyObject(r);
	}
	return 0;
}

#endif

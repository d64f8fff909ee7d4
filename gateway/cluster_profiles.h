/*
 * cluster_profiles.h - access profiles across a cluster (profiles.h).
 *
 * A profile started on one node (the origin) records the reads every node
 * serves: its start and stop, and each other node's first reads of it, are
 * messages on the cluster's invalidation channel (Redis larder:invalidate)
 * under the pseudo-bucket CLUSTER_PROFILE, with the key
 *   "start\nORIGIN\nNAME\nkey|tag\nVALUE"   the others start a relay of it
 *   "stop\nORIGIN\nNAME"                     they drop it
 *   "read\nORIGIN\nNAME\nUNIX\nBUCKET\nKEY"   a relay's first read, sent to all;
 *                                           the origin adds it to NAME
 * UNIX is when the read began, in unix seconds (each node's monotonic
 * clock is its own; a finite number), so the origin orders every node's
 * reads together.
 */
#ifndef LARDER_CLUSTER_PROFILES_H
#define LARDER_CLUSTER_PROFILES_H

#include "gateway/server.h"

#define CLUSTER_PROFILE "!profile"
#define CLUSTER_PROFILE_MSG_MAX 2048 /* bytes with the NUL; an S3 key is at most 1024 */

/* A message's fields. */
enum profile_msg_kind {
	PROFILE_MSG_START,
	PROFILE_MSG_STOP,
	PROFILE_MSG_READ
};
struct profile_msg {
	enum profile_msg_kind kind;
	const char *origin, *name;
	const char *key_id, *tag; /* start: one of them, the other NULL */
	double unix_s;            /* read: UNIX */
	const char *bucket, *key; /* read */
};
/* Writes m's message into buf (cap bytes), as snprintf (its length). */
int cluster_profiles_format(char *buf, size_t cap, const struct profile_msg *m);
/* Splits the message in buf in place into *m, whose strings then point
 * into buf; false when it is malformed (m is then undefined). */
bool cluster_profiles_parse(char *buf, struct profile_msg *m);

/* Profile name started (key_id or tag) / stopped on this node: tell the
 * others. No-ops outside a cluster. */
void cluster_profiles_started(struct gw *gw, const char *name, const char *key_id,
                              const char *tag);
void cluster_profiles_stopped(struct gw *gw, const char *name);
/* A CLUSTER_PROFILE message from another node. */
void cluster_profiles_message(struct gw *gw, const char *msg);
/* The profiles' relay hook (profiles_on_relay; arg is the gw). */
void cluster_profiles_relay(void *arg, const char *origin, const char *name, const char *bucket,
                            const char *key, double started);

#endif

/*
 * purge_msg.h - a purge (POST /admin/purge) heard from another node of a
 * cluster: the key of a CLUSTER_PURGE message, "k" (a key) or "p" (a
 * prefix), then "BUCKET/WHAT". WHAT is the rest of the message and may
 * hold further slashes; BUCKET is 1-63 bytes before the first slash.
 */
#ifndef LARDER_PURGE_MSG_H
#define LARDER_PURGE_MSG_H

#include <stdbool.h>

struct purge_msg {
	char bucket[64];  /* S3 bucket names are 3-63 bytes */
	const char *what; /* the key or prefix: points into the message */
	bool key;         /* what is a key, else a prefix */
};

/* Reads msg (NULL: none) into *p; false when it is not "k|p BUCKET/WHAT". */
bool purge_msg_parse(const char *msg, struct purge_msg *p);

#endif

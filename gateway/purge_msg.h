/*
 * purge_msg.h - a purge (POST /admin/purge) heard from another node of a
 * cluster: the key of a CLUSTER_PURGE message, "k" (a key) or "p" (a
 * prefix), then "BUCKET/WHAT". WHAT is the rest of the message and may
 * hold further slashes; BUCKET is 1-255 bytes before the first slash
 * (POST /admin/purge takes the names s3_bucket_name_ok does: 3-255 bytes,
 * as S3 kept buckets named before 2018 with up to 255).
 */
#ifndef LARDER_PURGE_MSG_H
#define LARDER_PURGE_MSG_H

#include <stdbool.h>

struct purge_msg {
	char bucket[256]; /* as struct s3_request's */
	const char *what; /* the key or prefix: points into the message */
	bool key;         /* what is a key, else a prefix */
};

/* Reads msg (NULL: none) into *p; false when it is not "k|p BUCKET/WHAT". */
bool purge_msg_parse(const char *msg, struct purge_msg *p);

#endif

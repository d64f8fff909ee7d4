/*
 * purge_msg.c - a purge heard from another node (see purge_msg.h).
 */
#include "gateway/purge_msg.h"

#include <stddef.h>
#include <string.h>

bool purge_msg_parse(const char *msg, struct purge_msg *p)
{
	const char *slash = msg ? strchr(msg, '/') : NULL;
	size_t bl = slash ? (size_t)(slash - msg - 1) : 0;
	if (!slash || (msg[0] != 'k' && msg[0] != 'p') || bl == 0 || bl >= sizeof p->bucket)
		return false;
	memcpy(p->bucket, msg + 1, bl);
	p->bucket[bl] = '\0';
	p->what = slash + 1;
	p->key = msg[0] == 'k';
	return true;
}

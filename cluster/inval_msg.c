/*
 * inval_msg.c - reading a message from larder:invalidate (the format and
 * its trust are described in cluster_inval.c): anyone who can PUBLISH to
 * Redis chooses these bytes.
 */
#include "cluster/cluster_internal.h"

#include <stdlib.h>
#include <string.h>

#include "base/buf.h"

/* The part of a signed message after its mac and expiry, or NULL when it
 * is not signed with our secret or has expired. */
static const char *verified(const char *secret, const char *msg, size_t *len, double now_ms)
{
	if (*len < 66 || msg[64] != '\n')
		return NULL;
	char want[65];
	if (cl_inval_mac(secret, msg + 65, *len - 65, want) != 0 || !ct_equal(want, 64, msg, 64))
		return NULL;
	const char *nl = memchr(msg + 65, '\n', *len - 65);
	char exp[24];
	size_t el = nl ? (size_t)(nl - (msg + 65)) : 0;
	if (!nl || el == 0 || el >= sizeof exp)
		return NULL;
	memcpy(exp, msg + 65, el);
	exp[el] = '\0';
	/* A sender sets now + INVAL_VALID_MS: an expiry further ahead than
	 * that and the skew between clocks (or "inf", "nan") would make the
	 * message good for ever, to replay at will. */
	char *end;
	double expiry = strtod(exp, &end);
	if (*end || !(expiry + MEMBER_SKEW_MS >= now_ms) ||
	    !(expiry <= now_ms + INVAL_VALID_MS + MEMBER_SKEW_MS))
		return NULL;
	*len -= (size_t)(nl + 1 - msg);
	return nl + 1;
}

enum inval_verdict cl_inval_parse(const char *secret, const char *signed_msg, size_t len,
                                  double now_ms, struct inval_msg *out)
{
	const char *msg = verified(secret, signed_msg, &len, now_ms);
	if (!msg)
		return INVAL_FORGED;
	const char *nl1 = memchr(msg, '\n', len);
	const char *nl2 = nl1 ? memchr(nl1 + 1, '\n', len - (size_t)(nl1 + 1 - msg)) : NULL;
	if (!nl2 || nl2 == nl1 + 1)
		return INVAL_MALFORMED;
	out->sender = msg;
	out->sender_len = (size_t)(nl1 - msg);
	out->bucket = nl1 + 1;
	out->bucket_len = (size_t)(nl2 - nl1 - 1);
	out->key = nl2 + 1;
	out->key_len = len - (size_t)(nl2 + 1 - msg);
	return INVAL_OK;
}

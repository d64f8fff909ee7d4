/*
 * cluster_trust.c - the cluster secret: the HMAC that signs membership entries
 * and requests between nodes, and the checks an entry read back from Redis
 * must pass to count as a member.
 *
 * Trust. Anyone who can write to Redis can write a larder:node:<id> key
 * (see cluster_heartbeat.c), so an entry counts only when its mac is hex
 * HMAC-SHA256(cluster secret, "larder-member-v1\n" id "\n" everything
 * before the last tab), and its expiry (unix milliseconds: written as
 * now + ttl_ms) has not passed by more than MEMBER_SKEW_MS. Without the secret nobody can add a member,
 * change a member's address or capacity, or keep a copied entry alive for
 * longer than its expiry. Other entries are counted (members_rejected) and
 * logged, and ignored: no request goes to them.
 *
 * Capacity travels as "%.17g", which round-trips a double exactly: every
 * node must compute bit-identical weights or they would disagree on owners.
 */
#include "cluster/cluster_internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "base/buf.h"
#include "base/sha256.h"

/* An id as read back from Redis: something we could have written. */
bool cl_id_ok(const char *s, size_t len)
{
	if (len == 0 || len >= CLUSTER_NAME_MAX)
		return false;
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)s[i] <= ' ' || s[i] == 0x7f)
			return false;
	return true;
}

void cluster_mac(const char *secret, const void *msg, size_t len, char out[65])
{
	unsigned char md[32];
	unsigned mdlen = sizeof md;
	HMAC(sha256_md(), secret, (int)strlen(secret), msg, len, md, &mdlen);
	hex_encode(md, sizeof md, out);
}

int cl_inval_mac(const char *secret, const char *body, size_t len, char out[65])
{
	static const char tag[] = "larder-inval-v1\n";
	struct buf m;
	int rc = 0;
	buf_init(&m, sizeof tag + len);
	if (buf_append(&m, tag, sizeof tag - 1) != 0 || buf_append(&m, body, len) != 0) {
		/* Out of memory. Not 64 zeros, which a forged message could carry. */
		out[0] = '\0';
		rc = -ENOMEM;
	} else {
		cluster_mac(secret, m.p, m.len, out);
	}
	buf_fini(&m);
	return rc;
}

/* hex HMAC-SHA256(secret, "larder-member-v1\n" id "\n" body): the mac of
 * a membership entry (see Trust above). */
void cl_member_mac(const char *secret, const char *id, const char *body, size_t len,
                   char out[65])
{
	char msg[CLUSTER_NAME_MAX + MEMBER_VAL_MAX + 32];
	int n = snprintf(msg, sizeof msg, "larder-member-v1\n%s\n%.*s", id, (int)len, body);
	cluster_mac(secret, msg, n < 0 ? 0 : (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1,
	            out);
	explicit_bzero(msg, sizeof msg);
}

/* "<addr>\t<capacity>\t<directory entries>\t<expiry>\t<protocol>\t<mac>"
 * (or without "\t<protocol>": protocol 1, a larder from before the field),
 * written by a node with our secret and not expired, into m (whose id is
 * set); false when forged, stale or malformed. */
bool cl_parse_member(const struct cluster *cl, const char *v, size_t len, double now_ms,
                     struct member *m)
{
	if (len > MEMBER_VAL_MAX || strlen(v) != len)
		return false;
	const char *last = strrchr(v, '\t');
	char want[65];
	if (!last || strlen(last + 1) != 64)
		return false;
	cl_member_mac(cl->secret, m->id, v, (size_t)(last - v), want);
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
	/* Bytes of cache: past 2^62 (4 EiB) it is no cache, and would not fit
	 * the integers it is shown as (GET /admin/cluster). */
	if (errno || end == tab + 1 || !(m->cap > 0) || !(m->cap < 0x1p62) || *end != '\t')
		return false;
	const char *p = end + 1;
	m->dir_entries = strtoull(p, &end, 10);
	if (errno || end == p || *end != '\t')
		return false;
	p = end + 1;
	double expiry = strtod(p, &end);
	if (errno || end == p || (end != last && *end != '\t'))
		return false;
	/* Entries from before the protocol field are protocol 1. */
	m->protocol = 1;
	if (end != last) {
		p = end + 1;
		unsigned long proto = *p >= '0' && *p <= '9' ? strtoul(p, &end, 10) : 0;
		if (errno || proto == 0 || proto > 1000000 || end != last)
			return false;
		m->protocol = (unsigned)proto;
	}
	return now_ms <= expiry + MEMBER_SKEW_MS;
}

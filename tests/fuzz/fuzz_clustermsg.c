/*
 * fuzz_clustermsg.c - what a cluster node reads from Redis, which anybody
 * who can write to that Redis chooses: a message on larder:invalidate
 * (cluster/inval_msg.c, cl_inval_parse: invalidations, purges, resyncs,
 * pins ending, access profiles) and a membership entry read back at each
 * heartbeat (cluster/cluster_trust.c, cl_parse_member).
 *
 * Each input is read three ways: as received (a forgery: refused); as the
 * body of an invalidation message signed with the secret; as the fields
 * of a membership entry signed with it. Checks: the parts of a message
 * are what was signed, split at its first two newlines after the expiry;
 * a changed mac or a later clock refuses it; a member taken has an
 * address without tabs and a positive, finite capacity.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/cluster_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define SECRET "fuzz-cluster-secret"
#define NOW_MS 1.8e12

static void fail(const char *what)
{
	fprintf(stderr, "%s\n", what);
	abort();
}

static void as_message(const char *body, size_t n)
{
	char *msg = malloc(n + 65);
	if (!msg || cl_inval_mac(SECRET, body, n, msg) != 0) {
		free(msg);
		return;
	}
	msg[64] = '\n';
	memcpy(msg + 65, body, n);
	struct inval_msg m;
	enum inval_verdict v = cl_inval_parse(SECRET, msg, n + 65, NOW_MS, &m);
	const char *nl = memchr(body, '\n', n);
	if (v == INVAL_OK) {
		if (!nl)
			fail("a message without an expiry taken");
		const char *rest = msg + 65 + (nl + 1 - body), *end = msg + 65 + n;
		if (m.sender != rest || memchr(m.sender, '\n', m.sender_len) ||
		    m.bucket != m.sender + m.sender_len + 1 || m.bucket_len == 0 ||
		    memchr(m.bucket, '\n', m.bucket_len) || m.key != m.bucket + m.bucket_len + 1 ||
		    m.key + m.key_len != end)
			fail("a message's parts are not what was signed");
		/* Expired later on; forged with another mac. */
		char *end_num;
		double expiry = strtod(body, &end_num);
		double later = nextafter(expiry + MEMBER_SKEW_MS, INFINITY);
		if (isfinite(expiry) &&
		    cl_inval_parse(SECRET, msg, n + 65, later, &m) != INVAL_FORGED)
			fail("an expired message taken");
		msg[(size_t)n % 64] ^= 1;
		if (cl_inval_parse(SECRET, msg, n + 65, NOW_MS, &m) != INVAL_FORGED)
			fail("a message with a changed mac taken");
		if (cl_inval_parse("another secret", msg, n + 65, NOW_MS, &m) != INVAL_FORGED)
			fail("a message signed with another secret taken");
	} else if (v == INVAL_MALFORMED && !nl) {
		fail("malformed, but the expiry did not parse");
	}
	free(msg);
}

static void as_member(const char *body, size_t n)
{
	if (n > MEMBER_VAL_MAX)
		return;
	static struct cluster cl; /* only its secret is read */
	snprintf(cl.secret, sizeof cl.secret, "%s", SECRET);
	char *v = malloc(n + 66);
	if (!v)
		return;
	memcpy(v, body, n);
	v[n] = '\t';
	cl_member_mac(SECRET, "node-b", body, n, v + n + 1);
	struct member m;
	memset(&m, 0, sizeof m);
	snprintf(m.id, sizeof m.id, "node-b");
	if (cl_parse_member(&cl, v, n + 65, NOW_MS, &m)) {
		if (!m.addr[0] || strchr(m.addr, '\t') || !(m.cap > 0) || !(m.cap < 0x1p62))
			fail("a member taken with no address or a bad capacity");
		if (m.protocol == 0)
			fail("a member taken with protocol 0");
		/* Another node's id: its mac does not match. */
		snprintf(m.id, sizeof m.id, "node-c");
		if (cl_parse_member(&cl, v, n + 65, NOW_MS, &m))
			fail("an entry taken for another node's id");
	}
	free(v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > INVAL_MSG_MAX + 64)
		return 0;
	/* As received: nobody with the secret signed it (the seeds are
	 * bodies, not signed messages). */
	struct inval_msg m;
	if (cl_inval_parse(SECRET, (const char *)data, size, NOW_MS, &m) != INVAL_FORGED)
		fail("an unsigned message taken");
	as_message((const char *)data, size);
	as_member((const char *)data, size);
	return 0;
}

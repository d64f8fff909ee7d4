/* peer.c - signing and checking requests between cluster nodes (peer.h). */
#include "cluster/peer.h"

#include <errno.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/buf.h"
#include "base/fnv.h"
#include "cluster/cluster.h"

/* Recently seen nonces, in a hash table of fixed size: a nonce is looked
 * for in the few slots its hash names. A nonce older than the skew window
 * is refused by its date anyway, so a slot may be reused once that old. */
#define NONCES 65536
#define PROBES 8

static struct {
	pthread_mutex_t lock;
	char nonce[NONCES][33];
	time_t when[NONCES];
} seen = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* The headers that change the answer to a GET, or what the node asked
 * does for it (X-Larder-Pin: it holds the chunk), signed with it (peer.h). */
static const char *const bound[] = { "Range", "If-Match", "If-None-Match", "If-Modified-Since",
	"If-Unmodified-Since", "X-Larder-Pin" };
#define N_BOUND (sizeof bound / sizeof bound[0])

static void mac(const char *secret, const char *method, const char *path, const char *date,
                const char *node, const char *target, const char *nonce, const char *hop,
                peer_header_fn header, void *arg, char out[65])
{
	struct buf msg;
	buf_init(&msg, 64 * 1024);
	buf_printf(&msg, "larder-peer-v3\n%s\n%s\n%s\n%s\n%s\n%s\n%s", method, path, date, node,
	           target, nonce, hop);
	for (size_t i = 0; i < N_BOUND; i++) {
		const char *v = header(arg, bound[i]);
		buf_printf(&msg, "\n%s", v ? v : "");
	}
	cluster_mac(secret, buf_cstr(&msg), msg.len, out);
	buf_fini(&msg);
}

static const char *hdrs_header(void *h, const char *name)
{
	return hdrs_get(h, name);
}

int peer_sign(const char *secret, const char *node_id, const char *target, const char *method,
              const char *path, unsigned hop, time_t now, struct hdrs *h)
{
	unsigned char raw[16];
	char nonce[33], date[24], hops[8], sig[65];
	if (RAND_bytes(raw, sizeof raw) != 1)
		return -EIO;
	hex_encode(raw, sizeof raw, nonce);
	snprintf(date, sizeof date, "%lld", (long long)now);
	snprintf(hops, sizeof hops, "%u", hop);
	mac(secret, method, path, date, node_id, target, nonce, hops, hdrs_header, h, sig);
	int rc = hdrs_add(h, "X-Larder-Peer", node_id);
	rc = rc ? rc : hdrs_add(h, "X-Larder-Peer-Date", date);
	rc = rc ? rc : hdrs_add(h, "X-Larder-Peer-Nonce", nonce);
	rc = rc ? rc : hdrs_add(h, "X-Larder-Peer-Hop", hops);
	rc = rc ? rc : hdrs_add(h, "X-Larder-Peer-Auth", sig);
	return rc;
}

/* True when the nonce was already used; records it otherwise. */
static bool replayed(const char *nonce, time_t now)
{
	uint64_t h = fnv1a64(nonce);
	bool dup = false;
	size_t victim = h % NONCES;
	pthread_mutex_lock(&seen.lock);
	for (size_t k = 0; k < PROBES && !dup; k++) {
		size_t i = (h + k) % NONCES;
		bool fresh = seen.when[i] && now - seen.when[i] <= 2 * PEER_SKEW_S;
		if (fresh && strcmp(seen.nonce[i], nonce) == 0)
			dup = true;
		else if (!fresh || seen.when[i] < seen.when[victim])
			victim = i;
	}
	if (!dup) {
		snprintf(seen.nonce[victim], sizeof seen.nonce[0], "%s", nonce);
		seen.when[victim] = now;
	}
	pthread_mutex_unlock(&seen.lock);
	return dup;
}

int peer_verify(const char *secret, const char *self, const char *method, const char *path,
                peer_header_fn header, void *arg, time_t now, unsigned *hop_out, char *why,
                size_t whylen)
{
	if (!secret || !self) {
		snprintf(why, whylen, "this node is not in a cluster");
		return -1;
	}
	const char *node = header(arg, "X-Larder-Peer");
	const char *date = header(arg, "X-Larder-Peer-Date");
	const char *nonce = header(arg, "X-Larder-Peer-Nonce");
	const char *hop = header(arg, "X-Larder-Peer-Hop");
	const char *sig = header(arg, "X-Larder-Peer-Auth");
	const char *host = header(arg, "Host");
	if (!node || !date || !nonce || !hop || !sig || strlen(nonce) != 32 ||
	    strspn(nonce, "0123456789abcdef") != 32 || strlen(sig) != 64) {
		snprintf(why, whylen, "incomplete peer headers");
		return -1;
	}
	char *end;
	long long t = strtoll(date, &end, 10);
	unsigned long h = strtoul(hop, NULL, 10);
	/* Compared without a subtraction that a date near LLONG_MIN, which
	 * anybody may send, would overflow. */
	if (*end || end == date || t < (long long)now - PEER_SKEW_S ||
	    t > (long long)now + PEER_SKEW_S) {
		snprintf(why, whylen, "peer request dated %s, too far from now", date);
		return -1;
	}
	if (h < 1 || h > PEER_MAX_HOP) {
		snprintf(why, whylen, "peer hop %s out of range", hop);
		return -1;
	}
	/* The Host picks the bucket of a virtual-hosted request: it must be
	 * this node, which the signature names. */
	if (!host || strcasecmp(host, self) != 0) {
		snprintf(why, whylen, "peer request for %.64s, not this node", host ? host : "?");
		return -1;
	}
	char want[65];
	mac(secret, method, path, date, node, self, nonce, hop, header, arg, want);
	if (!ct_equal(want, 64, sig, 64)) {
		snprintf(why, whylen, "peer signature does not match (wrong cluster secret, another "
		         "node's request, or changed headers)");
		return -1;
	}
	/* Only a verified request may take a nonce slot: forgeries cannot
	 * flush the table. */
	if (replayed(nonce, now)) {
		snprintf(why, whylen, "peer request replayed");
		return -1;
	}
	*hop_out = (unsigned)h;
	return 0;
}

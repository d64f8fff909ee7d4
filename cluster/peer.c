/* peer.c - signing and checking requests between cluster nodes (peer.h). */
#include "cluster/peer.h"

#include <errno.h>
#include <limits.h>
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

/* The nonces of the requests taken, in a ring in the order they came, with
 * a hash index over it (linear probing, twice the ring's size). A request
 * dated more than PEER_SKEW_S ago is refused by its date, so its nonce is
 * dropped from the ring's oldest end once that old. A nonce forgotten
 * sooner (the ring full, or seen by the process before this one) must not
 * become good again: floor is the latest date of a nonce forgotten while
 * its request could still be taken, and a request dated at or before it
 * is refused. Requests arrive about in the order of their dates, so a full
 * ring forgets nonces NONCES requests old: only at more than NONCES peer
 * requests per skew window (about 2,000 a second) does floor come near
 * now, and only then are requests refused for their date. A refusal costs
 * the asker an S3 read (gateway/fetch.c). */
#define NONCES 65536
#define SLOTS (2 * NONCES)

static struct {
	pthread_mutex_t lock;
	long long floor;
	size_t head, count; /* the ring: count nonces from head on */
	struct seen_nonce {
		char nonce[33];
		uint32_t home; /* its slot by hash */
		long long date;
	} ring[NONCES];
	uint32_t slot[SLOTS]; /* 1 + a position in ring, or 0 */
} seen = { .lock = PTHREAD_MUTEX_INITIALIZER, .floor = LLONG_MIN };

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

void peer_begin(time_t now)
{
	pthread_mutex_lock(&seen.lock);
	if (seen.floor < (long long)now)
		seen.floor = now;
	pthread_mutex_unlock(&seen.lock);
}

/* Drops the ring's oldest nonce from the index (backward-shift deletion:
 * every entry stays reachable from its home slot without tombstones). */
static void forget_oldest(void)
{
	const struct seen_nonce *n = &seen.ring[seen.head];
	size_t i = n->home;
	while (seen.slot[i] != seen.head + 1)
		i = (i + 1) % SLOTS;
	for (size_t j = (i + 1) % SLOTS; seen.slot[j]; j = (j + 1) % SLOTS) {
		size_t home = seen.ring[seen.slot[j] - 1].home;
		/* The entry at j may move to i unless its home lies in (i, j]. */
		bool stays = i < j ? home > i && home <= j : home > i || home <= j;
		if (!stays) {
			seen.slot[i] = seen.slot[j];
			i = j;
		}
	}
	seen.slot[i] = 0;
	seen.head = (seen.head + 1) % NONCES;
	seen.count--;
}

/* True when a request signed at date with nonce may have been taken
 * already; records the nonce otherwise. */
static bool replayed(const char *nonce, long long date, time_t now)
{
	uint32_t home = (uint32_t)(fnv1a64(nonce) % SLOTS);
	bool dup = false;
	pthread_mutex_lock(&seen.lock);
	while (seen.count && seen.ring[seen.head].date < (long long)now - PEER_SKEW_S)
		forget_oldest();
	size_t i = home;
	if (date <= seen.floor)
		dup = true;
	for (; !dup && seen.slot[i]; i = (i + 1) % SLOTS)
		dup = strcmp(seen.ring[seen.slot[i] - 1].nonce, nonce) == 0;
	if (!dup) {
		if (seen.count == NONCES) {
			if (seen.ring[seen.head].date > seen.floor)
				seen.floor = seen.ring[seen.head].date;
			forget_oldest();
			for (i = home; seen.slot[i]; i = (i + 1) % SLOTS)
				;
		}
		size_t pos = (seen.head + seen.count++) % NONCES;
		struct seen_nonce *n = &seen.ring[pos];
		snprintf(n->nonce, sizeof n->nonce, "%s", nonce);
		n->home = home;
		n->date = date;
		seen.slot[i] = (uint32_t)pos + 1;
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
	/* Digits only: strtoul would take "1x" and "-18446744073709551615" for 1. */
	unsigned long h = hop[0] && strspn(hop, "0123456789") == strlen(hop) && strlen(hop) < 4
	                  ? strtoul(hop, NULL, 10) : 0;
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
	if (replayed(nonce, t, now)) {
		snprintf(why, whylen, "peer request replayed, or dated before this node forgot nonces "
		         "(a restart, or more than it can hold)");
		return -1;
	}
	*hop_out = (unsigned)h;
	return 0;
}

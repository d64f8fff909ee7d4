/*
 * fuzz_peerauth.c - the check a node makes of a request from another node
 * of its cluster (cluster/peer.c, peer_verify): its X-Larder-Peer-*
 * headers, Host and the headers the signature binds come from whoever
 * connects to the client port.
 *
 * Each input is read two ways. As header lines ("Name: value") sent to
 * the node: no secret signed them, so they are refused. As the fields of a
 * request another node signs (peer_sign) and this node checks, one a line:
 * method, path, asker's id, Host, then Range, If-Match, If-None-Match,
 * If-Modified-Since, If-Unmodified-Since, X-Larder-Pin ("" is absent), the
 * hop, and how far this node's clock is ahead (seconds). Checks: a request
 * signed for this node, at a hop it takes and within the skew is taken
 * once, and refused when replayed, sent to another node, or with one of
 * the bound headers changed.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/hdrs.h"
#include "cluster/peer.h"
#include "fuzz_text.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define SECRET "fuzz-peer-secret"
#define SELF "node-a.example:8080"
#define BASE_NOW 1800000000

static const char *const bound[] = { "Range", "If-Match", "If-None-Match", "If-Modified-Since",
	"If-Unmodified-Since", "X-Larder-Pin" };
#define N_BOUND (sizeof bound / sizeof bound[0])

static const char *get(void *h, const char *name)
{
	return hdrs_get(h, name);
}

static int verify(struct hdrs *h, const char *method, const char *path, time_t now,
                  unsigned *hop)
{
	char why[160];
	return peer_verify(SECRET, SELF, method, path, get, h, now, hop, why, sizeof why);
}

static void fail(const char *what, char **f)
{
	fprintf(stderr, "%s: %s %s from %s to %s\n", what, f[0], f[1], f[2], f[3]);
	abort();
}

/* A copy of h with name's value changed (added when absent). */
static void changed(const struct hdrs *h, const char *name, struct hdrs *out)
{
	hdrs_init(out);
	const char *old = hdrs_get(h, name);
	char v[512];
	snprintf(v, sizeof v, "%sx", old ? old : "");
	for (size_t i = 0; i < h->n; i++)
		if (strcasecmp(h->v[i].name, name) != 0)
			hdrs_add(out, h->v[i].name, h->v[i].value);
	hdrs_add(out, name, v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* The clock moves a second every 1,024 inputs: the nonces of 61
	 * seconds (the skew both ways) stay under the 65,536 the node keeps,
	 * so a fresh request is never refused for a nonce it forgot. */
	static unsigned long runs;
	time_t now = BASE_NOW + (time_t)(runs++ / 1024);
	char *s = fz_cstr(data, size, 4096);
	if (!s)
		return 0;
	unsigned hop = 0;

	/* As sent by anybody. */
	struct hdrs raw;
	hdrs_init(&raw);
	for (const char *p = s; *p;) {
		size_t len = strcspn(p, "\n");
		hdrs_add_line(&raw, p, len);
		p += len + (p[len] == '\n');
	}
	if (verify(&raw, "GET", "/b/k", now, &hop) == 0)
		fail("unsigned headers taken", (char *[]){ "GET", "/b/k", "?", "?" });
	hdrs_fini(&raw);

	/* As signed by a node with the secret. */
	char *f[12];
	fz_split(s, f, 12);
	struct hdrs h;
	hdrs_init(&h);
	hdrs_add(&h, "Host", f[3]);
	for (size_t i = 0; i < N_BOUND; i++)
		if (*f[4 + i])
			hdrs_add(&h, bound[i], f[4 + i]);
	unsigned sign_hop = (unsigned)strtoul(f[10], NULL, 10);
	long ahead = strtol(f[11], NULL, 10) % 64;
	if (peer_sign(SECRET, f[2], f[3], f[0], f[1], sign_hop, now, &h) == 0) {
		time_t vnow = now + ahead;
		int rc = verify(&h, f[0], f[1], vnow, &hop);
		/* Signed for this node's address as it advertises it. */
		bool good = sign_hop >= 1 && sign_hop <= PEER_MAX_HOP && strcmp(f[3], SELF) == 0 &&
		            ahead >= -PEER_SKEW_S && ahead <= PEER_SKEW_S;
		if (good && (rc != 0 || hop != sign_hop))
			fail("a good request refused", f);
		if (!good && rc == 0)
			fail("a request taken at a wrong hop, node or time", f);
		if (rc == 0 && verify(&h, f[0], f[1], vnow, &hop) == 0)
			fail("a replayed request taken", f);
		for (size_t i = 0; i <= N_BOUND; i++) {
			struct hdrs c;
			changed(&h, i < N_BOUND ? bound[i] : "Host", &c);
			if (verify(&c, f[0], f[1], vnow, &hop) == 0)
				fail("a request with a changed header taken", f);
			hdrs_fini(&c);
		}
	}
	hdrs_fini(&h);
	free(s);
	return 0;
}

/* test_peer.c - requests between nodes (cluster/peer.h): a signed request
 * is taken once, never again after its nonce had to be forgotten, and
 * never when it is dated before the node started. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/hdrs.h"
#include "cluster/cluster.h"
#include "cluster/peer.h"

#define SECRET "the-cluster-secret-of-this-test"
#define SELF "10.0.0.2:9000"
#define PATH "/bucket/some/key"

static const char *get(void *h, const char *name)
{
	return hdrs_get(h, name);
}

/* A GET of PATH signed at date by node "asker", in h (initialised). */
static void sign(struct hdrs *h, time_t date)
{
	hdrs_init(h);
	assert_int_equal(hdrs_add(h, "Host", SELF), 0);
	assert_int_equal(hdrs_add(h, "Range", "bytes=0-99"), 0);
	assert_int_equal(peer_sign(SECRET, "asker", SELF, "GET", PATH, 1, date, h), 0);
}

/* 0 when this node (SELF) takes h at time now. */
static int verify(struct hdrs *h, time_t now)
{
	char why[160];
	unsigned hop = 0;
	return peer_verify(SECRET, SELF, "GET", PATH, get, h, now, &hop, why, sizeof why);
}

static void test_taken_once(void **state)
{
	(void)state;
	time_t now = time(NULL);
	struct hdrs h;
	sign(&h, now);
	assert_int_equal(verify(&h, now), 0);
	assert_int_equal(verify(&h, now), -1);
	assert_int_equal(verify(&h, now + 5), -1);
	hdrs_fini(&h);
}

/* More requests than the node can remember within the skew window: the
 * first ones' nonces are forgotten, and none may be taken again. */
static void test_replay_after_the_table_overflowed(void **state)
{
	(void)state;
	enum { FIRST = 1000 };
	static struct hdrs first[FIRST];
	time_t now = time(NULL) + 100;
	for (int i = 0; i < FIRST; i++) {
		sign(&first[i], now);
		assert_int_equal(verify(&first[i], now), 0);
	}
	for (int i = 0; i < 70000; i++) {
		struct hdrs h;
		sign(&h, now);
		verify(&h, now);
		hdrs_fini(&h);
	}
	int taken = 0;
	for (int i = 0; i < FIRST; i++) {
		taken += verify(&first[i], now) == 0;
		hdrs_fini(&first[i]);
	}
	assert_int_equal(taken, 0);
	/* A request signed later is taken. */
	struct hdrs later;
	sign(&later, now + 1);
	assert_int_equal(verify(&later, now + 1), 0);
	hdrs_fini(&later);
}

/* A restarted node knows none of the nonces its process before served. */
static void test_dated_before_the_start(void **state)
{
	(void)state;
	time_t start = time(NULL) + 200;
	struct hdrs before, at, after;
	sign(&before, start - 1);
	sign(&at, start);
	sign(&after, start + 1);
	peer_begin(start);
	assert_int_equal(verify(&before, start), -1);
	assert_int_equal(verify(&at, start), -1);
	assert_int_equal(verify(&after, start + 1), 0);
	hdrs_fini(&before);
	hdrs_fini(&at);
	hdrs_fini(&after);
}

/* Nonces whose date is past the skew window make room without refusing
 * anything: a node that serves a steady stream never turns requests away. */
static void test_old_nonces_make_room(void **state)
{
	(void)state;
	time_t t0 = time(NULL) + 300;
	for (int round = 0; round < 2; round++) {
		time_t now = t0 + round * (2 * PEER_SKEW_S + 1);
		int refused = 0;
		for (int i = 0; i < 50000; i++) {
			struct hdrs h;
			sign(&h, now);
			refused += verify(&h, now) != 0;
			hdrs_fini(&h);
		}
		assert_int_equal(refused, 0);
	}
}

/* A request signed (with the secret) at a hop that is not a number: it was
 * read with strtoul, which takes "1x" and "-18446744073709551615" for 1. */
static void test_hop_must_be_digits(void **state)
{
	(void)state;
	static const char *const hops[] = { "1x", "-18446744073709551615", " 1", "", "1", "2" };
	time_t now = time(NULL) + 400;
	for (size_t i = 0; i < sizeof hops / sizeof hops[0]; i++) {
		struct hdrs h, forged;
		sign(&h, now);
		char msg[1024], sig[65];
		snprintf(msg, sizeof msg, "larder-peer-v3\nGET\n%s\n%s\n%s\n%s\n%s\n%s"
		         "\nbytes=0-99\n\n\n\n\n", PATH, hdrs_get(&h, "X-Larder-Peer-Date"),
		         hdrs_get(&h, "X-Larder-Peer"), SELF, hdrs_get(&h, "X-Larder-Peer-Nonce"),
		         hops[i]);
		cluster_mac(SECRET, msg, strlen(msg), sig);
		hdrs_init(&forged);
		static const char *const keep[] = { "Host", "Range", "X-Larder-Peer",
			"X-Larder-Peer-Date", "X-Larder-Peer-Nonce" };
		for (size_t k = 0; k < sizeof keep / sizeof keep[0]; k++)
			assert_int_equal(hdrs_add(&forged, keep[k], hdrs_get(&h, keep[k])), 0);
		assert_int_equal(hdrs_add(&forged, "X-Larder-Peer-Hop", hops[i]), 0);
		assert_int_equal(hdrs_add(&forged, "X-Larder-Peer-Auth", sig), 0);
		bool good = strcmp(hops[i], "1") == 0 || strcmp(hops[i], "2") == 0;
		assert_int_equal(verify(&forged, now), good ? 0 : -1);
		hdrs_fini(&h);
		hdrs_fini(&forged);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_taken_once),
		cmocka_unit_test(test_replay_after_the_table_overflowed),
		cmocka_unit_test(test_dated_before_the_start),
		cmocka_unit_test(test_old_nonces_make_room),
		cmocka_unit_test(test_hop_must_be_digits),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * test_cluster.c - membership, ownership and invalidations against a real
 * redis-server started on a free loopback port (skipped, saying so, when
 * redis-server is not installed; LARDER_REDIS_SERVER names another binary).
 * Two or three cluster instances share the process, as nodes would share
 * a Redis. Heartbeat 200 ms, TTL 1 s, so the whole file runs in ~25 s.
 * The placement directory (cluster/directory.h) is tested here too, through
 * the heartbeat thread that flushes it, against the same Redis.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "cluster/cluster.h"
#include "cluster/cluster_internal.h"
#include "cluster/directory.h"

#define HB_MS 200
#define TTL_MS 1000
#define SECRET "unit-test-cluster-secret-0123"

static char redis_bin[512];
static int redis_port;
static pid_t redis_pid = -1;
static char redis_url[64];

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

/* Re-evaluates expr every 20 ms until it holds; fails the test if it does
 * not within secs. */
#define ASSERT_WITHIN(secs, expr) do { \
	double until_ = now_s() + (secs); \
	bool ok_; \
	while (!(ok_ = (expr)) && now_s() < until_) \
		sleep_ms(20); \
	if (!ok_) \
		fail_msg("not within %.1f s: %s", (double)(secs), #expr); \
} while (0)

static bool find_redis(void)
{
	const char *env = getenv("LARDER_REDIS_SERVER");
	if (env && *env) {
		snprintf(redis_bin, sizeof redis_bin, "%s", env);
		if (access(redis_bin, X_OK) == 0)
			return true;
		redis_bin[0] = '\0';
		return false;
	}
	const char *path = getenv("PATH");
	if (!path)
		path = "/usr/local/bin:/usr/bin:/bin";
	while (*path) {
		size_t len = strcspn(path, ":");
		snprintf(redis_bin, sizeof redis_bin, "%.*s/redis-server", (int)len,
		         len ? path : ".");
		if (access(redis_bin, X_OK) == 0)
			return true;
		path += len + (path[len] == ':');
	}
	redis_bin[0] = '\0';
	return false;
}

static int free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof a;
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	close(fd);
	return ntohs(a.sin_port);
}

static redisContext *redis_connect(void)
{
	struct timeval tv = { .tv_sec = 0, .tv_usec = 500000 };
	redisContext *c = redisConnectWithTimeout("127.0.0.1", redis_port, tv);
	if (c && c->err) {
		redisFree(c);
		return NULL;
	}
	return c;
}

static bool redis_ping(void)
{
	redisContext *c = redis_connect();
	if (!c)
		return false;
	redisReply *r = redisCommand(c, "PING");
	bool ok = r && r->type == REDIS_REPLY_STATUS;
	if (r)
		freeReplyObject(r);
	redisFree(c);
	return ok;
}

static void redis_start(void)
{
	char port[16];
	snprintf(port, sizeof port, "%d", redis_port);
	redis_pid = fork();
	assert_true(redis_pid >= 0);
	if (redis_pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive a crashed test */
		int null = open("/dev/null", O_RDWR);
		dup2(null, 1);
		dup2(null, 2);
		execl(redis_bin, redis_bin, "--port", port, "--bind", "127.0.0.1", "--save", "",
		      "--appendonly", "no", (char *)NULL);
		_exit(127);
	}
	ASSERT_WITHIN(5, redis_ping());
}

static void redis_kill(void)
{
	if (redis_pid > 0) {
		kill(redis_pid, SIGKILL);
		waitpid(redis_pid, NULL, 0);
		redis_pid = -1;
	}
}

static int group_setup(void **state)
{
	signal(SIGPIPE, SIG_IGN);
	if (!find_redis()) {
		fprintf(stderr, "test_cluster: redis-server not found in PATH (or "
		        "LARDER_REDIS_SERVER): skipping the tests that need Redis\n");
		return 0;
	}
	redis_port = free_port();
	snprintf(redis_url, sizeof redis_url, "redis://127.0.0.1:%d", redis_port);
	return 0;
}

static int group_teardown(void **state)
{
	redis_kill();
	return 0;
}

/* Each test starts from an empty Redis. */
static int setup(void **state)
{
	if (redis_bin[0])
		redis_start();
	return 0;
}

static int teardown(void **state)
{
	redis_kill();
	return 0;
}

#define NEED_REDIS() do { if (!redis_bin[0]) skip(); } while (0)

/* ---- invalidation recorder ---- */

struct rec {
	pthread_mutex_t lock;
	_Atomic int slow_ms; /* each invalidation takes this long to apply */
	int n;
	int resyncs; /* CLUSTER_RESYNC: counted here, not in n */
	char bucket[64], key[128];
};

static void on_inval(void *arg, const char *bucket, const char *key)
{
	struct rec *r = arg;
	pthread_mutex_lock(&r->lock);
	if (strcmp(bucket, CLUSTER_RESYNC) == 0) {
		assert_string_equal(key, "");
		r->resyncs++;
		pthread_mutex_unlock(&r->lock);
		return;
	}
	pthread_mutex_unlock(&r->lock);
	if (r->slow_ms)
		sleep_ms(r->slow_ms);
	pthread_mutex_lock(&r->lock);
	r->n++;
	snprintf(r->bucket, sizeof r->bucket, "%s", bucket);
	snprintf(r->key, sizeof r->key, "%s", key);
	pthread_mutex_unlock(&r->lock);
}

static int rec_n(struct rec *r)
{
	pthread_mutex_lock(&r->lock);
	int n = r->n;
	pthread_mutex_unlock(&r->lock);
	return n;
}

static int rec_resyncs(struct rec *r)
{
	pthread_mutex_lock(&r->lock);
	int n = r->resyncs;
	pthread_mutex_unlock(&r->lock);
	return n;
}

static bool rec_key_is(struct rec *r, const char *key)
{
	pthread_mutex_lock(&r->lock);
	bool same = strcmp(r->key, key) == 0;
	pthread_mutex_unlock(&r->lock);
	return same;
}

static struct cluster *node(const char *id, const char *adv, double cap, struct rec *r)
{
	struct cluster_config c = {
		.redis_url = redis_url, .node_id = id, .advertise = adv, .capacity = cap,
		.heartbeat_ms = HB_MS, .ttl_ms = TTL_MS, .secret = SECRET,
	};
	char err[256];
	struct cluster *cl = cluster_start(&c, r ? on_inval : NULL, r, err, sizeof err);
	if (!cl)
		fail_msg("cluster_start(%s): %s", id, err);
	return cl;
}

/* A membership entry for id as a node of protocol with secret writes it
 * (cluster/cluster_trust.c; protocol 0: none, as before the field), expiring
 * at expiry_ms (unix milliseconds). */
static void member_entry_of(char *out, size_t outlen, const char *secret, const char *id,
                            const char *addr_cap, double expiry_ms, unsigned protocol)
{
	char body[256], msg[512];
	int bl = snprintf(body, sizeof body, "%s\t0\t%.0f", addr_cap, expiry_ms);
	if (protocol)
		snprintf(body + bl, sizeof body - (size_t)bl, "\t%u", protocol);
	int n = snprintf(msg, sizeof msg, "larder-member-v1\n%s\n%s", id, body);
	unsigned char md[32];
	unsigned mdlen = sizeof md;
	HMAC(EVP_sha256(), secret, (int)strlen(secret), (unsigned char *)msg, (size_t)n, md, &mdlen);
	char hex[65];
	for (int i = 0; i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
	snprintf(out, outlen, "%s\t%s", body, hex);
}

/* The same, as a node of this version writes it. */
static void member_entry(char *out, size_t outlen, const char *secret, const char *id,
                         const char *addr_cap, double expiry_ms)
{
	member_entry_of(out, outlen, secret, id, addr_cap, expiry_ms, CLUSTER_PROTOCOL);
}

static double unix_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static size_t members(struct cluster *cl)
{
	struct cluster_view v;
	cluster_get_view(cl, &v);
	return v.members;
}

static bool ready(struct cluster *cl, size_t n)
{
	struct cluster_view v;
	cluster_get_view(cl, &v);
	return v.redis_up && v.subscribed && v.members == n;
}

/* ---- tests ---- */

static void test_members_and_ownership(void **state)
{
	NEED_REDIS();
	struct cluster *a = node("node-a", "10.0.0.1:8080", 1e9, NULL);
	struct cluster *b = node("node-b", "10.0.0.2:8080", 2e9, NULL);
	double t0 = now_s();
	ASSERT_WITHIN(3, ready(a, 2) && ready(b, 2));
	print_message("both nodes saw each other after %.2f s\n", now_s() - t0);

	char ids[4][CLUSTER_NAME_MAX], addrs[4][CLUSTER_NAME_MAX];
	double caps[4];
	assert_int_equal(cluster_members(a, ids, addrs, caps, NULL, 4), 2);
	assert_string_equal(ids[0], "node-a");
	assert_string_equal(addrs[0], "10.0.0.1:8080");
	assert_true(caps[0] == 1e9);
	assert_string_equal(ids[1], "node-b");
	assert_string_equal(addrs[1], "10.0.0.2:8080");
	assert_true(caps[1] == 2e9);
	assert_int_equal(cluster_members(b, ids, addrs, caps, NULL, 1), 1);

	/* Exactly one of the two owns each key, and both agree which. */
	size_t by_a = 0, by_b = 0;
	for (uint64_t k = 0; k < 1000; k++) {
		uint64_t key = k * UINT64_C(0x9e3779b97f4a7c15) + 7;
		char pa[CLUSTER_NAME_MAX] = "", pb[CLUSTER_NAME_MAX] = "";
		bool ra = cluster_owner(a, key, pa, sizeof pa);
		bool rb = cluster_owner(b, key, pb, sizeof pb);
		assert_true(ra != rb);
		if (ra) {
			assert_string_equal(pa, "10.0.0.2:8080");
			by_b++;
		} else {
			assert_string_equal(pb, "10.0.0.1:8080");
			by_a++;
		}
	}
	print_message("1000 keys: node-a (weight 1) owns %zu, node-b (weight 2) owns %zu\n", by_a,
	              by_b);
	assert_true(by_b > by_a * 3 / 2 && by_b < by_a * 5 / 2);

	/* A short addr buffer truncates, never overruns. */
	char tiny[4];
	for (uint64_t k = 0; k < 100; k++)
		if (cluster_owner(a, k, tiny, sizeof tiny))
			assert_string_equal(tiny, "10.");

	cluster_stop(a);
	cluster_stop(b);
}

static void test_invalidation(void **state)
{
	NEED_REDIS();
	struct rec ra = { .lock = PTHREAD_MUTEX_INITIALIZER };
	struct rec rb = { .lock = PTHREAD_MUTEX_INITIALIZER };
	struct cluster *a = node("node-a", "10.0.0.1:8080", 1, &ra);
	struct cluster *b = node("node-b", "10.0.0.2:8080", 1, &rb);
	ASSERT_WITHIN(3, ready(a, 2) && ready(b, 2));
	/* Each node revalidates what it has once it listens: at start, that is
	 * what it recovered from its disk. */
	assert_int_equal(rec_resyncs(&ra), 1);
	assert_int_equal(rec_resyncs(&rb), 1);

	/* A ticket is out once every node Redis delivered it to has applied
	 * it: b's callback has returned, however long it took. */
	rb.slow_ms = 300;
	uint64_t t1 = cluster_publish_invalidate(a, "bucket-1", "dir/obj.bin");
	assert_true(t1 > 0);
	sleep_ms(150);
	assert_false(cluster_published(a, t1));
	ASSERT_WITHIN(2, cluster_published(a, t1));
	assert_int_equal(rec_n(&rb), 1);
	rb.slow_ms = 0;
	assert_string_equal(rb.bucket, "bucket-1");
	assert_string_equal(rb.key, "dir/obj.bin");

	/* A whole bucket, and a key holding the separator. */
	cluster_publish_invalidate(a, "bucket-2", "");
	ASSERT_WITHIN(2, rec_n(&rb) == 2);
	assert_string_equal(rb.bucket, "bucket-2");
	assert_string_equal(rb.key, "");
	cluster_publish_invalidate(b, "bucket-3", "odd\nkey");
	ASSERT_WITHIN(2, rec_n(&ra) == 1);
	assert_string_equal(ra.bucket, "bucket-3");
	assert_string_equal(ra.key, "odd\nkey");

	/* Nobody hears their own; invalid buckets are not sent (no ticket). */
	assert_int_equal(cluster_publish_invalidate(a, "", "k"), 0);
	assert_int_equal(cluster_publish_invalidate(a, "bad\nbucket", "k"), 0);
	assert_true(cluster_published(a, 0));
	assert_true(cluster_published(NULL, 5));
	sleep_ms(300);
	assert_int_equal(rec_n(&ra), 1);
	assert_int_equal(rec_n(&rb), 2);

	struct cluster_view va, vb;
	cluster_get_view(a, &va);
	cluster_get_view(b, &vb);
	assert_string_equal(va.self, "node-a");
	assert_int_equal(va.invalidations_sent, 2);
	assert_int_equal(va.invalidations_received, 1);
	assert_int_equal(vb.invalidations_sent, 1);
	assert_int_equal(vb.invalidations_received, 2);
	assert_int_equal(va.resyncs, 1);
	assert_int_equal(rec_resyncs(&ra), 1);
	cluster_stop(a);
	cluster_stop(b);
}

static void test_leave(void **state)
{
	NEED_REDIS();
	struct cluster *a = node("node-a", "10.0.0.1:8080", 1, NULL);
	struct cluster *b = node("node-b", "10.0.0.2:8080", 1, NULL);
	ASSERT_WITHIN(3, members(a) == 2 && members(b) == 2);

	/* A clean stop deregisters: gone at the next heartbeat, not the TTL. */
	double t0 = now_s();
	cluster_stop(b);
	double stop_s = now_s() - t0;
	assert_true(stop_s < 1.0);
	ASSERT_WITHIN(0.6, members(a) == 1);
	print_message("stop took %.3f s; peer dropped after %.2f s\n", stop_s, now_s() - t0);

	/* A node that dies without a word (here: a key written by hand) is
	 * dropped once its key expires, and pruned from the set. */
	redisContext *c = redis_connect();
	assert_non_null(c);
	char ghost[512];
	member_entry(ghost, sizeof ghost, SECRET, "ghost", "10.0.0.9:8080\t1", unix_ms() + TTL_MS);
	redisReply *r = redisCommand(c, "SET larder:node:ghost %s PX %d", ghost, TTL_MS);
	freeReplyObject(r);
	r = redisCommand(c, "SADD larder:nodes ghost");
	freeReplyObject(r);
	/* Malformed entries from someone else are ignored. */
	r = redisCommand(c, "SET larder:node:junk nonsense");
	freeReplyObject(r);
	r = redisCommand(c, "SADD larder:nodes junk");
	freeReplyObject(r);
	ASSERT_WITHIN(1, members(a) == 2);
	t0 = now_s();
	ASSERT_WITHIN(2, members(a) == 1);
	double gone = now_s() - t0;
	print_message("silent node dropped %.2f s after it was seen (TTL %.1f s)\n", gone,
	              TTL_MS / 1e3);
	assert_true(gone > 0.3);
	r = redisCommand(c, "SISMEMBER larder:nodes ghost");
	assert_int_equal(r->integer, 0);
	freeReplyObject(r);
	r = redisCommand(c, "EXISTS larder:node:node-b");
	assert_int_equal(r->integer, 0);
	freeReplyObject(r);
	redisFree(c);
	cluster_stop(a);
}

/* A node of another protocol (a rolling upgrade: an entry without the
 * field, as larders before it wrote, or of a later protocol) is no member:
 * it owns nothing here, and is listed apart; a later entry of this
 * protocol under the same id makes it a member again. */
static void test_other_protocol_not_a_member(void **state)
{
	NEED_REDIS();
	struct cluster *a = node("node-a", "10.0.0.1:8080", 1, NULL);
	ASSERT_WITHIN(3, ready(a, 1));
	redisContext *c = redis_connect();
	assert_non_null(c);
	char older[512], newer[512], bad[512], same[512];
	double now = unix_ms();
	member_entry_of(older, sizeof older, SECRET, "older", "10.0.0.5:1\t1e18", now + 60000, 0);
	member_entry_of(newer, sizeof newer, SECRET, "newer", "10.0.0.6:1\t1e18", now + 60000,
	                CLUSTER_PROTOCOL + 1);
	/* A protocol that is not a number is malformed, not another protocol. */
	snprintf(bad, sizeof bad, "10.0.0.8:1\t1\t0\t%.0f\tx2", now + 60000);
	char hex[65];
	cl_member_mac(SECRET, "bad", bad, strlen(bad), hex);
	snprintf(bad + strlen(bad), sizeof bad - strlen(bad), "\t%s", hex);
	const char *const entries[][2] = { { "older", older }, { "newer", newer }, { "bad", bad } };
	for (size_t i = 0; i < 3; i++) {
		freeReplyObject(redisCommand(c, "SET larder:node:%s %s PX 60000", entries[i][0],
		                             entries[i][1]));
		freeReplyObject(redisCommand(c, "SADD larder:nodes %s", entries[i][0]));
	}
	struct cluster_view v;
	ASSERT_WITHIN(3, (cluster_get_view(a, &v), v.others == 2 && v.members_rejected > 0));
	assert_int_equal(v.members, 1);
	for (uint64_t k = 0; k < 100; k++)
		assert_false(cluster_owner(a, k, NULL, 0));
	char ids[4][CLUSTER_NAME_MAX], addrs[4][CLUSTER_NAME_MAX];
	unsigned protos[4];
	assert_int_equal(cluster_others(a, ids, addrs, protos, 4), 2);
	for (size_t i = 0; i < 2; i++) {
		bool old = strcmp(ids[i], "older") == 0;
		assert_string_equal(addrs[i], old ? "10.0.0.5:1" : "10.0.0.6:1");
		assert_int_equal(protos[i], old ? 1 : CLUSTER_PROTOCOL + 1);
	}
	/* Upgraded: a member, and listed apart no more. */
	member_entry(same, sizeof same, SECRET, "older", "10.0.0.5:1\t1", now + 60000);
	freeReplyObject(redisCommand(c, "SET larder:node:older %s PX 60000", same));
	freeReplyObject(redisCommand(c, "DEL larder:node:newer larder:node:bad"));
	ASSERT_WITHIN(3, members(a) == 2);
	cluster_get_view(a, &v);
	assert_int_equal(v.others, 0);
	assert_int_equal(cluster_others(a, ids, NULL, NULL, 4), 0);
	freeReplyObject(redisCommand(c, "DEL larder:node:older"));
	redisFree(c);
	cluster_stop(a);
}

/* Only entries signed with the cluster secret and not expired are members:
 * whoever writes to Redis without the secret adds nobody. */
static void test_forged_members_ignored(void **state)
{
	NEED_REDIS();
	struct cluster *a = node("node-a", "10.0.0.1:8080", 1, NULL);
	ASSERT_WITHIN(3, ready(a, 1));
	redisContext *c = redis_connect();
	assert_non_null(c);
	char wrong[512], stale[512], renamed[512], good[512];
	double now = unix_ms();
	member_entry(wrong, sizeof wrong, "some-other-secret-000000", "wrong", "10.6.6.6:1\t1e18",
	             now + 60000);
	member_entry(stale, sizeof stale, SECRET, "stale", "10.6.6.6:1\t1e18", now - 120000);
	member_entry(renamed, sizeof renamed, SECRET, "node-x", "10.6.6.6:1\t1e18", now + 60000);
	member_entry(good, sizeof good, SECRET, "good", "10.0.0.7:1\t1", now + 60000);
	const char *const forged[][2] = {
		{ "plain", "10.6.6.6:1\t1e18" }, /* the format before entries were signed */
		{ "wrong", wrong }, { "stale", stale }, { "renamed", renamed },
	};
	for (size_t i = 0; i < sizeof forged / sizeof forged[0]; i++) {
		freeReplyObject(redisCommand(c, "SET larder:node:%s %s PX 60000", forged[i][0],
		                             forged[i][1]));
		freeReplyObject(redisCommand(c, "SADD larder:nodes %s", forged[i][0]));
	}
	sleep_ms(3 * HB_MS);
	struct cluster_view v;
	cluster_get_view(a, &v);
	assert_int_equal(v.members, 1);
	assert_true(v.members_rejected >= 4);
	for (uint64_t k = 0; k < 100; k++)
		assert_false(cluster_owner(a, k, NULL, 0));
	/* A correctly signed one is a member. */
	freeReplyObject(redisCommand(c, "SET larder:node:good %s PX 60000", good));
	freeReplyObject(redisCommand(c, "SADD larder:nodes good"));
	ASSERT_WITHIN(2, members(a) == 2);
	char ids[2][CLUSTER_NAME_MAX];
	assert_int_equal(cluster_members(a, ids, NULL, NULL, NULL, 2), 2);
	assert_string_equal(ids[0], "good");
	freeReplyObject(redisCommand(c, "DEL larder:node:good"));
	redisFree(c);
	cluster_stop(a);
}

static void test_redis_outage(void **state)
{
	NEED_REDIS();
	struct rec ra = { .lock = PTHREAD_MUTEX_INITIALIZER };
	struct rec rb = { .lock = PTHREAD_MUTEX_INITIALIZER };
	struct cluster *a = node("node-a", "10.0.0.1:8080", 1, &ra);
	struct cluster *b = node("node-b", "10.0.0.2:8080", 1, &rb);
	ASSERT_WITHIN(3, ready(a, 2) && ready(b, 2));

	redis_kill();
	double t0 = now_s();
	struct cluster_view v;
	ASSERT_WITHIN(2, (cluster_get_view(a, &v), !v.redis_up && v.members == 1));
	ASSERT_WITHIN(2, (cluster_get_view(b, &v), !v.redis_up && v.members == 1));
	print_message("both alone %.2f s after redis died\n", now_s() - t0);
	assert_string_equal(v.self, "node-b");
	for (uint64_t k = 0; k < 1000; k++) {
		char addr[CLUSTER_NAME_MAX];
		assert_false(cluster_owner(a, k, addr, sizeof addr));
		assert_false(cluster_owner(b, k, addr, sizeof addr));
	}
	char ids[4][CLUSTER_NAME_MAX];
	assert_int_equal(cluster_members(a, ids, NULL, NULL, NULL, 4), 1);
	assert_string_equal(ids[0], "node-a");
	/* Invalidations wait for Redis; nobody waits for their ticket. */
	assert_true(cluster_published(a, cluster_publish_invalidate(a, "bucket-1", "while-down")));

	sleep_ms(500);
	redis_start();
	t0 = now_s();
	ASSERT_WITHIN(6, ready(a, 2) && ready(b, 2));
	print_message("both rejoined %.2f s after redis came back\n", now_s() - t0);
	cluster_get_view(a, &v);
	assert_true(v.redis_reconnects >= 1);
	/* What was published while a node was not subscribed is lost to it,
	 * so each revalidates everything once it listens again. */
	assert_int_equal(rec_resyncs(&ra), 2);
	assert_int_equal(rec_resyncs(&rb), 2);
	assert_int_equal(v.resyncs, 2);

	/* The queued one went out after the heartbeat thread reconnected;
	 * b hears it if it was subscribed again by then, and in any case
	 * hears new ones. */
	cluster_publish_invalidate(a, "bucket-1", "after");
	ASSERT_WITHIN(2, rec_key_is(&rb, "after"));
	cluster_stop(a);
	cluster_stop(b);
}

static void redis_do(const char *cmd)
{
	redisContext *c = redis_connect();
	assert_non_null(c);
	redisReply *r = redisCommand(c, cmd);
	if (!r || r->type == REDIS_REPLY_ERROR)
		fail_msg("%s: %s", cmd, r ? r->str : c->errstr);
	freeReplyObject(r);
	redisFree(c);
}

/* node-a, as the Redis user node-a (password pw-a), which the caller's
 * ACL SETUSER made. */
static struct cluster *node_as_user_a(struct rec *r)
{
	char url[96];
	snprintf(url, sizeof url, "redis://node-a:pw-a@127.0.0.1:%d", redis_port);
	struct cluster_config ca = {
		.redis_url = url, .node_id = "node-a", .advertise = "10.0.0.1:8080", .capacity = 1,
		.heartbeat_ms = HB_MS, .ttl_ms = TTL_MS, .secret = SECRET,
	};
	char err[256];
	struct cluster *a = cluster_start(&ca, on_inval, r, err, sizeof err);
	assert_non_null(a);
	return a;
}

/* Node a alone loses Redis (its user is locked out; b stays subscribed)
 * and drops queued invalidations past the bound: b cannot know which,
 * so a's return tells b to revalidate everything. */
static void test_dropped_invalidations_resync_the_others(void **state)
{
	NEED_REDIS();
	redis_do("ACL SETUSER node-a on >pw-a ~* &* +@all");
	struct rec ra = { .lock = PTHREAD_MUTEX_INITIALIZER };
	struct rec rb = { .lock = PTHREAD_MUTEX_INITIALIZER };
	struct cluster *a = node_as_user_a(&ra);
	struct cluster *b = node("node-b", "10.0.0.2:8080", 1, &rb);
	ASSERT_WITHIN(3, ready(a, 2) && ready(b, 2));
	assert_int_equal(rec_resyncs(&rb), 1);

	redis_do("ACL SETUSER node-a off");
	redis_do("CLIENT KILL USER node-a");
	struct cluster_view v;
	ASSERT_WITHIN(2, (cluster_get_view(a, &v), !v.redis_up && !v.subscribed));
	for (int i = 0; i < 4096 + 10; i++)
		cluster_publish_invalidate(a, "bucket-1", "k");
	cluster_get_view(a, &v);
	assert_int_equal(v.invalidations_dropped, 10);
	ASSERT_WITHIN(3, ready(b, 1)); /* a's entry expired; b never lost Redis */
	assert_int_equal(rec_n(&rb), 0);

	redis_do("ACL SETUSER node-a on");
	ASSERT_WITHIN(5, rec_n(&rb) == 4096 && rec_resyncs(&rb) == 2);
	cluster_get_view(b, &v);
	assert_int_equal(v.resyncs, 2);
	assert_int_equal(v.redis_reconnects, 0);
	/* Once said, not again. */
	cluster_publish_invalidate(a, "bucket-1", "after");
	ASSERT_WITHIN(2, rec_key_is(&rb, "after"));
	assert_int_equal(rec_resyncs(&rb), 2);
	cluster_stop(a);
	cluster_stop(b);
}

/* The read barrier's bookkeeping: a PING covers the tickets handed out
 * before it was sent, one is in flight at a time, and the tickets of a
 * lost connection are lost, not passed. */
static void test_read_barrier_bookkeeping(void **state)
{
	(void)state;
	struct read_barrier b = { 0 };
	uint64_t t1, t2, t3, t4;
	assert_true(cl_bar_ask(&b, &t1));   /* wakes the subscriber */
	assert_false(cl_bar_ask(&b, &t2));  /* woken already */
	assert_true(t1 == 1 && t2 == 2);
	assert_int_equal(cl_bar_state(&b, t1), CLUSTER_BARRIER_WAIT);
	b.woken = false;                    /* the subscriber read its eventfd */
	assert_true(cl_bar_ping(&b, false));
	assert_false(cl_bar_ask(&b, &t3));  /* a PING in flight: its PONG leads to the next */
	assert_false(cl_bar_ping(&b, false));
	assert_false(cl_bar_ping(&b, true)); /* a keepalive waits too: PONGs pair in order */
	cl_bar_pong(&b);
	assert_int_equal(cl_bar_state(&b, t1), CLUSTER_BARRIER_PASSED);
	assert_int_equal(cl_bar_state(&b, t2), CLUSTER_BARRIER_PASSED);
	assert_int_equal(cl_bar_state(&b, t3), CLUSTER_BARRIER_WAIT); /* asked after the PING */
	assert_true(cl_bar_ping(&b, false));
	cl_bar_lost(&b);
	assert_int_equal(cl_bar_state(&b, t3), CLUSTER_BARRIER_LOST);
	cl_bar_pong(&b); /* not our PING's (it was lost with its connection) */
	assert_int_equal(cl_bar_state(&b, t3), CLUSTER_BARRIER_LOST);
	assert_true(cl_bar_ask(&b, &t4));   /* a new connection: woken again */
	assert_int_equal(cl_bar_state(&b, t4), CLUSTER_BARRIER_WAIT);
	b.woken = false;
	assert_true(cl_bar_ping(&b, true));  /* a keepalive covers what was asked too */
	cl_bar_pong(&b);
	assert_int_equal(cl_bar_state(&b, t4), CLUSTER_BARRIER_PASSED);
	assert_false(cl_bar_ping(&b, false)); /* nothing waits */
	assert_true(cl_bar_ping(&b, true));
}

/* A node whose membership entry Redis refuses hears the channel but is not
 * counted by the writers: a read's barrier passes only once its listening
 * thread applied what came before it (its callback is slow here), and once
 * it joined, three heartbeats later, reads no longer wait. */
static void test_read_barrier(void **state)
{
	NEED_REDIS();
	redis_do("ACL SETUSER node-a on >pw-a ~* &* +@all -set");
	struct rec ra = { .lock = PTHREAD_MUTEX_INITIALIZER };
	struct cluster *a = node_as_user_a(&ra);
	struct cluster *b = node("node-b", "10.0.0.2:8080", 1, NULL);
	struct cluster_view v;
	ASSERT_WITHIN(3, ready(b, 1) && (cluster_get_view(a, &v), v.subscribed));
	/* b joined alone: three heartbeats later it is counted (by itself). */
	ASSERT_WITHIN(JOIN_HEARTBEATS * HB_MS / 1e3 + 1, !cluster_joining(b));
	assert_true(cluster_barrier(b) == 0);
	assert_true(cluster_joining(a));
	uint64_t t = cluster_barrier(a);
	assert_true(t > 0);
	ASSERT_WITHIN(1, cluster_barrier_state(a, t) == CLUSTER_BARRIER_PASSED);

	ra.slow_ms = 400;
	cluster_publish_invalidate(b, "bucket-1", "k");
	ASSERT_WITHIN(2, cluster_published(b, 1)); /* b counts itself alone */
	t = cluster_barrier(a);
	double t0 = now_s();
	ASSERT_WITHIN(2, cluster_barrier_state(a, t) == CLUSTER_BARRIER_PASSED);
	print_message("a read's barrier passed %.3f s after it asked\n", now_s() - t0);
	assert_int_equal(rec_n(&ra), 1); /* applied before it passed */
	ra.slow_ms = 0;
	cluster_barrier_gave_up(a);
	cluster_get_view(a, &v);
	assert_true(v.joining);
	assert_int_equal(v.read_barriers, 2);
	assert_int_equal(v.read_barriers_lapsed, 1);

	redis_do("ACL SETUSER node-a +set");
	ASSERT_WITHIN(3, ready(a, 2) && ready(b, 2));
	assert_true(cluster_joining(a)); /* b may not have read a's entry yet */
	ASSERT_WITHIN(JOIN_HEARTBEATS * HB_MS / 1e3 + 1, !cluster_joining(a));
	assert_true(cluster_barrier(a) == 0);
	cluster_stop(a);
	cluster_stop(b);
	assert_int_equal(cluster_barrier_state(NULL, 7), CLUSTER_BARRIER_PASSED);
	assert_true(cluster_barrier(NULL) == 0);
}

/* Redis refuses a's PUBLISH (its ACL user lacks it) while taking its
 * heartbeats: nobody hears a's invalidations, so they count as dropped,
 * not sent, and their tickets end (waiting would not help). */
static void test_refused_publish_counts_as_dropped(void **state)
{
	NEED_REDIS();
	redis_do("ACL SETUSER node-a on >pw-a ~* &* +@all -publish");
	struct rec ra = { .lock = PTHREAD_MUTEX_INITIALIZER };
	struct rec rb = { .lock = PTHREAD_MUTEX_INITIALIZER };
	struct cluster *a = node_as_user_a(&ra);
	struct cluster *b = node("node-b", "10.0.0.2:8080", 1, &rb);
	ASSERT_WITHIN(3, ready(a, 2) && ready(b, 2));
	uint64_t t = 0;
	for (int i = 0; i < 3; i++)
		t = cluster_publish_invalidate(a, "bucket-1", "k");
	ASSERT_WITHIN(2, cluster_published(a, t));
	struct cluster_view v;
	ASSERT_WITHIN(2, (cluster_get_view(a, &v), v.invalidations_dropped == 3));
	assert_int_equal(v.invalidations_sent, 0);
	assert_true(v.redis_up);
	sleep_ms(300);
	assert_int_equal(rec_n(&rb), 0);
	cluster_stop(a);
	cluster_stop(b);
	redis_do("ACL SETUSER node-a +publish");
}

/* ---- placement directory ---- */

#define HELD_MAX 4096

/* What the fake tiers hold: ids by their first byte pair. */
static struct {
	pthread_mutex_t lock;
	bool held[HELD_MAX];
} tiers = { .lock = PTHREAD_MUTEX_INITIALIZER };

static struct chunk_id test_id(unsigned i)
{
	struct chunk_id id;
	memset(&id, 0, sizeof id);
	id.b[0] = (uint8_t)(i >> 8);
	id.b[1] = (uint8_t)i;
	id.b[7] = 0x5a; /* the hash is the first 8 bytes: keep it nonzero */
	return id;
}

static uint64_t key_of(unsigned i)
{
	struct chunk_id id = test_id(i);
	return chunk_id_hash(&id);
}

static bool fake_holds(void *arg, const struct chunk_id *id)
{
	(void)arg;
	unsigned i = (unsigned)id->b[0] << 8 | id->b[1];
	pthread_mutex_lock(&tiers.lock);
	bool h = i < HELD_MAX && tiers.held[i];
	pthread_mutex_unlock(&tiers.lock);
	return h;
}

/* Chunk i is now held (fetched from S3 here) or gone. */
static void set_held(struct directory *d, unsigned i, bool held, uint64_t alias)
{
	pthread_mutex_lock(&tiers.lock);
	tiers.held[i] = held;
	pthread_mutex_unlock(&tiers.lock);
	struct chunk_id id = test_id(i);
	if (held)
		dir_fetched(d, key_of(i), alias, &id, true, 0);
	else
		dir_changed(d, &id);
}

/* SMEMBERS of a directory key, joined with ','; "" when none. */
static const char *holders(uint64_t key)
{
	static char out[256];
	char name[DIR_KEY_MAX];
	dir_key_name(key, name);
	out[0] = '\0';
	redisContext *c = redis_connect();
	if (!c)
		return "(redis down)";
	redisReply *r = redisCommand(c, "SMEMBERS %s", name);
	for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i < r->elements; i++)
		snprintf(out + strlen(out), sizeof out - strlen(out), "%s%s", i ? "," : "",
		         r->element[i]->str);
	if (r)
		freeReplyObject(r);
	redisFree(c);
	return out;
}

static long long redis_int(const char *cmd)
{
	redisContext *c = redis_connect();
	if (!c)
		return -1;
	redisReply *r = redisCommand(c, cmd);
	long long v = r && r->type == REDIS_REPLY_INTEGER ? r->integer
	              : r && r->type == REDIS_REPLY_ARRAY ? (long long)r->elements : -1;
	if (r)
		freeReplyObject(r);
	redisFree(c);
	return v;
}

static struct cluster *dir_node(const char *id, const char *adv, struct directory *d)
{
	struct cluster_config c = {
		.redis_url = redis_url, .node_id = id, .advertise = adv, .capacity = 1,
		.heartbeat_ms = HB_MS, .ttl_ms = TTL_MS, .dir = d, .secret = SECRET,
	};
	char err[256];
	struct cluster *cl = cluster_start(&c, NULL, NULL, err, sizeof err);
	if (!cl)
		fail_msg("cluster_start(%s): %s", id, err);
	return cl;
}

static uint64_t dir_entries_seen(struct cluster *cl)
{
	struct cluster_view v;
	cluster_get_view(cl, &v);
	return v.directory_entries;
}

/* The first test ids (from `from`) that cl owns (mine) or does not. */
static unsigned find_ids(struct cluster *cl, unsigned from, bool mine)
{
	for (unsigned i = from; i < HELD_MAX; i++)
		if (cluster_owner(cl, key_of(i), NULL, 0) != mine)
			return i;
	fail_msg("no id found");
	return 0;
}

/* Empty fake tiers and a new directory over them. */
static struct directory *fresh_directory(unsigned ttl_ms, size_t max_entries)
{
	memset(tiers.held, 0, sizeof tiers.held);
	struct dir_config dc = { .ttl_ms = ttl_ms, .holds = fake_holds, .max_entries = max_entries };
	struct directory *d = dir_create(&dc);
	assert_non_null(d);
	return d;
}

static void test_directory_lists_what_hashing_cannot_tell(void **state)
{
	NEED_REDIS();
	struct directory *da = fresh_directory(2000, 0);
	struct cluster *a = dir_node("node-a", "10.0.0.1:8080", da);
	struct cluster *b = dir_node("node-b", "10.0.0.2:8080", NULL);
	ASSERT_WITHIN(3, ready(a, 2) && ready(b, 2));

	/* Fetched by a: listed only when b owns it. mine and theirs are
	 * chunks a and b own; alias is a metadata key b owns. */
	unsigned mine = find_ids(a, 1, true), theirs = find_ids(a, 1, false);
	unsigned alias_i = find_ids(a, theirs + 1, false);
	uint64_t alias = key_of(alias_i);
	set_held(da, mine, true, alias);
	set_held(da, theirs, true, 0);
	ASSERT_WITHIN(2, strcmp(holders(key_of(theirs)), "node-a") == 0);
	ASSERT_WITHIN(2, strcmp(holders(alias), "node-a") == 0);
	assert_string_equal(holders(key_of(mine)), "");
	char name[DIR_KEY_MAX], cmd[64];
	dir_key_name(key_of(theirs), name);
	snprintf(cmd, sizeof cmd, "PTTL %s", name);
	long long ttl = redis_int(cmd);
	assert_true(ttl > 0 && ttl <= 2000);
	/* A chunk with an alias (chunk 0) goes by the alias only: a owns this
	 * one's alias, so it is not listed, though b owns its own key. */
	unsigned other = find_ids(a, alias_i + 1, false);
	set_held(da, other, true, key_of(mine));
	/* Every member sees how big the directory is. */
	ASSERT_WITHIN(2, dir_entries_seen(b) == 2);
	struct dir_stats st;
	ASSERT_WITHIN(2, (dir_get_stats(da, &st), st.tracked == 3));
	assert_string_equal(holders(key_of(other)), "");
	assert_string_equal(holders(key_of(mine)), "");
	assert_int_equal(st.entries, 2);

	/* Another node asking picks a, a live member; never itself, never an
	 * id that is not a live member. */
	const char *ids[] = { "node-a", "node-gone" };
	size_t lens[] = { 6, 9 };
	char addr[CLUSTER_NAME_MAX];
	assert_true(cluster_pick_holder(b, key_of(theirs), ids, lens, 2, addr, sizeof addr));
	assert_string_equal(addr, "10.0.0.1:8080");
	assert_false(cluster_pick_holder(b, key_of(theirs), ids + 1, lens + 1, 1, addr,
	                                 sizeof addr));
	assert_false(cluster_pick_holder(a, key_of(theirs), ids, lens, 1, addr, sizeof addr));

	/* Held for longer than the TTL: refreshed, still there. */
	sleep_ms(3000);
	assert_string_equal(holders(key_of(theirs)), "node-a");
	assert_string_equal(holders(alias), "node-a");

	/* b leaves: a owns everything again, so nothing needs listing. */
	cluster_stop(b);
	ASSERT_WITHIN(3, holders(key_of(theirs))[0] == '\0' && holders(alias)[0] == '\0');
	/* b is back: listed again. */
	b = dir_node("node-b", "10.0.0.2:8080", NULL);
	ASSERT_WITHIN(3, strcmp(holders(key_of(theirs)), "node-a") == 0 &&
	                 strcmp(holders(alias), "node-a") == 0);

	/* Evicted: withdrawn, alias and all; the other stays. */
	set_held(da, mine, false, 0);
	ASSERT_WITHIN(2, holders(alias)[0] == '\0');
	assert_string_equal(holders(key_of(theirs)), "node-a");
	set_held(da, theirs, false, 0);
	ASSERT_WITHIN(2, holders(key_of(theirs))[0] == '\0');
	ASSERT_WITHIN(2, dir_entries_seen(b) == 0);
	set_held(da, theirs, true, 0);
	ASSERT_WITHIN(2, strcmp(holders(key_of(theirs)), "node-a") == 0);

	/* Redis lost everything (restarted empty): a lists it again. */
	redis_kill();
	ASSERT_WITHIN(3, !ready(a, 2));
	redis_start();
	ASSERT_WITHIN(6, ready(a, 2));
	ASSERT_WITHIN(2, strcmp(holders(key_of(theirs)), "node-a") == 0);

	/* A node that stops refreshing (it died) leaves no entry for longer
	 * than the TTL. */
	cluster_stop(a);
	dir_destroy(da);
	ASSERT_WITHIN(3, holders(key_of(theirs))[0] == '\0');
	cluster_stop(b);
}

static void test_directory_many_entries(void **state)
{
	NEED_REDIS();
	struct directory *d = fresh_directory(60000, 3000);
	struct cluster *a = dir_node("node-a", "10.0.0.1:8080", d);
	struct cluster *b = dir_node("node-b", "10.0.0.2:8080", NULL);
	ASSERT_WITHIN(3, ready(a, 2) && ready(b, 2));
	/* Past max_entries, notes are dropped and counted, never an error. */
	for (unsigned i = 0; i < 3500; i++)
		set_held(d, i, true, 0);
	long long theirs = 0, odd_theirs = 0;
	for (unsigned i = 0; i < 3000; i++)
		if (cluster_owner(a, key_of(i), NULL, 0)) {
			theirs++;
			odd_theirs += i & 1;
		}
	struct dir_stats st;
	ASSERT_WITHIN(3, (dir_get_stats(d, &st), st.tracked == 3000));
	ASSERT_WITHIN(2, redis_int("KEYS larder:dir:*") == theirs);
	assert_int_equal(st.dropped, 500);
	assert_true(theirs > 1200 && theirs < 1800);
	/* Every other one evicted: exactly those go (the table stays right
	 * through thousands of removals). */
	for (unsigned i = 0; i < 3000; i += 2)
		set_held(d, i, false, 0);
	ASSERT_WITHIN(3, (dir_get_stats(d, &st), st.tracked == 1500));
	ASSERT_WITHIN(2, redis_int("KEYS larder:dir:*") == odd_theirs);
	for (unsigned i = 0; i < 3000; i += 2)
		set_held(d, i, true, 0);
	ASSERT_WITHIN(3, (dir_get_stats(d, &st), st.tracked == 3000));
	ASSERT_WITHIN(2, redis_int("KEYS larder:dir:*") == theirs);
	for (unsigned i = 0; i < 3000; i++)
		set_held(d, i, false, 0);
	ASSERT_WITHIN(3, (dir_get_stats(d, &st), st.tracked == 0));
	ASSERT_WITHIN(2, redis_int("KEYS larder:dir:*") == 0);
	assert_int_equal(st.entries, 0);
	cluster_stop(a);
	cluster_stop(b);
	dir_destroy(d);
}

static void test_directory_lists_copies_of_a_dead_owner(void **state)
{
	NEED_REDIS();
	struct directory *da = fresh_directory(60000, 0);
	struct cluster *a = dir_node("node-a", "10.0.0.1:8080", da);
	struct cluster *b = dir_node("node-b", "10.0.0.2:8080", NULL);
	struct cluster *c = dir_node("node-c", "10.0.0.3:8080", NULL);
	ASSERT_WITHIN(3, ready(a, 3) && ready(b, 3) && ready(c, 3));

	/* Readers' copies on a: of chunks c owns, from c, and of one b owns,
	 * from b. */
	char addr[CLUSTER_NAME_MAX];
	unsigned of_c[64], nc = 0, of_b = 0;
	for (unsigned i = 1; i < HELD_MAX && (nc < 64 || !of_b); i++) {
		if (!cluster_owner(a, key_of(i), addr, sizeof addr))
			continue;
		if (strcmp(addr, "10.0.0.3:8080") == 0 && nc < 64)
			of_c[nc++] = i;
		else if (strcmp(addr, "10.0.0.2:8080") == 0 && !of_b)
			of_b = i;
	}
	assert_int_equal(nc, 64);
	pthread_mutex_lock(&tiers.lock);
	for (unsigned j = 0; j < nc; j++)
		tiers.held[of_c[j]] = true;
	tiers.held[of_b] = true;
	pthread_mutex_unlock(&tiers.lock);
	uint32_t tag_b = cluster_member_tag(a, "10.0.0.2:8080");
	uint32_t tag_c = cluster_member_tag(a, "10.0.0.3:8080");
	assert_true(tag_b && tag_c && tag_b != tag_c);
	assert_int_equal(cluster_member_tag(a, "10.9.9.9:1"), 0);
	for (unsigned j = 0; j < nc; j++) {
		struct chunk_id id = test_id(of_c[j]);
		dir_fetched(da, key_of(of_c[j]), 0, &id, false, tag_c);
	}
	struct chunk_id idb = test_id(of_b);
	dir_fetched(da, key_of(of_b), 0, &idb, false, tag_b);
	struct dir_stats st;
	ASSERT_WITHIN(2, (dir_get_stats(da, &st), st.tracked == nc + 1));
	sleep_ms(2 * HB_MS);
	assert_int_equal(redis_int("KEYS larder:dir:*"), 0); /* their owners have them */

	/* c leaves (stops, or dies: either way its copies are gone): a lists
	 * its copies of c's chunks that a does not own now; b's stays unlisted. */
	cluster_stop(c);
	ASSERT_WITHIN(4, ready(a, 2) && ready(b, 2));
	unsigned want = 0;
	for (unsigned j = 0; j < nc; j++)
		want += cluster_owner(a, key_of(of_c[j]), NULL, 0);
	assert_true(want > 10 && want < 60);
	ASSERT_WITHIN(2, redis_int("KEYS larder:dir:*") == (long long)want);
	assert_string_equal(holders(key_of(of_b)), "");
	for (unsigned j = 0; j < nc; j++)
		if (cluster_owner(a, key_of(of_c[j]), NULL, 0))
			assert_string_equal(holders(key_of(of_c[j])), "node-a");
	cluster_stop(a);
	cluster_stop(b);
	dir_destroy(da);
}

/* A node restarted with its NVMe tier tracks what the tier recovered
 * (dir_recovered, before its cluster starts): chunks it got as their
 * owner are listed where it no longer owns them, readers' copies (whose
 * source it does not know) are not, and the table's bound holds. */
static void test_directory_tracks_what_a_restart_recovered(void **state)
{
	NEED_REDIS();
	struct directory *da = fresh_directory(60000, 150);
	pthread_mutex_lock(&tiers.lock);
	for (unsigned i = 1; i <= 300; i++)
		tiers.held[i] = true;
	pthread_mutex_unlock(&tiers.lock);
	/* A chunk 0 (key 300) goes by its object's key (301); then 200 more,
	 * every third a reader's copy: 149 of them fit. */
	dir_recovered(da, key_of(300), key_of(301), true);
	for (unsigned i = 1; i <= 200; i++)
		dir_recovered(da, key_of(i), 0, i % 3 != 0);
	struct cluster *b = dir_node("node-b", "10.0.0.2:8080", NULL);
	struct cluster *a = dir_node("node-a", "10.0.0.1:8080", da);
	ASSERT_WITHIN(3, ready(a, 2) && ready(b, 2));
	bool alias_theirs = cluster_owner(a, key_of(301), NULL, 0);
	long long want = alias_theirs, copies_theirs = 0;
	for (unsigned i = 1; i <= 149; i++) {
		bool theirs = cluster_owner(a, key_of(i), NULL, 0);
		want += theirs && i % 3 != 0;
		copies_theirs += theirs && i % 3 == 0;
	}
	assert_true(want > 30 && copies_theirs > 10);
	struct dir_stats st;
	ASSERT_WITHIN(3, (dir_get_stats(da, &st), st.entries == (uint64_t)want));
	assert_int_equal(st.tracked, 150);
	assert_int_equal(st.dropped, 51);
	assert_int_equal(redis_int("KEYS larder:dir:*"), want);
	assert_string_equal(holders(key_of(301)), alias_theirs ? "node-a" : "");
	assert_string_equal(holders(key_of(300)), "");
	for (unsigned i = 1; i <= 200; i++) {
		bool listed = i <= 149 && i % 3 != 0 && cluster_owner(a, key_of(i), NULL, 0);
		assert_string_equal(holders(key_of(i)), listed ? "node-a" : "");
	}
	/* Evicted later: withdrawn like any tracked chunk. */
	for (unsigned i = 1; i <= 149; i++)
		set_held(da, i, false, 0);
	ASSERT_WITHIN(3, redis_int("KEYS larder:dir:*") == alias_theirs);
	cluster_stop(a);
	cluster_stop(b);
	dir_destroy(da);
}

/* A node whose Redis never answers (nothing listens on port 1): it starts
 * anyway, alone. */
static struct cluster *start_lonely(void)
{
	struct cluster_config c = {
		.redis_url = "redis://127.0.0.1:1", .node_id = "lonely", .advertise = "h:1",
		.capacity = 1, .heartbeat_ms = HB_MS, .ttl_ms = TTL_MS, .secret = SECRET,
	};
	char err[256];
	struct cluster *cl = cluster_start(&c, NULL, NULL, err, sizeof err);
	assert_non_null(cl);
	return cl;
}

static void test_start_without_redis(void **state)
{
	(void)state;
	struct cluster *cl = start_lonely(); /* and it stops promptly */
	sleep_ms(300);
	struct cluster_view v;
	cluster_get_view(cl, &v);
	assert_false(v.redis_up);
	assert_false(v.subscribed);
	assert_int_equal(v.members, 1);
	assert_false(cluster_owner(cl, 1, NULL, 0));
	for (int i = 0; i < 5000; i++)
		cluster_publish_invalidate(cl, "b", "k");
	cluster_get_view(cl, &v);
	assert_int_equal(v.invalidations_dropped, 5000 - 4096);
	double t0 = now_s();
	cluster_stop(cl);
	assert_true(now_s() - t0 < 1.0);
}

/* Out of memory, an invalidation's mac is no mac: not 64 zeros, which a
 * message forged by anyone who can publish to Redis could carry. */
static void test_inval_mac_out_of_memory(void **state)
{
	(void)state;
	char mac[65], again[65];
	assert_int_equal(cl_inval_mac(SECRET, "body", 4, mac), 0);
	assert_int_equal(strlen(mac), 64);
	assert_int_equal(cl_inval_mac(SECRET, "body", 4, again), 0);
	assert_string_equal(mac, again);
	alloc_fail_nth(1);
	assert_int_equal(cl_inval_mac(SECRET, "body", 4, again), -ENOMEM);
	assert_true(alloc_fail_fired());
	assert_int_equal(strlen(again), 0);
}

/* An invalidation message good for ever could be replayed at will by
 * anyone who once read one off the channel: its expiry must be a number,
 * no further ahead than a sender sets it (and the clocks' skew). */
static void test_inval_expiry_bounded(void **state)
{
	(void)state;
	double now_ms = 1.8e12;
	char ahead[32], fine[32];
	snprintf(ahead, sizeof ahead, "%.0f", now_ms + INVAL_VALID_MS + MEMBER_SKEW_MS + 1000);
	snprintf(fine, sizeof fine, "%.0f", now_ms + INVAL_VALID_MS);
	const char *const expiries[] = { "inf", "nan", "1e42", "-inf", ahead, fine };
	for (size_t i = 0; i < sizeof expiries / sizeof expiries[0]; i++) {
		char body[128], msg[256], mac[65];
		snprintf(body, sizeof body, "%s\nsender\nbucket\nkey", expiries[i]);
		assert_int_equal(cl_inval_mac(SECRET, body, strlen(body), mac), 0);
		snprintf(msg, sizeof msg, "%s\n%s", mac, body);
		struct inval_msg m;
		enum inval_verdict v = cl_inval_parse(SECRET, msg, strlen(msg), now_ms, &m);
		assert_int_equal(v, expiries[i] == fine ? INVAL_OK : INVAL_FORGED);
	}
}

/* A member's capacity is its cache's bytes: one past 2^62 (4 EiB) is no
 * cache, and turned into a JSON integer (GET /admin/cluster) it overflowed
 * (undefined behaviour: 1e30 came out as INT64_MIN). */
static void test_member_capacity_bounded(void **state)
{
	(void)state;
	static struct cluster cl; /* only its secret is read */
	snprintf(cl.secret, sizeof cl.secret, "%s", SECRET);
	double now_ms = 1.8e12;
	const char *const caps[] = { "1e30", "4.7e18", "inf", "0", "-5", "1e18", "1073741824" };
	for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++) {
		char v[256];
		int n = snprintf(v, sizeof v, "10.0.0.1:8080\t%s\t0\t%.0f\t2", caps[i], now_ms + 1000);
		v[n] = '\t';
		cl_member_mac(SECRET, "node-b", v, (size_t)n, v + n + 1);
		struct member m;
		memset(&m, 0, sizeof m);
		snprintf(m.id, sizeof m.id, "node-b");
		bool good = i >= 5;
		assert_int_equal(cl_parse_member(&cl, v, strlen(v), now_ms, &m), good);
	}
}

/* A node that answered nothing is gone past for CLUSTER_AVOID_S; the table
 * is bounded, and a full one gives up the entry that ends soonest. */
static void test_avoid_table(void **state)
{
	(void)state;
	struct cluster *cl = start_lonely();
	assert_true(cluster_avoided(cl, "a:1", 100.0) == 0);
	assert_true(cluster_avoid(cl, "a:1", 100.0));  /* new: said once */
	assert_false(cluster_avoid(cl, "a:1", 101.0)); /* already: extended */
	assert_true(cluster_avoided(cl, "a:1", 102.0) > CLUSTER_AVOID_S - 1.5);
	assert_true(cluster_avoided(cl, "b:1", 102.0) == 0);
	assert_true(cluster_avoided(cl, "a:1", 101.0 + CLUSTER_AVOID_S) == 0);
	assert_true(cluster_avoid(cl, "a:1", 101.0 + CLUSTER_AVOID_S)); /* ended: new again */
	/* a:1 ends first; 16 more fill the table and the 17th takes its place. */
	char addr[32];
	for (int i = 0; i < CLUSTER_AVOID_MAX; i++) {
		snprintf(addr, sizeof addr, "n%d:1", i);
		assert_true(cluster_avoid(cl, addr, 120.0 + i));
	}
	assert_true(cluster_avoided(cl, "a:1", 120.0 + CLUSTER_AVOID_MAX) == 0);
	for (int i = 0; i < CLUSTER_AVOID_MAX; i++) {
		snprintf(addr, sizeof addr, "n%d:1", i);
		assert_true(cluster_avoided(cl, addr, 120.0 + CLUSTER_AVOID_MAX - 7) > 0);
	}
	assert_true(cluster_avoided(NULL, "a:1", 0) == 0);
	assert_false(cluster_avoid(NULL, "a:1", 0));
	cluster_stop(cl);
}

static void test_config(void **state)
{
	char err[256];
	struct cluster_config c = { .node_id = "n", .advertise = "h:1", .capacity = 1,
	                            .secret = SECRET };

	/* No Redis, no cluster: NULL without an error, and NULL is usable. */
	assert_null(cluster_start(&c, NULL, NULL, err, sizeof err));
	assert_string_equal(err, "");
	struct cluster_view v;
	cluster_get_view(NULL, &v);
	assert_false(v.redis_up);
	assert_int_equal(v.members, 1);
	assert_false(cluster_owner(NULL, 1, NULL, 0));
	cluster_publish_invalidate(NULL, "b", "k");
	assert_int_equal(cluster_members(NULL, NULL, NULL, NULL, NULL, 4), 0);
	cluster_stop(NULL);

	static const char *const bad_urls[] = { "http://h:1", "redis://", "redis://h:0",
		"redis://h:99999", "redis://h:1/x", "redis://h:1x", "redis://user@h:1", NULL };
	for (int i = 0; bad_urls[i]; i++) {
		c.redis_url = bad_urls[i];
		assert_null(cluster_start(&c, NULL, NULL, err, sizeof err));
		assert_true(err[0] != '\0');
	}
	c.redis_url = "redis://h:1";
	c.node_id = "has space";
	assert_null(cluster_start(&c, NULL, NULL, err, sizeof err));
	c.node_id = "";
	assert_null(cluster_start(&c, NULL, NULL, err, sizeof err));
	c.node_id = "n";
	c.capacity = 0;
	assert_null(cluster_start(&c, NULL, NULL, err, sizeof err));
	c.capacity = 1;
	c.heartbeat_ms = 1000;
	c.ttl_ms = 1000;
	assert_null(cluster_start(&c, NULL, NULL, err, sizeof err));
	assert_non_null(strstr(err, "ttl_ms"));
	c.ttl_ms = 0;
	c.secret = NULL; /* membership entries could not be signed */
	assert_null(cluster_start(&c, NULL, NULL, err, sizeof err));
	assert_non_null(strstr(err, "secret"));
	c.secret = "too-short";
	assert_null(cluster_start(&c, NULL, NULL, err, sizeof err));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_inval_mac_out_of_memory),
		cmocka_unit_test(test_inval_expiry_bounded),
		cmocka_unit_test(test_member_capacity_bounded),
		cmocka_unit_test(test_avoid_table),
		cmocka_unit_test(test_read_barrier_bookkeeping),
		cmocka_unit_test(test_config),
		cmocka_unit_test(test_start_without_redis),
		cmocka_unit_test_setup_teardown(test_members_and_ownership, setup, teardown),
		cmocka_unit_test_setup_teardown(test_invalidation, setup, teardown),
		cmocka_unit_test_setup_teardown(test_leave, setup, teardown),
		cmocka_unit_test_setup_teardown(test_forged_members_ignored, setup, teardown),
		cmocka_unit_test_setup_teardown(test_other_protocol_not_a_member, setup, teardown),
		cmocka_unit_test_setup_teardown(test_redis_outage, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dropped_invalidations_resync_the_others, setup,
		                                teardown),
		cmocka_unit_test_setup_teardown(test_read_barrier, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refused_publish_counts_as_dropped, setup,
		                                teardown),
		cmocka_unit_test_setup_teardown(test_directory_lists_what_hashing_cannot_tell, setup, teardown),
		cmocka_unit_test_setup_teardown(test_directory_many_entries, setup, teardown),
		cmocka_unit_test_setup_teardown(test_directory_lists_copies_of_a_dead_owner, setup,
		                                teardown),
		cmocka_unit_test_setup_teardown(test_directory_tracks_what_a_restart_recovered, setup,
		                                teardown),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

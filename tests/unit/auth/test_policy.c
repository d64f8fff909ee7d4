/*
 * test_policy.c - auth/policy.c: which requests a key's grants cover.
 * Keys come from a config text, so grants are normalised as in production.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "auth/policy.h"
#include "config/config.h"

static const char conf[] =
	"[key RO]\n"
	"secret = r\n"
	"access = read-only\n"
	"buckets = train/data, models\n"
	"\n"
	"[key RW]\n"
	"secret = w\n"
	"access = read-write\n"
	"buckets = train/data/, scratch\n"
	"\n"
	"[key ALL]\n"
	"secret = a\n"
	"access = read-only\n"
	"buckets = *\n"
	"\n"
	"[key ALLRW]\n"
	"secret = a\n"
	"access = read-write\n"
	"buckets = *\n"
	"\n"
	"[anonymous]\n"
	"buckets = public/pub/\n";

static int setup(void **state)
{
	char err[256];
	struct cfg *c = cfg_load_text(conf, NULL, err, sizeof err);
	if (!c) {
		print_error("config: %s\n", err);
		return -1;
	}
	*state = c;
	return 0;
}

static int teardown(void **state)
{
	cfg_free(*state);
	return 0;
}

static const struct client_key *key(void **state, const char *id)
{
	const struct client_key *k = cfg_find_key(*state, id);
	assert_non_null(k);
	return k;
}

static void test_prefix_is_a_folder(void **state)
{
	const struct client_key *ro = key(state, "RO");
	/* "data" in the config means data/: never database/x. */
	assert_true(pol_allows(ro, POL_READ, "train", "data/x", NULL));
	assert_true(pol_allows(ro, POL_READ, "train", "data/a/b/c.tar", NULL));
	assert_true(pol_allows(ro, POL_READ, "train", "data/", NULL));
	assert_false(pol_allows(ro, POL_READ, "train", "database/x", NULL));
	assert_false(pol_allows(ro, POL_READ, "train", "data", NULL));
	assert_false(pol_allows(ro, POL_READ, "train", "other/x", NULL));
	assert_false(pol_allows(ro, POL_READ, "train", "", NULL));
	assert_false(pol_allows(ro, POL_READ, "train", "Data/x", NULL));
	/* The grant is on one bucket only. */
	assert_false(pol_allows(ro, POL_READ, "train2", "data/x", NULL));
	assert_false(pol_allows(ro, POL_READ, "trai", "data/x", NULL));

	const struct client_key *rw = key(state, "RW");
	assert_true(pol_allows(rw, POL_WRITE, "train", "data/x", NULL));
	assert_false(pol_allows(rw, POL_WRITE, "train", "database/x", NULL));
}

static void test_dot_segments(void **state)
{
	const struct client_key *ro = key(state, "RO");
	/* A dot segment could be collapsed out of the prefix on the way upstream. */
	assert_false(pol_allows(ro, POL_READ, "train", "data/../secret", NULL));
	assert_false(pol_allows(ro, POL_READ, "train", "data/./x", NULL));
	assert_false(pol_allows(ro, POL_READ, "train", "data/x/..", NULL));
	assert_true(pol_allows(ro, POL_READ, "train", "data/..x/.y", NULL));
	assert_true(pol_allows(ro, POL_READ, "train", "data/x..y", NULL));
	/* A whole-bucket grant has no prefix to escape from. */
	assert_true(pol_allows(ro, POL_READ, "models", "a/../b", NULL));
}

static void test_whole_bucket(void **state)
{
	const struct client_key *ro = key(state, "RO");
	assert_true(pol_allows(ro, POL_READ, "models", "anything/at/all", NULL));
	assert_true(pol_allows(ro, POL_READ, "models", "", NULL));
	assert_true(pol_allows(ro, POL_READ, "models", NULL, NULL));   /* e.g. GetBucketLocation */
	assert_true(pol_allows(ro, POL_READ, "models", NULL, ""));
	assert_true(pol_allows(ro, POL_READ, "models", NULL, "x/"));
}

static void test_read_only_refuses_writes(void **state)
{
	const struct client_key *ro = key(state, "RO");
	assert_false(pol_allows(ro, POL_WRITE, "train", "data/x", NULL));
	assert_false(pol_allows(ro, POL_WRITE, "models", "m.bin", NULL));
	assert_false(pol_allows(ro, POL_WRITE, "models", NULL, NULL));
	const struct client_key *all = key(state, "ALL");
	assert_false(pol_allows(all, POL_WRITE, "any", "x", NULL));
	assert_false(pol_allows(all, POL_WRITE, "any", NULL, NULL));
	assert_false(pol_allows(all, POL_WRITE, NULL, NULL, NULL));
	/* The read-write key writes within its grants only. */
	const struct client_key *rw = key(state, "RW");
	assert_true(pol_allows(rw, POL_WRITE, "scratch", "tmp/1", NULL));
	assert_true(pol_allows(rw, POL_READ, "scratch", "tmp/1", NULL));
	assert_false(pol_allows(rw, POL_WRITE, "models", "m.bin", NULL));
}

static void test_bucket_requests(void **state)
{
	/* A bucket request that does not list needs a whole-bucket grant. */
	const struct client_key *ro = key(state, "RO");
	const struct client_key *rw = key(state, "RW");
	assert_false(pol_allows(ro, POL_READ, "train", NULL, NULL));
	assert_false(pol_allows(rw, POL_WRITE, "train", NULL, NULL));  /* e.g. DeleteBucket */
	assert_true(pol_allows(rw, POL_WRITE, "scratch", NULL, NULL));
	assert_true(pol_allows(rw, POL_READ, "scratch", NULL, NULL));
	assert_false(pol_allows(rw, POL_WRITE, "unknown", NULL, NULL));
	assert_true(pol_allows(key(state, "ALLRW"), POL_WRITE, "newbucket", NULL, NULL));
}

static void test_listing_prefixes(void **state)
{
	const struct client_key *ro = key(state, "RO");
	assert_true(pol_allows(ro, POL_READ, "train", NULL, "data/"));
	assert_true(pol_allows(ro, POL_READ, "train", NULL, "data/2024/"));
	assert_true(pol_allows(ro, POL_READ, "train", NULL, "data/part-0"));
	/* "data" would also list database/...; "" lists everything. */
	assert_false(pol_allows(ro, POL_READ, "train", NULL, "data"));
	assert_false(pol_allows(ro, POL_READ, "train", NULL, "dat"));
	assert_false(pol_allows(ro, POL_READ, "train", NULL, ""));
	assert_false(pol_allows(ro, POL_READ, "train", NULL, "database/"));
	assert_false(pol_allows(ro, POL_READ, "other", NULL, "data/"));
}

static void test_service_requests(void **state)
{
	/* ListBuckets: only a "*" grant. */
	assert_true(pol_allows(key(state, "ALL"), POL_READ, NULL, NULL, NULL));
	assert_true(pol_allows(key(state, "ALLRW"), POL_READ, NULL, NULL, NULL));
	assert_false(pol_allows(key(state, "RO"), POL_READ, NULL, NULL, NULL));
	assert_false(pol_allows(key(state, "RW"), POL_READ, NULL, NULL, NULL));
	const struct cfg *c = *state;
	assert_false(pol_allows(&c->anonymous, POL_READ, NULL, NULL, NULL));
	/* "*" covers every bucket, object and listing. */
	const struct client_key *all = key(state, "ALL");
	assert_true(pol_allows(all, POL_READ, "any-bucket", "k", NULL));
	assert_true(pol_allows(all, POL_READ, "any-bucket", NULL, ""));
	assert_true(pol_allows(all, POL_READ, "any-bucket", NULL, NULL));
}

static void test_anonymous(void **state)
{
	const struct cfg *c = *state;
	const struct client_key *anon = &c->anonymous;
	assert_true(pol_allows(anon, POL_READ, "public", "pub/file", NULL));
	assert_true(pol_allows(anon, POL_READ, "public", NULL, "pub/"));
	assert_false(pol_allows(anon, POL_WRITE, "public", "pub/file", NULL));
	assert_false(pol_allows(anon, POL_READ, "public", "private/file", NULL));
	assert_false(pol_allows(anon, POL_READ, "public", NULL, NULL));
	assert_false(pol_allows(anon, POL_READ, "train", "data/x", NULL));

	/* No [anonymous]: no grants, nothing allowed. */
	char err[128];
	struct cfg *none = cfg_load_text(NULL, NULL, err, sizeof err);
	assert_non_null(none);
	assert_false(pol_allows(&none->anonymous, POL_READ, "public", "pub/file", NULL));
	assert_false(pol_allows(&none->anonymous, POL_READ, NULL, NULL, NULL));
	cfg_free(none);
	/* Unknown key. */
	assert_false(pol_allows(NULL, POL_READ, "public", "pub/file", NULL));
}

/* Changing an object's ACL, tags or lock takes a whole-bucket grant of a
 * read-write key: a prefix grant writes and removes, nothing more. */
static void test_governing_needs_the_whole_bucket(void **state)
{
	const struct client_key *rw = key(state, "RW");
	assert_true(pol_allows(rw, POL_WRITE, "train", "data/x", NULL));
	assert_false(pol_allows(rw, POL_GOVERN, "train", "data/x", NULL));
	assert_false(pol_allows(rw, POL_GOVERN, "train", NULL, NULL));
	assert_true(pol_allows(rw, POL_GOVERN, "scratch", "x", NULL));
	assert_true(pol_allows(rw, POL_GOVERN, "scratch", NULL, NULL));
	assert_true(pol_allows(key(state, "ALLRW"), POL_GOVERN, "any", "a/b", NULL));
	assert_false(pol_allows(key(state, "ALL"), POL_GOVERN, "any", "a/b", NULL));
	assert_false(pol_allows(key(state, "RO"), POL_GOVERN, "models", "x", NULL));
}

static void test_inspecting_needs_the_whole_bucket(void **state)
{
	/* Earlier versions, ACLs, tags: a read, but only of a whole bucket. */
	const struct client_key *ro = key(state, "RO");
	assert_true(pol_allows(ro, POL_READ, "train", "data/x", NULL));
	assert_false(pol_allows(ro, POL_INSPECT, "train", "data/x", NULL));
	assert_true(pol_allows(ro, POL_READ, "train", NULL, "data/"));
	assert_false(pol_allows(ro, POL_INSPECT, "train", NULL, "data/"));
	assert_true(pol_allows(ro, POL_INSPECT, "models", "x", NULL));
	assert_true(pol_allows(ro, POL_INSPECT, "models", NULL, ""));
	assert_false(pol_allows(ro, POL_INSPECT, "other", "x", NULL));
	assert_true(pol_allows(key(state, "ALL"), POL_INSPECT, "any", "a/b", NULL));
	/* A read-write prefix grant inspects no more than a read-only one. */
	assert_false(pol_allows(key(state, "RW"), POL_INSPECT, "train", "data/x", NULL));
	assert_true(pol_allows(key(state, "RW"), POL_INSPECT, "scratch", "x", NULL));
}

static void test_hand_built_grants(void **state)
{
	(void)state;
	/* A key built without the config loader: a "*" grant with a prefix is
	 * not ListBuckets, and write access on a read-write key. */
	struct grant g[] = { { .bucket = "*", .prefix = "shared/" },
	                         { .bucket = "logs", .prefix = "" } };
	struct client_key k = { .id = "H", .secret = "s", .write = true, .grants = g, .n_grants = 2 };
	assert_true(pol_allows(&k, POL_WRITE, "any", "shared/x", NULL));
	assert_false(pol_allows(&k, POL_WRITE, "any", "private/x", NULL));
	assert_false(pol_allows(&k, POL_READ, NULL, NULL, NULL));
	assert_true(pol_allows(&k, POL_WRITE, "logs", NULL, NULL));
	k.n_grants = 0;
	assert_false(pol_allows(&k, POL_READ, "logs", "x", NULL));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_prefix_is_a_folder),
		cmocka_unit_test(test_dot_segments),
		cmocka_unit_test(test_whole_bucket),
		cmocka_unit_test(test_read_only_refuses_writes),
		cmocka_unit_test(test_governing_needs_the_whole_bucket),
		cmocka_unit_test(test_inspecting_needs_the_whole_bucket),
		cmocka_unit_test(test_bucket_requests),
		cmocka_unit_test(test_listing_prefixes),
		cmocka_unit_test(test_service_requests),
		cmocka_unit_test(test_anonymous),
		cmocka_unit_test(test_hand_built_grants),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}

/*
 * test_profiles.c - access profiles (gateway/profiles.h): what is recorded
 * (matching reads, once, in the order they began), names, and the saved
 * file read back by a new registry (a restart).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "gateway/profiles.h"

static void t_names(void **state)
{
	(void)state;
	assert_true(profile_name_ok("train-7.v2_x"));
	assert_false(profile_name_ok(""));
	assert_false(profile_name_ok(".hidden"));
	assert_false(profile_name_ok("../x"));
	assert_false(profile_name_ok("a b"));
	char long_name[66];
	memset(long_name, 'a', 65);
	long_name[65] = '\0';
	assert_false(profile_name_ok(long_name));
}

static void t_record_save_and_load(void **state)
{
	(void)state;
	char dir[] = "/tmp/larder-test-profiles-XXXXXX";
	assert_non_null(mkdtemp(dir));
	char err[256];
	struct profiles *p = profiles_open(dir, err, sizeof err);
	assert_non_null(p);
	assert_int_equal(profiles_start(p, "job", NULL, "t1"), 0);
	assert_int_equal(profiles_start(p, "job", NULL, "t2"), -EEXIST);
	assert_int_equal(profiles_start(p, "bad/name", NULL, "t"), -EINVAL);
	assert_int_equal(profiles_start(p, "both", "AK", "t"), -EINVAL);
	assert_int_equal(profiles_start(p, "bykey", "AKID", NULL), 0);

	profiles_note(p, "AKID", "t1", "bkt", "k2", 2.0);
	profiles_note(p, NULL, "t1", "bkt", "k1", 1.0);  /* began first, ended second */
	profiles_note(p, NULL, "t1", "bkt", "k2", 3.0);  /* read again: nothing new */
	profiles_note(p, NULL, "t9", "bkt", "k3", 4.0);  /* another tag */
	profiles_note(p, "AKID", NULL, "cbk", "k4", 5.0);
	assert_int_equal(profiles_stop(p, "job"), 0);
	assert_int_equal(profiles_stop(p, "job"), -EALREADY);
	assert_int_equal(profiles_stop(p, "none"), -ENOENT);

	char **b, **k;
	size_t n;
	assert_int_equal(profiles_get(p, "job", &b, &k, &n), 0);
	assert_int_equal(n, 2);
	assert_string_equal(k[0], "k1");
	assert_string_equal(k[1], "k2");
	profile_reads_free(b, k, n);
	profiles_close(p); /* saves "bykey", still recording */

	p = profiles_open(dir, err, sizeof err);
	assert_non_null(p);
	struct profile_info info[4];
	assert_int_equal(profiles_list(p, info, 4), 2);
	assert_int_equal(profiles_get(p, "bykey", &b, &k, &n), 0);
	assert_int_equal(n, 2);
	assert_string_equal(b[0], "bkt");
	assert_string_equal(k[0], "k2");
	assert_string_equal(b[1], "cbk");
	assert_string_equal(k[1], "k4");
	profile_reads_free(b, k, n);
	assert_int_equal(profiles_get(p, "job", &b, &k, &n), 0);
	assert_int_equal(n, 2);
	profile_reads_free(b, k, n);
	/* Loaded profiles are stopped; a new recording replaces one. */
	assert_int_equal(profiles_start(p, "job", NULL, "t1"), 0);
	assert_int_equal(profiles_get(p, "job", &b, &k, &n), 0);
	assert_int_equal(n, 0);
	profile_reads_free(b, k, n);
	assert_int_equal(profiles_stop(p, "job"), 0);
	profiles_close(p);

	char path[128];
	for (const char *const *f = (const char *const[]){ "job", "bykey", NULL }; *f; f++) {
		snprintf(path, sizeof path, "%s/profiles/%s.json", dir, *f);
		assert_int_equal(unlink(path), 0);
	}
	snprintf(path, sizeof path, "%s/profiles", dir);
	assert_int_equal(rmdir(path), 0);
	assert_int_equal(rmdir(dir), 0);
}

struct relayed {
	char log[512];
	int n;
};

static void on_relay(void *arg, const char *origin, const char *name, const char *bucket,
                     const char *key, double started)
{
	struct relayed *r = arg;
	size_t len = strlen(r->log);
	snprintf(r->log + len, sizeof r->log - len, "%s:%s:%s/%s@%g;", origin, name, bucket, key,
	         started);
	r->n++;
}

/* Another node's profile: its relay hands each first matching read to the
 * hook, and stops when told; reads relayed to the origin join the profile
 * in the order they began. */
static void t_relay(void **state)
{
	(void)state;
	char err[256];
	struct profiles *p = profiles_open(NULL, err, sizeof err);
	assert_non_null(p);
	struct relayed r = { "", 0 };
	profiles_on_relay(p, on_relay, &r);
	assert_int_equal(profiles_relay_start(p, "node-0", "../x", NULL, "t"), -EINVAL);
	assert_int_equal(profiles_relay_start(p, "node-0", "cl", NULL, "job"), 0);
	profiles_note(p, NULL, "job", "b", "k1", 2.0);
	profiles_note(p, NULL, "job", "b", "k1", 3.0);      /* read again */
	profiles_note(p, NULL, "other", "b", "k2", 4.0);    /* another job */
	profiles_note(p, "key", NULL, "b", "k3", 5.0);
	assert_string_equal(r.log, "node-0:cl:b/k1@2;");
	struct profile_info info[2];
	assert_int_equal(profiles_list(p, info, 2), 0);     /* a relay is not a profile here */
	profiles_relay_stop(p, "node-0", "cl");
	profiles_note(p, NULL, "job", "b", "k4", 6.0);
	assert_int_equal(r.n, 1);

	/* The origin: relayed reads merge with its own by start time. */
	assert_int_equal(profiles_start(p, "mine", NULL, "job"), 0);
	profiles_note(p, NULL, "job", "b", "late", 9.0);
	assert_true(profiles_note_in(p, "mine", "b", "early", 1.0));
	assert_true(profiles_note_in(p, "mine", "b", "late", 8.0)); /* known: only its time moves */
	assert_false(profiles_note_in(p, "nope", "b", "x", 1.0));  /* a stale relay's */
	assert_int_equal(profiles_stop(p, "mine"), 0);
	assert_false(profiles_note_in(p, "mine", "b", "after", 10.0)); /* stopped: not added */
	char **buckets, **keys;
	size_t n;
	assert_int_equal(profiles_get(p, "mine", &buckets, &keys, &n), 0);
	assert_int_equal(n, 2);
	assert_string_equal(keys[0], "early");
	assert_string_equal(keys[1], "late");
	profile_reads_free(buckets, keys, n);
	profiles_close(p);
}

/* A saved profile whose reads name no valid bucket or key (a file edited or
 * damaged) is skipped at load, not replayed: a replay would send larder's
 * signed requests upstream for whatever path it names. */
static void t_load_skips_reads_that_are_not_objects(void **state)
{
	(void)state;
	char dir[] = "/tmp/larder-test-profiles-XXXXXX";
	assert_non_null(mkdtemp(dir));
	char path[160];
	snprintf(path, sizeof path, "%s/profiles", dir);
	assert_int_equal(mkdir(path, 0700), 0);
	static const char *const bad[][2] = { { "..", "k" }, { "a/b", "k" }, { "b", "k" },
		                              { "bucket", "" } };
	char body[400];
	const char *const names[] = { "p0", "p1", "p2", "p3", "good" };
	for (int i = 0; i < 5; i++) {
		const char *b = i < 4 ? bad[i][0] : "bucket", *k = i < 4 ? bad[i][1] : "k";
		snprintf(body, sizeof body, "{\"version\":1,\"name\":\"%s\",\"tag\":\"t\","
		         "\"dropped\":0,\"reads\":[[\"bucket\",\"a\"],[\"%s\",\"%s\"]]}", names[i], b,
		         k);
		snprintf(path, sizeof path, "%s/profiles/%s.json", dir, names[i]);
		FILE *f = fopen(path, "w");
		assert_non_null(f);
		fputs(body, f);
		fclose(f);
	}
	char err[256];
	struct profiles *p = profiles_open(dir, err, sizeof err);
	assert_non_null(p);
	struct profile_info info[8];
	assert_int_equal(profiles_list(p, info, 8), 1);
	assert_string_equal(info[0].name, "good");
	assert_int_equal(info[0].reads, 2);
	profiles_close(p);
	for (int i = 0; i < 5; i++) {
		snprintf(path, sizeof path, "%s/profiles/%s.json", dir, names[i]);
		assert_int_equal(unlink(path), 0);
	}
	snprintf(path, sizeof path, "%s/profiles", dir);
	assert_int_equal(rmdir(path), 0);
	assert_int_equal(rmdir(dir), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(t_names),
		cmocka_unit_test(t_record_save_and_load),
		cmocka_unit_test(t_relay),
		cmocka_unit_test(t_load_skips_reads_that_are_not_objects),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

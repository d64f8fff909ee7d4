/*
 * test_profiles.c - access profiles (gateway/profiles.h): what is recorded
 * (matching reads, once, in the order they began), names, and the saved
 * file read back by a new registry (a restart).
 */
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/file.h"
#include "gateway/profiles.h"

/* file_replace wrapped (meson.build): with the gate shut, a save says it
 * began and waits until the test opens the gate (a slow disk). */
int __real_file_replace(const char *path, const void *data, size_t n);
int __wrap_file_replace(const char *path, const void *data, size_t n);

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool shut, entered;
} gate = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, false };

static struct timespec in_seconds(int s)
{
	struct timespec t;
	clock_gettime(CLOCK_REALTIME, &t);
	t.tv_sec += s;
	return t;
}

/* Waits (at most s seconds) until *flag is true; returns it. */
static bool gate_wait(bool *flag, int s)
{
	struct timespec until = in_seconds(s);
	pthread_mutex_lock(&gate.lock);
	while (!*flag && pthread_cond_timedwait(&gate.cond, &gate.lock, &until) == 0)
		;
	bool got = *flag;
	pthread_mutex_unlock(&gate.lock);
	return got;
}

static void gate_set(bool *flag, bool v)
{
	pthread_mutex_lock(&gate.lock);
	*flag = v;
	pthread_cond_broadcast(&gate.cond);
	pthread_mutex_unlock(&gate.lock);
}

int __wrap_file_replace(const char *path, const void *data, size_t n)
{
	pthread_mutex_lock(&gate.lock);
	bool shut = gate.shut;
	pthread_mutex_unlock(&gate.lock);
	if (shut) {
		gate_set(&gate.entered, true);
		struct timespec until = in_seconds(10);
		pthread_mutex_lock(&gate.lock);
		while (gate.shut && pthread_cond_timedwait(&gate.cond, &gate.lock, &until) == 0)
			;
		pthread_mutex_unlock(&gate.lock);
	}
	return __real_file_replace(path, data, n);
}

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

/* A registry in a new directory dir (a template mkdtemp fills). */
static struct profiles *open_new(char *dir)
{
	assert_non_null(mkdtemp(dir));
	char err[256];
	struct profiles *p = profiles_open(dir, err, sizeof err);
	assert_non_null(p);
	return p;
}

/* Removes dir/profiles/NAME.json for each name (to NULL), then the folders. */
static void remove_saved(const char *dir, const char *const *names)
{
	char path[160];
	for (; *names; names++) {
		snprintf(path, sizeof path, "%s/profiles/%s.json", dir, *names);
		assert_int_equal(unlink(path), 0);
	}
	snprintf(path, sizeof path, "%s/profiles", dir);
	assert_int_equal(rmdir(path), 0);
	assert_int_equal(rmdir(dir), 0);
}

static void t_record_save_and_load(void **state)
{
	(void)state;
	char dir[] = "/tmp/larder-test-profiles-XXXXXX";
	struct profiles *p = open_new(dir);
	char err[256];
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
	/* Stopped with no reads: replayed as none (it was -ENOMEM). */
	assert_int_equal(profiles_get(p, "job", &b, &k, &n), 0);
	assert_int_equal(n, 0);
	profile_reads_free(b, k, n);
	profiles_close(p);

	remove_saved(dir, (const char *const[]){ "job", "bykey", NULL });
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
	const char *const names[] = { "p0", "p1", "p2", "p3", "good", NULL };
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
	remove_saved(dir, names);
}

struct call {
	struct profiles *p;
	int rc;
	bool done;
};

static void *stop_big(void *arg)
{
	struct call *c = arg;
	c->rc = profiles_stop(c->p, "big");
	gate_set(&c->done, true);
	return NULL;
}

static void *start_big(void *arg)
{
	struct call *c = arg;
	c->rc = profiles_start(c->p, "big", NULL, "t3");
	gate_set(&c->done, true);
	return NULL;
}

/* What a worker's read and the listing do while another profile is saved */
static void *read_and_list(void *arg)
{
	struct call *c = arg;
	profiles_note(c->p, NULL, "t2", "b", "x", 1.0);
	struct profile_info info[4];
	c->rc = (int)profiles_list(c->p, info, 4);
	gate_set(&c->done, true);
	return NULL;
}

/* A profile is sorted and written without the registry's lock: while its
 * save is slow, other profiles go on recording (every worker's read takes
 * that lock) and listing answers; a new recording of that name waits for
 * the save, which holds the reads as they were at the stop. */
static void t_save_does_not_hold_reads(void **state)
{
	(void)state;
	char dir[] = "/tmp/larder-test-profiles-XXXXXX";
	struct profiles *p = open_new(dir);
	assert_int_equal(profiles_start(p, "big", NULL, "t1"), 0);
	assert_int_equal(profiles_start(p, "other", NULL, "t2"), 0);
	char key[32];
	for (int i = 0; i < 1000; i++) {
		snprintf(key, sizeof key, "k%d", i);
		profiles_note(p, NULL, "t1", "b", key, 1000.0 - i);
	}
	gate_set(&gate.shut, true);
	struct call stop = { p, -1, false }, note = { p, -1, false }, start = { p, -1, false };
	pthread_t ts, tn, tb;
	assert_int_equal(pthread_create(&ts, NULL, stop_big, &stop), 0);
	bool saving = gate_wait(&gate.entered, 5);
	assert_int_equal(pthread_create(&tn, NULL, read_and_list, &note), 0);
	bool noted = gate_wait(&note.done, 3);
	assert_int_equal(pthread_create(&tb, NULL, start_big, &start), 0);
	nanosleep(&(struct timespec){ 0, 100 * 1000 * 1000 }, NULL);
	bool started_early = gate_wait(&start.done, 0);
	gate_set(&gate.shut, false); /* opened whatever happened: the threads end */
	pthread_join(ts, NULL);
	pthread_join(tn, NULL);
	pthread_join(tb, NULL);
	assert_true(saving);
	assert_true(noted);            /* not held up by the save */
	assert_false(started_early);   /* waited for the save */
	assert_int_equal(stop.rc, 0);
	assert_int_equal(start.rc, 0);
	assert_int_equal(note.rc, 2);

	char path[128];
	snprintf(path, sizeof path, "%s/profiles/big.json", dir);
	json_error_t jerr;
	json_t *doc = json_load_file(path, 0, &jerr);
	json_t *reads = json_object_get(doc, "reads");
	assert_int_equal(json_array_size(reads), 1000);
	/* in the order they began: the last noted first */
	assert_string_equal(json_string_value(json_array_get(json_array_get(reads, 0), 1)), "k999");
	json_decref(doc);
	char **b, **k;
	size_t n;
	assert_int_equal(profiles_get(p, "other", &b, &k, &n), 0);
	assert_int_equal(n, 1);
	profile_reads_free(b, k, n);
	assert_int_equal(profiles_get(p, "big", &b, &k, &n), 0);
	assert_int_equal(n, 0); /* the new recording */
	profile_reads_free(b, k, n);
	profiles_close(p);
	remove_saved(dir, (const char *const[]){ "big", "other", NULL });
}

/* A replay's copy of a profile still recording is in start order, and one
 * of a stopped profile stays whole when a new recording replaces it. */
static void t_replay_copy(void **state)
{
	(void)state;
	char err[256];
	struct profiles *p = profiles_open(NULL, err, sizeof err);
	assert_non_null(p);
	assert_int_equal(profiles_start(p, "r", NULL, "t"), 0);
	profiles_note(p, NULL, "t", "b", "second", 2.0);
	profiles_note(p, NULL, "t", "b", "first", 1.0);
	char **b, **k;
	size_t n;
	assert_int_equal(profiles_get(p, "r", &b, &k, &n), 0);
	assert_int_equal(n, 2);
	assert_string_equal(k[0], "first");
	profile_reads_free(b, k, n);
	profiles_note(p, NULL, "t", "b", "zero", 0.5);
	assert_int_equal(profiles_stop(p, "r"), 0);
	assert_int_equal(profiles_get(p, "r", &b, &k, &n), 0);
	assert_int_equal(n, 3);
	assert_string_equal(k[0], "zero");
	assert_string_equal(k[2], "second");
	profile_reads_free(b, k, n);
	assert_int_equal(profiles_get(p, "none", &b, &k, &n), -ENOENT);
	profiles_close(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(t_names),
		cmocka_unit_test(t_record_save_and_load),
		cmocka_unit_test(t_relay),
		cmocka_unit_test(t_load_skips_reads_that_are_not_objects),
		cmocka_unit_test(t_save_does_not_hold_reads),
		cmocka_unit_test(t_replay_copy),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

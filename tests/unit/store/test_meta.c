/* test_meta.c - the object metadata cache: roles, coalescing, TTL, drops. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "store/meta.h"

static int woken;
static void wake(void *arg)
{
	(*(int *)arg)++;
}

static void test_load_wait_publish(void **state)
{
	struct meta_cache *mc = meta_cache_create(1000);
	struct obj_meta *out;
	struct chunk_waiter w1 = { .wake = wake, .arg = &woken }, w2 = w1;
	woken = 0;
	assert_int_equal(meta_lookup(mc, "b", "k", 0, 60, 0, &w1, &out), META_LOAD);
	assert_null(out);
	assert_int_equal(meta_lookup(mc, "b", "k", 0, 60, 0, &w1, &out), META_WAIT);
	assert_int_equal(meta_lookup(mc, "b", "k", 0, 60, 0, &w2, &out), META_WAIT);
	struct obj_meta *m = meta_new(42, "\"e1\"", 1000, "Content-Type: x/y\n", 0);
	meta_publish(mc, "b", "k", m);
	assert_int_equal(woken, 2);
	assert_int_equal(meta_lookup(mc, "b", "k", 10, 60, 0, &w1, &out), META_FRESH);
	assert_ptr_equal(out, m);
	assert_int_equal(out->size, 42);
	meta_unref(out);
	/* Another key is independent. */
	assert_int_equal(meta_lookup(mc, "b", "k2", 10, 60, 0, &w1, &out), META_LOAD);
	meta_publish(mc, "b", "k2", NULL);
	/* A failed first load leaves nothing: the next reader loads. */
	assert_int_equal(meta_lookup(mc, "b", "k2", 10, 60, 0, &w1, &out), META_LOAD);
	meta_publish(mc, "b", "k2", NULL);
	/* Nor when readers waited on it (the loader's own reader among them:
	 * a 404 not remembered left an entry per missing key). */
	assert_int_equal(meta_lookup(mc, "b", "k2", 10, 60, 0, &w1, &out), META_LOAD);
	assert_int_equal(meta_lookup(mc, "b", "k2", 10, 60, 0, &w1, &out), META_WAIT);
	woken = 0;
	meta_publish(mc, "b", "k2", NULL);
	assert_int_equal(woken, 1);
	assert_int_equal(meta_cache_count(mc), 1); /* "k" alone */
	assert_int_equal(meta_lookup(mc, "b", "k2", 10, 60, 0, &w1, &out), META_LOAD);
	meta_publish(mc, "b", "k2", NULL);
	meta_unref(m);
	meta_cache_destroy(mc);
}

/* A failed load is remembered in its entry for those who waited on it:
 * at or after the time each began waiting, with upstream's status. */
static void test_failure_shared(void **state)
{
	(void)state;
	struct meta_cache *mc = meta_cache_create(1000);
	struct obj_meta *out;
	struct chunk_waiter w1 = { .wake = wake, .arg = &woken }, w2 = w1;
	long status = 0;
	woken = 0;
	assert_false(meta_load_failed(mc, "b", "k", 0, &status));
	assert_int_equal(meta_lookup(mc, "b", "k", 0, 60, 0, &w1, &out), META_LOAD);
	assert_int_equal(meta_lookup(mc, "b", "k", 1, 60, 0, &w2, &out), META_WAIT);
	meta_publish_failure(mc, "b", "k", 503, 5.0);
	assert_int_equal(woken, 1);
	assert_true(meta_load_failed(mc, "b", "k", 1.0, &status));
	assert_int_equal(status, 503);
	assert_false(meta_load_failed(mc, "b", "k", 6.0, &status)); /* waited on a later load */
	assert_false(meta_load_failed(mc, "b", "other", 0, &status));
	/* the next reader loads again; a failure nobody waited for leaves no
	 * entry, so nothing to share */
	assert_int_equal(meta_lookup(mc, "b", "k", 7, 60, 0, &w1, &out), META_LOAD);
	meta_publish_failure(mc, "b", "k", META_NOT_CACHEABLE, 8.0);
	assert_false(meta_load_failed(mc, "b", "k", 7.5, &status));
	assert_int_equal(meta_cache_count(mc), 0);
	meta_cache_destroy(mc);
}

static void test_ttl_and_revalidation(void **state)
{
	struct meta_cache *mc = meta_cache_create(1000);
	struct obj_meta *out;
	struct chunk_waiter w = { .wake = wake, .arg = &woken };
	assert_int_equal(meta_lookup(mc, "b", "k", 0, 5, 0, &w, &out), META_LOAD);
	struct obj_meta *m = meta_new(1, "\"e\"", 0, NULL, 0);
	meta_publish(mc, "b", "k", m);
	meta_unref(m);
	assert_int_equal(meta_lookup(mc, "b", "k", 4.9, 5, 0, &w, &out), META_FRESH);
	meta_unref(out);
	/* Expired: one reader revalidates with the old entry in hand. */
	assert_int_equal(meta_lookup(mc, "b", "k", 5.1, 5, 0, &w, &out), META_LOAD);
	assert_non_null(out);
	assert_string_equal(out->etag, "\"e\"");
	meta_unref(out);
	meta_refresh(mc, "b", "k", 0, NULL, 5.1);
	assert_int_equal(meta_lookup(mc, "b", "k", 9, 5, 0, &w, &out), META_FRESH);
	meta_unref(out);
	/* Immutable never expires. */
	assert_int_equal(meta_lookup(mc, "b", "k", 1e9, -1, 0, &w, &out), META_FRESH);
	meta_unref(out);
	meta_cache_destroy(mc);
}

/* An expired entry at now: the caller revalidates it (META_LOAD). */
static void expect_revalidation(struct meta_cache *mc, double now, struct chunk_waiter *w)
{
	struct obj_meta *out;
	assert_int_equal(meta_lookup(mc, "b", "k", now, 5, 0, w, &out), META_LOAD);
	meta_unref(out);
}

/* A 304 that names one header. */
static bool refresh_saying(struct meta_cache *mc, const char *key, const char *name,
                           const char *value, double now)
{
	struct hdrs h;
	hdrs_init(&h);
	assert_int_equal(hdrs_add(&h, name, value), 0);
	bool same = meta_refresh(mc, "b", key, 1000, &h, now);
	hdrs_fini(&h);
	return same;
}

/* A 304 that names another Last-Modified than the entry's is another
 * object with the same bytes: the entry is not refreshed and stays loading
 * (its readers wait) until what is learnt instead is published. */
static void test_revalidation_with_another_last_modified(void **state)
{
	struct meta_cache *mc = meta_cache_create(1000);
	struct obj_meta *out;
	struct chunk_waiter w = { .wake = wake, .arg = &woken };
	assert_int_equal(meta_lookup(mc, "b", "k", 0, 5, 0, &w, &out), META_LOAD);
	struct obj_meta *m = meta_new(1, "\"e\"", 1000, "Content-Type: a\n", 0);
	meta_publish(mc, "b", "k", m);
	meta_unref(m);
	/* the same time, or none given: refreshed */
	expect_revalidation(mc, 6, &w);
	assert_true(meta_refresh(mc, "b", "k", 1000, NULL, 6));
	expect_revalidation(mc, 12, &w);
	assert_true(meta_refresh(mc, "b", "k", 0, NULL, 12));
	expect_revalidation(mc, 18, &w);
	/* another version id (a versioned bucket's write in the same second):
	 * not refreshed; the same, or none on either side: refreshed */
	struct obj_meta *v = meta_new(1, "\"e\"", 1000,
	                              "x-amz-version-id: v1\nx-amz-tagging-count: 2\n", 12);
	meta_publish(mc, "b", "v", v);
	meta_unref(v);
	static const struct { const char *name, *value; bool same; } said[] = {
		{ "x-amz-version-id", "v1", true },
		{ "Content-Type", "b", true },        /* not compared */
		{ "x-amz-tagging-count", "2", true },
		{ "x-amz-version-id", "v2", false },
		{ "x-amz-tagging-count", "3", false },
	};
	for (size_t i = 0; i < sizeof said / sizeof said[0]; i++) {
		double t = 18 + 6 * (double)i;
		assert_int_equal(meta_lookup(mc, "b", "v", t, 5, 0, &w, &out), META_LOAD);
		meta_unref(out);
		assert_true(refresh_saying(mc, "v", said[i].name, said[i].value, t) == said[i].same);
		if (!said[i].same) { /* learnt again, as it was */
			v = meta_new(1, "\"e\"", 1000, "x-amz-version-id: v1\nx-amz-tagging-count: 2\n", t);
			meta_publish(mc, "b", "v", v);
			meta_unref(v);
		}
	}
	/* The entry names no version and no tags: another version id is not
	 * compared, a tag count is (tags added). */
	assert_true(refresh_saying(mc, "k", "x-amz-version-id", "v9", 18));
	expect_revalidation(mc, 24, &w);
	assert_false(refresh_saying(mc, "k", "x-amz-tagging-count", "1", 24));
	m = meta_new(1, "\"e\"", 1000, "Content-Type: a\n", 24);
	meta_publish(mc, "b", "k", m);
	meta_unref(m);
	expect_revalidation(mc, 30, &w);
	assert_true(meta_refresh(mc, "b", "k", 1000, NULL, 30));
	expect_revalidation(mc, 36, &w);
	/* another time: still loading, a reader waits */
	assert_false(meta_refresh(mc, "b", "k", 1002, NULL, 36));
	struct chunk_waiter w2 = { .wake = wake, .arg = &woken };
	assert_int_equal(meta_lookup(mc, "b", "k", 36, 5, 0, &w2, &out), META_WAIT);
	struct obj_meta *n = meta_new(1, "\"e\"", 1002, "Content-Type: b\n", 36);
	meta_publish(mc, "b", "k", n);
	meta_unref(n);
	assert_int_equal(meta_lookup(mc, "b", "k", 37, 5, 0, &w, &out), META_FRESH);
	assert_string_equal(out->headers, "Content-Type: b\n");
	meta_unref(out);
	meta_cache_destroy(mc);
}

static void test_negative(void **state)
{
	struct meta_cache *mc = meta_cache_create(1000);
	struct obj_meta *out;
	struct chunk_waiter w = { .wake = wake, .arg = &woken };
	assert_int_equal(meta_lookup(mc, "b", "gone", 0, 60, 2, &w, &out), META_LOAD);
	struct obj_meta *n = meta_new_negative(NULL, 0);
	meta_publish(mc, "b", "gone", n);
	meta_unref(n);
	assert_int_equal(meta_lookup(mc, "b", "gone", 1, 60, 2, &w, &out), META_FRESH);
	assert_true(out->negative);
	meta_unref(out);
	assert_int_equal(meta_lookup(mc, "b", "gone", 3, 60, 2, &w, &out), META_LOAD);
	assert_null(out); /* nothing to revalidate against */
	meta_publish(mc, "b", "gone", NULL);
	meta_cache_destroy(mc);
}

static void test_drops(void **state)
{
	struct meta_cache *mc = meta_cache_create(1000);
	struct obj_meta *out;
	struct chunk_waiter w = { .wake = wake, .arg = &woken };
	struct obj_meta *m = meta_new(1, "\"old\"", 0, NULL, 0);
	assert_int_equal(meta_lookup(mc, "b", "k", 0, 60, 0, &w, &out), META_LOAD);
	meta_publish(mc, "b", "k", m);
	meta_drop(mc, "b", "k");
	assert_int_equal(meta_lookup(mc, "b", "k", 0, 60, 0, &w, &out), META_LOAD);
	/* A write lands while the load runs: what the load saw is not kept. */
	meta_drop(mc, "b", "k");
	meta_publish(mc, "b", "k", m);
	assert_int_equal(meta_lookup(mc, "b", "k", 0, 60, 0, &w, &out), META_LOAD);
	meta_publish(mc, "b", "k", m);
	assert_int_equal(meta_lookup(mc, "b", "k2", 0, 60, 0, &w, &out), META_LOAD);
	meta_publish(mc, "b", "k2", m);
	assert_int_equal(meta_lookup(mc, "c", "k", 0, 60, 0, &w, &out), META_LOAD);
	meta_publish(mc, "c", "k", m);
	meta_drop_bucket(mc, "b");
	assert_int_equal(meta_lookup(mc, "b", "k2", 0, 60, 0, &w, &out), META_LOAD);
	meta_publish(mc, "b", "k2", NULL);
	assert_int_equal(meta_lookup(mc, "c", "k", 0, 60, 0, &w, &out), META_FRESH);
	meta_unref(out);
	meta_unref(m);
	meta_cache_destroy(mc);
}

/* meta_drop_other drops an entry only when it knows another version than
 * the one an answer named (another ETag or size); an answer for the version
 * it knows, or for a key it does not know, drops nothing. */
static void test_drop_other(void **state)
{
	struct meta_cache *mc = meta_cache_create(1000);
	struct obj_meta *out;
	struct chunk_waiter w = { .wake = wake, .arg = &woken };
	struct obj_meta *m = meta_new(5, "\"old\"", 0, NULL, 0);
	assert_false(meta_drop_other(mc, "b", "k", "\"new\"", 5));
	assert_int_equal(meta_lookup(mc, "b", "k", 0, 60, 0, &w, &out), META_LOAD);
	meta_publish(mc, "b", "k", m);
	assert_false(meta_drop_other(mc, "b", "k", "\"old\"", 5));
	assert_int_equal(meta_lookup(mc, "b", "k", 0, 60, 0, &w, &out), META_FRESH);
	meta_unref(out);
	assert_true(meta_drop_other(mc, "b", "k", "\"old\"", 6));
	assert_int_equal(meta_lookup(mc, "b", "k", 0, 60, 0, &w, &out), META_LOAD);
	meta_publish(mc, "b", "k", m);
	assert_true(meta_drop_other(mc, "b", "k", "\"new\"", 5));
	assert_int_equal(meta_lookup(mc, "b", "k", 0, 60, 0, &w, &out), META_LOAD);
	meta_publish(mc, "b", "k", NULL);
	meta_unref(m);
	meta_cache_destroy(mc);
}

/* After meta_expire_all every entry is revalidated once, immutable and
 * negative ones too, with the old entry in hand; a load that began before
 * it publishes an entry that is revalidated too. */
static void test_expire_all(void **state)
{
	struct meta_cache *mc = meta_cache_create(1000);
	struct obj_meta *out;
	struct chunk_waiter w = { .wake = wake, .arg = &woken };
	assert_int_equal(meta_lookup(mc, "b", "k", 0, -1, -1, &w, &out), META_LOAD);
	struct obj_meta *m = meta_new(1, "\"e\"", 0, NULL, 0);
	meta_publish(mc, "b", "k", m);
	assert_int_equal(meta_lookup(mc, "b", "gone", 0, -1, -1, &w, &out), META_LOAD);
	struct obj_meta *n = meta_new_negative(NULL, 0);
	meta_publish(mc, "b", "gone", n);
	meta_unref(n);
	assert_int_equal(meta_lookup(mc, "b", "k", 1, -1, -1, &w, &out), META_FRESH);
	meta_unref(out);

	meta_expire_all(mc);
	assert_int_equal(meta_lookup(mc, "b", "k", 2, -1, -1, &w, &out), META_LOAD);
	assert_ptr_equal(out, m); /* a conditional request can revalidate it */
	meta_unref(out);
	assert_true(meta_refresh(mc, "b", "k", 0, NULL, 2));
	assert_int_equal(meta_lookup(mc, "b", "k", 3, -1, -1, &w, &out), META_FRESH);
	meta_unref(out);
	assert_int_equal(meta_lookup(mc, "b", "gone", 3, -1, -1, &w, &out), META_LOAD);
	assert_null(out);

	/* "gone" is loading across another expiry: what it publishes is stale. */
	meta_expire_all(mc);
	struct obj_meta *m2 = meta_new(2, "\"e2\"", 0, NULL, 3);
	meta_publish(mc, "b", "gone", m2);
	meta_unref(m2);
	assert_int_equal(meta_lookup(mc, "b", "gone", 4, -1, -1, &w, &out), META_LOAD);
	assert_non_null(out);
	meta_unref(out);
	assert_true(meta_refresh(mc, "b", "gone", 0, NULL, 4));
	assert_int_equal(meta_lookup(mc, "b", "gone", 5, -1, -1, &w, &out), META_FRESH);
	meta_unref(out);
	meta_unref(m);
	meta_cache_destroy(mc);
}

static void test_unwait_and_bound(void **state)
{
	struct meta_cache *mc = meta_cache_create(64); /* one entry per shard */
	struct obj_meta *out;
	int mine = 0;
	struct chunk_waiter w = { .wake = wake, .arg = &mine };
	assert_int_equal(meta_lookup(mc, "b", "k", 0, 60, 0, &w, &out), META_LOAD);
	assert_int_equal(meta_lookup(mc, "b", "k", 0, 60, 0, &w, &out), META_WAIT);
	meta_unwait(mc, "b", "k", &w);
	meta_publish(mc, "b", "k", NULL);
	assert_int_equal(mine, 0);
	struct obj_meta *m = meta_new(1, "\"e\"", 0, NULL, 0);
	char key[32];
	for (int i = 0; i < 5000; i++) {
		snprintf(key, sizeof key, "k%d", i);
		meta_lookup(mc, "b", key, 0, 60, 0, &w, &out);
		meta_publish(mc, "b", key, m);
	}
	assert_true(meta_cache_count(mc) <= 64 * 2);
	meta_unref(m);
	meta_cache_destroy(mc);
}

static void count_key(void *arg, const char *key, struct obj_meta *m)
{
	(void)key;
	(*(int *)arg)++;
	meta_unref(m);
}

static void test_collect(void **state)
{
	struct meta_cache *mc = meta_cache_create(1000);
	struct obj_meta *out, *m = meta_new(1, "\"e\"", 0, NULL, 0);
	struct chunk_waiter w = { .wake = wake, .arg = &woken };
	static const char *const keys[] = { "data/a", "data/b", "database/x", "other", NULL };
	for (int i = 0; keys[i]; i++) {
		meta_lookup(mc, "b", keys[i], 0, 60, 0, &w, &out);
		meta_publish(mc, "b", keys[i], m);
	}
	meta_lookup(mc, "c", "data/a", 0, 60, 0, &w, &out);
	meta_publish(mc, "c", "data/a", m);
	/* A remembered 404 is collected too: a purge must forget it. */
	struct obj_meta *neg = meta_new_negative(NULL, 0);
	meta_lookup(mc, "b", "data/gone", 0, 60, 60, &w, &out);
	meta_publish(mc, "b", "data/gone", neg);
	int n = 0;
	assert_int_equal(meta_collect(mc, "b", "data/", false, count_key, &n), 3);
	assert_int_equal(n, 3);
	assert_int_equal(meta_collect(mc, "b", "data", false, count_key, &n), 4);
	assert_int_equal(meta_collect(mc, "b", "data/a", true, count_key, &n), 1);
	assert_int_equal(meta_collect(mc, "b", "data/gone", true, count_key, &n), 1);
	assert_int_equal(meta_collect(mc, "b", "", false, count_key, &n), 5);
	meta_unref(neg);
	meta_unref(m);
	meta_cache_destroy(mc);
}

static void test_encode_decode(void **state)
{
	struct obj_meta *m = meta_new(123456789012ull, "\"abc-3\"", 1700000000,
	                              "Content-Type: a/b\nx-amz-meta-k: v: w\n", 0);
	struct buf b;
	buf_init(&b, 1 << 16);
	assert_int_equal(meta_encode(m, &b), 0);
	/* The on-disk form, byte for byte (NVMe entries written before hold it). */
	char want[256];
	snprintf(want, sizeof want, "larder-meta 2\n123456789012\n1700000000\n\"abc-3\"\n%lld\n%s",
	         (long long)m->learnt_wall, m->headers);
	assert_string_equal(buf_cstr(&b), want);
	struct obj_meta *d = meta_decode(b.p, b.len, 5);
	assert_non_null(d);
	assert_true(d->learnt <= 5.0 && d->learnt > 3.0); /* written a moment ago */
	assert_int_equal(d->size, 123456789012ull);
	assert_string_equal(d->etag, "\"abc-3\"");
	assert_int_equal(d->last_modified, 1700000000);
	assert_string_equal(d->headers, m->headers);
	/* A blob cut short of its four header lines is refused. */
	assert_null(meta_decode(b.p, 20, 5));
	assert_null(meta_decode("larder-meta 1\n1\n0\n\"e\"\n", 22, 0));
	assert_null(meta_decode("junk", 4, 0));
	meta_unref(d);
	meta_unref(m);
	/* A Last-Modified before 1970 comes back as it went. */
	m = meta_new(0, "\"e\"", -86400, "", 0);
	buf_reset(&b);
	assert_int_equal(meta_encode(m, &b), 0);
	d = meta_decode(b.p, b.len, 5);
	assert_non_null(d);
	assert_int_equal(d->last_modified, -86400);
	meta_unref(d);
	meta_unref(m);
	buf_fini(&b);
	/* A damaged learnt time: before 1970 is refused (near LLONG_MIN it made
	 * the age overflow, UBSan's report, and the entry trusted anew); one
	 * long ago is as old as it says. */
	static const char early[] = "larder-meta 2\n1\n0\n\"e\"\n-9223372036854775807\n";
	assert_null(meta_decode(early, sizeof early - 1, 5));
	static const char old_one[] = "larder-meta 2\n1\n0\n\"e\"\n1\n";
	d = meta_decode(old_one, sizeof old_one - 1, 5);
	assert_non_null(d);
	assert_true(d->learnt < 5.0 - 1e9);
	meta_unref(d);
}

/* Parts and checksums learnt later: kept only for the same version, in a
 * copy (a reader's reference to the old entry never changes under it). */
static void test_learn_parts_and_checksums(void **state)
{
	struct meta_cache *mc = meta_cache_create(1000);
	struct obj_meta *out, *old;
	struct chunk_waiter w = { .wake = wake, .arg = &woken };
	uint64_t first, last;
	assert_int_equal(meta_lookup(mc, "b", "k", 0, 60, 0, &w, &out), META_LOAD);
	struct obj_meta *m = meta_new(100, "\"e-2\"", 0, "Content-Type: a/b\n", 0);
	meta_publish(mc, "b", "k", m);
	meta_unref(m);
	assert_int_equal(meta_lookup(mc, "b", "k", 1, 60, 0, &w, &old), META_FRESH);
	/* another version, another size, or an unknown key: ignored */
	meta_learn_part(mc, "b", "k", "\"other-2\"", 100, 1, 0, 59, 2);
	meta_learn_part(mc, "b", "k", "\"e-2\"", 99, 1, 0, 59, 2);
	meta_learn_part(mc, "b", "nope", "\"e-2\"", 100, 1, 0, 59, 2);
	meta_learn_checksums(mc, "b", "k", "\"other-2\"", 100, "x-amz-checksum-crc32: AAAAAA==\n");
	assert_int_equal(meta_lookup(mc, "b", "k", 1, 60, 0, &w, &out), META_FRESH);
	assert_ptr_equal(out, old);
	meta_unref(out);
	meta_learn_part(mc, "b", "k", "\"e-2\"", 100, 2, 60, 99, 2);
	meta_learn_part(mc, "b", "k", "\"e-2\"", 100, 1, 0, 59, 2);
	meta_learn_checksums(mc, "b", "k", "\"e-2\"", 100, "x-amz-checksum-crc32: AAAAAA==\n");
	meta_learn_checksums(mc, "b", "k", "\"e-2\"", 100, "x-amz-checksum-crc32: BBBBBB==\n");
	assert_int_equal(meta_lookup(mc, "b", "k", 1, 60, 0, &w, &out), META_FRESH);
	assert_ptr_not_equal(out, old);
	assert_int_equal(old->nparts, 0);
	assert_null(old->checksums);
	assert_false(meta_part(old, 1, &first, &last));
	assert_true(meta_part(out, 2, &first, &last));
	assert_true(first == 60 && last == 99);
	assert_true(meta_part(out, 1, &first, &last));
	assert_true(first == 0 && last == 59);
	assert_false(meta_part(out, 3, &first, &last));
	assert_int_equal(out->parts_count, 2);
	assert_string_equal(out->checksums, "x-amz-checksum-crc32: AAAAAA==\n"); /* the first */
	assert_string_equal(out->headers, "Content-Type: a/b\n");
	assert_int_equal(out->size, 100);
	meta_unref(out);
	meta_unref(old);
	/* at most META_PARTS_MAX parts */
	for (uint32_t n = 3; n < META_PARTS_MAX + 10; n++)
		meta_learn_part(mc, "b", "k", "\"e-2\"", 100, n, 0, 0, 2);
	assert_int_equal(meta_lookup(mc, "b", "k", 1, 60, 0, &w, &out), META_FRESH);
	assert_int_equal(out->nparts, META_PARTS_MAX);
	meta_unref(out);
	meta_cache_destroy(mc);
}

/* Checksums set before publishing (a whole GET with checksum mode): every
 * reader of the published entry has them, and learning does not replace them. */
static void test_checksums_set_before_publish(void **state)
{
	(void)state;
	struct meta_cache *mc = meta_cache_create(16);
	struct obj_meta *out;
	assert_int_equal(meta_lookup(mc, "b", "k", 0, 60, 0, NULL, &out), META_LOAD);
	struct obj_meta *m = meta_new(5, "\"e\"", 0, NULL, 0);
	assert_int_equal(meta_set_checksums(m, "x-amz-checksum-crc32: AAAAAA==\n"), 0);
	assert_int_equal(meta_set_checksums(m, ""), 0); /* the object has none */
	assert_int_equal(meta_set_checksums(m, "x-amz-checksum-crc32: CCCCCC==\n"), 0);
	meta_publish(mc, "b", "k", m);
	meta_unref(m);
	meta_learn_checksums(mc, "b", "k", "\"e\"", 5, "x-amz-checksum-crc32: BBBBBB==\n");
	assert_int_equal(meta_lookup(mc, "b", "k", 1, 60, 0, NULL, &out), META_FRESH);
	assert_string_equal(out->checksums, "x-amz-checksum-crc32: CCCCCC==\n");
	meta_unref(out);
	meta_cache_destroy(mc);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_load_wait_publish),
		cmocka_unit_test(test_failure_shared),
		cmocka_unit_test(test_ttl_and_revalidation),
		cmocka_unit_test(test_revalidation_with_another_last_modified),
		cmocka_unit_test(test_negative),
		cmocka_unit_test(test_drops),
		cmocka_unit_test(test_drop_other),
		cmocka_unit_test(test_expire_all),
		cmocka_unit_test(test_unwait_and_bound),
		cmocka_unit_test(test_collect),
		cmocka_unit_test(test_encode_decode),
		cmocka_unit_test(test_learn_parts_and_checksums),
		cmocka_unit_test(test_checksums_set_before_publish),
	};
	return cmocka_run_group_tests_name("meta", tests, NULL, NULL);
}

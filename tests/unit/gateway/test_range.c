/*
 * test_range.c - gateway/range.c's Content-Range reader and the Range and
 * Content-Range writers, and a Range resolved against an empty object. (The
 * Range header's parser is fuzzed and checked end to end by the integration
 * tests.) And what a cold range's first GET
 * takes of upstream's Content-Range (gateway/fetch.c, fetch_learnt_span).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "gateway/fetch.h"
#include "gateway/range.h"

static void test_content_range_parse(void **state)
{
	(void)state;
	uint64_t a = 7, b = 7, n = 7;
	assert_true(content_range_parse("bytes 0-99/100", &a, &b, &n));
	assert_true(a == 0 && b == 99 && n == 100);
	assert_true(content_range_parse(" bytes 8388608-16777215/20000000 ", &a, &b, &n));
	assert_true(a == 8388608 && b == 16777215 && n == 20000000);
	assert_true(content_range_parse("bytes 0-18446744073709551613/18446744073709551614",
	                                &a, &b, &n));
	assert_true(b == UINT64_MAX - 2 && n == UINT64_MAX - 1);

	static const char *const bad[] = {
		NULL, "", "bytes", "bytes 0-99", "bytes 0-99/", "bytes */100", "bytes 0-99/*",
		"bytes 0-99/-1",  /* sscanf's %llu took this for 2^64 - 1 */
		"bytes -1-5/10", "bytes +0-5/10", "bytes 0-+5/10", "bytes 0-5/+10",
		"bytes 5-4/10",   /* reversed */
		"bytes 0-10/10",  /* past the end */
		"bytes 0-99/100x", "bytes 0-99/100,", "bytes 0 -99/100", "bytes 0- 99/100",
		"items 0-99/100", "bytes=0-99/100",
		"bytes 0-1/18446744073709551616", /* past 64 bits */
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		a = b = n = 7;
		if (content_range_parse(bad[i], &a, &b, &n))
			fail_msg("accepted \"%s\"", bad[i] ? bad[i] : "(null)");
		assert_true(a == 7 && b == 7 && n == 7);
	}
}

/* An empty object: a tail read ("bytes=-n", n > 0) is the whole object,
 * S3's 200 with no bytes (it was 416); "-0" and a first byte are not. */
static void test_resolve_empty(void **state)
{
	(void)state;
	uint64_t start = 7, end = 7;
	struct byte_range tail = { .suffix = true, .b = 1 }, none = { .suffix = true, .b = 0 };
	struct byte_range first = { .a = 0, .b = UINT64_MAX };
	assert_int_equal(range_resolve(&tail, 0, &start, &end), RANGE_WHOLE);
	assert_true(start == 7 && end == 7);
	assert_int_equal(range_resolve(&none, 0, &start, &end), RANGE_UNSATISFIABLE);
	assert_int_equal(range_resolve(&first, 0, &start, &end), RANGE_UNSATISFIABLE);
	assert_int_equal(range_resolve(&none, 10, &start, &end), RANGE_UNSATISFIABLE);
	assert_int_equal(range_resolve(&tail, 10, &start, &end), RANGE_PART);
	assert_true(start == 9 && end == 9);
}

static void test_writers(void **state)
{
	(void)state;
	char s[CONTENT_RANGE_SIZE];
	content_range_format(s, 10, 19, 100);
	assert_string_equal(s, "bytes 10-19/100");
	content_range_format(s, UINT64_MAX - 2, UINT64_MAX - 1, UINT64_MAX);
	assert_string_equal(s, "bytes 18446744073709551613-18446744073709551614/"
	                       "18446744073709551615");
	assert_true(strlen(s) < sizeof s);
	uint64_t a, b, n;
	content_range_format(s, 0, 0, 1);
	assert_true(content_range_parse(s, &a, &b, &n) && a == 0 && b == 0 && n == 1);

	range_format(s, 0, 8388607);
	assert_string_equal(s, "bytes=0-8388607");
	range_format(s, 5, UINT64_MAX);
	assert_string_equal(s, "bytes=5-");
	range_format(s, UINT64_MAX - 1, UINT64_MAX - 1);
	assert_string_equal(s, "bytes=18446744073709551614-18446744073709551614");
	struct byte_range r;
	assert_int_equal(range_parse(s, &r), 1);
	assert_true(r.a == UINT64_MAX - 1 && r.b == UINT64_MAX - 1);
}

/* Every answer to small objects' cold ranges: a suffix (bytes=-cs) takes
 * only the object's last cs bytes, or all of a smaller one, and fills its
 * last chunk after skipping less than a chunk; a chunk's range takes only
 * an answer that starts at that chunk, whole when it runs to its end. */
static void test_learnt_span(void **state)
{
	(void)state;
	for (uint64_t cs = 1; cs <= 5; cs++)
		for (uint64_t size = 1; size <= 17; size++)
			for (uint64_t a = 0; a < size; a++)
				for (uint64_t b = a; b < size; b++) {
					uint64_t k = 99, skip = 99, n = size < cs ? size : cs;
					bool whole = false;
					bool ok = fetch_learnt_span(cs, FETCH_LAST_CHUNK, a, b, size, &k,
					                            &skip, &whole);
					assert_int_equal(ok, b == size - 1 && a == size - n);
					if (ok) {
						assert_int_equal(k, (size - 1) / cs);
						assert_int_equal(a + skip, k * cs);
						assert_true(skip < cs && whole);
					}
					uint64_t i = a / cs, end = (i + 1) * cs < size ? (i + 1) * cs : size;
					ok = fetch_learnt_span(cs, i, a, b, size, &k, &skip, &whole);
					assert_int_equal(ok, a % cs == 0);
					if (ok) {
						assert_int_equal(k, i);
						assert_int_equal(skip, 0);
						assert_int_equal(whole, b + 1 == end);
					}
				}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_content_range_parse),
		cmocka_unit_test(test_writers),
		cmocka_unit_test(test_resolve_empty),
		cmocka_unit_test(test_learnt_span),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

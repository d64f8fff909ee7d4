/*
 * test_range.c - gateway/range.c's Content-Range reader and the Range and
 * Content-Range writers. (The Range header's parser is fuzzed and checked
 * end to end by the integration tests.)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_content_range_parse),
		cmocka_unit_test(test_writers),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

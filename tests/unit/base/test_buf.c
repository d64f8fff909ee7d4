/*
 * test_buf.c - base/buf.c's helpers that replace printf on per-request
 * paths: decimal digits (also zero-padded), bounded string copies, cutting a
 * buffer back, making room at once.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "base/buf.h"

static void test_u64_dec(void **state)
{
	(void)state;
	static const uint64_t values[] = { 0, 1, 9, 10, 99, 100, 117760, 4294967295u,
		                           4294967296u, UINT64_MAX / 10, UINT64_MAX };
	for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
		char want[32], got[U64_DEC_MAX + 1];
		snprintf(want, sizeof want, "%llu", (unsigned long long)values[i]);
		char *end = u64_dec(got, values[i], 1);
		assert_true(end - got <= U64_DEC_MAX);
		*end = '\0';
		assert_string_equal(got, want);
	}
	/* Zero-padded to a width, as %0Nllu; a longer number is not cut. */
	static const struct { uint64_t v; unsigned width; const char *want; } padded[] = {
		{ 7, 3, "007" }, { 0, 4, "0000" }, { 12345, 2, "12345" }, { 2026, 4, "2026" },
		{ 5, 20, "00000000000000000005" },
	};
	for (size_t i = 0; i < sizeof padded / sizeof padded[0]; i++) {
		char got[U64_DEC_MAX + 1];
		*u64_dec(got, padded[i].v, padded[i].width) = '\0';
		assert_string_equal(got, padded[i].want);
	}
}

static void test_buf_put_u64(void **state)
{
	(void)state;
	struct buf b;
	buf_init(&b, 64);
	assert_int_equal(buf_puts(&b, "size="), 0);
	assert_int_equal(buf_put_u64(&b, 18446744073709551615u), 0);
	assert_string_equal(buf_cstr(&b), "size=18446744073709551615");
	buf_fini(&b);
	/* Past the cap: -E2BIG, the buffer unchanged. */
	buf_init(&b, 8);
	assert_int_equal(buf_puts(&b, "abc"), 0);
	assert_true(buf_put_u64(&b, 123456) < 0);
	assert_string_equal(buf_cstr(&b), "abc");
	buf_fini(&b);
}

static void test_str_copy(void **state)
{
	(void)state;
	char out[6];
	str_copy(out, sizeof out, "abc");
	assert_string_equal(out, "abc");
	str_copy(out, sizeof out, "abcde");
	assert_string_equal(out, "abcde");
	str_copy(out, sizeof out, "abcdefgh"); /* cut to fit, as snprintf would */
	assert_string_equal(out, "abcde");
	str_copy(out, sizeof out, "");
	assert_string_equal(out, "");
	str_copy(out, 1, "xyz");
	assert_string_equal(out, "");
}

static void test_buf_truncate(void **state)
{
	(void)state;
	struct buf b;
	buf_init(&b, 64);
	assert_int_equal(buf_puts(&b, "a: 1\nb: 2\n"), 0);
	buf_truncate(&b, 5);
	assert_string_equal(buf_cstr(&b), "a: 1\n");
	assert_int_equal(b.len, 5);
	buf_truncate(&b, 50); /* longer than it is: nothing changes */
	assert_string_equal(buf_cstr(&b), "a: 1\n");
	buf_fini(&b);
}

/* Room made once holds the appends that fit it without moving the string;
 * past the cap nothing changes. */
static void test_buf_reserve(void **state)
{
	(void)state;
	struct buf b;
	buf_init(&b, 300);
	assert_int_equal(buf_reserve(&b, 255), 0);
	assert_true(b.cap >= 256);
	const char *p = b.p;
	for (int i = 0; i < 255; i++)
		assert_int_equal(buf_putc(&b, 'x'), 0);
	assert_ptr_equal(b.p, p);
	assert_int_equal(b.len, 255);
	assert_int_equal(buf_reserve(&b, 46), -E2BIG);
	assert_int_equal(b.len, 255);
	assert_int_equal(buf_reserve(&b, 45), 0);
	buf_fini(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_u64_dec),
		cmocka_unit_test(test_buf_put_u64),
		cmocka_unit_test(test_str_copy),
		cmocka_unit_test(test_buf_truncate),
		cmocka_unit_test(test_buf_reserve),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

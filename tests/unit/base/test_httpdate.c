/*
 * test_httpdate.c - base/httpdate.h: IMF-fixdate in and out, the tolerated
 * variations, the refused forms (RFC 850, asctime, garbage, impossible or
 * out-of-range fields), and -EINVAL leaving *out alone; the obsolete forms
 * httpdate_parse_any takes.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "base/httpdate.h"

#define T0 ((time_t)1700000000) /* Tue, 14 Nov 2023 22:13:20 GMT */

static void test_format(void **state)
{
	(void)state;
	char d[HTTPDATE_SIZE];
	httpdate_format(T0, d);
	assert_string_equal(d, "Tue, 14 Nov 2023 22:13:20 GMT");
	httpdate_format(0, d);
	assert_string_equal(d, "Thu, 01 Jan 1970 00:00:00 GMT");
	httpdate_format(784111777, d);
	assert_string_equal(d, "Sun, 06 Nov 1994 08:49:37 GMT");
	httpdate_format(951782400, d); /* a leap day */
	assert_string_equal(d, "Tue, 29 Feb 2000 00:00:00 GMT");
	httpdate_format(-1, d); /* clamped to what the form can say */
	assert_string_equal(d, "Thu, 01 Jan 1970 00:00:00 GMT");
	httpdate_format((time_t)253402300800, d);
	assert_string_equal(d, "Fri, 31 Dec 9999 23:59:59 GMT");
}

static void test_round_trip(void **state)
{
	(void)state;
	char d[HTTPDATE_SIZE];
	for (time_t t = 0; t < (time_t)4102444800; t += 86400 * 37 + 3607) {
		httpdate_format(t, d);
		time_t back = -1;
		assert_int_equal(httpdate_parse(d, &back), 0);
		assert_true(back == t);
	}
}

static void test_accepted(void **state)
{
	(void)state;
	const char *ok[] = {
		"Tue, 14 Nov 2023 22:13:20 GMT",
		" \tTue, 14 Nov 2023 22:13:20 GMT\r\n", /* surrounding white space */
		"Xyz, 14 Nov 2023 22:13:20 GMT",        /* the day name is not checked */
		"Mon, 14 Nov 2023 22:13:20 GMT",        /* nor matched with the date */
	};
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
		time_t t = 0;
		assert_int_equal(httpdate_parse(ok[i], &t), 0);
		assert_true(t == T0);
	}
	time_t t = 0;
	assert_int_equal(httpdate_parse("Wed, 1 Nov 2023 00:00:00 GMT", &t), 0);
	assert_true(t == (time_t)1698796800);
	assert_int_equal(httpdate_parse("Thu, 01 Jan 1970 00:00:00 GMT", &t), 0);
	assert_true(t == 0);
	assert_int_equal(httpdate_parse("Thu, 29 Feb 2024 12:00:00 GMT", &t), 0);
	assert_true(t == (time_t)1709208000);
	/* A leap second counts as the next minute's first. */
	assert_int_equal(httpdate_parse("Tue, 14 Nov 2023 22:13:60 GMT", &t), 0);
	assert_true(t == T0 + 40);
}

/* RFC 850 and asctime, for the conditional headers (RFC 9110 5.6.7). */
static void test_parse_any(void **state)
{
	(void)state;
	const char *ok[] = {
		"Sun, 06 Nov 1994 08:49:37 GMT",
		"Sunday, 06-Nov-94 08:49:37 GMT",
		"Sun Nov  6 08:49:37 1994",
		"Sun Nov 06 08:49:37 1994",
		"Sun Nov 6 08:49:37 1994",
		" Sunday, 06-Nov-94 08:49:37 GMT\r\n",
	};
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
		time_t t = 0;
		if (httpdate_parse_any(ok[i], T0, &t) != 0 || t != (time_t)784111777)
			fail_msg("\"%s\"", ok[i]);
	}
	/* A two-digit year is the last one ending so, at most 50 years on. */
	time_t t = 0;
	assert_int_equal(httpdate_parse_any("Monday, 01-Jan-73 00:00:00 GMT", T0, &t), 0);
	assert_true(t == (time_t)3250454400); /* 2073: 50 years after T0 (2023) */
	assert_int_equal(httpdate_parse_any("Monday, 01-Jan-74 00:00:00 GMT", T0, &t), 0);
	assert_true(t == (time_t)126230400); /* 1974 */
	const char *bad[] = {
		NULL, "", "Sunday, 06-Nov-94 08:49:37 UTC", "Sunday, 06-Nov-1994 08:49:37 GMT",
		"Sun, 06-Nov-94 08:49:37 GMT", "Sunday, 31-Feb-94 08:49:37 GMT",
		"Sunday 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994 GMT",
		"Sun Nov  6 08:49 1994", "Sun Xyz  6 08:49:37 1994", "Sun Nov 31 08:49:37 1994",
		"S1n Nov  6 08:49:37 1994", "Sun Nov  6 08:49:37 94",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		t = 7;
		if (httpdate_parse_any(bad[i], T0, &t) != -EINVAL || t != 7)
			fail_msg("accepted \"%s\"", bad[i] ? bad[i] : "(null)");
	}
	/* httpdate_parse, for signatures, still refuses them */
	assert_int_equal(httpdate_parse("Sunday, 06-Nov-94 08:49:37 GMT", &t), -EINVAL);
	assert_int_equal(httpdate_parse("Sun Nov  6 08:49:37 1994", &t), -EINVAL);
}

static void test_refused(void **state)
{
	(void)state;
	const char *bad[] = {
		NULL, "", "   ", "yesterday", "1700000000", "Tue, 14 Nov 2023",
		/* the obsolete forms */
		"Tuesday, 14-Nov-23 22:13:20 GMT", "Tue Nov 14 22:13:20 2023",
		/* names spelled otherwise */
		"Tuesday, 14 Nov 2023 22:13:20 GMT", "Tue, 14 November 2023 22:13:20 GMT",
		"Tue, 14 nov 2023 22:13:20 GMT", "Tue, 14 Now 2023 22:13:20 GMT",
		/* spacing and punctuation */
		"Tue,14 Nov 2023 22:13:20 GMT", "Tue,  14 Nov 2023 22:13:20 GMT",
		"Tue, 14  Nov 2023 22:13:20 GMT", "Tue, 14 Nov 2023 22:13:20  GMT",
		"Tue, 14 Nov 2023 22.13.20 GMT", "a,b, 14 Nov 2023 22:13:20 GMT",
		/* widths */
		"Tue, 123 Nov 2023 22:13:20 GMT", "Tue, 14 Nov 23 22:13:20 GMT",
		"Tue, 14 Nov 12023 22:13:20 GMT", "Tue, 14 Nov 2023 2:13:20 GMT",
		"Tue, 14 Nov 2023 22:13:2 GMT", "Tue, 14 Nov 2023 22:13:20",
		/* zones */
		"Tue, 14 Nov 2023 22:13:20 EST", "Tue, 14 Nov 2023 22:13:20 gmt",
		"Tue, 14 Nov 2023 22:13:20 UTC", "Tue, 14 Nov 2023 22:13:20 +0000",
		"Tue, 14 Nov 2023 22:13:20 Z", "Tue, 14 Nov 2023 22:13:20 GMT junk",
		"Tue, 14 Nov 2023 22:13:20 GMTX",
		/* out of range or impossible */
		"Tue, 00 Nov 2023 22:13:20 GMT", "Tue, 31 Nov 2023 22:13:20 GMT",
		"Tue, 31 Feb 2023 22:13:20 GMT", "Wed, 29 Feb 2023 22:13:20 GMT",
		"Tue, 14 Nov 2023 24:13:20 GMT", "Tue, 14 Nov 2023 22:60:20 GMT",
		"Tue, 14 Nov 2023 22:13:61 GMT", "Wed, 31 Dec 1969 23:59:59 GMT",
		"Sat, 01 Jan 0000 00:00:00 GMT", "Thu, 31 Dec 2099 23:59:60 GMT",
		"Tue, -4 Nov 2023 22:13:20 GMT", "Tue, 14 Nov +023 22:13:20 GMT",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		time_t t = 12345;
		assert_int_equal(httpdate_parse(bad[i], &t), -EINVAL);
		assert_true(t == 12345); /* untouched */
	}
}

static void test_zoned(void **state)
{
	(void)state;
	const char *same[] = {
		"Tue, 14 Nov 2023 22:13:20 GMT", "Tue, 14 Nov 2023 22:13:20 UTC",
		"Tue, 14 Nov 2023 22:13:20 Z", "Tue, 14 Nov 2023 22:13:20 +0000",
		"Tue, 14 Nov 2023 23:43:20 +0130", "Tue, 14 Nov 2023 17:13:20 -0500",
		"Wed, 15 Nov 2023 08:13:20 +1000",
	};
	for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
		time_t t = 0;
		assert_int_equal(httpdate_parse_zoned(same[i], &t), 0);
		assert_true(t == T0);
	}
	const char *bad[] = {
		"Tue, 14 Nov 2023 22:13:20 EST", "Tue, 14 Nov 2023 22:13:20 +2400",
		"Tue, 14 Nov 2023 22:13:20 +0060", "Tue, 14 Nov 2023 22:13:20 +000",
		"Tue, 14 Nov 2023 22:13:20 0000", "Tue, 14 Nov 2023 22:13:20 +00:00",
		"Tue, 14 Nov 2023 22:13:20 z", "Tue, 14 Nov 2023 22:13:20 ", NULL,
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		time_t t = 7;
		assert_int_equal(httpdate_parse_zoned(bad[i], &t), -EINVAL);
		assert_true(t == 7);
	}
}

/* utc_time against glibc's timegm: every day from 1970 to 2500 at a
 * time of day that moves with it, the leap second, and the dates that do
 * not exist (which timegm would have moved to another day). */
static void test_utc_time(void **state)
{
	(void)state;
	static const int mdays[] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
	unsigned n = 0;
	for (int y = 1970; y <= 2500; y++) {
		bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
		for (int mon = 1; mon <= 12; mon++) {
			int last = mdays[mon - 1] + (mon == 2 && leap);
			for (int d = 1; d <= last; d++, n++) {
				int h = (int)(n % 24), mi = (int)(n % 60), s = (int)(n % 61);
				if (h == 23 && mi == 59 && s == 60)
					s = 59; /* refused: below */
				struct tm tm = { .tm_year = y - 1900, .tm_mon = mon - 1, .tm_mday = d,
				                 .tm_hour = h, .tm_min = mi, .tm_sec = s };
				time_t got = 0;
				assert_int_equal(utc_time(y, mon, d, h, mi, s, &got), 0);
				assert_true(got == timegm(&tm));
			}
			time_t keep = 7;
			assert_int_equal(utc_time(y, mon, last + 1, 0, 0, 0, &keep), -EINVAL);
			assert_true(keep == 7);
		}
	}
	time_t t;
	assert_int_equal(utc_time(9999, 12, 31, 23, 58, 60, &t), 0);
	assert_int_equal(utc_time(2024, 6, 30, 23, 59, 60, &t), -EINVAL);
	assert_int_equal(utc_time(1969, 12, 31, 23, 59, 59, &t), -EINVAL);
	assert_int_equal(utc_time(10000, 1, 1, 0, 0, 0, &t), -EINVAL);
	assert_int_equal(utc_time(2024, 0, 1, 0, 0, 0, &t), -EINVAL);
	assert_int_equal(utc_time(2024, 13, 1, 0, 0, 0, &t), -EINVAL);
	assert_int_equal(utc_time(2024, 1, 0, 0, 0, 0, &t), -EINVAL);
	assert_int_equal(utc_time(2024, 1, 1, 24, 0, 0, &t), -EINVAL);
	assert_int_equal(utc_time(2024, 1, 1, 0, 60, 0, &t), -EINVAL);
	assert_int_equal(utc_time(2024, 1, 1, 0, 0, 61, &t), -EINVAL);
	assert_int_equal(utc_time(2024, 1, 1, -1, 0, 0, &t), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_format),
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_accepted),
		cmocka_unit_test(test_refused),
		cmocka_unit_test(test_parse_any),
		cmocka_unit_test(test_zoned),
		cmocka_unit_test(test_utc_time),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

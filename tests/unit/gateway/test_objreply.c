/*
 * test_objreply.c - what a cached GET/HEAD answers from metadata alone
 * (gateway/objreply.h): the queries it serves, the conditionals with S3's
 * precedence, and the headers.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "gateway/objreply.h"

static void test_query_ok(void **state)
{
	(void)state;
	assert_true(objreply_query_ok(NULL));
	assert_true(objreply_query_ok(""));
	assert_true(objreply_query_ok("x-id=GetObject&partNumber=1"));
	assert_true(objreply_query_ok("response-content-type=text%2Fplain"));
	assert_true(objreply_query_ok("X-Amz-Signature=abc&X-Amz-Expires=60"));
	assert_true(objreply_query_ok("AWSAccessKeyId=a&Signature=b&Expires=1"));
	assert_false(objreply_query_ok("versionId=1"));
	assert_false(objreply_query_ok("acl"));
	assert_false(objreply_query_ok("x-id=GetObject&tagging"));
}

/* Last-Modified: Wed, 01 Jan 2025 00:00:00 GMT */
#define LM 1735689600
/* The wall clock: Sun, 01 Jun 2025 00:00:00 GMT */
#define NOW ((time_t)1748736000)

static void test_preconditions(void **state)
{
	(void)state;
	struct obj_meta *m = meta_new(10, "\"abc\"", LM, NULL, 0);
	const char *before = "Tue, 31 Dec 2024 00:00:00 GMT", *after = "Thu, 02 Jan 2025 00:00:00 GMT";
	assert_int_equal(objreply_preconditions(m, NULL, NULL, NULL, NULL, NOW), 0);
	assert_int_equal(objreply_preconditions(m, "\"abc\"", NULL, NULL, NULL, NOW), 0);
	assert_int_equal(objreply_preconditions(m, "\"x\", \"abc\"", NULL, NULL, NULL, NOW), 0);
	assert_int_equal(objreply_preconditions(m, "*", NULL, NULL, NULL, NOW), 0);
	assert_int_equal(objreply_preconditions(m, "\"x\"", NULL, NULL, NULL, NOW), 412);
	assert_int_equal(objreply_preconditions(m, NULL, "W/\"abc\"", NULL, NULL, NOW), 304);
	assert_int_equal(objreply_preconditions(m, NULL, "\"x\"", NULL, NULL, NOW), 0);
	assert_int_equal(objreply_preconditions(m, NULL, NULL, before, NULL, NOW), 412);
	assert_int_equal(objreply_preconditions(m, NULL, NULL, after, NULL, NOW), 0);
	assert_int_equal(objreply_preconditions(m, NULL, NULL, NULL, after, NOW), 304);
	assert_int_equal(objreply_preconditions(m, NULL, NULL, NULL, before, NOW), 0);
	/* S3's precedence: If-Match true wins over If-Unmodified-Since false,
	 * If-None-Match false over If-Modified-Since true */
	assert_int_equal(objreply_preconditions(m, "\"abc\"", NULL, before, NULL, NOW), 0);
	assert_int_equal(objreply_preconditions(m, NULL, "\"x\"", NULL, after, NOW), 0);
	/* an unparsable date is ignored */
	assert_int_equal(objreply_preconditions(m, NULL, NULL, "yesterday", "tomorrow", NOW), 0);
	/* the obsolete HTTP-date forms count (RFC 9110 5.6.7): they were ignored */
	const char *b850 = "Tuesday, 31-Dec-24 00:00:00 GMT", *bansi = "Tue Dec 31 00:00:00 2024";
	const char *a850 = "Thursday, 02-Jan-25 00:00:00 GMT", *aansi = "Thu Jan  2 00:00:00 2025";
	assert_int_equal(objreply_preconditions(m, NULL, NULL, b850, NULL, NOW), 412);
	assert_int_equal(objreply_preconditions(m, NULL, NULL, bansi, NULL, NOW), 412);
	assert_int_equal(objreply_preconditions(m, NULL, NULL, NULL, a850, NOW), 304);
	assert_int_equal(objreply_preconditions(m, NULL, NULL, NULL, aansi, NOW), 304);
	meta_unref(m);
}

static void test_if_range(void **state)
{
	(void)state;
	struct obj_meta *m = meta_new(10, "\"abc\"", LM, NULL, 0);
	assert_true(objreply_if_range(m, NULL, NOW));
	assert_true(objreply_if_range(m, "\"abc\"", NOW));
	assert_true(objreply_if_range(m, " \"abc\" ", NOW));
	assert_true(objreply_if_range(m, "Wed, 01 Jan 2025 00:00:00 GMT", NOW));
	assert_true(objreply_if_range(m, "Wednesday, 01-Jan-25 00:00:00 GMT", NOW));
	assert_true(objreply_if_range(m, "Wed Jan  1 00:00:00 2025", NOW));
	/* a weak tag, another tag, a list, a date other than Last-Modified
	 * (before or after it), or no validator at all: the whole object */
	assert_false(objreply_if_range(m, "W/\"abc\"", NOW));
	assert_false(objreply_if_range(m, "\"abd\"", NOW));
	assert_false(objreply_if_range(m, "\"x\", \"abc\"", NOW));
	assert_false(objreply_if_range(m, "*", NOW));
	assert_false(objreply_if_range(m, "abc", NOW));
	assert_false(objreply_if_range(m, "Tue, 31 Dec 2024 00:00:00 GMT", NOW));
	assert_false(objreply_if_range(m, "Thu, 02 Jan 2025 00:00:00 GMT", NOW));
	assert_false(objreply_if_range(m, "", NOW));
	meta_unref(m);
}

static void test_headers(void **state)
{
	(void)state;
	struct obj_meta *m = meta_new(100, "\"abc\"", LM,
	                              "Content-Type: text/plain\nx-amz-meta-a: 1\nCache-Control: no\n",
	                              0);
	m->parts_count = 3;
	struct MHD_Response *resp =
		MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
	struct objreply a = { 206, 10, 19, 2, false };
	objreply_headers(resp, "response-content-type=a%2Fb", m, &a);
	assert_string_equal(MHD_get_response_header(resp, "Content-Type"), "a/b");
	assert_string_equal(MHD_get_response_header(resp, "x-amz-meta-a"), "1");
	assert_string_equal(MHD_get_response_header(resp, "ETag"), "\"abc\"");
	assert_string_equal(MHD_get_response_header(resp, "Content-Range"), "bytes 10-19/100");
	assert_string_equal(MHD_get_response_header(resp, "Accept-Ranges"), "bytes");
	assert_string_equal(MHD_get_response_header(resp, "x-amz-mp-parts-count"), "3");
	MHD_destroy_response(resp);

	/* a 304: the ETag and Last-Modified, not the object's other headers */
	resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
	a = (struct objreply){ 304, 0, 0, 0, false };
	objreply_headers(resp, "", m, &a);
	assert_null(MHD_get_response_header(resp, "x-amz-meta-a"));
	assert_null(MHD_get_response_header(resp, "Accept-Ranges"));
	assert_string_equal(MHD_get_response_header(resp, "Last-Modified"),
	                    "Wed, 01 Jan 2025 00:00:00 GMT");
	MHD_destroy_response(resp);

	/* a whole object with checksum mode: the checksums learnt */
	m->checksums = strdup("x-amz-checksum-crc32: AAAAAA==\n");
	resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
	a = (struct objreply){ 200, 0, 99, 0, true };
	objreply_headers(resp, "", m, &a);
	assert_string_equal(MHD_get_response_header(resp, "x-amz-checksum-crc32"), "AAAAAA==");
	assert_null(MHD_get_response_header(resp, "Content-Range"));
	MHD_destroy_response(resp);
	meta_unref(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_query_ok),
		cmocka_unit_test(test_preconditions),
		cmocka_unit_test(test_if_range),
		cmocka_unit_test(test_headers),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

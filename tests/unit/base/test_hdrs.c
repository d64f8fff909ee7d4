/*
 * test_hdrs.c - base/hdrs.h: the header list and the hop-by-hop table.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "base/hdrs.h"

static void test_hop_by_hop(void **state)
{
	(void)state;
	const char *hop[] = { "Connection", "keep-alive", "Proxy-Authorization", "proxy-authenticate",
	                      "PROXY-CONNECTION", "TE", "Trailer", "Trailers", "Transfer-Encoding",
	                      "Upgrade" };
	for (size_t i = 0; i < sizeof hop / sizeof hop[0]; i++)
		assert_true(hdr_hop_by_hop(hop[i]));
	const char *end_to_end[] = { "Content-Length", "Host", "ETag", "x-amz-date", "Tee",
	                             "Connections", "proxy-", "", "Authorization" };
	for (size_t i = 0; i < sizeof end_to_end / sizeof end_to_end[0]; i++)
		assert_false(hdr_hop_by_hop(end_to_end[i]));
}

static void test_list(void **state)
{
	(void)state;
	struct hdrs h;
	hdrs_init(&h);
	assert_int_equal(hdrs_add(&h, "ETag", "\"x\""), 0);
	const char line[] = "Content-Type:  text/plain \r\n";
	assert_int_equal(hdrs_add_line(&h, line, sizeof line - 1), 0);
	assert_int_equal(hdrs_add_line(&h, "HTTP/1.1 200 OK\r\n", 17), 0);
	assert_string_equal(hdrs_get(&h, "etag"), "\"x\"");
	assert_string_equal(hdrs_get(&h, "CONTENT-TYPE"), "text/plain");
	assert_null(hdrs_get(&h, "Date"));
	hdrs_fini(&h);
}

/* A name longer than any fixed buffer is kept whole (S3 sends user
 * metadata names of up to about 2 KB). */
static void test_long_name(void **state)
{
	(void)state;
	char line[2100], name[2001];
	memset(name, 'n', sizeof name - 1);
	name[sizeof name - 1] = '\0';
	memcpy(name, "x-amz-meta-", 11);
	int len = snprintf(line, sizeof line, "%s: v\r\n", name);
	struct hdrs h;
	hdrs_init(&h);
	assert_int_equal(hdrs_add_line(&h, line, (size_t)len), 0);
	assert_int_equal(h.n, 1);
	assert_string_equal(h.v[0].name, name);
	assert_string_equal(hdrs_get(&h, name), "v");
	hdrs_fini(&h);
}

/* A body's length from its framing: a Transfer-Encoding, or Content-Lengths
 * that disagree or are not plain numbers, state none. */
static void test_body_length(void **state)
{
	(void)state;
	static const struct {
		const char *lines;
		bool head;
		uint64_t want;
	} cases[] = {
		{ "Content-Length: 42\r\n", false, 42 },
		{ "Content-Length: 0\r\n", false, 0 },
		{ "", false, HDRS_LENGTH_UNKNOWN },
		{ "Content-Length: 42\r\nTransfer-Encoding: chunked\r\n", false, HDRS_LENGTH_UNKNOWN },
		{ "transfer-encoding: chunked\r\ncontent-length: 42\r\n", false, HDRS_LENGTH_UNKNOWN },
		{ "Content-Length: 42\r\nTransfer-Encoding: chunked\r\n", true, 42 },
		{ "Content-Length: 42\r\nContent-Length: 42\r\n", false, 42 },
		{ "Content-Length: 42\r\nContent-Length: 43\r\n", false, HDRS_LENGTH_UNKNOWN },
		{ "Content-Length: -1\r\n", false, HDRS_LENGTH_UNKNOWN },
		{ "Content-Length: 4x\r\n", false, HDRS_LENGTH_UNKNOWN },
		{ "Content-Length: 99999999999999999999\r\n", false, HDRS_LENGTH_UNKNOWN },
		{ "Content-Length: 18446744073709551615\r\n", false, HDRS_LENGTH_UNKNOWN },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct hdrs h;
		hdrs_init(&h);
		for (const char *p = cases[i].lines; *p;) {
			const char *nl = strstr(p, "\r\n");
			assert_int_equal(hdrs_add_line(&h, p, (size_t)(nl + 2 - p)), 0);
			p = nl + 2;
		}
		if (hdrs_body_length(&h, cases[i].head) != cases[i].want)
			fail_msg("case %zu: %s", i, cases[i].lines);
		hdrs_fini(&h);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hop_by_hop),
		cmocka_unit_test(test_list),
		cmocka_unit_test(test_long_name),
		cmocka_unit_test(test_body_length),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

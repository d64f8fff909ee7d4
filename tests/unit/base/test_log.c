/* Diagnostic lines quote client-controlled strings: a key holding a line
 * break or another control byte must stay on its own line, escaped. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/log.h"

static char *capture_line(const char *key)
{
	char path[] = "/tmp/larder-test-log-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	fflush(stderr);
	int saved = dup(2);
	dup2(fd, 2);
	log_write(LOG_WARN, "fetch", "%s changed upstream", key);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	static char text[4096];
	ssize_t n = pread(fd, text, sizeof text - 1, 0);
	close(fd);
	unlink(path);
	assert_true(n > 0);
	text[n] = '\0';
	return text;
}

static void test_control_bytes_are_escaped(void **state)
{
	(void)state;
	char *t = capture_line("b/evil\n2030-01-01T00:00:00.000Z error [admin] forged\r\x1b[2J");
	/* One line, ending in its own newline. */
	assert_non_null(strchr(t, '\n'));
	assert_int_equal(strchr(t, '\n') - t, (ptrdiff_t)strlen(t) - 1);
	assert_non_null(strstr(t, "b/evil\\x0a2030-01-01T00:00:00.000Z error [admin] forged"
	                          "\\x0d\\x1b[2J changed upstream\n"));
}

static void test_plain_text_is_unchanged(void **state)
{
	(void)state;
	char *t = capture_line("bucket/key with spaces/ü");
	assert_non_null(strstr(t, "[fetch] bucket/key with spaces/ü changed upstream\n"));
}

/* One access line, written unbuffered to a file, read back. */
static char *access_line(const struct log_access_rec *r)
{
	char path[] = "/tmp/larder-test-access-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(log_access_open(path, 0, 0), 0);
	log_access(r);
	log_access_close();
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	static char text[8192];
	size_t n = fread(text, 1, sizeof text - 1, f);
	fclose(f);
	unlink(path);
	text[n] = '\0';
	return text;
}

/* The numbers of an access line, as printf's %d, %llu and %.3f print them. */
static void test_access_numbers(void **state)
{
	(void)state;
	const struct { int status, up; unsigned long long in, out; double ms; const char *want; } c[] = {
		{ 206, 0, 0, 117760, 12.3456,
		  " status=206 bytes_in=0 bytes_out=117760 duration_ms=12.346 upstream_status=0 " },
		{ 200, 503, 18446744073709551615ull, 1, 0.0,
		  " status=200 bytes_in=18446744073709551615 bytes_out=1 duration_ms=0.000 "
		  "upstream_status=503 " },
		{ 500, -1, 10, 0, 999.9996,
		  " status=500 bytes_in=10 bytes_out=0 duration_ms=1000.000 upstream_status=-1 " },
		{ 0, 0, 0, 0, 0.0504, " duration_ms=0.050 " },
		{ 0, 0, 0, 0, 60001.25, " duration_ms=60001.250 " },
	};
	for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
		struct log_access_rec r = { .request_id = "id", .status = c[i].status,
		                            .upstream_status = c[i].up, .bytes_in = c[i].in,
		                            .bytes_out = c[i].out, .duration_ms = c[i].ms };
		char *t = access_line(&r);
		if (!strstr(t, c[i].want))
			fail_msg("%s: no \"%s\"", t, c[i].want);
		/* ts=YYYY-MM-DDTHH:MM:SS.mmmZ */
		assert_int_equal(strncmp(t, "ts=", 3), 0);
		assert_true(t[22] == '.' && t[26] == 'Z' && t[27] == ' ');
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_control_bytes_are_escaped),
		cmocka_unit_test(test_plain_text_is_unchanged),
		cmocka_unit_test(test_access_numbers),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

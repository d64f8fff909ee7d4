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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_control_bytes_are_escaped),
		cmocka_unit_test(test_plain_text_is_unchanged),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

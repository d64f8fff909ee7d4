/*
 * test_cli.c - the command line's checks of what it is given, before it asks
 * the admin endpoint anything: arguments from the heap, so that a read past
 * the end of one is an AddressSanitizer report (argv's strings sit in one
 * block, where such a read goes unnoticed).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gateway/cli.h"

/* `larder lookahead --window 2 --manifest s3://b/k TARGET` (cli_lookahead gets
 * what follows "lookahead"): 2, a usage error. */
static int lookahead_with_target(const char *target)
{
	const char *words[] = { "--window", "2", "--manifest", "s3://b/k", target };
	enum { N = sizeof words / sizeof words[0] };
	char *argv[N + 1];
	for (int i = 0; i < N; i++) {
		argv[i] = malloc(strlen(words[i]) + 1); /* exactly its length: no slack to read */
		assert_non_null(argv[i]);
		memcpy(argv[i], words[i], strlen(words[i]) + 1);
	}
	argv[N] = NULL;
	FILE *keep = stderr;
	stderr = fopen("/dev/null", "w");
	int rc = cli_lookahead(N, argv);
	fclose(stderr);
	stderr = keep;
	for (int i = 0; i < N; i++)
		free(argv[i]);
	return rc;
}

/* A target shorter than "s3://" was read from its fifth byte on. */
static void test_lookahead_short_target_is_a_usage_error(void **state)
{
	(void)state;
	assert_int_equal(lookahead_with_target("s3"), 2);
	assert_int_equal(lookahead_with_target(""), 2);
	assert_int_equal(lookahead_with_target("s3:/"), 2);
	assert_int_equal(lookahead_with_target("s3://Bad_Bucket"), 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_lookahead_short_target_is_a_usage_error),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

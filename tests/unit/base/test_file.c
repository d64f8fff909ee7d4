/*
 * test_file.c - base/file.h: file_replace's atomic write, and file_dir_each,
 * which lists a directory of such files and removes what a file_replace
 * killed mid-save left behind (NAME.tmp), which nothing else would.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/file.h"

static char dir[64];

static int make_dir(void **state)
{
	(void)state;
	snprintf(dir, sizeof dir, "/tmp/larder-test-file-XXXXXX");
	return mkdtemp(dir) ? 0 : -1;
}

static void path_of(char *out, size_t n, const char *name)
{
	snprintf(out, n, "%s/%s", dir, name);
}

static void put(const char *name, const char *text)
{
	char p[128];
	path_of(p, sizeof p, name);
	FILE *f = fopen(p, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static bool exists(const char *name)
{
	char p[128];
	path_of(p, sizeof p, name);
	return access(p, F_OK) == 0;
}

static int remove_dir(void **state)
{
	(void)state;
	const char *names[] = { "a.json", "b.json", "b.json.tmp", "c.json.tmp", "d.txt",
	                        "e.txt.tmp" };
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		char p[128];
		path_of(p, sizeof p, names[i]);
		unlink(p);
	}
	return rmdir(dir);
}

struct seen {
	unsigned n;
	char names[8][32];
};

static void note(void *arg, const char *name)
{
	struct seen *s = arg;
	if (s->n < 8)
		snprintf(s->names[s->n], sizeof s->names[0], "%s", name);
	s->n++;
}

static void test_replace(void **state)
{
	(void)state;
	char p[128];
	path_of(p, sizeof p, "a.json");
	assert_int_equal(file_replace(p, "{}", 2), 0);
	assert_int_equal(file_replace(p, "[1]", 3), 0);
	FILE *f = fopen(p, "r");
	assert_non_null(f);
	char got[8] = "";
	assert_non_null(fgets(got, sizeof got, f));
	fclose(f);
	assert_string_equal(got, "[1]");
	assert_false(exists("a.json.tmp"));
}

static void test_dir_each_sweeps_leftovers(void **state)
{
	(void)state;
	put("a.json", "{}");
	put("b.json", "{}");
	put("b.json.tmp", "{\"half"); /* a save killed before its rename */
	put("c.json.tmp", "{");       /* a first save killed: no c.json */
	put("d.txt", "x");
	put("e.txt.tmp", "x");        /* another suffix's: not ours */
	struct seen s = { 0 };
	char err[256] = "";
	assert_int_equal(file_dir_each(dir, ".json", note, &s, err, sizeof err), 0);
	assert_int_equal(s.n, 2);
	bool a = strcmp(s.names[0], "a.json") == 0 || strcmp(s.names[1], "a.json") == 0;
	bool b = strcmp(s.names[0], "b.json") == 0 || strcmp(s.names[1], "b.json") == 0;
	assert_true(a && b);
	assert_false(exists("b.json.tmp"));
	assert_false(exists("c.json.tmp"));
	assert_true(exists("b.json") && exists("d.txt") && exists("e.txt.tmp"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_replace),
		cmocka_unit_test(test_dir_each_sweeps_leftovers),
	};
	return cmocka_run_group_tests(tests, make_dir, remove_dir);
}

/*
 * test_alloc.c - base/alloc.c's failure injection, and the -ENOMEM paths of
 * base/buf.c and base/hdrs.c driven by it: every allocation an operation
 * makes is failed in turn, and each time the operation must return -ENOMEM,
 * leave its object as it was and leak nothing (the ASan build's leak check
 * runs at exit).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <pthread.h>

#include <cmocka.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/hdrs.h"

static void test_nth_fails_once(void **state)
{
	(void)state;
	alloc_fail_nth(3);
	void *a = mem_malloc(8), *b = mem_calloc(1, 8);
	assert_non_null(a);
	assert_non_null(b);
	assert_false(alloc_fail_fired());
	assert_null(mem_strdup("x"));
	assert_true(alloc_fail_fired());
	char *c = mem_strdup("y");
	assert_non_null(c);
	free(a);
	free(b);
	free(c);
	alloc_fail_nth(0);
	assert_false(alloc_fail_fired());
}

static void test_disarmed_never_fails(void **state)
{
	(void)state;
	alloc_fail_nth(1);
	alloc_fail_nth(0);
	void *p = mem_malloc(16);
	assert_non_null(p);
	free(p);
	assert_false(alloc_fail_fired());
}

static void test_realloc_failure_keeps_the_block(void **state)
{
	(void)state;
	char *p = mem_malloc(4);
	assert_non_null(p);
	memcpy(p, "abc", 4);
	alloc_fail_nth(1);
	assert_null(mem_realloc(p, 1 << 20));
	assert_string_equal(p, "abc");
	free(p);
}

/* The x* policy is for what larder cannot run without: injection is for
 * the fallible calls only, so x* succeeds here. */
static void test_x_calls_are_not_injected(void **state)
{
	(void)state;
	alloc_fail_nth(1);
	char *p = xstrdup("z");
	void *q = xmalloc(0);
	assert_string_equal(p, "z");
	assert_non_null(q);
	assert_false(alloc_fail_fired());
	alloc_fail_nth(0);
	free(p);
	free(q);
}

static void *alloc_on_thread(void *arg)
{
	(void)arg;
	return mem_malloc(32);
}

/* An armed failure belongs to the thread that armed it. */
static void test_injection_is_per_thread(void **state)
{
	(void)state;
	alloc_fail_nth(1);
	pthread_t t;
	void *p = NULL;
	assert_int_equal(pthread_create(&t, NULL, alloc_on_thread, NULL), 0);
	assert_int_equal(pthread_join(t, &p), 0);
	assert_non_null(p);
	free(p);
	assert_false(alloc_fail_fired());
	alloc_fail_nth(0);
}

/* Runs op on a fresh object with its n-th allocation failing, n = 1, 2, ...
 * until an attempt meets no injected failure. Each failing attempt must
 * return -ENOMEM and leave the object as check_unchanged expects; the last
 * attempt must succeed. Returns how many attempts failed. */
struct case_ops {
	void (*make)(void *obj);
	int (*op)(void *obj);
	void (*check_unchanged)(void *obj);
	void (*drop)(void *obj);
};

static unsigned fail_each(const struct case_ops *c, void *obj)
{
	for (unsigned long n = 1;; n++) {
		c->make(obj);
		alloc_fail_nth(n);
		int rc = c->op(obj);
		bool fired = alloc_fail_fired();
		alloc_fail_nth(0);
		if (!fired) {
			assert_int_equal(rc, 0);
			c->drop(obj);
			return (unsigned)(n - 1);
		}
		assert_int_equal(rc, -ENOMEM);
		c->check_unchanged(obj);
		c->drop(obj);
		assert_true(n < 100);
	}
}

/* ---- buf */

static void buf_make(void *obj)
{
	struct buf *b = obj;
	buf_init(b, 1 << 20);
}

static void buf_drop(void *obj)
{
	buf_fini(obj);
}

static int buf_grow(void *obj)
{
	struct buf *b = obj;
	char big[300];
	memset(big, 'a', sizeof big);
	int rc = buf_append(b, big, sizeof big);
	return rc ? rc : buf_printf(b, "%s-%d", "tail", 7);
}

static void buf_empty(void *obj)
{
	struct buf *b = obj;
	assert_int_equal(b->len, 0);
	assert_string_equal(buf_cstr(b), "");
}

static void test_buf_append_out_of_memory(void **state)
{
	(void)state;
	struct buf b;
	const struct case_ops c = { buf_make, buf_grow, buf_empty, buf_drop };
	assert_int_equal(fail_each(&c, &b), 1);
}

/* A failure after the first growth leaves the text appended before it. */
static void test_buf_printf_out_of_memory_keeps_text(void **state)
{
	(void)state;
	struct buf b;
	buf_init(&b, 1 << 20);
	assert_int_equal(buf_puts(&b, "kept"), 0);
	alloc_fail_nth(1);
	char big[200];
	memset(big, 'b', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	assert_int_equal(buf_printf(&b, "%s", big), -ENOMEM);
	assert_true(alloc_fail_fired());
	alloc_fail_nth(0);
	assert_string_equal(buf_cstr(&b), "kept");
	assert_int_equal(b.len, 4);
	buf_fini(&b);
}

static void test_buf_steal_out_of_memory(void **state)
{
	(void)state;
	struct buf b;
	buf_init(&b, 16);
	alloc_fail_nth(1);
	assert_null(buf_steal(&b));
	alloc_fail_nth(0);
	buf_fini(&b);
}

/* ---- hdrs */

static void hdrs_make(void *obj)
{
	hdrs_init(obj);
}

static void hdrs_drop(void *obj)
{
	hdrs_fini(obj);
}

static int hdrs_two(void *obj)
{
	int rc = hdrs_add(obj, "Content-Type", "text/plain");
	if (rc)
		return rc;
	const char line[] = "ETag: \"abc\"\r\n";
	return hdrs_add_line(obj, line, sizeof line - 1);
}

static void hdrs_none_or_first(void *obj)
{
	struct hdrs *h = obj;
	/* The first add either failed whole or completed whole. */
	assert_true(h->n <= 1);
	if (h->n == 1) {
		assert_string_equal(hdrs_get(h, "content-type"), "text/plain");
		assert_null(hdrs_get(h, "etag"));
	}
}

static void test_hdrs_out_of_memory(void **state)
{
	(void)state;
	struct hdrs h;
	const struct case_ops c = { hdrs_make, hdrs_two, hdrs_none_or_first, hdrs_drop };
	/* add: the array, name, value; add_line: its copy, then name, value */
	assert_int_equal(fail_each(&c, &h), 6);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_nth_fails_once),
		cmocka_unit_test(test_disarmed_never_fails),
		cmocka_unit_test(test_realloc_failure_keeps_the_block),
		cmocka_unit_test(test_x_calls_are_not_injected),
		cmocka_unit_test(test_injection_is_per_thread),
		cmocka_unit_test(test_buf_append_out_of_memory),
		cmocka_unit_test(test_buf_printf_out_of_memory_keeps_text),
		cmocka_unit_test(test_buf_steal_out_of_memory),
		cmocka_unit_test(test_hdrs_out_of_memory),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

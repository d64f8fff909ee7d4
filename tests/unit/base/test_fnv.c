/*
 * test_fnv.c - base/fnv.h against the reference FNV-1a 64 values (the FNV
 * authors' test suite), whole and in pieces. rdv_node_hash depends on them
 * staying put: every node of a cluster must place alike.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "base/fnv.h"

static void test_reference(void **state)
{
	(void)state;
	assert_true(fnv1a64("") == UINT64_C(0xcbf29ce484222325));
	assert_true(fnv1a64("a") == UINT64_C(0xaf63dc4c8601ec8c));
	assert_true(fnv1a64("foobar") == UINT64_C(0x85944171f73967e8));
}

static void test_pieces(void **state)
{
	(void)state;
	uint64_t h = fnv1a64_add(FNV1A64_OFFSET, "foo", 3);
	h = fnv1a64_add(h, "bar", 3);
	assert_true(h == fnv1a64("foobar"));
	assert_true(fnv1a64_add(FNV1A64_OFFSET, "foobar", 0) == FNV1A64_OFFSET);
	/* Bytes, NULs and high bytes included, not a C string. */
	assert_true(fnv1a64_add(FNV1A64_OFFSET, "a\0\xff", 3) != fnv1a64("a"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_reference),
		cmocka_unit_test(test_pieces),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * test_crc.c - base/crc.h: the published check values, and that feeding the
 * bytes in pieces gives the one-shot value (zlib's continuation convention).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "base/crc.h"

static const char check[] = "123456789";

static void test_check_values(void **state)
{
	(void)state;
	assert_int_equal(crc32_iso(0, check, 9), 0xCBF43926u);
	assert_int_equal(crc32c(0, check, 9), 0xE3069283u);
	assert_true(crc64nvme(0, check, 9) == UINT64_C(0xAE8B14860A799888));
	assert_int_equal(crc32_iso(0, "", 0), 0);
	assert_int_equal(crc32c(0, "", 0), 0);
	assert_true(crc64nvme(0, "", 0) == 0);
}

/* Pieces of every length up to 17 cross the eight-byte step at every
 * alignment. */
static void test_pieces(void **state)
{
	(void)state;
	unsigned char big[1000];
	for (size_t i = 0; i < sizeof big; i++)
		big[i] = (unsigned char)(i * 131 + 7);
	for (size_t step = 1; step <= 17; step++) {
		uint32_t a = 0, c = 0;
		uint64_t d = 0;
		for (size_t i = 0; i < sizeof big; i += step) {
			size_t n = sizeof big - i < step ? sizeof big - i : step;
			a = crc32_iso(a, big + i, n);
			c = crc32c(c, big + i, n);
			d = crc64nvme(d, big + i, n);
		}
		assert_int_equal(a, crc32_iso(0, big, sizeof big));
		assert_int_equal(c, crc32c(0, big, sizeof big));
		assert_true(d == crc64nvme(0, big, sizeof big));
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_check_values),
		cmocka_unit_test(test_pieces),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

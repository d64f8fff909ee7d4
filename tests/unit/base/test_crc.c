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

/* CRC32C one bit at a time, straight from the reflected polynomial: the
 * reference for the fast paths (tables, the CPU's crc32 instruction). */
static uint32_t crc32c_bitwise(const unsigned char *p, size_t n)
{
	uint32_t c = 0xffffffffu;
	while (n--) {
		c ^= *p++;
		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
	}
	return ~c;
}

/* Long inputs go through the three-stream path (steps of 12 KiB) and its
 * tail; every length around a step's edge, at odd offsets, and in pieces
 * that split a step, gives the bitwise value. */
static void test_crc32c_long(void **state)
{
	(void)state;
	static unsigned char big[3 * 12288 + 100];
	uint64_t x = 0x9E3779B97F4A7C15ull;
	for (size_t i = 0; i < sizeof big; i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		big[i] = (unsigned char)(x >> 56);
	}
	const size_t lens[] = { 12287, 12288, 12289, 24576 + 7, 3 * 12288, sizeof big - 1 };
	for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++)
		for (size_t off = 0; off < 2; off++)
			assert_int_equal(crc32c(0, big + off, lens[i]), crc32c_bitwise(big + off, lens[i]));
	uint32_t want = crc32c_bitwise(big, sizeof big);
	const size_t cuts[] = { 1, 4095, 12288, 20000, sizeof big - 3 };
	for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++)
		assert_int_equal(crc32c(crc32c(0, big, cuts[i]), big + cuts[i], sizeof big - cuts[i]),
		                 want);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_check_values),
		cmocka_unit_test(test_pieces),
		cmocka_unit_test(test_crc32c_long),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

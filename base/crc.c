/*
 * crc.c - CRC32 comes from zlib; CRC32C and CRC64NVME are table-driven here,
 * eight bytes per step ("slicing-by-8"): both are reflected CRCs with init
 * and final XOR of all ones.
 *   CRC32C:    polynomial 0x1EDC6F41, reflected 0x82F63B78 (RFC 3720 B.4)
 *   CRC64NVME: polynomial 0xAD93D23594C93659, reflected 0x9A6C9329AC4BC9B5
 *              (NVM Express NVM Command Set spec, 5.2.1.3.4)
 * On x86-64 with SSE4.2, CRC32C uses the CPU's crc32 instruction instead,
 * on three independent streams at once (the instruction's latency is three
 * times its throughput): the disk tier checksums every chunk it writes, and
 * the tables cost a cold miss about a sixth of its CPU (docs/benchmarks.md,
 * "Per-request CPU (issue 15)").
 */
#include "base/crc.h"

#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#include <zlib.h>

uint32_t crc32_iso(uint32_t crc, const void *p, size_t n)
{
	/* zlib takes uInt lengths: feed in slices that fit. */
	while (n) {
		uInt step = n > 1u << 30 ? 1u << 30 : (uInt)n;
		crc = (uint32_t)crc32(crc, p, step);
		p = (const unsigned char *)p + step;
		n -= step;
	}
	return crc;
}

static uint32_t crc32c_tab[8][256];
static uint64_t crc64_tab[8][256];
static pthread_once_t tab_once = PTHREAD_ONCE_INIT;

static void build_tables(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		uint64_t d = i;
		for (int k = 0; k < 8; k++) {
			c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
			d = d & 1 ? (d >> 1) ^ 0x9A6C9329AC4BC9B5ull : d >> 1;
		}
		crc32c_tab[0][i] = c;
		crc64_tab[0][i] = d;
	}
	/* tab[k][i] is the CRC of byte i followed by k zero bytes. */
	for (int k = 1; k < 8; k++) {
		for (int i = 0; i < 256; i++) {
			uint32_t c = crc32c_tab[k - 1][i];
			uint64_t d = crc64_tab[k - 1][i];
			crc32c_tab[k][i] = (c >> 8) ^ crc32c_tab[0][c & 0xff];
			crc64_tab[k][i] = (d >> 8) ^ crc64_tab[0][d & 0xff];
		}
	}
}

static uint64_t load_le64(const unsigned char *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static uint32_t crc32c_sw(uint32_t crc, const void *data, size_t n)
{
	const unsigned char *p = data;
	uint32_t c = ~crc;
	while (n >= 8) {
		uint64_t x = load_le64(p) ^ c;
		c = crc32c_tab[7][x & 0xff] ^ crc32c_tab[6][(x >> 8) & 0xff] ^
		    crc32c_tab[5][(x >> 16) & 0xff] ^ crc32c_tab[4][(x >> 24) & 0xff] ^
		    crc32c_tab[3][(x >> 32) & 0xff] ^ crc32c_tab[2][(x >> 40) & 0xff] ^
		    crc32c_tab[1][(x >> 48) & 0xff] ^ crc32c_tab[0][x >> 56];
		p += 8;
		n -= 8;
	}
	while (n--)
		c = (c >> 8) ^ crc32c_tab[0][(c ^ *p++) & 0xff];
	return ~c;
}

#if defined(__x86_64__)
#include <nmmintrin.h>

/* Three streams of STRIDE bytes each per step. The CRC without its
 * inversions is linear, so crc(c, A B) = zeros(crc(c, A), |B|) ^ crc(0, B),
 * where zeros(x, n) is x run through n zero bytes: zeros_tab applies that
 * for n = STRIDE a byte of x at a time. */
#define STRIDE 4096
static uint32_t zeros_tab[4][256];
static bool have_sse42;

__attribute__((target("sse4.2"))) static uint32_t raw_zeros(uint32_t x, size_t n)
{
	uint64_t c = x;
	for (size_t i = 0; i < n / 8; i++)
		c = _mm_crc32_u64(c, 0);
	return (uint32_t)c;
}

static void build_hw(void)
{
	have_sse42 = __builtin_cpu_supports("sse4.2");
	if (!have_sse42)
		return;
	uint32_t bit[32];
	for (int b = 0; b < 32; b++)
		bit[b] = raw_zeros(1u << b, STRIDE);
	for (int k = 0; k < 4; k++)
		for (int v = 0; v < 256; v++) {
			uint32_t z = 0;
			for (int b = 0; b < 8; b++)
				if (v >> b & 1)
					z ^= bit[8 * k + b];
			zeros_tab[k][v] = z;
		}
}

static uint32_t shift_stride(uint32_t x)
{
	return zeros_tab[0][x & 0xff] ^ zeros_tab[1][(x >> 8) & 0xff] ^
	       zeros_tab[2][(x >> 16) & 0xff] ^ zeros_tab[3][x >> 24];
}

__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(uint32_t crc, const void *data,
                                                             size_t n)
{
	const unsigned char *p = data;
	uint64_t c = (uint32_t)~crc;
	while (n >= 3 * STRIDE) {
		uint64_t c1 = 0, c2 = 0;
		for (size_t i = 0; i < STRIDE; i += 8) {
			uint64_t a, b, d;
			memcpy(&a, p + i, 8);
			memcpy(&b, p + STRIDE + i, 8);
			memcpy(&d, p + 2 * STRIDE + i, 8);
			c = _mm_crc32_u64(c, a);
			c1 = _mm_crc32_u64(c1, b);
			c2 = _mm_crc32_u64(c2, d);
		}
		c = shift_stride((uint32_t)c) ^ (uint32_t)c1;
		c = shift_stride((uint32_t)c) ^ (uint32_t)c2;
		p += 3 * STRIDE;
		n -= 3 * STRIDE;
	}
	for (; n >= 8; p += 8, n -= 8) {
		uint64_t a;
		memcpy(&a, p, 8);
		c = _mm_crc32_u64(c, a);
	}
	uint32_t c32 = (uint32_t)c;
	while (n--)
		c32 = _mm_crc32_u8(c32, *p++);
	return ~c32;
}
#endif

static pthread_once_t hw_once = PTHREAD_ONCE_INIT;

static void build_all(void)
{
	pthread_once(&tab_once, build_tables);
#if defined(__x86_64__)
	build_hw();
#endif
}

uint32_t crc32c(uint32_t crc, const void *data, size_t n)
{
	pthread_once(&hw_once, build_all);
#if defined(__x86_64__)
	if (have_sse42)
		return crc32c_hw(crc, data, n);
#endif
	return crc32c_sw(crc, data, n);
}

uint64_t crc64nvme(uint64_t crc, const void *data, size_t n)
{
	pthread_once(&tab_once, build_tables);
	const unsigned char *p = data;
	uint64_t c = ~crc;
	while (n >= 8) {
		uint64_t x = load_le64(p) ^ c;
		c = crc64_tab[7][x & 0xff] ^ crc64_tab[6][(x >> 8) & 0xff] ^
		    crc64_tab[5][(x >> 16) & 0xff] ^ crc64_tab[4][(x >> 24) & 0xff] ^
		    crc64_tab[3][(x >> 32) & 0xff] ^ crc64_tab[2][(x >> 40) & 0xff] ^
		    crc64_tab[1][(x >> 48) & 0xff] ^ crc64_tab[0][x >> 56];
		p += 8;
		n -= 8;
	}
	while (n--)
		c = (c >> 8) ^ crc64_tab[0][(c ^ *p++) & 0xff];
	return ~c;
}

/*
 * crc.c - CRC32 comes from zlib and CRC32C from ISA-L (Intel's storage
 * library: the CPU's crc32 instruction where there is one, chosen at run
 * time); CRC64NVME, which neither has, is table-driven here, eight bytes
 * per step ("slicing-by-8"): a reflected CRC with init and final XOR of all
 * ones, polynomial 0xAD93D23594C93659, reflected 0x9A6C9329AC4BC9B5 (NVM
 * Express NVM Command Set spec, 5.2.1.3.4).
 * The disk tier checksums every chunk it writes and reads with CRC32C:
 * slicing tables cost a cold miss about a sixth of its CPU
 * (docs/benchmarks.md, "Per-request CPU (issue 15)").
 */
#include "base/crc.h"

#include <pthread.h>
#include <stdint.h>

#include <isa-l/crc.h>
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

uint32_t crc32c(uint32_t crc, const void *p, size_t n)
{
	/* ISA-L neither inverts at the ends nor takes more than INT_MAX bytes
	 * at once; its buffer argument is not const but is only read. */
	unsigned int c = ~crc;
	unsigned char *q = (unsigned char *)(uintptr_t)p;
	while (n) {
		int step = n > 1u << 30 ? 1 << 30 : (int)n;
		c = crc32_iscsi(q, step, c);
		q += step;
		n -= (size_t)step;
	}
	return ~c;
}

static uint64_t crc64_tab[8][256];
static pthread_once_t tab_once = PTHREAD_ONCE_INIT;

static void build_tables(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint64_t d = i;
		for (int k = 0; k < 8; k++)
			d = d & 1 ? (d >> 1) ^ 0x9A6C9329AC4BC9B5ull : d >> 1;
		crc64_tab[0][i] = d;
	}
	/* tab[k][i] is the CRC of byte i followed by k zero bytes. */
	for (int k = 1; k < 8; k++)
		for (int i = 0; i < 256; i++) {
			uint64_t d = crc64_tab[k - 1][i];
			crc64_tab[k][i] = (d >> 8) ^ crc64_tab[0][d & 0xff];
		}
}

static uint64_t load_le64(const unsigned char *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
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

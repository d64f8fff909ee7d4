/*
 * checksum.c - streaming CRC32/CRC32C/CRC64NVME/SHA-1/SHA-256 for S3's
 * x-amz-checksum-* values.
 *
 * CRC32 comes from zlib and the SHAs from OpenSSL. CRC32C and CRC64NVME
 * are table-driven here, eight bytes per step ("slicing-by-8"): both are
 * reflected CRCs with init and final XOR of all ones.
 *   CRC32C:    polynomial 0x1EDC6F41, reflected 0x82F63B78 (RFC 3720 B.4)
 *   CRC64NVME: polynomial 0xAD93D23594C93659, reflected 0x9A6C9329AC4BC9B5
 *              (NVM Express NVM Command Set spec, 5.2.1.3.4)
 * Check values over "123456789": 0xE3069283 and 0xAE8B14860A799888.
 */
#include "auth/checksum.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <strings.h>

#include <openssl/evp.h>
#include <zlib.h>

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

uint32_t cks_crc32c(uint32_t crc, const void *data, size_t n)
{
	pthread_once(&tab_once, build_tables);
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

uint64_t cks_crc64nvme(uint64_t crc, const void *data, size_t n)
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

static const struct {
	const char *name;
	enum cks_alg alg;
	size_t len;
} algs[] = {
	{ "crc32", CKS_CRC32, 4 },
	{ "crc32c", CKS_CRC32C, 4 },
	{ "crc64nvme", CKS_CRC64NVME, 8 },
	{ "sha1", CKS_SHA1, 20 },
	{ "sha256", CKS_SHA256, 32 },
};

#define PREFIX "x-amz-checksum-"

enum cks_alg cks_alg_from_name(const char *name, size_t len)
{
	size_t pl = sizeof PREFIX - 1;
	if (len > pl && strncasecmp(name, PREFIX, pl) == 0) {
		name += pl;
		len -= pl;
	}
	for (size_t i = 0; i < sizeof algs / sizeof algs[0]; i++)
		if (strlen(algs[i].name) == len && strncasecmp(name, algs[i].name, len) == 0)
			return algs[i].alg;
	return CKS_NONE;
}

const char *cks_header_name(enum cks_alg alg)
{
	switch (alg) {
	case CKS_CRC32: return PREFIX "crc32";
	case CKS_CRC32C: return PREFIX "crc32c";
	case CKS_CRC64NVME: return PREFIX "crc64nvme";
	case CKS_SHA1: return PREFIX "sha1";
	case CKS_SHA256: return PREFIX "sha256";
	case CKS_NONE: break;
	}
	return "";
}

size_t cks_digest_len(enum cks_alg alg)
{
	for (size_t i = 0; i < sizeof algs / sizeof algs[0]; i++)
		if (algs[i].alg == alg)
			return algs[i].len;
	return 0;
}

int cks_init(struct cks *c, enum cks_alg alg)
{
	memset(c, 0, sizeof *c);
	c->alg = alg;
	switch (alg) {
	case CKS_CRC32:
	case CKS_CRC32C:
	case CKS_CRC64NVME:
		return 0;
	case CKS_SHA1:
	case CKS_SHA256: {
		EVP_MD_CTX *md = EVP_MD_CTX_new();
		if (!md)
			return -ENOMEM;
		if (!EVP_DigestInit_ex(md, alg == CKS_SHA1 ? EVP_sha1() : EVP_sha256(), NULL)) {
			EVP_MD_CTX_free(md);
			return -ENOMEM;
		}
		c->md = md;
		return 0;
	}
	case CKS_NONE:
		break;
	}
	c->alg = CKS_NONE;
	return -EINVAL;
}

void cks_update(struct cks *c, const void *p, size_t n)
{
	switch (c->alg) {
	case CKS_CRC32:
		/* zlib takes uInt lengths: feed in slices that fit. */
		while (n) {
			uInt step = n > 1u << 30 ? 1u << 30 : (uInt)n;
			c->crc32 = (uint32_t)crc32(c->crc32, p, step);
			p = (const unsigned char *)p + step;
			n -= step;
		}
		break;
	case CKS_CRC32C:
		c->crc32 = cks_crc32c(c->crc32, p, n);
		break;
	case CKS_CRC64NVME:
		c->crc64 = cks_crc64nvme(c->crc64, p, n);
		break;
	case CKS_SHA1:
	case CKS_SHA256:
		if (c->md)
			EVP_DigestUpdate(c->md, p, n);
		break;
	case CKS_NONE:
		break;
	}
}

size_t cks_final(struct cks *c, unsigned char out[CKS_MAX_DIGEST])
{
	size_t len = cks_digest_len(c->alg);
	switch (c->alg) {
	case CKS_CRC32:
	case CKS_CRC32C:
		for (size_t i = 0; i < 4; i++)
			out[i] = (unsigned char)(c->crc32 >> (24 - 8 * i));
		break;
	case CKS_CRC64NVME:
		for (size_t i = 0; i < 8; i++)
			out[i] = (unsigned char)(c->crc64 >> (56 - 8 * i));
		break;
	case CKS_SHA1:
	case CKS_SHA256: {
		unsigned int l = 0;
		if (!c->md || !EVP_DigestFinal_ex(c->md, out, &l))
			memset(out, 0, len);
		break;
	}
	case CKS_NONE:
		break;
	}
	return len;
}

void cks_final_base64(struct cks *c, char out[CKS_MAX_B64])
{
	unsigned char d[CKS_MAX_DIGEST];
	size_t n = cks_final(c, d);
	EVP_EncodeBlock((unsigned char *)out, d, (int)n);
}

void cks_fini(struct cks *c)
{
	EVP_MD_CTX_free(c->md);
	c->md = NULL;
}

/*
 * checksum.c - streaming CRC32/CRC32C/CRC64NVME/SHA-1/SHA-256 for S3's
 * x-amz-checksum-* values: the CRCs from base/crc.h, the SHAs from OpenSSL.
 */
#include "auth/checksum.h"

#include <errno.h>
#include <string.h>
#include <strings.h>

#include <openssl/evp.h>

#include "base/crc.h"
#include "base/sha256.h"

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
		if (!EVP_DigestInit_ex(md, alg == CKS_SHA1 ? EVP_sha1() : sha256_md(), NULL)) {
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
		c->crc32 = crc32_iso(c->crc32, p, n);
		break;
	case CKS_CRC32C:
		c->crc32 = crc32c(c->crc32, p, n);
		break;
	case CKS_CRC64NVME:
		c->crc64 = crc64nvme(c->crc64, p, n);
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

/*
 * checksum.h - the streaming checksums S3 accepts as x-amz-checksum-*:
 * CRC32 (ISO-HDLC, as zlib), CRC32C (Castagnoli), CRC64NVME, SHA-1 and
 * SHA-256. Values travel base64-encoded, CRCs as big-endian bytes
 * (S3 User Guide, "Checking object integrity").
 *
 * Usage: cks_init, any number of cks_update, then cks_final_base64 (or
 * cks_final), then cks_fini. A struct cks is not shared between threads.
 * The bare CRCs (the disk tier's record checks) are in base/crc.h.
 */
#ifndef LARDER_CHECKSUM_H
#define LARDER_CHECKSUM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum cks_alg {
	CKS_NONE = 0,
	CKS_CRC32,
	CKS_CRC32C,
	CKS_CRC64NVME,
	CKS_SHA1,
	CKS_SHA256,
};

#define CKS_MAX_DIGEST 32
/* Longest base64 value plus NUL (SHA-256: 44 characters). */
#define CKS_MAX_B64 45

struct cks {
	enum cks_alg alg;
	uint32_t crc32;
	uint64_t crc64;
	void *md;          /* EVP_MD_CTX for SHA-1/SHA-256; owned */
};

/* The algorithm for "crc32", "crc32c", "crc64nvme", "sha1", "sha256" (any
 * case), with or without the "x-amz-checksum-" prefix; CKS_NONE otherwise. */
enum cks_alg cks_alg_from_name(const char *name, size_t len);

/* "x-amz-checksum-crc32" etc.; "" for CKS_NONE. */
const char *cks_header_name(enum cks_alg alg);

/* Digest length in bytes (4, 4, 8, 20, 32), 0 for CKS_NONE. */
size_t cks_digest_len(enum cks_alg alg);

/* Returns 0, -EINVAL for CKS_NONE, or -ENOMEM. */
int cks_init(struct cks *c, enum cks_alg alg);
void cks_update(struct cks *c, const void *p, size_t n);
/* Writes the digest (cks_digest_len bytes) and returns its length. Call once. */
size_t cks_final(struct cks *c, unsigned char out[CKS_MAX_DIGEST]);
/* cks_final, base64-encoded into out (NUL-terminated). */
void cks_final_base64(struct cks *c, char out[CKS_MAX_B64]);
/* Releases the hash context; safe on a zeroed or finished struct. */
void cks_fini(struct cks *c);

#endif

/*
 * crc.h - the CRCs larder checks data with: CRC32 (ISO-HDLC, as zlib and
 * S3's x-amz-checksum-crc32), CRC32C (Castagnoli: the disk tier's records,
 * x-amz-checksum-crc32c) and CRC64NVME (x-amz-checksum-crc64nvme).
 *
 * All three follow zlib's convention: start with 0 and pass the previous
 * result back in to continue over more bytes; every value returned is final
 * (no extra step), so crc(crc(0, a), b) == crc(0, a b). Thread-safe.
 * Check values over "123456789": 0xCBF43926, 0xE3069283, 0xAE8B14860A799888.
 */
#ifndef LARDER_CRC_H
#define LARDER_CRC_H

#include <stddef.h>
#include <stdint.h>

uint32_t crc32_iso(uint32_t crc, const void *p, size_t n);
uint32_t crc32c(uint32_t crc, const void *p, size_t n);
uint64_t crc64nvme(uint64_t crc, const void *p, size_t n);

#endif

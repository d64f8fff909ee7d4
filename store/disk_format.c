/*
 * disk_format.c - one entry as it lies in a segment file: encoding and
 * checking its header, reading it back, and the positional I/O loops.
 *
 * Entry. Starts at a multiple of ENTRY_ALIGN (4 KiB), so appending never
 * rewrites a page holding an earlier entry, and is padded with zeros to
 * the next multiple. The fixed header is HDR_LEN (72) bytes, little-endian:
 *
 *     0  magic "LRDR"          28  index u64           48  data_len u32
 *     4  version u16 (2)       36  bucket_len u16      52  data_crc32c u32
 *     6  header_len u16 (72)   38  key_len u16         56  generation u64
 *     8  reserved u32 (0)      40  etag_len u16        64  reserved u32 (0)
 *    12  chunk id [16]         42  flags u16           68  header_crc32c u32
 *                              44  meta_len u32
 *
 * then bucket, key, etag (no NULs), the metadata blob, the data, padding.
 * header_crc32c covers bytes [0, 68) and then the names and metadata; the
 * data has its own CRC, checked on every read. flags: bit 0 (HDR_F_COPY) a
 * cluster node's copy of a chunk another node owns (store/policy.h:
 * policy_rank), so a restart ranks it as before; no other bit is used.
 * Entries from before the flag have 0 there and read as before; a larder
 * from before it stops its scan of a segment at an entry with the flag, as
 * at a torn tail (the rest of that segment is fetched again).
 */
#include "store/disk_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

uint64_t dk_var_len_of(const struct hdr *h)
{
	return (uint64_t)h->bucket_len + h->key_len + h->etag_len + h->meta_len;
}

uint64_t dk_entry_size(uint64_t var_len, uint64_t data_len)
{
	uint64_t n = HDR_LEN + var_len + data_len;
	return (n + ENTRY_ALIGN - 1) / ENTRY_ALIGN * ENTRY_ALIGN;
}

void dk_hdr_encode(const struct hdr *h, unsigned char *b, const unsigned char *var)
{
	memset(b, 0, HDR_LEN);
	memcpy(b, "LRDR", 4);
	put16(b + 4, HDR_VERSION);
	put16(b + 6, HDR_LEN);
	memcpy(b + 12, h->id.b, CHUNK_ID_LEN);
	put64(b + 28, h->index);
	put16(b + 36, h->bucket_len);
	put16(b + 38, h->key_len);
	put16(b + 40, h->etag_len);
	put16(b + 42, h->flags);
	put32(b + 44, h->meta_len);
	put32(b + 48, h->data_len);
	put32(b + 52, h->data_crc);
	put64(b + 56, h->gen);
	uint32_t crc = crc32c(0, b, HDR_CRC_OFF);
	put32(b + HDR_CRC_OFF, crc32c(crc, var, dk_var_len_of(h)));
}

bool dk_hdr_decode(const unsigned char *b, struct hdr *h)
{
	if (memcmp(b, "LRDR", 4) != 0 || get16(b + 4) != HDR_VERSION || get16(b + 6) != HDR_LEN ||
	    get32(b + 8) != 0 || (get16(b + 42) & ~HDR_F_COPY) != 0 || get32(b + 64) != 0)
		return false;
	memcpy(h->id.b, b + 12, CHUNK_ID_LEN);
	h->index = get64(b + 28);
	h->bucket_len = get16(b + 36);
	h->key_len = get16(b + 38);
	h->etag_len = get16(b + 40);
	h->flags = get16(b + 42);
	h->meta_len = get32(b + 44);
	h->data_len = get32(b + 48);
	h->data_crc = get32(b + 52);
	h->gen = get64(b + 56);
	return h->meta_len <= MAX_META;
}

int dk_entry_read(int fd, uint64_t off, uint64_t limit, struct hdr *h, unsigned char **var,
                  size_t *cap)
{
	unsigned char b[HDR_LEN];
	if (limit < off || limit - off < HDR_LEN)
		return 1;
	int rc = file_pread_all(fd, b, HDR_LEN, off);
	if (rc < 0)
		return rc == -ENODATA ? 1 : rc;
	if (!dk_hdr_decode(b, h))
		return 1;
	uint64_t vl = dk_var_len_of(h);
	if (dk_entry_size(vl, h->data_len) > limit - off)
		return 1;
	if (vl > *cap) {
		unsigned char *nv = realloc(*var, vl);
		if (!nv)
			return -ENOMEM;
		*var = nv;
		*cap = vl;
	}
	if (vl > 0 && (rc = file_pread_all(fd, *var, vl, off + HDR_LEN)) < 0)
		return rc == -ENODATA ? 1 : rc;
	uint32_t crc = crc32c(0, b, HDR_CRC_OFF);
	return crc32c(crc, *var, vl) == get32(b + HDR_CRC_OFF) ? 0 : 1;
}

void dk_seg_name(char out[SEG_NAME_LEN + 1], uint64_t seq)
{
	snprintf(out, SEG_NAME_LEN + 1, "seg-%016" PRIx64 ".log", seq);
}

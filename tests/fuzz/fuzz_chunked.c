/*
 * fuzz_chunked.c - the aws-chunked decoder in every mode, fed in pieces.
 *
 * Byte 0 picks the mode and whether a checksum trailer is declared; byte 1
 * seeds the split points; the rest is the encoded body. The same body is
 * decoded in one call and in random pieces: the outcome must agree.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "auth/chunked.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int sink(void *arg, const char *p, size_t n)
{
	(void)p;
	*(uint64_t *)arg += n;
	return 0;
}

static const char *const trailers[] = {
	NULL, "x-amz-checksum-crc32", "x-amz-checksum-crc32c", "x-amz-checksum-crc64nvme",
	"x-amz-checksum-sha1", "x-amz-checksum-sha256", "x-amz-checksum-crc32,x-amz-meta-x",
	NULL,
};

static enum ack_status run(const uint8_t *data, size_t size, unsigned seed, bool split,
                           uint64_t *decoded)
{
	static const unsigned char key[32] = { 1, 2, 3 };
	enum ack_mode mode = (enum ack_mode)(data[0] % 3);
	const char *tr = trailers[(data[0] >> 2) & 7];
	int64_t dlen = (data[0] & 0x80) ? (int64_t)(size / 2) : -1;
	*decoded = 0;
	struct ack_decoder *d = ack_create(
	        mode, key, "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9",
	        "20130524T000000Z", "20130524/us-east-1/s3/aws4_request", dlen,
	        mode == ACK_SIGNED ? NULL : tr, sink, decoded);
	if (!d)
		abort();
	const char *p = (const char *)data + 2;
	size_t len = size - 2, off = 0;
	enum ack_status st = ACK_MORE;
	/* Keep feeding after ACK_DONE: bytes past the end must turn it into
	 * ACK_ERR_FRAMING, as they do when fed in one piece. */
	while (off < len && (st == ACK_MORE || st == ACK_DONE)) {
		size_t n = split ? (size_t)(rand_r(&seed) % 17) : len - off;
		if (n > len - off)
			n = len - off;
		st = ack_feed(d, p + off, n);
		off += n;
	}
	if (st == ACK_MORE)
		st = ack_finish(d);
	if (ack_decoded_bytes(d) != *decoded)
		abort();
	ack_destroy(d);
	return st;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	uint64_t whole, pieces;
	enum ack_status a = run(data, size, data[1], false, &whole);
	enum ack_status b = run(data, size, data[1], true, &pieces);
	/* Success and the bytes decoded before it must not depend on splits. */
	if ((a == ACK_DONE) != (b == ACK_DONE) || (a == ACK_DONE && whole != pieces))
		abort();
	return 0;
}

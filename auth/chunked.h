/*
 * chunked.h - decoder for S3's aws-chunked request bodies.
 *
 * Four payload modes use it (x-amz-content-sha256):
 *   STREAMING-AWS4-HMAC-SHA256-PAYLOAD          every chunk signed
 *   STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER  chunks and trailer signed
 *   STREAMING-UNSIGNED-PAYLOAD-TRAILER          no signatures; trailing checksum
 * Wire format (S3 API "Signature Calculations for the Authorization Header:
 * Transferring Payload in Multiple Chunks"):
 *   hex-size[;chunk-signature=<64 hex>]\r\n <size bytes> \r\n ... 0[;...]\r\n
 *   [trailer-name:value\r\n ...][x-amz-trailer-signature:<64 hex>\r\n]\r\n
 * Chunk signature i is HMAC(signing key, "AWS4-HMAC-SHA256-PAYLOAD\n" date
 * "\n" scope "\n" previous-signature "\n" hex(sha256("")) "\n"
 * hex(sha256(chunk))), the first "previous" being the request's seed
 * signature. A trailing x-amz-checksum-{crc32,crc32c,crc64nvme,sha1,sha256}
 * is checked against the decoded bytes.
 *
 * The decoder is a push parser with bounded memory: it never holds more
 * than a chunk header line (capped) plus the running hashes; payload bytes
 * are handed to the sink as they are decoded.
 */
#ifndef LARDER_CHUNKED_H
#define LARDER_CHUNKED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum ack_mode {
	ACK_SIGNED,            /* STREAMING-AWS4-HMAC-SHA256-PAYLOAD */
	ACK_SIGNED_TRAILER,    /* STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER */
	ACK_UNSIGNED_TRAILER,  /* STREAMING-UNSIGNED-PAYLOAD-TRAILER */
};

/* Returns the mode for an x-amz-content-sha256 value, or -1 if it is not
 * an aws-chunked mode. */
int ack_mode_from_payload_hash(const char *v);

enum ack_status {
	ACK_MORE = 0,          /* consumed everything given; feed more */
	ACK_DONE = 1,          /* the final chunk and trailer were read and verified */
	ACK_ERR_FRAMING = -1,  /* bad chunk header, size, CRLF, or data after the end */
	ACK_ERR_SIGNATURE = -2,/* a chunk or trailer signature did not match */
	ACK_ERR_CHECKSUM = -3, /* trailing checksum did not match the decoded bytes */
	ACK_ERR_LENGTH = -4,   /* decoded length differs from x-amz-decoded-content-length */
	ACK_ERR_SINK = -5,     /* the sink returned non-zero */
};

/* Receives decoded payload bytes. Return 0 to go on, non-zero to stop. */
typedef int (*ack_sink_cb)(void *arg, const char *data, size_t len);

struct ack_decoder;

/*
 * Creates a decoder. For the signed modes, signing_key is the key derived
 * for the request's scope, seed_signature the request's own signature (hex),
 * amz_date the request's X-Amz-Date and scope "date/region/service/aws4_request".
 * For ACK_UNSIGNED_TRAILER they may be NULL. decoded_length is the value of
 * x-amz-decoded-content-length, or -1 when absent. trailer_names is the
 * x-amz-trailer header value (NULL when absent): a trailer the client named
 * must arrive, and a trailer it did not name is a framing error. Checksums
 * are computed only for the x-amz-checksum-* trailers named there.
 * Returns NULL on allocation failure or invalid arguments (a signed mode
 * without key, seed signature, date or scope; an unknown checksum name or
 * more than 8 names in trailer_names).
 */
struct ack_decoder *ack_create(enum ack_mode mode, const unsigned char signing_key[32],
                               const char *seed_signature, const char *amz_date,
                               const char *scope, int64_t decoded_length,
                               const char *trailer_names, ack_sink_cb sink, void *sink_arg);

/* Feeds bytes of the encoded body. Returns ACK_MORE, ACK_DONE (when these
 * bytes completed the body) or an error; after an error or ACK_DONE further
 * calls return the same status, except that bytes fed after ACK_DONE are
 * data after the end (ACK_ERR_FRAMING).
 * The sink sees a chunk's bytes before that chunk's signature (checked at
 * its end) and the trailing checksum are verified: whatever it stored must
 * be discarded unless the body ends with ACK_DONE. */
enum ack_status ack_feed(struct ack_decoder *d, const char *data, size_t len);

/* Call when the encoded body ended: ACK_DONE if the body was complete and
 * verified, else ACK_ERR_FRAMING (truncated). */
enum ack_status ack_finish(struct ack_decoder *d);

/* Decoded payload bytes so far. */
uint64_t ack_decoded_bytes(const struct ack_decoder *d);

/* The trailing checksum header verified, as "x-amz-checksum-crc32: <b64>",
 * or NULL when there was none. Valid until ack_destroy. */
const char *ack_trailer_checksum(const struct ack_decoder *d);

void ack_destroy(struct ack_decoder *d);

#endif

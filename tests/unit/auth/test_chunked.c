/*
 * test_chunked.c - the aws-chunked decoder and the trailing checksums.
 *
 * Usage: test_chunked <testdata/sigv4 dir>   (for the S3 docs example)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "auth/checksum.h"
#include "auth/chunked.h"
#include "auth/sigv4.h"
#include "base/crc.h"

static const char *datadir;

#define DATE "20130524T000000Z"
#define SCOPE "20130524/us-east-1/s3/aws4_request"

/* ---- helpers ------------------------------------------------------------ */

struct sink {
	size_t n;
	unsigned char hash[32];
	EVP_MD_CTX *md;
	int fail_after; /* return non-zero once this many bytes arrived; -1: never */
};

static int sink_cb(void *arg, const char *p, size_t n)
{
	struct sink *s = arg;
	s->n += n;
	EVP_DigestUpdate(s->md, p, n);
	return s->fail_after >= 0 && s->n >= (size_t)s->fail_after;
}

static void sink_init(struct sink *s)
{
	memset(s, 0, sizeof *s);
	s->fail_after = -1;
	s->md = EVP_MD_CTX_new();
	EVP_DigestInit_ex(s->md, EVP_sha256(), NULL);
}

static void sink_fini(struct sink *s)
{
	unsigned int l;
	EVP_DigestFinal_ex(s->md, s->hash, &l);
	EVP_MD_CTX_free(s->md);
}

struct body {
	char *p;
	size_t len, cap;
};

static void put(struct body *b, const void *p, size_t n)
{
	if (b->len + n > b->cap) {
		b->cap = (b->len + n) * 2;
		b->p = realloc(b->p, b->cap);
		assert_non_null(b->p);
	}
	memcpy(b->p + b->len, p, n);
	b->len += n;
}

static void puts_(struct body *b, const char *s)
{
	put(b, s, strlen(s));
}

/* Feeds the body in pieces of at most step bytes (0: random sizes). */
static enum ack_status feed_all(struct ack_decoder *d, const struct body *b, size_t step,
                                unsigned seed)
{
	size_t off = 0;
	enum ack_status st = ACK_MORE;
	while (off < b->len && st == ACK_MORE) {
		size_t n = step ? step : (size_t)(rand_r(&seed) % 9000) + 1;
		if (n > b->len - off)
			n = b->len - off;
		st = ack_feed(d, b->p + off, n);
		off += n;
	}
	if (st == ACK_MORE)
		st = ack_finish(d);
	return st;
}

/* Independent implementation of the streaming string to sign. */
static void chunk_sig(const unsigned char key[32], const char *prev, const char *kind,
                      bool empty_line, const void *data, size_t n, char out[65])
{
	unsigned char md[32], mac[32];
	unsigned int l;
	char hex[65];
	EVP_Digest(data, n, md, &l, EVP_sha256(), NULL);
	hex_encode(md, 32, hex);
	char sts[600];
	snprintf(sts, sizeof sts, "%s\n" DATE "\n" SCOPE "\n%s\n%s%s", kind, prev,
	         empty_line ? SV4_EMPTY_SHA256 "\n" : "", hex);
	HMAC(EVP_sha256(), key, 32, (unsigned char *)sts, strlen(sts), mac, &l);
	hex_encode(mac, 32, out);
}

/* ---- the S3 documentation example -------------------------------------- */

static json_t *example;
static unsigned char ex_key[32];

static void build_example(struct body *b, int corrupt_chunk, bool corrupt_data)
{
	json_t *chunks = json_object_get(example, "chunks");
	for (size_t i = 0; i < json_array_size(chunks); i++) {
		json_t *c = json_array_get(chunks, i);
		size_t size = (size_t)json_integer_value(json_object_get(c, "size"));
		char sig[65];
		snprintf(sig, sizeof sig, "%s", json_string_value(json_object_get(c, "signature")));
		if ((int)i == corrupt_chunk)
			sig[63] = sig[63] == '0' ? '1' : '0';
		char hdr[128];
		snprintf(hdr, sizeof hdr, "%zx;chunk-signature=%s\r\n", size, sig);
		puts_(b, hdr);
		const char *fill = json_string_value(json_object_get(c, "fill"));
		for (size_t k = 0; k < size; k++)
			put(b, (corrupt_data && i == 1 && k == 7) ? "b" : fill, 1);
		if (size)
			puts_(b, "\r\n");
	}
	puts_(b, "\r\n");
}

static struct ack_decoder *example_decoder(struct sink *s, int64_t decoded)
{
	return ack_create(ACK_SIGNED, ex_key,
	                  json_string_value(json_object_get(example, "seed_signature")), DATE, SCOPE,
	                  decoded, NULL, sink_cb, s);
}

static void test_doc_example(void **state)
{
	(void)state;
	struct body b = { 0 };
	build_example(&b, -1, false);
	/* The example's Content-Length is the encoded length. */
	assert_int_equal(b.len, 66824);
	size_t steps[] = { 0, 1, 2, 3, 7, 64, 4096, 65536 + 200, b.len };
	unsigned char first[32];
	for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
		struct sink s;
		sink_init(&s);
		struct ack_decoder *d = example_decoder(&s, 66560);
		assert_non_null(d);
		assert_int_equal(feed_all(d, &b, steps[i], 42), ACK_DONE);
		assert_int_equal(ack_decoded_bytes(d), 66560);
		assert_null(ack_trailer_checksum(d));
		assert_int_equal(ack_finish(d), ACK_DONE);
		assert_int_equal(ack_feed(d, "", 0), ACK_DONE);
		assert_int_equal(ack_feed(d, "x", 1), ACK_ERR_FRAMING); /* data after the end */
		ack_destroy(d);
		sink_fini(&s);
		assert_int_equal(s.n, 66560);
		if (i == 0)
			memcpy(first, s.hash, 32);
		else
			assert_memory_equal(first, s.hash, 32);
	}
	/* Every chunk's signature matters, the final empty one included. */
	for (int c = 0; c < 3; c++) {
		struct body bad = { 0 };
		build_example(&bad, c, false);
		struct sink s;
		sink_init(&s);
		struct ack_decoder *d = example_decoder(&s, 66560);
		assert_int_equal(feed_all(d, &bad, 0, 7), ACK_ERR_SIGNATURE);
		assert_int_equal(ack_feed(d, "0", 1), ACK_ERR_SIGNATURE);
		assert_int_equal(ack_finish(d), ACK_ERR_SIGNATURE);
		ack_destroy(d);
		sink_fini(&s);
		free(bad.p);
	}
	struct body bad = { 0 };
	build_example(&bad, -1, true);
	struct sink s;
	sink_init(&s);
	struct ack_decoder *d = example_decoder(&s, 66560);
	assert_int_equal(feed_all(d, &bad, 1000, 0), ACK_ERR_SIGNATURE);
	ack_destroy(d);
	sink_fini(&s);
	free(bad.p);
	/* A wrong seed signature fails the first chunk. */
	sink_init(&s);
	d = ack_create(ACK_SIGNED, ex_key, SV4_EMPTY_SHA256, DATE, SCOPE, -1, NULL, sink_cb, &s);
	assert_int_equal(feed_all(d, &b, 0, 1), ACK_ERR_SIGNATURE);
	ack_destroy(d);
	sink_fini(&s);
	free(b.p);
}

static void test_framing(void **state)
{
	(void)state;
	struct body b = { 0 };
	build_example(&b, -1, false);
	/* Truncated anywhere: never ACK_DONE. */
	size_t cuts[] = { 0, 1, 10, 85, 86, 87, 66000, b.len - 3, b.len - 2, b.len - 1 };
	for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
		struct sink s;
		sink_init(&s);
		struct ack_decoder *d = example_decoder(&s, -1);
		struct body t = { b.p, cuts[i], cuts[i] };
		assert_int_equal(feed_all(d, &t, 0, 3), ACK_ERR_FRAMING);
		ack_destroy(d);
		sink_fini(&s);
	}
	/* Decoded length differs from x-amz-decoded-content-length. */
	int64_t lens[] = { 0, 66559, 66561, 1 << 20 };
	for (size_t i = 0; i < 4; i++) {
		struct sink s;
		sink_init(&s);
		struct ack_decoder *d = example_decoder(&s, lens[i]);
		assert_int_equal(feed_all(d, &b, 0, 5), ACK_ERR_LENGTH);
		ack_destroy(d);
		sink_fini(&s);
	}
	/* The sink can stop the body. */
	struct sink s;
	sink_init(&s);
	s.fail_after = 100;
	struct ack_decoder *d = example_decoder(&s, -1);
	assert_int_equal(feed_all(d, &b, 0, 5), ACK_ERR_SINK);
	ack_destroy(d);
	sink_fini(&s);
	/* Trailing garbage in the same feed. */
	struct body extra = { 0 };
	put(&extra, b.p, b.len);
	puts_(&extra, "X");
	sink_init(&s);
	d = example_decoder(&s, -1);
	assert_int_equal(ack_feed(d, extra.p, extra.len), ACK_ERR_FRAMING);
	ack_destroy(d);
	sink_fini(&s);
	free(extra.p);
	free(b.p);

	/* Bad chunk headers in unsigned mode. */
	const char *bad[] = {
		"zz\r\n",                       /* not hex */
		"\r\n",                         /* empty size */
		"10000000001\r\n",              /* > 2^40 */
		"ffffffffffffffffff\r\n",       /* overflow */
		"-1\r\n",
		"5 \r\n",
		"5;chunk-signature=00\r\n",     /* extension in unsigned mode */
		"5\n12345\r\n",                 /* bare LF */
		"5\r\n12345\n",                 /* data not followed by CRLF */
		"5\r\n123456\r\n",
		"0\r\nno-colon\r\n\r\n",
		"0\r\n\r\n\r\n",                /* data after the end */
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		d = ack_create(ACK_UNSIGNED_TRAILER, NULL, NULL, NULL, NULL, -1, NULL, NULL, NULL);
		struct body t = { (char *)bad[i], strlen(bad[i]), 0 };
		enum ack_status st = feed_all(d, &t, 0, 9);
		if (st != ACK_ERR_FRAMING)
			fail_msg("case %zu (%s): %d", i, bad[i], st);
		ack_destroy(d);
	}
	/* A chunk header line over the cap, even fed a byte at a time. */
	d = ack_create(ACK_UNSIGNED_TRAILER, NULL, NULL, NULL, NULL, -1, NULL, NULL, NULL);
	enum ack_status st = ACK_MORE;
	for (int i = 0; i < 5000 && st == ACK_MORE; i++)
		st = ack_feed(d, "0", 1);
	assert_int_equal(st, ACK_ERR_FRAMING);
	ack_destroy(d);
	/* Signed chunk headers need a well-formed signature. */
	const char *sbad[] = {
		"5\r\n",
		"5;chunk-signature=abc\r\n",
		"5;chunk-signature=" SV4_EMPTY_SHA256 "0\r\n",
		"5;chunk-sig=" SV4_EMPTY_SHA256 "\r\n",
		"5;chunk-signature=E3B0C44298FC1C149AFBF4C8996FB92427AE41E4649B934CA495991B7852B855\r\n",
	};
	for (size_t i = 0; i < sizeof sbad / sizeof sbad[0]; i++) {
		d = ack_create(ACK_SIGNED, ex_key, SV4_EMPTY_SHA256, DATE, SCOPE, -1, NULL, NULL, NULL);
		struct body t = { (char *)sbad[i], strlen(sbad[i]), 0 };
		assert_int_equal(feed_all(d, &t, 0, 1), ACK_ERR_FRAMING);
		ack_destroy(d);
	}
	/* Bad arguments. */
	assert_null(ack_create(ACK_SIGNED, NULL, NULL, NULL, NULL, -1, NULL, NULL, NULL));
	assert_null(ack_create(ACK_UNSIGNED_TRAILER, NULL, NULL, NULL, NULL, -1,
	                       "x-amz-checksum-md5", NULL, NULL));
	assert_int_equal(ack_mode_from_payload_hash(SV4_STREAMING_SIGNED), ACK_SIGNED);
	assert_int_equal(ack_mode_from_payload_hash(SV4_STREAMING_SIGNED_TRAILER),
	                 ACK_SIGNED_TRAILER);
	assert_int_equal(ack_mode_from_payload_hash(SV4_STREAMING_UNSIGNED_TRAILER),
	                 ACK_UNSIGNED_TRAILER);
	assert_int_equal(ack_mode_from_payload_hash(SV4_UNSIGNED_PAYLOAD), -1);
	assert_int_equal(ack_mode_from_payload_hash(NULL), -1);
}

/* ---- checksums ---------------------------------------------------------- */

/* RFC 4648 base64, written out so the test does not trust the code it tests. */
static void b64(const unsigned char *in, size_t n, char *out)
{
	static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	size_t o = 0;
	for (size_t i = 0; i < n; i += 3) {
		unsigned v = (unsigned)in[i] << 16 | (i + 1 < n ? in[i + 1] : 0) << 8 |
		             (i + 2 < n ? in[i + 2] : 0);
		out[o++] = a[v >> 18 & 63];
		out[o++] = a[v >> 12 & 63];
		out[o++] = i + 1 < n ? a[v >> 6 & 63] : '=';
		out[o++] = i + 2 < n ? a[v & 63] : '=';
	}
	out[o] = '\0';
}

static void be_bytes(uint64_t v, size_t n, unsigned char *out)
{
	for (size_t i = 0; i < n; i++)
		out[i] = (unsigned char)(v >> (8 * (n - 1 - i)));
}

static void hex_bytes(const char *hex, unsigned char *out)
{
	for (size_t i = 0; hex[2 * i]; i++)
		sscanf(hex + 2 * i, "%2hhx", &out[i]);
}

/* Check values over "123456789" (CRC catalogue; FIPS 180 digests). */
static const struct {
	const char *name;
	uint64_t crc;
	size_t len;
	const char *hex;
} check[] = {
	{ "crc32", 0xCBF43926, 4, NULL },
	{ "crc32c", 0xE3069283, 4, NULL },
	{ "crc64nvme", 0xAE8B14860A799888ull, 8, NULL },
	{ "sha1", 0, 20, "f7c3bc1d808e04732adf679965ccc34ca7ae3441" },
	{ "sha256", 0, 32, "15e2b0d3c33891ebb0f1ef609ec419420c20e320ce94c65fbc8c3312448eb225" },
};

static void expected_b64(size_t i, char out[64])
{
	unsigned char raw[32];
	if (check[i].hex)
		hex_bytes(check[i].hex, raw);
	else
		be_bytes(check[i].crc, check[i].len, raw);
	b64(raw, check[i].len, out);
}

static void test_checksums(void **state)
{
	(void)state;
	const char *msg = "123456789";
	assert_int_equal(crc32c(0, msg, 9), 0xE3069283u);
	assert_true(crc64nvme(0, msg, 9) == 0xAE8B14860A799888ull);
	/* Incremental equals one-shot, across the 8-byte fast path. */
	char big[1000];
	for (int i = 0; i < 1000; i++)
		big[i] = (char)(i * 7 + 3);
	uint32_t c = 0;
	uint64_t c64 = 0;
	for (int i = 0; i < 1000; i += 13) {
		int n = i + 13 > 1000 ? 1000 - i : 13;
		c = crc32c(c, big + i, (size_t)n);
		c64 = crc64nvme(c64, big + i, (size_t)n);
	}
	assert_int_equal(c, crc32c(0, big, 1000));
	assert_true(c64 == crc64nvme(0, big, 1000));
	for (size_t i = 0; i < sizeof check / sizeof check[0]; i++) {
		enum cks_alg alg = cks_alg_from_name(check[i].name, strlen(check[i].name));
		assert_int_not_equal(alg, CKS_NONE);
		assert_int_equal(cks_digest_len(alg), check[i].len);
		const char *hn = cks_header_name(alg);
		assert_int_equal(cks_alg_from_name(hn, strlen(hn)), alg);
		struct cks k;
		assert_int_equal(cks_init(&k, alg), 0);
		cks_update(&k, msg, 4);
		cks_update(&k, msg + 4, 5);
		char got[CKS_MAX_B64], want[64];
		cks_final_base64(&k, got);
		cks_fini(&k);
		expected_b64(i, want);
		assert_string_equal(got, want);
	}
	assert_int_equal(cks_alg_from_name("md5", 3), CKS_NONE);
	struct cks k;
	assert_int_not_equal(cks_init(&k, CKS_NONE), 0);
	/* CRC32 of nothing is zero: "AAAAAA==". */
	assert_int_equal(cks_init(&k, CKS_CRC32), 0);
	char z[CKS_MAX_B64];
	cks_final_base64(&k, z);
	assert_string_equal(z, "AAAAAA==");
}

/* "4\r\n1234\r\n5\r\n56789\r\n0\r\n<name>:<value>\r\n\r\n" */
static void unsigned_body(struct body *b, const char *trailer)
{
	puts_(b, "4\r\n1234\r\n5\r\n56789\r\n0\r\n");
	puts_(b, trailer);
	puts_(b, "\r\n");
}

static void test_unsigned_trailer(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof check / sizeof check[0]; i++) {
		char hname[64], want[64], line[256];
		snprintf(hname, sizeof hname, "x-amz-checksum-%s", check[i].name);
		expected_b64(i, want);
		for (int wrong = 0; wrong < 2; wrong++) {
			snprintf(line, sizeof line, "%s:%s%s\r\n", hname, wrong ? "A" : "",
			         wrong ? want + 1 : want);
			struct body b = { 0 };
			unsigned_body(&b, line);
			for (size_t step = 1; step <= b.len; step += step < 4 ? 1 : 11) {
				struct sink s;
				sink_init(&s);
				struct ack_decoder *d = ack_create(ACK_UNSIGNED_TRAILER, NULL, NULL, NULL, NULL,
				                                   9, hname, sink_cb, &s);
				assert_non_null(d);
				enum ack_status st = feed_all(d, &b, step, 0);
				if (wrong) {
					assert_int_equal(st, ACK_ERR_CHECKSUM);
				} else {
					assert_int_equal(st, ACK_DONE);
					char expect[192];
					snprintf(expect, sizeof expect, "%s: %s", hname, want);
					assert_string_equal(ack_trailer_checksum(d), expect);
				}
				ack_destroy(d);
				sink_fini(&s);
			}
			free(b.p);
		}
	}
	/* A trailer the client did not declare, or a declared one missing. */
	struct body b = { 0 };
	unsigned_body(&b, "x-amz-checksum-crc32:AAAAAA==\r\n");
	struct ack_decoder *d = ack_create(ACK_UNSIGNED_TRAILER, NULL, NULL, NULL, NULL, -1, NULL,
	                                   NULL, NULL);
	assert_int_equal(feed_all(&*d, &b, 0, 1), ACK_ERR_FRAMING);
	ack_destroy(d);
	free(b.p);
	memset(&b, 0, sizeof b);
	unsigned_body(&b, "");
	d = ack_create(ACK_UNSIGNED_TRAILER, NULL, NULL, NULL, NULL, -1, "x-amz-checksum-crc32c",
	               NULL, NULL);
	assert_int_equal(feed_all(d, &b, 0, 1), ACK_ERR_FRAMING);
	ack_destroy(d);
	free(b.p);
	/* Header names are case-insensitive; values may have spaces around. */
	char want[64], line[128];
	expected_b64(1, want);
	snprintf(line, sizeof line, "X-Amz-Checksum-CRC32C:  %s \r\n", want);
	memset(&b, 0, sizeof b);
	unsigned_body(&b, line);
	d = ack_create(ACK_UNSIGNED_TRAILER, NULL, NULL, NULL, NULL, -1, " x-amz-checksum-crc32c ",
	               NULL, NULL);
	assert_int_equal(feed_all(d, &b, 0, 1), ACK_DONE);
	ack_destroy(d);
	free(b.p);
}

/* ---- signed chunks with a signed trailer -------------------------------- */

static void signed_trailer_body(struct body *b, const unsigned char key[32], const char *seed,
                                const char *trailer_value, bool with_sig, bool bad_sig)
{
	char prev[65], sig[65], hdr[128];
	snprintf(prev, sizeof prev, "%s", seed);
	const char *parts[] = { "1234", "56789", "" };
	for (int i = 0; i < 3; i++) {
		size_t n = strlen(parts[i]);
		chunk_sig(key, prev, "AWS4-HMAC-SHA256-PAYLOAD", true, parts[i], n, sig);
		snprintf(hdr, sizeof hdr, "%zx;chunk-signature=%s\r\n", n, sig);
		puts_(b, hdr);
		if (n) {
			puts_(b, parts[i]);
			puts_(b, "\r\n");
		}
		memcpy(prev, sig, 65);
	}
	char canon[128], line[160];
	snprintf(canon, sizeof canon, "x-amz-checksum-crc32c:%s\n", trailer_value);
	snprintf(line, sizeof line, "x-amz-checksum-crc32c:%s\r\n", trailer_value);
	puts_(b, line);
	chunk_sig(key, prev, "AWS4-HMAC-SHA256-TRAILER", false, canon, strlen(canon), sig);
	if (bad_sig)
		sig[0] = sig[0] == 'a' ? 'b' : 'a';
	if (with_sig) {
		snprintf(line, sizeof line, "x-amz-trailer-signature:%s\r\n", sig);
		puts_(b, line);
	}
	puts_(b, "\r\n");
}

static void test_signed_trailer(void **state)
{
	(void)state;
	unsigned char key[32];
	sv4_signing_key("AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
	                "20130524", "us-east-1", "s3", key);
	const char *seed = "106e2a8a18243abcf37539882f36619c00e2dfc72633413f02d3b74544bfeb8e";
	char want[64];
	expected_b64(1, want);
	struct {
		bool with_sig, bad_sig;
		const char *value;
		enum ack_status st;
	} cases[] = {
		{ true, false, want, ACK_DONE },
		{ true, true, want, ACK_ERR_SIGNATURE },
		{ false, false, want, ACK_ERR_SIGNATURE },
		{ true, false, "AAAAAA==", ACK_ERR_CHECKSUM },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct body b = { 0 };
		signed_trailer_body(&b, key, seed, cases[i].value, cases[i].with_sig, cases[i].bad_sig);
		size_t steps[] = { 1, 5, 0, b.len };
		for (size_t k = 0; k < 4; k++) {
			struct sink s;
			sink_init(&s);
			struct ack_decoder *d = ack_create(ACK_SIGNED_TRAILER, key, seed, DATE, SCOPE, 9,
			                                   "x-amz-checksum-crc32c", sink_cb, &s);
			assert_non_null(d);
			assert_int_equal(feed_all(d, &b, steps[k], (unsigned)k), cases[i].st);
			ack_destroy(d);
			sink_fini(&s);
		}
		free(b.p);
	}
}

int main(int argc, char **argv)
{
	datadir = argc > 1 ? argv[1] : getenv("SV4_TESTDATA");
	if (!datadir) {
		fprintf(stderr, "usage: %s <testdata/sigv4>\n", argv[0]);
		return 2;
	}
	char path[4096];
	snprintf(path, sizeof path, "%s/s3-streaming/aws-chunked-example.json", datadir);
	json_error_t err;
	example = json_load_file(path, 0, &err);
	if (!example) {
		fprintf(stderr, "%s: %s\n", path, err.text);
		return 1;
	}
	sv4_signing_key(json_string_value(json_object_get(example, "access_key_id")),
	                json_string_value(json_object_get(example, "secret_access_key")), "20130524",
	                "us-east-1", "s3", ex_key);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_doc_example),
		cmocka_unit_test(test_framing),
		cmocka_unit_test(test_checksums),
		cmocka_unit_test(test_unsigned_trailer),
		cmocka_unit_test(test_signed_trailer),
	};
	int rc = cmocka_run_group_tests(tests, NULL, NULL);
	json_decref(example);
	return rc;
}

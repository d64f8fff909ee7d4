/*
 * test_sigv2.c - SigV2 (HmacV1) parsing, string to sign and verification.
 *
 * The vectors were produced with botocore 1.43 (boto3 client, signature
 * version 's3', path-style, endpoint http://larder.test:8080) with the clock
 * fixed at T0 = 1700000000 (Tue, 14 Nov 2023 22:13:20 GMT): presigned URLs
 * from generate_presigned_url(ExpiresIn=3600), header-signed requests
 * captured at before-send. Botocore never sends x-amz-date without Date,
 * so that vector's string to sign follows the S3 page (empty date line)
 * and was signed with HmacV1Auth.sign_string. The last vector is the S3
 * SigV2 page's own GET example.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "auth/sigv2.h"

#define AK "AKIAIOSFODNN7EXAMPLE"
#define SK "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
#define T0 1700000000
#define T0_DATE "Tue, 14 Nov 2023 22:13:20 GMT"
#define EXP 1700003600
#define SKEW 900

#define N(a) (sizeof(a) / sizeof((a)[0]))

static enum sv4_status verify_at(const char *method, const char *path, const char *query,
                                 const struct sv4_header *h, size_t nh, const char *resource,
                                 const char *secret, time_t now)
{
	struct sv4_request req = { method, path, query, h, nh };
	struct sv2_auth a;
	enum sv4_status st = sv2_parse(&req, &a);
	if (st != SV4_OK)
		return st;
	return sv2_verify(&req, &a, resource, secret, now, SKEW);
}

static enum sv4_status parse(const char *query, const char *authz, struct sv2_auth *a)
{
	struct sv4_header h[] = { { "Authorization", authz } };
	struct sv4_request req = { "GET", "/b/k", query, h, authz ? 1 : 0 };
	return sv2_parse(&req, a);
}

static void expect_sts(const char *method, const char *query, const struct sv4_header *h,
                       size_t nh, const char *resource, const char *want)
{
	struct sv4_request req = { method, resource, query, h, nh };
	struct sv2_auth a;
	assert_int_equal(sv2_parse(&req, &a), SV4_OK);
	struct buf b;
	buf_init(&b, 1 << 16);
	assert_int_equal(sv2_string_to_sign(&req, &a, resource, &b), 0);
	assert_string_equal(buf_cstr(&b), want);
	buf_fini(&b);
}

/* ---- presigned URLs (HmacV1QueryAuth) --------------------------------- */

static const struct {
	const char *path, *query, *sts;
} presigned[] = {
	{ "/bucket/key.txt",
	  "AWSAccessKeyId=" AK "&Signature=2zMT3J0wBYXd4jjh4PvTXcbbV0Q%3D&Expires=1700003600",
	  "GET\n\n\n1700003600\n/bucket/key.txt" },
	/* Key "dir/a b+c%d~e\u00e9!.txt". */
	{ "/bucket/dir/a%20b%2Bc%25d~e%C3%A9%21.txt",
	  "AWSAccessKeyId=" AK "&Signature=KmPbPV254yj4AcF98PXl2gZ1K3w%3D&Expires=1700003600",
	  "GET\n\n\n1700003600\n/bucket/dir/a%20b%2Bc%25d~e%C3%A9%21.txt" },
	{ "/bucket/k",
	  "response-content-disposition=attachment%3B%20filename%3D%22a%20b%2Bc.txt%22"
	  "&response-content-type=text%2Fplain&AWSAccessKeyId=" AK
	  "&Signature=mwi9R4ymTZPoKyN6qLf%2F8V4cqVw%3D&Expires=1700003600",
	  "GET\n\n\n1700003600\n/bucket/k?response-content-disposition=attachment; "
	  "filename=\"a b+c.txt\"&response-content-type=text/plain" },
	{ "/bucket/k",
	  "versionId=3%2FL4kq%2BtJl.c_p~X&AWSAccessKeyId=" AK
	  "&Signature=1DoRMhuzkR%2FXkS2QjcTz6vb4el0%3D&Expires=1700003600",
	  "GET\n\n\n1700003600\n/bucket/k?versionId=3/L4kq+tJl.c_p~X" },
	/* put_object with ContentType and Metadata: botocore moves them into
	 * the query. */
	{ "/bucket/up.bin",
	  "AWSAccessKeyId=" AK "&Signature=0dBI2wVHDaKy9lMNtJ8yPRu%2Bsmc%3D"
	  "&content-type=application%2Foctet-stream&x-amz-meta-owner=Ann%20%20Lee&Expires=1700003600",
	  "PUT\n\napplication/octet-stream\n1700003600\nx-amz-meta-owner:Ann  Lee\n/bucket/up.bin" },
	/* Session credentials: the token rides in the query. */
	{ "/bucket/key.txt",
	  "AWSAccessKeyId=" AK "&Signature=BXObXIBKIWpAdk21uH9E1I%2FqEZg%3D"
	  "&x-amz-security-token=FQoGZXIvYXdzE%2Btok%2Fen%3D%3D&Expires=1700003600",
	  "GET\n\n\n1700003600\nx-amz-security-token:FQoGZXIvYXdzE+tok/en==\n/bucket/key.txt" },
};

static void test_presigned_vectors(void **state)
{
	(void)state;
	for (size_t i = 0; i < N(presigned); i++) {
		const char *m = strncmp(presigned[i].sts, "PUT", 3) == 0 ? "PUT" : "GET";
		const char *p = presigned[i].path, *q = presigned[i].query;
		struct sv2_auth a;
		struct sv4_request req = { m, p, q, NULL, 0 };
		assert_int_equal(sv2_parse(&req, &a), SV4_OK);
		assert_true(a.presigned);
		assert_string_equal(a.access_key, AK);
		assert_int_equal(a.expires, EXP);
		assert_int_equal(strlen(a.signature), 28);
		expect_sts(m, q, NULL, 0, p, presigned[i].sts);
		assert_int_equal(verify_at(m, p, q, NULL, 0, p, SK, T0), SV4_OK);
		assert_int_equal(verify_at(m, p, q, NULL, 0, p, SK, EXP), SV4_OK);
		assert_int_equal(verify_at(m, p, q, NULL, 0, p, SK, EXP + 1), SV4_EXPIRED);
		assert_int_equal(verify_at(m, p, q, NULL, 0, p, SK "x", T0), SV4_BAD_SIGNATURE);
		assert_int_equal(verify_at(m[0] == 'G' ? "HEAD" : "POST", p, q, NULL, 0, p, SK, T0),
		                 SV4_BAD_SIGNATURE);
	}
	/* The signature after its %-decoding. */
	struct sv2_auth a;
	assert_int_equal(parse(presigned[4].query, NULL, &a), SV4_OK);
	assert_string_equal(a.signature, "0dBI2wVHDaKy9lMNtJ8yPRu+smc=");
}

/* SigV2 has no signing time: a URL may be used at most 7 days before its
 * Expires, as SigV4 caps X-Amz-Expires (one valid until 2100 worked). */
static void test_presigned_at_most_seven_days(void **state)
{
	(void)state;
	const char *p = presigned[0].path, *q = presigned[0].query;
	assert_int_equal(verify_at("GET", p, q, NULL, 0, p, SK, EXP - SV4_MAX_PRESIGN_EXPIRES),
	                 SV4_OK);
	assert_int_equal(verify_at("GET", p, q, NULL, 0, p, SK, EXP - SV4_MAX_PRESIGN_EXPIRES - 1),
	                 SV4_BAD_EXPIRES);
}

static void test_presigned_tampering(void **state)
{
	(void)state;
	const char *p = presigned[0].path;
	char q[512];
	/* A sub-resource changes the resource; other parameters do not. */
	snprintf(q, sizeof q, "%s&versionId=1", presigned[0].query);
	assert_int_equal(verify_at("GET", p, q, NULL, 0, p, SK, T0), SV4_BAD_SIGNATURE);
	snprintf(q, sizeof q, "acl&%s", presigned[0].query);
	assert_int_equal(verify_at("GET", p, q, NULL, 0, p, SK, T0), SV4_BAD_SIGNATURE);
	snprintf(q, sizeof q, "%s&foo=bar", presigned[0].query);
	assert_int_equal(verify_at("GET", p, q, NULL, 0, p, SK, T0), SV4_OK);
	/* Another key, a changed override, a later Expires. */
	assert_int_equal(verify_at("GET", "/bucket/key.txu", presigned[0].query, NULL, 0,
	                           "/bucket/key.txu", SK, T0), SV4_BAD_SIGNATURE);
	snprintf(q, sizeof q, "%s", presigned[2].query);
	strstr(q, "text%2Fplain")[8] = 'P';
	assert_int_equal(verify_at("GET", "/bucket/k", q, NULL, 0, "/bucket/k", SK, T0),
	                 SV4_BAD_SIGNATURE);
	snprintf(q, sizeof q, "%s", presigned[0].query);
	strstr(q, "1700003600")[9] = '1';
	assert_int_equal(verify_at("GET", p, q, NULL, 0, p, SK, T0), SV4_BAD_SIGNATURE);

	/* Query-carried headers: a header sent as well must agree with what
	 * was signed; a new x-amz-* header is not signed at all. */
	const char *pp = presigned[4].path, *pq = presigned[4].query;
	struct sv4_header same[] = { { "Content-Type", "application/octet-stream" },
	                             { "X-Amz-Meta-Owner", " Ann  Lee " },
	                             { "Content-Length", "5" } };
	assert_int_equal(verify_at("PUT", pp, pq, same, N(same), pp, SK, T0), SV4_OK);
	struct sv4_header ct[] = { { "Content-Type", "text/html" } };
	assert_int_equal(verify_at("PUT", pp, pq, ct, 1, pp, SK, T0), SV4_BAD_SIGNATURE);
	struct sv4_header meta[] = { { "x-amz-meta-owner", "Eve" } };
	assert_int_equal(verify_at("PUT", pp, pq, meta, 1, pp, SK, T0), SV4_BAD_SIGNATURE);
	struct sv4_header acl[] = { { "x-amz-acl", "public-read" } };
	assert_int_equal(verify_at("PUT", pp, pq, acl, 1, pp, SK, T0), SV4_BAD_SIGNATURE);
	struct sv4_header md5[] = { { "Content-MD5", "XUFAKrxLKna5cZ2REBfFkg==" } };
	assert_int_equal(verify_at("PUT", pp, pq, md5, 1, pp, SK, T0), SV4_BAD_SIGNATURE);
}

/* ---- header-signed requests (HmacV1Auth) ------------------------------ */

static const struct sv4_header put_h[] = {
	{ "Content-MD5", "XUFAKrxLKna5cZ2REBfFkg==" },
	{ "Content-Type", "image/jpeg" },
	{ "x-amz-meta-reviewedby", "joe@example.com" },
	{ "x-amz-meta-note", "  two  spaces  " },
	{ "User-Agent", "Boto3/1.43.11 md/Botocore#1.43.11" },
	{ "Expect", "100-continue" },
	{ "x-amz-checksum-crc32", "NhCmhg==" },
	{ "x-amz-sdk-checksum-algorithm", "CRC32" },
	{ "Date", T0_DATE },
	{ "Authorization", "AWS " AK ":612wvMIeOrKs//cD2WQpIVLpFaI=" },
	{ "amz-sdk-invocation-id", "f3f6eb46-7c08-45ab-a936-50b8d69c42a8" },
	{ "amz-sdk-request", "attempt=1" },
	{ "Content-Length", "5" },
};
#define PUT_PATH "/bucket/photos/p%20uppy.jpg"

static void test_header_put(void **state)
{
	(void)state;
	expect_sts("PUT", "", put_h, N(put_h), PUT_PATH,
	           "PUT\nXUFAKrxLKna5cZ2REBfFkg==\nimage/jpeg\n" T0_DATE "\n"
	           "x-amz-checksum-crc32:NhCmhg==\nx-amz-meta-note:two  spaces\n"
	           "x-amz-meta-reviewedby:joe@example.com\nx-amz-sdk-checksum-algorithm:CRC32\n"
	           PUT_PATH);
	struct sv2_auth a;
	struct sv4_request req = { "PUT", PUT_PATH, "", put_h, N(put_h) };
	assert_int_equal(sv2_parse(&req, &a), SV4_OK);
	assert_false(a.presigned);
	assert_string_equal(a.access_key, AK);
	assert_string_equal(a.signature, "612wvMIeOrKs//cD2WQpIVLpFaI=");
	assert_int_equal(a.expires, 0);
	assert_int_equal(verify_at("PUT", PUT_PATH, "", put_h, N(put_h), PUT_PATH, SK, T0), SV4_OK);
	assert_int_equal(verify_at("PUT", PUT_PATH, "", put_h, N(put_h), PUT_PATH, "wrong", T0),
	                 SV4_BAD_SIGNATURE);

	/* Header names in any case; the non-amz headers are not signed. */
	struct sv4_header h[N(put_h) + 1];
	memcpy(h, put_h, sizeof put_h);
	h[0].name = "content-md5";
	h[2].name = "X-AMZ-META-REVIEWEDBY";
	h[4].value = "curl/8";
	assert_int_equal(verify_at("PUT", PUT_PATH, "", h, N(put_h), PUT_PATH, SK, T0), SV4_OK);

	/* Tampering with any signed part. */
	const struct { size_t i; const char *v; } bad[] = {
		{ 0, "AAAAKrxLKna5cZ2REBfFkg==" }, { 1, "text/html" },
		{ 2, "eve@example.com" }, { 3, "two spaces" }, { 8, "Tue, 14 Nov 2023 22:13:21 GMT" },
	};
	for (size_t k = 0; k < N(bad); k++) {
		memcpy(h, put_h, sizeof put_h);
		h[bad[k].i].value = bad[k].v;
		assert_int_equal(verify_at("PUT", PUT_PATH, "", h, N(put_h), PUT_PATH, SK, T0),
		                 SV4_BAD_SIGNATURE);
	}
	memcpy(h, put_h, sizeof put_h);
	h[N(put_h)] = (struct sv4_header){ "x-amz-acl", "public-read" };
	assert_int_equal(verify_at("PUT", PUT_PATH, "", h, N(put_h) + 1, PUT_PATH, SK, T0),
	                 SV4_BAD_SIGNATURE);
	assert_int_equal(verify_at("POST", PUT_PATH, "", put_h, N(put_h), PUT_PATH, SK, T0),
	                 SV4_BAD_SIGNATURE);
	assert_int_equal(verify_at("PUT", "/bucket/photos/p+uppy.jpg", "", put_h, N(put_h),
	                           "/bucket/photos/p+uppy.jpg", SK, T0), SV4_BAD_SIGNATURE);
	assert_int_equal(verify_at("PUT", PUT_PATH, "uploadId=1", put_h, N(put_h), PUT_PATH, SK, T0),
	                 SV4_BAD_SIGNATURE);
}

static void test_header_subresources(void **state)
{
	(void)state;
	/* Path-style bucket requests go out as "/bucket" but botocore signs
	 * "/bucket/"; either resource spelling verifies. */
	struct sv4_header acl[] = { { "Date", T0_DATE },
	                            { "Authorization", "AWS " AK ":vWTTUwdU5QBnFxqhvVvTe/hWv+k=" } };
	assert_int_equal(verify_at("GET", "/bucket", "acl", acl, 2, "/bucket", SK, T0), SV4_OK);
	assert_int_equal(verify_at("GET", "/bucket", "acl", acl, 2, "/bucket/", SK, T0), SV4_OK);
	assert_int_equal(verify_at("GET", "/bucket", "", acl, 2, "/bucket", SK, T0), SV4_BAD_SIGNATURE);
	assert_int_equal(verify_at("GET", "/bucket", "acl", acl, 2, "/bucket/x", SK, T0),
	                 SV4_BAD_SIGNATURE);
	expect_sts("GET", "acl", acl, 2, "/bucket/", "GET\n\n\n" T0_DATE "\n/bucket/?acl");

	struct sv4_header up[] = { { "Date", T0_DATE },
	                           { "Authorization", "AWS " AK ":Ui2LHvJhjtlHbHHIeVBufFchyDI=" },
	                           { "Content-Length", "0" } };
	assert_int_equal(verify_at("POST", "/bucket/big.bin", "uploads", up, 3, "/bucket/big.bin", SK,
	                           T0), SV4_OK);
	assert_int_equal(verify_at("POST", "/bucket/big.bin", "uploads=", up, 3, "/bucket/big.bin", SK,
	                           T0), SV4_BAD_SIGNATURE);

	/* ListObjects: prefix and encoding-type are not sub-resources. */
	struct sv4_header ls[] = { { "Date", T0_DATE },
	                           { "Authorization", "AWS " AK ":61Ho40goTixAgvtrG2bMDguk+gw=" } };
	assert_int_equal(verify_at("GET", "/bucket", "prefix=a%20b&encoding-type=url", ls, 2,
	                           "/bucket", SK, T0), SV4_OK);
	assert_int_equal(verify_at("GET", "/bucket", "prefix=zzz", ls, 2, "/bucket", SK, T0), SV4_OK);
}

static void test_amz_date_without_date(void **state)
{
	(void)state;
	/* x-amz-date wins: the date line is empty and a stray Date is neither
	 * signed nor used for the clock check. */
	struct sv4_header h[] = { { "x-amz-date", T0_DATE },
	                          { "Date", "Mon, 01 Jan 2001 00:00:00 GMT" },
	                          { "Authorization", "AWS " AK ":czCrf3jpQWVdQKHjiKbM/Y+W4EY=" } };
	const char *p = "/bucket/photos/puppy.jpg";
	expect_sts("DELETE", "", h, 3, p, "DELETE\n\n\n\nx-amz-date:" T0_DATE "\n/bucket/photos/puppy.jpg");
	assert_int_equal(verify_at("DELETE", p, "", h, 3, p, SK, T0), SV4_OK);
	assert_int_equal(verify_at("DELETE", p, "", &h[0], 1, p, SK, T0), SV4_NO_AUTH);
	struct sv4_header nodate[] = { h[0], h[2] };
	assert_int_equal(verify_at("DELETE", p, "", nodate, 2, p, SK, T0), SV4_OK);
	assert_int_equal(verify_at("DELETE", p, "", nodate, 2, p, SK, T0 + SKEW + 1), SV4_SKEWED);
}

static void test_s3_doc_example(void **state)
{
	(void)state;
	/* Virtual-hosted GET /photos/puppy.jpg on awsexamplebucket1. */
	struct sv4_header h[] = { { "Host", "awsexamplebucket1.us-west-1.s3.amazonaws.com" },
	                          { "Date", "Tue, 27 Mar 2007 19:36:42 +0000" },
	                          { "Authorization", "AWS " AK ":qgk2+6Sv9/oM7G3qLEjTH1a1l1g=" } };
	assert_int_equal(verify_at("GET", "/photos/puppy.jpg", "", h, 3,
	                           "/awsexamplebucket1/photos/puppy.jpg", SK, 1175024202), SV4_OK);
}

/* ---- time ------------------------------------------------------------- */

static void test_skew(void **state)
{
	(void)state;
	const struct sv4_header *h = put_h;
	size_t n = N(put_h);
	assert_int_equal(verify_at("PUT", PUT_PATH, "", h, n, PUT_PATH, SK, T0 + SKEW), SV4_OK);
	assert_int_equal(verify_at("PUT", PUT_PATH, "", h, n, PUT_PATH, SK, T0 - SKEW), SV4_OK);
	assert_int_equal(verify_at("PUT", PUT_PATH, "", h, n, PUT_PATH, SK, T0 + SKEW + 1), SV4_SKEWED);
	assert_int_equal(verify_at("PUT", PUT_PATH, "", h, n, PUT_PATH, SK, T0 - SKEW - 1), SV4_SKEWED);
	/* Skew is checked before the signature. */
	assert_int_equal(verify_at("PUT", PUT_PATH, "", h, n, PUT_PATH, "wrong", 0), SV4_SKEWED);

	struct sv4_header d[] = { { "Authorization", "AWS AK:c2ln" }, { "Date", NULL } };
	const char *dates[] = { "Tue, 14 Nov 2023 22:13:20 UTC", "Tue, 14 Nov 2023 23:13:20 +0100",
	                        "Tue, 14 Nov 2023 21:13:20 -0100", "20231114T221320Z",
	                        " Tue, 14 Nov 2023 22:13:20 GMT " };
	for (size_t i = 0; i < N(dates); i++) {
		d[1].value = dates[i];
		assert_int_equal(verify_at("GET", "/", "", d, 2, "/", SK, T0), SV4_BAD_SIGNATURE);
		assert_int_equal(verify_at("GET", "/", "", d, 2, "/", SK, T0 + 3600), SV4_SKEWED);
	}
	/* A one-digit day (RFC 5322 allows it; Java's RFC_1123 formatter
	 * writes it). */
	d[1].value = "Wed, 1 Nov 2023 00:00:00 GMT";
	assert_int_equal(verify_at("GET", "/", "", d, 2, "/", SK, 1698796800), SV4_BAD_SIGNATURE);

	const char *bad[] = { "yesterday", "", "Tue, 31 Feb 2023 22:13:20 GMT",
	                      "Tue, 14 Now 2023 22:13:20 GMT", "Tue, 14 Nov 2023 22:13:20 EST",
	                      "Tue, 14 Nov 2023 24:13:20 GMT", "Tue, 14 Nov 2023 22:13:20 GMT junk",
	                      "Tue, 123 Nov 2023 22:13:20 GMT", "Tue, 14 Nov 23 22:13:20 GMT",
	                      "Tue, 14 Nov 2023 22:13:2 GMT", "Tue,14 Nov 2023 22:13:20 GMT" };
	for (size_t i = 0; i < N(bad); i++) {
		d[1].value = bad[i];
		assert_int_equal(verify_at("GET", "/", "", d, 2, "/", SK, T0), SV4_MALFORMED);
	}
	assert_int_equal(verify_at("GET", "/", "", d, 1, "/", SK, T0), SV4_MISSING_HEADER);
}

/* ---- parser edge cases ------------------------------------------------ */

static void test_parse(void **state)
{
	(void)state;
	struct sv2_auth a;
	assert_int_equal(parse("", "  AWS  " AK ":abc+/=  ", &a), SV4_OK);
	assert_string_equal(a.access_key, AK);
	assert_string_equal(a.signature, "abc+/=");

	const char *bad_h[] = { "AWS nocolon", "AWS :c2ln", "AWS AK:", "AWS", "AWS AK:c2 ln",
	                        "AWS AK:c2ln%3D", "AWS A K:c2ln",
	                        "AWS AK:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" };
	for (size_t i = 0; i < N(bad_h); i++)
		assert_int_equal(parse("", bad_h[i], &a), SV4_MALFORMED);

	/* '+' in the query is not a space (the signature is base64). */
	assert_int_equal(parse("AWSAccessKeyId=AK&Signature=a+b%2Fc%3D&Expires=5", NULL, &a), SV4_OK);
	assert_true(a.presigned);
	assert_string_equal(a.signature, "a+b/c=");
	assert_int_equal(a.expires, 5);

	const char *bad_q[] = {
		"Signature=c2ln",
		"AWSAccessKeyId=AK&Signature=c2ln",
		"AWSAccessKeyId=AK&Expires=5",
		"AWSAccessKeyId=AK&Signature=c2ln&Expires=12x",
		"AWSAccessKeyId=AK&Signature=c2ln&Expires=-1",
		"AWSAccessKeyId=AK&Signature=c2ln&Expires=",
		"AWSAccessKeyId=AK&Signature=c2ln&Expires=99999999999999999999",
		"AWSAccessKeyId=AK&Signature=c2ln&Signature=c2ln&Expires=5",
		"AWSAccessKeyId=AK&Signature=c2%zz&Expires=5",
		"AWSAccessKeyId=&Signature=c2ln&Expires=5",
		"AWSAccessKeyId=AK&Signature&Expires=5",
		"AWSAccessKeyId=A%00K&Signature=c2ln&Expires=5",
	};
	for (size_t i = 0; i < N(bad_q); i++)
		assert_int_equal(parse(bad_q[i], NULL, &a), SV4_MALFORMED);
	/* Two mechanisms at once. */
	assert_int_equal(parse("AWSAccessKeyId=AK&Signature=c2ln&Expires=5", "AWS AK:c2ln", &a),
	                 SV4_MALFORMED);

	/* Not SigV2. */
	assert_int_equal(parse("", NULL, &a), SV4_NO_AUTH);
	assert_int_equal(parse("Expires=5&foo", NULL, &a), SV4_NO_AUTH);
	assert_int_equal(parse("", "AWS4-HMAC-SHA256 Credential=" AK "/20130524/us-east-1/s3/"
	                           "aws4_request, SignedHeaders=host;x-amz-date, Signature=abc", &a),
	                 SV4_NO_AUTH);
	assert_int_equal(parse("X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AK%2F20130524%2F"
	                       "us-east-1%2Fs3%2Faws4_request&X-Amz-Date=20130524T000000Z"
	                       "&X-Amz-Expires=86400&X-Amz-SignedHeaders=host&X-Amz-Signature=abc",
	                       NULL, &a),
	                 SV4_NO_AUTH);
	assert_int_equal(parse("", "Bearer xyz", &a), SV4_NO_AUTH);
}

/* ---- canonicalisation rules ------------------------------------------- */

static void test_canonical_rules(void **state)
{
	(void)state;
	struct sv4_header h[] = {
		{ "Authorization", "AWS AK:c2ln" }, { "Date", " D " },
		{ "X-Amz-Meta-B", "one" }, { "x-amz-meta-a", " a\r\n  b  c " },
		{ "x-amz-meta-b", "two" }, { "X-AMZ-META-C", "" },
	};
	expect_sts("GET", "", h, N(h), "/b/k",
	           "GET\n\n\nD\nx-amz-meta-a:a b  c\nx-amz-meta-b:one,two\nx-amz-meta-c:\n/b/k");

	/* Sub-resources as botocore's canonical_resource gives them: names as
	 * sent and case-sensitive, stable sort, values unquote()d, "k=" kept. */
	const struct { const char *q, *want; } sub[] = {
		{ "response-content-type=a%2Bb+c&uploadId=x%zz&foo=bar&acl",
		  "/b/k?acl&response-content-type=a+b+c&uploadId=x%zz" },
		{ "acl=&versionId=%C3%A9%2F&tagging", "/b/k?acl=&tagging&versionId=\xc3\xa9/" },
		{ "uploads&partNumber=2&partNumber=1&Acl", "/b/k?partNumber=2&partNumber=1&uploads" },
		{ "delete&&select&select-type=2&x-id=PutObject", "/b/k?delete&select&select-type=2" },
		{ "retention&legal-hold&encryption", "/b/k?encryption&legal-hold&retention" },
		{ "versionId=%41%4", "/b/k?versionId=A%4" },
	};
	char want[256];
	for (size_t i = 0; i < N(sub); i++) {
		snprintf(want, sizeof want, "PUT\n\n\nD\n%s", sub[i].want);
		expect_sts("PUT", sub[i].q, h, 2, "/b/k", want);
	}

	/* Header form: query x-amz-* and content-type are not headers. */
	expect_sts("GET", "x-amz-meta-a=1&content-type=x", h, 2, "/", "GET\n\n\nD\n/");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_presigned_vectors),
		cmocka_unit_test(test_presigned_tampering),
		cmocka_unit_test(test_presigned_at_most_seven_days),
		cmocka_unit_test(test_header_put),
		cmocka_unit_test(test_header_subresources),
		cmocka_unit_test(test_amz_date_without_date),
		cmocka_unit_test(test_s3_doc_example),
		cmocka_unit_test(test_skew),
		cmocka_unit_test(test_parse),
		cmocka_unit_test(test_canonical_rules),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

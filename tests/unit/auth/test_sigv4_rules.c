/*
 * test_sigv4_rules.c - S3's SigV4 rules that the public vectors touch only
 * lightly: no path normalisation, single encoding, awkward keys, the
 * Authorization/presigned parsers' edge cases, and sign -> verify round
 * trips through sv4_sign.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "auth/sigv4.h"
#include "base/alloc.h"

#define AK "AKIAIOSFODNN7EXAMPLE"
#define SK "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
#define T0 1369353600 /* 20130524T000000Z */

/* The canonical URI line of a GET of path under S3 rules (or generic). */
static int uri_line(const char *path, bool normalize, char *out, size_t outsz)
{
	struct sv4_header h[] = { { "Host", "b.s3.amazonaws.com" } };
	struct sv4_request req = { "GET", path, "", h, 1 };
	struct buf b;
	buf_init(&b, 1 << 16);
	int rc = sv4_canonical_request(&req, "host", SV4_EMPTY_SHA256, normalize, &b);
	if (rc == 0) {
		const char *s = strchr(buf_cstr(&b), '\n') + 1;
		const char *e = strchr(s, '\n');
		snprintf(out, outsz, "%.*s", (int)(e - s), s);
	}
	buf_fini(&b);
	return rc;
}

static void expect_uri(const char *path, const char *want)
{
	char got[8192];
	assert_int_equal(uri_line(path, false, got, sizeof got), 0);
	assert_string_equal(got, want);
}

static void test_s3_uri_rules(void **state)
{
	(void)state;
	expect_uri("/my%20key", "/my%20key");          /* space, encoded once */
	expect_uri("/a+b", "/a%2Bb");                  /* '+' is not a space */
	expect_uri("/a%2Bb", "/a%2Bb");
	expect_uri("/100%25done", "/100%25done");      /* a literal '%' */
	expect_uri("/~user/%7Eold", "/~user/~old");    /* '~' is unreserved */
	expect_uri("/a//b//", "/a//b//");              /* no '//' collapse */
	expect_uri("/a/./b/../c", "/a/./b/../c");      /* no dot segments */
	expect_uri("/dir/", "/dir/");                  /* trailing '/' kept */
	expect_uri("/caf\xc3\xa9", "/caf%C3%A9");      /* raw UTF-8 */
	expect_uri("/caf%c3%a9", "/caf%C3%A9");        /* upper-case hex out */
	expect_uri("/a%2Fb", "/a/b");                  /* decoded '/' stays a '/' */
	expect_uri("", "/");
	expect_uri("/$&'()*,;=:@", "/%24%26%27%28%29%2A%2C%3B%3D%3A%40");
	char got[64];
	assert_int_equal(uri_line("/bad%zz", false, got, sizeof got), -EINVAL);
	assert_int_equal(uri_line("/bad%4", false, got, sizeof got), -EINVAL);
	assert_int_equal(uri_line("/bad%", false, got, sizeof got), -EINVAL);

	/* The generic rules, for contrast. */
	assert_int_equal(uri_line("/a//b/./c/../d/", true, got, sizeof got), 0);
	assert_string_equal(got, "/a/b/d/");
	assert_int_equal(uri_line("/my%20key", true, got, sizeof got), 0);
	assert_string_equal(got, "/my%2520key"); /* encoded twice */
	assert_int_equal(uri_line("/..", true, got, sizeof got), 0);
	assert_string_equal(got, "/");
}

static void test_long_key(void **state)
{
	(void)state;
	/* A 1,024-byte key of multi-byte UTF-8 encodes to 3 bytes per byte. */
	char path[1 + 1024 + 1], want[1 + 3 * 1024 + 1];
	path[0] = want[0] = '/';
	for (int i = 0; i < 1024; i += 2) {
		path[1 + i] = '\xc3';
		path[2 + i] = '\xa9';
		memcpy(want + 1 + 3 * i, "%C3%A9", 6);
	}
	path[1025] = '\0';
	want[1 + 3 * 1024] = '\0';
	expect_uri(path, want);
}

static void test_query_rules(void **state)
{
	(void)state;
	struct sv4_header h[] = { { "Host", "b" } };
	struct {
		const char *q, *want;
	} cases[] = {
		{ "", "" },
		{ "acl", "acl=" },
		{ "uploads&prefix=a", "prefix=a&uploads=" },
		{ "prefix=a+b", "prefix=a%2Bb" },
		{ "prefix=a%20b&delimiter=%2F", "delimiter=%2F&prefix=a%20b" },
		{ "b=2&a=1&a=0", "a=0&a=1&b=2" },
		{ "k=%7e", "k=~" },
		{ "a=1&&b=2&", "a=1&b=2" },
		{ "X-Amz-Signature=abc&x=1", "x=1" },
		{ "=v", "=v" },
		{ "B=1&a=1", "B=1&a=1" },      /* byte order: upper case first */
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct sv4_request req = { "GET", "/", cases[i].q, h, 1 };
		struct buf b;
		buf_init(&b, 4096);
		assert_int_equal(sv4_canonical_request(&req, "host", "UNSIGNED-PAYLOAD", false, &b), 0);
		const char *s = strchr(strchr(buf_cstr(&b), '\n') + 1, '\n') + 1;
		const char *e = strchr(s, '\n');
		char got[256];
		snprintf(got, sizeof got, "%.*s", (int)(e - s), s);
		assert_string_equal(got, cases[i].want);
		buf_fini(&b);
	}
	struct sv4_request bad = { "GET", "/", "a=%g0", h, 1 };
	struct buf b;
	buf_init(&b, 4096);
	assert_int_equal(sv4_canonical_request(&bad, "host", "x", false, &b), -EINVAL);
	buf_reset(&b);
	assert_int_equal(sv4_canonical_request(&bad, "Host", "x", false, &b), -EINVAL);
	buf_reset(&b);
	struct sv4_request ok = { "GET", "/", "", h, 1 };
	assert_int_equal(sv4_canonical_request(&ok, "host;host", "x", false, &b), -EINVAL);
	buf_reset(&b);
	assert_int_equal(sv4_canonical_request(&ok, "host;;x", "x", false, &b), -EINVAL);
	buf_fini(&b);
	struct buf tiny;
	buf_init(&tiny, 8);
	assert_int_equal(sv4_canonical_request(&ok, "host", SV4_EMPTY_SHA256, false, &tiny), -E2BIG);
	buf_fini(&tiny);
}

static void test_header_values(void **state)
{
	(void)state;
	struct sv4_header h[] = {
		{ "Host", "b" }, { "X-Amz-Meta-A", "  one   two\t three  " },
		{ "x-amz-meta-a", "\"quoted  x\"" }, { "X-Amz-Meta-B", "l1\r\n  l2" },
	};
	struct sv4_request req = { "GET", "/", "", h, 4 };
	struct buf b;
	buf_init(&b, 4096);
	assert_int_equal(sv4_canonical_request(&req, "x-amz-meta-b;host;x-amz-meta-a", "P", false,
	                                       &b), 0);
	assert_string_equal(buf_cstr(&b), "GET\n/\n\nhost:b\nx-amz-meta-a:one two three,\"quoted x\"\n"
	                                  "x-amz-meta-b:l1 l2\n\nhost;x-amz-meta-a;x-amz-meta-b\nP");
	buf_fini(&b);
}

static enum sv4_status parse_authz(const char *authz, struct sv4_auth *a)
{
	struct sv4_header h[] = {
		{ "Host", "b" }, { "X-Amz-Date", "20130524T000000Z" },
		{ "x-amz-content-sha256", SV4_EMPTY_SHA256 }, { "Authorization", authz },
	};
	struct sv4_request req = { "GET", "/", "", h, authz ? 4 : 3 };
	return sv4_parse(&req, a);
}

#define SIG64 "aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404"
#define CRED "Credential=AK/20130524/us-east-1/s3/aws4_request"

static void test_parse_header(void **state)
{
	(void)state;
	struct sv4_auth a;
	assert_int_equal(parse_authz(NULL, &a), SV4_NO_AUTH);
	assert_int_equal(parse_authz("AWS4-HMAC-SHA256 " CRED ", SignedHeaders=host;x-amz-date, "
	                             "Signature=" SIG64, &a), SV4_OK);
	assert_string_equal(a.access_key, "AK");
	assert_string_equal(a.date, "20130524");
	assert_string_equal(a.region, "us-east-1");
	assert_string_equal(a.service, "s3");
	assert_string_equal(a.signed_headers, "host;x-amz-date");
	assert_string_equal(a.signature, SIG64);
	assert_string_equal(a.amz_date, "20130524T000000Z");
	assert_string_equal(a.payload_hash, SV4_EMPTY_SHA256);
	assert_false(a.presigned);
	/* Spacing variations AWS tolerates. */
	assert_int_equal(parse_authz("AWS4-HMAC-SHA256 " CRED ",SignedHeaders=host,Signature=" SIG64,
	                             &a), SV4_OK);
	assert_int_equal(parse_authz("  AWS4-HMAC-SHA256   " CRED " ,  SignedHeaders=host ,"
	                             "Signature=" SIG64 "  ", &a), SV4_OK);
	/* Other schemes. */
	assert_int_equal(parse_authz("AWS AKIAIOSFODNN7EXAMPLE:frJIUN8DYpKDtOLCwo//yllqDzg=", &a),
	                 SV4_UNSUPPORTED);
	assert_int_equal(parse_authz("AWS4-ECDSA-P256-SHA256 " CRED, &a), SV4_UNSUPPORTED);
	assert_int_equal(parse_authz("Bearer x", &a), SV4_UNSUPPORTED);
	/* Malformed. */
	const char *bad[] = {
		(""),
		("AWS4-HMAC-SHA256"),
		("AWS4-HMAC-SHA256 " CRED ", SignedHeaders=host"),
		("AWS4-HMAC-SHA256 " CRED ", SignedHeaders=host, Signature=abc"),
		("AWS4-HMAC-SHA256 " CRED ", SignedHeaders=host, Signature=" SIG64 "0"),
		("AWS4-HMAC-SHA256 " CRED ", SignedHeaders=Host, Signature=" SIG64),
		("AWS4-HMAC-SHA256 " CRED ", SignedHeaders=, Signature=" SIG64),
		("AWS4-HMAC-SHA256 " CRED ", " CRED ", SignedHeaders=host, Signature=" SIG64),
		("AWS4-HMAC-SHA256 " CRED ", SignedHeaders=host, Signature=" SIG64 ", Extra=1"),
		("AWS4-HMAC-SHA256 Credential=AK/20130524/us-east-1/s3/aws4_reques, SignedHeaders=host, "
		 "Signature=" SIG64),
		("AWS4-HMAC-SHA256 Credential=AK/2013052/us-east-1/s3/aws4_request, SignedHeaders=host, "
		 "Signature=" SIG64),
		("AWS4-HMAC-SHA256 Credential=AK/20130525/us-east-1/s3/aws4_request, SignedHeaders=host, "
		 "Signature=" SIG64), /* scope date differs from X-Amz-Date */
		("AWS4-HMAC-SHA256 Credential=//20130524/us-east-1/s3/aws4_request, SignedHeaders=host, "
		 "Signature=" SIG64),
		("AWS4-HMAC-SHA256 Credential=AK/20130524/us-east-1/s3/aws4_request/x, "
		 "SignedHeaders=host, Signature=" SIG64),
		("AWS4-HMAC-SHA256 Credential, SignedHeaders=host, Signature=" SIG64),
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		enum sv4_status st = parse_authz(bad[i], &a);
		if (st != SV4_MALFORMED)
			fail_msg("case %zu: %s -> %s", i, bad[i], sv4_status_str(st));
	}
	/* Field overflow: an access key longer than the struct holds. */
	char big[512];
	snprintf(big, sizeof big, "AWS4-HMAC-SHA256 Credential=%0200d/20130524/us-east-1/s3/"
	         "aws4_request, SignedHeaders=host, Signature=" SIG64, 7);
	assert_int_equal(parse_authz(big, &a), SV4_MALFORMED);
}

static void test_parse_dates(void **state)
{
	(void)state;
	time_t t;
	assert_int_equal(sv4_parse_amz_date("20130524T000000Z", &t), 0);
	assert_int_equal(t, T0);
	char s[17];
	sv4_amz_date(T0 + 3661, s);
	assert_string_equal(s, "20130524T010101Z");
	sv4_amz_date(946684799, s);
	assert_string_equal(s, "19991231T235959Z");
	sv4_amz_date(951782400, s);
	assert_string_equal(s, "20000229T000000Z");
	assert_int_equal(sv4_parse_amz_date("20130231T000000Z", &t), -EINVAL);
	assert_int_equal(sv4_parse_amz_date("20130524T240000Z", &t), -EINVAL);
	assert_int_equal(sv4_parse_amz_date("20130524 000000Z", &t), -EINVAL);
	assert_int_equal(sv4_parse_amz_date("20130524T000000", &t), -EINVAL);
	assert_int_equal(sv4_parse_amz_date("2013O524T000000Z", &t), -EINVAL);

	/* Without X-Amz-Date, the Date header (IMF-fixdate) is the date. */
	struct sv4_header h[] = {
		{ "Host", "b" }, { "Date", "Fri, 24 May 2013 00:00:00 GMT" },
		{ "Authorization", "AWS4-HMAC-SHA256 " CRED ", SignedHeaders=date;host, Signature=" SIG64 },
	};
	struct sv4_request req = { "GET", "/", "", h, 3 };
	struct sv4_auth a;
	assert_int_equal(sv4_parse(&req, &a), SV4_OK);
	assert_string_equal(a.amz_date, "20130524T000000Z");
	h[1].value = "Fri, 24 May 2013 00:00:00 PST";
	assert_int_equal(sv4_parse(&req, &a), SV4_MALFORMED);
	/* No date at all: sv4_verify reports the missing header. */
	h[1].name = "X-Other";
	assert_int_equal(sv4_parse(&req, &a), SV4_OK);
	assert_string_equal(a.amz_date, "");
	a.payload_hash[0] = 'x';
	assert_int_equal(sv4_verify(&req, &a, SK, T0, 900, NULL), SV4_MISSING_HEADER);
}

static enum sv4_status parse_query(const char *q, struct sv4_auth *a)
{
	struct sv4_header h[] = { { "Host", "b" } };
	struct sv4_request req = { "GET", "/k", q, h, 1 };
	return sv4_parse(&req, a);
}

#define QBASE "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AK%2F20130524%2Fus-east-1%2Fs3" \
              "%2Faws4_request&X-Amz-Date=20130524T000000Z&X-Amz-SignedHeaders=host"

static void test_parse_presigned(void **state)
{
	(void)state;
	struct sv4_auth a;
	assert_int_equal(parse_query("", &a), SV4_NO_AUTH);
	assert_int_equal(parse_query("versionId=3", &a), SV4_NO_AUTH);
	assert_int_equal(parse_query(QBASE "&X-Amz-Expires=86400&X-Amz-Signature=" SIG64, &a),
	                 SV4_OK);
	assert_true(a.presigned);
	assert_int_equal(a.expires, 86400);
	assert_string_equal(a.access_key, "AK");
	assert_string_equal(a.payload_hash, SV4_UNSIGNED_PAYLOAD);
	assert_int_equal(parse_query(QBASE "&X-Amz-Expires=604800&X-Amz-Signature=" SIG64
	                             "&X-Amz-Security-Token=tok%2Ben", &a), SV4_OK);
	assert_string_equal(a.security_token, "tok+en");
	/* An X-Amz-Content-Sha256 query parameter does not make the payload
	 * signed: S3 signs the URL over UNSIGNED-PAYLOAD and never holds the
	 * body to it, so a URL signed over that hash must not verify. */
	assert_int_equal(parse_query(QBASE "&X-Amz-Expires=60&X-Amz-Signature=" SIG64
	                             "&X-Amz-Content-Sha256=" SV4_EMPTY_SHA256, &a), SV4_OK);
	assert_string_equal(a.payload_hash, SV4_UNSIGNED_PAYLOAD);
	/* Out of range parses (sv4_verify refuses it: S3's AccessDenied);
	 * not a number does not. */
	assert_int_equal(parse_query(QBASE "&X-Amz-Expires=604801&X-Amz-Signature=" SIG64, &a),
	                 SV4_OK);
	assert_int_equal(a.expires, 604801);
	assert_int_equal(parse_query(QBASE "&X-Amz-Expires=0&X-Amz-Signature=" SIG64, &a), SV4_OK);
	assert_int_equal(a.expires, 0);
	assert_int_equal(parse_query(QBASE "&X-Amz-Expires=-1&X-Amz-Signature=" SIG64, &a), SV4_OK);
	assert_int_equal(a.expires, -1);
	assert_int_equal(parse_query(QBASE "&X-Amz-Expires=99999999999999999999&X-Amz-Signature="
	                             SIG64, &a), SV4_OK);
	assert_true(a.expires > SV4_MAX_PRESIGN_EXPIRES);
	assert_int_equal(parse_query(QBASE "&X-Amz-Expires=1e3&X-Amz-Signature=" SIG64, &a),
	                 SV4_MALFORMED);
	assert_int_equal(parse_query(QBASE "&X-Amz-Expires=-&X-Amz-Signature=" SIG64, &a),
	                 SV4_MALFORMED);
	assert_int_equal(parse_query(QBASE "&X-Amz-Expires=60", &a), SV4_MALFORMED);
	assert_int_equal(parse_query(QBASE "&X-Amz-Expires=60&X-Amz-Expires=60&X-Amz-Signature="
	                             SIG64, &a), SV4_MALFORMED);
	assert_int_equal(parse_query(QBASE "&X-Amz-Expires=60&X-Amz-Signature=%zz", &a),
	                 SV4_MALFORMED);
	assert_int_equal(parse_query("X-Amz-Algorithm=AWS4-ECDSA-P256-SHA256&X-Amz-Expires=1", &a),
	                 SV4_UNSUPPORTED);
	assert_int_equal(parse_query("AWSAccessKeyId=AK&Expires=1&Signature=x", &a),
	                 SV4_UNSUPPORTED);
	/* Both mechanisms at once. */
	struct sv4_header h[] = {
		{ "Host", "b" },
		{ "Authorization", "AWS4-HMAC-SHA256 " CRED ", SignedHeaders=host, Signature=" SIG64 },
	};
	struct sv4_request req = { "GET", "/k", QBASE "&X-Amz-Expires=6&X-Amz-Signature=" SIG64, h,
	                           2 };
	assert_int_equal(sv4_parse(&req, &a), SV4_MALFORMED);
}

/* Signs with sv4_sign, then parses and verifies as the gateway would. */
static void roundtrip(const char *path, const char *query)
{
	char date[17];
	sv4_amz_date(T0, date);
	struct sv4_header h[8] = {
		{ "Host", "bucket.s3.us-west-2.amazonaws.com" }, { "X-Amz-Date", date },
		{ "x-amz-content-sha256", SV4_UNSIGNED_PAYLOAD }, { "User-Agent", "test/1.0" },
		{ "Content-Length", "0" }, { "X-Amz-Meta-Note", " a  b " },
		{ "Connection", "keep-alive" }, { "X-Amz-Security-Token", "tok" },
	};
	struct sv4_request req = { "GET", path, query, h, 8 };
	struct sv4_creds cr = { AK, SK, "tok" };
	struct buf authz;
	buf_init(&authz, 4096);
	assert_int_equal(sv4_sign(&req, &cr, "us-west-2", "s3", &authz), 0);
	assert_non_null(strstr(buf_cstr(&authz), "SignedHeaders=host;x-amz-content-sha256;"
	                                         "x-amz-date;x-amz-meta-note;x-amz-security-token, "));
	struct sv4_header h2[9];
	memcpy(h2, h, sizeof h);
	h2[8] = (struct sv4_header){ "Authorization", buf_cstr(&authz) };
	/* A proxy may rewrite the headers sv4_sign leaves out. */
	h2[3].value = "other-agent";
	h2[6].value = "close";
	struct sv4_request sreq = { "GET", path, query, h2, 9 };
	struct sv4_auth a;
	assert_int_equal(sv4_parse(&sreq, &a), SV4_OK);
	assert_string_equal(a.security_token, "tok");
	unsigned char key[32];
	assert_int_equal(sv4_verify(&sreq, &a, SK, T0 + 60, 900, key), SV4_OK);
	h2[5].value = "a b c";
	assert_int_equal(sv4_verify(&sreq, &a, SK, T0 + 60, 900, key), SV4_BAD_SIGNATURE);
	buf_fini(&authz);
}

static void test_sign_roundtrip(void **state)
{
	(void)state;
	roundtrip("/bucket/plain.txt", "");
	roundtrip("/my%20key%2Bplus~tilde", "");
	roundtrip("/100%25", "");
	roundtrip("/a//b/", "");
	roundtrip("/a/./b/../c", "");
	roundtrip("/%C3%A9t%C3%A9", "versionId=abc&partNumber=2");
	roundtrip("/k", "list-type=2&prefix=a%20b%2Fc&delimiter=%2F");
	char path[1100];
	path[0] = '/';
	memset(path + 1, 'k', 1024);
	path[1025] = '\0';
	roundtrip(path, "");

	/* sv4_sign refuses requests without the headers it must sign. */
	struct sv4_header h[] = { { "Host", "b" }, { "X-Amz-Date", "20130524T000000Z" } };
	struct sv4_request req = { "GET", "/", "", h, 2 };
	struct sv4_creds cr = { AK, SK, NULL };
	struct buf b;
	buf_init(&b, 4096);
	assert_int_equal(sv4_sign(&req, &cr, "us-east-1", "s3", &b), -EINVAL);
	struct sv4_header h3[] = { { "Host", "b" }, { "X-Amz-Date", "20130524T000000Z" },
	                           { "x-amz-content-sha256", "UNSIGNED-PAYLOAD" } };
	struct sv4_request req3 = { "GET", "/%zz", "", h3, 3 };
	assert_int_equal(sv4_sign(&req3, &cr, "us-east-1", "s3", &b), -EINVAL);
	struct sv4_creds tok = { AK, SK, "session" };
	req3.path = "/";
	assert_int_equal(sv4_sign(&req3, &tok, "us-east-1", "s3", &b), -EINVAL);
	buf_fini(&b);
}

static void test_verify_rules(void **state)
{
	(void)state;
	char date[17];
	sv4_amz_date(T0, date);
	struct sv4_header h[4] = {
		{ "Host", "b" }, { "X-Amz-Date", date },
		{ "x-amz-content-sha256", SV4_EMPTY_SHA256 }, { "Authorization", NULL },
	};
	struct sv4_auth a;
	/* host not signed */
	h[3].value = "AWS4-HMAC-SHA256 " CRED ", SignedHeaders=x-amz-content-sha256;x-amz-date, "
	             "Signature=" SIG64;
	struct sv4_request req = { "GET", "/", "", h, 4 };
	assert_int_equal(sv4_parse(&req, &a), SV4_OK);
	assert_int_equal(sv4_verify(&req, &a, SK, T0, 900, NULL), SV4_MISSING_HEADER);
	/* x-amz-date present but not signed */
	h[3].value = "AWS4-HMAC-SHA256 " CRED ", SignedHeaders=host;x-amz-content-sha256, "
	             "Signature=" SIG64;
	assert_int_equal(sv4_parse(&req, &a), SV4_OK);
	assert_int_equal(sv4_verify(&req, &a, SK, T0, 900, NULL), SV4_MISSING_HEADER);
	/* payload hash header present but not signed */
	h[3].value = "AWS4-HMAC-SHA256 " CRED ", SignedHeaders=host;x-amz-date, Signature=" SIG64;
	assert_int_equal(sv4_parse(&req, &a), SV4_OK);
	assert_int_equal(sv4_verify(&req, &a, SK, T0, 900, NULL), SV4_MISSING_HEADER);
	/* payload hash header missing */
	h[2].name = "x-other";
	assert_int_equal(sv4_parse(&req, &a), SV4_OK);
	assert_string_equal(a.payload_hash, "");
	assert_int_equal(sv4_verify(&req, &a, SK, T0, 900, NULL), SV4_MISSING_HEADER);
}

/* Every x-amz-* header must be signed (S3: "There were headers present in
 * the request which were not signed"), else larder would forward it and
 * sign it upstream with its own credentials. */
static void test_unsigned_amz_headers(void **state)
{
	(void)state;
	char date[17];
	sv4_amz_date(T0, date);
	struct sv4_header h[] = {
		{ "Host", "b" }, { "X-Amz-Date", date }, { "x-amz-content-sha256", SV4_EMPTY_SHA256 },
		{ "Authorization", "AWS4-HMAC-SHA256 " CRED ", SignedHeaders=host;x-amz-content-sha256;"
		                   "x-amz-date;x-amz-meta-a, Signature=" SIG64 },
		{ "X-Amz-Meta-A", "1" }, { "X-AMZ-ACL", "public-read" },
		{ "x-amz-copy-source", "b/secret" }, { "Content-Type", "text/plain" },
		{ "x-amz-acl", "private" },
	};
	struct sv4_request req = { "PUT", "/k", "", h, sizeof h / sizeof h[0] };
	struct sv4_auth a;
	assert_int_equal(sv4_parse(&req, &a), SV4_OK);
	struct buf names;
	buf_init(&names, 256);
	assert_int_equal(sv4_unsigned_amz_headers(&req, &a, &names), 2);
	assert_string_equal(buf_cstr(&names), "x-amz-acl, x-amz-copy-source");
	assert_int_equal(sv4_verify(&req, &a, SK, T0, 900, NULL), SV4_UNSIGNED_HEADER);
	/* Without them, the (made-up) signature is what fails. */
	req.n_headers = 5;
	assert_int_equal(sv4_unsigned_amz_headers(&req, &a, NULL), 0);
	assert_int_equal(sv4_verify(&req, &a, SK, T0, 900, NULL), SV4_BAD_SIGNATURE);

	/* Presigned: the same rule, except x-amz-content-sha256 (the payload is
	 * then unsigned, and the header is never forwarded). */
	struct sv4_header p[] = {
		{ "Host", "b" }, { "x-amz-content-sha256", "abc" }, { "x-amz-acl", "public-read" },
	};
	struct sv4_request preq = { "PUT", "/k", QBASE "&X-Amz-Expires=60&X-Amz-Signature=" SIG64,
	                            p, 2 };
	assert_int_equal(sv4_parse(&preq, &a), SV4_OK);
	assert_int_equal(sv4_unsigned_amz_headers(&preq, &a, NULL), 0);
	preq.n_headers = 3;
	buf_reset(&names);
	assert_int_equal(sv4_unsigned_amz_headers(&preq, &a, &names), 1);
	assert_string_equal(buf_cstr(&names), "x-amz-acl");
	assert_int_equal(sv4_verify(&preq, &a, SK, T0 + 10, 900, NULL),
	                 SV4_UNSIGNED_HEADER);
	buf_fini(&names);
}

/* X-Amz-Expires outside 1..604800 is S3's AccessDenied, checked before
 * the time and the signature. */
static void test_presigned_expires_range(void **state)
{
	(void)state;
	static const char *const bad[] = { "0", "-5", "604801", "99999999999" };
	struct sv4_header h[] = { { "Host", "b" } };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char q[512];
		snprintf(q, sizeof q, "%s&X-Amz-Expires=%s&X-Amz-Signature=%s", QBASE, bad[i], SIG64);
		struct sv4_request req = { "GET", "/k", q, h, 1 };
		struct sv4_auth a;
		assert_int_equal(sv4_parse(&req, &a), SV4_OK);
		assert_int_equal(sv4_verify(&req, &a, SK, T0 + 10, 900, NULL),
		                 SV4_BAD_EXPIRES);
	}
}

static void test_signing_key_cache(void **state)
{
	(void)state;
	/* The S3 docs' example signing key for 20130524/us-east-1/s3. */
	unsigned char k1[32], k2[32], k3[32];
	sv4_signing_key(AK, SK, "20130524", "us-east-1", "s3", k1);
	sv4_signing_key(AK, SK, "20130524", "us-east-1", "s3", k2); /* cached */
	assert_memory_equal(k1, k2, 32);
	/* Independently: HMAC chain over "AWS4"+secret, date, region, service. */
	unsigned char k[32];
	unsigned int l = 32;
	HMAC(EVP_sha256(), "AWS4" SK, (int)strlen("AWS4" SK), (const unsigned char *)"20130524", 8,
	     k, &l);
	HMAC(EVP_sha256(), k, 32, (const unsigned char *)"us-east-1", 9, k, &l);
	HMAC(EVP_sha256(), k, 32, (const unsigned char *)"s3", 2, k, &l);
	HMAC(EVP_sha256(), k, 32, (const unsigned char *)"aws4_request", 12, k, &l);
	assert_memory_equal(k1, k, 32);
	/* Same access key, changed secret (config reload): a different key. */
	sv4_signing_key(AK, SK "x", "20130524", "us-east-1", "s3", k3);
	assert_memory_not_equal(k1, k3, 32);
	sv4_signing_key(AK, SK, "20130524", "us-east-1", "s3", k2);
	assert_memory_equal(k1, k2, 32);
	/* Many scopes: the cache stays bounded and answers stay right. */
	for (int i = 0; i < 2000; i++) {
		char region[32];
		snprintf(region, sizeof region, "r-%d", i);
		sv4_signing_key(AK, SK, "20130524", region, "s3", k3);
	}
	sv4_signing_key(AK, SK, "20130524", "us-east-1", "s3", k2);
	assert_memory_equal(k1, k2, 32);
	/* Over-long fields bypass the cache rather than truncate. */
	char longak[300];
	memset(longak, 'A', sizeof longak - 1);
	longak[sizeof longak - 1] = '\0';
	sv4_signing_key(longak, SK, "20130524", "us-east-1", "s3", k3);
	assert_memory_equal(k1, k3, 32);
}

/* The key chain of sigv4.h, computed here with OpenSSL alone. */
static void reference_key(const char *secret, const char *date, const char *region,
                          unsigned char out[32])
{
	char ks[512];
	unsigned int l = 32;
	int n = snprintf(ks, sizeof ks, "AWS4%s", secret);
	assert_true(n > 0 && (size_t)n < sizeof ks);
	HMAC(EVP_sha256(), ks, n, (const unsigned char *)date, strlen(date), out, &l);
	HMAC(EVP_sha256(), out, 32, (const unsigned char *)region, strlen(region), out, &l);
	HMAC(EVP_sha256(), out, 32, (const unsigned char *)"s3", 2, out, &l);
	HMAC(EVP_sha256(), out, 32, (const unsigned char *)"aws4_request", 12, out, &l);
}

/* A secret longer than the HMAC block, with memory short: the key must
 * still come from the secret. It once fell back to a key derived from
 * four zero bytes, which anyone could compute and sign with. */
static void test_signing_key_long_secret(void **state)
{
	(void)state;
	char secret[301];
	memset(secret, 's', sizeof secret - 1);
	secret[sizeof secret - 1] = '\0';
	unsigned char want[32], got[32];
	reference_key(secret, "20130524", "long-1", want);
	assert_int_equal(sv4_signing_key(AK, secret, "20130524", "long-1", "s3", got), 0);
	assert_memory_equal(got, want, 32);
	/* Either side of the 64-byte block, "AWS4" included. */
	static const size_t lens[] = { 59, 60, 61, 62, 127 };
	for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
		char s[128];
		memset(s, 'a' + (int)i, lens[i]);
		s[lens[i]] = '\0';
		reference_key(s, "20130524", "edge", want);
		assert_int_equal(sv4_signing_key(AK, s, "20130524", "edge", "s3", got), 0);
		assert_memory_equal(got, want, 32);
	}
	/* Not cached yet (another region), and the allocator failing. */
	for (unsigned long nth = 1; nth <= 4; nth++) {
		char region[16];
		snprintf(region, sizeof region, "long-%lu", nth + 1);
		reference_key(secret, "20130524", region, want);
		alloc_fail_nth(nth);
		int rc = sv4_signing_key(AK, secret, "20130524", region, "s3", got);
		alloc_fail_nth(0);
		assert_int_equal(rc, 0);
		assert_memory_equal(got, want, 32);
	}
}

/* A secret changed in one byte at the same length (a reload), either side
 * of the length up to which the cache keeps a secret itself rather than its
 * hash: each lookup, cached or not, gives the key of the secret it names. */
static void test_signing_key_cache_secret_edit(void **state)
{
	(void)state;
	static const size_t lens[] = { 1, 40, 127, 128, 129, 300 };
	for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
		char s[301];
		memset(s, 'k', lens[i]);
		s[lens[i]] = '\0';
		unsigned char want[32], got[32];
		for (int round = 0; round < 2; round++) {
			for (int edit = 0; edit < 2; edit++) {
				s[lens[i] - 1] = edit ? 'x' : 'k';
				reference_key(s, "20130524", "edit-1", want);
				assert_int_equal(sv4_signing_key(AK, s, "20130524", "edit-1", "s3", got), 0);
				assert_memory_equal(got, want, 32);
			}
		}
	}
}

static void test_uri_codec(void **state)
{
	(void)state;
	struct buf b;
	buf_init(&b, 64);
	assert_int_equal(sv4_uri_encode("a b/c~", 6, false, &b), 0);
	assert_string_equal(buf_cstr(&b), "a%20b%2Fc~");
	buf_reset(&b);
	assert_int_equal(sv4_uri_encode("a b/c~", 6, true, &b), 0);
	assert_string_equal(buf_cstr(&b), "a%20b/c~");
	buf_reset(&b);
	assert_int_equal(sv4_uri_decode("a+%41%2f", 8, &b), 0);
	assert_string_equal(buf_cstr(&b), "a+A/");
	buf_reset(&b);
	assert_int_equal(sv4_uri_decode("%4", 2, &b), -EINVAL);
	buf_fini(&b);
	struct buf tiny;
	buf_init(&tiny, 4);
	assert_int_equal(sv4_uri_encode("\xff\xff", 2, false, &tiny), -E2BIG);
	buf_fini(&tiny);
	for (int s = SV4_OK; s <= SV4_BAD_EXPIRES; s++)
		assert_true(strlen(sv4_status_str((enum sv4_status)s)) > 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_s3_uri_rules),
		cmocka_unit_test(test_long_key),
		cmocka_unit_test(test_query_rules),
		cmocka_unit_test(test_header_values),
		cmocka_unit_test(test_parse_header),
		cmocka_unit_test(test_parse_dates),
		cmocka_unit_test(test_parse_presigned),
		cmocka_unit_test(test_sign_roundtrip),
		cmocka_unit_test(test_verify_rules),
		cmocka_unit_test(test_unsigned_amz_headers),
		cmocka_unit_test(test_presigned_expires_range),
		cmocka_unit_test(test_signing_key_cache),
		cmocka_unit_test(test_signing_key_cache_secret_edit),
		cmocka_unit_test(test_signing_key_long_secret),
		cmocka_unit_test(test_uri_codec),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * test_sigv4.c - SigV4 against the public test vectors under
 * testdata/sigv4 (see its README.md) plus S3-specific rules.
 *
 * Usage: test_sigv4 <testdata/sigv4 dir>   (or SV4_TESTDATA in the env)
 */
#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "auth/sigv4.h"
#include "base/sha256.h"

static const char *datadir;

/* ---- file and request helpers ----------------------------------------- */

static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	size_t cap = 4096, n = 0, r;
	char *p = malloc(cap);
	while (p && (r = fread(p + n, 1, cap - n - 1, f)) > 0) {
		n += r;
		if (cap - n - 1 == 0)
			p = realloc(p, cap *= 2);
	}
	fclose(f);
	if (p) {
		p[n] = '\0';
		if (len)
			*len = n;
	}
	return p;
}

static char *slurpf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *slurpf(const char *fmt, ...)
{
	char path[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(path, sizeof path, fmt, ap);
	va_end(ap);
	return slurp(path, NULL);
}

static bool exists(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0;
}

#define MAXH 64

/* A request parsed from the vector files' HTTP/1.1 text. */
struct vreq {
	char *text;
	char *method, *path, *query, *body;
	size_t body_len;
	struct sv4_header h[MAXH];
	char *owned[MAXH];
	size_t n;
	struct sv4_request req;
};

static void vreq_fini(struct vreq *v)
{
	for (size_t i = 0; i < MAXH; i++)
		free(v->owned[i]);
	free(v->text);
	memset(v, 0, sizeof *v);
}

static void vreq_add(struct vreq *v, const char *name, const char *value)
{
	assert_true(v->n < MAXH);
	size_t nlen = strlen(name), vlen = strlen(value);
	char *s = malloc(nlen + vlen + 2);
	memcpy(s, name, nlen + 1);
	char *val = s + nlen + 1;
	memcpy(val, value, vlen + 1);
	v->owned[v->n] = s;
	v->h[v->n].name = s;
	v->h[v->n].value = val;
	v->n++;
	v->req.n_headers = v->n;
}

/*
 * Request line "METHOD target HTTP/1.1" (the target may hold a literal
 * space: get-space), then "Name:value" lines, continuation lines starting
 * with whitespace folded into the previous value with their newline kept,
 * a blank line, and the body.
 */
static void vreq_parse(struct vreq *v, char *text)
{
	memset(v, 0, sizeof *v);
	v->text = text;
	char *eol = strchr(text, '\n');
	char *rest = eol ? eol + 1 : text + strlen(text);
	if (eol)
		*eol = '\0';
	char *sp1 = strchr(text, ' '), *sp2 = strrchr(text, ' ');
	assert_non_null(sp1);
	*sp1 = '\0';
	if (sp2 > sp1)
		*sp2 = '\0';
	v->method = text;
	v->path = sp1 + 1;
	char *q = strchr(v->path, '?');
	v->query = "";
	if (q) {
		*q = '\0';
		v->query = q + 1;
	}
	char *line = rest;
	while (line && *line) {
		char *nl = strchr(line, '\n');
		if (nl)
			*nl = '\0';
		char *next = nl ? nl + 1 : NULL;
		if (*line == '\0') {
			line = next;
			break;
		}
		if ((*line == ' ' || *line == '\t') && v->n > 0) {
			/* folded continuation: keep it, with its line break */
			struct sv4_header *h = &v->h[v->n - 1];
			size_t nlen = strlen(h->name), vlen = strlen(h->value);
			size_t size = nlen + vlen + strlen(line) + 3;
			char *s = malloc(size);
			memcpy(s, h->name, nlen + 1);
			snprintf(s + nlen + 1, size - nlen - 1, "%s\n%s", h->value, line);
			free(v->owned[v->n - 1]);
			v->owned[v->n - 1] = s;
			h->name = s;
			h->value = s + nlen + 1;
		} else {
			char *colon = strchr(line, ':');
			assert_non_null(colon);
			*colon = '\0';
			vreq_add(v, line, colon + 1);
		}
		line = next;
	}
	v->body = line ? line : "";
	v->body_len = strlen(v->body);
	v->req.method = v->method;
	v->req.path = v->path;
	v->req.query = v->query;
	v->req.headers = v->h;
	v->req.n_headers = v->n;
}

static const char *vreq_get(const struct vreq *v, const char *name)
{
	for (size_t i = 0; i < v->n; i++)
		if (strcasecmp(v->h[i].name, name) == 0)
			return v->h[i].value;
	return NULL;
}

static void sha256_hex(const void *p, size_t n, char out[65])
{
	unsigned char md[32];
	unsigned int l;
	EVP_Digest(p, n, md, &l, EVP_sha256(), NULL);
	hex_encode(md, 32, out);
}

static void chomp(char *s)
{
	size_t n = strlen(s);
	while (n && (s[n - 1] == '\n' || s[n - 1] == '\r'))
		s[--n] = '\0';
}

/* ---- one vector --------------------------------------------------------- */

struct vector {
	const char *name;
	struct vreq *vr;           /* carries the signature (header or query) */
	const char *access_key, *secret;
	bool normalize;
	const char *payload;       /* NULL: take it from sv4_parse (S3 rules) */
	const char *creq, *sts, *sig;
	bool presigned;
};

static int failures, checked, verified;

#define CHECK(cond, ...)                                                         \
	do {                                                                         \
		if (!(cond)) {                                                           \
			print_error("%s: ", v->name);                                        \
			print_error(__VA_ARGS__);                                            \
			print_error("\n");                                                   \
			failures++;                                                          \
			goto out;                                                            \
		}                                                                        \
	} while (0)

static enum sv4_status verify_with(const struct vector *v, const struct sv4_request *req,
                                   const struct sv4_auth *a, const char *secret, time_t now)
{
	unsigned char key[32];
	return sv4_verify(req, a, secret, now, 900, key);
}

static void run_vector(const struct vector *v)
{
	struct sv4_auth a;
	struct buf creq, sts, creq_s3;
	buf_init(&creq, 1 << 20);
	buf_init(&sts, 4096);
	buf_init(&creq_s3, 1 << 20);
	checked++;
	enum sv4_status st = sv4_parse(&v->vr->req, &a);
	CHECK(st == SV4_OK, "sv4_parse: %s", sv4_status_str(st));
	CHECK(a.presigned == v->presigned, "presigned flag");
	if (v->payload)
		snprintf(a.payload_hash, sizeof a.payload_hash, "%s", v->payload);
	int rc = sv4_canonical_request(&v->vr->req, a.signed_headers, a.payload_hash, v->normalize,
	                               &creq);
	CHECK(rc == 0, "canonical request rc %d", rc);
	CHECK(strcmp(buf_cstr(&creq), v->creq) == 0, "canonical request\n got:\n%s\n want:\n%s",
	      buf_cstr(&creq), v->creq);
	rc = sv4_string_to_sign(a.amz_date, a.date, a.region, a.service, buf_cstr(&creq), &sts);
	CHECK(rc == 0 && strcmp(buf_cstr(&sts), v->sts) == 0, "string to sign\n%s",
	      buf_cstr(&sts));
	unsigned char key[32];
	char sig[65];
	sv4_signing_key(a.access_key, v->secret, a.date, a.region, a.service, key);
	sv4_signature(key, buf_cstr(&sts), sig);
	CHECK(strcmp(sig, v->sig) == 0, "signature %s want %s", sig, v->sig);
	CHECK(strcmp(a.signature, v->sig) == 0, "parsed signature");
	CHECK(strcmp(a.access_key, v->access_key) == 0, "access key");

	/* sv4_verify applies S3 rules; a generic vector whose path S3 would
	 * canonicalise differently cannot verify and is skipped here. */
	rc = sv4_canonical_request(&v->vr->req, a.signed_headers, a.payload_hash, false, &creq_s3);
	if (rc != 0 || strcmp(buf_cstr(&creq_s3), v->creq) != 0)
		goto out;
	time_t t;
	assert_int_equal(sv4_parse_amz_date(a.amz_date, &t), 0);
	unsigned char vkey[32];
	st = sv4_verify(&v->vr->req, &a, v->secret, t + 5, 900, vkey);
	/* The one vector with an x-amz-* header it did not sign (a session
	 * token added after signing) is valid SigV4 elsewhere; S3 refuses it.
	 * Named, not found by sv4_unsigned_amz_headers: the rule under test
	 * must not choose which vectors skip the checks below. */
	if (strcmp(v->name, "post-sts-header-after (header)") == 0) {
		CHECK(sv4_unsigned_amz_headers(&v->vr->req, &a, NULL) == 1, "one unsigned header");
		CHECK(st == SV4_UNSIGNED_HEADER, "unsigned x-amz-* header: %s", sv4_status_str(st));
		goto out;
	}
	CHECK(st == SV4_OK, "verify: %s", sv4_status_str(st));
	CHECK(memcmp(vkey, key, 32) == 0, "verify signing key");

	struct sv4_auth bad = a;
	bad.signature[10] = bad.signature[10] == '0' ? '1' : '0';
	st = verify_with(v, &v->vr->req, &bad, v->secret, t);
	CHECK(st == SV4_BAD_SIGNATURE, "one byte of signature: %s", sv4_status_str(st));

	st = verify_with(v, &v->vr->req, &a, "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEZ", t);
	CHECK(st == SV4_BAD_SIGNATURE, "wrong secret: %s", sv4_status_str(st));

	/* Tamper with the host header (always signed). */
	struct sv4_header hs[MAXH];
	memcpy(hs, v->vr->h, v->vr->n * sizeof hs[0]);
	for (size_t i = 0; i < v->vr->n; i++)
		if (strcasecmp(hs[i].name, "host") == 0)
			hs[i].value = "evil.example.com";
	struct sv4_request tampered = v->vr->req;
	tampered.headers = hs;
	st = verify_with(v, &tampered, &a, v->secret, t);
	CHECK(st == SV4_BAD_SIGNATURE, "tampered header: %s", sv4_status_str(st));

	if (v->presigned) {
		st = verify_with(v, &v->vr->req, &a, v->secret, t + a.expires + 1);
		CHECK(st == SV4_EXPIRED, "expired presign: %s", sv4_status_str(st));
		st = verify_with(v, &v->vr->req, &a, v->secret, t + a.expires);
		CHECK(st == SV4_OK, "presign at its last second: %s", sv4_status_str(st));
		st = verify_with(v, &v->vr->req, &a, v->secret, t - 901);
		CHECK(st == SV4_NOT_YET_VALID, "future presign: %s", sv4_status_str(st));
	} else {
		st = verify_with(v, &v->vr->req, &a, v->secret, t + 901);
		CHECK(st == SV4_SKEWED, "skew +15m1s: %s", sv4_status_str(st));
		st = verify_with(v, &v->vr->req, &a, v->secret, t - 901);
		CHECK(st == SV4_SKEWED, "skew -15m1s: %s", sv4_status_str(st));
		st = verify_with(v, &v->vr->req, &a, v->secret, t + 900);
		CHECK(st == SV4_OK, "skew exactly 15m: %s", sv4_status_str(st));
	}
	verified++;
out:
	buf_fini(&creq);
	buf_fini(&sts);
	buf_fini(&creq_s3);
}

/* ---- aws4_testsuite ----------------------------------------------------- */

#define SUITE_AK "AKIDEXAMPLE"
#define SUITE_SECRET "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"

static void suite_case(const char *dir, const char *name)
{
	char *req = slurpf("%s/%s/%s.req", dir, name, name);
	char *creq = slurpf("%s/%s/%s.creq", dir, name, name);
	char *sts = slurpf("%s/%s/%s.sts", dir, name, name);
	char *authz = slurpf("%s/%s/%s.authz", dir, name, name);
	assert_non_null(req);
	assert_non_null(creq);
	assert_non_null(sts);
	assert_non_null(authz);
	chomp(authz);
	struct vreq vr;
	vreq_parse(&vr, req);
	/* Quirk (README): get-vanilla-with-session-token's .req lacks the token
	 * header that its .creq signs; take the value from the .creq. */
	const char *tok = strstr(creq, "\nx-amz-security-token:");
	if (tok && !vreq_get(&vr, "x-amz-security-token")) {
		char val[512];
		sscanf(tok + 22, "%511[^\n]", val);
		vreq_add(&vr, "X-Amz-Security-Token", val);
	}
	vreq_add(&vr, "Authorization", authz);
	char payload[65];
	sha256_hex(vr.body, vr.body_len, payload);
	const char *sig = strstr(authz, "Signature=");
	assert_non_null(sig);
	struct vector v = {
		.name = name, .vr = &vr, .access_key = SUITE_AK, .secret = SUITE_SECRET,
		.normalize = true, .payload = payload, .creq = creq, .sts = sts, .sig = sig + 10,
	};
	run_vector(&v);
	vreq_fini(&vr);
	free(creq);
	free(sts);
	free(authz);
}

static int walk_suite(const char *dir)
{
	DIR *d = opendir(dir);
	assert_non_null(d);
	struct dirent *e;
	int n = 0;
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		char p[4096];
		snprintf(p, sizeof p, "%s/%s/%s.req", dir, e->d_name, e->d_name);
		if (exists(p)) {
			suite_case(dir, e->d_name);
			n++;
			continue;
		}
		snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
		struct stat st;
		if (stat(p, &st) == 0 && S_ISDIR(st.st_mode))
			n += walk_suite(p);
	}
	closedir(d);
	return n;
}

static void test_aws4_testsuite(void **state)
{
	(void)state;
	char dir[1024];
	snprintf(dir, sizeof dir, "%s/aws4_testsuite", datadir);
	failures = checked = verified = 0;
	int n = walk_suite(dir);
	print_message("aws4_testsuite: %d vectors, %d checked, %d also verified\n", n, checked,
	              verified);
	assert_true(n >= 30);
	assert_int_equal(failures, 0);
}

/* ---- aws-c-auth/v4 ------------------------------------------------------ */

static void cauth_case(const char *dir, const char *name, bool query)
{
	const char *pre = query ? "query" : "header";
	char *ctx = slurpf("%s/%s/context.json", dir, name);
	assert_non_null(ctx);
	json_error_t err;
	json_t *j = json_loads(ctx, 0, &err);
	assert_non_null(j);
	json_t *cred = json_object_get(j, "credentials");
	const char *ak = json_string_value(json_object_get(cred, "access_key_id"));
	const char *sk = json_string_value(json_object_get(cred, "secret_access_key"));
	json_t *norm = json_object_get(j, "normalize");
	char *sreq = slurpf("%s/%s/%s-signed-request.txt", dir, name, pre);
	char *creq = slurpf("%s/%s/%s-canonical-request.txt", dir, name, pre);
	char *sts = slurpf("%s/%s/%s-string-to-sign.txt", dir, name, pre);
	char *sig = slurpf("%s/%s/%s-signature.txt", dir, name, pre);
	assert_non_null(sreq);
	assert_non_null(creq);
	assert_non_null(sts);
	assert_non_null(sig);
	chomp(sig);
	struct vreq vr;
	vreq_parse(&vr, sreq);
	/* "-after" cases add the session token once the request is signed
	 * (aws4_testsuite/post-sts-token/readme.txt): for the query variant,
	 * take it out again to see what was signed. */
	char *strip = strstr(vr.query, "&X-Amz-Security-Token=");
	if (query && strip && json_is_true(json_object_get(j, "omit_session_token"))) {
		char *end = strchr(strip + 1, '&');
		memmove(strip, end ? end : strip + strlen(strip), strlen(end ? end : "") + 1);
	}
	/* Generic services sign the body's hash, presigned or not. */
	char payload[65];
	sha256_hex(vr.body, vr.body_len, payload);
	char label[256];
	snprintf(label, sizeof label, "%s (%s)", name, pre);
	struct vector v = {
		.name = label, .vr = &vr, .access_key = ak, .secret = sk,
		.normalize = norm ? json_is_true(norm) : true, .payload = payload, .creq = creq,
		.sts = sts, .sig = sig, .presigned = query,
	};
	run_vector(&v);
	vreq_fini(&vr);
	free(creq);
	free(sts);
	free(sig);
	json_decref(j);
	free(ctx);
}

static void test_aws_c_auth(void **state)
{
	(void)state;
	char dir[1024];
	snprintf(dir, sizeof dir, "%s/aws-c-auth/v4", datadir);
	DIR *d = opendir(dir);
	assert_non_null(d);
	failures = checked = verified = 0;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		char p[4096];
		snprintf(p, sizeof p, "%s/%s/header-signed-request.txt", dir, e->d_name);
		if (exists(p)) {
			cauth_case(dir, e->d_name, false);
			n++;
		}
		snprintf(p, sizeof p, "%s/%s/query-signed-request.txt", dir, e->d_name);
		if (exists(p)) {
			cauth_case(dir, e->d_name, true);
			n++;
		}
	}
	closedir(d);
	print_message("aws-c-auth/v4: %d vectors, %d checked, %d also verified\n", n, checked,
	              verified);
	assert_true(n >= 70);
	assert_int_equal(failures, 0);
}

/* ---- s3-extra ----------------------------------------------------------- */

static int signed_ok;

static void s3_case(const char *dir, const char *name)
{
	char *js = slurpf("%s/%s/%s.json", dir, name, name);
	char *sreq = slurpf("%s/%s/%s.sreq", dir, name, name);
	char *req = slurpf("%s/%s/%s.req", dir, name, name);
	char *creq = slurpf("%s/%s/%s.creq", dir, name, name);
	char *sts = slurpf("%s/%s/%s.sts", dir, name, name);
	char *authz = slurpf("%s/%s/%s.authz", dir, name, name);
	assert_non_null(js);
	assert_non_null(sreq);
	assert_non_null(req);
	assert_non_null(creq);
	assert_non_null(sts);
	assert_non_null(authz);
	chomp(authz);
	json_error_t err;
	json_t *j = json_loads(js, 0, &err);
	assert_non_null(j);
	const char *ak = json_string_value(json_object_get(j, "access_key_id"));
	const char *sk = json_string_value(json_object_get(j, "secret_access_key"));
	const char *region = json_string_value(json_object_get(j, "region"));
	const char *service = json_string_value(json_object_get(j, "service"));
	const char *payload = json_string_value(json_object_get(j, "payload_hash"));
	const char *sig = json_string_value(json_object_get(j, "signature"));
	bool query = json_is_true(json_object_get(j, "query_auth"));
	struct vreq vr;
	vreq_parse(&vr, sreq);
	struct vector v = {
		.name = name, .vr = &vr, .access_key = ak, .secret = sk, .normalize = false,
		.payload = NULL, .creq = creq, .sts = sts, .sig = sig, .presigned = query,
	};
	int before = failures;
	run_vector(&v);
	/* sv4_parse must have found the payload hash the vector signs. */
	struct sv4_auth a;
	if (sv4_parse(&vr.req, &a) != SV4_OK || strcmp(a.payload_hash, payload) != 0) {
		print_error("%s: parsed payload hash %s\n", name, a.payload_hash);
		failures++;
	}
	if (!query) {
		/* Sign the unsigned request as larder would for upstream. */
		struct vreq un;
		vreq_parse(&un, req);
		struct sv4_creds cr = { ak, sk, NULL };
		struct buf out;
		buf_init(&out, 4096);
		int rc = sv4_sign(&un.req, &cr, region, service, &out);
		if (rc != 0 || strcmp(buf_cstr(&out), authz) != 0) {
			print_error("%s: sv4_sign rc %d\n got  %s\n want %s\n", name, rc,
			            buf_cstr(&out), authz);
			failures++;
		} else if (failures == before) {
			signed_ok++;
		}
		buf_fini(&out);
		vreq_fini(&un);
	} else {
		free(req);
	}
	vreq_fini(&vr);
	json_decref(j);
	free(js);
	free(creq);
	free(sts);
	free(authz);
}

static void test_s3_extra(void **state)
{
	(void)state;
	char dir[1024];
	snprintf(dir, sizeof dir, "%s/s3-extra", datadir);
	DIR *d = opendir(dir);
	assert_non_null(d);
	failures = checked = verified = signed_ok = 0;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		s3_case(dir, e->d_name);
		n++;
	}
	closedir(d);
	print_message("s3-extra: %d vectors, %d verified, %d re-signed by sv4_sign\n", n,
	              verified, signed_ok);
	assert_true(n >= 17);
	assert_int_equal(verified, n);
	assert_int_equal(failures, 0);
}

/* ---- the S3 streaming example's seed signature -------------------------- */

static void test_streaming_seed(void **state)
{
	(void)state;
	char path[1024];
	snprintf(path, sizeof path, "%s/s3-streaming/aws-chunked-example.json", datadir);
	json_error_t err;
	json_t *j = json_load_file(path, 0, &err);
	assert_non_null(j);
	struct sv4_header h[16];
	json_t *hs = json_object_get(j, "headers");
	size_t n = json_array_size(hs);
	assert_true(n < 16);
	for (size_t i = 0; i < n; i++) {
		h[i].name = json_string_value(json_array_get(json_array_get(hs, i), 0));
		h[i].value = json_string_value(json_array_get(json_array_get(hs, i), 1));
	}
	struct sv4_request req = {
		json_string_value(json_object_get(j, "method")),
		json_string_value(json_object_get(j, "path")), "", h, n,
	};
	/* The documented request signs every header it has. */
	struct buf c, s;
	buf_init(&c, 1 << 16);
	buf_init(&s, 1 << 12);
	assert_int_equal(sv4_canonical_request(&req,
	                 "content-encoding;content-length;host;x-amz-content-sha256;x-amz-date;"
	                 "x-amz-decoded-content-length;x-amz-storage-class",
	                 SV4_STREAMING_SIGNED, false, &c), 0);
	assert_int_equal(sv4_string_to_sign("20130524T000000Z", "20130524", "us-east-1", "s3",
	                                    buf_cstr(&c), &s), 0);
	unsigned char key[32];
	char sig[65];
	sv4_signing_key("AKIAIOSFODNN7EXAMPLE",
	                json_string_value(json_object_get(j, "secret_access_key")), "20130524",
	                "us-east-1", "s3", key);
	sv4_signature(key, buf_cstr(&s), sig);
	assert_string_equal(sig, json_string_value(json_object_get(j, "seed_signature")));
	buf_fini(&c);
	buf_fini(&s);
	json_decref(j);
}

static void hex32(const unsigned char *mac, char out[65])
{
	for (int i = 0; i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", mac[i]);
}

/* sha256_hmac is HMAC-SHA256: RFC 4231's cases 1, 2 and 6 (a key longer
 * than the block), and OpenSSL's HMAC() for every key length around the
 * 64-byte block and a message of every length up to two blocks. */
static void test_hmac256(void **state)
{
	(void)state;
	unsigned char mac[32], want[32], key[200], msg[130];
	char hex[65];
	memset(key, 0x0b, 20);
	sha256_hmac(key, 20, "Hi There", 8, mac);
	hex32(mac, hex);
	assert_string_equal(hex, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
	sha256_hmac("Jefe", 4, "what do ya want for nothing?", 28, mac);
	hex32(mac, hex);
	assert_string_equal(hex, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
	memset(key, 0xaa, 131);
	const char *m6 = "Test Using Larger Than Block-Size Key - Hash Key First";
	sha256_hmac(key, 131, m6, strlen(m6), mac);
	hex32(mac, hex);
	assert_string_equal(hex, "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
	for (size_t i = 0; i < sizeof key; i++)
		key[i] = (unsigned char)(i * 37 + 1);
	for (size_t i = 0; i < sizeof msg; i++)
		msg[i] = (unsigned char)(i * 11 + 5);
	for (size_t kl = 0; kl <= sizeof key; kl++) {
		size_t ml = kl % sizeof msg;
		unsigned int len = 32;
		sha256_hmac(key, kl, msg, ml, mac);
		HMAC(EVP_sha256(), key, (int)kl, msg, ml, want, &len);
		assert_memory_equal(mac, want, 32);
	}
}

int main(int argc, char **argv)
{
	datadir = argc > 1 ? argv[1] : getenv("SV4_TESTDATA");
	if (!datadir) {
		fprintf(stderr, "usage: %s <testdata/sigv4>\n", argv[0]);
		return 2;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_aws4_testsuite),
		cmocka_unit_test(test_aws_c_auth),
		cmocka_unit_test(test_s3_extra),
		cmocka_unit_test(test_streaming_seed),
		cmocka_unit_test(test_hmac256),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

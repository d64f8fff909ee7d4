/*
 * sigv2.c - AWS Signature Version 2 for S3: parsing the "AWS AK:sig"
 * header and presigned query URLs, building the string to sign, and
 * verifying the HMAC-SHA1 signature.
 *
 * The steps follow the S3 API page "Signing and authenticating REST
 * requests (AWS signature version 2)". Where that page leaves room, the
 * rules are those of botocore's HmacV1Auth / HmacV1QueryAuth, because that
 * is what clients send:
 *   - sub-resource names match case-sensitively and as sent (not decoded);
 *     their values are percent-decoded like Python's urllib.parse.unquote
 *     (a '%' not followed by two hex digits stays literal, '+' stays '+');
 *     "name=" keeps its '='; equal names keep their query order;
 *   - x-amz-* values are trimmed, inner runs of blanks kept;
 *   - presigned URLs carry Content-Type, Content-MD5 and x-amz-* headers as
 *     query parameters;
 *   - bucket-level requests are signed as "/bucket/" even when path-style
 *     requests send "/bucket".
 */
#include "auth/sigv2.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "base/httpdate.h"

/* Cap on the string to sign; the gateway caps headers and the request line
 * well below this. */
#define STS_MAX (256 * 1024)

/*
 * The query parameters that are part of the canonical resource: the S3
 * page's list, the sub-resources added since, the response-* overrides,
 * and two that botocore signs as well (defaultObjectAcl, storageClass).
 */
static const char *const subresources[] = {
	"accelerate", "acl", "analytics", "cors", "defaultObjectAcl", "delete",
	"encryption", "intelligent-tiering", "inventory", "legal-hold", "lifecycle",
	"location", "logging", "metrics", "notification", "object-lock",
	"ownershipControls", "partNumber", "policy", "publicAccessBlock",
	"replication", "requestPayment", "response-cache-control",
	"response-content-disposition", "response-content-encoding",
	"response-content-language", "response-content-type", "response-expires",
	"restore", "retention", "select", "select-type", "storageClass", "tagging",
	"torrent", "uploadId", "uploads", "versionId", "versioning", "versions",
	"website",
};

/* ---- small helpers ---------------------------------------------------- */

static bool is_ws(char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f';
}

static bool has_prefix_nocase(struct slice s, const char *prefix)
{
	size_t n = strlen(prefix);
	return s.len >= n && strncasecmp(s.p, prefix, n) == 0;
}


/* One "k=v" of the raw query; v stays percent-encoded. */
struct qparam {
	struct slice k, v;
	bool has_v;
	size_t seq;
};

/* Splits query at '&' into a calloc'ed array (empty pieces skipped).
 * Returns 0 or -ENOMEM; *out is NULL when there is nothing. */
static int split_query(const char *query, struct qparam **out, size_t *n)
{
	size_t cap = 1, len = query ? strlen(query) : 0;
	*out = NULL;
	*n = 0;
	if (len == 0)
		return 0;
	for (size_t i = 0; i < len; i++)
		cap += query[i] == '&';
	struct qparam *q = calloc(cap, sizeof *q);
	if (!q)
		return -ENOMEM;
	const char *p = query, *end = query + len;
	while (p <= end) {
		const char *amp = memchr(p, '&', (size_t)(end - p));
		const char *stop = amp ? amp : end;
		const char *eq = memchr(p, '=', (size_t)(stop - p));
		if (stop > p) {
			struct qparam *e = &q[*n];
			e->k = (struct slice){ p, (size_t)((eq ? eq : stop) - p) };
			e->has_v = eq != NULL;
			e->v = eq ? (struct slice){ eq + 1, (size_t)(stop - eq - 1) } : (struct slice){ "", 0 };
			e->seq = (*n)++;
		}
		p = stop + 1;
	}
	*out = q;
	return 0;
}

/* Percent-decodes like Python's unquote: "%XX" with two hex digits becomes
 * the byte, anything else (a lone '%', '+') is copied as it is. */
static int unquote(struct slice v, struct buf *out)
{
	int rc = 0;
	for (size_t i = 0; i < v.len && rc == 0; i++) {
		int hi = -1, lo = -1;
		if (v.p[i] == '%' && i + 2 < v.len) {
			hi = hex_digit((unsigned char)v.p[i + 1]);
			lo = hex_digit((unsigned char)v.p[i + 2]);
		}
		if (hi >= 0 && lo >= 0) {
			rc = buf_putc(out, (char)(hi << 4 | lo));
			i += 2;
		} else {
			rc = buf_putc(out, v.p[i]);
		}
	}
	return rc;
}

/* ---- parsing ---------------------------------------------------------- */

static bool valid_access_key(struct slice s)
{
	if (s.len == 0 || s.len >= sizeof ((struct sv2_auth *)0)->access_key)
		return false;
	for (size_t i = 0; i < s.len; i++)
		if ((unsigned char)s.p[i] <= ' ' || (unsigned char)s.p[i] >= 0x7f)
			return false;
	return true;
}

static bool valid_signature(struct slice s)
{
	if (s.len == 0 || s.len >= sizeof ((struct sv2_auth *)0)->signature)
		return false;
	for (size_t i = 0; i < s.len; i++)
		if (!isalnum((unsigned char)s.p[i]) && !strchr("+/=", s.p[i]))
			return false;
	return true;
}

static void copy_slice(char *dst, struct slice s)
{
	memcpy(dst, s.p, s.len);
	dst[s.len] = '\0';
}

/* "AWS " AK ":" signature. The access key ends at the last ':' (base64
 * has none). */
static enum sv4_status parse_header(const char *h, struct sv2_auth *out)
{
	struct slice v = slice_trim(slice_cstr(h));
	v.p += 3;
	v.len -= 3;
	while (v.len && v.p[0] == ' ') {
		v.p++;
		v.len--;
	}
	const char *colon = v.len ? memrchr(v.p, ':', v.len) : NULL;
	if (!colon)
		return SV4_MALFORMED;
	struct slice ak = { v.p, (size_t)(colon - v.p) };
	struct slice sig = { colon + 1, (size_t)(v.p + v.len - colon - 1) };
	if (!valid_access_key(ak) || !valid_signature(sig))
		return SV4_MALFORMED;
	copy_slice(out->access_key, ak);
	copy_slice(out->signature, sig);
	return SV4_OK;
}

enum { P_AK, P_SIG, P_EXPIRES, P_N };

/* Expires: decimal epoch seconds, no sign. */
static bool parse_expires(struct slice e, long long *out)
{
	long long v = 0;
	if (e.len == 0 || e.len > 18)
		return false;
	for (size_t i = 0; i < e.len; i++) {
		if (e.p[i] < '0' || e.p[i] > '9')
			return false;
		v = v * 10 + (e.p[i] - '0');
	}
	*out = v;
	return true;
}

/* Percent-decodes (no '+' to space) into dst; false when it does not fit
 * or holds a NUL or a bad escape. */
static bool decode_to(struct slice in, char *dst, size_t dstsz)
{
	struct buf b;
	buf_init(&b, dstsz - 1);
	bool ok = sv4_uri_decode(in.p, in.len, &b) == 0 && !memchr(buf_cstr(&b), '\0', b.len);
	if (ok)
		memcpy(dst, buf_cstr(&b), b.len + 1);
	buf_fini(&b);
	return ok;
}

static enum sv4_status parse_query(const struct slice *f, struct sv2_auth *out)
{
	char ak[sizeof out->access_key], sig[sizeof out->signature], exp[24];
	if (!decode_to(f[P_AK], ak, sizeof ak) || !decode_to(f[P_SIG], sig, sizeof sig) ||
	    !decode_to(f[P_EXPIRES], exp, sizeof exp) || !valid_access_key(slice_cstr(ak)) ||
	    !valid_signature(slice_cstr(sig)) || !parse_expires(slice_cstr(exp), &out->expires))
		return SV4_MALFORMED;
	out->presigned = true;
	memcpy(out->access_key, ak, sizeof ak);
	memcpy(out->signature, sig, sizeof sig);
	return SV4_OK;
}

enum sv4_status sv2_parse(const struct sv4_request *req, struct sv2_auth *out)
{
	static const char *const names[P_N] = { "AWSAccessKeyId", "Signature", "Expires" };
	memset(out, 0, sizeof *out);
	struct qparam *q;
	size_t nq;
	if (split_query(req->query, &q, &nq) != 0)
		return SV4_MALFORMED;
	struct slice f[P_N] = { { "", 0 }, { "", 0 }, { "", 0 } };
	bool seen[P_N] = { false, false, false }, dup = false;
	for (size_t i = 0; i < nq; i++) {
		for (int j = 0; j < P_N; j++) {
			if (!slice_eq(q[i].k, slice_cstr(names[j])))
				continue;
			dup |= seen[j];
			seen[j] = true;
			f[j] = q[i].v;
		}
	}
	free(q);
	const char *h = sv4_header(req, SLICE_LIT("authorization"), NULL);
	struct slice hv = slice_trim(slice_cstr(h ? h : ""));
	bool h_v2 = slice_eq(hv, SLICE_LIT("AWS")) || (hv.len > 4 && strncmp(hv.p, "AWS ", 4) == 0);
	/* Expires alone is not SigV2 (sigv4.c also keys on these two). */
	bool q_v2 = seen[P_AK] || seen[P_SIG];
	if (q_v2 && h)
		return SV4_MALFORMED; /* two auth mechanisms */
	if (h_v2)
		return parse_header(h, out);
	if (!q_v2)
		return SV4_NO_AUTH;
	if (dup || !seen[P_AK] || !seen[P_SIG] || !seen[P_EXPIRES])
		return SV4_MALFORMED;
	return parse_query(f, out);
}

/* ---- string to sign --------------------------------------------------- */

/* A trimmed header value; a blank run holding a line break (obs-fold)
 * becomes one space, other blank runs are kept as sent. */
static int put_value(struct slice v, struct buf *out)
{
	v = slice_trim(v);
	int rc = 0;
	size_t i = 0;
	while (i < v.len && rc == 0) {
		size_t j = i;
		bool ws = is_ws(v.p[i]), fold = false;
		while (j < v.len && is_ws(v.p[j]) == ws) {
			fold |= v.p[j] == '\r' || v.p[j] == '\n';
			j++;
		}
		rc = fold ? buf_putc(out, ' ') : buf_append(out, v.p + i, j - i);
		i = j;
	}
	return rc;
}

/* A presigned URL's query-carried header value, decoded, or the header. */
static int put_std(const struct sv4_request *req, const struct sv2_auth *a,
                   const struct qparam *q, size_t nq, struct slice name, struct buf *out)
{
	const char *h = sv4_header(req, name, NULL);
	if (h)
		return put_value(slice_cstr(h), out);
	for (size_t i = 0; a->presigned && i < nq; i++) {
		if (!slice_eq_nocase(q[i].k, name))
			continue;
		struct buf tmp;
		buf_init(&tmp, STS_MAX);
		int rc = sv4_uri_decode(q[i].v.p, q[i].v.len, &tmp);
		if (rc == 0)
			rc = put_value((struct slice){ buf_cstr(&tmp), tmp.len }, out);
		buf_fini(&tmp);
		return rc;
	}
	return 0;
}

struct amz {
	struct slice name;  /* as sent; compared and written lower case */
	struct slice value; /* percent-encoded when from_query */
	bool from_query;
	size_t seq;
};

static int cmp_amz(const void *x, const void *y)
{
	const struct amz *a = x, *b = y;
	size_t n = a->name.len < b->name.len ? a->name.len : b->name.len;
	for (size_t i = 0; i < n; i++) {
		int ca = tolower((unsigned char)a->name.p[i]), cb = tolower((unsigned char)b->name.p[i]);
		if (ca != cb)
			return ca - cb;
	}
	if (a->name.len != b->name.len)
		return a->name.len < b->name.len ? -1 : 1;
	return (a->seq > b->seq) - (a->seq < b->seq);
}

static int put_amz(const struct sv4_request *req, const struct sv2_auth *a,
                   const struct qparam *q, size_t nq, struct buf *out)
{
	struct amz *v = calloc(req->n_headers + nq + 1, sizeof *v);
	if (!v)
		return -ENOMEM;
	size_t n = 0;
	for (size_t i = 0; i < req->n_headers; i++) {
		struct slice name = slice_cstr(req->headers[i].name ? req->headers[i].name : "");
		if (!has_prefix_nocase(name, "x-amz-"))
			continue;
		v[n] = (struct amz){ name, slice_cstr(req->headers[i].value ? req->headers[i].value : ""),
		                     false, n };
		n++;
	}
	for (size_t i = 0; a->presigned && i < nq; i++) {
		if (!has_prefix_nocase(q[i].k, "x-amz-") || sv4_header(req, q[i].k, NULL))
			continue;
		v[n] = (struct amz){ q[i].k, q[i].v, true, n };
		n++;
	}
	if (n > 1)
		qsort(v, n, sizeof *v, cmp_amz);
	struct buf tmp;
	buf_init(&tmp, STS_MAX);
	int rc = 0;
	for (size_t i = 0; i < n && rc == 0; i++) {
		/* Sorted, so the values of one name are neighbours. */
		bool first = i == 0 || !slice_eq_nocase(v[i - 1].name, v[i].name);
		bool last = i + 1 == n || !slice_eq_nocase(v[i].name, v[i + 1].name);
		for (size_t k = 0; first && k < v[i].name.len && rc == 0; k++)
			rc = buf_putc(out, (char)tolower((unsigned char)v[i].name.p[k]));
		if (rc == 0)
			rc = buf_putc(out, first ? ':' : ',');
		struct slice val = v[i].value;
		if (rc == 0 && v[i].from_query) {
			buf_reset(&tmp);
			rc = sv4_uri_decode(val.p, val.len, &tmp);
			val = (struct slice){ buf_cstr(&tmp), tmp.len };
		}
		if (rc == 0)
			rc = put_value(val, out);
		if (rc == 0 && last)
			rc = buf_putc(out, '\n');
	}
	buf_fini(&tmp);
	free(v);
	return rc;
}

static bool is_subresource(struct slice k)
{
	for (size_t i = 0; i < sizeof subresources / sizeof subresources[0]; i++)
		if (slice_eq(k, slice_cstr(subresources[i])))
			return true;
	return false;
}

static int cmp_sub(const void *x, const void *y)
{
	const struct qparam *a = x, *b = y;
	size_t n = a->k.len < b->k.len ? a->k.len : b->k.len;
	int c = memcmp(a->k.p, b->k.p, n);
	if (c == 0 && a->k.len != b->k.len)
		c = a->k.len < b->k.len ? -1 : 1;
	return c ? c : (a->seq > b->seq) - (a->seq < b->seq);
}

/* CanonicalizedResource: resource + "?" + the sub-resources, sorted.
 * Reorders q in place (it is the last user). */
static int put_resource(const char *resource, struct qparam *q, size_t nq, struct buf *out)
{
	int rc = buf_puts(out, resource);
	size_t n = 0;
	for (size_t i = 0; i < nq; i++)
		if (is_subresource(q[i].k))
			q[n++] = q[i];
	if (n > 1)
		qsort(q, n, sizeof *q, cmp_sub);
	for (size_t i = 0; i < n && rc == 0; i++) {
		rc = buf_putc(out, i == 0 ? '?' : '&');
		if (rc == 0)
			rc = buf_append(out, q[i].k.p, q[i].k.len);
		if (rc == 0 && q[i].has_v)
			rc = buf_putc(out, '=');
		if (rc == 0 && q[i].has_v)
			rc = unquote(q[i].v, out);
	}
	return rc;
}

int sv2_string_to_sign(const struct sv4_request *req, const struct sv2_auth *a,
                       const char *resource, struct buf *out)
{
	struct qparam *q;
	size_t nq;
	int rc = split_query(req->query, &q, &nq);
	if (rc != 0)
		return rc;
	rc = buf_puts(out, req->method);
	if (rc == 0)
		rc = buf_putc(out, '\n');
	if (rc == 0)
		rc = put_std(req, a, q, nq, SLICE_LIT("content-md5"), out);
	if (rc == 0)
		rc = buf_putc(out, '\n');
	if (rc == 0)
		rc = put_std(req, a, q, nq, SLICE_LIT("content-type"), out);
	if (rc == 0)
		rc = buf_putc(out, '\n');
	if (rc == 0 && a->presigned) {
		rc = buf_printf(out, "%lld", a->expires);
	} else if (rc == 0 && !sv4_header(req, SLICE_LIT("x-amz-date"), NULL)) {
		const char *d = sv4_header(req, SLICE_LIT("date"), NULL);
		rc = put_value(slice_cstr(d ? d : ""), out);
	}
	if (rc == 0)
		rc = buf_putc(out, '\n');
	if (rc == 0)
		rc = put_amz(req, a, q, nq, out);
	if (rc == 0)
		rc = put_resource(resource, q, nq, out);
	free(q);
	return rc;
}

/* ---- verification ----------------------------------------------------- */

/*
 * RFC 9110 section 5.6.7 IMF-fixdate ("Tue, 14 Nov 2023 22:13:20 GMT"),
 * also with a one-digit day or a numeric zone ("+0000", as in the S3
 * examples; RFC 5322 section 3.3 allows both), or the SigV4 form
 * YYYYMMDDTHHMMSSZ that some clients put in x-amz-date.
 */
static int parse_date(const char *s, time_t *out)
{
	struct slice v = slice_trim(slice_cstr(s));
	char t[48];
	if (v.len >= sizeof t)
		return -EINVAL;
	copy_slice(t, v);
	if (sv4_parse_amz_date(t, out) == 0)
		return 0;
	return httpdate_parse_zoned(t, out);
}

/* base64(HMAC-SHA1(secret, sts)) into sig (29 bytes with NUL). */
static void sign_sts(const char *secret, const struct buf *sts, char sig[29])
{
	unsigned char md[20];
	unsigned int len = sizeof md;
	const char *s = buf_cstr(sts);
	HMAC(EVP_sha1(), secret, (int)strlen(secret), (const unsigned char *)s, sts->len, md, &len);
	EVP_EncodeBlock((unsigned char *)sig, md, (int)len);
}

/* 1: signature matches, 0: it does not, <0: no string to sign. */
static int check(const struct sv4_request *req, const struct sv2_auth *a,
                 const char *resource, const char *secret)
{
	struct buf sts;
	char sig[29];
	buf_init(&sts, STS_MAX);
	int rc = sv2_string_to_sign(req, a, resource, &sts);
	if (rc == 0) {
		sign_sts(secret, &sts, sig);
		rc = ct_equal(sig, strlen(sig), a->signature, strlen(a->signature));
	}
	buf_fini(&sts);
	return rc;
}

enum sv4_status sv2_verify(const struct sv4_request *req, const struct sv2_auth *a,
                           const char *resource, const char *secret, time_t now,
                           unsigned max_skew_s)
{
	if (a->presigned) {
		if ((long long)now > a->expires)
			return SV4_EXPIRED;
		/* SigV2 has no signing time; cap what is left, as SigV4 caps
		 * X-Amz-Expires, so a leaked URL does not work for ever. */
		if (a->expires - (long long)now > SV4_MAX_PRESIGN_EXPIRES)
			return SV4_BAD_EXPIRES;
	} else {
		const char *d = sv4_header(req, SLICE_LIT("x-amz-date"), NULL);
		if (!d)
			d = sv4_header(req, SLICE_LIT("date"), NULL);
		if (!d)
			return SV4_MISSING_HEADER;
		time_t t;
		if (parse_date(d, &t) != 0)
			return SV4_MALFORMED;
		long long skew = (long long)now - (long long)t;
		if (skew > (long long)max_skew_s || -skew > (long long)max_skew_s)
			return SV4_SKEWED;
	}
	int ok = check(req, a, resource, secret);
	/* A bucket-level resource: "/bucket" and "/bucket/" name the same thing
	 * and clients sign either (botocore path-style: "/bucket/"). */
	size_t n = strlen(resource);
	const char *slash = n > 1 ? memchr(resource + 1, '/', n - 1) : NULL;
	if (ok == 0 && n > 1 && resource[0] == '/' && (!slash || (slash == resource + n - 1 && n > 2))) {
		struct buf alt;
		buf_init(&alt, n + 2);
		int rc = slash ? buf_append(&alt, resource, n - 1) : buf_printf(&alt, "%s/", resource);
		if (rc == 0)
			ok = check(req, a, buf_cstr(&alt), secret);
		buf_fini(&alt);
	}
	if (ok < 0)
		return SV4_MALFORMED;
	return ok ? SV4_OK : SV4_BAD_SIGNATURE;
}

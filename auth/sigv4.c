/*
 * sigv4.c - AWS Signature Version 4 for S3: parsing what clients send,
 * building canonical requests, verifying signatures and signing upstream
 * requests.
 *
 * The steps follow "Create a signed AWS API request" (SigV4 general
 * reference) and the S3 API's "Signature Calculations for the
 * Authorization Header" / "Authenticating Requests: Using Query
 * Parameters". S3 departs from the generic rules in one way that matters:
 * the path is neither normalised nor double-encoded.
 */
#include "auth/sigv4.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/crypto.h>

#include "base/hdrs.h"
#include "base/httpdate.h"
#include "base/sha256.h"

/* Caps on the scratch buffers used while building a canonical request.
 * The gateway caps the request line and headers well below these. */
#define CREQ_MAX (256 * 1024)
#define STS_MAX 1024
/* What a usual request's canonical request and string to sign fit in,
 * less the NUL: a signed GET's are about 250-700 and 130-160 bytes. */
#define CREQ_USUAL 1023
#define STS_USUAL 255

/* ---- small helpers ---------------------------------------------------- */

static void sha256_hex(const void *p, size_t n, char out[65])
{
	unsigned char md[32];
	sha256(p, n, md);
	hex_encode(md, sizeof md, out);
}

static bool is_unreserved(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
	       c == '-' || c == '_' || c == '.' || c == '~';
}

/* RFC 9110 section 5.6.2: the characters of a token (header names). */
static bool is_tchar(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
	       (c && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

bool sv4_is_token(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!is_tchar((unsigned char)s[i]))
			return false;
	return n > 0;
}

static bool is_ws(char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

/* Copies a slice into a fixed array; false when it does not fit. */
static bool copy_field(char *dst, size_t dstsz, const char *src, size_t n)
{
	if (n >= dstsz || memchr(src, '\0', n))
		return false;
	memcpy(dst, src, n);
	dst[n] = '\0';
	return true;
}

const char *sv4_header(const struct sv4_request *req, struct slice name, size_t *count)
{
	const char *v = NULL;
	size_t n = 0;
	for (size_t i = 0; i < req->n_headers; i++) {
		if (req->headers[i].name && slice_eq_nocase(slice_cstr(req->headers[i].name), name)) {
			if (!v)
				v = req->headers[i].value ? req->headers[i].value : "";
			n++;
		}
	}
	if (count)
		*count = n;
	return v;
}

static const char *find_header(const struct sv4_request *req, const char *name, size_t *count)
{
	return sv4_header(req, slice_cstr(name), count);
}

const char *sv4_status_str(enum sv4_status s)
{
	switch (s) {
	case SV4_OK: return "signature verified";
	case SV4_NO_AUTH: return "no authentication information";
	case SV4_MALFORMED: return "malformed authorization";
	case SV4_UNSUPPORTED: return "unsupported authorization type";
	case SV4_BAD_SIGNATURE: return "signature does not match";
	case SV4_SKEWED: return "request time too skewed";
	case SV4_EXPIRED: return "request has expired";
	case SV4_NOT_YET_VALID: return "request is not yet valid";
	case SV4_MISSING_HEADER: return "required header missing or unsigned";
	case SV4_UNSIGNED_HEADER: return "There were headers present in the request which were not signed";
	case SV4_BAD_EXPIRES: return "X-Amz-Expires out of range";
	}
	return "unknown status";
}

/* ---- URI encoding ----------------------------------------------------- */

int sv4_uri_encode(const char *in, size_t len, bool keep_slash, struct buf *out)
{
	static const char hex[] = "0123456789ABCDEF";
	for (size_t i = 0; i < len;) {
		/* A run kept as it is goes in with one append. */
		size_t run = 0;
		while (i + run < len && (is_unreserved((unsigned char)in[i + run]) ||
		                         (keep_slash && in[i + run] == '/')))
			run++;
		int rc = run ? buf_append(out, in + i, run) : 0;
		i += run;
		if (!rc && i < len) {
			unsigned char c = (unsigned char)in[i++];
			char esc[3] = { '%', hex[c >> 4], hex[c & 15] };
			rc = buf_append(out, esc, 3);
		}
		if (rc)
			return rc;
	}
	return 0;
}

int sv4_uri_decode(const char *in, size_t len, struct buf *out)
{
	for (size_t i = 0; i < len;) {
		const char *pct = memchr(in + i, '%', len - i);
		size_t run = pct ? (size_t)(pct - (in + i)) : len - i;
		int rc = run ? buf_append(out, in + i, run) : 0;
		i += run;
		if (!rc && i < len) { /* in[i] == '%' */
			if (len - i < 3)
				return -EINVAL;
			int hi = hex_digit((unsigned char)in[i + 1]), lo = hex_digit((unsigned char)in[i + 2]);
			if (hi < 0 || lo < 0)
				return -EINVAL;
			rc = buf_putc(out, (char)(hi << 4 | lo));
			i += 3;
		}
		if (rc)
			return rc;
	}
	return 0;
}

/* ---- dates ------------------------------------------------------------ */

void sv4_amz_date(time_t t, char out[17])
{
	struct tm tm;
	gmtime_r(&t, &tm);
	/* YYYYMMDDTHHMMSSZ without printf: it is made for every upstream request. */
	char *p = u64_dec(out, (unsigned)(tm.tm_year + 1900) % 10000u, 4);
	p = u64_dec(p, (unsigned)(tm.tm_mon + 1), 2);
	p = u64_dec(p, (unsigned)tm.tm_mday, 2);
	*p++ = 'T';
	p = u64_dec(p, (unsigned)tm.tm_hour, 2);
	p = u64_dec(p, (unsigned)tm.tm_min, 2);
	p = u64_dec(p, (unsigned)tm.tm_sec, 2);
	memcpy(p, "Z", 2);
}

static bool digits(const char *s, size_t n, int *v)
{
	int x = 0;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
		x = x * 10 + (s[i] - '0');
	}
	*v = x;
	return true;
}

int sv4_parse_amz_date(const char *s, time_t *out)
{
	int y, mon, d, h, mi, sec;
	if (!s || strlen(s) != 16 || s[8] != 'T' || s[15] != 'Z')
		return -EINVAL;
	if (!digits(s, 4, &y) || !digits(s + 4, 2, &mon) || !digits(s + 6, 2, &d) ||
	    !digits(s + 9, 2, &h) || !digits(s + 11, 2, &mi) || !digits(s + 13, 2, &sec))
		return -EINVAL;
	return utc_time(y, mon, d, h, mi, sec, out);
}

/* ---- canonical request ------------------------------------------------ */

/*
 * Generic (non-S3) path normalisation: RFC 3986 section 5.2.4 dot-segment
 * removal plus collapsing empty segments, as the aws4_testsuite
 * normalize-path cases expect. A trailing '/', '/.' or '/..' leaves a
 * trailing slash. The result always starts with '/'.
 */
static int normalize_path(const char *p, size_t len, struct buf *out)
{
	size_t nseg = 0, cap = 1;
	for (size_t i = 0; i < len; i++)
		cap += p[i] == '/';
	struct slice *seg = calloc(cap, sizeof *seg);
	if (!seg)
		return -ENOMEM;
	bool trailing = false;
	size_t start = 0;
	for (size_t i = 0; i <= len; i++) {
		if (i < len && p[i] != '/')
			continue;
		struct slice s = { p + start, i - start };
		bool last = i == len;
		start = i + 1;
		if (s.len == 0 || slice_eq(s, SLICE_LIT("."))) {
			trailing = last;
		} else if (slice_eq(s, SLICE_LIT(".."))) {
			if (nseg)
				nseg--;
			trailing = last;
		} else {
			seg[nseg++] = s;
			trailing = false;
		}
	}
	int rc = buf_putc(out, '/');
	for (size_t k = 0; k < nseg && !rc; k++) {
		rc = buf_append(out, seg[k].p, seg[k].len);
		if (!rc && (k + 1 < nseg || trailing))
			rc = buf_putc(out, '/');
	}
	free(seg);
	return rc;
}

/* Appends the canonical URI (step 2 of the canonical request). */
static int canonical_uri(const char *path, bool normalize, struct buf *out)
{
	size_t len = strlen(path);
	if (len == 0)
		return buf_putc(out, '/');
	struct buf tmp;
	buf_init(&tmp, CREQ_MAX);
	int rc;
	if (normalize) {
		/* Generic services: the wire path (already encoded once) is
		 * normalised and encoded again, so "%" becomes "%25". */
		rc = normalize_path(path, len, &tmp);
	} else {
		/* S3: decode what the client sent and encode it once, keeping
		 * every '/', '.' and '..' exactly as they are. */
		rc = sv4_uri_decode(path, len, &tmp);
	}
	if (!rc)
		rc = sv4_uri_encode(buf_cstr(&tmp), tmp.len, true, out);
	buf_fini(&tmp);
	return rc;
}

struct qparam {
	size_t koff, klen, voff, vlen;
	const char *k, *v;
};

static int cmp_bytes(const char *a, size_t alen, const char *b, size_t blen)
{
	int c = memcmp(a, b, alen < blen ? alen : blen);
	if (c)
		return c;
	return alen < blen ? -1 : alen > blen;
}

static int cmp_qparam(const void *x, const void *y)
{
	const struct qparam *a = x, *b = y;
	int c = cmp_bytes(a->k, a->klen, b->k, b->klen);
	return c ? c : cmp_bytes(a->v, a->vlen, b->v, b->vlen);
}

/* Decodes then strictly re-encodes in[0..n) onto scratch. */
static int reencode(const char *in, size_t n, struct buf *tmp, struct buf *scratch)
{
	buf_reset(tmp);
	int rc = sv4_uri_decode(in, n, tmp);
	return rc ? rc : sv4_uri_encode(buf_cstr(tmp), tmp->len, false, scratch);
}

/*
 * Canonical query string (step 3): every parameter decoded and re-encoded
 * with only unreserved characters left bare, sorted by encoded name then
 * value, a missing '=' giving an empty value. X-Amz-Signature is left out
 * (presigned requests sign everything but the signature).
 */
static int canonical_query(const char *query, struct buf *out)
{
	size_t qlen = strlen(query);
	if (qlen == 0)
		return 0;
	size_t cap = 1;
	for (size_t i = 0; i < qlen; i++)
		cap += query[i] == '&';
	struct qparam *qp = calloc(cap, sizeof *qp);
	if (!qp)
		return -ENOMEM;
	struct buf scratch, tmp;
	buf_init(&scratch, CREQ_MAX);
	buf_init(&tmp, CREQ_MAX);
	size_t n = 0;
	int rc = 0;
	const char *p = query, *end = query + qlen;
	while (p <= end && !rc) {
		const char *amp = memchr(p, '&', (size_t)(end - p));
		const char *stop = amp ? amp : end;
		if (stop > p) {
			const char *eq = memchr(p, '=', (size_t)(stop - p));
			const char *kend = eq ? eq : stop;
			struct qparam *q = &qp[n];
			q->koff = scratch.len;
			rc = reencode(p, (size_t)(kend - p), &tmp, &scratch);
			q->klen = scratch.len - q->koff;
			q->voff = scratch.len;
			if (!rc && eq)
				rc = reencode(eq + 1, (size_t)(stop - eq - 1), &tmp, &scratch);
			q->vlen = scratch.len - q->voff;
			if (!rc && !(q->klen == 15 &&
			             memcmp(buf_cstr(&scratch) + q->koff, "X-Amz-Signature", 15) == 0))
				n++;
		}
		p = stop + 1;
	}
	if (!rc) {
		const char *base = buf_cstr(&scratch);
		for (size_t i = 0; i < n; i++) {
			qp[i].k = base + qp[i].koff;
			qp[i].v = base + qp[i].voff;
		}
		qsort(qp, n, sizeof *qp, cmp_qparam);
		for (size_t i = 0; i < n && !rc; i++) {
			if (i)
				rc = buf_putc(out, '&');
			if (!rc)
				rc = buf_append(out, qp[i].k, qp[i].klen);
			if (!rc)
				rc = buf_putc(out, '=');
			if (!rc)
				rc = buf_append(out, qp[i].v, qp[i].vlen);
		}
	}
	buf_fini(&scratch);
	buf_fini(&tmp);
	free(qp);
	return rc;
}

/* Appends a header value trimmed, with every whitespace run (including the
 * CRLF of an obsolete folded line) reduced to one space (step 4). */
static int append_value(const char *v, struct buf *out)
{
	struct slice s = slice_trim(slice_cstr(v));
	int rc = 0;
	/* Words (trimmed, so the first and last are not white space) joined
	 * by one space, each word in one append. */
	for (size_t i = 0; i < s.len && !rc;) {
		if (i)
			rc = buf_putc(out, ' ');
		size_t run = 0;
		while (i + run < s.len && !is_ws(s.p[i + run]))
			run++;
		if (!rc)
			rc = buf_append(out, s.p + i, run);
		i += run;
		while (i < s.len && is_ws(s.p[i]))
			i++;
	}
	return rc;
}

static int cmp_slice(const void *x, const void *y)
{
	const struct slice *a = x, *b = y;
	return cmp_bytes(a->p, a->len, b->p, b->len);
}

/* Splits "a;b;c" into sorted slices; -EINVAL on an empty or repeated name
 * or a character that cannot be in a lower-case header name. */
static int split_signed(const char *sh, struct slice **names, size_t *count)
{
	size_t len = strlen(sh), cap = 1;
	if (len == 0)
		return -EINVAL;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)sh[i];
		if (c == ';')
			cap++;
		else if (!is_tchar(c) || (c >= 'A' && c <= 'Z'))
			return -EINVAL;
	}
	struct slice *v = calloc(cap, sizeof *v);
	if (!v)
		return -ENOMEM;
	size_t n = 0;
	const char *p = sh;
	for (;;) {
		const char *semi = strchr(p, ';');
		size_t l = semi ? (size_t)(semi - p) : strlen(p);
		if (l == 0) {
			free(v);
			return -EINVAL;
		}
		v[n++] = (struct slice){ p, l };
		if (!semi)
			break;
		p = semi + 1;
	}
	qsort(v, n, sizeof *v, cmp_slice);
	for (size_t i = 1; i < n; i++) {
		if (slice_eq(v[i - 1], v[i])) {
			free(v);
			return -EINVAL;
		}
	}
	*names = v;
	*count = n;
	return 0;
}

int sv4_canonical_request(const struct sv4_request *req, const char *signed_headers,
                          const char *payload_hash, bool normalize, struct buf *out)
{
	struct slice *names = NULL;
	size_t nn = 0;
	int rc = split_signed(signed_headers, &names, &nn);
	if (rc)
		return rc;
	/* 1. HTTP method */
	rc = buf_puts(out, req->method ? req->method : "");
	if (!rc)
		rc = buf_putc(out, '\n');
	/* 2. canonical URI */
	if (!rc)
		rc = canonical_uri(req->path ? req->path : "", normalize, out);
	if (!rc)
		rc = buf_putc(out, '\n');
	/* 3. canonical query string */
	if (!rc)
		rc = canonical_query(req->query ? req->query : "", out);
	if (!rc)
		rc = buf_putc(out, '\n');
	/* 4. canonical headers: repeated headers joined with ',' in order */
	for (size_t i = 0; i < nn && !rc; i++) {
		rc = buf_append(out, names[i].p, names[i].len);
		if (!rc)
			rc = buf_putc(out, ':');
		bool first = true;
		for (size_t h = 0; h < req->n_headers && !rc; h++) {
			const struct sv4_header *hd = &req->headers[h];
			if (!hd->name || !slice_eq_nocase(slice_cstr(hd->name), names[i]))
				continue;
			if (!first)
				rc = buf_putc(out, ',');
			if (!rc)
				rc = append_value(hd->value ? hd->value : "", out);
			first = false;
		}
		if (!rc)
			rc = buf_putc(out, '\n');
	}
	if (!rc)
		rc = buf_putc(out, '\n');
	/* 5. signed headers, sorted */
	for (size_t i = 0; i < nn && !rc; i++) {
		if (i)
			rc = buf_putc(out, ';');
		if (!rc)
			rc = buf_append(out, names[i].p, names[i].len);
	}
	if (!rc)
		rc = buf_putc(out, '\n');
	/* 6. payload hash */
	if (!rc)
		rc = buf_puts(out, payload_hash ? payload_hash : "");
	free(names);
	return rc;
}

int sv4_string_to_sign(const char *amz_date, const char *date, const char *region,
                       const char *service, const char *canonical_request, struct buf *out)
{
	char h[65];
	sha256_hex(canonical_request, strlen(canonical_request), h);
	/* Appended piece by piece: a printf here cost a verification 6k
	 * instructions. */
	const char *part[] = { SV4_ALGORITHM "\n", amz_date, "\n", date, "/", region, "/", service,
		               "/aws4_request\n", h };
	int rc = 0;
	for (size_t i = 0; i < sizeof part / sizeof part[0] && !rc; i++)
		rc = buf_puts(out, part[i]);
	return rc;
}

void sv4_signature(const unsigned char key[32], const char *string_to_sign, char sig[65])
{
	unsigned char mac[32];
	sha256_hmac(key, 32, string_to_sign, strlen(string_to_sign), mac);
	hex_encode(mac, sizeof mac, sig);
}

/* ---- signing key cache ------------------------------------------------ */

/* ---- parsing the client's authentication ------------------------------ */

/* Whether signed_headers lists name, lower-cased (name may be in any case). */
static bool lists_header(const char *signed_headers, const char *name)
{
	size_t n = strlen(name);
	for (const char *p = signed_headers; p && *p;) {
		const char *semi = strchr(p, ';');
		size_t l = semi ? (size_t)(semi - p) : strlen(p);
		size_t i = 0;
		while (l == n && i < n && p[i] == (char)tolower((unsigned char)name[i]))
			i++;
		if (l == n && i == n)
			return true;
		p = semi ? semi + 1 : NULL;
	}
	return false;
}

static bool is_lower_hex(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

/* "AKID/YYYYMMDD/region/service/aws4_request" */
static bool parse_credential(const char *v, size_t n, struct sv4_auth *out)
{
	struct slice part[5];
	size_t np = 0;
	const char *p = v, *end = v + n;
	while (np < 5) {
		const char *slash = memchr(p, '/', (size_t)(end - p));
		const char *stop = np < 4 && slash ? slash : end;
		part[np++] = (struct slice){ p, (size_t)(stop - p) };
		if (stop == end)
			break;
		p = stop + 1;
	}
	if (np != 5 || !slice_eq(part[4], SLICE_LIT("aws4_request")))
		return false;
	for (size_t i = 0; i < 4; i++) {
		if (part[i].len == 0)
			return false;
		for (size_t j = 0; j < part[i].len; j++)
			if ((unsigned char)part[i].p[j] <= ' ' || part[i].p[j] == 0x7f)
				return false;
	}
	int ignored;
	return copy_field(out->access_key, sizeof out->access_key, part[0].p, part[0].len) &&
	       part[1].len == 8 && digits(part[1].p, 8, &ignored) &&
	       copy_field(out->date, sizeof out->date, part[1].p, 8) &&
	       copy_field(out->region, sizeof out->region, part[2].p, part[2].len) &&
	       copy_field(out->service, sizeof out->service, part[3].p, part[3].len);
}

static bool parse_signed_headers(const char *v, size_t n, struct sv4_auth *out)
{
	if (!copy_field(out->signed_headers, sizeof out->signed_headers, v, n))
		return false;
	struct slice *names;
	size_t nn;
	if (split_signed(out->signed_headers, &names, &nn))
		return false;
	free(names);
	return true;
}

static bool parse_signature(const char *v, size_t n, struct sv4_auth *out)
{
	return n == 64 && is_lower_hex(v, n) && copy_field(out->signature, sizeof out->signature, v, n);
}

/*
 * Authorization: AWS4-HMAC-SHA256 Credential=.., SignedHeaders=.., Signature=..
 * Components may be separated by ',' with or without spaces; each must
 * appear once, and nothing else may.
 */
static enum sv4_status parse_authz(const char *h, struct sv4_auth *out)
{
	const char *p = h;
	while (is_ws(*p))
		p++;
	const char *alg = p;
	while (*p && !is_ws(*p))
		p++;
	size_t alen = (size_t)(p - alg);
	if (alen == 0)
		return SV4_MALFORMED;
	if (!slice_eq((struct slice){ alg, alen }, SLICE_LIT(SV4_ALGORITHM)))
		return SV4_UNSUPPORTED; /* "AWS AKID:sig" (SigV2), other schemes */
	bool have_cred = false, have_sh = false, have_sig = false;
	for (;;) {
		while (is_ws(*p) || *p == ',')
			p++;
		if (!*p)
			break;
		const char *name = p;
		while (*p && *p != '=' && *p != ',' && !is_ws(*p))
			p++;
		if (*p != '=')
			return SV4_MALFORMED;
		struct slice nm = { name, (size_t)(p - name) };
		const char *val = ++p;
		while (*p && *p != ',' && !is_ws(*p))
			p++;
		size_t vlen = (size_t)(p - val);
		bool ok;
		if (slice_eq(nm, SLICE_LIT("Credential")) && !have_cred)
			ok = have_cred = parse_credential(val, vlen, out);
		else if (slice_eq(nm, SLICE_LIT("SignedHeaders")) && !have_sh)
			ok = have_sh = parse_signed_headers(val, vlen, out);
		else if (slice_eq(nm, SLICE_LIT("Signature")) && !have_sig)
			ok = have_sig = parse_signature(val, vlen, out);
		else
			ok = false;
		if (!ok)
			return SV4_MALFORMED;
	}
	return have_cred && have_sh && have_sig ? SV4_OK : SV4_MALFORMED;
}

/* One decoded query parameter, for the presigned parser. */
struct qfield {
	const char *name;
	char value[2048];
	bool seen;
};

enum { Q_ALG, Q_CRED, Q_DATE, Q_EXPIRES, Q_SH, Q_SIG, Q_TOKEN, Q_SHA, Q_N };

static const char *const q_names[Q_N] = {
	[Q_ALG] = "X-Amz-Algorithm",         [Q_CRED] = "X-Amz-Credential",
	[Q_DATE] = "X-Amz-Date",             [Q_EXPIRES] = "X-Amz-Expires",
	[Q_SH] = "X-Amz-SignedHeaders",      [Q_SIG] = "X-Amz-Signature",
	[Q_TOKEN] = "X-Amz-Security-Token",  [Q_SHA] = "X-Amz-Content-Sha256",
};

bool sv4_is_query_auth_param(const char *name)
{
	for (int i = 0; i < Q_N; i++)
		if (strcasecmp(name, q_names[i]) == 0)
			return true;
	return false;
}

/* Collects the X-Amz-* parameters. Returns SV4_OK, SV4_NO_AUTH when the
 * query holds no SigV4 parameter, or SV4_MALFORMED / SV4_UNSUPPORTED. */
static enum sv4_status scan_query(const char *query, struct qfield *f)
{
	size_t qlen = strlen(query);
	const char *p = query, *end = query + qlen;
	bool v2 = false, any = false;
	struct buf tmp;
	buf_init(&tmp, sizeof f[0].value - 1);
	enum sv4_status st = SV4_OK;
	while (p < end && st == SV4_OK) {
		const char *amp = memchr(p, '&', (size_t)(end - p));
		const char *stop = amp ? amp : end;
		const char *eq = memchr(p, '=', (size_t)(stop - p));
		const char *kend = eq ? eq : stop;
		struct slice k = { p, (size_t)(kend - p) };
		p = stop + 1;
		if (slice_eq(k, SLICE_LIT("AWSAccessKeyId")) || slice_eq(k, SLICE_LIT("Signature")))
			v2 = true;
		int idx = -1;
		for (int i = 0; i < Q_N; i++)
			if (slice_eq(k, slice_cstr(f[i].name)))
				idx = i;
		if (idx < 0)
			continue;
		any = true;
		buf_reset(&tmp);
		if (f[idx].seen || !eq ||
		    sv4_uri_decode(eq + 1, (size_t)(stop - eq - 1), &tmp) != 0 ||
		    memchr(buf_cstr(&tmp), '\0', tmp.len)) {
			st = SV4_MALFORMED;
			break;
		}
		memcpy(f[idx].value, buf_cstr(&tmp), tmp.len + 1);
		f[idx].seen = true;
	}
	buf_fini(&tmp);
	if (st != SV4_OK)
		return st;
	if (!any)
		return v2 ? SV4_UNSUPPORTED : SV4_NO_AUTH;
	return SV4_OK;
}

static enum sv4_status parse_presigned(const struct sv4_request *req, struct qfield *f,
                                       struct sv4_auth *out)
{
	if (!f[Q_ALG].seen)
		return SV4_MALFORMED;
	if (strcmp(f[Q_ALG].value, SV4_ALGORITHM) != 0)
		return SV4_UNSUPPORTED;
	for (int i = 0; i < Q_N; i++)
		if (i != Q_TOKEN && i != Q_SHA && !f[i].seen)
			return SV4_MALFORMED;
	out->presigned = true;
	time_t t;
	/* A number, possibly negative; its range is sv4_verify's business, as
	 * S3 answers an out-of-range one with AccessDenied, not a parse error.
	 * Past 9 digits it only needs to stay out of range. */
	const char *e = f[Q_EXPIRES].value;
	bool neg = *e == '-';
	size_t elen = strlen(e + neg);
	if (elen == 0 || strspn(e + neg, "0123456789") != elen)
		return SV4_MALFORMED;
	int ev = SV4_MAX_PRESIGN_EXPIRES + 1;
	if (elen <= 9)
		digits(e + neg, elen, &ev);
	out->expires = neg ? -(long)ev : ev;
	if (!parse_credential(f[Q_CRED].value, strlen(f[Q_CRED].value), out) ||
	    !parse_signed_headers(f[Q_SH].value, strlen(f[Q_SH].value), out) ||
	    !parse_signature(f[Q_SIG].value, strlen(f[Q_SIG].value), out) ||
	    sv4_parse_amz_date(f[Q_DATE].value, &t) != 0)
		return SV4_MALFORMED;
	memcpy(out->amz_date, f[Q_DATE].value, 17);
	if (f[Q_TOKEN].seen &&
	    !copy_field(out->security_token, sizeof out->security_token, f[Q_TOKEN].value,
	                strlen(f[Q_TOKEN].value)))
		return SV4_MALFORMED;
	/* The payload is unsigned unless the client signed a hash as an
	 * x-amz-content-sha256 header it listed. An X-Amz-Content-Sha256 query
	 * parameter is not one: S3 signs such a URL over UNSIGNED-PAYLOAD and
	 * never holds the body to the parameter, and neither can larder (it
	 * checks the header), so a URL signed over that hash must not verify. */
	const char *ph = SV4_UNSIGNED_PAYLOAD;
	const char *hdr = find_header(req, "x-amz-content-sha256", NULL);
	if (hdr && lists_header(out->signed_headers, "x-amz-content-sha256"))
		ph = hdr;
	struct slice phs = slice_trim(slice_cstr(ph));
	if (!copy_field(out->payload_hash, sizeof out->payload_hash, phs.p, phs.len))
		return SV4_MALFORMED;
	return SV4_OK;
}

enum sv4_status sv4_parse(const struct sv4_request *req, struct sv4_auth *out)
{
	memset(out, 0, sizeof *out);
	/* 16 KiB of value space: not zeroed, a value is read only once seen. */
	struct qfield *f = malloc(Q_N * sizeof *f);
	if (!f)
		return SV4_MALFORMED;
	for (int i = 0; i < Q_N; i++) {
		f[i].name = q_names[i];
		f[i].value[0] = '\0';
		f[i].seen = false;
	}
	enum sv4_status qs = scan_query(req->query ? req->query : "", f);

	size_t nauth = 0;
	const char *authz = find_header(req, "authorization", &nauth);
	enum sv4_status st;
	if (authz) {
		/* Two mechanisms at once is an error in S3, as are two headers. */
		if (nauth > 1 || qs == SV4_OK || qs == SV4_MALFORMED) {
			st = SV4_MALFORMED;
			goto out;
		}
		st = parse_authz(authz, out);
		if (st != SV4_OK)
			goto out;
	} else {
		st = qs == SV4_OK ? parse_presigned(req, f, out) : qs;
		goto out;
	}

	/* Header auth: the date comes from X-Amz-Date, else from Date. A
	 * missing date or payload hash leaves the field empty for sv4_verify
	 * to report as SV4_MISSING_HEADER. */
	size_t n;
	const char *xd = find_header(req, "x-amz-date", &n);
	time_t t;
	if (xd) {
		struct slice s = slice_trim(slice_cstr(xd));
		char tmp[17];
		if (n > 1 || !copy_field(tmp, sizeof tmp, s.p, s.len) || sv4_parse_amz_date(tmp, &t)) {
			st = SV4_MALFORMED;
			goto out;
		}
		memcpy(out->amz_date, tmp, sizeof tmp);
	} else if ((xd = find_header(req, "date", &n)) != NULL) {
		if (n > 1 || httpdate_parse(xd, &t)) {
			st = SV4_MALFORMED;
			goto out;
		}
		sv4_amz_date(t, out->amz_date);
	}
	/* The credential scope's date must be the request's date. */
	if (out->amz_date[0] && memcmp(out->amz_date, out->date, 8) != 0) {
		st = SV4_MALFORMED;
		goto out;
	}
	const char *ph = find_header(req, "x-amz-content-sha256", &n);
	if (ph) {
		struct slice s = slice_trim(slice_cstr(ph));
		if (n > 1 || !copy_field(out->payload_hash, sizeof out->payload_hash, s.p, s.len)) {
			st = SV4_MALFORMED;
			goto out;
		}
	}
	const char *tok = find_header(req, "x-amz-security-token", &n);
	if (tok) {
		struct slice s = slice_trim(slice_cstr(tok));
		if (n > 1 || !copy_field(out->security_token, sizeof out->security_token, s.p, s.len))
			st = SV4_MALFORMED;
	}
out:
	free(f);
	if (st != SV4_OK) {
		bool presigned = out->presigned;
		memset(out, 0, sizeof *out);
		out->presigned = presigned;
	}
	return st;
}

/* ---- verification ----------------------------------------------------- */

static int cmp_cstr(const void *x, const void *y)
{
	return strcmp(*(char *const *)x, *(char *const *)y);
}

/*
 * The lower-cased names of req's headers that keep(name, arg) accepts,
 * sorted, without repeats, joined with sep and appended to out (when not
 * NULL). Returns how many, -EINVAL for a kept name that is not an RFC 9110
 * token, -ENOMEM or -E2BIG.
 */
static int header_names(const struct sv4_request *req,
                        bool (*keep)(const char *name, const void *arg), const void *arg,
                        const char *sep, struct buf *out)
{
	char **v = calloc(req->n_headers ? req->n_headers : 1, sizeof *v);
	if (!v)
		return -ENOMEM;
	size_t n = 0, distinct = 0;
	int rc = 0;
	for (size_t i = 0; i < req->n_headers && !rc; i++) {
		const char *nm = req->headers[i].name;
		if (!nm)
			continue;
		size_t l = strlen(nm);
		char *lc = malloc(l + 1);
		if (!lc) {
			rc = -ENOMEM;
			break;
		}
		for (size_t j = 0; j <= l; j++)
			lc[j] = (char)tolower((unsigned char)nm[j]);
		if (!keep(lc, arg)) {
			free(lc);
			continue;
		}
		v[n++] = lc;
		if (!sv4_is_token(lc, l))
			rc = -EINVAL;
	}
	if (!rc && n > 1)
		qsort(v, n, sizeof *v, cmp_cstr);
	for (size_t i = 0; i < n && !rc; i++) {
		if (i && strcmp(v[i], v[i - 1]) == 0)
			continue;
		if (out && distinct)
			rc = buf_puts(out, sep);
		if (out && !rc)
			rc = buf_puts(out, v[i]);
		distinct++;
	}
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
	return rc ? rc : (int)distinct;
}

/* Whether name (any case) is an x-amz-* header auth's signature does not
 * cover. Compares in place, so the per-request check allocates nothing. */
static bool amz_unsigned(const char *name, const void *arg)
{
	const struct sv4_auth *auth = arg;
	if (strncasecmp(name, "x-amz-", 6) != 0 || lists_header(auth->signed_headers, name))
		return false;
	return !(auth->presigned && strcasecmp(name, "x-amz-content-sha256") == 0);
}

static bool any_unsigned_amz(const struct sv4_request *req, const struct sv4_auth *auth)
{
	for (size_t i = 0; i < req->n_headers; i++)
		if (req->headers[i].name && amz_unsigned(req->headers[i].name, auth))
			return true;
	return false;
}

int sv4_unsigned_amz_headers(const struct sv4_request *req, const struct sv4_auth *auth,
                             struct buf *names)
{
	return header_names(req, amz_unsigned, auth, ", ", names);
}

enum sv4_status sv4_verify(const struct sv4_request *req, const struct sv4_auth *auth,
                           const char *secret, time_t now, unsigned max_skew_s,
                           unsigned char signing_key[32])
{
	time_t t;
	if (!auth->amz_date[0] || !auth->payload_hash[0])
		return SV4_MISSING_HEADER;
	if (sv4_parse_amz_date(auth->amz_date, &t) || strncmp(auth->amz_date, auth->date, 8) != 0)
		return SV4_MALFORMED;
	/* The host must be signed, and so must the header the date came from;
	 * a payload hash the client sent must be signed so nobody can swap the
	 * body and its hash together. */
	if (!lists_header(auth->signed_headers, "host"))
		return SV4_MISSING_HEADER;
	if (!auth->presigned) {
		const char *dh = find_header(req, "x-amz-date", NULL) ? "x-amz-date" : "date";
		if (!lists_header(auth->signed_headers, dh))
			return SV4_MISSING_HEADER;
		if (find_header(req, "x-amz-content-sha256", NULL) &&
		    !lists_header(auth->signed_headers, "x-amz-content-sha256"))
			return SV4_MISSING_HEADER;
	}

	if (any_unsigned_amz(req, auth))
		return SV4_UNSIGNED_HEADER;

	if (auth->presigned) {
		if (auth->expires < 1 || auth->expires > SV4_MAX_PRESIGN_EXPIRES)
			return SV4_BAD_EXPIRES;
		if (now < t - (time_t)max_skew_s)
			return SV4_NOT_YET_VALID;
		if (now > t + (time_t)auth->expires)
			return SV4_EXPIRED;
	} else {
		time_t d = now > t ? now - t : t - now;
		if (d > (time_t)max_skew_s)
			return SV4_SKEWED;
	}

	struct buf creq, sts;
	buf_init(&creq, CREQ_MAX);
	buf_init(&sts, STS_MAX);
	/* Sized for a usual request at once (a failure is retried by the
	 * appends): each doubling from 64 bytes was a realloc. */
	(void)buf_reserve(&creq, CREQ_USUAL);
	(void)buf_reserve(&sts, STS_USUAL);
	enum sv4_status st = SV4_MALFORMED;
	unsigned char key[32];
	char sig[65];
	if (sv4_canonical_request(req, auth->signed_headers, auth->payload_hash, false, &creq) ||
	    sv4_string_to_sign(auth->amz_date, auth->date, auth->region, auth->service,
	                       buf_cstr(&creq), &sts) ||
	    sv4_signing_key(auth->access_key, secret, auth->date, auth->region, auth->service, key))
		goto done; /* as when the canonical request cannot be built: no key, no match */
	sv4_signature(key, buf_cstr(&sts), sig);
	if (ct_equal(sig, 64, auth->signature, strnlen(auth->signature, sizeof auth->signature))) {
		st = SV4_OK;
		if (signing_key)
			memcpy(signing_key, key, 32);
	} else {
		st = SV4_BAD_SIGNATURE;
	}
	OPENSSL_cleanse(key, sizeof key);
done:
	buf_fini(&creq);
	buf_fini(&sts);
	return st;
}

/* ---- signing for upstream --------------------------------------------- */

/* Headers a proxy on the way may add, drop or rewrite (RFC 9110 section
 * 7.6.1 hop-by-hop fields, plus the ones listed in sigv4.h). */
static bool excluded_header(const char *name)
{
	static const char *const skip[] = {
		"user-agent", "expect", "content-length", "authorization",
	};
	if (hdr_hop_by_hop(name))
		return true;
	for (size_t i = 0; i < sizeof skip / sizeof skip[0]; i++)
		if (strcasecmp(name, skip[i]) == 0)
			return true;
	return strncasecmp(name, "proxy-", 6) == 0;
}

static bool signable(const char *name, const void *arg)
{
	(void)arg;
	return !excluded_header(name);
}

int sv4_sign(const struct sv4_request *req, const struct sv4_creds *creds, const char *region,
             const char *service, struct buf *authz)
{
	const char *host = find_header(req, "host", NULL);
	const char *xd = find_header(req, "x-amz-date", NULL);
	const char *ph = find_header(req, "x-amz-content-sha256", NULL);
	bool token = creds->session_token && creds->session_token[0];
	if (!host || !xd || !ph || (token && !find_header(req, "x-amz-security-token", NULL)))
		return -EINVAL;
	struct slice xs = slice_trim(slice_cstr(xd)), phs = slice_trim(slice_cstr(ph));
	char amz_date[17], date[9], payload[129];
	time_t t;
	if (!copy_field(amz_date, sizeof amz_date, xs.p, xs.len) ||
	    sv4_parse_amz_date(amz_date, &t) ||
	    !copy_field(payload, sizeof payload, phs.p, phs.len))
		return -EINVAL;
	memcpy(date, amz_date, 8);
	date[8] = '\0';

	/* Lower-cased names of every header to sign, sorted, without repeats. */
	struct buf sh, creq, sts;
	buf_init(&sh, sizeof ((struct sv4_auth *)0)->signed_headers - 1);
	buf_init(&creq, CREQ_MAX);
	buf_init(&sts, STS_MAX);
	int rc = header_names(req, signable, NULL, ";", &sh);
	rc = rc < 0 ? rc : 0;
	if (!rc)
		rc = sv4_canonical_request(req, buf_cstr(&sh), payload, false, &creq);
	if (!rc)
		rc = sv4_string_to_sign(amz_date, date, region, service, buf_cstr(&creq), &sts);
	if (!rc) {
		unsigned char key[32];
		char sig[65];
		rc = sv4_signing_key(creds->access_key, creds->secret_key, date, region, service,
		                     key);
		if (!rc)
			sv4_signature(key, buf_cstr(&sts), sig);
		OPENSSL_cleanse(key, sizeof key);
		if (!rc)
			buf_reset(authz);
		const char *parts[] = {
			SV4_ALGORITHM " Credential=", creds->access_key, "/", date, "/", region, "/",
			service, "/aws4_request, SignedHeaders=", buf_cstr(&sh), ", Signature=", sig,
		};
		for (size_t i = 0; i < sizeof parts / sizeof parts[0] && !rc; i++)
			rc = buf_puts(authz, parts[i]);
	}
	buf_fini(&sh);
	buf_fini(&creq);
	buf_fini(&sts);
	return rc;
}

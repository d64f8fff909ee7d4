/* s3req.c - addressing of S3 requests (S3 API "Virtual hosting of buckets"). */
#include "gateway/s3req.h"

#include <ctype.h>
#include <errno.h>
#include <expat.h>
#include <string.h>
#include <strings.h>

#include "auth/sigv4.h"

void s3req_init(struct s3req *r)
{
	memset(r, 0, sizeof *r);
	buf_init(&r->key, 4 * S3_MAX_KEY_BYTES);
	buf_init(&r->list_prefix, S3_MAX_QUERY_BYTES);
	buf_init(&r->list_prefix_spaced, S3_MAX_QUERY_BYTES);
}

void s3req_fini(struct s3req *r)
{
	buf_fini(&r->key);
	buf_fini(&r->list_prefix);
	buf_fini(&r->list_prefix_spaced);
}

bool s3_bucket_name_ok(const char *b, size_t len)
{
	if (len < 3 || len > 255)
		return false;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)b[i];
		if (!isalnum(c) && c != '.' && c != '-' && c != '_')
			return false;
	}
	return true;
}

bool s3_bucket_name_dns_ok(const char *b)
{
	size_t len = strlen(b);
	if (len < 3 || len > 63 || !isalnum((unsigned char)b[0]) || !isalnum((unsigned char)b[len - 1]))
		return false;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)b[i];
		if (!(islower(c) || isdigit(c) || c == '.' || c == '-'))
			return false;
	}
	return true;
}

int s3_query_get(const char *q, const char *name, struct buf *out)
{
	size_t nlen = strlen(name);
	while (q && *q) {
		const char *end = strchr(q, '&');
		size_t len = end ? (size_t)(end - q) : strlen(q);
		const char *eq = memchr(q, '=', len);
		size_t klen = eq ? (size_t)(eq - q) : len;
		/* Parameter names S3 uses need no decoding; compare them raw. */
		if (klen == nlen && memcmp(q, name, nlen) == 0) {
			buf_reset(out);
			if (!eq)
				return 1;
			return sv4_uri_decode(eq + 1, len - klen - 1, out) == 0 ? 1 : -1;
		}
		q = end ? end + 1 : NULL;
	}
	return 0;
}

bool s3_query_names_plain(const char *q)
{
	while (q && *q) {
		size_t len = strcspn(q, "&"), klen = strcspn(q, "=&");
		if (memchr(q, '%', klen))
			return false;
		q += len;
		if (*q == '&')
			q++;
	}
	return true;
}

/* n raw bytes at v, percent-decoded and with each '+' read as a space (as
 * S3 may read a '+' where it expects form encoding), appended to out.
 * *plus: whether they hold a '+'. Returns 0, or -1 (bad escape, no memory). */
static int decode_spaced(const char *v, size_t n, struct buf *out, bool *plus)
{
	const char *end = v + n;
	*plus = false;
	while (v < end) {
		const char *p = memchr(v, '+', (size_t)(end - v));
		size_t run = p ? (size_t)(p - v) : (size_t)(end - v);
		if (sv4_uri_decode(v, run, out) != 0)
			return -1;
		v += run;
		if (v < end) { /* a '+' */
			*plus = true;
			if (buf_putc(out, ' ') != 0)
				return -1;
			v++;
		}
	}
	return 0;
}

/* The raw value of the first parameter called name, decoded by
 * decode_spaced, into out. Returns as s3_query_get. */
static int query_get_spaced(const char *q, const char *name, struct buf *out, bool *plus)
{
	size_t nlen = strlen(name);
	*plus = false;
	buf_reset(out);
	while (q && *q) {
		size_t len = strcspn(q, "&"), klen = strcspn(q, "=&");
		if (klen == nlen && memcmp(q, name, nlen) == 0) {
			const char *v = q + klen + (klen < len);
			return decode_spaced(v, (size_t)(q + len - v), out, plus) == 0 ? 1 : -1;
		}
		q += len;
		if (*q == '&')
			q++;
	}
	return 0;
}

/* How many times the parameter name appears in a raw query. */
static size_t query_count(const char *q, const char *name)
{
	size_t nlen = strlen(name), n = 0;
	while (q && *q) {
		size_t len = strcspn(q, "&");
		size_t klen = strcspn(q, "=&");
		n += klen == nlen && memcmp(q, name, nlen) == 0;
		q += len;
		if (*q == '&')
			q++;
	}
	return n;
}

/* The query parameters of a bucket GET that still make it a listing
 * (ListObjects v1/v2, ListObjectVersions, ListMultipartUploads). Any other
 * parameter (acl, policy, location, ...) makes it a bucket configuration read. */
static bool is_listing_query(const char *q)
{
	static const char *const allowed[] = {
		"list-type", "prefix", "delimiter", "max-keys", "continuation-token",
		"start-after", "fetch-owner", "encoding-type", "marker", "versions",
		"key-marker", "version-id-marker", "uploads", "upload-id-marker",
		"max-uploads", "expected-bucket-owner", "optional-object-attributes",
		"x-id", NULL,
	};
	while (q && *q) {
		const char *end = strchr(q, '&');
		size_t len = end ? (size_t)(end - q) : strlen(q);
		const char *eq = memchr(q, '=', len);
		size_t klen = eq ? (size_t)(eq - q) : len;
		bool ok = klen == 0 || (klen > 6 && strncasecmp(q, "X-Amz-", 6) == 0);
		for (int i = 0; !ok && allowed[i]; i++)
			ok = strlen(allowed[i]) == klen && memcmp(allowed[i], q, klen) == 0;
		if (!ok)
			return false;
		q = end ? end + 1 : NULL;
	}
	return true;
}

/* Host without port, lower-cased, into out; false if it does not fit. */
static bool host_name(const char *host, char *out, size_t n)
{
	size_t len = strcspn(host, ":");
	if (host[0] == '[')
		len = strcspn(host, "]") + 1;
	if (len >= n)
		return false;
	for (size_t i = 0; i < len; i++)
		out[i] = (char)tolower((unsigned char)host[i]);
	out[len] = '\0';
	return true;
}

int s3req_parse(struct s3req *r, const char *method, const char *host, const char *raw_path,
                const char *raw_query, const char *base_domain, enum s3err *err)
{
	r->access = (strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0) ? POL_READ : POL_WRITE;
	/* A '#' starts a fragment, which no client sends: curl would end the
	 * target there on its way upstream, after the policy had read past it
	 * (a listing prefix upstream never sees). */
	if (raw_path[0] != '/' || strchr(raw_path, '#') || (raw_query && strchr(raw_query, '#'))) {
		*err = S3E_INVALID_URI;
		return -1;
	}
	const char *rest = raw_path + 1; /* still percent-encoded */
	char hn[512];
	r->virtual_host = false;
	if (base_domain && *base_domain && host && host_name(host, hn, sizeof hn)) {
		size_t hl = strlen(hn), bl = strlen(base_domain);
		if (hl > bl + 1 && hn[hl - bl - 1] == '.' && strcasecmp(hn + hl - bl, base_domain) == 0) {
			size_t blen = hl - bl - 1;
			if (!s3_bucket_name_ok(hn, blen)) {
				*err = S3E_INVALID_BUCKET_NAME;
				return -1;
			}
			memcpy(r->bucket, hn, blen);
			r->bucket[blen] = '\0';
			r->virtual_host = true;
		}
	}
	if (!r->virtual_host) {
		size_t blen = strcspn(rest, "/");
		if (blen == 0) {
			r->target = S3T_SERVICE;
			r->bucket[0] = '\0';
			return 0;
		}
		/* A bucket name is plain ASCII: decode it anyway, since some
		 * clients escape '.' or '-' needlessly. */
		struct buf b;
		buf_init(&b, sizeof r->bucket - 1);
		int rc = sv4_uri_decode(rest, blen, &b);
		if (rc != 0 || !s3_bucket_name_ok(buf_cstr(&b), b.len)) {
			buf_fini(&b);
			*err = rc == -EINVAL ? S3E_INVALID_URI : S3E_INVALID_BUCKET_NAME;
			return -1;
		}
		memcpy(r->bucket, b.p, b.len + 1);
		buf_fini(&b);
		rest += blen;
		if (*rest == '/')
			rest++;
	}
	buf_reset(&r->key);
	int rc = sv4_uri_decode(rest, strlen(rest), &r->key);
	if (rc != 0 || memchr(buf_cstr(&r->key), '\0', r->key.len)) {
		*err = rc == -E2BIG ? S3E_KEY_TOO_LONG : S3E_INVALID_URI;
		return -1;
	}
	if (r->key.len > S3_MAX_KEY_BYTES) {
		*err = S3E_KEY_TOO_LONG;
		return -1;
	}
	r->target = r->key.len ? S3T_OBJECT : S3T_BUCKET;
	r->listing = false;
	r->list_prefix_plus = false;
	if (r->target == S3T_BUCKET && strcmp(method, "GET") == 0 && is_listing_query(raw_query)) {
		r->listing = true;
		buf_reset(&r->list_prefix);
		/* Two prefixes: the policy would check one and upstream use another. */
		if (s3_query_get(raw_query, "prefix", &r->list_prefix) < 0 ||
		    query_get_spaced(raw_query, "prefix", &r->list_prefix_spaced,
		                     &r->list_prefix_plus) < 0 ||
		    query_count(raw_query, "prefix") > 1) {
			*err = S3E_INVALID_ARGUMENT;
			return -1;
		}
	}
	return 0;
}

/* ---- copy and rename sources ---- */

/* One reading of a source's first len bytes: '+' as itself, or (spaced)
 * as a space. */
static int source_object(const char *src, size_t len, bool spaced,
                         int (*each)(void *, const char *, const char *), void *arg)
{
	struct buf dec;
	buf_init(&dec, 8192);
	bool plus;
	int rc = -1;
	int d = spaced ? decode_spaced(src, len, &dec, &plus) : sv4_uri_decode(src, len, &dec);
	if (d == 0 && strlen(buf_cstr(&dec)) == dec.len) {
		const char *s = buf_cstr(&dec);
		s += *s == '/';
		const char *slash = strchr(s, '/');
		char bucket[sizeof ((struct s3req *)0)->bucket];
		size_t bl = slash ? (size_t)(slash - s) : 0;
		if (bl > 0 && bl < sizeof bucket && slash[1]) {
			memcpy(bucket, s, bl);
			bucket[bl] = '\0';
			rc = each(arg, bucket, slash + 1);
		}
	}
	buf_fini(&dec);
	return rc;
}

int s3_source_objects(const char *src, int (*each)(void *arg, const char *bucket, const char *key),
                      void *arg)
{
	size_t len = strcspn(src, "?");
	int rc = source_object(src, len, false, each, arg);
	if (rc != 0 || !memchr(src, '+', len))
		return rc;
	return source_object(src, len, true, each, arg);
}

/* ---- DeleteObjects bodies ---- */

#define DELETE_MAX_OBJECTS 1000

/* The first member of each parser's state below, for the handler they
 * share. */
struct xml_guard {
	XML_Parser xp;
	bool bad;
};

/* A document type declaration: its entities would make what is checked
 * here differ from what an upstream that does not expand them reads
 * (a DeleteObjects key, a restore's output location). S3's bodies have
 * none: refused. */
static void XMLCALL refuse_doctype(void *ud, const XML_Char *name, const XML_Char *sysid,
                                   const XML_Char *pubid, int has_internal_subset)
{
	(void)name;
	(void)sysid;
	(void)pubid;
	(void)has_internal_subset;
	struct xml_guard *g = ud;
	g->bad = true;
	XML_StopParser(g->xp, XML_FALSE);
}

struct delparse {
	struct xml_guard g;
	int depth;               /* 1: <Delete>, 2: <Object>, 3: <Key>, <VersionId> */
	bool in_key, has_key, has_version;
	unsigned objects;
	struct buf key;
	int (*each)(void *, const char *, bool);
	void *arg;
	int stopped;             /* what each() returned, when nonzero */
};

/* Element names may carry the S3 namespace ("uri name" with the parser's
 * separator): compare the local part. */
static bool local_is(const char *name, const char *want)
{
	const char *sep = strrchr(name, ' ');
	return strcmp(sep ? sep + 1 : name, want) == 0;
}

static void XMLCALL del_start(void *ud, const XML_Char *name, const XML_Char **attrs)
{
	(void)attrs;
	struct delparse *d = ud;
	d->depth++;
	if (d->depth == 1 && !local_is(name, "Delete"))
		d->g.bad = true;
	if (d->depth == 2 && local_is(name, "Object")) {
		d->has_key = d->has_version = false;
		if (++d->objects > DELETE_MAX_OBJECTS)
			d->g.bad = true;
	}
	if (d->depth == 3 && local_is(name, "Key")) {
		if (d->has_key)
			d->g.bad = true; /* two keys: which would upstream take? */
		d->in_key = true;
		buf_reset(&d->key);
	}
	if (d->depth == 3 && local_is(name, "VersionId"))
		d->has_version = true;
	if (d->g.bad || d->stopped)
		XML_StopParser(d->g.xp, XML_FALSE);
}

static void XMLCALL del_text(void *ud, const XML_Char *s, int len)
{
	struct delparse *d = ud;
	if (d->in_key && buf_append(&d->key, s, (size_t)len) != 0) {
		d->g.bad = true; /* over S3's 1,024-byte key limit */
		XML_StopParser(d->g.xp, XML_FALSE);
	}
}

static void XMLCALL del_end(void *ud, const XML_Char *name)
{
	struct delparse *d = ud;
	if (d->depth == 3 && d->in_key) {
		d->in_key = false;
		d->has_key = true;
	} else if (d->depth == 2 && local_is(name, "Object")) {
		if (!d->has_key)
			d->g.bad = true;
		else
			d->stopped = d->each(d->arg, d->key.len ? d->key.p : "", d->has_version);
	}
	d->depth--;
	if (d->g.bad || d->stopped)
		XML_StopParser(d->g.xp, XML_FALSE);
}

int s3_delete_keys(const char *body, size_t len,
                   int (*each)(void *arg, const char *key, bool version), void *arg)
{
	struct delparse d = { .each = each, .arg = arg };
	buf_init(&d.key, 1024);
	d.g.xp = XML_ParserCreateNS(NULL, ' ');
	if (!d.g.xp) {
		buf_fini(&d.key);
		return -1;
	}
	XML_SetUserData(d.g.xp, &d);
	XML_SetElementHandler(d.g.xp, del_start, del_end);
	XML_SetCharacterDataHandler(d.g.xp, del_text);
	XML_SetStartDoctypeDeclHandler(d.g.xp, refuse_doctype);
	enum XML_Status st = XML_Parse(d.g.xp, body, (int)len, XML_TRUE);
	XML_ParserFree(d.g.xp);
	buf_fini(&d.key);
	if (d.stopped)
		return d.stopped;
	return st == XML_STATUS_OK && !d.g.bad && d.objects > 0 ? 0 : -1;
}

/* ---- RestoreObject bodies ---- */

struct restparse {
	struct xml_guard g;
	int depth;
	bool output;
};

static void XMLCALL rest_start(void *ud, const XML_Char *name, const XML_Char **attrs)
{
	(void)attrs;
	struct restparse *p = ud;
	if (++p->depth == 1 && !local_is(name, "RestoreRequest"))
		p->g.bad = true;
	if (local_is(name, "OutputLocation"))
		p->output = true;
	if (p->g.bad || p->output)
		XML_StopParser(p->g.xp, XML_FALSE);
}

static void XMLCALL rest_end(void *ud, const XML_Char *name)
{
	(void)name;
	((struct restparse *)ud)->depth--;
}

int s3_restore_output(const char *body, size_t len)
{
	if (len == 0)
		return 0; /* S3's defaults: nothing is written elsewhere */
	struct restparse p = { 0 };
	p.g.xp = XML_ParserCreateNS(NULL, ' ');
	if (!p.g.xp)
		return -1;
	XML_SetUserData(p.g.xp, &p);
	XML_SetElementHandler(p.g.xp, rest_start, rest_end);
	XML_SetStartDoctypeDeclHandler(p.g.xp, refuse_doctype);
	enum XML_Status st = XML_Parse(p.g.xp, body, (int)len, XML_TRUE);
	XML_ParserFree(p.g.xp);
	if (p.output && !p.g.bad)
		return 1;
	return st == XML_STATUS_OK && !p.g.bad ? 0 : -1;
}

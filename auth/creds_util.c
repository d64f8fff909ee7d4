/*
 * creds_util.c - the small pieces every credential provider uses: error
 * text, the copied environment, bounded fields and files, timestamps and
 * the JSON credentials document of the container endpoint and IMDS.
 */
#include "auth/creds_provider.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <jansson.h>

void creds_seterr(char *err, size_t n, const char *fmt, ...)
{
	if (!err || n == 0)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, n, fmt, ap);
	va_end(ap);
}

void creds_wipe(struct creds *c)
{
	explicit_bzero(c, sizeof *c);
}

/* The value of name, or NULL when unset or empty (the SDKs treat an empty
 * variable as unset). The last definition wins, as with getenv(). */
const char *creds_env_get(const struct env_copy *e, const char *name)
{
	size_t nl = strlen(name);
	const char *val = NULL;
	for (size_t i = 0; i < e->n; i++)
		if (strncmp(e->v[i], name, nl) == 0 && e->v[i][nl] == '=')
			val = e->v[i] + nl + 1;
	return val && *val ? val : NULL;
}

bool creds_env_true(const struct env_copy *e, const char *name)
{
	const char *v = creds_env_get(e, name);
	return v && strcasecmp(v, "true") == 0;
}
/* Copies src into a fixed field; a value that does not fit is an error,
 * never a silent truncation. */
int creds_set_field(char *dst, size_t n, const char *src, const char *what, char *why, size_t whylen)
{
	size_t len = strlen(src);
	if (len >= n) {
		creds_seterr(why, whylen, "%s is too long (%zu bytes, max %zu)", what, len, n - 1);
		return -E2BIG;
	}
	memcpy(dst, src, len + 1);
	return 0;
}

char *creds_trim(char *s)
{
	while (isspace((unsigned char)*s))
		s++;
	size_t len = strlen(s);
	while (len && isspace((unsigned char)s[len - 1]))
		s[--len] = '\0';
	return s;
}

/* Reads a whole file (at most max bytes) into b. Returns 0 or -errno
 * (-E2BIG when the file is larger than max). */
int creds_read_file(const char *path, size_t max, struct buf *b)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	buf_init(b, max);
	char chunk[4096];
	int rc = 0;
	for (;;) {
		ssize_t r = read(fd, chunk, sizeof chunk);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			rc = -errno;
			break;
		}
		if (r == 0)
			break;
		rc = buf_append(b, chunk, (size_t)r);
		if (rc)
			break;
	}
	explicit_bzero(chunk, sizeof chunk);
	close(fd);
	if (rc == 0 && !b->p)
		rc = buf_puts(b, ""); /* empty file: still a valid string */
	if (rc) {
		if (b->p)
			explicit_bzero(b->p, b->len);
		buf_fini(b);
	}
	return rc;
}

void creds_buf_wipe(struct buf *b)
{
	if (b->p)
		explicit_bzero(b->p, b->cap);
	buf_fini(b);
}

/*
 * ISO 8601 / RFC 3339 timestamp as STS, ECS and IMDS write it:
 * "2026-11-21T16:20:00Z", optionally with fractional seconds and a
 * numeric offset ("+00:00" or "+0000") instead of Z.
 */
int creds_parse_iso8601(const char *s, time_t *out)
{
	int Y, M, D, h, m, sec, used = 0;
	if (sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%n", &Y, &M, &D, &h, &m, &sec, &used) != 6 || used != 19)
		return -EINVAL;
	if (M < 1 || M > 12 || D < 1 || D > 31 || h > 23 || m > 59 || sec > 60)
		return -EINVAL;
	const char *p = s + used;
	if (*p == '.') {
		p++;
		if (!isdigit((unsigned char)*p))
			return -EINVAL;
		while (isdigit((unsigned char)*p))
			p++;
	}
	long off = 0;
	if (*p == 'Z' || *p == 'z') {
		p++;
	} else if (*p == '+' || *p == '-') {
		int sign = *p == '-' ? -1 : 1;
		p++;
		if (!isdigit((unsigned char)p[0]) || !isdigit((unsigned char)p[1]))
			return -EINVAL;
		int oh = (p[0] - '0') * 10 + (p[1] - '0');
		p += 2;
		if (*p == ':')
			p++;
		if (!isdigit((unsigned char)p[0]) || !isdigit((unsigned char)p[1]))
			return -EINVAL;
		int om = (p[0] - '0') * 10 + (p[1] - '0');
		p += 2;
		if (oh > 23 || om > 59)
			return -EINVAL;
		off = sign * (oh * 3600L + om * 60L);
	} else {
		return -EINVAL;
	}
	if (*p != '\0')
		return -EINVAL;
	struct tm tm = { 0 };
	tm.tm_year = Y - 1900;
	tm.tm_mon = M - 1;
	tm.tm_mday = D;
	tm.tm_hour = h;
	tm.tm_min = m;
	tm.tm_sec = sec;
	time_t t = timegm(&tm);
	if (t == (time_t)-1)
		return -EINVAL;
	*out = t - off;
	return 0;
}

/* ---- JSON credentials (container, IMDS) ----------------------------- */

/*
 * {"AccessKeyId":..., "SecretAccessKey":..., "Token":..., "Expiration":...}
 * as ECS/EKS and IMDS return it. IMDS adds "Code": "Success".
 */
int creds_parse_json(const char *body, size_t len, struct creds *out, char *why, size_t whylen)
{
	json_error_t jerr;
	json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root || !json_is_object(root)) {
		creds_seterr(why, whylen, "credentials response is not a JSON object");
		json_decref(root);
		return -EINVAL;
	}
	int rc = -EINVAL;
	const char *code = json_string_value(json_object_get(root, "Code"));
	const char *akid = json_string_value(json_object_get(root, "AccessKeyId"));
	const char *secret = json_string_value(json_object_get(root, "SecretAccessKey"));
	const char *token = json_string_value(json_object_get(root, "Token"));
	const char *exp = json_string_value(json_object_get(root, "Expiration"));
	memset(out, 0, sizeof *out);
	if (code && strcmp(code, "Success") != 0) {
		creds_seterr(why, whylen, "credentials response has Code \"%.64s\"", code);
		goto out;
	}
	if (!akid || !*akid || !secret || !*secret) {
		creds_seterr(why, whylen, "credentials response lacks AccessKeyId or SecretAccessKey");
		goto out;
	}
	if (creds_set_field(out->access_key, sizeof out->access_key, akid, "AccessKeyId", why, whylen) ||
	    creds_set_field(out->secret_key, sizeof out->secret_key, secret, "SecretAccessKey", why, whylen) ||
	    (token && creds_set_field(out->session_token, sizeof out->session_token, token, "Token", why,
	                              whylen)))
		goto out;
	if (exp && creds_parse_iso8601(exp, &out->expiration) != 0) {
		creds_seterr(why, whylen, "credentials response has a bad Expiration \"%.40s\"", exp);
		goto out;
	}
	rc = 0;
out:
	/* jansson keeps its own copy of the secret; scrub it before freeing. */
	if (secret)
		explicit_bzero((char *)secret, strlen(secret));
	if (token)
		explicit_bzero((char *)token, strlen(token));
	json_decref(root);
	if (rc)
		creds_wipe(out);
	return rc;
}

/*
 * creds.c - the upstream credentials chain (env, shared files, web
 * identity, container, IMDSv2) and the thread that keeps temporary
 * credentials fresh.
 *
 * The order and the environment variables follow the AWS SDKs' default
 * chain (see "Standardized credential providers" in the AWS SDKs and Tools
 * Reference Guide). Each provider answers one of three ways:
 *   SRC_OK            it produced credentials: the chain stops;
 *   SRC_NOT_SET       it is not configured (or unsupported): try the next;
 *   negative          it is configured but failed: the chain stops with an
 *                     error, so a broken explicit setting never silently
 *                     falls through to a different identity (botocore and
 *                     the Go SDK behave the same way).
 * IMDS is the exception: it is never configured explicitly, so its failure
 * only means "nothing found".
 *
 * Secrets (secret keys, session tokens, web identity and container
 * authorization tokens) are never logged; key ids are logged masked.
 */
#include "auth/creds.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <curl/curl.h>
#include <expat.h>
#include <jansson.h>

#include "base/buf.h"
#include "base/clock.h"
#include "base/log.h"
#include "net/transfer.h"

#define TOPIC "creds"

#define CREDS_MAGIC 0x63726473u /* "crds" */

/* Caps on everything read from files or the network. */
#define MAX_HTTP_BODY    (64 * 1024)
#define MAX_TOKEN_FILE   (32 * 1024) /* STS allows 20,000 chars of JWT */
#define MAX_PROFILE_FILE (1024 * 1024)
#define MAX_XML_TEXT     8192

/* Network timeouts in milliseconds: {connect, total}. IMDS is short so a
 * machine without it fails fast. */
#define IMDS_CONNECT_MS      1000
#define IMDS_TOTAL_MS        2000
#define CONTAINER_CONNECT_MS 2000
#define CONTAINER_TOTAL_MS   5000
#define STS_CONNECT_MS       5000
#define STS_TOTAL_MS         15000

#define IMDS_TOKEN_TTL_S     "21600"
#define CONTAINER_HOST_URL   "http://169.254.170.2"

/* Refresh retry schedule: 1 s doubling to 60 s. */
#define RETRY_MIN_S 1
#define RETRY_MAX_S 60

enum { SRC_OK = 0, SRC_NOT_SET = 1 };

enum source {
	SOURCE_ENV,
	SOURCE_PROFILE,
	SOURCE_WEB_IDENTITY,
	SOURCE_CONTAINER,
	SOURCE_IMDS,
	SOURCE_COUNT
};

static const char *const source_names[SOURCE_COUNT] = {
	"env", "profile", "web-identity", "container", "imds",
};

/* The AWS_* variables (and HOME) copied at creation, so the refresh thread
 * sees the same settings as the first resolution. */
struct env_copy {
	char **v;
	size_t n;
};

/* What every fetcher gets. stop is NULL during creation; the refresh
 * thread passes its flag so destroy can abort a transfer in flight. */
struct src_ctx {
	const struct env_copy *env;
	const char *region;
	atomic_bool *stop;
};

struct creds_provider {
	unsigned magic;
	enum source src;
	unsigned margin_s;
	struct env_copy env;
	char *region;

	pthread_mutex_t lock;
	pthread_cond_t wake;  /* CLOCK_MONOTONIC */
	struct creds cur;     /* under lock */
	atomic_bool stop;
	atomic_ulong refreshes;
	bool thread_started;
	pthread_t thread;
};

static void seterr(char *err, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void seterr(char *err, size_t n, const char *fmt, ...)
{
	if (!err || n == 0)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, n, fmt, ap);
	va_end(ap);
}

/* "ASIAXXXXXXXXEXAMPLE" -> "ASIA...MPLE": enough to tell keys apart. */
static void mask_key(const char *key, char *out, size_t n)
{
	size_t len = strlen(key);
	if (len <= 8)
		snprintf(out, n, "%.2s...", key);
	else
		snprintf(out, n, "%.4s...%s", key, key + len - 4);
}

static void creds_wipe(struct creds *c)
{
	explicit_bzero(c, sizeof *c);
}

/* ---- environment ---------------------------------------------------- */

extern char **environ;

static bool env_wanted(const char *kv)
{
	return strncmp(kv, "AWS_", 4) == 0 || strncmp(kv, "HOME=", 5) == 0;
}

static int env_copy_init(struct env_copy *e, const char *const *envp)
{
	const char *const *src = envp ? envp : (const char *const *)environ;
	size_t n = 0;
	e->v = NULL;
	e->n = 0;
	for (size_t i = 0; src && src[i]; i++)
		if (env_wanted(src[i]))
			n++;
	e->v = calloc(n + 1, sizeof *e->v);
	if (!e->v)
		return -ENOMEM;
	for (size_t i = 0; src && src[i]; i++) {
		if (!env_wanted(src[i]))
			continue;
		e->v[e->n] = strdup(src[i]);
		if (!e->v[e->n])
			return -ENOMEM;
		e->n++;
	}
	return 0;
}

static void env_copy_fini(struct env_copy *e)
{
	for (size_t i = 0; i < e->n; i++) {
		explicit_bzero(e->v[i], strlen(e->v[i]));
		free(e->v[i]);
	}
	free(e->v);
	e->v = NULL;
	e->n = 0;
}

/* The value of name, or NULL when unset or empty (the SDKs treat an empty
 * variable as unset). The last definition wins, as with getenv(). */
static const char *env_get(const struct env_copy *e, const char *name)
{
	size_t nl = strlen(name);
	const char *val = NULL;
	for (size_t i = 0; i < e->n; i++)
		if (strncmp(e->v[i], name, nl) == 0 && e->v[i][nl] == '=')
			val = e->v[i] + nl + 1;
	return val && *val ? val : NULL;
}

static bool env_true(const struct env_copy *e, const char *name)
{
	const char *v = env_get(e, name);
	return v && strcasecmp(v, "true") == 0;
}

/* ---- small helpers -------------------------------------------------- */

/* Copies src into a fixed field; a value that does not fit is an error,
 * never a silent truncation. */
static int set_field(char *dst, size_t n, const char *src, const char *what, char *why, size_t whylen)
{
	size_t len = strlen(src);
	if (len >= n) {
		seterr(why, whylen, "%s is too long (%zu bytes, max %zu)", what, len, n - 1);
		return -E2BIG;
	}
	memcpy(dst, src, len + 1);
	return 0;
}

static char *trim(char *s)
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
static int read_file(const char *path, size_t max, struct buf *b)
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

static void buf_wipe(struct buf *b)
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
static int parse_iso8601(const char *s, time_t *out)
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

/* ---- HTTP (libcurl easy, blocking) ---------------------------------- */

struct http_call {
	const char *method;          /* "GET", "PUT" or "POST" */
	const char *url;
	const char *const *headers;  /* NULL-terminated "Name: value", may be NULL */
	const char *body;            /* POST/PUT body, may be NULL */
	long connect_ms, total_ms;
	bool no_proxy;               /* metadata endpoints never go via a proxy */
	atomic_bool *stop;           /* aborts the transfer when set */
};

static size_t http_body(struct transfer *t, void *ud, const char *data, size_t n)
{
	struct buf *b = ud;
	(void)t;
	if (buf_append(b, data, n) != 0)
		return 0; /* over the cap: curl fails with CURLE_WRITE_ERROR */
	return n;
}

static const struct transfer_ops http_ops = { .body = http_body };

static int http_progress_cb(void *ud, curl_off_t dlt, curl_off_t dln, curl_off_t ult, curl_off_t uln)
{
	atomic_bool *stop = ud;
	return stop && atomic_load(stop) ? 1 : 0;
}

/*
 * Performs one request. On return 0, *status holds the HTTP status and
 * resp the body (capped at MAX_HTTP_BODY). Returns -EIO with a reason in
 * why when no response came back. The caller owns resp (buf_fini).
 */
static int http_do(const struct http_call *c, struct buf *resp, long *status, char *why, size_t whylen)
{
	buf_init(resp, MAX_HTTP_BODY);
	*status = 0;
	struct transfer x;
	transfer_init(&x, &http_ops, resp, NULL, NULL);
	struct curl_slist *hdrs = NULL;
	int rc = 0;
	for (size_t i = 0; c->headers && c->headers[i]; i++) {
		struct curl_slist *t = curl_slist_append(hdrs, c->headers[i]);
		if (!t) {
			rc = -ENOMEM;
			goto out;
		}
		hdrs = t;
	}
	/* No "Expect: 100-continue" round trip for the STS form body. */
	struct curl_slist *t = curl_slist_append(hdrs, "Expect:");
	if (!t) {
		rc = -ENOMEM;
		goto out;
	}
	hdrs = t;
	rc = transfer_prepare(&x, c->url, hdrs); /* x owns (and wipes) the list from here */
	hdrs = NULL;
	if (rc) {
		seterr(why, whylen, "curl_easy_init() failed");
		goto out;
	}

	CURL *h = x.easy;
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, c->connect_ms);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, c->total_ms);
	curl_easy_setopt(h, CURLOPT_USERAGENT, "larder-creds");
	curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, http_progress_cb);
	curl_easy_setopt(h, CURLOPT_XFERINFODATA, c->stop);
	curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
	if (c->no_proxy)
		curl_easy_setopt(h, CURLOPT_NOPROXY, "*");
	if (strcmp(c->method, "GET") != 0) {
		const char *body = c->body ? c->body : "";
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
		if (strcmp(c->method, "POST") != 0)
			curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, c->method);
	}

	CURLcode cc = transfer_perform(&x);
	if (cc != CURLE_OK) {
		if (cc == CURLE_WRITE_ERROR)
			seterr(why, whylen, "%s %s: response larger than %d bytes", c->method, c->url,
			       MAX_HTTP_BODY);
		else
			seterr(why, whylen, "%s %s: %s", c->method, c->url, transfer_strerror(&x, cc));
		rc = -EIO;
		goto out;
	}
	*status = x.status;
	if (!resp->p)
		rc = buf_puts(resp, "");
out:
	/* The header list may hold an authorization token. */
	for (struct curl_slist *s = hdrs; s; s = s->next)
		explicit_bzero(s->data, strlen(s->data));
	curl_slist_free_all(hdrs);
	transfer_fini(&x);
	if (rc)
		buf_wipe(resp);
	return rc;
}

/* ---- JSON credentials (container, IMDS) ----------------------------- */

/*
 * {"AccessKeyId":..., "SecretAccessKey":..., "Token":..., "Expiration":...}
 * as ECS/EKS and IMDS return it. IMDS adds "Code": "Success".
 */
static int parse_json_creds(const char *body, size_t len, struct creds *out, char *why, size_t whylen)
{
	json_error_t jerr;
	json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root || !json_is_object(root)) {
		seterr(why, whylen, "credentials response is not a JSON object");
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
		seterr(why, whylen, "credentials response has Code \"%.64s\"", code);
		goto out;
	}
	if (!akid || !*akid || !secret || !*secret) {
		seterr(why, whylen, "credentials response lacks AccessKeyId or SecretAccessKey");
		goto out;
	}
	if (set_field(out->access_key, sizeof out->access_key, akid, "AccessKeyId", why, whylen) ||
	    set_field(out->secret_key, sizeof out->secret_key, secret, "SecretAccessKey", why, whylen) ||
	    (token && set_field(out->session_token, sizeof out->session_token, token, "Token", why,
	                        whylen)))
		goto out;
	if (exp && parse_iso8601(exp, &out->expiration) != 0) {
		seterr(why, whylen, "credentials response has a bad Expiration \"%.40s\"", exp);
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

/* ---- 1. environment ------------------------------------------------- */

static int src_env(const struct src_ctx *x, struct creds *out, char *why, size_t whylen)
{
	const char *akid = env_get(x->env, "AWS_ACCESS_KEY_ID");
	const char *secret = env_get(x->env, "AWS_SECRET_ACCESS_KEY");
	const char *token = env_get(x->env, "AWS_SESSION_TOKEN");
	if (!akid && !secret)
		return SRC_NOT_SET;
	if (!akid || !secret) {
		seterr(why, whylen, "%s is set but %s is not", akid ? "AWS_ACCESS_KEY_ID" : "AWS_SECRET_ACCESS_KEY",
		       akid ? "AWS_SECRET_ACCESS_KEY" : "AWS_ACCESS_KEY_ID");
		return -EINVAL;
	}
	memset(out, 0, sizeof *out);
	if (set_field(out->access_key, sizeof out->access_key, akid, "AWS_ACCESS_KEY_ID", why, whylen) ||
	    set_field(out->secret_key, sizeof out->secret_key, secret, "AWS_SECRET_ACCESS_KEY", why, whylen) ||
	    (token && set_field(out->session_token, sizeof out->session_token, token, "AWS_SESSION_TOKEN", why,
	                        whylen))) {
		creds_wipe(out);
		return -E2BIG;
	}
	return SRC_OK;
}

/* ---- 2. shared credentials and config files ------------------------- */

/* One profile's settings merged from both files. */
struct profile {
	const char *name;
	bool found;
	char *key, *secret, *token;
	char unsupported[48]; /* the first setting we cannot honour, or "" */
};

static void profile_set(char **slot, const char *v)
{
	char *d = strdup(v);
	if (!d)
		return; /* treated as missing */
	if (*slot) {
		explicit_bzero(*slot, strlen(*slot));
		free(*slot);
	}
	*slot = d;
}

static void profile_fini(struct profile *pr)
{
	char **slots[] = { &pr->key, &pr->secret, &pr->token };
	for (size_t i = 0; i < sizeof slots / sizeof slots[0]; i++) {
		if (*slots[i]) {
			explicit_bzero(*slots[i], strlen(*slots[i]));
			free(*slots[i]);
			*slots[i] = NULL;
		}
	}
}

/* Settings that make a profile something other than static keys. */
static const char *const unsupported_keys[] = {
	"role_arn", "source_profile", "credential_source", "credential_process",
	"web_identity_token_file", "sso_session", "sso_start_url", "sso_account_id",
	"login_session",
};

static void profile_apply(struct profile *pr, const char *k, const char *v)
{
	if (strcasecmp(k, "aws_access_key_id") == 0) {
		profile_set(&pr->key, v);
	} else if (strcasecmp(k, "aws_secret_access_key") == 0) {
		profile_set(&pr->secret, v);
	} else if (strcasecmp(k, "aws_session_token") == 0 ||
	           strcasecmp(k, "aws_security_token") == 0) { /* legacy name, botocore reads it */
		profile_set(&pr->token, v);
	} else {
		for (size_t i = 0; i < sizeof unsupported_keys / sizeof unsupported_keys[0]; i++)
			if (strcasecmp(k, unsupported_keys[i]) == 0 && !pr->unsupported[0])
				snprintf(pr->unsupported, sizeof pr->unsupported, "%s", unsupported_keys[i]);
	}
}

/*
 * Does section header text sec (between the brackets, trimmed) name the
 * profile? In the credentials file a section is the bare profile name; in
 * the config file it is "profile NAME", except plain "default".
 */
static bool section_is_profile(const char *sec, const char *name, bool config_file)
{
	if (!config_file)
		return strcmp(sec, name) == 0;
	if (strcmp(sec, "default") == 0)
		return strcmp(name, "default") == 0;
	if (strncmp(sec, "profile", 7) != 0 || !isspace((unsigned char)sec[7]))
		return false;
	const char *p = sec + 7;
	while (isspace((unsigned char)*p))
		p++;
	return strcmp(p, name) == 0;
}

/*
 * A small reader for the AWS shared-file dialect of INI: "[section]",
 * "key = value", full-line comments with # or ;, and indented lines that
 * continue the previous key (nested settings such as "s3 =\n  addressing_style
 * = path"), which are ignored. Values are taken verbatim, as botocore does:
 * there are no inline comments. Written here rather than with inih because
 * inih's fixed line buffer (200 bytes by default) is shorter than a session
 * token.
 */
static void profile_parse(struct profile *pr, char *text, bool config_file)
{
	bool in_profile = false;
	char *save = NULL;
	for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		bool indented = *line == ' ' || *line == '\t';
		char *s = trim(line);
		if (*s == '\0' || *s == '#' || *s == ';')
			continue;
		if (*s == '[') {
			char *end = strrchr(s, ']');
			if (!end) {
				in_profile = false;
				continue;
			}
			*end = '\0';
			in_profile = section_is_profile(trim(s + 1), pr->name, config_file);
			if (in_profile)
				pr->found = true;
			continue;
		}
		if (!in_profile || indented)
			continue;
		char *eq = strchr(s, '=');
		if (!eq)
			continue;
		*eq = '\0';
		profile_apply(pr, trim(s), trim(eq + 1));
	}
}

/* "~/x" -> "$HOME/x". Returns a malloc'd path or NULL. */
static char *expand_home(const struct env_copy *env, const char *path)
{
	const char *home = env_get(env, "HOME");
	if (strncmp(path, "~/", 2) == 0) {
		if (!home)
			return NULL;
		char *out = NULL;
		return asprintf(&out, "%s/%s", home, path + 2) < 0 ? NULL : out;
	}
	return strdup(path);
}

static char *default_path(const struct env_copy *env, const char *var, const char *leaf)
{
	const char *v = env_get(env, var);
	if (v)
		return expand_home(env, v);
	const char *home = env_get(env, "HOME");
	if (!home)
		return NULL;
	char *out = NULL;
	return asprintf(&out, "%s/.aws/%s", home, leaf) < 0 ? NULL : out;
}

/* Parses one file into pr. A missing file is not an error. */
static int profile_load(struct profile *pr, const char *path, bool config_file, char *why, size_t whylen)
{
	if (!path)
		return 0;
	struct buf b;
	int rc = read_file(path, MAX_PROFILE_FILE, &b);
	if (rc == -ENOENT || rc == -ENOTDIR)
		return 0;
	if (rc) {
		seterr(why, whylen, "cannot read %s: %s", path, strerror(-rc));
		return rc;
	}
	profile_parse(pr, b.p, config_file);
	buf_wipe(&b);
	return 0;
}

static int src_profile(const struct src_ctx *x, struct creds *out, char *why, size_t whylen)
{
	const char *named = env_get(x->env, "AWS_PROFILE");
	if (!named)
		named = env_get(x->env, "AWS_DEFAULT_PROFILE");
	struct profile pr = { .name = named ? named : "default" };
	char *cred_path = default_path(x->env, "AWS_SHARED_CREDENTIALS_FILE", "credentials");
	char *conf_path = default_path(x->env, "AWS_CONFIG_FILE", "config");
	/* Config first, then the credentials file overrides key by key. */
	int rc = profile_load(&pr, conf_path, true, why, whylen);
	if (rc == 0)
		rc = profile_load(&pr, cred_path, false, why, whylen);
	if (rc)
		goto out;
	if (!pr.found) {
		if (named) {
			seterr(why, whylen, "profile \"%s\" (AWS_PROFILE) not found in %s or %s", pr.name,
			       cred_path ? cred_path : "(no credentials file)",
			       conf_path ? conf_path : "(no config file)");
			rc = -ENOENT;
		} else {
			rc = SRC_NOT_SET;
		}
		goto out;
	}
	if (pr.unsupported[0]) {
		/* role_arn & co. take precedence over static keys in the SDKs, so
		 * the keys of such a profile are not used either. */
		log_warn(TOPIC, "profile \"%s\" uses %s, which larder does not support; skipping it", pr.name,
		         pr.unsupported);
		seterr(why, whylen, "profile \"%s\" uses unsupported %s", pr.name, pr.unsupported);
		rc = SRC_NOT_SET;
		goto out;
	}
	if (!pr.key && !pr.secret) {
		if (named) {
			seterr(why, whylen, "profile \"%s\" has no aws_access_key_id/aws_secret_access_key", pr.name);
			rc = -EINVAL;
		} else {
			rc = SRC_NOT_SET;
		}
		goto out;
	}
	if (!pr.key || !pr.secret) {
		seterr(why, whylen, "profile \"%s\" has %s without %s", pr.name,
		       pr.key ? "aws_access_key_id" : "aws_secret_access_key",
		       pr.key ? "aws_secret_access_key" : "aws_access_key_id");
		rc = -EINVAL;
		goto out;
	}
	memset(out, 0, sizeof *out);
	if (set_field(out->access_key, sizeof out->access_key, pr.key, "aws_access_key_id", why, whylen) ||
	    set_field(out->secret_key, sizeof out->secret_key, pr.secret, "aws_secret_access_key", why, whylen) ||
	    (pr.token && set_field(out->session_token, sizeof out->session_token, pr.token,
	                           "aws_session_token", why, whylen))) {
		creds_wipe(out);
		rc = -E2BIG;
		goto out;
	}
	log_debug(TOPIC, "using profile \"%s\"", pr.name);
	rc = SRC_OK;
out:
	profile_fini(&pr);
	free(cred_path);
	free(conf_path);
	return rc;
}

/* ---- 3. web identity (STS AssumeRoleWithWebIdentity) ---------------- */

enum sts_field { STS_NONE, STS_AKID, STS_SECRET, STS_TOKEN, STS_EXP, STS_CODE, STS_MESSAGE, STS_NFIELDS };

struct sts_parse {
	bool in_creds;
	bool in_error;
	enum sts_field cur;
	struct buf text;
	bool too_long;
	char *val[STS_NFIELDS];
};

static const char *local_name(const char *n)
{
	const char *c = strrchr(n, ':');
	return c ? c + 1 : n;
}

static void XMLCALL sts_start(void *ud, const XML_Char *name, const XML_Char **attrs)
{
	struct sts_parse *sp = ud;
	const char *n = local_name(name);
	sp->cur = STS_NONE;
	if (strcmp(n, "Credentials") == 0) {
		sp->in_creds = true;
	} else if (strcmp(n, "Error") == 0) {
		sp->in_error = true;
	} else if (sp->in_creds) {
		if (strcmp(n, "AccessKeyId") == 0)
			sp->cur = STS_AKID;
		else if (strcmp(n, "SecretAccessKey") == 0)
			sp->cur = STS_SECRET;
		else if (strcmp(n, "SessionToken") == 0)
			sp->cur = STS_TOKEN;
		else if (strcmp(n, "Expiration") == 0)
			sp->cur = STS_EXP;
	} else if (sp->in_error) {
		if (strcmp(n, "Code") == 0)
			sp->cur = STS_CODE;
		else if (strcmp(n, "Message") == 0)
			sp->cur = STS_MESSAGE;
	}
	buf_reset(&sp->text);
}

static void XMLCALL sts_end(void *ud, const XML_Char *name)
{
	struct sts_parse *sp = ud;
	const char *n = local_name(name);
	if (sp->cur != STS_NONE && !sp->val[sp->cur]) {
		sp->val[sp->cur] = strdup(buf_cstr(&sp->text));
	}
	sp->cur = STS_NONE;
	buf_reset(&sp->text);
	if (strcmp(n, "Credentials") == 0)
		sp->in_creds = false;
	else if (strcmp(n, "Error") == 0)
		sp->in_error = false;
}

static void XMLCALL sts_text(void *ud, const XML_Char *s, int len)
{
	struct sts_parse *sp = ud;
	if (sp->cur == STS_NONE || len <= 0)
		return;
	if (buf_append(&sp->text, s, (size_t)len) != 0)
		sp->too_long = true;
}

static void sts_parse_fini(struct sts_parse *sp)
{
	buf_wipe(&sp->text);
	for (int i = 0; i < STS_NFIELDS; i++) {
		if (sp->val[i]) {
			explicit_bzero(sp->val[i], strlen(sp->val[i]));
			free(sp->val[i]);
		}
	}
}

/*
 * Parses an AssumeRoleWithWebIdentityResponse (status 200) or an
 * ErrorResponse (any other status) into out / why.
 * https://docs.aws.amazon.com/STS/latest/APIReference/API_AssumeRoleWithWebIdentity.html
 */
static int sts_parse_response(const char *body, size_t len, long status, struct creds *out, char *why,
                              size_t whylen)
{
	struct sts_parse sp = { 0 };
	buf_init(&sp.text, MAX_XML_TEXT);
	XML_Parser xp = XML_ParserCreate(NULL);
	if (!xp) {
		seterr(why, whylen, "XML_ParserCreate() failed");
		return -ENOMEM;
	}
	XML_SetUserData(xp, &sp);
	XML_SetElementHandler(xp, sts_start, sts_end);
	XML_SetCharacterDataHandler(xp, sts_text);
	int rc = -EINVAL;
	memset(out, 0, sizeof *out);
	if (len > INT32_MAX || XML_Parse(xp, body, (int)len, 1) != XML_STATUS_OK) {
		seterr(why, whylen, "STS answered %ld with unparsable XML (%s)", status,
		       XML_ErrorString(XML_GetErrorCode(xp)));
		goto out;
	}
	if (sp.too_long) {
		seterr(why, whylen, "STS response has an oversized field");
		goto out;
	}
	if (status != 200) {
		seterr(why, whylen, "STS answered %ld: %.64s: %.200s", status,
		       sp.val[STS_CODE] ? sp.val[STS_CODE] : "(no code)",
		       sp.val[STS_MESSAGE] ? sp.val[STS_MESSAGE] : "(no message)");
		goto out;
	}
	if (!sp.val[STS_AKID] || !*sp.val[STS_AKID] || !sp.val[STS_SECRET] || !*sp.val[STS_SECRET] ||
	    !sp.val[STS_TOKEN] || !sp.val[STS_EXP]) {
		seterr(why, whylen, "STS response lacks Credentials");
		goto out;
	}
	if (set_field(out->access_key, sizeof out->access_key, trim(sp.val[STS_AKID]), "AccessKeyId", why,
	              whylen) ||
	    set_field(out->secret_key, sizeof out->secret_key, trim(sp.val[STS_SECRET]), "SecretAccessKey",
	              why, whylen) ||
	    set_field(out->session_token, sizeof out->session_token, trim(sp.val[STS_TOKEN]), "SessionToken",
	              why, whylen))
		goto out;
	if (parse_iso8601(trim(sp.val[STS_EXP]), &out->expiration) != 0) {
		seterr(why, whylen, "STS response has a bad Expiration \"%.40s\"", sp.val[STS_EXP]);
		goto out;
	}
	rc = 0;
out:
	XML_ParserFree(xp);
	sts_parse_fini(&sp);
	if (rc)
		creds_wipe(out);
	return rc;
}

/* The STS endpoint: AWS_ENDPOINT_URL_STS, AWS_STS_ENDPOINT_URL, then the
 * regional endpoint (the global one when no region is known). */
static char *sts_endpoint(const struct src_ctx *x)
{
	const char *v = env_get(x->env, "AWS_ENDPOINT_URL_STS");
	if (!v)
		v = env_get(x->env, "AWS_STS_ENDPOINT_URL");
	if (v)
		return strdup(v);
	const char *region = x->region && *x->region ? x->region : env_get(x->env, "AWS_REGION");
	if (!region)
		region = env_get(x->env, "AWS_DEFAULT_REGION");
	char *out = NULL;
	if (!region)
		return strdup("https://sts.amazonaws.com");
	const char *suffix = strncmp(region, "cn-", 3) == 0 ? "amazonaws.com.cn" : "amazonaws.com";
	return asprintf(&out, "https://sts.%s.%s", region, suffix) < 0 ? NULL : out;
}

static int form_add(struct buf *b, CURL *h, const char *name, const char *value)
{
	char *enc = curl_easy_escape(h, value, 0);
	if (!enc)
		return -ENOMEM;
	int rc = buf_printf(b, "%s%s=%s", b->len ? "&" : "", name, enc);
	explicit_bzero(enc, strlen(enc));
	curl_free(enc);
	return rc;
}

static int src_web_identity(const struct src_ctx *x, struct creds *out, char *why, size_t whylen)
{
	const char *token_file = env_get(x->env, "AWS_WEB_IDENTITY_TOKEN_FILE");
	const char *role_arn = env_get(x->env, "AWS_ROLE_ARN");
	if (!token_file && !role_arn)
		return SRC_NOT_SET;
	if (!token_file || !role_arn) {
		seterr(why, whylen, "%s is set but %s is not",
		       token_file ? "AWS_WEB_IDENTITY_TOKEN_FILE" : "AWS_ROLE_ARN",
		       token_file ? "AWS_ROLE_ARN" : "AWS_WEB_IDENTITY_TOKEN_FILE");
		return -EINVAL;
	}
	char session[64];
	const char *sn = env_get(x->env, "AWS_ROLE_SESSION_NAME");
	if (sn)
		snprintf(session, sizeof session, "%s", sn);
	else
		snprintf(session, sizeof session, "larder-%lld", (long long)time(NULL));

	struct buf tok, form, resp;
	buf_init(&form, MAX_TOKEN_FILE * 3 + 4096);
	buf_init(&resp, 1);
	char *url = NULL;
	CURL *esc = NULL;
	int rc = read_file(token_file, MAX_TOKEN_FILE, &tok);
	if (rc) {
		seterr(why, whylen, "cannot read AWS_WEB_IDENTITY_TOKEN_FILE %s: %s", token_file,
		       rc == -E2BIG ? "larger than 32 KiB" : strerror(-rc));
		goto out_form;
	}
	char *token = trim(tok.p);
	if (!*token) {
		seterr(why, whylen, "web identity token file %s is empty", token_file);
		rc = -EINVAL;
		goto out;
	}
	url = sts_endpoint(x);
	esc = curl_easy_init();
	if (!url || !esc) {
		seterr(why, whylen, "out of memory");
		rc = -ENOMEM;
		goto out;
	}
	rc = form_add(&form, esc, "Action", "AssumeRoleWithWebIdentity");
	if (!rc)
		rc = form_add(&form, esc, "Version", "2011-06-15");
	if (!rc)
		rc = form_add(&form, esc, "RoleArn", role_arn);
	if (!rc)
		rc = form_add(&form, esc, "RoleSessionName", session);
	if (!rc)
		rc = form_add(&form, esc, "WebIdentityToken", token);
	if (rc) {
		seterr(why, whylen, "cannot build the STS request: %s", strerror(-rc));
		goto out;
	}
	static const char *const hdrs[] = {
		"Content-Type: application/x-www-form-urlencoded; charset=utf-8",
		"Accept: text/xml",
		NULL,
	};
	struct http_call call = {
		.method = "POST", .url = url, .headers = hdrs, .body = form.p,
		.connect_ms = STS_CONNECT_MS, .total_ms = STS_TOTAL_MS, .stop = x->stop,
	};
	long status;
	rc = http_do(&call, &resp, &status, why, whylen);
	if (rc)
		goto out;
	rc = sts_parse_response(resp.p, resp.len, status, out, why, whylen);
	if (rc == 0)
		rc = SRC_OK;
out:
	buf_wipe(&tok);
out_form:
	buf_wipe(&form);
	buf_wipe(&resp);
	if (esc)
		curl_easy_cleanup(esc);
	free(url);
	return rc;
}

/* ---- 4. container (ECS task role, EKS Pod Identity) ----------------- */

/*
 * A FULL_URI must be https, or http to loopback or to the ECS/EKS agent
 * addresses: anything else would hand the authorization token (and get
 * credentials) over an open network. The SDKs apply the same rule.
 */
static bool container_uri_allowed(const char *uri, char *why, size_t whylen)
{
	CURLU *u = curl_url();
	char *scheme = NULL, *host = NULL;
	bool ok = false;
	if (!u || curl_url_set(u, CURLUPART_URL, uri, 0) != CURLUE_OK ||
	    curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
	    curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK) {
		seterr(why, whylen, "AWS_CONTAINER_CREDENTIALS_FULL_URI is not a valid URL");
		goto out;
	}
	if (strcasecmp(scheme, "https") == 0) {
		ok = true;
	} else if (strcasecmp(scheme, "http") == 0) {
		ok = strcasecmp(host, "localhost") == 0 || strncmp(host, "127.", 4) == 0 ||
		     strcmp(host, "[::1]") == 0 || strcmp(host, "169.254.170.2") == 0 ||
		     strcmp(host, "169.254.170.23") == 0 || strcasecmp(host, "[fd00:ec2::23]") == 0;
		if (!ok)
			seterr(why, whylen,
			       "AWS_CONTAINER_CREDENTIALS_FULL_URI host %s is not loopback or a container "
			       "agent address (use https)", host);
	} else {
		seterr(why, whylen, "AWS_CONTAINER_CREDENTIALS_FULL_URI scheme %s is not http(s)", scheme);
	}
out:
	curl_free(scheme);
	curl_free(host);
	curl_url_cleanup(u);
	return ok;
}

static int src_container(const struct src_ctx *x, struct creds *out, char *why, size_t whylen)
{
	const char *rel = env_get(x->env, "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
	const char *full = env_get(x->env, "AWS_CONTAINER_CREDENTIALS_FULL_URI");
	if (!rel && !full)
		return SRC_NOT_SET;
	char *url = NULL;
	if (rel) {
		if (asprintf(&url, "%s%s%s", CONTAINER_HOST_URL, *rel == '/' ? "" : "/", rel) < 0)
			url = NULL;
	} else {
		if (!container_uri_allowed(full, why, whylen))
			return -EINVAL;
		url = strdup(full);
	}
	if (!url) {
		seterr(why, whylen, "out of memory");
		return -ENOMEM;
	}

	/* The token file wins over the variable, and is re-read every time:
	 * EKS Pod Identity rotates it. */
	const char *tok_file = env_get(x->env, "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
	const char *tok_env = env_get(x->env, "AWS_CONTAINER_AUTHORIZATION_TOKEN");
	struct buf tok, hdr, resp;
	buf_init(&tok, 1);
	buf_init(&hdr, MAX_TOKEN_FILE + 64);
	buf_init(&resp, 1);
	int rc = 0;
	const char *token = tok_env;
	if (tok_file) {
		rc = read_file(tok_file, MAX_TOKEN_FILE, &tok);
		if (rc) {
			seterr(why, whylen, "cannot read AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE %s: %s", tok_file,
			       rc == -E2BIG ? "larger than 32 KiB" : strerror(-rc));
			goto out;
		}
		token = trim(tok.p);
	}
	const char *hdrs[3] = { "Accept: application/json", NULL, NULL };
	if (token && *token) {
		if (strpbrk(token, "\r\n")) {
			seterr(why, whylen, "container authorization token contains a line break");
			rc = -EINVAL;
			goto out;
		}
		rc = buf_printf(&hdr, "Authorization: %s", token);
		if (rc) {
			seterr(why, whylen, "container authorization token too long");
			goto out;
		}
		hdrs[1] = hdr.p;
	}
	struct http_call call = {
		.method = "GET", .url = url, .headers = hdrs,
		.connect_ms = CONTAINER_CONNECT_MS, .total_ms = CONTAINER_TOTAL_MS,
		.no_proxy = true, .stop = x->stop,
	};
	long status;
	rc = http_do(&call, &resp, &status, why, whylen);
	if (rc)
		goto out;
	if (status != 200) {
		seterr(why, whylen, "GET %s answered %ld", url, status);
		rc = -EIO;
		goto out;
	}
	rc = parse_json_creds(resp.p, resp.len, out, why, whylen);
	if (rc == 0)
		rc = SRC_OK;
out:
	buf_wipe(&tok);
	buf_wipe(&hdr);
	buf_wipe(&resp);
	free(url);
	return rc;
}

/* ---- 5. EC2 instance metadata, IMDSv2 ------------------------------- */

static char *imds_base(const struct src_ctx *x)
{
	const char *v = env_get(x->env, "AWS_EC2_METADATA_SERVICE_ENDPOINT");
	if (!v) {
		const char *mode = env_get(x->env, "AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE");
		v = mode && strcasecmp(mode, "IPv6") == 0 ? "http://[fd00:ec2::254]" : "http://169.254.169.254";
	}
	char *out = strdup(v);
	if (out) {
		size_t len = strlen(out);
		while (len && out[len - 1] == '/')
			out[--len] = '\0';
	}
	return out;
}

/* A role name goes into the URL path: allow IAM's name characters only. */
static bool imds_role_ok(const char *r)
{
	if (!*r || strlen(r) > 128)
		return false;
	for (; *r; r++)
		if (!isalnum((unsigned char)*r) && !strchr("+=,.@_-", *r))
			return false;
	return true;
}

/* One IMDS step: a request that must answer 200. */
static int imds_call(const struct src_ctx *x, const char *method, const char *url, const char *const *hdrs,
                     struct buf *resp, char *why, size_t whylen)
{
	struct http_call call = {
		.method = method, .url = url, .headers = hdrs,
		.connect_ms = IMDS_CONNECT_MS, .total_ms = IMDS_TOTAL_MS,
		.no_proxy = true, .stop = x->stop,
	};
	long status;
	int rc = http_do(&call, resp, &status, why, whylen);
	if (rc)
		return rc;
	if (status != 200) {
		seterr(why, whylen, "%s %s answered %ld", method, url, status);
		buf_wipe(resp);
		return -EIO;
	}
	return 0;
}

static int src_imds(const struct src_ctx *x, struct creds *out, char *why, size_t whylen)
{
	if (env_true(x->env, "AWS_EC2_METADATA_DISABLED"))
		return SRC_NOT_SET;
	char *base = imds_base(x);
	char *url = NULL;
	struct buf tok, hdr, resp;
	buf_init(&tok, 1);
	buf_init(&hdr, 1024);
	buf_init(&resp, 1);
	if (!base) {
		seterr(why, whylen, "out of memory");
		return -ENOMEM;
	}
	int rc = -ENOMEM;

	/* Session token first: IMDSv2 refuses tokenless reads (IMDSv1 is not
	 * used, on purpose). */
	static const char *const put_hdrs[] = {
		"X-aws-ec2-metadata-token-ttl-seconds: " IMDS_TOKEN_TTL_S,
		"Content-Type:",
		NULL,
	};
	if (asprintf(&url, "%s/latest/api/token", base) < 0) {
		url = NULL;
		goto out;
	}
	rc = imds_call(x, "PUT", url, put_hdrs, &tok, why, whylen);
	if (rc)
		goto out;
	char *token = trim(tok.p);
	if (!*token || strpbrk(token, "\r\n") || buf_printf(&hdr, "X-aws-ec2-metadata-token: %s", token)) {
		seterr(why, whylen, "IMDS returned an unusable session token");
		rc = -EINVAL;
		goto out;
	}
	const char *get_hdrs[] = { hdr.p, NULL };

	free(url);
	if (asprintf(&url, "%s/latest/meta-data/iam/security-credentials/", base) < 0) {
		url = NULL;
		rc = -ENOMEM;
		goto out;
	}
	rc = imds_call(x, "GET", url, get_hdrs, &resp, why, whylen);
	if (rc)
		goto out;
	/* One role per instance profile: the first line. */
	char *role = resp.p;
	role[strcspn(role, "\r\n")] = '\0';
	role = trim(role);
	if (!imds_role_ok(role)) {
		seterr(why, whylen, "IMDS has no usable IAM role (is an instance profile attached?)");
		rc = -ENOENT;
		goto out;
	}
	char *url2 = NULL;
	if (asprintf(&url2, "%s%s", url, role) < 0) {
		rc = -ENOMEM;
		goto out;
	}
	free(url);
	url = url2;
	buf_fini(&resp);
	rc = imds_call(x, "GET", url, get_hdrs, &resp, why, whylen);
	if (rc)
		goto out;
	rc = parse_json_creds(resp.p, resp.len, out, why, whylen);
	if (rc == 0)
		rc = SRC_OK;
out:
	if (rc == -ENOMEM && why && !*why)
		seterr(why, whylen, "out of memory");
	buf_wipe(&tok);
	buf_wipe(&hdr);
	buf_wipe(&resp);
	free(url);
	free(base);
	return rc;
}

/* ---- the chain ------------------------------------------------------ */

typedef int (*source_fn)(const struct src_ctx *x, struct creds *out, char *why, size_t whylen);

static const source_fn source_fns[SOURCE_COUNT] = {
	src_env, src_profile, src_web_identity, src_container, src_imds,
};

static int64_t mono_ms(void)
{
	return (int64_t)clock_mono_ms();
}

/*
 * How long to wait before the next refresh of credentials that expire at
 * exp: until exp - margin. Inside the margin already (the source hands out
 * short-lived credentials), fall back to the retry schedule instead of
 * asking again at once.
 */
static unsigned next_delay(time_t exp, unsigned margin, unsigned *backoff)
{
	time_t now = time(NULL);
	long long d = (long long)exp - margin - now;
	if (d >= 1) {
		*backoff = RETRY_MIN_S;
		return d > 24 * 3600 ? 24 * 3600 : (unsigned)d;
	}
	unsigned b = *backoff;
	*backoff = b * 2 > RETRY_MAX_S ? RETRY_MAX_S : b * 2;
	return b;
}

static void *refresh_main(void *arg)
{
	struct creds_provider *p = arg;
	struct src_ctx x = { .env = &p->env, .region = p->region, .stop = &p->stop };
	struct creds nc;
	char why[512];
	unsigned backoff = RETRY_MIN_S;

	pthread_mutex_lock(&p->lock);
	int64_t due = mono_ms() + 1000LL * next_delay(p->cur.expiration, p->margin_s, &backoff);
	while (!atomic_load(&p->stop)) {
		int64_t now = mono_ms();
		if (now < due) {
			struct timespec ts;
			clock_gettime(CLOCK_MONOTONIC, &ts);
			int64_t left = due - now;
			ts.tv_sec += left / 1000;
			ts.tv_nsec += (left % 1000) * 1000000;
			if (ts.tv_nsec >= 1000000000) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000;
			}
			pthread_cond_timedwait(&p->wake, &p->lock, &ts);
			continue;
		}
		pthread_mutex_unlock(&p->lock);

		why[0] = '\0';
		int rc = source_fns[p->src](&x, &nc, why, sizeof why);

		pthread_mutex_lock(&p->lock);
		if (atomic_load(&p->stop))
			break;
		if (rc == SRC_OK) {
			char masked[32];
			mask_key(nc.access_key, masked, sizeof masked);
			p->cur = nc;
			atomic_fetch_add(&p->refreshes, 1);
			if (nc.expiration == 0) {
				log_info(TOPIC, "refreshed %s credentials %s; they do not expire", source_names[p->src],
				         masked);
				break;
			}
			unsigned d = next_delay(nc.expiration, p->margin_s, &backoff);
			log_info(TOPIC, "refreshed %s credentials %s, next refresh in %us", source_names[p->src],
			         masked, d);
			due = mono_ms() + 1000LL * d;
		} else {
			if (rc == SRC_NOT_SET)
				snprintf(why, sizeof why, "the source is no longer configured");
			long long left = (long long)p->cur.expiration - time(NULL);
			unsigned d = backoff;
			backoff = backoff * 2 > RETRY_MAX_S ? RETRY_MAX_S : backoff * 2;
			if (left > 0)
				log_warn(TOPIC, "refresh from %s failed: %s; current credentials expire in %llds, "
				         "retrying in %us", source_names[p->src], why, left, d);
			else
				log_error(TOPIC, "refresh from %s failed: %s; current credentials have EXPIRED, "
				          "retrying in %us", source_names[p->src], why, d);
			due = mono_ms() + 1000LL * d;
		}
		creds_wipe(&nc);
	}
	pthread_mutex_unlock(&p->lock);
	creds_wipe(&nc);
	return NULL;
}

static void provider_free(struct creds_provider *p)
{
	env_copy_fini(&p->env);
	free(p->region);
	pthread_cond_destroy(&p->wake);
	pthread_mutex_destroy(&p->lock);
	creds_wipe(&p->cur);
	p->magic = 0;
	free(p);
	curl_global_cleanup();
}

struct creds_provider *creds_provider_create(const char *const *envp, const char *region,
                                             unsigned refresh_margin_s, char *err, size_t errlen)
{
	if (err && errlen)
		err[0] = '\0';
	/* Reference-counted, and thread-safe in the libcurl versions we need. */
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		seterr(err, errlen, "curl_global_init() failed");
		return NULL;
	}
	struct creds_provider *p = calloc(1, sizeof *p);
	if (!p) {
		curl_global_cleanup();
		seterr(err, errlen, "out of memory");
		return NULL;
	}
	p->magic = CREDS_MAGIC;
	p->margin_s = refresh_margin_s;
	pthread_mutex_init(&p->lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&p->wake, &ca);
	pthread_condattr_destroy(&ca);
	atomic_init(&p->stop, false);
	atomic_init(&p->refreshes, 0);
	if (env_copy_init(&p->env, envp) != 0 || (region && !(p->region = strdup(region)))) {
		seterr(err, errlen, "out of memory");
		provider_free(p);
		return NULL;
	}

	struct src_ctx x = { .env = &p->env, .region = p->region, .stop = NULL };
	struct buf notes; /* why each source was passed over, for the final error */
	buf_init(&notes, 1024);
	char why[512];
	int rc = SRC_NOT_SET;
	enum source s;
	for (s = 0; s < SOURCE_COUNT; s++) {
		why[0] = '\0';
		rc = source_fns[s](&x, &p->cur, why, sizeof why);
		if (rc < 0 && s == SOURCE_IMDS)
			rc = SRC_NOT_SET; /* no IMDS is the normal case off EC2 */
		if (rc == SRC_OK || rc < 0)
			break;
		if (why[0])
			buf_printf(&notes, "; %s", why);
	}
	if (rc < 0) {
		seterr(err, errlen, "%s credentials: %s", source_names[s], why);
	} else if (rc != SRC_OK) {
		seterr(err, errlen,
		       "no AWS credentials found (tried environment, shared credentials/config files, web "
		       "identity, container, EC2 instance metadata%s)%s",
		       env_true(&p->env, "AWS_EC2_METADATA_DISABLED") ? " [disabled]" : "", buf_cstr(&notes));
	}
	buf_fini(&notes);
	if (rc != SRC_OK) {
		provider_free(p);
		return NULL;
	}

	p->src = s;
	char masked[32];
	mask_key(p->cur.access_key, masked, sizeof masked);
	if (p->cur.expiration) {
		long long left = (long long)p->cur.expiration - time(NULL);
		log_info(TOPIC, "using %s credentials %s (expire in %llds)", source_names[s], masked, left);
		int e = pthread_create(&p->thread, NULL, refresh_main, p);
		if (e != 0) {
			seterr(err, errlen, "pthread_create() failed: %s", strerror(e));
			provider_free(p);
			return NULL;
		}
		p->thread_started = true;
	} else {
		log_info(TOPIC, "using %s credentials %s", source_names[s], masked);
	}
	return p;
}

void creds_provider_get(struct creds_provider *p, struct creds *out)
{
	if (p->magic != CREDS_MAGIC)
		abort();
	pthread_mutex_lock(&p->lock);
	*out = p->cur;
	pthread_mutex_unlock(&p->lock);
}

const char *creds_provider_source(const struct creds_provider *p)
{
	return source_names[p->src];
}

unsigned long creds_provider_refreshes(const struct creds_provider *p)
{
	return atomic_load(&((struct creds_provider *)p)->refreshes);
}

void creds_provider_destroy(struct creds_provider *p)
{
	if (!p)
		return;
	if (p->magic != CREDS_MAGIC)
		abort();
	if (p->thread_started) {
		pthread_mutex_lock(&p->lock);
		atomic_store(&p->stop, true);
		pthread_cond_broadcast(&p->wake);
		pthread_mutex_unlock(&p->lock);
		pthread_join(p->thread, NULL);
	}
	provider_free(p);
}

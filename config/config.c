/*
 * config.c - built-in defaults, then the INI file (read by libinih), then
 * LARDER_* environment variables.
 *
 * Every value is checked where it is read, so the message can say where it
 * came from: "larder.conf:12: [server] listen: ..." for the file and
 * "LARDER_LISTEN: ..." for the environment. Only the first error is kept.
 *
 * libinih hands us name = value pairs but not line numbers (the packaged
 * library is built without INI_HANDLER_LINENO) and never reports a section
 * that has no settings. So we feed it lines through our own reader, which
 * counts them and handles [section] headers itself: an empty "[key AK1]"
 * is still an error, and a "[sever]" typo is reported even when empty.
 */
#include "config/config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ini.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "base/log.h"

#define MAX_FILE_BYTES (1u << 20)
#define MAX_KEY_ID 128
#define MAX_REGION 64

extern char **environ;

/* ---- the [server] and [upstream] settings -------------------------------- */

enum kind {
	K_LISTEN,  /* host:port into listen_host + listen_port */
	K_UINT,    /* unsigned, in [min, max] */
	K_SIZE,    /* size_t via cfg_parse_size, in [min, max] */
	K_LEVEL,   /* log level name */
	K_LOGDEST, /* "-", "off" or a path */
	K_DOMAIN,  /* host name; empty = unset */
	K_URL,     /* http(s) URL; empty = unset */
	K_REGION,
	K_ADDR,
	K_BOOL,
	K_PATH,    /* file path; empty = unset */
	K_TTL,     /* seconds, or "immutable" (-1) */
	K_POLICY,  /* cache policy name */
	K_ADMIN,   /* host:port into admin_host + admin_port, or "off" */
	K_TOKEN,   /* bearer token; empty = unset */
};

struct setting {
	const char *section;
	const char *name;
	const char *env;
	enum kind kind;
	size_t off;
	unsigned long min, max;
};

#define SET(sec, nm, ev, k, field, lo, hi) \
	{ .section = sec, .name = nm, .env = ev, .kind = k, \
	  .off = offsetof(struct cfg, field), .min = lo, .max = hi }

static const struct setting settings[] = {
	SET("server", "listen", "LARDER_LISTEN", K_LISTEN, listen_host, 0, 0),
	SET("server", "workers", "LARDER_WORKERS", K_UINT, workers, 0, 1024),
	SET("server", "base_domain", "LARDER_BASE_DOMAIN", K_DOMAIN, base_domain, 0, 0),
	SET("server", "max_connections", "LARDER_MAX_CONNECTIONS", K_UINT, max_connections, 1, 1000000),
	SET("server", "max_header_size", "LARDER_MAX_HEADER_SIZE", K_SIZE, max_header_bytes, 1024, 1 << 20),
	SET("server", "client_timeout", "LARDER_CLIENT_TIMEOUT", K_UINT, client_timeout_s, 1, 86400),
	SET("server", "shutdown_grace", "LARDER_SHUTDOWN_GRACE", K_UINT, shutdown_grace_s, 0, 3600),
	SET("server", "max_skew", "LARDER_MAX_SKEW", K_UINT, max_skew_s, 1, 86400),
	SET("server", "log_level", "LARDER_LOG_LEVEL", K_LEVEL, log_level, 0, 0),
	SET("server", "access_log", "LARDER_ACCESS_LOG", K_LOGDEST, access_log, 0, 0),
	SET("server", "access_log_buffer", "LARDER_ACCESS_LOG_BUFFER", K_SIZE, access_log_buffer,
	    0, 16u << 20),
	SET("server", "access_log_flush_ms", "LARDER_ACCESS_LOG_FLUSH_MS", K_UINT,
	    access_log_flush_ms, 0, 60000),
	SET("server", "tls_cert", "LARDER_TLS_CERT", K_PATH, tls_cert, 0, 0),
	SET("server", "tls_key", "LARDER_TLS_KEY", K_PATH, tls_key, 0, 0),
	SET("upstream", "url", "LARDER_UPSTREAM_URL", K_URL, upstream_url, 0, 0),
	SET("upstream", "region", "LARDER_UPSTREAM_REGION", K_REGION, upstream_region, 0, 0),
	SET("upstream", "addressing", "LARDER_UPSTREAM_ADDRESSING", K_ADDR, addressing, 0, 0),
	SET("upstream", "tls_verify", "LARDER_UPSTREAM_TLS_VERIFY", K_BOOL, upstream_tls_verify, 0, 0),
	SET("upstream", "ca_file", "LARDER_UPSTREAM_CA_FILE", K_PATH, upstream_ca_file, 0, 0),
	SET("upstream", "timeout", "LARDER_UPSTREAM_TIMEOUT", K_UINT, upstream_timeout_s, 1, 3600),
	SET("upstream", "creds_refresh_margin", "LARDER_CREDS_REFRESH_MARGIN", K_UINT,
	    creds_refresh_margin_s, 0, 43200),
	SET("upstream", "retries", "LARDER_UPSTREAM_RETRIES", K_UINT, upstream_retries, 0, 20),
	SET("cache", "dir", "LARDER_CACHE_DIR", K_PATH, cache_dir, 0, 0),
	SET("cache", "ram_size", "LARDER_RAM_CACHE_SIZE", K_SIZE, ram_cache_bytes, 0,
	    1ul << 50),
	SET("cache", "disk_size", "LARDER_DISK_CACHE_SIZE", K_SIZE, disk_cache_bytes, 0,
	    1ul << 56),
	SET("cache", "chunk_size", "LARDER_CHUNK_SIZE", K_SIZE, chunk_bytes, 64 * 1024,
	    1ul << 30),
	SET("cache", "policy", "LARDER_CACHE_POLICY", K_POLICY, cache_policy, 0, 0),
	SET("cache", "stale_after", "LARDER_CACHE_STALE_AFTER", K_UINT, cache_stale_after_s,
	    1, 100000000),
	SET("cache", "metadata_ttl", "LARDER_METADATA_TTL", K_TTL, metadata_ttl_s, 0, 100000000),
	SET("cache", "negative_ttl", "LARDER_NEGATIVE_TTL", K_UINT, negative_ttl_s, 0, 86400),
	SET("cache", "readahead", "LARDER_READAHEAD", K_UINT, readahead_chunks, 0, 64),
	SET("cache", "inflight_size", "LARDER_INFLIGHT_SIZE", K_SIZE, inflight_bytes, 0,
	    1ul << 50),
	SET("cache", "list_cache_size", "LARDER_LIST_CACHE_SIZE", K_SIZE, list_cache_bytes, 0,
	    1ul << 40),
	SET("admin", "listen", "LARDER_ADMIN_LISTEN", K_ADMIN, admin_host, 0, 0),
	SET("admin", "token", "LARDER_ADMIN_TOKEN", K_TOKEN, admin_token, 16, 256),
	SET("cluster", "redis_url", "LARDER_REDIS_URL", K_PATH, redis_url, 0, 0),
	SET("cluster", "node_id", "LARDER_NODE_ID", K_PATH, node_id, 0, 0),
	SET("cluster", "advertise", "LARDER_ADVERTISE", K_PATH, advertise, 0, 0),
	SET("cluster", "secret", "LARDER_CLUSTER_SECRET", K_TOKEN, cluster_secret, 16, 256),
	SET("cluster", "directory_ttl", "LARDER_DIRECTORY_TTL", K_UINT, directory_ttl_s, 10,
	    7 * 86400),
	SET("cluster", "ca_file", "LARDER_CLUSTER_CA_FILE", K_PATH, cluster_ca_file, 0, 0),
};

#define N_SETTINGS (sizeof settings / sizeof settings[0])

/* ---- load state ---------------------------------------------------------- */

enum section { S_NONE, S_SERVER, S_UPSTREAM, S_KEY, S_ANON, S_BUCKET, S_CACHE, S_ADMIN,
	S_CLUSTER };

/* Settings of [key], [anonymous] and [bucket] sections, as slots in seen[]. */
enum { F_SECRET, F_ACCESS, F_BUCKETS, F_REGION, F_LIST_TTL, F_LIST_PREFIXES };

struct load {
	struct cfg *c;
	char *err;
	size_t errlen;
	bool failed;

	/* the text libinih is reading */
	const char *src;          /* file name for messages, NULL: "line N" */
	const char *pos;          /* start of the next line */
	int line;
	bool indented;            /* current line starts with a blank */

	/* the section being read */
	enum section sect;
	char label[MAX_KEY_ID + 32];  /* "[key AK1]", for messages */
	char raw[256];            /* header text as libinih sees it */
	int sect_line;
	size_t idx;               /* S_KEY: index in keys; S_BUCKET: in bucket_regions */
	char last_name[64];       /* last setting name in this section */
	int seen[N_SETTINGS];     /* line each setting was set on, 0 = not yet */
	int once[6];              /* header line of [server], [upstream], [anonymous], [cache],
	                           * [admin] */
	bool region_in_file;
};

__attribute__((format(printf, 2, 3)))
static int fail(struct load *L, const char *fmt, ...)
{
	if (L->failed)
		return -1;
	L->failed = true;
	if (L->err && L->errlen) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(L->err, L->errlen, fmt, ap);
		va_end(ap);
	}
	return -1;
}

/* "larder.conf:12" or "line 12". */
static void loc(const struct load *L, int line, char *out, size_t n)
{
	if (L->src)
		snprintf(out, n, "%s:%d", L->src, line);
	else
		snprintf(out, n, "line %d", line);
}

static bool is_blank(char ch)
{
	return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n' || ch == '\v' || ch == '\f';
}

static bool is_lower_alnum(char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9');
}

static bool is_alnum(char ch)
{
	return is_lower_alnum(ch) || (ch >= 'A' && ch <= 'Z');
}

/* Copy of s[0..n) without surrounding blanks, or NULL (out of memory). */
static char *dup_trimmed(const char *s, size_t n)
{
	while (n && is_blank(*s))
		s++, n--;
	while (n && is_blank(s[n - 1]))
		n--;
	return strndup(s, n);
}

/* Replaces *field with a copy of v (NULL when v is NULL). */
static int set_str(struct load *L, char **field, const char *v)
{
	char *copy = NULL;
	if (v && !(copy = strdup(v)))
		return fail(L, "out of memory");
	free(*field);
	*field = copy;
	return 0;
}

/* Grows an array whose capacity is the next power of two at or above n. */
static int grow(struct load *L, void **arr, size_t n, size_t size)
{
	if (n & (n - 1))
		return 0;
	size_t cap = n ? n * 2 : 1;
	void *p = reallocarray(*arr, cap, size);
	if (!p)
		return fail(L, "out of memory");
	*arr = p;
	return 0;
}

/* ---- values --------------------------------------------------------------- */

static int parse_ulong(const char *s, unsigned long *out)
{
	unsigned long n = 0;
	if (!*s)
		return -EINVAL;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return -EINVAL;
		unsigned d = (unsigned)(*s - '0');
		if (n > (~0ul - d) / 10)
			return -ERANGE;
		n = n * 10 + d;
	}
	*out = n;
	return 0;
}

static int parse_bool(const char *s, bool *out)
{
	static const char *const yes[] = { "true", "yes", "on", "1" };
	static const char *const no[] = { "false", "no", "off", "0" };
	for (size_t i = 0; i < 4; i++) {
		if (strcasecmp(s, yes[i]) == 0)
			return *out = true, 0;
		if (strcasecmp(s, no[i]) == 0)
			return *out = false, 0;
	}
	return -EINVAL;
}

/* "host:port" or "[v6addr]:port" into *host_out and *port_out. */
static int set_listen(struct load *L, const char *v, const char *where, char **host_out,
                      uint16_t *port_out)
{
	const char *colon = strrchr(v, ':');
	if (!colon || colon == v)
		return fail(L, "%s: expected host:port, got \"%s\"", where, v);
	const char *host = v, *host_end = colon;
	if (*v == '[') {
		if (colon[-1] != ']' || colon - v < 3)
			return fail(L, "%s: expected [ipv6-address]:port, got \"%s\"", where, v);
		host = v + 1;
		host_end = colon - 1;
	} else if (memchr(v, ':', (size_t)(colon - v))) {
		return fail(L, "%s: write an IPv6 address in brackets, as [::1]:8080, got \"%s\"",
		            where, v);
	}
	for (const char *h = host; h < host_end; h++)
		if (is_blank(*h) || *h == '/' || *h == '[' || *h == ']')
			return fail(L, "%s: invalid host in \"%s\"", where, v);
	unsigned long port = 0;
	int r = parse_ulong(colon + 1, &port);
	if (r == -EINVAL)
		return fail(L, "%s: port \"%s\" is not a number", where, colon + 1);
	if (r || port < 1 || port > 65535)
		return fail(L, "%s: port \"%s\" is out of range (1-65535)", where, colon + 1);
	char *h = strndup(host, (size_t)(host_end - host));
	if (!h)
		return fail(L, "out of memory");
	free(*host_out);
	*host_out = h;
	*port_out = (uint16_t)port;
	return 0;
}

/* Region names go into the SigV4 credential scope: no '/' or blanks. */
static bool valid_region(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > MAX_REGION)
		return false;
	for (; *s; s++)
		if (!is_alnum(*s) && *s != '-' && *s != '_' && *s != '.')
			return false;
	return true;
}

static bool valid_hostname(const char *s)
{
	if (!*s || *s == '.' || *s == '-' || strlen(s) > 253 || strstr(s, ".."))
		return false;
	for (; *s; s++)
		if (!is_lower_alnum(*s) && *s != '.' && *s != '-')
			return false;
	return s[-1] != '.' && s[-1] != '-';
}

static int set_url(struct load *L, char **field, const char *v, const char *where)
{
	if (!*v)
		return set_str(L, field, NULL);
	size_t skip;
	if (strncasecmp(v, "http://", 7) == 0)
		skip = 7;
	else if (strncasecmp(v, "https://", 8) == 0)
		skip = 8;
	else
		return fail(L, "%s: expected an http:// or https:// URL, got \"%s\"", where, v);
	if (v[skip] == '\0' || v[skip] == '/' || v[skip] == ':')
		return fail(L, "%s: no host in \"%s\"", where, v);
	for (const char *p = v; *p; p++)
		if ((unsigned char)*p <= ' ' || *p == '?' || *p == '#' || *p == 0x7f)
			return fail(L, "%s: unexpected character in URL \"%s\"", where, v);
	size_t n = strlen(v);
	while (n > skip && v[n - 1] == '/')
		n--;
	char *u = strndup(v, n);
	if (!u)
		return fail(L, "out of memory");
	free(*field);
	*field = u;
	return 0;
}

static int set_setting(struct load *L, const struct setting *s, const char *v, const char *where)
{
	void *field = (char *)L->c + s->off;
	unsigned long n = 0;
	uint64_t size = 0;
	int r;

	switch (s->kind) {
	case K_LISTEN:
		return set_listen(L, v, where, &L->c->listen_host, &L->c->listen_port);
	case K_ADMIN:
		if (strcasecmp(v, "off") == 0) {
			L->c->admin_port = 0;
			return set_str(L, &L->c->admin_host, NULL);
		}
		return set_listen(L, v, where, &L->c->admin_host, &L->c->admin_port);
	case K_TOKEN:
		/* It travels in an Authorization header: visible ASCII, no blanks. */
		if (!*v)
			return set_str(L, field, NULL);
		for (const char *p = v; *p; p++)
			if ((unsigned char)*p <= ' ' || (unsigned char)*p >= 0x7f)
				return fail(L, "%s: only visible ASCII characters, no spaces", where);
		if (strlen(v) < s->min || strlen(v) > s->max)
			return fail(L, "%s: must be %lu-%lu characters long (got %zu)", where, s->min,
			            s->max, strlen(v));
		return set_str(L, field, v);
	case K_UINT:
		r = parse_ulong(v, &n);
		if (r == -EINVAL)
			return fail(L, "%s: expected a whole number, got \"%s\"", where, v);
		if (r || n < s->min || n > s->max)
			return fail(L, "%s: \"%s\" is out of range (%lu-%lu)", where, v, s->min, s->max);
		*(unsigned *)field = (unsigned)n;
		return 0;
	case K_SIZE:
		if (cfg_parse_size(v, &size) != 0)
			return fail(L, "%s: expected a size such as 16384, 64KiB or 1MB, got \"%s\"",
			            where, v);
		if (size < s->min || size > s->max)
			return fail(L, "%s: \"%s\" is out of range (%lu-%lu bytes)", where, v, s->min,
			            s->max);
		*(size_t *)field = (size_t)size;
		return 0;
	case K_LEVEL: {
		static const char *const names[] = { "error", "warn", "info", "debug" };
		int l = log_level_parse(v);
		if (l < 0 || l > 3)
			return fail(L, "%s: expected error, warn, info or debug, got \"%s\"", where, v);
		return set_str(L, field, names[l]);
	}
	case K_LOGDEST:
	case K_PATH:
		if (!*v && s->kind == K_LOGDEST)
			return fail(L, "%s: expected \"-\", \"off\" or a file path, got nothing", where);
		return set_str(L, field, *v ? v : NULL);
	case K_DOMAIN: {
		if (!*v)
			return set_str(L, field, NULL);
		char *d = strdup(v);
		if (!d)
			return fail(L, "out of memory");
		for (char *p = d; *p; p++)
			if (*p >= 'A' && *p <= 'Z')
				*p = (char)(*p - 'A' + 'a');
		if (!valid_hostname(d)) {
			free(d);
			return fail(L, "%s: expected a host name such as s3.example.com, got \"%s\"",
			            where, v);
		}
		free(*(char **)field);
		*(char **)field = d;
		return 0;
	}
	case K_URL:
		return set_url(L, field, v, where);
	case K_REGION:
		if (!valid_region(v))
			return fail(L, "%s: expected a region name such as us-east-1, got \"%s\"", where, v);
		return set_str(L, field, v);
	case K_ADDR:
		if (strcasecmp(v, "auto") == 0)
			*(enum cfg_addressing *)field = CFG_ADDR_AUTO;
		else if (strcasecmp(v, "path") == 0)
			*(enum cfg_addressing *)field = CFG_ADDR_PATH;
		else if (strcasecmp(v, "virtual") == 0)
			*(enum cfg_addressing *)field = CFG_ADDR_VIRTUAL;
		else
			return fail(L, "%s: expected auto, path or virtual, got \"%s\"", where, v);
		return 0;
	case K_TTL:
		if (strcasecmp(v, "immutable") == 0) {
			*(long *)field = -1;
			return 0;
		}
		r = parse_ulong(v, &n);
		if (r || n > s->max)
			return fail(L, "%s: expected a number of seconds or \"immutable\", got \"%s\"",
			            where, v);
		*(long *)field = (long)n;
		return 0;
	case K_POLICY:
		if (strcasecmp(v, "subset") != 0 && strcasecmp(v, "lru") != 0)
			return fail(L, "%s: expected subset or lru, got \"%s\"", where, v);
		return set_str(L, field, strcasecmp(v, "lru") == 0 ? "lru" : "subset");
	case K_BOOL:
		if (parse_bool(v, field) != 0)
			return fail(L, "%s: expected true or false, got \"%s\"", where, v);
		return 0;
	}
	return fail(L, "%s: internal error: unknown setting kind", where);
}

/* ---- grants --------------------------------------------------------------- */

/* S3 bucket naming rules: 3-63 characters of a-z, 0-9, '.', '-', starting
 * and ending with a letter or digit, no "..", not an IPv4 address.
 * https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html */
static bool valid_bucket(const char *s)
{
	size_t n = strlen(s);
	if (n < 3 || n > 63 || !is_lower_alnum(s[0]) || !is_lower_alnum(s[n - 1]))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!is_lower_alnum(s[i]) && s[i] != '.' && s[i] != '-')
			return false;
	struct in_addr a;
	return !strstr(s, "..") && inet_pton(AF_INET, s, &a) != 1;
}

/* A "." or ".." path segment: an HTTP layer on the way upstream may collapse
 * it, so a prefix holding one could not be enforced (see auth/policy.h). */
static bool has_dot_segment(const char *p)
{
	for (;;) {
		size_t n = strcspn(p, "/");
		if ((n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
			return true;
		if (!p[n])
			return false;
		p += n + 1;
	}
}

/* One grant: "*", "bucket", "bucket/" (both: the whole bucket) or
 * "bucket/prefix" (prefix gets a trailing '/' if it lacks one). */
static int add_grant(struct load *L, struct client_key *k, const char *item, const char *where)
{
	const char *slash = strchr(item, '/');
	size_t blen = slash ? (size_t)(slash - item) : strlen(item);
	const char *prefix = slash ? slash + 1 : "";
	size_t plen = strlen(prefix);

	char *bucket = strndup(item, blen);
	if (!bucket)
		return fail(L, "out of memory");
	if (strcmp(bucket, "*") == 0) {
		if (plen) {
			free(bucket);
			return fail(L, "%s: \"*\" means every bucket and takes no prefix, got \"%s\"",
			            where, item);
		}
	} else if (!valid_bucket(bucket)) {
		free(bucket);
		return fail(L, "%s: invalid bucket name in \"%s\" (3-63 characters of a-z, 0-9, "
		            "'.' and '-', or \"*\")", where, item);
	}
	if (has_dot_segment(prefix)) {
		free(bucket);
		return fail(L, "%s: prefix in \"%s\" has a \".\" or \"..\" segment", where, item);
	}
	char *pfx = malloc(plen + 2);
	if (!pfx || grow(L, (void **)&k->grants, k->n_grants, sizeof *k->grants) != 0) {
		free(pfx);
		free(bucket);
		return fail(L, "out of memory");
	}
	memcpy(pfx, prefix, plen + 1);
	if (plen && prefix[plen - 1] != '/')
		memcpy(pfx + plen, "/", 2);
	k->grants[k->n_grants++] = (struct grant){ .bucket = bucket, .prefix = pfx };
	return 0;
}

/* A comma-separated list of grants; empty entries (a trailing comma before
 * a continuation line) are skipped. */
static int add_grants(struct load *L, struct client_key *k, const char *list, const char *where)
{
	for (const char *p = list;;) {
		size_t n = strcspn(p, ",");
		char *item = dup_trimmed(p, n);
		if (!item)
			return fail(L, "out of memory");
		int r = *item ? add_grant(L, k, item, where) : 0;
		free(item);
		if (r)
			return r;
		if (!p[n])
			return 0;
		p += n + 1;
	}
}

static void free_grants(struct client_key *k)
{
	for (size_t i = 0; i < k->n_grants; i++) {
		free(k->grants[i].bucket);
		free(k->grants[i].prefix);
	}
	free(k->grants);
	k->grants = NULL;
	k->n_grants = 0;
}

static int parse_access(struct load *L, struct client_key *k, const char *v, const char *where)
{
	if (strcasecmp(v, "read-only") == 0)
		k->write = false;
	else if (strcasecmp(v, "read-write") == 0)
		k->write = true;
	else
		return fail(L, "%s: expected read-only or read-write, got \"%s\"", where, v);
	return 0;
}

static bool valid_key_id(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > MAX_KEY_ID)
		return false;
	for (; *s; s++)
		if (!is_alnum(*s) && *s != '_' && *s != '-' && *s != '.')
			return false;
	return true;
}

static int add_key(struct load *L, const char *id, const char *where)
{
	struct cfg *c = L->c;
	if (!valid_key_id(id))
		return fail(L, "%s: invalid access key id \"%s\" (1-%d characters of A-Z, a-z, 0-9, "
		            "'_', '-', '.')", where, id, MAX_KEY_ID);
	if (cfg_find_key(c, id))
		return fail(L, "%s: duplicate key id \"%s\"", where, id);
	if (grow(L, (void **)&c->keys, c->n_keys, sizeof *c->keys) != 0)
		return -1;
	char *copy = strdup(id);
	if (!copy)
		return fail(L, "out of memory");
	c->keys[c->n_keys++] = (struct client_key){ .id = copy };
	return 0;
}

static int add_bucket(struct load *L, const char *name, const char *at)
{
	struct cfg *c = L->c;
	if (!valid_bucket(name))
		return fail(L, "%s: %s: invalid bucket name (3-63 characters of a-z, 0-9, '.' and '-')",
		            at, L->label);
	for (size_t i = 0; i < c->n_bucket_regions; i++)
		if (strcmp(c->bucket_regions[i].bucket, name) == 0)
			return fail(L, "%s: %s appears twice", at, L->label);
	if (grow(L, (void **)&c->bucket_regions, c->n_bucket_regions,
	         sizeof *c->bucket_regions) != 0)
		return -1;
	char *copy = strdup(name);
	if (!copy)
		return fail(L, "out of memory");
	c->bucket_regions[c->n_bucket_regions++] = (struct cfg_bucket_region){ .bucket = copy };
	return 0;
}

/* The list cache entry of the [bucket] section being read, added on its
 * first list_cache_* setting. */
static struct cfg_list_cache *section_list_cache(struct load *L)
{
	struct cfg *c = L->c;
	const char *bucket = c->bucket_regions[L->idx].bucket;
	if (c->n_list_caches && strcmp(c->list_caches[c->n_list_caches - 1].bucket, bucket) == 0)
		return &c->list_caches[c->n_list_caches - 1];
	if (grow(L, (void **)&c->list_caches, c->n_list_caches, sizeof *c->list_caches) != 0)
		return NULL;
	char *copy = strdup(bucket);
	if (!copy) {
		fail(L, "out of memory");
		return NULL;
	}
	c->list_caches[c->n_list_caches] = (struct cfg_list_cache){ .bucket = copy };
	return &c->list_caches[c->n_list_caches++];
}

/* list_cache_ttl = seconds (1-86400; 0 = off), or list_cache_prefixes = a
 * comma-separated list of key prefixes (as a listing's prefix starts). */
static int set_list_cache(struct load *L, int slot, const char *v, const char *where)
{
	if (slot == F_LIST_TTL) {
		unsigned long n = 0;
		int r = parse_ulong(v, &n);
		if (r || n > 86400)
			return fail(L, "%s: expected a number of seconds (0-86400), got \"%s\"", where, v);
		if (n == 0)
			return 0;
		struct cfg_list_cache *lc = section_list_cache(L);
		if (!lc)
			return -1;
		lc->ttl_s = (unsigned)n;
		return 0;
	}
	struct cfg_list_cache *lc = section_list_cache(L);
	if (!lc)
		return -1;
	for (const char *p = v; *p;) {
		size_t n = strcspn(p, ",");
		char *item = dup_trimmed(p, n);
		if (!item)
			return fail(L, "out of memory");
		p += n + (p[n] == ',');
		if (!*item) {
			free(item);
			continue;
		}
		if (strlen(item) > 1024) {
			free(item);
			return fail(L, "%s: a prefix is at most 1,024 bytes", where);
		}
		if (grow(L, (void **)&lc->prefixes, lc->n_prefixes, sizeof *lc->prefixes) != 0) {
			free(item);
			return -1;
		}
		lc->prefixes[lc->n_prefixes++] = item;
	}
	if (!lc->n_prefixes)
		return fail(L, "%s: expected comma-separated key prefixes, got nothing", where);
	return 0;
}

/* ---- sections ------------------------------------------------------------- */

/* Checks the section just finished for settings it must have. */
static int finish_section(struct load *L)
{
	char at[300];
	loc(L, L->sect_line, at, sizeof at);
	switch (L->sect) {
	case S_KEY: {
		const struct client_key *k = &L->c->keys[L->idx];
		if (!k->secret)
			return fail(L, "%s: %s: secret is missing", at, L->label);
		if (!k->n_grants)
			return fail(L, "%s: %s: buckets is missing", at, L->label);
		return 0;
	}
	case S_ANON:
		if (!L->c->anonymous.n_grants)
			return fail(L, "%s: %s: buckets is missing", at, L->label);
		return 0;
	case S_BUCKET: {
		struct cfg *c = L->c;
		struct cfg_list_cache *lc = c->n_list_caches ? &c->list_caches[c->n_list_caches - 1]
		                          : NULL;
		bool listed = lc && strcmp(lc->bucket, c->bucket_regions[L->idx].bucket) == 0;
		if (listed && !lc->ttl_s)
			return fail(L, "%s: %s: list_cache_prefixes needs list_cache_ttl", at, L->label);
		if (c->bucket_regions[L->idx].region)
			return 0;
		if (!listed)
			return fail(L, "%s: %s: region is missing (a [bucket] section sets region, "
			            "list_cache_ttl or both)", at, L->label);
		/* Only a list cache: the bucket keeps the upstream's region. The
		 * section was the last one added. */
		free(c->bucket_regions[--c->n_bucket_regions].bucket);
		return 0;
	}
	default:
		return 0;
	}
}

/* A header line "[...]"; text is the header without '[' and ']'. */
static int begin_section(struct load *L, const char *text)
{
	char at[300];
	loc(L, L->line, at, sizeof at);
	if (finish_section(L) != 0)
		return -1;

	char *name = dup_trimmed(text, strlen(text));
	if (!name)
		return fail(L, "out of memory");
	size_t word = strcspn(name, " \t");
	char *arg = name + word;
	while (is_blank(*arg))
		arg++;

	int r = 0;
	L->sect = S_NONE;
	L->last_name[0] = '\0';
	memset(L->seen, 0, sizeof L->seen);
	L->sect_line = L->line;
	snprintf(L->label, sizeof L->label, "[%s]", name);

	static const char *const singles[] = { "server", "upstream", "anonymous", "cache", "admin",
		"cluster" };
	static const enum section single_kind[] = { S_SERVER, S_UPSTREAM, S_ANON, S_CACHE, S_ADMIN,
		S_CLUSTER };
	for (int i = 0; i < 6; i++) {
		if (strcasecmp(name, singles[i]) != 0)
			continue;
		if (L->once[i]) {
			r = fail(L, "%s: [%s] appears twice (first on line %d)", at, singles[i],
			         L->once[i]);
		} else {
			L->once[i] = L->line;
			L->sect = single_kind[i];
			snprintf(L->label, sizeof L->label, "[%s]", singles[i]);
		}
		free(name);
		return r;
	}

	if (word == 3 && strncasecmp(name, "key", 3) == 0 && *arg) {
		snprintf(L->label, sizeof L->label, "[key %s]", arg);
		if ((r = add_key(L, arg, at)) == 0) {
			L->sect = S_KEY;
			L->idx = L->c->n_keys - 1;
		}
	} else if (word == 6 && strncasecmp(name, "bucket", 6) == 0 && *arg) {
		snprintf(L->label, sizeof L->label, "[bucket %s]", arg);
		if ((r = add_bucket(L, arg, at)) == 0) {
			L->sect = S_BUCKET;
			L->idx = L->c->n_bucket_regions - 1;
		}
	} else if ((word == 3 && strncasecmp(name, "key", 3) == 0) ||
	           (word == 6 && strncasecmp(name, "bucket", 6) == 0)) {
		r = fail(L, "%s: [%s] needs a name: [%s <%s>]", at, name, name,
		         word == 3 ? "ACCESS_KEY_ID" : "bucket-name");
	} else {
		r = fail(L, "%s: unknown section [%s] (expected [server], [upstream], [cache], "
		         "[admin], [key <ACCESS_KEY_ID>], [anonymous] or [bucket <name>])", at, name);
	}
	free(name);
	return r;
}

/* ---- the INI reader and handler ------------------------------------------- */

/*
 * libinih's line reader (fgets-like): hands out one line at a time so we
 * know the line number, and handles "[section]" lines before libinih sees
 * them. libinih treats a line that starts with '[' as a header; an
 * indented line after a setting as a continuation of it (a multi-line
 * value); an indented '[' line elsewhere as a header too, which we refuse.
 */
static char *read_line(char *out, int size, void *user)
{
	struct load *L = user;
	if (L->failed || !*L->pos)
		return NULL;
	const char *s = L->pos;
	size_t n = strcspn(s, "\n");
	L->pos = s + n + (s[n] == '\n');
	L->line++;

	char at[300];
	loc(L, L->line, at, sizeof at);
	/* Like fgets(): the line and its newline, NUL-terminated. */
	if (size < 3 || n > (size_t)size - 2) {
		fail(L, "%s: line is longer than %d characters (a long buckets list can continue "
		     "on indented lines)", at, size < 3 ? 0 : size - 2);
		return NULL;
	}
	memcpy(out, s, n);
	out[n] = '\n';
	out[n + 1] = '\0';

	const char *t = out;
	if (L->line == 1 && strncmp(t, "\xEF\xBB\xBF", 3) == 0)
		t += 3;  /* UTF-8 byte order mark; libinih skips it too */
	L->indented = is_blank(*t);
	const char *first = t;
	while (is_blank(*first))
		first++;
	if (*first != '[')
		return out;
	if (L->indented) {
		if (!L->last_name[0]) {
			fail(L, "%s: a [section] header must start at the beginning of the line", at);
			return NULL;
		}
		return out;  /* continuation of the previous value */
	}
	const char *end = strchr(t, ']');
	if (!end) {
		fail(L, "%s: section header without a closing ']'", at);
		return NULL;
	}
	const char *rest = end + 1;
	while (is_blank(*rest))
		rest++;
	if (*rest && *rest != ';' && *rest != '#') {
		fail(L, "%s: unexpected text after the section header", at);
		return NULL;
	}
	size_t len = (size_t)(end - t - 1);
	if (len >= sizeof L->raw)
		len = sizeof L->raw - 1;
	memcpy(L->raw, t + 1, len);
	L->raw[len] = '\0';
	if (begin_section(L, L->raw) != 0)
		return NULL;
	return out;
}

static const struct setting *find_setting(const char *section, const char *name)
{
	for (size_t i = 0; i < N_SETTINGS; i++)
		if (strcmp(settings[i].section, section) == 0 &&
		    strcasecmp(settings[i].name, name) == 0)
			return &settings[i];
	return NULL;
}

/* The slot in seen[] for a setting of this section, or -1: unknown. */
static int slot_of(const struct load *L, const char *name, const struct setting **s)
{
	*s = NULL;
	switch (L->sect) {
	case S_SERVER:
	case S_UPSTREAM:
	case S_CACHE:
	case S_ADMIN:
	case S_CLUSTER:
		*s = find_setting(L->sect == S_SERVER ? "server"
		                  : L->sect == S_CACHE ? "cache"
		                  : L->sect == S_ADMIN ? "admin"
		                  : L->sect == S_CLUSTER ? "cluster" : "upstream", name);
		return *s ? (int)(*s - settings) : -1;
	case S_KEY:
		if (strcasecmp(name, "secret") == 0)
			return F_SECRET;
		/* fall through */
	case S_ANON:
		if (strcasecmp(name, "access") == 0)
			return F_ACCESS;
		if (strcasecmp(name, "buckets") == 0)
			return F_BUCKETS;
		return -1;
	case S_BUCKET:
		if (strcasecmp(name, "list_cache_ttl") == 0)
			return F_LIST_TTL;
		if (strcasecmp(name, "list_cache_prefixes") == 0)
			return F_LIST_PREFIXES;
		return strcasecmp(name, "region") == 0 ? F_REGION : -1;
	case S_NONE:
		break;
	}
	return -1;
}

static int on_value(void *user, const char *section, const char *name, const char *value)
{
	struct load *L = user;
	if (L->failed)
		return 0;

	char at[300], where[700];
	loc(L, L->line, at, sizeof at);
	/* libinih copies section names into a short buffer: compare a prefix. */
	if (strncmp(section, L->raw, strlen(section)) != 0) {
		fail(L, "%s: could not follow the section headers here", at);
		return 0;
	}
	if (L->sect == S_NONE) {
		fail(L, "%s: setting \"%s\" comes before any [section]", at, name);
		return 0;
	}
	const struct setting *s;
	int slot = slot_of(L, name, &s);
	if (slot < 0) {
		fail(L, "%s: %s unknown setting \"%s\"", at, L->label, name);
		return 0;
	}
	snprintf(where, sizeof where, "%s: %s %s", at, L->label, name);

	bool cont = L->indented && strcasecmp(name, L->last_name) == 0;
	snprintf(L->last_name, sizeof L->last_name, "%s", name);
	if (cont && !(L->sect != S_SERVER && L->sect != S_UPSTREAM && L->sect != S_CACHE &&
	              L->sect != S_ADMIN && L->sect != S_CLUSTER &&
	              (slot == F_BUCKETS || (L->sect == S_BUCKET && slot == F_LIST_PREFIXES)))) {
		fail(L, "%s: value continues on an indented line; only buckets and "
		     "list_cache_prefixes may span lines", where);
		return 0;
	}
	if (!cont && L->seen[slot]) {
		fail(L, "%s: set twice (first on line %d)", where, L->seen[slot]);
		return 0;
	}
	L->seen[slot] = L->line;

	struct cfg *c = L->c;
	struct client_key *k = L->sect == S_KEY ? &c->keys[L->idx] : &c->anonymous;
	if (s) {
		if (s->kind == K_REGION)
			L->region_in_file = true;
		set_setting(L, s, value, where);
	} else if (L->sect == S_BUCKET && slot != F_REGION) {
		set_list_cache(L, slot, value, where);
	} else if (L->sect == S_BUCKET) {
		if (!valid_region(value))
			fail(L, "%s: expected a region name such as eu-west-1, got \"%s\"", where, value);
		else
			set_str(L, &c->bucket_regions[L->idx].region, value);
	} else if (slot == F_SECRET) {
		if (!*value)
			fail(L, "%s: is empty", where);
		else
			set_str(L, &k->secret, value);
	} else if (slot == F_ACCESS) {
		parse_access(L, k, value, where);
	} else {
		add_grants(L, k, value, where);
	}
	return !L->failed;
}

/* ---- environment ---------------------------------------------------------- */

/* The value of NAME in envp, or NULL; an empty value counts as unset. */
static const char *env_get(const char *const *envp, const char *name)
{
	size_t n = strlen(name);
	for (; envp && *envp; envp++)
		if (strncmp(*envp, name, n) == 0 && (*envp)[n] == '=')
			return (*envp)[n + 1] ? *envp + n + 1 : NULL;
	return NULL;
}

/* A trimmed copy of an environment value (free() it), or NULL: unset or
 * blank, or out of memory (then L->failed is set). */
static char *env_trimmed(struct load *L, const char *const *envp, const char *name)
{
	const char *v = env_get(envp, name);
	if (!v)
		return NULL;
	char *t = dup_trimmed(v, strlen(v));
	if (!t)
		fail(L, "out of memory");
	else if (!*t) {
		free(t);
		t = NULL;
	}
	return t;
}

static int apply_env(struct load *L, const char *const *envp)
{
	struct cfg *c = L->c;
	char *v;

	for (size_t i = 0; i < N_SETTINGS && !L->failed; i++) {
		if ((v = env_trimmed(L, envp, settings[i].env)) != NULL)
			set_setting(L, &settings[i], v, settings[i].env);
		else if (settings[i].kind == K_REGION && !L->region_in_file) {
			const char *aws = "AWS_REGION";
			if (!(v = env_trimmed(L, envp, aws)))
				v = env_trimmed(L, envp, aws = "AWS_DEFAULT_REGION");
			if (v)
				set_setting(L, &settings[i], v, aws);
		}
		free(v);
	}
	if (L->failed)
		return -1;

	char *id = env_trimmed(L, envp, "LARDER_CLIENT_KEY");
	char *secret = env_trimmed(L, envp, "LARDER_CLIENT_SECRET");
	if (id && !secret)
		fail(L, "LARDER_CLIENT_KEY is set but LARDER_CLIENT_SECRET is not");
	else if (!id && secret)
		fail(L, "LARDER_CLIENT_SECRET is set but LARDER_CLIENT_KEY is not");
	else if (id && add_key(L, id, "LARDER_CLIENT_KEY") == 0) {
		struct client_key *k = &c->keys[c->n_keys - 1];
		k->secret = secret;
		secret = NULL;
		k->write = true;
		add_grant(L, k, "*", "LARDER_CLIENT_KEY");
	}
	free(id);
	free(secret);
	if (L->failed)
		return -1;

	if ((v = env_trimmed(L, envp, "LARDER_ANONYMOUS")) != NULL) {
		free_grants(&c->anonymous);
		c->anonymous.write = false;
		add_grants(L, &c->anonymous, v, "LARDER_ANONYMOUS");
		free(v);
	}
	return L->failed ? -1 : 0;
}

/* ---- load ----------------------------------------------------------------- */

static int set_defaults(struct load *L)
{
	struct cfg *c = L->c;
	c->listen_port = 8080;
	c->workers = 0;
	c->max_connections = 4096;
	c->max_header_bytes = 16384;
	c->client_timeout_s = 60;
	c->shutdown_grace_s = 30;
	c->max_skew_s = 900;
	c->addressing = CFG_ADDR_AUTO;
	c->upstream_tls_verify = true;
	c->upstream_timeout_s = 30;
	c->creds_refresh_margin_s = 300;
	c->upstream_retries = 3;
	c->ram_cache_bytes = (size_t)1 << 30;
	c->disk_cache_bytes = (size_t)10 << 30;
	c->chunk_bytes = (size_t)8 << 20;
	c->cache_stale_after_s = 86400;
	c->metadata_ttl_s = 60;
	c->negative_ttl_s = 0;
	c->list_cache_bytes = (size_t)16 << 20;
	c->readahead_chunks = 8; /* docs/benchmarks.md: one cold 256 MiB shard 3.9x -> 6.4x */
	c->access_log_buffer = 64 * 1024; /* docs/benchmarks.md, "The access log" */
	c->access_log_flush_ms = 1000;
	c->directory_ttl_s = 3600;
	c->admin_port = 9090;
	if (set_str(L, &c->listen_host, "127.0.0.1") || set_str(L, &c->log_level, "info") ||
	    set_str(L, &c->admin_host, "127.0.0.1") ||
	    set_str(L, &c->access_log, "-") || set_str(L, &c->upstream_region, "us-east-1") ||
	    set_str(L, &c->cache_policy, "subset"))
		return -1;
	return 0;
}

/* A node in a cluster: Redis URL, how peers reach it, a shared secret;
 * its id defaults to the host name. */
static int cluster_check(struct load *L)
{
	struct cfg *c = L->c;
	if (strncmp(c->redis_url, "redis://", 8) != 0 || !c->redis_url[8])
		return fail(L, "LARDER_REDIS_URL: expected redis://host:port, got \"%s\"",
		            c->redis_url);
	if (!c->cluster_secret)
		return fail(L, "LARDER_CLUSTER_SECRET: a cluster (LARDER_REDIS_URL) needs a shared "
		            "secret of 16-256 characters, the same on every node");
	if (!c->advertise || !strchr(c->advertise, ':'))
		return fail(L, "LARDER_ADVERTISE: a cluster node needs the host:port its peers reach "
		            "it at, got \"%s\"", c->advertise ? c->advertise : "");
	if (c->cluster_ca_file && access(c->cluster_ca_file, R_OK) != 0)
		return fail(L, "LARDER_CLUSTER_CA_FILE: cannot read \"%s\": %s", c->cluster_ca_file,
		            strerror(errno));
	if (!c->node_id) {
		char host[256];
		if (gethostname(host, sizeof host) != 0)
			snprintf(host, sizeof host, "%s", c->advertise);
		host[sizeof host - 1] = '\0';
		if (set_str(L, &c->node_id, host) != 0)
			return -1;
	}
	return 0;
}

static struct cfg *load(const char *text, const char *src, const char *const *envp,
                        char *err, size_t errlen)
{
	struct load L = { .err = err, .errlen = errlen, .src = src, .pos = text ? text : "" };
	if (err && errlen)
		err[0] = '\0';
	L.c = calloc(1, sizeof *L.c);
	if (!L.c) {
		fail(&L, "out of memory");
		return NULL;
	}
	if (set_defaults(&L) != 0)
		goto fail;
	if (src && set_str(&L, &L.c->source, src) != 0)
		goto fail;

	if (text) {
		int r = ini_parse_stream(read_line, &L, on_value, &L);
		if (!L.failed && r != 0) {
			char at[300];
			loc(&L, r > 0 ? r : L.line, at, sizeof at);
			if (r > 0)
				fail(&L, "%s: expected \"name = value\" or a [section]", at);
			else
				fail(&L, "%s: the INI parser failed (%d)", at, r);
		}
		if (!L.failed)
			finish_section(&L);
		if (L.failed)
			goto fail;
	}
	if (apply_env(&L, envp) != 0)
		goto fail;
	if (L.c->redis_url && cluster_check(&L) != 0)
		goto fail;
	if (!L.c->tls_cert != !L.c->tls_key) {
		fail(&L, "%s is set but %s is not: TLS needs both a certificate and its key",
		     L.c->tls_cert ? "LARDER_TLS_CERT" : "LARDER_TLS_KEY",
		     L.c->tls_cert ? "LARDER_TLS_KEY" : "LARDER_TLS_CERT");
		goto fail;
	}
	return L.c;
fail:
	cfg_free(L.c);
	return NULL;
}

struct cfg *cfg_load_text(const char *text, const char *const *envp, char *err, size_t errlen)
{
	return load(text, NULL, envp, err, errlen);
}

static char *read_file(const char *path, char *err, size_t errlen)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
		return NULL;
	}
	char *text = malloc(MAX_FILE_BYTES + 1);
	size_t n = text ? fread(text, 1, MAX_FILE_BYTES + 1, f) : 0;
	bool bad = text && ferror(f);
	fclose(f);
	if (!text) {
		snprintf(err, errlen, "%s: out of memory", path);
		return NULL;
	}
	if (bad || n > MAX_FILE_BYTES || memchr(text, '\0', n)) {
		snprintf(err, errlen, "%s: %s", path,
		         bad ? "read error" : n > MAX_FILE_BYTES ? "larger than 1 MiB"
		                                               : "contains a NUL byte");
		free(text);
		return NULL;
	}
	text[n] = '\0';
	return text;
}

struct cfg *cfg_load(const char *path, char *err, size_t errlen)
{
	char dummy[1];
	if (!err || !errlen) {
		err = dummy;
		errlen = sizeof dummy;
	}
	const char *const *envp = (const char *const *)environ;
	if (!path)
		path = env_get(envp, "LARDER_CONFIG");
	if (!path)
		return load(NULL, NULL, envp, err, errlen);
	char *text = read_file(path, err, errlen);
	if (!text)
		return NULL;
	struct cfg *c = load(text, path, envp, err, errlen);
	free(text);
	return c;
}

void cfg_free(struct cfg *c)
{
	if (!c)
		return;
	free(c->listen_host);
	free(c->base_domain);
	free(c->log_level);
	free(c->access_log);
	free(c->upstream_url);
	free(c->upstream_region);
	free(c->upstream_ca_file);
	free(c->cache_dir);
	free(c->cache_policy);
	free(c->tls_cert);
	free(c->tls_key);
	free(c->redis_url);
	free(c->node_id);
	free(c->advertise);
	free(c->cluster_secret);
	free(c->cluster_ca_file);
	free(c->admin_host);
	if (c->admin_token)
		explicit_bzero(c->admin_token, strlen(c->admin_token));
	free(c->admin_token);
	for (size_t i = 0; i < c->n_keys; i++) {
		free(c->keys[i].id);
		free(c->keys[i].secret);
		free_grants(&c->keys[i]);
	}
	free(c->keys);
	free_grants(&c->anonymous);
	for (size_t i = 0; i < c->n_bucket_regions; i++) {
		free(c->bucket_regions[i].bucket);
		free(c->bucket_regions[i].region);
	}
	free(c->bucket_regions);
	for (size_t i = 0; i < c->n_list_caches; i++) {
		free(c->list_caches[i].bucket);
		for (size_t j = 0; j < c->list_caches[i].n_prefixes; j++)
			free(c->list_caches[i].prefixes[j]);
		free(c->list_caches[i].prefixes);
	}
	free(c->list_caches);
	free(c->source);
	free(c);
}

const struct client_key *cfg_find_key(const struct cfg *c, const char *id)
{
	if (!c || !id)
		return NULL;
	for (size_t i = 0; i < c->n_keys; i++)
		if (strcmp(c->keys[i].id, id) == 0)
			return &c->keys[i];
	return NULL;
}

const char *cfg_bucket_region(const struct cfg *c, const char *bucket)
{
	if (!c || !bucket)
		return NULL;
	for (size_t i = 0; i < c->n_bucket_regions; i++)
		if (strcmp(c->bucket_regions[i].bucket, bucket) == 0)
			return c->bucket_regions[i].region;
	return NULL;
}

unsigned cfg_list_ttl(const struct cfg *c, const char *bucket, const char *prefix)
{
	if (!c || !bucket || !c->list_cache_bytes)
		return 0;
	for (size_t i = 0; i < c->n_list_caches; i++) {
		const struct cfg_list_cache *lc = &c->list_caches[i];
		if (strcmp(lc->bucket, bucket) != 0)
			continue;
		if (!lc->n_prefixes)
			return lc->ttl_s;
		for (size_t j = 0; prefix && j < lc->n_prefixes; j++)
			if (strncmp(prefix, lc->prefixes[j], strlen(lc->prefixes[j])) == 0)
				return lc->ttl_s;
		return 0;
	}
	return 0;
}

/* ---- sizes ---------------------------------------------------------------- */

/*
 * <digits>[.<digits>] [unit], unit case-insensitive: none or B (bytes);
 * K, M, G, T, kB, MB, GB, TB (powers of 1000); Ki, Mi, Gi, Ti, KiB ... TiB
 * (powers of 1024). The result must be a whole number of bytes.
 */
int cfg_parse_size(const char *s, uint64_t *out)
{
	static const struct { const char *unit; uint64_t mult; } units[] = {
		{ "", 1 }, { "b", 1 },
		{ "k", 1000ull }, { "kb", 1000ull },
		{ "m", 1000000ull }, { "mb", 1000000ull },
		{ "g", 1000000000ull }, { "gb", 1000000000ull },
		{ "t", 1000000000000ull }, { "tb", 1000000000000ull },
		{ "ki", 1ull << 10 }, { "kib", 1ull << 10 },
		{ "mi", 1ull << 20 }, { "mib", 1ull << 20 },
		{ "gi", 1ull << 30 }, { "gib", 1ull << 30 },
		{ "ti", 1ull << 40 }, { "tib", 1ull << 40 },
	};
	if (!s || !out)
		return -EINVAL;
	while (is_blank(*s))
		s++;

	uint64_t whole = 0, frac = 0, scale = 1;
	if (*s < '0' || *s > '9')
		return -EINVAL;
	for (; *s >= '0' && *s <= '9'; s++)
		if (__builtin_mul_overflow(whole, 10, &whole) ||
		    __builtin_add_overflow(whole, (uint64_t)(*s - '0'), &whole))
			return -EINVAL;
	if (*s == '.') {
		s++;
		if (*s < '0' || *s > '9')
			return -EINVAL;
		for (; *s >= '0' && *s <= '9'; s++) {
			if (scale >= 1000000000ull) {
				if (*s != '0')  /* more digits than any unit needs */
					return -EINVAL;
				continue;
			}
			frac = frac * 10 + (uint64_t)(*s - '0');
			scale *= 10;
		}
	}
	while (is_blank(*s))
		s++;
	size_t ulen = strlen(s);
	while (ulen && is_blank(s[ulen - 1]))
		ulen--;

	for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
		if (strlen(units[i].unit) != ulen || strncasecmp(s, units[i].unit, ulen) != 0)
			continue;
		uint64_t m = units[i].mult, bytes, part;
		if (__builtin_mul_overflow(whole, m, &bytes) ||
		    __builtin_mul_overflow(frac, m, &part) || part % scale != 0 ||
		    __builtin_add_overflow(bytes, part / scale, &bytes))
			return -EINVAL;
		*out = bytes;
		return 0;
	}
	return -EINVAL;
}

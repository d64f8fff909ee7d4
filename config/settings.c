/*
 * settings.c - the [server], [upstream], [cache], [admin] and [cluster]
 * settings: one table row each (section, name, LARDER_* variable, kind,
 * field, range), and how a value of each kind is checked and stored. The
 * file (config/ini.c) and the environment (config/env.c) both set them
 * through load_setting.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/log.h"
#include "config/load.h"

#define SET(sec, nm, ev, k, field, lo, hi) \
	{ .section = sec, .name = nm, .env = ev, .kind = k, \
	  .off = offsetof(struct cfg, field), .min = lo, .max = hi }

const struct setting load_settings[] = {
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
	SET("upstream", "min_speed", "LARDER_UPSTREAM_MIN_SPEED", K_SIZE, upstream_min_speed, 0,
	    1ul << 30),
	SET("upstream", "creds_refresh_margin", "LARDER_CREDS_REFRESH_MARGIN", K_UINT,
	    creds_refresh_margin_s, 0, 43200),
	SET("upstream", "retries", "LARDER_UPSTREAM_RETRIES", K_UINT, upstream_retries, 0, 20),
	SET("upstream", "window_max", "LARDER_UPSTREAM_WINDOW_MAX", K_UINT, upstream_window_max, 1,
	    100000),
	SET("upstream", "window_min", "LARDER_UPSTREAM_WINDOW_MIN", K_UINT, upstream_window_min, 1,
	    100000),
	SET("upstream", "slot_wait_ms", "LARDER_UPSTREAM_SLOT_WAIT_MS", K_UINT, upstream_slot_wait_ms,
	    0, 600000),
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
	/* At most READAHEAD_MAX (gateway/cread.h): a reader has that many slots. */
	SET("cache", "readahead", "LARDER_READAHEAD", K_UINT, readahead_chunks, 0, 16),
	SET("cache", "inflight_size", "LARDER_INFLIGHT_SIZE", K_SIZE, inflight_bytes, 0,
	    1ul << 50),
	SET("cache", "lookahead_idle", "LARDER_LOOKAHEAD_IDLE", K_UINT, lookahead_idle_s, 1,
	    86400),
	SET("cache", "pin_max", "LARDER_PIN_MAX", K_SIZE, pin_max_bytes, 0, 1ul << 50),
	SET("cache", "pin_max_nvme", "LARDER_PIN_MAX_NVME", K_SIZE, pin_max_nvme_bytes, 0, 1ul << 56),
	SET("cache", "list_cache_size", "LARDER_LIST_CACHE_SIZE", K_SIZE, list_cache_bytes, 0,
	    1ul << 40),
	SET("admin", "listen", "LARDER_ADMIN_LISTEN", K_ADMIN, admin_host, 0, 0),
	SET("admin", "token", "LARDER_ADMIN_TOKEN", K_TOKEN, admin_token, 16, 256),
	SET("cluster", "redis_url", "LARDER_REDIS_URL", K_PATH, redis_url, 0, 0),
	/* At most CLUSTER_NAME_MAX - 1 (cluster/cluster.h), as node ids and
	 * addresses travel in the membership. */
	SET("cluster", "node_id", "LARDER_NODE_ID", K_NAME, node_id, 1, 127),
	SET("cluster", "advertise", "LARDER_ADVERTISE", K_HOSTPORT, advertise, 1, 127),
	SET("cluster", "secret", "LARDER_CLUSTER_SECRET", K_TOKEN, cluster_secret, 16, 256),
	SET("cluster", "directory_ttl", "LARDER_DIRECTORY_TTL", K_UINT, directory_ttl_s, 10,
	    7 * 86400),
	SET("cluster", "ca_file", "LARDER_CLUSTER_CA_FILE", K_PATH, cluster_ca_file, 0, 0),
};

_Static_assert(sizeof load_settings / sizeof load_settings[0] == N_SETTINGS,
               "N_SETTINGS in config/load.h counts the rows of load_settings");

/* ---- values --------------------------------------------------------------- */

int load_parse_ulong(const char *s, unsigned long *out)
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

/* A word that switches something on or off, other than "off" itself. */
static bool switch_word(const char *s)
{
	bool b;
	return parse_bool(s, &b) == 0 && strcmp(s, "off") != 0;
}

/* "host:port" or "[v6addr]:port" into *host_out and *port_out. */
static int set_listen(struct load *L, const char *v, const char *where, char **host_out,
                      uint16_t *port_out)
{
	const char *colon = strrchr(v, ':');
	if (!colon || colon == v)
		return load_fail(L, "%s: expected host:port, got \"%s\"", where, v);
	const char *host = v, *host_end = colon;
	if (*v == '[') {
		if (colon[-1] != ']' || colon - v < 3)
			return load_fail(L, "%s: expected [ipv6-address]:port, got \"%s\"", where, v);
		host = v + 1;
		host_end = colon - 1;
	} else if (memchr(v, ':', (size_t)(colon - v))) {
		return load_fail(L, "%s: write an IPv6 address in brackets, as [::1]:8080, got \"%s\"",
		            where, v);
	}
	/* A name (letters, digits, '-', '.', '_' as container names have) or
	 * an address; anything else would pass --check and fail the start. */
	for (const char *h = host; h < host_end; h++)
		if (!is_alnum(*h) && *h != '-' && *h != '.' && *h != '_' &&
		    !(*v == '[' && (*h == ':' || *h == '%')))
			return load_fail(L, "%s: invalid host in \"%s\"", where, v);
	unsigned long port = 0;
	int r = load_parse_ulong(colon + 1, &port);
	if (r == -EINVAL)
		return load_fail(L, "%s: port \"%s\" is not a number", where, colon + 1);
	if (r || port < 1 || port > 65535)
		return load_fail(L, "%s: port \"%s\" is out of range (1-65535)", where, colon + 1);
	char *h = strndup(host, (size_t)(host_end - host));
	if (!h)
		return load_fail(L, "out of memory");
	free(*host_out);
	*host_out = h;
	*port_out = (uint16_t)port;
	return 0;
}

/* Region names go into the SigV4 credential scope: no '/' or blanks. */
bool load_valid_region(const char *s)
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
	size_t skip;
	if (strncasecmp(v, "http://", 7) == 0)
		skip = 7;
	else if (strncasecmp(v, "https://", 8) == 0)
		skip = 8;
	else
		return load_fail(L, "%s: expected an http:// or https:// URL, got \"%s\"", where, v);
	if (v[skip] == '\0' || v[skip] == '/' || v[skip] == ':')
		return load_fail(L, "%s: no host in \"%s\"", where, v);
	for (const char *p = v; *p; p++)
		if ((unsigned char)*p <= ' ' || *p == '?' || *p == '#' || *p == 0x7f)
			return load_fail(L, "%s: unexpected character in URL \"%s\"", where, v);
	size_t n = strlen(v);
	while (n > skip && v[n - 1] == '/')
		n--;
	char *u = strndup(v, n);
	if (!u)
		return load_fail(L, "out of memory");
	free(*field);
	*field = u;
	return 0;
}

int load_setting(struct load *L, const struct setting *s, const char *v, const char *where)
{
	void *field = (char *)L->c + s->off;
	unsigned long n = 0;
	uint64_t size = 0;
	int r;

	/* Only the file hands over an empty value (an empty variable is unset).
	 * There "name =" is a mistake, such as a template's empty variable: it
	 * would turn the upstream URL, the cache directory or the token off
	 * without a word. */
	if (!*v && (s->kind == K_TOKEN || s->kind == K_URL || s->kind == K_DOMAIN ||
	            s->kind == K_PATH || s->kind == K_HOSTPORT || s->kind == K_NAME))
		return load_fail(L, "%s: no value (to leave it unset, leave the line out or comment it "
		                 "out)", where);

	switch (s->kind) {
	case K_LISTEN:
		return set_listen(L, v, where, &L->c->listen_host, &L->c->listen_port);
	case K_ADMIN:
		if (strcasecmp(v, "off") == 0) {
			L->c->admin_port = 0;
			return load_set_str(L, &L->c->admin_host, NULL);
		}
		return set_listen(L, v, where, &L->c->admin_host, &L->c->admin_port);
	case K_TOKEN:
		/* It travels in an Authorization header: visible ASCII, no blanks. */
		for (const char *p = v; *p; p++)
			if ((unsigned char)*p <= ' ' || (unsigned char)*p >= 0x7f)
				return load_fail(L, "%s: only visible ASCII characters, no spaces", where);
		if (strlen(v) < s->min || strlen(v) > s->max)
			return load_fail(L, "%s: must be %lu-%lu characters long (got %zu)", where, s->min,
			            s->max, strlen(v));
		return load_set_str(L, field, v);
	case K_UINT:
		r = load_parse_ulong(v, &n);
		if (r == -EINVAL)
			return load_fail(L, "%s: expected a whole number, got \"%s\"", where, v);
		if (r || n < s->min || n > s->max)
			return load_fail(L, "%s: \"%s\" is out of range (%lu-%lu)", where, v, s->min, s->max);
		*(unsigned *)field = (unsigned)n;
		return 0;
	case K_SIZE:
		if (cfg_parse_size(v, &size) != 0)
			return load_fail(L, "%s: expected a size such as 16384, 64KiB or 1MB, got \"%s\"",
			            where, v);
		if (size < s->min || size > s->max)
			return load_fail(L, "%s: \"%s\" is out of range (%lu-%lu bytes)", where, v, s->min,
			            s->max);
		*(size_t *)field = (size_t)size;
		return 0;
	case K_LEVEL: {
		static const char *const names[] = { "error", "warn", "info", "debug" };
		int l = log_level_parse(v);
		if (l < 0 || l > 3)
			return load_fail(L, "%s: expected error, warn, info or debug, got \"%s\"", where, v);
		return load_set_str(L, field, names[l]);
	}
	case K_LOGDEST:
	case K_PATH:
		if (!*v && s->kind == K_LOGDEST)
			return load_fail(L, "%s: expected \"-\", \"off\" or a file path, got nothing", where);
		/* A switch's word is a mistake for "-" or "off", not the name of
		 * a file in the working directory (a file so named: ./on). */
		if (s->kind == K_LOGDEST && switch_word(v))
			return load_fail(L,
			                 "%s: \"%s\" is not a destination: use \"-\" for standard "
			                 "output, \"off\" for none, or a file path (./%s for a file so named)",
			                 where, v, v);
		return load_set_str(L, field, v);
	case K_DOMAIN: {
		char *d = strdup(v);
		if (!d)
			return load_fail(L, "out of memory");
		for (char *p = d; *p; p++)
			if (*p >= 'A' && *p <= 'Z')
				*p = (char)(*p - 'A' + 'a');
		if (!valid_hostname(d)) {
			free(d);
			return load_fail(L, "%s: expected a host name such as s3.example.com, got \"%s\"",
			            where, v);
		}
		free(*(char **)field);
		*(char **)field = d;
		return 0;
	}
	case K_URL:
		return set_url(L, field, v, where);
	case K_HOSTPORT: {
		/* Peers build http://ADVERTISE/... from it: "host:" or a scheme
		 * would pass as a name and leave the node unreachable. */
		if (strstr(v, "://"))
			return load_fail(L, "%s: expected host:port, not a URL: \"%s\"", where, v);
		char *host = NULL;
		uint16_t port = 0;
		r = set_listen(L, v, where, &host, &port);
		free(host);
		if (r)
			return r;
		if (strlen(v) > s->max)
			return load_fail(L, "%s: at most %lu characters, got %zu", where, s->max, strlen(v));
		return load_set_str(L, field, v);
	}
	case K_NAME:
		for (const char *p = v; *p; p++)
			if ((unsigned char)*p <= ' ' || *p == 0x7f)
				return load_fail(L, "%s: a blank or a control character in it", where);
		if (strlen(v) > s->max)
			return load_fail(L, "%s: at most %lu characters, got %zu", where, s->max, strlen(v));
		return load_set_str(L, field, v);
	case K_REGION:
		if (!load_valid_region(v))
			return load_fail(L, "%s: expected a region name such as us-east-1, got \"%s\"", where, v);
		return load_set_str(L, field, v);
	case K_ADDR:
		if (strcasecmp(v, "auto") == 0)
			*(enum cfg_addressing *)field = CFG_ADDR_AUTO;
		else if (strcasecmp(v, "path") == 0)
			*(enum cfg_addressing *)field = CFG_ADDR_PATH;
		else if (strcasecmp(v, "virtual") == 0)
			*(enum cfg_addressing *)field = CFG_ADDR_VIRTUAL;
		else
			return load_fail(L, "%s: expected auto, path or virtual, got \"%s\"", where, v);
		return 0;
	case K_TTL:
		if (strcasecmp(v, "immutable") == 0) {
			*(long *)field = -1;
			return 0;
		}
		r = load_parse_ulong(v, &n);
		if (r || n > s->max)
			return load_fail(L, "%s: expected a number of seconds or \"immutable\", got \"%s\"",
			            where, v);
		*(long *)field = (long)n;
		return 0;
	case K_POLICY:
		if (strcasecmp(v, "subset") != 0 && strcasecmp(v, "lru") != 0)
			return load_fail(L, "%s: expected subset or lru, got \"%s\"", where, v);
		return load_set_str(L, field, strcasecmp(v, "lru") == 0 ? "lru" : "subset");
	case K_BOOL:
		if (parse_bool(v, field) != 0)
			return load_fail(L, "%s: expected true or false, got \"%s\"", where, v);
		return 0;
	}
	return load_fail(L, "%s: internal error: unknown setting kind", where);
}

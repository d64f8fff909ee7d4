/*
 * config.c - built-in defaults, then the INI file (read by libinih), then
 * LARDER_* environment variables; the checks across settings; freeing and
 * lookups.
 *
 * Every value is checked where it is read, so the message can say where it
 * came from: "larder.conf:12: [server] listen: ..." for the file and
 * "LARDER_LISTEN: ..." for the environment. Only the first error is kept.
 *
 * The parts: config/settings.c (the settings table and values), ini.c (the
 * file), env.c (the environment), keys.c (keys, grants, [bucket]
 * sections); config/load.h is what they share.
 */
#include "config/config.h"

#include <errno.h>
#include <inttypes.h>
#include <ini.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "config/load.h"

#define MAX_FILE_BYTES (1u << 20)

extern char **environ;

/* ---- helpers for every part of loading ------------------------------------ */

__attribute__((format(printf, 2, 3)))
int load_fail(struct load *L, const char *fmt, ...)
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
void load_loc(const struct load *L, int line, char *out, size_t n)
{
	if (L->src)
		snprintf(out, n, "%s:%d", L->src, line);
	else
		snprintf(out, n, "line %d", line);
}

/* Copy of s[0..n) without surrounding blanks, or NULL (out of memory). */
char *load_dup_trimmed(const char *s, size_t n)
{
	while (n && is_blank(*s))
		s++, n--;
	while (n && is_blank(s[n - 1]))
		n--;
	return strndup(s, n);
}

/* Replaces *field with a copy of v (NULL when v is NULL). */
int load_set_str(struct load *L, char **field, const char *v)
{
	char *copy = NULL;
	if (v && !(copy = strdup(v)))
		return load_fail(L, "out of memory");
	free(*field);
	*field = copy;
	return 0;
}

/* Grows an array whose capacity is the next power of two at or above n. */
int load_grow(struct load *L, void **arr, size_t n, size_t size)
{
	if (n & (n - 1))
		return 0;
	size_t cap = n ? n * 2 : 1;
	void *p = reallocarray(*arr, cap, size);
	if (!p)
		return load_fail(L, "out of memory");
	*arr = p;
	return 0;
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
	c->upstream_min_speed = 16 * 1024;
	c->creds_refresh_margin_s = 300;
	c->upstream_retries = 3;
	c->upstream_window_max = 64;
	c->upstream_window_min = 1;
	c->upstream_slot_wait_ms = 5000;
	c->ram_cache_bytes = (size_t)1 << 30;
	c->disk_cache_bytes = (size_t)10 << 30;
	c->chunk_bytes = (size_t)8 << 20;
	c->cache_stale_after_s = 86400;
	c->metadata_ttl_s = 60;
	c->negative_ttl_s = 0;
	c->list_cache_bytes = (size_t)16 << 20;
	c->lookahead_idle_s = 60;
	c->readahead_chunks = 12; /* docs/benchmarks.md: one cold 256 MiB shard 3.9x (4), 5.7x (8), 7.3x (12) */
	c->access_log_buffer = 64 * 1024; /* docs/benchmarks.md, "The access log" */
	c->access_log_flush_ms = 1000;
	c->directory_ttl_s = 3600;
	c->admin_port = 9090;
	if (load_set_str(L, &c->listen_host, "127.0.0.1") || load_set_str(L, &c->log_level, "info") ||
	    load_set_str(L, &c->admin_host, "127.0.0.1") ||
	    load_set_str(L, &c->access_log, "-") || load_set_str(L, &c->upstream_region, "us-east-1") ||
	    load_set_str(L, &c->cache_policy, "subset"))
		return -1;
	return 0;
}

/* url with its user and password (before the last '@') shown as "***":
 * the Redis password is written in the URL and never goes into a message. */
static void url_for_message(const char *url, char *out, size_t n)
{
	const char *at = strrchr(url, '@');
	if (!at) {
		snprintf(out, n, "%s", url);
		return;
	}
	const char *scheme = strstr(url, "://");
	int keep = scheme && scheme < at ? (int)(scheme + 3 - url) : 0;
	snprintf(out, n, "%.*s***%s", keep, url, at);
}

/* A node in a cluster: Redis URL, how peers reach it, a shared secret;
 * its id defaults to the host name. */
static int cluster_check(struct load *L)
{
	struct cfg *c = L->c;
	if (strncmp(c->redis_url, "redis://", 8) != 0 || !c->redis_url[8]) {
		char shown[300];
		url_for_message(c->redis_url, shown, sizeof shown);
		return load_fail(L, "LARDER_REDIS_URL: expected redis://host:port, got \"%s\"", shown);
	}
	if (!c->cluster_secret)
		return load_fail(L, "LARDER_CLUSTER_SECRET: a cluster (LARDER_REDIS_URL) needs a shared "
		            "secret of 16-256 characters, the same on every node");
	if (!c->advertise || !strchr(c->advertise, ':'))
		return load_fail(L, "LARDER_ADVERTISE: a cluster node needs the host:port its peers reach "
		            "it at, got \"%s\"", c->advertise ? c->advertise : "");
	/* Its share of the chunks is its capacity: a node with none owns nothing. */
	if (!c->ram_cache_bytes && !(c->cache_dir && c->disk_cache_bytes))
		return load_fail(L, "LARDER_RAM_CACHE_SIZE: 0 and no NVMe tier (LARDER_CACHE_DIR, "
		                 "LARDER_DISK_CACHE_SIZE): a cluster node needs a cache to share");
	if (c->cluster_ca_file && access(c->cluster_ca_file, R_OK) != 0)
		return load_fail(L, "LARDER_CLUSTER_CA_FILE: cannot read \"%s\": %s", c->cluster_ca_file,
		            strerror(errno));
	if (!c->node_id) {
		char host[256];
		if (gethostname(host, sizeof host) != 0)
			snprintf(host, sizeof host, "%s", c->advertise);
		host[sizeof host - 1] = '\0';
		if (load_set_str(L, &c->node_id, host) != 0)
			return -1;
	}
	return 0;
}

/* A tier of a few bytes is a size written without its unit ("16" for
 * 16GiB): bytes, so nothing would stay cached. 0 turns a tier off. */
#define TIER_MIN (64 * 1024)

/* What the start would find wrong later, said now (and by --check). */
static int check_settings(struct load *L)
{
	const struct cfg *c = L->c;
	static const char *const tier_names[] = { "LARDER_RAM_CACHE_SIZE",
		"LARDER_DISK_CACHE_SIZE" };
	const size_t tiers[] = { c->ram_cache_bytes, c->disk_cache_bytes };
	for (int i = 0; i < 2; i++)
		if (tiers[i] && tiers[i] < TIER_MIN)
			return load_fail(L, "%s: %zu bytes holds nothing worth caching (a size without a "
			                 "unit is in bytes: write 16GiB, say; 0 turns the tier off)",
			                 tier_names[i], tiers[i]);
	if (c->upstream_ca_file && access(c->upstream_ca_file, R_OK) != 0)
		return load_fail(L, "LARDER_UPSTREAM_CA_FILE: cannot read \"%s\": %s",
		                 c->upstream_ca_file, strerror(errno));
	/* The examples' placeholders (config/larder.conf, docker/k8s/secret.yaml)
	 * are public: a deployment that kept one would be open to anybody. */
	static const char placeholder[] = "change-me";
	const size_t pl = sizeof placeholder - 1;
	for (size_t i = 0; i < c->n_keys; i++)
		if (c->keys[i].secret && strncasecmp(c->keys[i].secret, placeholder, pl) == 0)
			return load_fail(L, "[key %s] secret: it starts with \"change-me\", an example's "
			                 "placeholder known to anybody: set a secret of your own",
			                 c->keys[i].id);
	const char *const named[] = { "LARDER_ADMIN_TOKEN", "LARDER_CLUSTER_SECRET" };
	const char *const values[] = { c->admin_token, c->cluster_secret };
	for (int i = 0; i < 2; i++)
		if (values[i] && strncasecmp(values[i], placeholder, pl) == 0)
			return load_fail(L, "%s: it starts with \"change-me\", an example's placeholder "
			                 "known to anybody: set a secret of your own", named[i]);
	if (c->admin_host && c->admin_port == c->listen_port &&
	    strcmp(c->admin_host, c->listen_host) == 0)
		return load_fail(L, "LARDER_ADMIN_LISTEN: %s:%u is LARDER_LISTEN too; the admin port "
		                 "needs an address of its own", c->admin_host, c->admin_port);
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
		load_fail(&L, "out of memory");
		return NULL;
	}
	if (set_defaults(&L) != 0)
		goto fail;
	if (src && load_set_str(&L, &L.c->source, src) != 0)
		goto fail;

	if (text) {
		int r = ini_parse_stream(load_read_line, &L, load_on_value, &L);
		if (!L.failed && r != 0) {
			char at[300];
			load_loc(&L, r > 0 ? r : L.line, at, sizeof at);
			if (r > 0)
				load_fail(&L, "%s: expected \"name = value\" or a [section]", at);
			else
				load_fail(&L, "%s: the INI parser failed (%d)", at, r);
		}
		if (!L.failed)
			load_section_end(&L);
		if (L.failed)
			goto fail;
	}
	if (load_env(&L, envp) != 0)
		goto fail;
	if (L.c->redis_url && cluster_check(&L) != 0)
		goto fail;
	if (L.c->pin_max_bytes > L.c->ram_cache_bytes) {
		load_fail(&L, "LARDER_PIN_MAX: %zu bytes is more than the RAM tier "
		          "(LARDER_RAM_CACHE_SIZE, %zu bytes): pinned chunks live in RAM",
		          L.c->pin_max_bytes, L.c->ram_cache_bytes);
		goto fail;
	}
	if (L.c->pin_max_nvme_bytes > L.c->disk_cache_bytes) {
		load_fail(&L, "LARDER_PIN_MAX_NVME: %zu bytes is more than the NVMe tier "
		          "(LARDER_DISK_CACHE_SIZE, %zu bytes)", L.c->pin_max_nvme_bytes,
		          L.c->disk_cache_bytes);
		goto fail;
	}
	for (size_t i = 0; i < L.c->n_keys; i++) {
		const struct client_key *k = &L.c->keys[i];
		if (k->max_resident_bytes && k->max_resident_bytes < L.c->chunk_bytes) {
			load_fail(&L, "[key %s] max_resident_bytes: %" PRIu64 " bytes is less "
			          "than one chunk (LARDER_CHUNK_SIZE, %zu bytes): none of its "
			          "reads could stay cached", k->id, k->max_resident_bytes,
			          L.c->chunk_bytes);
			goto fail;
		}
	}
	if (L.c->upstream_window_min > L.c->upstream_window_max) {
		load_fail(&L, "LARDER_UPSTREAM_WINDOW_MIN: %u is more than LARDER_UPSTREAM_WINDOW_MAX (%u)",
		          L.c->upstream_window_min, L.c->upstream_window_max);
		goto fail;
	}
	if (!L.c->tls_cert != !L.c->tls_key) {
		load_fail(&L, "%s is set but %s is not: TLS needs both a certificate and its key",
		     L.c->tls_cert ? "LARDER_TLS_CERT" : "LARDER_TLS_KEY",
		     L.c->tls_cert ? "LARDER_TLS_KEY" : "LARDER_TLS_CERT");
		goto fail;
	}
	if (check_settings(&L) != 0)
		goto fail;
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
	errno = 0;
	size_t n = text ? fread(text, 1, MAX_FILE_BYTES + 1, f) : 0;
	int bad = text && ferror(f) ? (errno ? errno : EIO) : 0;
	fclose(f);
	if (!text) {
		snprintf(err, errlen, "%s: out of memory", path);
		return NULL;
	}
	if (bad || n > MAX_FILE_BYTES || memchr(text, '\0', n)) {
		snprintf(err, errlen, "%s: %s", path,
		         bad ? strerror(bad) : n > MAX_FILE_BYTES ? "larger than 1 MiB"
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
		path = load_env_get(envp, "LARDER_CONFIG");
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
		load_free_grants(&c->keys[i]);
	}
	free(c->keys);
	load_free_grants(&c->anonymous);
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
	free(c->overridden);
	free(c);
}

/* ---- what a reload leaves as it was ---------------------------------------- */

static bool same_str(const char *a, const char *b)
{
	return a && b ? strcmp(a, b) == 0 : a == b;
}

static bool same_setting(const struct setting *s, const struct cfg *a, const struct cfg *b)
{
	const char *pa = (const char *)a + s->off, *pb = (const char *)b + s->off;
	switch (s->kind) {
	case K_LISTEN:
		return a->listen_port == b->listen_port && same_str(a->listen_host, b->listen_host);
	case K_ADMIN:
		return a->admin_port == b->admin_port && same_str(a->admin_host, b->admin_host);
	case K_UINT:
		return *(const unsigned *)pa == *(const unsigned *)pb;
	case K_SIZE:
		return *(const size_t *)pa == *(const size_t *)pb;
	case K_TTL:
		return *(const long *)pa == *(const long *)pb;
	case K_ADDR:
		return *(const enum cfg_addressing *)pa == *(const enum cfg_addressing *)pb;
	case K_BOOL:
		return *(const bool *)pa == *(const bool *)pb;
	default: /* the rest are strings */
		return same_str(*(char *const *)pa, *(char *const *)pb);
	}
}

static bool same_buckets(const struct cfg *a, const struct cfg *b)
{
	if (a->n_bucket_regions != b->n_bucket_regions || a->n_list_caches != b->n_list_caches)
		return false;
	for (size_t i = 0; i < a->n_bucket_regions; i++)
		if (!same_str(a->bucket_regions[i].bucket, b->bucket_regions[i].bucket) ||
		    !same_str(a->bucket_regions[i].region, b->bucket_regions[i].region))
			return false;
	for (size_t i = 0; i < a->n_list_caches; i++) {
		const struct cfg_list_cache *x = &a->list_caches[i], *y = &b->list_caches[i];
		if (!same_str(x->bucket, y->bucket) || x->ttl_s != y->ttl_s ||
		    x->n_prefixes != y->n_prefixes)
			return false;
		for (size_t j = 0; j < x->n_prefixes; j++)
			if (!same_str(x->prefixes[j], y->prefixes[j]))
				return false;
	}
	return true;
}

bool cfg_restart_change(const struct cfg *running, const struct cfg *fresh, size_t *from,
                        char *out, size_t n)
{
	for (size_t i = *from; i < N_SETTINGS; i++) {
		const struct setting *s = &load_settings[i];
		if (same_setting(s, running, fresh))
			continue;
		*from = i + 1;
		snprintf(out, n, "[%s] %s (%s)", s->section, s->name, s->env);
		return true;
	}
	if (*from <= N_SETTINGS && !same_buckets(running, fresh)) {
		*from = N_SETTINGS + 1;
		snprintf(out, n, "[bucket NAME] sections (region, list_cache_ttl, list_cache_prefixes)");
		return true;
	}
	*from = N_SETTINGS + 1;
	return false;
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
 * K, M, G, T, P, kB ... PB (powers of 1000); Ki, Mi, Gi, Ti, Pi, KiB ... PiB
 * (powers of 1024): the documented ranges reach 1PiB. The result must be a whole number of bytes.
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
		{ "p", 1000000000000000ull }, { "pb", 1000000000000000ull },
		{ "pi", 1ull << 50 }, { "pib", 1ull << 50 },
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

/*
 * keys.c - client keys, their grants, and [bucket NAME] sections (region,
 * list cache) as they are read: names checked against S3's rules, grants
 * normalised (see auth/grant.h), duplicates refused.
 */
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config/load.h"

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

/* One grant: "*", "bucket", "bucket/" (both: the whole bucket) or
 * "bucket/prefix" (prefix gets a trailing '/' if it lacks one). */
int load_grant(struct load *L, struct client_key *k, const char *item, const char *where)
{
	const char *slash = strchr(item, '/');
	size_t blen = slash ? (size_t)(slash - item) : strlen(item);
	const char *prefix = slash ? slash + 1 : "";
	size_t plen = strlen(prefix);

	char *bucket = strndup(item, blen);
	if (!bucket)
		return load_fail(L, "out of memory");
	if (strcmp(bucket, "*") == 0) {
		if (plen) {
			free(bucket);
			return load_fail(L, "%s: \"*\" means every bucket and takes no prefix, got \"%s\"",
			            where, item);
		}
	} else if (!valid_bucket(bucket)) {
		free(bucket);
		return load_fail(L, "%s: invalid bucket name in \"%s\" (3-63 characters of a-z, 0-9, "
		            "'.' and '-', or \"*\")", where, item);
	}
	if (grant_dot_segment(prefix)) {
		free(bucket);
		return load_fail(L, "%s: prefix in \"%s\" has a \".\" or \"..\" segment", where, item);
	}
	char *pfx = malloc(plen + 2);
	if (!pfx || load_grow(L, (void **)&k->grants, k->n_grants, sizeof *k->grants) != 0) {
		free(pfx);
		free(bucket);
		return load_fail(L, "out of memory");
	}
	memcpy(pfx, prefix, plen + 1);
	if (plen && prefix[plen - 1] != '/')
		memcpy(pfx + plen, "/", 2);
	k->grants[k->n_grants++] = (struct grant){ .bucket = bucket, .prefix = pfx };
	return 0;
}

/* A comma-separated list of grants; empty entries (a trailing comma before
 * a continuation line) are skipped. */
int load_grants(struct load *L, struct client_key *k, const char *list, const char *where)
{
	for (const char *p = list;;) {
		size_t n = strcspn(p, ",");
		char *item = load_dup_trimmed(p, n);
		if (!item)
			return load_fail(L, "out of memory");
		int r = *item ? load_grant(L, k, item, where) : 0;
		free(item);
		if (r)
			return r;
		if (!p[n])
			return 0;
		p += n + 1;
	}
}

void load_free_grants(struct client_key *k)
{
	for (size_t i = 0; i < k->n_grants; i++) {
		free(k->grants[i].bucket);
		free(k->grants[i].prefix);
	}
	free(k->grants);
	k->grants = NULL;
	k->n_grants = 0;
}

int load_access(struct load *L, struct client_key *k, const char *v, const char *where)
{
	if (strcasecmp(v, "read-only") == 0)
		k->write = false;
	else if (strcasecmp(v, "read-write") == 0)
		k->write = true;
	else
		return load_fail(L, "%s: expected read-only or read-write, got \"%s\"", where, v);
	return 0;
}

/* max_upstream_requests = 1-100000, max_bytes_per_second = a size
 * (64KiB-1TiB) a second, or max_resident_bytes = a size (1MiB-1PiB; at
 * least a chunk, checked with the other settings); 0 for no limit. */
int load_key_limit(struct load *L, struct client_key *k, int slot, const char *v,
                   const char *where)
{
	if (slot == F_MAX_RESIDENT) {
		uint64_t b = 0;
		if (cfg_parse_size(v, &b) != 0 || (b && (b < (1ull << 20) || b > (1ull << 50))))
			return load_fail(L, "%s: expected a size such as 16GiB (1MiB-1PiB, 0 = no "
			                 "limit), got \"%s\"", where, v);
		k->max_resident_bytes = b;
		return 0;
	}
	if (slot == F_MAX_RATE) {
		uint64_t b = 0;
		if (cfg_parse_size(v, &b) != 0 || (b && (b < 65536 || b > (1ull << 40))))
			return load_fail(L, "%s: expected bytes a second such as 64MiB (64KiB-1TiB, "
			                 "0 = no limit), got \"%s\"", where, v);
		k->max_bytes_per_second = b;
		return 0;
	}
	unsigned long n = 0;
	if (slot != F_MAX_UPSTREAM || load_parse_ulong(v, &n) != 0 || n > 100000)
		return load_fail(L, "%s: expected a number of concurrent upstream requests "
		                 "(1-100000, 0 = no limit), got \"%s\"", where, v);
	k->max_upstream_requests = (unsigned)n;
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

int load_key(struct load *L, const char *id, const char *where)
{
	struct cfg *c = L->c;
	if (!valid_key_id(id))
		return load_fail(L, "%s: invalid access key id \"%s\" (1-%d characters of A-Z, a-z, 0-9, "
		            "'_', '-', '.')", where, id, MAX_KEY_ID);
	if (cfg_find_key(c, id))
		return load_fail(L, "%s: duplicate key id \"%s\"", where, id);
	if (load_grow(L, (void **)&c->keys, c->n_keys, sizeof *c->keys) != 0)
		return -1;
	char *copy = strdup(id);
	if (!copy)
		return load_fail(L, "out of memory");
	c->keys[c->n_keys++] = (struct client_key){ .id = copy };
	return 0;
}

int load_bucket(struct load *L, const char *name, const char *at)
{
	struct cfg *c = L->c;
	if (!valid_bucket(name))
		return load_fail(L, "%s: %s: invalid bucket name (3-63 characters of a-z, 0-9, '.' and '-')",
		            at, L->label);
	for (size_t i = 0; i < c->n_bucket_regions; i++)
		if (strcmp(c->bucket_regions[i].bucket, name) == 0)
			return load_fail(L, "%s: %s appears twice", at, L->label);
	/* A section with a list cache and no region left no entry above. */
	for (size_t i = 0; i < c->n_list_caches; i++)
		if (strcmp(c->list_caches[i].bucket, name) == 0)
			return load_fail(L, "%s: %s appears twice", at, L->label);
	if (load_grow(L, (void **)&c->bucket_regions, c->n_bucket_regions,
	         sizeof *c->bucket_regions) != 0)
		return -1;
	char *copy = strdup(name);
	if (!copy)
		return load_fail(L, "out of memory");
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
	if (load_grow(L, (void **)&c->list_caches, c->n_list_caches, sizeof *c->list_caches) != 0)
		return NULL;
	char *copy = strdup(bucket);
	if (!copy) {
		load_fail(L, "out of memory");
		return NULL;
	}
	c->list_caches[c->n_list_caches] = (struct cfg_list_cache){ .bucket = copy };
	return &c->list_caches[c->n_list_caches++];
}

/* list_cache_ttl = seconds (1-86400; 0 = off), or list_cache_prefixes = a
 * comma-separated list of key prefixes (as a listing's prefix starts). */
int load_list_cache(struct load *L, int slot, const char *v, const char *where)
{
	if (slot == F_LIST_TTL) {
		unsigned long n = 0;
		int r = load_parse_ulong(v, &n);
		if (r || n > 86400)
			return load_fail(L, "%s: expected a number of seconds (0-86400), got \"%s\"", where, v);
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
		char *item = load_dup_trimmed(p, n);
		if (!item)
			return load_fail(L, "out of memory");
		p += n + (p[n] == ',');
		if (!*item) {
			free(item);
			continue;
		}
		if (strlen(item) > 1024) {
			free(item);
			return load_fail(L, "%s: a prefix is at most 1,024 bytes", where);
		}
		if (load_grow(L, (void **)&lc->prefixes, lc->n_prefixes, sizeof *lc->prefixes) != 0) {
			free(item);
			return -1;
		}
		lc->prefixes[lc->n_prefixes++] = item;
	}
	if (!lc->n_prefixes)
		return load_fail(L, "%s: expected comma-separated key prefixes, got nothing", where);
	return 0;
}

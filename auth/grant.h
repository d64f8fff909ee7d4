/*
 * grant.h - a client key and what it may touch: the types auth/policy.h
 * matches requests against, filled in by config/ from [key ID] and
 * [anonymous] sections (and LARDER_CLIENT_KEY/SECRET).
 *
 * Layering rule: this header holds types and inline helpers only and
 * includes nothing of ours, so config/ includes it without linking or
 * otherwise depending on auth/;
 * nothing in auth/ includes config/. The folders stay a tree:
 * config -> auth/grant.h (types), config -> base, auth -> base.
 */
#ifndef LARDER_GRANT_H
#define LARDER_GRANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* One grant: a bucket ("*" = every bucket) and an optional key prefix.
 * A prefix grant "data/" covers "data/x" but never "database/x": the match
 * is on the whole prefix string, and a prefix given without a trailing '/'
 * gets one (a grant of "data" means the folder data/). */
struct grant {
	char *bucket;
	char *prefix;      /* "" = the whole bucket */
};

struct client_key {
	char *id;          /* access key id the client signs with */
	char *secret;
	bool write;        /* read-write when true, read-only otherwise */
	struct grant *grants;
	size_t n_grants;
	unsigned max_upstream_requests; /* concurrent misses; 0 = no limit */
	uint64_t max_bytes_per_second;  /* its reads, shaped; 0 = no limit */
	uint64_t max_resident_bytes;    /* its share of the RAM tier; 0 = no limit */
};

/* True when path has a "." or ".." segment ("data/../x"). HTTP clients
 * (curl among them) remove dot segments from a URL path, which could carry
 * such a key out of a prefix on the way upstream: a prefix grant never
 * covers one (auth/policy.h), and config/ refuses a prefix holding one. */
static inline bool grant_dot_segment(const char *path)
{
	for (const char *p = path;;) {
		size_t n = strcspn(p, "/");
		if ((n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
			return true;
		if (!p[n])
			return false;
		p += n + 1;
	}
}

#endif

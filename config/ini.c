/*
 * ini.c - the INI file: [section] headers, then each name = value handed
 * over by libinih.
 *
 * libinih hands us name = value pairs but not line numbers (the packaged
 * library is built without INI_HANDLER_LINENO) and never reports a section
 * that has no settings. So we feed it lines through our own reader, which
 * counts them and handles [section] headers itself: an empty "[key AK1]"
 * is still an error, and a "[sever]" typo is reported even when empty.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config/load.h"

/* ---- sections ------------------------------------------------------------- */

/* Checks the section just finished for settings it must have. */
int load_section_end(struct load *L)
{
	char at[300];
	load_loc(L, L->sect_line, at, sizeof at);
	switch (L->sect) {
	case S_KEY: {
		const struct client_key *k = &L->c->keys[L->idx];
		if (!k->secret)
			return load_fail(L, "%s: %s: secret is missing", at, L->label);
		if (!k->n_grants)
			return load_fail(L, "%s: %s: buckets is missing", at, L->label);
		return 0;
	}
	case S_ANON:
		if (!L->c->anonymous.n_grants)
			return load_fail(L, "%s: %s: buckets is missing", at, L->label);
		return 0;
	case S_BUCKET: {
		struct cfg *c = L->c;
		struct cfg_list_cache *lc = c->n_list_caches ? &c->list_caches[c->n_list_caches - 1]
		                          : NULL;
		bool listed = lc && strcmp(lc->bucket, c->bucket_regions[L->idx].bucket) == 0;
		if (listed && !lc->ttl_s)
			return load_fail(L, "%s: %s: list_cache_prefixes needs list_cache_ttl", at, L->label);
		if (c->bucket_regions[L->idx].region)
			return 0;
		if (!listed)
			return load_fail(L, "%s: %s: region is missing (a [bucket] section sets region, "
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
	load_loc(L, L->line, at, sizeof at);
	if (load_section_end(L) != 0)
		return -1;

	char *name = load_dup_trimmed(text, strlen(text));
	if (!name)
		return load_fail(L, "out of memory");
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
			r = load_fail(L, "%s: [%s] appears twice (first on line %d)", at, singles[i],
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
		if ((r = load_key(L, arg, at)) == 0) {
			L->sect = S_KEY;
			L->idx = L->c->n_keys - 1;
		}
	} else if (word == 6 && strncasecmp(name, "bucket", 6) == 0 && *arg) {
		snprintf(L->label, sizeof L->label, "[bucket %s]", arg);
		if ((r = load_bucket(L, arg, at)) == 0) {
			L->sect = S_BUCKET;
			L->idx = L->c->n_bucket_regions - 1;
		}
	} else if ((word == 3 && strncasecmp(name, "key", 3) == 0) ||
	           (word == 6 && strncasecmp(name, "bucket", 6) == 0)) {
		r = load_fail(L, "%s: [%s] needs a name: [%s <%s>]", at, name, name,
		         word == 3 ? "ACCESS_KEY_ID" : "bucket-name");
	} else {
		r = load_fail(L, "%s: unknown section [%s] (expected [server], [upstream], [cache], "
		         "[admin], [cluster], [key <ACCESS_KEY_ID>], [anonymous] or [bucket <name>])", at, name);
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
char *load_read_line(char *out, int size, void *user)
{
	struct load *L = user;
	if (L->failed || !*L->pos)
		return NULL;
	const char *s = L->pos;
	size_t n = strcspn(s, "\n");
	L->pos = s + n + (s[n] == '\n');
	L->line++;

	char at[300];
	load_loc(L, L->line, at, sizeof at);
	/* Like fgets(): the line and its newline, NUL-terminated. */
	if (size < 3 || n > (size_t)size - 2) {
		load_fail(L, "%s: line is longer than %d characters (a long buckets list can continue "
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
			load_fail(L, "%s: a [section] header must start at the beginning of the line", at);
			return NULL;
		}
		return out;  /* continuation of the previous value */
	}
	const char *end = strchr(t, ']');
	if (!end) {
		load_fail(L, "%s: section header without a closing ']'", at);
		return NULL;
	}
	const char *rest = end + 1;
	while (is_blank(*rest))
		rest++;
	if (*rest && *rest != ';' && *rest != '#') {
		load_fail(L, "%s: unexpected text after the section header", at);
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
		if (strcmp(load_settings[i].section, section) == 0 &&
		    strcasecmp(load_settings[i].name, name) == 0)
			return &load_settings[i];
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
		return *s ? (int)(*s - load_settings) : -1;
	case S_KEY:
		if (strcasecmp(name, "secret") == 0)
			return F_SECRET;
		if (strcasecmp(name, "max_upstream_requests") == 0)
			return F_MAX_UPSTREAM;
		if (strcasecmp(name, "max_bytes_per_second") == 0)
			return F_MAX_RATE;
		if (strcasecmp(name, "max_resident_bytes") == 0)
			return F_MAX_RESIDENT;
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

int load_on_value(void *user, const char *section, const char *name, const char *value)
{
	struct load *L = user;
	if (L->failed)
		return 0;

	char at[300], where[700];
	load_loc(L, L->line, at, sizeof at);
	/* libinih copies section names into a short buffer: compare a prefix. */
	if (strncmp(section, L->raw, strlen(section)) != 0) {
		load_fail(L, "%s: could not follow the section headers here", at);
		return 0;
	}
	if (L->sect == S_NONE) {
		load_fail(L, "%s: setting \"%s\" comes before any [section]", at, name);
		return 0;
	}
	const struct setting *s;
	int slot = slot_of(L, name, &s);
	if (slot < 0) {
		load_fail(L, "%s: %s unknown setting \"%s\"", at, L->label, name);
		return 0;
	}
	snprintf(where, sizeof where, "%s: %s %s", at, L->label, name);
	/* Only " ;" starts a comment after a value. A " #" would be read as
	 * part of it: in a buckets list, its words became grants ("# was:
	 * scratch, checkpoints" granted the bucket checkpoints). */
	for (const char *h = strchr(value, '#'); h; h = strchr(h + 1, '#')) {
		if (h > value && is_blank(h[-1])) {
			load_fail(L, "%s: \"%s\" holds \" #\": a comment after a value starts with "
			          "\" ;\" in this file, and '#' only at the start of a line", where, value);
			return 0;
		}
	}

	bool cont = L->indented && strcasecmp(name, L->last_name) == 0;
	snprintf(L->last_name, sizeof L->last_name, "%s", name);
	if (cont && !(L->sect != S_SERVER && L->sect != S_UPSTREAM && L->sect != S_CACHE &&
	              L->sect != S_ADMIN && L->sect != S_CLUSTER &&
	              (slot == F_BUCKETS || (L->sect == S_BUCKET && slot == F_LIST_PREFIXES)))) {
		load_fail(L, "%s: value continues on an indented line; only buckets and "
		     "list_cache_prefixes may span lines", where);
		return 0;
	}
	if (!cont && L->seen[slot]) {
		load_fail(L, "%s: set twice (first on line %d)", where, L->seen[slot]);
		return 0;
	}
	L->seen[slot] = L->line;
	if (s)
		L->file_line[slot] = L->line;

	struct cfg *c = L->c;
	struct client_key *k = L->sect == S_KEY ? &c->keys[L->idx] : &c->anonymous;
	if (s) {
		if (s->kind == K_REGION)
			L->region_in_file = true;
		load_setting(L, s, value, where);
	} else if (L->sect == S_BUCKET && slot != F_REGION) {
		load_list_cache(L, slot, value, where);
	} else if (L->sect == S_BUCKET) {
		if (!load_valid_region(value))
			load_fail(L, "%s: expected a region name such as eu-west-1, got \"%s\"", where, value);
		else
			load_set_str(L, &c->bucket_regions[L->idx].region, value);
	} else if (slot == F_SECRET) {
		if (!*value)
			load_fail(L, "%s: is empty", where);
		else
			load_set_str(L, &k->secret, value);
	} else if (slot == F_ACCESS) {
		load_access(L, k, value, where);
	} else if (slot == F_MAX_UPSTREAM || slot == F_MAX_RATE || slot == F_MAX_RESIDENT) {
		load_key_limit(L, k, slot, value, where);
	} else {
		load_grants(L, k, value, where);
	}
	return !L->failed;
}

/*
 * load.h - what the parts of config/ share while one configuration is
 * loaded (private to config/: nothing outside it includes this).
 *
 * A struct load carries the config being built, where the text being read
 * is, and the first error. Every load_* function that takes one reports a
 * problem through load_fail, which keeps the first message only and
 * returns -1; later steps check L->failed and stop.
 */
#ifndef LARDER_CONFIG_LOAD_H
#define LARDER_CONFIG_LOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/config.h"

#define MAX_KEY_ID 128
#define MAX_REGION 64

/* ---- the settings table (config/settings.c) ------------------------------- */

enum kind {
	K_LISTEN,  /* host:port into listen_host + listen_port */
	K_UINT,    /* unsigned, in [min, max] */
	K_SIZE,    /* size_t via cfg_parse_size, in [min, max] */
	K_LEVEL,   /* log level name */
	K_LOGDEST, /* "-", "off" or a path */
	K_DOMAIN,  /* host name */
	K_URL,     /* http(s) URL */
	K_REGION,
	K_ADDR,
	K_BOOL,
	K_PATH,    /* file path */
	K_TTL,     /* seconds, or "immutable" (-1) */
	K_POLICY,  /* cache policy name */
	K_ADMIN,   /* host:port into admin_host + admin_port, or "off" */
	K_TOKEN,   /* bearer token */
	K_HOSTPORT, /* host:port kept as written (peers connect to it) */
	K_NAME,    /* min-max visible bytes, no blanks */
};

struct setting {
	const char *section;
	const char *name;
	const char *env;
	enum kind kind;
	size_t off;
	unsigned long min, max;
};

/* The rows of load_settings; settings.c checks the count. */
#define N_SETTINGS 48
extern const struct setting load_settings[N_SETTINGS];

/* ---- load state ------------------------------------------------------------ */

enum section { S_NONE, S_SERVER, S_UPSTREAM, S_KEY, S_ANON, S_BUCKET, S_CACHE, S_ADMIN,
	S_CLUSTER };

/* Settings of [key], [anonymous] and [bucket] sections, as slots in seen[]. */
enum { F_SECRET, F_ACCESS, F_BUCKETS, F_REGION, F_LIST_TTL, F_LIST_PREFIXES, F_MAX_UPSTREAM,
	F_MAX_RATE, F_MAX_RESIDENT };

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
	int file_line[N_SETTINGS]; /* the same for load_settings[] over the whole file */
	int once[6];              /* header line of [server], [upstream], [anonymous], [cache],
	                           * [admin] */
	bool region_in_file;
};

/* ---- helpers (config/config.c) --------------------------------------------- */

__attribute__((format(printf, 2, 3)))
int load_fail(struct load *L, const char *fmt, ...);
/* "larder.conf:12" or "line 12" into out. */
void load_loc(const struct load *L, int line, char *out, size_t n);
/* Copy of s[0..n) without surrounding blanks, or NULL (out of memory). */
char *load_dup_trimmed(const char *s, size_t n);
/* Replaces *field with a copy of v (NULL when v is NULL). */
int load_set_str(struct load *L, char **field, const char *v);
/* Grows an array whose capacity is the next power of two at or above n. */
int load_grow(struct load *L, void **arr, size_t n, size_t size);

static inline bool is_blank(char ch)
{
	return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n' || ch == '\v' || ch == '\f';
}

static inline bool is_lower_alnum(char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9');
}

static inline bool is_alnum(char ch)
{
	return is_lower_alnum(ch) || (ch >= 'A' && ch <= 'Z');
}

/* ---- values (config/settings.c) -------------------------------------------- */

/* Decimal digits only: 0, -EINVAL (not a number) or -ERANGE. */
int load_parse_ulong(const char *s, unsigned long *out);
/* A region name fit for a SigV4 credential scope. */
bool load_valid_region(const char *s);
/* Checks v for setting s and stores it; where names it in messages. */
int load_setting(struct load *L, const struct setting *s, const char *v, const char *where);

/* ---- keys, grants, buckets (config/keys.c) --------------------------------- */

int load_grant(struct load *L, struct client_key *k, const char *item, const char *where);
int load_grants(struct load *L, struct client_key *k, const char *list, const char *where);
void load_free_grants(struct client_key *k);
int load_access(struct load *L, struct client_key *k, const char *v, const char *where);
/* A [key] section's per-key limit (slot F_MAX_UPSTREAM, F_MAX_RATE or F_MAX_RESIDENT). */
int load_key_limit(struct load *L, struct client_key *k, int slot, const char *v,
                   const char *where);
/* Appends a key with this id to L->c->keys. */
int load_key(struct load *L, const char *id, const char *where);
/* Appends a [bucket NAME] entry to L->c->bucket_regions. */
int load_bucket(struct load *L, const char *name, const char *at);
/* list_cache_ttl (slot F_LIST_TTL) or list_cache_prefixes of the current
 * [bucket] section. */
int load_list_cache(struct load *L, int slot, const char *v, const char *where);

/* ---- the INI file (config/ini.c) -------------------------------------------- */

/* libinih's line reader and value handler (user is the struct load). */
char *load_read_line(char *out, int size, void *user);
int load_on_value(void *user, const char *section, const char *name, const char *value);
/* Checks the section just finished for settings it must have. */
int load_section_end(struct load *L);

/* ---- the environment (config/env.c) ------------------------------------------ */

/* The value of NAME in envp, or NULL; an empty value counts as unset. */
const char *load_env_get(const char *const *envp, const char *name);
/* Applies the environment over what the file set. */
int load_env(struct load *L, const char *const *envp);

#endif

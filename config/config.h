/*
 * config.h - larder's settings: an INI file (optional) overlaid by LARDER_*
 * environment variables, checked as a whole before anything starts.
 *
 * Precedence: built-in default < file < environment. Every [server],
 * [upstream], [cache], [admin] and [cluster] setting has an environment
 * variable (see config/larder.conf).
 * Client keys with per-bucket policies need the file; the environment can
 * add one read-write key on every bucket (LARDER_CLIENT_KEY/SECRET).
 * An empty environment variable counts as unset; an empty value in the file
 * is an error. Unknown sections and
 * settings in the file are errors; file lines are at most 198 characters
 * (libinih), so a long "buckets" list continues on indented lines.
 *
 * A config is immutable once loaded. SIGHUP loads a new one and swaps the
 * keys over (see gateway/); nothing here is shared or locked.
 */
#ifndef LARDER_CONFIG_H
#define LARDER_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "auth/grant.h" /* client keys and grants: types only */

enum cfg_addressing {
	CFG_ADDR_AUTO = 0, /* virtual-hosted for AWS endpoints, path style otherwise */
	CFG_ADDR_PATH,
	CFG_ADDR_VIRTUAL,
};

struct cfg_bucket_region {
	char *bucket;
	char *region;
};

/* [bucket NAME] list_cache_ttl (and list_cache_prefixes) */
struct cfg_list_cache {
	char *bucket;
	unsigned ttl_s;               /* seconds a LIST answer is reused, >= 1 */
	char **prefixes;              /* only listings whose prefix starts with one; none: all */
	size_t n_prefixes;
};

struct cfg {
	/* [server] */
	char *listen_host;            /* LARDER_LISTEN host part, default 127.0.0.1 */
	uint16_t listen_port;         /* default 8080 */
	unsigned workers;             /* LARDER_WORKERS, 0 = number of cores */
	char *base_domain;            /* LARDER_BASE_DOMAIN: enables virtual-hosted requests */
	unsigned max_connections;     /* LARDER_MAX_CONNECTIONS; beyond it: 503 SlowDown */
	size_t max_header_bytes;      /* LARDER_MAX_HEADER_SIZE: request line + headers */
	unsigned client_timeout_s;    /* LARDER_CLIENT_TIMEOUT: idle client connection */
	unsigned shutdown_grace_s;    /* LARDER_SHUTDOWN_GRACE: SIGTERM drain time */
	unsigned max_skew_s;          /* LARDER_MAX_SKEW: allowed clock skew, default 900 */
	char *log_level;              /* LARDER_LOG_LEVEL */
	char *access_log;             /* LARDER_ACCESS_LOG: "-", "off" or a path */
	size_t access_log_buffer;     /* LARDER_ACCESS_LOG_BUFFER: per thread, 0 = a write per line */
	unsigned access_log_flush_ms; /* LARDER_ACCESS_LOG_FLUSH_MS: a line waits at most this */
	char *tls_cert;               /* LARDER_TLS_CERT: PEM certificate (chain); with tls_key, */
	char *tls_key;                /* LARDER_TLS_KEY: PEM key; clients then speak https */

	/* [upstream] */
	char *upstream_url;           /* LARDER_UPSTREAM_URL; NULL = AWS S3 in upstream_region */
	char *upstream_region;        /* LARDER_UPSTREAM_REGION, default us-east-1 */
	enum cfg_addressing addressing; /* LARDER_UPSTREAM_ADDRESSING: auto|path|virtual */
	bool upstream_tls_verify;     /* LARDER_UPSTREAM_TLS_VERIFY, default true */
	char *upstream_ca_file;       /* LARDER_UPSTREAM_CA_FILE */
	unsigned upstream_timeout_s;  /* LARDER_UPSTREAM_TIMEOUT: connect; a transfer's stall */
	size_t upstream_min_speed;    /* LARDER_UPSTREAM_MIN_SPEED: bytes/s a GET's answer keeps
	                                 up over the timeout, default 16 KiB; 0 = stalls only */
	unsigned creds_refresh_margin_s; /* LARDER_CREDS_REFRESH_MARGIN: refresh this long before expiry */

	unsigned upstream_retries;    /* LARDER_UPSTREAM_RETRIES: retries of 5xx/SlowDown, default 3 */
	unsigned upstream_window_max; /* LARDER_UPSTREAM_WINDOW_MAX: requests in flight per prefix, default 64 */
	unsigned upstream_window_min; /* LARDER_UPSTREAM_WINDOW_MIN: the floor after SlowDowns, default 1 */
	unsigned upstream_slot_wait_ms; /* LARDER_UPSTREAM_SLOT_WAIT_MS: wait for a slot, default 5000 */

	/* [cache] */
	char *cache_dir;              /* LARDER_CACHE_DIR: NVMe tier directory; NULL = RAM only */
	size_t ram_cache_bytes;       /* LARDER_RAM_CACHE_SIZE, default 1 GiB */
	size_t disk_cache_bytes;      /* LARDER_DISK_CACHE_SIZE, default 10 GiB (with a dir) */
	size_t chunk_bytes;           /* LARDER_CHUNK_SIZE, default 8 MiB */
	char *cache_policy;           /* LARDER_CACHE_POLICY: "subset" (default) or "lru" */
	unsigned cache_stale_after_s; /* LARDER_CACHE_STALE_AFTER: idle entries go first, 86400 */
	long metadata_ttl_s;          /* LARDER_METADATA_TTL: seconds, -1 = "immutable"; 60 */
	unsigned negative_ttl_s;      /* LARDER_NEGATIVE_TTL: seconds a 404 is cached; 0 = off */
	unsigned readahead_chunks;    /* LARDER_READAHEAD: chunks fetched ahead of a reader, 8 */
	size_t inflight_bytes;        /* LARDER_INFLIGHT_SIZE: chunk bytes beyond the RAM tier;
	                                 0 = the RAM tier's size */
	unsigned lookahead_idle_s;    /* LARDER_LOOKAHEAD_IDLE: a lookahead without reads ends, 60 */
	size_t pin_max_bytes;         /* LARDER_PIN_MAX: bytes warm jobs may pin in RAM;
	                                 0 = half of ram_cache_bytes */
	size_t pin_max_nvme_bytes;    /* LARDER_PIN_MAX_NVME: the same on the NVMe tier;
	                                 0 = half of disk_cache_bytes */
	size_t list_cache_bytes;      /* LARDER_LIST_CACHE_SIZE: bound on cached LIST answers
	                               * (buckets with list_cache_ttl), default 16 MiB */

	/* [admin] */
	char *admin_host;             /* LARDER_ADMIN_LISTEN host, default 127.0.0.1;
	                               * NULL: "off", no admin listener */
	uint16_t admin_port;          /* default 9090 */
	char *admin_token;            /* LARDER_ADMIN_TOKEN (16-256 visible ASCII characters);
	                               * NULL: every admin route but /healthz answers 403 */

	/* [cluster]: several nodes, one warm tier (unset redis_url: a node alone) */
	char *redis_url;              /* LARDER_REDIS_URL: redis://host:port */
	char *node_id;                /* LARDER_NODE_ID, default the host name */
	char *advertise;              /* LARDER_ADVERTISE: host:port peers reach this node at */
	char *cluster_secret;         /* LARDER_CLUSTER_SECRET: authenticates peer requests */
	unsigned directory_ttl_s;     /* LARDER_DIRECTORY_TTL: life of a placement entry that
	                               * its holder stops refreshing, 3600 */
	char *cluster_ca_file;        /* LARDER_CLUSTER_CA_FILE: verifies peers' certificates
	                               * when the client port serves TLS; NULL: LARDER_TLS_CERT */

	/* [key ID] sections, plus LARDER_CLIENT_KEY/SECRET */
	struct client_key *keys;
	size_t n_keys;

	/* [anonymous]: unsigned requests allowed on these grants (read-only
	 * unless write = true); disabled when n_grants == 0; id and secret
	 * are NULL */
	struct client_key anonymous;

	/* [bucket NAME] region = ..., list_cache_ttl = ..., list_cache_prefixes = ... */
	struct cfg_bucket_region *bucket_regions;
	size_t n_bucket_regions;
	struct cfg_list_cache *list_caches;
	size_t n_list_caches;

	char *source;                 /* file it came from, or NULL */
	char *overridden;             /* "LARDER_X overrides [s] name (file:line)\n" lines:
	                               * the file's settings the environment replaced
	                               * (logged at start), or NULL */
};

/*
 * Loads defaults, then the file at path (NULL: LARDER_CONFIG, or none),
 * then the environment, and validates the result.
 * Returns a new config, or NULL with a message naming the setting and the
 * problem written to err (e.g. "LARDER_LISTEN: port 99999 out of range").
 */
struct cfg *cfg_load(const char *path, char *err, size_t errlen);

/* Same, from an INI text in memory and an explicit environment (NULL-
 * terminated "NAME=value" array); cfg_load uses it. For tests and fuzzing.
 * text NULL: no file; envp NULL: an empty environment. Messages locate
 * file errors as "line N" instead of "path:N". */
struct cfg *cfg_load_text(const char *text, const char *const *envp, char *err, size_t errlen);

void cfg_free(struct cfg *c);

/* The first "LARDER_*=" entry of envp that names nothing larder, its CLI,
 * its container entrypoint or its tests read (a misspelt setting, which
 * would be ignored), from *from on; *from is left after it. NULL: none
 * left. Unknown settings in the file are errors; here a warning is all a
 * caller can give, since shells export many variables. */
const char *cfg_env_unknown(const char *const *envp, size_t *from);

/* The next setting, from *from on, whose value differs between running
 * and fresh and that a SIGHUP does not apply (every one but the [key] and
 * [anonymous] sections, LARDER_CLIENT_KEY/SECRET and LARDER_ANONYMOUS):
 * "[section] name (LARDER_NAME)" into out, and *from left after it.
 * false: none left. */
bool cfg_restart_change(const struct cfg *running, const struct cfg *fresh, size_t *from,
                        char *out, size_t n);

/* The key with this id, or NULL. */
const struct client_key *cfg_find_key(const struct cfg *c, const char *id);

/* The configured region for a bucket, or NULL. */
const char *cfg_bucket_region(const struct cfg *c, const char *bucket);

/* Seconds a LIST answer of bucket with this (decoded) prefix parameter may
 * be reused: the bucket's list_cache_ttl when the prefix is under one of its
 * list_cache_prefixes (or it has none), else 0. */
unsigned cfg_list_ttl(const struct cfg *c, const char *bucket, const char *prefix);

/* Parses sizes like "512MiB", "20GiB", "4096", "1.5GB", "64k": Ki/Mi/Gi/Ti
 * (optionally with B) are powers of 1024; K/M/G/T and kB/MB/GB/TB powers of
 * 1000; units are case-insensitive. Returns 0, or -EINVAL (out untouched)
 * for a sign, junk, overflow or a fraction of a byte. */
int cfg_parse_size(const char *s, uint64_t *out);

#endif

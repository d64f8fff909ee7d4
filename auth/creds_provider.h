/*
 * creds_provider.h - what the credential chain (creds.c) and its providers
 * (creds_env.c, creds_profile.c, creds_sts.c, creds_container.c,
 * creds_imds.c) share. Private to auth/: nothing outside auth/creds*.c
 * includes it.
 *
 * A provider is one function, creds_src_*, that reads the settings it
 * needs from the copied environment, fetches, and answers one of three ways:
 *   SRC_OK            it produced credentials in *out: the chain stops;
 *   SRC_NOT_SET       it is not configured (or unsupported): try the next;
 *   negative errno    it is configured but failed, with a reason in why
 *                     (secrets never appear there). *out is wiped.
 * Providers keep no state between calls: the refresh thread calls the same
 * function again.
 */
#ifndef LARDER_CREDS_PROVIDER_H
#define LARDER_CREDS_PROVIDER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#include "auth/creds.h"
#include "base/buf.h"

#define TOPIC "creds"

/* Caps on everything read from files or the network. */
#define MAX_HTTP_BODY    (64 * 1024)
#define MAX_TOKEN_FILE   (32 * 1024) /* STS allows 20,000 chars of JWT */
#define MAX_PROFILE_FILE (1024 * 1024)
#define MAX_XML_TEXT     8192

enum { SRC_OK = 0, SRC_NOT_SET = 1 };

/* The AWS_* variables (and HOME) copied at creation, so the refresh thread
 * sees the same settings as the first resolution. */
struct env_copy {
	char **v;
	size_t n;
};

/* What every provider gets. stop is NULL during creation; the refresh
 * thread passes its flag so destroy can abort a transfer in flight. */
struct src_ctx {
	const struct env_copy *env;
	const char *region;
	atomic_bool *stop;
	/* creds_check: no network. A provider that would fetch answers after
	 * its local checks: SRC_OK with *out empty (it may well work), or why
	 * not. */
	bool offline;
};

typedef int (*source_fn)(const struct src_ctx *x, struct creds *out, char *why, size_t whylen);

/* The providers, in chain order. */
int creds_src_env(const struct src_ctx *x, struct creds *out, char *why, size_t whylen);
int creds_src_profile(const struct src_ctx *x, struct creds *out, char *why, size_t whylen);
int creds_src_web_identity(const struct src_ctx *x, struct creds *out, char *why, size_t whylen);
int creds_src_container(const struct src_ctx *x, struct creds *out, char *why, size_t whylen);
int creds_src_imds(const struct src_ctx *x, struct creds *out, char *why, size_t whylen);

/* ---- shared helpers (creds_util.c) ---------------------------------- */

/* snprintf into err (NULL or n == 0: nothing). */
void creds_seterr(char *err, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

void creds_wipe(struct creds *c);

/* The value of name, or NULL when unset or empty (the SDKs treat an empty
 * variable as unset). The last definition wins, as with getenv(). */
const char *creds_env_get(const struct env_copy *e, const char *name);
/* name is "true", in any case. */
bool creds_env_true(const struct env_copy *e, const char *name);

/* Copies src into a fixed field; a value that does not fit is an error
 * (-E2BIG, reason in why), never a silent truncation. */
int creds_set_field(char *dst, size_t n, const char *src, const char *what, char *why, size_t whylen);

/* Strips leading and trailing white space in place. */
char *creds_trim(char *s);

/* Reads a whole file (at most max bytes) into b. Returns 0 or -errno
 * (-E2BIG when the file is larger than max). */
int creds_read_file(const char *path, size_t max, struct buf *b);

/* buf_fini after zeroing the whole allocation: b may hold a secret. */
void creds_buf_wipe(struct buf *b);

/* ISO 8601 / RFC 3339 as STS, ECS and IMDS write it. 0 or -EINVAL. */
int creds_parse_iso8601(const char *s, time_t *out);

/* {"AccessKeyId", "SecretAccessKey", "Token", "Expiration"[, "Code"]} as
 * the container endpoint and IMDS return it. 0, or -EINVAL with why. */
int creds_parse_json(const char *body, size_t len, struct creds *out, char *why, size_t whylen);

/* ---- what the providers read from the network and files ------------ */

/* An AssumeRoleWithWebIdentityResponse (status 200) or an ErrorResponse
 * (any other status) from STS into out. 0, or -EINVAL / -E2BIG / -ENOMEM
 * with why (creds_sts.c). */
int creds_parse_sts(const char *body, size_t len, long status, struct creds *out, char *why,
                    size_t whylen);

/* One profile's settings merged from the shared files (creds_profile.c). */
struct creds_profile {
	const char *name;     /* the profile looked for */
	bool found;
	char *key, *secret, *token;
	char unsupported[48]; /* the first setting we cannot honour, or "" */
};
/* Reads one file's text (modified in place) into pr: the config file
 * (config_file, sections "profile NAME" and "default") or the credentials
 * file (sections NAME). A later value replaces an earlier one. */
void creds_profile_parse(struct creds_profile *pr, char *text, bool config_file);
/* Frees (and wipes) pr's key, secret and token. */
void creds_profile_fini(struct creds_profile *pr);

/* The IAM role IMDS names in body (NUL-terminated; modified in place):
 * its first line trimmed, or NULL when that is not a role name
 * (creds_imds.c). */
char *creds_imds_role(char *body);

/* ---- the one HTTP call (creds_http.c) ------------------------------- */

struct creds_http_call {
	const char *method;          /* "GET", "PUT" or "POST" */
	const char *url;
	const char *const *headers;  /* NULL-terminated "Name: value", may be NULL */
	const char *body;            /* POST/PUT body, may be NULL */
	long connect_ms, total_ms;
	bool no_proxy;               /* metadata endpoints never go via a proxy */
	const char *ca_file;         /* CA bundle (AWS_CA_BUNDLE), NULL: the system's */
	atomic_bool *stop;           /* aborts the transfer when set */
};

/*
 * Performs one blocking request. On return 0, *status holds the HTTP status
 * and resp the body (capped at MAX_HTTP_BODY). Returns -EIO with a reason
 * in why when no response came back. The caller owns resp (buf_fini).
 * Every provider's network traffic goes through here.
 */
int creds_http_do(const struct creds_http_call *c, struct buf *resp, long *status, char *why, size_t whylen);

#endif

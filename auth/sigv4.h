/*
 * sigv4.h - AWS Signature Version 4: verifying what clients send and
 * signing what larder sends upstream.
 *
 * Reference: "Signature Version 4 signing process" and the S3 API's
 * "Authenticating Requests (AWS Signature Version 4)". S3 rules apply
 * unless a call says otherwise: the path is not normalised and its
 * segments are URI-encoded once (unreserved A-Za-z0-9-_.~ kept, '/' kept,
 * everything else %XX upper case).
 *
 * All strings are NUL-terminated. Nothing here allocates on behalf of the
 * caller except where a function says so; outputs go to caller buffers.
 */
#ifndef LARDER_SIGV4_H
#define LARDER_SIGV4_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "base/buf.h"

#define SV4_ALGORITHM "AWS4-HMAC-SHA256"
#define SV4_UNSIGNED_PAYLOAD "UNSIGNED-PAYLOAD"
#define SV4_STREAMING_SIGNED "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
#define SV4_STREAMING_SIGNED_TRAILER "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"
#define SV4_STREAMING_UNSIGNED_TRAILER "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
#define SV4_EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#define SV4_MAX_PRESIGN_EXPIRES (7 * 24 * 3600)

struct sv4_header {
	const char *name;   /* any case */
	const char *value;  /* as received; trimming/collapsing is done here */
};

/* A request as it arrived (verify) or as it will be sent (sign). */
struct sv4_request {
	const char *method;
	const char *path;          /* raw path as on the wire, percent-encoded as sent */
	const char *query;         /* raw query without '?', "" when none */
	const struct sv4_header *headers;
	size_t n_headers;
};

/* What the Authorization header or the presigned query says. */
struct sv4_auth {
	bool presigned;            /* X-Amz-* query parameters */
	char access_key[129];
	char date[9];              /* YYYYMMDD from the credential scope */
	char region[64];
	char service[32];
	char amz_date[17];         /* YYYYMMDDTHHMMSSZ: X-Amz-Date (header/query) or Date */
	char signed_headers[1024]; /* "host;x-amz-date;..." lower case, as given */
	char signature[65];        /* lower-case hex */
	char payload_hash[129];    /* x-amz-content-sha256, or UNSIGNED-PAYLOAD for presigned */
	long expires;              /* presigned X-Amz-Expires as given (range checked by
	                            * sv4_verify), else 0 */
	char security_token[2048]; /* x-amz-security-token / X-Amz-Security-Token, "" if none */
};

enum sv4_status {
	SV4_OK = 0,
	SV4_NO_AUTH,            /* neither header nor query auth: anonymous */
	SV4_MALFORMED,          /* AuthorizationHeaderMalformed / AuthorizationQueryParametersError */
	SV4_UNSUPPORTED,        /* another algorithm (e.g. SigV2): InvalidRequest */
	SV4_BAD_SIGNATURE,      /* SignatureDoesNotMatch */
	SV4_SKEWED,             /* RequestTimeTooSkewed */
	SV4_EXPIRED,            /* presigned URL past its expiry: AccessDenied "Request has expired" */
	SV4_NOT_YET_VALID,      /* presigned X-Amz-Date in the future beyond skew */
	SV4_MISSING_HEADER,     /* host or x-amz-date not signed, payload hash header missing */
	SV4_UNSIGNED_HEADER,    /* an x-amz-* header the signature does not cover: AccessDenied */
	SV4_BAD_EXPIRES,        /* presigned X-Amz-Expires not in 1..604800: AccessDenied */
};

/* Whether s[0..n) is a non-empty RFC 9110 token, as a header name must be. */
bool sv4_is_token(const char *s, size_t n);

/* Whether name (any case) is a parameter of SigV4 query auth itself
 * (X-Amz-Algorithm, -Credential, -Date, -Expires, -SignedHeaders, -Signature,
 * -Security-Token, -Content-Sha256), not a header carried in the query. */
bool sv4_is_query_auth_param(const char *name);

/* The value of the first header called name (any case), NULL if there is
 * none; *count (when count is not NULL) gets how many there are. */
const char *sv4_header(const struct sv4_request *req, struct slice name, size_t *count);

/* A short English reason for a status, for error messages. */
const char *sv4_status_str(enum sv4_status s);

/* Parses the Authorization header (or, without one, the presigned query).
 * Does not check the signature. Returns SV4_OK, SV4_NO_AUTH, SV4_MALFORMED
 * or SV4_UNSUPPORTED. */
enum sv4_status sv4_parse(const struct sv4_request *req, struct sv4_auth *out);

/* Derives the signing key for (secret, date YYYYMMDD, region, service).
 * Keys are cached per (access key, date, region, service): the cache is
 * process-wide, thread-safe and bounded. Returns 0, or -ENOMEM (key
 * zeroed: never sign or verify with it) when no digest can be had. */
int sv4_signing_key(const char *access_key, const char *secret, const char *date,
                    const char *region, const char *service, unsigned char key[32]);

/*
 * Builds the canonical request (S3 rules when normalize is false; the
 * generic rules - remove dot segments, collapse '//', encode twice - when
 * true). Only headers named in signed_headers (';'-separated, lower case)
 * are used; payload_hash is the last line. Presigned: the query's
 * X-Amz-Signature is left out. Returns 0, or -EINVAL for unparsable input
 * (bad percent-encoding in path or query), or -E2BIG.
 */
int sv4_canonical_request(const struct sv4_request *req, const char *signed_headers,
                          const char *payload_hash, bool normalize, struct buf *out);

/* "AWS4-HMAC-SHA256\n<amz_date>\n<date>/<region>/<service>/aws4_request\n<hex sha256(creq)>" */
int sv4_string_to_sign(const char *amz_date, const char *date, const char *region,
                       const char *service, const char *canonical_request, struct buf *out);

/* hex(HMAC(key, sts)) into sig (65 bytes). */
void sv4_signature(const unsigned char key[32], const char *string_to_sign, char sig[65]);

/*
 * The x-amz-* headers of req that auth's signed headers do not list, as
 * lower-case names sorted and joined with ", " into names (when not NULL).
 * S3 refuses such a request, and larder would otherwise sign them upstream
 * with its own credentials. Exempt: x-amz-content-sha256 on a presigned
 * request (the payload is then unsigned, and larder never forwards that
 * header). Returns how many there are, or -E2BIG / -ENOMEM.
 */
int sv4_unsigned_amz_headers(const struct sv4_request *req, const struct sv4_auth *auth,
                             struct buf *names);

/*
 * Verifies a parsed request against the secret of auth->access_key at time
 * now. Checks, in order: every x-amz-* header signed (SV4_UNSIGNED_HEADER),
 * presigned X-Amz-Expires within 1..604800 (SV4_BAD_EXPIRES), clock skew (header auth: |now - amz_date| <= max_skew;
 * presigned: not before amz_date - max_skew, not after amz_date + expires),
 * then the signature in constant time. On SV4_OK, signing_key receives the
 * derived key (needed to verify aws-chunked chunk signatures).
 */
enum sv4_status sv4_verify(const struct sv4_request *req, const struct sv4_auth *auth,
                           const char *secret, time_t now, unsigned max_skew_s,
                           unsigned char signing_key[32]);

/* Upstream credentials for signing. */
struct sv4_creds {
	const char *access_key;
	const char *secret_key;
	const char *session_token; /* NULL or "" when none */
};

/*
 * Signs a request for upstream with header auth and writes the value of
 * the Authorization header to authz. req must already carry every header
 * that is to be signed: host, x-amz-date (its value is the signing time),
 * x-amz-content-sha256, and x-amz-security-token when creds has a session
 * token. All of req's headers are signed except user-agent, expect,
 * content-length, authorization, and hop-by-hop headers (connection,
 * keep-alive, proxy-*, te, trailer, transfer-encoding, upgrade), which a
 * proxy on the way may change.
 * Returns 0, -EINVAL (missing host/x-amz-date/x-amz-content-sha256, bad
 * path encoding), -E2BIG or -ENOMEM.
 */
int sv4_sign(const struct sv4_request *req, const struct sv4_creds *creds,
             const char *region, const char *service, struct buf *authz);

/* Formats t as YYYYMMDDTHHMMSSZ (17 bytes with NUL). */
void sv4_amz_date(time_t t, char out[17]);
/* Parses YYYYMMDDTHHMMSSZ; returns 0 or -EINVAL. */
int sv4_parse_amz_date(const char *s, time_t *out);

/* URI-encodes per S3 rules; '/' kept when keep_slash. Returns 0 or -E2BIG. */
int sv4_uri_encode(const char *in, size_t len, bool keep_slash, struct buf *out);
/* Percent-decodes (no '+' to space). Returns 0, -EINVAL on a bad escape, -E2BIG. */
int sv4_uri_decode(const char *in, size_t len, struct buf *out);

#endif

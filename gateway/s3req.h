/*
 * s3req.h - what an S3 request addresses: service, bucket or object.
 *
 * Path style:             GET /bucket/key?query      Host: larder:8080
 * Virtual-hosted style:   GET /key?query             Host: bucket.<base_domain>
 * The key is the percent-decoded path after the bucket, byte for byte: no
 * normalisation of "//", "." or "..", a trailing '/' kept (S3 keys are
 * opaque strings, up to 1,024 bytes).
 */
#ifndef LARDER_S3REQ_H
#define LARDER_S3REQ_H

#include <stdbool.h>

#include "auth/policy.h"
#include "base/buf.h"
#include "gateway/s3err.h"

#define S3_MAX_KEY_BYTES 1024
#define S3_MAX_QUERY_BYTES 16384

enum s3_target { S3T_SERVICE, S3T_BUCKET, S3T_OBJECT };

struct s3req {
	enum s3_target target;
	bool virtual_host;
	char bucket[256];         /* "" for the service */
	struct buf key;           /* decoded key; empty unless S3T_OBJECT */
	enum pol_access access;   /* GET/HEAD read, all else write */
	bool listing;             /* a bucket GET that lists (objects, versions, uploads) */
	struct buf list_prefix;   /* the listing's decoded prefix parameter */
	/* When the raw prefix holds a '+': the prefix with each such '+' read
	 * as a space, as a form decoder (moto, and S3 for all we can tell)
	 * reads it. The policy must allow both readings. Empty otherwise. */
	bool list_prefix_plus;
	struct buf list_prefix_spaced;
};

void s3req_init(struct s3req *r);
void s3req_fini(struct s3req *r);

/*
 * Parses method, Host header (may be NULL), raw path and raw query (without
 * '?'). base_domain (may be NULL) enables virtual-hosted requests.
 * Returns 0, or -1 with *err set (S3E_INVALID_URI, S3E_INVALID_BUCKET_NAME,
 * S3E_INVALID_ARGUMENT for keys over 1,024 bytes).
 */
int s3req_parse(struct s3req *r, const char *method, const char *host, const char *raw_path,
                const char *raw_query, const char *base_domain, enum s3err *err);

/*
 * Looks up a query parameter by name (exact, case-sensitive) in a raw query
 * and percent-decodes its value into out. Returns 1 when present, 0 when
 * absent, -1 on bad percent-encoding or a value too long for out's cap.
 */
int s3_query_get(const char *raw_query, const char *name, struct buf *out);
/* Whether no parameter name of a raw query is percent-encoded. larder
 * matches names as sent (above, and every query check of the gateway) and
 * forwards the query as sent; S3 decodes names, so "pre%66ix" would be a
 * prefix there that larder's checks never saw. Such a request is refused. */
bool s3_query_names_plain(const char *raw_query);

/*
 * The objects of a DeleteObjects body (<Delete><Object><Key>...</Key>
 * [<VersionId>...</VersionId>]...), XML entities decoded, each handed to
 * each(arg, key, version) in order until it returns nonzero; version says
 * whether the object names a version (which S3 then removes for good).
 * Returns 0 when every object was handed over, what each returned when it
 * stopped early, or -1 when the body is not such a document (not XML, no
 * <Delete> root, an <Object> without a <Key> or with two, more than 1,000
 * objects, a document type declaration, whose entities an upstream might
 * read otherwise): S3's MalformedXML.
 */
int s3_delete_keys(const char *body, size_t len,
                   int (*each)(void *arg, const char *key, bool version), void *arg);

/*
 * The objects a copy or rename source names ("bucket/key" or "/bucket/key",
 * URL-encoded, up to an optional "?versionId=..."), handed to
 * each(arg, bucket, key) in turn. S3 may read a raw '+' there as a space,
 * as a form decoder does ("c+d/x" as "c d/x"): a source with one names an
 * object for each reading, and both are handed over (SDKs send %2B).
 * Returns 0; what each returned, when nonzero (it stops there); or -1 for
 * a reading that names no object (no bucket or key, a bad escape, a NUL
 * that would cut the name short of the one S3 reads).
 */
int s3_source_objects(const char *src, int (*each)(void *arg, const char *bucket, const char *key),
                      void *arg);

/*
 * Whether a RestoreObject body (<RestoreRequest>...) names an
 * <OutputLocation>: a SELECT restore writes its results to the bucket and
 * prefix named there, with larder's credentials. Returns 1 if it does, 0
 * if not, -1 when the body is not such a document (not XML, another root,
 * a document type declaration): S3's MalformedXML.
 */
int s3_restore_output(const char *body, size_t len);

/* True if the bucket name is acceptable for path-style addressing
 * (3-255 of A-Z a-z 0-9 . - _; S3's legacy rules, which moto and older
 * regions accept). */
bool s3_bucket_name_ok(const char *b, size_t len);

/* True for a name usable as a DNS label set under virtual-hosted style:
 * 3-63 of a-z 0-9 . -, starting and ending alphanumeric. */
bool s3_bucket_name_dns_ok(const char *b);

#endif

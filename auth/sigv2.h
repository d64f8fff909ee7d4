/*
 * sigv2.h - AWS Signature Version 2 for S3 (HMAC-SHA1): the Authorization
 * header "AWS AK:sig" and presigned query-string URLs
 * (?AWSAccessKeyId=&Signature=&Expires=), which boto3's
 * generate_presigned_url and "aws s3 presign" still produce against a
 * custom endpoint.
 *
 * Reference: S3 API, "Signing and authenticating REST requests (AWS
 * signature version 2)" and its "Query string request authentication
 * alternative". Where that page is silent, what botocore's HmacV1Auth /
 * HmacV1QueryAuth send decides (they are what clients run).
 *
 * Requests come in as struct sv4_request and results go out as enum
 * sv4_status (see sigv4.h). Nothing here keeps state; nothing allocates on
 * the caller's behalf.
 */
#ifndef LARDER_SIGV2_H
#define LARDER_SIGV2_H

#include <stdbool.h>
#include <time.h>

#include "auth/sigv4.h"
#include "base/buf.h"

/* What the Authorization header or the presigned query says. */
struct sv2_auth {
	bool presigned;
	char access_key[129];
	char signature[64];   /* base64 as given (decoded from the query's %-encoding) */
	long long expires;    /* presigned: Expires epoch seconds; else 0 */
};

/*
 * Detects SigV2: an Authorization header "AWS AK:sig", or the query
 * parameters AWSAccessKeyId, Signature and Expires (all three, once each).
 * Does not check the signature. Returns SV4_OK, SV4_NO_AUTH (neither form;
 * a SigV4 request is SV4_NO_AUTH here), or SV4_MALFORMED (a broken header
 * such as "AWS nocolon", some but not all of the three parameters, a bad
 * escape or Expires value, or SigV2 query parameters next to an
 * Authorization header). out is zeroed first.
 */
enum sv4_status sv2_parse(const struct sv4_request *req, struct sv2_auth *out);

/*
 * Verifies a parsed request with the secret of a->access_key at time now.
 *
 * resource: the canonical resource's path part: "/bucket/key" as on the
 * wire (percent-encoded as the client sent it), or "/" for the service; for
 * virtual-hosted requests the caller passes "/" + bucket + raw path. A
 * bucket-level resource matches with or without its trailing slash
 * ("/bucket" and "/bucket/" name the same thing; botocore signs "/bucket/"
 * while sending "/bucket" on path-style requests).
 *
 * Checks first the time: presigned, now > expires -> SV4_EXPIRED, expires
 * more than 7 days (SV4_MAX_PRESIGN_EXPIRES) after now -> SV4_BAD_EXPIRES; header
 * form, the x-amz-date header (or, without one, Date) must be within
 * max_skew_s of now (SV4_SKEWED; SV4_MISSING_HEADER when neither header is
 * there, SV4_MALFORMED when it does not parse). Then the HMAC-SHA1
 * signature, compared in constant time: SV4_OK or SV4_BAD_SIGNATURE.
 * SV4_MALFORMED also covers a string to sign that cannot be built.
 */
enum sv4_status sv2_verify(const struct sv4_request *req, const struct sv2_auth *a,
                           const char *resource, const char *secret, time_t now,
                           unsigned max_skew_s);

/*
 * The string to sign, appended to out (exposed for tests):
 *
 *   METHOD \n Content-MD5 \n Content-Type \n Date-or-Expires \n
 *   CanonicalizedAmzHeaders CanonicalizedResource
 *
 * Date-or-Expires: presigned, the Expires value; header form, the Date
 * header, or "" when an x-amz-date header is present (it is then among the
 * amz headers). CanonicalizedAmzHeaders: the x-amz-* headers, names lower
 * case, sorted, repeated names joined with ',', values trimmed and folded
 * line breaks turned into one space, each "name:value\n". A presigned URL
 * carries headers as query parameters (botocore moves Content-Type,
 * Content-MD5 and x-amz-* there): such a parameter counts as that header
 * when the request does not send the header itself. CanonicalizedResource:
 * resource, then the S3 sub-resources found in the query, sorted by name
 * (stable), "?a&b=v", each value percent-decoded as Python's unquote does.
 *
 * Returns 0, -EINVAL (a bad escape in a query-carried header), -E2BIG, or
 * -ENOMEM.
 */
int sv2_string_to_sign(const struct sv4_request *req, const struct sv2_auth *a,
                       const char *resource, struct buf *out);

#endif

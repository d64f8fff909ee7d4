/*
 * policy.h - may this key do this to this bucket and key?
 *
 * A key is read-only or read-write, on a list of grants (bucket, optional
 * key prefix). Reads are GET and HEAD; every other method writes. A read
 * of what an object was or what governs it (an earlier version, its ACL,
 * tags or lock, a listing of versions) is POL_INSPECT; a write that
 * governs an object besides writing or removing it (its ACL, tags, object
 * lock, a bypass of a governance lock, or a version removed for good) is
 * POL_GOVERN; gateway/authn.c says which requests are which. What a grant
 * covers:
 *  - an object request (bucket and key): the key starts with the prefix,
 *    unless it inspects or governs: that needs a whole-bucket grant. A
 *    prefix grant stands for s3:GetObject, s3:PutObject and s3:DeleteObject
 *    there; S3 asks for s3:GetObjectVersion, s3:GetObjectAcl,
 *    s3:PutObjectAcl, s3:PutObjectTagging, s3:DeleteObjectVersion ...
 *    besides, which larder would exercise with its own credentials;
 *  - a bucket request (no key) that lists (GET with list-type, prefix ...):
 *    the requested listing prefix starts with the grant's prefix, unless it
 *    lists versions (POL_INSPECT, s3:ListBucketVersions at S3);
 *  - any other bucket request: only a whole-bucket grant;
 *  - the service request (no bucket: ListBuckets): only a "*" grant.
 * A key with a "." or ".." path segment ("data/../x") is never covered by a
 * prefix grant: an HTTP layer on the way upstream may collapse it out of
 * the prefix. Whole-bucket grants do not care.
 * Nothing else is allowed: the caller answers AccessDenied.
 */
#ifndef LARDER_POLICY_H
#define LARDER_POLICY_H

#include <stdbool.h>

#include "auth/grant.h"

/* POL_INSPECT is a read, POL_GOVERN a write: both only on a whole bucket. */
enum pol_access { POL_READ, POL_INSPECT, POL_WRITE, POL_GOVERN };

/*
 * bucket: NULL for the service request. key: NULL for a bucket request.
 * list_prefix: for a bucket listing, the prefix query parameter ("" when
 * none); NULL when the request is not a listing.
 */
bool pol_allows(const struct client_key *k, enum pol_access a, const char *bucket,
                const char *key, const char *list_prefix);

#endif

/*
 * authn.h - authentication and authorisation of a client request
 * (authn.c): headers in, principal and body plan out. Private to gateway/.
 */
#ifndef LARDER_AUTHN_H
#define LARDER_AUTHN_H

#include "gateway/req.h"

/*
 * Headers-only checks of a new request: size limits, the S3 request
 * (bucket, key, operation), the signature (SigV4 header or query, SigV2,
 * a peer's, or anonymous), the credential scope and the key's grants.
 * Sets r->key_id, r->authorized, r->peer_hop and the body plan (r->body,
 * up_len, the running SHA-256 or aws-chunked decoder, body_check); on
 * failure r->has_err with the S3 error. On success the request may go
 * upstream; its body (if any) is verified as it streams.
 */
void authn_request(struct req *r);

/* A held body is in whole and verified (body_check): may it go upstream?
 * A DeleteObjects under a prefix grant if the key may delete every object
 * it names; a RestoreObject if it names no output location (a SELECT
 * restore writes there with larder's credentials, to a bucket no grant
 * was checked for). 0, or fails the request and returns negative errno. */
int authn_check_body(struct req *r);

#endif

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
 * up_len, the running SHA-256 or aws-chunked decoder, check_delete); on
 * failure r->has_err with the S3 error. On success the request may go
 * upstream; its body (if any) is verified as it streams.
 */
void authn_request(struct req *r);

/* The whole DeleteObjects body is in and verified (check_delete): may the
 * key delete every object it names? 0, or fails the request and returns
 * negative errno. */
int authn_check_delete(struct req *r);

#endif

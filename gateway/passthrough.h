/*
 * passthrough.h - a request larder does not answer itself, verified,
 * re-signed and streamed to upstream and back (passthrough.c). Private to
 * gateway/.
 *
 * Flow control both ways is by suspension: a client connection is
 * suspended while there is nothing to send it (or no room for its upload),
 * the upstream transfer is paused while the client is not keeping up (or
 * has sent nothing new); each side wakes the other when that changes.
 */
#ifndef LARDER_PASSTHROUGH_H
#define LARDER_PASSTHROUGH_H

#include <microhttpd.h>

#include "gateway/req.h"

/* The request's upstream part: at its creation, and when it is freed. */
void pass_init(struct req *r);
void pass_fini(struct req *r);

/* Sends the request upstream (a reference is held while it runs).
 * Returns 0 or negative errno. */
int pass_start(struct req *r);

/* Cancels the upstream transfer if it runs (the client left, or its body
 * failed verification). */
void pass_stop(struct req *r);

/* Its client has left: whether its upstream exchange goes on all the same
 * (a write S3 has all of, see passthrough.c), holding a reference to r
 * until S3 answers. Sets r->orphan; true again once it has. */
bool pass_outlives(struct req *r);

/* Takes as much of the client's body as there is room for; returns the
 * number of bytes consumed. */
size_t pass_take_body(struct req *r, const char *data, size_t len);

/* The client's body has ended: is it what was signed? Fails the request
 * if not; sends a DeleteObjects that waited for its body. */
void pass_finish_body(struct req *r);

/* Upstream's headers are in: queues the streamed response. */
enum MHD_Result pass_respond(struct req *r);
/* The size pass_respond gives libmicrohttpd (MHD_SIZE_UNKNOWN: chunked). */
uint64_t pass_response_size(const struct req *r);
/* Whether a write's answer must not end yet: it waits for upstream's end
 * and for the other nodes to be told (see passthrough.c). */
bool pass_end_waits(struct req *r);

/* The x-amz-* headers a presigned URL carries as query parameters, added
 * to h as headers; h NULL only checks them. 0, or -EINVAL for one that
 * cannot be a header, or -ENOMEM. */
int pass_query_headers(struct req *r, struct hdrs *h);

/* How many of those query parameters pass_query_headers would send as the
 * header name (matched as it matches them: decoded, in any case); the
 * first one's decoded value in value. */
unsigned pass_query_header(struct req *r, const char *name, struct buf *value);

/* An aws-chunked body (r->up_len decoded bytes) whose x-amz-trailer is
 * names: when that is one x-amz-checksum-* trailer, the body goes upstream
 * framed again with that checksum as its trailer (the decoder verifies it;
 * S3 stores it), else as plain bytes. */
void pass_plan_trailer(struct req *r, const char *names);

/* The aws-chunked decoder's sink (auth/chunked.h): decoded payload bytes
 * on their way upstream; arg is the request. */
int pass_chunk_sink(void *arg, const char *data, size_t len);

#endif

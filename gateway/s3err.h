/*
 * s3err.h - the errors larder itself raises, as S3 does: an XML body
 * <Error><Code/><Message/><Resource/><RequestId/></Error> with the status S3
 * uses for that code. Upstream errors never come through here: they pass
 * through unchanged.
 */
#ifndef LARDER_S3ERR_H
#define LARDER_S3ERR_H

#include "base/buf.h"

enum s3err {
	S3E_ACCESS_DENIED,            /* 403 */
	S3E_AUTH_HEADER_MALFORMED,    /* 400 AuthorizationHeaderMalformed */
	S3E_AUTH_QUERY_ERROR,         /* 400 AuthorizationQueryParametersError */
	S3E_BAD_DIGEST,               /* 400 XAmzContentSHA256Mismatch */
	S3E_ENTITY_TOO_LARGE,         /* 400 */
	S3E_INCOMPLETE_BODY,          /* 400 */
	S3E_INTERNAL,                 /* 500 InternalError */
	S3E_INVALID_ACCESS_KEY,       /* 403 InvalidAccessKeyId */
	S3E_INVALID_ARGUMENT,         /* 400 */
	S3E_INVALID_BUCKET_NAME,      /* 400 */
	S3E_INVALID_CHUNK,            /* 400 InvalidChunkSizeError / framing */
	S3E_INVALID_REQUEST,          /* 400 */
	S3E_INVALID_URI,              /* 400 InvalidURI */
	S3E_KEY_TOO_LONG,             /* 400 KeyTooLongError: over 1,024 bytes */
	S3E_HEADER_TOO_LARGE,         /* 400 RequestHeaderSectionTooLarge */
	S3E_MISSING_CONTENT_LENGTH,   /* 411 */
	S3E_MISSING_SECURITY_HEADER,  /* 400 */
	S3E_MALFORMED_XML,            /* 400 MalformedXML */
	S3E_BAD_CHECKSUM,             /* 400 BadDigest */
	S3E_REQUEST_TIME_SKEWED,      /* 403 RequestTimeTooSkewed */
	S3E_SIGNATURE_MISMATCH,       /* 403 SignatureDoesNotMatch */
	S3E_SLOW_DOWN,                /* 503 SlowDown */
	S3E_SERVICE_UNAVAILABLE,      /* 503 ServiceUnavailable: upstream unreachable */
	S3E_NOT_IMPLEMENTED,          /* 501 */
	S3E_NO_SUCH_KEY,              /* 404 NoSuchKey */
	S3E_PRECONDITION_FAILED,      /* 412 PreconditionFailed */
	S3E_INVALID_RANGE,            /* 416 InvalidRange */
	S3E_COUNT
};

/* The S3 code ("SignatureDoesNotMatch") and HTTP status of an error. */
const char *s3err_code(enum s3err e);
unsigned s3err_status(enum s3err e);

/* Writes the XML body. message NULL means the code's standard message;
 * resource is the request path (may be NULL). Text is XML-escaped. extra
 * (may be NULL) is XML some errors carry (<Region>, <RangeRequested>...),
 * already escaped, put after the request id. */
int s3err_xml(enum s3err e, const char *message, const char *resource,
              const char *request_id, const char *extra, struct buf *out);

/* An upstream error answer's body is read for at most this many bytes, and
 * this long after its headers (gateway/fetch.c for a cached read,
 * passthrough.c for the rest): one larger, endless or trickled is cut there,
 * and its client gets a document s3err_upstream_xml makes of what came. The
 * wrong region's answer, which nobody reads, is drained within the same
 * bounds by the transfer engine (TRANSFER_DRAIN_MAX, TRANSFER_DRAIN_WAIT_S). */
#define S3ERR_UPSTREAM_BODY_MAX (64 * 1024)
#define S3ERR_UPSTREAM_WAIT_S 2.0

/* A whole S3 error document for an upstream error answer of status whose
 * body could not be passed on as it came (cut at the bound larder reads of
 * one, or shorter than its Content-Length): body (len bytes, what came of
 * it) gives its <Code> and <Message> when they came whole and plain (no
 * markup, entity or control byte; UTF-8 of characters XML allows); else a
 * generic code for the status (403 Forbidden, 404 NotFound, ... as S3
 * names a bodiless HEAD answer's error). request_id: upstream's, left out
 * when it is not UTF-8. */
int s3err_upstream_xml(long status, const char *body, size_t len, const char *request_id,
                       struct buf *out);

/* Escapes &, <, >, ", ' and control bytes for XML text. */
int xml_escape(const char *s, struct buf *out);

#endif

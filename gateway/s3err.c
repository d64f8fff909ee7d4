/* s3err.c - S3 error codes, statuses and XML bodies (S3 API "Error responses"). */
#include "gateway/s3err.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

static const struct {
	const char *code;
	unsigned status;
	const char *message;
} table[S3E_COUNT] = {
	[S3E_ACCESS_DENIED] = { "AccessDenied", 403, "Access Denied" },
	[S3E_AUTH_HEADER_MALFORMED] = { "AuthorizationHeaderMalformed", 400,
		"The authorization header is malformed." },
	[S3E_AUTH_QUERY_ERROR] = { "AuthorizationQueryParametersError", 400,
		"Query-string authentication requires X-Amz-Algorithm, X-Amz-Credential, "
		"X-Amz-Signature, X-Amz-Date, X-Amz-SignedHeaders and X-Amz-Expires parameters." },
	[S3E_BAD_DIGEST] = { "XAmzContentSHA256Mismatch", 400,
		"The provided 'x-amz-content-sha256' header does not match what was computed." },
	[S3E_ENTITY_TOO_LARGE] = { "EntityTooLarge", 400,
		"Your proposed upload exceeds the maximum allowed object size." },
	[S3E_INCOMPLETE_BODY] = { "IncompleteBody", 400,
		"You did not provide the number of bytes specified by the Content-Length HTTP header." },
	[S3E_INTERNAL] = { "InternalError", 500,
		"We encountered an internal error. Please try again." },
	[S3E_INVALID_ACCESS_KEY] = { "InvalidAccessKeyId", 403,
		"The AWS Access Key Id you provided does not exist in our records." },
	[S3E_INVALID_ARGUMENT] = { "InvalidArgument", 400, "Invalid Argument" },
	[S3E_MALFORMED_XML] = { "MalformedXML", 400, "The XML you provided was not well-formed or "
	                        "did not validate against our published schema" },
	[S3E_INVALID_BUCKET_NAME] = { "InvalidBucketName", 400,
		"The specified bucket is not valid." },
	[S3E_INVALID_CHUNK] = { "InvalidChunkSizeError", 400,
		"The aws-chunked body is malformed." },
	[S3E_INVALID_REQUEST] = { "InvalidRequest", 400, "Invalid Request" },
	[S3E_INVALID_URI] = { "InvalidURI", 400, "Couldn't parse the specified URI." },
	[S3E_KEY_TOO_LONG] = { "KeyTooLongError", 400, "Your key is too long" },
	[S3E_HEADER_TOO_LARGE] = { "RequestHeaderSectionTooLarge", 400,
		"Your request header section exceeds the maximum allowed size." },
	[S3E_MISSING_CONTENT_LENGTH] = { "MissingContentLength", 411,
		"You must provide the Content-Length HTTP header." },
	[S3E_MISSING_SECURITY_HEADER] = { "MissingSecurityHeader", 400,
		"Your request was missing a required header." },
	[S3E_BAD_CHECKSUM] = { "BadDigest", 400,
		"The checksum you specified did not match what we received." },
	[S3E_REQUEST_TIME_SKEWED] = { "RequestTimeTooSkewed", 403,
		"The difference between the request time and the current time is too large." },
	[S3E_SIGNATURE_MISMATCH] = { "SignatureDoesNotMatch", 403,
		"The request signature we calculated does not match the signature you provided. "
		"Check your key and signing method." },
	[S3E_SLOW_DOWN] = { "SlowDown", 503, "Please reduce your request rate." },
	[S3E_SERVICE_UNAVAILABLE] = { "ServiceUnavailable", 503,
		"The upstream service could not be reached. Please try again." },
	[S3E_NO_SUCH_KEY] = { "NoSuchKey", 404, "The specified key does not exist." },
	[S3E_PRECONDITION_FAILED] = { "PreconditionFailed", 412,
		"At least one of the pre-conditions you specified did not hold" },
	[S3E_INVALID_RANGE] = { "InvalidRange", 416, "The requested range is not satisfiable" },
	[S3E_NOT_IMPLEMENTED] = { "NotImplemented", 501,
		"A header you provided implies functionality that is not implemented." },
};

const char *s3err_code(enum s3err e)
{
	return table[e].code;
}

unsigned s3err_status(enum s3err e)
{
	return table[e].status;
}

int xml_escape(const char *s, struct buf *out)
{
	int rc = 0;
	for (; *s && rc == 0; s++) {
		unsigned char c = (unsigned char)*s;
		switch (c) {
		case '&': rc = buf_puts(out, "&amp;"); break;
		case '<': rc = buf_puts(out, "&lt;"); break;
		case '>': rc = buf_puts(out, "&gt;"); break;
		case '"': rc = buf_puts(out, "&quot;"); break;
		case '\'': rc = buf_puts(out, "&apos;"); break;
		default:
			/* XML 1.0 cannot carry most control bytes even escaped. */
			if (c < 0x20 && c != '\t' && c != '\n' && c != '\r')
				rc = buf_printf(out, "\\x%02x", c);
			else
				rc = buf_putc(out, (char)c);
		}
	}
	return rc;
}

int s3err_xml(enum s3err e, const char *message, const char *resource,
              const char *request_id, const char *extra, struct buf *out)
{
	int rc = buf_puts(out, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>");
	rc = rc ? rc : buf_puts(out, table[e].code);
	rc = rc ? rc : buf_puts(out, "</Code><Message>");
	rc = rc ? rc : xml_escape(message ? message : table[e].message, out);
	rc = rc ? rc : buf_puts(out, "</Message>");
	if (resource && !rc) {
		rc = buf_puts(out, "<Resource>");
		rc = rc ? rc : xml_escape(resource, out);
		rc = rc ? rc : buf_puts(out, "</Resource>");
	}
	rc = rc ? rc : buf_puts(out, "<RequestId>");
	rc = rc ? rc : xml_escape(request_id ? request_id : "", out);
	rc = rc ? rc : buf_puts(out, "</RequestId>");
	rc = rc || !extra ? rc : buf_puts(out, extra);
	rc = rc ? rc : buf_puts(out, "</Error>");
	return rc;
}

/* The length of the UTF-8 sequence at s (n bytes left) when it is one
 * character past ASCII that XML 1.0 text may hold (U+0080..U+D7FF,
 * U+E000..U+FFFD, U+10000..U+10FFFF), in its shortest form; else 0. The
 * document says it is UTF-8: any other byte there makes it one no XML
 * parser reads. */
static size_t xml_char_len(const unsigned char *s, size_t n)
{
	static const unsigned least[] = { 0, 0, 0x80, 0x800, 0x10000 };
	size_t len = s[0] >= 0xc2 && s[0] <= 0xdf ? 2 : s[0] >= 0xe0 && s[0] <= 0xef ? 3
	           : s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : 0;
	if (len == 0 || len > n)
		return 0;
	unsigned cp = s[0] & (0x7f >> len);
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	bool excluded = cp < least[len] || (cp >= 0xd800 && cp <= 0xdfff) || cp == 0xfffe ||
	                cp == 0xffff || cp > 0x10ffff;
	return excluded ? 0 : len;
}

/* Whether every byte of s (n bytes) past ASCII is part of a character
 * xml_char_len takes. */
static bool utf8_xml_text(const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;
	for (size_t i = 0, l; i < n; i += l)
		if (!(l = u[i] < 0x80 ? 1 : xml_char_len(u + i, n - i)))
			return false;
	return true;
}

/* The text of the first <name>...</name> in body, when it came whole and
 * holds no markup, entity or control byte, in UTF-8 of characters XML
 * allows (escaped by xml_escape, it is valid XML text: a "]]>" may not go
 * as it is); else NULL. The text is copied to out (cap bytes with its
 * NUL). */
static const char *element_text(const char *body, size_t len, const char *name, char *out,
                                size_t cap)
{
	char open[32], close[32];
	snprintf(open, sizeof open, "<%s>", name);
	snprintf(close, sizeof close, "</%s>", name);
	const char *a = memmem(body, len, open, strlen(open));
	if (!a)
		return NULL;
	a += strlen(open);
	const char *b = memmem(a, len - (size_t)(a - body), close, strlen(close));
	size_t n = b ? (size_t)(b - a) : 0;
	if (!b || n == 0 || n >= cap)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)a[i];
		if (c == '<' || c == '&' || c < 0x20)
			return NULL;
	}
	if (!utf8_xml_text(a, n))
		return NULL;
	memcpy(out, a, n);
	out[n] = '\0';
	return out;
}

static const char *generic_code(long status)
{
	switch (status) {
	case 400: return "BadRequest";
	case 401: return "Unauthorized";
	case 403: return "Forbidden";
	case 404: return "NotFound";
	case 405: return "MethodNotAllowed";
	case 409: return "Conflict";
	case 412: return "PreconditionFailed";
	case 416: return "InvalidRange";
	case 501: return "NotImplemented";
	case 503: return "ServiceUnavailable";
	default: return status >= 500 ? "InternalError" : "InvalidRequest";
	}
}

int s3err_upstream_xml(long status, const char *body, size_t len, const char *request_id,
                       struct buf *out)
{
	char code[128], message[1024];
	const char *c = body ? element_text(body, len, "Code", code, sizeof code) : NULL;
	for (const char *p = c; p && *p; p++)
		if (!isalnum((unsigned char)*p) && *p != '.' && *p != '_' && *p != '-')
			c = NULL;
	const char *m = c ? element_text(body, len, "Message", message, sizeof message) : NULL;
	int rc = buf_puts(out, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>");
	rc = rc ? rc : buf_puts(out, c ? c : generic_code(status));
	rc = rc ? rc : buf_puts(out, "</Code><Message>");
	rc = rc ? rc : xml_escape(m ? m : "The upstream's error answer could not be read whole.",
	                          out);
	rc = rc ? rc : buf_puts(out, "</Message><RequestId>");
	/* A header's value: its bytes past ASCII need not be UTF-8. */
	if (!request_id || !utf8_xml_text(request_id, strlen(request_id)))
		request_id = "";
	rc = rc ? rc : xml_escape(request_id, out);
	rc = rc ? rc : buf_puts(out, "</RequestId></Error>");
	return rc;
}

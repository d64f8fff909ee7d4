/*
 * hdrs.h - an owned list of HTTP header fields (name, value), in order:
 * what larder sends upstream, and what an upstream answer carried.
 */
#ifndef LARDER_HDRS_H
#define LARDER_HDRS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct hdrs {
	struct hdr { char *name; char *value; } *v;
	size_t n, cap;
};
void hdrs_init(struct hdrs *h);
void hdrs_fini(struct hdrs *h);
/* Appends a copy of name and value. Returns 0 or -ENOMEM. */
int hdrs_add(struct hdrs *h, const char *name, const char *value);
/* Adds one raw response header line ("Name: value\r\n", as curl's header
 * callback passes it); lines without a name are ignored. Returns 0 or
 * -ENOMEM. */
int hdrs_add_line(struct hdrs *h, const char *line, size_t len);
/* The value of the first header with this name (any case), or NULL. */
const char *hdrs_get(const struct hdrs *h, const char *name);

/* The length of the body a response with these headers frames, or
 * HDRS_LENGTH_UNKNOWN: a Transfer-Encoding (unless the answer is to a
 * HEAD, which has no body), no Content-Length, or one that is not a plain
 * number or disagrees with another. A body framed two ways is never taken
 * by its Content-Length alone (RFC 9112 section 6.3). */
#define HDRS_LENGTH_UNKNOWN UINT64_MAX
uint64_t hdrs_body_length(const struct hdrs *h, bool head);

/* True for a hop-by-hop field (any case): one that describes a single
 * connection, never forwarded, replayed or signed by a proxy. RFC 9110
 * section 7.6.1 (Connection, Proxy-Connection, Keep-Alive, TE, Transfer-
 * Encoding, Upgrade) plus RFC 2616's Trailer(s) and Proxy-Authenticate/
 * -Authorization. Callers add their own extra names. */
bool hdr_hop_by_hop(const char *name);

#endif

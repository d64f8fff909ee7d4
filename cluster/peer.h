/*
 * peer.h - requests between the nodes of a cluster.
 *
 * A node that does not own a chunk asks its owner for it with an ordinary
 * S3 GET (a range, If-Match) on the owner's client port, authenticated not
 * with a client key but with the cluster secret:
 *   X-Larder-Peer: <node id>       X-Larder-Peer-Date: <unix seconds>
 *   X-Larder-Peer-Nonce: <hex>     X-Larder-Peer-Hop: <1 or 2>
 *   X-Larder-Peer-Auth: hex(HMAC-SHA256(secret, "larder-peer-v3\n" method
 *                        "\n" path "\n" date "\n" node "\n" target "\n" nonce
 *                        "\n" hop "\n" Range "\n" If-Match "\n" If-None-Match
 *                        "\n" If-Modified-Since "\n" If-Unmodified-Since
 *                        "\n" X-Larder-Pin))
 * target is the advertise address of the node asked, sent as Host; the
 * six headers are their values as sent ("" when absent): every header
 * that changes the answer or what the owner does (X-Larder-Pin makes it
 * hold the chunk, gateway/pins.h). The owner refuses a Host other than its
 * own advertise address, a wrong signature (so a request sent to another
 * node, or with another range, condition or pin, is refused), a date more than PEER_SKEW_S away, and a nonce it has seen
 * (replay; also every request dated at or before the date of a nonce it had
 * to forget, and before it started: peer_begin). Client keys cannot make
 * such requests.
 * The hop count stops loops when two nodes disagree about membership for a
 * moment: a request at hop 2 is served from the cache or from S3, never
 * forwarded again. And a request waits only for a fetch that asks S3 or a
 * node at a higher hop than its own (store/object.h: obj_may_wait), else
 * it gets 503 at once and the asker falls back: nodes never wait for each
 * other in a cycle. A 503 for a request that found the object being learnt
 * by another request that asks a node (the object's owner, often the asker
 * itself) carries PEER_LEARNING_HEADER: a chunk's fetch asks that node again
 * a moment later rather than S3 (gateway/fetch.c, learning_refusal).
 */
#ifndef LARDER_PEER_H
#define LARDER_PEER_H

#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#include "base/hdrs.h"

#define PEER_SKEW_S 30
#define PEER_MAX_HOP 2
#define PEER_LEARNING_HEADER "x-larder-learning"

/* Adds the X-Larder-Peer-* headers for method + path (as sent) to the node
 * at advertise address target; h must already hold the request's Host,
 * Range and conditional headers, which the signature covers. Returns 0 or
 * -ENOMEM. */
int peer_sign(const char *secret, const char *node_id, const char *target, const char *method,
              const char *path, unsigned hop, time_t now, struct hdrs *h);

/* Refuses every peer request dated at or before now: called as the node
 * starts, since the process before it may have served any of them. */
void peer_begin(time_t now);

/* A request header by name (case-insensitive), NULL when absent. */
typedef const char *(*peer_header_fn)(void *arg, const char *name);

/* Checks a request to this node (advertise address self) for method + path
 * (as received), its headers read through header(arg, name). Returns 0 and
 * the hop, or -1 with the reason in why. Thread-safe (the nonce cache is
 * shared). */
int peer_verify(const char *secret, const char *self, const char *method, const char *path,
                peer_header_fn header, void *arg, time_t now, unsigned *hop_out, char *why,
                size_t whylen);

#endif

/*
 * curlev.h - a libcurl multi handle driven by a libev loop (the
 * multi-socket API: curl tells us which sockets and timeouts to watch).
 * One per worker; it knows nothing of S3. Everything runs on the loop's
 * thread.
 *
 * It runs transfers (net/transfer.h): each easy handle it is given carries
 * its struct transfer as CURLOPT_PRIVATE, and a finished transfer is
 * handed to that transfer's own completion.
 */
#ifndef LARDER_CURLEV_H
#define LARDER_CURLEV_H

#include <curl/curl.h>
#include <ev.h>

struct curlev;
struct transfer;

/* Sees every exchange that ends (success or failure, retries and resends
 * included) before its owner does: where the metrics are counted once. One
 * its owner stops (transfer_stop) ends with CURLE_ABORTED_BY_CALLBACK. */
typedef void (*curlev_observe_cb)(const struct transfer *t, CURLcode result, void *arg);

/* observe may be NULL. */
struct curlev *curlev_create(struct ev_loop *loop, curlev_observe_cb observe, void *arg);
void curlev_destroy(struct curlev *c);

struct ev_loop *curlev_loop(const struct curlev *c);

/* Unpauses the transfers that asked for it (transfer_unpause); run by the
 * owner of the loop before it sleeps, never from inside curl. */
void curlev_run_pending(struct curlev *c);

/* For net/transfer.c only. */
int curlev_add(struct curlev *c, CURL *easy);
void curlev_remove(struct curlev *c, CURL *easy);
void curlev_queue_unpause(struct curlev *c, struct transfer *t);
void curlev_unqueue(struct curlev *c, struct transfer *t);

#endif

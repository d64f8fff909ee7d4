/*
 * curlev.h - a libcurl multi handle driven by a libev loop (the
 * multi-socket API: curl tells us which sockets and timeouts to watch).
 * One per worker; it knows nothing of S3. Everything runs on the loop's
 * thread.
 */
#ifndef LARDER_CURLEV_H
#define LARDER_CURLEV_H

#include <curl/curl.h>
#include <ev.h>

struct curlev;

/* Called once per transfer when it ends (success or failure), after the
 * easy handle was removed from the multi handle; the callee owns it. */
typedef void (*curlev_done_cb)(CURL *easy, CURLcode result, void *arg);

struct curlev *curlev_create(struct ev_loop *loop, curlev_done_cb done, void *arg);
void curlev_destroy(struct curlev *c);

/* Starts a transfer. Returns 0 or -1. */
int curlev_add(struct curlev *c, CURL *easy);

/* Stops a transfer early; done is NOT called for it. The caller still owns
 * and cleans up the easy handle. */
void curlev_remove(struct curlev *c, CURL *easy);

/* Number of transfers in progress. */
unsigned curlev_running(const struct curlev *c);

#endif

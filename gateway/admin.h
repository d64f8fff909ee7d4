/*
 * admin.h - the admin listener (LARDER_ADMIN_LISTEN, default 127.0.0.1:9090).
 *
 * Its own libmicrohttpd daemon with a thread per connection (at most
 * ADMIN_CONNECTIONS, admin.c): a route that waits on S3 or on a file never holds up
 * /healthz, and nothing it does ever runs on (or waits for) a client worker.
 *
 *   GET  /healthz       200 {"status":"ok"} while the process runs; no token
 *   GET  /readyz        200 or 503 {"ready":..., "checks":{...}}: upstream
 *                       credentials present, store loaded, not draining
 *   GET  /metrics       Prometheus text format (gateway/metrics.h)
 *   GET  /admin/stats   JSON: totals, per bucket, per client key
 *   POST /admin/purge   {"bucket":B} | {"bucket":B,"prefix":P} | {"bucket":B,"key":K}
 *                       -> {"bucket":B, ..., "purged_objects":N}
 *
 * Every route but /healthz requires "Authorization: Bearer <token>"
 * (LARDER_ADMIN_TOKEN, compared in constant time). Errors are JSON,
 * {"error":CODE,"message":TEXT}, and change nothing:
 *   400 bad_request (malformed JSON, bad fields), 401 unauthorized (token
 *   missing or wrong), 403 forbidden (no token configured), 404 not_found,
 *   405 method_not_allowed, 413 payload_too_large.
 */
#ifndef LARDER_ADMIN_H
#define LARDER_ADMIN_H

struct gw;

/* Starts the listener on gw->cfg's admin address; with "off" there is
 * none and gw->admin stays NULL. Call after the workers started (the
 * store and metadata cache must exist). Returns 0, or -1 when the address
 * cannot be resolved or bound: logged as an error, gw->admin NULL. The
 * caller may go on without it (larder does: the default port is fixed,
 * and a second larder on one host must still serve S3). */
int admin_start(struct gw *gw);

/* Stops the listener (waits for its thread) and frees it. A gw without
 * one is a no-op. */
void admin_stop(struct gw *gw);

#endif

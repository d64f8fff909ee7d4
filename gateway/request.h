/*
 * request.h - one client request, from its first byte to its access-log
 * line: authenticated (authn.h), then answered from the cache (cache.c),
 * the LIST cache (listcache.h) or the pass-through (passthrough.h), or
 * refused through its one S3 error responder (req_respond_error, req.h).
 * The libmicrohttpd callbacks of a worker land here; everything runs on
 * that worker's thread.
 */
#ifndef LARDER_REQUEST_H
#define LARDER_REQUEST_H

#include <microhttpd.h>

#include "gateway/server.h"

/* MHD_OPTION_URI_LOG_CALLBACK: sees the raw request URI before MHD
 * touches it and creates the request (returned as its req_cls). */
void *request_uri_cb(void *cls, const char *uri, struct MHD_Connection *conn);

/* MHD_AccessHandlerCallback */
enum MHD_Result request_access_cb(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **req_cls);

/* MHD_OPTION_NOTIFY_COMPLETED */
void request_completed_cb(void *cls, struct MHD_Connection *conn, void **req_cls,
                          enum MHD_RequestTerminationCode toe);

/* Connections answered 503 SlowDown past LARDER_MAX_CONNECTIONS; past these
 * too (over all workers) a connection is closed as it is accepted, so that
 * the open-file limit (2 x max + 1,024, server.c) is never reached by
 * idle clients, whatever the number of workers. */
#define CONN_SLACK 256

/* MHD_OPTION_ACCEPT_POLICY_CALLBACK (cls: the worker): MHD_NO past
 * LARDER_MAX_CONNECTIONS + CONN_SLACK open client connections. */
enum MHD_Result request_accept_cb(void *cls, const struct sockaddr *addr, socklen_t len);

/* MHD_OPTION_NOTIFY_CONNECTION (cls: the worker): counts open connections,
 * and at a connection's close ends a request that libmicrohttpd created
 * (request_uri_cb) but never handed on, nor said it completed: one whose
 * request line or headers it could not parse into its pool. */
void request_connection_cb(void *cls, struct MHD_Connection *conn, void **socket_context,
                           enum MHD_ConnectionNotificationCode toe);

/* Starts the worker's check, once a second, that no connection has waited
 * for a request's headers longer than LARDER_CLIENT_TIMEOUT (since it was
 * opened or its last request completed). libmicrohttpd's own timeout is of
 * inactivity: headers trickled a byte at a time would hold a connection for
 * ever. Such a connection is shut down (libmicrohttpd then closes it). */
void request_header_deadline_start(struct worker *w);

/* worker->key_async: resumes the requests a slot of their key's was given
 * back to (limits_place.wake), to ask for it again. */
void request_key_wake_cb(struct ev_loop *loop, ev_async *a, int revents);

/* Shutdown: cancels every request still live on the worker (their clients
 * get a closed connection) so the daemon can stop. */
void request_abort_all(struct worker *w);

/* Requests on the worker whose headers have all arrived: what draining
 * waits for. One still arriving may never finish (or its client has gone
 * and libmicrohttpd will see it only at the client timeout). */
unsigned request_count_started(const struct worker *w);

#endif

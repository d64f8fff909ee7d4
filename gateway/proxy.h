/*
 * proxy.h - one client request, from its first byte to its access-log line:
 * parse, authenticate, authorise, then stream it to upstream re-signed and
 * stream the answer back. The libmicrohttpd and curl callbacks of a worker
 * land here; everything runs on that worker's thread.
 *
 * Flow control both ways is by suspension: a client connection is
 * suspended while there is nothing to send it (or no room for its upload),
 * a curl transfer is paused while the client is not keeping up (or has
 * sent nothing new); each side wakes the other when that changes.
 */
#ifndef LARDER_PROXY_H
#define LARDER_PROXY_H

#include <curl/curl.h>
#include <microhttpd.h>

#include "gateway/server.h"

/* MHD_OPTION_URI_LOG_CALLBACK: sees the raw request URI before MHD
 * touches it and creates the request (returned as its req_cls). */
void *proxy_uri_cb(void *cls, const char *uri, struct MHD_Connection *conn);

/* MHD_AccessHandlerCallback */
enum MHD_Result proxy_access_cb(void *cls, struct MHD_Connection *conn, const char *url,
                                const char *method, const char *version,
                                const char *upload_data, size_t *upload_data_size,
                                void **req_cls);

/* MHD_OPTION_NOTIFY_COMPLETED */
void proxy_completed_cb(void *cls, struct MHD_Connection *conn, void **req_cls,
                        enum MHD_RequestTerminationCode toe);

/* Shutdown: cancels every request still live on the worker (their clients
 * get a closed connection) so the daemon can stop. */
void proxy_abort_all(struct worker *w);

#endif

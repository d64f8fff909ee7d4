/*
 * admin_internal.h - what admin.c and admin_jobs.c share: the listener and
 * request structs, the route handler type, the JSON responders, and the
 * handlers of the job routes (admin_jobs.c) that admin.c's route table
 * names. Private to those two files (scripts/check-source.py).
 */
#ifndef LARDER_GATEWAY_ADMIN_INTERNAL_H
#define LARDER_GATEWAY_ADMIN_INTERNAL_H

#include <jansson.h>
#include <microhttpd.h>
#include <stdbool.h>

#include "base/buf.h"

struct gw;
struct route;

struct admin {
	unsigned magic;
	struct gw *gw;
	struct MHD_Daemon *mhd;
};

/* One admin request (MHD's req_cls). */
struct areq {
	unsigned magic;
	bool too_big;
	struct buf body;
	const struct route *route;
	const char *rest;     /* the path after a prefix route, e.g. a job id */
};

typedef enum MHD_Result (*route_fn)(struct admin *a, struct MHD_Connection *c,
                                    struct areq *q);

/* admin.c: responses and request bodies. */

/* Sends doc (its reference is taken) as JSON. */
enum MHD_Result send_json(struct MHD_Connection *c, unsigned status, json_t *doc,
                          const char *www_auth);
/* Sends {"error": code, "message": ...}. */
__attribute__((format(printf, 5, 6)))
enum MHD_Result send_error(struct MHD_Connection *c, unsigned status, const char *code,
                           const char *www_auth, const char *fmt, ...);
/* A string member of o, or NULL when absent. *bad is set when present but
 * not a string. */
const char *member_str(json_t *o, const char *name, bool *bad);

/* admin_jobs.c: the lookaheads for /admin/stats (running_only) and the job
 * routes' handlers. */
json_t *lookaheads_json(struct gw *gw, bool running_only);
enum MHD_Result admin_prefetch(struct admin *a, struct MHD_Connection *c, struct areq *q);
enum MHD_Result admin_jobs(struct admin *a, struct MHD_Connection *c, struct areq *q);
enum MHD_Result admin_job_get(struct admin *a, struct MHD_Connection *c, struct areq *q);
enum MHD_Result admin_job_cancel(struct admin *a, struct MHD_Connection *c, struct areq *q);
enum MHD_Result admin_lookahead(struct admin *a, struct MHD_Connection *c, struct areq *q);
enum MHD_Result admin_lookahead_get(struct admin *a, struct MHD_Connection *c, struct areq *q);
enum MHD_Result admin_lookahead_delete(struct admin *a, struct MHD_Connection *c,
                                       struct areq *q);
enum MHD_Result admin_unpin(struct admin *a, struct MHD_Connection *c, struct areq *q);
enum MHD_Result admin_profile_start(struct admin *a, struct MHD_Connection *c, struct areq *q);
enum MHD_Result admin_profile_list(struct admin *a, struct MHD_Connection *c, struct areq *q);
enum MHD_Result admin_profile_stop(struct admin *a, struct MHD_Connection *c, struct areq *q);

#endif

/*
 * ui.c - serving the dashboard's built-in files (gateway/ui.h).
 */
#include "gateway/ui.h"

#include <string.h>

/* The page may load only its own script and style and talk only to this
 * listener: a value from the API that somehow held markup could not pull
 * in or run anything. The token travels in a header the script sets,
 * never in a URL the server logs. */
static const char csp[] =
	"default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
	"img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

enum MHD_Result ui_respond(struct MHD_Connection *c, const char *name)
{
	const struct ui_asset *a = NULL;
	for (unsigned i = 0; i < ui_n_assets; i++)
		if (strcmp(ui_assets[i].name, name) == 0)
			a = &ui_assets[i];
	static const char missing[] = "no such file\n";
	struct MHD_Response *r = a ? MHD_create_response_from_buffer(a->len, (void *)a->data,
	                                                             MHD_RESPMEM_PERSISTENT)
	                           : MHD_create_response_from_buffer(sizeof missing - 1,
	                                                             (void *)missing,
	                                                             MHD_RESPMEM_PERSISTENT);
	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, "Content-Type", a ? a->content_type : "text/plain");
	MHD_add_response_header(r, "Cache-Control", "no-cache");
	MHD_add_response_header(r, "Content-Security-Policy", csp);
	MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
	MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
	MHD_add_response_header(r, "X-Frame-Options", "DENY");
	enum MHD_Result ret = MHD_queue_response(c, a ? MHD_HTTP_OK : MHD_HTTP_NOT_FOUND, r);
	MHD_destroy_response(r);
	return ret;
}

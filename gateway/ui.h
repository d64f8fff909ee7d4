/*
 * ui.h - the dashboard the admin listener serves at GET /ui: one HTML page,
 * its script and its style sheet (gateway/ui/), built into the binary so a
 * node needs no files and the page loads nothing from anywhere else. The page
 * reads the admin API with the token the user gives it (docs/operations.md).
 */
#ifndef LARDER_UI_H
#define LARDER_UI_H

#include <microhttpd.h>
#include <stddef.h>

struct ui_asset {
	const char *name;            /* "" for the page itself, else "app.js", ... */
	const char *content_type;
	const unsigned char *data;
	size_t len;
};

/* Generated from gateway/ui/ at build time (gateway/ui/embed.py). */
extern const struct ui_asset ui_assets[];
extern const unsigned ui_n_assets;

/* Queues the asset called name ("" for the page) with headers that keep
 * the page to its own origin (Content-Security-Policy and friends), or a
 * 404. Returns MHD's result. */
enum MHD_Result ui_respond(struct MHD_Connection *c, const char *name);

#endif

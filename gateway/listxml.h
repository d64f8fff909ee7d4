/*
 * listxml.h - one page of a ListObjectsV2 answer as a warm job reads it
 * (prefetch_list.c): the Key and Size of each Contents, IsTruncated and
 * NextContinuationToken. The page comes from upstream: any bytes.
 */
#ifndef LARDER_GATEWAY_LISTXML_H
#define LARDER_GATEWAY_LISTXML_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Called for each Contents that has a Key, in order; size is 0 when it
 * has no Size. Nonzero: out of memory (parsing goes on; the page fails). */
typedef int (*listxml_key_fn)(void *arg, const char *key, uint64_t size);

struct listxml_page {
	bool truncated;        /* IsTruncated is "true" */
	char *token;           /* NextContinuationToken (malloc'd), or NULL */
	const char *xml_error; /* why a page was not understood (expat's message, or ours) */
};

/* Parses body (len bytes; NULL when len is 0) into page, handing each key
 * to each(arg, ...). Returns 0; -1 when the page is not understood (not
 * well-formed XML, a text over 64 KiB, each failed: xml_error says which);
 * -ENOMEM when no parser could be made. page->token is the caller's to
 * free (listxml_page_fini) whatever the answer. */
int listxml_parse(const char *body, size_t len, listxml_key_fn each, void *arg,
                  struct listxml_page *page);
void listxml_page_fini(struct listxml_page *page);

#endif

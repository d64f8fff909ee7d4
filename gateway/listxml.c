/* listxml.c - a ListObjectsV2 page (listxml.h). */
#include "gateway/listxml.h"

#include <errno.h>
#include <expat.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"

struct lx {
	listxml_key_fn each;
	void *arg;
	struct buf text;
	bool in_contents;
	char *key;
	uint64_t size;
	bool truncated;
	char *token;
	int err;
};

static void XMLCALL lx_start(void *arg, const XML_Char *name, const XML_Char **attrs)
{
	struct lx *x = arg;
	(void)attrs;
	buf_reset(&x->text);
	if (strcmp(name, "Contents") == 0)
		x->in_contents = true;
}

static void XMLCALL lx_text(void *arg, const XML_Char *s, int len)
{
	struct lx *x = arg;
	if (buf_append(&x->text, s, (size_t)len) != 0)
		x->err = -E2BIG;
}

static void XMLCALL lx_end(void *arg, const XML_Char *name)
{
	struct lx *x = arg;
	const char *t = buf_cstr(&x->text);
	if (x->in_contents && strcmp(name, "Key") == 0) {
		free(x->key);
		x->key = strdup(t);
	} else if (x->in_contents && strcmp(name, "Size") == 0) {
		x->size = strtoull(t, NULL, 10);
	} else if (strcmp(name, "Contents") == 0) {
		if (x->key && x->each(x->arg, x->key, x->size) != 0)
			x->err = -ENOMEM;
		free(x->key);
		x->key = NULL;
		x->size = 0;
		x->in_contents = false;
	} else if (strcmp(name, "IsTruncated") == 0) {
		x->truncated = strcmp(t, "true") == 0;
	} else if (strcmp(name, "NextContinuationToken") == 0) {
		free(x->token);
		x->token = strdup(t);
	}
	buf_reset(&x->text);
}

int listxml_parse(const char *body, size_t len, listxml_key_fn each, void *arg,
                  struct listxml_page *page)
{
	memset(page, 0, sizeof *page);
	struct lx x = { .each = each, .arg = arg };
	XML_Parser xp = XML_ParserCreate("UTF-8");
	if (!xp)
		return -ENOMEM;
	buf_init(&x.text, 1 << 16);
	XML_SetUserData(xp, &x);
	XML_SetElementHandler(xp, lx_start, lx_end);
	XML_SetCharacterDataHandler(xp, lx_text);
	int rc = 0;
	if (len > INT_MAX || XML_Parse(xp, body ? body : "", (int)len, 1) != XML_STATUS_OK ||
	    x.err) {
		/* expat has no message for XML_ERROR_NONE (NULL): the text too
		 * long, or the key not taken, fails a well-formed page. */
		enum XML_Error e = XML_GetErrorCode(xp);
		page->xml_error = e != XML_ERROR_NONE ? XML_ErrorString(e)
		                  : x.err == -E2BIG ? "an element's text is longer than 64 KiB"
		                                    : "out of memory";
		rc = -1;
	}
	page->truncated = x.truncated;
	page->token = x.token;
	XML_ParserFree(xp);
	free(x.key);
	buf_fini(&x.text);
	return rc;
}

void listxml_page_fini(struct listxml_page *page)
{
	free(page->token);
	page->token = NULL;
}

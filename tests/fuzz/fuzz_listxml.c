/*
 * fuzz_listxml.c - a ListObjectsV2 page as a warm job reads it
 * (gateway/listxml.c, listxml_parse): upstream's bytes, or those of
 * whatever answers as upstream. Checks: every key handed over is a string
 * (read whole); a key callback that fails fails the page; what a parse
 * answers does not depend on the callback; a page not understood says why.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/listxml.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct seen {
	unsigned n;
	unsigned fail_at; /* 0: never */
	size_t bytes;
};

static int each(void *arg, const char *key, uint64_t sz)
{
	struct seen *s = arg;
	(void)sz;
	s->bytes += strlen(key);
	return ++s->n == s->fail_at ? -1 : 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > 1 << 20)
		return 0;
	struct seen a = { 0 }, b = { .fail_at = 2 };
	struct listxml_page pa, pb;
	int ra = listxml_parse((const char *)data, size, each, &a, &pa);
	int rb = listxml_parse((const char *)data, size, each, &b, &pb);
	if (ra != 0 && ra != -1)
		abort();
	/* A failed page says why: the job's error shows it. */
	if ((ra != 0 && !pa.xml_error) || (rb != 0 && !pb.xml_error)) {
		fprintf(stderr, "a page not understood without a reason\n");
		abort();
	}
	if (ra == 0 && pa.xml_error) {
		fprintf(stderr, "a page understood with an XML error \"%s\"\n", pa.xml_error);
		abort();
	}
	/* The second parse fails exactly when there were two keys or more, or
	 * when the first failed. */
	if ((rb != 0) != (ra != 0 || a.n >= 2)) {
		fprintf(stderr, "failing callback: %d then %d with %u keys\n", ra, rb, a.n);
		abort();
	}
	if (b.n != a.n || pa.truncated != pb.truncated || !pa.token != !pb.token ||
	    (pa.token && strcmp(pa.token, pb.token) != 0)) {
		fprintf(stderr, "the callback's answer changed what the page says\n");
		abort();
	}
	listxml_page_fini(&pa);
	listxml_page_fini(&pb);
	if (pa.token || pb.token)
		abort();
	return 0;
}

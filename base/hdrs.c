/*
 * hdrs.c - header field lists (base/hdrs.h).
 */
#include "base/hdrs.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/alloc.h"

void hdrs_init(struct hdrs *h)
{
	memset(h, 0, sizeof *h);
}

void hdrs_fini(struct hdrs *h)
{
	for (size_t i = 0; i < h->n; i++) {
		free(h->v[i].name);
		free(h->v[i].value);
	}
	free(h->v);
	memset(h, 0, sizeof *h);
}

int hdrs_add(struct hdrs *h, const char *name, const char *value)
{
	if (h->n == h->cap) {
		size_t cap = h->cap ? h->cap * 2 : 16;
		struct hdr *v = mem_realloc(h->v, cap * sizeof *v);
		if (!v)
			return -ENOMEM;
		h->v = v;
		h->cap = cap;
	}
	char *n = mem_strdup(name), *val = mem_strdup(value);
	if (!n || !val) {
		free(n);
		free(val);
		return -ENOMEM;
	}
	h->v[h->n].name = n;
	h->v[h->n].value = val;
	h->n++;
	return 0;
}

int hdrs_add_line(struct hdrs *h, const char *line, size_t len)
{
	const char *colon = memchr(line, ':', len);
	size_t nl = colon ? (size_t)(colon - line) : 0;
	if (nl == 0)
		return 0;
	/* Names have no bound of their own (an x-amz-meta- name may take
	 * most of S3's 2 KB of user metadata): most fit on the stack. */
	char small[256];
	char *name = nl < sizeof small ? small : mem_malloc(nl + 1);
	if (!name)
		return -ENOMEM;
	memcpy(name, line, nl);
	name[nl] = '\0';
	const char *v = colon + 1, *end = line + len;
	while (v < end && (*v == ' ' || *v == '\t'))
		v++;
	while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ' || end[-1] == '\t'))
		end--;
	char *value = mem_strndup(v, (size_t)(end - v));
	int rc = value ? hdrs_add(h, name, value) : -ENOMEM;
	free(value);
	if (name != small)
		free(name);
	return rc;
}

const char *hdrs_get(const struct hdrs *h, const char *name)
{
	for (size_t i = 0; i < h->n; i++)
		if (strcasecmp(h->v[i].name, name) == 0)
			return h->v[i].value;
	return NULL;
}

uint64_t hdrs_body_length(const struct hdrs *h, bool head)
{
	uint64_t len = HDRS_LENGTH_UNKNOWN;
	for (size_t i = 0; i < h->n; i++) {
		const char *name = h->v[i].name, *v = h->v[i].value;
		if (!head && strcasecmp(name, "transfer-encoding") == 0)
			return HDRS_LENGTH_UNKNOWN;
		if (strcasecmp(name, "content-length") != 0)
			continue;
		char *end;
		errno = 0;
		unsigned long long n = strtoull(v, &end, 10);
		if (!isdigit((unsigned char)v[0]) || *end || errno || n == HDRS_LENGTH_UNKNOWN ||
		    (len != HDRS_LENGTH_UNKNOWN && len != n))
			return HDRS_LENGTH_UNKNOWN;
		len = n;
	}
	return len;
}

bool hdr_hop_by_hop(const char *name)
{
	static const char *const names[] = {
		"connection", "keep-alive", "proxy-authorization", "proxy-authenticate",
		"proxy-connection", "te", "trailer", "trailers", "transfer-encoding", "upgrade",
	};
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		if (strcasecmp(name, names[i]) == 0)
			return true;
	return false;
}

/*
 * fuzz_upresp.c - an upstream's answer to a metadata fetch, as
 * gateway/fetch.c's learn() takes it in: the raw header lines curl hands
 * over (base/hdrs.c hdrs_add_line), the body length it frames
 * (hdrs_body_length: Content-Length / Transfer-Encoding), Content-Range of a
 * 206 (gateway/range.c), ETag, Last-Modified (base/httpdate.c), the
 * replayed header lines and the x-amz-checksum-* lines (store/meta.c
 * meta_replayed_lines, meta_checksum_lines), then the metadata built from them: persisted and
 * read back (meta_encode / meta_decode must round-trip), revalidated by a
 * 304 with the same headers (meta_refresh: another_version / line_value),
 * and replayed as a cached answer's headers (objreply_headers).
 *
 * Input: the first line is the status (200, 206 or 304; anything else:
 * 200), the rest are header lines as curl passes them ("Name: value\r\n").
 */
#include <microhttpd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/hdrs.h"
#include "base/httpdate.h"
#include "gateway/objreply.h"
#include "gateway/range.h"
#include "store/meta.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static enum MHD_Result check_hdr(void *cls, enum MHD_ValueKind kind, const char *k, const char *v)
{
	(void)cls;
	(void)kind;
	if (strpbrk(k, "\r\n") || (v && strpbrk(v, "\r\n")))
		abort();
	return MHD_YES;
}

static struct meta_cache *mc;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > 65536)
		return 0;
	if (!mc)
		mc = meta_cache_create(1024);
	const char *p = (const char *)data, *end = p + size;
	const char *nl = memchr(p, '\n', size);
	long status = 200;
	if (nl) {
		char st[8] = { 0 };
		memcpy(st, p, (size_t)(nl - p) < 7 ? (size_t)(nl - p) : 7);
		status = strtol(st, NULL, 10);
		if (status != 206 && status != 304)
			status = 200;
		p = nl + 1;
	}
	struct hdrs h;
	hdrs_init(&h);
	while (p < end) {
		const char *e = memchr(p, '\n', (size_t)(end - p));
		size_t len = e ? (size_t)(e - p) + 1 : (size_t)(end - p);
		hdrs_add_line(&h, p, len);
		p += len;
	}
	for (size_t i = 0; i < h.n; i++)
		if (strchr(h.v[i].name, ':'))
			abort();
	uint64_t blen = hdrs_body_length(&h, false);
	uint64_t hlen = hdrs_body_length(&h, true);
	if (blen != HDRS_LENGTH_UNKNOWN && hlen != blen)
		abort(); /* HEAD only ignores Transfer-Encoding */
	uint64_t a = 0, b = 0, sz = 0;
	bool ok = false;
	if (status == 206)
		ok = content_range_parse(hdrs_get(&h, "Content-Range"), &a, &b, &sz) && a == 0;
	else
		ok = (sz = blen) != HDRS_LENGTH_UNKNOWN;
	const char *etag = hdrs_get(&h, "ETag");
	time_t lm = 0;
	httpdate_parse(hdrs_get(&h, "Last-Modified"), &lm);
	if (ok && etag && *etag && strlen(etag) < 130) {
		struct buf hb;
		buf_init(&hb, 64 * 1024);
		meta_replayed_lines(&h, &hb);
		struct obj_meta *m = meta_new(sz, etag, lm, buf_cstr(&hb), 1.0);
		buf_fini(&hb);
		if (m) {
			struct buf cl;
			buf_init(&cl, 64 * 1024);
			if (meta_checksum_lines(&h, &cl) == 0)
				meta_set_checksums(m, buf_cstr(&cl));
			buf_fini(&cl);
			/* Persisted and read back: the same object. */
			struct buf blob;
			buf_init(&blob, 1 << 20);
			if (meta_encode(m, &blob) == 0) {
				struct obj_meta *d = meta_decode(blob.p, blob.len, 1.0);
				if (!d || d->size != m->size || strcmp(d->etag, m->etag) != 0 ||
				    d->last_modified != m->last_modified ||
				    strcmp(d->headers, m->headers) != 0) {
					fprintf(stderr, "meta round trip lost the object\n");
					abort();
				}
				meta_unref(d);
			}
			buf_fini(&blob);
			/* Replayed. */
			for (int i = 0; i < 3; i++) {
				static const unsigned sts[] = { 200, 206, 304 };
				struct MHD_Response *r =
				    MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
				if (!r)
					break;
				struct objreply ar = { .status = sts[i], .first = 0,
				                       .last = m->size ? m->size - 1 : 0, .checksums = true };
				objreply_headers(r, "", m, &ar);
				MHD_get_response_headers(r, check_hdr, NULL);
				MHD_destroy_response(r);
			}
			/* Revalidated by a 304 that says the same: unchanged. */
			struct chunk_waiter w;
			memset(&w, 0, sizeof w);
			struct obj_meta *old = NULL;
			enum meta_role role = meta_lookup(mc, "b", "k", 1.0, 60, 60, &w, &old);
			if (old)
				meta_unref(old);
			if (role == META_WAIT)
				meta_unwait(mc, "b", "k", &w);
			meta_publish(mc, "b", "k", m);
			bool same = meta_refresh(mc, "b", "k", lm, &h, 2.0);
			if (role == META_LOAD && !same && hdrs_get(&h, "x-amz-tagging-count") == NULL) {
				/* Only a tag count on the 304 where the entry has none may
				 * say "another version" for the same headers. */
				size_t nv = 0;
				for (size_t i = 0; i < h.n; i++)
					nv += strcasecmp(h.v[i].name, "x-amz-version-id") == 0;
				if (nv <= 1) {
					fprintf(stderr, "a 304 repeating the object's own headers read as another version\n");
					abort();
				}
			}
			meta_drop(mc, "b", "k");
			meta_unref(m);
		}
	}
	hdrs_fini(&h);
	return 0;
}

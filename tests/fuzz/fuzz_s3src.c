/*
 * fuzz_s3src.c - the other request-side parsers of gateway/s3req.c and the
 * URI coding of auth/sigv4.c:
 *  - s3_source_objects: x-amz-copy-source / rename source ("bucket/key",
 *    URL-encoded, "?versionId=", the '+' second reading);
 *  - s3_restore_output: the RestoreObject body (expat);
 *  - s3_query_get / s3_query_names_plain: query-string splitting;
 *  - sv4_uri_encode / sv4_uri_decode: encode then decode gives back the
 *    input; what decodes re-encodes to something that decodes the same.
 * Input: the whole of it to each.
 */
#include <stdio.h>
#include "fuzz_text.h"
#include "auth/sigv4.h"
#include "gateway/s3req.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int each(void *arg, const char *bucket, const char *key)
{
	int *n = arg;
	if (!bucket[0] || !key[0])
		abort(); /* documented: a reading that names no object is -1 */
	(*n)++;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = fz_cstr(data, size, 65536);
	if (!s)
		return 0;
	int n = 0;
	int rc = s3_source_objects(s, each, &n);
	if (rc != 0 && rc != -1)
		abort();
	if (rc == 0 && (n < 1 || n > 2))
		abort();
	rc = s3_restore_output((const char *)data, size);
	if (rc < -1 || rc > 1)
		abort();
	s3_query_names_plain(s);
	struct buf v;
	buf_init(&v, 16384);
	static const char *names[] = { "versionId", "prefix", "partNumber",
	                               "response-content-type", "" };
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		buf_reset(&v);
		s3_query_get(s, names[i], &v);
	}
	buf_fini(&v);

	struct buf e, d, e2, d2;
	buf_init(&e, 3 * size + 16);
	buf_init(&d, size + 16);
	bool slash = size && (data[0] & 1);
	if (sv4_uri_encode((const char *)data, size, slash, &e) != 0)
		abort();
	if (sv4_uri_decode(e.p ? e.p : "", e.len, &d) != 0 || d.len != size ||
	    (size && memcmp(d.p, data, size) != 0))
		abort();
	buf_reset(&d);
	if (sv4_uri_decode((const char *)data, size, &d) == 0) {
		buf_init(&e2, 3 * d.len + 16);
		buf_init(&d2, d.len + 16);
		if (sv4_uri_encode(d.p ? d.p : "", d.len, false, &e2) != 0 ||
		    sv4_uri_decode(e2.p ? e2.p : "", e2.len, &d2) != 0 || d2.len != d.len ||
		    (d.len && memcmp(d2.p, d.p, d.len) != 0))
			abort();
		buf_fini(&e2);
		buf_fini(&d2);
	}
	buf_fini(&e);
	buf_fini(&d);
	free(s);
	return 0;
}

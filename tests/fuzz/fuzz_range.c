/*
 * fuzz_range.c - the Range header parser on arbitrary bytes. Input: the
 * header value. Checks what the rest of the cache relies on: a parsed
 * range is well formed, and a resolved one lies inside the object; and the
 * same of the Content-Range reader.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/range.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *v = malloc(size + 1);
	if (!v)
		return 0;
	memcpy(v, data, size);
	v[size] = '\0';
	struct byte_range r;
	if (range_parse(v, &r) == 1) {
		if (!r.suffix && r.b < r.a)
			abort();
		static const uint64_t sizes[] = { 0, 1, 2, 1000, 8388608, UINT64_MAX };
		for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
			uint64_t start = 1, end = 0;
			enum range_fit fit = range_resolve(&r, sizes[i], &start, &end);
			if (fit == RANGE_PART && (start > end || end >= sizes[i]))
				abort();
		}
	}
	/* The same bytes as an upstream's Content-Range: what parses is in
	 * order, and writes back as what parses to the same numbers. */
	uint64_t first, last, total;
	if (content_range_parse(v, &first, &last, &total)) {
		if (first > last || last >= total)
			abort();
		char again[CONTENT_RANGE_SIZE];
		content_range_format(again, first, last, total);
		uint64_t a, b, n;
		if (!content_range_parse(again, &a, &b, &n) || a != first || b != last || n != total)
			abort();
	}
	free(v);
	return 0;
}

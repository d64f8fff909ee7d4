/*
 * fuzz_range.c - the Range header parser on arbitrary bytes. Input: the
 * header value. Checks what the rest of the cache relies on: a parsed
 * range is well formed, and a resolved one lies inside the object; and the
 * same of the Content-Range reader. A Content-Range that parses is also
 * read as a cold range's answer (gateway/fetch.c, fetch_learnt_span), for
 * bytes=-chunk and for the chunk its first byte names: what is taken fills
 * a chunk inside the object from a body that holds it, skipping less than
 * a chunk.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/fetch.h"
#include "gateway/range.h"
#include "store/object.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* An answer to a meta fetch of chunk index (FETCH_LAST_CHUNK: a suffix). */
static void as_learnt(uint64_t cs, uint64_t index, uint64_t first, uint64_t last, uint64_t total)
{
	uint64_t k = 0, skip = 0;
	bool whole = false;
	if (!fetch_learnt_span(cs, index, first, last, total, &k, &skip, &whole))
		return;
	uint64_t start = obj_chunk_offset(k, cs);
	if (k > obj_chunk_index(total - 1, cs) || skip >= cs || start - skip != first ||
	    skip > last - first)
		abort(); /* a chunk past the end, or a skip past the chunk or the body */
	if (index != FETCH_LAST_CHUNK && (k != index || skip != 0))
		abort();
	if (index == FETCH_LAST_CHUNK && (!whole || k != obj_chunk_index(total - 1, cs)))
		abort(); /* a suffix that fits is the last chunk whole */
	if (whole && last - first + 1 - skip != obj_chunk_len(total, k, cs))
		abort();
}

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
		static const uint64_t chunks[] = { 1, 3, 4096, 8388608, (uint64_t)1 << 32,
		                                   (uint64_t)1 << 63 };
		for (size_t i = 0; i < sizeof chunks / sizeof chunks[0]; i++) {
			uint64_t cs = chunks[i];
			as_learnt(cs, FETCH_LAST_CHUNK, first, last, total);
			if (first / cs < UINT64_MAX / cs - 1) /* as meta_start bounds it */
				as_learnt(cs, first / cs, first, last, total);
		}
	}
	free(v);
	return 0;
}

/*
 * fuzz_s3path.c - the request addressing parser on arbitrary bytes.
 * Input: "METHOD\nHOST\nPATH\nQUERY" (missing parts are empty); the base
 * domain is fixed so both addressing styles are reached.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/s3req.h"
#include "gateway/upstream.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *copy = malloc(size + 1);
	if (!copy)
		return 0;
	memcpy(copy, data, size);
	copy[size] = '\0';
	char *part[4] = { "", "", "", "" };
	char *p = copy;
	for (int i = 0; i < 4 && p; i++) {
		part[i] = p;
		p = strchr(p, '\n');
		if (p)
			*p++ = '\0';
	}
	struct s3req r;
	s3req_init(&r);
	enum s3err err;
	if (s3req_parse(&r, part[0], part[1], part[2], part[3], "s3.larder.test", &err) == 0) {
		struct buf v;
		buf_init(&v, 4096);
		s3_query_get(part[3], "prefix", &v);
		buf_fini(&v);
	}
	s3req_fini(&r);
	free(copy);
	return 0;
}

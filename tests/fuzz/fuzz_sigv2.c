/*
 * fuzz_sigv2.c - SigV2 (auth/sigv2.c): sv2_parse on the Authorization header
 * and the presigned query, then sv2_string_to_sign and sv2_verify on what
 * parsed (the Date / x-amz-date parser, the amz-header canonicalisation,
 * the sub-resource sort and Python-unquote of the canonical resource).
 *
 * Input lines: QUERY \n AUTHORIZATION \n DATE \n RESOURCE \n then any
 * number of "name:value" header lines. An empty AUTHORIZATION line means no
 * such header; an empty DATE line means no Date header.
 */
#include <stdio.h>
#include "fuzz_text.h"
#include "auth/sigv2.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAXH 24

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = fz_cstr(data, size, 65536);
	if (!s)
		return 0;
	char *part[4 + MAXH];
	int np = fz_split(s, part, 4 + MAXH);
	struct sv4_header h[MAXH + 3];
	size_t nh = 0;
	h[nh++] = (struct sv4_header){ "Host", "bucket.s3.amazonaws.com" };
	if (part[1][0])
		h[nh++] = (struct sv4_header){ "Authorization", part[1] };
	if (part[2][0])
		h[nh++] = (struct sv4_header){ "Date", part[2] };
	for (int i = 4; i < np; i++) {
		char *c = strchr(part[i], ':');
		if (!c)
			continue;
		*c = '\0';
		h[nh++] = (struct sv4_header){ part[i], c + 1 };
	}
	struct sv4_request req = { "GET", "/bucket/key", part[0], h, nh };
	struct sv2_auth a;
	enum sv4_status st = sv2_parse(&req, &a);
	if (st != SV4_OK && st != SV4_NO_AUTH && st != SV4_MALFORMED)
		abort();
	if (st == SV4_OK) {
		if (!memchr(a.access_key, 0, sizeof a.access_key) ||
		    !memchr(a.signature, 0, sizeof a.signature) || !a.access_key[0])
			abort();
		const char *res = part[3][0] ? part[3] : "/bucket";
		struct buf sts;
		buf_init(&sts, 1 << 20);
		sv2_string_to_sign(&req, &a, res, &sts);
		buf_fini(&sts);
		time_t nows[] = { 1369353600, a.expires > 0 ? (time_t)a.expires - 10 : 0 };
		for (int i = 0; i < 2; i++)
			sv2_verify(&req, &a, res, "secret", nows[i], 900);
	}
	free(s);
	return 0;
}

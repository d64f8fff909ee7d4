/*
 * fuzz_httpdate.c - the date parsers: httpdate_parse / httpdate_parse_zoned
 * (base/httpdate.c: Date, If-Modified-Since, If-Unmodified-Since,
 * Last-Modified of upstream answers, SigV2 Date), sv4_parse_amz_date
 * (X-Amz-Date), creds_parse_iso8601 (STS / ECS / IMDS Expiration).
 * httpdate_parse_any (the conditional headers' three forms) too.
 * Checks: what parses formats back to a string that parses to the same
 * time; the parsers never write *out on failure; httpdate_parse_any reads
 * an IMF-fixdate as httpdate_parse does.
 */
#include <stdio.h>
#include "fuzz_text.h"
#include "base/httpdate.h"
#include "auth/sigv4.h"
#include "auth/creds_provider.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define SENTINEL ((time_t)0x5a5a5a5a)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = fz_cstr(data, size, 4096);
	if (!s)
		return 0;
	time_t t = SENTINEL;
	if (httpdate_parse(s, &t) == 0) {
		if (t < 0)
			abort();
		char out[HTTPDATE_SIZE];
		httpdate_format(t, out);
		time_t u = SENTINEL;
		if (t <= (time_t)253402300799 && (httpdate_parse(out, &u) != 0 || u != t)) {
			fprintf(stderr, "round trip: \"%s\" -> %lld -> \"%s\" -> %lld\n", s, (long long)t,
			        out, (long long)u);
			abort();
		}
	} else if (t != SENTINEL) {
		abort();
	}
	t = SENTINEL;
	if (httpdate_parse_zoned(s, &t) == 0) {
		time_t g;
		if (httpdate_parse(s, &g) == 0 && g != t)
			abort(); /* a GMT date reads the same either way */
	} else if (t != SENTINEL) {
		abort();
	}
	t = SENTINEL;
	if (httpdate_parse_any(s, (time_t)1764633600, &t) == 0) { /* now: 2025-12-02 */
		time_t g;
		if (t < 0 || (httpdate_parse(s, &g) == 0 && g != t))
			abort();
	} else if (t != SENTINEL) {
		abort();
	}
	t = SENTINEL;
	if (sv4_parse_amz_date(s, &t) == 0) {
		char out[17];
		sv4_amz_date(t, out);
		time_t u;
		if (sv4_parse_amz_date(out, &u) != 0 || u != t) {
			fprintf(stderr, "amz round trip: \"%s\" -> %lld -> \"%s\"\n", s, (long long)t, out);
			abort();
		}
	} else if (t != SENTINEL) {
		abort();
	}
	t = SENTINEL;
	if (creds_parse_iso8601(s, &t) != 0 && t != SENTINEL)
		abort();
	free(s);
	return 0;
}

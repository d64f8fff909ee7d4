/*
 * fuzz_creds.c - the documents the upstream credential chain reads (auth/
 * creds_*.c): the JSON of the container endpoint and IMDS
 * (creds_parse_json), STS's XML answer or error (creds_parse_sts), the
 * role name IMDS lists (creds_imds_role), and the shared config and
 * credentials files (creds_profile_parse). Whoever answers at those
 * addresses, or writes those files, chooses the bytes.
 *
 * Input: the profile name looked for, a newline, the document; the whole
 * input is also read as each network document. Checks: credentials taken
 * have a key and a secret; a refusal leaves no credentials behind; a role
 * is a plain IAM name; a profile's values are trimmed single lines.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth/creds_provider.h"
#include "fuzz_text.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what)
{
	fprintf(stderr, "%s\n", what);
	abort();
}

/* c was filled with 0x5a before the parse: a refusal leaves it so
 * (refused before reading anything) or wiped, never part-filled. */
static void check_creds(int rc, const struct creds *c, const char *who)
{
	static struct creds zero, before;
	memset(&before, 0x5a, sizeof before);
	if (rc == 0 && (!c->access_key[0] || !c->secret_key[0])) {
		fprintf(stderr, "%s: ", who);
		fail("credentials without a key or secret");
	}
	if (rc != 0 && memcmp(c, &zero, sizeof zero) != 0 &&
	    memcmp(c, &before, sizeof before) != 0) {
		fprintf(stderr, "%s: ", who);
		fail("a refused document left credentials behind");
	}
}

static void check_value(const char *v)
{
	size_t n = v ? strlen(v) : 0;
	if (v && (strchr(v, '\n') || (n && (isspace((unsigned char)v[0]) ||
	                                    isspace((unsigned char)v[n - 1])))))
		fail("a profile value with a line break or untrimmed");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > 65536) /* MAX_HTTP_BODY */
		return 0;
	struct creds c;
	char why[256];
	memset(&c, 0x5a, sizeof c);
	check_creds(creds_parse_json((const char *)data, size, &c, why, sizeof why), &c, "json");
	memset(&c, 0x5a, sizeof c);
	check_creds(creds_parse_sts((const char *)data, size, 200, &c, why, sizeof why), &c, "sts");
	memset(&c, 0x5a, sizeof c);
	if (creds_parse_sts((const char *)data, size, 403, &c, why, sizeof why) == 0)
		fail("an STS error status taken");
	check_creds(-1, &c, "sts 403");

	char *s = fz_cstr(data, size, 65536);
	if (!s)
		return 0;
	char *body = strdup(s);
	const char *role = body ? creds_imds_role(body) : NULL;
	if (role) {
		size_t n = strlen(role);
		if (n == 0 || n > 128)
			fail("a role name empty or too long");
		for (const char *p = role; *p; p++)
			if (!isalnum((unsigned char)*p) && !strchr("+=,.@_-", *p))
				fail("a role name with a character IAM does not allow");
	}
	free(body);

	char *part[2];
	fz_split(s, part, 2);
	for (int config = 0; config < 2; config++) {
		char *text = strdup(part[1]);
		if (!text)
			break;
		struct creds_profile pr = { .name = part[0] };
		creds_profile_parse(&pr, text, config);
		check_value(pr.key);
		check_value(pr.secret);
		check_value(pr.token);
		if (!pr.found && (pr.key || pr.secret || pr.token || pr.unsupported[0]))
			fail("settings taken from a profile not found");
		creds_profile_fini(&pr);
		free(text);
	}
	free(s);
	return 0;
}

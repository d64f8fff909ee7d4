/*
 * fuzz_profilemsg.c - access profiles across a cluster: a CLUSTER_PROFILE
 * message on larder:invalidate (gateway/cluster_profiles.c,
 * cluster_profiles_parse), which anybody who can write to Redis and holds
 * the secret chooses: "start\nORIGIN\nNAME\nkey|tag\nVALUE",
 * "stop\nORIGIN\nNAME", "read\nORIGIN\nNAME\nUNIX\nBUCKET\nKEY".
 *
 * Each input is read twice. As a message: taken exactly when it has the
 * fields of its kind (split at newlines, the last keeping any further
 * ones), "key" or "tag" for a start, a finite number for UNIX; written
 * again it is the same message (a read's UNIX as the sender writes it).
 * As the fields of a message a node sends (a byte for its kind, eight for
 * UNIX, then ORIGIN, NAME, a field, the last field at newlines): the
 * message written is read back as the fields sent.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_text.h"
#include "gateway/cluster_profiles.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MSG_MAX CLUSTER_PROFILE_MSG_MAX

static void fail(const char *what)
{
	fprintf(stderr, "%s\n", what);
	abort();
}

static bool same(const char *a, const char *b)
{
	return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

/* Whether b was read from what a wrote: the same fields, UNIX rounded to
 * a microsecond as "%.6f" does. */
static bool same_msg(const struct profile_msg *a, const struct profile_msg *b)
{
	if (a->kind != b->kind || !same(a->origin, b->origin) || !same(a->name, b->name) ||
	    !same(a->key_id, b->key_id) || !same(a->tag, b->tag) || !same(a->bucket, b->bucket) ||
	    !same(a->key, b->key))
		return false;
	return a->kind != PROFILE_MSG_READ ||
	       fabs(a->unix_s - b->unix_s) <= 5.000001e-7 + fabs(a->unix_s) * 3e-16;
}

/* Whether s has the fields of its kind (split by fz_split, not by the
 * parser): the same test, written another way. */
static bool well_formed(const char *s)
{
	static const struct {
		const char *kind;
		int fields;
	} kinds[] = { { "start", 5 }, { "stop", 3 }, { "read", 6 } };
	bool ok = false;
	for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++) {
		char *copy = strdup(s), *part[6];
		if (!copy)
			abort();
		int n = fz_split(copy, part, kinds[i].fields);
		if (n == kinds[i].fields && strcmp(part[0], kinds[i].kind) == 0) {
			if (i == 0) {
				ok = strcmp(part[3], "key") == 0 || strcmp(part[3], "tag") == 0;
			} else if (i == 2) {
				char *end;
				double t = strtod(part[3], &end);
				ok = end != part[3] && !*end && isfinite(t);
			} else {
				ok = true;
			}
		}
		free(copy);
	}
	return ok;
}

static void as_message(const char *s, size_t n)
{
	if (n >= MSG_MAX)
		return; /* cluster_profiles_message drops it */
	char buf[MSG_MAX], out[MSG_MAX], again[MSG_MAX];
	memcpy(buf, s, n + 1);
	struct profile_msg m, m2;
	bool ok = cluster_profiles_parse(buf, &m);
	if (ok != well_formed(s))
		fail(ok ? "a malformed profile message taken"
		        : "a well-formed profile message refused");
	if (!ok)
		return;
	const char *fields[] = { m.origin, m.name, m.key_id, m.tag, m.bucket, m.key };
	for (size_t i = 0; i < sizeof fields / sizeof *fields; i++)
		if (fields[i] && (fields[i] < buf || fields[i] > buf + n))
			fail("a field outside the message");
	if (strchr(m.origin, '\n') || (m.kind != PROFILE_MSG_STOP && strchr(m.name, '\n')) ||
	    (m.bucket && strchr(m.bucket, '\n')))
		fail("a field with a newline that is not the last");
	if (m.kind == PROFILE_MSG_START && !m.key_id == !m.tag)
		fail("a start with both or neither of a key id and a tag");
	int len = cluster_profiles_format(out, sizeof out, &m);
	if (len < 0 || (size_t)len >= sizeof out)
		fail("a message taken cannot be written again");
	if (m.kind != PROFILE_MSG_READ) {
		if (strcmp(out, s) != 0)
			fail("a message written again is another message");
		return;
	}
	/* A read: its UNIX as the sender writes it, then stable. */
	memcpy(again, out, (size_t)len + 1);
	if (!cluster_profiles_parse(again, &m2) || !same_msg(&m, &m2))
		fail("a read written again reads otherwise");
	char out2[MSG_MAX];
	cluster_profiles_format(out2, sizeof out2, &m2);
	if (strcmp(out, out2) != 0)
		fail("a read written twice differs");
}

static void as_fields(const uint8_t *data, size_t size)
{
	if (size < 9)
		return;
	struct profile_msg m = { .kind = (enum profile_msg_kind)(data[0] % 3) };
	memcpy(&m.unix_s, data + 1, sizeof m.unix_s);
	if (!isfinite(m.unix_s))
		return; /* what a node's clocks add up to is finite */
	char *s = fz_cstr(data + 9, size - 9, MSG_MAX), *part[4];
	if (!s)
		return;
	fz_split(s, part, 4);
	m.origin = part[0];
	m.name = part[1];
	if (m.kind == PROFILE_MSG_START) { /* the value is the last field */
		m.key_id = data[0] & 8 ? part[3] : NULL;
		m.tag = data[0] & 8 ? NULL : part[3];
	} else if (m.kind == PROFILE_MSG_READ) {
		m.bucket = part[2];
		m.key = part[3];
	}
	char buf[MSG_MAX];
	int len = cluster_profiles_format(buf, sizeof buf, &m);
	if (len >= 0 && (size_t)len < sizeof buf) { /* else not sent */
		struct profile_msg got;
		if (!cluster_profiles_parse(buf, &got) || !same_msg(&m, &got))
			fail("a profile message sent is not the one read");
	}
	free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = fz_cstr(data, size, 4 * MSG_MAX);
	if (!s)
		return 0;
	as_message(s, strlen(s));
	free(s);
	as_fields(data, size);
	return 0;
}

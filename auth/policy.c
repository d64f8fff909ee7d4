/*
 * policy.c - grant matching for client keys (rules in auth/policy.h).
 *
 * Everything is a plain string comparison on values the gateway has already
 * decoded; nothing here is case-folded or normalised.
 */
#include "auth/policy.h"

#include <string.h>

static bool starts_with(const char *s, const char *prefix)
{
	return strncmp(s, prefix, strlen(prefix)) == 0;
}

static bool covers(const struct grant *g, enum pol_access a, const char *bucket,
                   const char *key, const char *list_prefix)
{
	bool any_bucket = strcmp(g->bucket, "*") == 0;
	bool whole = g->prefix[0] == '\0';
	bool by_prefix = a == POL_READ || a == POL_WRITE;

	if (!bucket)                    /* service request: ListBuckets */
		return any_bucket && whole;
	if (!any_bucket && strcmp(g->bucket, bucket) != 0)
		return false;
	if (key)                        /* object request */
		return whole || (by_prefix && starts_with(key, g->prefix) && !grant_dot_segment(key));
	if (list_prefix)                /* bucket listing */
		return whole || (by_prefix && starts_with(list_prefix, g->prefix));
	return whole;                   /* any other bucket request */
}

bool pol_allows(const struct client_key *k, enum pol_access a, const char *bucket,
                const char *key, const char *list_prefix)
{
	if (!k || ((a == POL_WRITE || a == POL_GOVERN) && !k->write))
		return false;
	for (size_t i = 0; i < k->n_grants; i++)
		if (covers(&k->grants[i], a, bucket, key, list_prefix))
			return true;
	return false;
}

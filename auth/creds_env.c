/*
 * creds_env.c - provider 1: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and
 * AWS_SESSION_TOKEN from the environment. One variable without the other
 * is an error, not a fall-through.
 */
#include "auth/creds_provider.h"

#include <errno.h>
#include <string.h>

int creds_src_env(const struct src_ctx *x, struct creds *out, char *why, size_t whylen)
{
	const char *akid = creds_env_get(x->env, "AWS_ACCESS_KEY_ID");
	const char *secret = creds_env_get(x->env, "AWS_SECRET_ACCESS_KEY");
	const char *token = creds_env_get(x->env, "AWS_SESSION_TOKEN");
	if (!akid && !secret)
		return SRC_NOT_SET;
	if (!akid || !secret) {
		creds_seterr(why, whylen, "%s is set but %s is not",
		             akid ? "AWS_ACCESS_KEY_ID" : "AWS_SECRET_ACCESS_KEY", akid ? "AWS_SECRET_ACCESS_KEY" : "AWS_ACCESS_KEY_ID");
		return -EINVAL;
	}
	memset(out, 0, sizeof *out);
	if (creds_set_field(out->access_key, sizeof out->access_key, akid, "AWS_ACCESS_KEY_ID", why, whylen) ||
	    creds_set_field(out->secret_key, sizeof out->secret_key, secret, "AWS_SECRET_ACCESS_KEY", why, whylen) ||
	    (token && creds_set_field(out->session_token, sizeof out->session_token, token, "AWS_SESSION_TOKEN", why,
	                              whylen))) {
		creds_wipe(out);
		return -E2BIG;
	}
	return SRC_OK;
}

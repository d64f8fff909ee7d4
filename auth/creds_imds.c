/*
 * creds_imds.c - provider 5: EC2 instance metadata, IMDSv2 only (a session
 * token first, then the role's credentials). Short timeouts, so a machine
 * off EC2 fails fast; the chain treats its failure as "nothing found".
 */
#include "auth/creds_provider.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Timeouts in milliseconds: short so a machine without IMDS fails fast. */
#define IMDS_CONNECT_MS  1000
#define IMDS_TOTAL_MS    2000
#define IMDS_TOKEN_TTL_S "21600"

static char *imds_base(const struct src_ctx *x)
{
	const char *v = creds_env_get(x->env, "AWS_EC2_METADATA_SERVICE_ENDPOINT");
	if (!v) {
		const char *mode = creds_env_get(x->env, "AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE");
		v = mode && strcasecmp(mode, "IPv6") == 0 ? "http://[fd00:ec2::254]" : "http://169.254.169.254";
	}
	char *out = strdup(v);
	if (out) {
		size_t len = strlen(out);
		while (len && out[len - 1] == '/')
			out[--len] = '\0';
	}
	return out;
}

/* A role name goes into the URL path: allow IAM's name characters only. */
static bool imds_role_ok(const char *r)
{
	if (!*r || strlen(r) > 128)
		return false;
	for (; *r; r++)
		if (!isalnum((unsigned char)*r) && !strchr("+=,.@_-", *r))
			return false;
	return true;
}

char *creds_imds_role(char *body)
{
	/* One role per instance profile: the first line. */
	body[strcspn(body, "\r\n")] = '\0';
	char *role = creds_trim(body);
	return imds_role_ok(role) ? role : NULL;
}

/* One IMDS step: a request that must answer 200. */
static int imds_call(const struct src_ctx *x, const char *method, const char *url, const char *const *hdrs,
                     struct buf *resp, char *why, size_t whylen)
{
	struct creds_http_call call = {
		.method = method, .url = url, .headers = hdrs,
		.connect_ms = IMDS_CONNECT_MS, .total_ms = IMDS_TOTAL_MS,
		.no_proxy = true, .stop = x->stop,
	};
	long status;
	int rc = creds_http_do(&call, resp, &status, why, whylen);
	if (rc)
		return rc;
	if (status != 200) {
		creds_seterr(why, whylen, "%s %s answered %ld", method, url, status);
		creds_buf_wipe(resp);
		return -EIO;
	}
	return 0;
}

int creds_src_imds(const struct src_ctx *x, struct creds *out, char *why, size_t whylen)
{
	if (creds_env_true(x->env, "AWS_EC2_METADATA_DISABLED"))
		return SRC_NOT_SET;
	if (x->offline) /* only IMDS knows whether there is an instance role */
		return SRC_OK;
	char *base = imds_base(x);
	char *url = NULL;
	struct buf tok, hdr, resp;
	buf_init(&tok, 1);
	buf_init(&hdr, 1024);
	buf_init(&resp, 1);
	if (!base) {
		creds_seterr(why, whylen, "out of memory");
		return -ENOMEM;
	}
	int rc = -ENOMEM;

	/* Session token first: IMDSv2 refuses tokenless reads (IMDSv1 is not
	 * used, on purpose). */
	static const char *const put_hdrs[] = {
		"X-aws-ec2-metadata-token-ttl-seconds: " IMDS_TOKEN_TTL_S,
		"Content-Type:",
		NULL,
	};
	if (asprintf(&url, "%s/latest/api/token", base) < 0) {
		url = NULL;
		goto out;
	}
	rc = imds_call(x, "PUT", url, put_hdrs, &tok, why, whylen);
	if (rc)
		goto out;
	char *token = creds_trim(tok.p);
	if (!*token || strpbrk(token, "\r\n") || buf_printf(&hdr, "X-aws-ec2-metadata-token: %s", token)) {
		creds_seterr(why, whylen, "IMDS returned an unusable session token");
		rc = -EINVAL;
		goto out;
	}
	const char *get_hdrs[] = { hdr.p, NULL };

	free(url);
	if (asprintf(&url, "%s/latest/meta-data/iam/security-credentials/", base) < 0) {
		url = NULL;
		rc = -ENOMEM;
		goto out;
	}
	rc = imds_call(x, "GET", url, get_hdrs, &resp, why, whylen);
	if (rc)
		goto out;
	char *role = creds_imds_role(resp.p);
	if (!role) {
		creds_seterr(why, whylen, "IMDS has no usable IAM role (is an instance profile attached?)");
		rc = -ENOENT;
		goto out;
	}
	char *url2 = NULL;
	if (asprintf(&url2, "%s%s", url, role) < 0) {
		rc = -ENOMEM;
		goto out;
	}
	free(url);
	url = url2;
	buf_fini(&resp);
	rc = imds_call(x, "GET", url, get_hdrs, &resp, why, whylen);
	if (rc)
		goto out;
	rc = creds_parse_json(resp.p, resp.len, out, why, whylen);
	if (rc == 0)
		rc = SRC_OK;
out:
	if (rc == -ENOMEM && why && !*why)
		creds_seterr(why, whylen, "out of memory");
	creds_buf_wipe(&tok);
	creds_buf_wipe(&hdr);
	creds_buf_wipe(&resp);
	free(url);
	free(base);
	return rc;
}

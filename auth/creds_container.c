/*
 * creds_container.c - provider 4: the container credentials endpoint
 * (ECS task roles, EKS Pod Identity): AWS_CONTAINER_CREDENTIALS_RELATIVE_URI
 * or _FULL_URI, with an optional authorization token or token file.
 */
#include "auth/creds_provider.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#define CONTAINER_CONNECT_MS 2000
#define CONTAINER_TOTAL_MS   5000
#define CONTAINER_HOST_URL   "http://169.254.170.2"

/*
 * A FULL_URI must be https, or http to loopback or to the ECS/EKS agent
 * addresses: anything else would hand the authorization token (and get
 * credentials) over an open network. The SDKs apply the same rule.
 */
static bool container_uri_allowed(const char *uri, char *why, size_t whylen)
{
	CURLU *u = curl_url();
	char *scheme = NULL, *host = NULL;
	bool ok = false;
	if (!u || curl_url_set(u, CURLUPART_URL, uri, 0) != CURLUE_OK ||
	    curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
	    curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK) {
		creds_seterr(why, whylen, "AWS_CONTAINER_CREDENTIALS_FULL_URI is not a valid URL");
		goto out;
	}
	if (strcasecmp(scheme, "https") == 0) {
		ok = true;
	} else if (strcasecmp(scheme, "http") == 0) {
		ok = strcasecmp(host, "localhost") == 0 || strncmp(host, "127.", 4) == 0 ||
		     strcmp(host, "[::1]") == 0 || strcmp(host, "169.254.170.2") == 0 ||
		     strcmp(host, "169.254.170.23") == 0 || strcasecmp(host, "[fd00:ec2::23]") == 0;
		if (!ok)
			creds_seterr(why, whylen,
			             "AWS_CONTAINER_CREDENTIALS_FULL_URI host %s is not loopback or a container "
			             "agent address (use https)", host);
	} else {
		creds_seterr(why, whylen, "AWS_CONTAINER_CREDENTIALS_FULL_URI scheme %s is not http(s)", scheme);
	}
out:
	curl_free(scheme);
	curl_free(host);
	curl_url_cleanup(u);
	return ok;
}

int creds_src_container(const struct src_ctx *x, struct creds *out, char *why, size_t whylen)
{
	const char *rel = creds_env_get(x->env, "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
	const char *full = creds_env_get(x->env, "AWS_CONTAINER_CREDENTIALS_FULL_URI");
	if (!rel && !full)
		return SRC_NOT_SET;
	char *url = NULL;
	if (rel) {
		if (asprintf(&url, "%s%s%s", CONTAINER_HOST_URL, *rel == '/' ? "" : "/", rel) < 0)
			url = NULL;
	} else {
		if (!container_uri_allowed(full, why, whylen))
			return -EINVAL;
		url = strdup(full);
	}
	if (!url) {
		creds_seterr(why, whylen, "out of memory");
		return -ENOMEM;
	}

	/* The token file wins over the variable, and is re-read every time:
	 * EKS Pod Identity rotates it. */
	const char *tok_file = creds_env_get(x->env, "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
	const char *tok_env = creds_env_get(x->env, "AWS_CONTAINER_AUTHORIZATION_TOKEN");
	struct buf tok, hdr, resp;
	buf_init(&tok, 1);
	buf_init(&hdr, MAX_TOKEN_FILE + 64);
	buf_init(&resp, 1);
	int rc = 0;
	const char *token = tok_env;
	if (tok_file) {
		rc = creds_read_file(tok_file, MAX_TOKEN_FILE, &tok);
		if (rc) {
			creds_seterr(why, whylen, "cannot read AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE %s: %s", tok_file,
			             rc == -E2BIG ? "larger than 32 KiB" : strerror(-rc));
			goto out;
		}
		token = creds_trim(tok.p);
	}
	const char *hdrs[3] = { "Accept: application/json", NULL, NULL };
	if (token && *token) {
		if (strpbrk(token, "\r\n")) {
			creds_seterr(why, whylen, "container authorization token contains a line break");
			rc = -EINVAL;
			goto out;
		}
		rc = buf_printf(&hdr, "Authorization: %s", token);
		if (rc) {
			creds_seterr(why, whylen, "container authorization token too long");
			goto out;
		}
		hdrs[1] = hdr.p;
	}
	if (x->offline) { /* the endpoint would say the rest */
		rc = SRC_OK;
		goto out;
	}
	struct creds_http_call call = {
		.method = "GET", .url = url, .headers = hdrs,
		.connect_ms = CONTAINER_CONNECT_MS, .total_ms = CONTAINER_TOTAL_MS,
		.no_proxy = true, .stop = x->stop, .ca_file = creds_env_get(x->env, "AWS_CA_BUNDLE"),
	};
	long status;
	rc = creds_http_do(&call, &resp, &status, why, whylen);
	if (rc)
		goto out;
	if (status != 200) {
		creds_seterr(why, whylen, "GET %s answered %ld", url, status);
		rc = -EIO;
		goto out;
	}
	rc = creds_parse_json(resp.p, resp.len, out, why, whylen);
	if (rc == 0)
		rc = SRC_OK;
out:
	creds_buf_wipe(&tok);
	creds_buf_wipe(&hdr);
	creds_buf_wipe(&resp);
	free(url);
	return rc;
}

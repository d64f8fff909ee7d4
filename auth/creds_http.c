/*
 * creds_http.c - the one blocking HTTP request the credential providers
 * make, through the transfer engine (net/transfer.h, blocking perform).
 * STS, the container endpoint and IMDS all come through creds_http_do().
 */
#include "auth/creds_provider.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <curl/curl.h>

#include "net/transfer.h"

/* The transfer's owner: where the body goes, and the caller's stop flag. */
struct http_owner {
	struct buf *resp;
	atomic_bool *stop; /* may be NULL */
};

static size_t http_body(struct transfer *t, void *ud, const char *data, size_t n)
{
	struct http_owner *o = ud;
	(void)t;
	if (buf_append(o->resp, data, n) != 0)
		return 0; /* over the cap: curl fails with CURLE_WRITE_ERROR */
	return n;
}

static int http_progress(struct transfer *t, void *ud)
{
	struct http_owner *o = ud;
	(void)t;
	return o->stop && atomic_load(o->stop) ? 1 : 0;
}

static const struct transfer_ops http_ops = { .body = http_body, .progress = http_progress };

/*
 * Performs one request. On return 0, *status holds the HTTP status and
 * resp the body (capped at MAX_HTTP_BODY). Returns -EIO with a reason in
 * why when no response came back. The caller owns resp (buf_fini).
 */
int creds_http_do(const struct creds_http_call *c, struct buf *resp, long *status, char *why, size_t whylen)
{
	buf_init(resp, MAX_HTTP_BODY);
	*status = 0;
	struct http_owner owner = { .resp = resp, .stop = c->stop };
	struct transfer x;
	transfer_init(&x, &http_ops, &owner, NULL, NULL);
	struct curl_slist *hdrs = NULL;
	int rc = 0;
	for (size_t i = 0; c->headers && c->headers[i]; i++) {
		struct curl_slist *t = curl_slist_append(hdrs, c->headers[i]);
		if (!t) {
			rc = -ENOMEM;
			goto out;
		}
		hdrs = t;
	}
	/* No "Expect: 100-continue" round trip for the STS form body. */
	struct curl_slist *t = curl_slist_append(hdrs, "Expect:");
	if (!t) {
		rc = -ENOMEM;
		goto out;
	}
	hdrs = t;
	rc = transfer_prepare(&x, c->url, hdrs); /* x owns (and wipes) the list from here */
	hdrs = NULL;
	if (rc) {
		creds_seterr(why, whylen, "curl_easy_init() failed");
		goto out;
	}

	CURL *h = x.easy;
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, c->connect_ms);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, c->total_ms);
	curl_easy_setopt(h, CURLOPT_USERAGENT, "larder-creds");
	if (c->no_proxy)
		curl_easy_setopt(h, CURLOPT_NOPROXY, "*");
	if (c->ca_file)
		curl_easy_setopt(h, CURLOPT_CAINFO, c->ca_file);
	if (strcmp(c->method, "GET") != 0) {
		const char *body = c->body ? c->body : "";
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
		if (strcmp(c->method, "POST") != 0)
			curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, c->method);
	}

	CURLcode cc = transfer_perform(&x);
	if (cc != CURLE_OK) {
		if (cc == CURLE_WRITE_ERROR)
			creds_seterr(why, whylen, "%s %s: response larger than %d bytes", c->method, c->url,
			       MAX_HTTP_BODY);
		else
			creds_seterr(why, whylen, "%s %s: %s", c->method, c->url, transfer_strerror(&x, cc));
		rc = -EIO;
		goto out;
	}
	*status = x.status;
	if (!resp->p)
		rc = buf_puts(resp, "");
out:
	/* The header list may hold an authorization token. */
	for (struct curl_slist *s = hdrs; s; s = s->next)
		explicit_bzero(s->data, strlen(s->data));
	curl_slist_free_all(hdrs);
	transfer_fini(&x);
	if (rc)
		creds_buf_wipe(resp);
	return rc;
}

/*
 * creds_http.c - the one blocking HTTP request the credential providers
 * make (libcurl easy). STS, the container endpoint and IMDS all come
 * through creds_http_do(), so a different transfer engine plugs in here.
 */
#include "auth/creds_provider.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <curl/curl.h>

static size_t http_write_cb(char *ptr, size_t size, size_t nmemb, void *ud)
{
	struct buf *b = ud;
	size_t n = size * nmemb;
	if (buf_append(b, ptr, n) != 0)
		return 0; /* over the cap: curl fails with CURLE_WRITE_ERROR */
	return n;
}

static int http_progress_cb(void *ud, curl_off_t dlt, curl_off_t dln, curl_off_t ult, curl_off_t uln)
{
	atomic_bool *stop = ud;
	return stop && atomic_load(stop) ? 1 : 0;
}

/*
 * Performs one request. On return 0, *status holds the HTTP status and
 * resp the body (capped at MAX_HTTP_BODY). Returns -EIO with a reason in
 * why when no response came back. The caller owns resp (buf_fini).
 */
int creds_http_do(const struct creds_http_call *c, struct buf *resp, long *status, char *why, size_t whylen)
{
	buf_init(resp, MAX_HTTP_BODY);
	*status = 0;
	CURL *h = curl_easy_init();
	if (!h) {
		creds_seterr(why, whylen, "curl_easy_init() failed");
		return -ENOMEM;
	}
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

	char errbuf[CURL_ERROR_SIZE] = "";
	curl_easy_setopt(h, CURLOPT_URL, c->url);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, c->connect_ms);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, c->total_ms);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, http_write_cb);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, resp);
	curl_easy_setopt(h, CURLOPT_USERAGENT, "larder-creds");
	curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, http_progress_cb);
	curl_easy_setopt(h, CURLOPT_XFERINFODATA, c->stop);
	curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
	if (c->no_proxy)
		curl_easy_setopt(h, CURLOPT_NOPROXY, "*");
	if (strcmp(c->method, "GET") != 0) {
		const char *body = c->body ? c->body : "";
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
		if (strcmp(c->method, "POST") != 0)
			curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, c->method);
	}
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);

	CURLcode cc = curl_easy_perform(h);
	if (cc != CURLE_OK) {
		if (cc == CURLE_WRITE_ERROR)
			creds_seterr(why, whylen, "%s %s: response larger than %d bytes", c->method, c->url,
			             MAX_HTTP_BODY);
		else
			creds_seterr(why, whylen, "%s %s: %s", c->method, c->url,
			             errbuf[0] ? errbuf : curl_easy_strerror(cc));
		rc = -EIO;
		goto out;
	}
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
	if (!resp->p)
		rc = buf_puts(resp, "");
out:
	/* The header list may hold an authorization token. */
	for (struct curl_slist *s = hdrs; s; s = s->next)
		explicit_bzero(s->data, strlen(s->data));
	curl_slist_free_all(hdrs);
	curl_easy_cleanup(h);
	if (rc)
		creds_buf_wipe(resp);
	return rc;
}

/*
 * creds_sts.c - provider 3: web identity. The token in
 * AWS_WEB_IDENTITY_TOKEN_FILE is exchanged for temporary credentials with
 * STS AssumeRoleWithWebIdentity (an unsigned form POST); the XML answer,
 * or STS's error document, is parsed here.
 */
#include "auth/creds_provider.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <expat.h>

#define STS_CONNECT_MS 5000
#define STS_TOTAL_MS   15000

enum sts_field { STS_NONE, STS_AKID, STS_SECRET, STS_TOKEN, STS_EXP, STS_CODE, STS_MESSAGE, STS_NFIELDS };

struct sts_parse {
	bool in_creds;
	bool in_error;
	enum sts_field cur;
	struct buf text;
	bool too_long;
	char *val[STS_NFIELDS];
};

static const char *local_name(const char *n)
{
	const char *c = strrchr(n, ':');
	return c ? c + 1 : n;
}

static void XMLCALL sts_start(void *ud, const XML_Char *name, const XML_Char **attrs)
{
	struct sts_parse *sp = ud;
	const char *n = local_name(name);
	sp->cur = STS_NONE;
	if (strcmp(n, "Credentials") == 0) {
		sp->in_creds = true;
	} else if (strcmp(n, "Error") == 0) {
		sp->in_error = true;
	} else if (sp->in_creds) {
		if (strcmp(n, "AccessKeyId") == 0)
			sp->cur = STS_AKID;
		else if (strcmp(n, "SecretAccessKey") == 0)
			sp->cur = STS_SECRET;
		else if (strcmp(n, "SessionToken") == 0)
			sp->cur = STS_TOKEN;
		else if (strcmp(n, "Expiration") == 0)
			sp->cur = STS_EXP;
	} else if (sp->in_error) {
		if (strcmp(n, "Code") == 0)
			sp->cur = STS_CODE;
		else if (strcmp(n, "Message") == 0)
			sp->cur = STS_MESSAGE;
	}
	buf_reset(&sp->text);
}

static void XMLCALL sts_end(void *ud, const XML_Char *name)
{
	struct sts_parse *sp = ud;
	const char *n = local_name(name);
	if (sp->cur != STS_NONE && !sp->val[sp->cur]) {
		sp->val[sp->cur] = strdup(buf_cstr(&sp->text));
	}
	sp->cur = STS_NONE;
	buf_reset(&sp->text);
	if (strcmp(n, "Credentials") == 0)
		sp->in_creds = false;
	else if (strcmp(n, "Error") == 0)
		sp->in_error = false;
}

static void XMLCALL sts_text(void *ud, const XML_Char *s, int len)
{
	struct sts_parse *sp = ud;
	if (sp->cur == STS_NONE || len <= 0)
		return;
	if (buf_append(&sp->text, s, (size_t)len) != 0)
		sp->too_long = true;
}

static void sts_parse_fini(struct sts_parse *sp)
{
	creds_buf_wipe(&sp->text);
	for (int i = 0; i < STS_NFIELDS; i++) {
		if (sp->val[i]) {
			explicit_bzero(sp->val[i], strlen(sp->val[i]));
			free(sp->val[i]);
		}
	}
}

/* https://docs.aws.amazon.com/STS/latest/APIReference/API_AssumeRoleWithWebIdentity.html */
int creds_parse_sts(const char *body, size_t len, long status, struct creds *out, char *why,
                    size_t whylen)
{
	struct sts_parse sp = { 0 };
	buf_init(&sp.text, MAX_XML_TEXT);
	XML_Parser xp = XML_ParserCreate(NULL);
	if (!xp) {
		creds_seterr(why, whylen, "XML_ParserCreate() failed");
		return -ENOMEM;
	}
	XML_SetUserData(xp, &sp);
	XML_SetElementHandler(xp, sts_start, sts_end);
	XML_SetCharacterDataHandler(xp, sts_text);
	int rc = -EINVAL;
	memset(out, 0, sizeof *out);
	if (len > INT32_MAX || XML_Parse(xp, body, (int)len, 1) != XML_STATUS_OK) {
		creds_seterr(why, whylen, "STS answered %ld with unparsable XML (%s)", status,
		             XML_ErrorString(XML_GetErrorCode(xp)));
		goto out;
	}
	if (sp.too_long) {
		creds_seterr(why, whylen, "STS response has an oversized field");
		goto out;
	}
	if (status != 200) {
		creds_seterr(why, whylen, "STS answered %ld: %.64s: %.200s", status,
		             sp.val[STS_CODE] ? sp.val[STS_CODE] : "(no code)",
		             sp.val[STS_MESSAGE] ? sp.val[STS_MESSAGE] : "(no message)");
		goto out;
	}
	if (!sp.val[STS_AKID] || !*sp.val[STS_AKID] || !sp.val[STS_SECRET] || !*sp.val[STS_SECRET] ||
	    !sp.val[STS_TOKEN] || !sp.val[STS_EXP]) {
		creds_seterr(why, whylen, "STS response lacks Credentials");
		goto out;
	}
	if (creds_set_field(out->access_key, sizeof out->access_key, creds_trim(sp.val[STS_AKID]), "AccessKeyId", why,
	                    whylen) ||
	    creds_set_field(out->secret_key, sizeof out->secret_key, creds_trim(sp.val[STS_SECRET]), "SecretAccessKey",
	                    why, whylen) ||
	    creds_set_field(out->session_token, sizeof out->session_token, creds_trim(sp.val[STS_TOKEN]), "SessionToken",
	                    why, whylen))
		goto out;
	if (creds_parse_iso8601(creds_trim(sp.val[STS_EXP]), &out->expiration) != 0) {
		creds_seterr(why, whylen, "STS response has a bad Expiration \"%.40s\"", sp.val[STS_EXP]);
		goto out;
	}
	rc = 0;
out:
	XML_ParserFree(xp);
	sts_parse_fini(&sp);
	if (rc)
		creds_wipe(out);
	return rc;
}

/* The STS endpoint: AWS_ENDPOINT_URL_STS, AWS_STS_ENDPOINT_URL, then the
 * regional endpoint (the global one when no region is known). */
static char *sts_endpoint(const struct src_ctx *x)
{
	const char *v = creds_env_get(x->env, "AWS_ENDPOINT_URL_STS");
	if (!v)
		v = creds_env_get(x->env, "AWS_STS_ENDPOINT_URL");
	if (v)
		return strdup(v);
	const char *region = x->region && *x->region ? x->region : creds_env_get(x->env, "AWS_REGION");
	if (!region)
		region = creds_env_get(x->env, "AWS_DEFAULT_REGION");
	char *out = NULL;
	if (!region)
		return strdup("https://sts.amazonaws.com");
	const char *suffix = strncmp(region, "cn-", 3) == 0 ? "amazonaws.com.cn" : "amazonaws.com";
	return asprintf(&out, "https://sts.%s.%s", region, suffix) < 0 ? NULL : out;
}

static int form_add(struct buf *b, CURL *h, const char *name, const char *value)
{
	char *enc = curl_easy_escape(h, value, 0);
	if (!enc)
		return -ENOMEM;
	int rc = buf_printf(b, "%s%s=%s", b->len ? "&" : "", name, enc);
	explicit_bzero(enc, strlen(enc));
	curl_free(enc);
	return rc;
}

int creds_src_web_identity(const struct src_ctx *x, struct creds *out, char *why, size_t whylen)
{
	const char *token_file = creds_env_get(x->env, "AWS_WEB_IDENTITY_TOKEN_FILE");
	const char *role_arn = creds_env_get(x->env, "AWS_ROLE_ARN");
	if (!token_file && !role_arn)
		return SRC_NOT_SET;
	if (!token_file || !role_arn) {
		creds_seterr(why, whylen, "%s is set but %s is not",
		             token_file ? "AWS_WEB_IDENTITY_TOKEN_FILE" : "AWS_ROLE_ARN",
		             token_file ? "AWS_ROLE_ARN" : "AWS_WEB_IDENTITY_TOKEN_FILE");
		return -EINVAL;
	}
	char session[64];
	const char *sn = creds_env_get(x->env, "AWS_ROLE_SESSION_NAME");
	if (sn)
		snprintf(session, sizeof session, "%s", sn);
	else
		snprintf(session, sizeof session, "larder-%lld", (long long)time(NULL));

	struct buf tok, form, resp;
	buf_init(&form, MAX_TOKEN_FILE * 3 + 4096);
	buf_init(&resp, 1);
	char *url = NULL;
	CURL *esc = NULL;
	int rc = creds_read_file(token_file, MAX_TOKEN_FILE, &tok);
	if (rc) {
		creds_seterr(why, whylen, "cannot read AWS_WEB_IDENTITY_TOKEN_FILE %s: %s", token_file,
		             rc == -E2BIG ? "larger than 32 KiB" : strerror(-rc));
		goto out_form;
	}
	char *token = creds_trim(tok.p);
	if (!*token) {
		creds_seterr(why, whylen, "web identity token file %s is empty", token_file);
		rc = -EINVAL;
		goto out;
	}
	if (x->offline) { /* STS would say the rest */
		rc = SRC_OK;
		goto out;
	}
	url = sts_endpoint(x);
	esc = curl_easy_init();
	if (!url || !esc) {
		creds_seterr(why, whylen, "out of memory");
		rc = -ENOMEM;
		goto out;
	}
	rc = form_add(&form, esc, "Action", "AssumeRoleWithWebIdentity");
	if (!rc)
		rc = form_add(&form, esc, "Version", "2011-06-15");
	if (!rc)
		rc = form_add(&form, esc, "RoleArn", role_arn);
	if (!rc)
		rc = form_add(&form, esc, "RoleSessionName", session);
	if (!rc)
		rc = form_add(&form, esc, "WebIdentityToken", token);
	if (rc) {
		creds_seterr(why, whylen, "cannot build the STS request: %s", strerror(-rc));
		goto out;
	}
	static const char *const hdrs[] = {
		"Content-Type: application/x-www-form-urlencoded; charset=utf-8",
		"Accept: text/xml",
		NULL,
	};
	struct creds_http_call call = {
		.method = "POST", .url = url, .headers = hdrs, .body = form.p,
		.connect_ms = STS_CONNECT_MS, .total_ms = STS_TOTAL_MS, .stop = x->stop,
		.ca_file = creds_env_get(x->env, "AWS_CA_BUNDLE"),
	};
	long status;
	rc = creds_http_do(&call, &resp, &status, why, whylen);
	if (rc)
		goto out;
	rc = creds_parse_sts(resp.p, resp.len, status, out, why, whylen);
	if (rc == 0)
		rc = SRC_OK;
out:
	creds_buf_wipe(&tok);
out_form:
	creds_buf_wipe(&form);
	creds_buf_wipe(&resp);
	if (esc)
		curl_easy_cleanup(esc);
	free(url);
	return rc;
}

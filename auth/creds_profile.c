/*
 * creds_profile.c - provider 2: the shared credentials and config files
 * (AWS_SHARED_CREDENTIALS_FILE, AWS_CONFIG_FILE, profile AWS_PROFILE).
 * Static keys only: a profile that needs role_arn, credential_process or
 * SSO is logged and skipped.
 */
#include "auth/creds_provider.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/log.h"

static void profile_set(char **slot, const char *v)
{
	char *d = strdup(v);
	if (!d)
		return; /* treated as missing */
	if (*slot) {
		explicit_bzero(*slot, strlen(*slot));
		free(*slot);
	}
	*slot = d;
}

void creds_profile_fini(struct creds_profile *pr)
{
	char **slots[] = { &pr->key, &pr->secret, &pr->token };
	for (size_t i = 0; i < sizeof slots / sizeof slots[0]; i++) {
		if (*slots[i]) {
			explicit_bzero(*slots[i], strlen(*slots[i]));
			free(*slots[i]);
			*slots[i] = NULL;
		}
	}
}

/* Settings that make a profile something other than static keys. */
static const char *const unsupported_keys[] = {
	"role_arn", "source_profile", "credential_source", "credential_process",
	"web_identity_token_file", "sso_session", "sso_start_url", "sso_account_id",
	"login_session",
};

static void profile_apply(struct creds_profile *pr, const char *k, const char *v)
{
	if (strcasecmp(k, "aws_access_key_id") == 0) {
		profile_set(&pr->key, v);
	} else if (strcasecmp(k, "aws_secret_access_key") == 0) {
		profile_set(&pr->secret, v);
	} else if (strcasecmp(k, "aws_session_token") == 0 ||
	           strcasecmp(k, "aws_security_token") == 0) { /* legacy name, botocore reads it */
		profile_set(&pr->token, v);
	} else {
		for (size_t i = 0; i < sizeof unsupported_keys / sizeof unsupported_keys[0]; i++)
			if (strcasecmp(k, unsupported_keys[i]) == 0 && !pr->unsupported[0])
				snprintf(pr->unsupported, sizeof pr->unsupported, "%s", unsupported_keys[i]);
	}
}

/*
 * Does section header text sec (between the brackets, trimmed) name the
 * profile? In the credentials file a section is the bare profile name; in
 * the config file it is "profile NAME", except plain "default".
 */
static bool section_is_profile(const char *sec, const char *name, bool config_file)
{
	if (!config_file)
		return strcmp(sec, name) == 0;
	if (strcmp(sec, "default") == 0)
		return strcmp(name, "default") == 0;
	if (strncmp(sec, "profile", 7) != 0 || !isspace((unsigned char)sec[7]))
		return false;
	const char *p = sec + 7;
	while (isspace((unsigned char)*p))
		p++;
	return strcmp(p, name) == 0;
}

/*
 * A small reader for the AWS shared-file dialect of INI: "[section]",
 * "key = value", full-line comments with # or ;, and indented lines that
 * continue the previous key (nested settings such as "s3 =\n  addressing_style
 * = path"), which are ignored. Values are taken verbatim, as botocore does:
 * there are no inline comments. Written here rather than with inih because
 * inih's fixed line buffer (200 bytes by default) is shorter than a session
 * token.
 */
void creds_profile_parse(struct creds_profile *pr, char *text, bool config_file)
{
	bool in_profile = false;
	char *save = NULL;
	for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		bool indented = *line == ' ' || *line == '\t';
		char *s = creds_trim(line);
		if (*s == '\0' || *s == '#' || *s == ';')
			continue;
		if (*s == '[') {
			char *end = strrchr(s, ']');
			if (!end) {
				in_profile = false;
				continue;
			}
			*end = '\0';
			in_profile = section_is_profile(creds_trim(s + 1), pr->name, config_file);
			if (in_profile)
				pr->found = true;
			continue;
		}
		if (!in_profile || indented)
			continue;
		char *eq = strchr(s, '=');
		if (!eq)
			continue;
		*eq = '\0';
		profile_apply(pr, creds_trim(s), creds_trim(eq + 1));
	}
}

/* "~/x" -> "$HOME/x". Returns a malloc'd path or NULL. */
static char *expand_home(const struct env_copy *env, const char *path)
{
	const char *home = creds_env_get(env, "HOME");
	if (strncmp(path, "~/", 2) == 0) {
		if (!home)
			return NULL;
		char *out = NULL;
		return asprintf(&out, "%s/%s", home, path + 2) < 0 ? NULL : out;
	}
	return strdup(path);
}

static char *default_path(const struct env_copy *env, const char *var, const char *leaf)
{
	const char *v = creds_env_get(env, var);
	if (v)
		return expand_home(env, v);
	const char *home = creds_env_get(env, "HOME");
	if (!home)
		return NULL;
	char *out = NULL;
	return asprintf(&out, "%s/.aws/%s", home, leaf) < 0 ? NULL : out;
}

/* Parses one file into pr. A missing file is not an error. */
static int profile_load(struct creds_profile *pr, const char *path, bool config_file, char *why,
                        size_t whylen)
{
	if (!path)
		return 0;
	struct buf b;
	int rc = creds_read_file(path, MAX_PROFILE_FILE, &b);
	if (rc == -ENOENT || rc == -ENOTDIR)
		return 0;
	if (rc) {
		creds_seterr(why, whylen, "cannot read %s: %s", path, strerror(-rc));
		return rc;
	}
	creds_profile_parse(pr, b.p, config_file);
	creds_buf_wipe(&b);
	return 0;
}

int creds_src_profile(const struct src_ctx *x, struct creds *out, char *why, size_t whylen)
{
	const char *named = creds_env_get(x->env, "AWS_PROFILE");
	if (!named)
		named = creds_env_get(x->env, "AWS_DEFAULT_PROFILE");
	struct creds_profile pr = { .name = named ? named : "default" };
	char *cred_path = default_path(x->env, "AWS_SHARED_CREDENTIALS_FILE", "credentials");
	char *conf_path = default_path(x->env, "AWS_CONFIG_FILE", "config");
	/* Config first, then the credentials file overrides key by key. */
	int rc = profile_load(&pr, conf_path, true, why, whylen);
	if (rc == 0)
		rc = profile_load(&pr, cred_path, false, why, whylen);
	if (rc)
		goto out;
	if (!pr.found) {
		if (named) {
			creds_seterr(why, whylen, "profile \"%s\" (AWS_PROFILE) not found in %s or %s", pr.name,
			             cred_path ? cred_path : "(no credentials file)",
			             conf_path ? conf_path : "(no config file)");
			rc = -ENOENT;
		} else {
			rc = SRC_NOT_SET;
		}
		goto out;
	}
	if (pr.unsupported[0]) {
		/* role_arn & co. take precedence over static keys in the SDKs, so
		 * the keys of such a profile are not used either. */
		log_warn(TOPIC, "profile \"%s\" uses %s, which larder does not support; skipping it", pr.name,
		         pr.unsupported);
		creds_seterr(why, whylen, "profile \"%s\" uses unsupported %s", pr.name, pr.unsupported);
		rc = SRC_NOT_SET;
		goto out;
	}
	if (!pr.key && !pr.secret) {
		if (named) {
			creds_seterr(why, whylen, "profile \"%s\" has no aws_access_key_id/aws_secret_access_key",
			             pr.name);
			rc = -EINVAL;
		} else {
			rc = SRC_NOT_SET;
		}
		goto out;
	}
	if (!pr.key || !pr.secret) {
		creds_seterr(why, whylen, "profile \"%s\" has %s without %s", pr.name,
		             pr.key ? "aws_access_key_id" : "aws_secret_access_key",
		             pr.key ? "aws_secret_access_key" : "aws_access_key_id");
		rc = -EINVAL;
		goto out;
	}
	memset(out, 0, sizeof *out);
	if (creds_set_field(out->access_key, sizeof out->access_key, pr.key, "aws_access_key_id", why, whylen) ||
	    creds_set_field(out->secret_key, sizeof out->secret_key, pr.secret, "aws_secret_access_key", why, whylen) ||
	    (pr.token && creds_set_field(out->session_token, sizeof out->session_token, pr.token,
	                                 "aws_session_token", why, whylen))) {
		creds_wipe(out);
		rc = -E2BIG;
		goto out;
	}
	log_debug(TOPIC, "using profile \"%s\"", pr.name);
	rc = SRC_OK;
out:
	creds_profile_fini(&pr);
	free(cred_path);
	free(conf_path);
	return rc;
}

/*
 * test_creds.c - the credentials chain against stand-in IMDSv2, container
 * and STS servers on 127.0.0.1 (libmicrohttpd, ephemeral ports).
 *
 * The files under test (the chain and each provider) are included so their
 * parsers can be tested directly.
 * Every test passes an explicit envp with HOME pointing into a private temp
 * dir, so nothing on the machine (~/.aws, AWS_* variables, 169.254.169.254)
 * leaks in.
 */
#include "auth/creds.c"
#include "auth/creds_container.c"
#include "auth/creds_env.c"
#include "auth/creds_http.c"
#include "auth/creds_imds.c"
#include "auth/creds_profile.c"
#include "auth/creds_sts.c"
#include "auth/creds_util.c"

#include <setjmp.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <sys/stat.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <microhttpd.h>

/* ---- stand-in servers ---------------------------------------------- */

enum kind { KIND_IMDS, KIND_CONTAINER, KIND_STS };

struct stand_in {
	enum kind kind;
	struct MHD_Daemon *d;
	unsigned short port;

	pthread_mutex_t lock;       /* guards the strings below */
	char expect_auth[256];      /* container: required Authorization ("" = none required) */
	char token_file[512];       /* STS: WebIdentityToken must equal this file's contents */
	char imds_token[64];        /* IMDS: the last session token handed out */
	char last_session[128];     /* STS: RoleSessionName of the last call */
	char last_role[256];        /* STS: RoleArn of the last call */

	atomic_int expire_in;       /* Expiration = now + expire_in seconds */
	atomic_int cred_reqs;       /* authorised credential requests (1-based numbering) */
	atomic_int issued;          /* credentials handed out; the counter goes in the key id */
	atomic_int unauthorized;    /* requests refused with 401 (or STS token mismatch) */
	atomic_int token_puts;      /* IMDS: PUT /latest/api/token answered */
	atomic_int fail_from;       /* credential request numbers [fail_from, fail_from + fail_count) get 500 */
	atomic_int fail_count;
};

/* time() of everything in this file, the code under test and the stand-ins
 * alike (-Wl,--wrap=time): the wall clock plus clock_step_s, a step of the
 * machine's clock as NTP makes one. The monotonic clock is left alone. */
static atomic_llong clock_step_s;
time_t __real_time(time_t *t);
time_t __wrap_time(time_t *t);
time_t __wrap_time(time_t *t)
{
	time_t v = __real_time(NULL) + (time_t)atomic_load(&clock_step_s);
	if (t)
		*t = v;
	return v;
}

static struct stand_in imds_srv = { .kind = KIND_IMDS };
static struct stand_in ctr_srv = { .kind = KIND_CONTAINER };
static struct stand_in sts_srv = { .kind = KIND_STS };

static char tmpdir[256];

static void stand_in_reset(struct stand_in *s)
{
	pthread_mutex_lock(&s->lock);
	s->expect_auth[0] = s->token_file[0] = s->imds_token[0] = '\0';
	s->last_session[0] = s->last_role[0] = '\0';
	pthread_mutex_unlock(&s->lock);
	atomic_store(&s->expire_in, 3600);
	atomic_store(&s->cred_reqs, 0);
	atomic_store(&s->issued, 0);
	atomic_store(&s->unauthorized, 0);
	atomic_store(&s->token_puts, 0);
	atomic_store(&s->fail_from, 0);
	atomic_store(&s->fail_count, 0);
}

static void iso8601_at(time_t t, char *out, size_t n)
{
	struct tm tm;
	gmtime_r(&t, &tm);
	strftime(out, n, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *ctype, const char *body)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), (void *)body,
	                                                         MHD_RESPMEM_MUST_COPY);
	if (ctype)
		MHD_add_response_header(r, "Content-Type", ctype);
	enum MHD_Result ret = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return ret;
}

/* Counts one authorised credential request; true when it must fail. */
static bool should_fail(struct stand_in *s)
{
	int n = atomic_fetch_add(&s->cred_reqs, 1) + 1;
	int from = atomic_load(&s->fail_from);
	return from > 0 && n >= from && n < from + atomic_load(&s->fail_count);
}

static enum MHD_Result json_creds(struct stand_in *s, struct MHD_Connection *c, bool imds)
{
	if (should_fail(s))
		return reply(c, 500, "text/plain", "injected failure");
	int n = atomic_fetch_add(&s->issued, 1) + 1;
	char exp[32], body[1024];
	iso8601_at(time(NULL) + atomic_load(&s->expire_in), exp, sizeof exp);
	snprintf(body, sizeof body,
	         "{%s\"AccessKeyId\":\"ASIA%sKEY%04d\",\"SecretAccessKey\":\"%s-secret-%d\","
	         "\"Token\":\"%s-token-%d\",\"Expiration\":\"%s\"}",
	         imds ? "\"Code\":\"Success\",\"Type\":\"AWS-HMAC\"," : "",
	         imds ? "IMDS" : "CTR", n, imds ? "imds" : "ctr", n, imds ? "imds" : "ctr", n, exp);
	return reply(c, 200, "application/json", body);
}

#define IMDS_CREDS_PATH "/latest/meta-data/iam/security-credentials/"
#define IMDS_ROLE "larder-test-role"

static enum MHD_Result imds_handle(struct stand_in *s, struct MHD_Connection *c, const char *url,
                                   const char *method)
{
	if (strcmp(url, "/latest/api/token") == 0) {
		if (strcmp(method, "PUT") != 0)
			return reply(c, 405, "text/plain", "method not allowed");
		const char *ttl = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
		                                              "X-aws-ec2-metadata-token-ttl-seconds");
		long ttl_s = ttl ? strtol(ttl, NULL, 10) : 0;
		if (ttl_s < 1 || ttl_s > 21600)
			return reply(c, 400, "text/plain", "missing or bad ttl");
		char tok[64];
		snprintf(tok, sizeof tok, "imds-session-%d", atomic_fetch_add(&s->token_puts, 1) + 1);
		pthread_mutex_lock(&s->lock);
		snprintf(s->imds_token, sizeof s->imds_token, "%s", tok);
		pthread_mutex_unlock(&s->lock);
		return reply(c, 200, "text/plain", tok);
	}
	if (strncmp(url, IMDS_CREDS_PATH, strlen(IMDS_CREDS_PATH)) != 0)
		return reply(c, 404, "text/plain", "not found");
	const char *tok = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-aws-ec2-metadata-token");
	pthread_mutex_lock(&s->lock);
	bool ok = tok && s->imds_token[0] && strcmp(tok, s->imds_token) == 0;
	pthread_mutex_unlock(&s->lock);
	if (!ok) {
		atomic_fetch_add(&s->unauthorized, 1);
		return reply(c, 401, "text/plain", "unauthorized");
	}
	const char *role = url + strlen(IMDS_CREDS_PATH);
	if (!*role)
		return reply(c, 200, "text/plain", IMDS_ROLE);
	if (strcmp(role, IMDS_ROLE) != 0)
		return reply(c, 404, "text/plain", "no such role");
	return json_creds(s, c, true);
}

static enum MHD_Result container_handle(struct stand_in *s, struct MHD_Connection *c, const char *url)
{
	if (strcmp(url, "/creds") != 0)
		return reply(c, 404, "text/plain", "not found");
	const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
	pthread_mutex_lock(&s->lock);
	bool ok = !s->expect_auth[0] || (auth && strcmp(auth, s->expect_auth) == 0);
	pthread_mutex_unlock(&s->lock);
	if (!ok) {
		atomic_fetch_add(&s->unauthorized, 1);
		return reply(c, 401, "application/json", "{\"message\":\"bad token\"}");
	}
	return json_creds(s, c, false);
}

/* Decodes application/x-www-form-urlencoded value text in place. */
static void form_decode(char *s)
{
	char *o = s;
	for (; *s; s++) {
		if (*s == '+') {
			*o++ = ' ';
		} else if (*s == '%' && isxdigit((unsigned char)s[1]) && isxdigit((unsigned char)s[2])) {
			char hex[3] = { s[1], s[2], 0 };
			*o++ = (char)strtol(hex, NULL, 16);
			s += 2;
		} else {
			*o++ = *s;
		}
	}
	*o = '\0';
}

/* Finds name in a form body (decoded copy into out); false when absent. */
static bool form_get(const char *body, const char *name, char *out, size_t n)
{
	size_t nl = strlen(name);
	for (const char *p = body; p && *p; p = strchr(p, '&') ? strchr(p, '&') + 1 : NULL) {
		if (strncmp(p, name, nl) == 0 && p[nl] == '=') {
			const char *v = p + nl + 1;
			size_t vl = strcspn(v, "&");
			if (vl >= n)
				return false;
			memcpy(out, v, vl);
			out[vl] = '\0';
			form_decode(out);
			return true;
		}
	}
	return false;
}

static enum MHD_Result sts_error(struct MHD_Connection *c, unsigned status, const char *code, const char *msg)
{
	char body[1024];
	snprintf(body, sizeof body,
	         "<ErrorResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\">"
	         "<Error><Type>Sender</Type><Code>%s</Code><Message>%s</Message></Error>"
	         "<RequestId>00000000-0000-0000-0000-000000000000</RequestId></ErrorResponse>",
	         code, msg);
	return reply(c, status, "text/xml", body);
}

static enum MHD_Result sts_handle(struct stand_in *s, struct MHD_Connection *c, const char *method,
                                  const char *body)
{
	if (strcmp(method, "POST") != 0)
		return sts_error(c, 405, "InvalidAction", "POST only here");
	char action[64], version[32], role[256], session[128], token[4096];
	if (!form_get(body, "Action", action, sizeof action) || strcmp(action, "AssumeRoleWithWebIdentity") ||
	    !form_get(body, "Version", version, sizeof version) || strcmp(version, "2011-06-15"))
		return sts_error(c, 400, "InvalidAction", "unknown action or version");
	if (!form_get(body, "RoleArn", role, sizeof role) ||
	    !form_get(body, "RoleSessionName", session, sizeof session) ||
	    !form_get(body, "WebIdentityToken", token, sizeof token))
		return sts_error(c, 400, "MissingParameter", "a parameter is missing");

	/* The token must be what the file holds right now. */
	pthread_mutex_lock(&s->lock);
	snprintf(s->last_role, sizeof s->last_role, "%s", role);
	snprintf(s->last_session, sizeof s->last_session, "%s", session);
	char path[512];
	snprintf(path, sizeof path, "%s", s->token_file);
	pthread_mutex_unlock(&s->lock);
	char want[4096] = "";
	FILE *f = fopen(path, "r");
	if (f) {
		size_t k = fread(want, 1, sizeof want - 1, f);
		want[k] = '\0';
		fclose(f);
	}
	if (!want[0] || strcmp(creds_trim(want), token) != 0) {
		atomic_fetch_add(&s->unauthorized, 1);
		return sts_error(c, 400, "InvalidIdentityToken", "token does not match");
	}
	if (should_fail(s))
		return sts_error(c, 503, "ServiceUnavailable", "injected failure");

	int n = atomic_fetch_add(&s->issued, 1) + 1;
	char exp[32], xml[2048];
	iso8601_at(time(NULL) + atomic_load(&s->expire_in), exp, sizeof exp);
	snprintf(xml, sizeof xml,
	         "<AssumeRoleWithWebIdentityResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\">\n"
	         "  <AssumeRoleWithWebIdentityResult>\n"
	         "    <SubjectFromWebIdentityToken>system:serviceaccount:ns:sa</SubjectFromWebIdentityToken>\n"
	         "    <AssumedRoleUser>\n"
	         "      <Arn>arn:aws:sts::123456789012:assumed-role/test/%s</Arn>\n"
	         "      <AssumedRoleId>AROATEST:%s</AssumedRoleId>\n"
	         "    </AssumedRoleUser>\n"
	         "    <Credentials>\n"
	         "      <AccessKeyId>ASIASTSKEY%04d</AccessKeyId>\n"
	         "      <SecretAccessKey>sts-secret-%d</SecretAccessKey>\n"
	         "      <SessionToken>sts-token-%d</SessionToken>\n"
	         "      <Expiration>%s</Expiration>\n"
	         "    </Credentials>\n"
	         "  </AssumeRoleWithWebIdentityResult>\n"
	         "  <ResponseMetadata><RequestId>r-%d</RequestId></ResponseMetadata>\n"
	         "</AssumeRoleWithWebIdentityResponse>\n",
	         session, session, n, n, n, exp, n);
	return reply(c, 200, "text/xml", xml);
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *upload, size_t *upload_size, void **req_cls)
{
	struct stand_in *s = cls;
	struct buf *body = *req_cls;
	if (!body) {
		body = calloc(1, sizeof *body);
		if (!body)
			return MHD_NO;
		buf_init(body, 64 * 1024);
		*req_cls = body;
		return MHD_YES;
	}
	if (*upload_size) {
		if (buf_append(body, upload, *upload_size) != 0)
			return MHD_NO;
		*upload_size = 0;
		return MHD_YES;
	}
	switch (s->kind) {
	case KIND_IMDS:
		return imds_handle(s, c, url, method);
	case KIND_CONTAINER:
		return container_handle(s, c, url);
	case KIND_STS:
		return sts_handle(s, c, method, buf_cstr(body));
	}
	return MHD_NO;
}

static void completed(void *cls, struct MHD_Connection *c, void **req_cls, enum MHD_RequestTerminationCode toe)
{
	struct buf *body = *req_cls;
	if (body) {
		buf_fini(body);
		free(body);
		*req_cls = NULL;
	}
}

static int stand_in_start(struct stand_in *s)
{
	pthread_mutex_init(&s->lock, NULL);
	stand_in_reset(s);
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = 0 };
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	s->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, 0, NULL, NULL, handler, s,
	                        MHD_OPTION_SOCK_ADDR, (const struct sockaddr *)&sa,
	                        MHD_OPTION_NOTIFY_COMPLETED, completed, s,
	                        MHD_OPTION_END);
	if (!s->d)
		return -1;
	const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
	if (!di || !di->port)
		return -1;
	s->port = di->port;
	return 0;
}

static void stand_in_stop(struct stand_in *s)
{
	if (s->d)
		MHD_stop_daemon(s->d);
	s->d = NULL;
	pthread_mutex_destroy(&s->lock);
}

/* ---- test helpers -------------------------------------------------- */

/* A NULL-terminated envp built from printf-style entries. */
struct envb {
	char *v[32];
	int n;
};

static void envb_add(struct envb *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void envb_add(struct envb *e, const char *fmt, ...)
{
	assert_true(e->n < 31);
	va_list ap;
	va_start(ap, fmt);
	assert_true(vasprintf(&e->v[e->n], fmt, ap) >= 0);
	va_end(ap);
	e->n++;
	e->v[e->n] = NULL;
}

/* The base of every test's environment: a HOME with nothing in it and no
 * IMDS, unless a test adds its own. */
static void envb_base(struct envb *e, bool imds_off)
{
	memset(e, 0, sizeof *e);
	envb_add(e, "HOME=%s/emptyhome", tmpdir);
	envb_add(e, "PATH=/usr/bin:/bin"); /* not copied by the provider: must be harmless */
	if (imds_off)
		envb_add(e, "AWS_EC2_METADATA_DISABLED=true");
}

static void envb_free(struct envb *e)
{
	for (int i = 0; i < e->n; i++)
		free(e->v[i]);
	e->n = 0;
}

static struct creds_provider *create(struct envb *e, unsigned margin, char *err, size_t n)
{
	return creds_provider_create((const char *const *)e->v, "us-east-1", margin, err, n);
}

static void write_file(const char *name, const char *text, char *path_out, size_t n)
{
	char path[512];
	snprintf(path, sizeof path, "%s/%s", tmpdir, name);
	/* Write then rename, so a reader never sees a half-written file. */
	char tmp[520];
	snprintf(tmp, sizeof tmp, "%s.tmp", path);
	FILE *f = fopen(tmp, "w");
	assert_non_null(f);
	assert_int_equal(fputs(text, f) >= 0, 1);
	assert_int_equal(fclose(f), 0);
	assert_int_equal(rename(tmp, path), 0);
	if (path_out)
		snprintf(path_out, n, "%s", path);
}

static void expect_creds(struct creds_provider *p, const char *src, const char *akid, const char *secret,
                         const char *token)
{
	assert_non_null(p);
	assert_string_equal(creds_provider_source(p), src);
	struct creds c;
	creds_provider_get(p, &c);
	assert_string_equal(c.access_key, akid);
	assert_string_equal(c.secret_key, secret);
	assert_string_equal(c.session_token, token);
}

static int rm_tree(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return -1;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		char p[768];
		snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
		struct stat st;
		if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
			rm_tree(p);
		else
			unlink(p);
	}
	closedir(d);
	return rmdir(dir);
}

static int group_setup(void **state)
{
	const char *t = getenv("TMPDIR");
	snprintf(tmpdir, sizeof tmpdir, "%s/larder-creds-XXXXXX", t && *t ? t : "/tmp");
	if (!mkdtemp(tmpdir))
		return -1;
	char p[300];
	snprintf(p, sizeof p, "%s/emptyhome", tmpdir);
	if (mkdir(p, 0700) != 0)
		return -1;
	log_set_level(LOG_ERROR);
	if (stand_in_start(&imds_srv) || stand_in_start(&ctr_srv) || stand_in_start(&sts_srv))
		return -1;
	return 0;
}

static int group_teardown(void **state)
{
	stand_in_stop(&imds_srv);
	stand_in_stop(&ctr_srv);
	stand_in_stop(&sts_srv);
	rm_tree(tmpdir);
	return 0;
}

static int test_setup(void **state)
{
	atomic_store(&clock_step_s, 0);
	stand_in_reset(&imds_srv);
	stand_in_reset(&ctr_srv);
	stand_in_reset(&sts_srv);
	return 0;
}

/* ---- parsers ------------------------------------------------------- */

static void t_iso8601(void **state)
{
	time_t t;
	assert_int_equal(creds_parse_iso8601("2026-11-21T16:20:00Z", &t), 0);
	assert_int_equal((long long)t, 1795278000LL);
	assert_int_equal(creds_parse_iso8601("2026-11-21T16:20:00.123Z", &t), 0);
	assert_int_equal((long long)t, 1795278000LL);
	assert_int_equal(creds_parse_iso8601("2026-11-21T18:20:00+02:00", &t), 0);
	assert_int_equal((long long)t, 1795278000LL);
	assert_int_equal(creds_parse_iso8601("2026-11-21T11:20:00-0500", &t), 0);
	assert_int_equal((long long)t, 1795278000LL);
	assert_int_equal(creds_parse_iso8601("1970-01-01T00:00:00Z", &t), 0);
	assert_int_equal((long long)t, 0);

	const char *bad[] = { "", "2026-11-21", "2026-11-21T16:20:00", "2026-11-21T16:20:00Zjunk",
	                      "2026-13-21T16:20:00Z", "2026-11-21 16:20:00Z", "2026-11-21T16:20:00.Z",
	                      "2026-11-21T16:20:00+2", "26-11-21T16:20:00Z", "2026-11-21T16:20:00+25:00" };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		assert_int_equal(creds_parse_iso8601(bad[i], &t), -EINVAL);
}

static void t_profile_parse(void **state)
{
	char text[] =
		"# comment\n"
		"[default]\n"
		"aws_access_key_id = DEFAULTKEY\r\n"
		"aws_secret_access_key=defaultsecret\n"
		"[profile dev]\n"
		"  ; indented comment\n"
		"aws_access_key_id = DEVKEY\n"
		"s3 =\n"
		"  aws_access_key_id = NESTED_MUST_NOT_WIN\n"
		"aws_secret_access_key = dev secret with spaces # not a comment\n"
		"aws_security_token = devtoken\n"
		"[dev]\n"
		"aws_access_key_id = NOT_IN_CONFIG_FILE\n"
		"[profile   other]\n"
		"credential_process = /bin/false\n";
	struct creds_profile pr = { .name = "dev" };
	creds_profile_parse(&pr, text, true);
	assert_true(pr.found);
	assert_string_equal(pr.key, "DEVKEY");
	assert_string_equal(pr.secret, "dev secret with spaces # not a comment");
	assert_string_equal(pr.token, "devtoken");
	assert_string_equal(pr.unsupported, "");
	creds_profile_fini(&pr);

	char text2[] = "[profile   other]\ncredential_process = /bin/false\n[default]\nregion=x\n";
	struct creds_profile other = { .name = "other" };
	creds_profile_parse(&other, text2, true);
	assert_true(other.found);
	assert_string_equal(other.unsupported, "credential_process");
	creds_profile_fini(&other);

	/* In the credentials file the section is the bare name. */
	char text3[] = "[profile dev]\naws_access_key_id = A\n[dev]\naws_access_key_id = B\n";
	struct creds_profile cf = { .name = "dev" };
	creds_profile_parse(&cf, text3, false);
	assert_string_equal(cf.key, "B");
	creds_profile_fini(&cf);
}

static void t_sts_parse(void **state)
{
	struct creds c;
	char why[512];
	const char *ok =
		"<?xml version=\"1.0\"?><sts:AssumeRoleWithWebIdentityResponse "
		"xmlns:sts=\"https://sts.amazonaws.com/doc/2011-06-15/\"><sts:AssumeRoleWithWebIdentityResult>"
		"<sts:Credentials><sts:AccessKeyId>ASIAX</sts:AccessKeyId>"
		"<sts:SecretAccessKey>s&amp;cret</sts:SecretAccessKey>"
		"<sts:SessionToken>\n tok \n</sts:SessionToken>"
		"<sts:Expiration>2026-11-21T16:20:00Z</sts:Expiration></sts:Credentials>"
		"</sts:AssumeRoleWithWebIdentityResult></sts:AssumeRoleWithWebIdentityResponse>";
	assert_int_equal(creds_parse_sts(ok, strlen(ok), 200, &c, why, sizeof why), 0);
	assert_string_equal(c.access_key, "ASIAX");
	assert_string_equal(c.secret_key, "s&cret");
	assert_string_equal(c.session_token, "tok");
	assert_int_equal((long long)c.expiration, 1795278000LL);

	const char *err = "<ErrorResponse><Error><Type>Sender</Type><Code>AccessDenied</Code>"
	                  "<Message>Not authorized</Message></Error></ErrorResponse>";
	assert_int_not_equal(creds_parse_sts(err, strlen(err), 403, &c, why, sizeof why), 0);
	assert_non_null(strstr(why, "403"));
	assert_non_null(strstr(why, "AccessDenied"));
	assert_string_equal(c.access_key, "");

	const char *missing = "<R><Credentials><AccessKeyId>A</AccessKeyId></Credentials></R>";
	assert_int_not_equal(creds_parse_sts(missing, strlen(missing), 200, &c, why, sizeof why),
	                     0);
	assert_non_null(strstr(why, "lacks"));

	const char *junk = "<R><Credentials>";
	assert_int_not_equal(creds_parse_sts(junk, strlen(junk), 200, &c, why, sizeof why), 0);

	/* A session token longer than the field is refused, not truncated. */
	struct buf big;
	buf_init(&big, 16384);
	buf_puts(&big, "<R><Credentials><AccessKeyId>A</AccessKeyId><SecretAccessKey>S</SecretAccessKey>"
	               "<SessionToken>");
	for (int i = 0; i < 5000; i++)
		buf_putc(&big, 'x');
	buf_puts(&big, "</SessionToken><Expiration>2026-11-21T16:20:00Z</Expiration></Credentials></R>");
	assert_int_not_equal(creds_parse_sts(big.p, big.len, 200, &c, why, sizeof why), 0);
	assert_non_null(strstr(why, "too long"));
	buf_fini(&big);
}

static void t_json_parse(void **state)
{
	struct creds c;
	char why[512];
	const char *ok = "{\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"S\",\"Token\":\"T\","
	                 "\"Expiration\":\"2026-11-21T16:20:00Z\"}";
	assert_int_equal(creds_parse_json(ok, strlen(ok), &c, why, sizeof why), 0);
	assert_string_equal(c.session_token, "T");
	assert_int_equal((long long)c.expiration, 1795278000LL);

	const char *fail = "{\"Code\":\"Failure\",\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"S\"}";
	assert_int_not_equal(creds_parse_json(fail, strlen(fail), &c, why, sizeof why), 0);
	const char *nokey = "{\"SecretAccessKey\":\"S\"}";
	assert_int_not_equal(creds_parse_json(nokey, strlen(nokey), &c, why, sizeof why), 0);
	const char *notjson = "AccessKeyId=A";
	assert_int_not_equal(creds_parse_json(notjson, strlen(notjson), &c, why, sizeof why), 0);
	const char *badexp = "{\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"S\",\"Expiration\":\"soon\"}";
	assert_int_not_equal(creds_parse_json(badexp, strlen(badexp), &c, why, sizeof why), 0);
}

/* ---- 1. environment ------------------------------------------------ */

static void t_env(void **state)
{
	struct envb e;
	envb_base(&e, true);
	envb_add(&e, "AWS_ACCESS_KEY_ID=AKIAENVKEY");
	envb_add(&e, "AWS_SECRET_ACCESS_KEY=envsecret");
	char err[512];
	struct creds_provider *p = create(&e, 60, err, sizeof err);
	expect_creds(p, "env", "AKIAENVKEY", "envsecret", "");
	struct creds c;
	creds_provider_get(p, &c);
	assert_int_equal((long long)c.expiration, 0);
	assert_false(p->thread_started); /* static keys: no refresh thread */
	creds_provider_destroy(p);

	envb_add(&e, "AWS_SESSION_TOKEN=envtoken");
	p = create(&e, 60, err, sizeof err);
	expect_creds(p, "env", "AKIAENVKEY", "envsecret", "envtoken");
	creds_provider_destroy(p);
	envb_free(&e);
}

static void t_env_partial(void **state)
{
	struct envb e;
	envb_base(&e, true);
	envb_add(&e, "AWS_ACCESS_KEY_ID=AKIAENVKEY");
	char err[512] = "";
	assert_null(create(&e, 60, err, sizeof err));
	assert_non_null(strstr(err, "AWS_SECRET_ACCESS_KEY"));
	envb_free(&e);

	envb_base(&e, true);
	envb_add(&e, "AWS_SECRET_ACCESS_KEY=envsecret");
	envb_add(&e, "AWS_ACCESS_KEY_ID="); /* empty counts as unset */
	assert_null(create(&e, 60, err, sizeof err));
	assert_non_null(strstr(err, "AWS_ACCESS_KEY_ID"));
	envb_free(&e);
}

/* ---- 2. shared files ----------------------------------------------- */

static void t_profile_default(void **state)
{
	char cred[512];
	write_file("credentials-a",
	           "[default]\naws_access_key_id = AKIADEFAULT\naws_secret_access_key = defsecret\n"
	           "[dev]\naws_access_key_id = AKIADEV\naws_secret_access_key = devsecret\n"
	           "aws_session_token = devtoken\n",
	           cred, sizeof cred);
	struct envb e;
	envb_base(&e, true);
	envb_add(&e, "AWS_SHARED_CREDENTIALS_FILE=%s", cred);
	envb_add(&e, "AWS_CONFIG_FILE=%s/no-such-config", tmpdir);
	char err[512];
	struct creds_provider *p = create(&e, 60, err, sizeof err);
	expect_creds(p, "profile", "AKIADEFAULT", "defsecret", "");
	creds_provider_destroy(p);

	/* Named profile, with a session token. */
	envb_add(&e, "AWS_PROFILE=dev");
	p = create(&e, 60, err, sizeof err);
	expect_creds(p, "profile", "AKIADEV", "devsecret", "devtoken");
	creds_provider_destroy(p);

	/* A named profile that does not exist is an error, not a fall-through. */
	envb_add(&e, "AWS_PROFILE=nope");
	assert_null(create(&e, 60, err, sizeof err));
	assert_non_null(strstr(err, "\"nope\""));
	envb_free(&e);
}

static void t_profile_config_file(void **state)
{
	char conf[512], cred[512];
	write_file("config-b",
	           "[default]\nregion = us-east-1\n"
	           "[profile cfg]\nregion = eu-west-1\naws_access_key_id = AKIACFG\n"
	           "aws_secret_access_key = cfgsecret\naws_session_token = cfgtoken\n"
	           "[profile both]\naws_access_key_id = AKIAFROMCONFIG\naws_secret_access_key = confsecret\n"
	           "[cfgbare]\naws_access_key_id = AKIABARE\naws_secret_access_key = baresecret\n",
	           conf, sizeof conf);
	write_file("credentials-b", "[both]\naws_access_key_id = AKIAFROMCREDS\n", cred, sizeof cred);
	struct envb e;
	envb_base(&e, true);
	envb_add(&e, "AWS_CONFIG_FILE=%s", conf);
	envb_add(&e, "AWS_SHARED_CREDENTIALS_FILE=%s", cred);
	envb_add(&e, "AWS_PROFILE=cfg");
	char err[512];
	struct creds_provider *p = create(&e, 60, err, sizeof err);
	expect_creds(p, "profile", "AKIACFG", "cfgsecret", "cfgtoken");
	creds_provider_destroy(p);

	/* The credentials file wins key by key over the config file. */
	envb_add(&e, "AWS_PROFILE=both");
	p = create(&e, 60, err, sizeof err);
	expect_creds(p, "profile", "AKIAFROMCREDS", "confsecret", "");
	creds_provider_destroy(p);

	/* In the config file a non-default profile needs the "profile " prefix. */
	envb_add(&e, "AWS_PROFILE=cfgbare");
	assert_null(create(&e, 60, err, sizeof err));
	assert_non_null(strstr(err, "cfgbare"));

	/* The default profile with no keys (region only) is just "not set". */
	envb_add(&e, "AWS_PROFILE=");
	assert_null(create(&e, 60, err, sizeof err));
	assert_non_null(strstr(err, "no AWS credentials found"));
	envb_free(&e);
}

static void t_profile_home(void **state)
{
	char dir[400];
	snprintf(dir, sizeof dir, "%s/home2", tmpdir);
	assert_int_equal(mkdir(dir, 0700), 0);
	snprintf(dir, sizeof dir, "%s/home2/.aws", tmpdir);
	assert_int_equal(mkdir(dir, 0700), 0);
	write_file("home2/.aws/credentials", "[default]\naws_access_key_id=AKIAHOME\naws_secret_access_key=homesecret\n",
	           NULL, 0);
	write_file("home2/.aws/config", "[profile cf]\naws_access_key_id=AKIAHOMECF\naws_secret_access_key=s\n",
	           NULL, 0);
	struct envb e;
	memset(&e, 0, sizeof e);
	envb_add(&e, "HOME=%s/home2", tmpdir);
	envb_add(&e, "AWS_EC2_METADATA_DISABLED=true");
	char err[512];
	struct creds_provider *p = create(&e, 60, err, sizeof err);
	expect_creds(p, "profile", "AKIAHOME", "homesecret", "");
	creds_provider_destroy(p);
	envb_add(&e, "AWS_PROFILE=cf");
	p = create(&e, 60, err, sizeof err);
	expect_creds(p, "profile", "AKIAHOMECF", "s", "");
	creds_provider_destroy(p);
	/* "~/" in a path variable means HOME. */
	envb_add(&e, "AWS_PROFILE=default");
	envb_add(&e, "AWS_SHARED_CREDENTIALS_FILE=~/.aws/credentials");
	p = create(&e, 60, err, sizeof err);
	expect_creds(p, "profile", "AKIAHOME", "homesecret", "");
	creds_provider_destroy(p);
	envb_free(&e);
}

static void t_profile_unsupported(void **state)
{
	char cred[512];
	write_file("credentials-c",
	           "[default]\nrole_arn = arn:aws:iam::123456789012:role/x\nsource_profile = base\n"
	           "aws_access_key_id = AKIAIGNORED\naws_secret_access_key = ignored\n",
	           cred, sizeof cred);
	struct envb e;
	envb_base(&e, true);
	envb_add(&e, "AWS_SHARED_CREDENTIALS_FILE=%s", cred);
	char err[512];
	assert_null(create(&e, 60, err, sizeof err));
	assert_non_null(strstr(err, "no AWS credentials found"));
	assert_non_null(strstr(err, "unsupported role_arn"));

	/* ... and the chain moves on to the next source. */
	pthread_mutex_lock(&ctr_srv.lock);
	snprintf(ctr_srv.expect_auth, sizeof ctr_srv.expect_auth, "ctr-auth");
	pthread_mutex_unlock(&ctr_srv.lock);
	envb_add(&e, "AWS_CONTAINER_CREDENTIALS_FULL_URI=http://127.0.0.1:%u/creds", ctr_srv.port);
	envb_add(&e, "AWS_CONTAINER_AUTHORIZATION_TOKEN=ctr-auth");
	struct creds_provider *p = create(&e, 60, err, sizeof err);
	expect_creds(p, "container", "ASIACTRKEY0001", "ctr-secret-1", "ctr-token-1");
	creds_provider_destroy(p);
	envb_free(&e);
}

/* ---- 3. web identity ----------------------------------------------- */

static void sts_expect_token_file(const char *path)
{
	pthread_mutex_lock(&sts_srv.lock);
	snprintf(sts_srv.token_file, sizeof sts_srv.token_file, "%s", path);
	pthread_mutex_unlock(&sts_srv.lock);
}

static void t_web_identity(void **state)
{
	char tok[512];
	write_file("wi-token", "eyJhbGciOi.payload+/=.sig\n", tok, sizeof tok);
	sts_expect_token_file(tok);
	struct envb e;
	envb_base(&e, true);
	envb_add(&e, "AWS_WEB_IDENTITY_TOKEN_FILE=%s", tok);
	envb_add(&e, "AWS_ROLE_ARN=arn:aws:iam::123456789012:role/larder-test");
	envb_add(&e, "AWS_ROLE_SESSION_NAME=larder-unit");
	envb_add(&e, "AWS_ENDPOINT_URL_STS=http://127.0.0.1:%u", sts_srv.port);
	char err[512] = "";
	time_t before = time(NULL);
	struct creds_provider *p = create(&e, 60, err, sizeof err);
	assert_non_null(p);
	expect_creds(p, "web-identity", "ASIASTSKEY0001", "sts-secret-1", "sts-token-1");
	struct creds c;
	creds_provider_get(p, &c);
	assert_true(c.expiration >= before + 3600 && c.expiration <= time(NULL) + 3600);
	pthread_mutex_lock(&sts_srv.lock);
	assert_string_equal(sts_srv.last_session, "larder-unit");
	assert_string_equal(sts_srv.last_role, "arn:aws:iam::123456789012:role/larder-test");
	pthread_mutex_unlock(&sts_srv.lock);
	assert_true(p->thread_started); /* temporary credentials: refreshed */
	creds_provider_destroy(p);
	envb_free(&e);

	/* AWS_STS_ENDPOINT_URL also works; the session name gets a default. */
	envb_base(&e, true);
	envb_add(&e, "AWS_WEB_IDENTITY_TOKEN_FILE=%s", tok);
	envb_add(&e, "AWS_ROLE_ARN=arn:aws:iam::123456789012:role/larder-test");
	envb_add(&e, "AWS_STS_ENDPOINT_URL=http://127.0.0.1:%u/", sts_srv.port);
	p = create(&e, 60, err, sizeof err);
	assert_non_null(p);
	assert_string_equal(creds_provider_source(p), "web-identity");
	pthread_mutex_lock(&sts_srv.lock);
	assert_true(strncmp(sts_srv.last_session, "larder-", 7) == 0);
	pthread_mutex_unlock(&sts_srv.lock);
	creds_provider_destroy(p);
	envb_free(&e);
}

static void t_web_identity_errors(void **state)
{
	char tok[512], other[512];
	write_file("wi-token2", "the-real-token", tok, sizeof tok);
	write_file("wi-token3", "a-different-token", other, sizeof other);
	sts_expect_token_file(tok);
	struct envb e;
	envb_base(&e, true);
	envb_add(&e, "AWS_WEB_IDENTITY_TOKEN_FILE=%s", other);
	envb_add(&e, "AWS_ROLE_ARN=arn:aws:iam::123456789012:role/larder-test");
	envb_add(&e, "AWS_ENDPOINT_URL_STS=http://127.0.0.1:%u", sts_srv.port);
	char err[512] = "";
	assert_null(create(&e, 60, err, sizeof err));
	assert_non_null(strstr(err, "InvalidIdentityToken"));
	assert_null(strstr(err, "a-different-token")); /* the token itself is never echoed */
	assert_int_equal(atomic_load(&sts_srv.unauthorized), 1);
	envb_free(&e);

	/* Missing token file. */
	envb_base(&e, true);
	envb_add(&e, "AWS_WEB_IDENTITY_TOKEN_FILE=%s/missing-token", tmpdir);
	envb_add(&e, "AWS_ROLE_ARN=arn:aws:iam::123456789012:role/larder-test");
	assert_null(create(&e, 60, err, sizeof err));
	assert_non_null(strstr(err, "missing-token"));
	envb_free(&e);

	/* Only half configured. */
	envb_base(&e, true);
	envb_add(&e, "AWS_ROLE_ARN=arn:aws:iam::123456789012:role/larder-test");
	assert_null(create(&e, 60, err, sizeof err));
	assert_non_null(strstr(err, "AWS_WEB_IDENTITY_TOKEN_FILE"));
	envb_free(&e);
}

/* ---- 4. container -------------------------------------------------- */

static void ctr_expect_auth(const char *v)
{
	pthread_mutex_lock(&ctr_srv.lock);
	snprintf(ctr_srv.expect_auth, sizeof ctr_srv.expect_auth, "%s", v);
	pthread_mutex_unlock(&ctr_srv.lock);
}

static void t_container(void **state)
{
	ctr_expect_auth("Bearer abc123");
	struct envb e;
	envb_base(&e, true);
	envb_add(&e, "AWS_CONTAINER_CREDENTIALS_FULL_URI=http://127.0.0.1:%u/creds", ctr_srv.port);
	envb_add(&e, "AWS_CONTAINER_AUTHORIZATION_TOKEN=Bearer abc123");
	char err[512] = "";
	struct creds_provider *p = create(&e, 60, err, sizeof err);
	assert_non_null(p);
	expect_creds(p, "container", "ASIACTRKEY0001", "ctr-secret-1", "ctr-token-1");
	creds_provider_destroy(p);

	/* Wrong token: 401 is an error that stops the chain. */
	ctr_expect_auth("Bearer something-else");
	assert_null(create(&e, 60, err, sizeof err));
	assert_non_null(strstr(err, "401"));
	assert_null(strstr(err, "abc123"));
	assert_int_equal(atomic_load(&ctr_srv.unauthorized), 1);
	envb_free(&e);
}

static void t_container_token_file(void **state)
{
	char tf[512];
	write_file("ctr-token", "file-token-1\n", tf, sizeof tf);
	ctr_expect_auth("file-token-1");
	struct envb e;
	envb_base(&e, true);
	envb_add(&e, "AWS_CONTAINER_CREDENTIALS_FULL_URI=http://localhost:%u/creds", ctr_srv.port);
	envb_add(&e, "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE=%s", tf);
	envb_add(&e, "AWS_CONTAINER_AUTHORIZATION_TOKEN=loses-to-the-file");
	char err[512] = "";
	struct creds_provider *p = create(&e, 60, err, sizeof err);
	assert_non_null(p);
	expect_creds(p, "container", "ASIACTRKEY0001", "ctr-secret-1", "ctr-token-1");
	creds_provider_destroy(p);

	/* The file is read on every fetch. */
	write_file("ctr-token", "file-token-2", NULL, 0);
	ctr_expect_auth("file-token-2");
	p = create(&e, 60, err, sizeof err);
	expect_creds(p, "container", "ASIACTRKEY0002", "ctr-secret-2", "ctr-token-2");
	creds_provider_destroy(p);
	envb_free(&e);
}

static void t_container_uri_rules(void **state)
{
	const char *bad[] = { "http://192.0.2.1/creds", "ftp://127.0.0.1/creds", "not a url" };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		struct envb e;
		envb_base(&e, true);
		envb_add(&e, "AWS_CONTAINER_CREDENTIALS_FULL_URI=%s", bad[i]);
		char err[512] = "";
		assert_null(create(&e, 60, err, sizeof err));
		assert_non_null(strstr(err, "AWS_CONTAINER_CREDENTIALS_FULL_URI"));
		envb_free(&e);
	}
	char why[256];
	assert_true(container_uri_allowed("https://example.com/creds", why, sizeof why));
	assert_true(container_uri_allowed("http://169.254.170.23/v1/credentials", why, sizeof why));
	assert_true(container_uri_allowed("http://[::1]:8080/creds", why, sizeof why));
}

/* ---- 5. IMDSv2 ----------------------------------------------------- */

/* The stand-in itself must refuse v1-style reads, or the IMDS test would
 * prove nothing. */
static void t_imds_stand_in_enforces_v2(void **state)
{
	char url[256];
	struct buf b;
	long status;
	char why[256];
	snprintf(url, sizeof url, "http://127.0.0.1:%u" IMDS_CREDS_PATH, imds_srv.port);
	struct creds_http_call get = { .method = "GET", .url = url, .connect_ms = 1000, .total_ms = 2000 };
	assert_int_equal(creds_http_do(&get, &b, &status, why, sizeof why), 0);
	assert_int_equal(status, 401);
	buf_fini(&b);

	const char *bad_tok[] = { "X-aws-ec2-metadata-token: forged", NULL };
	get.headers = bad_tok;
	assert_int_equal(creds_http_do(&get, &b, &status, why, sizeof why), 0);
	assert_int_equal(status, 401);
	buf_fini(&b);

	snprintf(url, sizeof url, "http://127.0.0.1:%u/latest/api/token", imds_srv.port);
	struct creds_http_call put = { .method = "PUT", .url = url, .connect_ms = 1000, .total_ms = 2000 };
	assert_int_equal(creds_http_do(&put, &b, &status, why, sizeof why), 0);
	assert_int_equal(status, 400); /* no TTL header */
	buf_fini(&b);
}

static void t_imds(void **state)
{
	struct envb e;
	envb_base(&e, false);
	envb_add(&e, "AWS_EC2_METADATA_SERVICE_ENDPOINT=http://127.0.0.1:%u/", imds_srv.port);
	char err[512] = "";
	struct creds_provider *p = create(&e, 60, err, sizeof err);
	assert_non_null(p);
	expect_creds(p, "imds", "ASIAIMDSKEY0001", "imds-secret-1", "imds-token-1");
	assert_int_equal(atomic_load(&imds_srv.token_puts), 1);
	assert_int_equal(atomic_load(&imds_srv.unauthorized), 0);
	creds_provider_destroy(p);

	/* AWS_EC2_METADATA_DISABLED=true (any case) skips it. */
	envb_add(&e, "AWS_EC2_METADATA_DISABLED=TRUE");
	assert_null(create(&e, 60, err, sizeof err));
	assert_non_null(strstr(err, "[disabled]"));
	envb_free(&e);

	/* An endpoint that does not answer: fast failure, "nothing found". */
	envb_base(&e, false);
	envb_add(&e, "AWS_EC2_METADATA_SERVICE_ENDPOINT=http://127.0.0.1:1");
	int64_t t0 = mono_ms();
	assert_null(create(&e, 60, err, sizeof err));
	assert_true(mono_ms() - t0 < 2500);
	assert_non_null(strstr(err, "no AWS credentials found"));
	envb_free(&e);
}

/* ---- chain --------------------------------------------------------- */

static void t_chain_order(void **state)
{
	char cred[512], tok[512];
	write_file("credentials-chain", "[default]\naws_access_key_id=AKIAPROFILE\naws_secret_access_key=ps\n",
	           cred, sizeof cred);
	write_file("wi-chain", "chain-token", tok, sizeof tok);
	sts_expect_token_file(tok);
	ctr_expect_auth("");

	/* Everything configured, then take the winner away one by one. */
	const char *layers[][3] = {
		{ "AWS_ACCESS_KEY_ID=AKIAENV", "AWS_SECRET_ACCESS_KEY=es", NULL },
		{ "AWS_SHARED_CREDENTIALS_FILE=", NULL, NULL },
		{ "AWS_WEB_IDENTITY_TOKEN_FILE=", "AWS_ROLE_ARN=arn:aws:iam::123456789012:role/c", "AWS_ENDPOINT_URL_STS=" },
		{ "AWS_CONTAINER_CREDENTIALS_FULL_URI=", NULL, NULL },
		{ "AWS_EC2_METADATA_SERVICE_ENDPOINT=", NULL, NULL },
	};
	const char *expect_src[] = { "env", "profile", "web-identity", "container", "imds" };
	const char *expect_key[] = { "AKIAENV", "AKIAPROFILE", "ASIASTSKEY", "ASIACTRKEY", "ASIAIMDSKEY" };
	for (size_t skip = 0; skip < 5; skip++) {
		struct envb e;
		envb_base(&e, false);
		for (size_t l = skip; l < 5; l++) {
			for (int k = 0; k < 3 && layers[l][k]; k++) {
				const char *v = layers[l][k];
				if (strcmp(v, "AWS_SHARED_CREDENTIALS_FILE=") == 0)
					envb_add(&e, "%s%s", v, cred);
				else if (strcmp(v, "AWS_WEB_IDENTITY_TOKEN_FILE=") == 0)
					envb_add(&e, "%s%s", v, tok);
				else if (strcmp(v, "AWS_ENDPOINT_URL_STS=") == 0)
					envb_add(&e, "%shttp://127.0.0.1:%u", v, sts_srv.port);
				else if (strcmp(v, "AWS_CONTAINER_CREDENTIALS_FULL_URI=") == 0)
					envb_add(&e, "%shttp://127.0.0.1:%u/creds", v, ctr_srv.port);
				else if (strcmp(v, "AWS_EC2_METADATA_SERVICE_ENDPOINT=") == 0)
					envb_add(&e, "%shttp://127.0.0.1:%u", v, imds_srv.port);
				else
					envb_add(&e, "%s", v);
			}
		}
		char err[512] = "";
		struct creds_provider *p = create(&e, 60, err, sizeof err);
		assert_non_null(p);
		assert_string_equal(creds_provider_source(p), expect_src[skip]);
		struct creds c;
		creds_provider_get(p, &c);
		assert_true(strncmp(c.access_key, expect_key[skip], strlen(expect_key[skip])) == 0);
		creds_provider_destroy(p);
		envb_free(&e);
	}
	/* The sources behind the winner were never asked. */
	assert_int_equal(atomic_load(&sts_srv.issued), 1);
	assert_int_equal(atomic_load(&ctr_srv.issued), 1);
	assert_int_equal(atomic_load(&imds_srv.issued), 1);
}

static void t_nothing_configured(void **state)
{
	struct envb e;
	envb_base(&e, true);
	char err[512] = "";
	assert_null(create(&e, 60, err, sizeof err));
	assert_non_null(strstr(err, "no AWS credentials found"));
	envb_free(&e);
	/* A completely empty environment (no HOME) is fine too. */
	const char *empty[] = { "AWS_EC2_METADATA_DISABLED=true", NULL };
	assert_null(creds_provider_create(empty, NULL, 60, err, sizeof err));
	assert_non_null(strstr(err, "no AWS credentials found"));
}

/* creds_check: what the chain refuses without the network (--check). */
static void t_check_offline(void **state)
{
	(void)state;
	char err[512], tok[512];
	struct envb e;
	envb_base(&e, true);
	envb_add(&e, "AWS_ACCESS_KEY_ID=AKIAONLY");
	assert_int_equal(creds_check((const char *const *)e.v, "us-east-1", err, sizeof err), -1);
	assert_non_null(strstr(err, "AWS_SECRET_ACCESS_KEY"));
	envb_free(&e);

	envb_base(&e, true);
	envb_add(&e, "AWS_PROFILE=nosuch");
	assert_int_equal(creds_check((const char *const *)e.v, "us-east-1", err, sizeof err), -1);
	assert_non_null(strstr(err, "nosuch"));
	envb_free(&e);

	envb_base(&e, true);
	envb_add(&e, "AWS_ROLE_ARN=arn:aws:iam::123456789012:role/r");
	envb_add(&e, "AWS_WEB_IDENTITY_TOKEN_FILE=%s/no-such-token", tmpdir);
	assert_int_equal(creds_check((const char *const *)e.v, "us-east-1", err, sizeof err), -1);
	assert_non_null(strstr(err, "AWS_WEB_IDENTITY_TOKEN_FILE"));
	envb_free(&e);

	/* A token that is there: STS is not asked (its endpoint is unreachable). */
	write_file("check-token", "a.b.c\n", tok, sizeof tok);
	envb_base(&e, true);
	envb_add(&e, "AWS_ROLE_ARN=arn:aws:iam::123456789012:role/r");
	envb_add(&e, "AWS_WEB_IDENTITY_TOKEN_FILE=%s", tok);
	envb_add(&e, "AWS_ENDPOINT_URL_STS=http://127.0.0.1:1");
	assert_int_equal(creds_check((const char *const *)e.v, "us-east-1", err, sizeof err), 0);
	envb_free(&e);

	envb_base(&e, true); /* nothing, not even IMDS */
	assert_int_equal(creds_check((const char *const *)e.v, "us-east-1", err, sizeof err), -1);
	assert_non_null(strstr(err, "no AWS credentials found"));
	envb_free(&e);
	envb_base(&e, false); /* IMDS may answer: not asked */
	envb_add(&e, "AWS_EC2_METADATA_SERVICE_ENDPOINT=http://127.0.0.1:1");
	assert_int_equal(creds_check((const char *const *)e.v, "us-east-1", err, sizeof err), 0);
	envb_free(&e);
}

/* ---- refresh ------------------------------------------------------- */

#define REFRESH_MARGIN 1

/* Polls get every 10 ms until the key id differs from first or the time is
 * up; every copy along the way must be complete. */
static bool poll_for_new_key(struct creds_provider *p, const char *first, int timeout_ms, struct creds *last)
{
	int64_t end = mono_ms() + timeout_ms;
	while (mono_ms() < end) {
		creds_provider_get(p, last);
		assert_true(last->access_key[0] != '\0');
		assert_true(last->secret_key[0] != '\0');
		assert_true(last->session_token[0] != '\0');
		assert_true(last->expiration != 0);
		if (strcmp(last->access_key, first) != 0)
			return true;
		struct timespec ts = { 0, 10 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
	return false;
}

/* A provider reading the IMDS stand-in, whose credentials are due for a
 * refresh due_s seconds from now (they expire at now + margin + due_s). */
static struct creds_provider *imds_provider(struct envb *e, int due_s)
{
	atomic_store(&imds_srv.expire_in, REFRESH_MARGIN + due_s);
	envb_base(e, false);
	envb_add(e, "AWS_EC2_METADATA_SERVICE_ENDPOINT=http://127.0.0.1:%u", imds_srv.port);
	char err[512] = "";
	struct creds_provider *p = create(e, REFRESH_MARGIN, err, sizeof err);
	assert_non_null(p);
	return p;
}

static void t_refresh_imds(void **state)
{
	/* Each set expires two seconds after now + margin: refreshed in ~2 s. */
	struct envb e;
	struct creds_provider *p = imds_provider(&e, 2);
	assert_int_equal(creds_provider_refreshes(p), 0);
	struct creds c;
	creds_provider_get(p, &c);
	assert_string_equal(c.access_key, "ASIAIMDSKEY0001");
	assert_true(poll_for_new_key(p, "ASIAIMDSKEY0001", 6000, &c));
	assert_string_equal(c.access_key, "ASIAIMDSKEY0002");
	assert_string_equal(c.secret_key, "imds-secret-2");
	assert_string_equal(c.session_token, "imds-token-2");
	assert_true(creds_provider_refreshes(p) >= 1);
	/* A fresh IMDSv2 session token for the refresh, and never a 401. */
	assert_true(atomic_load(&imds_srv.token_puts) >= 2);
	assert_int_equal(atomic_load(&imds_srv.unauthorized), 0);
	creds_provider_destroy(p);
	envb_free(&e);
}

static void t_refresh_web_identity_rotating(void **state)
{
	atomic_store(&sts_srv.expire_in, REFRESH_MARGIN + 2);
	char tok[512];
	write_file("wi-rotating", "token-generation-1", tok, sizeof tok);
	sts_expect_token_file(tok);
	struct envb e;
	envb_base(&e, true);
	envb_add(&e, "AWS_WEB_IDENTITY_TOKEN_FILE=%s", tok);
	envb_add(&e, "AWS_ROLE_ARN=arn:aws:iam::123456789012:role/larder-test");
	envb_add(&e, "AWS_ENDPOINT_URL_STS=http://127.0.0.1:%u", sts_srv.port);
	char err[512] = "";
	struct creds_provider *p = create(&e, REFRESH_MARGIN, err, sizeof err);
	assert_non_null(p);
	/* The token rotates; the stand-in accepts only the file's current text. */
	write_file("wi-rotating", "token-generation-2", NULL, 0);
	struct creds c;
	assert_true(poll_for_new_key(p, "ASIASTSKEY0001", 6000, &c));
	assert_string_equal(c.access_key, "ASIASTSKEY0002");
	assert_int_equal(atomic_load(&sts_srv.unauthorized), 0);
	assert_true(creds_provider_refreshes(p) >= 1);
	creds_provider_destroy(p);
	envb_free(&e);
}

static void t_refresh_after_clock_step(void **state)
{
	/* Credentials due for a refresh in 12 s; then the wall clock steps 12 s
	 * forward (it had run behind): by the time of day they are due now,
	 * and the refresh must not wait out the 12 s counted before the step. */
	struct envb e;
	struct creds_provider *p = imds_provider(&e, 12);
	struct timespec ts = { 0, 300 * 1000 * 1000 };
	nanosleep(&ts, NULL);
	assert_int_equal(creds_provider_refreshes(p), 0);
	atomic_store(&clock_step_s, 12);
	struct creds c;
	assert_true(poll_for_new_key(p, "ASIAIMDSKEY0001", 4000, &c));
	assert_true(creds_provider_refreshes(p) >= 1);
	creds_provider_destroy(p);
	envb_free(&e);
}

static void t_refresh_retry(void **state)
{
	/* Credential request 2 (the first refresh) fails; the retry after the
	 * 1 s backoff succeeds. */
	atomic_store(&ctr_srv.expire_in, REFRESH_MARGIN + 2);
	atomic_store(&ctr_srv.fail_from, 2);
	atomic_store(&ctr_srv.fail_count, 1);
	ctr_expect_auth("");
	struct envb e;
	envb_base(&e, true);
	envb_add(&e, "AWS_CONTAINER_CREDENTIALS_FULL_URI=http://127.0.0.1:%u/creds", ctr_srv.port);
	char err[512] = "";
	struct creds_provider *p = create(&e, REFRESH_MARGIN, err, sizeof err);
	assert_non_null(p);

	/* Until the failed attempt has happened, and after it, the first set
	 * stays in use. */
	struct creds c;
	int64_t end = mono_ms() + 6000;
	while (atomic_load(&ctr_srv.cred_reqs) < 2 && mono_ms() < end) {
		creds_provider_get(p, &c);
		assert_string_equal(c.access_key, "ASIACTRKEY0001");
		struct timespec ts = { 0, 10 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
	assert_int_equal(atomic_load(&ctr_srv.cred_reqs), 2);
	assert_int_equal(creds_provider_refreshes(p), 0);
	creds_provider_get(p, &c);
	assert_string_equal(c.access_key, "ASIACTRKEY0001");
	assert_string_equal(c.secret_key, "ctr-secret-1");

	assert_true(poll_for_new_key(p, "ASIACTRKEY0001", 4000, &c));
	/* Issued counter only counts successes: the retry handed out set 2. */
	assert_string_equal(c.access_key, "ASIACTRKEY0002");
	assert_true(atomic_load(&ctr_srv.cred_reqs) >= 3);
	assert_int_equal(creds_provider_refreshes(p), 1);
	creds_provider_destroy(p);
	envb_free(&e);
}

static void t_destroy_is_prompt(void **state)
{
	/* Long-lived credentials: the thread sleeps for an hour. */
	atomic_store(&ctr_srv.expire_in, 3600);
	ctr_expect_auth("");
	struct envb e;
	envb_base(&e, true);
	envb_add(&e, "AWS_CONTAINER_CREDENTIALS_FULL_URI=http://127.0.0.1:%u/creds", ctr_srv.port);
	char err[512] = "";
	struct creds_provider *p = create(&e, 60, err, sizeof err);
	assert_non_null(p);
	assert_true(p->thread_started);
	int64_t t0 = mono_ms();
	creds_provider_destroy(p);
	assert_true(mono_ms() - t0 < 500);

	/* Expired on arrival: the thread retries on the backoff schedule
	 * rather than in a tight loop, and still stops at once. */
	atomic_store(&ctr_srv.expire_in, -10);
	p = create(&e, 60, err, sizeof err);
	assert_non_null(p);
	struct timespec ts = { 1, 500 * 1000 * 1000 };
	nanosleep(&ts, NULL);
	/* t=0 create, t=1 first retry (1 s), next at t=3: at most 2 requests. */
	assert_true(atomic_load(&ctr_srv.cred_reqs) <= 3);
	t0 = mono_ms();
	creds_provider_destroy(p);
	assert_true(mono_ms() - t0 < 500);
	envb_free(&e);
}

/* ---- secrets stay out of the log ----------------------------------- */

static void t_no_secrets_logged(void **state)
{
	char logpath[400];
	snprintf(logpath, sizeof logpath, "%s/stderr.log", tmpdir);
	fflush(stderr);
	int saved = dup(2);
	int fd = open(logpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(saved >= 0 && fd >= 0);
	dup2(fd, 2);
	close(fd);
	log_set_level(LOG_DEBUG);

	char tok[512], cred[512];
	write_file("wi-log", "SECRET-WEB-IDENTITY-TOKEN", tok, sizeof tok);
	write_file("credentials-log", "[default]\naws_access_key_id=AKIALOGGEDKEYID1\n"
	           "aws_secret_access_key=SECRET-PROFILE-KEY\naws_session_token=SECRET-PROFILE-TOKEN\n",
	           cred, sizeof cred);
	sts_expect_token_file(tok);
	ctr_expect_auth("SECRET-CONTAINER-AUTH");
	atomic_store(&ctr_srv.expire_in, REFRESH_MARGIN + 1);
	atomic_store(&ctr_srv.fail_from, 2);
	atomic_store(&ctr_srv.fail_count, 1);

	struct envb e;
	char err[512];
	envb_base(&e, true);
	envb_add(&e, "AWS_ACCESS_KEY_ID=AKIAENVKEYID0001");
	envb_add(&e, "AWS_SECRET_ACCESS_KEY=SECRET-ENV-KEY");
	envb_add(&e, "AWS_SESSION_TOKEN=SECRET-ENV-TOKEN");
	struct creds_provider *p = create(&e, 60, err, sizeof err);
	assert_non_null(p);
	creds_provider_destroy(p);
	envb_free(&e);

	envb_base(&e, true);
	envb_add(&e, "AWS_SHARED_CREDENTIALS_FILE=%s", cred);
	p = create(&e, 60, err, sizeof err);
	assert_non_null(p);
	creds_provider_destroy(p);
	envb_free(&e);

	envb_base(&e, true);
	envb_add(&e, "AWS_WEB_IDENTITY_TOKEN_FILE=%s", tok);
	envb_add(&e, "AWS_ROLE_ARN=arn:aws:iam::123456789012:role/larder-test");
	envb_add(&e, "AWS_ENDPOINT_URL_STS=http://127.0.0.1:%u", sts_srv.port);
	p = create(&e, 60, err, sizeof err);
	assert_non_null(p);
	creds_provider_destroy(p);
	envb_free(&e);

	/* Container with a failing refresh in between (warn lines). */
	envb_base(&e, true);
	envb_add(&e, "AWS_CONTAINER_CREDENTIALS_FULL_URI=http://127.0.0.1:%u/creds", ctr_srv.port);
	envb_add(&e, "AWS_CONTAINER_AUTHORIZATION_TOKEN=SECRET-CONTAINER-AUTH");
	p = create(&e, REFRESH_MARGIN, err, sizeof err);
	assert_non_null(p);
	struct creds c;
	assert_true(poll_for_new_key(p, "ASIACTRKEY0001", 5000, &c));
	creds_provider_destroy(p);
	envb_free(&e);

	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	log_set_level(LOG_ERROR);

	struct buf logtext;
	assert_int_equal(creds_read_file(logpath, 1 << 20, &logtext), 0);
	assert_non_null(strstr(logtext.p, "[creds]")); /* something was logged */
	assert_non_null(strstr(logtext.p, "refresh from container failed"));
	const char *secrets[] = {
		"SECRET-", "ctr-secret", "ctr-token", "sts-secret", "sts-token",
		"AKIAENVKEYID0001", "AKIALOGGEDKEYID1", "ASIACTRKEY0001", /* full key ids: only masked */
	};
	for (size_t i = 0; i < sizeof secrets / sizeof secrets[0]; i++) {
		if (strstr(logtext.p, secrets[i]))
			fail_msg("log contains \"%s\":\n%s", secrets[i], logtext.p);
	}
	buf_fini(&logtext);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(t_iso8601),
		cmocka_unit_test(t_profile_parse),
		cmocka_unit_test(t_sts_parse),
		cmocka_unit_test(t_json_parse),
		cmocka_unit_test_setup(t_env, test_setup),
		cmocka_unit_test_setup(t_env_partial, test_setup),
		cmocka_unit_test_setup(t_profile_default, test_setup),
		cmocka_unit_test_setup(t_profile_config_file, test_setup),
		cmocka_unit_test_setup(t_profile_home, test_setup),
		cmocka_unit_test_setup(t_profile_unsupported, test_setup),
		cmocka_unit_test_setup(t_web_identity, test_setup),
		cmocka_unit_test_setup(t_web_identity_errors, test_setup),
		cmocka_unit_test_setup(t_container, test_setup),
		cmocka_unit_test_setup(t_container_token_file, test_setup),
		cmocka_unit_test_setup(t_container_uri_rules, test_setup),
		cmocka_unit_test_setup(t_imds_stand_in_enforces_v2, test_setup),
		cmocka_unit_test_setup(t_imds, test_setup),
		cmocka_unit_test_setup(t_chain_order, test_setup),
		cmocka_unit_test_setup(t_nothing_configured, test_setup),
		cmocka_unit_test_setup(t_check_offline, test_setup),
		cmocka_unit_test_setup(t_refresh_imds, test_setup),
		cmocka_unit_test_setup(t_refresh_web_identity_rotating, test_setup),
		cmocka_unit_test_setup(t_refresh_retry, test_setup),
		cmocka_unit_test_setup(t_refresh_after_clock_step, test_setup),
		cmocka_unit_test_setup(t_destroy_is_prompt, test_setup),
		cmocka_unit_test_setup(t_no_secrets_logged, test_setup),
	};
	curl_global_init(CURL_GLOBAL_DEFAULT);
	int rc = cmocka_run_group_tests(tests, group_setup, group_teardown);
	curl_global_cleanup();
	return rc;
}

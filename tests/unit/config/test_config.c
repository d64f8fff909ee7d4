/*
 * test_config.c - config/config.c: defaults, the INI file, environment
 * overrides, every validation message, sizes, and the example larder.conf
 * (its path is argv[1]).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "config/config.h"

static const char *example_path;

static struct cfg *load_ok(const char *text, const char *const *env)
{
	char err[512] = "";
	struct cfg *c = cfg_load_text(text, env, err, sizeof err);
	if (!c)
		fail_msg("unexpected error: %s", err);
	return c;
}

/* Loading must fail, and the message must contain every string in want. */
static void expect_error(const char *text, const char *const *env, const char *const *want)
{
	char err[512] = "";
	struct cfg *c = cfg_load_text(text, env, err, sizeof err);
	if (c) {
		cfg_free(c);
		fail_msg("loaded, expected an error containing \"%s\"\n--- text:\n%s", want[0],
		         text ? text : "(none)");
	}
	for (; *want; want++)
		if (!strstr(err, *want))
			fail_msg("error \"%s\" lacks \"%s\"", err, *want);
}

/* ---- defaults and the file ------------------------------------------------ */

static void test_defaults(void **state)
{
	(void)state;
	struct cfg *c = load_ok(NULL, NULL);
	assert_string_equal(c->listen_host, "127.0.0.1");
	assert_int_equal(c->listen_port, 8080);
	assert_int_equal(c->workers, 0);
	assert_null(c->base_domain);
	assert_int_equal(c->max_connections, 4096);
	assert_int_equal(c->max_header_bytes, 16384);
	assert_int_equal(c->client_timeout_s, 60);
	assert_int_equal(c->shutdown_grace_s, 30);
	assert_int_equal(c->max_skew_s, 900);
	assert_string_equal(c->log_level, "info");
	assert_string_equal(c->access_log, "-");
	assert_null(c->upstream_url);
	assert_string_equal(c->upstream_region, "us-east-1");
	assert_int_equal(c->addressing, CFG_ADDR_AUTO);
	assert_true(c->upstream_tls_verify);
	assert_null(c->upstream_ca_file);
	assert_int_equal(c->upstream_timeout_s, 30);
	assert_int_equal(c->upstream_min_speed, 16 * 1024);
	assert_int_equal(c->creds_refresh_margin_s, 300);
	assert_int_equal(c->n_keys, 0);
	assert_int_equal(c->anonymous.n_grants, 0);
	assert_int_equal(c->n_bucket_regions, 0);
	assert_null(c->source);
	assert_null(cfg_find_key(c, "AK"));
	assert_null(cfg_bucket_region(c, "bucket"));
	cfg_free(c);

	/* An empty file and one of comments only change nothing. */
	c = load_ok("", NULL);
	assert_int_equal(c->listen_port, 8080);
	cfg_free(c);
	c = load_ok("# nothing\n; here\n\n", NULL);
	assert_int_equal(c->listen_port, 8080);
	cfg_free(c);
	cfg_free(NULL);
}

static const char full_text[] =
	"\xEF\xBB\xBF# every setting\n"
	"[server]\n"
	"listen = 0.0.0.0:9000\n"
	"workers = 8\n"
	"base_domain = S3.Example.com\n"
	"max_connections = 100\n"
	"max_header_size = 32KiB ; inline comment\n"
	"client_timeout = 5\n"
	"shutdown_grace = 0\n"
	"max_skew = 300\n"
	"log_level = DEBUG\n"
	"access_log = off\n"
	"\n"
	"[upstream]\n"
	"url = https://minio.local:9000/\n"
	"region = eu-central-1\n"
	"addressing = path\n"
	"tls_verify = no\n"
	"ca_file = /dev/null\n"
	"timeout = 10\n"
	"min_speed = 64KiB\n"
	"creds_refresh_margin = 60\n"
	"\n"
	"[key AKREAD]\n"
	"secret = s3cr3t/with+chars=\n"
	"access = read-only\n"
	"buckets = data-bucket/data, data-bucket/models/,\n"
	"    other.bucket/ ,\n"
	"\tthird-bucket\n"
	"\n"
	"[key AKWRITE]\n"
	"secret = w\n"
	"access = read-write\n"
	"buckets = *\n"
	"\n"
	"[anonymous]\n"
	"buckets = public-data/pub\n"
	"\n"
	"[bucket eu-bucket]\n"
	"region = eu-west-1\n";

static void test_file(void **state)
{
	(void)state;
	struct cfg *c = load_ok(full_text, NULL);
	assert_string_equal(c->listen_host, "0.0.0.0");
	assert_int_equal(c->listen_port, 9000);
	assert_int_equal(c->workers, 8);
	assert_string_equal(c->base_domain, "s3.example.com");
	assert_int_equal(c->max_connections, 100);
	assert_int_equal(c->max_header_bytes, 32768);
	assert_int_equal(c->client_timeout_s, 5);
	assert_int_equal(c->shutdown_grace_s, 0);
	assert_int_equal(c->max_skew_s, 300);
	assert_string_equal(c->log_level, "debug");
	assert_string_equal(c->access_log, "off");
	assert_string_equal(c->upstream_url, "https://minio.local:9000");
	assert_string_equal(c->upstream_region, "eu-central-1");
	assert_int_equal(c->addressing, CFG_ADDR_PATH);
	assert_false(c->upstream_tls_verify);
	assert_string_equal(c->upstream_ca_file, "/dev/null");
	assert_int_equal(c->upstream_timeout_s, 10);
	assert_int_equal(c->upstream_min_speed, 64 * 1024);
	assert_int_equal(c->creds_refresh_margin_s, 60);

	assert_int_equal(c->n_keys, 2);
	const struct client_key *k = cfg_find_key(c, "AKREAD");
	assert_non_null(k);
	assert_string_equal(k->secret, "s3cr3t/with+chars=");
	assert_false(k->write);
	assert_int_equal(k->n_grants, 4);
	assert_string_equal(k->grants[0].bucket, "data-bucket");
	assert_string_equal(k->grants[0].prefix, "data/");  /* "data" means data/ */
	assert_string_equal(k->grants[1].bucket, "data-bucket");
	assert_string_equal(k->grants[1].prefix, "models/");
	assert_string_equal(k->grants[2].bucket, "other.bucket");
	assert_string_equal(k->grants[2].prefix, "");       /* "bucket/" = whole bucket */
	assert_string_equal(k->grants[3].bucket, "third-bucket");
	assert_string_equal(k->grants[3].prefix, "");

	k = cfg_find_key(c, "AKWRITE");
	assert_non_null(k);
	assert_true(k->write);
	assert_int_equal(k->n_grants, 1);
	assert_string_equal(k->grants[0].bucket, "*");
	assert_string_equal(k->grants[0].prefix, "");
	assert_null(cfg_find_key(c, "akwrite"));

	assert_false(c->anonymous.write);
	assert_int_equal(c->anonymous.n_grants, 1);
	assert_string_equal(c->anonymous.grants[0].bucket, "public-data");
	assert_string_equal(c->anonymous.grants[0].prefix, "pub/");

	assert_string_equal(cfg_bucket_region(c, "eu-bucket"), "eu-west-1");
	assert_null(cfg_bucket_region(c, "data-bucket"));
	assert_null(c->source);
	cfg_free(c);
}

static void test_listen_forms(void **state)
{
	(void)state;
	struct cfg *c = load_ok("[server]\nlisten = [::]:443\n", NULL);
	assert_string_equal(c->listen_host, "::");
	assert_int_equal(c->listen_port, 443);
	cfg_free(c);
	c = load_ok("[server]\nlisten = localhost:65535\n", NULL);
	assert_string_equal(c->listen_host, "localhost");
	assert_int_equal(c->listen_port, 65535);
	cfg_free(c);
	/* Section and setting names are not case sensitive; "name: value" too. */
	c = load_ok("[SERVER]\nListen: 10.0.0.1:1\n", NULL);
	assert_string_equal(c->listen_host, "10.0.0.1");
	assert_int_equal(c->listen_port, 1);
	cfg_free(c);
}

/* ---- environment ---------------------------------------------------------- */

static void test_env_overrides_file(void **state)
{
	(void)state;
	const char *env[] = {
		"LARDER_LISTEN=0.0.0.0:7000",
		"LARDER_WORKERS= 3 ",
		"LARDER_BASE_DOMAIN=larder.internal",
		"LARDER_MAX_CONNECTIONS=50",
		"LARDER_MAX_HEADER_SIZE=8k",
		"LARDER_CLIENT_TIMEOUT=7",
		"LARDER_SHUTDOWN_GRACE=9",
		"LARDER_MAX_SKEW=60",
		"LARDER_LOG_LEVEL=warn",
		"LARDER_ACCESS_LOG=access.log",
		"LARDER_UPSTREAM_URL=http://127.0.0.1:9000",
		"LARDER_UPSTREAM_REGION=ap-south-1",
		"LARDER_UPSTREAM_ADDRESSING=virtual",
		"LARDER_UPSTREAM_TLS_VERIFY=true",
		"LARDER_UPSTREAM_CA_FILE=/dev/zero",
		"LARDER_UPSTREAM_TIMEOUT=11",
		"LARDER_CREDS_REFRESH_MARGIN=120",
		"LARDER_CLIENT_KEY=AKENV",
		"LARDER_CLIENT_SECRET=envsecret",
		"LARDER_ANONYMOUS=open-bucket, open2/x",
		"AWS_REGION=sa-east-1",
		"UNRELATED=1",
		NULL,
	};
	struct cfg *c = load_ok(full_text, env);
	assert_string_equal(c->listen_host, "0.0.0.0");
	assert_int_equal(c->listen_port, 7000);
	assert_int_equal(c->workers, 3);
	assert_string_equal(c->base_domain, "larder.internal");
	assert_int_equal(c->max_connections, 50);
	assert_int_equal(c->max_header_bytes, 8000);
	assert_int_equal(c->client_timeout_s, 7);
	assert_int_equal(c->shutdown_grace_s, 9);
	assert_int_equal(c->max_skew_s, 60);
	assert_string_equal(c->log_level, "warn");
	assert_string_equal(c->access_log, "access.log");
	assert_string_equal(c->upstream_url, "http://127.0.0.1:9000");
	assert_string_equal(c->upstream_region, "ap-south-1");
	assert_int_equal(c->addressing, CFG_ADDR_VIRTUAL);
	assert_true(c->upstream_tls_verify);
	assert_string_equal(c->upstream_ca_file, "/dev/zero");
	assert_int_equal(c->upstream_timeout_s, 11);
	assert_int_equal(c->creds_refresh_margin_s, 120);

	assert_int_equal(c->n_keys, 3);
	const struct client_key *k = cfg_find_key(c, "AKENV");
	assert_non_null(k);
	assert_string_equal(k->secret, "envsecret");
	assert_true(k->write);
	assert_int_equal(k->n_grants, 1);
	assert_string_equal(k->grants[0].bucket, "*");
	assert_string_equal(k->grants[0].prefix, "");
	assert_non_null(cfg_find_key(c, "AKREAD"));

	/* LARDER_ANONYMOUS replaces [anonymous], read-only. */
	assert_false(c->anonymous.write);
	assert_int_equal(c->anonymous.n_grants, 2);
	assert_string_equal(c->anonymous.grants[0].bucket, "open-bucket");
	assert_string_equal(c->anonymous.grants[0].prefix, "");
	assert_string_equal(c->anonymous.grants[1].bucket, "open2");
	assert_string_equal(c->anonymous.grants[1].prefix, "x/");
	/* Each file setting the environment replaced is said (logged at start):
	 * a mounted file's listen was ignored without a word in the container,
	 * whose image sets LARDER_LISTEN. */
	assert_non_null(c->overridden);
	assert_non_null(strstr(c->overridden, "LARDER_LISTEN (the environment) overrides "
	                                      "[server] listen (line 3)\n"));
	assert_non_null(strstr(c->overridden, "LARDER_WORKERS (the environment) overrides "
	                                      "[server] workers (line "));
	cfg_free(c);
	c = load_ok(full_text, NULL);
	assert_null(c->overridden);
	cfg_free(c);
}

static void test_env_without_file(void **state)
{
	(void)state;
	const char *env[] = { "LARDER_LISTEN=[::1]:8443", "LARDER_ANONYMOUS=*", NULL };
	struct cfg *c = load_ok(NULL, env);
	assert_string_equal(c->listen_host, "::1");
	assert_int_equal(c->listen_port, 8443);
	assert_int_equal(c->anonymous.n_grants, 1);
	assert_string_equal(c->anonymous.grants[0].bucket, "*");
	cfg_free(c);
}

static void test_env_empty_is_unset(void **state)
{
	(void)state;
	const char *env[] = { "LARDER_LISTEN=", "LARDER_UPSTREAM_URL=", "LARDER_CLIENT_KEY=",
	                      "LARDER_WORKERS=  ", NULL };
	struct cfg *c = load_ok("[server]\nlisten = 1.2.3.4:5\n", env);
	assert_string_equal(c->listen_host, "1.2.3.4");
	assert_int_equal(c->listen_port, 5);
	assert_null(c->upstream_url);
	assert_int_equal(c->n_keys, 0);
	cfg_free(c);
}

static void test_aws_region(void **state)
{
	(void)state;
	const char *aws[] = { "AWS_REGION=eu-north-1", "AWS_DEFAULT_REGION=ca-central-1", NULL };
	const char *aws_default[] = { "AWS_DEFAULT_REGION=ca-central-1", NULL };
	const char *both[] = { "AWS_REGION=eu-north-1", "LARDER_UPSTREAM_REGION=me-south-1", NULL };

	struct cfg *c = load_ok(NULL, aws);
	assert_string_equal(c->upstream_region, "eu-north-1");
	cfg_free(c);
	c = load_ok(NULL, aws_default);
	assert_string_equal(c->upstream_region, "ca-central-1");
	cfg_free(c);
	c = load_ok(NULL, both);
	assert_string_equal(c->upstream_region, "me-south-1");
	cfg_free(c);
	/* The file's region wins over AWS_REGION ... */
	c = load_ok("[upstream]\nregion = us-west-2\n", aws);
	assert_string_equal(c->upstream_region, "us-west-2");
	cfg_free(c);
	/* ... but not over LARDER_UPSTREAM_REGION. */
	c = load_ok("[upstream]\nregion = us-west-2\n", both);
	assert_string_equal(c->upstream_region, "me-south-1");
	cfg_free(c);
	/* A bad AWS_REGION is reported under its own name. */
	const char *bad[] = { "AWS_REGION=eu west", NULL };
	expect_error(NULL, bad, (const char *[]){ "AWS_REGION:", "eu west", NULL });
}

/* ---- validation ----------------------------------------------------------- */

static void test_exact_messages(void **state)
{
	(void)state;
	char err[256];
	const char *env[] = { "LARDER_LISTEN=127.0.0.1:99999", NULL };
	assert_null(cfg_load_text(NULL, env, err, sizeof err));
	assert_string_equal(err, "LARDER_LISTEN: port \"99999\" is out of range (1-65535)");

	assert_null(cfg_load_text("[key AK1]\nsecret = s\naccess = rw\nbuckets = b1x\n", NULL,
	                          err, sizeof err));
	assert_string_equal(err, "line 3: [key AK1] access: expected read-only or read-write, "
	                    "got \"rw\"");

	assert_null(cfg_load_text("\n[key AK1]\naccess = read-only\nbuckets = abc\n", NULL,
	                          err, sizeof err));
	assert_string_equal(err, "line 2: [key AK1]: secret is missing");

	/* A tiny or missing error buffer is fine. */
	assert_null(cfg_load_text(NULL, env, err, 4));
	assert_string_equal(err, "LAR");
	assert_null(cfg_load_text(NULL, env, NULL, 0));
}

struct bad {
	const char *text;
	const char *env[3];   /* NULL-terminated: at most 2 */
	const char *want[4];  /* NULL-terminated: at most 3 */
};

static const struct bad bad_cases[] = {
	/* sections and setting names */
	{ "[sever]\n", { 0 }, { "line 1:", "unknown section [sever]" } },
	/* what the start would have found wrong */
	{ NULL, { "LARDER_RAM_CACHE_SIZE=16", NULL }, { "LARDER_RAM_CACHE_SIZE: 16 bytes",
	  "write 16GiB" } },
	{ "[cache]\ndisk_size = 100\n", { 0 }, { "LARDER_DISK_CACHE_SIZE: 100 bytes" } },
	{ NULL, { "LARDER_UPSTREAM_CA_FILE=/nonexistent/ca.pem", NULL },
	  { "LARDER_UPSTREAM_CA_FILE: cannot read \"/nonexistent/ca.pem\"" } },
	{ NULL, { "LARDER_LISTEN=127.0.0.1:9090", NULL }, { "LARDER_ADMIN_LISTEN: 127.0.0.1:9090 is "
	  "LARDER_LISTEN too" } },
	{ NULL, { "LARDER_LISTEN=foo!bar:8080", NULL }, { "LARDER_LISTEN: invalid host" } },
	/* the examples' public placeholders */
	{ "[key AK1]\nsecret = change-me-reader-secret-0123456789abcdef\naccess = read-only\n"
	  "buckets = bkt\n", { 0 }, { "[key AK1] secret: it starts with \"change-me\", an "
	  "example's placeholder" } },
	{ NULL, { "LARDER_ADMIN_TOKEN=Change-Me-admin-token-0123456789abcdef", NULL },
	  { "LARDER_ADMIN_TOKEN: ", "placeholder" } },
	{ NULL, { "LARDER_CLIENT_KEY=AK1", "LARDER_CLIENT_SECRET=change-me-client-secret-0123" },
	  { "[key AK1] secret" } },
	/* " #" is no comment after a value: its words were grants */
	{ "[key AK1]\nsecret = s\naccess = read-write\nbuckets = scratch/tmp/   # was: scratch, "
	  "checkpoints\n", { 0 }, { "line 4:", "a comment after a value starts with \" ;\"" } },
	{ "[upstream]\nregion = us-east-1\t# here\n", { 0 }, { "line 2:", "holds \" #\"" } },
	{ "[clustr]\n", { 0 }, { "unknown section [clustr]", "[admin], [cluster], [key" } },
	{ "[server]\nlisten_addr = 1.2.3.4:5\n", { 0 }, { "line 2:", "unknown setting \"listen_addr\"" } },
	{ "[upstream]\nurll = http://x\n", { 0 }, { "[upstream]", "\"urll\"" } },
	{ "[key AK1]\nsecret = s\nbuckets = abc\nacess = read-only\n", { 0 }, { "line 4:", "\"acess\"" } },
	{ "[anonymous]\nsecret = s\n", { 0 }, { "[anonymous]", "\"secret\"" } },
	{ "[bucket abc]\nregoin = x\n", { 0 }, { "[bucket abc]", "\"regoin\"" } },
	{ "listen = 1.2.3.4:5\n", { 0 }, { "line 1:", "\"listen\"", "before any [section]" } },
	{ "[key]\n", { 0 }, { "[key] needs a name" } },
	{ "[bucket]\n", { 0 }, { "[bucket] needs a name" } },
	{ "[server\nlisten = 1.2.3.4:5\n", { 0 }, { "line 1:", "closing ']'" } },
	{ "[server] x\n", { 0 }, { "line 1:", "after the section header" } },
	{ "  [server]\n", { 0 }, { "line 1:", "beginning of the line" } },
	{ "[server]\nlisten 127.0.0.1\n", { 0 }, { "line 2:", "name = value" } },
	{ "[server]\n[upstream]\n[server]\n", { 0 }, { "line 3:", "[server] appears twice", "line 1" } },
	{ "[anonymous]\nbuckets = abc\n[anonymous]\n", { 0 }, { "[anonymous] appears twice" } },
	{ "[server]\nworkers = 1\nworkers = 2\n", { 0 }, { "line 3:", "workers", "set twice (first on line 2)" } },
	{ "[server]\nlisten = 1.2.3.4:5\n  6\n", { 0 }, { "line 3:", "listen", "indented line" } },
	/* keys */
	{ "[key AK1]\nsecret = s\nbuckets = abc\n[key AK1]\nsecret = t\nbuckets = abc\n", { 0 },
	  { "line 4:", "duplicate key id \"AK1\"" } },
	{ "[key AK1]\nbuckets = abc\n", { 0 }, { "line 1:", "[key AK1]: secret is missing" } },
	{ "[key AK1]\nsecret = s\n[server]\n", { 0 }, { "line 1:", "[key AK1]: buckets is missing" } },
	{ "[key AK1]\n", { 0 }, { "[key AK1]: secret is missing" } },
	{ "[key AK1]\nsecret =\nbuckets = abc\n", { 0 }, { "line 2:", "[key AK1] secret", "empty" } },
	{ "[key AK/1]\n", { 0 }, { "line 1:", "invalid access key id \"AK/1\"" } },
	{ "[key AK1]\nsecret = s\nbuckets = ,\n", { 0 }, { "[key AK1]: buckets is missing" } },
	{ "[anonymous]\naccess = read-only\n", { 0 }, { "[anonymous]: buckets is missing" } },
	{ "[anonymous]\naccess = public\n", { 0 }, { "[anonymous] access", "\"public\"" } },
	/* grants */
	{ "[key AK1]\nsecret = s\nbuckets = My_Bucket\n", { 0 }, { "line 3:", "[key AK1] buckets", "\"My_Bucket\"" } },
	{ "[key AK1]\nsecret = s\nbuckets = ab\n", { 0 }, { "buckets", "invalid bucket name in \"ab\"" } },
	{ "[key AK1]\nsecret = s\nbuckets = -abc\n", { 0 }, { "buckets", "\"-abc\"" } },
	{ "[key AK1]\nsecret = s\nbuckets = abc-\n", { 0 }, { "buckets", "\"abc-\"" } },
	{ "[key AK1]\nsecret = s\nbuckets = a..b\n", { 0 }, { "buckets", "\"a..b\"" } },
	{ "[key AK1]\nsecret = s\nbuckets = 192.168.1.1\n", { 0 }, { "buckets", "\"192.168.1.1\"" } },
	{ "[key AK1]\nsecret = s\nbuckets = abc, Upper/x/\n", { 0 }, { "buckets", "\"Upper/x/\"" } },
	{ "[key AK1]\nsecret = s\nbuckets = abc\n  bad bucket\n", { 0 }, { "line 4:", "buckets", "\"bad bucket\"" } },
	{ "[key AK1]\nsecret = s\nbuckets = */data/\n", { 0 }, { "buckets", "takes no prefix" } },
	{ "[key AK1]\nsecret = s\nbuckets = abc/data/../x\n", { 0 }, { "buckets", "\"..\" segment" } },
	{ "[key AK1]\nsecret = s\nbuckets = abc/./x\n", { 0 }, { "buckets", "segment" } },
	{ "[key AK1]\nsecret = s\nbuckets = abc\nbuckets = def\n", { 0 }, { "line 4:", "buckets", "set twice" } },
	{ NULL, { "LARDER_ANONYMOUS=Bad", 0 }, { "LARDER_ANONYMOUS:", "\"Bad\"" } },
	{ NULL, { "LARDER_ANONYMOUS=,", 0 }, { "LARDER_ANONYMOUS:", "names no bucket in \",\"" } },
	/* [bucket] */
	{ "[bucket abc]\n", { 0 }, { "line 1:", "[bucket abc]: region is missing" } },
	{ "[bucket A_B]\nregion = x\n", { 0 }, { "[bucket A_B]", "invalid bucket name" } },
	{ "[bucket abc]\nregion = eu-west-1\n[bucket abc]\n", { 0 }, { "line 3:", "[bucket abc] appears twice" } },
	{ "[bucket abc]\nregion = eu/west\n", { 0 }, { "[bucket abc] region", "\"eu/west\"" } },
	/* [server] values */
	{ "[server]\nlisten = 8080\n", { 0 }, { "[server] listen", "expected host:port", "\"8080\"" } },
	{ "[server]\nlisten = localhost:http\n", { 0 }, { "listen", "port \"http\" is not a number" } },
	{ "[server]\nlisten = localhost:0\n", { 0 }, { "listen", "port \"0\" is out of range" } },
	{ "[server]\nlisten = ::1:80\n", { 0 }, { "listen", "IPv6" } },
	{ "[server]\nlisten = [::1:80\n", { 0 }, { "listen", "[ipv6-address]:port" } },
	{ "[server]\nlisten =\n", { 0 }, { "listen", "host:port" } },
	{ NULL, { "LARDER_LISTEN=host:99999999999999999999999", 0 }, { "LARDER_LISTEN:", "out of range" } },
	{ "[server]\nworkers = 4x\n", { 0 }, { "line 2:", "[server] workers", "whole number, got \"4x\"" } },
	{ "[server]\nworkers = 5000\n", { 0 }, { "workers", "\"5000\" is out of range (0-1024)" } },
	{ "[server]\nworkers = -1\n", { 0 }, { "workers", "\"-1\"" } },
	{ NULL, { "LARDER_WORKERS=many", 0 }, { "LARDER_WORKERS:", "\"many\"" } },
	{ "[server]\nmax_connections = 0\n", { 0 }, { "max_connections", "out of range" } },
	{ NULL, { "LARDER_MAX_CONNECTIONS=1e3", 0 }, { "LARDER_MAX_CONNECTIONS:", "\"1e3\"" } },
	{ "[server]\nmax_header_size = lots\n", { 0 }, { "max_header_size", "\"lots\"" } },
	{ NULL, { "LARDER_MAX_HEADER_SIZE=2GiB", 0 }, { "LARDER_MAX_HEADER_SIZE:", "out of range" } },
	{ NULL, { "LARDER_MAX_HEADER_SIZE=100", 0 }, { "LARDER_MAX_HEADER_SIZE:", "out of range" } },
	{ NULL, { "LARDER_CLIENT_TIMEOUT=-1", 0 }, { "LARDER_CLIENT_TIMEOUT:", "\"-1\"" } },
	{ NULL, { "LARDER_CLIENT_TIMEOUT=0", 0 }, { "LARDER_CLIENT_TIMEOUT:", "out of range" } },
	{ NULL, { "LARDER_SHUTDOWN_GRACE=30s", 0 }, { "LARDER_SHUTDOWN_GRACE:", "\"30s\"" } },
	{ NULL, { "LARDER_MAX_SKEW=0", 0 }, { "LARDER_MAX_SKEW:", "out of range" } },
	{ "[server]\nlog_level = verbose\n", { 0 }, { "log_level", "\"verbose\"" } },
	{ NULL, { "LARDER_LOG_LEVEL=loud", 0 }, { "LARDER_LOG_LEVEL:", "\"loud\"" } },
	{ "[server]\naccess_log =\n", { 0 }, { "access_log", "got nothing" } },
	/* "name =" is a mistake in the file, not "unset" (an empty variable is) */
	{ "[upstream]\nurl =\n", { 0 }, { "line 2: [upstream] url", "no value" } },
	{ "[cache]\ndir = \n", { 0 }, { "line 2: [cache] dir", "no value" } },
	{ "[admin]\ntoken =\n", { 0 }, { "[admin] token", "no value" } },
	{ "[server]\nbase_domain =\n", { 0 }, { "[server] base_domain", "no value" } },
	{ "[cluster]\nredis_url =\n", { 0 }, { "[cluster] redis_url", "no value" } },
	{ NULL, { "LARDER_ACCESS_LOG=on", 0 }, { "LARDER_ACCESS_LOG:", "\"on\" is not a destination", "./on" } },
	{ "[server]\naccess_log = true\n", { 0 }, { "access_log", "\"true\"", "\"-\" for standard output" } },
	{ NULL, { "LARDER_ACCESS_LOG=OFF", 0 }, { "LARDER_ACCESS_LOG:", "\"off\" for none" } },
	{ NULL, { "LARDER_ACCESS_LOG=0", 0 }, { "LARDER_ACCESS_LOG:", "\"0\"" } },
	{ "[server]\nbase_domain = bad_domain.com\n", { 0 }, { "base_domain", "\"bad_domain.com\"" } },
	{ NULL, { "LARDER_BASE_DOMAIN=.example.com", 0 }, { "LARDER_BASE_DOMAIN:", "host name" } },
	/* [upstream] values */
	{ "[upstream]\nurl = ftp://x\n", { 0 }, { "[upstream] url", "http:// or https://", "\"ftp://x\"" } },
	{ "[upstream]\nurl = minio:9000\n", { 0 }, { "[upstream] url", "\"minio:9000\"" } },
	{ NULL, { "LARDER_UPSTREAM_URL=http://", 0 }, { "LARDER_UPSTREAM_URL:", "no host" } },
	{ NULL, { "LARDER_UPSTREAM_URL=http://a b", 0 }, { "LARDER_UPSTREAM_URL:", "character" } },
	{ "[upstream]\naddressing = both\n", { 0 }, { "addressing", "auto, path or virtual", "\"both\"" } },
	{ NULL, { "LARDER_UPSTREAM_ADDRESSING=host", 0 }, { "LARDER_UPSTREAM_ADDRESSING:", "\"host\"" } },
	{ "[upstream]\ntls_verify = maybe\n", { 0 }, { "tls_verify", "true or false", "\"maybe\"" } },
	{ NULL, { "LARDER_UPSTREAM_TLS_VERIFY=2", 0 }, { "LARDER_UPSTREAM_TLS_VERIFY:", "\"2\"" } },
	{ "[upstream]\nregion = us east 1\n", { 0 }, { "[upstream] region", "\"us east 1\"" } },
	{ NULL, { "LARDER_UPSTREAM_REGION=a/b", 0 }, { "LARDER_UPSTREAM_REGION:", "\"a/b\"" } },
	{ NULL, { "LARDER_UPSTREAM_TIMEOUT=0", 0 }, { "LARDER_UPSTREAM_TIMEOUT:", "out of range" } },
	{ "[upstream]\ncreds_refresh_margin = 99999\n", { 0 }, { "creds_refresh_margin", "out of range" } },
	{ NULL, { "LARDER_CREDS_REFRESH_MARGIN=five", 0 }, { "LARDER_CREDS_REFRESH_MARGIN:", "\"five\"" } },
	/* client key from the environment */
	{ NULL, { "LARDER_CLIENT_KEY=AKX", 0 }, { "LARDER_CLIENT_KEY", "LARDER_CLIENT_SECRET is not" } },
	{ NULL, { "LARDER_CLIENT_SECRET=x", 0 }, { "LARDER_CLIENT_SECRET", "LARDER_CLIENT_KEY is not" } },
	{ NULL, { "LARDER_CLIENT_KEY=AK X", "LARDER_CLIENT_SECRET=x" }, { "LARDER_CLIENT_KEY:", "invalid access key id" } },
	{ "[key AK1]\nsecret = s\nbuckets = abc\n", { "LARDER_CLIENT_KEY=AK1", "LARDER_CLIENT_SECRET=x" },
	  { "LARDER_CLIENT_KEY:", "duplicate key id \"AK1\"" } },
};

static void test_errors(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
		const struct bad *b = &bad_cases[i];
		const char *const *env = b->env[0] ? b->env : NULL;
		expect_error(b->text, env, b->want);
	}
}

static void test_long_lines(void **state)
{
	(void)state;
	char text[1024];
	char list[400] = "";
	for (int i = 0; i < 30; i++)
		snprintf(list + strlen(list), sizeof list - strlen(list), "%sbucket-%02d",
		         i ? ", " : "", i);
	snprintf(text, sizeof text, "[key AK1]\nsecret = s\nbuckets = %s\n", list);
	expect_error(text, NULL, (const char *[]){ "line 3:", "longer than", "indented", NULL });

	/* The same list split over continuation lines loads. */
	snprintf(text, sizeof text, "[key AK1]\nsecret = s\nbuckets =\n");
	for (int i = 0; i < 30; i++)
		snprintf(text + strlen(text), sizeof text - strlen(text), "  bucket-%02d,\n", i);
	struct cfg *c = load_ok(text, NULL);
	assert_int_equal(c->keys[0].n_grants, 30);
	assert_string_equal(c->keys[0].grants[29].bucket, "bucket-29");
	cfg_free(c);
}

/* ---- files ---------------------------------------------------------------- */

static char *write_temp(const char *text)
{
	const char *dir = getenv("TMPDIR");
	char path[512];
	snprintf(path, sizeof path, "%s/larder-cfg-XXXXXX", dir && *dir ? dir : "/tmp");
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	size_t n = strlen(text);
	assert_int_equal(write(fd, text, n), (ssize_t)n);
	close(fd);
	return strdup(path);
}

static void test_load_file(void **state)
{
	(void)state;
	char err[512];
	char *path = write_temp("[server]\nworkers = 2\n\n[upstream]\ntimeout = never\n");
	assert_null(cfg_load(path, err, sizeof err));
	char want[600];
	snprintf(want, sizeof want, "%s:5: [upstream] timeout: expected a whole number, "
	         "got \"never\"", path);
	assert_string_equal(err, want);
	unlink(path);
	free(path);

	path = write_temp("[server]\nworkers = 2\n");
	struct cfg *c = cfg_load(path, err, sizeof err);
	assert_non_null(c);
	assert_int_equal(c->workers, 2);
	assert_string_equal(c->source, path);
	cfg_free(c);

	/* path NULL: LARDER_CONFIG names the file. */
	setenv("LARDER_CONFIG", path, 1);
	c = cfg_load(NULL, err, sizeof err);
	unsetenv("LARDER_CONFIG");
	assert_non_null(c);
	assert_int_equal(c->workers, 2);
	assert_string_equal(c->source, path);
	cfg_free(c);
	unlink(path);

	/* A file that is not there. */
	assert_null(cfg_load(path, err, sizeof err));
	assert_non_null(strstr(err, path));
	assert_non_null(strstr(err, "cannot open"));
	free(path);
}

static void test_example_conf(void **state)
{
	(void)state;
	char err[512] = "";
	assert_non_null(example_path);
	struct cfg *c = cfg_load(example_path, err, sizeof err);
	if (!c)
		fail_msg("%s", err);
	/* It shows the defaults, and grants nothing: its example keys, with
	 * their public secrets, are commented out (and refused if restored). */
	assert_int_equal(c->listen_port, 8080);
	assert_int_equal(c->max_header_bytes, 16384);
	assert_int_equal(c->n_keys, 0);
	assert_int_equal(c->anonymous.n_grants, 0);
	assert_string_equal(cfg_bucket_region(c, "eu-archive"), "eu-west-1");
	assert_string_equal(c->admin_host, "127.0.0.1");
	assert_int_equal(c->admin_port, 9090);
	assert_null(c->admin_token);
	cfg_free(c);
}

/* The example "shows its default" for every setting it sets: loaded as it
 * is, it differs from no file at all only in its [bucket] section. */
static void test_example_shows_the_defaults(void **state)
{
	(void)state;
	assert_non_null(example_path);
	FILE *f = fopen(example_path, "r");
	assert_non_null(f);
	static char text[64 * 1024];
	size_t n = fread(text, 1, sizeof text - 1, f);
	fclose(f);
	assert_true(n > 0 && n < sizeof text - 1);
	text[n] = '\0';
	struct cfg *example = load_ok(text, NULL), *builtin = load_ok("", NULL);
	char what[160];
	for (size_t at = 0; cfg_restart_change(builtin, example, &at, what, sizeof what);)
		if (strncmp(what, "[bucket", 7) != 0)
			fail_msg("config/larder.conf sets %s to another value than its default", what);
	cfg_free(example);
	cfg_free(builtin);
}

/* The example gives each number's range after its value ("workers = 0 ; 0-1024"):
 * its top is taken and one more is refused. Settings whose top another one
 * caps (window_min, the pin caps) are only refused past it. */
static void test_example_ranges(void **state)
{
	(void)state;
	assert_non_null(example_path);
	FILE *f = fopen(example_path, "r");
	assert_non_null(f);
	char line[256], section[32] = "", name[64], lo[32], hi[32], text[256], err[512];
	int checked = 0;
	while (fgets(line, sizeof line, f)) {
		if (sscanf(line, ";[%31[a-z]]", section) == 1 || sscanf(line, "[%31[a-z]]", section) == 1)
			continue;
		const char *l = line[0] == ';' ? line + 1 : line;
		if (sscanf(l, "%63[a-z_] = %*s ; %31[0-9A-Za-z]-%31[0-9A-Za-z]", name, lo, hi) != 3 &&
		    sscanf(l, "%63[a-z_] = %*s ; 0, or %31[0-9A-Za-z]-%31[0-9A-Za-z]", name, lo, hi) != 3)
			continue;
		uint64_t top;
		assert_int_equal(cfg_parse_size(hi, &top), 0);
		bool capped = strcmp(name, "window_min") == 0 || strncmp(name, "pin_max", 7) == 0;
		snprintf(text, sizeof text, "[%s]\n%s = %llu\n", section, name,
		         (unsigned long long)top);
		struct cfg *c = cfg_load_text(text, NULL, err, sizeof err);
		if (!c && !capped)
			fail_msg("%s: the documented top was refused: %s", text, err);
		cfg_free(c);
		snprintf(text, sizeof text, "[%s]\n%s = %llu\n", section, name,
		         (unsigned long long)top + 1);
		c = cfg_load_text(text, NULL, err, sizeof err);
		if (c)
			fail_msg("%s: one past the documented top was taken", text);
		if (!strstr(err, name))
			fail_msg("%s: the error does not name it: %s", text, err);
		checked++;
	}
	fclose(f);
	assert_true(checked >= 25);
}

/* ---- sizes ---------------------------------------------------------------- */

static void test_sizes(void **state)
{
	(void)state;
	static const struct { const char *s; uint64_t v; } ok[] = {
		{ "0", 0 },
		{ "4096", 4096 },
		{ "512MiB", 512ull << 20 },
		{ "20GiB", 20ull << 30 },
		{ "1.5GB", 1500000000ull },
		{ "1.5GiB", 3ull << 29 },
		{ "64k", 64000 },
		{ "64K", 64000 },
		{ "64kB", 64000 },
		{ "64Ki", 65536 },
		{ "64kib", 65536 },
		{ "2M", 2000000 },
		{ "2MB", 2000000 },
		{ "3T", 3000000000000ull },
		{ "1TiB", 1ull << 40 },
		{ "1PiB", 1ull << 50 },
		{ "2pb", 2000000000000000ull },
		{ "16383Pi", 16383ull << 50 },
		{ "10 B", 10 },
		{ " 16 KiB ", 16384 },
		{ "0.5KiB", 512 },
		{ "1.000000000000GiB", 1ull << 30 },
		{ "18446744073709551615", UINT64_MAX },
		{ "16777215TiB", 16777215ull << 40 },
	};
	static const char *const bad[] = {
		"", " ", "-1", "+1", "-1KiB", "1.5", "0.1KiB", "abc", "12abc", "1 2", "1.", ".5",
		"1..5K", "5XiB", "5KiBB", "1e3", "0x10", "18446744073709551616", "16777216TiB", "16384PiB",
		"99999999999999999999999GB", "1.123456789123GiB", "10 MiB extra", "1KiB\n2",
	};
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
		uint64_t v = 7;
		if (cfg_parse_size(ok[i].s, &v) != 0)
			fail_msg("\"%s\" was refused", ok[i].s);
		if (v != ok[i].v)
			fail_msg("\"%s\" gave %llu, want %llu", ok[i].s, (unsigned long long)v,
			         (unsigned long long)ok[i].v);
	}
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		uint64_t v = 7;
		if (cfg_parse_size(bad[i], &v) != -22)
			fail_msg("\"%s\" was accepted", bad[i]);
		assert_int_equal(v, 7);  /* untouched on error */
	}
	uint64_t v;
	assert_int_equal(cfg_parse_size(NULL, &v), -22);
}

/* ---- leaks ---------------------------------------------------------------- */

/* Every path frees what it allocated; LeakSanitizer checks at exit in the
 * sanitizer build. Fail after each growth step of the arrays. */
static void test_cache_settings(void **state)
{
	(void)state;
	struct cfg *c = load_ok(NULL, NULL);
	assert_null(c->cache_dir);
	assert_int_equal(c->chunk_bytes, 8 << 20);
	assert_int_equal(c->metadata_ttl_s, 60);
	assert_string_equal(c->cache_policy, "subset");
	cfg_free(c);
	static const char *const env[] = {
		"LARDER_CACHE_DIR=/tmp/x", "LARDER_CHUNK_SIZE=1MiB", "LARDER_METADATA_TTL=immutable",
		"LARDER_CACHE_POLICY=LRU", "LARDER_RAM_CACHE_SIZE=512MiB", "LARDER_READAHEAD=2", NULL,
	};
	c = load_ok("[cache]\ndisk_size = 20GiB\nnegative_ttl = 5\n", env);
	assert_string_equal(c->cache_dir, "/tmp/x");
	assert_int_equal(c->chunk_bytes, 1 << 20);
	assert_int_equal(c->metadata_ttl_s, -1);
	assert_string_equal(c->cache_policy, "lru");
	assert_int_equal(c->ram_cache_bytes, (size_t)512 << 20);
	assert_int_equal(c->disk_cache_bytes, (size_t)20 << 30);
	assert_int_equal(c->negative_ttl_s, 5);
	assert_int_equal(c->readahead_chunks, 2);
	cfg_free(c);
	static const char *const bad1[] = { "LARDER_CACHE_POLICY=fifo", NULL };
	static const char *const want1[] = { "LARDER_CACHE_POLICY", "fifo", NULL };
	expect_error(NULL, bad1, want1);
	static const char *const bad2[] = { "LARDER_CHUNK_SIZE=1KiB", NULL };
	static const char *const want2[] = { "LARDER_CHUNK_SIZE", NULL };
	expect_error(NULL, bad2, want2);
	static const char *const bad3[] = { "LARDER_METADATA_TTL=forever", NULL };
	static const char *const want3[] = { "LARDER_METADATA_TTL", "immutable", NULL };
	expect_error(NULL, bad3, want3);
	/* Pins live in RAM: the pin limit is at most the RAM tier. */
	c = load_ok("[cache]\nram_size = 64MiB\npin_max = 48MiB\n", NULL);
	assert_int_equal(c->pin_max_bytes, (size_t)48 << 20);
	cfg_free(c);
	static const char *const bad4[] = { "LARDER_RAM_CACHE_SIZE=64MiB", "LARDER_PIN_MAX=65MiB",
		NULL };
	static const char *const want4[] = { "LARDER_PIN_MAX", "more than the RAM tier", NULL };
	expect_error(NULL, bad4, want4);
	/* And the NVMe pin limit at most the NVMe tier. */
	c = load_ok("[cache]\ndisk_size = 1GiB\npin_max_nvme = 1GiB\n", NULL);
	assert_int_equal(c->pin_max_nvme_bytes, (size_t)1 << 30);
	cfg_free(c);
	static const char *const bad5[] = { "LARDER_DISK_CACHE_SIZE=1GiB",
		"LARDER_PIN_MAX_NVME=2GiB", NULL };
	static const char *const want5[] = { "LARDER_PIN_MAX_NVME", "more than the NVMe tier", NULL };
	expect_error(NULL, bad5, want5);
	/* A reader keeps at most 16 chunks ahead (gateway/cread.h): more is refused,
	 * not quietly read as 16. */
	c = load_ok(NULL, (const char *[]){ "LARDER_READAHEAD=16", NULL });
	assert_int_equal(c->readahead_chunks, 16);
	cfg_free(c);
	expect_error(NULL, (const char *[]){ "LARDER_READAHEAD=17", NULL },
	             (const char *[]){ "LARDER_READAHEAD: \"17\" is out of range (0-16)", NULL });
	expect_error("[cache]\nreadahead = 64\n", NULL,
	             (const char *[]){ "line 2: [cache] readahead: \"64\" is out of range (0-16)",
	                               NULL });
}

/* Upstream shaping windows: defaults, both ways of setting, the floor under the ceiling. */
static void test_upstream_window_settings(void **state)
{
	(void)state;
	struct cfg *c = load_ok(NULL, NULL);
	assert_int_equal(c->upstream_window_max, 64);
	assert_int_equal(c->upstream_window_min, 1);
	assert_int_equal(c->upstream_slot_wait_ms, 5000);
	cfg_free(c);
	static const char *const env[] = { "LARDER_UPSTREAM_WINDOW_MIN=2", NULL };
	c = load_ok("[upstream]\nwindow_max = 8\nslot_wait_ms = 250\n", env);
	assert_int_equal(c->upstream_window_max, 8);
	assert_int_equal(c->upstream_window_min, 2);
	assert_int_equal(c->upstream_slot_wait_ms, 250);
	cfg_free(c);
	static const char *const bad[] = { "LARDER_UPSTREAM_WINDOW_MAX=4",
		                           "LARDER_UPSTREAM_WINDOW_MIN=5", NULL };
	static const char *const want[] = { "LARDER_UPSTREAM_WINDOW_MIN", "more than", NULL };
	expect_error(NULL, bad, want);
	static const char *const zero[] = { "LARDER_UPSTREAM_WINDOW_MIN=0", NULL };
	static const char *const want0[] = { "LARDER_UPSTREAM_WINDOW_MIN", NULL };
	expect_error(NULL, zero, want0);
}

static void test_admin_settings(void **state)
{
	(void)state;
	struct cfg *c = load_ok(NULL, NULL);
	assert_string_equal(c->admin_host, "127.0.0.1");
	assert_int_equal(c->admin_port, 9090);
	assert_null(c->admin_token);
	cfg_free(c);

	c = load_ok("[admin]\nlisten = [::1]:9191\ntoken = file-token-0123456789\n", NULL);
	assert_string_equal(c->admin_host, "::1");
	assert_int_equal(c->admin_port, 9191);
	assert_string_equal(c->admin_token, "file-token-0123456789");
	cfg_free(c);

	/* The environment wins; "off" (any case) disables the listener. */
	static const char *const env[] = {
		"LARDER_ADMIN_LISTEN=OFF", "LARDER_ADMIN_TOKEN=  env-token-abcdefghijkl  ", NULL,
	};
	c = load_ok("[admin]\nlisten = 0.0.0.0:9191\ntoken = file-token-0123456789\n", env);
	assert_null(c->admin_host);
	assert_int_equal(c->admin_port, 0);
	assert_string_equal(c->admin_token, "env-token-abcdefghijkl");
	cfg_free(c);
	static const char *const env2[] = { "LARDER_ADMIN_LISTEN=0.0.0.0:7000", NULL };
	c = load_ok(NULL, env2);
	assert_string_equal(c->admin_host, "0.0.0.0");
	assert_int_equal(c->admin_port, 7000);
	cfg_free(c);

	char err[512];
	assert_null(cfg_load_text(NULL, (const char *[]){ "LARDER_ADMIN_LISTEN=9090", NULL }, err,
	                          sizeof err));
	assert_string_equal(err, "LARDER_ADMIN_LISTEN: expected host:port, got \"9090\"");
	assert_null(cfg_load_text(NULL, (const char *[]){ "LARDER_ADMIN_TOKEN=short", NULL }, err,
	                          sizeof err));
	assert_string_equal(err, "LARDER_ADMIN_TOKEN: must be 16-256 characters long (got 5)");
	assert_null(cfg_load_text("[admin]\ntoken = has\x01control-character\n", NULL, err,
	                          sizeof err));
	assert_string_equal(err, "line 2: [admin] token: only visible ASCII characters, no spaces");
	static const char *const want1[] = { "line 2:", "[admin] unknown setting \"port\"", NULL };
	expect_error("[admin]\nport = 1\n", NULL, want1);
	static const char *const want2[] = { "line 3:", "[admin] appears twice", NULL };
	expect_error("[admin]\n\n[admin]\n", NULL, want2);
	static const char *const want3[] = { "LARDER_ADMIN_LISTEN", "out of range", NULL };
	expect_error(NULL, (const char *[]){ "LARDER_ADMIN_LISTEN=127.0.0.1:0", NULL }, want3);
}

static void test_no_leaks(void **state)
{
	(void)state;
	const char *env[] = { "LARDER_CLIENT_KEY=AKE", "LARDER_CLIENT_SECRET=x",
	                      "LARDER_ANONYMOUS=abc,def/x", NULL };
	char text[4096] = "";
	for (int i = 0; i < 9; i++) {
		snprintf(text + strlen(text), sizeof text - strlen(text),
		         "[key AK%d]\nsecret = s\nbuckets = b%02d, c%02d/p, d%02d\n"
		         "[bucket r%02d]\nregion = eu-west-%d\n", i, i, i, i, i, i);
		struct cfg *c = load_ok(text, env);
		assert_int_equal(c->n_keys, (size_t)i + 2);
		assert_int_equal(c->n_bucket_regions, (size_t)i + 1);
		cfg_free(c);
		char broken[4200];
		snprintf(broken, sizeof broken, "%s[key AKX]\nsecret = s\nbuckets = abc, A\n", text);
		expect_error(broken, env, (const char *[]){ "\"A\"", NULL });
		expect_error(text, (const char *[]){ "LARDER_ANONYMOUS=abc,X", NULL },
		             (const char *[]){ "\"X\"", NULL });
	}
}

static void test_cluster_settings(void **state)
{
	(void)state;
	char err[256];
	const char *ok[] = { "LARDER_REDIS_URL=redis://r:6379", "LARDER_ADVERTISE=10.0.0.1:8080",
		"LARDER_CLUSTER_SECRET=0123456789abcdef", "LARDER_NODE_ID=n1", NULL };
	struct cfg *c = cfg_load_text(NULL, ok, err, sizeof err);
	assert_non_null(c);
	assert_int_equal(c->directory_ttl_s, 3600);
	assert_null(c->cluster_ca_file);
	cfg_free(c);

	const char *ttl[] = { "LARDER_REDIS_URL=redis://r:6379", "LARDER_ADVERTISE=10.0.0.1:8080",
		"LARDER_CLUSTER_SECRET=0123456789abcdef", "LARDER_DIRECTORY_TTL=5", NULL };
	expect_error(NULL, ttl, (const char *[]){ "LARDER_DIRECTORY_TTL", NULL });
	const char *ca[] = { "LARDER_REDIS_URL=redis://r:6379", "LARDER_ADVERTISE=10.0.0.1:8080",
		"LARDER_CLUSTER_SECRET=0123456789abcdef", "LARDER_CLUSTER_CA_FILE=/nonexistent/ca.pem",
		NULL };
	expect_error(NULL, ca, (const char *[]){ "LARDER_CLUSTER_CA_FILE: cannot read",
	                                         "/nonexistent/ca.pem", NULL });
	const char *nosecret[] = { "LARDER_REDIS_URL=redis://r:6379",
		"LARDER_ADVERTISE=10.0.0.1:8080", NULL };
	expect_error(NULL, nosecret, (const char *[]){ "LARDER_CLUSTER_SECRET", NULL });

	/* The Redis password lives in the URL: a refused URL is named without it. */
	const char *tls[] = { "LARDER_REDIS_URL=rediss://:hunter2hunter2@r:6379",
		"LARDER_ADVERTISE=10.0.0.1:8080", "LARDER_CLUSTER_SECRET=0123456789abcdef", NULL };
	expect_error(NULL, tls, (const char *[]){ "LARDER_REDIS_URL: expected redis://host:port",
	                                          "rediss://", "@r:6379", NULL });
	assert_null(cfg_load_text(NULL, tls, err, sizeof err));
	assert_null(strstr(err, "hunter2"));

	/* Peers connect to http://ADVERTISE/...: it is a host and a port. */
	static const char *const bad_advertise[] = { "LARDER_ADVERTISE=10.0.0.1:",
		"LARDER_ADVERTISE=10.0.0.1:http", "LARDER_ADVERTISE=http://10.0.0.1:8080",
		"LARDER_ADVERTISE=fd00::1:8080", "LARDER_ADVERTISE=10.0.0.1:8080/" };
	for (size_t i = 0; i < sizeof bad_advertise / sizeof *bad_advertise; i++) {
		const char *env[] = { bad_advertise[i], NULL };
		expect_error(NULL, env, (const char *[]){ "LARDER_ADVERTISE", NULL });
	}
	expect_error("[cluster]\nadvertise = :8080\n", NULL,
	             (const char *[]){ "line 2: [cluster] advertise", NULL });
	const char *v6[] = { "LARDER_REDIS_URL=redis://r:6379", "LARDER_ADVERTISE=[fd00::1]:8080",
		"LARDER_CLUSTER_SECRET=0123456789abcdef", "LARDER_NODE_ID=n1", NULL };
	assert_non_null(c = cfg_load_text(NULL, v6, err, sizeof err));
	assert_string_equal(c->advertise, "[fd00::1]:8080");
	cfg_free(c);
	const char *blank_id[] = { "LARDER_NODE_ID=node one", NULL };
	expect_error(NULL, blank_id, (const char *[]){ "LARDER_NODE_ID", NULL });
	const char *no_cache[] = { "LARDER_REDIS_URL=redis://r:6379", "LARDER_ADVERTISE=h:1",
		"LARDER_CLUSTER_SECRET=0123456789abcdef", "LARDER_RAM_CACHE_SIZE=0", NULL };
	expect_error(NULL, no_cache, (const char *[]){ "LARDER_RAM_CACHE_SIZE", NULL });
}

/* [bucket NAME] list_cache_ttl, list_cache_prefixes; [cache] list_cache_size */
static void test_list_cache_settings(void **state)
{
	(void)state;
	struct cfg *c = load_ok("[bucket all-lists]\nlist_cache_ttl = 5\n"
	                        "[bucket some-lists]\nregion = eu-west-1\nlist_cache_ttl = 30\n"
	                        "list_cache_prefixes = train/, val/,\n    test/\n"
	                        "[bucket no-lists]\nregion = eu-west-2\nlist_cache_ttl = 0\n", NULL);
	assert_int_equal(c->list_cache_bytes, 16u << 20);
	assert_int_equal(c->n_list_caches, 2);
	assert_null(cfg_bucket_region(c, "all-lists")); /* no region of its own */
	assert_string_equal(cfg_bucket_region(c, "some-lists"), "eu-west-1");
	assert_int_equal(cfg_list_ttl(c, "all-lists", ""), 5);
	assert_int_equal(cfg_list_ttl(c, "all-lists", "x/"), 5);
	assert_int_equal(cfg_list_ttl(c, "some-lists", "val/a/"), 30);
	assert_int_equal(cfg_list_ttl(c, "some-lists", "test/"), 30);
	assert_int_equal(cfg_list_ttl(c, "some-lists", "va"), 0);
	assert_int_equal(cfg_list_ttl(c, "some-lists", ""), 0);
	assert_int_equal(cfg_list_ttl(c, "no-lists", ""), 0);
	assert_int_equal(cfg_list_ttl(c, "other", ""), 0);
	cfg_free(c);

	c = load_ok("[bucket all-lists]\nlist_cache_ttl = 5\n",
	            (const char *[]){ "LARDER_LIST_CACHE_SIZE=0", NULL });
	assert_int_equal(cfg_list_ttl(c, "all-lists", ""), 0); /* size 0: no LIST cache */
	cfg_free(c);

	expect_error("[bucket abc]\nlist_cache_ttl = 5s\n", NULL,
	             (const char *[]){ "line 2:", "list_cache_ttl", "number of seconds", NULL });
	expect_error("[bucket abc]\nlist_cache_ttl = 86401\n", NULL,
	             (const char *[]){ "line 2:", "0-86400", NULL });
	expect_error("[bucket abc]\nlist_cache_prefixes = a/\n", NULL,
	             (const char *[]){ "[bucket abc]: list_cache_prefixes needs list_cache_ttl",
	                               NULL });
	expect_error("[bucket abc]\nlist_cache_ttl = 5\nlist_cache_prefixes = ,\n", NULL,
	             (const char *[]){ "line 3:", "got nothing", NULL });
	expect_error("[bucket abc]\nlist_cache_ttl = 0\n", NULL,
	             (const char *[]){ "region is missing", NULL });
	expect_error("[bucket abc]\nlist_cache_ttl = 5\nlist_cache_ttl = 6\n", NULL,
	             (const char *[]){ "line 3:", "set twice", NULL });
	/* A bucket's second section is refused even when its first set no region. */
	expect_error("[bucket abc]\nlist_cache_ttl = 5\n[bucket abc]\nlist_cache_ttl = 10\n", NULL,
	             (const char *[]){ "line 3:", "[bucket abc] appears twice", NULL });
	expect_error("[bucket abc]\nlist_cache_ttl = 5\n[bucket xyz]\nregion = eu-west-1\n"
	             "[bucket abc]\nregion = eu-west-2\n", NULL,
	             (const char *[]){ "line 5:", "[bucket abc] appears twice", NULL });
}

int main(int argc, char **argv)
{
	example_path = argc > 1 ? argv[1] : NULL;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_defaults),
		cmocka_unit_test(test_file),
		cmocka_unit_test(test_listen_forms),
		cmocka_unit_test(test_env_overrides_file),
		cmocka_unit_test(test_env_without_file),
		cmocka_unit_test(test_env_empty_is_unset),
		cmocka_unit_test(test_aws_region),
		cmocka_unit_test(test_exact_messages),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_long_lines),
		cmocka_unit_test(test_load_file),
		cmocka_unit_test(test_example_conf),
		cmocka_unit_test(test_example_ranges),
		cmocka_unit_test(test_example_shows_the_defaults),
		cmocka_unit_test(test_sizes),
		cmocka_unit_test(test_cache_settings),
		cmocka_unit_test(test_cluster_settings),
		cmocka_unit_test(test_upstream_window_settings),
		cmocka_unit_test(test_admin_settings),
		cmocka_unit_test(test_list_cache_settings),
		cmocka_unit_test(test_no_leaks),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

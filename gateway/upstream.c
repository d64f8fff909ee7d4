/*
 * upstream.c - endpoint, addressing, bucket regions and signing for the
 * upstream S3 (S3 API "Virtual hosting of buckets", "Regions and endpoints").
 */
#include "gateway/upstream.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "auth/sigv4.h"
#include "base/buf.h"
#include "base/log.h"
#include "gateway/s3req.h"

#define REGION_SLOTS 512

struct region_slot {
	char bucket[256];
	char region[64];
	unsigned long used;
};

struct upstream {
	bool https;
	bool aws;               /* an AWS S3 endpoint: region-specific hosts */
	bool fixed_host;        /* LARDER_UPSTREAM_URL given: host never changes */
	char host[256];         /* host[:port] of the endpoint */
	char base_path[256];    /* path prefix of the endpoint, "" usually */
	enum cfg_addressing addressing;
	char default_region[64];
	bool tls_verify;
	char *ca_file;
	unsigned timeout_s;
	long min_speed;         /* a GET's floor, bytes/s over timeout_s (upstream_prepare) */
	unsigned retries;
	struct creds_provider *creds;

	pthread_mutex_t lock;   /* guards regions */
	struct region_slot regions[REGION_SLOTS];
	unsigned long tick;
	const struct cfg_bucket_region *configured;
	size_t n_configured;
	struct cfg_bucket_region *configured_copy;
};

void up_target_init(struct up_target *t)
{
	buf_init(&t->url, 64 * 1024);
	buf_init(&t->host, 512);
	buf_init(&t->path, 16 * 1024);
	t->region[0] = '\0';
}

void up_target_fini(struct up_target *t)
{
	buf_fini(&t->url);
	buf_fini(&t->host);
	buf_fini(&t->path);
}

static bool ends_with_nocase(const char *s, const char *suffix)
{
	size_t a = strlen(s), b = strlen(suffix);
	return a >= b && strcasecmp(s + a - b, suffix) == 0;
}

struct upstream *upstream_create(const struct cfg *cfg, struct creds_provider *creds,
                                 char *err, size_t errlen)
{
	struct upstream *u = calloc(1, sizeof *u);
	if (!u) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	pthread_mutex_init(&u->lock, NULL);
	u->creds = creds;
	u->addressing = cfg->addressing;
	u->tls_verify = cfg->upstream_tls_verify;
	u->ca_file = cfg->upstream_ca_file ? strdup(cfg->upstream_ca_file) : NULL;
	u->timeout_s = cfg->upstream_timeout_s ? cfg->upstream_timeout_s : 30;
	u->retries = cfg->upstream_retries;
	u->min_speed = cfg->upstream_min_speed ? (long)cfg->upstream_min_speed : 1;
	snprintf(u->default_region, sizeof u->default_region, "%s",
	         cfg->upstream_region ? cfg->upstream_region : "us-east-1");
	if (cfg->n_bucket_regions) {
		u->configured_copy = calloc(cfg->n_bucket_regions, sizeof *u->configured_copy);
		for (size_t i = 0; u->configured_copy && i < cfg->n_bucket_regions; i++) {
			u->configured_copy[i].bucket = strdup(cfg->bucket_regions[i].bucket);
			u->configured_copy[i].region = strdup(cfg->bucket_regions[i].region);
		}
		u->configured = u->configured_copy;
		u->n_configured = u->configured_copy ? cfg->n_bucket_regions : 0;
	}

	const char *url = cfg->upstream_url;
	if (!url || !*url) {
		u->https = true;
		u->aws = true;
		return u;
	}
	const char *p;
	if (strncasecmp(url, "https://", 8) == 0) {
		u->https = true;
		p = url + 8;
	} else if (strncasecmp(url, "http://", 7) == 0) {
		p = url + 7;
	} else {
		snprintf(err, errlen, "LARDER_UPSTREAM_URL: \"%s\" is not an http:// or https:// URL", url);
		upstream_destroy(u);
		return NULL;
	}
	size_t hl = strcspn(p, "/?#");
	if (hl == 0 || hl >= sizeof u->host) {
		snprintf(err, errlen, "LARDER_UPSTREAM_URL: \"%s\" has no usable host", url);
		upstream_destroy(u);
		return NULL;
	}
	memcpy(u->host, p, hl);
	u->host[hl] = '\0';
	snprintf(u->base_path, sizeof u->base_path, "%s", p + hl);
	size_t bl = strlen(u->base_path);
	while (bl && u->base_path[bl - 1] == '/')
		u->base_path[--bl] = '\0';
	u->fixed_host = true;
	char hostonly[256];
	snprintf(hostonly, sizeof hostonly, "%.*s", (int)strcspn(u->host, ":"), u->host);
	u->aws = ends_with_nocase(hostonly, ".amazonaws.com");
	return u;
}

void upstream_destroy(struct upstream *u)
{
	if (!u)
		return;
	for (size_t i = 0; i < u->n_configured; i++) {
		free(u->configured_copy[i].bucket);
		free(u->configured_copy[i].region);
	}
	free(u->configured_copy);
	free(u->ca_file);
	pthread_mutex_destroy(&u->lock);
	free(u);
}

bool upstream_tls_verify(const struct upstream *u) { return u->tls_verify; }
const char *upstream_ca_file(const struct upstream *u) { return u->ca_file; }
unsigned upstream_timeout_s(const struct upstream *u) { return u->timeout_s; }

/* The region a bucket is signed for: configured, learnt, or the default. */
static void bucket_region(struct upstream *u, const char *bucket, char out[64])
{
	for (size_t i = 0; bucket && i < u->n_configured; i++)
		if (strcmp(u->configured[i].bucket, bucket) == 0) {
			str_copy(out, 64, u->configured[i].region);
			return;
		}
	str_copy(out, 64, u->default_region);
	if (!bucket || !*bucket)
		return;
	pthread_mutex_lock(&u->lock);
	for (size_t i = 0; i < REGION_SLOTS; i++)
		if (u->regions[i].used && strcmp(u->regions[i].bucket, bucket) == 0) {
			str_copy(out, 64, u->regions[i].region);
			u->regions[i].used = ++u->tick;
			break;
		}
	pthread_mutex_unlock(&u->lock);
}

/* An AWS region's name ("us-east-1", "us-gov-west-1"): it goes into the
 * upstream host name, so an answer may only ever name a region, not a host. */
static bool region_name_ok(const char *r)
{
	size_t n = strlen(r);
	if (n == 0 || n >= 64 || r[0] == '-' || r[n - 1] == '-')
		return false;
	return strspn(r, "abcdefghijklmnopqrstuvwxyz0123456789-") == n;
}

bool upstream_learn_region(struct upstream *u, const char *bucket, const char *region)
{
	if (!bucket || !*bucket || !region || !region_name_ok(region) || strlen(bucket) >= 256)
		return false;
	char cur[64];
	bucket_region(u, bucket, cur);
	if (strcmp(cur, region) == 0)
		return false;
	for (size_t i = 0; i < u->n_configured; i++)
		if (strcmp(u->configured[i].bucket, bucket) == 0)
			return false; /* configuration wins over what upstream says */
	pthread_mutex_lock(&u->lock);
	size_t victim = 0;
	for (size_t i = 0; i < REGION_SLOTS; i++) {
		if (u->regions[i].used && strcmp(u->regions[i].bucket, bucket) == 0) {
			victim = i;
			break;
		}
		if (u->regions[i].used < u->regions[victim].used)
			victim = i;
	}
	snprintf(u->regions[victim].bucket, sizeof u->regions[victim].bucket, "%s", bucket);
	snprintf(u->regions[victim].region, sizeof u->regions[victim].region, "%s", region);
	u->regions[victim].used = ++u->tick;
	pthread_mutex_unlock(&u->lock);
	log_info("upstream", "bucket %s is in region %s", bucket, region);
	return true;
}

int upstream_target(struct upstream *u, const char *bucket, const char *key, const char *query,
                    struct up_target *t)
{
	buf_reset(&t->url);
	buf_reset(&t->host);
	buf_reset(&t->path);
	bool has_bucket = bucket && *bucket;
	bucket_region(u, has_bucket ? bucket : NULL, t->region);

	/* Virtual-hosted style needs a DNS-safe bucket; over TLS a dot in the
	 * name breaks the wildcard certificate, so such buckets go path style,
	 * as the AWS SDKs do. */
	bool virtual = false;
	if (has_bucket) {
		if (u->addressing == CFG_ADDR_VIRTUAL)
			virtual = true;
		else if (u->addressing == CFG_ADDR_AUTO && u->aws)
			virtual = s3_bucket_name_dns_ok(bucket) && !(u->https && strchr(bucket, '.'));
	}
	int rc = 0;
	if (virtual) {
		rc = buf_puts(&t->host, bucket);
		rc = rc ? rc : buf_putc(&t->host, '.');
	}
	if (u->fixed_host) {
		rc = rc ? rc : buf_puts(&t->host, u->host);
	} else {
		rc = rc ? rc : buf_puts(&t->host, "s3.");
		rc = rc ? rc : buf_puts(&t->host, t->region);
		rc = rc ? rc : buf_puts(&t->host, ".amazonaws.com");
	}

	rc = rc ? rc : buf_puts(&t->path, u->base_path);
	if (has_bucket && !virtual) {
		rc = rc ? rc : buf_putc(&t->path, '/');
		rc = rc ? rc : sv4_uri_encode(bucket, strlen(bucket), false, &t->path);
	}
	/* Path style names a bucket as "/bucket", as the SDKs send it. */
	bool has_key = key && *key;
	if (has_key || virtual || !has_bucket)
		rc = rc ? rc : buf_putc(&t->path, '/');
	if (has_key)
		rc = rc ? rc : sv4_uri_encode(key, strlen(key), true, &t->path);

	rc = rc ? rc : buf_puts(&t->url, u->https ? "https://" : "http://");
	rc = rc ? rc : buf_append(&t->url, t->host.p, t->host.len);
	rc = rc ? rc : buf_append(&t->url, t->path.p, t->path.len);
	if (query && *query) {
		rc = rc ? rc : buf_putc(&t->url, '?');
		rc = rc ? rc : buf_puts(&t->url, query);
	}
	return rc;
}

int upstream_sign(struct upstream *u, const char *method, const struct up_target *t,
                  const char *query, struct hdrs *h)
{
	struct creds c;
	creds_provider_get(u->creds, &c);
	char amz_date[17];
	sv4_amz_date(time(NULL), amz_date);
	int rc = hdrs_add(h, "X-Amz-Date", amz_date);
	if (rc == 0 && c.session_token[0])
		rc = hdrs_add(h, "X-Amz-Security-Token", c.session_token);
	if (rc)
		return rc;

	struct sv4_header *sh = calloc(h->n, sizeof *sh);
	if (!sh)
		return -ENOMEM;
	for (size_t i = 0; i < h->n; i++) {
		sh[i].name = h->v[i].name;
		sh[i].value = h->v[i].value;
	}
	struct sv4_request req = {
		.method = method,
		.path = buf_cstr(&t->path),
		.query = query ? query : "",
		.headers = sh,
		.n_headers = h->n,
	};
	struct sv4_creds sc = { c.access_key, c.secret_key, c.session_token };
	struct buf authz;
	buf_init(&authz, 8192);
	rc = sv4_sign(&req, &sc, t->region, "s3", &authz);
	free(sh);
	if (rc == 0)
		rc = hdrs_add(h, "Authorization", buf_cstr(&authz));
	buf_fini(&authz);
	explicit_bzero(&c, sizeof c);
	return rc;
}

struct curl_slist *hdrs_to_curl(const struct hdrs *h)
{
	struct curl_slist *list = NULL, *s;
	struct buf line;
	buf_init(&line, 64 * 1024);
	bool has_accept = false, ok = true;
	for (size_t i = 0; i < h->n && ok; i++) {
		buf_reset(&line);
		has_accept |= strcasecmp(h->v[i].name, "Accept") == 0;
		/* "Name;" is curl's form for a header with an empty value. */
		ok = buf_puts(&line, h->v[i].name) == 0 &&
		     (h->v[i].value[0] ? buf_append(&line, ": ", 2) == 0 &&
		                         buf_puts(&line, h->v[i].value) == 0
		                       : buf_putc(&line, ';') == 0) &&
		     (s = curl_slist_append(list, buf_cstr(&line))) != NULL;
		if (ok)
			list = s;
	}
	if (ok && (s = curl_slist_append(list, "Expect:")) != NULL)
		list = s;
	else
		ok = false;
	if (ok && !has_accept) {
		if ((s = curl_slist_append(list, "Accept:")) != NULL)
			list = s;
		else
			ok = false;
	}
	buf_fini(&line);
	if (!ok) {
		curl_slist_free_all(list);
		return NULL;
	}
	return list;
}

void upstream_curl_defaults(const struct upstream *u, CURL *e)
{
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	/* A transfer dropped during its name lookup (its client left, the stop)
	 * forgets the resolver thread rather than joining it: joining held the
	 * worker's loop, every client on it, until a hung lookup gave up. */
	curl_easy_setopt(e, CURLOPT_QUICK_EXIT, 1L);
	/* S3 keys are opaque: "a/./b" and "a/../b" are keys, not paths to tidy. */
	curl_easy_setopt(e, CURLOPT_PATH_AS_IS, 1L);
	curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
	curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(e, CURLOPT_BUFFERSIZE, 64L * 1024);
	curl_easy_setopt(e, CURLOPT_UPLOAD_BUFFERSIZE, 64L * 1024);
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT, (long)upstream_timeout_s(u));
	/* A stalled upstream (no byte for the timeout) fails the transfer. */
	curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, (long)upstream_timeout_s(u));
	/* S3 speaks TLS 1.2 and up: anything older is a downgrade, whatever
	 * the system's OpenSSL configuration would allow. */
	curl_easy_setopt(e, CURLOPT_SSLVERSION, (long)CURL_SSLVERSION_TLSv1_2);
	curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, upstream_tls_verify(u) ? 1L : 0L);
	curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, upstream_tls_verify(u) ? 2L : 0L);
	if (upstream_ca_file(u))
		curl_easy_setopt(e, CURLOPT_CAINFO, upstream_ca_file(u));
}

int upstream_prepare(struct upstream *u, struct transfer *t, const struct up_request *rq,
                     struct up_target *target)
{
	struct hdrs *h = rq->headers;
	const char *query = rq->query ? rq->query : "";
	int rc = upstream_target(u, rq->bucket, rq->key, query, target);
	rc = rc ? rc : hdrs_add(h, "Host", buf_cstr(&target->host));
	rc = rc ? rc : hdrs_add(h, "X-Amz-Content-SHA256", rq->payload_hash);
	rc = rc ? rc : upstream_sign(u, rq->method, target, query, h);
	struct curl_slist *list = NULL;
	if (!rc && !(list = hdrs_to_curl(h)))
		rc = -ENOMEM;
	rc = rc ? rc : transfer_prepare(t, buf_cstr(&target->url), list);
	if (rc)
		return rc;
	CURL *e = t->easy;
	upstream_curl_defaults(u, e);
	if (strcmp(rq->method, "HEAD") == 0) {
		curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
	} else if (rq->upload) {
		/* Any method with a body: curl's upload machinery, method named. */
		curl_easy_setopt(e, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(e, CURLOPT_INFILESIZE_LARGE, (curl_off_t)rq->upload_len);
		if (strcmp(rq->method, "PUT") != 0)
			curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, rq->method);
	} else if (strcmp(rq->method, "GET") != 0) {
		curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, rq->method);
	}
	/* S3 sends a GET's answer as fast as the network goes, once it starts:
	 * one slower than the floor for the timeout fails (a fetch then goes
	 * on from the bytes it has, as after a drop), rather than hold its
	 * slots and readers for as long as it trickles. Not a request with a
	 * body, nor one S3 may answer slowly on purpose (a copy or a multipart
	 * completion sends spaces while it works). libcurl (7.75 on) does not
	 * judge a transfer while it is paused, and starts over when it is
	 * unpaused: a pass-through held back by a slow client is not cut. */
	if (!rq->upload && strcmp(rq->method, "GET") == 0)
		curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, u->min_speed);
	return 0;
}

enum transfer_verdict upstream_region_check(struct upstream *u, const char *bucket,
                                            const struct transfer *t)
{
	const char *br = transfer_header(t, "x-amz-bucket-region");
	bool moved = br && bucket && upstream_learn_region(u, bucket, br);
	return moved && (t->status == 301 || t->status == 400) && t->resends == 0 ? TRANSFER_RESEND
	                                                                           : TRANSFER_GO;
}

bool upstream_retryable(long status)
{
	return status == 0 || status == 500 || status == 502 || status == 503 || status == 504;
}

struct transfer_retry upstream_retry_policy(const struct upstream *u)
{
	return (struct transfer_retry){ .max = u->retries, .base_s = 0.2, .cap_s = 2.0 };
}

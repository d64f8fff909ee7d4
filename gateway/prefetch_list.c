/*
 * prefetch_list.c - the upstream requests of a warming job that are not
 * object reads: the ListObjectsV2 pages (or the manifest object) that give
 * a job its keys, with their XML and line parsing, and the one-off bucket
 * check and small object read the admin thread makes (prefetch.h). The
 * jobs themselves are prefetch.c's (prefetch_internal.h).
 */
#include "gateway/prefetch.h"
#include "gateway/prefetch_internal.h"

#include <assert.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth/sigv4.h"
#include "base/clock.h"
#include "base/log.h"
#include "gateway/listxml.h"
#include "gateway/metrics.h"
#include "gateway/server.h"
#include "gateway/upstream.h"

/* ---- listing and manifest transfers ------------------------------------- */

static enum transfer_verdict on_list_headers(struct transfer *t, void *arg)
{
	struct pf_job *j = arg;
	assert(j->magic == PREFETCH_MAGIC);
	return upstream_region_check(j->p->gw->up, j->bucket, t);
}

/* An error answer's body is never read: its status is all a job or the
 * admin tells (list_done, prefetch_read_object), and one endless, or
 * trickled, would hold the job's page (or the admin thread). */
static bool error_body(const struct transfer *t)
{
	return t->status != 200;
}

/* A transfer ended because its error body was refused (error_body): the
 * answer was heard whole, as far as anyone reads it. */
static CURLcode heard(const struct transfer *t, CURLcode result)
{
	return result == CURLE_WRITE_ERROR && error_body(t) ? CURLE_OK : result;
}

static size_t on_list_body(struct transfer *t, void *arg, const char *data, size_t len)
{
	struct pf_job *j = arg;
	assert(j->magic == PREFETCH_MAGIC);
	if (error_body(t))
		return 0;
	return buf_append(&j->body, data, len) == 0 ? len : 0;
}

int pf_start_listing(struct pf_job *j)
{
	struct gw *gw = j->p->gw;
	struct buf q;
	buf_init(&q, 16384);
	const char *key = NULL;
	int rc = 0;
	if (j->manifest) {
		key = j->manifest;
	} else {
		rc = buf_puts(&q, "list-type=2&prefix=");
		rc = rc ? rc : sv4_uri_encode(j->prefix, strlen(j->prefix), false, &q);
		if (j->token) {
			rc = rc ? rc : buf_puts(&q, "&continuation-token=");
			rc = rc ? rc : sv4_uri_encode(j->token, strlen(j->token), false, &q);
		}
	}
	struct hdrs h;
	hdrs_init(&h);
	struct up_request rq = {
		.method = "GET", .bucket = j->bucket, .key = key, .query = buf_cstr(&q),
		.payload_hash = SV4_EMPTY_SHA256, .headers = &h,
	};
	rc = rc ? rc : upstream_prepare(gw->up, &j->x, &rq, &j->target);
	hdrs_fini(&h);
	buf_fini(&q);
	buf_reset(&j->body);
	if (rc)
		return rc;
	j->slot_wait = true;
	pf_list_step(j);
	return 0;
}

/* A background request (gateway/shaper.h): after the demand reads of its
 * prefix (the listing's, or the manifest's key), and never given up on. */
void pf_list_step(struct pf_job *j)
{
	if (!j->slot_wait)
		return;
	const char *key = j->manifest ? j->manifest : j->prefix;
	if (shaper_acquire(j->p->gw->shaper, &j->slot, j->bucket, key, clock_mono_s()) !=
	    SHAPER_GO)
		return; /* the next tick asks again */
	j->slot_wait = false;
	if (transfer_submit(&j->x) != 0) {
		shaper_cancel(j->p->gw->shaper, &j->slot);
		pf_job_fail(j, "cannot start listing upstream");
		atomic_store(&j->listing_done, true);
	}
}

/* A listing asks for its next page only while fewer than a page of keys
 * wait to be taken, so a job holds about two pages of keys, never a whole
 * prefix of millions of objects (taken keys give their room back). A listed
 * pin is the exception: it is refused up front unless its whole size fits
 * (prefetch.c, pin_fits), so it lists to the end before it warms. */
void pf_list_more(struct pf_job *j)
{
	j->list_paused = !j->pin && atomic_load(&j->n_keys) - j->next_key >= PF_LIST_AHEAD;
	if (!j->list_paused && pf_start_listing(j) != 0)
		pf_job_fail(j, "cannot list the next page");
}

void pf_list_stop(struct pf_job *j)
{
	transfer_stop(&j->x);
	shaper_cancel(j->p->gw->shaper, &j->slot);
	j->slot_wait = false;
}

static int list_restart(struct transfer *t, void *arg)
{
	struct pf_job *j = arg;
	assert(j->magic == PREFETCH_MAGIC);
	(void)t;
	return pf_start_listing(j);
}

/*
 * Whether token, the next page's, was given before: a listing that would
 * go round for ever, adding the same keys again. Brent's cycle finding:
 * each token is compared with the one kept, which moves to the latest
 * whenever the page count reaches a power of two, so a loop of any length
 * is caught within a few times its length, in constant memory.
 */
static bool token_loops(struct pf_job *j, const char *token)
{
	if (j->token_seen && strcmp(token, j->token_seen) == 0)
		return true;
	if (++j->pages >= 2 * j->pages_seen) {
		char *t = strdup(token);
		if (t) {
			free(j->token_seen);
			j->token_seen = t;
			j->pages_seen = j->pages;
		}
	}
	return false;
}

static int add_listed(void *arg, const char *key, uint64_t size)
{
	return pf_add_key(arg, key, size);
}

static void parse_listing(struct pf_job *j)
{
	struct listxml_page pg;
	int rc = listxml_parse(j->body.p, j->body.len, add_listed, j, &pg);
	if (rc == -ENOMEM) {
		pf_job_fail(j, "out of memory");
	} else if (rc != 0) {
		char msg[200];
		snprintf(msg, sizeof msg, "ListObjectsV2 answer not understood: %s", pg.xml_error);
		pf_job_fail(j, msg);
	} else if (pg.truncated && (!pg.token || !*pg.token)) {
		pf_job_fail(j, "ListObjectsV2 answer not understood: a truncated page without a "
		            "NextContinuationToken, so the rest of the prefix cannot be listed");
	} else if (pg.truncated && token_loops(j, pg.token)) {
		pf_job_fail(j, "ListObjectsV2 answer not understood: upstream gave a continuation "
		            "token it gave before, so the listing would never end");
	} else if (pg.truncated) {
		free(j->token);
		j->token = pg.token;
		pg.token = NULL;
		pf_list_more(j);
	} else {
		atomic_store(&j->listing_done, true);
	}
	listxml_page_fini(&pg);
}

static void parse_manifest(struct pf_job *j)
{
	char *s = j->body.p ? j->body.p : (char *)"";
	while (*s) {
		size_t len = strcspn(s, "\n");
		char *line = strndup(s, len);
		if (!line) {
			pf_job_fail(j, "out of memory");
			return;
		}
		size_t l = strlen(line);
		if (l && line[l - 1] == '\r') /* a key is the line as written, CRLF or LF */
			line[--l] = '\0';
		if (l && pf_add_key(j, line, 0) != 0)
			pf_job_fail(j, "out of memory");
		free(line);
		s += len;
		if (*s == '\n')
			s++;
	}
	atomic_store(&j->listing_done, true);
}

static void list_done(struct transfer *t, void *arg, CURLcode result)
{
	struct pf_job *j = arg;
	assert(j->magic == PREFETCH_MAGIC && t == &j->x);
	shaper_release(j->p->gw->shaper, &j->slot, t->status, clock_mono_s());
	result = heard(t, result);
	if (atomic_load(&j->cancel)) {
		atomic_store(&j->listing_done, true);
		return;
	}
	if ((result != CURLE_OK || upstream_retryable(t->status)) && transfer_retry_later(t) >= 0)
		return; /* a transient failure: the page is asked for again */
	if (result != CURLE_OK || t->status != 200) {
		char what[160];
		snprintf(what, sizeof what, "%s: upstream answered %ld%s%s",
		         j->manifest ? "reading the manifest" : "listing the bucket", t->status,
		         result != CURLE_OK ? ", " : "",
		         result != CURLE_OK ? curl_easy_strerror(result) : "");
		pf_job_fail(j, what);
		atomic_store(&j->listing_done, true);
		return;
	}
	t->retries = 0; /* each page has the policy's retries */
	if (j->manifest)
		parse_manifest(j);
	else
		parse_listing(j);
}

const struct transfer_ops pf_list_ops = {
	.headers = on_list_headers,
	.body = on_list_body,
	.restart = list_restart,
	.done = list_done,
};

/* ---- the bucket check and one-off reads ------------------------------- */

/* The HEAD of prefetch_check_bucket (or the GET of prefetch_read_object),
 * built again when S3 names the bucket's region. */
struct bucket_check {
	unsigned magic;
	struct gw *gw;
	struct upstream *up;
	const char *bucket;
	const char *key;             /* NULL: the bucket */
	struct buf *body;            /* the object's bytes go here */
	struct up_target target;
};
#define CHECK_MAGIC 0x70636b62u

/* curl's progress hook on an admin thread's blocking request: at the stop
 * it gives up, so the listener can end without waiting out the upstream
 * timeout. */
static int check_progress(struct transfer *t, void *arg)
{
	struct bucket_check *bc = arg;
	assert(bc->magic == CHECK_MAGIC);
	(void)t;
	return atomic_load(&bc->gw->stopping) ? 1 : 0;
}

static int check_prepare(struct transfer *t, void *arg)
{
	struct bucket_check *bc = arg;
	assert(bc->magic == CHECK_MAGIC);
	struct hdrs h;
	hdrs_init(&h);
	struct up_request rq = {
		.method = bc->key ? "GET" : "HEAD", .bucket = bc->bucket, .key = bc->key, .query = "",
		.payload_hash = SV4_EMPTY_SHA256, .headers = &h,
	};
	int rc = upstream_prepare(bc->up, t, &rq, &bc->target);
	hdrs_fini(&h);
	return rc;
}

static enum transfer_verdict check_headers(struct transfer *t, void *arg)
{
	struct bucket_check *bc = arg;
	assert(bc->magic == CHECK_MAGIC);
	return upstream_region_check(bc->up, bc->bucket, t);
}

static size_t check_body(struct transfer *t, void *arg, const char *data, size_t len)
{
	struct bucket_check *bc = arg;
	assert(bc->magic == CHECK_MAGIC);
	if (error_body(t))
		return 0;
	if (!bc->body)
		return len;
	return buf_append(bc->body, data, len) == 0 ? len : 0;
}

static const struct transfer_ops check_ops = {
	.headers = check_headers,
	.body = check_body,
	.progress = check_progress,
	.restart = check_prepare,
};

/* A blocking request to upstream, counted as the worker loops count theirs
 * (no curlev sees it). */
static CURLcode perform_counted(struct transfer *t)
{
	CURLcode rc = heard(t, transfer_perform(t));
	metrics_upstream_curl(t->easy, t->status, rc, false, false);
	return rc;
}

int prefetch_check_bucket(struct gw *gw, const char *bucket, char *err, size_t errlen)
{
	struct bucket_check bc = { .magic = CHECK_MAGIC, .gw = gw, .up = gw->up, .bucket = bucket };
	struct transfer t;
	transfer_init(&t, &check_ops, &bc, NULL, NULL);
	up_target_init(&bc.target);
	long status = 0;
	int rc = check_prepare(&t, &bc);
	if (!rc && perform_counted(&t) != CURLE_OK)
		rc = -EIO;
	status = t.status;
	if (rc == -EIO)
		snprintf(err, errlen, "upstream unreachable: %s", t.err);
	else if (rc)
		snprintf(err, errlen, "cannot ask upstream about bucket %s", bucket);
	else if (status == 403)
		snprintf(err, errlen, "larder's upstream credentials may not read bucket %s", bucket);
	else if (status == 404)
		snprintf(err, errlen, "bucket %s does not exist upstream", bucket);
	else if (status != 200)
		snprintf(err, errlen, "upstream answered %ld for bucket %s", status, bucket);
	transfer_fini(&t);
	up_target_fini(&bc.target);
	if (rc == 0 && status == 200)
		return 0;
	/* S3's refusals are the bucket's; anything else is upstream's trouble,
	 * which a retry may get past (503: S3 said so, SlowDown). */
	return rc == 0 && (status == 403 || status == 404) ? (int)status
	       : rc == 0 && status == 503                   ? 503
	                                                    : 502;
}

int prefetch_read_object(struct gw *gw, const char *bucket, const char *key, struct buf *body,
                         char *err, size_t errlen)
{
	struct bucket_check bc = { .magic = CHECK_MAGIC, .gw = gw, .up = gw->up, .bucket = bucket,
		                   .key = key, .body = body };
	struct transfer t;
	transfer_init(&t, &check_ops, &bc, NULL, NULL);
	up_target_init(&bc.target);
	int rc = check_prepare(&t, &bc);
	if (!rc && perform_counted(&t) != CURLE_OK)
		rc = -EIO;
	long status = t.status;
	if (rc == -EIO)
		snprintf(err, errlen, "reading %s/%s: upstream unreachable or the object too large: %s",
		         bucket, key, t.err);
	else if (rc)
		snprintf(err, errlen, "cannot ask upstream for %s/%s", bucket, key);
	else if (status != 200)
		snprintf(err, errlen, "reading %s/%s: upstream answered %ld", bucket, key, status);
	transfer_fini(&t);
	up_target_fini(&bc.target);
	return rc == 0 && status == 200 ? 0 : -1;
}

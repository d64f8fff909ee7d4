/*
 * creds.c - the upstream credentials chain (env, shared files, web
 * identity, container, IMDSv2) and the thread that keeps temporary
 * credentials fresh.
 *
 * The order and the environment variables follow the AWS SDKs' default
 * chain (see "Standardized credential providers" in the AWS SDKs and Tools
 * Reference Guide). Each provider lives in its own file behind
 * creds_provider.h and answers SRC_OK, SRC_NOT_SET or a negative errno; a
 * negative answer stops the chain with an error, so a broken explicit
 * setting never silently falls through to a different identity (botocore
 * and the Go SDK behave the same way). IMDS is the exception: it is never
 * configured explicitly, so its failure only means "nothing found".
 *
 * Secrets (secret keys, session tokens, web identity and container
 * authorization tokens) are never logged; key ids are logged masked.
 */
#include "auth/creds.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "auth/creds_provider.h"
#include "base/buf.h"
#include "base/clock.h"
#include "base/log.h"

#define CREDS_MAGIC 0x63726473u /* "crds" */

/* Refresh retry schedule: 1 s doubling to 60 s. */
#define RETRY_MIN_S 1
#define RETRY_MAX_S 60

enum source {
	SOURCE_ENV,
	SOURCE_PROFILE,
	SOURCE_WEB_IDENTITY,
	SOURCE_CONTAINER,
	SOURCE_IMDS,
	SOURCE_COUNT
};

static const char *const source_names[SOURCE_COUNT] = {
	"env", "profile", "web-identity", "container", "imds",
};

struct creds_provider {
	unsigned magic;
	enum source src;
	unsigned margin_s;
	struct env_copy env;
	char *region;

	pthread_mutex_t lock;
	pthread_cond_t wake;  /* CLOCK_MONOTONIC */
	struct creds cur;     /* under lock */
	atomic_bool stop;
	atomic_ulong refreshes;
	bool thread_started;
	pthread_t thread;
};

/* "ASIAXXXXXXXXEXAMPLE" -> "ASIA...MPLE": enough to tell keys apart. */
static void mask_key(const char *key, char *out, size_t n)
{
	size_t len = strlen(key);
	if (len <= 8)
		snprintf(out, n, "%.2s...", key);
	else
		snprintf(out, n, "%.4s...%s", key, key + len - 4);
}

/* ---- the copied environment ------------------------------------------ */

extern char **environ;

static bool env_wanted(const char *kv)
{
	return strncmp(kv, "AWS_", 4) == 0 || strncmp(kv, "HOME=", 5) == 0;
}

static int env_copy_init(struct env_copy *e, const char *const *envp)
{
	const char *const *src = envp ? envp : (const char *const *)environ;
	size_t n = 0;
	e->v = NULL;
	e->n = 0;
	for (size_t i = 0; src && src[i]; i++)
		if (env_wanted(src[i]))
			n++;
	e->v = calloc(n + 1, sizeof *e->v);
	if (!e->v)
		return -ENOMEM;
	for (size_t i = 0; src && src[i]; i++) {
		if (!env_wanted(src[i]))
			continue;
		e->v[e->n] = strdup(src[i]);
		if (!e->v[e->n])
			return -ENOMEM;
		e->n++;
	}
	return 0;
}

static void env_copy_fini(struct env_copy *e)
{
	for (size_t i = 0; i < e->n; i++) {
		explicit_bzero(e->v[i], strlen(e->v[i]));
		free(e->v[i]);
	}
	free(e->v);
	e->v = NULL;
	e->n = 0;
}

/* ---- the chain ------------------------------------------------------ */

static const source_fn source_fns[SOURCE_COUNT] = {
	creds_src_env, creds_src_profile, creds_src_web_identity, creds_src_container, creds_src_imds,
};

static int64_t mono_ms(void)
{
	return (int64_t)clock_mono_ms();
}

/*
 * How long to wait before the next refresh of credentials that expire at
 * exp: until exp - margin. Inside the margin already (the source hands out
 * short-lived credentials), fall back to the retry schedule instead of
 * asking again at once.
 */
static unsigned next_delay(time_t exp, unsigned margin, unsigned *backoff, time_t *due_wall)
{
	time_t now = time(NULL);
	long long d = (long long)exp - margin - now;
	*due_wall = 0;
	if (d >= 1) {
		*backoff = RETRY_MIN_S;
		*due_wall = exp - (time_t)margin;
		return d > 24 * 3600 ? 24 * 3600 : (unsigned)d;
	}
	unsigned b = *backoff;
	*backoff = b * 2 > RETRY_MAX_S ? RETRY_MAX_S : b * 2;
	return b;
}

/*
 * When a refresh scheduled for the wall-clock time due_wall (0: none, a
 * retry) is due, in mono_ms() terms, given the wait planned at mono_due.
 * The delay was counted on the monotonic clock, but an expiry is a time of
 * day (the issuer's): when the wall clock steps forward (NTP correcting a
 * clock that ran behind), the credentials expire sooner than planned, and
 * the refresh comes forward with them. A step back leaves the plan alone.
 */
static int64_t refresh_due(int64_t mono_due, time_t due_wall, int64_t now)
{
	if (!due_wall)
		return mono_due;
	long long left = (long long)due_wall - (long long)time(NULL);
	int64_t by_wall = now + (left > 0 ? left * 1000LL : 0);
	return by_wall < mono_due ? by_wall : mono_due;
}

/* How long to sleep before looking at the clocks again: a step of the wall
 * clock is seen within an eighth of the wait left, and within a minute. */
static int64_t recheck_ms(int64_t left)
{
	int64_t slice = left / 8;
	slice = slice < 1000 ? 1000 : slice > 60000 ? 60000 : slice;
	return left < slice ? left : slice;
}

static void *refresh_main(void *arg)
{
	struct creds_provider *p = arg;
	assert(p->magic == CREDS_MAGIC);
	pthread_setname_np(pthread_self(), "larder-creds");
	struct src_ctx x = { .env = &p->env, .region = p->region, .stop = &p->stop };
	struct creds nc;
	char why[512];
	unsigned backoff = RETRY_MIN_S;

	pthread_mutex_lock(&p->lock);
	time_t due_wall; /* the time of day it is due by the expiry; 0: a retry */
	int64_t due = mono_ms() + 1000LL * next_delay(p->cur.expiration, p->margin_s, &backoff,
	                                              &due_wall);
	while (!atomic_load(&p->stop)) {
		int64_t now = mono_ms();
		due = refresh_due(due, due_wall, now);
		if (now < due) {
			struct timespec ts;
			clock_gettime(CLOCK_MONOTONIC, &ts);
			int64_t left = recheck_ms(due - now);
			ts.tv_sec += left / 1000;
			ts.tv_nsec += (left % 1000) * 1000000;
			if (ts.tv_nsec >= 1000000000) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000;
			}
			pthread_cond_timedwait(&p->wake, &p->lock, &ts);
			continue;
		}
		pthread_mutex_unlock(&p->lock);

		why[0] = '\0';
		int rc = source_fns[p->src](&x, &nc, why, sizeof why);

		pthread_mutex_lock(&p->lock);
		if (atomic_load(&p->stop))
			break;
		if (rc == SRC_OK) {
			char masked[32];
			mask_key(nc.access_key, masked, sizeof masked);
			p->cur = nc;
			atomic_fetch_add(&p->refreshes, 1);
			if (nc.expiration == 0) {
				log_info(TOPIC, "refreshed %s credentials %s; they do not expire", source_names[p->src],
				         masked);
				break;
			}
			unsigned d = next_delay(nc.expiration, p->margin_s, &backoff, &due_wall);
			log_info(TOPIC, "refreshed %s credentials %s, next refresh in %us", source_names[p->src],
			         masked, d);
			due = mono_ms() + 1000LL * d;
		} else {
			if (rc == SRC_NOT_SET)
				snprintf(why, sizeof why, "the source is no longer configured");
			long long left = (long long)p->cur.expiration - time(NULL);
			unsigned d = backoff;
			backoff = backoff * 2 > RETRY_MAX_S ? RETRY_MAX_S : backoff * 2;
			if (left > 0)
				log_warn(TOPIC, "refresh from %s failed: %s; current credentials expire in %llds, "
				         "retrying in %us", source_names[p->src], why, left, d);
			else
				log_error(TOPIC, "refresh from %s failed: %s; current credentials have EXPIRED, "
				          "retrying in %us", source_names[p->src], why, d);
			due = mono_ms() + 1000LL * d;
			due_wall = 0;
		}
		creds_wipe(&nc);
	}
	pthread_mutex_unlock(&p->lock);
	creds_wipe(&nc);
	return NULL;
}

static void provider_free(struct creds_provider *p)
{
	env_copy_fini(&p->env);
	free(p->region);
	pthread_cond_destroy(&p->wake);
	pthread_mutex_destroy(&p->lock);
	creds_wipe(&p->cur);
	p->magic = 0;
	free(p);
	curl_global_cleanup();
}

/* The first source that yields credentials into *out (its index in *s),
 * or an error in err: why the configured source failed, or why each was
 * passed over. SRC_OK, else -1. */
static int run_chain(const struct src_ctx *x, struct creds *out, enum source *s, char *err,
                     size_t errlen)
{
	struct buf notes; /* why each source was passed over, for the final error */
	buf_init(&notes, 1024);
	char why[512];
	int rc = SRC_NOT_SET;
	for (*s = 0; *s < SOURCE_COUNT; (*s)++) {
		why[0] = '\0';
		rc = source_fns[*s](x, out, why, sizeof why);
		if (rc < 0 && *s == SOURCE_IMDS)
			rc = SRC_NOT_SET; /* no IMDS is the normal case off EC2 */
		if (rc == SRC_OK || rc < 0)
			break;
		if (why[0])
			buf_printf(&notes, "; %s", why);
	}
	if (rc < 0) {
		creds_seterr(err, errlen, "%s credentials: %s", source_names[*s], why);
	} else if (rc != SRC_OK) {
		creds_seterr(err, errlen,
		             "no AWS credentials found (tried environment, shared credentials/config files, web "
		             "identity, container, EC2 instance metadata%s)%s",
		             creds_env_true(x->env, "AWS_EC2_METADATA_DISABLED") ? " [disabled]" : "",
		             buf_cstr(&notes));
	}
	buf_fini(&notes);
	return rc == SRC_OK ? SRC_OK : -1;
}

int creds_check(const char *const *envp, const char *region, char *err, size_t errlen)
{
	if (err && errlen)
		err[0] = '\0';
	struct env_copy env;
	if (env_copy_init(&env, envp) != 0) {
		env_copy_fini(&env);
		creds_seterr(err, errlen, "out of memory");
		return -1;
	}
	struct src_ctx x = { .env = &env, .region = region, .offline = true };
	struct creds c = { 0 };
	enum source s;
	int rc = run_chain(&x, &c, &s, err, errlen);
	creds_wipe(&c);
	env_copy_fini(&env);
	return rc == SRC_OK ? 0 : -1;
}

struct creds_provider *creds_provider_create(const char *const *envp, const char *region,
                                             unsigned refresh_margin_s, char *err, size_t errlen)
{
	if (err && errlen)
		err[0] = '\0';
	/* Reference-counted, and thread-safe in the libcurl versions we need. */
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		creds_seterr(err, errlen, "curl_global_init() failed");
		return NULL;
	}
	struct creds_provider *p = calloc(1, sizeof *p);
	if (!p) {
		curl_global_cleanup();
		creds_seterr(err, errlen, "out of memory");
		return NULL;
	}
	p->magic = CREDS_MAGIC;
	p->margin_s = refresh_margin_s;
	pthread_mutex_init(&p->lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&p->wake, &ca);
	pthread_condattr_destroy(&ca);
	atomic_init(&p->stop, false);
	atomic_init(&p->refreshes, 0);
	if (env_copy_init(&p->env, envp) != 0 || (region && !(p->region = strdup(region)))) {
		creds_seterr(err, errlen, "out of memory");
		provider_free(p);
		return NULL;
	}

	struct src_ctx x = { .env = &p->env, .region = p->region, .stop = NULL };
	enum source s;
	if (run_chain(&x, &p->cur, &s, err, errlen) != SRC_OK) {
		provider_free(p);
		return NULL;
	}

	p->src = s;
	char masked[32];
	mask_key(p->cur.access_key, masked, sizeof masked);
	if (p->cur.expiration) {
		long long left = (long long)p->cur.expiration - time(NULL);
		log_info(TOPIC, "using %s credentials %s (expire in %llds)", source_names[s], masked, left);
		int e = pthread_create(&p->thread, NULL, refresh_main, p);
		if (e != 0) {
			creds_seterr(err, errlen, "pthread_create() failed: %s", strerror(e));
			provider_free(p);
			return NULL;
		}
		p->thread_started = true;
	} else {
		log_info(TOPIC, "using %s credentials %s", source_names[s], masked);
	}
	return p;
}

void creds_provider_get(struct creds_provider *p, struct creds *out)
{
	if (p->magic != CREDS_MAGIC)
		abort();
	pthread_mutex_lock(&p->lock);
	*out = p->cur;
	pthread_mutex_unlock(&p->lock);
}

const char *creds_provider_source(const struct creds_provider *p)
{
	return source_names[p->src];
}

unsigned long creds_provider_refreshes(const struct creds_provider *p)
{
	return atomic_load(&((struct creds_provider *)p)->refreshes);
}

void creds_provider_destroy(struct creds_provider *p)
{
	if (!p)
		return;
	if (p->magic != CREDS_MAGIC)
		abort();
	if (p->thread_started) {
		pthread_mutex_lock(&p->lock);
		atomic_store(&p->stop, true);
		pthread_cond_broadcast(&p->wake);
		pthread_mutex_unlock(&p->lock);
		pthread_join(p->thread, NULL);
	}
	provider_free(p);
}


/*
 * placement.c - directory lookups on a worker's loop (see placement.h).
 *
 * hiredis 0.14 has no command timeout in its async API, so each ask
 * carries its own ev_timer. An ask is freed by its reply callback, which
 * hiredis always runs (with a NULL reply when the connection goes), so a
 * cancelled or timed-out ask only has its cb cleared and waits for it.
 */
#include "cluster/placement.h"

#include <assert.h>
#include <hiredis/adapters/libev.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#include "base/clock.h"
#include "base/log.h"
#include "cluster/cluster.h"
#include "cluster/directory.h"

#define TOPIC "placement"
#define ASK_TIMEOUT_MS 100
#define RECONNECT_S 1.0
#define MAX_PENDING 1024   /* asks awaiting a reply on one connection */
#define TIMEOUTS_TO_DROP 8 /* in a row: the connection is stuck */
#define MAX_HOLDERS 64     /* ids of one reply looked at */

#define PLACEMENT_MAGIC 0x706c636du /* "plcm" */
#define ASK_MAGIC 0x7061736bu       /* "pask" */

struct placement {
	unsigned magic;
	struct ev_loop *loop;
	struct cluster *cl;
	redisAsyncContext *ac; /* connected or connecting; NULL: neither */
	double retry_at;       /* clock_mono_s() before which no connection is tried */
	unsigned pending;      /* asks whose reply is still to come */
	unsigned timeouts;     /* asks timed out in a row */
};

struct placement_ask {
	unsigned magic;
	struct placement *p;
	uint64_t key;
	placement_cb cb;       /* NULL once answered, timed out or cancelled */
	void *arg;
	ev_timer timer;
};

static atomic_ulong n_found, n_none, n_failed, n_skipped;
static atomic_bool refused_warned; /* an error reply logged, none answered since */

void placement_get_counts(struct placement_counts *out)
{
	out->found = atomic_load(&n_found);
	out->none = atomic_load(&n_none);
	out->failed = atomic_load(&n_failed);
	out->skipped = atomic_load(&n_skipped);
}

static void connect_now(struct placement *p);

struct placement *placement_create(struct ev_loop *loop, struct cluster *cl)
{
	struct placement *p = calloc(1, sizeof *p);
	if (p) {
		p->magic = PLACEMENT_MAGIC;
		p->loop = loop;
		p->cl = cl;
		connect_now(p); /* the loop is not running yet: no race with it */
	}
	return p;
}

void placement_destroy(struct placement *p)
{
	if (!p)
		return;
	if (p->ac)
		redisAsyncFree(p->ac); /* runs every pending reply callback */
	p->magic = 0;
	free(p);
}

static void lost(struct placement *p)
{
	p->ac = NULL;
	p->retry_at = clock_mono_s() + RECONNECT_S;
}

static void on_connect(const redisAsyncContext *ac, int status)
{
	struct placement *p = ac->data;
	assert(p->magic == PLACEMENT_MAGIC);
	if (status == REDIS_OK) {
		p->timeouts = 0;
		return;
	}
	/* hiredis frees the context after this callback. */
	log_debug(TOPIC, "redis connection failed: %s", ac->errstr);
	lost(p);
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
	struct placement *p = ac->data;
	assert(p->magic == PLACEMENT_MAGIC);
	if (status != REDIS_OK)
		log_debug(TOPIC, "redis connection lost: %s", ac->errstr);
	lost(p);
}

/* An error answer (a refused AUTH or SELECT, NOAUTH, LOADING): Redis keeps
 * the connection, and the lookups on it would fail for as long as it
 * lives. It is dropped: the next lookup after RECONNECT_S opens a new one,
 * which authenticates again. Logged once until a lookup is answered. */
static void refused(struct placement *p, redisAsyncContext *ac, const redisReply *r)
{
	if (!r || r->type != REDIS_REPLY_ERROR || p->ac != ac || (ac->c.flags & REDIS_DISCONNECTING))
		return;
	if (!atomic_exchange(&refused_warned, true))
		log_warn(TOPIC, "redis refused the directory lookups' connection (%.*s): reconnecting",
		         (int)(r->len < 200 ? r->len : 200), r->str);
	redisAsyncDisconnect(ac);
}

static void on_setup_reply(redisAsyncContext *ac, void *reply, void *priv)
{
	struct placement *p = priv;
	assert(p->magic == PLACEMENT_MAGIC);
	refused(p, ac, reply);
}

static void connect_now(struct placement *p)
{
	struct cluster_redis rs;
	cluster_redis_settings(p->cl, &rs);
	redisAsyncContext *ac = redisAsyncConnect(rs.host, rs.port);
	if (!ac || ac->err || redisLibevAttach(p->loop, ac) != REDIS_OK) {
		if (ac)
			redisAsyncFree(ac);
		p->retry_at = clock_mono_s() + RECONNECT_S;
		return;
	}
	ac->data = p;
	redisAsyncSetConnectCallback(ac, on_connect);
	redisAsyncSetDisconnectCallback(ac, on_disconnect);
	/* Queued: sent first once connected. A refusal drops the connection
	 * (refused); lookups already queued behind it answer "nobody". */
	if (rs.password[0] && rs.user[0])
		redisAsyncCommand(ac, on_setup_reply, p, "AUTH %s %s", rs.user, rs.password);
	else if (rs.password[0])
		redisAsyncCommand(ac, on_setup_reply, p, "AUTH %s", rs.password);
	if (rs.db)
		redisAsyncCommand(ac, on_setup_reply, p, "SELECT %d", rs.db);
	p->ac = ac;
}

static void answer(struct placement_ask *a, const char *addr)
{
	placement_cb cb = a->cb;
	a->cb = NULL;
	ev_timer_stop(a->p->loop, &a->timer);
	cb(a->arg, addr);
}

static void on_reply(redisAsyncContext *ac, void *reply, void *priv)
{
	struct placement_ask *a = priv;
	assert(a->magic == ASK_MAGIC);
	struct placement *p = a->p;
	redisReply *r = reply;
	p->pending--;
	if (a->cb) {
		char addr[CLUSTER_NAME_MAX];
		bool found = false;
		if (r && r->type == REDIS_REPLY_ARRAY) {
			const char *ids[MAX_HOLDERS];
			size_t lens[MAX_HOLDERS], n = 0;
			for (size_t i = 0; i < r->elements && n < MAX_HOLDERS; i++) {
				redisReply *e = r->element[i];
				if (e->type == REDIS_REPLY_STRING) {
					ids[n] = e->str;
					lens[n++] = e->len;
				}
			}
			found = cluster_pick_holder(p->cl, a->key, ids, lens, n, addr, sizeof addr);
			atomic_fetch_add(found ? &n_found : &n_none, 1);
			if (atomic_exchange(&refused_warned, false))
				log_info(TOPIC, "redis answers directory lookups again");
		} else {
			atomic_fetch_add(&n_failed, 1);
		}
		p->timeouts = 0;
		answer(a, found ? addr : NULL);
	}
	refused(p, ac, r);
	a->magic = 0;
	free(a);
}

static void on_timeout(struct ev_loop *loop, ev_timer *t, int revents)
{
	(void)loop;
	(void)revents;
	struct placement_ask *a = t->data;
	assert(a->magic == ASK_MAGIC);
	struct placement *p = a->p;
	atomic_fetch_add(&n_failed, 1);
	answer(a, NULL);
	if (++p->timeouts >= TIMEOUTS_TO_DROP && p->ac) {
		log_warn(TOPIC, "redis did not answer %u directory lookups in a row: reconnecting",
		         p->timeouts);
		redisAsyncContext *ac = p->ac;
		lost(p);
		redisAsyncFree(ac); /* frees the asks still waiting (a among them) */
	}
}

struct placement_ask *placement_ask(struct placement *p, uint64_t key, placement_cb cb,
                                    void *arg)
{
	if (!p || !cluster_has_peers(p->cl))
		return NULL;
	if (!p->ac && clock_mono_s() >= p->retry_at)
		connect_now(p);
	/* While connecting, the command waits in hiredis's buffer; the
	 * timer bounds the wait either way. */
	if (!p->ac || p->pending >= MAX_PENDING) {
		atomic_fetch_add(&n_skipped, 1);
		return NULL;
	}
	struct placement_ask *a = calloc(1, sizeof *a);
	if (!a)
		return NULL;
	a->magic = ASK_MAGIC;
	a->p = p;
	a->key = key;
	a->cb = cb;
	a->arg = arg;
	char name[DIR_KEY_MAX];
	dir_key_name(key, name);
	if (redisAsyncCommand(p->ac, on_reply, a, "SMEMBERS %s", name) != REDIS_OK) {
		free(a);
		atomic_fetch_add(&n_skipped, 1);
		return NULL;
	}
	p->pending++;
	ev_timer_init(&a->timer, on_timeout, ASK_TIMEOUT_MS / 1000.0, 0.);
	a->timer.data = a;
	ev_timer_start(p->loop, &a->timer);
	return a;
}

void placement_cancel(struct placement_ask *a)
{
	a->cb = NULL;
	ev_timer_stop(a->p->loop, &a->timer);
}

void placement_list(struct placement *p, uint64_t key, const char *self, unsigned ttl_ms)
{
	if (!p || !cluster_has_peers(p->cl))
		return;
	if (!p->ac && clock_mono_s() >= p->retry_at)
		connect_now(p);
	if (!p->ac || p->pending >= MAX_PENDING)
		return;
	char name[DIR_KEY_MAX];
	dir_key_name(key, name);
	/* An error answer drops the connection, as a lookup's does. */
	redisAsyncCommand(p->ac, on_setup_reply, p, "SADD %s %s", name, self);
	redisAsyncCommand(p->ac, on_setup_reply, p, "PEXPIRE %s %u", name, ttl_ms);
}

/*
 * cluster.c - the cluster's lifetime (configuration, start, leave, stop)
 * and the questions workers ask it (owner, holders, view, members); see
 * cluster.h. The rest lives beside it, behind cluster_internal.h:
 *   cluster_snapshot.c   the immutable member list ownership is read from
 *   cluster_heartbeat.c  membership: the heartbeat thread and the Redis keys
 *   cluster_trust.c      the cluster secret: signed entries, cluster_mac
 *   cluster_inval.c      invalidations: the publish queue, the subscriber
 *   cluster_barrier.c    the read barrier of a node the others may not count yet
 *   cluster_redis.c      opening Redis connections; losing and regaining Redis
 */
#include "cluster/cluster.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "cluster/cluster_internal.h"
#include "cluster/peer.h"
#include "cluster/rendezvous.h"

__attribute__((format(printf, 3, 4)))
static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;
	if (!err || !errlen)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

/* ---- configuration ---- */

/* redis://[[user]:password@]host[:port][/db]; host may be [v6 address]. */
static int parse_url(struct cluster *cl, const char *full, char *err, size_t errlen)
{
	const char *p = full;
	/* Errors quote the URL without its credentials. */
	const char *url = strrchr(full, '@') ? strrchr(full, '@') + 1 : full;
	if (strncmp(p, "redis://", 8) != 0) {
		set_err(err, errlen, "cluster: redis url %s: must start with redis://", url);
		return -1;
	}
	p += 8;
	const char *at = strrchr(p, '@');
	if (at) {
		const char *colon = memchr(p, ':', (size_t)(at - p));
		if (!colon || (size_t)(colon - p) >= sizeof cl->user ||
		    (size_t)(at - colon - 1) >= sizeof cl->password) {
			set_err(err, errlen, "cluster: redis url %s: credentials must be "
			        "[user]:password@", url);
			return -1;
		}
		memcpy(cl->user, p, (size_t)(colon - p));
		memcpy(cl->password, colon + 1, (size_t)(at - colon - 1));
		p = at + 1;
	}
	const char *hend;
	if (*p == '[') {
		hend = strchr(p, ']');
		if (!hend)
			goto bad;
		p++;
	} else {
		hend = p + strcspn(p, ":/");
	}
	if (hend == p || (size_t)(hend - p) >= sizeof cl->host)
		goto bad;
	memcpy(cl->host, p, (size_t)(hend - p));
	p = *hend == ']' ? hend + 1 : hend;
	cl->port = 6379;
	if (*p == ':') {
		char *end;
		long v = strtol(p + 1, &end, 10);
		if (end == p + 1 || v < 1 || v > 65535)
			goto bad;
		cl->port = (int)v;
		p = end;
	}
	if (*p == '/' && p[1]) {
		char *end;
		long v = strtol(p + 1, &end, 10);
		if (end == p + 1 || v < 0 || v > 1000000)
			goto bad;
		cl->db = (int)v;
		p = end;
	} else if (*p == '/') {
		p++;
	}
	if (*p == '\0')
		return 0;
bad:
	set_err(err, errlen, "cluster: bad redis url %s", url);
	return -1;
}

static void cluster_free(struct cluster *cl)
{
	while (cl->q_head) {
		struct inval *e = cl->q_head;
		cl->q_head = e->next;
		free(e);
	}
	cl_snap_unref(cl->snap);
	explicit_bzero(cl->secret, sizeof cl->secret);
	explicit_bzero(cl->password, sizeof cl->password);
	if (cl->wake[0] >= 0)
		close(cl->wake[0]);
	if (cl->wake[1] >= 0)
		close(cl->wake[1]);
	if (cl->bar_fd >= 0)
		close(cl->bar_fd);
	pthread_cond_destroy(&cl->cond);
	pthread_mutex_destroy(&cl->lock);
	pthread_mutex_destroy(&cl->avoid_lock);
	cl->magic = 0;
	free(cl);
}

/* The checks of cluster_start that need no Redis, but the URL's. */
static int check_config(const struct cluster_config *c, char *err, size_t errlen)
{
	if (!c->node_id || !cl_id_ok(c->node_id, strlen(c->node_id))) {
		set_err(err, errlen, "cluster: node id \"%s\" must be 1-127 printable characters "
		        "without spaces", c->node_id ? c->node_id : "");
		return -1;
	}
	if (!c->advertise || !cl_id_ok(c->advertise, strlen(c->advertise))) {
		set_err(err, errlen, "cluster: advertise address \"%s\" must be a host:port of "
		        "1-127 characters", c->advertise ? c->advertise : "");
		return -1;
	}
	if (!(c->capacity > 0) || !isfinite(c->capacity)) {
		set_err(err, errlen, "cluster: capacity of %s must be positive", c->node_id);
		return -1;
	}
	if (!c->secret || strlen(c->secret) < 16 || strlen(c->secret) > 256) {
		set_err(err, errlen, "cluster: the cluster secret (16-256 characters) is needed: it "
		        "signs membership entries");
		return -1;
	}
	unsigned hb = c->heartbeat_ms ? c->heartbeat_ms : 1000;
	unsigned ttl = c->ttl_ms ? c->ttl_ms : 5000;
	if (ttl <= hb || hb > 60000) {
		set_err(err, errlen, "cluster: ttl_ms must exceed heartbeat_ms (node %s), and a "
		        "heartbeat be at most a minute", c->node_id);
		return -1;
	}
	return 0;
}

int cluster_check(const struct cluster_config *c, char *err, size_t errlen)
{
	if (err && errlen)
		err[0] = '\0';
	if (!c->redis_url || !c->redis_url[0])
		return 0;
	if (check_config(c, err, errlen) < 0)
		return -1;
	struct cluster *cl = calloc(1, sizeof *cl);
	if (!cl) {
		set_err(err, errlen, "cluster: %s", "out of memory");
		return -1;
	}
	int rc = parse_url(cl, c->redis_url, err, errlen);
	explicit_bzero(cl->password, sizeof cl->password);
	free(cl);
	return rc;
}

struct cluster *cluster_start(const struct cluster_config *c, cluster_invalidate_cb cb,
                              void *arg, char *err, size_t errlen)
{
	if (err && errlen)
		err[0] = '\0';
	if (!c->redis_url || !c->redis_url[0])
		return NULL;
	if (check_config(c, err, errlen) < 0)
		return NULL;
	unsigned hb = c->heartbeat_ms ? c->heartbeat_ms : 1000;
	unsigned ttl = c->ttl_ms ? c->ttl_ms : 5000;

	struct cluster *cl = calloc(1, sizeof *cl);
	if (!cl) {
		set_err(err, errlen, "cluster: %s", "out of memory");
		return NULL;
	}
	cl->magic = CLUSTER_MAGIC;
	cl->wake[0] = cl->wake[1] = cl->bar_fd = -1;
	pthread_mutex_init(&cl->lock, NULL);
	pthread_mutex_init(&cl->avoid_lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&cl->cond, &ca);
	pthread_condattr_destroy(&ca);
	if (parse_url(cl, c->redis_url, err, errlen) < 0)
		goto fail;
	snprintf(cl->secret, sizeof cl->secret, "%s", c->secret);
	snprintf(cl->self.id, sizeof cl->self.id, "%s", c->node_id);
	snprintf(cl->self.addr, sizeof cl->self.addr, "%s", c->advertise);
	cl->self.protocol = CLUSTER_PROTOCOL;
	/* The capacity as peers will parse it, so everyone's weights match. */
	char capstr[40];
	snprintf(capstr, sizeof capstr, "%.17g", c->capacity);
	cl->self.cap = strtod(capstr, NULL);
	snprintf(cl->node_key, sizeof cl->node_key, NODE_PREFIX "%s", cl->self.id);
	snprintf(cl->node_val, sizeof cl->node_val, "%s\t%s", cl->self.addr, capstr);
	cl->heartbeat_ms = hb;
	cl->dir = c->dir;
	cl->ttl_ms = ttl;
	cl->cb = cb;
	cl->cb_arg = arg;
	cl->state = REDIS_UNKNOWN;
	cl->snap = cl_snap_alone(cl);
	if (!cl->snap) {
		set_err(err, errlen, "cluster: %s", "out of memory");
		goto fail;
	}
	if (pipe2(cl->wake, O_CLOEXEC) < 0) {
		set_err(err, errlen, "cluster: pipe() failed: %s", strerror(errno));
		goto fail;
	}
	cl->bar_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (cl->bar_fd < 0) {
		set_err(err, errlen, "cluster: eventfd() failed: %s", strerror(errno));
		goto fail;
	}
	/* A process before this one may have served any peer request dated
	 * up to now: they are refused from here on. Peers learn of this node
	 * at its first heartbeat, which waits for the next second. */
	peer_begin(time(NULL));
	log_info(TOPIC, "node %s (%s, capacity %s) using redis %s:%d", cl->self.id,
	         cl->self.addr, capstr, cl->host, cl->port);
	int e = pthread_create(&cl->hb_thread, NULL, cl_heartbeat_main, cl);
	if (e) {
		set_err(err, errlen, "cluster: pthread_create() failed: %s", strerror(e));
		goto fail;
	}
	e = pthread_create(&cl->sub_thread, NULL, cl_subscriber_main, cl);
	if (e) {
		set_err(err, errlen, "cluster: pthread_create() failed: %s", strerror(e));
		pthread_mutex_lock(&cl->lock);
		cl->stopping = true;
		pthread_cond_signal(&cl->cond);
		pthread_mutex_unlock(&cl->lock);
		pthread_join(cl->hb_thread, NULL);
		goto fail;
	}
	return cl;
fail:
	cluster_free(cl);
	return NULL;
}

void cluster_leave(struct cluster *cl)
{
	if (!cl)
		return;
	if (cl->magic != CLUSTER_MAGIC)
		abort();
	pthread_mutex_lock(&cl->lock);
	bool left = cl->left;
	cl->left = cl->stopping = true;
	pthread_cond_signal(&cl->cond);
	pthread_mutex_unlock(&cl->lock);
	if (left)
		return;
	char b = 1;
	while (write(cl->wake[1], &b, 1) < 0 && errno == EINTR)
		;
	pthread_join(cl->sub_thread, NULL);
	pthread_join(cl->hb_thread, NULL);
	struct snapshot *alone = cl_snap_alone(cl);
	pthread_mutex_lock(&cl->lock);
	cl->state = REDIS_DOWN;
	cl->subscribed = false;
	if (alone)
		cl_snap_install(cl, alone, false);
	pthread_mutex_unlock(&cl->lock);
}

void cluster_stop(struct cluster *cl)
{
	if (!cl)
		return;
	cluster_leave(cl);
	cluster_free(cl);
}

/* ---- queries ---- */

bool cluster_owner(struct cluster *cl, uint64_t key, char *addr, size_t addrlen)
{
	if (!cl)
		return false;
	struct snapshot *s = cl_snap_get(cl);
	size_t i = rdv_pick(s->hash, s->weight, s->n, key);
	bool other = i != SIZE_MAX && i != s->self;
	if (other && addr && addrlen)
		snprintf(addr, addrlen, "%s", s->m[i].addr);
	cl_snap_unref(s);
	return other;
}

bool cluster_has_peers(struct cluster *cl)
{
	if (!cl)
		return false;
	pthread_mutex_lock(&cl->lock);
	bool others = cl->snap->n > 1;
	pthread_mutex_unlock(&cl->lock);
	return others;
}

bool cluster_listening(struct cluster *cl)
{
	if (!cl)
		return true;
	pthread_mutex_lock(&cl->lock);
	bool on = cl->subscribed;
	pthread_mutex_unlock(&cl->lock);
	return on;
}

uint32_t cluster_member_tag(struct cluster *cl, const char *addr)
{
	if (!cl || !addr)
		return 0;
	struct snapshot *s = cl_snap_get(cl);
	uint32_t tag = 0;
	for (size_t i = 0; i < s->n && !tag; i++)
		if (strcmp(s->m[i].addr, addr) == 0)
			tag = cl_tag_of(s->hash[i]);
	cl_snap_unref(s);
	return tag;
}

bool cluster_avoid(struct cluster *cl, const char *addr, double now)
{
	if (!cl || !addr)
		return false;
	pthread_mutex_lock(&cl->avoid_lock);
	size_t slot = 0;
	bool fresh = true;
	for (size_t i = 0; i < CLUSTER_AVOID_MAX; i++) {
		if (strcmp(cl->avoided[i].addr, addr) == 0) {
			fresh = cl->avoided[i].until <= now;
			slot = i;
			break;
		}
		if (cl->avoided[i].until < cl->avoided[slot].until)
			slot = i; /* an empty or ended entry first, else the soonest to end */
	}
	snprintf(cl->avoided[slot].addr, sizeof cl->avoided[slot].addr, "%s", addr);
	cl->avoided[slot].until = now + CLUSTER_AVOID_S;
	unsigned n = 0;
	for (size_t i = 0; i < CLUSTER_AVOID_MAX; i++)
		n += cl->avoided[i].until > now;
	atomic_store(&cl->n_avoided, n);
	pthread_mutex_unlock(&cl->avoid_lock);
	return fresh;
}

double cluster_avoided(struct cluster *cl, const char *addr, double now)
{
	if (!cl || !addr || atomic_load_explicit(&cl->n_avoided, memory_order_relaxed) == 0)
		return 0;
	double left = 0;
	pthread_mutex_lock(&cl->avoid_lock);
	unsigned n = 0;
	for (size_t i = 0; i < CLUSTER_AVOID_MAX; i++) {
		if (cl->avoided[i].until <= now)
			continue;
		n++;
		if (strcmp(cl->avoided[i].addr, addr) == 0)
			left = cl->avoided[i].until - now;
	}
	atomic_store(&cl->n_avoided, n);
	pthread_mutex_unlock(&cl->avoid_lock);
	return left;
}

bool cluster_pick_holder(struct cluster *cl, uint64_t key, const char *const *ids,
                         const size_t *lens, size_t n, char *addr, size_t addrlen)
{
	if (!cl || !n)
		return false;
	struct snapshot *s = cl_snap_get(cl);
	/* Rendezvous over the members with the unlisted ones weighted 0 (never
	 * picked): the same ranking as ownership, restricted to holders. */
	double *w = calloc(s->n, sizeof *w);
	size_t best = SIZE_MAX;
	if (w) {
		for (size_t i = 0; i < s->n; i++) {
			size_t idlen = strlen(s->m[i].id);
			for (size_t j = 0; j < n && i != s->self && !w[i]; j++)
				if (lens[j] == idlen && memcmp(ids[j], s->m[i].id, idlen) == 0)
					w[i] = s->weight[i];
		}
		best = rdv_pick(s->hash, w, s->n, key);
		free(w);
	}
	if (best != SIZE_MAX && addr && addrlen)
		snprintf(addr, addrlen, "%s", s->m[best].addr);
	cl_snap_unref(s);
	return best != SIZE_MAX;
}

void cluster_redis_settings(struct cluster *cl, struct cluster_redis *out)
{
	memset(out, 0, sizeof *out);
	if (!cl)
		return;
	snprintf(out->host, sizeof out->host, "%s", cl->host);
	out->port = cl->port;
	snprintf(out->user, sizeof out->user, "%s", cl->user);
	snprintf(out->password, sizeof out->password, "%s", cl->password);
	out->db = cl->db;
}

void cluster_get_view(struct cluster *cl, struct cluster_view *out)
{
	memset(out, 0, sizeof *out);
	if (!cl) {
		out->members = 1;
		return;
	}
	pthread_mutex_lock(&cl->lock);
	out->redis_up = cl->state == REDIS_UP;
	out->subscribed = cl->subscribed;
	out->members = cl->snap->n;
	snprintf(out->self, sizeof out->self, "%s", cl->self.id);
	out->redis_reconnects = cl->reconnects;
	out->invalidations_sent = cl->sent;
	out->invalidations_received = cl->received;
	out->invalidations_rejected = cl->inval_rejected;
	out->invalidations_dropped = cl->dropped;
	out->invalidations_unacknowledged = cl->unacked;
	out->resyncs = cl->resyncs;
	out->read_barriers = cl->bar_waits;
	out->read_barriers_lapsed = cl->bar_lapsed;
	out->members_rejected = cl->rejected;
	out->heartbeats = cl->heartbeats;
	out->others = cl->others_total;
	out->clock_known = cl->clock_known;
	out->clock_offset_ms = cl->clock_offset_ms;
	for (size_t i = 0; i < cl->snap->n; i++)
		out->directory_entries += cl->snap->m[i].dir_entries;
	out->joining = cl_joining_locked(cl);
	pthread_mutex_unlock(&cl->lock);
}

size_t cluster_members(struct cluster *cl, char (*ids)[CLUSTER_NAME_MAX],
                       char (*addrs)[CLUSTER_NAME_MAX], double *caps, uint64_t *dir_entries,
                       size_t max)
{
	if (!cl)
		return 0;
	struct snapshot *s = cl_snap_get(cl);
	size_t n = s->n < max ? s->n : max;
	for (size_t i = 0; i < n; i++) {
		if (ids)
			memcpy(ids[i], s->m[i].id, CLUSTER_NAME_MAX);
		if (addrs)
			memcpy(addrs[i], s->m[i].addr, CLUSTER_NAME_MAX);
		if (caps)
			caps[i] = s->m[i].cap;
		if (dir_entries)
			dir_entries[i] = s->m[i].dir_entries;
	}
	cl_snap_unref(s);
	return n;
}

size_t cluster_others(struct cluster *cl, char (*ids)[CLUSTER_NAME_MAX],
                      char (*addrs)[CLUSTER_NAME_MAX], unsigned *protocols, size_t max)
{
	if (!cl)
		return 0;
	pthread_mutex_lock(&cl->lock);
	size_t n = cl->n_others < max ? cl->n_others : max;
	for (size_t i = 0; i < n; i++) {
		if (ids)
			memcpy(ids[i], cl->others[i].id, CLUSTER_NAME_MAX);
		if (addrs)
			memcpy(addrs[i], cl->others[i].addr, CLUSTER_NAME_MAX);
		if (protocols)
			protocols[i] = cl->others[i].protocol;
	}
	pthread_mutex_unlock(&cl->lock);
	return n;
}

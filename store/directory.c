/*
 * directory.c - this node's entries in the placement directory (see
 * directory.h).
 *
 * Two structures. The note queue (under d->lock) is where any thread says
 * "look at this chunk again"; it is what keeps dir_note cheap enough to
 * call under the store's locks. The published table (open addressing,
 * linear probing, removal by backward shift) is what this node has put in
 * Redis; only the flushing thread touches it, so it needs no lock. Every
 * decision is made at flush time by asking holds(), so notes can arrive in
 * any order, twice, or for chunks never published: the table and the
 * tiers agree again after the next flush whatever the interleaving.
 */
#include "store/directory.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "store/redis_util.h"

#define QUEUE_MAX 65536
#define SWEEP_MAX 8192 /* entries refreshed per flush at most */

struct note {
	uint64_t key, alias;
	struct chunk_id id;
};

struct pent {
	uint64_t key; /* 0: empty slot */
	uint64_t alias;
};

struct directory {
	struct dir_config cfg;

	pthread_mutex_t lock;
	struct note *q;           /* under lock */
	size_t qn, qcap;
	struct dir_stats st;      /* under lock */

	/* The flushing thread's own. */
	struct pent *tab;
	size_t cap, n;            /* cap: a power of two, or 0 */
	size_t cursor;            /* next slot the sweep refreshes */
	double last_ms;           /* when the sweep last ran */
	double owed;              /* refreshes due but not yet sent (fractional) */
	size_t resync_left;       /* entries still to refresh after a resync */
};

static double mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Key 0 marks an empty slot: fold it onto 1, everywhere keys are used. */
static uint64_t norm(uint64_t key)
{
	return key ? key : 1;
}

void dir_key_name(uint64_t key, char buf[DIR_KEY_MAX])
{
	snprintf(buf, DIR_KEY_MAX, DIR_KEY_PREFIX "%016" PRIx64, norm(key));
}

struct directory *dir_create(const struct dir_config *c)
{
	struct directory *d = calloc(1, sizeof *d);
	if (!d)
		return NULL;
	d->cfg = *c;
	if (!d->cfg.ttl_ms)
		d->cfg.ttl_ms = 3600 * 1000;
	if (!d->cfg.max_entries)
		d->cfg.max_entries = (size_t)1 << 20;
	pthread_mutex_init(&d->lock, NULL);
	d->last_ms = mono_ms();
	return d;
}

void dir_destroy(struct directory *d)
{
	if (!d)
		return;
	free(d->q);
	free(d->tab);
	pthread_mutex_destroy(&d->lock);
	free(d);
}

void dir_note(struct directory *d, uint64_t key, uint64_t alias, const struct chunk_id *id)
{
	if (!d)
		return;
	pthread_mutex_lock(&d->lock);
	if (d->qn == d->qcap && d->qcap < QUEUE_MAX) {
		size_t cap = d->qcap ? 2 * d->qcap : 64;
		struct note *q = realloc(d->q, cap * sizeof *q);
		if (q) {
			d->q = q;
			d->qcap = cap;
		}
	}
	if (d->qn < d->qcap)
		d->q[d->qn++] = (struct note){ .key = norm(key), .alias = alias ? norm(alias) : 0,
		                               .id = *id };
	else
		d->st.dropped++;
	pthread_mutex_unlock(&d->lock);
}

/* ---- the published table ---- */

static size_t slot_of(const struct directory *d, uint64_t key)
{
	/* Keys are hashes already; mix anyway so that near keys spread. */
	return (size_t)((key * 0x9e3779b97f4a7c15ull) >> 32) & (d->cap - 1);
}

static struct pent *tab_find(struct directory *d, uint64_t key)
{
	if (!d->cap)
		return NULL;
	for (size_t i = slot_of(d, key);; i = (i + 1) & (d->cap - 1)) {
		if (d->tab[i].key == key)
			return &d->tab[i];
		if (!d->tab[i].key)
			return NULL;
	}
}

static void tab_put(struct directory *d, struct pent e)
{
	size_t i = slot_of(d, e.key);
	while (d->tab[i].key)
		i = (i + 1) & (d->cap - 1);
	d->tab[i] = e;
	d->n++;
}

/* Room for one more entry at load at most 1/2; false when out of memory. */
static bool tab_reserve(struct directory *d)
{
	if (2 * (d->n + 1) <= d->cap)
		return true;
	size_t cap = d->cap ? 2 * d->cap : 1024;
	struct pent *old = d->tab;
	size_t ocap = d->cap;
	d->tab = calloc(cap, sizeof *d->tab);
	if (!d->tab) {
		d->tab = old;
		return false;
	}
	d->cap = cap;
	d->n = 0;
	d->cursor = 0;
	for (size_t i = 0; i < ocap; i++)
		if (old[i].key)
			tab_put(d, old[i]);
	free(old);
	return true;
}

/* Removes e, shifting back the entries of its probe run that follow. */
static void tab_remove(struct directory *d, struct pent *e)
{
	size_t mask = d->cap - 1, hole = (size_t)(e - d->tab);
	for (size_t i = (hole + 1) & mask; d->tab[i].key; i = (i + 1) & mask) {
		size_t home = slot_of(d, d->tab[i].key);
		/* Movable into the hole when its home is not in (hole, i]. */
		if (((i - home) & mask) >= ((i - hole) & mask)) {
			d->tab[hole] = d->tab[i];
			hole = i;
		}
	}
	d->tab[hole].key = 0;
	d->tab[hole].alias = 0;
	d->n--;
}

/* ---- flushing ---- */

struct pipe {
	redisContext *c;
	const char *self;
	unsigned ttl_ms;
	size_t pending; /* replies to read */
};

static void send_add(struct pipe *p, uint64_t key)
{
	char name[DIR_KEY_MAX];
	dir_key_name(key, name);
	redisAppendCommand(p->c, "SADD %s %s", name, p->self);
	redisAppendCommand(p->c, "PEXPIRE %s %u", name, p->ttl_ms);
	p->pending += 2;
}

static void send_rem(struct pipe *p, uint64_t key)
{
	char name[DIR_KEY_MAX];
	dir_key_name(key, name);
	redisAppendCommand(p->c, "SREM %s %s", name, p->self);
	p->pending++;
}

static void send_entry(struct pipe *p, const struct pent *e, bool add)
{
	void (*send)(struct pipe *, uint64_t) = add ? send_add : send_rem;
	send(p, e->key);
	if (e->alias)
		send(p, e->alias);
}

/* Applies one note: what holds() says now, against what is published. */
static void apply(struct directory *d, struct pipe *p, const struct note *nt,
                  struct dir_stats *delta)
{
	bool held = d->cfg.holds(d->cfg.holds_arg, &nt->id);
	struct pent *e = tab_find(d, nt->key);
	if (held && !e) {
		if (d->n >= d->cfg.max_entries || !tab_reserve(d)) {
			delta->dropped++;
			return;
		}
		struct pent ne = { .key = nt->key, .alias = nt->alias };
		tab_put(d, ne);
		send_entry(p, &ne, true);
		delta->published++;
	} else if (held && nt->alias && e->alias != nt->alias) {
		e->alias = nt->alias;
		send_add(p, nt->alias);
	} else if (!held && e) {
		send_entry(p, e, false);
		tab_remove(d, e);
		delta->withdrawn++;
	}
}

/* Refreshes the share of entries due since the last sweep (all of them,
 * SWEEP_MAX per call, while a resync is under way). */
static void sweep(struct directory *d, struct pipe *p, struct dir_stats *delta)
{
	double now = mono_ms();
	d->owed += (double)d->n * (now - d->last_ms) / ((double)d->cfg.ttl_ms / 4);
	d->last_ms = now;
	size_t want = d->owed > (double)d->n ? d->n : (size_t)d->owed;
	if (d->resync_left > want)
		want = d->resync_left;
	if (want > SWEEP_MAX)
		want = SWEEP_MAX;
	d->owed -= (double)want;
	if (d->owed < 0)
		d->owed = 0;
	d->resync_left = d->resync_left > want ? d->resync_left - want : 0;
	for (size_t done = 0, seen = 0; done < want && seen < d->cap; seen++) {
		struct pent *e = &d->tab[d->cursor];
		d->cursor = (d->cursor + 1) & (d->cap - 1);
		if (!e->key)
			continue;
		send_entry(p, e, true);
		done++;
		delta->refreshed++;
	}
}

int dir_flush(struct directory *d, redisContext *c, const char *self, bool resync, char *why,
              size_t whylen)
{
	if (!d)
		return 0;
	pthread_mutex_lock(&d->lock);
	struct note *batch = d->q;
	size_t bn = d->qn;
	d->q = NULL;
	d->qn = d->qcap = 0;
	pthread_mutex_unlock(&d->lock);

	if (resync)
		d->resync_left = d->n;
	struct pipe p = { .c = c, .self = self, .ttl_ms = d->cfg.ttl_ms };
	struct dir_stats delta = { 0 };
	for (size_t i = 0; i < bn; i++)
		apply(d, &p, &batch[i], &delta);
	free(batch);
	sweep(d, &p, &delta);

	int rc = redis_read_replies(c, p.pending, why, whylen);
	pthread_mutex_lock(&d->lock);
	d->st.entries = d->n;
	d->st.published += delta.published;
	d->st.withdrawn += delta.withdrawn;
	d->st.refreshed += delta.refreshed;
	d->st.dropped += delta.dropped;
	pthread_mutex_unlock(&d->lock);
	return rc;
}

void dir_get_stats(struct directory *d, struct dir_stats *out)
{
	memset(out, 0, sizeof *out);
	if (!d)
		return;
	pthread_mutex_lock(&d->lock);
	*out = d->st;
	pthread_mutex_unlock(&d->lock);
}

/*
 * directory.c - this node's entries in the placement directory (see
 * directory.h).
 *
 * Two structures. The note queue (under d->lock) is where any thread says
 * "look at this chunk again"; it is what keeps the notes cheap enough to
 * call under the store's locks. The table (open addressing, linear
 * probing, removal by backward shift) holds the chunks this node fetched
 * and still holds, each with how it got it and whether its routing key
 * is listed in Redis now; only the flushing thread touches it, so it needs no lock.
 * Every decision is made at flush time from holds() and owns(), so notes
 * can arrive in any order, twice, or for chunks never tracked: the table,
 * the tiers and Redis agree again after the next flush whatever the
 * interleaving.
 */
#include "cluster/directory.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "cluster/redis_util.h"

#define QUEUE_MAX 65536
#define SWEEP_MAX 8192 /* chunks reconciled per flush at most */

#define LISTED_KEY 1u
#define LISTED_ALIAS 2u

struct note {
	uint64_t key, alias;
	struct chunk_id id;
	bool fetched;             /* stored by a fetch: track it */
	bool as_owner;            /* fetched as its owner, not as a reader's copy */
	uint32_t src;             /* a reader's copy: the node it came from */
};

struct pent {
	uint64_t key;             /* 0: empty slot */
	uint64_t alias;           /* 0: none */
	uint32_t src;             /* a reader's copy: the node it came from, or 0 */
	uint8_t listed;           /* LISTED_* bits: in Redis now */
	bool listable;            /* got as owner, or its source left */
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
	size_t cursor;            /* next slot the sweep looks at */
	double last_ms;           /* when the sweep last ran */
	double owed;              /* reconciliations due but not yet done (fractional) */
	size_t recheck_left;      /* chunks still to reconcile after a recheck */
	uint64_t listed;          /* keys in Redis now */
};


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
	d->last_ms = clock_mono_ms();
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

static void note(struct directory *d, uint64_t key, uint64_t alias, const struct chunk_id *id,
                 bool fetched, bool as_owner, uint32_t src)
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
		                               .id = *id, .fetched = fetched, .as_owner = as_owner,
		                               .src = src };
	else
		d->st.dropped++;
	pthread_mutex_unlock(&d->lock);
}

void dir_fetched(struct directory *d, uint64_t key, uint64_t alias, const struct chunk_id *id,
                 bool as_owner, uint32_t src)
{
	note(d, key, alias, id, true, as_owner, src);
}

void dir_changed(struct directory *d, const struct chunk_id *id)
{
	note(d, chunk_id_hash(id), 0, id, false, false, 0);
}

/* ---- the table ---- */

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

static struct pent *tab_put(struct directory *d, struct pent e)
{
	size_t i = slot_of(d, e.key);
	while (d->tab[i].key)
		i = (i + 1) & (d->cap - 1);
	d->tab[i] = e;
	d->n++;
	return &d->tab[i];
}

/* Room for one more entry at load at most 1/2; false when out of memory.
 * Moves every entry: pointers into the table are stale after it. */
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

/* A new entry for key, which is not tracked yet; NULL when the table is
 * full (max_entries) or out of memory. */
static struct pent *tab_add(struct directory *d, uint64_t key)
{
	if (d->n >= d->cfg.max_entries || !tab_reserve(d))
		return NULL;
	return tab_put(d, (struct pent){ .key = key });
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
	d->tab[hole] = (struct pent){ 0 };
	d->n--;
}

/* ---- flushing ---- */

struct flush {
	struct directory *d;
	redisContext *c;
	const char *self;
	const struct dir_owners *o;
	bool recheck;             /* this sweep follows a membership change */
	size_t pending;           /* replies to read */
	struct dir_stats delta;
};

static void send_add(struct flush *f, uint64_t key)
{
	char name[DIR_KEY_MAX];
	dir_key_name(key, name);
	redisAppendCommand(f->c, "SADD %s %s", name, f->self);
	redisAppendCommand(f->c, "PEXPIRE %s %u", name, f->d->cfg.ttl_ms);
	f->pending += 2;
}

static void send_rem(struct flush *f, uint64_t key)
{
	char name[DIR_KEY_MAX];
	dir_key_name(key, name);
	redisAppendCommand(f->c, "SREM %s %s", name, f->self);
	f->pending++;
}

/* Makes one of e's keys listed or not; refresh: send a listed one again
 * (its TTL). */
static void set_listed(struct flush *f, struct pent *e, uint64_t key, unsigned bit, bool want,
                       bool refresh)
{
	bool is = e->listed & bit;
	if (want && (!is || refresh)) {
		send_add(f, key);
		if (is) {
			f->delta.refreshed++;
		} else {
			f->delta.published++;
			f->d->listed++;
		}
		e->listed |= bit;
	} else if (!want && is) {
		send_rem(f, key);
		f->delta.withdrawn++;
		f->d->listed--;
		e->listed &= ~bit;
	}
}

/* Lists e's routing key (its alias if it has one) when this node does not
 * own it and e is listable. A reader's copy becomes listable when, after
 * a membership change, the node it came from is no longer a member. */
static void reconcile(struct flush *f, struct pent *e, bool refresh)
{
	uint64_t rk = e->alias ? e->alias : e->key;
	unsigned bit = e->alias ? LISTED_ALIAS : LISTED_KEY;
	if (!e->listable && e->src && f->recheck && f->o->gone(f->o->arg, e->src))
		e->listable = true;
	set_listed(f, e, rk, bit, e->listable && !f->o->owns(f->o->arg, rk), refresh);
}

static void forget(struct flush *f, struct pent *e)
{
	set_listed(f, e, e->key, LISTED_KEY, false, false);
	if (e->alias)
		set_listed(f, e, e->alias, LISTED_ALIAS, false, false);
	tab_remove(f->d, e);
}

/* Applies one note: what holds() says now, against what is tracked. */
static void apply(struct flush *f, const struct note *nt)
{
	struct directory *d = f->d;
	bool held = d->cfg.holds(d->cfg.holds_arg, &nt->id);
	struct pent *e = tab_find(d, nt->key);
	if (!held) {
		if (e)
			forget(f, e);
		return;
	}
	if (!nt->fetched)
		return; /* held, and tracked or not as it was */
	if (!e && !(e = tab_add(d, nt->key))) {
		f->delta.dropped++;
		return;
	}
	e->listable = e->listable || nt->as_owner;
	if (!nt->as_owner)
		e->src = nt->src;
	if (nt->alias && e->alias != nt->alias) {
		if (e->alias)
			set_listed(f, e, e->alias, LISTED_ALIAS, false, false);
		e->alias = nt->alias;
	}
	reconcile(f, e, false);
}

void dir_recovered(struct directory *d, uint64_t key, uint64_t alias, bool as_owner)
{
	if (!d)
		return;
	key = norm(key);
	struct pent *e = tab_find(d, key);
	if (!e && !(e = tab_add(d, key))) {
		pthread_mutex_lock(&d->lock);
		d->st.dropped++;
		pthread_mutex_unlock(&d->lock);
		return;
	}
	e->listable = e->listable || as_owner;
	if (alias)
		e->alias = norm(alias);
}

/* Reconciles the share of entries due since the last sweep, refreshing
 * the TTLs of listed keys (every entry after a recheck, SWEEP_MAX per
 * call). */
static void sweep(struct flush *f)
{
	struct directory *d = f->d;
	double now = clock_mono_ms();
	d->owed += (double)d->n * (now - d->last_ms) / ((double)d->cfg.ttl_ms / 4);
	d->last_ms = now;
	size_t want = d->owed > (double)d->n ? d->n : (size_t)d->owed;
	if (d->recheck_left > want)
		want = d->recheck_left;
	if (want > SWEEP_MAX)
		want = SWEEP_MAX;
	d->owed -= (double)want;
	if (d->owed < 0)
		d->owed = 0;
	f->recheck = d->recheck_left > 0;
	d->recheck_left = d->recheck_left > want ? d->recheck_left - want : 0;
	for (size_t done = 0, seen = 0; done < want && seen < d->cap; seen++) {
		struct pent *e = &d->tab[d->cursor];
		d->cursor = (d->cursor + 1) & (d->cap - 1);
		if (!e->key)
			continue;
		reconcile(f, e, true);
		done++;
	}
}

int dir_flush(struct directory *d, redisContext *c, const char *self, bool recheck,
              const struct dir_owners *o, char *why, size_t whylen)
{
	if (!d)
		return 0;
	pthread_mutex_lock(&d->lock);
	struct note *batch = d->q;
	size_t bn = d->qn;
	d->q = NULL;
	d->qn = d->qcap = 0;
	pthread_mutex_unlock(&d->lock);

	struct flush f = { .d = d, .c = c, .self = self, .o = o };
	for (size_t i = 0; i < bn; i++)
		apply(&f, &batch[i]);
	free(batch);
	if (recheck) /* a whole pass from the cursor: every entry, once */
		d->recheck_left = d->n;
	sweep(&f);

	int rc = redis_read_replies(c, f.pending, why, whylen);
	pthread_mutex_lock(&d->lock);
	d->st.entries = d->listed;
	d->st.tracked = d->n;
	d->st.published += f.delta.published;
	d->st.withdrawn += f.delta.withdrawn;
	d->st.refreshed += f.delta.refreshed;
	d->st.dropped += f.delta.dropped;
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

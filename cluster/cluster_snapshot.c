/*
 * cluster_snapshot.c - the member list every ownership question reads.
 *
 * Snapshot. The member list is an immutable, reference-counted array
 * sorted by id. The heartbeat thread builds a new one when the members
 * change and swaps the pointer under cl->lock; cluster_owner takes a
 * reference under the same lock and picks with no lock held. The array
 * always holds this node, so while Redis is down it is just this node.
 */
#include "cluster/cluster_internal.h"

#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "cluster/rendezvous.h"

struct snapshot *cl_snap_new(size_t n)
{
	size_t sz = sizeof(struct snapshot) + n * (sizeof(struct member) + sizeof(uint64_t) +
	                                           sizeof(double));
	struct snapshot *s = calloc(1, sz);
	if (!s)
		return NULL;
	atomic_init(&s->refs, 1);
	s->n = n;
	s->hash = (uint64_t *)(void *)(s->m + n);
	s->weight = (double *)(void *)(s->hash + n);
	return s;
}

/* Fills hash[], weight[] and self from m[], which must be sorted by id. */
void cl_snap_finish(struct snapshot *s, const char *self_id)
{
	for (size_t i = 0; i < s->n; i++) {
		s->hash[i] = rdv_node_hash(s->m[i].id);
		s->weight[i] = s->m[i].cap;
		if (strcmp(s->m[i].id, self_id) == 0)
			s->self = i;
	}
}

void cl_snap_unref(struct snapshot *s)
{
	if (s && atomic_fetch_sub(&s->refs, 1) == 1)
		free(s);
}

struct snapshot *cl_snap_get(struct cluster *cl)
{
	pthread_mutex_lock(&cl->lock);
	struct snapshot *s = cl->snap;
	atomic_fetch_add(&s->refs, 1);
	pthread_mutex_unlock(&cl->lock);
	return s;
}

/* Same members, addresses and capacities: the same owner for every key.
 * counts: the directory entries they report must match too. */
static bool snap_same(const struct snapshot *a, const struct snapshot *b, bool counts)
{
	if (a->n != b->n)
		return false;
	for (size_t i = 0; i < a->n; i++)
		if (strcmp(a->m[i].id, b->m[i].id) || strcmp(a->m[i].addr, b->m[i].addr) ||
		    a->m[i].cap != b->m[i].cap || (counts && a->m[i].dir_entries != b->m[i].dir_entries))
			return false;
	return true;
}

/* Logs who joined, left or moved between two sorted member lists. */
static void log_changes(const struct snapshot *old, const struct snapshot *nw)
{
	size_t i = 0, j = 0;
	while (i < old->n || j < nw->n) {
		int c = i == old->n ? 1 : j == nw->n ? -1 : strcmp(old->m[i].id, nw->m[j].id);
		if (c < 0) {
			log_info(TOPIC, "member %s (%s) left", old->m[i].id, old->m[i].addr);
			i++;
		} else if (c > 0) {
			log_info(TOPIC, "member %s joined at %s, capacity %.6g", nw->m[j].id,
			         nw->m[j].addr, nw->m[j].cap);
			j++;
		} else {
			if (strcmp(old->m[i].addr, nw->m[j].addr) || old->m[i].cap != nw->m[j].cap)
				log_info(TOPIC, "member %s now at %s, capacity %.6g", nw->m[j].id,
				         nw->m[j].addr, nw->m[j].cap);
			i++, j++;
		}
	}
}

/* Installs s (taking its reference) unless it equals the current one.
 * Call with cl->lock held; logs per-member changes only when asked. */
void cl_snap_install(struct cluster *cl, struct snapshot *s, bool log_members)
{
	struct snapshot *old = cl->snap;
	if (old && snap_same(old, s, true)) {
		cl_snap_unref(s);
		return;
	}
	if (!old || !snap_same(old, s, false))
		cl->members_gen++;
	if (old && log_members)
		log_changes(old, s);
	cl->snap = s;
	cl_snap_unref(old);
}

struct snapshot *cl_snap_alone(struct cluster *cl)
{
	struct snapshot *s = cl_snap_new(1);
	if (s) {
		s->m[0] = cl->self;
		cl_snap_finish(s, cl->self.id);
	}
	return s;
}

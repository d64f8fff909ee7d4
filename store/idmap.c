/*
 * idmap.c - the chunk-id -> struct chunk * map of the in-flight table
 * (store.c) and the RAM tier (ram.c); see idmap.h.
 */
#include "store/idmap.h"

#include <errno.h>
#include <stdlib.h>

static size_t idmap_home(const struct idmap *m, const struct chunk_id *id)
{
	return (size_t)chunk_id_hash(id) & (m->cap - 1);
}

/* The slot holding id, or the empty slot where it would go. */
static size_t idmap_slot(const struct idmap *m, const struct chunk_id *id)
{
	size_t i = idmap_home(m, id);
	while (m->slot[i] && !chunk_id_eq(&m->slot[i]->id, id))
		i = (i + 1) & (m->cap - 1);
	return i;
}

struct chunk *idmap_get(const struct idmap *m, const struct chunk_id *id)
{
	return m->cap ? m->slot[idmap_slot(m, id)] : NULL;
}

static int idmap_grow(struct idmap *m)
{
	size_t cap = m->cap ? 2 * m->cap : 64;
	struct chunk **old = m->slot;
	size_t oldcap = m->cap;
	struct chunk **slot = calloc(cap, sizeof *slot);
	if (!slot)
		return -ENOMEM;
	m->slot = slot;
	m->cap = cap;
	for (size_t i = 0; i < oldcap; i++)
		if (old[i])
			m->slot[idmap_slot(m, &old[i]->id)] = old[i];
	free(old);
	return 0;
}

/* Adds c (its id must be absent). Keeps the load at or under 1/2; if
 * growing fails it carries on up to 7/8 before giving up with -ENOMEM. */
int idmap_put(struct idmap *m, struct chunk *c)
{
	if (2 * (m->n + 1) > m->cap && idmap_grow(m) < 0 && 8 * (m->n + 1) > 7 * m->cap)
		return -ENOMEM;
	size_t i = idmap_slot(m, &c->id);
	m->slot[i] = c;
	m->n++;
	return 0;
}

/* Removes and returns the chunk mapped to id, or NULL. Backward-shift
 * deletion: later members of the probe run move up into the hole when
 * their home slot allows, so lookups never need tombstones. */
struct chunk *idmap_del(struct idmap *m, const struct chunk_id *id)
{
	if (!m->cap)
		return NULL;
	size_t mask = m->cap - 1, i = idmap_slot(m, id);
	struct chunk *c = m->slot[i];
	if (!c)
		return NULL;
	for (size_t j = (i + 1) & mask; m->slot[j]; j = (j + 1) & mask) {
		size_t home = idmap_home(m, &m->slot[j]->id);
		/* j may move to i unless its home lies cyclically in (i, j]. */
		bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
		if (!stays) {
			m->slot[i] = m->slot[j];
			i = j;
		}
	}
	m->slot[i] = NULL;
	m->n--;
	return c;
}

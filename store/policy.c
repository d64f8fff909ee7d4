/*
 * policy.c - admission and eviction for a cache tier (see policy.h for
 * why SUBSET exists).
 *
 * SUBSET keeps two views of the same entries:
 *   - a binary max-heap on hash (an array of entry pointers; each entry
 *     knows its slot in heap_index), whose top is the entry the subset
 *     wants least;
 *   - a recency list (most recent at head), whose tail is the entry idle
 *     longest; when that entry has been idle for more than stale_after it
 *     goes first, whatever its hash, so a finished job's data drains.
 * Insert and remove are O(log n) in the heap plus O(1) in the list; touch
 * only moves the entry in the list, since its hash never changes.
 *
 * Admission asks whether the entries that would have to go to make room
 * all rank below the newcomer. Victims come stale-first (oldest first),
 * then by descending hash; so it is enough to know that the stale entries
 * plus the non-stale entries with a larger hash than the newcomer's hold
 * at least the bytes needed. The heap lets us sum the latter without
 * sorting: a node whose hash is not larger has no larger descendants, so
 * a pruned walk visits only the nodes that count (and stops as soon as
 * enough bytes were found, usually at the root).
 *
 * LRU uses only the list.
 */
#include "store/policy.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/log.h"

struct policy {
	enum policy_kind kind;
	uint64_t capacity;
	double stale_after;            /* <= 0: nothing is ever stale */
	uint64_t used;
	size_t count;
	struct policy_entry **heap;    /* SUBSET: count entries */
	size_t heap_cap;
	struct policy_entry *head, *tail;
};

int policy_kind_parse(const char *s)
{
	if (!s)
		return -1;
	if (strcasecmp(s, "subset") == 0)
		return POLICY_SUBSET;
	if (strcasecmp(s, "lru") == 0)
		return POLICY_LRU;
	return -1;
}

const char *policy_kind_name(enum policy_kind k)
{
	switch (k) {
	case POLICY_SUBSET: return "subset";
	case POLICY_LRU: return "lru";
	}
	return "?";
}

struct policy *policy_create(enum policy_kind k, uint64_t capacity_bytes, double stale_after_s)
{
	struct policy *p = calloc(1, sizeof *p);
	if (!p)
		return NULL;
	p->kind = k;
	p->capacity = capacity_bytes;
	p->stale_after = stale_after_s;
	return p;
}

void policy_destroy(struct policy *p)
{
	if (!p)
		return;
	free(p->heap);
	free(p);
}

static bool is_stale(const struct policy *p, const struct policy_entry *e, double now)
{
	return p->stale_after > 0 && now - e->last_access > p->stale_after;
}

/* ---- recency list ------------------------------------------------------------ */

static void lru_unlink(struct policy *p, struct policy_entry *e)
{
	if (e->lru_prev)
		e->lru_prev->lru_next = e->lru_next;
	else
		p->head = e->lru_next;
	if (e->lru_next)
		e->lru_next->lru_prev = e->lru_prev;
	else
		p->tail = e->lru_prev;
	e->lru_prev = e->lru_next = NULL;
}

static void lru_push_head(struct policy *p, struct policy_entry *e)
{
	e->lru_prev = NULL;
	e->lru_next = p->head;
	if (p->head)
		p->head->lru_prev = e;
	else
		p->tail = e;
	p->head = e;
}

/* ---- max-heap on hash -------------------------------------------------------- */

static void heap_set(struct policy *p, size_t i, struct policy_entry *e)
{
	p->heap[i] = e;
	e->heap_index = i;
}

static void sift_up(struct policy *p, size_t i)
{
	struct policy_entry *e = p->heap[i];
	while (i > 0) {
		size_t parent = (i - 1) / 2;
		if (p->heap[parent]->hash >= e->hash)
			break;
		heap_set(p, i, p->heap[parent]);
		i = parent;
	}
	heap_set(p, i, e);
}

static void sift_down(struct policy *p, size_t i)
{
	struct policy_entry *e = p->heap[i];
	size_t n = p->count;
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, big = l;
		if (l >= n)
			break;
		if (r < n && p->heap[r]->hash > p->heap[l]->hash)
			big = r;
		if (p->heap[big]->hash <= e->hash)
			break;
		heap_set(p, i, p->heap[big]);
		i = big;
	}
	heap_set(p, i, e);
}

/* Sum of the bytes of non-stale entries with hash > h in the subtree at i,
 * stopping once `want` is reached (the result is then >= want). The
 * depth is the heap's height, about log2(count). */
static uint64_t sum_above(const struct policy *p, size_t i, uint64_t h, double now, uint64_t want)
{
	if (i >= p->count || p->heap[i]->hash <= h)
		return 0;
	const struct policy_entry *e = p->heap[i];
	uint64_t s = is_stale(p, e, now) ? 0 : e->bytes; /* stale ones were counted already */
	if (s >= want)
		return s;
	s += sum_above(p, 2 * i + 1, h, now, want - s);
	if (s >= want)
		return s;
	return s + sum_above(p, 2 * i + 2, h, now, want - s);
}

/* ---- the interface ------------------------------------------------------------ */

bool policy_admit_reserved(const struct policy *p, uint64_t hash, uint64_t bytes,
                           uint64_t reserved, double now)
{
	uint64_t limit = reserved < p->capacity ? p->capacity - reserved : 0;
	if (bytes > limit)
		return false; /* would not fit even in an empty tier */
	if (p->used <= limit - bytes)
		return true;
	if (p->kind == POLICY_LRU)
		return true; /* recency: the newcomer always outranks the rest */

	uint64_t need = p->used - (limit - bytes), freed = 0;
	for (const struct policy_entry *e = p->tail; e && is_stale(p, e, now); e = e->lru_prev) {
		freed += e->bytes;
		if (freed >= need)
			return true;
	}
	return sum_above(p, 0, hash, now, need - freed) >= need - freed;
}

bool policy_admit(const struct policy *p, uint64_t hash, uint64_t bytes, double now)
{
	return policy_admit_reserved(p, hash, bytes, 0, now);
}

void policy_insert(struct policy *p, struct policy_entry *e, uint64_t hash, uint64_t bytes,
                   double now)
{
	e->hash = hash;
	e->bytes = bytes;
	e->last_access = now;
	if (p->kind == POLICY_SUBSET) {
		if (p->count == p->heap_cap) {
			size_t cap = p->heap_cap ? 2 * p->heap_cap : 64;
			struct policy_entry **h = realloc(p->heap, cap * sizeof *h);
			/* No error path in the interface, and a tier that cannot
			 * track what it holds can only leak or lie: an allocation
			 * of a few kilobytes failing is fatal. */
			if (!h) {
				log_error("store", "policy: realloc() of %zu heap slots failed", cap);
				abort();
			}
			p->heap = h;
			p->heap_cap = cap;
		}
		p->heap[p->count] = e;
		e->heap_index = p->count;
		p->count++;
		sift_up(p, e->heap_index);
	} else {
		e->heap_index = 0;
		p->count++;
	}
	lru_push_head(p, e);
	p->used += bytes;
}

void policy_touch(struct policy *p, struct policy_entry *e, double now)
{
	e->last_access = now;
	if (p->head != e) {
		lru_unlink(p, e);
		lru_push_head(p, e);
	}
}

void policy_remove(struct policy *p, struct policy_entry *e)
{
	assert(p->count > 0 && p->used >= e->bytes);
	lru_unlink(p, e);
	p->used -= e->bytes;
	if (p->kind == POLICY_SUBSET) {
		size_t i = e->heap_index, last = p->count - 1;
		assert(i < p->count && p->heap[i] == e);
		p->count--;
		if (i != last) {
			heap_set(p, i, p->heap[last]);
			/* The moved entry may belong above or below its new slot. */
			if (i > 0 && p->heap[(i - 1) / 2]->hash < p->heap[i]->hash)
				sift_up(p, i);
			else
				sift_down(p, i);
		}
	} else {
		p->count--;
	}
}

struct policy_entry *policy_victim(const struct policy *p, double now)
{
	if (p->count == 0)
		return NULL;
	if (p->kind == POLICY_LRU || is_stale(p, p->tail, now))
		return p->tail;
	return p->heap[0];
}

uint64_t policy_used(const struct policy *p)
{
	return p->used;
}

uint64_t policy_capacity(const struct policy *p)
{
	return p->capacity;
}

void policy_set_capacity(struct policy *p, uint64_t capacity_bytes)
{
	p->capacity = capacity_bytes;
}

size_t policy_count(const struct policy *p)
{
	return p->count;
}

int policy_check(const struct policy *p)
{
	size_t n = 0;
	uint64_t bytes = 0;
	const struct policy_entry *prev = NULL;

	for (const struct policy_entry *e = p->head; e; e = e->lru_next) {
		if (e->lru_prev != prev || ++n > p->count)
			return -1;
		bytes += e->bytes;
		prev = e;
	}
	if (prev != p->tail || n != p->count || bytes != p->used)
		return -1;
	if ((p->head == NULL) != (p->count == 0))
		return -1;
	if (p->kind != POLICY_SUBSET)
		return 0;
	for (size_t i = 0; i < p->count; i++) {
		const struct policy_entry *e = p->heap[i];
		if (!e || e->heap_index != i)
			return -1;
		if (i > 0 && p->heap[(i - 1) / 2]->hash < e->hash)
			return -1;
	}
	return 0;
}

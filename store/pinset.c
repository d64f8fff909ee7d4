/*
 * pinset.c - pinned ids (see pinset.h): a chained hash, at most one node
 * per bucket on average.
 */
#include "store/pinset.h"

#include <errno.h>
#include <stdlib.h>

struct pin_node {
	struct chunk_id id;
	uint64_t len;
	unsigned count;             /* pins holding it */
	struct pin_node *next;
};

/* The node of id, or NULL; *link its link. */
static struct pin_node *find(const struct pinset *p, const struct chunk_id *id,
                             struct pin_node ***link)
{
	if (!p->n_buckets)
		return NULL;
	struct pin_node **pp = &p->b[chunk_id_hash(id) & (p->n_buckets - 1)];
	for (; *pp; pp = &(*pp)->next)
		if (chunk_id_eq(&(*pp)->id, id))
			break;
	if (link)
		*link = pp;
	return *pp;
}

/* -ENOMEM leaves the table as it was. */
static int grow(struct pinset *p)
{
	if (p->n < p->n_buckets)
		return 0;
	size_t n = p->n_buckets ? 2 * p->n_buckets : 64;
	struct pin_node **b = calloc(n, sizeof *b);
	if (!b)
		return -ENOMEM;
	for (size_t i = 0; i < p->n_buckets; i++)
		for (struct pin_node *x = p->b[i], *next; x; x = next) {
			next = x->next;
			struct pin_node **head = &b[chunk_id_hash(&x->id) & (n - 1)];
			x->next = *head;
			*head = x;
		}
	free(p->b);
	p->b = b;
	p->n_buckets = n;
	return 0;
}

int pinset_add(struct pinset *p, const struct chunk_id *id, uint64_t len)
{
	struct pin_node *x = find(p, id, NULL);
	if (x) {
		x->count++;
		return 0;
	}
	if (len > p->limit || p->held > p->limit - len)
		return -ENOSPC;
	if (grow(p) < 0 || !(x = calloc(1, sizeof *x)))
		return -ENOMEM;
	x->id = *id;
	x->len = len;
	x->count = 1;
	struct pin_node **head = &p->b[chunk_id_hash(id) & (p->n_buckets - 1)];
	x->next = *head;
	*head = x;
	p->n++;
	p->held += len;
	return 1;
}

bool pinset_remove(struct pinset *p, const struct chunk_id *id)
{
	struct pin_node **link;
	struct pin_node *x = find(p, id, &link);
	if (!x || --x->count > 0)
		return false;
	*link = x->next;
	p->n--;
	p->held -= x->len;
	free(x);
	return true;
}

bool pinset_has(const struct pinset *p, const struct chunk_id *id)
{
	return find(p, id, NULL) != NULL;
}

void pinset_free(struct pinset *p)
{
	for (size_t i = 0; i < p->n_buckets; i++)
		for (struct pin_node *x = p->b[i], *next; x; x = next) {
			next = x->next;
			free(x);
		}
	free(p->b);
	p->b = NULL;
	p->n_buckets = p->n = 0;
	p->held = 0;
}

/*
 * list.h - an intrusive doubly-linked list. A struct that goes on a list
 * embeds a struct list_node; the list is a struct list (first, last).
 * Both are valid zeroed (calloc, a designated initialiser): an empty list,
 * an unlinked node. Nothing here locks: the list's owner does.
 *
 *	struct fetch { ...; struct list_node link; };
 *	list_push_front(&w->fetches, &f->link);
 *	for (struct list_node *n = w->fetches.first; n; n = n->next)
 *		use(list_item(n, struct fetch, link));
 *	list_unlink(&w->fetches, &f->link);
 */
#ifndef LARDER_LIST_H
#define LARDER_LIST_H

#include <stdbool.h>
#include <stddef.h>

struct list_node {
	struct list_node *prev, *next;
};

struct list {
	struct list_node *first, *last;
};

/* The struct of type that holds node as its member. */
#define list_item(node, type, member) ((type *)(void *)((char *)(node) - offsetof(type, member)))

static inline bool list_empty(const struct list *l)
{
	return l->first == NULL;
}

static inline void list_push_front(struct list *l, struct list_node *n)
{
	n->prev = NULL;
	n->next = l->first;
	if (l->first)
		l->first->prev = n;
	else
		l->last = n;
	l->first = n;
}

static inline void list_push_back(struct list *l, struct list_node *n)
{
	n->next = NULL;
	n->prev = l->last;
	if (l->last)
		l->last->next = n;
	else
		l->first = n;
	l->last = n;
}

/* Takes n (which must be on l) off l, and leaves it zeroed. */
static inline void list_unlink(struct list *l, struct list_node *n)
{
	if (n->prev)
		n->prev->next = n->next;
	else
		l->first = n->next;
	if (n->next)
		n->next->prev = n->prev;
	else
		l->last = n->prev;
	n->prev = n->next = NULL;
}

#endif

/* base/list.h: order after pushes at either end, removal from the front,
 * the middle, the back and of the only node, and zeroed nodes afterwards. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "base/list.h"

struct item {
	int v;
	struct list_node link;
};

/* Checks that l holds exactly want[0..n) front to back, both ways. */
static void expect(const struct list *l, const int *want, size_t n)
{
	size_t i = 0;
	const struct list_node *before = NULL;
	for (const struct list_node *p = l->first; p; before = p, p = p->next, i++) {
		assert_true(i < n);
		assert_int_equal(list_item(p, struct item, link)->v, want[i]);
		assert_ptr_equal(p->prev, before);
	}
	assert_int_equal(i, n);
	assert_ptr_equal(l->last, before);
	for (const struct list_node *p = l->last; p; p = p->prev) {
		assert_true(i > 0);
		assert_int_equal(list_item(p, struct item, link)->v, want[--i]);
	}
	assert_int_equal(i, 0);
	assert_int_equal(list_empty(l), n == 0);
}

static void test_empty(void **state)
{
	(void)state;
	struct list l = { 0 };
	expect(&l, NULL, 0);
}

static void test_push_both_ends(void **state)
{
	(void)state;
	struct list l = { 0 };
	struct item a = { 1, { 0 } }, b = { 2, { 0 } }, c = { 3, { 0 } }, d = { 4, { 0 } };
	list_push_front(&l, &b.link);
	expect(&l, (int[]){ 2 }, 1);
	list_push_front(&l, &a.link);
	list_push_back(&l, &c.link);
	list_push_back(&l, &d.link);
	expect(&l, (int[]){ 1, 2, 3, 4 }, 4);
}

static void test_remove(void **state)
{
	(void)state;
	struct list l = { 0 };
	struct item it[5];
	for (int i = 0; i < 5; i++) {
		it[i].v = i;
		list_push_back(&l, &it[i].link);
	}
	list_unlink(&l, &it[2].link); /* middle */
	expect(&l, (int[]){ 0, 1, 3, 4 }, 4);
	assert_null(it[2].link.prev);
	assert_null(it[2].link.next);
	list_unlink(&l, &it[0].link); /* front */
	expect(&l, (int[]){ 1, 3, 4 }, 3);
	list_unlink(&l, &it[4].link); /* back */
	expect(&l, (int[]){ 1, 3 }, 2);
	list_unlink(&l, &it[1].link);
	list_unlink(&l, &it[3].link); /* the only one */
	expect(&l, NULL, 0);
	assert_null(l.last);
	/* a removed node goes back on */
	list_push_front(&l, &it[3].link);
	list_push_front(&l, &it[2].link);
	expect(&l, (int[]){ 2, 3 }, 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_empty),
		cmocka_unit_test(test_push_both_ends),
		cmocka_unit_test(test_remove),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

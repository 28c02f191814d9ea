/* The tensor store without a device: names, replacement, limits, listing. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "store.h"

static int released;

static void on_release(void *userdata, struct tensor *t)
{
	(void)userdata;
	(void)t;
	released++;
}

static struct tensor *mk(const char *name, uint64_t bytes)
{
	struct tensor *t = calloc(1, sizeof(*t));

	assert_non_null(t);
	snprintf(t->name, sizeof(t->name), "%s", name);
	t->name_len = strlen(name);
	t->bytes = bytes;
	t->created_ns = 100;
	return t;
}

static void test_put_find_delete(void **state)
{
	struct store *s = store_new(10, on_release, NULL);
	uint64_t count, bytes;

	released = 0;
	assert_int_equal(store_put(s, mk("a", 4)), 0);
	assert_int_equal(store_put(s, mk("b", 8)), 0);
	assert_non_null(store_find(s, "a", 1));
	assert_null(store_find(s, "ab", 2));
	store_totals(s, &count, &bytes);
	assert_int_equal(count, 2);
	assert_int_equal(bytes, 12);
	assert_int_equal(store_delete(s, "a", 1), 0);
	assert_int_equal(store_delete(s, "a", 1), -ENOENT);
	assert_int_equal(released, 1);
	store_free(s);
	assert_int_equal(released, 2);
}

static void test_replace_keeps_created_bumps_version(void **state)
{
	struct store *s = store_new(1, on_release, NULL);
	struct tensor *t = mk("w", 4), *u = mk("w", 16);

	released = 0;
	assert_int_equal(store_put(s, t), 0);
	assert_int_equal(t->version, 1);
	u->created_ns = 999;
	/* Replacing works even at the tensor limit. */
	assert_int_equal(store_put(s, u), 0);
	assert_int_equal(released, 1);
	assert_ptr_equal(store_find(s, "w", 1), u);
	assert_int_equal(u->version, 2);
	assert_int_equal(u->created_ns, 100);
	t = mk("x", 1);
	assert_int_equal(store_put(s, t), -ENOSPC);
	free(t);
	store_free(s);
}

static void test_list_prefix_sorted_and_growth(void **state)
{
	struct store *s = store_new(100000, NULL, NULL);
	struct tensor **list;
	size_t n;
	char name[32];

	for (int i = 999; i >= 0; i--) {
		snprintf(name, sizeof(name), "%s/%04d", i % 2 ? "odd" : "even", i);
		assert_int_equal(store_put(s, mk(name, 1)), 0);
	}
	assert_int_equal(store_list(s, "odd/", 4, &list, &n), 0);
	assert_int_equal(n, 500);
	for (size_t i = 1; i < n; i++)
		assert_true(strcmp(list[i - 1]->name, list[i]->name) < 0);
	assert_string_equal(list[0]->name, "odd/0001");
	free(list);
	assert_int_equal(store_list(s, NULL, 0, &list, &n), 0);
	assert_int_equal(n, 1000);
	free(list);
	assert_int_equal(store_list(s, "zzz", 3, &list, &n), 0);
	assert_int_equal(n, 0);
	free(list);
	for (int i = 0; i < 1000; i++) {
		snprintf(name, sizeof(name), "%s/%04d", i % 2 ? "odd" : "even", i);
		assert_non_null(store_find(s, name, strlen(name)));
	}
	store_free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_put_find_delete),
		cmocka_unit_test(test_replace_keeps_created_bumps_version),
		cmocka_unit_test(test_list_prefix_sorted_and_growth),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

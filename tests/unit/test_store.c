/* The tensor store without a device: names, replacement, limits, listing,
 * access checks and per-uid quotas. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "crc32c.h"
#include "mode.h"
#include "store/store.h"

static const struct access_cred root = { .uid = 0, .gid = 0 };
static const struct access_cred alice = { .uid = 1000, .gid = 1000, .ngroups = 1, .groups = { 500 } };
static const struct access_cred bob = { .uid = 1001, .gid = 1001 };
static const struct access_cred carol = { .uid = 1002, .gid = 1002, .ngroups = 2, .groups = { 7, 500 } };

static struct tensor *find(struct store *s, const char *name)
{
	struct tensor *t = NULL;

	if (store_lookup(s, name, strlen(name), &root, ACCESS_READ | ACCESS_WRITE, &t, NULL) < 0)
		return NULL;
	return t;
}

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
	assert_non_null(find(s, "a"));
	assert_null(find(s, "ab"));
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
	assert_ptr_equal(find(s, "w"), u);
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
	assert_int_equal(store_list(s, "odd/", 4, &root, &list, &n), 0);
	assert_int_equal(n, 500);
	for (size_t i = 1; i < n; i++)
		assert_true(strcmp(list[i - 1]->name, list[i]->name) < 0);
	assert_string_equal(list[0]->name, "odd/0001");
	free(list);
	assert_int_equal(store_list(s, NULL, 0, &root, &list, &n), 0);
	assert_int_equal(n, 1000);
	free(list);
	assert_int_equal(store_list(s, "zzz", 3, &root, &list, &n), 0);
	assert_int_equal(n, 0);
	free(list);
	for (int i = 0; i < 1000; i++) {
		snprintf(name, sizeof(name), "%s/%04d", i % 2 ? "odd" : "even", i);
		assert_non_null(find(s, name));
	}
	store_free(s);
}

static struct tensor *mk_owned(const char *name, uint64_t bytes, const struct access_cred *c, uint32_t mode)
{
	struct tensor *t = mk(name, bytes);

	t->owner = c->uid;
	t->group = c->gid;
	t->mode = mode;
	return t;
}

static void test_access_modes(void **state)
{
	struct store *s = store_new(10, NULL, NULL);
	struct store_denial dn = { 0 };
	struct tensor *t = NULL, **list;
	size_t n;

	assert_int_equal(store_put(s, mk_owned("p", 4, &alice, TDP_MODE_PRIVATE)), 0);
	/* the owner and root do anything; others nothing */
	assert_int_equal(store_lookup(s, "p", 1, &alice, ACCESS_READ | ACCESS_WRITE, &t, NULL), 0);
	assert_int_equal(store_lookup(s, "p", 1, &root, ACCESS_READ | ACCESS_WRITE, &t, NULL), 0);
	t = NULL;
	assert_int_equal(store_lookup(s, "p", 1, &bob, ACCESS_READ, &t, &dn), -EACCES);
	assert_null(t);
	assert_int_equal(dn.owner, 1000);
	assert_int_equal(dn.mode, TDP_MODE_PRIVATE);
	assert_int_equal(store_lookup(s, "q", 1, &bob, ACCESS_READ, &t, &dn), -ENOENT);
	/* no access wanted: found by anyone (chmod checks ownership itself) */
	assert_int_equal(store_lookup(s, "p", 1, &bob, 0, &t, NULL), 0);

	/* group modes: carol is in alice's group 500 as a supplementary group */
	assert_int_equal(store_put(s, mk_owned("g", 4, &alice, TDP_MODE_GROUP_READ)), 0);
	find(s, "g")->group = 500;
	assert_int_equal(store_lookup(s, "g", 1, &carol, ACCESS_READ, &t, NULL), 0);
	assert_int_equal(store_lookup(s, "g", 1, &carol, ACCESS_WRITE, &t, NULL), -EACCES);
	assert_int_equal(store_lookup(s, "g", 1, &bob, ACCESS_READ, &t, NULL), -EACCES);
	find(s, "g")->mode = TDP_MODE_GROUP_READ | TDP_MODE_GROUP_WRITE;
	assert_int_equal(store_lookup(s, "g", 1, &carol, ACCESS_READ | ACCESS_WRITE, &t, NULL), 0);

	/* world modes */
	assert_int_equal(store_put(s, mk_owned("w", 4, &alice, TDP_MODE_WORLD_READ)), 0);
	assert_int_equal(store_lookup(s, "w", 1, &bob, ACCESS_READ, &t, NULL), 0);
	assert_int_equal(store_lookup(s, "w", 1, &bob, ACCESS_WRITE, &t, NULL), -EACCES);

	/* a replacement keeps owner, group and mode, whoever stores it */
	assert_int_equal(store_put(s, mk_owned("g", 8, &carol, TDP_MODE_PRIVATE)), 0);
	t = find(s, "g");
	assert_int_equal(t->owner, 1000);
	assert_int_equal(t->group, 500);
	assert_int_equal(t->mode, TDP_MODE_GROUP_READ | TDP_MODE_GROUP_WRITE);

	/* listing shows what the caller may read */
	assert_int_equal(store_list(s, NULL, 0, &bob, &list, &n), 0);
	assert_int_equal(n, 1);
	assert_string_equal(list[0]->name, "w");
	free(list);
	assert_int_equal(store_list(s, NULL, 0, &carol, &list, &n), 0);
	assert_int_equal(n, 2);
	free(list);
	assert_int_equal(store_list(s, NULL, 0, &alice, &list, &n), 0);
	assert_int_equal(n, 3);
	free(list);
	store_free(s);
}

static void test_quota(void **state)
{
	struct store *s = store_new(100, NULL, NULL);
	struct store_usage use;
	const char *limit = NULL;

	store_set_quota(s, 2, 100);
	assert_int_equal(store_quota_check(s, 1000, 1, 60, &limit), 0);
	assert_int_equal(store_put(s, mk_owned("a", 60, &alice, 0)), 0);
	/* bytes over the quota */
	assert_int_equal(store_quota_check(s, 1000, 1, 41, &limit), -EDQUOT);
	assert_string_equal(limit, "user_max_bytes");
	assert_int_equal(store_quota_check(s, 1000, 1, 40, &limit), 0);
	assert_int_equal(store_put(s, mk_owned("b", 40, &alice, 0)), 0);
	/* tensors over the quota; another uid is not affected */
	assert_int_equal(store_quota_check(s, 1000, 1, 0, &limit), -EDQUOT);
	assert_string_equal(limit, "user_max_tensors");
	assert_int_equal(store_quota_check(s, 1001, 2, 100, &limit), 0);
	/* replacing with less, or freeing, always fits */
	assert_int_equal(store_quota_check(s, 1000, 0, -20, &limit), 0);
	store_usage_of(s, 1000, &use);
	assert_int_equal(use.tensors, 2);
	assert_int_equal(use.bytes, 100);
	assert_int_equal(store_delete(s, "a", 1), 0);
	store_usage_of(s, 1000, &use);
	assert_int_equal(use.tensors, 1);
	assert_int_equal(use.bytes, 40);
	/* a replacement moves the bytes of the owner, not of who stored it */
	assert_int_equal(store_put(s, mk_owned("b", 10, &bob, 0)), 0);
	store_usage_of(s, 1000, &use);
	assert_int_equal(use.bytes, 10);
	store_usage_of(s, 1001, &use);
	assert_int_equal(use.tensors, 0);
	assert_int_equal(use.bytes, 0);
	/* no quota: anything goes */
	store_set_quota(s, 0, 0);
	assert_int_equal(store_quota_check(s, 1000, 1000, (int64_t)1 << 50, &limit), 0);
	store_free(s);
}

/* The checkpoint's dirty set (docs/durability.md): oldest first, a
 * replacement dirty again, clean after store_mark_clean, deletions handed
 * out once, nothing tracked while off. */
static void test_dirty_set(void **state)
{
	struct store *s = store_new(10, NULL, NULL);
	struct tensor *a = mk("a", 4), *b = mk("b", 8), *a2 = mk("a", 16);
	uint64_t n, bytes, del;
	char name[TDP_MAX_NAME_LEN + 1];

	(void)state;
	assert_int_equal(store_put(s, mk("off", 1)), 0);
	assert_null(store_first_dirty(s));
	assert_int_equal(store_delete(s, "off", 3), 0);
	assert_int_equal(store_take_deleted(s, name), 0);
	store_track_dirty(s, true);
	assert_int_equal(store_put(s, a), 0);
	assert_int_equal(store_put(s, b), 0);
	store_dirty_totals(s, &n, &bytes, &del);
	assert_int_equal(n, 2);
	assert_int_equal(bytes, 12);
	assert_ptr_equal(store_first_dirty(s), a);
	store_mark_clean(s, a);
	assert_ptr_equal(store_first_dirty(s), b);
	/* The replacement of a clean tensor is dirty, behind b. */
	assert_int_equal(store_put(s, a2), 0);
	store_mark_clean(s, b);
	assert_ptr_equal(store_first_dirty(s), a2);
	store_mark_clean(s, a2);
	assert_null(store_first_dirty(s));
	store_mark_dirty(s, b);
	store_mark_dirty(s, b);
	store_dirty_totals(s, &n, &bytes, &del);
	assert_int_equal(n, 1);
	assert_int_equal(bytes, 8);
	/* Deleting a dirty tensor takes it off the list and remembers its name. */
	assert_int_equal(store_delete(s, "b", 1), 0);
	assert_null(store_first_dirty(s));
	assert_int_equal(store_delete(s, "a", 1), 0);
	store_dirty_totals(s, &n, &bytes, &del);
	assert_int_equal(n, 0);
	assert_int_equal(bytes, 0);
	assert_int_equal(del, 2);
	assert_int_equal(store_take_deleted(s, name), 1);
	assert_string_equal(name, "b");
	assert_int_equal(store_take_deleted(s, name), 1);
	assert_string_equal(name, "a");
	assert_int_equal(store_take_deleted(s, name), 0);
	assert_false(store_take_lost_deletions(s));
	/* Pending deletions are freed with the store. */
	assert_int_equal(store_put(s, mk("c", 1)), 0);
	assert_int_equal(store_delete(s, "c", 1), 0);
	store_free(s);
}

/* store_rename (moving pre-namespace names into a namespace): the tensor is
 * found under its new name only, the old name is a deletion for the
 * checkpoint writer, the tensor is dirty; a taken name is refused. */
static void test_rename(void **state)
{
	struct store *s = store_new(10, NULL, NULL);
	struct tensor *w = mk("w", 4), *other = mk("x", 4);
	char name[TDP_MAX_NAME_LEN + 1];
	uint64_t n, bytes, del;

	(void)state;
	assert_int_equal(store_put(s, w), 0);
	assert_int_equal(store_put(s, other), 0);
	store_track_dirty(s, true);
	assert_int_equal(store_rename(s, w, "x", 1), -EEXIST);
	assert_ptr_equal(find(s, "w"), w);
	assert_int_equal(store_rename(s, w, "1000/w", 6), 0);
	assert_null(find(s, "w"));
	assert_ptr_equal(find(s, "1000/w"), w);
	assert_string_equal(w->name, "1000/w");
	assert_int_equal(w->name_len, 6);
	assert_ptr_equal(store_first_dirty(s), w);
	store_dirty_totals(s, &n, &bytes, &del);
	assert_int_equal(n, 1);
	assert_int_equal(del, 1);
	assert_int_equal(store_take_deleted(s, name), 1);
	assert_string_equal(name, "w");
	assert_int_equal(store_rename(s, w, "w", 1), 0);   /* and back */
	assert_ptr_equal(find(s, "w"), w);
	assert_null(find(s, "1000/w"));
	store_free(s);
}

static void test_crc32c(void **state)
{
	static const uint8_t zeros[32];
	uint8_t big[1000];

	(void)state;
	assert_int_equal(tdp_crc32c(0, "123456789", 9), 0xE3069283u);
	assert_int_equal(tdp_crc32c(0, zeros, 32), 0x8A9136AAu); /* RFC 3720 B.4 */
	assert_int_equal(tdp_crc32c(0, "", 0), 0);
	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (uint8_t)(i * 7 + 3);
	/* Incremental equals one pass, whatever the split and alignment. */
	assert_int_equal(tdp_crc32c(tdp_crc32c(0, big, 333), big + 333, sizeof(big) - 333),
			 tdp_crc32c(0, big, sizeof(big)));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_put_find_delete),
		cmocka_unit_test(test_replace_keeps_created_bumps_version),
		cmocka_unit_test(test_list_prefix_sorted_and_growth),
		cmocka_unit_test(test_access_modes),
		cmocka_unit_test(test_quota),
		cmocka_unit_test(test_dirty_set),
		cmocka_unit_test(test_rename),
		cmocka_unit_test(test_crc32c),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

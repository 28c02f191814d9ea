/* Per-user namespaces without a daemon (daemon/store/names.c, docs/security.md
 * "Names"): client text to store keys and back, and tdp_ref_valid, the
 * client-side check of the same text. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "name.h"
#include "store/names.h"

static int qualify(uint32_t ns, const char *text, char *key, uint32_t *ret_ns)
{
	return names_qualify(ns, text, strlen(text), key, ret_ns);
}

static void test_qualify(void **state)
{
	char key[TDP_MAX_NAME_LEN + 1], name[300];
	uint32_t ns = 7;

	(void)state;
	assert_int_equal(qualify(1000, "w", key, &ns), 6);
	assert_string_equal(key, "1000/w");
	assert_int_equal(ns, 1000);
	assert_int_equal(qualify(0, "model/w.exp_avg", key, NULL), 17);
	assert_string_equal(key, "0/model/w.exp_avg");
	/* another namespace by uid; "root" exists everywhere */
	assert_true(qualify(1000, "~1001/a/b", key, &ns) > 0);
	assert_string_equal(key, "1001/a/b");
	assert_int_equal(ns, 1001);
	assert_true(qualify(1000, "~0/x", key, NULL) > 0);
	assert_string_equal(key, "0/x");
	assert_true(qualify(1000, "~root/x", key, &ns) > 0);
	assert_string_equal(key, "0/x");
	assert_int_equal(ns, 0);
	/* "1000/w" as text is a name with a slash, in the caller's namespace */
	assert_true(qualify(5, "1000/w", key, NULL) > 0);
	assert_string_equal(key, "5/1000/w");
	/* the key as snprintf's "%u/%s" writes it, for namespaces of 1 to 10 digits */
	{
		static const uint32_t uids[] = { 0, 9, 10, 65534, 1000000, 4294967294u };
		char want[TDP_MAX_NAME_LEN + 16];

		for (size_t i = 0; i < sizeof(uids) / sizeof(uids[0]); i++) {
			int n = snprintf(want, sizeof(want), "%u/%s", (unsigned)uids[i], "a.b_c:d-e/f");

			assert_int_equal(qualify(uids[i], "a.b_c:d-e/f", key, NULL), n);
			assert_string_equal(key, want);
		}
	}
	/* malformed */
	assert_int_equal(qualify(1000, "", key, NULL), -EINVAL);
	assert_int_equal(qualify(1000, "~", key, NULL), -EINVAL);
	assert_int_equal(qualify(1000, "~/x", key, NULL), -EINVAL);
	assert_int_equal(qualify(1000, "~root", key, NULL), -EINVAL);
	assert_int_equal(qualify(1000, "~root/", key, NULL), -EINVAL);
	assert_int_equal(qualify(1000, "~a b/x", key, NULL), -EINVAL);
	assert_int_equal(qualify(1000, "~4294967295/x", key, NULL), -EINVAL);
	assert_int_equal(qualify(1000, "~99999999999/x", key, NULL), -EINVAL);
	assert_int_equal(qualify(1000, "a~b", key, NULL), -EINVAL);
	assert_int_equal(qualify(1000, "~tdns-no-such-user-xyz/x", key, NULL), -ESRCH);
	/* the key, namespace included, is at most TDP_MAX_NAME_LEN bytes */
	memset(name, 'n', sizeof(name));
	name[TDP_MAX_NAME_LEN - 5] = '\0';
	assert_int_equal(qualify(1000, name, key, NULL), TDP_MAX_NAME_LEN);
	name[TDP_MAX_NAME_LEN - 5] = 'n';
	name[TDP_MAX_NAME_LEN - 4] = '\0';
	assert_int_equal(qualify(1000, name, key, NULL), -ENAMETOOLONG);
	memset(name, 'n', sizeof(name));
	name[TDP_MAX_NAME_LEN + 1] = '\0';
	assert_int_equal(qualify(1000, name, key, NULL), -EINVAL);
	/* a prefix may be empty after the namespace */
	assert_int_equal(names_qualify_prefix(1000, "", 0, key), 5);
	assert_string_equal(key, "1000/");
	assert_int_equal(names_qualify_prefix(1000, "~0/", 3, key), 2);
	assert_string_equal(key, "0/");
	assert_int_equal(names_qualify_prefix(1000, "~0", 2, key), -EINVAL);
}

static void test_split_show(void **state)
{
	char out[NAMES_SHOWN_MAX];
	uint32_t ns;
	size_t off;

	(void)state;
	assert_int_equal(names_key_split("1000/w", 6, &ns, &off), 0);
	assert_int_equal(ns, 1000);
	assert_int_equal(off, 5);
	assert_int_equal(names_key_split("0/x", 3, &ns, &off), 0);
	assert_int_equal(ns, 0);
	/* no key: names from before namespaces */
	assert_int_equal(names_key_split("w", 1, &ns, &off), -EINVAL);
	assert_int_equal(names_key_split("1000/", 5, &ns, &off), -EINVAL);
	assert_int_equal(names_key_split("/w", 2, &ns, &off), -EINVAL);
	assert_int_equal(names_key_split("01/w", 4, &ns, &off), -EINVAL);
	assert_int_equal(names_key_split("4294967295/w", 12, &ns, &off), -EINVAL);
	/* the viewer's own names plain, others' qualified */
	assert_string_equal(names_show(1000, "1000/a/b", out), "a/b");
	assert_string_equal(names_show(1000, "0/a", out), "~root/a");
	assert_string_equal(names_show(0, "0/a", out), "a");
	assert_string_equal(names_show(1000, "3999999999/a", out), "~3999999999/a");
	assert_string_equal(names_show(1000, "legacy", out), "legacy");
}

static void test_create_and_owner(void **state)
{
	const struct access_cred root = { .uid = 0, .gid = 0 };
	const struct access_cred alice = { .uid = 3999999998u, .gid = 77 };
	uint32_t owner, group;

	(void)state;
	assert_true(names_may_create(&alice, 3999999998u));
	assert_false(names_may_create(&alice, 0));
	assert_true(names_may_create(&root, 3999999998u));
	names_new_owner(&alice, "3999999998/x", &owner, &group);
	assert_int_equal(owner, 3999999998u);
	assert_int_equal(group, 77);
	/* root creating in alice's namespace: alice's tensor (no passwd entry:
	 * her uid as the group) */
	names_new_owner(&root, "3999999998/x", &owner, &group);
	assert_int_equal(owner, 3999999998u);
	assert_int_equal(group, 3999999998u);
	names_new_owner(&root, "0/x", &owner, &group);
	assert_int_equal(owner, 0);
	assert_int_equal(group, 0);
}

static void test_ref_valid(void **state)
{
	static const char *const good[] = { "w", "a/b.c:d-e_f", "~alice/w", "~1000/w", "~a.b-c_d/x/y" };
	static const char *const bad[] = { "", "~", "~/w", "~alice", "~alice/", "~a b/w", "a~b", "~al!ce/w",
					   "~abcdefghijklmnopqrstuvwxyz0123456/w" };

	(void)state;
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		assert_true(tdp_ref_valid(good[i], strlen(good[i]), false));
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_false(tdp_ref_valid(bad[i], strlen(bad[i]), false));
	assert_true(tdp_ref_valid("", 0, true));
	assert_true(tdp_ref_valid("~alice/", 7, true));
	assert_false(tdp_ref_valid("~alice", 6, true));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_qualify),
		cmocka_unit_test(test_split_show),
		cmocka_unit_test(test_create_and_owner),
		cmocka_unit_test(test_ref_valid),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

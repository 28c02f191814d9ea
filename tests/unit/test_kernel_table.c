/* The kernel table (daemon/kernels/kernel.c) on the stub daemon, without a
 * socket or a compiler: kernels added and found by owner and name, the
 * counts kernel.create's limits read, replacement, removal, clearing (a
 * device loss) and freeing, every pipeline destroyed exactly once (the
 * stub counts them). Every test holds two daemons side by side: the table
 * is each daemon's own (d->kernel_table), not the process's. */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "fuzz_gpu.h"
#include "gpu/pipeline.h"
#include "kernels/kernel.h"
#include "stub_daemon.h"

/* Two daemons side by side (a, b: stub_daemons_new's two). */
struct two {
	struct stub_daemon *a, *b;
	uint64_t pipelines0;    /* the stub's live pipelines before */
};

static int setup(void **state)
{
	struct two *t = malloc(sizeof(*t));

	if (!t)
		return -1;
	t->pipelines0 = fuzz_gpu_live_pipelines();
	t->a = stub_daemons_new(2);
	if (!t->a) {
		free(t);
		return -1;
	}
	t->b = &t->a[1];
	*state = t;
	return 0;
}

static int teardown(void **state)
{
	struct two *t = *state;

	stub_daemons_free(t->a, 2);
	/* Every kernel's pipeline was destroyed with its table. */
	assert_int_equal(fuzz_gpu_live_pipelines(), t->pipelines0);
	free(t);
	return 0;
}

/* A kernel of `owner` named `name` with a pipeline on sd's device, as
 * kernel.create makes one before kernel_insert. */
static struct kernel *make(struct stub_daemon *sd, uint32_t owner, const char *name)
{
	static const uint32_t code[5] = { 0x07230203 };
	struct kernel *k = calloc(1, sizeof(*k));

	assert_non_null(k);
	snprintf(k->name, sizeof(k->name), "%s", name);
	k->owner = owner;
	assert_int_equal(gpu_pipeline_build(&sd->gpu, code, sizeof(code), "main", &k->pipe[0].pipeline), 0);
	k->pipe[0].shader = k->name;
	return k;
}

/* Pipelines live beyond the test's start. */
static uint64_t live(const struct two *t)
{
	return fuzz_gpu_live_pipelines() - t->pipelines0;
}

static void test_insert_find(void **state)
{
	struct two *t = *state;
	struct daemon *a = &t->a->d, *b = &t->b->d;
	struct kernel *k1 = make(t->a, 1000, "scale"), *k2 = make(t->a, 1001, "scale"),
		      *k3 = make(t->a, 1000, "shift");
	bool seen[3] = { false, false, false };

	assert_int_equal(kernel_count(a), 0);
	kernel_insert(a, k1);
	kernel_insert(a, k2);
	kernel_insert(a, k3);
	assert_int_equal(kernel_count(a), 3);
	/* Found by owner and name: one uid's name is not another's. */
	assert_ptr_equal(kernel_find(a, 1000, "scale"), k1);
	assert_ptr_equal(kernel_find(a, 1001, "scale"), k2);
	assert_ptr_equal(kernel_find(a, 1000, "shift"), k3);
	assert_null(kernel_find(a, 1001, "shift"));
	assert_null(kernel_find(a, 1000, "scal"));
	/* The listing holds each once. */
	for (unsigned i = 0; i < kernel_count(a); i++) {
		const struct kernel *k = kernel_at(a, i);

		seen[k == k1 ? 0 : k == k2 ? 1 : 2] = true;
	}
	assert_true(seen[0] && seen[1] && seen[2]);
	assert_null(kernel_at(a, 3));
	/* What user_max_kernels counts: the owner's others. */
	assert_int_equal(kernel_count_owner(a, 1000, "new"), 2);
	assert_int_equal(kernel_count_owner(a, 1000, "scale"), 1);
	assert_int_equal(kernel_count_owner(a, 1001, "scale"), 0);
	assert_int_equal(kernel_count_owner(a, 1002, "scale"), 0);
	/* The other daemon has none of them. */
	assert_int_equal(kernel_count(b), 0);
	assert_null(kernel_find(b, 1000, "scale"));
	assert_null(kernel_at(b, 0));
	assert_int_equal(live(t), 3);
}

/* A kernel.create of a name the owner holds replaces the kernel: the old
 * one's pipeline goes. */
static void test_replace(void **state)
{
	struct two *t = *state;
	struct daemon *a = &t->a->d;
	struct kernel *old = make(t->a, 1000, "scale"), *newer = make(t->a, 1000, "scale");

	kernel_insert(a, old);
	assert_int_equal(live(t), 2);
	kernel_insert(a, newer);
	assert_int_equal(kernel_count(a), 1);
	assert_ptr_equal(kernel_find(a, 1000, "scale"), newer);
	assert_int_equal(live(t), 1);
}

/* KERNEL_MAX kernels a daemon, KERNEL_MAX_PER_USER an owner: the table
 * holds them and reports the counts the handlers check; a full daemon
 * leaves another daemon empty. */
static void test_limits(void **state)
{
	struct two *t = *state;
	struct daemon *a = &t->a->d, *b = &t->b->d;
	unsigned owners = KERNEL_MAX / KERNEL_MAX_PER_USER;
	char name[32];

	for (unsigned o = 0; o < owners; o++)
		for (unsigned i = 0; i < KERNEL_MAX_PER_USER; i++) {
			snprintf(name, sizeof(name), "k%u", i);
			kernel_insert(a, make(t->a, 1000 + o, name));
		}
	assert_int_equal(kernel_count(a), KERNEL_MAX);
	for (unsigned o = 0; o < owners; o++) {
		assert_int_equal(kernel_count_owner(a, 1000 + o, "other"), KERNEL_MAX_PER_USER);
		/* Replacing one of its own is not one more. */
		assert_int_equal(kernel_count_owner(a, 1000 + o, "k5"), KERNEL_MAX_PER_USER - 1);
	}
	/* A replacement in a full table keeps it full, not over. */
	kernel_insert(a, make(t->a, 1000, "k5"));
	assert_int_equal(kernel_count(a), KERNEL_MAX);
	assert_int_equal(live(t), KERNEL_MAX);
	/* The limits are per daemon: b is empty and takes kernels. */
	assert_int_equal(kernel_count(b), 0);
	assert_int_equal(kernel_count_owner(b, 1000, "other"), 0);
	kernel_insert(b, make(t->b, 1000, "k5"));
	assert_int_equal(kernel_count(b), 1);
	assert_ptr_not_equal(kernel_find(b, 1000, "k5"), kernel_find(a, 1000, "k5"));
	/* Removing one makes room for one. */
	assert_int_equal(kernel_remove(a, 1001, "k0"), 0);
	assert_int_equal(kernel_count(a), KERNEL_MAX - 1);
}

static void test_remove(void **state)
{
	struct two *t = *state;
	struct daemon *a = &t->a->d, *b = &t->b->d;
	struct kernel *kb;

	kernel_insert(a, make(t->a, 1000, "scale"));
	kernel_insert(a, make(t->a, 1000, "shift"));
	kernel_insert(b, kb = make(t->b, 1000, "scale"));
	/* Only the owner's name removes it. */
	assert_int_equal(kernel_remove(a, 1001, "scale"), -ENOENT);
	assert_int_equal(kernel_remove(a, 1000, "nope"), -ENOENT);
	assert_int_equal(kernel_remove(a, 1000, "scale"), 0);
	assert_null(kernel_find(a, 1000, "scale"));
	assert_non_null(kernel_find(a, 1000, "shift"));
	assert_int_equal(kernel_count(a), 1);
	assert_int_equal(kernel_remove(a, 1000, "scale"), -ENOENT);
	/* b's kernel of the same owner and name stays. */
	assert_ptr_equal(kernel_find(b, 1000, "scale"), kb);
	assert_int_equal(live(t), 2);
	/* kernel_free: NULL accepted; a kernel never inserted goes too. */
	kernel_free(a, NULL);
	kernel_free(a, make(t->a, 1000, "loose"));
	assert_int_equal(live(t), 2);
}

/* A device loss clears the table (recover.c), which stays usable; the
 * shut-down frees it, once. */
static void test_clear_fini(void **state)
{
	struct two *t = *state;
	struct daemon *a = &t->a->d, *b = &t->b->d;

	kernel_insert(a, make(t->a, 1000, "scale"));
	kernel_insert(a, make(t->a, 1001, "scale"));
	kernel_insert(b, make(t->b, 1000, "scale"));
	kernels_clear(a);
	assert_int_equal(kernel_count(a), 0);
	assert_null(kernel_find(a, 1000, "scale"));
	assert_int_equal(kernel_count(b), 1);
	assert_int_equal(live(t), 1);
	kernel_insert(a, make(t->a, 1000, "scale"));
	assert_int_equal(kernel_count(a), 1);
	kernels_fini(a);
	assert_null(a->kernel_table);
	kernels_fini(a);        /* and again (stub_daemon_fini does) */
	assert_int_equal(live(t), 1);
	assert_non_null(kernel_find(b, 1000, "scale"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_insert_find, setup, teardown),
		cmocka_unit_test_setup_teardown(test_replace, setup, teardown),
		cmocka_unit_test_setup_teardown(test_limits, setup, teardown),
		cmocka_unit_test_setup_teardown(test_remove, setup, teardown),
		cmocka_unit_test_setup_teardown(test_clear_fini, setup, teardown),
	};

	return cmocka_run_group_tests_name("kernel_table", tests, NULL, NULL);
}

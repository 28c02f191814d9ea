/* gpu/device.c's gpu_choose: which of the devices found the daemon opens for
 * each `device` setting (docs/devices.md), without opening any. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "gpu/device.h"

/* Two discrete GPUs around an integrated one and lavapipe. */
static const struct gpu_device_desc found[] = {
	{ .index = 0, .type = "cpu", .usable = true, .rank = 3 },
	{ .index = 1, .type = "discrete", .usable = true, .rank = 0 },
	{ .index = 2, .type = "integrated", .usable = true, .rank = 1 },
	{ .index = 3, .type = "discrete", .usable = true, .rank = 0 },
};

static unsigned choose(const struct gpu_choice *c, uint32_t *ids)
{
	uint32_t n = 0;

	assert_int_equal(gpu_choose(found, 4, c, ids, &n), 0);
	return n;
}

static void test_auto_all_cpu(void **state)
{
	uint32_t ids[GPU_MAX_DEVICES];

	(void)state;
	assert_int_equal(choose(&(struct gpu_choice){ .pick = GPU_PICK_AUTO }, ids), 2);
	assert_int_equal(ids[0], 1);
	assert_int_equal(ids[1], 3);
	assert_int_equal(choose(&(struct gpu_choice){ .pick = GPU_PICK_ALL }, ids), 4);
	assert_int_equal(choose(&(struct gpu_choice){ .pick = GPU_PICK_CPU }, ids), 1);
	assert_int_equal(ids[0], 0);
}

/* `local`: one of auto's, the member's local rank modulo their count. */
static void test_local(void **state)
{
	uint32_t ids[GPU_MAX_DEVICES];

	(void)state;
	for (uint32_t rank = 0; rank < 5; rank++) {
		assert_int_equal(choose(&(struct gpu_choice){ .pick = GPU_PICK_LOCAL, .local_rank = rank }, ids), 1);
		assert_int_equal(ids[0], rank % 2 ? 3 : 1);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_auto_all_cpu),
		cmocka_unit_test(test_local),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

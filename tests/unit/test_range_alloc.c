/* The free-list allocator behind device memory blocks, checked against a
 * byte map of which offsets are taken. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "gpu/range_alloc.h"

static void test_fill_and_empty(void **state)
{
	struct range_alloc ra;
	uint64_t off[16];

	assert_int_equal(range_alloc_init(&ra, 1024), 0);
	for (int i = 0; i < 16; i++) {
		assert_int_equal(range_alloc_take(&ra, 64, 64, &off[i]), 0);
		assert_int_equal(off[i], (uint64_t)i * 64);
	}
	assert_int_equal(range_alloc_take(&ra, 1, 1, &off[0]), -ENOSPC);
	/* Free every other one, then the rest: all must merge back into one range. */
	for (int i = 0; i < 16; i += 2)
		assert_int_equal(range_alloc_give(&ra, off[i], 64), 0);
	assert_int_equal(ra.nfree, 8);
	assert_int_equal(range_alloc_take(&ra, 128, 64, &off[0]), -ENOSPC);
	for (int i = 1; i < 16; i += 2)
		assert_int_equal(range_alloc_give(&ra, off[i], 64), 0);
	assert_true(range_alloc_empty(&ra));
	assert_int_equal(ra.nfree, 1);
	assert_int_equal(ra.free[0].offset, 0);
	assert_int_equal(ra.free[0].size, 1024);
	range_alloc_fini(&ra);
}

static void test_alignment_padding(void **state)
{
	struct range_alloc ra;
	uint64_t a, b, c;

	assert_int_equal(range_alloc_init(&ra, 4096), 0);
	assert_int_equal(range_alloc_take(&ra, 10, 1, &a), 0);
	assert_int_equal(a, 0);
	assert_int_equal(range_alloc_take(&ra, 100, 256, &b), 0);
	assert_int_equal(b, 256);
	/* The padding [10, 256) stays free and usable. */
	assert_int_equal(range_alloc_take(&ra, 200, 8, &c), 0);
	assert_int_equal(c, 16);
	assert_int_equal(range_alloc_give(&ra, a, 10), 0);
	assert_int_equal(range_alloc_give(&ra, b, 100), 0);
	assert_int_equal(range_alloc_give(&ra, c, 200), 0);
	assert_true(range_alloc_empty(&ra));
	assert_int_equal(ra.nfree, 1);
	range_alloc_fini(&ra);
}

/* Random takes and gives never overlap and never leak. */
static void test_random_against_map(void **state)
{
	enum { SIZE = 1 << 16, SLOTS = 64 };
	struct range_alloc ra;
	static uint8_t map[SIZE];
	uint64_t off[SLOTS], len[SLOTS];
	unsigned seed = 12345;

	memset(map, 0, sizeof(map));
	memset(len, 0, sizeof(len));
	assert_int_equal(range_alloc_init(&ra, SIZE), 0);
	for (int step = 0; step < 20000; step++) {
		int i;

		seed = seed * 1103515245 + 12345;
		i = (int)((seed >> 16) % SLOTS);
		if (len[i]) {
			for (uint64_t k = 0; k < len[i]; k++)
				map[off[i] + k] = 0;
			assert_int_equal(range_alloc_give(&ra, off[i], len[i]), 0);
			len[i] = 0;
		} else {
			uint64_t n = 1 + (seed >> 8) % 3000, align = (uint64_t)1 << ((seed >> 4) % 9);

			if (range_alloc_take(&ra, n, align, &off[i]) == 0) {
				assert_int_equal(off[i] % align, 0);
				assert_true(off[i] + n <= SIZE);
				for (uint64_t k = 0; k < n; k++) {
					assert_int_equal(map[off[i] + k], 0);
					map[off[i] + k] = 1;
				}
				len[i] = n;
			}
		}
	}
	for (int i = 0; i < SLOTS; i++)
		if (len[i])
			assert_int_equal(range_alloc_give(&ra, off[i], len[i]), 0);
	assert_true(range_alloc_empty(&ra));
	assert_int_equal(ra.nfree, 1);
	assert_int_equal(ra.free[0].size, SIZE);
	range_alloc_fini(&ra);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fill_and_empty),
		cmocka_unit_test(test_alignment_padding),
		cmocka_unit_test(test_random_against_map),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

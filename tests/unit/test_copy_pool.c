/* base/copy_pool.c: large copies split over helper threads give the bytes a
 * memcpy gives, for sizes around the split threshold and the page-rounded
 * part boundaries, with four threads (TENSORD_COPY_THREADS, set before the
 * pool starts; the CI machine's two cores would start none) and with
 * another thread copying at the same time (it falls back to memcpy). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/copy_pool.h"

static void fill(uint8_t *p, size_t n, uint32_t seed)
{
	for (size_t i = 0; i < n; i++) {
		seed = seed * 1664525u + 1013904223u;
		p[i] = (uint8_t)(seed >> 24);
	}
}

static void check_copy(size_t n, size_t dst_off)
{
	uint8_t *src = malloc(n + 1), *dst = malloc(n + dst_off + 2);

	assert_non_null(src);
	assert_non_null(dst);
	fill(src, n, (uint32_t)n);
	memset(dst, 0xA5, n + dst_off + 2);
	copy_pool_memcpy(dst + dst_off, src, n);
	assert_memory_equal(dst + dst_off, src, n);
	/* Nothing written around the range. */
	for (size_t i = 0; i < dst_off; i++)
		assert_int_equal(dst[i], 0xA5);
	assert_int_equal(dst[dst_off + n], 0xA5);
	assert_int_equal(dst[dst_off + n + 1], 0xA5);
	free(src);
	free(dst);
}

static void test_sizes(void **state)
{
	static const size_t sizes[] = { 0, 1, 4095, (4u << 20) - 1, 4u << 20, (4u << 20) + 1,
					(12u << 20) + 4097, (33u << 20) + 3 };

	(void)state;
	assert_int_equal(copy_pool_threads(), 4);
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		check_copy(sizes[i], 0);
		check_copy(sizes[i], 3);
	}
}

static void *other_copier(void *arg)
{
	(void)arg;
	for (int i = 0; i < 8; i++)
		check_copy((9u << 20) + 17, 1);
	return NULL;
}

static void test_two_callers(void **state)
{
	pthread_t t;

	(void)state;
	assert_int_equal(pthread_create(&t, NULL, other_copier, NULL), 0);
	for (int i = 0; i < 8; i++)
		check_copy((11u << 20) + 5, 2);
	assert_int_equal(pthread_join(t, NULL), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sizes),
		cmocka_unit_test(test_two_callers),
	};

	setenv("TENSORD_COPY_THREADS", "4", 1);
	return cmocka_run_group_tests(tests, NULL, NULL);
}

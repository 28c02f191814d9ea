/* Unit tests of tensorctl's pure helpers: half-float conversions, --values and
 * --shape parsing, number formatting, NumPy-style and JSON printing. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "dtype.h"
#include "json.h"
#include "print.h"
#include "values.h"

static uint64_t rng_state = 42;

static uint64_t rng_next(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static float bits_f32(uint32_t x)
{
	float f;

	memcpy(&f, &x, sizeof(f));
	return f;
}

/* ---- half floats -------------------------------------------------------- */

static void test_f16_exhaustive_round_trip(void **state)
{
	(void)state;
	for (uint32_t h = 0; h < 0x10000; h++) {
		float f = ctl_f16_to_f32((uint16_t)h);
		uint16_t back = ctl_f32_to_f16(f);

		if (isnan(f)) {
			assert_true((back & 0x7c00) == 0x7c00 && (back & 0x3ff) != 0);
			assert_int_equal(back & 0x8000, h & 0x8000);
		} else {
			assert_int_equal(back, h);
		}
	}
}

static void test_bf16_exhaustive_round_trip(void **state)
{
	(void)state;
	for (uint32_t h = 0; h < 0x10000; h++) {
		float f = ctl_bf16_to_f32((uint16_t)h);
		uint16_t back = ctl_f32_to_bf16(f);

		if (isnan(f))
			assert_true((back & 0x7f80) == 0x7f80 && (back & 0x7f) != 0);
		else
			assert_int_equal(back, h);
	}
}

static void test_f16_known_values(void **state)
{
	(void)state;
	assert_int_equal(ctl_f32_to_f16(0.0f), 0x0000);
	assert_int_equal(ctl_f32_to_f16(-0.0f), 0x8000);
	assert_int_equal(ctl_f32_to_f16(1.0f), 0x3c00);
	assert_int_equal(ctl_f32_to_f16(-2.0f), 0xc000);
	assert_int_equal(ctl_f32_to_f16(65504.0f), 0x7bff);
	assert_int_equal(ctl_f32_to_f16(65519.0f), 0x7bff);  /* below the tie */
	assert_int_equal(ctl_f32_to_f16(65520.0f), 0x7c00);  /* tie rounds to even: inf */
	assert_int_equal(ctl_f32_to_f16(1e10f), 0x7c00);
	assert_int_equal(ctl_f32_to_f16(-INFINITY), 0xfc00);
	assert_int_equal(ctl_f32_to_f16(ldexpf(1, -24)), 0x0001); /* smallest subnormal */
	assert_int_equal(ctl_f32_to_f16(ldexpf(1, -25)), 0x0000); /* tie to even: 0 */
	assert_int_equal(ctl_f32_to_f16(ldexpf(1.5f, -25)), 0x0001);
	assert_int_equal(ctl_f32_to_f16(ldexpf(3, -25)), 0x0002); /* 1.5 ulp: tie to even 2 */
	assert_int_equal(ctl_f32_to_f16(ldexpf(1023, -24)), 0x03ff);
	assert_int_equal(ctl_f32_to_f16(ldexpf(2047, -25)), 0x0400); /* carries to normal */
	assert_int_equal(ctl_f32_to_f16(1.0f + ldexpf(1, -11)), 0x3c00);     /* tie: even */
	assert_int_equal(ctl_f32_to_f16(1.0f + ldexpf(3, -11)), 0x3c02);     /* tie: even */
	assert_int_equal(ctl_f32_to_f16(1.0f + ldexpf(1.5f, -11)), 0x3c01);  /* above tie */
	assert_true(isnan(ctl_f16_to_f32(ctl_f32_to_f16(NAN))));
	/* A NaN whose payload sits only in the low bits must not become inf. */
	assert_true(isnan(ctl_f16_to_f32(ctl_f32_to_f16(bits_f32(0x7f800001)))));
	assert_true(ctl_f16_to_f32(0x0001) == ldexpf(1, -24));
	assert_true(ctl_f16_to_f32(0x8001) == -ldexpf(1, -24));
	assert_true(ctl_f16_to_f32(0x7bff) == 65504.0f);
}

static void test_bf16_known_values(void **state)
{
	(void)state;
	assert_int_equal(ctl_f32_to_bf16(1.0f), 0x3f80);
	assert_int_equal(ctl_f32_to_bf16(-0.0f), 0x8000);
	assert_int_equal(ctl_f32_to_bf16(bits_f32(0x3f808000)), 0x3f80); /* tie: even */
	assert_int_equal(ctl_f32_to_bf16(bits_f32(0x3f818000)), 0x3f82); /* tie: even */
	assert_int_equal(ctl_f32_to_bf16(bits_f32(0x3f808001)), 0x3f81);
	assert_int_equal(ctl_f32_to_bf16(bits_f32(0x7f7fffff)), 0x7f80); /* overflows to inf */
	assert_int_equal(ctl_f32_to_bf16(INFINITY), 0x7f80);
	assert_true(isnan(ctl_bf16_to_f32(ctl_f32_to_bf16(bits_f32(0x7f800001)))));
	assert_true(isnan(ctl_bf16_to_f32(ctl_f32_to_bf16(bits_f32(0xff800001)))));
}

/* |f - value(h)| must be no larger than for either neighbour, ties to even. */
static void check_nearest(float f, uint16_t h, float (*to_f32)(uint16_t))
{
	double v = to_f32(h), d = fabs((double)f - v);

	if (isinf(v))
		return;
	for (int step = -1; step <= 1; step += 2) {
		uint16_t n = (uint16_t)(h + step);
		double nv = to_f32(n), nd;

		if ((n & 0x7fff) == 0x7fff || isnan(nv) || ((n ^ h) & 0x8000))
			continue;
		nd = fabs((double)f - nv);
		assert_true(d <= nd);
		if (d == nd)
			assert_int_equal(h & 1, 0);
	}
}

static void test_half_random_nearest(void **state)
{
	(void)state;
	for (int i = 0; i < 2000000; i++) {
		uint32_t x = (uint32_t)rng_next();
		float f = bits_f32(x);

		if (isnan(f))
			continue;
		if (fabsf(f) < 65504.0f)
			check_nearest(f, ctl_f32_to_f16(f), ctl_f16_to_f32);
		check_nearest(f, ctl_f32_to_bf16(f), ctl_bf16_to_f32);
	}
}

/* ---- --values and --shape ----------------------------------------------- */

static void test_parse_values_ok(void **state)
{
	char err[256];
	void *data;
	size_t n;
	float f[4];
	int32_t iv[3];
	uint16_t h[2];

	(void)state;
	assert_int_equal(ctl_parse_values("1,2.5, -3 ,1e-3", TDP_DTYPE_F32, &data, &n, err,
					  sizeof(err)), 0);
	assert_int_equal(n, 4);
	memcpy(f, data, sizeof(f));
	assert_true(f[0] == 1.0f && f[1] == 2.5f && f[2] == -3.0f && f[3] == 1e-3f);
	free(data);

	assert_int_equal(ctl_parse_values("-2147483648,2147483647,+7", TDP_DTYPE_I32, &data, &n,
					  err, sizeof(err)), 0);
	assert_int_equal(n, 3);
	memcpy(iv, data, sizeof(iv));
	assert_true(iv[0] == INT32_MIN && iv[1] == INT32_MAX && iv[2] == 7);
	free(data);

	assert_int_equal(ctl_parse_values("0,255", TDP_DTYPE_U8, &data, &n, err, sizeof(err)), 0);
	assert_int_equal(n, 2);
	assert_int_equal(((uint8_t *)data)[1], 255);
	free(data);

	assert_int_equal(ctl_parse_values("0.1,nan", TDP_DTYPE_F16, &data, &n, err, sizeof(err)), 0);
	memcpy(h, data, sizeof(h));
	assert_int_equal(h[0], 0x2e66);
	assert_true(isnan(ctl_f16_to_f32(h[1])));
	free(data);

	assert_int_equal(ctl_parse_values("inf,-inf", TDP_DTYPE_BF16, &data, &n, err, sizeof(err)), 0);
	memcpy(h, data, sizeof(h));
	assert_int_equal(h[0], 0x7f80);
	assert_int_equal(h[1], 0xff80);
	free(data);

	data = (void *)1;
	assert_int_equal(ctl_parse_values("  ", TDP_DTYPE_F32, &data, &n, err, sizeof(err)), 0);
	assert_int_equal(n, 0);
	assert_null(data);
}

static void expect_values_error(const char *s, int dtype, int want)
{
	char err[256] = "";
	void *data = (void *)0x1;
	size_t n = 77;

	assert_int_equal(ctl_parse_values(s, dtype, &data, &n, err, sizeof(err)), want);
	assert_true(err[0] != '\0');
	assert_ptr_equal(data, (void *)0x1); /* out-params untouched on failure */
	assert_int_equal(n, 77);
}

static void test_parse_values_errors(void **state)
{
	char big[2048];

	(void)state;
	expect_values_error("1,,2", TDP_DTYPE_F32, -EINVAL);
	expect_values_error("1,2,", TDP_DTYPE_F32, -EINVAL);
	expect_values_error(",1", TDP_DTYPE_F32, -EINVAL);
	expect_values_error("1x", TDP_DTYPE_F32, -EINVAL);
	expect_values_error("1 2", TDP_DTYPE_F32, -EINVAL);
	expect_values_error("abc", TDP_DTYPE_F16, -EINVAL);
	expect_values_error("1e39", TDP_DTYPE_F32, -ERANGE);
	expect_values_error("-1e39", TDP_DTYPE_F32, -ERANGE);
	expect_values_error("65520", TDP_DTYPE_F16, -ERANGE);
	expect_values_error("1e300", TDP_DTYPE_BF16, -ERANGE);
	expect_values_error("3.4e38", TDP_DTYPE_BF16, -ERANGE);
	expect_values_error("1.5", TDP_DTYPE_I32, -EINVAL);
	expect_values_error("1e3", TDP_DTYPE_I32, -EINVAL);
	expect_values_error("0x10", TDP_DTYPE_I32, -EINVAL);
	expect_values_error("", TDP_DTYPE_COUNT, -EINVAL);
	expect_values_error("2147483648", TDP_DTYPE_I32, -ERANGE);
	expect_values_error("-2147483649", TDP_DTYPE_I32, -ERANGE);
	expect_values_error("99999999999999999999999", TDP_DTYPE_I32, -ERANGE);
	expect_values_error("256", TDP_DTYPE_U8, -ERANGE);
	expect_values_error("-1", TDP_DTYPE_U8, -ERANGE);
	expect_values_error("-", TDP_DTYPE_U8, -EINVAL);
	memset(big, '1', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	expect_values_error(big, TDP_DTYPE_F32, -EINVAL);
}

static void test_parse_shape(void **state)
{
	uint64_t shape[TDP_MAX_RANK] = { 0 };
	uint32_t rank = 99;
	char err[256];

	(void)state;
	assert_int_equal(ctl_parse_shape("2,3", shape, &rank, err, sizeof(err)), 0);
	assert_int_equal(rank, 2);
	assert_true(shape[0] == 2 && shape[1] == 3);
	assert_int_equal(ctl_parse_shape(" 0 , 4 ", shape, &rank, err, sizeof(err)), 0);
	assert_true(rank == 2 && shape[0] == 0 && shape[1] == 4);
	assert_int_equal(ctl_parse_shape("", shape, &rank, err, sizeof(err)), 0);
	assert_int_equal(rank, 0);
	rank = 99;
	assert_int_equal(ctl_parse_shape("scalar", shape, &rank, err, sizeof(err)), 0);
	assert_int_equal(rank, 0);
	assert_int_equal(ctl_parse_shape("1,1,1,1,1,1,1,1", shape, &rank, err, sizeof(err)), 0);
	assert_int_equal(rank, 8);

	rank = 99;
	assert_int_equal(ctl_parse_shape("1,1,1,1,1,1,1,1,1", shape, &rank, err, sizeof(err)),
			 -EINVAL);
	assert_int_equal(ctl_parse_shape("2,", shape, &rank, err, sizeof(err)), -EINVAL);
	assert_int_equal(ctl_parse_shape("-1", shape, &rank, err, sizeof(err)), -EINVAL);
	assert_int_equal(ctl_parse_shape("+1", shape, &rank, err, sizeof(err)), -EINVAL);
	assert_int_equal(ctl_parse_shape("1.0", shape, &rank, err, sizeof(err)), -EINVAL);
	assert_int_equal(ctl_parse_shape("(2,3)", shape, &rank, err, sizeof(err)), -EINVAL);
	assert_int_equal(ctl_parse_shape("scalars", shape, &rank, err, sizeof(err)), -EINVAL);
	assert_int_equal(rank, 99);
}

/* ---- formatting ----------------------------------------------------------- */

static void test_format_float_shortest(void **state)
{
	char buf[64];

	(void)state;
	ctl_format_float(buf, sizeof(buf), TDP_DTYPE_F32, 0.1f);
	assert_string_equal(buf, "0.1");
	ctl_format_float(buf, sizeof(buf), TDP_DTYPE_F32, 16777217.0f);
	assert_string_equal(buf, "16777216");
	ctl_format_float(buf, sizeof(buf), TDP_DTYPE_F32, (double)bits_f32(0x3f7fffff));
	assert_string_equal(buf, "0.99999994");
	ctl_format_float(buf, sizeof(buf), TDP_DTYPE_F16, ctl_f16_to_f32(0x2e66));
	assert_string_equal(buf, "0.1");
	ctl_format_float(buf, sizeof(buf), TDP_DTYPE_BF16, ctl_bf16_to_f32(0x3dcd));
	assert_string_equal(buf, "0.1");
	ctl_format_float(buf, sizeof(buf), TDP_DTYPE_F32, -0.0);
	assert_string_equal(buf, "-0");
	ctl_format_float(buf, sizeof(buf), TDP_DTYPE_F32, NAN);
	assert_string_equal(buf, "nan");
	ctl_format_float(buf, sizeof(buf), TDP_DTYPE_F32, -INFINITY);
	assert_string_equal(buf, "-inf");
	/* Positional for exponents -4..15, as Python's repr; never "1e+01". */
	static const struct { float f; const char *want; } f32[] = {
		{ 10.0f, "10" }, { 100.0f, "100" }, { -2000.0f, "-2000" }, { 1234.5f, "1234.5" },
		{ 0.0001f, "0.0001" }, { 0.00001f, "1e-05" }, { 1e20f, "1e+20" }, { 3e15f, "3000000000000000" }, { -0.00012f, "-0.00012" },
		{ 1e16f, "1e+16" }, { 0.3f, "0.3" }, { 123456792.0f, "123456790" },
	};
	for (size_t i = 0; i < sizeof(f32) / sizeof(f32[0]); i++) {
		ctl_format_float(buf, sizeof(buf), TDP_DTYPE_F32, f32[i].f);
		assert_string_equal(buf, f32[i].want);
	}
	static const struct { double d; const char *want; } f64[] = {
		{ 10.0, "10" }, { 0.1, "0.1" }, { 0.1 + 0.2, "0.30000000000000004" }, { 1e15, "1000000000000000" },
		{ 1e16, "1e+16" }, { 1e-300, "1e-300" }, { 1.5e-5, "1.5e-05" }, { (double)0.1f, "0.10000000149011612" },
		{ 1700000000.25, "1700000000.25" },
	};
	for (size_t i = 0; i < sizeof(f64) / sizeof(f64[0]); i++) {
		ctl_format_double(buf, sizeof(buf), f64[i].d);
		assert_string_equal(buf, f64[i].want);
	}
}

static void test_format_float_round_trips(void **state)
{
	char buf[64];

	(void)state;
	for (int i = 0; i < 200000; i++) {
		float f = bits_f32((uint32_t)rng_next()), back;

		if (!isfinite(f))
			continue;
		ctl_format_float(buf, sizeof(buf), TDP_DTYPE_F32, f);
		back = strtof(buf, NULL);
		assert_memory_equal(&back, &f, sizeof(f));
	}
	for (int i = 0; i < 100000; i++) {
		uint64_t bits = (uint64_t)rng_next() << 32 | (uint32_t)rng_next();
		double d, dback;

		memcpy(&d, &bits, sizeof(d));
		if (!isfinite(d))
			continue;
		ctl_format_double(buf, sizeof(buf), d);
		dback = strtod(buf, NULL);
		assert_memory_equal(&dback, &d, sizeof(d));
	}
}

static void test_format_size_shape(void **state)
{
	uint64_t shape[3] = { 2, 3, 4 };
	char buf[64];

	(void)state;
	ctl_format_size(buf, sizeof(buf), 24);
	assert_string_equal(buf, "24 B");
	ctl_format_size(buf, sizeof(buf), 1536);
	assert_string_equal(buf, "1.5 KiB");
	ctl_format_size(buf, sizeof(buf), (uint64_t)256 << 20);
	assert_string_equal(buf, "256.0 MiB");
	ctl_format_size(buf, sizeof(buf), (uint64_t)3 << 30);
	assert_string_equal(buf, "3.0 GiB");
	ctl_format_shape(buf, sizeof(buf), 3, shape);
	assert_string_equal(buf, "[2, 3, 4]");
	ctl_format_shape(buf, sizeof(buf), 0, shape);
	assert_string_equal(buf, "[]");
}

/* Run a printer into a string. */
#define CAPTURE(buf, call)                                                     \
	do {                                                                   \
		size_t len_;                                                   \
		FILE *f_ = open_memstream(&(buf), &len_);                      \
		assert_non_null(f_);                                           \
		call;                                                          \
		assert_int_equal(fclose(f_), 0);                               \
	} while (0)

static void test_print_array(void **state)
{
	float f[6] = { 1, 2, 3, 4, 5, 6.5f };
	int32_t iv[4] = { -5, 10, 200, 3 };
	uint64_t s23[2] = { 2, 3 }, s4[1] = { 4 }, s0[2] = { 2, 0 };
	char *out = NULL;

	(void)state;
	CAPTURE(out, ctl_print_array(f_, TDP_DTYPE_F32, 2, s23, f));
	assert_string_equal(out, "[[1.  2.  3. ]\n [4.  5.  6.5]]\n");
	free(out);
	CAPTURE(out, ctl_print_array(f_, TDP_DTYPE_I32, 1, s4, iv));
	assert_string_equal(out, "[ -5  10 200   3]\n");
	free(out);
	CAPTURE(out, ctl_print_array(f_, TDP_DTYPE_F32, 0, NULL, f));
	assert_string_equal(out, "1.\n");
	free(out);
	CAPTURE(out, ctl_print_array(f_, TDP_DTYPE_F32, 2, s0, f));
	assert_string_equal(out, "[]\n");
	free(out);
}

static void test_print_array_summarised(void **state)
{
	uint64_t shape[2] = { 100, 100 };
	uint8_t *data = calloc(10000, 1);
	char *out = NULL;

	(void)state;
	assert_non_null(data);
	for (int i = 0; i < 10000; i++)
		data[i] = (uint8_t)(i % 100);
	CAPTURE(out, ctl_print_array(f_, TDP_DTYPE_U8, 2, shape, data));
	assert_string_equal(out, "[[ 0  1  2 ... 97 98 99]\n"
				 " [ 0  1  2 ... 97 98 99]\n"
				 " [ 0  1  2 ... 97 98 99]\n"
				 " ...\n"
				 " [ 0  1  2 ... 97 98 99]\n"
				 " [ 0  1  2 ... 97 98 99]\n"
				 " [ 0  1  2 ... 97 98 99]]\n");
	free(out);
	free(data);
}

static void test_print_json(void **state)
{
	float f[4] = { 0.1f, NAN, -INFINITY, 3 };
	char *out = NULL;

	(void)state;
	CAPTURE(out, ctl_print_json_values(f_, TDP_DTYPE_F32, f, 4));
	assert_string_equal(out, "[0.1,null,null,3]");
	free(out);
	CAPTURE(out, ctl_json_string(f_, "a\"b\\\n\x01\xc3\xa9\xff", 9));
	assert_string_equal(out, "\"a\\\"b\\\\\\n\\u0001\xc3\xa9\\ufffd\"");
	free(out);
	CAPTURE(out, ctl_json_base64(f_, "hello", 5));
	assert_string_equal(out, "\"aGVsbG8=\"");
	free(out);
	CAPTURE(out, ctl_json_double(f_, 1795000000.25));
	assert_string_equal(out, "1795000000.25");
	free(out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_f16_exhaustive_round_trip),
		cmocka_unit_test(test_bf16_exhaustive_round_trip),
		cmocka_unit_test(test_f16_known_values),
		cmocka_unit_test(test_bf16_known_values),
		cmocka_unit_test(test_half_random_nearest),
		cmocka_unit_test(test_parse_values_ok),
		cmocka_unit_test(test_parse_values_errors),
		cmocka_unit_test(test_parse_shape),
		cmocka_unit_test(test_format_float_shortest),
		cmocka_unit_test(test_format_float_round_trips),
		cmocka_unit_test(test_format_size_shape),
		cmocka_unit_test(test_print_array),
		cmocka_unit_test(test_print_array_summarised),
		cmocka_unit_test(test_print_json),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

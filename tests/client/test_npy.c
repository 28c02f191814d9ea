/* Unit tests of tensorctl's .npy reader and writer (client/util/npy.h): headers as
 * NumPy writes them, every way a header can be wrong, truncation and random
 * garbage (which must fail cleanly, never crash), conversions, and a
 * write/load round trip through a real file. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "dtype.h"
#include "npy.h"
#include "values.h"

/* Build a file image: magic, version, header length, `dict` padded like NumPy
 * does, then `data_len` bytes of data (0x5a). */
static uint8_t *make_file(int major, const char *dict, size_t data_len, size_t *ret_len)
{
	size_t pre = major == 1 ? 10 : 12, dlen = strlen(dict);
	size_t total = pre + dlen + 1, pad = (64 - total % 64) % 64, hlen;
	uint8_t *buf;

	total += pad;
	hlen = total - pre;
	buf = malloc(total + data_len);
	assert_non_null(buf);
	memcpy(buf, "\x93NUMPY", 6);
	buf[6] = (uint8_t)major;
	buf[7] = 0;
	buf[8] = (uint8_t)(hlen & 0xff);
	buf[9] = (uint8_t)((hlen >> 8) & 0xff);
	if (major > 1) {
		buf[10] = (uint8_t)((hlen >> 16) & 0xff);
		buf[11] = (uint8_t)(hlen >> 24);
	}
	memcpy(buf + pre, dict, dlen);
	memset(buf + pre + dlen, ' ', pad);
	buf[total - 1] = '\n';
	memset(buf + total, 0x5a, data_len);
	*ret_len = total + data_len;
	return buf;
}

static int parse_dict(int major, const char *dict, size_t data_len, struct npy_header *h)
{
	char err[256] = "";
	size_t len;
	uint8_t *buf = make_file(major, dict, data_len, &len);
	int r = npy_parse_header(buf, len, h, err, sizeof(err));

	if (r < 0)
		assert_true(err[0] != '\0');
	free(buf);
	return r;
}

static void test_parse_numpy_headers(void **state)
{
	struct npy_header h;

	(void)state;
	assert_int_equal(parse_dict(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
				    24, &h), 0);
	assert_int_equal(h.elem, NPY_F32);
	assert_int_equal(h.rank, 2);
	assert_true(h.shape[0] == 2 && h.shape[1] == 3 && h.count == 6 && h.data_bytes == 24);
	assert_int_equal(h.data_offset % 64, 0);

	assert_int_equal(parse_dict(1, "{'descr': '<f2', 'fortran_order': False, 'shape': (5,), }",
				    10, &h), 0);
	assert_true(h.elem == NPY_F16 && h.rank == 1 && h.shape[0] == 5);
	assert_int_equal(parse_dict(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }",
				    4, &h), 0);
	assert_true(h.rank == 0 && h.count == 1);
	assert_int_equal(parse_dict(2, "{'descr': '|u1', 'fortran_order': False, 'shape': (0, 7), }",
				    0, &h), 0);
	assert_true(h.elem == NPY_U8 && h.count == 0);
	assert_int_equal(parse_dict(3, "{\"shape\": (3,), \"fortran_order\": False, \"descr\": \"u1\"}",
				    3, &h), 0);
	assert_true(h.elem == NPY_U8 && h.shape[0] == 3);
	assert_int_equal(parse_dict(1, "{'descr':'<i4','fortran_order':False,'shape':(2,2,)}",
				    16, &h), 0);
	assert_true(h.elem == NPY_I32 && h.rank == 2);
	assert_int_equal(parse_dict(1, "{'descr': '<i8', 'fortran_order': False, 'shape': (3L,), }",
				    24, &h), 0);
	assert_true(h.elem == NPY_I64 && h.shape[0] == 3);
	assert_int_equal(parse_dict(1, "{'descr': '<u2', 'fortran_order': False, 'shape': (1,), }",
				    2, &h), 0);
	assert_int_equal(h.elem, NPY_U16);
	assert_int_equal(parse_dict(1, "{'descr': '<f4', 'fortran_order': False, 'shape': "
				       "(1, 1, 1, 1, 1, 1, 1, 2), }", 8, &h), 0);
	assert_int_equal(h.rank, 8);
}

static void test_parse_bad_headers(void **state)
{
	static const struct {
		const char *dict;
		size_t data;
		int want;
	} cases[] = {
		{ "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", 8, -ENOTSUP },
		{ "{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", 8, -ENOTSUP },
		{ "{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", 16, -ENOTSUP },
		{ "{'descr': '|b1', 'fortran_order': False, 'shape': (2,), }", 2, -ENOTSUP },
		{ "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", 8, -ENOTSUP },
		{ "{'descr': '<f4', 'fortran_order': False, 'shape': (3), }", 12, -EINVAL },
		{ "{'descr': '<f4', 'fortran_order': False, 'shape': [3], }", 12, -EINVAL },
		{ "{'descr': '<f4', 'fortran_order': False, 'shape': (-3,), }", 12, -EINVAL },
		{ "{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1), }", 4,
		  -EINVAL },
		{ "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", 4,
		  -EOVERFLOW },
		{ "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }",
		  4, -EOVERFLOW },
		{ "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 7, -EINVAL },
		{ "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 9, -EINVAL },
		{ "{'descr': '<f4', 'fortran_order': False}", 4, -EINVAL },
		{ "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (), }", 4,
		  -EINVAL },
		{ "{'descr': '<f4', 'fortran_order': False, 'shape': (), 'extra': 1}", 4, -EINVAL },
		{ "{'descr': '<f4', 'fortran_order': 0, 'shape': (), }", 4, -EINVAL },
		{ "{'descr': '<f4' 'fortran_order': False, 'shape': (), }", 4, -EINVAL },
		{ "{'descr': '<f4', 'fortran_order': False, 'shape': (), } x", 4, -EINVAL },
		{ "{'descr': '<f\\x34', 'fortran_order': False, 'shape': (), }", 4, -EINVAL },
		{ "{'descr': '<f4, 'fortran_order': False, 'shape': (), }", 4, -ENOTSUP },
		{ "{'descr': '<f4', 'fortran_order': False, 'shape': (), ", 4, -EINVAL },
		{ "{'descr': 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa', 'fortran_order': False, 'shape': ()}",
		  4, -EINVAL },
		{ "['descr', '<f4']", 4, -EINVAL },
		{ "", 4, -EINVAL },
		{ "{", 4, -EINVAL },
	};
	struct npy_header h;

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int r = parse_dict(1, cases[i].dict, cases[i].data, &h);

		if (r != cases[i].want)
			fail_msg("case %zu (%s): got %d, want %d", i, cases[i].dict, r,
				 cases[i].want);
	}
}

static void test_parse_bad_preamble(void **state)
{
	const char *dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }";
	struct npy_header h;
	char err[256];
	size_t len;
	uint8_t *buf;

	(void)state;
	buf = make_file(1, dict, 4, &len);
	buf[0] = 'x';
	assert_int_equal(npy_parse_header(buf, len, &h, err, sizeof(err)), -EINVAL);
	buf[0] = 0x93;
	buf[6] = 4;
	assert_int_equal(npy_parse_header(buf, len, &h, err, sizeof(err)), -ENOTSUP);
	buf[6] = 1;
	buf[7] = 1;
	assert_int_equal(npy_parse_header(buf, len, &h, err, sizeof(err)), -ENOTSUP);
	buf[7] = 0;
	buf[8] = 0xff; /* header length past the end of the file */
	buf[9] = 0xff;
	assert_int_equal(npy_parse_header(buf, len, &h, err, sizeof(err)), -EINVAL);
	free(buf);

	buf = make_file(2, dict, 4, &len);
	buf[11] = 0x7f; /* a 2 GiB header */
	assert_int_equal(npy_parse_header(buf, len, &h, err, sizeof(err)), -EINVAL);
	free(buf);

	/* Short files: each prefix of a valid file, in an exact-size buffer. */
	buf = make_file(2, dict, 4, &len);
	for (size_t n = 0; n < len; n++) {
		uint8_t *prefix = malloc(n ? n : 1);

		assert_non_null(prefix);
		memcpy(prefix, buf, n);
		assert_true(npy_parse_header(prefix, n, &h, err, sizeof(err)) < 0);
		free(prefix);
	}
	assert_int_equal(npy_parse_header(buf, len, &h, err, sizeof(err)), 0);
	free(buf);
}

static uint64_t rng_state = 7;

static uint64_t rng_next(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* Random garbage and random mutations of a valid header: never a crash or an
 * out-of-bounds read (ASan watches), and any success is self-consistent. */
static void test_parse_garbage(void **state)
{
	const char *dict = "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }";
	struct npy_header h;
	char err[256];
	size_t len;
	uint8_t *valid = make_file(1, dict, 24, &len);

	(void)state;
	for (int iter = 0; iter < 20000; iter++) {
		size_t n = (size_t)(rng_next() % (len + 8));
		uint8_t *buf = malloc(n ? n : 1);

		assert_non_null(buf);
		if (iter % 2 == 0) {
			for (size_t i = 0; i < n; i++)
				buf[i] = (uint8_t)rng_next();
			if (n >= 8 && iter % 4 == 0) {
				memcpy(buf, "\x93NUMPY\x01\x00", 8);
			}
		} else {
			memcpy(buf, valid, n < len ? n : len);
			for (size_t i = len; i < n; i++)
				buf[i] = 0;
			for (int k = 0; k < 3 && n > 0; k++)
				buf[rng_next() % n] = (uint8_t)rng_next();
		}
		if (npy_parse_header(buf, n, &h, err, sizeof(err)) == 0) {
			assert_true(h.rank <= TDP_MAX_RANK);
			assert_true(h.data_offset + h.data_bytes == n);
		}
		free(buf);
	}
	free(valid);
}

static void test_format_header(void **state)
{
	uint64_t shape[2] = { 2, 3 }, one = 5;
	struct npy_header h;
	char buf[256], err[256];
	uint8_t *file;
	int n;

	(void)state;
	/* 10 + 59 + 1 bytes, padded to 128 as NumPy pads it. */
	n = npy_format_header(TDP_DTYPE_F32, 2, shape, buf, sizeof(buf));
	assert_int_equal(n, 128);
	assert_memory_equal(buf, "\x93NUMPY\x01\x00\x76\x00{'descr': '<f4', 'fortran_order': "
				 "False, 'shape': (2, 3), }", 10 + 59);
	assert_int_equal(buf[69], ' ');
	assert_int_equal(buf[127], '\n');
	n = npy_format_header(TDP_DTYPE_BF16, 1, &one, buf, sizeof(buf));
	assert_true(n > 0 && n % 64 == 0);
	assert_non_null(memmem(buf, (size_t)n, "'<u2'", 5));
	assert_non_null(memmem(buf, (size_t)n, "(5,)", 4));
	n = npy_format_header(TDP_DTYPE_U8, 0, NULL, buf, sizeof(buf));
	assert_non_null(memmem(buf, (size_t)n, "'|u1'", 5));
	assert_non_null(memmem(buf, (size_t)n, "()", 2));
	assert_int_equal(npy_format_header(TDP_DTYPE_COUNT, 0, NULL, buf, sizeof(buf)), -EINVAL);
	assert_int_equal(npy_format_header(TDP_DTYPE_F32, 2, shape, buf, 10), -ENOSPC);

	/* What we write, we read. */
	n = npy_format_header(TDP_DTYPE_I32, 2, shape, buf, sizeof(buf));
	file = calloc(1, (size_t)n + 24);
	assert_non_null(file);
	memcpy(file, buf, (size_t)n);
	assert_int_equal(npy_parse_header(file, (size_t)n + 24, &h, err, sizeof(err)), 0);
	assert_true(h.elem == NPY_I32 && h.rank == 2 && h.shape[1] == 3);
	free(file);
}

static void test_target_dtype(void **state)
{
	char err[256];

	(void)state;
	assert_int_equal(npy_target_dtype(NPY_F32, -1, err, sizeof(err)), TDP_DTYPE_F32);
	assert_int_equal(npy_target_dtype(NPY_F16, -1, err, sizeof(err)), TDP_DTYPE_F16);
	assert_int_equal(npy_target_dtype(NPY_I32, -1, err, sizeof(err)), TDP_DTYPE_I32);
	assert_int_equal(npy_target_dtype(NPY_U8, -1, err, sizeof(err)), TDP_DTYPE_U8);
	assert_int_equal(npy_target_dtype(NPY_U16, -1, err, sizeof(err)), -EINVAL);
	assert_int_equal(npy_target_dtype(NPY_F64, -1, err, sizeof(err)), -EINVAL);
	assert_int_equal(npy_target_dtype(NPY_I64, -1, err, sizeof(err)), -EINVAL);
	assert_int_equal(npy_target_dtype(NPY_U16, TDP_DTYPE_BF16, err, sizeof(err)),
			 TDP_DTYPE_BF16);
	assert_int_equal(npy_target_dtype(NPY_F64, TDP_DTYPE_F16, err, sizeof(err)), TDP_DTYPE_F16);
	assert_int_equal(npy_target_dtype(NPY_I64, TDP_DTYPE_I32, err, sizeof(err)), TDP_DTYPE_I32);
	assert_int_equal(npy_target_dtype(NPY_I32, TDP_DTYPE_F32, err, sizeof(err)), TDP_DTYPE_F32);
	assert_int_equal(npy_target_dtype(NPY_F32, TDP_DTYPE_I32, err, sizeof(err)), -EINVAL);
	assert_int_equal(npy_target_dtype(NPY_F16, TDP_DTYPE_U8, err, sizeof(err)), -EINVAL);
	assert_true(npy_same_bytes(NPY_U16, TDP_DTYPE_BF16));
	assert_false(npy_same_bytes(NPY_F16, TDP_DTYPE_BF16));
}

static void test_convert(void **state)
{
	double f64[3] = { 0.1, -2.5, 1e300 };
	int64_t i64[3] = { 0, 255, 256 };
	float f32[3];
	uint8_t u8[3];
	uint16_t h[3];
	char err[256];

	(void)state;
	assert_int_equal(npy_convert(NPY_F64, f64, TDP_DTYPE_F32, f32, 3, err, sizeof(err)), 0);
	assert_true(f32[0] == 0.1f && f32[1] == -2.5f && isinf(f32[2]));
	assert_int_equal(npy_convert(NPY_F64, f64, TDP_DTYPE_F16, h, 2, err, sizeof(err)), 0);
	assert_int_equal(h[0], 0x2e66);
	assert_int_equal(npy_convert(NPY_I64, i64, TDP_DTYPE_U8, u8, 2, err, sizeof(err)), 0);
	assert_int_equal(u8[1], 255);
	assert_int_equal(npy_convert(NPY_I64, i64, TDP_DTYPE_U8, u8, 3, err, sizeof(err)), -ERANGE);
	assert_int_equal(npy_convert(NPY_F64, f64, TDP_DTYPE_I32, u8, 3, err, sizeof(err)), -EINVAL);
}

static void test_write_load_round_trip(void **state)
{
	char path[] = "/tmp/test-npy-XXXXXX";
	uint64_t shape[3] = { 2, 3, 4 };
	struct npy_file f = { 0 };
	float data[24];
	char err[256];
	int fd;

	(void)state;
	for (int i = 0; i < 24; i++)
		data[i] = (float)i * 0.5f - 3;
	fd = mkstemp(path);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(npy_write(path, TDP_DTYPE_F32, 3, shape, data, sizeof(data), err,
				   sizeof(err)), 0);
	assert_int_equal(npy_load(path, &f, err, sizeof(err)), 0);
	assert_true(f.hdr.elem == NPY_F32 && f.hdr.rank == 3 && f.hdr.shape[2] == 4);
	assert_int_equal(f.hdr.data_offset % 64, 0);
	assert_memory_equal(f.data, data, sizeof(data));
	npy_close(&f);

	/* An empty file and a missing one fail cleanly. */
	fd = open(path, O_WRONLY | O_TRUNC);
	assert_true(fd >= 0);
	close(fd);
	assert_true(npy_load(path, &f, err, sizeof(err)) < 0);
	unlink(path);
	assert_int_equal(npy_load(path, &f, err, sizeof(err)), -ENOENT);
	npy_close(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_numpy_headers),
		cmocka_unit_test(test_parse_bad_headers),
		cmocka_unit_test(test_parse_bad_preamble),
		cmocka_unit_test(test_parse_garbage),
		cmocka_unit_test(test_format_header),
		cmocka_unit_test(test_target_dtype),
		cmocka_unit_test(test_convert),
		cmocka_unit_test(test_write_load_round_trip),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Unit tests of the safetensors reader and writer (proto/safetensors.h):
 * files built byte by byte as the format's spec describes them, every way a
 * header or layout can be wrong (each must fail with a message, never
 * crash), truncations and random mutations of a valid file, and a
 * write/load round trip through real files. */
#include <errno.h>
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
#include "safetensors.h"

/* A file image: the 8-byte little-endian length of `header`, `header`, then
 * `data_len` bytes 0, 1, 2, ... */
static uint8_t *make_file(const char *header, size_t data_len, size_t *ret_len)
{
	size_t n = strlen(header);
	uint8_t *buf = malloc(8 + n + data_len + 1);

	assert_non_null(buf);
	for (int i = 0; i < 8; i++)
		buf[i] = (uint8_t)((uint64_t)n >> (8 * i));
	memcpy(buf + 8, header, n);
	for (size_t i = 0; i < data_len; i++)
		buf[8 + n + i] = (uint8_t)i;
	*ret_len = 8 + n + data_len;
	return buf;
}

/* Parse a file made of `header` and `data_len` bytes; returns st_parse's
 * status, with a message whenever it fails. */
static int try_parse(const char *header, size_t data_len, struct st_file *f)
{
	char err[300] = "";
	size_t len;
	uint8_t *buf = make_file(header, data_len, &len);
	struct st_file tmp;
	int r = st_parse(buf, len, f ? f : &tmp, err, sizeof(err));

	if (r < 0)
		assert_true(err[0] != '\0');
	else if (!f)
		st_close(&tmp);
	if (!f || r < 0)
		free(buf);
	return r;
}

static void expect_bad(const char *header, size_t data_len)
{
	if (try_parse(header, data_len, NULL) >= 0)
		fail_msg("accepted: %s (+%zu bytes)", header, data_len);
}

static void test_valid(void **state)
{
	const char *h = "{\"__metadata__\":{\"format\":\"pt\",\"k\":\"v\"},"
			"\"b\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[24,32]},"
			"\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
			"\"s\":{\"dtype\":\"BF16\",\"shape\":[],\"data_offsets\":[32,34]},"
			"\"e\":{\"dtype\":\"U8\",\"shape\":[0,5],\"data_offsets\":[34,34]}}   ";
	struct st_file f;
	size_t len;
	uint8_t *buf = make_file(h, 34, &len);
	char err[200];

	(void)state;
	assert_int_equal(st_parse(buf, len, &f, err, sizeof(err)), 0);
	assert_int_equal(f.ntensors, 4);
	assert_string_equal(f.tensors[0].name, "b");
	assert_int_equal(f.tensors[0].dtype, ST_I32);
	assert_int_equal(f.tensors[1].rank, 2);
	assert_int_equal(f.tensors[1].shape[1], 3);
	assert_ptr_equal(f.tensors[1].data, buf + 8 + strlen(h));
	assert_int_equal(f.tensors[0].data[0], 24);
	assert_int_equal(f.tensors[2].rank, 0);
	assert_int_equal(f.tensors[3].end - f.tensors[3].begin, 0);
	assert_int_equal(f.nmeta, 2);
	assert_string_equal(st_meta_get(&f, "format"), "pt");
	assert_string_equal(st_meta_get(&f, "k"), "v");
	assert_null(st_meta_get(&f, "nope"));
	st_close(&f);
	free(buf);
	/* An empty file of tensors is a valid file. */
	assert_int_equal(try_parse("{}", 0, NULL), 0);
	assert_int_equal(try_parse("{\"__metadata__\":{}}", 0, NULL), 0);
	/* Every dtype of the format parses, with its size. */
	for (int d = 0; d < ST_DTYPE_COUNT; d++) {
		char hdr[200];

		snprintf(hdr, sizeof(hdr), "{\"t\":{\"dtype\":\"%s\",\"shape\":[3],\"data_offsets\":[0,%zu]}}",
			 st_dtype_name(d), 3 * st_dtype_size(d));
		assert_int_equal(try_parse(hdr, 3 * st_dtype_size(d), NULL), 0);
	}
}

static void test_bad_headers(void **state)
{
	(void)state;
	/* not JSON, not an object, not '{' first */
	expect_bad("", 0);
	expect_bad(" {}", 0);
	expect_bad("[]", 0);
	expect_bad("{", 0);
	expect_bad("{\"a\":}", 0);
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}} x", 4);
	expect_bad("{\"a\":1}", 0);
	expect_bad("{\"a\":\"F32\"}", 0);
	expect_bad("{\"a\":[1,2]}", 0);
	/* keys: missing, unknown, twice */
	expect_bad("{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4);
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4);
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 4);
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
	/* dtypes */
	expect_bad("{\"a\":{\"dtype\":\"F128\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
	expect_bad("{\"a\":{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
	expect_bad("{\"a\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
	/* shapes */
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4);
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4);
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":1,\"data_offsets\":[0,4]}}", 4);
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4);
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,16],\"data_offsets\":[0,4]}}", 4);
	/* offsets: not a pair, reversed, out of bounds, wrong size */
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4);
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 8);
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 4);
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 4);
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,8]}}", 4);
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4);
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,\"4\"]}}", 4);
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,18446744073709551620]}}", 4);
	/* layout: hole, overlap, not starting at 0, trailing bytes, no tensor */
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
		   "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", 12);
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
		   "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8);
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
		   "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8);
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 5);
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
		   "\"z\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,4]}}", 8);
	expect_bad("{}", 1);
	/* duplicate names */
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
		   "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8);
	/* metadata: not strings, not an object, twice, NUL */
	expect_bad("{\"__metadata__\":{\"a\":1}}", 0);
	expect_bad("{\"__metadata__\":{\"a\":{\"b\":\"c\"}}}", 0);
	expect_bad("{\"__metadata__\":[\"a\"]}", 0);
	expect_bad("{\"__metadata__\":\"a\"}", 0);
	expect_bad("{\"__metadata__\":{},\"__metadata__\":{}}", 0);
	expect_bad("{\"__metadata__\":{\"a\":\"b\",\"a\":\"c\"}}", 0);
	expect_bad("{\"__metadata__\":{\"a\":\"b\\u0000c\"}}", 0);
	expect_bad("{\"a\\u0000b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
	/* not UTF-8 */
	expect_bad("{\"\xff\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
	expect_bad("{\"\xc0\xaf\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
	expect_bad("{\"\xed\xa0\x80\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
}

static void test_bad_lengths(void **state)
{
	uint8_t buf[64] = { 0 };
	struct st_file f;
	char err[200];

	(void)state;
	for (size_t n = 0; n < 8; n++)
		assert_int_equal(st_parse(buf, n, &f, err, sizeof(err)), -EINVAL);
	/* a header length past the file */
	buf[0] = 100;
	memcpy(buf + 8, "{}", 2);
	assert_int_equal(st_parse(buf, 10, &f, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "past the end"));
	/* past the limit, and the largest length there is */
	memset(buf, 0, 8);
	buf[3] = 0x10; /* 256 MiB */
	assert_int_equal(st_parse(buf, sizeof(buf), &f, err, sizeof(err)), -EFBIG);
	memset(buf, 0xff, 8);
	assert_int_equal(st_parse(buf, sizeof(buf), &f, err, sizeof(err)), -EFBIG);
	/* zero length */
	memset(buf, 0, 8);
	assert_int_equal(st_parse(buf, sizeof(buf), &f, err, sizeof(err)), -EINVAL);
}

/* A valid file, then every truncation and many random mutations of it: each
 * must be refused with a message or accepted, never read out of bounds
 * (ASan in CI watches). */
static void test_garbage(void **state)
{
	const char *h = "{\"__metadata__\":{\"m\":\"x\"},\"w\":{\"dtype\":\"F16\",\"shape\":[2,2],"
			"\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}";
	size_t len;
	uint8_t *good = make_file(h, 16, &len), *buf = malloc(len);
	unsigned seed = 12345;
	struct st_file f;
	char err[300];

	(void)state;
	assert_non_null(buf);
	assert_int_equal(st_parse(good, len, &f, err, sizeof(err)), 0);
	st_close(&f);
	for (size_t n = 0; n < len; n++) {
		memcpy(buf, good, n);
		err[0] = '\0';
		assert_true(st_parse(buf, n, &f, err, sizeof(err)) < 0);
		assert_true(err[0] != '\0');
	}
	for (int round = 0; round < 20000; round++) {
		int flips = 1 + (int)(rand_r(&seed) % 4);

		memcpy(buf, good, len);
		for (int k = 0; k < flips; k++)
			buf[rand_r(&seed) % len] = (uint8_t)rand_r(&seed);
		err[0] = '\0';
		if (st_parse(buf, len, &f, err, sizeof(err)) == 0)
			st_close(&f);
		else
			assert_true(err[0] != '\0');
	}
	for (int round = 0; round < 2000; round++) {
		size_t n = 8 + rand_r(&seed) % 56;

		for (size_t k = 0; k < n; k++)
			buf[k] = (uint8_t)rand_r(&seed);
		buf[0] = (uint8_t)(n - 8);
		memset(buf + 1, 0, 7);
		buf[8] = '{';
		if (st_parse(buf, n, &f, err, sizeof(err)) == 0)
			st_close(&f);
	}
	free(buf);
	free(good);
}

static void test_round_trip(void **state)
{
	char dir[] = "/tmp/test-safetensors-XXXXXX", path[128], err[300];
	float a[6] = { 1, 2, 3, 4, 5, 6 };
	int32_t b[3] = { -1, 0, 7 };
	uint16_t c[1] = { 0x3f80 };
	uint64_t sa[2] = { 2, 3 }, sb[1] = { 3 }, se[2] = { 0, 4 };
	struct st_entry e[4] = {
		{ "layer/w", ST_F32, 2, sa, a },
		{ "layer/b", ST_I32, 1, sb, b },
		{ "scalar \"q\"", ST_BF16, 0, NULL, c },
		{ "empty", ST_U8, 2, se, NULL },
	};
	struct st_meta m[2] = { { "tensord.step", "42" }, { "note", "{\"json\": [1, 2]}\n" } };
	struct st_file f;
	FILE *fp;
	long size;
	uint64_t hlen;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/t.safetensors", dir);
	assert_int_equal(st_write(path, e, 4, m, 2, err, sizeof(err)), 0);
	assert_int_equal(st_load(path, &f, err, sizeof(err)), 0);
	assert_int_equal((8 + f.header_len) % 8, 0);
	assert_int_equal(f.ntensors, 4);
	assert_string_equal(f.tensors[0].name, "layer/w");
	assert_memory_equal(f.tensors[0].data, a, sizeof(a));
	assert_memory_equal(f.tensors[1].data, b, sizeof(b));
	assert_string_equal(f.tensors[2].name, "scalar \"q\"");
	assert_int_equal(f.tensors[2].rank, 0);
	assert_memory_equal(f.tensors[2].data, c, sizeof(c));
	assert_int_equal(f.tensors[3].shape[1], 4);
	assert_string_equal(st_meta_get(&f, "tensord.step"), "42");
	assert_string_equal(st_meta_get(&f, "note"), "{\"json\": [1, 2]}\n");
	hlen = f.header_len;
	st_close(&f);
	fp = fopen(path, "rb");
	assert_non_null(fp);
	fseek(fp, 0, SEEK_END);
	size = ftell(fp);
	fclose(fp);
	assert_int_equal(size, 8 + (long)hlen + 24 + 12 + 2);
	/* refused writes leave no file behind */
	unlink(path);
	{
		struct st_entry dup[2] = { e[0], e[0] };
		struct st_entry bad = { "__metadata__", ST_F32, 2, sa, a };
		struct st_meta dm[2] = { { "k", "1" }, { "k", "2" } };
		struct st_writer *w;

		assert_int_equal(st_write(path, dup, 2, NULL, 0, err, sizeof(err)), -EINVAL);
		assert_int_equal(st_write(path, &bad, 1, NULL, 0, err, sizeof(err)), -EINVAL);
		assert_int_equal(st_write(path, e, 1, dm, 2, err, sizeof(err)), -EINVAL);
		assert_int_equal(access(path, F_OK), -1);
		assert_int_equal(st_writer_open(path, e, 2, NULL, 0, &w, err, sizeof(err)), 0);
		assert_int_equal(st_writer_put(w, a, 20, err, sizeof(err)), -EINVAL);
		assert_int_equal(st_writer_put(w, a, sizeof(a), err, sizeof(err)), 0);
		assert_int_equal(st_writer_close(w, true, err, sizeof(err)), -EINVAL);
		assert_int_equal(access(path, F_OK), -1);
	}
	/* the dtype map to tensord */
	assert_int_equal(st_dtype_to_tensord(ST_F32), TDP_DTYPE_F32);
	assert_int_equal(st_dtype_to_tensord(ST_BF16), TDP_DTYPE_BF16);
	assert_int_equal(st_dtype_to_tensord(ST_F64), -ENOTSUP);
	assert_int_equal(st_dtype_from_tensord(TDP_DTYPE_U8), ST_U8);
	assert_int_equal(st_dtype_from_tensord(99), -EINVAL);
	rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_valid),
		cmocka_unit_test(test_bad_headers),
		cmocka_unit_test(test_bad_lengths),
		cmocka_unit_test(test_garbage),
		cmocka_unit_test(test_round_trip),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Unit tests of the bounded msgpack scanner (proto/scan.h).
 *
 * Objects are packed with msgpack-c, the scanner must find exactly where they
 * end whatever the split of the bytes, and msgpack-c is the referee: every
 * object the scanner accepts must decode to the same length, and every prefix
 * the scanner calls incomplete must be incomplete for msgpack-c too. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <msgpack.h>

#include "rpc.h"
#include "scan.h"

/* ---- helpers ------------------------------------------------------------ */

static uint64_t rng_state;

static uint64_t rng_next(void)
{
	/* splitmix64: deterministic, good enough to pick bytes */
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* A heap copy of exactly `n` bytes, so that ASan catches any read past the end. */
static uint8_t *exact_copy(const void *p, size_t n)
{
	uint8_t *c = malloc(n ? n : 1);

	assert_non_null(c);
	if (n)
		memcpy(c, p, n);
	return c;
}

struct packed {
	msgpack_sbuffer sb;
	msgpack_packer pk;
};

static void packed_init(struct packed *p)
{
	msgpack_sbuffer_init(&p->sb);
	msgpack_packer_init(&p->pk, &p->sb, msgpack_sbuffer_write);
}

static void packed_done(struct packed *p)
{
	msgpack_sbuffer_destroy(&p->sb);
}

static int feed(const uint8_t *buf, size_t len, const struct tdp_scan_limits *lim,
		struct tdp_scanner *s)
{
	tdp_scanner_reset(s);
	return tdp_scanner_feed(s, buf, len, lim);
}

/* Whether msgpack-c sees `len` bytes as an incomplete object. */
static int msgpack_says_incomplete(const uint8_t *buf, size_t len)
{
	msgpack_unpacked u;
	size_t off = 0;
	msgpack_unpack_return r;

	msgpack_unpacked_init(&u);
	r = msgpack_unpack_next(&u, (const char *)buf, len, &off);
	msgpack_unpacked_destroy(&u);
	return r == MSGPACK_UNPACK_CONTINUE;
}

/* Check one complete object of `n` bytes against every split of its bytes. */
static void check_object_lim(const uint8_t *orig, size_t n, const struct tdp_scan_limits *lim)
{
	uint8_t *buf = exact_copy(orig, n);
	struct tdp_scanner s;
	size_t stride = n <= 20000 ? 1 : n / 1000;
	int r;

	assert_true(n > 0);

	/* The whole object at once. */
	r = feed(buf, n, lim, &s);
	assert_int_equal(r, 1);
	assert_int_equal(s.pos, n);

	/* A fresh scanner on every prefix: incomplete, and `need` is a true lower
	 * bound of the size; then the rest arrives and the same scanner finishes. */
	for (size_t k = 0; k < n; k += (k < 300 || n - k < 300) ? 1 : stride) {
		uint8_t *pre = n <= 4096 ? exact_copy(buf, k) : NULL;

		r = feed(pre ? pre : buf, k, lim, &s);
		if (r != 0)
			fail_msg("prefix %zu of %zu: scanner returned %d, want 0", k, n, r);
		assert_true(s.need > k);
		assert_true(s.need <= n);
		if (pre) {
			assert_true(msgpack_says_incomplete(pre, k));
			free(pre);
		}
		r = tdp_scanner_feed(&s, buf, n, lim);
		if (r != 1)
			fail_msg("prefix %zu then all %zu: scanner returned %d, want 1", k, n, r);
		assert_int_equal(s.pos, n);
	}

	/* One scanner, one more byte at a time: 0 for every prefix 0..n-1, then 1. */
	tdp_scanner_reset(&s);
	for (size_t k = 0; k <= n; k++) {
		r = tdp_scanner_feed(&s, buf, k, lim);
		if (k < n && r != 0)
			fail_msg("incremental prefix %zu of %zu: %d, want 0", k, n, r);
		if (k < n)
			assert_true(s.need > k && s.need <= n);
	}
	assert_int_equal(r, 1);
	assert_int_equal(s.pos, n);

	/* Bytes of the next message behind it do not count. */
	{
		uint8_t *more = malloc(n + 7);

		assert_non_null(more);
		memcpy(more, buf, n);
		memcpy(more + n, "\x93\x01\x02\x03\xc1\xc1\xc1", 7);
		r = feed(more, n + 7, lim, &s);
		assert_int_equal(r, 1);
		assert_int_equal(s.pos, n);
		free(more);
	}

	/* msgpack-c agrees on the length. */
	{
		msgpack_unpacked u;

		msgpack_unpacked_init(&u);
		assert_int_equal(tdp_unpack(&u, buf, n), 0);
		msgpack_unpacked_destroy(&u);
		msgpack_unpacked_init(&u);
		assert_int_equal(tdp_unpack(&u, buf, n - 1), -EBADMSG);
		msgpack_unpacked_destroy(&u);
	}
	free(buf);
}

static void check_object(const uint8_t *buf, size_t n)
{
	check_object_lim(buf, n, &tdp_scan_default_limits);
}

/* Check the packed object and that msgpack-c chose the encoding `first`. */
static void check_packed(struct packed *p, uint8_t first)
{
	assert_true(p->sb.size > 0);
	if ((uint8_t)p->sb.data[0] != first)
		fail_msg("packed type byte 0x%02x, want 0x%02x", (uint8_t)p->sb.data[0], first);
	check_object((const uint8_t *)p->sb.data, p->sb.size);
	packed_done(p);
	packed_init(p);
}

/* ---- round trips of every type ------------------------------------------ */

static void test_scalars(void **state)
{
	struct packed p;

	(void)state;
	packed_init(&p);
	msgpack_pack_nil(&p.pk);
	check_packed(&p, 0xc0);
	msgpack_pack_true(&p.pk);
	check_packed(&p, 0xc3);
	msgpack_pack_false(&p.pk);
	check_packed(&p, 0xc2);

	msgpack_pack_uint8(&p.pk, 0);
	check_packed(&p, 0x00);
	msgpack_pack_uint8(&p.pk, 127);
	check_packed(&p, 0x7f);
	msgpack_pack_int8(&p.pk, -1);
	check_packed(&p, 0xff);
	msgpack_pack_int8(&p.pk, -32);
	check_packed(&p, 0xe0);

	msgpack_pack_fix_uint8(&p.pk, 200);
	check_packed(&p, 0xcc);
	msgpack_pack_fix_uint16(&p.pk, 60000);
	check_packed(&p, 0xcd);
	msgpack_pack_fix_uint32(&p.pk, 4000000000u);
	check_packed(&p, 0xce);
	msgpack_pack_fix_uint64(&p.pk, UINT64_MAX);
	check_packed(&p, 0xcf);
	msgpack_pack_fix_int8(&p.pk, -100);
	check_packed(&p, 0xd0);
	msgpack_pack_fix_int16(&p.pk, -30000);
	check_packed(&p, 0xd1);
	msgpack_pack_fix_int32(&p.pk, -2000000000);
	check_packed(&p, 0xd2);
	msgpack_pack_fix_int64(&p.pk, INT64_MIN);
	check_packed(&p, 0xd3);
	/* the minimal encodings msgpack-c picks for wide values */
	msgpack_pack_uint64(&p.pk, 1ull << 40);
	check_packed(&p, 0xcf);
	msgpack_pack_int64(&p.pk, -(1ll << 40));
	check_packed(&p, 0xd3);

	msgpack_pack_float(&p.pk, 1.5f);
	check_packed(&p, 0xca);
	msgpack_pack_double(&p.pk, -2.25);
	check_packed(&p, 0xcb);
	packed_done(&p);
}

static void pack_str_n(msgpack_packer *pk, size_t n)
{
	char *s = malloc(n ? n : 1);

	assert_non_null(s);
	for (size_t i = 0; i < n; i++)
		s[i] = (char)('a' + i % 26);
	msgpack_pack_str_with_body(pk, s, n);
	free(s);
}

static void pack_bin_n(msgpack_packer *pk, size_t n)
{
	uint8_t *b = malloc(n ? n : 1);

	assert_non_null(b);
	for (size_t i = 0; i < n; i++)
		b[i] = (uint8_t)(i * 7 + 0xc1); /* includes 0xc1 bytes in payload */
	msgpack_pack_bin_with_body(pk, b, n);
	free(b);
}

static void pack_ext_n(msgpack_packer *pk, size_t n, int8_t type)
{
	uint8_t *b = malloc(n ? n : 1);

	assert_non_null(b);
	for (size_t i = 0; i < n; i++)
		b[i] = (uint8_t)(0xc1 ^ i);
	msgpack_pack_ext_with_body(pk, b, n, type);
	free(b);
}

static void test_str_bin_ext(void **state)
{
	struct packed p;
	static const struct {
		size_t n;
		uint8_t str, bin;
	} sizes[] = {
		{ 0, 0xa0, 0xc4 },      { 1, 0xa1, 0xc4 },      { 31, 0xbf, 0xc4 },
		{ 32, 0xd9, 0xc4 },     { 255, 0xd9, 0xc4 },    { 256, 0xda, 0xc5 },
		{ 65535, 0xda, 0xc5 },  { 65536, 0xdb, 0xc6 },  { 200000, 0xdb, 0xc6 },
	};
	static const struct {
		size_t n;
		uint8_t first;
	} exts[] = {
		{ 1, 0xd4 },  { 2, 0xd5 },     { 4, 0xd6 },     { 8, 0xd7 },     { 16, 0xd8 },
		{ 0, 0xc7 },  { 3, 0xc7 },     { 255, 0xc7 },   { 256, 0xc8 },   { 65535, 0xc8 },
		{ 65536, 0xc9 }, { 70000, 0xc9 },
	};

	(void)state;
	packed_init(&p);
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		pack_str_n(&p.pk, sizes[i].n);
		check_packed(&p, sizes[i].str);
		pack_bin_n(&p.pk, sizes[i].n);
		check_packed(&p, sizes[i].bin);
	}
	for (size_t i = 0; i < sizeof(exts) / sizeof(exts[0]); i++) {
		pack_ext_n(&p.pk, exts[i].n, (int8_t)(i - 3));
		check_packed(&p, exts[i].first);
	}
	packed_done(&p);
}

static void test_containers(void **state)
{
	struct packed p;
	static const struct {
		uint32_t n;
		uint8_t arr, map;
	} sizes[] = {
		{ 0, 0x90, 0x80 },      { 1, 0x91, 0x81 },      { 15, 0x9f, 0x8f },
		{ 16, 0xdc, 0xde },     { 65535, 0xdc, 0xde },  { 65536, 0xdd, 0xdf },
		{ 70001, 0xdd, 0xdf },
	};

	(void)state;
	packed_init(&p);
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		uint32_t n = sizes[i].n;

		msgpack_pack_array(&p.pk, n);
		for (uint32_t j = 0; j < n; j++) {
			/* mixed element sizes: 1, 2, 3 and 5 bytes */
			switch (j % 4) {
			case 0: msgpack_pack_nil(&p.pk); break;
			case 1: msgpack_pack_fix_uint8(&p.pk, (uint8_t)j); break;
			case 2: msgpack_pack_fix_int16(&p.pk, (int16_t)j); break;
			default: msgpack_pack_float(&p.pk, (float)j); break;
			}
		}
		check_packed(&p, sizes[i].arr);

		msgpack_pack_map(&p.pk, n);
		for (uint32_t j = 0; j < n; j++) {
			msgpack_pack_uint32(&p.pk, j);
			if (j % 3 == 0)
				msgpack_pack_array(&p.pk, 0);
			else
				msgpack_pack_str_with_body(&p.pk, "v", 1);
		}
		check_packed(&p, sizes[i].map);
	}
	packed_done(&p);
}

static void test_nesting(void **state)
{
	struct packed p;
	uint8_t data[24];

	(void)state;
	memset(data, 0xc1, sizeof(data));
	packed_init(&p);

	/* a tensor.put request */
	msgpack_pack_array(&p.pk, 4);
	msgpack_pack_uint8(&p.pk, 0);
	msgpack_pack_uint32(&p.pk, 77);
	msgpack_pack_str_with_body(&p.pk, "tensor.put", 10);
	msgpack_pack_array(&p.pk, 1);
	msgpack_pack_map(&p.pk, 4);
	msgpack_pack_str_with_body(&p.pk, "name", 4);
	msgpack_pack_str_with_body(&p.pk, "a", 1);
	msgpack_pack_str_with_body(&p.pk, "dtype", 5);
	msgpack_pack_str_with_body(&p.pk, "f32", 3);
	msgpack_pack_str_with_body(&p.pk, "shape", 5);
	msgpack_pack_array(&p.pk, 2);
	msgpack_pack_uint8(&p.pk, 2);
	msgpack_pack_uint8(&p.pk, 3);
	msgpack_pack_str_with_body(&p.pk, "data", 4);
	msgpack_pack_bin_with_body(&p.pk, data, sizeof(data));
	check_packed(&p, 0x94);

	/* empty containers everywhere, maps in arrays in maps, a container as a key */
	msgpack_pack_array(&p.pk, 6);
	msgpack_pack_array(&p.pk, 0);
	msgpack_pack_map(&p.pk, 0);
	msgpack_pack_array(&p.pk, 1);
	msgpack_pack_array(&p.pk, 0);
	msgpack_pack_map(&p.pk, 2);
	msgpack_pack_array(&p.pk, 2); /* key */
	msgpack_pack_map(&p.pk, 0);
	msgpack_pack_nil(&p.pk);
	msgpack_pack_map(&p.pk, 1); /* value */
	msgpack_pack_str_with_body(&p.pk, "k", 1);
	msgpack_pack_array(&p.pk, 3);
	msgpack_pack_array(&p.pk, 0);
	msgpack_pack_array(&p.pk, 1);
	msgpack_pack_map(&p.pk, 0);
	msgpack_pack_true(&p.pk);
	msgpack_pack_str_with_body(&p.pk, "x", 1);
	msgpack_pack_array(&p.pk, 17); /* array16 in the middle */
	for (int i = 0; i < 17; i++)
		msgpack_pack_array(&p.pk, 0);
	pack_ext_n(&p.pk, 4, 1);
	msgpack_pack_double(&p.pk, 0.5);
	check_packed(&p, 0x96);
	packed_done(&p);
}

/* Encodings msgpack-c would not choose but the format allows. */
static void test_non_minimal(void **state)
{
	static const struct {
		const char *bytes;
		size_t n;
	} cases[] = {
		{ "\xdc\x00\x01\x01", 4 },                  /* array16 of 1 */
		{ "\xdd\x00\x00\x00\x02\xc0\xc0", 7 },      /* array32 of 2 */
		{ "\xdd\x00\x00\x00\x00", 5 },              /* array32 of 0 */
		{ "\xde\x00\x01\xa1k\x01", 6 },             /* map16 of 1 */
		{ "\xdf\x00\x00\x00\x00", 5 },              /* map32 of 0 */
		{ "\xdb\x00\x00\x00\x03" "abc", 8 },        /* str32 of 3 */
		{ "\xd9\x00", 2 },                          /* str8 of 0 */
		{ "\xc6\x00\x00\x00\x00", 5 },              /* bin32 of 0 */
		{ "\xc9\x00\x00\x00\x01\x05\xc1", 7 },      /* ext32 of 1 */
		{ "\xc8\x00\x00\x05", 4 },                  /* ext16 of 0 */
		{ "\xcf\x00\x00\x00\x00\x00\x00\x00\x01", 9 }, /* uint64 1 */
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		check_object((const uint8_t *)cases[i].bytes, cases[i].n);
}

/* ---- truncated and bad input -------------------------------------------- */

static void test_truncated(void **state)
{
	struct tdp_scanner s;
	/* str32 declaring 100 bytes, 50 present */
	uint8_t buf[55] = { 0xdb, 0, 0, 0, 100 };
	/* array of 3 with one element present */
	const uint8_t arr[] = { 0x93, 0x01 };

	(void)state;
	memset(buf + 5, 'x', 50);
	assert_int_equal(feed(buf, sizeof(buf), &tdp_scan_default_limits, &s), 0);
	assert_int_equal(s.need, 105);
	assert_int_equal(feed(buf, 3, &tdp_scan_default_limits, &s), 0);
	assert_true(s.need >= 5 && s.need <= 105);

	assert_int_equal(feed(arr, sizeof(arr), &tdp_scan_default_limits, &s), 0);
	assert_int_equal(s.need, 4); /* two more objects of at least a byte each */
	assert_int_equal(feed(arr, 0, &tdp_scan_default_limits, &s), 0);
	assert_int_equal(s.need, 1);
}

static void test_bad_byte(void **state)
{
	struct tdp_scanner s;
	static const struct {
		const char *bytes;
		size_t n;
	} cases[] = {
		{ "\xc1", 1 },
		{ "\xc1\x00\x00\x00", 4 },
		{ "\x92\x01\xc1", 3 },         /* inside an array */
		{ "\x81\xc1\x01", 3 },         /* as a map key */
		{ "\x81\xa1k\xc1", 4 },        /* as a map value */
		{ "\x94\x00\x01\xa4ping\x91\x81\xa1k\xc1", 13 },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint8_t *b = exact_copy(cases[i].bytes, cases[i].n);

		assert_int_equal(feed(b, cases[i].n, &tdp_scan_default_limits, &s), -EBADMSG);
		free(b);
	}
	/* 0xc1 inside a str or bin payload is data, not a type byte */
	check_object((const uint8_t *)"\xa2\xc1\xc1", 3);
	check_object((const uint8_t *)"\xc4\x01\xc1", 3);
}

static void expect_refused(const char *bytes, size_t n, const struct tdp_scan_limits *lim,
			   int want1, int want2)
{
	struct tdp_scanner s;
	uint8_t *b = exact_copy(bytes, n);
	int r = feed(b, n, lim, &s);

	if (r != want1 && r != want2)
		fail_msg("%zu-byte input 0x%02x...: got %d, want %d or %d", n, b[0], r, want1, want2);
	/* the same answer whether the header arrived in pieces or not */
	tdp_scanner_reset(&s);
	for (size_t k = 0; k < n; k++) {
		r = tdp_scanner_feed(&s, b, k, lim);
		if (r != 0)
			break;
	}
	if (r == 0)
		r = tdp_scanner_feed(&s, b, n, lim);
	if (r != want1 && r != want2)
		fail_msg("%zu-byte input fed bytewise: got %d, want %d or %d", n, r, want1, want2);
	free(b);
}

static void test_huge_headers(void **state)
{
	const struct tdp_scan_limits *d = &tdp_scan_default_limits;

	(void)state;
	/* 4-billion-element containers: refused from the 5 header bytes alone */
	expect_refused("\xdd\xff\xff\xff\xff", 5, d, -EMSGSIZE, -E2BIG);
	expect_refused("\xdf\xff\xff\xff\xff", 5, d, -EMSGSIZE, -E2BIG);
	expect_refused("\xdf\x80\x00\x00\x00", 5, d, -EMSGSIZE, -E2BIG);
	/* 4 GiB payloads */
	expect_refused("\xc6\xff\xff\xff\xff", 5, d, -EMSGSIZE, -EMSGSIZE);
	expect_refused("\xdb\xff\xff\xff\xff", 5, d, -EMSGSIZE, -EMSGSIZE);
	expect_refused("\xc9\xff\xff\xff\xff", 5, d, -EMSGSIZE, -EMSGSIZE);
	/* 2 GiB bin: still over 1 GiB + 1 MiB */
	expect_refused("\xc6\x80\x00\x00\x00", 5, d, -EMSGSIZE, -EMSGSIZE);
	/* inside a request */
	expect_refused("\x94\x00\x01\xaatensor.put\x91\x81\xa4" "data\xc6\xff\xff\xff\xff",
		       26, d, -EMSGSIZE, -EMSGSIZE);
	expect_refused("\x94\x00\x01\xa4ping\xdd\xff\xff\xff\xff", 13, d, -EMSGSIZE, -E2BIG);

	/* a bin just at the default limit is waited for, one byte over is not */
	{
		struct tdp_scanner s;
		uint64_t max = TDP_MAX_MESSAGE_BYTES - 5;
		uint8_t h[5] = { 0xc6, (uint8_t)(max >> 24), (uint8_t)(max >> 16),
				 (uint8_t)(max >> 8), (uint8_t)max };

		assert_int_equal(feed(h, 5, d, &s), 0);
		assert_int_equal(s.need, TDP_MAX_MESSAGE_BYTES);
		max++;
		h[1] = (uint8_t)(max >> 24);
		h[2] = (uint8_t)(max >> 16);
		h[3] = (uint8_t)(max >> 8);
		h[4] = (uint8_t)max;
		assert_int_equal(feed(h, 5, d, &s), -EMSGSIZE);
	}
}

static void test_custom_max_bytes(void **state)
{
	const struct tdp_scan_limits lim = { .max_bytes = 100, .max_depth = 32, .max_objects = 1000 };
	struct tdp_scanner s;
	uint8_t buf[128];

	(void)state;
	/* bin8 of 98 bytes is exactly 100 bytes: accepted */
	buf[0] = 0xc4;
	buf[1] = 98;
	memset(buf + 2, 0xc1, 98);
	check_object_lim(buf, 100, &lim);
	/* 99 payload bytes: 101 in all, refused from the header alone */
	buf[1] = 99;
	assert_int_equal(feed(buf, 2, &lim, &s), -EMSGSIZE);
	/* an array declaring more elements than bytes allowed */
	expect_refused("\xdc\x00\x64", 3, &lim, -EMSGSIZE, -EMSGSIZE); /* 100 elements */
	assert_int_equal(feed((const uint8_t *)"\xdc\x00\x61", 3, &lim, &s), 0); /* 97 */
	assert_int_equal(feed((const uint8_t *)"\xdc\x00\x62", 3, &lim, &s), -EMSGSIZE);
	/* a map counts two objects per entry */
	assert_int_equal(feed((const uint8_t *)"\xde\x00\x30", 3, &lim, &s), 0); /* 3+96 */
	assert_int_equal(feed((const uint8_t *)"\xde\x00\x31", 3, &lim, &s), -EMSGSIZE);
	/* the objects still owed by an outer container count too */
	assert_int_equal(feed((const uint8_t *)"\x92\xc4\x60", 3, &lim, &s), 0); /* 1+2+96+1 */
	assert_int_equal(feed((const uint8_t *)"\x92\xc4\x61", 3, &lim, &s), -EMSGSIZE);
	/* and refused just the same when all its bytes are there */
	{
		uint8_t full[200];

		memset(full, 0xc0, sizeof(full));
		full[0] = 0xc4;
		full[1] = 99;
		assert_int_equal(feed(full, 101, &lim, &s), -EMSGSIZE);
		full[0] = 0xdc;
		full[1] = 0x00;
		full[2] = 0x62;
		assert_int_equal(feed(full, 101, &lim, &s), -EMSGSIZE);
		full[2] = 0x61;
		assert_int_equal(feed(full, 100, &lim, &s), 1);
		assert_int_equal(s.pos, 100);
		/* 50 separate 3-byte strings in an array: over 100 only as they add up */
		full[0] = 0xdc;
		full[1] = 0x00;
		full[2] = 50;
		for (int i = 0; i < 50; i++) {
			full[3 + 3 * i] = 0xa2;
			full[4 + 3 * i] = 'x';
			full[5 + 3 * i] = 'y';
		}
		assert_int_equal(feed(full, 153, &lim, &s), -EMSGSIZE);
		full[2] = 32; /* 3 + 96 = 99 bytes */
		assert_int_equal(feed(full, 153, &lim, &s), 1);
		assert_int_equal(s.pos, 99);
	}
	/* the int64 type byte alone is fine, not with only 8 bytes allowed */
	{
		const struct tdp_scan_limits tiny = { .max_bytes = 8, .max_depth = 32,
						      .max_objects = 1000 };

		assert_int_equal(feed((const uint8_t *)"\xd3", 1, &tiny, &s), -EMSGSIZE);
		assert_int_equal(feed((const uint8_t *)"\xd2", 1, &tiny, &s), 0);
	}
}

static void build_nested(struct packed *p, unsigned depth, int maps)
{
	for (unsigned i = 0; i < depth; i++) {
		if (maps) {
			msgpack_pack_map(&p->pk, 1);
			msgpack_pack_str_with_body(&p->pk, "k", 1);
		} else {
			msgpack_pack_array(&p->pk, 1);
		}
	}
	msgpack_pack_uint8(&p->pk, 42);
}

static void test_depth(void **state)
{
	struct tdp_scanner s;
	struct packed p;
	msgpack_unpacked u;
	const msgpack_object *o;

	(void)state;
	for (int maps = 0; maps <= 1; maps++) {
		packed_init(&p);
		build_nested(&p, 32, maps);
		check_object((const uint8_t *)p.sb.data, p.sb.size);

		/* msgpack-c really decodes all 32 levels */
		msgpack_unpacked_init(&u);
		assert_int_equal(tdp_unpack(&u, (const uint8_t *)p.sb.data, p.sb.size), 0);
		o = &u.data;
		for (int i = 0; i < 32; i++) {
			if (maps) {
				assert_int_equal(o->type, MSGPACK_OBJECT_MAP);
				assert_int_equal(o->via.map.size, 1);
				o = &o->via.map.ptr[0].val;
			} else {
				assert_int_equal(o->type, MSGPACK_OBJECT_ARRAY);
				assert_int_equal(o->via.array.size, 1);
				o = &o->via.array.ptr[0];
			}
		}
		assert_int_equal(o->type, MSGPACK_OBJECT_POSITIVE_INTEGER);
		assert_int_equal(o->via.u64, 42);
		msgpack_unpacked_destroy(&u);
		packed_done(&p);

		/* 33 levels: refused as soon as the 33rd header is seen */
		packed_init(&p);
		build_nested(&p, 33, maps);
		assert_int_equal(feed((const uint8_t *)p.sb.data, p.sb.size,
				      &tdp_scan_default_limits, &s), -ELOOP);
		assert_int_equal(feed((const uint8_t *)p.sb.data, p.sb.size - 1,
				      &tdp_scan_default_limits, &s), -ELOOP);
		packed_done(&p);
	}

	/* depth 32 with an empty innermost container is fine, 33 is not */
	{
		uint8_t b[40];

		memset(b, 0x91, sizeof(b));
		b[31] = 0x90;
		check_object(b, 32);
		b[31] = 0x91;
		b[32] = 0x80;
		assert_int_equal(feed(b, 33, &tdp_scan_default_limits, &s), -ELOOP);
	}

	/* siblings do not add up: many depth-32 subtrees side by side */
	packed_init(&p);
	msgpack_pack_array(&p.pk, 3);
	for (int i = 0; i < 3; i++)
		build_nested(&p, 31, i == 1);
	check_packed(&p, 0x93);
	packed_done(&p);

	/* a custom lower depth */
	{
		const struct tdp_scan_limits lim = { .max_bytes = 1 << 20, .max_depth = 3,
						     .max_objects = 1000 };

		check_object_lim((const uint8_t *)"\x91\x91\x91\x01", 4, &lim);
		check_object_lim((const uint8_t *)"\x92\x91\x91\x01\x91\x91\x02", 7, &lim);
		assert_int_equal(feed((const uint8_t *)"\x91\x91\x91\x91\x01", 5, &lim, &s), -ELOOP);
		assert_int_equal(feed((const uint8_t *)"\x91\x91\x90", 3, &lim, &s), 1);
		assert_int_equal(feed((const uint8_t *)"\x91\x91\x91\x90", 4, &lim, &s), -ELOOP);
		assert_int_equal(feed((const uint8_t *)"\x91\x91\x91\x91", 4, &lim, &s), -ELOOP);
	}
	/* a max_depth over TDP_MAX_DEPTH is held to TDP_MAX_DEPTH */
	{
		const struct tdp_scan_limits lim = { .max_bytes = 1 << 20, .max_depth = 1000,
						     .max_objects = 1000 };
		uint8_t *b = malloc(200);

		assert_non_null(b);
		memset(b, 0x91, 200);
		assert_int_equal(feed(b, 200, &lim, &s), -ELOOP);
		free(b);
	}
}

static void test_max_objects(void **state)
{
	const struct tdp_scan_limits lim = { .max_bytes = 1 << 20, .max_depth = 32,
					     .max_objects = 10 };
	struct tdp_scanner s;

	(void)state;
	/* an array of 9 is 10 objects */
	check_object_lim((const uint8_t *)"\x99\x01\x02\x03\x04\x05\x06\x07\x08\x09", 10, &lim);
	/* an array of 10 is refused from its header */
	assert_int_equal(feed((const uint8_t *)"\x9a", 1, &lim, &s), -E2BIG);
	/* [[1,2],[3,4],[5,6]] is 10 objects */
	check_object_lim((const uint8_t *)"\x93\x92\x01\x02\x92\x03\x04\x92\x05\x06", 10, &lim);
	/* one more, and it fails when the last container header is seen */
	assert_int_equal(feed((const uint8_t *)"\x93\x92\x01\x02\x92\x03\x04\x93", 8, &lim, &s),
			 -E2BIG);
	/* a map of 4 entries is 9 objects, of 5 entries 11 */
	check_object_lim((const uint8_t *)"\x84\x01\x01\x02\x02\x03\x03\x04\x04", 9, &lim);
	assert_int_equal(feed((const uint8_t *)"\x85", 1, &lim, &s), -E2BIG);

	/* the default: 1,048,576 objects, containers included */
	{
		size_t n = 5 + ((size_t)1 << 20) - 1;
		uint8_t *b = malloc(n);

		assert_non_null(b);
		b[0] = 0xdd;
		b[1] = 0x00;
		b[2] = 0x0f;
		b[3] = 0xff;
		b[4] = 0xff;
		memset(b + 5, 0xc0, n - 5);
		assert_int_equal(feed(b, n, &tdp_scan_default_limits, &s), 1);
		assert_int_equal(s.pos, n);
		b[1] = 0x10;
		b[2] = b[3] = b[4] = 0x00;
		assert_int_equal(feed(b, 5, &tdp_scan_default_limits, &s), -E2BIG);
		free(b);
	}
}

/* ---- garbage ------------------------------------------------------------ */

static const int allowed[] = { 0, 1, -EBADMSG, -EMSGSIZE, -ELOOP, -E2BIG };

static int result_ok(int r)
{
	for (size_t i = 0; i < sizeof(allowed) / sizeof(allowed[0]); i++)
		if (r == allowed[i])
			return 1;
	return 0;
}

/* Scan `b` (exactly `n` bytes on the heap) whole and byte by byte; both must
 * agree, and whatever is accepted msgpack-c must accept with the same length. */
static int check_garbage(const uint8_t *b, size_t n, const struct tdp_scan_limits *lim)
{
	struct tdp_scanner s, t;
	int r, ri = 0;

	r = feed(b, n, lim, &s);
	if (!result_ok(r))
		fail_msg("scanner returned %d", r);
	if (r == 1) {
		msgpack_unpacked u;

		assert_true(s.pos >= 1 && s.pos <= n);
		msgpack_unpacked_init(&u);
		if (tdp_unpack(&u, b, s.pos) != 0)
			fail_msg("scanner accepted %llu bytes msgpack-c refuses",
				 (unsigned long long)s.pos);
		msgpack_unpacked_destroy(&u);
	} else if (r == 0) {
		assert_true(s.need > n);
		assert_true(msgpack_says_incomplete(b, n));
	}

	tdp_scanner_reset(&t);
	for (size_t k = 0; k <= n; k++) {
		ri = tdp_scanner_feed(&t, b, k, lim);
		if (ri != 0)
			break;
	}
	if (ri != r)
		fail_msg("whole buffer gave %d, byte by byte %d", r, ri);
	if (r == 1)
		assert_int_equal(t.pos, s.pos);
	return r;
}

static void test_garbage(void **state)
{
	static const uint8_t typebytes[] = {
		0x00, 0x7f, 0x80, 0x81, 0x82, 0x8f, 0x90, 0x91, 0x92, 0x9f, 0xa0, 0xa3, 0xbf,
		0xc0, 0xc1, 0xc2, 0xc3, 0xc4, 0xc5, 0xc6, 0xc7, 0xc8, 0xc9, 0xca, 0xcb, 0xcc,
		0xcd, 0xce, 0xcf, 0xd0, 0xd1, 0xd2, 0xd3, 0xd4, 0xd5, 0xd6, 0xd7, 0xd8, 0xd9,
		0xda, 0xdb, 0xdc, 0xdd, 0xde, 0xdf, 0xe0, 0xff,
	};
	const struct tdp_scan_limits small = { .max_bytes = 64, .max_depth = 4, .max_objects = 16 };
	unsigned counts[2][8] = { { 0 } };

	(void)state;
	rng_state = 0x7e4503d;
	for (int i = 0; i < 30000; i++) {
		size_t n = 1 + rng_next() % 64;
		uint8_t *b = malloc(n);
		int mode = i % 3;

		assert_non_null(b);
		for (size_t k = 0; k < n; k++) {
			uint64_t x = rng_next();

			if (mode == 0) /* uniform bytes */
				b[k] = (uint8_t)x;
			else if (mode == 1) /* type bytes and tiny lengths */
				b[k] = (x & 0x100) ? (uint8_t)(x & 3)
						   : typebytes[(x >> 16) % sizeof(typebytes)];
			else /* mostly small containers and scalars */
				b[k] = (uint8_t)((x & 0x300) == 0 ? 0x90 + (x & 3)
						 : (x & 0x300) == 0x100 ? 0x80 + (x & 1)
						 : (x & 0x300) == 0x200 ? (x & 0x3f)
						 : typebytes[(x >> 16) % sizeof(typebytes)]);
		}
		for (int l = 0; l < 2; l++) {
			int r = check_garbage(b, n, l ? &small : &tdp_scan_default_limits);

			for (size_t j = 0; j < 6; j++)
				if (allowed[j] == r)
					counts[l][j]++;
		}
		free(b);
	}
	/* the generator reaches every outcome, else the test proves little */
	for (size_t j = 0; j < 6; j++)
		if (counts[1][j] == 0 && allowed[j] != -EMSGSIZE)
			fail_msg("no garbage buffer gave %d under small limits", allowed[j]);
	for (size_t j = 0; j < 3; j++)
		if (counts[0][j] == 0)
			fail_msg("no garbage buffer gave %d", allowed[j]);
	assert_true(counts[1][3] > 0); /* -EMSGSIZE under 64-byte limit */
}

static void test_mutations(void **state)
{
	struct packed p;
	uint8_t data[40];

	(void)state;
	rng_state = 0xdecafbad;
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)rng_next();
	packed_init(&p);
	msgpack_pack_array(&p.pk, 4);
	msgpack_pack_uint8(&p.pk, 0);
	msgpack_pack_uint32(&p.pk, 123456);
	msgpack_pack_str_with_body(&p.pk, "tensor.put", 10);
	msgpack_pack_array(&p.pk, 1);
	msgpack_pack_map(&p.pk, 4);
	msgpack_pack_str_with_body(&p.pk, "name", 4);
	msgpack_pack_str_with_body(&p.pk, "model/w", 7);
	msgpack_pack_str_with_body(&p.pk, "shape", 5);
	msgpack_pack_array(&p.pk, 2);
	msgpack_pack_uint8(&p.pk, 2);
	msgpack_pack_uint8(&p.pk, 5);
	msgpack_pack_str_with_body(&p.pk, "attrs", 5);
	msgpack_pack_map(&p.pk, 2);
	msgpack_pack_str_with_body(&p.pk, "x", 1);
	msgpack_pack_array(&p.pk, 1);
	msgpack_pack_map(&p.pk, 0);
	msgpack_pack_str_with_body(&p.pk, "y", 1);
	msgpack_pack_double(&p.pk, 3.5);
	msgpack_pack_str_with_body(&p.pk, "data", 4);
	msgpack_pack_bin_with_body(&p.pk, data, sizeof(data));

	for (int i = 0; i < 20000; i++) {
		size_t n = p.sb.size;
		uint8_t *b = exact_copy(p.sb.data, n);
		int flips = 1 + (int)(rng_next() % 4);

		for (int f = 0; f < flips; f++) {
			uint64_t x = rng_next();

			b[x % n] = (x & 0x10000) ? (uint8_t)(x >> 24) : (uint8_t)(b[x % n] ^ (1u << ((x >> 20) % 8)));
		}
		check_garbage(b, n, &tdp_scan_default_limits);
		{
			size_t m = 1 + rng_next() % n;
			uint8_t *t = exact_copy(b, m);

			check_garbage(t, m, &tdp_scan_default_limits);
			free(t);
		}
		free(b);
	}
	packed_done(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_scalars),
		cmocka_unit_test(test_str_bin_ext),
		cmocka_unit_test(test_containers),
		cmocka_unit_test(test_nesting),
		cmocka_unit_test(test_non_minimal),
		cmocka_unit_test(test_truncated),
		cmocka_unit_test(test_bad_byte),
		cmocka_unit_test(test_huge_headers),
		cmocka_unit_test(test_custom_max_bytes),
		cmocka_unit_test(test_depth),
		cmocka_unit_test(test_max_objects),
		cmocka_unit_test(test_garbage),
		cmocka_unit_test(test_mutations),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

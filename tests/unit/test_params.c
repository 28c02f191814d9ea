/* serve/params.c: each kind's check and decode, defaults and given flags of
 * absent parameters, and every error text a client sees (the texts are the
 * contract: docs/protocol.md and the client tests match them). lookup_key
 * and devices_param are stand-ins here (their own tests are the integration
 * tests); what is checked is that params_parse hands them the text, the key
 * and the destination, and stops on their failure. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <msgpack.h>

#include "devices.h"
#include "mode.h"
#include "methods/params.h"
#include "methods/request.h"
#include "status.h"
#include "store/lookup.h"

/* ---- stand-ins for what params.c calls in other layers ---- */

/* A store key is "k:" + the name; "~..." names an unknown user. */
int lookup_key(struct caller *c, const char *text, size_t len, char *key)
{
	if (len && text[0] == '~')
		return td_fail(&c->err, TDP_INVALID_ARGUMENT, "'%.*s': no such user", (int)len, text);
	snprintf(key, TDP_MAX_NAME_LEN + 1, "k:%.*s", (int)len, text);
	return (int)len + 2;
}

/* Two devices. */
int devices_param(struct request *req, const msgpack_object *v, const char *what, uint32_t *ret)
{
	if (v->type != MSGPACK_OBJECT_POSITIVE_INTEGER || v->via.u64 >= 2)
		return request_fail(req, TDP_INVALID_ARGUMENT, "%s must be a device id, 0 to 1", what);
	*ret = (uint32_t)v->via.u64;
	return 0;
}

/* ---- building a request's params map ---- */

static msgpack_sbuffer sb;
static msgpack_packer pk;
static msgpack_unpacked up;
static struct request req;

static void map_begin(uint32_t n)
{
	msgpack_sbuffer_clear(&sb);
	msgpack_pack_map(&pk, n);
}

static void key(const char *k)
{
	msgpack_pack_str(&pk, strlen(k));
	msgpack_pack_str_body(&pk, k, strlen(k));
}

static void str(const char *k, const char *v)
{
	key(k);
	msgpack_pack_str(&pk, strlen(v));
	msgpack_pack_str_body(&pk, v, strlen(v));
}

/* The map packed since map_begin becomes req.params. */
static struct request *map_end(void)
{
	size_t off = 0;

	msgpack_unpacked_destroy(&up);
	msgpack_unpacked_init(&up);
	assert_int_equal(msgpack_unpack_next(&up, sb.data, sb.size, &off), MSGPACK_UNPACK_SUCCESS);
	memset(&req, 0, sizeof(req));
	req.params = &up.data;
	return &req;
}

static int setup(void **state)
{
	(void)state;
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_unpacked_init(&up);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	msgpack_unpacked_destroy(&up);
	msgpack_sbuffer_destroy(&sb);
	return 0;
}

/* The request failed with INVALID_ARGUMENT and exactly `text`. */
static void failed_with(int r, const char *text)
{
	assert_int_equal(r, -1);
	assert_int_equal(req.call.err.code, TDP_INVALID_ARGUMENT);
	assert_string_equal(req.call.err.message, text);
}

/* ---- tests ---- */

static void test_decode_each_kind(void **state)
{
	struct param_str s;
	uint64_t u = 0;
	bool b = false;
	double num = 0, neg = 0, flt = 0;
	const msgpack_object *arr, *bin, *map, *mob, *raw;
	param_name name, tkey;
	uint32_t mode = 0, dev = 0;
	const struct param p[] = {
		PARAM_REQ("s", PARAM_STR, s),
		PARAM_REQ("u", PARAM_UINT, u),
		PARAM_REQ("b", PARAM_BOOL, b),
		PARAM_REQ("num", PARAM_NUMBER, num),
		PARAM_REQ("neg", PARAM_NUMBER, neg),
		PARAM_REQ("flt", PARAM_NUMBER, flt),
		PARAM_REQ("arr", PARAM_ARRAY, arr),
		PARAM_REQ("bin", PARAM_BIN, bin),
		PARAM_REQ("map", PARAM_MAP, map),
		PARAM_REQ("mob", PARAM_MAP_OR_BIN, mob),
		PARAM_REQ("name", PARAM_NAME, name),
		PARAM_REQ("key", PARAM_TENSOR_KEY, tkey),
		PARAM_REQ("mode", PARAM_MODE, mode),
		PARAM_REQ("device", PARAM_DEVICE, dev),
		PARAM_REQ_OBJ("raw", PARAM_UINT, raw),
	};
	uint32_t want_mode;

	(void)state;
	map_begin(15);
	str("s", "hello");
	key("u"), msgpack_pack_uint64(&pk, UINT64_MAX);
	key("b"), msgpack_pack_true(&pk);
	key("num"), msgpack_pack_uint64(&pk, 7);
	key("neg"), msgpack_pack_int64(&pk, -3);
	key("flt"), msgpack_pack_double(&pk, 0.25);
	key("arr"), msgpack_pack_array(&pk, 2), msgpack_pack_int(&pk, 1), msgpack_pack_int(&pk, 2);
	key("bin"), msgpack_pack_bin(&pk, 3), msgpack_pack_bin_body(&pk, "xyz", 3);
	key("map"), msgpack_pack_map(&pk, 0);
	key("mob"), msgpack_pack_bin(&pk, 1), msgpack_pack_bin_body(&pk, "q", 1);
	str("name", "a.b/c");
	str("key", "w");
	str("mode", "group-read,world-read");
	key("device"), msgpack_pack_uint64(&pk, 1);
	key("raw"), msgpack_pack_uint64(&pk, 42);
	assert_int_equal(PARAMS_PARSE(map_end(), p), 0);
	assert_int_equal(s.len, 5);
	assert_memory_equal(s.ptr, "hello", 5);
	assert_true(u == UINT64_MAX);
	assert_true(b);
	assert_true(num == 7.0 && neg == -3.0 && flt == 0.25);
	assert_int_equal(arr->type, MSGPACK_OBJECT_ARRAY);
	assert_int_equal(arr->via.array.size, 2);
	assert_int_equal(bin->type, MSGPACK_OBJECT_BIN);
	assert_memory_equal(bin->via.bin.ptr, "xyz", 3);
	assert_int_equal(map->type, MSGPACK_OBJECT_MAP);
	assert_int_equal(mob->type, MSGPACK_OBJECT_BIN);
	assert_string_equal(name, "a.b/c");
	assert_string_equal(tkey, "k:w");
	assert_int_equal(tdp_mode_parse("group-read,world-read", 21, &want_mode), 0);
	assert_int_equal(mode, want_mode);
	assert_int_equal(dev, 1);
	assert_int_equal(raw->type, MSGPACK_OBJECT_POSITIVE_INTEGER);
	assert_int_equal(raw->via.u64, 42);

	/* A map where a map or bytes may go: no type error comes before the
	 * missing one. */
	map_begin(14);
	str("s", ""), key("u"), msgpack_pack_uint64(&pk, 0), key("b"), msgpack_pack_false(&pk);
	key("num"), msgpack_pack_float(&pk, 1.5f), key("neg"), msgpack_pack_int(&pk, 0);
	key("flt"), msgpack_pack_double(&pk, 2), key("arr"), msgpack_pack_array(&pk, 0);
	key("bin"), msgpack_pack_bin(&pk, 0), key("map"), msgpack_pack_map(&pk, 0);
	key("mob"), msgpack_pack_map(&pk, 0), str("name", "x"), str("key", "y"), str("mode", "private");
	key("device"), msgpack_pack_uint64(&pk, 0);
	assert_int_equal(PARAMS_PARSE(map_end(), p), -1);       /* raw is required */
	assert_string_equal(req.call.err.message, "missing parameter 'raw'");
}

static void test_defaults_and_given(void **state)
{
	struct param_str s = { "untouched", 9 };
	uint64_t u = 5;
	bool b = true, has_u = true, has_b = true, has_s = true, has_arr = true;
	double num = 1.5;
	const msgpack_object *arr = (const msgpack_object *)&arr, *raw = (const msgpack_object *)&raw;
	param_name name = "dflt";
	uint32_t mode = 77, dev = 9;
	const struct param p[] = {
		PARAM_OPT_GIVEN("s", PARAM_STR, s, has_s),
		PARAM_OPT_GIVEN("u", PARAM_UINT, u, has_u),
		PARAM_OPT_GIVEN("b", PARAM_BOOL, b, has_b),
		PARAM_OPT("num", PARAM_NUMBER, num),
		PARAM_OPT_GIVEN("arr", PARAM_ARRAY, arr, has_arr),
		PARAM_OPT("name", PARAM_NAME, name),
		PARAM_OPT("mode", PARAM_MODE, mode),
		PARAM_OPT("device", PARAM_DEVICE, dev),
		PARAM_OPT_OBJ("raw", PARAM_STR, raw),
	};

	(void)state;
	/* No params map at all: nothing is required, nothing given. */
	memset(&req, 0, sizeof(req));
	assert_int_equal(PARAMS_PARSE(&req, p), 0);
	assert_null(s.ptr);
	assert_int_equal(s.len, 0);
	assert_false(has_s || has_u || has_b || has_arr);
	assert_true(u == 5 && b && num == 1.5 && mode == 77 && dev == 9);
	assert_string_equal(name, "dflt");
	assert_null(arr);
	assert_null(raw);

	/* Given: the flags say so, the others keep their defaults. */
	map_begin(2);
	key("u"), msgpack_pack_uint64(&pk, 0);
	key("arr"), msgpack_pack_array(&pk, 0);
	assert_int_equal(PARAMS_PARSE(map_end(), p), 0);
	assert_true(has_u && has_arr);
	assert_false(has_s || has_b);
	assert_true(u == 0 && b && num == 1.5);
	assert_non_null(arr);

	/* An empty map is the same as none. */
	map_begin(0);
	assert_int_equal(PARAMS_PARSE(map_end(), p), 0);
	assert_false(has_u || has_arr);
	assert_null(arr);
	assert_int_equal(params_none(&req), 0);
}

/* Each kind's type error, as clients read it. */
static void test_type_errors(void **state)
{
	static const struct {
		enum param_type type;
		const char *text;
	} kinds[] = {
		{ PARAM_STR, "parameter 'x' must be a string" },
		{ PARAM_NAME, "parameter 'x' must be a string" },
		{ PARAM_TENSOR_KEY, "parameter 'x' must be a string" },
		{ PARAM_MODE, "parameter 'x' must be a string" },
		{ PARAM_UINT, "parameter 'x' must be a non-negative integer" },
		{ PARAM_DEVICE, "parameter 'x' must be a non-negative integer" },
		{ PARAM_BOOL, "parameter 'x' must be a boolean" },
		{ PARAM_ARRAY, "parameter 'x' must be an array" },
		{ PARAM_BIN, "parameter 'x' must be binary (msgpack bin)" },
		{ PARAM_MAP, "parameter 'x' must be a map" },
		{ PARAM_MAP_OR_BIN, "parameter 'x' must be a map" },
		{ PARAM_NUMBER, "parameter 'x' must be a number" },
	};
	const msgpack_object *o;

	(void)state;
	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
		/* raw: the destination is an object whatever the kind */
		struct param p = { "x", kinds[i].type, true, true, (void *)&o, NULL };

		map_begin(1);
		key("x");
		/* a value of no kind's type: nil, except for... nothing */
		msgpack_pack_nil(&pk);
		failed_with(params_parse(map_end(), &p, 1), kinds[i].text);
	}
	/* A negative integer is no uint; a string is no number. */
	{
		uint64_t u;
		double d;
		const struct param pu[] = { PARAM_REQ("n", PARAM_UINT, u) };
		const struct param pd[] = { PARAM_REQ("n", PARAM_NUMBER, d) };

		map_begin(1);
		key("n"), msgpack_pack_int(&pk, -1);
		failed_with(PARAMS_PARSE(map_end(), pu), "parameter 'n' must be a non-negative integer");
		map_begin(1);
		str("n", "1");
		failed_with(PARAMS_PARSE(map_end(), pd), "parameter 'n' must be a number");
	}
}

static void test_key_errors(void **state)
{
	param_name name;
	bool flag = false;
	const struct param p[] = {
		PARAM_REQ("name", PARAM_NAME, name),
		PARAM_OPT("flag", PARAM_BOOL, flag),
		PARAM_REQ("other", PARAM_BOOL, flag),
	};

	(void)state;
	map_begin(2);
	str("name", "a");
	key("bogus"), msgpack_pack_nil(&pk);
	failed_with(PARAMS_PARSE(map_end(), p), "unknown parameter 'bogus'");

	/* A key that is no string; one with bytes a terminal must not see,
	 * and one over 64 bytes, cut. */
	map_begin(1);
	msgpack_pack_int(&pk, 3), msgpack_pack_nil(&pk);
	failed_with(PARAMS_PARSE(map_end(), p), "unknown parameter (a non-string key)");
	map_begin(1);
	str("a\x1b[2Jb\xff", "v");
	failed_with(PARAMS_PARSE(map_end(), p), "unknown parameter 'a?[2Jb?'");
	map_begin(1);
	str("0123456789012345678901234567890123456789012345678901234567890123456789", "v");
	failed_with(PARAMS_PARSE(map_end(), p),
		    "unknown parameter '0123456789012345678901234567890123456789012345678901234567890123'");
	/* No parameters at all expected. */
	map_begin(1);
	str("x", "v");
	failed_with(params_none(map_end()), "unknown parameter 'x'");

	map_begin(3);
	str("name", "a");
	key("flag"), msgpack_pack_true(&pk);
	key("flag"), msgpack_pack_true(&pk);
	failed_with(PARAMS_PARSE(map_end(), p), "parameter 'flag' given twice");

	/* Missing: the first in declaration order, after every key was checked. */
	map_begin(1);
	key("flag"), msgpack_pack_true(&pk);
	failed_with(PARAMS_PARSE(map_end(), p), "missing parameter 'name'");
	map_begin(2);
	key("other"), msgpack_pack_true(&pk);
	key("flag"), msgpack_pack_int(&pk, 1);
	failed_with(PARAMS_PARSE(map_end(), p), "parameter 'flag' must be a boolean");
}

static void test_decode_errors(void **state)
{
	param_name name, tkey;
	uint32_t mode, dev = 0;
	bool has_dev = false;
	const struct param pn[] = { PARAM_REQ("name", PARAM_NAME, name) };
	const struct param pk_[] = { PARAM_REQ("name", PARAM_TENSOR_KEY, tkey) };
	const struct param pm[] = { PARAM_REQ("mode", PARAM_MODE, mode) };
	const struct param pd[] = {
		PARAM_OPT_GIVEN("device", PARAM_DEVICE, dev, has_dev),
		PARAM_OPT("name", PARAM_NAME, name),
	};
	char long_name[TDP_MAX_NAME_LEN + 2];

	(void)state;
	map_begin(1);
	str("name", "no spaces");
	failed_with(PARAMS_PARSE(map_end(), pn),
		    "invalid tensor name (1-255 bytes of A-Z a-z 0-9 . _ : / -)");
	map_begin(1);
	str("name", "");
	failed_with(PARAMS_PARSE(map_end(), pn),
		    "invalid tensor name (1-255 bytes of A-Z a-z 0-9 . _ : / -)");
	memset(long_name, 'a', sizeof(long_name) - 1);
	long_name[sizeof(long_name) - 1] = '\0';
	map_begin(1);
	str("name", long_name);
	failed_with(PARAMS_PARSE(map_end(), pn),
		    "invalid tensor name (1-255 bytes of A-Z a-z 0-9 . _ : / -)");
	long_name[TDP_MAX_NAME_LEN] = '\0';             /* 255 bytes: fits */
	map_begin(1);
	str("name", long_name);
	assert_int_equal(PARAMS_PARSE(map_end(), pn), 0);
	assert_string_equal(name, long_name);

	map_begin(1);
	str("name", "~nobody/x");
	failed_with(PARAMS_PARSE(map_end(), pk_), "'~nobody/x': no such user");

	map_begin(1);
	str("mode", "world-execute");
	failed_with(PARAMS_PARSE(map_end(), pm),
		    "mode must be 'private' or a comma list of group-read, group-write, world-read, "
		    "world-write");

	/* devices_param gets the parameter's key; decoding goes in declaration
	 * order and stops at the first failure. */
	map_begin(2);
	str("name", "bad name");
	key("device"), msgpack_pack_uint64(&pk, 2);
	failed_with(PARAMS_PARSE(map_end(), pd), "device must be a device id, 0 to 1");
	assert_true(has_dev);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_decode_each_kind, setup, teardown),
		cmocka_unit_test_setup_teardown(test_defaults_and_given, setup, teardown),
		cmocka_unit_test_setup_teardown(test_type_errors, setup, teardown),
		cmocka_unit_test_setup_teardown(test_key_errors, setup, teardown),
		cmocka_unit_test_setup_teardown(test_decode_errors, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

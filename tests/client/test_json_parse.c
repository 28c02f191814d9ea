/* Unit tests of tensorctl's JSON → msgpack reader (proto/json_parse.c):
 * every JSON type, escapes, errors with positions, the limits, and --attr
 * values that fall back to strings. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "json.h"
#include "json_parse.h"

/* JSON → msgpack → JSON text (through the printer of json.c). */
static int roundtrip(const char *in, char *out, size_t cap, char *err, size_t err_len, bool attr)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	msgpack_unpacked u;
	size_t off = 0;
	FILE *f;
	int r;

	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	r = attr ? tdp_attr_value_to_msgpack(in, &pk, err, err_len)
		 : tdp_json_to_msgpack(in, strlen(in), &pk, err, err_len);
	if (r == 0) {
		msgpack_unpacked_init(&u);
		assert_int_equal(msgpack_unpack_next(&u, sb.data, sb.size, &off), MSGPACK_UNPACK_SUCCESS);
		assert_int_equal(off, sb.size);
		f = fmemopen(out, cap, "w");
		assert_non_null(f);
		ctl_json_msgpack(f, &u.data);
		fclose(f);
		msgpack_unpacked_destroy(&u);
	}
	msgpack_sbuffer_destroy(&sb);
	return r;
}

static void expect_json(const char *in, const char *want, bool attr)
{
	char out[512] = "", err[256] = "";

	if (roundtrip(in, out, sizeof(out), err, sizeof(err), attr) < 0)
		fail_msg("%s: %s", in, err);
	if (strcmp(out, want) != 0)
		fail_msg("%s: got %s, want %s", in, out, want);
}

static void expect_fail(const char *in, const char *why, bool attr)
{
	char out[512] = "", err[256] = "";

	if (roundtrip(in, out, sizeof(out), err, sizeof(err), attr) != -EINVAL)
		fail_msg("%s: accepted as %s", in, out);
	if (!strstr(err, why))
		fail_msg("%s: message %s lacks %s", in, err, why);
}

static void test_values(void **state)
{
	(void)state;
	expect_json(" {\"nodes\": [1, -2, 2.5, 1e3, true, false, null, \"x\"], \"o\": {}} ",
		    "{\"nodes\":[1,-2,2.5,1000,true,false,null,\"x\"],\"o\":{}}", false);
	expect_json("[[], [[]], {\"a\": [0]}]", "[[],[[]],{\"a\":[0]}]", false);
	expect_json("\"\\u00e9\\ud83d\\ude00\\n\\\"\\\\/\"", "\"\xc3\xa9\xf0\x9f\x98\x80\\n\\\"\\\\/\"", false);
	expect_json("9223372036854775807", "9223372036854775807", false);
	expect_json("92233720368547758070", "9.223372036854776e+19", false);
	expect_json("-0.0", "-0", false);
}

static void test_errors(void **state)
{
	char deep[80];

	(void)state;
	expect_fail("", "expected a value", false);
	expect_fail("[1,", "line 1, column 4", false);
	expect_fail("{\"a\" 1}", "expected ':'", false);
	expect_fail("{1: 2}", "string key", false);
	expect_fail("[1 2]", "expected ',' or ']'", false);
	expect_fail("[1]\n x", "line 2, column 2: unexpected text", false);
	expect_fail("\"abc", "unterminated", false);
	expect_fail("\"a\\q\"", "unknown escape", false);
	expect_fail("\"\\ud800\"", "surrogate", false);
	expect_fail("\"a\tb\"", "control character", false);
	expect_fail("01", "leading zero", false);
	expect_fail("1.", "digit", false);
	expect_fail("tru", "expected a value", false);
	memset(deep, '[', 40);
	memset(deep + 40, ']', 39);
	deep[79] = '\0';
	expect_fail(deep, "deeper", false);
}

static void test_attr_values(void **state)
{
	(void)state;
	expect_json("sum", "\"sum\"", true);
	expect_json("1", "1", true);
	expect_json("2.5", "2.5", true);
	expect_json("true", "true", true);
	expect_json("[1,2]", "[1,2]", true);
	expect_json("\"none\"", "\"none\"", true);
	expect_json("1.2.3", "\"1.2.3\"", true);
	expect_json("", "\"\"", true);
	expect_fail("[1,", "expected a value", true);
	expect_fail("\"abc", "unterminated", true);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_values),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_attr_values),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

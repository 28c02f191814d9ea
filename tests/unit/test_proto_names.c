/* Tensor names and modes as both ends read them: validation, the file-name
 * encoding (names never become paths), mode texts. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "mode.h"
#include "name.h"

static void test_name_valid(void **state)
{
	char longest[TDP_MAX_NAME_LEN + 2];

	assert_true(tdp_name_valid("a", 1));
	assert_true(tdp_name_valid("model/w.0:x-y_z", 15));
	assert_false(tdp_name_valid("", 0));
	assert_false(tdp_name_valid("a b", 3));
	assert_false(tdp_name_valid("a\0b", 3));
	assert_false(tdp_name_valid("a\nb", 3));
	assert_false(tdp_name_valid("caf\xc3\xa9", 5));
	assert_false(tdp_name_valid("a%b", 3));
	memset(longest, 'x', sizeof(longest));
	assert_true(tdp_name_valid(longest, TDP_MAX_NAME_LEN));
	assert_false(tdp_name_valid(longest, TDP_MAX_NAME_LEN + 1));
}

static void round_trip(const char *name, const char *want)
{
	char file[TDP_NAME_FILE_MAX], back[TDP_MAX_NAME_LEN + 1];
	int n = tdp_name_to_file(name, strlen(name), file, sizeof(file));

	assert_int_equal(n, (int)strlen(want));
	assert_string_equal(file, want);
	assert_null(strchr(file, '/'));
	assert_int_equal(tdp_name_from_file(file, (size_t)n, back), (int)strlen(name));
	assert_string_equal(back, name);
}

static void test_name_file_encoding(void **state)
{
	char longest[TDP_MAX_NAME_LEN + 1], file[TDP_NAME_FILE_MAX], back[TDP_MAX_NAME_LEN + 1];

	round_trip("w", "w");
	round_trip("model/w.0", "model%2Fw.0");
	round_trip("..", "%2E.");
	round_trip(".", "%2E");
	round_trip("../../etc/passwd", "%2E.%2F..%2Fetc%2Fpasswd");
	round_trip("/abs", "%2Fabs");
	round_trip("a:b", "a%3Ab");
	/* the longest name fits TDP_NAME_FILE_MAX even when every byte is encoded */
	memset(longest, '/', TDP_MAX_NAME_LEN);
	longest[TDP_MAX_NAME_LEN] = '\0';
	assert_int_equal(tdp_name_to_file(longest, TDP_MAX_NAME_LEN, file, sizeof(file)),
			 3 * TDP_MAX_NAME_LEN);
	assert_int_equal(tdp_name_from_file(file, strlen(file), back), TDP_MAX_NAME_LEN);
	/* invalid names are refused, small buffers too */
	assert_int_equal(tdp_name_to_file("a b", 3, file, sizeof(file)), -EINVAL);
	assert_int_equal(tdp_name_to_file("", 0, file, sizeof(file)), -EINVAL);
	assert_int_equal(tdp_name_to_file("abc/", 4, file, 6), -ENOSPC);
	/* only canonical encodings decode: no other file can pose as a name */
	assert_int_equal(tdp_name_from_file("a/b", 3, back), -EINVAL);
	assert_int_equal(tdp_name_from_file("a%2fb", 5, back), -EINVAL);
	assert_int_equal(tdp_name_from_file("a%41", 4, back), -EINVAL);
	assert_int_equal(tdp_name_from_file("..", 2, back), -EINVAL);
	assert_int_equal(tdp_name_from_file(".x", 2, back), -EINVAL);
	assert_int_equal(tdp_name_from_file("%2", 2, back), -EINVAL);
	assert_int_equal(tdp_name_from_file("%20", 3, back), -EINVAL);
	assert_int_equal(tdp_name_from_file("", 0, back), -EINVAL);
	assert_int_equal(tdp_name_from_file("pipeline-cache.bin.tmp~", 23, back), -EINVAL);
}

static void parses_to(const char *text, uint32_t want, const char *canonical)
{
	char buf[TDP_MODE_TEXT_MAX];
	uint32_t mode = 0xdead;

	assert_int_equal(tdp_mode_parse(text, strlen(text), &mode), 0);
	assert_int_equal(mode, want);
	assert_string_equal(tdp_mode_format(mode, buf), canonical);
	/* the canonical text reads back the same */
	assert_int_equal(tdp_mode_parse(buf, strlen(buf), &mode), 0);
	assert_int_equal(mode, want);
}

static void test_modes(void **state)
{
	static const char *const bad[] = {
		"", "Private", "private,group-read", "group-read,", ",group-read", "group",
		"group-read,,world-read", "world-read ", "0644", "group-exec", "world-read\0x",
	};
	char longtext[200];
	uint32_t mode = 77;

	parses_to("private", TDP_MODE_PRIVATE, "private");
	parses_to("group-read", TDP_MODE_GROUP_READ, "group-read");
	parses_to("group-write", TDP_MODE_GROUP_READ | TDP_MODE_GROUP_WRITE, "group-write");
	parses_to("world-read", TDP_MODE_WORLD_READ, "world-read");
	parses_to("world-write", TDP_MODE_WORLD_READ | TDP_MODE_WORLD_WRITE, "world-write");
	parses_to("world-read,group-write",
		  TDP_MODE_GROUP_READ | TDP_MODE_GROUP_WRITE | TDP_MODE_WORLD_READ, "group-write,world-read");
	parses_to("group-read,group-read", TDP_MODE_GROUP_READ, "group-read");
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(tdp_mode_parse(bad[i], i == 10 ? 12 : strlen(bad[i]), &mode), -EINVAL);
	memset(longtext, 0, sizeof(longtext));
	for (int i = 0; i < 15; i++)
		strcat(longtext, "group-read,");
	strcat(longtext, "group-read");
	assert_int_equal(tdp_mode_parse(longtext, strlen(longtext), &mode), -EINVAL);
	assert_int_equal(mode, 77); /* untouched on failure */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_name_valid),
		cmocka_unit_test(test_name_file_encoding),
		cmocka_unit_test(test_modes),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

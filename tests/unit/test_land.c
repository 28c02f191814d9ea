/* client/lib/land.c: finding a tensor.get payload in a reply's first bytes.
 * A real answer (packed here as the daemon packs it: the meta fields, then
 * "data" and the bin last) is found at every prefix that holds its bin
 * header and not before; other shapes (an error answer, a notification, a
 * result without "data" last, a "data" that is not a bin) are told apart at
 * once. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <msgpack.h>

#include "land.h"

static size_t pack_reply(msgpack_sbuffer *sb, uint32_t payload, bool error, bool data_last, bool bin)
{
	msgpack_packer pk;
	static const uint8_t bytes[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };

	msgpack_sbuffer_init(sb);
	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	msgpack_pack_array(&pk, 4);
	msgpack_pack_int(&pk, 1);
	msgpack_pack_uint32(&pk, 70000);
	if (error) {
		msgpack_pack_map(&pk, 1);
		msgpack_pack_str_with_body(&pk, "code", 4);
		msgpack_pack_int(&pk, 5);
		msgpack_pack_nil(&pk);
		return 0;
	}
	msgpack_pack_nil(&pk);
	msgpack_pack_map(&pk, 3);
	if (!data_last) {
		msgpack_pack_str_with_body(&pk, "data", 4);
		msgpack_pack_bin(&pk, 0);
	}
	msgpack_pack_str_with_body(&pk, "name", 4);
	msgpack_pack_str_with_body(&pk, "t/x", 3);
	msgpack_pack_str_with_body(&pk, "shape", 5);
	msgpack_pack_array(&pk, 2);
	msgpack_pack_uint64(&pk, 3);
	msgpack_pack_uint64(&pk, 100000);
	if (data_last) {
		msgpack_pack_str_with_body(&pk, "data", 4);
		if (bin)
			msgpack_pack_bin(&pk, payload);
		else
			msgpack_pack_str(&pk, payload);
	}
	for (uint32_t i = 0; i < payload; i += 8)
		msgpack_sbuffer_write(sb, (const char *)bytes, payload - i < 8 ? payload - i : 8);
	return sb->size - payload;
}

static void test_found_at_every_prefix(void **state)
{
	static const uint32_t sizes[] = { 0, 5, 255, 256, 65535, 65536, 300000 };

	(void)state;
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		msgpack_sbuffer sb;
		size_t at, len_at;
		uint64_t size;
		unsigned lb;
		size_t head = pack_reply(&sb, sizes[i], false, true, true);

		for (size_t len = 0; len <= sb.size && len < head + 16; len++) {
			int r = tdc_land_find((const uint8_t *)sb.data, len, &at, &size, &len_at, &lb);

			assert_int_equal(r, len >= head ? 1 : 0);
			if (r == 1) {
				assert_int_equal(at, head);
				assert_int_equal(size, sizes[i]);
				assert_int_equal(len_at + lb, head);
			}
		}
		msgpack_sbuffer_destroy(&sb);
	}
}

static void test_other_shapes(void **state)
{
	msgpack_sbuffer sb;
	size_t at, len_at;
	uint64_t size;
	unsigned lb;
	static const uint8_t notify[] = { 0x93, 0x02, 0xa3, 'l', 'o', 'g', 0x80 };

	(void)state;
	pack_reply(&sb, 64, true, true, true);
	assert_int_equal(tdc_land_find((const uint8_t *)sb.data, sb.size, &at, &size, &len_at, &lb), -1);
	msgpack_sbuffer_destroy(&sb);
	pack_reply(&sb, 64, false, false, true);
	assert_int_equal(tdc_land_find((const uint8_t *)sb.data, sb.size, &at, &size, &len_at, &lb), -1);
	msgpack_sbuffer_destroy(&sb);
	pack_reply(&sb, 64, false, true, false);
	assert_int_equal(tdc_land_find((const uint8_t *)sb.data, sb.size, &at, &size, &len_at, &lb), -1);
	msgpack_sbuffer_destroy(&sb);
	assert_int_equal(tdc_land_find(notify, sizeof(notify), &at, &size, &len_at, &lb), -1);
	/* a byte that starts no msgpack object where the msgid is */
	assert_int_equal(tdc_land_find((const uint8_t *)"\x94\x01\xc1", 3, &at, &size, &len_at, &lb), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_found_at_every_prefix),
		cmocka_unit_test(test_other_shapes),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

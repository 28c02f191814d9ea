/* Integration tests (integration.h): the raw protocol: garbage, a response or a notification from the
 * client, the method name as bin, oversized headers, messages that are no
 * request, and the nesting limit. */
#include "integration.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "pack.h"
#include "rpc.h"

static void test_garbage_stream(void **state)
{
	struct raw r;
	struct rmsg m;
	static const uint8_t garbage[16] = {
		0xc1, 0xc1, 0xc1, 0xc1, 0xc1, 0xc1, 0xc1, 0xc1,
		0xc1, 0xc1, 0xc1, 0xc1, 0xc1, 0xc1, 0xc1, 0xc1,
	};
	msgpack_sbuffer sb;
	msgpack_packer pk;

	(void)state;
	raw_open(&r);
	raw_send(&r, garbage, sizeof(garbage));
	expect_broken_stream(&r, TENSORD_PROTOCOL, TENSORD_PROTOCOL, "0xc1 bytes");
	raw_close(&r);

	/* a good request before the garbage is still answered, first */
	raw_open(&r);
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	req_begin(&pk, 41, "ping", -1);
	msgpack_sbuffer_write(&sb, (const char *)garbage, 4);
	raw_send(&r, sb.data, sb.size);
	msgpack_sbuffer_destroy(&sb);
	assert_int_equal(expect_response(&r, &m, 41, NULL)->type, MSGPACK_OBJECT_NIL);
	rmsg_free(&m);
	expect_broken_stream(&r, TENSORD_PROTOCOL, TENSORD_PROTOCOL, "ping then 0xc1");
	raw_close(&r);

	/* valid msgpack that is no request and has no msgid: a broken stream */
	raw_open(&r);
	raw_send(&r, "\xa5hello", 6);
	expect_broken_stream(&r, TENSORD_PROTOCOL, TENSORD_PROTOCOL, "a bare string");
	raw_close(&r);

	ping_ok();
}

/* Responses and notifications are daemon-to-client messages: from a client
 * they are valid msgpack, no request, and carry no request msgid, so the
 * stream is broken (docs/protocol.md, "Broken streams"). */
static void test_response_from_client(void **state)
{
	struct raw r;

	(void)state;
	raw_open(&r);
	raw_send(&r, "\x94\x01\x05\xc0\xc0", 5); /* [1, 5, nil, nil] */
	expect_broken_stream(&r, TENSORD_PROTOCOL, TENSORD_PROTOCOL, "a response message");
	raw_close(&r);
	ping_ok();
}

/* A client notification is ignored, whatever its method (known, unknown,
 * bin): no answer, no disconnect; the next request is answered. */
static void test_notification_from_client(void **state)
{
	static const char notes[] =
		"\x93\x02\xa4ping\x90"                 /* [2, "ping", []] */
		"\x93\x02\xa8no.such!\x91\x80"        /* [2, "no.such!", [{}]] */
		"\x93\x02\xc4\x08nvim_rpc\x90";        /* [2, bin "nvim_rpc", []] */
	struct rmsg m;
	struct raw r;
	const msgpack_object *res;

	(void)state;
	raw_open(&r);
	raw_send(&r, notes, sizeof(notes) - 1);
	raw_send(&r, "\x94\x00\x09\xa4ping\x90", 9); /* [0, 9, "ping", []] */
	assert_true(expect_response(&r, &m, 9, &res)->type == MSGPACK_OBJECT_NIL);
	assert_non_null(tdp_map_find(res, "pong"));
	rmsg_free(&m);
	raw_close(&r);
	ping_ok();
}

/* The method name as msgpack bin (clients from before the str/bin split). */
static void test_bin_method(void **state)
{
	struct rmsg m;
	struct raw r;
	const msgpack_object *res;

	(void)state;
	raw_open(&r);
	raw_send(&r, "\x94\x00\x0a\xc4\x04ping\x90", 10); /* [0, 10, bin "ping", []] */
	assert_true(expect_response(&r, &m, 10, &res)->type == MSGPACK_OBJECT_NIL);
	assert_non_null(tdp_map_find(res, "pong"));
	rmsg_free(&m);
	/* not UTF-8: a PROTOCOL error for that msgid, and the connection goes on */
	raw_send(&r, "\x94\x00\x0b\xc4\x02\xff\xfe\x90", 8);
	check_error_object(expect_response(&r, &m, 11, NULL), TENSORD_PROTOCOL);
	rmsg_free(&m);
	raw_send(&r, "\x94\x00\x0c\xc4\x04ping\x90", 10);
	assert_true(expect_response(&r, &m, 12, &res)->type == MSGPACK_OBJECT_NIL);
	rmsg_free(&m);
	raw_close(&r);
}

static void test_oversized_header(void **state)
{
	struct raw r;
	long peak0, peak1;
	msgpack_sbuffer sb;
	msgpack_packer pk;
	static const uint8_t bin4g[5] = { 0xc6, 0xff, 0xff, 0xff, 0xff };

	(void)state;
	peak0 = daemon_vm_peak_kib(&D);

	/* a tensor.put whose data claims 4 GiB */
	raw_open(&r);
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	req_begin(&pk, 9, "tensor.put", 4);
	pstr(&pk, "name");
	pstr(&pk, "huge/x");
	pstr(&pk, "dtype");
	pstr(&pk, "u8");
	pstr(&pk, "shape");
	msgpack_pack_array(&pk, 1);
	msgpack_pack_uint64(&pk, 0xffffffffu);
	pstr(&pk, "data");
	msgpack_sbuffer_write(&sb, (const char *)bin4g, 5);
	raw_send(&r, sb.data, sb.size);
	msgpack_sbuffer_destroy(&sb);
	expect_broken_stream(&r, TENSORD_RESOURCE_EXHAUSTED, TENSORD_PROTOCOL, "bin32 of 4 GiB");
	raw_close(&r);

	/* a bare bin32 of 4 GiB, a 4-billion-element array and map */
	raw_open(&r);
	raw_send(&r, bin4g, 5);
	expect_broken_stream(&r, TENSORD_RESOURCE_EXHAUSTED, TENSORD_PROTOCOL, "bare bin32");
	raw_close(&r);
	raw_open(&r);
	raw_send(&r, "\xdd\xff\xff\xff\xff", 5);
	expect_broken_stream(&r, TENSORD_RESOURCE_EXHAUSTED, TENSORD_PROTOCOL, "array32");
	raw_close(&r);
	raw_open(&r);
	raw_send(&r, "\x94\x00\x01\xa4ping\xdf\xff\xff\xff\xff", 13);
	expect_broken_stream(&r, TENSORD_RESOURCE_EXHAUSTED, TENSORD_PROTOCOL, "map32 params");
	raw_close(&r);

	/* more objects than allowed, in few bytes each: [0, 1, "ping", [ 1.1M nils ]] */
	{
		size_t n = 1100000;
		uint8_t *b = malloc(n + 16);
		size_t len = 0;

		assert_non_null(b);
		memcpy(b, "\x94\x00\x01\xa4ping\xdd", 9);
		len = 9;
		b[len++] = (uint8_t)(n >> 24);
		b[len++] = (uint8_t)(n >> 16);
		b[len++] = (uint8_t)(n >> 8);
		b[len++] = (uint8_t)n;
		memset(b + len, 0xc0, n);
		len += n;
		raw_open(&r);
		/* the daemon may close before it has read everything */
		for (size_t off = 0; off < len;) {
			ssize_t w = send(r.fd, b + off, len - off, MSG_NOSIGNAL);

			if (w <= 0)
				break;
			off += (size_t)w;
		}
		expect_broken_stream(&r, TENSORD_RESOURCE_EXHAUSTED, TENSORD_PROTOCOL,
				     "1.1M objects");
		raw_close(&r);
		free(b);
	}

	peak1 = daemon_vm_peak_kib(&D);
	assert_true(peak0 > 0 && peak1 > 0);
	if (peak1 - peak0 > 2L * 1024 * 1024)
		fail_msg("tensord's VmPeak grew from %ld to %ld KiB on headers alone", peak0, peak1);
	ping_ok();
}

static void test_not_a_request(void **state)
{
	struct raw r;
	struct rmsg m;
	msgpack_sbuffer sb;
	msgpack_packer pk;
	const msgpack_object *res;

	(void)state;
	raw_open(&r);
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	/* [0, 7, 42, []] */
	msgpack_pack_array(&pk, 4);
	msgpack_pack_uint8(&pk, 0);
	msgpack_pack_uint8(&pk, 7);
	msgpack_pack_uint8(&pk, 42);
	msgpack_pack_array(&pk, 0);
	/* [0, 8, "ping", {}] */
	msgpack_pack_array(&pk, 4);
	msgpack_pack_uint8(&pk, 0);
	msgpack_pack_uint8(&pk, 8);
	pstr(&pk, "ping");
	msgpack_pack_map(&pk, 0);
	/* [0, 9, "ping", [1, 2]] */
	msgpack_pack_array(&pk, 4);
	msgpack_pack_uint8(&pk, 0);
	msgpack_pack_uint8(&pk, 9);
	pstr(&pk, "ping");
	msgpack_pack_array(&pk, 2);
	msgpack_pack_uint8(&pk, 1);
	msgpack_pack_uint8(&pk, 2);
	/* [0, 10, "ping"] */
	msgpack_pack_array(&pk, 3);
	msgpack_pack_uint8(&pk, 0);
	msgpack_pack_uint8(&pk, 10);
	pstr(&pk, "ping");
	/* [0, 11, "ping", []]: fine */
	req_begin(&pk, 11, "ping", -1);
	raw_send(&r, sb.data, sb.size);
	msgpack_sbuffer_destroy(&sb);

	for (uint32_t id = 7; id <= 10; id++) {
		check_error_object(expect_response(&r, &m, id, NULL), TENSORD_PROTOCOL);
		assert_true(tdp_obj_str_eq(tdp_map_find(&m.o->via.array.ptr[2], "name"), "PROTOCOL"));
		rmsg_free(&m);
	}
	assert_int_equal(expect_response(&r, &m, 11, &res)->type, MSGPACK_OBJECT_NIL);
	assert_non_null(tdp_map_find(res, "pong"));
	rmsg_free(&m);
	raw_close(&r);
}

static void test_depth_limit(void **state)
{
	struct raw r;
	struct rmsg m;
	msgpack_sbuffer sb;
	msgpack_packer pk;

	(void)state;
	/* nesting of exactly 32 is a message like any other: [0, 13, "ping", [{"x": 29 arrays}]] */
	raw_open(&r);
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	req_begin(&pk, 13, "ping", 1);
	pstr(&pk, "x");
	for (int i = 0; i < 28; i++)
		msgpack_pack_array(&pk, 1);
	msgpack_pack_array(&pk, 0);
	req_begin(&pk, 14, "ping", -1);
	raw_send(&r, sb.data, sb.size);
	msgpack_sbuffer_destroy(&sb);
	check_error_object(expect_response(&r, &m, 13, NULL), TENSORD_INVALID_ARGUMENT);
	rmsg_free(&m);
	assert_int_equal(expect_response(&r, &m, 14, NULL)->type, MSGPACK_OBJECT_NIL);
	rmsg_free(&m);

	/* one level more breaks the stream */
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	req_begin(&pk, 15, "ping", 1);
	pstr(&pk, "x");
	for (int i = 0; i < 29; i++)
		msgpack_pack_array(&pk, 1);
	msgpack_pack_array(&pk, 0);
	raw_send(&r, sb.data, sb.size);
	msgpack_sbuffer_destroy(&sb);
	expect_broken_stream(&r, TENSORD_PROTOCOL, TENSORD_PROTOCOL, "nesting 33");
	raw_close(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_garbage_stream),
		cmocka_unit_test(test_response_from_client),
		cmocka_unit_test(test_notification_from_client),
		cmocka_unit_test(test_bin_method),
		cmocka_unit_test(test_oversized_header),
		cmocka_unit_test(test_not_a_request),
		cmocka_unit_test(test_depth_limit),
		cmocka_unit_test(test_survivors),
	};

	if (integration_start() < 0)
		return 1;
	return integration_finish(cmocka_run_group_tests(tests, NULL, NULL));
}

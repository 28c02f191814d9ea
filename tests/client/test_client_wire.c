/* libtensord against a scripted fake daemon (fake_daemon.h): what the
 * library writes, and how it copes with every kind of bad reply (wrong msgid,
 * protocol.error, EOF, garbage, ill-typed metadata). Connecting and timeouts
 * are test_client_connect.c, notifications, progress and the non-blocking
 * calls of an event loop test_client_events.c. No GPU and no real daemon
 * needed. */
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

#include "fake_daemon.h"
#include "pack.h"
#include "rpc.h"
#include "tensord.h"

static void script_ping_then_remote_error(struct peer *p)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;

	assert_true(read_request(p));
	assert_true(p->msg.method_len == 4 && memcmp(p->msg.method, "ping", 4) == 0);
	assert_null(p->msg.params);
	reply_head(p, &sb, &pk, p->msg.msgid);
	msgpack_pack_map(&pk, 3);
	tdp_pack_cstr(&pk, "pong");
	msgpack_pack_true(&pk);
	tdp_pack_cstr(&pk, "version");
	tdp_pack_cstr(&pk, "0.1.0-test");
	tdp_pack_cstr(&pk, "protocol");
	msgpack_pack_uint8(&pk, 1);
	send_sbuf(p, &sb, 1); /* one byte at a time */

	assert_true(read_request(p));
	send_error(p, p->msg.msgid, 5, "no tensor named 'x'");

	/* A log notification before the reply is skipped. */
	assert_true(read_request(p));
	notify_head(&sb, &pk, "log");
	msgpack_pack_array(&pk, 0);
	send_sbuf(p, &sb, 1 << 20);
	reply_head(p, &sb, &pk, p->msg.msgid);
	pack_info(&pk, "x", 1);
	tdp_pack_cstr(&pk, "device");
	msgpack_pack_uint8(&pk, 0);
	send_sbuf(p, &sb, 1 << 20);
}

static void test_ping_remote_error_and_recovery(void **state)
{
	struct tensord_tensor_info info;
	struct server srv;
	struct tensord *td = start(&srv, script_ping_then_remote_error);
	char version[6];

	(void)state;
	memset(version, 'z', sizeof(version));
	assert_int_equal(tensord_ping(td, version, sizeof(version)), 0);
	assert_string_equal(version, "0.1.0"); /* truncated */
	assert_int_equal(tensord_stat(td, "x", &info), -TENSORD_EREMOTE);
	assert_int_equal(tensord_error_code(td), TENSORD_NOT_FOUND);
	assert_string_equal(tensord_last_error(td), "NOT_FOUND: no tensor named 'x'");
	assert_int_equal(tensord_stat(td, "x", &info), 0);
	assert_string_equal(info.name, "x");
	assert_true(info.dtype == TENSORD_F32 && info.rank == 2 && info.shape[1] == 3);
	assert_true(info.bytes == 24 && info.owner == 1000 && info.version == 7);
	assert_true(info.created == 1795000000.25 && info.modified == 1795000001.5);
	stop(&srv, td);
}

static void script_wrong_msgid(struct peer *p)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;

	assert_true(read_request(p));
	reply_head(p, &sb, &pk, p->msg.msgid + 1);
	msgpack_pack_map(&pk, 0);
	send_sbuf(p, &sb, 1 << 20);
	read_request(p); /* nothing more may come: the client gave up */
}

static void test_wrong_msgid_is_sticky(void **state)
{
	struct server srv;
	struct tensord *td = start(&srv, script_wrong_msgid);
	char first[256];

	(void)state;
	assert_int_equal(tensord_ping(td, NULL, 0), -EPROTO);
	snprintf(first, sizeof(first), "%s", tensord_last_error(td));
	assert_non_null(strstr(first, "reply to request"));
	assert_int_equal(tensord_ping(td, NULL, 0), -EPROTO);
	assert_int_equal(tensord_delete(td, "a"), -EPROTO);
	assert_int_equal(tensord_delete(td, "bad name"), -EPROTO);
	assert_int_equal(tensord_get(td, "a", NULL, NULL, NULL), -EPROTO);
	assert_string_equal(tensord_last_error(td), first);
	stop(&srv, td);
}

static void script_protocol_error(struct peer *p)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;

	assert_true(read_request(p));
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	tdp_write_error_notification(&pk, "protocol.error", 103, "bad bytes");
	send_sbuf(p, &sb, 1 << 20);
}

static void test_protocol_error_notification(void **state)
{
	struct server srv;
	struct tensord *td = start(&srv, script_protocol_error);

	(void)state;
	assert_int_equal(tensord_ping(td, NULL, 0), -EPROTO);
	assert_non_null(strstr(tensord_last_error(td), "PROTOCOL: bad bytes"));
	assert_int_equal(tensord_error_code(td), 0);
	assert_int_equal(tensord_ping(td, NULL, 0), -EPROTO);
	stop(&srv, td);
}

static void script_eof_mid_reply(struct peer *p)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;

	assert_true(read_request(p));
	reply_head(p, &sb, &pk, p->msg.msgid);
	msgpack_pack_map(&pk, 1);
	tdp_pack_cstr(&pk, "version");
	write_bytes(p, sb.data, sb.size, 1 << 20); /* the map's value never comes */
	msgpack_sbuffer_destroy(&sb);
}

static void test_eof(void **state)
{
	struct server srv;
	struct tensord *td = start(&srv, script_eof_mid_reply);

	(void)state;
	assert_int_equal(tensord_ping(td, NULL, 0), -ECONNRESET);
	assert_int_equal(tensord_ping(td, NULL, 0), -ECONNRESET);
	stop(&srv, td);
}

static void script_garbage(struct peer *p)
{
	assert_true(read_request(p));
	write_bytes(p, "\xc1\xc1", 2, 2);
	read_request(p);
}

static void test_garbage_reply(void **state)
{
	struct server srv;
	struct tensord *td = start(&srv, script_garbage);

	(void)state;
	assert_int_equal(tensord_ping(td, NULL, 0), -EPROTO);
	assert_int_equal(tensord_ping(td, NULL, 0), -EPROTO);
	stop(&srv, td);
}

static const char *const meta_keys[] = { "name", "dtype", "shape", "bytes", "owner",
					 "created", "modified", "version", "device" };

/* Good metadata except for key `bad`, whose value is an array of a string. */
static void pack_info_bad(msgpack_packer *pk, const char *bad)
{
	msgpack_pack_map(pk, 9);
	for (size_t k = 0; k < 9; k++) {
		const char *key = meta_keys[k];

		tdp_pack_cstr(pk, key);
		if (strcmp(key, bad) == 0) {
			msgpack_pack_array(pk, 1);
			tdp_pack_cstr(pk, "x");
		} else if (strcmp(key, "name") == 0) {
			tdp_pack_cstr(pk, "x");
		} else if (strcmp(key, "dtype") == 0) {
			tdp_pack_cstr(pk, "f32");
		} else if (strcmp(key, "shape") == 0) {
			msgpack_pack_array(pk, 1);
			msgpack_pack_uint8(pk, 1);
		} else {
			msgpack_pack_uint8(pk, 4);
		}
	}
}

/* Replies with every field of the wrong type in turn; the handle stays usable. */
static void script_bad_metadata(struct peer *p)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;

	for (size_t k = 0; k < 9; k++) {
		assert_true(read_request(p));
		reply_head(p, &sb, &pk, p->msg.msgid);
		pack_info_bad(&pk, meta_keys[k]);
		send_sbuf(p, &sb, 1 << 20);
	}
	/* And the same map with nothing wrong. */
	assert_true(read_request(p));
	reply_head(p, &sb, &pk, p->msg.msgid);
	pack_info_bad(&pk, "");
	send_sbuf(p, &sb, 1 << 20);
	/* Good name/dtype/shape, then a huge owner. */
	assert_true(read_request(p));
	reply_head(p, &sb, &pk, p->msg.msgid);
	pack_info(&pk, "x", 1);
	tdp_pack_cstr(&pk, "device");
	msgpack_pack_uint64(&pk, (uint64_t)1 << 40);
	send_sbuf(p, &sb, 1 << 20);
	/* Rank 9. */
	assert_true(read_request(p));
	reply_head(p, &sb, &pk, p->msg.msgid);
	msgpack_pack_map(&pk, 3);
	tdp_pack_cstr(&pk, "name");
	tdp_pack_cstr(&pk, "x");
	tdp_pack_cstr(&pk, "dtype");
	tdp_pack_cstr(&pk, "f32");
	tdp_pack_cstr(&pk, "shape");
	msgpack_pack_array(&pk, 9);
	for (int i = 0; i < 9; i++)
		msgpack_pack_uint8(&pk, 1);
	send_sbuf(p, &sb, 1 << 20);
	/* A get whose data does not match the shape. */
	assert_true(read_request(p));
	reply_head(p, &sb, &pk, p->msg.msgid);
	pack_info(&pk, "x", 1);
	tdp_pack_cstr(&pk, "data");
	msgpack_pack_bin_with_body(&pk, "abc", 3);
	send_sbuf(p, &sb, 1 << 20);
	/* A list holding a non-map. */
	assert_true(read_request(p));
	reply_head(p, &sb, &pk, p->msg.msgid);
	msgpack_pack_map(&pk, 1);
	tdp_pack_cstr(&pk, "tensors");
	msgpack_pack_array(&pk, 1);
	msgpack_pack_nil(&pk);
	send_sbuf(p, &sb, 1 << 20);
	/* A result that is not a map at all. */
	assert_true(read_request(p));
	reply_head(p, &sb, &pk, p->msg.msgid);
	msgpack_pack_uint8(&pk, 1);
	send_sbuf(p, &sb, 1 << 20);
}

static void test_bad_metadata(void **state)
{
	struct tensord_tensor_info info, *list = (void *)1;
	struct server srv;
	struct tensord *td = start(&srv, script_bad_metadata);
	void *data = (void *)1;
	size_t len = 99, n = 99;

	(void)state;
	memset(&info, 0xab, sizeof(info));
	for (int k = 0; k < 9; k++)
		if (tensord_stat(td, "x", &info) != -EPROTO)
			fail_msg("bad %s accepted", meta_keys[k]);
	assert_int_equal(info.rank, 0xabababab); /* never written on failure */
	assert_int_equal(tensord_stat(td, "x", &info), 0);
	assert_true(info.rank == 1 && info.bytes == 4 && info.device == 4);
	memset(&info, 0xab, sizeof(info));
	assert_int_equal(tensord_stat(td, "x", &info), -EPROTO);
	assert_int_equal(tensord_stat(td, "x", &info), -EPROTO);
	assert_int_equal(info.rank, 0xabababab); /* never written on failure */
	assert_int_equal(tensord_get(td, "x", &info, &data, &len), -EPROTO);
	assert_ptr_equal(data, (void *)1);
	assert_int_equal(len, 99);
	assert_int_equal(tensord_list(td, NULL, &list, &n), -EPROTO);
	assert_ptr_equal(list, (void *)1);
	assert_int_equal(n, 99);
	assert_int_equal(tensord_ping(td, NULL, 0), -EPROTO);
	stop(&srv, td);
}

/* What tensord_put and tensord_list put on the wire. */
static void script_check_put(struct peer *p)
{
	const msgpack_object *o;
	msgpack_sbuffer sb;
	msgpack_packer pk;
	uint64_t v;

	assert_true(read_request(p));
	assert_true(p->msg.method_len == 10 && memcmp(p->msg.method, "tensor.put", 10) == 0);
	assert_int_equal(p->msg.params->via.map.size, 4);
	assert_true(tdp_obj_str_eq(tdp_map_find(p->msg.params, "name"), "w/1"));
	assert_true(tdp_obj_str_eq(tdp_map_find(p->msg.params, "dtype"), "u8"));
	o = tdp_map_find(p->msg.params, "shape");
	assert_true(o && o->type == MSGPACK_OBJECT_ARRAY && o->via.array.size == 2);
	assert_int_equal(tdp_obj_uint(&o->via.array.ptr[1], &v), 0);
	assert_int_equal(v, 50000);
	o = tdp_map_find(p->msg.params, "data");
	assert_true(o && o->type == MSGPACK_OBJECT_BIN && o->via.bin.size == 100000);
	for (uint32_t i = 0; i < o->via.bin.size; i++)
		if ((uint8_t)o->via.bin.ptr[i] != (uint8_t)(i * 7))
			fail_msg("data byte %u differs", i);
	reply_head(p, &sb, &pk, p->msg.msgid);
	pack_info(&pk, "w/1", 0);
	send_sbuf(p, &sb, 1 << 20);

	assert_true(read_request(p));
	assert_true(tdp_obj_str_eq(tdp_map_find(p->msg.params, "prefix"), "w/"));
	reply_head(p, &sb, &pk, p->msg.msgid);
	msgpack_pack_map(&pk, 1);
	tdp_pack_cstr(&pk, "tensors");
	msgpack_pack_array(&pk, 2);
	pack_info(&pk, "w/1", 0);
	pack_info(&pk, "w/2", 0);
	send_sbuf(p, &sb, 1 << 20);

	assert_true(read_request(p));
	assert_null(p->msg.params);
	reply_head(p, &sb, &pk, p->msg.msgid);
	msgpack_pack_map(&pk, 1);
	tdp_pack_cstr(&pk, "tensors");
	msgpack_pack_array(&pk, 0);
	send_sbuf(p, &sb, 1 << 20);

	assert_true(read_request(p));
	assert_true(p->msg.method_len == 6 && memcmp(p->msg.method, "custom", 6) == 0);
	assert_true(tdp_obj_str_eq(tdp_map_find(p->msg.params, "k"), "v"));
	reply_head(p, &sb, &pk, p->msg.msgid);
	msgpack_pack_array(&pk, 1);
	msgpack_pack_uint8(&pk, 42);
	send_sbuf(p, &sb, 1 << 20);

	/* A 2 MiB get (the path that hands over the receive buffer), then a ping. */
	assert_true(read_request(p));
	reply_head(p, &sb, &pk, p->msg.msgid);
	msgpack_pack_map(&pk, 4);
	tdp_pack_cstr(&pk, "name");
	tdp_pack_cstr(&pk, "big");
	tdp_pack_cstr(&pk, "dtype");
	tdp_pack_cstr(&pk, "u8");
	tdp_pack_cstr(&pk, "shape");
	msgpack_pack_array(&pk, 1);
	msgpack_pack_uint32(&pk, 2 << 20);
	tdp_pack_cstr(&pk, "data");
	msgpack_pack_bin(&pk, 2 << 20);
	for (uint32_t i = 0; i < (2u << 20); i++) {
		uint8_t b = (uint8_t)(i * 13 + 1);

		msgpack_pack_bin_body(&pk, &b, 1);
	}
	send_sbuf(p, &sb, 100000);
	assert_true(read_request(p));
	reply_head(p, &sb, &pk, p->msg.msgid);
	msgpack_pack_map(&pk, 0);
	send_sbuf(p, &sb, 1 << 20);
}

static void test_requests_on_the_wire(void **state)
{
	struct tensord_tensor_info info, *list = NULL;
	struct server srv;
	struct tensord *td = start(&srv, script_check_put);
	uint64_t shape[2] = { 2, 50000 };
	uint8_t *data = malloc(100000);
	const uint8_t params[] = { 0x81, 0xa1, 'k', 0xa1, 'v' };
	void *res = NULL;
	size_t n = 0, len = 0;

	(void)state;
	assert_non_null(data);
	for (uint32_t i = 0; i < 100000; i++)
		data[i] = (uint8_t)(i * 7);
	/* Rejected before anything is sent. */
	assert_int_equal(tensord_put(td, "bad name", TENSORD_U8, 2, shape, data, 100000, NULL),
			 -EINVAL);
	assert_int_equal(tensord_put(td, "w/1", TENSORD_DTYPE_COUNT, 2, shape, data, 100000, NULL),
			 -EINVAL);
	assert_int_equal(tensord_put(td, "w/1", TENSORD_U8, 9, shape, data, 100000, NULL), -EINVAL);
	assert_int_equal(tensord_call_raw(td, "custom", "\x91\x01", 2, &res, &len), -EINVAL);
	assert_int_equal(tensord_call_raw(td, "custom", params, 4, &res, &len), -EINVAL);

	assert_int_equal(tensord_put(td, "w/1", TENSORD_U8, 2, shape, data, 100000, &info), 0);
	assert_string_equal(info.name, "w/1");
	assert_int_equal(tensord_list(td, "w/", &list, &n), 0);
	assert_int_equal(n, 2);
	assert_string_equal(list[1].name, "w/2");
	free(list);
	list = (void *)1;
	assert_int_equal(tensord_list(td, "", &list, &n), 0);
	assert_int_equal(n, 0);
	assert_null(list);
	assert_int_equal(tensord_call_raw(td, "custom", params, sizeof(params), &res, &len), 0);
	assert_int_equal(len, 2);
	assert_memory_equal(res, "\x91\x2a", 2);
	free(res);
	res = NULL;
	assert_int_equal(tensord_get(td, "big", &info, &res, &len), 0);
	assert_int_equal(len, 2 << 20);
	assert_true(info.dtype == TENSORD_U8 && info.rank == 1 && info.bytes == len);
	for (uint32_t i = 0; i < len; i++)
		if (((uint8_t *)res)[i] != (uint8_t)(i * 13 + 1))
			fail_msg("byte %u of the get differs", i);
	free(res);
	assert_int_equal(tensord_ping(td, NULL, 0), 0);
	free(data);
	stop(&srv, td);
}

/* The request's `device` param: -1 when absent (and the key count then one less). */
static int64_t device_param(struct peer *p, uint32_t keys_without)
{
	const msgpack_object *o = tdp_map_find(p->msg.params, "device");
	int64_t v;

	if (!o) {
		assert_int_equal(p->msg.params->via.map.size, keys_without);
		return -1;
	}
	assert_int_equal(p->msg.params->via.map.size, keys_without + 1);
	assert_int_equal(tdp_obj_int(o, &v), 0);
	return v;
}

/* put_on with and without a device, copy twice, op_run_on: the params as
 * docs/protocol.md says; each answered with metadata on device 3. */
static void script_devices(struct peer *p)
{
	static const int64_t want[] = { 2, -1, 0, -1, 1, -1 };
	msgpack_sbuffer sb;
	msgpack_packer pk;

	for (int i = 0; i < 6; i++) {
		const msgpack_object *o;

		assert_true(read_request(p));
		if (i < 2) {
			assert_true(p->msg.method_len == 10 && memcmp(p->msg.method, "tensor.put", 10) == 0);
			assert_int_equal(device_param(p, 4), want[i]);
			o = tdp_map_find(p->msg.params, "data");
			assert_true(o && o->type == MSGPACK_OBJECT_BIN && o->via.bin.size == 24);
		} else if (i < 4) {
			assert_true(p->msg.method_len == 11 && memcmp(p->msg.method, "tensor.copy", 11) == 0);
			assert_int_equal(device_param(p, 2), want[i]);
			assert_true(tdp_obj_str_eq(tdp_map_find(p->msg.params, "src"), "w/1"));
			assert_true(tdp_obj_str_eq(tdp_map_find(p->msg.params, "dst"), i == 2 ? "w/2" : "w/1"));
		} else {
			assert_true(p->msg.method_len == 6 && memcmp(p->msg.method, "op.run", 6) == 0);
			assert_int_equal(device_param(p, i == 4 ? 4 : 3), want[i]);
			assert_true(tdp_obj_str_eq(tdp_map_find(p->msg.params, "out"), "w/3"));
			/* attrs come last, after device, as sent: still a map */
			o = tdp_map_find(p->msg.params, "attrs");
			assert_true(i == 5 || (o && o->type == MSGPACK_OBJECT_MAP && o->via.map.size == 1));
		}
		reply_head(p, &sb, &pk, p->msg.msgid);
		pack_info(&pk, "w/1", 1);
		tdp_pack_cstr(&pk, "device");
		msgpack_pack_uint8(&pk, 3);
		send_sbuf(p, &sb, 1 << 20);
	}
	/* A copy answered with metadata that is no metadata. */
	assert_true(read_request(p));
	reply_head(p, &sb, &pk, p->msg.msgid);
	msgpack_pack_map(&pk, 1);
	tdp_pack_cstr(&pk, "device");
	msgpack_pack_int8(&pk, -1);
	send_sbuf(p, &sb, 1 << 20);
}

static void test_devices(void **state)
{
	struct tensord_tensor_info info;
	struct server srv;
	struct tensord *td = start(&srv, script_devices);
	const char *inputs[] = { "w/1", "w/2" };
	const uint8_t attrs[] = { 0x81, 0xa1, 'k', 0x01 };
	uint64_t shape[2] = { 2, 3 };
	float data[6] = { 1, 2, 3, 4, 5, 6 };
	void *out = NULL;
	size_t len = 0;

	(void)state;
	/* Refused before anything is sent: the script sees only good requests. */
	assert_int_equal(tensord_put_on(NULL, "w/1", TENSORD_F32, 2, shape, data, 24, 0, NULL), -EINVAL);
	assert_int_equal(tensord_put_on(td, "w/1", TENSORD_F32, 2, shape, data, 24, -2, NULL), -EINVAL);
	assert_non_null(strstr(tensord_last_error(td), "device"));
	assert_int_equal(tensord_put_on(td, "w/1", TENSORD_F32, 2, shape, data, 24, INT32_MIN, NULL),
			 -EINVAL);
	assert_int_equal(tensord_copy(NULL, "w/1", "w/2", 0, NULL), -EINVAL);
	assert_int_equal(tensord_copy(td, "w/1", "w/2", -7, NULL), -EINVAL);
	assert_int_equal(tensord_copy(td, NULL, "w/2", 0, NULL), -EINVAL);
	assert_int_equal(tensord_copy(td, "w/1", NULL, 0, NULL), -EINVAL);
	assert_int_equal(tensord_copy(td, "w/1", "bad name", 0, NULL), -EINVAL);
	assert_int_equal(tensord_copy(td, "", "w/2", 0, NULL), -EINVAL);
	assert_int_equal(tensord_op_run_on(td, "add", 2, inputs, NULL, 0, "w/3", -2, NULL, NULL, NULL),
			 -EINVAL);

	assert_int_equal(tensord_put_on(td, "w/1", TENSORD_F32, 2, shape, data, 24, 2, &info), 0);
	assert_int_equal(info.device, 3);
	assert_int_equal(tensord_put_on(td, "w/1", TENSORD_F32, 2, shape, data, 24, TENSORD_DEVICE_ANY,
					NULL), 0);
	memset(&info, 0, sizeof(info));
	assert_int_equal(tensord_copy(td, "w/1", "w/2", 0, &info), 0);
	assert_true(info.device == 3 && strcmp(info.name, "w/1") == 0 && info.rank == 2);
	assert_int_equal(tensord_copy(td, "w/1", "w/1", TENSORD_DEVICE_ANY, NULL), 0);
	assert_int_equal(tensord_op_run_on(td, "add", 2, inputs, attrs, sizeof(attrs), "w/3", 1, &info,
					   &out, &len), 0);
	assert_true(out == NULL && len == 0 && info.device == 3);
	assert_int_equal(tensord_op_run(td, "add", 2, inputs, NULL, 0, "w/3", NULL, NULL, NULL), 0);
	/* A reply that is no metadata: -EPROTO, *ret_info untouched, the handle still usable. */
	info.device = 77;
	assert_int_equal(tensord_copy(td, "w/1", "w/2", 1, &info), -EPROTO);
	assert_int_equal(info.device, 77);
	stop(&srv, td);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ping_remote_error_and_recovery),
		cmocka_unit_test(test_wrong_msgid_is_sticky),
		cmocka_unit_test(test_protocol_error_notification),
		cmocka_unit_test(test_eof),
		cmocka_unit_test(test_garbage_reply),
		cmocka_unit_test(test_bad_metadata),
		cmocka_unit_test(test_requests_on_the_wire),
		cmocka_unit_test(test_devices),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

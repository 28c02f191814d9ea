/* Integration tests (integration.h): tensor.put/get/stat/list/delete through libtensord: every dtype, scalars,
 * empty tensors, overwrites, prefixes, if_absent, a large tensor, info, and
 * the errors tensor.put answers to bad input. */
#include "integration.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "pack.h"
#include "rpc.h"

static void test_ping(void **state)
{
	struct tensord *td;
	char ver[64] = "";
	struct raw r;
	struct rmsg m;
	const msgpack_object *res, *v;
	msgpack_sbuffer sb;
	msgpack_packer pk;

	(void)state;
	td = td_open();
	check_ok(td, tensord_ping(td, ver, sizeof(ver)), "ping");
	assert_string_equal(ver, TENSORD_VERSION);
	tensord_free(td);

	/* raw: [] and [{}] are both accepted; the result is exactly as documented */
	raw_open(&r);
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	req_begin(&pk, 1, "ping", -1);
	req_begin(&pk, 2, "ping", 0);
	req_begin(&pk, 3, "ping", 1);
	pstr(&pk, "bogus");
	msgpack_pack_uint8(&pk, 1);
	raw_send(&r, sb.data, sb.size);
	msgpack_sbuffer_destroy(&sb);
	for (uint32_t id = 1; id <= 2; id++) {
		assert_int_equal(expect_response(&r, &m, id, &res)->type, MSGPACK_OBJECT_NIL);
		assert_int_equal(res->type, MSGPACK_OBJECT_MAP);
		v = tdp_map_find(res, "pong");
		assert_non_null(v);
		assert_int_equal(v->type, MSGPACK_OBJECT_BOOLEAN);
		assert_true(v->via.boolean);
		assert_true(tdp_obj_str_eq(tdp_map_find(res, "version"), TENSORD_VERSION));
		v = tdp_map_find(res, "protocol");
		assert_non_null(v);
		assert_int_equal(v->type, MSGPACK_OBJECT_POSITIVE_INTEGER);
		assert_int_equal(v->via.u64, 1);
		rmsg_free(&m);
	}
	/* unknown keys are refused */
	check_error_object(expect_response(&r, &m, 3, NULL), TENSORD_INVALID_ARGUMENT);
	rmsg_free(&m);
	raw_close(&r);
}

struct info_summary {
	uint64_t count, bytes, memory_used, connections;
	double uptime;
};

static void get_info(struct tensord *td, struct info_summary *ret, int full)
{
	void *buf = NULL;
	size_t len = 0;
	msgpack_unpacked u;
	const msgpack_object *o, *devs, *t, *lim;
	int active = 0;

	check_ok(td, tensord_info_raw(td, &buf, &len), "info");
	msgpack_unpacked_init(&u);
	assert_int_equal(tdp_unpack(&u, buf, len), 0);
	o = &u.data;
	assert_int_equal(o->type, MSGPACK_OBJECT_MAP);

	devs = map_get(o, "devices", MSGPACK_OBJECT_ARRAY);
	t = map_get(o, "tensors", MSGPACK_OBJECT_MAP);
	lim = map_get(o, "limits", MSGPACK_OBJECT_MAP);
	assert_true(devs->via.array.size >= 1);
	memset(ret, 0, sizeof(*ret));
	ret->count = map_uint(t, "count");
	ret->bytes = map_uint(t, "bytes");
	ret->connections = map_uint(o, "connections");
	ret->uptime = map_get(o, "uptime", MSGPACK_OBJECT_FLOAT64)->via.f64;
	for (uint32_t i = 0; i < devs->via.array.size; i++) {
		const msgpack_object *d = &devs->via.array.ptr[i], *a, *ty;

		assert_int_equal(d->type, MSGPACK_OBJECT_MAP);
		a = map_get(d, "active", MSGPACK_OBJECT_BOOLEAN);
		if (a->via.boolean) {
			active++;
			ret->memory_used = map_uint(d, "memory_used");
		}
		if (!full)
			continue;
		assert_int_equal(map_uint(d, "index"), i);
		map_get(d, "name", MSGPACK_OBJECT_STR);
		ty = map_get(d, "type", MSGPACK_OBJECT_STR);
		assert_true(tdp_obj_str_eq(ty, "discrete") || tdp_obj_str_eq(ty, "integrated") ||
			    tdp_obj_str_eq(ty, "virtual") || tdp_obj_str_eq(ty, "cpu") ||
			    tdp_obj_str_eq(ty, "other"));
		map_get(d, "driver", MSGPACK_OBJECT_STR);
		map_uint(d, "vendor_id");
		map_uint(d, "device_id");
		map_get(d, "api_version", MSGPACK_OBJECT_STR);
		assert_true(map_uint(d, "memory_total") > 0);
		assert_true(map_uint(d, "memory_reserved") >= map_uint(d, "memory_used"));
		assert_true(map_uint(d, "max_storage_buffer_range") > 0);
		assert_true(map_uint(d, "max_allocation_size") > 0);
	}
	assert_int_equal(active, 1);
	if (full) {
		assert_true(tdp_obj_str_eq(map_get(o, "version", MSGPACK_OBJECT_STR),
					   TENSORD_VERSION));
		assert_int_equal(map_uint(o, "protocol"), 1);
		assert_int_equal(map_uint(o, "pid"), (uint64_t)D.pid);
		assert_true(map_get(o, "uptime", MSGPACK_OBJECT_FLOAT64)->via.f64 >= 0);
		assert_true(map_uint(o, "connections") >= 1);
		assert_int_equal(map_uint(lim, "max_message_bytes"), (1ull << 30) + (1ull << 20));
		assert_true(map_uint(lim, "max_tensor_bytes") <= (1ull << 30));
		assert_true(map_uint(lim, "max_tensor_bytes") >= (256ull << 20));
		assert_int_equal(map_uint(lim, "max_depth"), 32);
		assert_int_equal(map_uint(lim, "max_objects"), 1048576);
		assert_int_equal(map_uint(lim, "max_name_len"), 255);
		assert_int_equal(map_uint(lim, "max_rank"), 8);
		assert_int_equal(map_uint(lim, "max_tensors"), 65536);
		assert_int_equal(map_uint(lim, "max_connections"), 1024);
	}
	msgpack_unpacked_destroy(&u);
	free(buf);
}

static void test_info(void **state)
{
	struct tensord *td = td_open();
	struct info_summary a, b, c;
	uint8_t data[24] = { 0 };
	const uint64_t shape[] = { 2, 3 };

	(void)state;
	get_info(td, &a, 1);
	check_ok(td, tensord_put(td, "info/x", TENSORD_F32, 2, shape, data, 24, NULL), "put");
	get_info(td, &b, 0);
	assert_int_equal(b.count, a.count + 1);
	assert_int_equal(b.bytes, a.bytes + 24);
	assert_int_equal(b.memory_used, a.memory_used + 24);
	check_ok(td, tensord_delete(td, "info/x"), "delete");
	get_info(td, &c, 0);
	assert_int_equal(c.count, a.count);
	assert_int_equal(c.bytes, a.bytes);
	assert_int_equal(c.memory_used, a.memory_used);
	assert_true(c.uptime > a.uptime);

	/* connections counts the clients connected now */
	{
		struct raw r[3];
		struct rmsg m;
		double deadline;

		for (int i = 0; i < 3; i++) {
			raw_open(&r[i]);
			/* answered, so surely accepted */
			raw_send(&r[i], "\x94\x00\x01\xa4ping\x90", 9);
			assert_int_equal(expect_response(&r[i], &m, 1, NULL)->type,
					 MSGPACK_OBJECT_NIL);
			rmsg_free(&m);
		}
		get_info(td, &b, 0);
		assert_int_equal(b.connections, c.connections + 3);
		for (int i = 0; i < 3; i++)
			raw_close(&r[i]);
		deadline = wall_now() + 5 * daemon_time_scale();
		do {
			sleep_ms(10);
			get_info(td, &b, 0);
		} while (b.connections != c.connections && wall_now() < deadline);
		assert_int_equal(b.connections, c.connections);
	}
	tensord_free(td);
}

static void test_put_get_all_dtypes(void **state)
{
	struct tensord *td = td_open();
	const uint64_t shape[] = { 3, 5 };
	struct tensord_tensor_info info, *list = NULL;
	size_t count = 0;
	char name[32];

	(void)state;
	for (int dt = 0; dt < TENSORD_DTYPE_COUNT; dt++) {
		size_t len = 15 * tensord_dtype_size((enum tensord_dtype)dt);
		uint8_t data[60];
		void *back = NULL;
		size_t back_len = 0;

		assert_true(len > 0 && len <= sizeof(data));
		fill_random(data, len, 1000 + (uint64_t)dt);
		snprintf(name, sizeof(name), "dt/%s", tensord_dtype_name((enum tensord_dtype)dt));
		check_ok(td, tensord_put(td, name, (enum tensord_dtype)dt, 2, shape, data, len,
					 &info), "put");
		check_info(&info, name, (enum tensord_dtype)dt, 2, shape, 1);
		assert_true(info.created == info.modified);

		memset(&info, 0, sizeof(info));
		check_ok(td, tensord_get(td, name, &info, &back, &back_len), "get");
		check_info(&info, name, (enum tensord_dtype)dt, 2, shape, 1);
		assert_int_equal(back_len, len);
		assert_memory_equal(back, data, len);
		free(back);

		memset(&info, 0, sizeof(info));
		check_ok(td, tensord_stat(td, name, &info), "stat");
		check_info(&info, name, (enum tensord_dtype)dt, 2, shape, 1);
	}

	check_ok(td, tensord_list(td, "dt/", &list, &count), "list");
	assert_int_equal(count, TENSORD_DTYPE_COUNT);
	/* sorted by name: bf16 f16 f32 i32 u8 */
	assert_string_equal(list[0].name, "dt/bf16");
	assert_string_equal(list[1].name, "dt/f16");
	assert_string_equal(list[2].name, "dt/f32");
	assert_string_equal(list[3].name, "dt/i32");
	assert_string_equal(list[4].name, "dt/u8");
	assert_int_equal(list[0].dtype, TENSORD_BF16);
	assert_int_equal(list[4].dtype, TENSORD_U8);
	for (size_t i = 0; i < count; i++)
		check_info(&list[i], list[i].name, list[i].dtype, 2, shape, 1);
	free(list);

	for (int dt = 0; dt < TENSORD_DTYPE_COUNT; dt++) {
		snprintf(name, sizeof(name), "dt/%s", tensord_dtype_name((enum tensord_dtype)dt));
		check_ok(td, tensord_delete(td, name), "delete");
		expect_remote(td, tensord_stat(td, name, &info), TENSORD_NOT_FOUND, "stat deleted");
		expect_remote(td, tensord_get(td, name, &info, &(void *){ NULL }, &(size_t){ 0 }),
			      TENSORD_NOT_FOUND, "get deleted");
		expect_remote(td, tensord_delete(td, name), TENSORD_NOT_FOUND, "delete twice");
	}
	check_ok(td, tensord_list(td, "dt/", &list, &count), "list");
	assert_int_equal(count, 0);
	free(list);
	tensord_free(td);
}

static void test_delete_result(void **state)
{
	struct raw r;
	struct rmsg m;
	msgpack_sbuffer sb;
	msgpack_packer pk;
	const msgpack_object *res, *v;
	struct tensord *td = td_open();
	uint8_t data[40];
	const uint64_t shape[] = { 10 };

	(void)state;
	fill_random(data, sizeof(data), 5);
	check_ok(td, tensord_put(td, "del/a", TENSORD_I32, 1, shape, data, 40, NULL), "put");
	tensord_free(td);

	raw_open(&r);
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	req_begin(&pk, 70, "tensor.delete", 1);
	pstr(&pk, "name");
	pstr(&pk, "del/a");
	req_begin(&pk, 71, "tensor.delete", 1);
	pstr(&pk, "name");
	pstr(&pk, "del/a");
	raw_send(&r, sb.data, sb.size);
	msgpack_sbuffer_destroy(&sb);
	assert_int_equal(expect_response(&r, &m, 70, &res)->type, MSGPACK_OBJECT_NIL);
	assert_true(tdp_obj_str_eq(map_get(res, "name", MSGPACK_OBJECT_STR), "del/a"));
	v = map_get(res, "deleted", MSGPACK_OBJECT_BOOLEAN);
	assert_true(v->via.boolean);
	assert_int_equal(map_uint(res, "bytes"), 40);
	rmsg_free(&m);
	check_error_object(expect_response(&r, &m, 71, NULL), TENSORD_NOT_FOUND);
	rmsg_free(&m);
	raw_close(&r);
}

static void test_scalar(void **state)
{
	struct tensord *td = td_open();
	struct tensord_tensor_info info;
	float x = 3.25f;
	void *back = NULL;
	size_t len = 0;

	(void)state;
	check_ok(td, tensord_put(td, "scalar", TENSORD_F32, 0, NULL, &x, 4, &info), "put");
	check_info(&info, "scalar", TENSORD_F32, 0, NULL, 1);
	check_ok(td, tensord_get(td, "scalar", &info, &back, &len), "get");
	check_info(&info, "scalar", TENSORD_F32, 0, NULL, 1);
	assert_int_equal(len, 4);
	assert_memory_equal(back, &x, 4);
	free(back);
	check_ok(td, tensord_delete(td, "scalar"), "delete");
	tensord_free(td);
}

static void test_zero_size(void **state)
{
	struct tensord *td = td_open();
	struct tensord_tensor_info info;
	const uint64_t s0[] = { 0 }, s302[] = { 3, 0, 2 };
	void *back = NULL;
	size_t len = 99;

	(void)state;
	check_ok(td, tensord_put(td, "zero/a", TENSORD_F32, 1, s0, NULL, 0, &info), "put [0]");
	check_info(&info, "zero/a", TENSORD_F32, 1, s0, 1);
	check_ok(td, tensord_get(td, "zero/a", &info, &back, &len), "get [0]");
	check_info(&info, "zero/a", TENSORD_F32, 1, s0, 1);
	assert_int_equal(len, 0);
	free(back);

	check_ok(td, tensord_put(td, "zero/b", TENSORD_I32, 3, s302, "", 0, &info), "put [3,0,2]");
	check_info(&info, "zero/b", TENSORD_I32, 3, s302, 1);
	len = 99;
	back = NULL;
	check_ok(td, tensord_get(td, "zero/b", &info, &back, &len), "get [3,0,2]");
	check_info(&info, "zero/b", TENSORD_I32, 3, s302, 1);
	assert_int_equal(len, 0);
	free(back);
	check_ok(td, tensord_stat(td, "zero/b", &info), "stat");
	assert_int_equal(info.bytes, 0);

	/* a zero-size tensor still needs its data key, with 0 bytes */
	{
		struct params p;

		pack_put(&p, "zero/c", "u8", s302, 3, "x", 1, NULL);
		expect_remote(td, call_params(td, "tensor.put", &p), TENSORD_INVALID_ARGUMENT,
			      "put [3,0,2] with 1 byte");
	}
	check_ok(td, tensord_delete(td, "zero/a"), "delete");
	check_ok(td, tensord_delete(td, "zero/b"), "delete");
	tensord_free(td);
}

static void test_overwrite(void **state)
{
	struct tensord *td = td_open();
	struct tensord_tensor_info i1, i2, i3;
	const uint64_t s1[] = { 4 }, s2[] = { 2, 2, 2 };
	uint8_t d1[16], d2[16];
	void *back = NULL;
	size_t len = 0;

	(void)state;
	fill_random(d1, 16, 11);
	fill_random(d2, 16, 12);
	check_ok(td, tensord_put(td, "ow/x", TENSORD_F32, 1, s1, d1, 16, &i1), "put 1");
	check_info(&i1, "ow/x", TENSORD_F32, 1, s1, 1);
	sleep_ms(50);
	check_ok(td, tensord_put(td, "ow/x", TENSORD_F16, 3, s2, d2, 16, &i2), "put 2");
	check_info(&i2, "ow/x", TENSORD_F16, 3, s2, 2);
	assert_true(i2.created == i1.created);
	assert_true(i2.modified > i1.modified);
	check_ok(td, tensord_get(td, "ow/x", &i3, &back, &len), "get");
	check_info(&i3, "ow/x", TENSORD_F16, 3, s2, 2);
	assert_true(i3.created == i1.created);
	assert_int_equal(len, 16);
	assert_memory_equal(back, d2, 16);
	free(back);
	check_ok(td, tensord_put(td, "ow/x", TENSORD_U8, 1, (const uint64_t[]){ 16 }, d1, 16, &i3),
		 "put 3");
	assert_int_equal(i3.version, 3);
	assert_true(i3.created == i1.created);
	check_ok(td, tensord_delete(td, "ow/x"), "delete");

	/* a new tensor under a deleted name starts again at version 1 */
	check_ok(td, tensord_put(td, "ow/x", TENSORD_F32, 1, s1, d1, 16, &i3), "put again");
	assert_int_equal(i3.version, 1);
	assert_true(i3.created > i1.created);
	check_ok(td, tensord_delete(td, "ow/x"), "delete");
	tensord_free(td);
}

static void test_list_prefix(void **state)
{
	static const char *const names[] = { "ls/c", "ls/a", "ls/b/x", "ls/b", "lsx", "ls/B",
					     "ls/a0", "ls/-" };
	/* byte order: '-' 0x2d < 'B' 0x42 < 'a' 0x61 ... */
	static const char *const want[] = { "ls/-", "ls/B", "ls/a", "ls/a0", "ls/b", "ls/b/x",
					    "ls/c" };
	struct tensord *td = td_open();
	struct tensord_tensor_info *list = NULL;
	size_t count = 0, seen = 0;
	uint8_t b = 1;
	const uint64_t shape[] = { 1 };

	(void)state;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		check_ok(td, tensord_put(td, names[i], TENSORD_U8, 1, shape, &b, 1, NULL), "put");

	check_ok(td, tensord_list(td, "ls/", &list, &count), "list ls/");
	assert_int_equal(count, sizeof(want) / sizeof(want[0]));
	for (size_t i = 0; i < count; i++)
		assert_string_equal(list[i].name, want[i]);
	free(list);

	check_ok(td, tensord_list(td, "ls/b", &list, &count), "list ls/b");
	assert_int_equal(count, 2);
	assert_string_equal(list[0].name, "ls/b");
	assert_string_equal(list[1].name, "ls/b/x");
	free(list);

	list = NULL;
	check_ok(td, tensord_list(td, "nomatch/", &list, &count), "list nomatch/");
	assert_int_equal(count, 0);
	free(list);

	/* no prefix: everything, sorted */
	check_ok(td, tensord_list(td, NULL, &list, &count), "list all");
	for (size_t i = 0; i < count; i++) {
		if (i > 0 && strcmp(list[i - 1].name, list[i].name) >= 0)
			fail_msg("list not sorted: '%s' before '%s'", list[i - 1].name, list[i].name);
		for (size_t j = 0; j < sizeof(names) / sizeof(names[0]); j++)
			seen += strcmp(list[i].name, names[j]) == 0;
	}
	assert_int_equal(seen, sizeof(names) / sizeof(names[0]));
	free(list);

	/* an empty prefix is every name too */
	check_ok(td, tensord_list(td, "", &list, &count), "list ''");
	assert_true(count >= sizeof(names) / sizeof(names[0]));
	free(list);

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		check_ok(td, tensord_delete(td, names[i]), "delete");
	tensord_free(td);
}

static void test_errors(void **state)
{
	struct tensord *td = td_open();
	struct params p;
	const uint64_t s23[] = { 2, 3 };
	const uint64_t s9[] = { 1, 1, 1, 1, 1, 1, 1, 1, 1 };
	const uint64_t s8[] = { 1, 1, 1, 1, 2, 1, 1, 1 };
	uint8_t data[64] = { 0 };
	char longname[300];
	struct tensord_tensor_info info;

	(void)state;
	memset(longname, 'n', sizeof(longname));
	longname[256] = '\0';

#define PUT_ERR(code, what, ...)                                                    \
	do {                                                                        \
		pack_put(&p, __VA_ARGS__);                                          \
		expect_remote(td, call_params(td, "tensor.put", &p), code, what);   \
	} while (0)

	PUT_ERR(TENSORD_INVALID_ARGUMENT, "bad name (space)", "bad name", "f32", s23, 2, data, 24, NULL);
	PUT_ERR(TENSORD_INVALID_ARGUMENT, "bad name (@)", "a@b", "f32", s23, 2, data, 24, NULL);
	PUT_ERR(TENSORD_INVALID_ARGUMENT, "empty name", "", "f32", s23, 2, data, 24, NULL);
	PUT_ERR(TENSORD_INVALID_ARGUMENT, "256-byte name", longname, "f32", s23, 2, data, 24, NULL);
	PUT_ERR(TENSORD_INVALID_ARGUMENT, "unknown dtype", "e/a", "f64", s23, 2, data, 48, NULL);
	PUT_ERR(TENSORD_INVALID_ARGUMENT, "dtype F32", "e/a", "F32", s23, 2, data, 24, NULL);
	PUT_ERR(TENSORD_INVALID_ARGUMENT, "rank 9", "e/a", "u8", s9, 9, data, 1, NULL);
	PUT_ERR(TENSORD_INVALID_ARGUMENT, "data too short", "e/a", "f32", s23, 2, data, 20, NULL);
	PUT_ERR(TENSORD_INVALID_ARGUMENT, "data too long", "e/a", "f32", s23, 2, data, 28, NULL);
	PUT_ERR(TENSORD_INVALID_ARGUMENT, "unknown key", "e/a", "f32", s23, 2, data, 24, "bogus");
	/* rank 8 is fine, and the longest name: 255 bytes with the namespace
	 * the daemon keeps it in, "<uid>/" (docs/security.md, "Names") */
	{
		char ns[16];
		size_t longest = 255 - (size_t)snprintf(ns, sizeof(ns), "%u/", (unsigned)getuid());

		longname[longest + 1] = '\0';
		pack_put(&p, longname, "u8", s8, 8, data, 2, NULL);
		expect_remote(td, call_params(td, "tensor.put", &p), TENSORD_INVALID_ARGUMENT,
			      "a name one byte too long for its namespace");
		longname[longest] = '\0';
	}
	pack_put(&p, longname, "u8", s8, 8, data, 2, NULL);
	check_ok(td, call_params(td, "tensor.put", &p), "put longest name, rank 8");
	check_ok(td, tensord_stat(td, longname, &info), "stat longest name");
	assert_int_equal(info.rank, 8);
	check_ok(td, tensord_delete(td, longname), "delete longest name");
#undef PUT_ERR

	/* ill-typed and missing arguments */
	params_init(&p, 4);
	pstr(&p.pk, "name");
	msgpack_pack_uint8(&p.pk, 5);
	pstr(&p.pk, "dtype");
	pstr(&p.pk, "f32");
	pstr(&p.pk, "shape");
	msgpack_pack_array(&p.pk, 0);
	pstr(&p.pk, "data");
	msgpack_pack_bin_with_body(&p.pk, data, 4);
	expect_remote(td, call_params(td, "tensor.put", &p), TENSORD_INVALID_ARGUMENT, "name int");

	params_init(&p, 4);
	pstr(&p.pk, "name");
	pstr(&p.pk, "e/a");
	pstr(&p.pk, "dtype");
	pstr(&p.pk, "f32");
	pstr(&p.pk, "shape");
	msgpack_pack_array(&p.pk, 1);
	msgpack_pack_int8(&p.pk, -1);
	pstr(&p.pk, "data");
	msgpack_pack_bin_with_body(&p.pk, data, 4);
	expect_remote(td, call_params(td, "tensor.put", &p), TENSORD_INVALID_ARGUMENT,
		      "shape [-1]");

	params_init(&p, 4);
	pstr(&p.pk, "name");
	pstr(&p.pk, "e/a");
	pstr(&p.pk, "dtype");
	pstr(&p.pk, "f32");
	pstr(&p.pk, "shape");
	msgpack_pack_array(&p.pk, 0);
	pstr(&p.pk, "data");
	msgpack_pack_uint32(&p.pk, 1234); /* a number, not bytes (str is taken as bytes) */
	expect_remote(td, call_params(td, "tensor.put", &p), TENSORD_INVALID_ARGUMENT, "data int");

	params_init(&p, 3);
	pstr(&p.pk, "name");
	pstr(&p.pk, "e/a");
	pstr(&p.pk, "dtype");
	pstr(&p.pk, "f32");
	pstr(&p.pk, "shape");
	msgpack_pack_array(&p.pk, 0);
	expect_remote(td, call_params(td, "tensor.put", &p), TENSORD_INVALID_ARGUMENT, "no data");

	params_init(&p, 0);
	expect_remote(td, call_params(td, "tensor.get", &p), TENSORD_INVALID_ARGUMENT,
		      "get without name");
	params_init(&p, 2);
	pstr(&p.pk, "name");
	pstr(&p.pk, "e/a");
	pstr(&p.pk, "nmae");
	pstr(&p.pk, "e/a");
	expect_remote(td, call_params(td, "tensor.get", &p), TENSORD_INVALID_ARGUMENT,
		      "get with unknown key");
	params_init(&p, 1);
	pstr(&p.pk, "name");
	pstr(&p.pk, "bad name");
	expect_remote(td, call_params(td, "tensor.stat", &p), TENSORD_INVALID_ARGUMENT,
		      "stat bad name");
	params_init(&p, 1);
	pstr(&p.pk, "prefix");
	msgpack_pack_uint8(&p.pk, 1);
	expect_remote(td, call_params(td, "tensor.list", &p), TENSORD_INVALID_ARGUMENT,
		      "list prefix int");
	params_init(&p, 1);
	pstr(&p.pk, "nmae");
	pstr(&p.pk, "x");
	expect_remote(td, call_params(td, "tensor.delete", &p), TENSORD_INVALID_ARGUMENT,
		      "delete unknown key");

	/* none of the refused puts stored anything */
	expect_remote(td, tensord_stat(td, "e/a", &info), TENSORD_NOT_FOUND, "stat e/a");
	expect_remote(td, tensord_get(td, "missing/x", &info, &(void *){ NULL }, &(size_t){ 0 }),
		      TENSORD_NOT_FOUND, "get missing");
	expect_remote(td, tensord_delete(td, "missing/x"), TENSORD_NOT_FOUND, "delete missing");

	/* an unknown method */
	params_init(&p, 0);
	expect_remote(td, call_params(td, "tensor.frobnicate", &p), TENSORD_UNIMPLEMENTED,
		      "unknown method");

	/* the handle survives remote errors */
	check_ok(td, tensord_ping(td, NULL, 0), "ping after errors");
	tensord_free(td);
}

static void test_if_absent_and_atomic_put(void **state)
{
	struct tensord *td = td_open();
	struct params p;
	struct tensord_tensor_info info;
	const uint64_t s4[] = { 4 };
	uint8_t d1[16], d2[16];
	void *back = NULL;
	size_t len = 0;

	(void)state;
	fill_random(d1, 16, 21);
	fill_random(d2, 16, 22);
	pack_put(&p, "ia/x", "f32", s4, 1, d1, 16, "if_absent");
	check_ok(td, call_params(td, "tensor.put", &p), "if_absent on a new name");
	pack_put(&p, "ia/x", "f32", s4, 1, d2, 16, "if_absent");
	expect_remote(td, call_params(td, "tensor.put", &p), TENSORD_ALREADY_EXISTS,
		      "if_absent on a used name");
	/* a failed overwrite leaves the old tensor untouched */
	pack_put(&p, "ia/x", "f32", s4, 1, d2, 12, NULL);
	expect_remote(td, call_params(td, "tensor.put", &p), TENSORD_INVALID_ARGUMENT,
		      "overwrite with bad length");
	pack_put(&p, "ia/x", "f64", s4, 1, d2, 16, NULL);
	expect_remote(td, call_params(td, "tensor.put", &p), TENSORD_INVALID_ARGUMENT,
		      "overwrite with bad dtype");
	check_ok(td, tensord_get(td, "ia/x", &info, &back, &len), "get");
	check_info(&info, "ia/x", TENSORD_F32, 1, s4, 1);
	assert_int_equal(len, 16);
	assert_memory_equal(back, d1, 16);
	free(back);
	check_ok(td, tensord_delete(td, "ia/x"), "delete");
	tensord_free(td);
}

static void test_large_tensor(void **state)
{
	/* 256 MiB; 16 MiB under valgrind (a time scale is set), where memcheck
	 * re-checks the whole receive buffer at every recv() and 256 MiB would
	 * take hours. 16 MiB still spans many reads and writes. */
	const uint64_t side = daemon_time_scale() > 1 ? 4096 : 16384;
	const size_t n = side * side;
	const uint64_t shape[] = { side, side };
	struct tensord *td = td_open();
	struct tensord_tensor_info info;
	uint8_t *data = malloc(n);
	void *back = NULL;
	size_t len = 0;

	(void)state;
	assert_non_null(data);
	fill_random(data, n, 0x256);
	check_ok(td, tensord_put(td, "big/x", TENSORD_U8, 2, shape, data, n, &info), "put a large tensor");
	check_info(&info, "big/x", TENSORD_U8, 2, shape, 1);
	check_ok(td, tensord_get(td, "big/x", &info, &back, &len), "get a large tensor");
	check_info(&info, "big/x", TENSORD_U8, 2, shape, 1);
	assert_int_equal(len, n);
	if (memcmp(back, data, n) != 0) {
		size_t i = 0;

		while (((uint8_t *)back)[i] == data[i])
			i++;
		fail_msg("the large tensor differs first at byte %zu", i);
	}
	free(back);
	free(data);
	check_ok(td, tensord_delete(td, "big/x"), "delete");
	tensord_free(td);
}

/* tensord_put_fd / tensord_get_fd: the bytes in a memfd, at an offset; a
 * memfd without the seals a put needs is the daemon's FAILED_PRECONDITION. */
static void test_memfd(void **state)
{
	const uint64_t shape[] = { 3, 1000 };
	const size_t n = 3000 * sizeof(float);
	struct tensord *td = td_open();
	struct tensord_tensor_info info;
	float *data = malloc(n);
	uint8_t *back;
	int fd, out;

	(void)state;
	assert_non_null(data);
	for (size_t i = 0; i < 3000; i++)
		data[i] = (float)i * 0.5f;
	assert_int_equal(tensord_memfd(data, n, &fd), 0);
	check_ok(td, tensord_put_fd(td, "mfd/a", TENSORD_F32, 2, shape, fd, 0, NULL, &info), "put_fd");
	check_info(&info, "mfd/a", TENSORD_F32, 2, shape, 1);
	close(fd);
	/* get into an allocated memfd at offset 100; one byte short is refused */
	assert_int_equal(tensord_memfd(NULL, 99 + n, &out), 0);
	assert_int_equal(tensord_get_fd(td, "mfd/a", out, 100, NULL), -TENSORD_EREMOTE);
	assert_int_equal(tensord_error_code(td), TENSORD_INVALID_ARGUMENT);
	close(out);
	assert_int_equal(tensord_memfd(NULL, 100 + n, &out), 0);
	check_ok(td, tensord_get_fd(td, "mfd/a", out, 100, &info), "get_fd");
	assert_int_equal(info.bytes, n);
	back = mmap(NULL, 100 + n, PROT_READ, MAP_SHARED, out, 0);
	assert_true(back != MAP_FAILED);
	assert_memory_equal(back + 100, data, n);
	munmap(back, 100 + n);
	close(out);
	/* unsealed: refused, and the tensor is what it was */
	fd = memfd_create("x", MFD_CLOEXEC);
	assert_true(fd >= 0 && ftruncate(fd, (off_t)n) == 0);
	assert_int_equal(tensord_put_fd(td, "mfd/a", TENSORD_F32, 2, shape, fd, 0, NULL, NULL),
			 -TENSORD_EREMOTE);
	assert_int_equal(tensord_error_code(td), TENSORD_FAILED_PRECONDITION);
	close(fd);
	assert_int_equal(tensord_put_fd(td, "mfd/a", TENSORD_F32, 2, shape, -1, 0, NULL, NULL), -EBADF);
	check_ok(td, tensord_delete(td, "mfd/a"), "delete");
	free(data);
	tensord_free(td);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ping),
		cmocka_unit_test(test_info),
		cmocka_unit_test(test_put_get_all_dtypes),
		cmocka_unit_test(test_delete_result),
		cmocka_unit_test(test_scalar),
		cmocka_unit_test(test_zero_size),
		cmocka_unit_test(test_overwrite),
		cmocka_unit_test(test_list_prefix),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_if_absent_and_atomic_put),
		cmocka_unit_test(test_large_tensor),
		cmocka_unit_test(test_memfd),
		cmocka_unit_test(test_survivors),
	};

	if (integration_start() < 0)
		return 1;
	return integration_finish(cmocka_run_group_tests(tests, NULL, NULL));
}

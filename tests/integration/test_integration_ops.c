/* Integration tests (integration.h): op.run and graph.run through libtensord. */
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

/* ---- op.run and graph.run through libtensord ---------------------------- */

static void test_op_run(void **state)
{
	struct tensord *td = td_open();
	struct tensord_tensor_info info;
	const uint64_t shape[] = { 2, 2 };
	const float a[] = { 1, 2, 3, 4 }, b[] = { 10, 20, 30, 40 };
	const char *ab[] = { "oprun/a", "oprun/b" }, *missing[] = { "oprun/a", "oprun/none" };
	/* {"reduction": "sum"} */
	static const uint8_t sum_attrs[] = { 0x81, 0xa9, 'r', 'e', 'd', 'u', 'c', 't', 'i', 'o', 'n',
					     0xa3, 's', 'u', 'm' };
	static const uint8_t not_a_map[] = { 0x91, 0x01 };
	void *data = NULL;
	size_t len = 0;
	float got[4], back_sum;

	(void)state;
	check_ok(td, tensord_put(td, "oprun/a", TENSORD_F32, 2, shape, a, sizeof(a), NULL), "put a");
	check_ok(td, tensord_put(td, "oprun/b", TENSORD_F32, 2, shape, b, sizeof(b), NULL), "put b");

	/* inline result */
	memset(&info, 0xff, sizeof(info));
	check_ok(td, tensord_op_run(td, "add", 2, ab, NULL, 0, NULL, &info, &data, &len), "op.run add");
	assert_int_equal(info.dtype, TENSORD_F32);
	assert_int_equal(info.rank, 2);
	assert_int_equal(info.shape[0], 2);
	assert_int_equal(info.shape[1], 2);
	assert_int_equal(info.bytes, 16);
	assert_string_equal(info.name, "");
	assert_int_equal(len, 16);
	memcpy(got, data, 16);
	free(data);
	for (int i = 0; i < 4; i++)
		assert_true(got[i] == a[i] + b[i]);

	/* stored result, with attrs; ret_data and ret_len are cleared */
	data = (void *)1;
	len = 99;
	check_ok(td, tensord_op_run(td, "mse", 2, ab, sum_attrs, sizeof(sum_attrs), "oprun/loss",
				    &info, &data, &len), "op.run mse -o");
	check_info(&info, "oprun/loss", TENSORD_F32, 0, NULL, 1);
	assert_null(data);
	assert_int_equal(len, 0);
	check_ok(td, tensord_get(td, "oprun/loss", &info, &data, &len), "get loss");
	assert_int_equal(len, 4);
	memcpy(&back_sum, data, 4);
	free(data);
	assert_true(back_sum == 81.0f + 324.0f + 729.0f + 1296.0f);

	/* errors: remote ones keep the handle usable; local ones send nothing;
	 * out-params are untouched */
	data = NULL;
	len = 7;
	expect_remote(td, tensord_op_run(td, "add", 2, missing, NULL, 0, NULL, NULL, &data, &len),
		      TENSORD_NOT_FOUND, "missing input");
	assert_non_null(strstr(tensord_last_error(td), "oprun/none"));
	expect_remote(td, tensord_op_run(td, "no_such_op", 2, ab, NULL, 0, NULL, NULL, &data, &len),
		      TENSORD_INVALID_ARGUMENT, "unknown op");
	expect_remote(td, tensord_op_run(td, "mse", 1, ab, NULL, 0, NULL, NULL, &data, &len),
		      TENSORD_INVALID_ARGUMENT, "arity");
	assert_int_equal(tensord_op_run(td, "add", 2, ab, not_a_map, sizeof(not_a_map), NULL, NULL,
					&data, &len), -EINVAL);
	assert_int_equal(tensord_op_run(td, "add", 2, ab, NULL, 0, NULL, NULL, NULL, NULL), -EINVAL);
	assert_int_equal(tensord_op_run(td, "add", 2, ab, NULL, 0, "bad name", NULL, &data, &len),
			 -EINVAL);
	assert_int_equal(tensord_op_run(td, "", 2, ab, NULL, 0, NULL, NULL, &data, &len), -EINVAL);
	assert_int_equal(tensord_op_run(td, "add", 2, NULL, NULL, 0, NULL, NULL, &data, &len), -EINVAL);
	assert_int_equal(tensord_op_run(NULL, "add", 2, ab, NULL, 0, NULL, NULL, &data, &len), -EINVAL);
	assert_null(data);
	assert_int_equal(len, 7);
	check_ok(td, tensord_ping(td, NULL, 0), "ping after errors");

	for (int i = 0; i < 2; i++)
		check_ok(td, tensord_delete(td, ab[i]), "delete");
	check_ok(td, tensord_delete(td, "oprun/loss"), "delete loss");
	tensord_free(td);
}

static void test_graph_run(void **state)
{
	struct tensord *td = td_open();
	const uint64_t shape[] = { 3 };
	const float a[] = { 1, 2, 3 }, b[] = { 4, 5, 6 };
	const msgpack_object *res, *outs, *s, *stored;
	struct tensord_tensor_info info;
	msgpack_sbuffer sb;
	msgpack_packer pk;
	msgpack_unpacked u;
	void *result = NULL;
	size_t len = 0, off = 0;
	float got[3];

	(void)state;
	check_ok(td, tensord_put(td, "graph/a", TENSORD_F32, 1, shape, a, sizeof(a), NULL), "put a");
	check_ok(td, tensord_put(td, "graph/b", TENSORD_F32, 1, shape, b, sizeof(b), NULL), "put b");
	/* {"nodes": [{"id": "s", "op": "add", "inputs": ["graph/a", "graph/b"]},
	 *            {"id": "p", "op": "mul", "inputs": ["s", "graph/a"], "out": "graph/p"}],
	 *  "outputs": ["s"]} */
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 2);
	pstr(&pk, "nodes");
	msgpack_pack_array(&pk, 2);
	msgpack_pack_map(&pk, 3);
	pstr(&pk, "id");
	pstr(&pk, "s");
	pstr(&pk, "op");
	pstr(&pk, "add");
	pstr(&pk, "inputs");
	msgpack_pack_array(&pk, 2);
	pstr(&pk, "graph/a");
	pstr(&pk, "graph/b");
	msgpack_pack_map(&pk, 4);
	pstr(&pk, "id");
	pstr(&pk, "p");
	pstr(&pk, "op");
	pstr(&pk, "mul");
	pstr(&pk, "inputs");
	msgpack_pack_array(&pk, 2);
	pstr(&pk, "s");
	pstr(&pk, "graph/a");
	pstr(&pk, "out");
	pstr(&pk, "graph/p");
	pstr(&pk, "outputs");
	msgpack_pack_array(&pk, 1);
	pstr(&pk, "s");
	check_ok(td, tensord_graph_run_raw(td, sb.data, sb.size, &result, &len), "graph.run");
	msgpack_unpacked_init(&u);
	assert_int_equal(msgpack_unpack_next(&u, result, len, &off), MSGPACK_UNPACK_SUCCESS);
	res = &u.data;
	outs = map_get(res, "outputs", MSGPACK_OBJECT_MAP);
	s = map_get(outs, "s", MSGPACK_OBJECT_MAP);
	assert_int_equal(map_get(s, "data", MSGPACK_OBJECT_BIN)->via.bin.size, 12);
	memcpy(got, map_get(s, "data", MSGPACK_OBJECT_BIN)->via.bin.ptr, 12);
	for (int i = 0; i < 3; i++)
		assert_true(got[i] == a[i] + b[i]);
	stored = map_get(res, "stored", MSGPACK_OBJECT_MAP);
	assert_true(tdp_obj_str_eq(map_get(map_get(stored, "graph/p", MSGPACK_OBJECT_MAP), "name",
					   MSGPACK_OBJECT_STR), "graph/p"));
	msgpack_unpacked_destroy(&u);
	free(result);
	check_ok(td, tensord_get(td, "graph/p", &info, &result, &len), "get p");
	assert_int_equal(len, 12);
	memcpy(got, result, 12);
	free(result);
	for (int i = 0; i < 3; i++)
		assert_true(got[i] == (a[i] + b[i]) * a[i]);
	/* the intermediate "s" was not stored */
	expect_remote(td, tensord_stat(td, "s", &info), TENSORD_NOT_FOUND, "stat s");

	/* A failing node: nothing is stored. {"nodes": [{"op": "add", "inputs":
	 * ["graph/a", "graph/b"], "out": "graph/q"}, {"op": "add", "inputs": ["graph/a"]}]} */
	msgpack_sbuffer_clear(&sb);
	msgpack_pack_map(&pk, 1);
	pstr(&pk, "nodes");
	msgpack_pack_array(&pk, 2);
	msgpack_pack_map(&pk, 3);
	pstr(&pk, "op");
	pstr(&pk, "add");
	pstr(&pk, "inputs");
	msgpack_pack_array(&pk, 2);
	pstr(&pk, "graph/a");
	pstr(&pk, "graph/b");
	pstr(&pk, "out");
	pstr(&pk, "graph/q");
	msgpack_pack_map(&pk, 2);
	pstr(&pk, "op");
	pstr(&pk, "add");
	pstr(&pk, "inputs");
	msgpack_pack_array(&pk, 1);
	pstr(&pk, "graph/a");
	result = NULL;
	expect_remote(td, tensord_graph_run_raw(td, sb.data, sb.size, &result, &len),
		      TENSORD_INVALID_ARGUMENT, "graph.run with a bad node");
	assert_non_null(strstr(tensord_last_error(td), "node 1"));
	assert_null(result);
	expect_remote(td, tensord_stat(td, "graph/q", &info), TENSORD_NOT_FOUND, "stat q");
	assert_int_equal(tensord_graph_run_raw(td, NULL, 0, &result, &len), -EINVAL);
	msgpack_sbuffer_destroy(&sb);

	check_ok(td, tensord_delete(td, "graph/a"), "delete a");
	check_ok(td, tensord_delete(td, "graph/b"), "delete b");
	check_ok(td, tensord_delete(td, "graph/p"), "delete p");
	tensord_free(td);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_op_run),
		cmocka_unit_test(test_graph_run),
		cmocka_unit_test(test_survivors),
	};

	if (integration_start() < 0)
		return 1;
	return integration_finish(cmocka_run_group_tests(tests, NULL, NULL));
}

/* Integration tests (integration.h): train.run through libtensord: progress notifications while the call
 * waits, and cancelling it. */
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

/* ---- train.run through libtensord: notifications while the call waits ---- */

struct train_seen {
	int progress, evals, bad;
	int64_t last_step, steps;
	double first_loss, last_loss;
};

static void on_train_notify(void *userdata, const char *method, const void *params, size_t len)
{
	struct train_seen *s = userdata;
	msgpack_unpacked u;
	size_t off = 0;
	int64_t step = 0, steps = 0;
	const msgpack_object *loss;

	msgpack_unpacked_init(&u);
	if (!params || msgpack_unpack_next(&u, params, len, &off) != MSGPACK_UNPACK_SUCCESS ||
	    u.data.type != MSGPACK_OBJECT_MAP) {
		s->bad++;
		goto out;
	}
	loss = tdp_map_find(&u.data, "loss");
	if (tdp_obj_int(tdp_map_find(&u.data, "step"), &step) < 0 || !loss ||
	    loss->type != MSGPACK_OBJECT_FLOAT64) {
		s->bad++;
		goto out;
	}
	if (strcmp(method, "train.progress") == 0) {
		if (tdp_obj_int(tdp_map_find(&u.data, "steps"), &steps) < 0 || step <= s->last_step)
			s->bad++;
		if (s->progress++ == 0)
			s->first_loss = loss->via.f64;
		s->last_loss = loss->via.f64;
		s->last_step = step;
		s->steps = steps;
	} else if (strcmp(method, "train.eval") == 0) {
		if (!tdp_map_find(&u.data, "metrics"))
			s->bad++;
		s->evals++;
	} else {
		s->bad++;
	}
out:
	msgpack_unpacked_destroy(&u);
}

/* {"nodes": xw = matmul(bx, w); loss = mse(xw, by)}, "loss", "params": [w],
 * "optimizer": sgd 0.1, "data": {bx: x, by: y}, then `extra` more entries the
 * caller packs. */
static void pack_train_params(msgpack_packer *pk, const char *prefix, uint32_t extra)
{
	char x[64], y[64], w[64];

	snprintf(x, sizeof(x), "%s/x", prefix);
	snprintf(y, sizeof(y), "%s/y", prefix);
	snprintf(w, sizeof(w), "%s/w", prefix);
	msgpack_pack_map(pk, 5 + extra);
	pstr(pk, "nodes");
	msgpack_pack_array(pk, 2);
	msgpack_pack_map(pk, 3);
	pstr(pk, "id");
	pstr(pk, "xw");
	pstr(pk, "op");
	pstr(pk, "matmul");
	pstr(pk, "inputs");
	msgpack_pack_array(pk, 2);
	pstr(pk, "bx");
	pstr(pk, w);
	msgpack_pack_map(pk, 3);
	pstr(pk, "id");
	pstr(pk, "loss");
	pstr(pk, "op");
	pstr(pk, "mse");
	pstr(pk, "inputs");
	msgpack_pack_array(pk, 2);
	pstr(pk, "xw");
	pstr(pk, "by");
	pstr(pk, "loss");
	pstr(pk, "loss");
	pstr(pk, "params");
	msgpack_pack_array(pk, 1);
	pstr(pk, w);
	pstr(pk, "optimizer");
	msgpack_pack_map(pk, 2);
	pstr(pk, "type");
	pstr(pk, "sgd");
	pstr(pk, "lr");
	msgpack_pack_double(pk, 0.1);
	pstr(pk, "data");
	msgpack_pack_map(pk, 2);
	pstr(pk, "bx");
	pstr(pk, x);
	pstr(pk, "by");
	pstr(pk, y);
}

/* x [32, 2] of small integers, y = x @ [1, -2], w = 0. */
static void put_train_data(struct tensord *td, const char *prefix)
{
	const uint64_t xs[] = { 32, 2 }, ys[] = { 32, 1 }, ws[] = { 2, 1 };
	float x[64], y[32], w[2] = { 0, 0 };
	char name[64];

	for (int i = 0; i < 32; i++) {
		x[2 * i] = (float)(i % 5) - 2;
		x[2 * i + 1] = (float)(i % 3) - 1;
		y[i] = x[2 * i] - 2 * x[2 * i + 1];
	}
	snprintf(name, sizeof(name), "%s/x", prefix);
	check_ok(td, tensord_put(td, name, TENSORD_F32, 2, xs, x, sizeof(x), NULL), "put x");
	snprintf(name, sizeof(name), "%s/y", prefix);
	check_ok(td, tensord_put(td, name, TENSORD_F32, 2, ys, y, sizeof(y), NULL), "put y");
	snprintf(name, sizeof(name), "%s/w", prefix);
	check_ok(td, tensord_put(td, name, TENSORD_F32, 2, ws, w, sizeof(w), NULL), "put w");
}

static void test_train_run_notifications(void **state)
{
	struct tensord *td = td_open();
	struct train_seen seen = { 0 };
	msgpack_sbuffer sb;
	msgpack_packer pk;
	msgpack_unpacked u;
	void *result = NULL;
	size_t len = 0, off = 0;
	float w[2];
	int r;

	(void)state;
	put_train_data(td, "trn");
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	pack_train_params(&pk, "trn", 5);
	pstr(&pk, "batch_size");
	msgpack_pack_uint8(&pk, 8);
	pstr(&pk, "epochs");
	msgpack_pack_uint8(&pk, 10);
	pstr(&pk, "progress_every");
	msgpack_pack_uint8(&pk, 1);
	pstr(&pk, "seed");
	msgpack_pack_uint8(&pk, 3);
	pstr(&pk, "eval");
	msgpack_pack_map(&pk, 2);
	pstr(&pk, "data");
	msgpack_pack_map(&pk, 2);
	pstr(&pk, "bx");
	pstr(&pk, "trn/x");
	pstr(&pk, "by");
	pstr(&pk, "trn/y");
	pstr(&pk, "every");
	msgpack_pack_uint8(&pk, 10);
	tensord_set_notify(td, on_train_notify, &seen);
	r = tensord_train_run_raw(td, sb.data, sb.size, &result, &len);
	msgpack_sbuffer_destroy(&sb);
	if (r == -TENSORD_EREMOTE && tensord_error_code(td) == TENSORD_UNIMPLEMENTED) {
		tensord_free(td);
		skip(); /* the daemon has no train.run yet */
	}
	check_ok(td, r, "train.run");
	/* 32 rows, batch 8: 4 steps per epoch, 40 in all, each reported. */
	assert_int_equal(seen.bad, 0);
	assert_int_equal(seen.progress, 40);
	assert_int_equal(seen.last_step, 40);
	assert_int_equal(seen.steps, 40);
	assert_int_equal(seen.evals, 4);
	assert_true(seen.last_loss < seen.first_loss);
	msgpack_unpacked_init(&u);
	assert_int_equal(msgpack_unpack_next(&u, result, len, &off), MSGPACK_UNPACK_SUCCESS);
	assert_true(tdp_obj_str_eq(map_get(&u.data, "stopped", MSGPACK_OBJECT_STR), "done"));
	assert_true(map_get(&u.data, "loss", MSGPACK_OBJECT_FLOAT64)->via.f64 < 1e-3);
	assert_true(map_get(&u.data, "eval", MSGPACK_OBJECT_MAP) != NULL);
	msgpack_unpacked_destroy(&u);
	free(result);
	/* The handle still works, and the weights were learned. */
	check_ok(td, tensord_get_into(td, "trn/w", NULL, w, sizeof(w), &len), "get w");
	assert_true(w[0] > 0.98f && w[0] < 1.02f && w[1] > -2.02f && w[1] < -1.98f);
	tensord_free(td);
}

/* A client that goes away mid-run cancels it: the parameters stop changing
 * and the daemon serves on. */
static void test_train_run_cancel(void **state)
{
	struct tensord *td = td_open();
	struct tensord_tensor_info a, b;
	msgpack_sbuffer sb;
	msgpack_packer pk;
	int fd;

	(void)state;
	put_train_data(td, "trc");
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_array(&pk, 4);
	msgpack_pack_uint8(&pk, 0);
	msgpack_pack_uint8(&pk, 1);
	pstr(&pk, "train.run");
	msgpack_pack_array(&pk, 1);
	pack_train_params(&pk, "trc", 3);
	pstr(&pk, "batch_size");
	msgpack_pack_uint8(&pk, 8);
	pstr(&pk, "epochs");
	msgpack_pack_uint32(&pk, 1000000);
	pstr(&pk, "progress_every");
	msgpack_pack_uint8(&pk, 1);
	fd = daemon_connect_raw(&D);
	assert_true(fd >= 0);
	assert_int_equal(send(fd, sb.data, sb.size, MSG_NOSIGNAL), (ssize_t)sb.size);
	msgpack_sbuffer_destroy(&sb);
	/* Wait for the first message: a progress notification once it runs. */
	{
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		uint8_t buf[4096];
		ssize_t n;

		assert_int_equal(poll(&pfd, 1, 30000 * daemon_time_scale()), 1);
		n = recv(fd, buf, sizeof(buf), 0);
		assert_true(n > 0);
		if (buf[0] == 0x94 && buf[1] == 0x01) { /* a response: an error, surely */
			close(fd);
			tensord_free(td);
			skip(); /* no train.run in this daemon yet */
		}
		assert_int_equal(buf[0], 0x93); /* [2, "train.progress", ...] */
	}
	close(fd);
	sleep_ms(300);
	check_ok(td, tensord_stat(td, "trc/w", &a), "stat w");
	sleep_ms(300);
	check_ok(td, tensord_stat(td, "trc/w", &b), "stat w again");
	assert_int_equal(a.version, b.version);
	assert_true(daemon_alive(&D));
	tensord_free(td);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_train_run_notifications),
		cmocka_unit_test(test_train_run_cancel),
		cmocka_unit_test(test_survivors),
	};

	if (integration_start() < 0)
		return 1;
	return integration_finish(cmocka_run_group_tests(tests, NULL, NULL));
}

/* Integration tests (integration.h): 64 clients at once, pipelined requests on one connection with and
 * without reading the answers (backpressure), and a client that leaves
 * mid-message. */
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

/* ---- 64 clients at once ------------------------------------------------- */

#define NCLIENTS 64
#define NITER 4
#define NPER 3

struct worker {
	pthread_t thread;
	int id;
	char err[600];
};

static size_t worker_len(int id, int k)
{
	if (k == 0 && id % 16 == 0)
		return 1 << 20; /* some large ones, for partial reads and writes */
	return 256 * (size_t)(1 + (id * 7 + k) % 13);
}

static uint64_t worker_seed(int id, int iter, int k)
{
	return ((uint64_t)id << 32) | ((uint64_t)iter << 16) | (uint64_t)k;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct tensord *td = NULL;
	uint8_t *data = malloc(1 << 20);
	char name[64];
	int r;

	if (!data) {
		snprintf(w->err, sizeof(w->err), "out of memory");
		return NULL;
	}
	if ((r = tensord_connect(D.sock, &td)) < 0) {
		snprintf(w->err, sizeof(w->err), "connect: %d", r);
		free(data);
		return NULL;
	}
	for (int iter = 0; iter < NITER && !w->err[0]; iter++) {
		for (int k = 0; k < NPER && !w->err[0]; k++) {
			size_t len = worker_len(w->id, k);
			uint64_t shape[1] = { len };

			fill_random(data, len, worker_seed(w->id, iter, k));
			snprintf(name, sizeof(name), "par/%02d/%d", w->id, k);
			if ((r = tensord_put(td, name, TENSORD_U8, 1, shape, data, len, NULL)) < 0)
				snprintf(w->err, sizeof(w->err), "put %s: %d %s", name, r,
					 tensord_last_error(td));
		}
		for (int k = 0; k < NPER && !w->err[0]; k++) {
			size_t len = worker_len(w->id, k), blen = 0;
			void *back = NULL;
			struct tensord_tensor_info info;

			fill_random(data, len, worker_seed(w->id, iter, k));
			snprintf(name, sizeof(name), "par/%02d/%d", w->id, k);
			if ((r = tensord_get(td, name, &info, &back, &blen)) < 0)
				snprintf(w->err, sizeof(w->err), "get %s: %d %s", name, r,
					 tensord_last_error(td));
			else if (blen != len || memcmp(back, data, len) != 0)
				snprintf(w->err, sizeof(w->err), "get %s: wrong data (%zu bytes)",
					 name, blen);
			else if (strcmp(info.name, name) != 0)
				snprintf(w->err, sizeof(w->err), "get %s: got name %s", name,
					 info.name);
			free(back);
		}
		/* delete on odd rounds, except the last, which stays for the main thread */
		if (iter % 2 == 1 && iter != NITER - 1) {
			for (int k = 0; k < NPER && !w->err[0]; k++) {
				struct tensord_tensor_info info;

				snprintf(name, sizeof(name), "par/%02d/%d", w->id, k);
				if ((r = tensord_delete(td, name)) < 0)
					snprintf(w->err, sizeof(w->err), "delete %s: %d", name, r);
				else if (tensord_stat(td, name, &info) != -TENSORD_EREMOTE ||
					 tensord_error_code(td) != TENSORD_NOT_FOUND)
					snprintf(w->err, sizeof(w->err), "%s still there", name);
			}
		}
	}
	tensord_free(td);
	free(data);
	return NULL;
}

static void test_parallel_clients(void **state)
{
	static struct worker w[NCLIENTS];
	struct tensord *td;
	struct tensord_tensor_info *list = NULL;
	size_t count = 0;
	uint8_t *data = malloc(1 << 20);

	(void)state;
	assert_non_null(data);
	for (int i = 0; i < NCLIENTS; i++) {
		memset(&w[i], 0, sizeof(w[i]));
		w[i].id = i;
		assert_int_equal(pthread_create(&w[i].thread, NULL, worker_main, &w[i]), 0);
	}
	for (int i = 0; i < NCLIENTS; i++)
		pthread_join(w[i].thread, NULL);
	for (int i = 0; i < NCLIENTS; i++)
		if (w[i].err[0])
			fail_msg("client %d: %s", i, w[i].err);

	/* every tensor of the last round is there with its own content */
	td = td_open();
	check_ok(td, tensord_list(td, "par/", &list, &count), "list par/");
	assert_int_equal(count, NCLIENTS * NPER);
	free(list);
	for (int i = 0; i < NCLIENTS; i++) {
		for (int k = 0; k < NPER; k++) {
			char name[64];
			void *back = NULL;
			size_t len = worker_len(i, k), blen = 0;
			struct tensord_tensor_info info;

			snprintf(name, sizeof(name), "par/%02d/%d", i, k);
			fill_random(data, len, worker_seed(i, NITER - 1, k));
			check_ok(td, tensord_get(td, name, &info, &back, &blen), name);
			assert_int_equal(blen, len);
			if (memcmp(back, data, len) != 0)
				fail_msg("%s holds the wrong data", name);
			/* put in rounds 0 and 2, 3 (deleted after round 1): version 2 */
			assert_int_equal(info.version, 2);
			free(back);
			check_ok(td, tensord_delete(td, name), "delete");
		}
	}
	free(data);
	tensord_free(td);
}

/* ---- pipelining: many requests on one connection ------------------------ */

static void test_pipelining(void **state)
{
	struct raw r;
	struct rmsg m;
	msgpack_sbuffer sb;
	msgpack_packer pk;
	const msgpack_object *res, *err;
	const uint64_t shape[] = { 4 };

	(void)state;
	raw_open(&r);
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	/* even: put pipe/x := [i,i,i,i]; odd: get it back, every tenth a missing name */
	for (uint32_t i = 0; i < 100; i++) {
		uint32_t id = 5000 + i * 7919u % 100000u;

		if (i % 2 == 0) {
			uint8_t d[4] = { (uint8_t)i, (uint8_t)i, (uint8_t)i, (uint8_t)i };

			req_begin(&pk, id, "tensor.put", 4);
			pstr(&pk, "name");
			pstr(&pk, "pipe/x");
			pstr(&pk, "dtype");
			pstr(&pk, "u8");
			pstr(&pk, "shape");
			msgpack_pack_array(&pk, 1);
			msgpack_pack_uint64(&pk, shape[0]);
			pstr(&pk, "data");
			msgpack_pack_bin_with_body(&pk, d, 4);
		} else {
			req_begin(&pk, id, "tensor.get", 1);
			pstr(&pk, "name");
			pstr(&pk, i % 10 == 9 ? "pipe/missing" : "pipe/x");
		}
	}
	raw_send(&r, sb.data, sb.size);
	msgpack_sbuffer_destroy(&sb);

	for (uint32_t i = 0; i < 100; i++) {
		uint32_t id = 5000 + i * 7919u % 100000u;

		err = expect_response(&r, &m, id, &res);
		if (i % 10 == 9) {
			check_error_object(err, TENSORD_NOT_FOUND);
		} else if (i % 2 == 0) {
			assert_int_equal(err->type, MSGPACK_OBJECT_NIL);
			assert_int_equal(map_uint(res, "version"), i / 2 + 1);
		} else {
			const msgpack_object *d;
			uint8_t want[4];

			assert_int_equal(err->type, MSGPACK_OBJECT_NIL);
			memset(want, (int)(i - 1), 4);
			assert_int_equal(map_uint(res, "version"), (i - 1) / 2 + 1);
			d = map_get(res, "data", MSGPACK_OBJECT_BIN);
			assert_int_equal(d->via.bin.size, 4);
			assert_memory_equal(d->via.bin.ptr, want, 4);
			assert_true(tdp_obj_str_eq(map_get(res, "dtype", MSGPACK_OBJECT_STR), "u8"));
		}
		rmsg_free(&m);
	}
	raw_close(&r);

	{
		struct tensord *td = td_open();

		check_ok(td, tensord_delete(td, "pipe/x"), "delete");
		tensord_free(td);
	}
}

/* A client that sends many requests for big results and reads nothing for a
 * while: the daemon holds back, serves others meanwhile, and then every
 * response arrives whole and in order. */
static void test_pipelining_backpressure(void **state)
{
	const size_t n = 4 << 20;
	const uint64_t shape[] = { n };
	const int count = 64;
	struct tensord *td = td_open();
	uint8_t *data = malloc(n);
	struct raw r;
	struct rmsg m;
	msgpack_sbuffer sb;
	msgpack_packer pk;
	const msgpack_object *res, *d;

	(void)state;
	assert_non_null(data);
	fill_random(data, n, 0xbac);
	check_ok(td, tensord_put(td, "bp/x", TENSORD_U8, 1, shape, data, n, NULL), "put");

	raw_open(&r);
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	for (int i = 0; i < count; i++) {
		req_begin(&pk, 100 + (uint32_t)i, "tensor.get", 1);
		pstr(&pk, "name");
		pstr(&pk, "bp/x");
	}
	raw_send(&r, sb.data, sb.size);
	msgpack_sbuffer_destroy(&sb);

	sleep_ms(500);
	check_ok(td, tensord_ping(td, NULL, 0), "ping while another client is stalled");
	tensord_free(td);
	ping_ok();

	for (int i = 0; i < count; i++) {
		assert_int_equal(expect_response(&r, &m, 100 + (uint32_t)i, &res)->type,
				 MSGPACK_OBJECT_NIL);
		d = map_get(res, "data", MSGPACK_OBJECT_BIN);
		assert_int_equal(d->via.bin.size, n);
		if (memcmp(d->via.bin.ptr, data, n) != 0)
			fail_msg("response %d carries the wrong data", i);
		rmsg_free(&m);
	}
	raw_close(&r);
	free(data);
	td = td_open();
	check_ok(td, tensord_delete(td, "bp/x"), "delete");
	tensord_free(td);
}

static void test_disconnect_mid_message(void **state)
{
	struct raw a, b;
	msgpack_sbuffer sb;
	msgpack_packer pk;
	uint8_t *data = calloc(1, 1 << 20);

	(void)state;
	assert_non_null(data);
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	req_begin(&pk, 1, "tensor.put", 4);
	pstr(&pk, "name");
	pstr(&pk, "half/x");
	pstr(&pk, "dtype");
	pstr(&pk, "u8");
	pstr(&pk, "shape");
	msgpack_pack_array(&pk, 1);
	msgpack_pack_uint32(&pk, 1 << 20);
	pstr(&pk, "data");
	msgpack_pack_bin_with_body(&pk, data, 1 << 20);

	/* half a put, and the daemon keeps serving others meanwhile */
	raw_open(&a);
	raw_send(&a, sb.data, sb.size / 2);
	ping_ok();
	raw_open(&b);
	raw_send(&b, sb.data, 3);
	ping_ok();
	raw_close(&a);
	raw_close(&b);
	ping_ok();

	/* nothing was stored */
	{
		struct tensord *td = td_open();
		struct tensord_tensor_info info;

		expect_remote(td, tensord_stat(td, "half/x", &info), TENSORD_NOT_FOUND,
			      "stat half-sent tensor");
		tensord_free(td);
	}
	msgpack_sbuffer_destroy(&sb);
	free(data);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parallel_clients),
		cmocka_unit_test(test_pipelining),
		cmocka_unit_test(test_pipelining_backpressure),
		cmocka_unit_test(test_disconnect_mid_message),
		cmocka_unit_test(test_survivors),
	};

	if (integration_start() < 0)
		return 1;
	return integration_finish(cmocka_run_group_tests(tests, NULL, NULL));
}

/* libtensord's public API additions against a real daemon: the options
 * structs (tensord_put_opts, tensord_op_run_opts) and their old twins as
 * wrappers, the version macros and tensord_version(), and pipelining with
 * tensord_send()/tensord_recv(), large tensord_get_into payloads received
 * in place, typed pipelining (tensord_append_*, tensord_next_reply) and a
 * poll() loop over tensord_fd/flush/consume_input (issue 35). */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <msgpack.h>

#include "daemon_fixture.h"
#include "pack.h"
#include "tensord.h"

static struct daemon_fixture D;

static struct tensord *conn(void)
{
	struct tensord *td = NULL;

	assert_int_equal(tensord_connect(D.sock, &td), 0);
	return td;
}

#define check_ok(td, expr)                                                          \
	do {                                                                        \
		int r_ = (expr);                                                    \
		if (r_ < 0)                                                         \
			fail_msg("%s: %d %s", #expr, r_, tensord_last_error(td));  \
	} while (0)

static float get_scalar(struct tensord *td, const char *name)
{
	float v = -1;
	size_t len = 0;

	check_ok(td, tensord_get_into(td, name, NULL, &v, sizeof(v), &len));
	assert_int_equal(len, sizeof(v));
	return v;
}

/* The header's macros are meson's project version (passed by tests/meson.build)
 * and the library's and daemon's versions are the same. */
static void test_version(void **state)
{
	char want[32], daemon_version[64];
	struct tensord *td = conn();

	(void)state;
	snprintf(want, sizeof(want), "%d.%d.%d", TENSORD_VERSION_MAJOR, TENSORD_VERSION_MINOR,
		 TENSORD_VERSION_PATCH);
	assert_string_equal(want, MESON_PROJECT_VERSION);
	assert_string_equal(TENSORD_VERSION_STRING, MESON_PROJECT_VERSION);
	assert_string_equal(tensord_version(), MESON_PROJECT_VERSION);
	assert_int_equal(tensord_version_number(), TENSORD_VERSION_NUMBER);
	assert_int_equal(TENSORD_VERSION_NUMBER, TENSORD_VERSION_MAJOR * 10000 +
			 TENSORD_VERSION_MINOR * 100 + TENSORD_VERSION_PATCH);
	check_ok(td, tensord_ping(td, daemon_version, sizeof(daemon_version)));
	assert_string_equal(daemon_version, MESON_PROJECT_VERSION);
	tensord_free(td);
}

static void test_put_opts(void **state)
{
	struct tensord_put_options o = TENSORD_PUT_OPTIONS_INIT;
	struct tensord_tensor_info info;
	struct tensord *td = conn();
	float one = 1, two = 2;

	(void)state;
	/* NULL options: the defaults (a new tensor is private) */
	check_ok(td, tensord_put_opts(td, "api/a", TENSORD_F32, 0, NULL, &one, 4, NULL, &info));
	assert_string_equal(info.mode, "private");
	/* mode and device */
	o.mode = "group-read,world-read";
	o.device = 1; /* the second of the two logical devices (main()) */
	check_ok(td, tensord_put_opts(td, "api/b", TENSORD_F32, 0, NULL, &one, 4, &o, &info));
	assert_string_equal(info.mode, "group-read,world-read");
	assert_int_equal(info.device, 1);
	o.mode = NULL;
	o.device = 0;
	check_ok(td, tensord_put_opts(td, "api/b0", TENSORD_F32, 0, NULL, &one, 4, &o, &info));
	assert_int_equal(info.device, 0);
	/* a device the daemon does not have: its INVALID_ARGUMENT */
	o.mode = NULL;
	o.device = 4000;
	assert_int_equal(tensord_put_opts(td, "api/c", TENSORD_F32, 0, NULL, &one, 4, &o, NULL),
			 -TENSORD_EREMOTE);
	assert_int_equal(tensord_error_code(td), TENSORD_INVALID_ARGUMENT);
	o.device = -2;
	assert_int_equal(tensord_put_opts(td, "api/c", TENSORD_F32, 0, NULL, &one, 4, &o, NULL),
			 -EINVAL);
	/* if_absent: an existing name is ALREADY_EXISTS and stays as it was */
	o.device = TENSORD_DEVICE_ANY;
	o.if_absent = true;
	assert_int_equal(tensord_put_opts(td, "api/a", TENSORD_F32, 0, NULL, &two, 4, &o, NULL),
			 -TENSORD_EREMOTE);
	assert_int_equal(tensord_error_code(td), TENSORD_ALREADY_EXISTS);
	assert_true(get_scalar(td, "api/a") == 1);
	check_ok(td, tensord_put_opts(td, "api/new", TENSORD_F32, 0, NULL, &two, 4, &o, NULL));
	assert_true(get_scalar(td, "api/new") == 2);
	/* without it the put replaces, keeping the mode */
	o.if_absent = false;
	check_ok(td, tensord_put_opts(td, "api/b", TENSORD_F32, 0, NULL, &two, 4, &o, &info));
	assert_true(get_scalar(td, "api/b") == 2);
	assert_string_equal(info.mode, "group-read,world-read");
	tensord_free(td);
}

/* The size field: too small, or larger with fields this library does not know. */
static void test_options_size(void **state)
{
	struct {
		struct tensord_put_options o;
		uint64_t future;
	} big = { .o = TENSORD_PUT_OPTIONS_INIT };
	struct tensord_put_options small = TENSORD_PUT_OPTIONS_INIT;
	struct tensord_op_run_options ro = TENSORD_OP_RUN_OPTIONS_INIT;
	struct tensord *td = conn();
	const char *in[] = { "api/s" };
	float one = 1;
	void *data = NULL;
	size_t len = 0;

	(void)state;
	small.size = 4;
	assert_int_equal(tensord_put_opts(td, "api/s", TENSORD_F32, 0, NULL, &one, 4, &small, NULL),
			 -EINVAL);
	big.o.size = sizeof(big);
	check_ok(td, tensord_put_opts(td, "api/s", TENSORD_F32, 0, NULL, &one, 4, &big.o, NULL));
	big.future = 1;
	assert_int_equal(tensord_put_opts(td, "api/s", TENSORD_F32, 0, NULL, &one, 4, &big.o, NULL),
			 -EINVAL);
	ro.size = 2;
	assert_int_equal(tensord_op_run_opts(td, "neg", 1, in, NULL, 0, NULL, &ro, NULL, &data, &len),
			 -EINVAL);
	tensord_free(td);
}

/* tensord_put_on / tensord_op_run_on still work as before, and
 * tensord_op_run_opts passes the device. */
static void test_wrappers(void **state)
{
	struct tensord_op_run_options ro = TENSORD_OP_RUN_OPTIONS_INIT;
	struct tensord_tensor_info info;
	struct tensord *td = conn();
	const char *in[] = { "api/w" };
	float three = 3, *out = NULL;
	size_t len = 0;
	int dev;

	(void)state;
	check_ok(td, tensord_put_on(td, "api/w", TENSORD_F32, 0, NULL, &three, 4, TENSORD_DEVICE_ANY,
				    &info));
	/* to the other device: the wrapper passes it on */
	dev = info.device == 0 ? 1 : 0;
	check_ok(td, tensord_put_on(td, "api/w", TENSORD_F32, 0, NULL, &three, 4, dev, &info));
	assert_int_equal(info.device, dev);
	assert_int_equal(tensord_put_on(td, "api/w", TENSORD_F32, 0, NULL, &three, 4, 4000, NULL),
			 -TENSORD_EREMOTE);
	assert_int_equal(tensord_error_code(td), TENSORD_INVALID_ARGUMENT);
	assert_true(get_scalar(td, "api/w") == 3);

	check_ok(td, tensord_op_run_on(td, "neg", 1, in, NULL, 0, NULL, dev, &info, (void **)&out,
				       &len));
	assert_int_equal(len, 4);
	assert_true(out[0] == -3);
	free(out);
	out = NULL;
	ro.device = dev;
	check_ok(td, tensord_op_run_opts(td, "neg", 1, in, NULL, 0, "api/wneg", &ro, &info, NULL,
					 NULL));
	assert_true(get_scalar(td, "api/wneg") == -3);
	check_ok(td, tensord_op_run_opts(td, "neg", 1, in, NULL, 0, "api/wneg2", NULL, &info, NULL,
					 NULL));
	assert_true(get_scalar(td, "api/wneg2") == -3);
	ro.device = 4000;
	/* the device reaches the daemon: it refuses a device it does not have */
	assert_int_equal(tensord_op_run_opts(td, "neg", 1, in, NULL, 0, NULL, &ro, &info,
					     (void **)&out, &len), -TENSORD_EREMOTE);
	assert_true(tensord_error_code(td) != 0);
	assert_null(out);
	tensord_free(td);
}

/* Pack {"name": name, "dtype": "f32", "shape": [], "data": bin(v)}. */
static void pack_put(msgpack_sbuffer *sb, const char *name, float v)
{
	msgpack_packer pk;

	msgpack_sbuffer_clear(sb);
	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 4);
	tdp_pack_cstr(&pk, "name");
	tdp_pack_cstr(&pk, name);
	tdp_pack_cstr(&pk, "dtype");
	tdp_pack_cstr(&pk, "f32");
	tdp_pack_cstr(&pk, "shape");
	msgpack_pack_array(&pk, 0);
	tdp_pack_cstr(&pk, "data");
	msgpack_pack_bin(&pk, 4);
	msgpack_pack_bin_body(&pk, &v, 4);
}

static void pack_name(msgpack_sbuffer *sb, const char *name)
{
	msgpack_packer pk;

	msgpack_sbuffer_clear(sb);
	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 1);
	tdp_pack_cstr(&pk, "name");
	tdp_pack_cstr(&pk, name);
}

/* The "name" of a packed result map, compared with `want`. */
static void assert_result_name(const void *res, size_t len, const char *want)
{
	msgpack_unpacked u;
	const msgpack_object *n;

	msgpack_unpacked_init(&u);
	assert_int_equal(msgpack_unpack_next(&u, res, len, NULL), MSGPACK_UNPACK_SUCCESS);
	n = tdp_map_find(&u.data, "name");
	assert_non_null(n);
	assert_int_equal(n->type, MSGPACK_OBJECT_STR);
	assert_int_equal(n->via.str.size, strlen(want));
	assert_memory_equal(n->via.str.ptr, want, strlen(want));
	msgpack_unpacked_destroy(&u);
}

#define NPIPE 64

/* N puts, a failing stat in the middle and a stat at the end, all sent before
 * any answer is read: the answers come in order, the error in its place. */
static void test_pipeline(void **state)
{
	struct tensord *td = conn();
	uint32_t ids[NPIPE + 2], got;
	msgpack_sbuffer sb;
	char name[32];
	void *res = NULL;
	size_t len = 0;
	int k = 0;

	(void)state;
	msgpack_sbuffer_init(&sb);
	assert_int_equal(tensord_pending(td), 0);
	assert_int_equal(tensord_recv(td, &got, &res, &len), -ENOMSG);
	for (int i = 0; i < NPIPE; i++) {
		if (i == NPIPE / 2) {
			pack_name(&sb, "api/pipe-missing");
			check_ok(td, tensord_send(td, "tensor.stat", sb.data, sb.size, &ids[k++]));
		}
		snprintf(name, sizeof(name), "api/p%d", i);
		pack_put(&sb, name, (float)i);
		check_ok(td, tensord_send(td, "tensor.put", sb.data, sb.size, &ids[k++]));
	}
	pack_name(&sb, "api/p7");
	check_ok(td, tensord_send(td, "tensor.stat", sb.data, sb.size, &ids[k++]));
	assert_int_equal(tensord_pending(td), NPIPE + 2);
	/* blocking calls wait until the answers are read */
	assert_int_equal(tensord_ping(td, NULL, 0), -EBUSY);
	for (int i = 1; i < k; i++)
		assert_int_equal(ids[i], ids[i - 1] + 1);

	k = 0;
	for (int i = 0; i < NPIPE; i++) {
		if (i == NPIPE / 2) {
			assert_int_equal(tensord_recv(td, &got, &res, &len), -TENSORD_EREMOTE);
			assert_int_equal(tensord_error_code(td), TENSORD_NOT_FOUND);
			assert_int_equal(got, ids[k++]);
		}
		check_ok(td, tensord_recv(td, &got, &res, &len));
		assert_int_equal(got, ids[k++]);
		snprintf(name, sizeof(name), "api/p%d", i);
		assert_result_name(res, len, name);
		free(res);
	}
	check_ok(td, tensord_recv(td, &got, &res, &len));
	assert_int_equal(got, ids[k++]);
	assert_result_name(res, len, "api/p7");
	free(res);
	assert_int_equal(tensord_pending(td), 0);
	assert_int_equal(tensord_recv(td, &got, &res, &len), -ENOMSG);
	/* the handle works as before, and the puts took effect */
	check_ok(td, tensord_ping(td, NULL, 0));
	for (int i = 0; i < NPIPE; i += 9) {
		snprintf(name, sizeof(name), "api/p%d", i);
		assert_true(get_scalar(td, name) == (float)i);
	}
	/* bad arguments are refused before sending */
	assert_int_equal(tensord_send(td, "", NULL, 0, NULL), -EINVAL);
	assert_int_equal(tensord_send(td, "tensor.stat", "\x01", 1, NULL), -EINVAL);
	assert_int_equal(tensord_pending(td), 0);
	msgpack_sbuffer_destroy(&sb);
	tensord_free(td);
}

/* Many small requests outstanding at once (within the documented bound):
 * every answer arrives, in order. */
static void test_pipeline_many(void **state)
{
	struct tensord *td = conn();
	uint32_t first = 0, id, got;
	void *res = NULL;
	size_t len = 0;

	(void)state;
	for (int i = 0; i < 500; i++) {
		check_ok(td, tensord_send(td, "ping", NULL, 0, &id));
		if (i == 0)
			first = id;
	}
	assert_int_equal(tensord_pending(td), 500);
	for (uint32_t i = 0; i < 500; i++) {
		check_ok(td, tensord_recv(td, &got, &res, &len));
		assert_int_equal(got, first + i);
		free(res);
	}
	assert_int_equal(tensord_pending(td), 0);
	tensord_free(td);
}

static void on_progress(void *userdata, enum tensord_transfer dir, uint64_t done, uint64_t total)
{
	uint64_t *last = userdata;

	if (dir == TENSORD_TRANSFER_RECEIVE && done == total)
		*last = total;
}

/* tensord_get_into receives a payload of 1 MiB or more straight into the
 * caller's buffer (client/lib/land.h): the bytes are right on both sides of that
 * size, a buffer one byte short is refused with the handle still usable, an
 * error answer and tensord_get in between are unaffected, and progress
 * reaches the whole message. */
static void test_get_into_lands(void **state)
{
	static const size_t sizes[] = { (1u << 20) - 4, 1u << 20, (3u << 20) + 5 };
	struct tensord *td = conn();
	uint64_t progress_total = 0;
	uint8_t *want, *got;
	void *copy;
	size_t len;

	(void)state;
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		size_t n = sizes[i];
		uint64_t shape[1] = { n };

		want = malloc(n);
		got = malloc(n + 1);
		assert_non_null(want);
		assert_non_null(got);
		for (size_t k = 0; k < n; k++)
			want[k] = (uint8_t)(k * 131 + i * 7 + (k >> 12));
		check_ok(td, tensord_put(td, "land", TENSORD_U8, 1, shape, want, n, NULL));
		memset(got, 0xEE, n + 1);
		check_ok(td, tensord_get_into(td, "land", NULL, got, n + 1, &len));
		assert_int_equal(len, n);
		assert_memory_equal(got, want, n);
		assert_int_equal(got[n], 0xEE);
		/* one byte short: refused, and the next call works */
		assert_int_equal(tensord_get_into(td, "land", NULL, got, n - 1, &len), -ENOBUFS);
		assert_int_equal(tensord_get_into(td, "no-such", NULL, got, n, &len), -TENSORD_EREMOTE);
		check_ok(td, tensord_get(td, "land", NULL, &copy, &len));
		assert_int_equal(len, n);
		assert_memory_equal(copy, want, n);
		free(copy);
		tensord_set_progress(td, on_progress, &progress_total);
		memset(got, 0, n);
		check_ok(td, tensord_get_into(td, "land", NULL, got, n, &len));
		tensord_set_progress(td, NULL, NULL);
		assert_memory_equal(got, want, n);
		assert_true(progress_total >= n);
		free(want);
		free(got);
	}
	check_ok(td, tensord_delete(td, "land"));
	tensord_free(td);
}


/* Typed pipelining: puts, op.runs (inline and stored), a get, a failing stat
 * and deletes all queued before any answer is read; the answers come in
 * order, each in the form its blocking call returns, the error in its place;
 * blocking calls refuse while answers are pending. Raw and typed calls mix. */
static void test_append_typed(void **state)
{
	struct tensord_tensor_info info;
	struct tensord *td = conn();
	const uint64_t shape[2] = { 2, 3 };
	float a[6] = { 1, 2, 3, 4, 5, 6 }, b[6] = { 0.5f, 0.25f, -1, 10, 100, 1000 };
	const char *in[] = { "tp/a", "tp/b" };
	uint32_t ids[16], id;
	int n = 0;
	void *data;
	size_t len;
	float *f;

	(void)state;
	assert_int_equal(tensord_append_put(td, "tp/a", TENSORD_F32, 2, shape, a, sizeof(a), NULL,
					    &ids[n++]), 0);
	a[0] = -99; /* copied when appended */
	assert_int_equal(tensord_append_put(td, "tp/b", TENSORD_F32, 2, shape, b, sizeof(b), NULL,
					    &ids[n++]), 0);
	assert_int_equal(tensord_append_op_run(td, "add", 2, in, NULL, 0, NULL, NULL, &ids[n++]), 0);
	assert_int_equal(tensord_append_op_run(td, "mul", 2, in, NULL, 0, "tp/prod", NULL,
					       &ids[n++]), 0);
	assert_int_equal(tensord_append_get(td, "tp/prod", &ids[n++]), 0);
	assert_int_equal(tensord_append_stat(td, "tp/missing", &ids[n++]), 0);
	assert_int_equal(tensord_append_stat(td, "tp/a", &ids[n++]), 0);
	assert_int_equal(tensord_send(td, "ping", NULL, 0, &ids[n++]), 0);
	assert_int_equal(tensord_append_get(td, "tp/b", &ids[n++]), 0);
	assert_int_equal(tensord_append_delete(td, "tp/a", &ids[n++]), 0);
	assert_int_equal(tensord_append_delete(td, "tp/b", &ids[n++]), 0);
	assert_int_equal(tensord_append_delete(td, "tp/prod", &ids[n++]), 0);
	assert_int_equal(tensord_pending(td), n);
	for (int i = 1; i < n; i++)
		assert_int_equal(ids[i], ids[i - 1] + 1);
	/* blocking calls refuse at once, without losing anything */
	assert_int_equal(tensord_ping(td, NULL, 0), -EBUSY);
	assert_int_equal(tensord_stat(td, "tp/a", &info), -EBUSY);
	assert_int_equal(tensord_pending(td), n);

	n = 0;
	/* puts: metadata */
	check_ok(td, tensord_next_reply(td, &id, &info, &data, &len));
	assert_int_equal(id, ids[n++]);
	assert_string_equal(info.name, "tp/a");
	assert_true(info.rank == 2 && info.shape[1] == 3 && info.bytes == 24);
	assert_null(data);
	assert_int_equal(len, 0);
	check_ok(td, tensord_next_reply(td, &id, &info, NULL, NULL));
	assert_int_equal(id, ids[n++]);
	assert_string_equal(info.name, "tp/b");
	/* op.run inline: the result */
	check_ok(td, tensord_next_reply(td, &id, &info, &data, &len));
	assert_int_equal(id, ids[n++]);
	assert_int_equal(len, sizeof(a));
	assert_true(info.dtype == TENSORD_F32 && info.rank == 2 && info.shape[0] == 2);
	assert_string_equal(info.name, "");
	f = data;
	assert_true(f[0] == 1.5f && f[1] == 2.25f && f[5] == 1006);
	free(data);
	/* op.run stored: metadata */
	check_ok(td, tensord_next_reply(td, &id, &info, &data, &len));
	assert_int_equal(id, ids[n++]);
	assert_string_equal(info.name, "tp/prod");
	assert_null(data);
	/* get: metadata and data */
	check_ok(td, tensord_next_reply(td, &id, &info, &data, &len));
	assert_int_equal(id, ids[n++]);
	assert_string_equal(info.name, "tp/prod");
	assert_int_equal(len, 24);
	f = data;
	assert_true(f[0] == 0.5f && f[3] == 40 && f[5] == 6000);
	free(data);
	/* the error, in its place */
	assert_int_equal(tensord_next_reply(td, &id, &info, &data, &len), -TENSORD_EREMOTE);
	assert_int_equal(id, ids[n++]);
	assert_int_equal(tensord_error_code(td), TENSORD_NOT_FOUND);
	assert_non_null(strstr(tensord_last_error(td), "NOT_FOUND"));
	check_ok(td, tensord_next_reply(td, &id, &info, NULL, NULL));
	assert_int_equal(id, ids[n++]);
	assert_string_equal(info.name, "tp/a");
	/* the raw ping through the typed call: its packed result */
	check_ok(td, tensord_next_reply(td, &id, &info, &data, &len));
	assert_int_equal(id, ids[n++]);
	{
		msgpack_unpacked u;
		const msgpack_object *pong;

		msgpack_unpacked_init(&u);
		assert_int_equal(msgpack_unpack_next(&u, data, len, NULL), MSGPACK_UNPACK_SUCCESS);
		pong = tdp_map_find(&u.data, "pong");
		assert_non_null(pong);
		assert_int_equal(pong->type, MSGPACK_OBJECT_BOOLEAN);
		msgpack_unpacked_destroy(&u);
	}
	free(data);
	/* a typed get through the raw call: the packed map */
	check_ok(td, tensord_recv(td, &id, &data, &len));
	assert_int_equal(id, ids[n++]);
	assert_result_name(data, len, "tp/b");
	free(data);
	for (int i = 0; i < 3; i++) {
		check_ok(td, tensord_next_reply(td, &id, &info, &data, &len));
		assert_int_equal(id, ids[n++]);
		assert_null(data);
	}
	assert_int_equal(tensord_pending(td), 0);
	assert_int_equal(tensord_next_reply(td, &id, &info, &data, &len), -ENOMSG);
	/* blocking calls work again; the deletes took effect */
	assert_int_equal(tensord_stat(td, "tp/a", &info), -TENSORD_EREMOTE);
	assert_int_equal(tensord_error_code(td), TENSORD_NOT_FOUND);
	tensord_free(td);
}

#define FLOW_N 24
#define FLOW_BYTES ((size_t)1 << 20)

/* Large requests with large answers, all queued: 24 MiB each way, three
 * times the daemon's max_output_backlog (8 MiB), so it stops reading until
 * answers are read. tensord_next_reply() writes the queue while reading
 * what comes back, so neither side waits for the other (a writer that did
 * not read would stall here until the timeout). */
static void test_append_both_ways(void **state)
{
	struct tensord_tensor_info info;
	struct tensord *td = conn();
	uint64_t shape[1] = { FLOW_BYTES };
	uint8_t *buf = malloc(FLOW_BYTES);
	char name[32];
	void *data;
	size_t len;
	uint32_t id;

	(void)state;
	assert_non_null(buf);
	check_ok(td, tensord_set_timeout(td, 60000));
	for (int i = 0; i < FLOW_N; i++) {
		snprintf(name, sizeof(name), "flow/%d", i);
		memset(buf, i + 1, FLOW_BYTES);
		check_ok(td, tensord_append_put(td, name, TENSORD_U8, 1, shape, buf, FLOW_BYTES, NULL,
						NULL));
		check_ok(td, tensord_append_get(td, name, NULL));
	}
	for (int i = 0; i < FLOW_N; i++) {
		check_ok(td, tensord_next_reply(td, &id, &info, NULL, NULL));
		check_ok(td, tensord_next_reply(td, &id, &info, &data, &len));
		assert_int_equal(len, FLOW_BYTES);
		assert_int_equal(((uint8_t *)data)[0], i + 1);
		assert_int_equal(((uint8_t *)data)[FLOW_BYTES - 1], i + 1);
		free(data);
	}
	for (int i = 0; i < FLOW_N; i++) {
		snprintf(name, sizeof(name), "flow/%d", i);
		check_ok(td, tensord_append_delete(td, name, NULL));
	}
	for (int i = 0; i < FLOW_N; i++)
		check_ok(td, tensord_next_reply(td, &id, NULL, NULL, NULL));
	free(buf);
	tensord_free(td);
}

/* The same traffic driven by a poll() loop that never blocks: tensord_flush()
 * reports a full socket instead of waiting, tensord_consume_input() says when
 * an answer is complete, and everything arrives in order. A timeout and a
 * connect timeout are set as a program would. */
static void test_poll_loop(void **state)
{
	struct tensord *td = tensord_new();
	uint64_t shape[1] = { FLOW_BYTES };
	uint8_t *buf = malloc(FLOW_BYTES);
	uint32_t first = 0, id;
	int r, fd, would_block = 0, flushing = 1, got = 0, total = 2 * FLOW_N;
	char name[32];

	(void)state;
	assert_non_null(td);
	assert_non_null(buf);
	check_ok(td, tensord_set_connect_timeout(td, 5000));
	check_ok(td, tensord_set_timeout(td, 60000));
	check_ok(td, tensord_open(td, D.sock));
	fd = tensord_fd(td);
	assert_true(fd >= 0);
	for (int i = 0; i < FLOW_N; i++) {
		snprintf(name, sizeof(name), "loop/%d", i);
		memset(buf, 0x40 + i, FLOW_BYTES);
		check_ok(td, tensord_append_put(td, name, TENSORD_U8, 1, shape, buf, FLOW_BYTES, NULL,
						i == 0 ? &first : NULL));
		check_ok(td, tensord_append_delete(td, name, NULL));
	}
	while (got < total) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };

		if (flushing) {
			r = tensord_flush(td);
			if (r < 0)
				fail_msg("flush: %d %s", r, tensord_last_error(td));
			flushing = r;
			would_block += r;
		}
		if (flushing)
			pfd.events |= POLLOUT;
		assert_true(poll(&pfd, 1, 60000) > 0);
		while ((r = tensord_consume_input(td)) == 1) {
			struct tensord_tensor_info info;

			check_ok(td, tensord_next_reply(td, &id, &info, NULL, NULL));
			assert_int_equal(id, first + (uint32_t)got);
			if (got % 2 == 0) {
				snprintf(name, sizeof(name), "loop/%d", got / 2);
				assert_string_equal(info.name, name);
			}
			got++;
		}
		if (r < 0)
			fail_msg("consume_input: %d %s", r, tensord_last_error(td));
	}
	/* 48 MiB of puts do not fit the socket at once */
	assert_true(would_block > 0);
	assert_int_equal(tensord_pending(td), 0);
	free(buf);
	tensord_free(td);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_version),
		cmocka_unit_test(test_put_opts),
		cmocka_unit_test(test_options_size),
		cmocka_unit_test(test_wrappers),
		cmocka_unit_test(test_pipeline),
		cmocka_unit_test(test_pipeline_many),
		cmocka_unit_test(test_get_into_lands),
		cmocka_unit_test(test_append_typed),
		cmocka_unit_test(test_append_both_ways),
		cmocka_unit_test(test_poll_loop),
	};
	int failed;

	/* two logical devices on the first Vulkan device (docs/devices.md) */
	static const char *const extra[] = { "--device", "0,0", NULL };

	signal(SIGPIPE, SIG_IGN);
	if (daemon_start(&D, extra, 60) < 0)
		return 1;
	failed = cmocka_run_group_tests(tests, NULL, NULL);
	if (failed)
		daemon_dump_log(&D);
	if (daemon_stop(&D, 30) < 0)
		failed++;
	return failed ? 1 : 0;
}

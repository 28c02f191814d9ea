/* libtensord's callbacks and pipelining against a scripted fake daemon
 * (fake_daemon.h): notifications handed to the callback (and refused
 * re-entry), progress of large transfers, the non-blocking calls of an event
 * loop (issue 35) and a bad answer to one pipelined request. No GPU and no
 * real daemon needed. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <semaphore.h>
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

/* Three train.progress notifications (and one without params), then the
 * response; then a call whose callback tries to reenter the handle. */
static void script_notifications(struct peer *p)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;

	for (int round = 0; round < 2; round++) {
		assert_true(read_request(p));
		assert_true(p->msg.method_len == 9 && memcmp(p->msg.method, "train.run", 9) == 0);
		assert_true(tdp_obj_str_eq(tdp_map_find(p->msg.params, "k"), "v"));
		for (int i = 1; i <= 3; i++) {
			notify_head(&sb, &pk, "train.progress");
			msgpack_pack_array(&pk, 1);
			msgpack_pack_map(&pk, 2);
			tdp_pack_cstr(&pk, "step");
			msgpack_pack_int64(&pk, i);
			tdp_pack_cstr(&pk, "loss");
			msgpack_pack_double(&pk, 1.0 / i);
			send_sbuf(p, &sb, i == 2 ? 1 : 1 << 20);
		}
		notify_head(&sb, &pk, "log");
		msgpack_pack_array(&pk, 0);
		send_sbuf(p, &sb, 1 << 20);
		reply_head(p, &sb, &pk, p->msg.msgid);
		msgpack_pack_map(&pk, 1);
		tdp_pack_cstr(&pk, "steps");
		msgpack_pack_uint8(&pk, 3);
		send_sbuf(p, &sb, 1 << 20);
	}
	assert_true(read_request(p));
	notify_head(&sb, &pk, "train.progress");
	msgpack_pack_array(&pk, 1);
	msgpack_pack_map(&pk, 0);
	send_sbuf(p, &sb, 1 << 20);
	reply_head(p, &sb, &pk, p->msg.msgid);
	msgpack_pack_map(&pk, 0);
	send_sbuf(p, &sb, 1 << 20);
}

struct seen {
	struct tensord *td;
	int n;
	int64_t steps[8];
	double losses[8];
	bool empty_log;
	int reenter;
};

static void on_notify(void *userdata, const char *method, const void *params, size_t len)
{
	struct seen *s = userdata;
	msgpack_unpacked u;
	size_t off = 0;

	if (strcmp(method, "log") == 0) {
		s->empty_log = params == NULL && len == 0;
		return;
	}
	assert_string_equal(method, "train.progress");
	assert_true(s->n < 8);
	msgpack_unpacked_init(&u);
	assert_int_equal(msgpack_unpack_next(&u, params, len, &off), MSGPACK_UNPACK_SUCCESS);
	assert_int_equal(off, len);
	assert_int_equal(tdp_obj_int(tdp_map_find(&u.data, "step"), &s->steps[s->n]), 0);
	s->losses[s->n] = tdp_map_find(&u.data, "loss")->via.f64;
	s->n++;
	msgpack_unpacked_destroy(&u);
	if (s->td)
		s->reenter = tensord_ping(s->td, NULL, 0);
}

static void test_notifications(void **state)
{
	struct server srv;
	struct tensord *td = start(&srv, script_notifications);
	const uint8_t params[] = { 0x81, 0xa1, 'k', 0xa1, 'v' };
	struct seen seen = { 0 };
	void *res = NULL;
	size_t len = 0;

	(void)state;
	tensord_set_notify(td, on_notify, &seen);
	assert_int_equal(tensord_train_run_raw(td, params, sizeof(params), &res, &len), 0);
	assert_int_equal(seen.n, 3);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(seen.steps[i], i + 1);
		assert_true(seen.losses[i] == 1.0 / (i + 1));
	}
	assert_true(seen.empty_log);
	assert_int_equal(len, 8);
	assert_memory_equal(res, "\x81\xa5steps\x03", 8);
	free(res);
	res = NULL;

	/* A callback that calls back into its handle is refused, and the call
	 * it interrupted still gets its reply. */
	seen.n = 0;
	seen.td = td;
	assert_int_equal(tensord_train_run_raw(td, params, sizeof(params), &res, &len), 0);
	assert_int_equal(seen.n, 3);
	assert_int_equal(seen.reenter, -EBUSY);
	free(res);
	res = NULL;

	/* Without a callback they are skipped. */
	tensord_set_notify(td, NULL, NULL);
	assert_int_equal(tensord_ping(td, NULL, 0), 0);
	assert_int_equal(tensord_train_run_raw(td, NULL, 0, &res, &len), -EINVAL);
	assert_null(res);
	stop(&srv, td);
}

/* ---- progress of large transfers ---- */

#define BIG ((size_t)3 << 20)

static void script_progress(struct peer *p)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	uint8_t *blob = calloc(1, BIG);

	assert_non_null(blob);
	/* a large request, a small reply */
	assert_true(read_request(p));
	reply_head(p, &sb, &pk, p->msg.msgid);
	msgpack_pack_map(&pk, 0);
	send_sbuf(p, &sb, 1 << 20);
	/* a small request, a large reply trickling in */
	assert_true(read_request(p));
	reply_head(p, &sb, &pk, p->msg.msgid);
	msgpack_pack_map(&pk, 1);
	tdp_pack_cstr(&pk, "data");
	msgpack_pack_bin(&pk, BIG);
	msgpack_pack_bin_body(&pk, blob, BIG);
	send_sbuf(p, &sb, 64 << 10);
	/* with the callback off */
	assert_true(read_request(p));
	reply_head(p, &sb, &pk, p->msg.msgid);
	msgpack_pack_map(&pk, 0);
	send_sbuf(p, &sb, 1 << 20);
	free(blob);
}

struct progress_log {
	struct tensord *td;
	int calls[TENSORD_TRANSFER_COUNT];
	uint64_t last_done[TENSORD_TRANSFER_COUNT], last_total[TENSORD_TRANSFER_COUNT];
	bool monotonic;
	int reenter;
};

static void on_progress(void *userdata, enum tensord_transfer dir, uint64_t done, uint64_t total)
{
	struct progress_log *l = userdata;

	assert_true(dir == TENSORD_TRANSFER_SEND || dir == TENSORD_TRANSFER_RECEIVE);
	assert_true(done <= total);
	if (l->calls[dir] > 0 && (done < l->last_done[dir] || total < l->last_total[dir]))
		l->monotonic = false;
	l->calls[dir]++;
	l->last_done[dir] = done;
	l->last_total[dir] = total;
	l->reenter = tensord_ping(l->td, NULL, 0);
}

static void test_progress(void **state)
{
	struct server srv;
	struct tensord *td = start(&srv, script_progress);
	struct progress_log log = { .td = td, .monotonic = true };
	msgpack_sbuffer sb;
	msgpack_packer pk;
	uint8_t *blob = calloc(1, BIG);
	void *res = NULL;
	size_t len = 0;

	(void)state;
	assert_non_null(blob);
	tensord_set_progress(NULL, on_progress, NULL); /* accepted, does nothing */
	tensord_set_progress(td, on_progress, &log);
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 1);
	tdp_pack_cstr(&pk, "data");
	msgpack_pack_bin(&pk, BIG);
	msgpack_pack_bin_body(&pk, blob, BIG);
	assert_int_equal(tensord_call_raw(td, "tensor.put", sb.data, sb.size, &res, &len), 0);
	free(res);
	/* written a MiB at a time, to the last byte */
	assert_true(log.calls[TENSORD_TRANSFER_SEND] >= 3);
	assert_true(log.last_total[TENSORD_TRANSFER_SEND] > BIG);
	assert_true(log.last_done[TENSORD_TRANSFER_SEND] == log.last_total[TENSORD_TRANSFER_SEND]);
	assert_int_equal(log.calls[TENSORD_TRANSFER_RECEIVE], 0); /* a small reply */
	assert_int_equal(log.reenter, -EBUSY);

	memset(log.calls, 0, sizeof(log.calls));
	assert_int_equal(tensord_call_raw(td, "tensor.get", NULL, 0, &res, &len), 0);
	assert_true(len > BIG);
	free(res);
	assert_true(log.calls[TENSORD_TRANSFER_RECEIVE] >= 2);
	assert_true(log.last_done[TENSORD_TRANSFER_RECEIVE] == log.last_total[TENSORD_TRANSFER_RECEIVE]);
	assert_true(log.last_total[TENSORD_TRANSFER_RECEIVE] > BIG);
	assert_true(log.monotonic);

	tensord_set_progress(td, NULL, &log);
	memset(log.calls, 0, sizeof(log.calls));
	assert_int_equal(tensord_ping(td, NULL, 0), 0);
	assert_int_equal(log.calls[TENSORD_TRANSFER_SEND] + log.calls[TENSORD_TRANSFER_RECEIVE], 0);
	msgpack_sbuffer_destroy(&sb);
	free(blob);
	stop(&srv, td);
}

/* The event loop's calls against a daemon that starts reading only when told
 * (sem `go`): appending does no I/O, tensord_flush() says "would block"
 * instead of waiting, tensord_consume_input() says "not yet", blocking
 * calls refuse with -EBUSY; then a poll() loop finishes the work, the
 * notification sent before an answer reaches the callback, and each answer
 * comes back in the typed form. */
static sem_t go;
#define BIG_PUT ((size_t)8 << 20)

static void script_late_reader(struct peer *p)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	float data[6] = { 1, 2, 3, 4, 5, 6 };

	sem_wait(&go);
	/* tensor.put "big", 8 MiB: metadata back */
	assert_true(read_request(p));
	assert_true(p->msg.method_len == 10 && memcmp(p->msg.method, "tensor.put", 10) == 0);
	{
		const msgpack_object *d = tdp_map_find(p->msg.params, "data");

		assert_non_null(d);
		assert_int_equal(d->via.bin.size, BIG_PUT);
		assert_int_equal((uint8_t)d->via.bin.ptr[BIG_PUT - 1], 0xAB);
	}
	reply_head(p, &sb, &pk, p->msg.msgid);
	pack_info(&pk, "big", 0);
	send_sbuf(p, &sb, 1 << 20);
	/* tensor.get "x": a notification first, then metadata and data */
	assert_true(read_request(p));
	assert_true(p->msg.method_len == 10 && memcmp(p->msg.method, "tensor.get", 10) == 0);
	notify_head(&sb, &pk, "log");
	msgpack_pack_array(&pk, 1);
	msgpack_pack_map(&pk, 0);
	send_sbuf(p, &sb, 1 << 20);
	reply_head(p, &sb, &pk, p->msg.msgid);
	pack_info(&pk, "x", 1);
	tdp_pack_cstr(&pk, "data");
	msgpack_pack_bin(&pk, sizeof(data));
	msgpack_pack_bin_body(&pk, data, sizeof(data));
	send_sbuf(p, &sb, 7); /* in pieces */
	/* tensor.delete "x" */
	assert_true(read_request(p));
	reply_head(p, &sb, &pk, p->msg.msgid);
	msgpack_pack_map(&pk, 0);
	send_sbuf(p, &sb, 1 << 20);
	read_request(p);
}

static void count_notify(void *userdata, const char *method, const void *params, size_t len)
{
	(void)params;
	(void)len;
	if (strcmp(method, "log") == 0)
		(*(int *)userdata)++;
}

static void test_event_loop(void **state)
{
	struct tensord_tensor_info info;
	struct server srv;
	struct tensord *td;
	uint64_t shape[1] = { BIG_PUT };
	uint32_t ids[3], id;
	uint8_t *big = malloc(BIG_PUT);
	int r, fd, notes = 0, got = 0, flushing;
	void *data;
	size_t len;

	(void)state;
	assert_non_null(big);
	memset(big, 0xAB, BIG_PUT);
	assert_int_equal(sem_init(&go, 0, 0), 0);
	td = start(&srv, script_late_reader);
	tensord_set_notify(td, count_notify, &notes);
	fd = tensord_fd(td);
	assert_true(fd >= 0);
	assert_true(fcntl(fd, F_GETFL) & O_NONBLOCK);
	assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);

	assert_int_equal(tensord_append_put(td, "big", TENSORD_U8, 1, shape, big, BIG_PUT, NULL,
					    &ids[0]), 0);
	memset(big, 0, BIG_PUT); /* the put's bytes were copied */
	assert_int_equal(tensord_append_get(td, "x", &ids[1]), 0);
	assert_int_equal(tensord_append_delete(td, "x", &ids[2]), 0);
	assert_int_equal(ids[1], ids[0] + 1);
	assert_int_equal(ids[2], ids[1] + 1);
	assert_int_equal(tensord_pending(td), 3);
	/* invalid arguments queue nothing */
	assert_int_equal(tensord_append_get(td, "bad name", &id), -EINVAL);
	assert_int_equal(tensord_append_put(td, "y", TENSORD_DTYPE_COUNT, 0, NULL, big, 4, NULL,
					    &id), -EINVAL);
	assert_int_equal(tensord_append_op_run(td, "", 0, NULL, NULL, 0, NULL, NULL, &id), -EINVAL);
	assert_int_equal(tensord_append_raw(td, "tensor.stat", "\x01", 1, &id), -EINVAL);
	assert_int_equal(tensord_pending(td), 3);

	/* the daemon does not read yet: nothing blocks */
	assert_int_equal(tensord_flush(td), 1);
	assert_int_equal(tensord_flush(td), 1);
	assert_int_equal(tensord_consume_input(td), 0);
	assert_int_equal(tensord_ping(td, NULL, 0), -EBUSY);
	assert_non_null(strstr(tensord_last_error(td), "3 pipelined requests unanswered"));
	assert_int_equal(tensord_get(td, "x", NULL, &data, &len), -EBUSY);

	sem_post(&go);
	flushing = 1;
	while (got < 3) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN | (flushing ? POLLOUT : 0) };

		assert_true(poll(&pfd, 1, 10000) > 0);
		if (pfd.revents & POLLOUT) {
			flushing = tensord_flush(td);
			assert_true(flushing == 0 || flushing == 1);
		}
		if (!(pfd.revents & (POLLIN | POLLHUP)))
			continue;
		while ((r = tensord_consume_input(td)) == 1) {
			data = (void *)1;
			len = 99;
			assert_int_equal(tensord_next_reply(td, &id, &info, &data, &len), 0);
			assert_int_equal(id, ids[got]);
			if (got == 0) {
				assert_string_equal(info.name, "big");
				assert_null(data);
				assert_int_equal(len, 0);
			} else if (got == 1) {
				assert_string_equal(info.name, "x");
				assert_true(info.rank == 2 && info.shape[0] == 2 && info.shape[1] == 3);
				assert_int_equal(len, 24);
				assert_true(((float *)data)[5] == 6);
				free(data);
			} else {
				assert_null(data);
				assert_string_equal(info.name, "");
			}
			got++;
		}
		assert_int_equal(r, 0);
	}
	assert_int_equal(flushing, 0);
	assert_int_equal(notes, 1);
	assert_int_equal(tensord_pending(td), 0);
	assert_int_equal(tensord_next_reply(td, &id, &info, &data, &len), -ENOMSG);
	assert_int_equal(tensord_flush(td), 0);
	assert_int_equal(tensord_consume_input(td), 0);
	stop(&srv, td);
	sem_destroy(&go);
	free(big);
}

/* A malformed answer to one pipelined request fails that request alone
 * (-EPROTO, used up, its id given); the next answer is taken as usual. An
 * error answer is -TENSORD_EREMOTE in its place. */
static void script_bad_pipelined(struct peer *p)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;

	/* get: metadata without data */
	assert_true(read_request(p));
	reply_head(p, &sb, &pk, p->msg.msgid);
	pack_info(&pk, "x", 0);
	send_sbuf(p, &sb, 1 << 20);
	/* op.run inline: not a map */
	assert_true(read_request(p));
	reply_head(p, &sb, &pk, p->msg.msgid);
	msgpack_pack_array(&pk, 0);
	send_sbuf(p, &sb, 1 << 20);
	/* stat: an error */
	assert_true(read_request(p));
	send_error(p, p->msg.msgid, 5, "no tensor named 'y'");
	/* stat: fine */
	assert_true(read_request(p));
	reply_head(p, &sb, &pk, p->msg.msgid);
	pack_info(&pk, "x", 0);
	send_sbuf(p, &sb, 1 << 20);
	read_request(p);
}

static void test_bad_pipelined_answer(void **state)
{
	struct tensord_tensor_info info;
	struct server srv;
	struct tensord *td = start(&srv, script_bad_pipelined);
	const char *in[] = { "x" };
	uint32_t ids[4], id = 0;
	void *data = NULL;
	size_t len = 0;

	(void)state;
	assert_int_equal(tensord_append_get(td, "x", &ids[0]), 0);
	assert_int_equal(tensord_append_op_run(td, "neg", 1, in, NULL, 0, NULL, NULL, &ids[1]), 0);
	assert_int_equal(tensord_append_stat(td, "y", &ids[2]), 0);
	assert_int_equal(tensord_append_stat(td, "x", &ids[3]), 0);
	assert_int_equal(tensord_next_reply(td, &id, &info, &data, &len), -EPROTO);
	assert_int_equal(id, ids[0]);
	assert_null(data);
	assert_int_equal(tensord_next_reply(td, &id, &info, &data, &len), -EPROTO);
	assert_int_equal(id, ids[1]);
	assert_int_equal(tensord_next_reply(td, &id, &info, &data, &len), -TENSORD_EREMOTE);
	assert_int_equal(id, ids[2]);
	assert_int_equal(tensord_error_code(td), TENSORD_NOT_FOUND);
	assert_int_equal(tensord_next_reply(td, &id, &info, NULL, NULL), 0);
	assert_int_equal(id, ids[3]);
	assert_string_equal(info.name, "x");
	assert_int_equal(tensord_pending(td), 0);
	stop(&srv, td);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_notifications),
		cmocka_unit_test(test_progress),
		cmocka_unit_test(test_event_loop),
		cmocka_unit_test(test_bad_pipelined_answer),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* libFuzzer harness for the daemon's request handling past the wire: method
 * dispatch, parameter validation (daemon/serve/params.c), every method handler
 * (tensor.*, op.run, graph.run with its graph parsing, train.step, train.run
 * with its option parsing), op attribute parsing and shape inference, and the
 * recording of each op's dispatches, on a stand-in device (gpu_stub.c) that
 * checks every binding and grid instead of computing.
 *
 * The input is a stream of msgpack-RPC messages, served in order against one
 * daemon state (so a put can feed a later op.run). It is cut and decoded
 * exactly as daemon/serve/conn.c does. Requests with an even msgid come from uid
 * 1000, odd ones from uid 1001 (in group 100), so ownership and group access
 * checks are reached as well. A request whose msgid has bit 2 set comes with
 * a memfd (docs/protocol.md, "Passing memory") whose size and seals follow
 * its other msgid bits (pass_fd below).
 *
 * Checked besides crashes, leaks and undefined behaviour:
 * - every request gets exactly one well-formed response for its msgid (a
 *   train.run may first send notifications), and an error carries a known
 *   status name and a message naming the method;
 * - train.run, driven for a few steps and then cancelled as if its client
 *   left, or run to its end, leaves nothing behind;
 * - after the stream, releasing the store frees every device allocation: no
 *   request leaks device memory. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "devices.h"
#include "fuzz.h"
#include "fuzz_gpu.h"

#include "base/log.h"
#include "base/loop.h"
#include "daemon.h"
#include "kernels/kernel.h"
#include "methods.h"
#include "pack.h"
#include "rpc.h"
#include "scan.h"
#include "serve/conn.h"
#include "methods/request.h"
#include "serve/server.h"
#include "status.h"
#include "store/model.h"
#include "store/store.h"
#include "train/job.h"
#include "train/jobs_table.h"

#define CHECK(cond)                                                                 \
	do {                                                                        \
		if (!(cond)) {                                                      \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
			abort();                                                    \
		}                                                                   \
	} while (0)

/* FUZZ_TRACE=1 in the environment prints every response (to check seeds). */
static bool trace;

/* Training turns a train.run gets before its "client" goes away. */
#define JOB_TURNS 6
#define HEAP_BYTES ((uint64_t)8 << 20)

/* ---- the harness ---- */

static void release_tensor(void *userdata, struct tensor *t)
{
	struct daemon *d = userdata;

	gpu_memory_free(devices_of(d, t), &t->alloc);
}

/* The output holds notifications and at most one response: check each and
 * return how many responses for `msgid` there were. */
static unsigned check_output(struct conn *c, uint32_t msgid)
{
	unsigned responses = 0;

	while (tdp_buf_len(&c->out) > 0) {
		struct tdp_scanner s;
		struct tdp_message m;
		msgpack_unpacked u;
		char why[200];

		tdp_scanner_reset(&s);
		CHECK(tdp_scanner_feed(&s, tdp_buf_head(&c->out), tdp_buf_len(&c->out),
				       &tdp_scan_default_limits) == 1);
		msgpack_unpacked_init(&u);
		CHECK(tdp_unpack(&u, tdp_buf_head(&c->out), s.pos) == 0);
		CHECK(tdp_message_parse(&u.data, &m, why, sizeof(why)) == 0);
		CHECK(m.type == TDP_MSG_RESPONSE || m.type == TDP_MSG_NOTIFY);
		if (m.type == TDP_MSG_RESPONSE) {
			CHECK(m.msgid == msgid);
			responses++;
			if (m.error->type != MSGPACK_OBJECT_NIL) {
				const msgpack_object *code = tdp_map_find(m.error, "code");
				const msgpack_object *name = tdp_map_find(m.error, "name");
				const msgpack_object *msg = tdp_map_find(m.error, "message");
				const char *known;

				CHECK(m.error->type == MSGPACK_OBJECT_MAP && code && name && msg);
				CHECK(code->type == MSGPACK_OBJECT_POSITIVE_INTEGER && code->via.u64 > 0);
				known = tdp_status_name((int)code->via.u64);
				CHECK(known && tdp_obj_str_eq(name, known));
				CHECK(msg->type == MSGPACK_OBJECT_STR && msg->via.str.size > 0);
				CHECK(m.result->type == MSGPACK_OBJECT_NIL);
				if (trace)
					fprintf(stderr, "msgid %u: %s: %.*s\n", msgid, known,
						(int)msg->via.str.size, msg->via.str.ptr);
			} else if (trace) {
				fprintf(stderr, "msgid %u: ok\n", msgid);
			}
		}
		msgpack_unpacked_destroy(&u);
		tdp_buf_consume(&c->out, s.pos);
	}
	return responses;
}

/* Drive a started train.run a few turns; then it ends or its client leaves. */
static void drive_job(struct conn *c, uint32_t msgid)
{
	unsigned responses = 0;

	for (unsigned k = 0; c->deferred && k < JOB_TURNS; k++) {
		/* A streamed answer: its parts, as conn.c asks for them. */
		while (c->deferred && c->deferred->more) {
			struct request_deferred *def = c->deferred;
			int r = def->more(def);

			CHECK(r >= 0);
			/* A part shown outside the output goes after it, as
			 * conn.c sends it. */
			if (r == 0 && def->window_len) {
				void *dst = tdp_buf_extend(&c->out, def->window_len);

				CHECK(dst != NULL);
				memcpy(dst, def->window, def->window_len);
				def->window += def->window_len;
				def->window_len = 0;
			}
			if (r > 0)
				c->deferred = NULL;
		}
		train_jobs_run(c->d);
		responses += check_output(c, msgid);
	}
	if (c->deferred) {
		CHECK(responses == 0);
		c->deferred->cancel(c->deferred);
		c->deferred = NULL;
		CHECK(!train_jobs_run(c->d));
		CHECK(check_output(c, msgid) == 0);
	} else {
		CHECK(responses == 1);
	}
}

/* The fd that comes with request `msgid` (bit 2 set), or -1: a memfd of
 * (msgid >> 8) & 0xffff bytes sealed by bits 3-4 (none, shrink, shrink and
 * write, shrink and grow) or, with both bits 5 and 6, a pipe (no memfd). */
static int pass_fd(uint32_t msgid)
{
	static const uint8_t zeros[0x10000];
	static const unsigned seals[4] = { 0, F_SEAL_SHRINK, F_SEAL_SHRINK | F_SEAL_WRITE,
					   F_SEAL_SHRINK | F_SEAL_GROW };
	int fd, p[2];

	if (!(msgid & 4))
		return -1;
	if ((msgid & 0x60) == 0x60) {
		if (pipe2(p, O_CLOEXEC) < 0)
			return -1;
		close(p[1]);
		return p[0];
	}
	fd = memfd_create("fuzz", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -1;
	/* Written, so its pages are in memory as a get needs them. */
	if (pwrite(fd, zeros, (msgid >> 8) & 0xffff, 0) != (ssize_t)((msgid >> 8) & 0xffff) ||
	    (seals[(msgid >> 3) & 3] && fcntl(fd, F_ADD_SEALS, seals[(msgid >> 3) & 3]) < 0)) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Serve one complete message as conn.c's handle_message does. Returns false
 * when the daemon would close the connection. */
static bool serve(struct conn *c, const uint8_t *p, size_t n)
{
	msgpack_unpacked u;
	msgpack_packer pk;
	struct tdp_message m;
	char why[200];
	uint32_t msgid;
	bool go_on = true;

	msgpack_packer_init(&pk, &c->out, tdp_buf_msgpack_write);
	msgpack_unpacked_init(&u);
	CHECK(tdp_unpack(&u, p, n) == 0); /* the scanner accepted it */
	if (tdp_message_parse(&u.data, &m, why, sizeof(why)) < 0) {
		if (tdp_message_request_id(&u.data, &msgid) == 0) {
			CHECK(tdp_write_error(&pk, msgid, TDP_PROTOCOL, why) == 0);
			CHECK(check_output(c, msgid) == 1);
		} else {
			go_on = false;
		}
	} else if (m.type == TDP_MSG_REQUEST) {
		int fd = pass_fd(m.msgid);
		struct request req = {
			.call = { .d = c->d },
			.conn = c,
			.msgid = m.msgid,
			.params = m.params,
			.pk = &pk,
			.out = &c->out,
			.fds = &fd,
			.nfds = fd >= 0,
		};

		/* uid 1001 is in group 100, so group access rules are reached too. */
		uid_t uid = (m.msgid & 1) ? 1001 : 1000;

		req.call.cred = (struct access_cred){ .uid = uid, .gid = uid, .pid = 1,
						      .ngroups = uid == 1001, .groups = { 100 } };
		c->uid = uid;
		c->cred = req.call.cred;
		CHECK(request_dispatch(&req, m.method, m.method_len) == 0);
		if (fd >= 0)
			close(fd); /* as conn.c does once the handler returned */
		if (c->deferred)
			drive_job(c, m.msgid);
		else
			CHECK(check_output(c, m.msgid) == 1);
	} else if (m.type == TDP_MSG_NOTIFY) {
		/* ignored, as daemon/serve/conn.c does: no answer, the stream goes on */
		CHECK(tdp_buf_len(&c->out) == 0);
	} else {
		go_on = false;
	}
	msgpack_unpacked_destroy(&u);
	return go_on;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* Two devices, so the fuzzer reaches the several-device paths; each
	 * one's accounting is checked at the end (a free on the wrong device
	 * shows there). */
	static struct gpu_device gpu, gpu1;
	static struct gpu_device_desc found[2];
	struct daemon d = { 0 };
	struct conn c = { 0 };
	struct tdp_scan_limits lim = tdp_scan_default_limits;
	size_t off = 0;

	trace = getenv("FUZZ_TRACE") != NULL;
	log_set_level(trace ? LOG_DEBUG : LOG_EMERG);
	fuzz_gpu_init(&gpu, HEAP_BYTES);
	fuzz_gpu_init(&gpu1, HEAP_BYTES);
	gpu1.id = 1;
	gpu1.desc.index = 1;
	found[0] = gpu.desc;
	found[1] = gpu1.desc;
	config_defaults(&d.cfg);
	/* Small limits, so the fuzzer reaches them with small inputs. */
	d.cfg.max_tensors = 32;
	d.cfg.max_tensor_bytes = (uint64_t)1 << 20;
	d.cfg.max_message_bytes = (uint64_t)4 << 20;
	/* uid 1001 (in group 100) may create kernels: kernel.* and kernel nodes. */
	d.cfg.kernel_group = 100;
	d.gpus[0] = &gpu;
	d.gpus[1] = &gpu1;
	d.ngpus = 2;
	d.devices = found;
	d.ndevices = 2;
	d.start_ns = daemon_now_ns(CLOCK_MONOTONIC);
	d.store = store_new((uint32_t)d.cfg.max_tensors, release_tensor, &d);
	d.models = models_new(8);
	if (!d.store || !d.models || kernels_init(&d) < 0) {
		models_free(d.models);
		store_free(d.store);
		return 0;
	}
	c.d = &d;
	c.src.fd = -1;
	lim.max_bytes = d.cfg.max_message_bytes;

	while (off < size) {
		struct tdp_scanner s;

		tdp_scanner_reset(&s);
		if (tdp_scanner_feed(&s, data + off, size - off, &lim) != 1)
			break;
		if (!serve(&c, data + off, s.pos))
			break;
		off += s.pos;
	}

	CHECK(!c.deferred);
	train_jobs_free(&d);
	jobs_table_free(&d);
	kernels_fini(&d);
	models_free(d.models);
	store_free(d.store);
	usage_free(&d.usage);
	tdp_buf_free(&c.out);
	tdp_buf_free(&c.in);
	CHECK(fuzz_gpu_live_blocks() == 0);
	CHECK(gpu.mem.used == 0 && gpu.mem.reserved == 0);
	CHECK(gpu1.mem.used == 0 && gpu1.mem.reserved == 0);
	return 0;
}

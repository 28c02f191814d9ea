/* Integration tests: a real tensord on a temporary socket, driven through
 * libtensord and through raw msgpack-RPC bytes, held to docs/protocol.md. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <msgpack.h>

#include "buf.h"
#include "daemon_fixture.h"
#include "pack.h"
#include "rpc.h"
#include "scan.h"
#include "tensord.h"

static struct daemon_fixture D;

/* ---- helpers ------------------------------------------------------------ */

static uint64_t splitmix(uint64_t *st)
{
	uint64_t z = (*st += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static void fill_random(void *p, size_t n, uint64_t seed)
{
	uint8_t *b = p;
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		uint64_t x = splitmix(&seed);

		memcpy(b + i, &x, 8);
	}
	if (i < n) {
		uint64_t x = splitmix(&seed);

		memcpy(b + i, &x, n - i);
	}
}

static double wall_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

static struct tensord *td_open(void)
{
	struct tensord *td = NULL;
	int r = tensord_connect(D.sock, &td);

	if (r < 0)
		fail_msg("tensord_connect(%s): %d", D.sock, r);
	assert_non_null(td);
	return td;
}

static void check_ok(struct tensord *td, int r, const char *what)
{
	if (r < 0)
		fail_msg("%s: returned %d, code %d: %s", what, r, tensord_error_code(td),
			 tensord_last_error(td));
}

static void expect_remote(struct tensord *td, int r, int code, const char *what)
{
	if (r != -TENSORD_EREMOTE || tensord_error_code(td) != code)
		fail_msg("%s: returned %d with code %d (%s), want -TENSORD_EREMOTE with code %d",
			 what, r, tensord_error_code(td), tensord_last_error(td), code);
	assert_true(strlen(tensord_last_error(td)) > 0);
}

static void check_info(const struct tensord_tensor_info *in, const char *name,
		       enum tensord_dtype dtype, uint32_t rank, const uint64_t *shape,
		       uint64_t version)
{
	uint64_t bytes = tensord_dtype_size(dtype);
	double now = wall_now();

	assert_string_equal(in->name, name);
	assert_int_equal(in->dtype, dtype);
	assert_int_equal(in->rank, rank);
	for (uint32_t i = 0; i < rank; i++) {
		assert_int_equal(in->shape[i], shape[i]);
		bytes *= shape[i];
	}
	assert_int_equal(in->bytes, bytes);
	assert_int_equal(in->owner, getuid());
	assert_int_equal(in->version, version);
	assert_true(in->created > now - 3600 && in->created < now + 60);
	assert_true(in->modified >= in->created && in->modified < now + 60);
}

/* A msgpack map packed for tensord_call_raw(). */
struct params {
	msgpack_sbuffer sb;
	msgpack_packer pk;
};

static void params_init(struct params *p, uint32_t nkeys)
{
	msgpack_sbuffer_init(&p->sb);
	msgpack_packer_init(&p->pk, &p->sb, msgpack_sbuffer_write);
	msgpack_pack_map(&p->pk, nkeys);
}

static void pstr(msgpack_packer *pk, const char *s)
{
	assert_int_equal(tdp_pack_cstr(pk, s), 0);
}

static int call_params(struct tensord *td, const char *method, struct params *p)
{
	void *res = NULL;
	size_t len = 0;
	int r = tensord_call_raw(td, method, p->sb.data, p->sb.size, &res, &len);

	free(res);
	msgpack_sbuffer_destroy(&p->sb);
	return r;
}

/* Pack a tensor.put params map: name, dtype, shape (nshape dims), `data_len`
 * bytes of data, and one extra key when `extra` is set. */
static void pack_put(struct params *p, const char *name, const char *dtype,
		     const uint64_t *shape, unsigned nshape, const void *data, size_t data_len,
		     const char *extra)
{
	params_init(p, extra ? 5 : 4);
	pstr(&p->pk, "name");
	pstr(&p->pk, name);
	pstr(&p->pk, "dtype");
	pstr(&p->pk, dtype);
	pstr(&p->pk, "shape");
	msgpack_pack_array(&p->pk, nshape);
	for (unsigned i = 0; i < nshape; i++)
		msgpack_pack_uint64(&p->pk, shape[i]);
	pstr(&p->pk, "data");
	msgpack_pack_bin_with_body(&p->pk, data, data_len);
	if (extra) {
		pstr(&p->pk, extra);
		msgpack_pack_true(&p->pk);
	}
}

/* ---- raw connections ---------------------------------------------------- */

struct raw {
	int fd;
	struct tdp_buf in;
	struct tdp_scanner scan;
};

struct rmsg {
	uint8_t *bytes;
	msgpack_unpacked u;
	const msgpack_object *o;
};

static void raw_open(struct raw *r)
{
	memset(r, 0, sizeof(*r));
	r->fd = daemon_connect_raw(&D);
	if (r->fd < 0)
		fail_msg("connect to %s: %s", D.sock, strerror(errno));
	tdp_scanner_reset(&r->scan);
}

static void raw_close(struct raw *r)
{
	if (r->fd >= 0)
		close(r->fd);
	r->fd = -1;
	tdp_buf_free(&r->in);
}

static void raw_send(struct raw *r, const void *p, size_t n)
{
	const uint8_t *b = p;

	while (n > 0) {
		ssize_t w = send(r->fd, b, n, MSG_NOSIGNAL);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			fail_msg("send: %s", strerror(errno));
		b += w;
		n -= (size_t)w;
	}
}

static void rmsg_free(struct rmsg *m)
{
	if (m->bytes) {
		msgpack_unpacked_destroy(&m->u);
		free(m->bytes);
	}
	memset(m, 0, sizeof(*m));
}

/* Read the next message: 1 with *m filled, 0 on a clean end of stream (EOF or
 * ECONNRESET, which Linux reports when the daemon closed with bytes of ours
 * unread), -ETIMEDOUT, or -EPROTO when the stream ends inside a message or
 * is no msgpack. */
static int raw_recv(struct raw *r, struct rmsg *m, int timeout_ms)
{
	double deadline = wall_now() + timeout_ms / 1000.0 * daemon_time_scale();

	memset(m, 0, sizeof(*m));
	for (;;) {
		int s = tdp_scanner_feed(&r->scan, tdp_buf_head(&r->in), tdp_buf_len(&r->in),
					 &tdp_scan_default_limits);
		struct pollfd pfd = { .fd = r->fd, .events = POLLIN };
		ssize_t n;
		int left;

		if (s < 0)
			return -EPROTO;
		if (s == 1) {
			size_t len = r->scan.pos;

			m->bytes = malloc(len);
			assert_non_null(m->bytes);
			memcpy(m->bytes, tdp_buf_head(&r->in), len);
			tdp_buf_consume(&r->in, len);
			tdp_scanner_reset(&r->scan);
			msgpack_unpacked_init(&m->u);
			if (tdp_unpack(&m->u, m->bytes, len) < 0) {
				msgpack_unpacked_destroy(&m->u);
				free(m->bytes);
				m->bytes = NULL;
				return -EPROTO;
			}
			m->o = &m->u.data;
			return 1;
		}
		left = (int)((deadline - wall_now()) * 1000);
		if (left <= 0)
			return -ETIMEDOUT;
		if (poll(&pfd, 1, left) == 0)
			return -ETIMEDOUT;
		if (tdp_buf_reserve(&r->in, 65536) < 0)
			fail_msg("out of memory");
		n = read(r->fd, r->in.data + r->in.end, 65536);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == ECONNRESET)
			n = 0;
		if (n < 0)
			fail_msg("read: %s", strerror(errno));
		if (n == 0)
			return tdp_buf_len(&r->in) ? -EPROTO : 0;
		r->in.end += (size_t)n;
	}
}

/* Expect the next message to be a response to `msgid`; returns its error
 * object (nil on success) and points *result at the result. */
static const msgpack_object *expect_response(struct raw *r, struct rmsg *m, uint32_t msgid,
					     const msgpack_object **result)
{
	struct tdp_message t;
	char why[128];
	int rc = raw_recv(r, m, 30000);

	if (rc != 1)
		fail_msg("waiting for the response to msgid %u: got %d", msgid, rc);
	if (tdp_message_parse(m->o, &t, why, sizeof(why)) < 0)
		fail_msg("response to msgid %u is no msgpack-RPC message: %s", msgid, why);
	if (t.type != 1)
		fail_msg("waiting for the response to msgid %u: got message type %d", msgid, t.type);
	if (t.msgid != msgid)
		fail_msg("waiting for the response to msgid %u: got msgid %u", msgid, t.msgid);
	if (t.error->type != MSGPACK_OBJECT_NIL)
		assert_int_equal(t.result->type, MSGPACK_OBJECT_NIL);
	if (result)
		*result = t.result;
	return t.error;
}

static void check_error_object(const msgpack_object *e, int code)
{
	const msgpack_object *c, *n, *msg;

	if (e->type != MSGPACK_OBJECT_MAP)
		fail_msg("error is not a map (type %d)", e->type);
	c = tdp_map_find(e, "code");
	n = tdp_map_find(e, "name");
	msg = tdp_map_find(e, "message");
	assert_non_null(c);
	assert_non_null(n);
	assert_non_null(msg);
	assert_int_equal(c->type, MSGPACK_OBJECT_POSITIVE_INTEGER);
	if ((int)c->via.u64 != code)
		fail_msg("error code %d (%.*s: %.*s), want %d", (int)c->via.u64,
			 n->type == MSGPACK_OBJECT_STR ? (int)n->via.str.size : 0,
			 n->type == MSGPACK_OBJECT_STR ? n->via.str.ptr : "",
			 msg->type == MSGPACK_OBJECT_STR ? (int)msg->via.str.size : 0,
			 msg->type == MSGPACK_OBJECT_STR ? msg->via.str.ptr : "", code);
	assert_int_equal(n->type, MSGPACK_OBJECT_STR);
	assert_int_equal(msg->type, MSGPACK_OBJECT_STR);
}

static int error_code_of(const msgpack_object *e)
{
	const msgpack_object *c = tdp_map_find(e, "code");

	assert_non_null(c);
	assert_int_equal(c->type, MSGPACK_OBJECT_POSITIVE_INTEGER);
	return (int)c->via.u64;
}

/* Expect the protocol.error notification with one of the codes, then the end
 * of the stream. */
static void expect_broken_stream(struct raw *r, int code1, int code2, const char *what)
{
	struct rmsg m;
	const msgpack_object *a, *p, *e, *name;
	int rc = raw_recv(r, &m, 10000), code;

	if (rc != 1)
		fail_msg("%s: want a protocol.error notification, got %s", what,
			 rc == 0 ? "the connection closed" : rc == -ETIMEDOUT ? "nothing within 10 s"
			 : "bytes that are no msgpack");
	a = m.o;
	if (a->type != MSGPACK_OBJECT_ARRAY || a->via.array.size != 3 ||
	    a->via.array.ptr[0].type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
	    a->via.array.ptr[0].via.u64 != 2)
		fail_msg("%s: want a notification [2, method, params]", what);
	if (!tdp_obj_str_eq(&a->via.array.ptr[1], "protocol.error"))
		fail_msg("%s: notification is not protocol.error", what);
	p = &a->via.array.ptr[2];
	assert_int_equal(p->type, MSGPACK_OBJECT_ARRAY);
	assert_int_equal(p->via.array.size, 1);
	e = &p->via.array.ptr[0];
	code = error_code_of(e);
	if (code != code1 && code != code2)
		fail_msg("%s: protocol.error code %d, want %d or %d", what, code, code1, code2);
	check_error_object(e, code);
	name = tdp_map_find(e, "name");
	assert_true(tdp_obj_str_eq(name, code == 8 ? "RESOURCE_EXHAUSTED" : "PROTOCOL"));
	rmsg_free(&m);

	rc = raw_recv(r, &m, 5000);
	if (rc == 1)
		fail_msg("%s: want the connection closed after protocol.error, got another message",
			 what);
	if (rc != 0)
		fail_msg("%s: want the connection closed after protocol.error, got %s", what,
			 rc == -ETIMEDOUT ? "no EOF within 5 s" : strerror(-rc));
}

/* Start a request [0, msgid, method, [ {map of nkeys ...; nkeys < 0 packs []. */
static void req_begin(msgpack_packer *pk, uint32_t msgid, const char *method, int nkeys)
{
	assert_int_equal(tdp_write_request_head(pk, msgid, method), 0);
	if (nkeys < 0) {
		msgpack_pack_array(pk, 0);
		return;
	}
	msgpack_pack_array(pk, 1);
	msgpack_pack_map(pk, (uint32_t)nkeys);
}

static void ping_ok(void)
{
	struct tensord *td = td_open();
	char ver[64] = "";

	check_ok(td, tensord_ping(td, ver, sizeof(ver)), "ping");
	tensord_free(td);
}

/* ---- tests -------------------------------------------------------------- */

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

static uint64_t map_uint(const msgpack_object *map, const char *key)
{
	const msgpack_object *v = tdp_map_find(map, key);

	if (!v || v->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
		fail_msg("key '%s' missing or not an unsigned int", key);
	return v->via.u64;
}

static const msgpack_object *map_get(const msgpack_object *map, const char *key, int type)
{
	const msgpack_object *v = tdp_map_find(map, key);

	if (!v)
		fail_msg("key '%s' missing", key);
	if ((int)v->type != type && !(type == MSGPACK_OBJECT_FLOAT64 &&
				      v->type == MSGPACK_OBJECT_FLOAT32))
		fail_msg("key '%s' has msgpack type %d, want %d", key, v->type, type);
	return v;
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

/* ---- raw protocol ------------------------------------------------------- */

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

/* ---- the tensors put before everything are intact ----------------------- */

static uint8_t keep_a[4096];
static float keep_b[6] = { 1, 2, 3, 4, 5, 6 };

static int put_survivors(void)
{
	struct tensord *td = NULL;
	const uint64_t sa[] = { 4096 }, sb[] = { 2, 3 };
	int r;

	fill_random(keep_a, sizeof(keep_a), 77);
	if (tensord_connect(D.sock, &td) < 0)
		return -1;
	r = tensord_put(td, "keep/a", TENSORD_U8, 1, sa, keep_a, sizeof(keep_a), NULL);
	if (r >= 0)
		r = tensord_put(td, "keep/b", TENSORD_F32, 2, sb, keep_b, sizeof(keep_b), NULL);
	if (r < 0)
		fprintf(stderr, "put survivors: %d %s\n", r, tensord_last_error(td));
	tensord_free(td);
	return r < 0 ? -1 : 0;
}

static void test_survivors(void **state)
{
	struct tensord *td = td_open();
	struct tensord_tensor_info info;
	void *back = NULL;
	size_t len = 0;
	const uint64_t sa[] = { 4096 }, sb[] = { 2, 3 };

	(void)state;
	check_ok(td, tensord_get(td, "keep/a", &info, &back, &len), "get keep/a");
	check_info(&info, "keep/a", TENSORD_U8, 1, sa, 1);
	assert_int_equal(len, sizeof(keep_a));
	assert_memory_equal(back, keep_a, sizeof(keep_a));
	free(back);
	check_ok(td, tensord_get(td, "keep/b", &info, &back, &len), "get keep/b");
	check_info(&info, "keep/b", TENSORD_F32, 2, sb, 1);
	assert_int_equal(len, sizeof(keep_b));
	assert_memory_equal(back, keep_b, sizeof(keep_b));
	free(back);
	check_ok(td, tensord_ping(td, NULL, 0), "ping");
	tensord_free(td);
	assert_true(daemon_alive(&D));
}

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
		cmocka_unit_test(test_parallel_clients),
		cmocka_unit_test(test_pipelining),
		cmocka_unit_test(test_pipelining_backpressure),
		cmocka_unit_test(test_disconnect_mid_message),
		cmocka_unit_test(test_garbage_stream),
		cmocka_unit_test(test_response_from_client),
		cmocka_unit_test(test_notification_from_client),
		cmocka_unit_test(test_bin_method),
		cmocka_unit_test(test_oversized_header),
		cmocka_unit_test(test_not_a_request),
		cmocka_unit_test(test_depth_limit),
		cmocka_unit_test(test_op_run),
		cmocka_unit_test(test_graph_run),
		cmocka_unit_test(test_train_run_notifications),
		cmocka_unit_test(test_train_run_cancel),
		cmocka_unit_test(test_survivors),
	};
	int failed, idle;

	signal(SIGPIPE, SIG_IGN);
	if (daemon_start(&D, NULL, 60) < 0)
		return 1;
	if (put_survivors() < 0) {
		daemon_dump_log(&D);
		daemon_stop(&D, 30);
		return 1;
	}
	failed = cmocka_run_group_tests(tests, NULL, NULL);
	if (!daemon_alive(&D)) {
		fprintf(stderr, "tensord died during the tests\n");
		failed++;
	}
	if (failed)
		daemon_dump_log(&D);
	/* a client still connected does not keep SIGTERM from ending the daemon */
	idle = daemon_connect_raw(&D);
	if (idle < 0) {
		fprintf(stderr, "cannot connect before stopping tensord\n");
		failed++;
	}
	if (daemon_stop(&D, 30) < 0) {
		fprintf(stderr, "tensord did not exit 0 on SIGTERM\n");
		failed++;
	}
	if (idle >= 0)
		close(idle);
	return failed ? 1 : 0;
}

/* What the integration programs share (integration.h): a real tensord on a
 * temporary socket, driven through libtensord and through raw msgpack-RPC
 * bytes, held to docs/protocol.md. */
#include "integration.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "pack.h"
#include "rpc.h"

struct daemon_fixture D;

static uint64_t splitmix(uint64_t *st)
{
	uint64_t z = (*st += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

void fill_random(void *p, size_t n, uint64_t seed)
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

double wall_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

struct tensord *td_open(void)
{
	struct tensord *td = NULL;
	int r = tensord_connect(D.sock, &td);

	if (r < 0)
		fail_msg("tensord_connect(%s): %d", D.sock, r);
	assert_non_null(td);
	return td;
}

void check_ok(struct tensord *td, int r, const char *what)
{
	if (r < 0)
		fail_msg("%s: returned %d, code %d: %s", what, r, tensord_error_code(td),
			 tensord_last_error(td));
}

void expect_remote(struct tensord *td, int r, int code, const char *what)
{
	if (r != -TENSORD_EREMOTE || tensord_error_code(td) != code)
		fail_msg("%s: returned %d with code %d (%s), want -TENSORD_EREMOTE with code %d",
			 what, r, tensord_error_code(td), tensord_last_error(td), code);
	assert_true(strlen(tensord_last_error(td)) > 0);
}

void check_info(const struct tensord_tensor_info *in, const char *name,
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

void params_init(struct params *p, uint32_t nkeys)
{
	msgpack_sbuffer_init(&p->sb);
	msgpack_packer_init(&p->pk, &p->sb, msgpack_sbuffer_write);
	msgpack_pack_map(&p->pk, nkeys);
}

void pstr(msgpack_packer *pk, const char *s)
{
	assert_int_equal(tdp_pack_cstr(pk, s), 0);
}

int call_params(struct tensord *td, const char *method, struct params *p)
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
void pack_put(struct params *p, const char *name, const char *dtype,
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

void raw_open(struct raw *r)
{
	memset(r, 0, sizeof(*r));
	r->fd = daemon_connect_raw(&D);
	if (r->fd < 0)
		fail_msg("connect to %s: %s", D.sock, strerror(errno));
	tdp_scanner_reset(&r->scan);
}

void raw_close(struct raw *r)
{
	if (r->fd >= 0)
		close(r->fd);
	r->fd = -1;
	tdp_buf_free(&r->in);
}

void raw_send(struct raw *r, const void *p, size_t n)
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

void rmsg_free(struct rmsg *m)
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
int raw_recv(struct raw *r, struct rmsg *m, int timeout_ms)
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
const msgpack_object *expect_response(struct raw *r, struct rmsg *m, uint32_t msgid,
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

void check_error_object(const msgpack_object *e, int code)
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

int error_code_of(const msgpack_object *e)
{
	const msgpack_object *c = tdp_map_find(e, "code");

	assert_non_null(c);
	assert_int_equal(c->type, MSGPACK_OBJECT_POSITIVE_INTEGER);
	return (int)c->via.u64;
}

/* Expect the protocol.error notification with one of the codes, then the end
 * of the stream. */
void expect_broken_stream(struct raw *r, int code1, int code2, const char *what)
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
void req_begin(msgpack_packer *pk, uint32_t msgid, const char *method, int nkeys)
{
	assert_int_equal(tdp_write_request_head(pk, msgid, method), 0);
	if (nkeys < 0) {
		msgpack_pack_array(pk, 0);
		return;
	}
	msgpack_pack_array(pk, 1);
	msgpack_pack_map(pk, (uint32_t)nkeys);
}

void ping_ok(void)
{
	struct tensord *td = td_open();
	char ver[64] = "";

	check_ok(td, tensord_ping(td, ver, sizeof(ver)), "ping");
	tensord_free(td);
}

uint64_t map_uint(const msgpack_object *map, const char *key)
{
	const msgpack_object *v = tdp_map_find(map, key);

	if (!v || v->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
		fail_msg("key '%s' missing or not an unsigned int", key);
	return v->via.u64;
}

const msgpack_object *map_get(const msgpack_object *map, const char *key, int type)
{
	const msgpack_object *v = tdp_map_find(map, key);

	if (!v)
		fail_msg("key '%s' missing", key);
	if ((int)v->type != type && !(type == MSGPACK_OBJECT_FLOAT64 &&
				      v->type == MSGPACK_OBJECT_FLOAT32))
		fail_msg("key '%s' has msgpack type %d, want %d", key, v->type, type);
	return v;
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

void test_survivors(void **state)
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

int integration_start(void)
{
	signal(SIGPIPE, SIG_IGN);
	if (daemon_start(&D, NULL, 60) < 0)
		return -1;
	if (put_survivors() < 0) {
		daemon_dump_log(&D);
		daemon_stop(&D, 30);
		return -1;
	}
	return 0;
}

int integration_finish(int failed)
{
	int idle;

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

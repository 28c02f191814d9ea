/* libtensord against a scripted fake daemon: what the library writes, and how
 * it copes with every kind of bad reply (wrong msgid, protocol.error, EOF,
 * garbage, ill-typed metadata). No GPU and no real daemon needed. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>
#include <msgpack.h>

#include "buf.h"
#include "pack.h"
#include "rpc.h"
#include "scan.h"
#include "tensord.h"

struct peer {
	int fd;
	struct tdp_buf in;
	msgpack_unpacked req;
	struct tdp_message msg;
};

typedef void (*script_fn)(struct peer *p);

struct server {
	char dir[64];
	char path[128];
	int listen_fd;
	pthread_t thread;
	script_fn script;
};

/* Read one whole request into p->req / p->msg; false at EOF. */
static bool read_request(struct peer *p)
{
	struct tdp_scanner s;
	char why[128];

	tdp_scanner_reset(&s);
	for (;;) {
		int r = tdp_scanner_feed(&s, tdp_buf_head(&p->in), tdp_buf_len(&p->in),
					 &tdp_scan_default_limits);
		ssize_t n;

		if (r == 1)
			break;
		assert_int_equal(r, 0);
		assert_int_equal(tdp_buf_reserve(&p->in, 1 << 16), 0);
		n = read(p->fd, p->in.data + p->in.end, p->in.cap - p->in.end);
		if (n <= 0)
			return false;
		p->in.end += (size_t)n;
	}
	assert_int_equal(tdp_unpack(&p->req, tdp_buf_head(&p->in), s.pos), 0);
	assert_int_equal(tdp_message_parse(&p->req.data, &p->msg, why, sizeof(why)), 0);
	assert_int_equal(p->msg.type, 0);
	/* The objects point into p->in: keep the bytes until the next read. */
	p->in.start += s.pos;
	return true;
}

static void write_bytes(struct peer *p, const void *b, size_t n, size_t chunk)
{
	const uint8_t *c = b;

	while (n > 0) {
		size_t k = n < chunk ? n : chunk;
		ssize_t w = send(p->fd, c, k, MSG_NOSIGNAL);

		if (w <= 0)
			return;
		c += w;
		n -= (size_t)w;
	}
}

static void send_sbuf(struct peer *p, msgpack_sbuffer *sb, size_t chunk)
{
	write_bytes(p, sb->data, sb->size, chunk);
	msgpack_sbuffer_destroy(sb);
}

/* Start a reply [1, msgid, nil, ...] to the last request; caller packs the result. */
static void reply_head(struct peer *p, msgpack_sbuffer *sb, msgpack_packer *pk, uint32_t msgid)
{
	msgpack_sbuffer_init(sb);
	msgpack_packer_init(pk, sb, msgpack_sbuffer_write);
	(void)p;
	tdp_write_result_head(pk, msgid);
}

static void pack_info(msgpack_packer *pk, const char *name, unsigned extra_keys)
{
	msgpack_pack_map(pk, 8 + extra_keys);
	tdp_pack_cstr(pk, "name");
	tdp_pack_cstr(pk, name);
	tdp_pack_cstr(pk, "dtype");
	tdp_pack_cstr(pk, "f32");
	tdp_pack_cstr(pk, "shape");
	msgpack_pack_array(pk, 2);
	msgpack_pack_uint64(pk, 2);
	msgpack_pack_uint64(pk, 3);
	tdp_pack_cstr(pk, "bytes");
	msgpack_pack_uint64(pk, 24);
	tdp_pack_cstr(pk, "owner");
	msgpack_pack_uint32(pk, 1000);
	tdp_pack_cstr(pk, "created");
	msgpack_pack_double(pk, 1795000000.25);
	tdp_pack_cstr(pk, "modified");
	msgpack_pack_double(pk, 1795000001.5);
	tdp_pack_cstr(pk, "version");
	msgpack_pack_uint64(pk, 7);
}

static void *serve(void *arg)
{
	struct server *srv = arg;
	struct peer p = { 0 };

	p.fd = accept4(srv->listen_fd, NULL, NULL, SOCK_CLOEXEC);
	if (p.fd >= 0) {
		msgpack_unpacked_init(&p.req);
		srv->script(&p);
		close(p.fd);
		msgpack_unpacked_destroy(&p.req);
		tdp_buf_free(&p.in);
	}
	return NULL;
}

static struct tensord *start(struct server *srv, script_fn script)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	struct tensord *td = NULL;

	snprintf(srv->dir, sizeof(srv->dir), "/tmp/tdwire-XXXXXX");
	assert_non_null(mkdtemp(srv->dir));
	snprintf(srv->path, sizeof(srv->path), "%s/s.sock", srv->dir);
	memcpy(addr.sun_path, srv->path, strlen(srv->path) + 1);
	srv->script = script;
	srv->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(srv->listen_fd >= 0);
	assert_int_equal(bind(srv->listen_fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
	assert_int_equal(listen(srv->listen_fd, 4), 0);
	assert_int_equal(pthread_create(&srv->thread, NULL, serve, srv), 0);
	assert_int_equal(tensord_connect(srv->path, &td), 0);
	return td;
}

static void stop(struct server *srv, struct tensord *td)
{
	tensord_free(td);
	pthread_join(srv->thread, NULL);
	close(srv->listen_fd);
	unlink(srv->path);
	rmdir(srv->dir);
}

/* ---- scripts ------------------------------------------------------------- */

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
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	tdp_write_error(&pk, p->msg.msgid, 5, "no tensor named 'x'");
	send_sbuf(p, &sb, 1 << 20);

	/* A log notification before the reply is skipped. */
	assert_true(read_request(p));
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_array(&pk, 3);
	msgpack_pack_uint8(&pk, 2);
	tdp_pack_cstr(&pk, "log");
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
			msgpack_sbuffer_init(&sb);
			msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
			msgpack_pack_array(&pk, 3);
			msgpack_pack_uint8(&pk, 2);
			tdp_pack_cstr(&pk, "train.progress");
			msgpack_pack_array(&pk, 1);
			msgpack_pack_map(&pk, 2);
			tdp_pack_cstr(&pk, "step");
			msgpack_pack_int64(&pk, i);
			tdp_pack_cstr(&pk, "loss");
			msgpack_pack_double(&pk, 1.0 / i);
			send_sbuf(p, &sb, i == 2 ? 1 : 1 << 20);
		}
		msgpack_sbuffer_init(&sb);
		msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
		msgpack_pack_array(&pk, 3);
		msgpack_pack_uint8(&pk, 2);
		tdp_pack_cstr(&pk, "log");
		msgpack_pack_array(&pk, 0);
		send_sbuf(p, &sb, 1 << 20);
		reply_head(p, &sb, &pk, p->msg.msgid);
		msgpack_pack_map(&pk, 1);
		tdp_pack_cstr(&pk, "steps");
		msgpack_pack_uint8(&pk, 3);
		send_sbuf(p, &sb, 1 << 20);
	}
	assert_true(read_request(p));
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_array(&pk, 3);
	msgpack_pack_uint8(&pk, 2);
	tdp_pack_cstr(&pk, "train.progress");
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

static void test_connect_errors(void **state)
{
	struct tensord *td = (void *)1;
	char longpath[200];

	(void)state;
	assert_int_equal(tensord_connect("/nonexistent/tensord.sock", &td), -ENOENT);
	memset(longpath, 'a', sizeof(longpath) - 1);
	longpath[sizeof(longpath) - 1] = '\0';
	assert_int_equal(tensord_connect(longpath, &td), -ENAMETOOLONG);
	assert_ptr_equal(td, (void *)1);
	tensord_free(NULL);
	assert_string_equal(tensord_last_error(NULL), "");
	assert_string_equal(tensord_dtype_name(TENSORD_BF16), "bf16");
	assert_null(tensord_dtype_name(TENSORD_DTYPE_COUNT));
	assert_int_equal(tensord_dtype_parse("i32"), TENSORD_I32);
	assert_int_equal(tensord_dtype_parse("f64"), -EINVAL);
	assert_int_equal(tensord_dtype_size(TENSORD_F16), 2);
}

/* tensord_default_socket: $TENSORD_SOCKET, else a user's own daemon in
 * $XDG_RUNTIME_DIR/tensord/ (only when its socket is there, and not for
 * root), else the system service's. */
static void test_default_socket(void **state)
{
	char dir[] = "/tmp/td-xdg-XXXXXX", sub[64], path[96], buf[128];
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int fd;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(sub, sizeof(sub), "%s/tensord", dir);
	assert_int_equal(mkdir(sub, 0700), 0);
	snprintf(path, sizeof(path), "%s/tensord.sock", sub);
	setenv("XDG_RUNTIME_DIR", dir, 1);
	setenv("TENSORD_SOCKET", "/tmp/elsewhere.sock", 1);
	assert_string_equal(tensord_default_socket(buf, sizeof(buf)), "/tmp/elsewhere.sock");
	unsetenv("TENSORD_SOCKET");
	/* No socket there yet: the system's. */
	assert_string_equal(tensord_default_socket(buf, sizeof(buf)), "/run/tensord/tensord.sock");
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_string_equal(tensord_default_socket(buf, sizeof(buf)),
			    getuid() == 0 ? "/run/tensord/tensord.sock" : path);
	close(fd);
	unlink(path);
	rmdir(sub);
	rmdir(dir);
	unsetenv("XDG_RUNTIME_DIR");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_default_socket),
		cmocka_unit_test(test_ping_remote_error_and_recovery),
		cmocka_unit_test(test_wrong_msgid_is_sticky),
		cmocka_unit_test(test_protocol_error_notification),
		cmocka_unit_test(test_eof),
		cmocka_unit_test(test_garbage_reply),
		cmocka_unit_test(test_bad_metadata),
		cmocka_unit_test(test_requests_on_the_wire),
		cmocka_unit_test(test_devices),
		cmocka_unit_test(test_notifications),
		cmocka_unit_test(test_progress),
		cmocka_unit_test(test_connect_errors),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

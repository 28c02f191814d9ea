/* The scripted fake tensord of libtensord's wire tests (fake_daemon.h). */
#include "fake_daemon.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "pack.h"
#include "scan.h"

bool read_request(struct peer *p)
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

void write_bytes(struct peer *p, const void *b, size_t n, size_t chunk)
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

void send_sbuf(struct peer *p, msgpack_sbuffer *sb, size_t chunk)
{
	write_bytes(p, sb->data, sb->size, chunk);
	msgpack_sbuffer_destroy(sb);
}

void reply_head(struct peer *p, msgpack_sbuffer *sb, msgpack_packer *pk, uint32_t msgid)
{
	msgpack_sbuffer_init(sb);
	msgpack_packer_init(pk, sb, msgpack_sbuffer_write);
	(void)p;
	tdp_write_result_head(pk, msgid);
}

void notify_head(msgpack_sbuffer *sb, msgpack_packer *pk, const char *method)
{
	msgpack_sbuffer_init(sb);
	msgpack_packer_init(pk, sb, msgpack_sbuffer_write);
	msgpack_pack_array(pk, 3);
	msgpack_pack_uint8(pk, 2);
	tdp_pack_cstr(pk, method);
}

void send_error(struct peer *p, uint32_t msgid, int code, const char *message)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;

	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	tdp_write_error(&pk, msgid, code, message);
	send_sbuf(p, &sb, 1 << 20);
}

void pack_info(msgpack_packer *pk, const char *name, unsigned extra_keys)
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

void start_server(struct server *srv, script_fn script)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };

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
}

struct tensord *start(struct server *srv, script_fn script)
{
	struct tensord *td = NULL;

	start_server(srv, script);
	assert_int_equal(tensord_connect(srv->path, &td), 0);
	return td;
}

void stop(struct server *srv, struct tensord *td)
{
	tensord_free(td);
	pthread_join(srv->thread, NULL);
	close(srv->listen_fd);
	unlink(srv->path);
	rmdir(srv->dir);
}

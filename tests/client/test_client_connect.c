/* libtensord's connecting against a scripted fake daemon (fake_daemon.h):
 * the default socket path, connect errors and their messages, a handle from
 * tensord_new() opened (and reopened) with tensord_open(), and the connect
 * and call timeouts. No GPU and no real daemon needed. */
#include <errno.h>
#include <poll.h>
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
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <msgpack.h>

#include "fake_daemon.h"
#include "pack.h"
#include "rpc.h"
#include "tensord.h"

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

static double now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* A handle from tensord_new() is not connected until tensord_open(); a
 * failed open says which path it tried, where that came from and what to do,
 * naming the per-user socket; the same handle then connects, and refuses a
 * second open while connected. */
static void script_ping(struct peer *p)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;

	while (read_request(p)) {
		reply_head(p, &sb, &pk, p->msg.msgid);
		msgpack_pack_map(&pk, 1);
		tdp_pack_cstr(&pk, "pong");
		msgpack_pack_true(&pk);
		send_sbuf(p, &sb, 1 << 20);
	}
}

static void test_open_messages(void **state)
{
	char dir[] = "/tmp/td-open-XDG-XXXXXX", path[128], want[256];
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	struct tensord *td = tensord_new();
	struct server srv;
	const char *msg;
	uint32_t id;
	int fd;

	(void)state;
	assert_non_null(td);
	assert_non_null(mkdtemp(dir));
	setenv("XDG_RUNTIME_DIR", dir, 1);
	/* not connected yet: every call says so */
	assert_int_equal(tensord_ping(td, NULL, 0), -ENOTCONN);
	assert_int_equal(tensord_append_get(td, "x", &id), -ENOTCONN);
	assert_int_equal(tensord_fd(td), -ENOTCONN);
	assert_int_equal(tensord_flush(td), -ENOTCONN);
	assert_int_equal(tensord_consume_input(td), -ENOTCONN);
	assert_non_null(strstr(tensord_last_error(td), "tensord_open()"));
	assert_int_equal(tensord_pending(td), 0);

	/* a path that does not exist: named, with the per-user socket as hint */
	snprintf(path, sizeof(path), "%s/none/s.sock", dir);
	assert_int_equal(tensord_open(td, path), -ENOENT);
	msg = tensord_last_error(td);
	assert_non_null(strstr(msg, path));
	assert_non_null(strstr(msg, "No such file or directory"));
	assert_non_null(strstr(msg, "is tensord running?"));
	assert_non_null(strstr(msg, "$XDG_RUNTIME_DIR/tensord/tensord.sock"));
	snprintf(want, sizeof(want), "%s/tensord/tensord.sock", dir);
	assert_non_null(strstr(msg, want));
	/* the handle stays unconnected with that error */
	assert_int_equal(tensord_ping(td, NULL, 0), -ENOENT);
	assert_int_equal(tensord_fd(td), -ENOENT);

	/* a socket nobody listens on: refused; from $TENSORD_SOCKET, so named */
	snprintf(path, sizeof(path), "%s/bound.sock", dir);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	snprintf(a.sun_path, sizeof(a.sun_path), "%.100s", path);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	setenv("TENSORD_SOCKET", path, 1);
	assert_int_equal(tensord_open(td, NULL), -ECONNREFUSED);
	msg = tensord_last_error(td);
	assert_non_null(strstr(msg, path));
	assert_non_null(strstr(msg, "$TENSORD_SOCKET"));
	assert_non_null(strstr(msg, "$XDG_RUNTIME_DIR/tensord/tensord.sock"));
	unsetenv("TENSORD_SOCKET");
	close(fd);
	unlink(path);

	/* without $XDG_RUNTIME_DIR the hint says so */
	unsetenv("XDG_RUNTIME_DIR");
	assert_int_equal(tensord_open(td, "/nonexistent/tensord.sock"), -ENOENT);
	assert_non_null(strstr(tensord_last_error(td), "$XDG_RUNTIME_DIR is not set"));

	/* too long a path, or an empty one: said so as well */
	memset(path, 'a', sizeof(path) - 1);
	path[sizeof(path) - 1] = '\0';
	assert_int_equal(tensord_open(td, path), -ENAMETOOLONG);
	assert_non_null(strstr(tensord_last_error(td), "at most"));
	assert_int_equal(tensord_open(td, ""), -EINVAL);

	/* the same handle connects once there is a daemon */
	start_server(&srv, script_ping);
	assert_int_equal(tensord_open(td, srv.path), 0);
	assert_string_equal(tensord_last_error(td), "");
	assert_true(tensord_fd(td) >= 0);
	assert_int_equal(tensord_ping(td, NULL, 0), 0);
	assert_int_equal(tensord_open(td, srv.path), -EISCONN);
	assert_int_equal(tensord_ping(td, NULL, 0), 0);
	assert_int_equal(tensord_set_timeout(td, -1), -EINVAL);
	assert_int_equal(tensord_set_connect_timeout(td, -5), -EINVAL);
	assert_int_equal(tensord_set_timeout(NULL, 10), -EINVAL);
	assert_int_equal(tensord_open(NULL, srv.path), -EINVAL);
	stop(&srv, td);
	rmdir(dir);
}

/* The connect timeout: a listener whose queue of connections not yet
 * accepted is full makes connect() wait; tensord_open() gives up after the
 * timeout with -ETIMEDOUT and says so. (Without the timeout it would wait
 * for ever.) */
static void test_connect_timeout(void **state)
{
	char dir[] = "/tmp/td-ctmo-XXXXXX";
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	struct tensord *td = tensord_new();
	int lfd, queued[16], nq = 0, r;
	double t0, dt;

	(void)state;
	assert_non_null(td);
	assert_non_null(mkdtemp(dir));
	snprintf(a.sun_path, sizeof(a.sun_path), "%s/s.sock", dir);
	lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(lfd >= 0);
	assert_int_equal(bind(lfd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(lfd, 0), 0);
	/* fill the backlog: non-blocking connects until one would wait */
	for (;;) {
		assert_true(nq < 16);
		queued[nq] = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		assert_true(queued[nq] >= 0);
		r = connect(queued[nq], (struct sockaddr *)&a, sizeof(a));
		nq++;
		if (r < 0) {
			assert_int_equal(errno, EAGAIN);
			break;
		}
	}
	assert_int_equal(tensord_set_connect_timeout(td, 300), 0);
	t0 = now_ms();
	assert_int_equal(tensord_open(td, a.sun_path), -ETIMEDOUT);
	dt = now_ms() - t0;
	assert_true(dt >= 250 && dt < 5000);
	assert_non_null(strstr(tensord_last_error(td), a.sun_path));
	assert_non_null(strstr(tensord_last_error(td), "no connection within 300 ms"));
	assert_int_equal(tensord_ping(td, NULL, 0), -ETIMEDOUT);
	tensord_free(td);
	for (int i = 0; i < nq; i++)
		close(queued[i]);
	close(lfd);
	unlink(a.sun_path);
	rmdir(dir);
}

/* The daemon reads the request and never answers (until the client leaves). */
static void script_silent(struct peer *p)
{
	while (read_request(p))
		;
}

/* The daemon reads nothing at all until the client leaves. */
static void script_deaf(struct peer *p)
{
	struct pollfd pfd = { .fd = p->fd, .events = POLLRDHUP };

	poll(&pfd, 1, 20000);
}

/* The call timeout: a daemon that does not answer (or does not read) makes a
 * blocking call fail with -ETIMEDOUT after the time set, not hang; the handle
 * is then broken, and tensord_open() reconnects it. */
static void test_call_timeout(void **state)
{
	struct server srv, srv2, srv3;
	struct tensord *td = start(&srv, script_silent);
	uint64_t shape[1] = { 32u << 20 };
	uint8_t *big;
	uint32_t id;
	void *res;
	size_t len;
	double t0, dt;

	(void)state;
	assert_int_equal(tensord_set_timeout(td, 300), 0);
	t0 = now_ms();
	assert_int_equal(tensord_ping(td, NULL, 0), -ETIMEDOUT);
	dt = now_ms() - t0;
	assert_true(dt >= 250 && dt < 5000);
	assert_non_null(strstr(tensord_last_error(td), "timed out"));
	assert_non_null(strstr(tensord_last_error(td), "300 ms"));
	/* broken: every call says the same, at once */
	assert_int_equal(tensord_ping(td, NULL, 0), -ETIMEDOUT);
	assert_int_equal(tensord_fd(td), -ETIMEDOUT);
	assert_int_equal(tensord_append_delete(td, "x", NULL), -ETIMEDOUT);
	stop(&srv, NULL);

	/* reconnected, the timeout kept */
	start_server(&srv2, script_ping);
	assert_int_equal(tensord_open(td, srv2.path), 0);
	assert_int_equal(tensord_ping(td, NULL, 0), 0);
	assert_int_equal(tensord_open(td, srv2.path), -EISCONN);
	stop(&srv2, td);

	/* a pipelined answer that does not come */
	start_server(&srv2, script_silent);
	td = tensord_new();
	assert_non_null(td);
	assert_int_equal(tensord_set_timeout(td, 300), 0);
	assert_int_equal(tensord_open(td, srv2.path), 0);
	assert_int_equal(tensord_send(td, "ping", NULL, 0, &id), 0);
	t0 = now_ms();
	assert_int_equal(tensord_recv(td, &id, &res, &len), -ETIMEDOUT);
	assert_true(now_ms() - t0 >= 250);
	stop(&srv2, td);

	/* a daemon that reads nothing: writing a large put times out as well */
	big = calloc(1, (size_t)shape[0]);
	assert_non_null(big);
	td = start(&srv3, script_deaf);
	assert_int_equal(tensord_set_timeout(td, 300), 0);
	t0 = now_ms();
	assert_int_equal(tensord_put(td, "big", TENSORD_U8, 1, shape, big, (size_t)shape[0], NULL),
			 -ETIMEDOUT);
	assert_true(now_ms() - t0 >= 250);
	assert_non_null(strstr(tensord_last_error(td), "took no byte"));
	stop(&srv3, td);
	free(big);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_default_socket),
		cmocka_unit_test(test_connect_errors),
		cmocka_unit_test(test_open_messages),
		cmocka_unit_test(test_connect_timeout),
		cmocka_unit_test(test_call_timeout),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* libtensord handles and connecting: a new handle, its timeouts, the default
 * socket path, opening the socket with a message that says what to try when
 * it fails, and freeing the handle. */
#include "connection.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#define DEFAULT_SOCKET "/run/tensord/tensord.sock"

const char *tensord_default_socket(char *buf, size_t cap)
{
	const char *env = getenv("TENSORD_SOCKET"), *run = getenv("XDG_RUNTIME_DIR");
	struct stat st;

	if (env && *env) {
		snprintf(buf, cap, "%s", env);
		return buf;
	}
	/* A user's own daemon listens in the user's runtime directory
	 * (tensord(8), --socket); root's is the system service. */
	if (getuid() != 0 && run && *run) {
		snprintf(buf, cap, "%s/tensord/tensord.sock", run);
		if (stat(buf, &st) == 0 && S_ISSOCK(st.st_mode))
			return buf;
	}
	snprintf(buf, cap, "%s", DEFAULT_SOCKET);
	return buf;
}

/* The message of a handle that is not connected (new, or broken and reset). */
#define NOT_CONNECTED "not connected: tensord_open() connects the handle"

struct tensord *tensord_new(void)
{
	struct tensord *td = calloc(1, sizeof(*td));

	if (!td)
		return NULL;
	td->fd = -1;
	td->next_msgid = 1;
	msgpack_packer_init(&td->pk, &td->out, tdp_buf_msgpack_write);
	msgpack_unpacked_init(&td->reply);
	td->pass_fd = -1;
	/* Every call but tensord_open() fails alike until it is connected. */
	td->broken = -ENOTCONN;
	snprintf(td->error, sizeof(td->error), NOT_CONNECTED);
	return td;
}

int tensord_set_connect_timeout(struct tensord *td, int timeout_ms)
{
	if (!td || timeout_ms < 0)
		return -EINVAL;
	td->connect_timeout_ms = timeout_ms;
	return 0;
}

int tensord_set_timeout(struct tensord *td, int timeout_ms)
{
	if (!td || timeout_ms < 0)
		return -EINVAL;
	td->timeout_ms = timeout_ms;
	return 0;
}

/* Forget the stream: close the socket, drop queued requests, unread answers
 * and the last error. Settings (timeouts, callbacks) stay. */
static void reset_stream(struct tensord *td)
{
	if (td->fd >= 0)
		close(td->fd);
	td->fd = -1;
	msgpack_unpacked_destroy(&td->reply);
	msgpack_unpacked_init(&td->reply);
	td->have_reply = false;
	td->reply_len = 0;
	tdp_buf_free(&td->in);
	tdp_buf_free(&td->out);
	td->building = false;
	td->out_mark = 0;
	td->npending = 0;
	td->kinds_head = 0;
	td->pass_fd = -1;
	td->land = NULL;
	td->landed = 0;
	td->broken = 0;
	td->remote_code = 0;
	td->error[0] = '\0';
}

/* Where the path tried came from, for the hint of a failed connect. */
enum socket_source { FROM_ARGUMENT, FROM_ENV, FROM_USER, FROM_SYSTEM };

/* "$XDG_RUNTIME_DIR/tensord/tensord.sock" and what it is here. */
static void user_socket(char *buf, size_t cap)
{
	const char *run = getenv("XDG_RUNTIME_DIR");

	if (run && *run)
		snprintf(buf, cap, "$XDG_RUNTIME_DIR/tensord/tensord.sock, here %s/tensord/tensord.sock",
			 run);
	else
		snprintf(buf, cap, "$XDG_RUNTIME_DIR/tensord/tensord.sock; $XDG_RUNTIME_DIR is not set");
}

/* Record why connecting to `path` failed with `err`, naming the path, where it
 * came from and what to try (tensorctl's hints, client/ctl/ctl_common.c), and
 * leave the handle unconnected with that error. Returns `err`. */
static int connect_failed(struct tensord *td, int err, const char *path, enum socket_source src)
{
	char user[320];
	const char *what;

	user_socket(user, sizeof(user));
	switch (src) {
	case FROM_ENV: what = " ($TENSORD_SOCKET)"; break;
	case FROM_USER: what = " (your own daemon's socket)"; break;
	case FROM_SYSTEM: what = " (the system service's: $TENSORD_SOCKET is not set and no daemon of "
				 "yours listens in $XDG_RUNTIME_DIR/tensord/)"; break;
	default: what = ""; break;
	}
	if (err == -ENOENT || err == -ECONNREFUSED) {
		const char *hint;

		switch (src) {
		case FROM_ENV:
			hint = "start tensord --socket on that path, or unset TENSORD_SOCKET to use "
			       "your own daemon's socket";
			break;
		case FROM_USER:
			hint = "the daemon that listened there is gone: start tensord again; your own "
			       "daemon's socket is";
			break;
		case FROM_SYSTEM:
			hint = "start the service (systemctl start tensord.socket), or a daemon of your "
			       "own (tensord), which listens at";
			break;
		default:
			hint = "start tensord --socket on that path; a daemon of your own listens by "
			       "default at";
			break;
		}
		snprintf(td->error, sizeof(td->error),
			 "cannot connect to %s%s: %s \u2014 is tensord running? %s%s%s%s", path, what,
			 strerror(-err), hint, src == FROM_ENV ? " (" : " ", user,
			 src == FROM_ENV ? ")" : "");
	} else if (err == -EACCES || err == -EPERM) {
		snprintf(td->error, sizeof(td->error),
			 "cannot connect to %s%s: %s \u2014 the socket's owner or group must let you in "
			 "(docs/security.md), or run a daemon of your own (tensord), which listens at %s",
			 path, what, strerror(-err), user);
	} else if (err == -ETIMEDOUT) {
		snprintf(td->error, sizeof(td->error),
			 "cannot connect to %s%s: no connection within %d ms "
			 "(tensord_set_connect_timeout()) \u2014 the daemon is not accepting connections "
			 "(stopped, or too many waiting)", path, what, td->connect_timeout_ms);
	} else {
		snprintf(td->error, sizeof(td->error), "cannot connect to %s%s: %s", path, what,
			 strerror(-err));
	}
	td->remote_code = 0;
	td->broken = err;
	return err;
}

/* socket() and connect() to `addr`, within the connect timeout: a Unix
 * stream connect waits only while the listener's backlog is full, for at most
 * SO_SNDTIMEO, then fails with EAGAIN. On success td->fd is the connected,
 * non-blocking, close-on-exec socket. */
static int connect_socket(struct tensord *td, const struct sockaddr_un *addr)
{
	struct timeval tv = { 0 };
	int fd, r;

	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	tv.tv_sec = td->connect_timeout_ms / 1000;
	tv.tv_usec = (td->connect_timeout_ms % 1000) * 1000;
	if (td->connect_timeout_ms > 0 && setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0)
		goto fail;
	while (connect(fd, (const struct sockaddr *)addr, sizeof(*addr)) < 0) {
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN && td->connect_timeout_ms > 0)
			errno = ETIMEDOUT;
		goto fail;
	}
	tv.tv_sec = tv.tv_usec = 0;
	if ((td->connect_timeout_ms > 0 &&
	     setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0) ||
	    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0)
		goto fail;
	td->fd = fd;
	return 0;
fail:
	r = -errno;
	close(fd);
	return r;
}

int tensord_open(struct tensord *td, const char *path)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	char fallback[sizeof(addr.sun_path) + 1];
	enum socket_source src = FROM_ARGUMENT;
	const char *env = getenv("TENSORD_SOCKET");
	size_t len;
	int r;

	if (!td)
		return -EINVAL;
	if (td->in_notify)
		return tdc_fail(td, -EBUSY, "called from a callback of the same handle");
	if (td->fd >= 0 && !td->broken)
		return tdc_fail(td, -EISCONN, "already connected");
	reset_stream(td);
	if (!path) {
		path = tensord_default_socket(fallback, sizeof(fallback));
		src = env && *env ? FROM_ENV : strcmp(path, DEFAULT_SOCKET) == 0 ? FROM_SYSTEM : FROM_USER;
	}
	len = strlen(path);
	if (len == 0) {
		snprintf(td->error, sizeof(td->error), "cannot connect: the socket path is empty");
		td->broken = -EINVAL;
		return -EINVAL;
	}
	if (len >= sizeof(addr.sun_path)) {
		snprintf(td->error, sizeof(td->error),
			 "cannot connect to %.*s...: the path is %zu bytes, a Unix socket's at most %zu",
			 64, path, len, sizeof(addr.sun_path) - 1);
		td->broken = -ENAMETOOLONG;
		return -ENAMETOOLONG;
	}
	memcpy(addr.sun_path, path, len + 1);
	if ((r = connect_socket(td, &addr)) < 0)
		return connect_failed(td, r, path, src);
	return 0;
}

int tensord_connect(const char *path, struct tensord **ret)
{
	struct tensord *td;
	int r;

	if (!ret)
		return -EINVAL;
	td = tensord_new();
	if (!td)
		return -ENOMEM;
	if ((r = tensord_open(td, path)) < 0) {
		tensord_free(td);
		return r;
	}
	*ret = td;
	return 0;
}

void tensord_free(struct tensord *td)
{
	if (!td)
		return;
	if (td->fd >= 0)
		close(td->fd);
	msgpack_unpacked_destroy(&td->reply);
	tdp_buf_free(&td->in);
	tdp_buf_free(&td->out);
	tdp_buf_free(&td->notify_buf);
	free(td->kinds);
	free(td);
}

#include "serve/server.h"
#include "gpu/device.h"

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/loop.h"
#include "daemon.h"
#include "devices.h"
#include "methods/request.h"
#include "methods.h"
#include "rpc.h"
#include "serve/conn.h"
#include "status.h"

struct server {
	struct daemon *d;
	struct loop_source listener;
	struct loop_source trim_timer;  /* once a second: conn_tick */
	struct loop_source resume;      /* eventfd: connections wait for another turn */
	char *unlink_path;
	struct conn *conns;
	bool accept_paused;     /* out of descriptors: wait for a connection to close */
	bool freed;             /* connections were freed since the last trim */
	bool stopped;           /* server_stop_serving: no new requests */
};

static int fill_addr(const char *path, struct sockaddr_un *sa)
{
	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	if (strlen(path) >= sizeof(sa->sun_path))
		return -ENAMETOOLONG;
	memcpy(sa->sun_path, path, strlen(path));
	return 0;
}

/* Is someone accepting on `sa`? */
static bool socket_alive(const struct sockaddr_un *sa)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	bool alive;

	if (fd < 0)
		return false;
	alive = connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) == 0 || errno != ECONNREFUSED;
	close(fd);
	return alive;
}

int server_listen_path(const char *path, int *ret_fd)
{
	struct sockaddr_un sa;
	int fd, r;

	r = fill_addr(path, &sa);
	if (r < 0)
		return r;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		r = -errno;
		if (r != -EADDRINUSE || socket_alive(&sa))
			goto fail;
		/* A stale file from a daemon that died: take its place. */
		unlink(path);
		if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
			r = -errno;
			goto fail;
		}
	}
	if (listen(fd, SOMAXCONN) < 0) {
		r = -errno;
		unlink(path);
		goto fail;
	}
	*ret_fd = fd;
	return 0;
fail:
	close(fd);
	return r;
}

static void refuse(int fd, const char *why)
{
	struct tdp_buf b = { 0 };
	msgpack_packer pk;

	msgpack_packer_init(&pk, &b, tdp_buf_msgpack_write);
	if (tdp_write_error_notification(&pk, TDP_NOTIFY_PROTOCOL_ERROR, TDP_UNAVAILABLE, why) == 0)
		(void)!send(fd, tdp_buf_head(&b), tdp_buf_len(&b), MSG_NOSIGNAL | MSG_DONTWAIT);
	tdp_buf_free(&b);
	close(fd);
}

/* Live connections of `uid`. */
static uint64_t user_connections(const struct server *s, uid_t uid)
{
	uint64_t n = 0;

	for (const struct conn *c = s->conns; c; c = c->next)
		n += !c->dead && c->uid == uid;
	return n;
}

uint64_t server_user_buffered(const struct server *s, uid_t uid, const struct conn *except)
{
	uint64_t n = 0;

	for (const struct conn *c = s->conns; c; c = c->next)
		if (!c->dead && c->uid == uid && c != except)
			n += tdp_buf_len(&c->in) + tdp_buf_len(&c->out) +
			     (c->deferred ? c->deferred->held_bytes : 0);
	return n;
}

/* Connection slots only root may take: 1/64 of max_connections, so that an
 * administrator gets in while other users hold every other slot. */
static uint64_t root_reserved(const struct config *cfg)
{
	return cfg->max_connections / 64;
}

static void on_listener(void *data, uint32_t events)
{
	struct server *s = data;

	for (;;) {
		int fd = accept4(s->listener.fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		struct access_cred cred;
		struct usage_user *who;
		char why[160];
		uint64_t mine;
		struct conn *c;

		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
				log_warning("cannot accept: %s; waiting for a connection to close",
					    strerror(errno));
				s->accept_paused = true;
				loop_modify(s->d->loop, &s->listener, 0);
			}
			return;
		}
		if (access_cred_from_socket(fd, &cred) < 0) {
			log_warning("refusing a connection whose peer cannot be identified (SO_PEERCRED)");
			s->d->metrics.connections_refused++;
			refuse(fd, "the peer's credentials cannot be read");
			continue;
		}
		if (s->d->metrics.connections_open >= s->d->cfg.max_connections ||
		    (cred.uid != 0 && s->d->metrics.connections_open >= s->d->cfg.max_connections - root_reserved(&s->d->cfg))) {
			log_warning("refusing pid %d (uid %u): %llu clients connected (max_connections %llu)",
				    (int)cred.pid, (unsigned)cred.uid, (unsigned long long)s->d->metrics.connections_open,
				    (unsigned long long)s->d->cfg.max_connections);
			snprintf(why, sizeof(why), "too many connections: %llu clients connected (max_connections)",
				 (unsigned long long)s->d->metrics.connections_open);
			s->d->metrics.connections_refused++;
			refuse(fd, why);
			continue;
		}
		if (s->d->cfg.max_connections_per_user &&
		    (mine = user_connections(s, cred.uid)) >= s->d->cfg.max_connections_per_user) {
			log_warning("refusing pid %d (uid %u): the uid has %llu connections "
				    "(max_connections_per_user %llu)", (int)cred.pid, (unsigned)cred.uid,
				    (unsigned long long)mine,
				    (unsigned long long)s->d->cfg.max_connections_per_user);
			snprintf(why, sizeof(why), "too many connections: uid %u has %llu "
				 "(max_connections_per_user)", (unsigned)cred.uid, (unsigned long long)mine);
			s->d->metrics.connections_refused++;
			refuse(fd, why);
			continue;
		}
		c = conn_new(s->d, fd, &cred);
		if (!c) {
			log_error("cannot set up a connection");
			continue;
		}
		log_debug("connection from pid %d uid %d", (int)c->pid, (int)c->uid);
		c->next = s->conns;
		s->conns = c;
		s->d->metrics.connections_open++;
		s->d->metrics.connections++;
		if ((who = usage_of(&s->d->usage, (uint32_t)cred.uid)))
			who->connections++;
	}
}

/* After each batch: free the connections that closed during it. */
static void reap(void *data)
{
	struct server *s = data;
	struct conn **pp = &s->conns;
	bool freed = false;

	while (*pp) {
		struct conn *c = *pp;

		if (c->dead) {
			struct usage_user *who = usage_of(&s->d->usage, (uint32_t)c->uid);

			if (who && who->connections)
				who->connections--;
			*pp = c->next;
			conn_free(c);
			s->d->metrics.connections_open--;
			freed = true;
			s->freed = true;
		} else {
			pp = &c->next;
		}
	}
	if (freed && s->accept_paused) {
		s->accept_paused = false;
		loop_modify(s->d->loop, &s->listener, EPOLLIN);
	}
}

static void on_trim_timer(void *data, uint32_t events)
{
	struct server *s = data;
	int64_t now = daemon_now_ns(CLOCK_MONOTONIC);
	uint64_t ticks;

	if (read(s->trim_timer.fd, &ticks, sizeof(ticks)) < 0)
		return;
	for (struct conn *c = s->conns; c; c = c->next)
		conn_tick(c, now);
	/* A big block parked for reuse goes back to the driver after 2 s. */
	for (uint32_t id = 0; id < s->d->ngpus; id++)
		if (s->d->gpus[id])
			gpu_memory_trim(s->d->gpus[id], now - 2000000000);
	devices_sample_load(s->d, now);
	/* Closed connections leave free pages inside malloc's heap, which glibc
	 * keeps unless asked: give them back, so that the daemon's resident
	 * memory returns to its baseline after a burst of clients. */
	if (s->freed) {
		s->freed = false;
		malloc_trim(0);
	}
}

static void on_resume(void *data, uint32_t events)
{
	struct server *s = data;
	uint64_t n;

	if (read(s->resume.fd, &n, sizeof(n)) < 0)
		return;
	/* Each gets one more turn; one that still has work asks again. */
	for (struct conn *c = s->conns; c; c = c->next)
		if (c->resume)
			conn_resume(c);
}

void server_stop_serving(struct server *s)
{
	s->stopped = true;
}

bool server_serving(const struct server *s)
{
	return !s || !s->stopped;
}

void server_resume_later(struct server *s)
{
	uint64_t one = 1;

	if (s->resume.fd >= 0 && write(s->resume.fd, &one, sizeof(one)) < 0)
		log_debug("cannot signal the resume eventfd: %s", strerror(errno));
}

/* loop_busy's filter: a connection that waits for the answers of its
 * batched op.runs (or closed) has nothing the loop could serve now. */
static bool counts_as_work(const struct loop_source *src)
{
	const struct conn *c = src->data;

	return !conn_source(src) || !(c->dead || c->batched);
}

static int start_resume(struct server *s)
{
	int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);

	if (fd < 0)
		return -errno;
	s->resume = (struct loop_source){ .fd = fd, .fn = on_resume, .data = s };
	if (loop_add(s->d->loop, &s->resume, EPOLLIN) < 0) {
		close(fd);
		s->resume.fd = -1;
		return -EIO;
	}
	return 0;
}

static int start_trim_timer(struct server *s)
{
	struct itimerspec its = { .it_interval.tv_sec = 1, .it_value.tv_sec = 1 };
	int fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);

	if (fd < 0)
		return -errno;
	timerfd_settime(fd, 0, &its, NULL);
	s->trim_timer = (struct loop_source){ .fd = fd, .fn = on_trim_timer, .data = s };
	if (loop_add(s->d->loop, &s->trim_timer, EPOLLIN) < 0) {
		close(fd);
		s->trim_timer.fd = -1;
		return -EIO;
	}
	return 0;
}

struct server *server_new(struct daemon *d, int listen_fd, const char *unlink_path)
{
	struct server *s = calloc(1, sizeof(*s));
	int flags;

	if (!s)
		return NULL;
	s->d = d;
	s->trim_timer.fd = -1;
	s->resume.fd = -1;
	flags = fcntl(listen_fd, F_GETFL);
	if (flags >= 0)
		fcntl(listen_fd, F_SETFL, flags | O_NONBLOCK);
	fcntl(listen_fd, F_SETFD, FD_CLOEXEC);
	s->listener = (struct loop_source){ .fd = listen_fd, .fn = on_listener, .data = s };
	if (unlink_path && !(s->unlink_path = strdup(unlink_path))) {
		free(s);
		return NULL;
	}
	if (loop_add_after(d->loop, reap, s) < 0) {
		free(s->unlink_path);
		free(s);
		return NULL;
	}
	if (loop_add(d->loop, &s->listener, EPOLLIN) < 0) {
		loop_remove_after(d->loop, reap, s);
		free(s->unlink_path);
		free(s);
		return NULL;
	}
	if (start_trim_timer(s) < 0)
		log_warning("cannot start the upkeep timer; idle buffers stay and stalled clients stay connected");
	if (start_resume(s) < 0) {
		loop_remove_after(d->loop, reap, s);
		loop_remove(d->loop, &s->listener);
		if (s->trim_timer.fd >= 0) {
			loop_remove(d->loop, &s->trim_timer);
			close(s->trim_timer.fd);
		}
		free(s->unlink_path);
		free(s);
		return NULL;
	}
	loop_set_counts(d->loop, counts_as_work);
	return s;
}

void server_free(struct server *s)
{
	if (!s)
		return;
	while (s->conns) {
		struct conn *c = s->conns;

		s->conns = c->next;
		conn_free(c);
	}
	loop_remove_after(s->d->loop, reap, s);
	loop_set_counts(s->d->loop, NULL);
	loop_remove(s->d->loop, &s->listener);
	if (s->trim_timer.fd >= 0) {
		loop_remove(s->d->loop, &s->trim_timer);
		close(s->trim_timer.fd);
	}
	if (s->resume.fd >= 0) {
		loop_remove(s->d->loop, &s->resume);
		close(s->resume.fd);
	}
	close(s->listener.fd);
	if (s->unlink_path) {
		unlink(s->unlink_path);
		free(s->unlink_path);
	}
	free(s);
}

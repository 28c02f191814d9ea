/* The listening socket and the set of client connections. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct daemon;
struct server;
struct conn;

/* Create, bind and listen on a Unix stream socket at `path`, non-blocking and
 * close-on-exec. A stale socket file nobody listens on is replaced; a live one
 * is not (-EADDRINUSE). Returns 0 or -errno. */
int server_listen_path(const char *path, int *ret_fd);

/* Serve connections arriving on `listen_fd` (taken over; made non-blocking).
 * `unlink_path` names a socket file to remove on shutdown, or is NULL.
 * NULL on ENOMEM or when the loop refuses the descriptor. */
struct server *server_new(struct daemon *d, int listen_fd, const char *unlink_path);

/* Close every connection and the listening socket; NULL is accepted. */
void server_free(struct server *s);


/* The loop stopped (SIGTERM): from now on connections only send the
 * answers of requests already running (finished by gpu_completion_stop)
 * and serve no new ones, which would start work nothing finishes. */
void server_stop_serving(struct server *s);

/* Whether connections serve requests (not after server_stop_serving). */
bool server_serving(const struct server *s);

/* Ask for conn_resume() on every connection marked `resume`, after the loop
 * has looked at other clients' events. */
void server_resume_later(struct server *s);

/* Bytes buffered (input and output) by the live connections of `uid` other
 * than `except` (may be NULL): user_max_buffer_bytes (docs/security.md). */
uint64_t server_user_buffered(const struct server *s, uid_t uid, const struct conn *except);

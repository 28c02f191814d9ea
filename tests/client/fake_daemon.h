/* A scripted fake tensord for libtensord's wire tests: a thread listens on
 * a fresh socket in a temporary directory and serves one connection with a
 * script, which reads the client's requests and writes whatever replies
 * (good or broken) the test wants. Shared by test_client_wire.c,
 * test_client_connect.c and test_client_events.c. */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#include "buf.h"
#include "rpc.h"
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

/* Read one whole request into p->req / p->msg; false at EOF. The objects
 * point into p->in and stay valid until the next read. */
bool read_request(struct peer *p);

/* Write the `n` bytes at `b` to the client, at most `chunk` per send();
 * stops quietly when the client has gone. */
void write_bytes(struct peer *p, const void *b, size_t n, size_t chunk);

/* Write `sb` as write_bytes() does, then destroy it. */
void send_sbuf(struct peer *p, msgpack_sbuffer *sb, size_t chunk);

/* Start a reply [1, msgid, nil, ...] to the last request in a fresh `sb`,
 * with `pk` packing into it; the caller packs the result. */
void reply_head(struct peer *p, msgpack_sbuffer *sb, msgpack_packer *pk, uint32_t msgid);

/* Start a notification [2, method, params] in a fresh `sb`, with `pk`
 * packing into it; the caller packs the params array. */
void notify_head(msgpack_sbuffer *sb, msgpack_packer *pk, const char *method);

/* Answer request `msgid` with an error of `code` and `message`. */
void send_error(struct peer *p, uint32_t msgid, int code, const char *message);

/* Pack tensor metadata for `name` (f32 [2, 3], 24 bytes, owner 1000, version
 * 7): a map of 8 + `extra_keys` entries, the caller packing the extra ones. */
void pack_info(msgpack_packer *pk, const char *name, unsigned extra_keys);

/* Listen on a fresh socket (srv->path) and serve one connection with `script`. */
void start_server(struct server *srv, script_fn script);

/* start_server(), then a handle connected to it (tensord_connect()). */
struct tensord *start(struct server *srv, script_fn script);

/* Free `td` (may be NULL), wait for the script to end, and remove the socket
 * and its directory. */
void stop(struct server *srv, struct tensord *td);

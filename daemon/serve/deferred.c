/* Deferred answers (methods/request.h, request_defer): the connection side
 * of a reply a handler gives later, and of an op.run batch. A file of its
 * own so that the fuzz harness, which stands in for the rest of conn.c,
 * runs the real thing. */
#include <msgpack.h>

#include "daemon.h"
#include "methods/request.h"
#include "rpc.h"
#include "serve/conn.h"
#include "serve/server.h"
#include "status.h"

int request_defer(struct request *req, struct request_deferred *def, struct request *later,
		  msgpack_packer *pk)
{
	struct conn *c = req->conn;

	if (!c)
		return request_fail(req, TDP_INTERNAL, "%s needs a connection", req->method);
	*later = *req;
	later->params = NULL;
	later->method = request_method_name(req->slot); /* req's is the dispatcher's buffer */
	later->out = &c->out;
	msgpack_packer_init(pk, &c->out, tdp_buf_msgpack_write);
	later->pk = pk;
	c->deferred = def;
	return 0;
}

int request_defer_batched(struct request *req, struct request *later, msgpack_packer *pk)
{
	struct conn *c = req->conn;

	if (!c)
		return request_fail(req, TDP_INTERNAL, "%s needs a connection", req->method);
	*later = *req;
	later->params = NULL;
	later->fds = NULL;
	later->nfds = 0;
	later->method = request_method_name(req->slot);
	later->out = &c->out;
	msgpack_packer_init(pk, &c->out, tdp_buf_msgpack_write);
	later->pk = pk;
	c->batched++;
	return 0;
}

void request_batch_hold(const struct request *later)
{
	later->conn->batch_held = true;
}

bool request_batch_pending(const struct request *req)
{
	return req->conn->batched > 0;
}

void request_batch_done(const struct request *later)
{
	struct conn *c = later->conn;

	if (c->batched && --c->batched == 0)
		c->batch_held = false;
}

void request_batch_kick(const struct request *later, bool now)
{
	struct conn *c = later->conn;

	if (c->dead)
		return;
	if (now) {
		conn_serve(c);
	} else if (!c->resume) {
		c->resume = true;
		server_resume_later(c->d->server);
	}
}

bool request_conn_source(const struct loop_source *src)
{
	return conn_source(src);
}

uint64_t request_user_buffered(const struct request *req, uint64_t *ret_limit)
{
	struct conn *c = req->conn;

	*ret_limit = c ? c->d->cfg.user_max_buffer_bytes : 0;
	return c && c->d->server ? server_user_buffered(c->d->server, c->uid, NULL) : 0;
}

bool request_backlogged(const struct request *later)
{
	return conn_backlogged(later->conn);
}

void request_flush(const struct request *later)
{
	conn_kick(later->conn);
}

void request_wake(const struct request *later)
{
	request_batch_kick(later, false);
}

void request_deferred_done(const struct request *later)
{
	later->conn->deferred = NULL;
	conn_kick(later->conn);
}

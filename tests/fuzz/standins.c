/* What the daemon's layers reach of the event loop and the connections,
 * for programs that run them with neither (fuzz-params, the unit tests of
 * the engine and a training step): compiled into each such program as an
 * object, so the linker never takes serve/conn.c or base/loop.c from their
 * archives (tests/fuzz/meson.build says how the link works). */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/loop.h"
#include "serve/conn.h"
#include "serve/server.h"

void conn_kick(struct conn *c)
{
	(void)c;
}

uint64_t server_user_buffered(const struct server *s, uid_t uid, const struct conn *except)
{
	(void)s;
	(void)uid;
	(void)except;
	return 0; /* one connection, whose buffers these programs keep small */
}

bool conn_backlogged(const struct conn *c)
{
	(void)c;
	return false;
}

void loop_wake_idle(struct loop *l)
{
	(void)l;
}

/* The checkpoint timer (checkpoint.c); these programs have no persistence. */
int loop_add(struct loop *l, struct loop_source *src, uint32_t events)
{
	(void)l, (void)src, (void)events;
	return -ENOSYS;
}

void loop_remove(struct loop *l, struct loop_source *src)
{
	(void)l, (void)src;
}

/* kernel_compile_job.c's hook; these programs compile GLSL in process. */
int loop_add_after(struct loop *l, void (*after)(void *data), void *data)
{
	(void)l, (void)after, (void)data;
	return -ENOSYS;
}

void server_resume_later(struct server *s)
{
	(void)s;
}

/* op_batch.c's hooks (op_batch_init, op_batch_free); these programs run
 * no loop. */
int loop_add_before(struct loop *l, void (*before)(void *data, const struct loop_source *src),
		    void *data)
{
	(void)l, (void)before, (void)data;
	return -ENOSYS;
}

void loop_remove_before(struct loop *l, void (*before)(void *data, const struct loop_source *src),
			void *data)
{
	(void)l, (void)before, (void)data;
}

void loop_remove_after(struct loop *l, void (*after)(void *data), void *data)
{
	(void)l, (void)after, (void)data;
}

/* request_conn_source (serve/deferred.c): these programs have no
 * connections. */
bool conn_source(const struct loop_source *src)
{
	(void)src;
	return false;
}

/* op_batch.c asks before waiting for the device; nothing else runs here. */
bool loop_busy(struct loop *l)
{
	(void)l;
	return false;
}

void conn_serve(struct conn *c)
{
	(void)c;
}

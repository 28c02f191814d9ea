/* tensord built without MPI (meson -Dmpi=disabled): no group (cluster.h). */
#include "train/cluster.h"

#include <errno.h>
#include <stdlib.h>

#include "base/log.h"

bool cluster_built(void)
{
	return false;
}

int cluster_start(struct loop *loop, uint64_t timeout_ms,
		  int (*on_ctrl)(void *data, int from, const void *msg, size_t len), void *data,
		  struct cluster **ret)
{
	(void)loop;
	(void)timeout_ms;
	(void)on_ctrl;
	(void)data;
	(void)ret;
	log_error("cluster: this tensord was built without MPI (meson -Dmpi=enabled)");
	return -ENOTSUP;
}

bool cluster_stop(struct cluster *c)
{
	(void)c;
	return true;
}

struct cluster_state cluster_state(const struct cluster *c)
{
	(void)c;
	return (struct cluster_state){ .size = 1, .why = "" };
}

void cluster_break(struct cluster *c, const char *why)
{
	(void)c;
	(void)why;
}

struct cluster_op *cluster_op_new(size_t bytes)
{
	(void)bytes;
	return NULL;
}

void *cluster_op_data(struct cluster_op *op)
{
	(void)op;
	return NULL;
}

void cluster_allreduce_f32(struct cluster *c, struct cluster_op *op, size_t count)
{
	(void)c;
	(void)op;
	(void)count;
}

void cluster_allgather(struct cluster *c, struct cluster_op *op, size_t bytes)
{
	(void)c;
	(void)op;
	(void)bytes;
}

void cluster_bcast(struct cluster *c, struct cluster_op *op, int root)
{
	(void)c;
	(void)op;
	(void)root;
}

void cluster_send_ctrl(struct cluster *c, struct cluster_op *op)
{
	(void)c;
	(void)op;
}

int cluster_op_poll(struct cluster_op *op)
{
	(void)op;
	return -1;
}

void cluster_op_free(struct cluster *c, struct cluster_op *op)
{
	(void)c;
	(void)op;
}

void cluster_kick(struct cluster *c)
{
	(void)c;
}

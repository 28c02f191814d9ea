/* A group of tensord processes started together by mpirun (docs/cluster.md).
 * Every MPI call happens on one thread of the cluster's own (cluster_mpi.c);
 * the loop thread queues operations and polls them, woken through an
 * eventfd when one ends, and never blocks on MPI. Built without MPI
 * (meson -Dmpi=disabled), cluster_none.c answers that there is no group.
 * No MPI type appears here. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct loop;
struct cluster;

/* One queued operation; opaque. */
struct cluster_op;

/* The group, as info shows it. */
struct cluster_state {
	int rank, size;
	bool broken;               /* a member died, left or timed out: no more group runs */
	const char *why;           /* why it is broken, "" otherwise */
};

/* Whether this tensord was built with MPI. */
bool cluster_built(void);

/* The rank mpirun gave this process ($OMPI_COMM_WORLD_RANK), or -1 when
 * it was not started by mpirun. Readable before cluster_start. */
int cluster_env_rank(void);

/* The rank among the members on this host ($OMPI_COMM_WORLD_LOCAL_RANK), or
 * -1 when unknown. */
int cluster_env_local_rank(void);

/* How many members run on this host ($OMPI_COMM_WORLD_LOCAL_SIZE), or -1. */
int cluster_env_local_size(void);

/* Replace every "%r" in `path` (size `size`) with `rank`. Returns 0, or
 * -ENAMETOOLONG when the result does not fit (path unchanged). */
int cluster_expand_rank(char *path, size_t size, int rank);

/* Join the group: start the MPI thread (MPI_Init_thread there) and wait for
 * it to come up. `timeout_ms` bounds every later operation. Control messages
 * arriving from other members are handed to `on_ctrl` on the loop thread, in
 * order; it returns 0 when it took one, -EAGAIN to be handed it again after
 * the next cluster_kick. Returns 0 with *ret set, or -errno (-ENOTSUP: built
 * without MPI) with a reason logged. */
int cluster_start(struct loop *loop, uint64_t timeout_ms,
		  int (*on_ctrl)(void *data, int from, const void *msg, size_t len), void *data,
		  struct cluster **ret);

/* Hand the waiting control messages to on_ctrl again (soon, from the
 * loop). */
void cluster_kick(struct cluster *c);

/* Leave the group at shut-down: tell the others, MPI_Finalize when the group
 * is healthy, waiting at most the timeout. Returns true when the MPI thread
 * ended (the process may exit normally), false when it is stuck in MPI (exit
 * with _exit). NULL is accepted (true). */
bool cluster_stop(struct cluster *c);

/* Where the group stands. */
struct cluster_state cluster_state(const struct cluster *c);

/* Mark the group broken for `why` (a member's run failed in a way that
 * leaves the collectives out of step). */
void cluster_break(struct cluster *c, const char *why);

/* A new operation with room for `bytes` of data (cluster_op_data); NULL when
 * out of memory. */
struct cluster_op *cluster_op_new(size_t bytes);

/* Its data: what is sent before it runs, what came back after. */
void *cluster_op_data(struct cluster_op *op);

/* Queue `op` on the MPI thread: the element-wise f32 sum over the group of
 * `count` floats of its data (MPI_Iallreduce). */
void cluster_allreduce_f32(struct cluster *c, struct cluster_op *op, size_t count);

/* Queue: every member's `bytes` (its data's start) into the data, member
 * after member (MPI_Iallgather); the op needs size * bytes of room. */
void cluster_allgather(struct cluster *c, struct cluster_op *op, size_t bytes);

/* Queue: `root`'s data, its whole size, to every member (MPI_Ibcast). */
void cluster_bcast(struct cluster *c, struct cluster_op *op, int root);

/* Queue: the data as a control message to every other member (on_ctrl
 * there). */
void cluster_send_ctrl(struct cluster *c, struct cluster_op *op);

/* 1 while `op` runs, 0 once done, -1 when it failed: the group is broken
 * (cluster_state says why). */
int cluster_op_poll(struct cluster_op *op);

/* Free `op`; one still running (or abandoned on a time-out) is freed by the
 * cluster when MPI no longer can touch it. NULL is accepted. */
void cluster_op_free(struct cluster *c, struct cluster_op *op);

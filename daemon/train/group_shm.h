/* The gradient exchange of a group whose members share one host
 * (docs/cluster.md, "Members on one host"): one POSIX shared-memory region
 * that every member maps and imports into its device, with a slot per member
 * and step parity. Each member's backward copies its gradients into its slot
 * bucket by bucket; once a tiny MPI allreduce (the step's loss and flags)
 * says every member's slot is written, each member's update starts with the
 * mean kernel over the slots (gpu_rec_host_mean), as data parallel within one
 * daemon does. Two parities: a member that starts step k+1 writes slots the
 * others' step-k update no longer reads (none can be two steps ahead: the
 * step's allreduce waits for all). */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "gpu/host_import.h"

struct gpu_device;
struct graph;
struct graph_copy;

struct group_shm {
	struct gpu_device *g;
	void *map;
	uint64_t size, stride;     /* the region; one slot's size */
	uint64_t flat_count;       /* f32 gradients per slot */
	unsigned n, self;          /* members, this one's slot */
	struct gpu_host_import imp;
	bool imported;
};

/* A random token that names a region (rank 0's, sent in its report). */
uint64_t group_shm_token(void);

/* Create (rank 0, `create`) or open the region named by `token` for `n`
 * members' `flat_count` f32 gradients, map it and import it into `g`; `self`
 * is this member's slot. The region is created owner-only and, when opened,
 * must belong to this process's user and have the size expected. Returns 0
 * with *ret, or -errno (-EOPNOTSUPP: `g` imports no host memory, or refused
 * this memory; -ENOSPC: no room in /dev/shm) after logging why at info level. */
int group_shm_open(struct gpu_device *g, uint64_t token, bool create, unsigned n, unsigned self,
		   uint64_t flat_count, struct group_shm **ret);

/* Remove the region's name (rank 0, once every member opened it or gave up);
 * the mappings stay. */
void group_shm_unlink(uint64_t token);

/* The copies of graph `gr`'s flat gradient (node `flat`) into this member's
 * slot of the step's parity: bucketed (graph.copies_at, returns how many in
 * ret, room for `max`) when the graph allows, else 0 and *whole (for
 * graph.copies_after) is the one copy of the whole. */
unsigned group_shm_out(const struct group_shm *s, int64_t step, const struct graph *gr, int flat,
		       struct graph_copy *ret, unsigned max, struct graph_copy *whole);

/* The mean kernel over every member's slot of the step's parity into node
 * `flat` (a copy before the update part). */
struct graph_copy group_shm_in(const struct group_shm *s, int64_t step, int flat);

/* Unimport, unmap, free (no submission may still use it); NULL is accepted. */
void group_shm_free(struct group_shm *s);

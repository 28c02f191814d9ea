/* The gradient exchange of a group whose members share one host
 * (docs/cluster.md, "Members on one host"): one POSIX shared-memory region
 * that every member maps and imports into its device, with a slot per member
 * and step parity and a signal word per member. Each member's backward
 * copies its gradients into its slot bucket by bucket and then signals;
 * each member's thread (dp_sync.h) lets its device go on once every member
 * signalled, and the update starts with the mean kernel over the slots
 * (gpu_rec_host_mean), as data parallel within one daemon does; the step
 * is one submission. Two parities: a member that starts step k+1 writes
 * slots the others' step-k update no longer reads (none can be two steps
 * ahead: the step's MPI allreduce of loss and flags, before its commit,
 * waits for all). */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "gpu/host_import.h"

struct gpu_alloc;
struct gpu_device;
struct gpu_recorder;
struct graph;
struct graph_copy;

struct group_shm {
	struct gpu_device *g;
	void *map;
	uint64_t size, stride;     /* the region; one slot's size */
	uint64_t flags;            /* where the members' signals (dp_sync.h) start */
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

/* Member k's signal word (dp_sync.h): the tag of the last step whose
 * gradients it has in its slot. */
const volatile uint32_t *group_shm_signal(const struct group_shm *s, unsigned k);

/* Write this member's signal from the host (a step that failed before its
 * device signalled: the others must not wait for it). */
void group_shm_signal_host(const struct group_shm *s, uint32_t value);

/* Record on this member's device, after its flat gradient `grad` of step
 * number `step` was made (with `bucketed`, already copied into the slot
 * bucket by bucket): the whole copy otherwise, the signal `tag`, the wait
 * for `event` (set once every member signalled), then the mean kernel over
 * every member's slot into `grad`. Returns 0 or -errno. */
int group_shm_record_exchange(const struct group_shm *s, struct gpu_recorder *rec, int64_t step,
			      const struct gpu_alloc *grad, bool bucketed, uint32_t tag, VkEvent event);

/* Unimport, unmap, free (no submission may still use it); NULL is accepted. */
void group_shm_free(struct group_shm *s);

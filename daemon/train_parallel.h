/* Data-parallel training's replicas (docs/devices.md, "Data-parallel
 * training"): copies of the tensors a step reads (parameters, optimizer
 * state, data) on each further device, outside the store, kept up to date by
 * committing each replica's step results into them, and the host-side
 * averaging of the devices' gradients. train.c drives the steps. */
#pragma once

#include <stdint.h>

#include "gpu/device.h"
#include "graph_core.h"
#include "store.h"

struct daemon;

/* One further device's copies. `view` is what its step graphs use
 * (graph_core.h): every copy by name, and `index`, its shard's row numbers. */
struct dp_replica {
	uint32_t device;
	struct tensor **tensors;
	unsigned n, cap;
	struct tensor *index;      /* "#index", also in tensors */
	struct graph_replica view;
};

struct dp {
	struct daemon *d;
	unsigned n;                /* replicas: the devices after the first */
	struct dp_replica r[GPU_MAX_DEVICES - 1];
	float *sum;                /* host buffers for averaging */
	float *one;
	uint64_t cap;              /* elements each holds */
};

/* Replicas on `devices[1..ndev)` of the `ncopy` stored tensors `copy` (the
 * tensors the first step's graph reads) with a `shard`-row index each.
 * Returns 0 or -errno (-ENOMEM, -EFBIG/-ENOMEM for device memory, -ENODEV);
 * *ret is freed with dp_free. */
int dp_start(struct daemon *d, const uint32_t *devices, unsigned ndev, struct tensor *const *copy,
	     unsigned ncopy, uint64_t shard, struct dp **ret);

/* Make replica `r`'s copies the results its step graph `gr` stored (its
 * has_out nodes), taking over their memory; a new name (optimizer state on
 * the first step) becomes a new copy. Returns 0 or -ENOMEM. */
int dp_commit(struct dp *dp, struct dp_replica *r, struct graph *gr);

/* Average the f32 vectors at node `flat` of the `n` graphs `grs` (one per
 * device, same length) in host memory and write the mean back into each.
 * Returns 0 or -errno from the transfers. */
int dp_average(struct dp *dp, struct graph *const *grs, unsigned n, unsigned flat);

/* Where a data-parallel step keeps its transfers in each device's staging
 * buffer, so they ride in the step's own submissions: the flat gradient at
 * 0, the loss at `loss`, the shard's row numbers at `index`. */
struct dp_staging {
	uint64_t loss, index;
};

/* Lay out `flat_bytes` of gradient, a 4-byte loss and `shard` row numbers in
 * every replica's and `first`'s staging buffer (creating them). Returns 0, or
 * -E2BIG when they do not fit (the step then transfers separately), or
 * -ENOMEM. */
int dp_staging_plan(struct dp *dp, struct gpu_device *first, uint64_t flat_bytes, uint64_t shard,
		    struct dp_staging *ret);

/* dp_average for gradients the step copied into each device's staging
 * buffer at offset 0 (`devs[i]` ran grs[i]): the mean goes back there. */
void dp_average_staged(struct gpu_device *const *devs, unsigned n, uint64_t count);

/* The largest |difference| between each replica's copy of a tensor named in
 * `names` (`n` entries) and the stored tensor `stored[k]` on the first
 * device. Returns it, or a negative value when they cannot be read. */
double dp_max_diff(struct dp *dp, struct tensor *const *stored, unsigned n);

/* Free every copy and the replicas; NULL is accepted. */
void dp_free(struct dp *dp);

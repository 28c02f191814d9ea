/* Data-parallel training's replicas (docs/devices.md, "Data-parallel
 * training"): copies of the tensors a step reads (parameters, optimizer
 * state, data) on each further device, outside the store, kept up to date by
 * committing each replica's step results into them, and the host-side
 * averaging of the devices' gradients. train/job.c drives the steps. */
#pragma once

#include <stdint.h>

#include "engine/graph_core.h"
#include "gpu/device.h"
#include "store/store.h"

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

/* Where a step's transfers sit in each device's exchange buffer (`xfer`):
 * the flat gradient at 0, the loss at `loss`, the shard's row numbers at
 * `index`. The step's submissions copy them in and out themselves. */
struct dp_layout {
	uint64_t loss, index, size;
};

struct dp {
	struct daemon *d;
	unsigned n;                /* replicas: the devices after the first */
	struct dp_replica r[GPU_MAX_DEVICES - 1];
	struct dp_layout at;
	uint64_t flat_count;       /* f32 gradients */
	uint32_t devs[GPU_MAX_DEVICES];  /* the run's devices, the first one first */
	struct gpu_host_buffer xfer[GPU_MAX_DEVICES]; /* one per entry of devs */
	float *sum;                /* host buffers for dp_max_diff */
	float *one;
	uint64_t cap;              /* elements each holds */
};

/* Replicas on `devices[1..ndev)` of the `ncopy` stored tensors `copy` (the
 * tensors the first step's graph reads) with a `shard`-row index each, and
 * on every device an exchange buffer for `flat_count` f32 gradients, the
 * loss and the row numbers. Returns 0 or -errno (-ENOMEM, -EFBIG/-ENOMEM for
 * device memory, -ENODEV); *ret is freed with dp_free. */
int dp_start(struct daemon *d, const uint32_t *devices, unsigned ndev, struct tensor *const *copy,
	     unsigned ncopy, uint64_t shard, uint64_t flat_count, struct dp **ret);

/* The exchange buffer of device `i` of the run (0: the first). */
struct gpu_host_buffer *dp_xfer(struct dp *dp, unsigned i);

/* Make replica `r`'s copies the results its step graph `gr` stored (its
 * has_out nodes), taking over their memory; a new name (optimizer state on
 * the first step) becomes a new copy. Returns 0 or -ENOMEM. */
int dp_commit(struct dp *dp, struct dp_replica *r, struct graph *gr);

/* Average the gradients every device's step left at offset 0 of its
 * exchange buffer, in device order, and write the mean back into each. */
void dp_average(struct dp *dp);

/* The largest |difference| between each replica's copy of a tensor named in
 * `names` (`n` entries) and the stored tensor `stored[k]` on the first
 * device. Returns it, or a negative value when they cannot be read. */
double dp_max_diff(struct dp *dp, struct tensor *const *stored, unsigned n);

/* Free every copy and the replicas; NULL is accepted. */
void dp_free(struct dp *dp);

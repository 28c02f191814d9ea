/* Data-parallel training's replicas (docs/devices.md, "Data-parallel
 * training"): copies of the tensors a step reads (parameters, optimizer
 * state, data) on each further device, outside the store, kept up to date by
 * committing each replica's step results into them, and the host-side
 * averaging of the devices' gradients. train/job.c drives the steps. */
#pragma once

#include <stdint.h>

#include "engine/graph_core.h"
#include "gpu/device.h"
#include "gpu/host_import.h"
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
 * the flat gradient at 0 and the mean the host made of them at `mean`
 * (only for DP_HOST, and the gradient for a group member's buffer; apart,
 * so the device never reads back bytes it wrote while the submission runs), the loss at `loss` and the shard's row numbers at
 * `index`, each twice (steps of odd numbers at the second: two steps are
 * in flight, dp_loss_at, dp_index_at), the device's signal that its
 * gradients are out at `flag` (dp_sync.h). The step's submissions copy
 * them in and out themselves. */
struct dp_layout {
	uint64_t loss, flag, index, index_stride, mean, size;
};

/* How the gradients are averaged (docs/devices.md): DP_GPU, each device's
 * update starts with gpu_rec_host_mean over one host region of gradient
 * slots imported into every device; DP_HOST, dp_average on the host (a
 * device cannot import host memory, or the devices differ); DP_NONE, not at
 * all (TENSORD_DP_EXCHANGE=none, for timing the exchange only: the replicas
 * drift apart). */
enum dp_exchange { DP_HOST, DP_GPU, DP_NONE };

struct dp {
	struct daemon *d;
	unsigned n;                /* replicas: the devices after the first */
	struct dp_replica r[GPU_MAX_DEVICES - 1];
	struct dp_layout at;
	uint64_t flat_count;       /* f32 gradients */
	uint32_t devs[GPU_MAX_DEVICES];  /* the run's devices, the first one first */
	struct gpu_host_buffer xfer[GPU_MAX_DEVICES]; /* one per entry of devs */
	enum dp_exchange exchange;
	/* DP_GPU: device i's gradients of a step of parity p (its number's
	 * lowest bit) at (p * n + i) * stride, where n counts the devices:
	 * with two steps in flight the next one's backward writes the other
	 * parity's slots while the devices' updates still read this one's. */
	void *slots;
	uint64_t stride, slots_size;
	unsigned parities;         /* 1, or 2 when steps are pipelined */
	struct gpu_host_import imp[GPU_MAX_DEVICES]; /* imported into each device */
	struct dp_sync *sync;      /* the word between a step's halves (not DP_NONE) */
	int silent;                /* TENSORD_FAULT_DP_SILENT: this device never signals; -1 */
	float *sum;                /* host buffers for dp_max_diff */
	float *one;
	uint64_t cap;              /* elements each holds */
};

/* Replicas on `devices[1..ndev)` of the `ncopy` stored tensors `copy` (the
 * tensors the first step's graph reads) with a `shard`-row index each, and
 * on every device an exchange buffer for `flat_count` f32 gradients, the
 * loss and the row numbers; gradient slots for `depth` (1 or 2) steps in
 * flight. Returns 0 or -errno (-ENOMEM, -EFBIG/-ENOMEM for device memory,
 * -ENODEV); *ret is freed with dp_free. */
int dp_start(struct daemon *d, const uint32_t *devices, unsigned ndev, struct tensor *const *copy,
	     unsigned ncopy, uint64_t shard, uint64_t flat_count, unsigned depth, struct dp **ret);

/* A replica's view for a step built while the step before it is still in
 * flight (pipelined): the replica's copies, each one that graph `prev` (the
 * step before, on the replica's device) stores replaced by its result there,
 * and its new names added. `view` is what the step's graph uses. */
struct dp_view {
	struct graph_replica view;
	struct tensor **list;
	struct tensor *results;
};

/* Fill *ret for replica `r` from `prev`, whose results' memory must outlive
 * the view's use (it does: committed into the replica, they are freed only
 * when the step after replaces them). Returns 0 or -ENOMEM; *ret is freed
 * with dp_view_free. */
int dp_view_after(const struct dp_replica *r, const struct graph *prev, struct dp_view *ret);

/* Free what dp_view_after made; a zeroed view is accepted. */
void dp_view_free(struct dp_view *v);

/* The exchange buffer of device `i` of the run (0: the first). */
struct gpu_host_buffer *dp_xfer(struct dp *dp, unsigned i);

/* Make replica `r`'s copies the results its step graph `gr` stored (its
 * has_out nodes), taking over their memory; a new name (optimizer state on
 * the first step) becomes a new copy. Returns 0 or -ENOMEM. */
int dp_commit(struct dp *dp, struct dp_replica *r, struct graph *gr);

/* DP_GPU's bucketed copy out: instead of one copy of the flat gradient at
 * the end of the backward (dp_record_exchange's), a copy of each parameter's gradient
 * into its place in device `i`'s slot, recorded right after the node that
 * made it (graph.copies_at), so the copies of the last layers' gradients
 * run while the backward of the first ones does. Fills ret (room for `max`)
 * from graph `gr`'s flat node `flat` (train/step.c's concatenation of the
 * reshaped gradients) and returns how many, or 0 when the exchange is not
 * DP_GPU or the graph is not shaped so (then dp_record_exchange copies
 * the whole, `bucketed` false). `step`
 * chooses the slots' parity. */
unsigned dp_grad_buckets(struct dp *dp, const struct graph *gr, unsigned i, int64_t step, int flat,
			 struct graph_copy *ret, unsigned max);

/* The bucketed copy out of graph `gr`'s flat gradient (node `flat`, of
 * `flat_count` f32) into host buffer `host` at offset `at`: one copy per
 * parameter gradient, recorded right after the node that made it
 * (graph.copies_at). Fills ret (room for `max`) and returns how many, or 0
 * when the graph is not shaped as train/step.c builds it. */
unsigned dp_flat_buckets(const struct graph *gr, int flat, uint64_t flat_count, VkBuffer host, uint64_t at,
			 struct graph_copy *ret, unsigned max);

/* Record on device `i`, after node `flat` of step number `step` made the
 * device's flat gradient `grad` (with `bucketed`, already on its way to the
 * slot bucket by bucket: dp_grad_buckets), the exchange: the gradient out
 * (when not bucketed), the signal that it is out, the wait for every
 * device's (dp_sync.h), then the mean into `grad` (DP_GPU: the mean kernel
 * over the slots; DP_HOST: the host's mean copied in). Nothing for DP_NONE.
 * Returns 0 or -errno. */
int dp_record_exchange(struct dp *dp, struct gpu_recorder *rec, unsigned i, int64_t step,
		       const struct gpu_alloc *grad, bool bucketed);

/* Offsets in the exchange buffers of step number `step`'s loss and rows. */
uint64_t dp_loss_at(const struct dp *dp, int64_t step);
uint64_t dp_index_at(const struct dp *dp, int64_t step);

/* "gpu", "host" or "none": the run's exchange (train.run's result). */
const char *dp_exchange_name(const struct dp *dp);

/* Average the gradients every device's step left at offset 0 of its
 * exchange buffer, in device order, and write the mean into each at
 * at.mean. */
void dp_average(struct dp *dp);

/* The largest |difference| between each replica's copy of a tensor named in
 * `names` (`n` entries) and the stored tensor `stored[k]` on the first
 * device. Returns it, or a negative value when they cannot be read. */
double dp_max_diff(struct dp *dp, struct tensor *const *stored, unsigned n);

/* How long a step's devices wait for each other's gradients (dp_sync.h):
 * half of request_timeout (the rest for the step's own work), so that a
 * device whose queue holds other work makes the run fail, not the waiting
 * devices' submissions run past request_timeout and the devices be marked
 * lost; TENSORD_DP_WAIT_MS sets it (tests). */
uint64_t dp_sync_limit_ns(const struct daemon *d);

/* Free every copy and the replicas; NULL is accepted. */
void dp_free(struct dp *dp);

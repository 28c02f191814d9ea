/* Recording many compute dispatches (and buffer copies) into one command
 * buffer and one submission, with a barrier only where a dispatch or copy
 * touches memory an earlier one of the same recording wrote, or writes
 * memory an earlier one read. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <vulkan/vulkan.h>

#include "gpu/memory.h"
#include "gpu/pipeline.h"

/* One storage buffer binding: a byte range of a device block. */
struct gpu_binding {
	VkBuffer buffer;
	uint64_t offset;
	uint64_t range;
	bool write;
};

struct gpu_recorder {
	struct gpu_device *g;
	unsigned slot;                  /* g->cmd[slot] it records into */
	VkCommandBuffer cb;
	struct gpu_binding written[64]; /* ranges touched since the last barrier */
	unsigned nwritten;
	unsigned dispatches;
	unsigned barriers;
	VkPipeline bound;               /* the pipeline last bound on cb (recorder.c) */
	uint64_t timeout_ns;            /* gpu_rec_submit_wait's limit; 0: none */
	uint64_t gpu_ns;                /* device time of the submission, once waited for */
	/* gpu_rec_watch (gpu/completion.c): the loop is told when it completed. */
	bool watched;                   /* handed to the completion thread */
	bool finished;                  /* its outcome is in `result` */
	bool queued;                    /* on the completion's ready list: `done` is due */
	int result;                     /* what gpu_rec_wait returns once finished */
	void (*done)(void *data);
	void *done_data;
	struct gpu_recorder *next_ready;
};

/* Start a recording on the device's command buffer. Returns 0 or -errno. */
int gpu_rec_begin(struct gpu_recorder *rec, struct gpu_device *g);

/* Start a recording meant for gpu_rec_watch, on a command buffer of its own
 * that no synchronous work waits for (gpu_rec_begin when `g` has no
 * completion thread; after waiting for the oldest watched submission when
 * all are taken). Returns 0 or -errno. */
int gpu_rec_begin_async(struct gpu_recorder *rec, struct gpu_device *g);

/* The binding for bytes [offset, offset + size) of allocation `a` (a shared
 * dummy buffer when the allocation is empty). */
struct gpu_binding gpu_rec_bind(struct gpu_device *g, const struct gpu_alloc *a, uint64_t offset,
				uint64_t size, bool write);

/* Record one dispatch of `invocations` invocations of a shader whose local
 * size is `local_size` in x. Grids beyond the device's x limit spill into y;
 * shaders linearise with gl_NumWorkGroups.x. `push` (size ≤ GPU_PUSH_BYTES) is
 * copied. Returns 0, -E2BIG when the grid cannot be expressed, or -errno. */
int gpu_rec_dispatch(struct gpu_recorder *rec, const struct gpu_pipeline *p,
		     const struct gpu_binding *bindings, unsigned nbindings,
		     const void *push, uint32_t push_size, uint64_t invocations,
		     uint32_t local_size);

/* Record one dispatch of exactly groups[0] x groups[1] x groups[2]
 * workgroups (a client kernel's grid). Returns 0, -E2BIG past the device's
 * limits, or -errno. */
int gpu_rec_dispatch_groups(struct gpu_recorder *rec, const struct gpu_pipeline *p,
			    const struct gpu_binding *bindings, unsigned nbindings,
			    const void *push, uint32_t push_size, const uint32_t groups[3]);

/* Record a copy of src's range into dst's (min of the two ranges), ordered
 * as a dispatch reading src and writing dst would be: a barrier first where
 * an earlier dispatch or copy wrote either range or read dst, and what follows
 * that touches dst waits for it. */
void gpu_rec_copy(struct gpu_recorder *rec, const struct gpu_binding *src,
		  const struct gpu_binding *dst);

/* Record writing dst's range (a multiple of 4 bytes, at most 65536) with
 * the bytes at `data` (copied into the command buffer: vkCmdUpdateBuffer),
 * ordered as a copy into dst (gpu_rec_copy): the multi-tensor optimizer's
 * table. */
void gpu_rec_update(struct gpu_recorder *rec, const struct gpu_binding *dst, const void *data);

/* Make every write recorded so far visible to what follows (for a transfer or
 * the host). */
void gpu_rec_barrier(struct gpu_recorder *rec);

/* Submit and wait (at most timeout_ns when set). Returns 0, -ENODEV when
 * the device is lost, -ETIMEDOUT when the limit passed (the device is then
 * marked lost), or -EIO. */
int gpu_rec_submit_wait(struct gpu_recorder *rec);

/* Record a copy between the host-visible buffer `host` (a gpu_host_buffer of
 * this device) at `offset` and the allocation `a` (host to `a` when
 * `to_device`, else back), with a barrier on either side, so a submission
 * takes its own inputs from the host and leaves results for it without
 * round trips of their own. `host` must hold the range. */
void gpu_rec_host_copy(struct gpu_recorder *rec, const struct gpu_alloc *a, VkBuffer host, uint64_t offset,
		       bool to_device);

/* gpu_rec_submit_wait in two halves, so that recordings on several devices
 * run at once: submit (with a final barrier) without waiting... */
int gpu_rec_submit(struct gpu_recorder *rec);

/* ...and wait for it later (at most timeout_ns when set). Same returns.
 * For a watched recording (gpu_rec_watch) it returns the outcome the
 * completion thread saw, waiting for it if need be, and its `done` is then
 * not called any more. Sets gpu_ns on success. */
int gpu_rec_wait(struct gpu_recorder *rec);

/* Abandon a recording that will not be submitted. */
void gpu_rec_abort(struct gpu_recorder *rec);

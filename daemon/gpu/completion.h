/* Asynchronous completion of submissions: a thread per device waits on the
 * fence of the submission handed to it (gpu_rec_watch) and signals an eventfd
 * the event loop watches; the loop then finishes the wait (fence reset,
 * timing, or the device marked lost when the submission ran past its limit)
 * and calls the recording's `done`. The loop never sleeps on the GPU for
 * such work (docs/architecture.md, "Processes and threads").
 *
 * Watched submissions have command buffers of their own (cmd[GPU_CMD_SYNC..],
 * gpu_rec_begin_async), up to GPU_CMD_ASYNC at once per device; the thread
 * waits for them in submission order, each limit counted from when the
 * one before it completed (the queue runs them in order), and after one ran
 * past its limit reports those behind it as lost at once. Memory freed while
 * any is pending may still be read by one: gpu_memory_free defers the
 * release until those pending then have completed. */
#pragma once

#include <stdbool.h>

#include "gpu/memory.h"
#include "gpu/recorder.h"

struct gpu_device;
struct loop;

/* Start `g`'s completion thread, its eventfd watched by `l`. Returns 0 or
 * -errno. */
int gpu_completion_start(struct gpu_device *g, struct loop *l);

/* Finish the pending submissions (waiting for them), call the `done` still
 * due (and again for what those submit), release the deferred memory and
 * stop the thread. Nothing when not started. */
void gpu_completion_stop(struct gpu_device *g);

/* Whether gpu_rec_watch can watch submissions on `g`. */
bool gpu_completion_on(const struct gpu_device *g);

/* Hand the submission `rec` just made (gpu_rec_submit) to the completion
 * thread: `done(data)` is called from the loop once it completed, failed or
 * ran past its limit (rec->timeout_ns, else the wait policy's); gpu_rec_wait
 * then returns that outcome at once. Returns 0, or -EOPNOTSUPP when `g`
 * has no completion thread (wait for it with gpu_rec_wait instead). */
int gpu_rec_watch(struct gpu_recorder *rec, void (*done)(void *data), void *data);

/* The outcome of watched `rec` (gpu_rec_wait), waiting for it if need be;
 * its `done` is no longer called. */
int gpu_completion_take(struct gpu_recorder *rec);

/* Wait (the loop blocks, feeding the watchdog) until every watched
 * submission of `g` completed, and finish them; their `done` is still
 * called from the loop later. */
void gpu_completion_drain(struct gpu_device *g);

/* A free command buffer slot for gpu_rec_begin_async, waiting for the
 * oldest watched submission when all are taken. Returns the slot, or
 * -ENODEV when none frees (the device was lost to a runaway). */
int gpu_completion_free_slot(struct gpu_device *g);

/* Whether a watched submission on `g` is not finished yet. */
bool gpu_completion_busy(const struct gpu_device *g);

/* The short poll before a hand-off to the completion thread: whether every
 * submitted recording of recs[0..n-1] (those with a device; one recording is
 * n = 1) finished within `spin_ns` of now, polling their fences. False at
 * once while a device has watched work ahead (it could not finish first).
 * The one copy of the poll: graphs (engine/graph_core.c), one recording
 * (methods/async_request.c) and op.run batches (methods/op_batch.c). */
bool gpu_recs_finished_within(struct gpu_recorder *recs, uint32_t n, uint64_t spin_ns);

/* Release `a` (gpu_memory_free) once the submissions pending now
 * completed; `*a` is cleared now. */
void gpu_completion_defer_free(struct gpu_device *g, struct gpu_alloc *a);

/* Destroy pipeline `p` (a client kernel's, kernel.delete) once the
 * submissions pending now completed: returns 0, or -EAGAIN when none is
 * pending (destroy it now). */
int gpu_completion_defer_pipeline(struct gpu_device *g, VkPipeline p);

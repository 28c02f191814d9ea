/* Asynchronous completion of submissions: a thread per device waits on the
 * fence of the submission handed to it (gpu_rec_watch) and signals an eventfd
 * the event loop watches; the loop then finishes the wait (fence reset,
 * timing, or the device marked lost when the submission ran past its limit)
 * and calls the recording's `done`. The loop never sleeps on the GPU for
 * such work (docs/architecture.md, "Processes and threads").
 *
 * One watched submission per device at a time: it occupies cmd[0], so
 * whatever next begins cmd[0] (another graph, a device copy) first waits for
 * it (gpu_completion_drain). Memory freed while one is pending may still be
 * read by it: gpu_memory_free defers the release until it completed. */
#pragma once

#include <stdbool.h>

#include "gpu/memory.h"
#include "gpu/recorder.h"

struct gpu_device;
struct loop;

/* Start `g`'s completion thread, its eventfd watched by `l`. Returns 0 or
 * -errno. */
int gpu_completion_start(struct gpu_device *g, struct loop *l);

/* Finish the pending submission (waiting for it), call the `done` still due,
 * release the deferred memory and stop the thread. Nothing when not started. */
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

/* Wait (the loop blocks, feeding the watchdog) until `g`'s watched
 * submission, if any, completed, and finish it; its `done` is still called
 * from the loop later. */
void gpu_completion_drain(struct gpu_device *g);

/* Whether a watched submission on `g` is not finished yet. */
bool gpu_completion_busy(const struct gpu_device *g);

/* Release `a` (gpu_memory_free) once the pending submission completed; `*a`
 * is cleared now. */
void gpu_completion_defer_free(struct gpu_device *g, struct gpu_alloc *a);

/* How busy the device is: timestamp queries around every submission where the
 * queue supports them, host time from submission to fence otherwise. Feeds
 * the "gpu" counters of `info` (docs/protocol.md). */
#pragma once

#include <stdbool.h>
#include <stdint.h>

struct gpu_device;

/* Counters of the work submitted to one device. */
struct gpu_stats {
	uint64_t submissions;   /* command buffers submitted */
	uint64_t busy_ns;       /* device time of those that completed (see timestamps) */
	uint64_t wait_ns;       /* host time spent blocked waiting for their fences */
	bool timestamps;        /* busy_ns from timestamp queries; else from submission
				   to the fence being seen signalled (an upper bound) */
	int64_t done_ns;        /* CLOCK_MONOTONIC when the last completion was seen */
};

/* Set up timestamp queries when the compute queue has them; without them
 * the fallback is used. Never fails. */
void gpu_timing_init(struct gpu_device *g);

/* Release the query pool. */
void gpu_timing_fini(struct gpu_device *g);

/* At the start of recording cmd[i]: the opening timestamp. */
void gpu_timing_begin(struct gpu_device *g, unsigned i);

/* Just before cmd[i] is ended and submitted: the closing timestamp. */
void gpu_timing_end(struct gpu_device *g, unsigned i);

/* cmd[i] was submitted (at time submit_ns, CLOCK_MONOTONIC). */
void gpu_timing_submitted(struct gpu_device *g, unsigned i);

/* cmd[i]'s fence was waited for, blocking the host for `blocked_ns`, and is
 * signalled: account its device time. */
void gpu_timing_completed(struct gpu_device *g, unsigned i, uint64_t blocked_ns);

/* CLOCK_MONOTONIC in nanoseconds. */
int64_t gpu_timing_now_ns(void);

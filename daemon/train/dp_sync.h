/* Data parallel's word between the two halves of a step (docs/devices.md,
 * "The gradient exchange"): each device's step is one submission that
 * signals in host memory once its gradients are out (gpu_rec_host_signal)
 * and then waits for an event (gpu_rec_wait_host_event). A thread of the
 * run's own watches every device's signal of the oldest step armed and,
 * once all are there, averages on the host when the exchange is DP_HOST and
 * sets every device's event: the devices go on with the mean and the update
 * without the event loop, a recording or a submission between the halves. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <vulkan/vulkan.h>

struct dp;
struct dp_sync;

/* Events for the `ndev` devices of `dp` (two per device, one per step
 * parity) and the thread, which lets a step through unaveraged when its
 * signals are not all there after `limit_ns` (dp_sync_late). Returns 0 or
 * -errno (-ENOMEM, -ENODEV, -EAGAIN); *ret is freed with dp_sync_free. */
int dp_sync_start(struct dp *dp, unsigned ndev, uint64_t limit_ns, struct dp_sync **ret);

/* The value a device's signal for step number `step` carries: never 0 (the
 * signals' start) and never that of the step before it. */
uint32_t dp_sync_tag(int64_t step);

/* Device i's event for step number `step`. */
VkEvent dp_sync_event(const struct dp_sync *s, int64_t step, unsigned i);

/* Before step number `step` (the one after the last armed, or any first) is
 * submitted: reset its events (the step two before it, which used them,
 * has completed on every device) and have the thread watch for its
 * signals. Returns 0 or -errno (-ENODEV). */
int dp_sync_arm(struct dp_sync *s, int64_t step);

/* A step failed or the run stops: steps numbered `from` on are let through
 * without their signals (their results are thrown away), so no device
 * waits for one that never comes; the steps before keep their exchange. */
void dp_sync_release_from(struct dp_sync *s, int64_t from);

/* Whether step number `step` (or one before it) went through unaveraged
 * because a device's signal did not come within the limit: its results,
 * and those of every later step, must not be applied. */
bool dp_sync_late(struct dp_sync *s, int64_t step);

/* Stop the thread and destroy the events, once no submission waits on them;
 * NULL is accepted. */
void dp_sync_free(struct dp_sync *s);

/* Data parallel's word between the two halves of a step (docs/devices.md,
 * "The gradient exchange"; a group's on one host too, docs/cluster.md):
 * each device's step is one submission that signals in host memory once its
 * gradients are out (gpu_rec_host_signal) and then waits for an event
 * (gpu_rec_wait_host_event). A thread of the run's own watches every
 * party's signal of the oldest step armed and, once all are there, does the
 * host's part (DP_HOST's average) and sets every local device's event: the
 * devices go on with the mean and the update without the event loop, a
 * recording or a submission between the halves. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <vulkan/vulkan.h>

struct dp_sync;
struct gpu_device;

/* What a dp_sync watches and whom it lets go: the 32-bit signal words of
 * every party of the exchange (each written when that party's gradients are
 * out: a local device's in its exchange buffer, a group member's in the
 * shared region), the local devices waiting on its events, the host's part
 * once all signalled (DP_HOST's average, or NULL), and how long a step
 * waits for the signals before it goes through unaveraged (dp_sync_late). */
struct dp_sync_spec {
	unsigned nsignals;
	const volatile uint32_t *const *signals;
	unsigned ndev;
	struct gpu_device *const *g;
	void (*average)(void *data);
	void *data;
	uint64_t limit_ns;
};

/* Events for the spec's devices (two per device, one per step parity) and
 * the thread; the spec's arrays are copied. Returns 0 or -errno (-ENOMEM,
 * -ENODEV, -EAGAIN); *ret is freed with dp_sync_free. */
int dp_sync_start(const struct dp_sync_spec *spec, struct dp_sync **ret);

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

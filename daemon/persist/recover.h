/* Device loss recovery (docs/durability.md, "Device loss"): once a request
 * has seen VK_ERROR_DEVICE_LOST, the event loop re-creates the device and
 * restores the tensors and models from their checkpoints, reporting what
 * was lost since. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/gpu_choice.h"
#include "wire_limits.h"

struct daemon;

/* Names info's last_reset.lost lists; the log names every one. */
#define RECOVER_MAX_LOST_NAMES 64
/* A tensor changed since its checkpoint, as it was live when the device was
 * lost: a restored (older) copy gets no more access than this allowed. */
struct recover_pending {
	char *name;
	uint32_t owner, group, mode;
	uint64_t version;
};

/* What recover.c keeps; info reports the last reset (docs/protocol.md). */
struct recovery {
	uint64_t resets;
	/* Per device id: the resets that re-created it. A device that was
	 * not lost keeps its memory (and what was allocated there) across a
	 * reset of another (tensor_stream.c's snapshots). */
	uint64_t device_resets[GPU_MAX_DEVICES];
	/* the last reset, for info */
	int64_t time_ns;            /* CLOCK_REALTIME when it completed */
	double seconds;
	uint64_t restored;          /* tensors back from their checkpoints */
	uint64_t lost_count;        /* changed or created since their checkpoint */
	uint64_t jobs_stopped;
	char lost[RECOVER_MAX_LOST_NAMES][TDP_MAX_NAME_LEN + 1];
	unsigned nlost;
	/* the reset in progress */
	bool runaway_logged;        /* the loss was a runaway kernel's: recovery waits
				       until its work ends (gpu_device_runaway_ended) */
	int64_t runaway_ns;         /* CLOCK_MONOTONIC when that wait began */
	bool dropped;               /* device state released, new device not yet open */
	int64_t start_ns, retry_ns; /* CLOCK_MONOTONIC */
	struct recover_pending *pending; /* tensors lost or rolled back */
	size_t npending, cappending;
	uint64_t pending_count;     /* npending, plus those not kept for memory */
	uint64_t pending_jobs;
};

/* Register the recovery on d->loop (an after-batch hook). Returns 0 or
 * -errno. */
int recover_init(struct daemon *d);

/* Remove the hook and free what recover_init() allocated; safe to call when
 * recover_init() was not. */
void recover_fini(struct daemon *d);

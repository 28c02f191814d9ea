/* Who uses the daemon (issue 34; docs/protocol.md, info's "users"): per uid,
 * the device time of its work, its requests and its open connections. The
 * layers that see the work charge it (engine/ for GPU time, serve/ for
 * requests and connections); info and the scheduler read it. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

/* The most uids tracked; past it the oldest idle one (no connection open) is
 * forgotten, else the charge is dropped. */
#define USAGE_MAX_USERS 4096
/* The last hour of device time, by minute (usage_last_hour). */
#define USAGE_MINUTES 60

struct usage_user {
	uint32_t uid;
	uint64_t gpu_ns;          /* device time of its submissions (Vulkan timestamps) */
	uint64_t requests;        /* requests answered */
	uint64_t connections;     /* open now */
	/* The scheduler's clock of the user (train/job.c): its device time,
	 * moved up to the others' when its first job starts, so that a user
	 * idle for long does not take the GPU for as long after. */
	uint64_t vtime_ns;
	int64_t seen_ns;          /* CLOCK_MONOTONIC of its last charge */
	uint64_t minute_ns[USAGE_MINUTES]; /* device time by minute, a ring by minute number */
	int64_t minute_at[USAGE_MINUTES];  /* the minute (CLOCK_MONOTONIC / 60 s) each slot holds */
};

struct usage {
	struct usage_user *users;
	unsigned n, cap;
};

/* The entry of `uid`, added (zeroed) on first use; NULL when it cannot be. */
struct usage_user *usage_of(struct usage *u, uint32_t uid);

/* The entry of `uid` if it has one, else NULL (nothing added). */
const struct usage_user *usage_find(const struct usage *u, uint32_t uid);

/* Charge `uid` `ns` of device time. */
void usage_charge_gpu(struct usage *u, uint32_t uid, uint64_t ns);

/* `e`'s device time over the last hour (the 60 minutes up to now). */
uint64_t usage_last_hour(const struct usage_user *e);

/* Free the table. */
void usage_free(struct usage *u);

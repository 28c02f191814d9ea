/* The daemon's settings: defaults, then the --config file, then flags. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/un.h>

#include "gpu/device.h"

enum config_persist {
	CONFIG_PERSIST_AUTO = 0,    /* when state_dir was given explicitly */
	CONFIG_PERSIST_YES = 1,
	CONFIG_PERSIST_NO = 2,
};

struct config {
	char socket_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	struct gpu_choice device;    /* which devices to open (docs/devices.md) */
	char state_dir[256];
	int log_level;              /* syslog priority */
	uint64_t max_tensors;
	uint64_t max_connections;
	uint64_t max_tensor_bytes;
	uint64_t max_message_bytes;
	bool host_mapped;           /* map tensor memory when the device allows it */
	uint64_t block_size;        /* device memory block size, 0 = automatic */
	uint64_t max_device_bytes;  /* device memory tensord may take, 0 = the heap */
	/* docs/security.md: quotas and client limits; 0 = no limit where noted */
	uint64_t user_max_tensors;  /* tensors one uid may own, 0 = none */
	uint64_t user_max_bytes;    /* bytes one uid's tensors may hold, 0 = none */
	uint64_t max_connections_per_user; /* 0 = none beyond max_connections */
	uint64_t max_inflight;      /* requests read but not yet answered, per client */
	uint64_t max_output_backlog; /* unread output at which a client is not served */
	uint64_t stall_timeout;     /* seconds output may wait unread before disconnecting, 0 = never */
	uint64_t input_timeout;     /* seconds a started message may go without a byte, 0 = never */
	uint64_t max_input_bytes;   /* input buffered per connection before reading pauses */
	uint64_t user_max_buffer_bytes; /* input + output buffered for one uid's connections, 0 = none */
	uint64_t user_max_models;   /* models one uid may own, 0 = none beyond the daemon's */
	uint64_t user_max_kernels;  /* kernels one uid may own */
	uint64_t request_timeout_ms; /* any GPU submission's time limit */
	uint64_t stop_timeout;      /* seconds from SIGTERM to exit at the latest, 0 = none */
	/* docs/kernels.md: clients' compute kernels */
	int64_t kernel_group;       /* gid whose members may create kernels (root always), -1 = none */
	uint64_t kernel_timeout_ms; /* a kernel submission's time limit */
	/* docs/durability.md */
	bool state_dir_set;         /* state_dir came from a flag, the config file or $STATE_DIRECTORY */
	int persist;                /* CONFIG_PERSIST_* */
	uint64_t checkpoint_interval; /* seconds between checkpoints of dirty tensors, 0 = none */
};

/* Whether tensors are checkpointed under the state directory. */
bool config_persist_on(const struct config *c);

/* Fill `c` with the defaults (socket from $TENSORD_SOCKET or the system path;
 * state_dir from $STATE_DIRECTORY, systemd's StateDirectory=, which counts as
 * given explicitly, or /var/lib/tensord). */
void config_defaults(struct config *c);

/* Set one key ("max_tensors", ...; the table in config.c) from its text form. Returns 0, or -EINVAL
 * with a reason in `err` (size `err_len`). */
int config_set(struct config *c, const char *key, const char *value, char *err, size_t err_len);

/* Write every key as a `key = value` line, in the form config_set reads
 * back, with the values of `c` (tensord --print-config). */
void config_print(FILE *f, const struct config *c);

/* Read `key = value` lines (# comments, blank lines) from `path`. Returns 0 or
 * -errno with a reason naming the file and line in `err`. */
int config_load(struct config *c, const char *path, char *err, size_t err_len);

/* SIGHUP: take from `next` (a freshly loaded configuration) the settings that
 * can change while the daemon runs (verbose, max_tensors, max_connections,
 * max_tensor_bytes, max_message_bytes, the per-user quotas and connection
 * limit, max_inflight for connections opened later, max_output_backlog,
 * stall_timeout, input_timeout, max_input_bytes, user_max_buffer_bytes,
 * user_max_models, user_max_kernels, kernel_timeout, request_timeout,
 * stop_timeout). The others (socket, state_dir, device, host_mapped,
 * block_size, max_device_bytes) keep their current value; those that differ
 * in `next` are named, comma-separated, in `fixed` (size `fixed_len`; "" when
 * none). */
void config_apply_reload(struct config *cur, const struct config *next, char *fixed,
			 size_t fixed_len);

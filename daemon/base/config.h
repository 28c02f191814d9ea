/* The daemon's settings: defaults, then the --config file, then flags. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/un.h>

#include "base/config_users.h"
#include "base/gpu_choice.h"

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
	bool async_graphs;          /* op.run/graph.run answered at completion, the loop not waiting */
	bool batch_requests;        /* small op.runs arriving together share one submission */
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
	uint64_t user_max_jobs;     /* detached train.run jobs one uid may have running */
	/* Per user or group (config_users.h): shares of the GPU, and quotas
	 * overriding user_max_tensors, user_max_bytes, user_max_jobs. */
	struct config_users user_weights, user_quota_tensors, user_quota_bytes, user_quota_jobs;
	/* GPU seconds a user may use in any hour before its jobs go behind
	 * everyone else's (config_users.h; none: no budget). */
	struct config_users user_gpu_hour;
	uint64_t request_timeout_ms; /* any GPU submission's time limit */
	uint64_t stop_timeout;      /* seconds from SIGTERM to exit at the latest, 0 = none */
	/* docs/kernels.md: clients' compute kernels */
	int64_t kernel_group;       /* gid whose members may create kernels (root always), -1 = none */
	uint64_t kernel_timeout_ms; /* a kernel submission's time limit */
	/* docs/durability.md */
	bool state_dir_set;         /* state_dir came from a flag, the config file or $STATE_DIRECTORY */
	bool socket_set;            /* socket came from a flag, the config file or $TENSORD_SOCKET */
	/* config_private_paths chose the XDG paths of a daemon run by a user:
	 * main creates the directories (0700) */
	bool state_dir_private, socket_private;
	int persist;                /* CONFIG_PERSIST_* */
	uint64_t checkpoint_interval; /* seconds between checkpoints of dirty tensors, 0 = none */
	/* docs/cluster.md: a group started by mpirun */
	bool cluster;               /* join it (default: when $OMPI_COMM_WORLD_SIZE is set) */
	uint64_t cluster_timeout_ms; /* an MPI operation's time limit */
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

/* tensord --check-config: read `path` as config_load does, but go on past an
 * error, writing every error ("FILE:LINE: reason", or "FILE: reason" when it
 * cannot be read) as a line to `out`. Returns the number of errors (0: the
 * daemon would take the file). */
unsigned config_check(const char *path, FILE *out);

/* A daemon run by a user other than root, outside systemd's StateDirectory=
 * and RuntimeDirectory= (docs/durability.md, "Where state goes"): a state
 * directory not given explicitly becomes $XDG_STATE_HOME/tensord (default
 * ~/.local/state/tensord) and a socket not given, nor passed by systemd,
 * $XDG_RUNTIME_DIR/tensord/tensord.sock. Sets state_dir_private and
 * socket_private accordingly; touches no file. Returns 0, or -EINVAL with the
 * reason in `err` when a path is needed and cannot be made ($XDG_RUNTIME_DIR
 * unset, a path too long). */
int config_private_paths(struct config *c, char *err, size_t err_len);

/* Called by config_apply_reload for each key whose value differs: its name,
 * the running and the new value as --print-config writes them, and whether
 * the new value was taken (false: the key applies only at start-up). */
typedef void config_change_fn(void *userdata, const char *key, const char *old_value,
			      const char *new_value, bool applied);

/* SIGHUP: take from `next` (a freshly loaded configuration) the values of the
 * keys that can change while the daemon runs (those marked reloadable in the
 * key table of config.c and in tensord(8)); the others (socket, state_dir,
 * persist, device, host_mapped, block_size, max_device_bytes) keep their
 * current value. `changed` is called for every key that differs. Returns the
 * number of keys that differ. */
unsigned config_apply_reload(struct config *cur, const struct config *next,
			     config_change_fn *changed, void *userdata);

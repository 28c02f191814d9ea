/* One daemon per state directory (docs/durability.md): an exclusive flock
 * on STATE_DIR/tensord.lock, held for the daemon's life, with the holder's
 * pid written inside for the message a second daemon prints. */
#pragma once

#include <stddef.h>

/* The lock file's name inside the state directory. */
#define STATE_LOCK_FILE "tensord.lock"

/* Take the lock of `state_dir` (which must exist, belong to the daemon's
 * user and be closed to others' writes, as persist_dir_check wants) and
 * write our pid into the file. Returns 0 with *ret_fd, the descriptor to keep
 * open until exit (closing it, or dying, releases the lock); -EWOULDBLOCK
 * when another process holds it, or another -errno; a one-line message
 * naming the directory (and the holder's pid when known) is in `err`. */
int state_lock_take(const char *state_dir, int *ret_fd, char *err, size_t err_len);

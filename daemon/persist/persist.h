/* Checkpoint files of tensors under STATE_DIR/tensors/ (docs/durability.md):
 * one safetensors file per tensor, named by the percent-encoded tensor name,
 * with tensord's metadata and a CRC-32C of the data. This file knows the
 * format and the directory; checkpoint.c decides when to write. */
#pragma once

#include <stddef.h>
#include <stdint.h>

struct daemon;
struct store;
struct tensor;
struct persist;

/* Create (mode 0700) and open `state_dir`/tensors. Returns 0 with *ret, or
 * -errno with a message in `err`. */
int persist_open(const char *state_dir, struct persist **ret, char *err, size_t err_len);

/* Create `state_dir` (0750) and its subdirectory `sub` (0700, made private
 * if it existed), write the subdirectory's path to `path` and open it.
 * Returns 0 with *ret_fd, or -errno with a message in `err`. */
int persist_open_subdir(const char *state_dir, const char *sub, char *path, size_t path_len,
			int *ret_fd, char *err, size_t err_len);

/* Close; NULL is accepted. */
void persist_free(struct persist *p);

/* What persist_restore did. */
struct persist_restored {
	uint64_t tensors, bytes;  /* loaded into the store */
	uint64_t skipped;         /* files reported and left alone */
};

/* Load every checkpoint file into d->store (device memory, owner, group,
 * mode, version, times as saved), clean. A file that is truncated, corrupt,
 * fails its checksum, or does not fit the device or the limits is logged and
 * skipped; leftover temporary files are removed. Returns 0, or -errno when
 * the directory cannot be read. */
int persist_restore(struct persist *p, struct daemon *d, struct persist_restored *ret);

/* Read `t` back from the device and write its file atomically (temporary
 * file, fsync, rename). The rename is durable only after persist_commit().
 * Returns 0 or -errno with a message in `err`. */
int persist_write(struct persist *p, struct daemon *d, const struct tensor *t, char *err,
		  size_t err_len);

/* Remove the file of tensor `name` (`len` bytes); a missing file is fine.
 * Durable after persist_commit(). Returns 0 or -errno. */
int persist_remove(struct persist *p, const char *name, size_t len);

/* Remove every checkpoint file whose tensor is not in `s` (after deletions
 * were lost for memory). Returns 0 or -errno. */
int persist_reconcile(struct persist *p, struct store *s);

/* fsync the directory, making renames and removals durable. Returns 0 or -errno. */
int persist_commit(struct persist *p);

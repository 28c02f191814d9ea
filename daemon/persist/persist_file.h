/* File names and safe opening in the state directory (docs/durability.md,
 * "Files" and "The state directory"): a checkpoint's file name is bounded
 * whatever the name it holds, and nothing another user planted in the
 * directory is followed, waited on or served. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>

/* The longest file name persist_file_name writes, NUL included. */
#define PERSIST_FILE_MAX 256

/* The file name of the object `name` (`len` bytes, a valid name) with
 * `suffix` (".safetensors", ".model") into `out` (PERSIST_FILE_MAX bytes):
 * the percent-encoded name (tdp_name_to_file) when that leaves room for a
 * temporary suffix within NAME_MAX, else "%H" and the 64 hex digits of the
 * name's SHA-256 (the name is then only inside the file). Returns the length
 * or -EINVAL. */
int persist_file_name(const char *name, size_t len, const char *suffix, char *out);

/* What file `file` is: its object's name decoded into `name`
 * (TDP_MAX_NAME_LEN + 1 bytes), returning its length; -EAGAIN for a hashed
 * name (the name is inside the file: check it with persist_file_is_of); or
 * -EINVAL for a file that is not an object's. */
int persist_file_parse(const char *file, const char *suffix, char *name);

/* Whether `file` is the file name persist_file_name gives `name`. */
bool persist_file_is_of(const char *file, const char *name, const char *suffix);

/* Open `file` in `dirfd` for reading without following a symbolic link or
 * waiting on a FIFO, and check that it is a regular file. Returns the fd
 * with *st filled, or -errno (-EINVAL: not a regular file) with the reason
 * in `why`. */
int persist_file_open(int dirfd, const char *file, struct stat *st, char *why, size_t why_len);

/* Check the directory open as `fd` (at `path`): owned by the daemon's
 * effective user and not writable by group or others. Returns 0, or -EPERM
 * with the reason in `err`. */
int persist_dir_check(int fd, const char *path, char *err, size_t err_len);

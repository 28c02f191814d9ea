/* When tensors reach their checkpoint files (docs/durability.md): on
 * store.sync, a few at a time on a timer (checkpoint_interval), and all of
 * them at shutdown. persist.c writes the files. */
#pragma once

#include <stddef.h>
#include <stdint.h>

struct daemon;
struct request;
struct checkpoint;

/* What one flush did. */
struct checkpoint_result {
	uint64_t written, bytes;  /* tensor files written, their data bytes */
	uint64_t removed;         /* files of deleted tensors removed */
	uint64_t models;          /* model files written or removed */
	double seconds;
};

/* Start the periodic checkpoint of d->persist (a timerfd on d->loop) at
 * d->cfg.checkpoint_interval seconds (0: no timer, only store.sync and
 * shutdown write). Returns 0 with *ret, or -errno. */
int checkpoint_start(struct daemon *d, struct checkpoint **ret);

/* Re-arm after a configuration reload changed checkpoint_interval. */
void checkpoint_rearm(struct checkpoint *c);

/* Stop the timer and free; NULL is accepted. Writes nothing. */
void checkpoint_free(struct checkpoint *c);

/* Remove the files of deleted tensors, then write dirty tensors oldest
 * first, at most `max_tensors` of them (0: all) and stopping once `max_bytes`
 * (0: no limit) were written, then fsync the directory; then the models,
 * when they changed. Returns 0, or -errno
 * with a message in `err` (the failed tensor stays dirty). */
int checkpoint_flush(struct daemon *d, uint64_t max_tensors, uint64_t max_bytes,
		     struct checkpoint_result *ret, char *err, size_t err_len);

/* store.sync: write everything dirty; docs/protocol.md. */
int method_store_sync(struct request *req);

/* When tensors reach their checkpoint files (docs/durability.md): on
 * store.sync, a few at a time on a timer (checkpoint_interval), and all of
 * them at shutdown. persist.c writes the files. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct daemon;
struct checkpoint;
struct tensor;

/* What one flush did. */
struct checkpoint_result {
	uint64_t written, bytes;  /* tensor files written, their data bytes */
	uint64_t removed;         /* files of deleted tensors removed */
	uint64_t models;          /* model files written or removed */
	uint64_t failed;          /* tensors and models that could not be written
				     (each logged; they stay dirty and are retried) */
	uint64_t failed_mine;     /* of those, the caller's (checkpoint_sync) */
	char mine[512];           /* their names and reasons, "" when none */
	bool more;                /* stopped at a limit with work left */
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
 * when they changed. A tensor or model whose write fails is logged, stays
 * dirty at the back of the line and counts in ret->failed; the rest are
 * still written (with limits, the periodic tick: a failed tensor waits out
 * a backoff first). Returns 0, or -errno with a message in `err` when the
 * directory itself failed. */
int checkpoint_flush(struct daemon *d, uint64_t max_tensors, uint64_t max_bytes,
		     struct checkpoint_result *ret, char *err, size_t err_len);

/* Write `t` (in the store, dirty) to its file now and make it durable, after
 * removing the files of deleted tensors: for changes that must not wait for
 * the next checkpoint (a tensor.chmod that revokes access). A failure is
 * logged and leaves `t` dirty. Returns 0 (also when persistence is off or
 * `t` is clean) or -errno. */
int checkpoint_tensor_now(struct daemon *d, struct tensor *t);

/* Count a failed write of `what` ("tensor", "model") `name` owned by `owner`
 * in `acc`, and list it in acc->mine when `who` is its owner or 0 (root);
 * `who` -1 lists nothing. */
void checkpoint_note_failure(struct checkpoint_result *acc, int64_t who, uint32_t owner,
			     const char *what, const char *name, const char *why);

/* store.sync for client `who`: write everything dirty now, as
 * checkpoint_flush does without limits, listing in ret->mine the failures
 * of who's own (all of them for root). Returns as checkpoint_flush. */
int checkpoint_sync(struct daemon *d, uid_t who, struct checkpoint_result *ret, char *err, size_t err_len);

/* Checkpoint files of models under STATE_DIR/models/ (docs/durability.md):
 * one file per model, the packed definition with its owner, times and step
 * count, under a CRC-32C. Written when the registry changed since the last
 * checkpoint (a new, replaced or deleted model, a step trained). */
#pragma once

#include <stddef.h>
#include <stdint.h>

struct daemon;
struct model_persist;
struct checkpoint_result;

/* Create (mode 0700) and open `state_dir`/models. Returns 0 with *ret, or
 * -errno with a message in `err`. */
int model_persist_open(const char *state_dir, struct model_persist **ret, char *err, size_t err_len);

/* Close; NULL is accepted. */
void model_persist_free(struct model_persist *mp);

/* Load every model file into d->models; damaged files are logged and
 * skipped. Counts what was loaded and skipped. Returns 0 or -errno. */
int model_persist_restore(struct model_persist *mp, struct daemon *d, uint64_t *ret_loaded,
			  uint64_t *ret_skipped);

/* When d->models changed since the last call: write the files of new or
 * changed models, remove those of deleted ones, fsync the directory. A
 * model whose file cannot be written is logged, counted in `acc` (for `who`,
 * as checkpoint_note_failure) and tried again at the next flush; the others
 * are written. Adds the files written or removed to acc->models. Returns 0,
 * or -errno with a message in `err` when the directory cannot be synced. */
int model_persist_flush(struct model_persist *mp, struct daemon *d, int64_t who,
			struct checkpoint_result *acc, char *err, size_t err_len);

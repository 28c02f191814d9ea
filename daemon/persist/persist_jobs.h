/* The jobs file STATE_DIR/jobs/jobs (docs/durability.md, "Jobs"): every
 * detached job's record (train/jobs_table.h) as one msgpack array of
 * job.stat maps, newest first, under a CRC-32C, replaced atomically. */
#pragma once

#include <stdint.h>

struct daemon;

/* Write the job table to the jobs file (nothing when persistence is off).
 * Returns 0, or -errno (logged). */
int persist_jobs_save(struct daemon *d);

/* Read the jobs file into the table: running jobs become interrupted (the
 * daemon stopped under them); ids already in the table are left alone. A
 * missing file is no error; a damaged one is logged and set aside. Counts
 * the records read into *ret_loaded. Returns 0 or -errno. */
int persist_jobs_restore(struct daemon *d, uint64_t *ret_loaded);

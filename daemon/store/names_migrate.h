/* Pre-namespace state directories (docs/security.md, "Namespaces"). */
#pragma once

struct store;
struct models;

/* Move tensors and models restored from a state directory written before
 * namespaces (names that are no key of their owner's namespace) into their owner's namespace: renamed
 * to "<owner>/<name>" (the old checkpoint goes, the new one is written by
 * the next checkpoint), or dropped when that key was restored too (its
 * checkpoint is the newer). Call after the restore, with dirty tracking on. */
void names_migrate(struct store *s, struct models *ms);

/* tensorctl's per-command help (ctl_help.c) and the op table compiled in
 * from docs/ops.md (gen_ops_help.py). */
#pragma once

#include <stddef.h>
#include <stdio.h>

struct ctl_op_help {
	const char *op;      /* "add" */
	const char *section; /* "Elementwise binary" */
	const char *text;    /* "  inputs: ...\n  attrs: ...\n", one line per column */
};

extern const struct ctl_op_help ctl_op_helps[];
extern const size_t ctl_op_help_count;

/* Print the help of command `name` ("put", "model", "cp"...) on `f`.
 * Returns 0, or -ENOENT (nothing printed) when there is no such command. */
int ctl_help_command(FILE *f, const char *name);

/* Print `run`'s help followed by what docs/ops.md says of op `op`.
 * Returns 0, or -ENOENT (only run's help printed) for an op the table lacks. */
int ctl_help_op(FILE *f, const char *op);

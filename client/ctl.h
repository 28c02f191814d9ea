/* tensorctl internals shared by its argument parser and its commands. */
#pragma once

#include <msgpack.h>
#include <stdbool.h>
#include <stdio.h>

#include "tensord.h"

/* Exit statuses: see docs/tensorctl.1, EXIT STATUS. */
#define CTL_EXIT_OK 0
#define CTL_EXIT_FAIL 1
#define CTL_EXIT_USAGE 2

struct ctl {
	const char *socket;   /* resolved socket path */
	bool json;
	const char *command;
	int npos;
	const char **pos;     /* positional arguments after the command */
	const char *file, *values, *shape, *dtype, *out;
	struct tensord *td;
};

/* Print "tensorctl: <message>" on stderr and return CTL_EXIT_USAGE. */
__attribute__((format(printf, 1, 2)))
int ctl_usage_error(const char *fmt, ...);

/* Print "tensorctl: <message>" on stderr and return CTL_EXIT_FAIL. */
__attribute__((format(printf, 1, 2)))
int ctl_error(const char *fmt, ...);

/* The commands: each returns an exit status and has printed any error. */
int ctl_cmd_ping(struct ctl *c);
int ctl_cmd_info(struct ctl *c);
int ctl_cmd_ls(struct ctl *c);
int ctl_cmd_stat(struct ctl *c);
int ctl_cmd_rm(struct ctl *c);
int ctl_cmd_put(struct ctl *c);
int ctl_cmd_get(struct ctl *c);

/* Print the `info` result for people: known fields formatted with units, any
 * others as JSON. Missing or mistyped fields are skipped, never trusted. */
void ctl_print_info(FILE *f, const msgpack_object *info);

/* tensorctl's common layer: struct ctl (the parsed command line and the
 * connection) and every helper that more than one command file uses. The
 * command files (ctl_<command>.c, their entry points in ctl_cmd.h) include
 * this header, libtensord's and util/'s, never each other's: a helper two
 * of them need moves here. Implemented by ctl_common.c, and for training
 * runs and jobs by ctl_common_jobs.c, for devices by ctl_common_devices.c
 * (docs/architecture.md, The client). */
#pragma once

#include <msgpack.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "safetensors.h"
#include "tensord.h"

/* Exit statuses: see docs/tensorctl.1, EXIT STATUS. */
#define CTL_EXIT_OK 0

/* put --file sends files of this many bytes or more in a memfd (tensorctl(1)). */
#define CTL_MEMFD_MIN ((size_t)1 << 20)
#define CTL_EXIT_FAIL 1
#define CTL_EXIT_USAGE 2
#define CTL_EXIT_CONNECT 3

struct ctl {
	const char *socket;   /* resolved socket path */
	enum { CTL_SOCKET_DEFAULT, CTL_SOCKET_ENV, CTL_SOCKET_OPTION } socket_from;
	bool json;
	const char *command;
	int npos;
	const char **pos;     /* positional arguments after the command */
	const char *file, *values, *shape, *dtype, *out; /* out: the last -o/--out */
	int nouts;
	const char **outs;    /* every -o/--out, in order (get NAME... takes one per name) */
	const char *group;    /* chmod --group GID */
	int nattrs;
	const char **attrs;   /* --attr key=value, in order */
	bool watch;           /* info --watch */
	const char *interval, *count; /* info --watch --interval S --count N */
	int ndata;
	const char **data;    /* --data / --input IN=TENSOR, in order */
	int nids;
	const char **ids;     /* --metric / --output ID, in order */
	const char *prefix, *name, *model, *batch_size, *epochs, *steps;
	bool replace, tensors;
	const char *groups;   /* kernel run --groups X[,Y[,Z]] (--push goes in attrs) */
	const char *device;   /* put, copy, run --device ID */
	const char *devices;  /* train --devices ID,ID,... */
	bool detach;          /* train --detach */
	bool follow;          /* logs -f */
	const char *precision; /* train, step, model define --precision f32|bf16|f16 */
	struct tensord *td;
};

/* ---- messages, calls, tensors, options (ctl_common.c) ---- */

/* Print "tensorctl: <message>" on stderr and return CTL_EXIT_USAGE. */
__attribute__((format(printf, 1, 2)))
int ctl_usage_error(const char *fmt, ...);

/* Print "tensorctl: <message>" on stderr and return CTL_EXIT_FAIL. */
__attribute__((format(printf, 1, 2)))
int ctl_error(const char *fmt, ...);

/* Print "tensorctl: <message>" on stderr and return `status`. */
__attribute__((format(printf, 2, 3)))
int ctl_fail(int status, const char *fmt, ...);

/* Connect c->td to c->socket; on failure print why and return CTL_EXIT_CONNECT. */
int ctl_connect(struct ctl *c);

/* Print the failure of a libtensord call that returned `r`. Returns
 * CTL_EXIT_FAIL when the daemon answered with an error (or the library
 * refused the call), CTL_EXIT_CONNECT when the connection failed or broke. */
int ctl_call_failed(struct ctl *c, int r);

/* Decode a result libtensord returned into *u (initialised here; on failure
 * destroyed, with the error printed). Returns an exit status. */
int ctl_unpack_result(const void *buf, size_t len, msgpack_unpacked *u);

/* Call `method` with params {"name": name} (no params when NULL) on c->td
 * (connected); the decoded result in *u, which points into *ret_buf (free()
 * it after destroying *u). Returns an exit status with errors printed. */
int ctl_call_named(struct ctl *c, const char *method, const char *name, msgpack_unpacked *u,
		   void **ret_buf);

/* A raw libtensord call: packed params in, the raw result out. */
typedef int (*ctl_raw_call_fn)(struct tensord *td, const void *params, size_t len, void **ret,
			       size_t *ret_len);

/* Whether `path` names a safetensors file (by its extension). */
bool ctl_is_safetensors(const char *path);

/* Check a model or tensor name argument (a reference: ~user/ allowed);
 * CTL_EXIT_OK, or CTL_EXIT_USAGE with "invalid <what> ..." printed. */
int ctl_check_ref(const char *what, const char *name);

/* A progress bar on stderr for the transfers of one call (put/get of a large
 * tensor): drawn only when stderr is a terminal and --json is off, and only
 * for messages of at least CTL_BAR_MIN bytes. */
#define CTL_BAR_MIN ((uint64_t)4 << 20)
struct ctl_bar {
	struct ctl *c;
	const char *label;     /* "put w", shown before the bar */
	double start, drawn;   /* monotonic seconds: the first byte, the last redraw */
	size_t shown;          /* characters of the bar on stderr now; 0: none */
};

/* Start showing the progress of the calls on c->td (connected) as `label`. */
void ctl_bar_start(struct ctl_bar *b, struct ctl *c, const char *label);

/* Stop: wipe the bar off stderr and detach it from c->td. */
void ctl_bar_finish(struct ctl_bar *b);

/* Draw the bar full for a transfer of `total` bytes that reported no
 * progress (it went through a memfd, not the socket). */
void ctl_bar_done(struct ctl_bar *b, uint64_t total);

/* An uptime for people: "12.5 s", "1h 02m 03s", "3d 04h 05m"; "?" if absurd. */
void ctl_format_duration(char *buf, size_t cap, double s);

/* Seconds on CLOCK_MONOTONIC. */
double ctl_now(void);

/* An aligned table of tensors (ls, stat). */
void ctl_print_tensor_table(FILE *f, const struct tensord_tensor_info *list, size_t n);

/* The --json metadata object of `t` without its closing brace, so that a
 * caller can add fields (get --out adds "file"). */
void ctl_json_info_open(FILE *f, const struct tensord_tensor_info *t);

/* Print tensor metadata as one JSON object (no newline). */
void ctl_json_info(FILE *f, const struct tensord_tensor_info *t);

/* Print a shape as a JSON array of integers. */
void ctl_json_shape(FILE *f, uint32_t rank, const uint64_t *shape);

/* ---- input files: "-" is standard input ---- */

/* The most bytes of a safetensors file read from standard input. */
#define CTL_STDIN_ST_MAX ((size_t)16 << 30)

/* Read all of `path` ("-": standard input), at most `max` bytes, into a
 * malloc'd, NUL-terminated buffer. Returns CTL_EXIT_OK, or an exit status
 * with the error printed. */
int ctl_read_input(const char *path, size_t max, char **ret, size_t *ret_len);

/* st_load(), or for "-" standard input read into *ret_buf (free() it after
 * st_close(); NULL for a file). Returns 0, or -errno with a message in `err`. */
int ctl_st_load(const char *path, struct st_file *ret, void **ret_buf, char *err, size_t err_len);

/* Print a result that came back inline: a NumPy-style array, or with --json
 * {"dtype", "shape", "data"} (no newline in JSON mode). */
void ctl_print_inline(struct ctl *c, int dtype, uint32_t rank, const uint64_t *shape, const void *data,
		      size_t len);

/* Print "stored NAME: dtype shape, size, version, device" for people. */
void ctl_print_stored(const struct tensord_tensor_info *info);

/* Print a graph.run-shaped result {"outputs", "stored"} (graph, predict). */
int ctl_print_graph_result(struct ctl *c, const msgpack_object *res);

/* Pack a map holding the entries of `base` (a map, or NULL) whose keys
 * `extra` (a map) lacks, then every entry of `extra`. Nonzero on failure. */
int ctl_pack_merged(msgpack_packer *pk, const msgpack_object *base, const msgpack_object *extra);

/* Pack --data/--input pairs IN=TENSOR as a map {IN: TENSOR}. Returns
 * CTL_EXIT_OK, or CTL_EXIT_USAGE with the error printed (`opt` names the
 * option). */
int ctl_pack_pairs(msgpack_packer *pk, const char *const *pairs, int n, const char *opt);

/* map[key] as a double when it is a number (map may be NULL). */
bool ctl_map_number(const msgpack_object *map, const char *key, double *ret);

/* Parse a positive count option ("--batch-size 32"). Returns CTL_EXIT_OK or
 * CTL_EXIT_USAGE with the error printed. */
int ctl_parse_count(const char *opt, const char *text, uint64_t *ret);

/* Read the JSON file `path` (bounded size) and append it to `sb` as msgpack.
 * It must hold one object; `what` shows its shape in the message otherwise.
 * Returns CTL_EXIT_OK, or an exit status with the error printed. */
int ctl_read_json_map(const char *path, const char *what, msgpack_sbuffer *sb);

/* Check one entry {id: {"dtype", "shape", "data"}} of a result's "outputs"
 * map and print it: "id =" and the array for people, `"id":{...}` with
 * --json (the caller writes the separators). Returns an exit status. */
int ctl_print_output(struct ctl *c, const msgpack_object *key, const msgpack_object *o);

/* ---- training runs and jobs (ctl_common_jobs.c) ---- */

/* train --detach's answer {"job": N}: print the id. */
int ctl_print_job_started(struct ctl *c, const msgpack_object *res);

/* The running jobs of an info result (`jobs`), as lines for people;
 * nothing when there are none. */
void ctl_print_running_jobs(FILE *f, const msgpack_object *info);

/* The jobs table: its header line, and one job map as a row. */
void ctl_print_job_header(FILE *f);
void ctl_print_job_row(FILE *f, const msgpack_object *j);

/* A job map's str field for "%.*s" ("-" when absent or nil, cut at 64
 * bytes), and a uint field (0 when absent). */
const char *ctl_job_str(const msgpack_object *m, const char *key, int *ret_len);
uint64_t ctl_job_uint(const msgpack_object *m, const char *key);

/* Connect and `call` with the packed params in `sb`; with `progress`, the
 * run's train.progress and train.eval notifications are shown as they come
 * (a bar on a terminal, else lines; JSON lines with --json), as train and
 * logs -f do. The unpacked answer in `u` points into *ret_res, which the
 * caller frees after `u`. Returns an exit status with errors printed. */
int ctl_call_run(struct ctl *c, const msgpack_sbuffer *sb, ctl_raw_call_fn call, bool progress,
		 msgpack_unpacked *u, void **ret_res);

/* Print train.run's result map (a job's result too) as train does. */
int ctl_print_train_result(struct ctl *c, const msgpack_object *res);

/* map[key] as an integer, if it is one. */
bool ctl_map_int(const msgpack_object *map, const char *key, int64_t *ret);

/* ---- several devices (ctl_common_devices.c, docs/devices.md) ---- */

/* The most device ids one --devices list or one table holds. */
#define CTL_MAX_DEVICE_LIST 64

/* Parse a device id option ("--device 1"): a decimal int >= 0. Returns
 * CTL_EXIT_OK, or CTL_EXIT_USAGE with the error printed. */
int ctl_parse_device(const char *opt, const char *text, int *ret);

/* Pack "0,1,..." (option `opt`) as a msgpack array of device ids. Only the
 * syntax is checked here: which lists make sense is the daemon's to say.
 * Returns CTL_EXIT_OK, or an exit status with the error printed. */
int ctl_pack_device_list(msgpack_packer *pk, const char *opt, const char *text);

/* Whether an entry of info's `devices` is one tensord uses. */
bool ctl_device_active(const msgpack_object *d);

/* The active entries of info's `devices` array (may be NULL or no array),
 * sorted by id, into ret[0..cap); returns how many. */
size_t ctl_active_devices(const msgpack_object *devices, const msgpack_object **ret, size_t cap);

/* A device's memory limit: `memory_limit`, else (an older daemon) its heap. */
bool ctl_device_limit(const msgpack_object *d, uint64_t *ret);

/* Columns of a device table. */
enum ctl_device_col {
	CTL_DEV_ID = 0,
	CTL_DEV_INDEX,
	CTL_DEV_NAME,
	CTL_DEV_TYPE,
	CTL_DEV_USED,
	CTL_DEV_LIMIT,
	CTL_DEV_TENSORS,
	CTL_DEV_LOAD,           /* "35%" */
	CTL_DEV_USE,            /* a bar of used / limit */
	CTL_DEV_LOADBAR,        /* a bar of the load */
	CTL_DEV_COL_COUNT
};

/* The text of one cell ("-" when the daemon did not send the field). */
void ctl_device_cell(const msgpack_object *d, enum ctl_device_col col, char *buf, size_t cap);

/* An aligned table of `n` device maps with the columns `cols`, each line
 * starting with `indent`: a header, then a line per device. Device names
 * are cut to `name_max` bytes (0: shown whole, up to 40). */
void ctl_print_device_table(FILE *f, const msgpack_object *const *devs, size_t n,
			    const enum ctl_device_col *cols, int ncols, const char *indent, int name_max);

/* The width of the widest line of that table, without the indent. */
int ctl_device_table_width(const msgpack_object *const *devs, size_t n, const enum ctl_device_col *cols,
			   int ncols, int name_max);

/* info's `devices` for people: a table of the devices in use (id, Vulkan
 * index, name, type, memory used and limit, tensors, load), a line of details
 * for each, and a line for each device found but not used. */
void ctl_print_devices(FILE *f, const msgpack_object *devices);

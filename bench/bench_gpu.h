/* bench_gpu: what one workload measured, shared by the runner (bench_gpu.c),
 * the training workloads (bench_gpu_train.c) and the report
 * (bench_gpu_report.c); and the runner's request helpers the workload files
 * share. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "bench_util.h"

/* One workload's outcome. Times are medians per call (per training step);
 * NAN where a figure does not apply or was not measured. */
struct bench_result {
	char name[48];       /* e.g. "matmul_f32_4096": the op, dtype and size */
	const char *group;   /* "matmul", "elementwise", ..., for the reader */
	char desc[256];      /* what ran, with sizes */
	char params[512];    /* a JSON object with "kind" and the sizes, for compare_torch.py */
	const char *unit;    /* of kernel/e2e: "TFLOP/s", "GB/s", "us", "us/step", "ops/s" */
	bool lower_better;   /* latency-like units */
	double flops;        /* work of one call, 0 when not counted */
	double bytes;        /* bytes one call moves (stated in desc), 0 when not counted */
	unsigned reps;       /* timed repetitions */
	double gpu_ns;       /* median gpu_ns (Vulkan timestamps) */
	double wall_ns;      /* median wall time around the call (p50 for latency rows) */
	double daemon_ns;    /* training: train.run's own seconds / steps */
	double p99_ns;       /* latency rows: p99 wall time */
	double kernel;       /* figure in `unit` from gpu_ns (training: daemon_ns) */
	double e2e;          /* figure in `unit` from wall_ns */
	bool ran;            /* false when it failed: see error */
	char error[512];
};

/* Header facts for the report. */
struct bench_meta {
	const char *size;    /* "full" or "smoke" */
	char version[64];
	char device[256];
	unsigned reps, warmup;
};

/* Prints the results as an aligned table on stdout. */
void bench_report_table(const struct bench_meta *meta, const struct bench_result *res, size_t n);

/* Prints the results as one JSON object on stdout. */
void bench_report_json(const struct bench_meta *meta, const struct bench_result *res, size_t n);

/* ---- the runner's state and helpers (bench_gpu.c) ---------------------- */

/* Every bench tensor and model is named under this prefix. */
#define PFX "bench/gpu/"

/* The sizes of one --size. */
struct sizes {
	const char *name;
	unsigned reps, warmup;
	double warmup_s;         /* warm-up calls go on until this long has passed */
	uint64_t mm[2];          /* square f32 matmuls */
	uint64_t mm_half;        /* square f16 and bf16 matmuls */
	uint64_t bmm[4];         /* batch, M, K, N */
	uint64_t gemm_div;       /* the training-shaped GEMMs' M, K, N divided by this */
	uint64_t elems;          /* elementwise ops, the chain, reductions */
	uint64_t rows, cols;     /* softmax, layer_norm (last axis) */
	uint64_t conv[5];        /* N, C, O, H, W; 3x3, padding 1 */
	unsigned batch;          /* training minibatch of train_mlp_784 and _64 */
	unsigned train_rows;     /* rows of their stored random data set */
	unsigned mlp_batches[2]; /* the 784 MLP again at these batches (rows: 2 batches) */
	unsigned cnn_batch, cnn_rows;       /* the digits CNN */
	unsigned tf_vocab, tf_dim, tf_heads, tf_layers, tf_seq, tf_batch, tf_rows; /* chars */
	unsigned train_warmup;   /* untimed steps first */
	unsigned train_steps;    /* steps per timed train.run */
	unsigned train_reps;     /* timed train.runs */
	unsigned pings, lat_warmup, lat_ops;
	unsigned depth, pipelined;
	uint64_t transfer_bytes;
	unsigned transfer_reps;
};

struct bench {
	const char *path;
	struct tensord *td;
	const struct sizes *sz;
	unsigned reps, warmup;
	bool dry;               /* only name and describe the workloads */
	msgpack_sbuffer sb;     /* params of the request being built */
	msgpack_packer pk;
};

enum kv_type { KV_INT, KV_NUM, KV_STR, KV_INTS, KV_BOOL };

/* One attribute of an op. */
struct kv {
	const char *key;
	enum kv_type type;
	int64_t i;
	double d;
	const char *s;
	unsigned n;
	uint64_t ints[8];
};

#define KVI(k, v) { .key = (k), .type = KV_INT, .i = (v) }
#define KVD(k, v) { .key = (k), .type = KV_NUM, .d = (v) }
#define KVS(k, v) { .key = (k), .type = KV_STR, .s = (v) }
#define KVB(k, v) { .key = (k), .type = KV_BOOL, .i = (v) }

/* Marks `res` failed with the formatted message; returns -1. */
int fail(struct bench_result *res, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Marks `res` failed with `what` and the connection's last error; returns -1. */
int fail_td(struct bench *b, struct bench_result *res, const char *what);

/* The attr "shape" = dims[0..rank). */
struct kv kv_shape(unsigned rank, const uint64_t *dims);

/* Packs a node of graph.run / train.run (`id`, `out` may be NULL), or with
 * `profile` >= 0 the params of op.run (no id); 0 or -ENOMEM. */
int pack_op(msgpack_packer *pk, const char *id, const char *op, unsigned nin,
	    const char *const *in, const struct kv *kv, unsigned nkv, const char *out, int profile);

/* Clears b->sb and returns the packer that writes the next request's params. */
msgpack_packer *params_begin(struct bench *b);

/* A number under `key` in a packed result map into *ret; -ENOENT when there is none. */
int result_number(const void *raw, size_t len, const char *key, double *ret);

/* One call of `method` with the params built in b->sb. On success the packed
 * result goes to *ret_raw (free() it; NULL to drop it) and the wall time to
 * *ret_wall_s (may be NULL); on failure `res` carries `what` and the error. */
int call(struct bench *b, struct bench_result *res, const char *method, const char *what,
	 void **ret_raw, size_t *ret_len, double *ret_wall_s);

/* Stores `name` = randn(shape) with `seed`, in `dtype` (f32, or f16/bf16 cast
 * from an f32 randn); 0 or -1 with `res` failed. */
int make_randn(struct bench *b, struct bench_result *res, const char *name, unsigned rank,
	       const uint64_t *dims, int64_t seed, const char *dtype);

/* ---- the training workloads (bench_gpu_train.c) ------------------------ */

/* The MLPs through train.run on graph nodes. arg: 0 = 784-512-512-10 at
 * sz->batch, 1 = 64-128-10 (the digits MLP) at sz->batch, 2 and 3 =
 * 784-512-512-10 at sz->mlp_batches[0] and [1], 4 and 5 = the same with
 * train.run's precision "bf16" (names end _bf16). With b->dry only the name,
 * description and params are filled in. 0, or -1 with `res` failed. */
int wl_train_mlp(struct bench *b, struct bench_result *res, int arg);

/* The digits CNN (arg 0) or the char transformer (arg 1; 2: precision
 * "bf16"), defined with model.define's layer form and trained with
 * train.run; as wl_train_mlp. */
int wl_train_model(struct bench *b, struct bench_result *res, int arg);

/* Deletes every model named under PFX with its tensors; errors are ignored. */
void bench_delete_models(struct bench *b);

/* `n` bytes as "1GiB", "64MiB" or "123B" into out[len]. */
void fmt_bytes(char *out, size_t len, uint64_t n);

/* The request-path workloads (bench_gpu_io.c), as wl_train_mlp: ping's
 * round trip; a one-element op.run's latency; pipelined one-element
 * op.runs on one connection; tensor.put (arg 0) or tensor.get (arg 1) of
 * sz->transfer bytes. */
int wl_ping(struct bench *b, struct bench_result *res, int arg);
int wl_op_latency(struct bench *b, struct bench_result *res, int arg);
int wl_pipelined(struct bench *b, struct bench_result *res, int arg);
int wl_transfer(struct bench *b, struct bench_result *res, int arg);

/* The workload sizes of --size full and --size smoke (bench_gpu_args.c). */
extern const struct sizes bench_size_full, bench_size_smoke;

/* bench_gpu's options. */
/* The command line. */
struct opts {
	const char *path, *only;
	const struct sizes *sz;
	unsigned reps, warmup, wait_s, train_steps, train_warmup;
	bool json, list, quiet, have_reps, have_warmup, have_steps, have_train_warmup;
};

/* --help's text into f. */
void bench_usage(FILE *f);

/* Parse argv into *o (o->sz preset to the default sizes): 0 with *ret_exit
 * false to go on, 0 with *ret_exit true after --help, or 2 (the exit
 * status) for bad arguments, with the usage printed. */
int bench_parse_args(int argc, char **argv, struct opts *o, bool *ret_exit);

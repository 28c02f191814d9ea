/* bench_gpu: what one workload measured, shared by the runner (bench_gpu.c)
 * and the report (bench_gpu_report.c). */
#pragma once

#include <stdbool.h>
#include <stddef.h>

/* One workload's outcome. Times are medians per call (per training step);
 * NAN where a figure does not apply or was not measured. */
struct bench_result {
	char name[48];       /* e.g. "matmul_f32_4096": the op, dtype and size */
	const char *group;   /* "matmul", "elementwise", ..., for the reader */
	char desc[192];      /* what ran, with sizes */
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

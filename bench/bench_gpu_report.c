/* bench_gpu's output: an aligned table for people, JSON for compare_torch.py. */
#include <math.h>
#include <stdio.h>

#include "bench_gpu.h"
#include "bench_util.h"

static void fmt_time(char *out, size_t len, double ns)
{
	if (isnan(ns))
		snprintf(out, len, "-");
	else if (ns < 1e3)
		snprintf(out, len, "%.0f ns", ns);
	else if (ns < 1e6)
		snprintf(out, len, "%.2f us", ns / 1e3);
	else if (ns < 1e9)
		snprintf(out, len, "%.2f ms", ns / 1e6);
	else
		snprintf(out, len, "%.3f s", ns / 1e9);
}

static void fmt_value(char *out, size_t len, double v)
{
	if (isnan(v) || isinf(v))
		snprintf(out, len, "-");
	else if (v >= 1e5)
		snprintf(out, len, "%.0f", v);
	else if (v >= 100)
		snprintf(out, len, "%.1f", v);
	else if (v >= 1)
		snprintf(out, len, "%.2f", v);
	else
		snprintf(out, len, "%.3g", v);
}

void bench_report_table(const struct bench_meta *meta, const struct bench_result *res, size_t n)
{
	printf("tensord %s on %s; size %s; medians of %u reps after %u warm-up calls\n",
	       meta->version, meta->device, meta->size, meta->reps, meta->warmup);
	printf("kernel = gpu_ns of the request's GPU submission (training: train.run's seconds/steps);\n"
	       "e2e = wall clock around the whole call through the socket. GB = 1e9 bytes.\n"
	       "Training rows: the times are per step, the rates samples (rows) per second.\n\n");
	printf("%-22s %10s %10s %10s %10s  %-9s %s\n", "workload", "kernel", "e2e", "kernel", "e2e",
	       "unit", "what");
	printf("%-22s %10s %10s %10s %10s  %-9s %s\n", "----------------------", "----------",
	       "----------", "----------", "----------", "---------", "----");
	for (size_t i = 0; i < n; i++) {
		const struct bench_result *r = &res[i];
		char kt[32], et[32], kv[32], ev[32];

		if (!r->ran) {
			printf("%-22s FAILED: %s\n", r->name, r->error);
			continue;
		}
		fmt_time(kt, sizeof(kt), isnan(r->gpu_ns) ? r->daemon_ns : r->gpu_ns);
		fmt_time(et, sizeof(et), r->wall_ns);
		fmt_value(kv, sizeof(kv), r->kernel);
		fmt_value(ev, sizeof(ev), r->e2e);
		printf("%-22s %10s %10s %10s %10s  %-9s %s\n", r->name, kt, et, kv, ev, r->unit, r->desc);
	}
}

void bench_report_json(const struct bench_meta *meta, const struct bench_result *res, size_t n)
{
	printf("{\n  \"tensord\": {\"version\": ");
	bench_json_string(meta->version);
	printf(", \"device\": ");
	bench_json_string(meta->device);
	printf("},\n  \"size\": ");
	bench_json_string(meta->size);
	printf(",\n  \"reps\": %u,\n  \"warmup\": %u,\n  \"workloads\": [\n", meta->reps, meta->warmup);
	for (size_t i = 0; i < n; i++) {
		const struct bench_result *r = &res[i];
		static const struct {
			const char *key;
			size_t off;
		} nums[] = {
			{ "gpu_ns", offsetof(struct bench_result, gpu_ns) },
			{ "wall_ns", offsetof(struct bench_result, wall_ns) },
			{ "daemon_ns", offsetof(struct bench_result, daemon_ns) },
			{ "p99_ns", offsetof(struct bench_result, p99_ns) },
			{ "kernel", offsetof(struct bench_result, kernel) },
			{ "e2e", offsetof(struct bench_result, e2e) },
		};

		printf("    {\"name\": ");
		bench_json_string(r->name);
		printf(", \"group\": ");
		bench_json_string(r->group);
		printf(", \"desc\": ");
		bench_json_string(r->desc);
		printf(", \"params\": %s, \"unit\": ", r->params[0] ? r->params : "{}");
		bench_json_string(r->unit ? r->unit : "");
		printf(", \"better\": \"%s\", \"flops\": ", r->lower_better ? "lower" : "higher");
		bench_json_number(r->flops > 0 ? r->flops : NAN);
		printf(", \"bytes\": ");
		bench_json_number(r->bytes > 0 ? r->bytes : NAN);
		printf(", \"reps\": %u", r->reps);
		for (size_t k = 0; k < sizeof(nums) / sizeof(nums[0]); k++) {
			printf(", \"%s\": ", nums[k].key);
			bench_json_number(r->ran ? *(const double *)(const void *)((const char *)r + nums[k].off)
						 : NAN);
		}
		printf(", \"error\": ");
		if (r->ran)
			printf("null");
		else
			bench_json_string(r->error);
		printf("}%s\n", i + 1 < n ? "," : "");
	}
	printf("  ]\n}\n");
}

/* bench_gpu's command line and its two size sets (bench_gpu.h). */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_gpu.h"

const struct sizes bench_size_full = {
	.name = "full", .reps = 20, .warmup = 3, .warmup_s = 0.5,
	.mm = { 4096, 8192 }, .mm_half = 8192,
	.bmm = { 64, 512, 512, 64 },
	.gemm_div = 1,
	.elems = (uint64_t)64 << 20,
	.rows = 4096, .cols = 4096,
	.conv = { 32, 256, 256, 56, 56 },
	.batch = 256, .train_rows = 256 * 64, .mlp_batches = { 4096, 16384 },
	.cnn_batch = 1024, .cnn_rows = 1024 * 16,
	.tf_vocab = 76, .tf_dim = 256, .tf_heads = 4, .tf_layers = 2, .tf_seq = 128, .tf_batch = 32,
	.tf_rows = 32 * 16,
	.train_warmup = 20, .train_steps = 256, .train_reps = 3,
	.pings = 20000, .lat_warmup = 1000, .lat_ops = 5000,
	.depth = 64, .pipelined = 20000,
	.transfer_bytes = (uint64_t)1 << 30, .transfer_reps = 5,
};

/* Tiny, for CI on lavapipe: the same code paths, no meaningful numbers. */
const struct sizes bench_size_smoke = {
	.name = "smoke", .reps = 2, .warmup = 1,
	.mm = { 48, 64 }, .mm_half = 64,
	.bmm = { 4, 32, 32, 16 },
	.gemm_div = 16,
	.elems = (uint64_t)64 << 10,
	.rows = 64, .cols = 128,
	.conv = { 2, 8, 8, 8, 8 },
	.batch = 16, .train_rows = 64, .mlp_batches = { 32, 64 },
	.cnn_batch = 16, .cnn_rows = 64,
	.tf_vocab = 76, .tf_dim = 32, .tf_heads = 2, .tf_layers = 2, .tf_seq = 16, .tf_batch = 4,
	.tf_rows = 16,
	.train_warmup = 1, .train_steps = 3, .train_reps = 1,
	.pings = 200, .lat_warmup = 20, .lat_ops = 50,
	.depth = 16, .pipelined = 256,
	.transfer_bytes = (uint64_t)4 << 20, .transfer_reps = 2,
};


void bench_usage(FILE *f)
{
	fprintf(f,
		"usage: bench_gpu [--socket PATH] [--size full|smoke] [--json] [options]\n"
		"  --socket PATH   tensord socket (default $TENSORD_SOCKET, else\n"
		"                  /run/tensord/tensord.sock)\n"
		"  --size S        full (the H100 table, default) or smoke (tiny, for CI)\n"
		"  --json          machine-readable output (for bench/compare_torch.py)\n"
		"  --reps N        timed calls per op workload (default: full 20, smoke 2)\n"
		"  --warmup N      untimed calls first (default: full 3, smoke 1)\n"
		"  --train-steps N steps of each timed train.run (default: full 256, smoke 3)\n"
		"  --train-warmup N  steps of the untimed train.run first (default: full 20,\n"
		"                  smoke 1; 0: none)\n"
		"  --only LIST     comma-separated name substrings or groups (matmul,\n"
		"                  elementwise, reduction, normalization, conv, training,\n"
		"                  latency, transfer)\n"
		"  --list          print the workloads of this size and exit (with --json:\n"
		"                  the JSON report with every figure null)\n"
		"  --wait SEC      wait up to SEC seconds for the socket to accept\n"
		"  --quiet         no progress lines on stderr\n"
		"Exit status: 0 all workloads ran, 3 some failed (listed with their\n"
		"error), 1 no daemon, 2 usage.\n");
}

int bench_parse_args(int argc, char **argv, struct opts *o, bool *ret_exit)
{
	enum { OPT_SOCKET = 256, OPT_SIZE, OPT_JSON, OPT_REPS, OPT_WARMUP, OPT_ONLY, OPT_LIST,
	       OPT_WAIT, OPT_QUIET, OPT_TRAIN_STEPS, OPT_TRAIN_WARMUP };
	static const struct option longopts[] = {
		{ "socket", required_argument, NULL, OPT_SOCKET },
		{ "size", required_argument, NULL, OPT_SIZE },
		{ "json", no_argument, NULL, OPT_JSON },
		{ "reps", required_argument, NULL, OPT_REPS },
		{ "warmup", required_argument, NULL, OPT_WARMUP },
		{ "only", required_argument, NULL, OPT_ONLY },
		{ "list", no_argument, NULL, OPT_LIST },
		{ "wait", required_argument, NULL, OPT_WAIT },
		{ "quiet", no_argument, NULL, OPT_QUIET },
		{ "train-steps", required_argument, NULL, OPT_TRAIN_STEPS },
		{ "train-warmup", required_argument, NULL, OPT_TRAIN_WARMUP },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	*ret_exit = true;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		int e = 0;

		switch (c) {
		case OPT_SOCKET: o->path = optarg; break;
		case OPT_SIZE:
			if (!strcmp(optarg, "full"))
				o->sz = &bench_size_full;
			else if (!strcmp(optarg, "smoke"))
				o->sz = &bench_size_smoke;
			else
				e = -EINVAL;
			break;
		case OPT_JSON: o->json = true; break;
		case OPT_REPS: e = bench_parse_uint(optarg, 1, 100000, &o->reps); o->have_reps = true; break;
		case OPT_WARMUP:
			e = bench_parse_uint(optarg, 0, 100000, &o->warmup);
			o->have_warmup = true;
			break;
		case OPT_ONLY: o->only = optarg; break;
		case OPT_LIST: o->list = true; break;
		case OPT_WAIT: e = bench_parse_uint(optarg, 0, 3600, &o->wait_s); break;
		case OPT_QUIET: o->quiet = true; break;
		case OPT_TRAIN_STEPS:
			e = bench_parse_uint(optarg, 1, 1000000, &o->train_steps);
			o->have_steps = true;
			break;
		case OPT_TRAIN_WARMUP:
			e = bench_parse_uint(optarg, 0, 1000000, &o->train_warmup);
			o->have_train_warmup = true;
			break;
		case 'h': bench_usage(stdout); return 0;
		default: bench_usage(stderr); return 2;
		}
		if (e < 0) {
			fprintf(stderr, "bench_gpu: bad value for --%s: %s\n",
				longopts[c - OPT_SOCKET].name, optarg);
			return 2;
		}
	}
	if (optind != argc) {
		bench_usage(stderr);
		return 2;
	}
	*ret_exit = false;
	return 0;
}

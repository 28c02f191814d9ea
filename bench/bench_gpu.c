/* bench_gpu: tensord's kernels and request path on the device it runs on, the
 * tensord half of bench/compare_torch.py (see bench/README.md).
 *
 * Against a running tensord, per workload: inputs are made on the GPU (`randn`
 * with a fixed seed, `cast` for f16/bf16), warm-up calls run untimed (the first
 * builds the pipelines), then timed calls of the op with `out` (the result
 * stays on the GPU) and `profile: true`. Per workload it reports the median of
 * gpu_ns (Vulkan timestamps around the request's submission), the median wall
 * time around the whole call through the socket (CLOCK_MONOTONIC), and the
 * throughput derived from each. Tensors are named bench/gpu/... and deleted
 * after each workload. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_gpu.h"
#include "bench_util.h"
#include "tensord.h"

/* ---- failures ---------------------------------------------------------- */

int fail(struct bench_result *res, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(res->error, sizeof(res->error), fmt, ap);
	va_end(ap);
	res->ran = false;
	return -1;
}

int fail_td(struct bench *b, struct bench_result *res, const char *what)
{
	return fail(res, "%s: %s", what, tensord_last_error(b->td));
}

/* ---- request building -------------------------------------------------- */

struct kv kv_shape(unsigned rank, const uint64_t *dims)
{
	struct kv kv = { .key = "shape", .type = KV_INTS, .n = rank };

	memcpy(kv.ints, dims, rank * sizeof(*dims));
	return kv;
}

static int pack_kvs(msgpack_packer *pk, const struct kv *kv, unsigned n)
{
	if (msgpack_pack_map(pk, n))
		return -ENOMEM;
	for (unsigned i = 0; i < n; i++) {
		int e = bench_pack_str(pk, kv[i].key);

		switch (kv[i].type) {
		case KV_INT: e = e || msgpack_pack_int64(pk, kv[i].i); break;
		case KV_NUM: e = e || msgpack_pack_double(pk, kv[i].d); break;
		case KV_STR: e = e || bench_pack_str(pk, kv[i].s); break;
		case KV_BOOL: e = e || (kv[i].i ? msgpack_pack_true(pk) : msgpack_pack_false(pk)); break;
		case KV_INTS:
			e = e || msgpack_pack_array(pk, kv[i].n);
			for (unsigned j = 0; j < kv[i].n; j++)
				e = e || msgpack_pack_uint64(pk, kv[i].ints[j]);
			break;
		}
		if (e)
			return -ENOMEM;
	}
	return 0;
}

static int pack_strs(msgpack_packer *pk, unsigned n, const char *const *s)
{
	if (msgpack_pack_array(pk, n))
		return -ENOMEM;
	for (unsigned i = 0; i < n; i++)
		if (bench_pack_str(pk, s[i]) < 0)
			return -ENOMEM;
	return 0;
}

/* A node of graph.run / train.run (`id`, `out` may be NULL), or with
 * `profile` >= 0 the params of op.run (no id). */
int pack_op(msgpack_packer *pk, const char *id, const char *op, unsigned nin,
	    const char *const *in, const struct kv *kv, unsigned nkv, const char *out, int profile)
{
	unsigned entries = 2 + (id != NULL) + (nkv > 0) + (out != NULL) + (profile > 0);

	if (msgpack_pack_map(pk, entries) || (id && (bench_pack_str(pk, "id") < 0 ||
						     bench_pack_str(pk, id) < 0)) ||
	    bench_pack_str(pk, "op") < 0 || bench_pack_str(pk, op) < 0 ||
	    bench_pack_str(pk, "inputs") < 0 || pack_strs(pk, nin, in) < 0 ||
	    (nkv > 0 && (bench_pack_str(pk, "attrs") < 0 || pack_kvs(pk, kv, nkv) < 0)) ||
	    (out && (bench_pack_str(pk, "out") < 0 || bench_pack_str(pk, out) < 0)) ||
	    (profile > 0 && (bench_pack_str(pk, "profile") < 0 || msgpack_pack_true(pk))))
		return -ENOMEM;
	return 0;
}

/* Starts the params of the next request. */
msgpack_packer *params_begin(struct bench *b)
{
	msgpack_sbuffer_clear(&b->sb);
	return &b->pk;
}

/* ---- calls ------------------------------------------------------------- */

/* A number under `key` in a packed result map; -ENOENT when there is none. */
int result_number(const void *raw, size_t len, const char *key, double *ret)
{
	msgpack_unpacked msg;
	size_t off = 0;
	int r = -ENOENT;

	msgpack_unpacked_init(&msg);
	if (msgpack_unpack_next(&msg, raw, len, &off) == MSGPACK_UNPACK_SUCCESS) {
		const msgpack_object *o = bench_map_get(&msg.data, key);

		if (o && o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
			*ret = (double)o->via.u64;
			r = 0;
		} else if (o && (o->type == MSGPACK_OBJECT_FLOAT64 || o->type == MSGPACK_OBJECT_FLOAT32)) {
			*ret = o->via.f64;
			r = 0;
		}
	}
	msgpack_unpacked_destroy(&msg);
	return r;
}

/* One call of `method` with the params built in b->sb. On success the packed
 * result goes to *ret_raw (free() it; NULL to drop it) and the wall time to
 * *ret_wall_s (may be NULL). */
int call(struct bench *b, struct bench_result *res, const char *method, const char *what,
	 void **ret_raw, size_t *ret_len, double *ret_wall_s)
{
	void *raw = NULL;
	size_t len = 0;
	double t0 = bench_now_s(), dt;
	int r = tensord_call_raw(b->td, method, b->sb.data, b->sb.size, &raw, &len);

	dt = bench_now_s() - t0;
	if (r < 0)
		return fail_td(b, res, what);
	if (ret_raw) {
		*ret_raw = raw;
		*ret_len = len;
	} else {
		free(raw);
	}
	if (ret_wall_s)
		*ret_wall_s = dt;
	return 0;
}

/* Times the request built in b->sb: b->warmup untimed calls (and more until
 * the size's warmup_s has passed, unless --warmup is 0), then b->reps timed ones; medians into
 * res->wall_ns and, with `profiled`, res->gpu_ns (which every result must
 * then carry). On the H100 the implicit-GEMM convolution's first ten or so
 * calls in a daemon ran 4.7x slower than the rest (20.4 against 4.34 ms), so
 * three warm-up calls left its median on the slow ones. */
static int time_calls(struct bench *b, struct bench_result *res, const char *method,
		      const char *what, bool profiled)
{
	double *wall = calloc(b->reps, sizeof(*wall)), *gpu = calloc(b->reps, sizeof(*gpu));
	int r = 0;

	if (!wall || !gpu) {
		r = fail(res, "out of memory");
		goto out;
	}
	double t0 = bench_now_s();
	unsigned warmup = b->warmup;

	for (unsigned i = 0; i < warmup + b->reps; i++) {
		void *raw = NULL;
		size_t len = 0;
		double dt = 0, ns = NAN;

		if (i + 1 == warmup && b->warmup && bench_now_s() - t0 < b->sz->warmup_s && warmup < 1000)
			warmup++;

		if ((r = call(b, res, method, what, &raw, &len, &dt)) < 0)
			goto out;
		if (profiled && result_number(raw, len, "gpu_ns", &ns) < 0) {
			free(raw);
			r = fail(res, "%s: the result has no gpu_ns (a daemon without profile: true?)",
				 what);
			goto out;
		}
		free(raw);
		if (i >= warmup) {
			wall[i - warmup] = dt * 1e9;
			gpu[i - warmup] = ns;
		}
	}
	res->reps = b->reps;
	res->wall_ns = bench_median(wall, b->reps);
	if (profiled)
		res->gpu_ns = bench_median(gpu, b->reps);
out:
	free(wall);
	free(gpu);
	return r;
}

/* Runs one op with `out` (setup, untimed). */
static int run_op(struct bench *b, struct bench_result *res, const char *op, unsigned nin,
		  const char *const *in, const struct kv *kv, unsigned nkv, const char *out)
{
	char what[96];

	if (pack_op(params_begin(b), NULL, op, nin, in, kv, nkv, out, 0) < 0)
		return fail(res, "out of memory");
	snprintf(what, sizeof(what), "setup %s -> %s", op, out);
	return call(b, res, "op.run", what, NULL, NULL, NULL);
}

/* `name` = randn(shape) with `seed`, in `dtype`: f32 straight from randn,
 * f16/bf16 cast from an f32 randn. */
int make_randn(struct bench *b, struct bench_result *res, const char *name, unsigned rank,
	       const uint64_t *dims, int64_t seed, const char *dtype)
{
	struct kv kv[3] = { kv_shape(rank, dims), KVI("seed", seed), KVS("dtype", "f32") };
	const char *tmp = PFX "tmp";
	const char *in[1] = { tmp };
	struct kv cast[1] = { KVS("dtype", dtype) };

	if (!strcmp(dtype, "f32"))
		return run_op(b, res, "randn", 0, NULL, kv, 3, name);
	if (run_op(b, res, "randn", 0, NULL, kv, 3, tmp) < 0 ||
	    run_op(b, res, "cast", 1, in, cast, 1, name) < 0)
		return -1;
	if (tensord_delete(b->td, tmp) < 0)
		return fail_td(b, res, "setup: tensor.delete");
	return 0;
}

/* Derives the throughputs from res->flops or res->bytes. */
static void set_rates(struct bench_result *res)
{
	if (res->flops > 0) {
		res->kernel = res->flops / res->gpu_ns / 1e3; /* TFLOP/s */
		res->e2e = res->flops / res->wall_ns / 1e3;
	} else if (res->bytes > 0) {
		res->kernel = res->bytes / res->gpu_ns; /* GB/s */
		res->e2e = res->bytes / res->wall_ns;
	}
}

/* "64M", "4K" or the number, for names. */
static void fmt_count(char *out, size_t len, uint64_t n)
{
	if (n >= (1u << 20) && n % (1u << 20) == 0)
		snprintf(out, len, "%lluM", (unsigned long long)(n >> 20));
	else if (n >= (1u << 10) && n % (1u << 10) == 0)
		snprintf(out, len, "%lluK", (unsigned long long)(n >> 10));
	else
		snprintf(out, len, "%llu", (unsigned long long)n);
}

void fmt_bytes(char *out, size_t len, uint64_t n)
{
	if (n >= (1u << 30) && n % (1u << 30) == 0)
		snprintf(out, len, "%lluGiB", (unsigned long long)(n >> 30));
	else if (n >= (1u << 20) && n % (1u << 20) == 0)
		snprintf(out, len, "%lluMiB", (unsigned long long)(n >> 20));
	else
		snprintf(out, len, "%lluB", (unsigned long long)n);
}

/* ---- workloads --------------------------------------------------------- */

/* arg: 0, 1 = f32 sizes mm[0], mm[1]; 2 = f16, 3 = bf16 (mm_half); 4 = batched. */
static int wl_matmul(struct bench *b, struct bench_result *res, int arg)
{
	static const char *const dtypes[] = { "f32", "f32", "f16", "bf16", "f32" };
	const char *dtype = dtypes[arg];
	const char *in[2] = { PFX "a", PFX "b" };
	const struct sizes *sz = b->sz;
	uint64_t bt = 1, m, k, n;
	uint64_t da[3], db[3];
	unsigned rank = 2;

	if (arg == 4) {
		bt = sz->bmm[0], m = sz->bmm[1], k = sz->bmm[2], n = sz->bmm[3];
		rank = 3;
		da[0] = db[0] = bt;
		snprintf(res->name, sizeof(res->name), "bmm_f32_%llux%llu", (unsigned long long)bt,
			 (unsigned long long)m);
		snprintf(res->desc, sizeof(res->desc),
			 "f32 %llu x ([%llu,%llu] @ [%llu,%llu]), 2*B*M*N*K flops",
			 (unsigned long long)bt, (unsigned long long)m, (unsigned long long)k,
			 (unsigned long long)k, (unsigned long long)n);
	} else {
		m = k = n = arg < 2 ? sz->mm[arg] : sz->mm_half;
		snprintf(res->name, sizeof(res->name), "matmul_%s_%llu", dtype, (unsigned long long)m);
		snprintf(res->desc, sizeof(res->desc),
			 "%s [%llu,%llu] @ [%llu,%llu], 2*M*N*K flops%s", dtype,
			 (unsigned long long)m, (unsigned long long)k, (unsigned long long)k,
			 (unsigned long long)n, arg >= 2 ? ", f32 accumulate" : "");
	}
	da[rank - 2] = m, da[rank - 1] = k;
	db[rank - 2] = k, db[rank - 1] = n;
	snprintf(res->params, sizeof(res->params),
		 "{\"kind\": \"matmul\", \"batch\": %llu, \"m\": %llu, \"k\": %llu, \"n\": %llu, "
		 "\"dtype\": \"%s\"}",
		 (unsigned long long)(arg == 4 ? bt : 0), (unsigned long long)m,
		 (unsigned long long)k, (unsigned long long)n, dtype);
	res->unit = "TFLOP/s";
	res->flops = 2.0 * (double)bt * (double)m * (double)n * (double)k;
	if (b->dry)
		return 0;
	if (make_randn(b, res, in[0], rank, da, 1, dtype) < 0 ||
	    make_randn(b, res, in[1], rank, db, 2, dtype) < 0)
		return -1;
	if (pack_op(params_begin(b), NULL, "matmul", 2, in, NULL, 0, PFX "out", 1) < 0)
		return fail(res, "out of memory");
	if (time_calls(b, res, "op.run", "op.run matmul", true) < 0)
		return -1;
	set_rates(res);
	return 0;
}

/* The products of an MLP 784-512-512-10 training step at batch 16384
 * (issue 16): weight gradients (small output, K = the batch, the left
 * operand read transposed), forward products, an input gradient (the right
 * operand transposed), and the first weight gradient with xᵀ stored (NN),
 * what the backward ran before the transpose attrs. */
static const struct gemm_shape {
	const char *name;
	uint64_t m, k, n;
	bool ta, tb;
	const char *what;
} gemm_shapes[] = {
	{ "gemm_tn", 784, 16384, 512, true, false, "weight gradient x^T g" },
	{ "gemm_tn", 512, 16384, 512, true, false, "weight gradient h^T g" },
	{ "gemm_nn", 16384, 784, 512, false, false, "forward x W1" },
	{ "gemm_nn", 16384, 512, 10, false, false, "forward h W3" },
	{ "gemm_nt", 16384, 512, 784, false, true, "input gradient g W1^T" },
	{ "gemm_nn", 784, 16384, 512, false, false, "x^T g, x^T stored" },
};

/* arg: an index into gemm_shapes. */
static int wl_gemm(struct bench *b, struct bench_result *res, int arg)
{
	const struct gemm_shape *g = &gemm_shapes[arg];
	const char *in[2] = { PFX "a", PFX "b" };
	uint64_t div = b->sz->gemm_div, m = (g->m + div - 1) / div, k = (g->k + div - 1) / div;
	uint64_t n = (g->n + div - 1) / div;
	uint64_t da[2] = { g->ta ? k : m, g->ta ? m : k }, db[2] = { g->tb ? n : k, g->tb ? k : n };
	struct kv kv[2] = { KVB("transpose_a", g->ta), KVB("transpose_b", g->tb) };
	unsigned nkv = g->ta || g->tb ? 2 : 0;

	snprintf(res->name, sizeof(res->name), "%s_%llux%llu_k%llu", g->name, (unsigned long long)m,
		 (unsigned long long)n, (unsigned long long)k);
	snprintf(res->desc, sizeof(res->desc), "f32 %s: [%llu,%llu] @ [%llu,%llu]%s%s, 2*M*N*K flops", g->what,
		 (unsigned long long)m, (unsigned long long)k, (unsigned long long)k, (unsigned long long)n,
		 g->ta ? ", a stored transposed" : "", g->tb ? ", b stored transposed" : "");
	snprintf(res->params, sizeof(res->params),
		 "{\"kind\": \"matmul\", \"batch\": 0, \"m\": %llu, \"k\": %llu, \"n\": %llu, "
		 "\"dtype\": \"f32\", \"ta\": %s, \"tb\": %s}",
		 (unsigned long long)m, (unsigned long long)k, (unsigned long long)n, g->ta ? "true" : "false",
		 g->tb ? "true" : "false");
	res->unit = "TFLOP/s";
	res->flops = 2.0 * (double)m * (double)n * (double)k;
	if (b->dry)
		return 0;
	if (make_randn(b, res, in[0], 2, da, 1, "f32") < 0 || make_randn(b, res, in[1], 2, db, 2, "f32") < 0)
		return -1;
	if (pack_op(params_begin(b), NULL, "matmul", 2, in, kv, nkv, PFX "out", 1) < 0)
		return fail(res, "out of memory");
	if (time_calls(b, res, "op.run", "op.run matmul", true) < 0)
		return -1;
	set_rates(res);
	return 0;
}

/* arg: 0 = add, 1 = mul. */
static int wl_binary(struct bench *b, struct bench_result *res, int arg)
{
	const char *op = arg ? "mul" : "add";
	const char *in[2] = { PFX "x", PFX "y" };
	uint64_t n = b->sz->elems;
	char cnt[24];

	fmt_count(cnt, sizeof(cnt), n);
	snprintf(res->name, sizeof(res->name), "%s_f32_%s", op, cnt);
	snprintf(res->desc, sizeof(res->desc),
		 "f32 [%llu] %s [%llu]; bytes = 2 read + 1 written = %.0f", (unsigned long long)n,
		 arg ? "*" : "+", (unsigned long long)n, 12.0 * (double)n);
	snprintf(res->params, sizeof(res->params), "{\"kind\": \"binary\", \"op\": \"%s\", \"n\": %llu}",
		 op, (unsigned long long)n);
	res->unit = "GB/s";
	res->bytes = 12.0 * (double)n;
	if (b->dry)
		return 0;
	if (make_randn(b, res, in[0], 1, &n, 3, "f32") < 0 ||
	    make_randn(b, res, in[1], 1, &n, 4, "f32") < 0)
		return -1;
	if (pack_op(params_begin(b), NULL, op, 2, in, NULL, 0, PFX "out", 1) < 0)
		return fail(res, "out of memory");
	if (time_calls(b, res, "op.run", op, true) < 0)
		return -1;
	set_rates(res);
	return 0;
}

/* x * sigmoid(x) + b as one graph.run of three nodes. */
static int wl_chain(struct bench *b, struct bench_result *res, int arg)
{
	const char *x[1] = { PFX "x" }, *xs[2] = { PFX "x", "s" }, *mb[2] = { "m", PFX "b" };
	msgpack_packer *pk;
	uint64_t n = b->sz->elems;
	char cnt[24];

	(void)arg;
	fmt_count(cnt, sizeof(cnt), n);
	snprintf(res->name, sizeof(res->name), "chain_f32_%s", cnt);
	snprintf(res->desc, sizeof(res->desc),
		 "x*sigmoid(x)+b, f32 [%llu], one graph.run of 3 nodes; bytes = x, b read + 1 "
		 "written = %.0f", (unsigned long long)n, 12.0 * (double)n);
	snprintf(res->params, sizeof(res->params), "{\"kind\": \"chain\", \"n\": %llu}",
		 (unsigned long long)n);
	res->unit = "GB/s";
	res->bytes = 12.0 * (double)n;
	if (b->dry)
		return 0;
	if (make_randn(b, res, x[0], 1, &n, 5, "f32") < 0 ||
	    make_randn(b, res, mb[1], 1, &n, 6, "f32") < 0)
		return -1;
	pk = params_begin(b);
	if (msgpack_pack_map(pk, 2) || bench_pack_str(pk, "nodes") < 0 || msgpack_pack_array(pk, 3) ||
	    pack_op(pk, "s", "sigmoid", 1, x, NULL, 0, NULL, 0) < 0 ||
	    pack_op(pk, "m", "mul", 2, xs, NULL, 0, NULL, 0) < 0 ||
	    pack_op(pk, "o", "add", 2, mb, NULL, 0, PFX "out", 0) < 0 ||
	    bench_pack_str(pk, "profile") < 0 || msgpack_pack_true(pk))
		return fail(res, "out of memory");
	if (time_calls(b, res, "graph.run", "graph.run", true) < 0)
		return -1;
	set_rates(res);
	return 0;
}

/* arg: 0 = sum, 1 = mean, over all elements. */
static int wl_reduce(struct bench *b, struct bench_result *res, int arg)
{
	const char *op = arg ? "mean" : "sum";
	const char *in[1] = { PFX "x" };
	uint64_t n = b->sz->elems;
	char cnt[24];

	fmt_count(cnt, sizeof(cnt), n);
	snprintf(res->name, sizeof(res->name), "%s_f32_%s", op, cnt);
	snprintf(res->desc, sizeof(res->desc), "%s of f32 [%llu] to a scalar; bytes = %.0f read", op,
		 (unsigned long long)n, 4.0 * (double)n);
	snprintf(res->params, sizeof(res->params), "{\"kind\": \"reduce\", \"op\": \"%s\", \"n\": %llu}",
		 op, (unsigned long long)n);
	res->unit = "GB/s";
	res->bytes = 4.0 * (double)n;
	if (b->dry)
		return 0;
	if (make_randn(b, res, in[0], 1, &n, 7, "f32") < 0)
		return -1;
	if (pack_op(params_begin(b), NULL, op, 1, in, NULL, 0, PFX "out", 1) < 0)
		return fail(res, "out of memory");
	if (time_calls(b, res, "op.run", op, true) < 0)
		return -1;
	set_rates(res);
	return 0;
}

/* arg: 0 = softmax, 1 = layer_norm (no weight, no bias), over the last axis. */
static int wl_rownorm(struct bench *b, struct bench_result *res, int arg)
{
	const char *op = arg ? "layer_norm" : "softmax";
	const char *in[1] = { PFX "x" };
	uint64_t dims[2] = { b->sz->rows, b->sz->cols };
	double n = (double)dims[0] * (double)dims[1];

	snprintf(res->name, sizeof(res->name), "%s_f32_%llu", op, (unsigned long long)dims[0]);
	snprintf(res->desc, sizeof(res->desc),
		 "%s of f32 [%llu,%llu] over the last axis; bytes = 1 read + 1 written = %.0f", op,
		 (unsigned long long)dims[0], (unsigned long long)dims[1], 8.0 * n);
	snprintf(res->params, sizeof(res->params),
		 "{\"kind\": \"rownorm\", \"op\": \"%s\", \"rows\": %llu, \"cols\": %llu}", op,
		 (unsigned long long)dims[0], (unsigned long long)dims[1]);
	res->unit = "GB/s";
	res->bytes = 8.0 * n;
	if (b->dry)
		return 0;
	if (make_randn(b, res, in[0], 2, dims, 8, "f32") < 0)
		return -1;
	if (pack_op(params_begin(b), NULL, op, 1, in, NULL, 0, PFX "out", 1) < 0)
		return fail(res, "out of memory");
	if (time_calls(b, res, "op.run", op, true) < 0)
		return -1;
	set_rates(res);
	return 0;
}

/* conv2d 3x3, stride 1, padding 1, no bias, NCHW. */
static int wl_conv(struct bench *b, struct bench_result *res, int arg)
{
	const uint64_t *c = b->sz->conv;
	const char *in[2] = { PFX "x", PFX "w" };
	uint64_t dx[4] = { c[0], c[1], c[3], c[4] }, dw[4] = { c[2], c[1], 3, 3 };
	struct kv pad[1] = { KVI("padding", 1) };

	(void)arg;
	snprintf(res->name, sizeof(res->name), "conv2d_f32_%llux%llu", (unsigned long long)c[1],
		 (unsigned long long)c[3]);
	snprintf(res->desc, sizeof(res->desc),
		 "f32 x [%llu,%llu,%llu,%llu] * w [%llu,%llu,3,3], padding 1; 2*N*O*H*W*C*9 flops",
		 (unsigned long long)c[0], (unsigned long long)c[1], (unsigned long long)c[3],
		 (unsigned long long)c[4], (unsigned long long)c[2], (unsigned long long)c[1]);
	snprintf(res->params, sizeof(res->params),
		 "{\"kind\": \"conv2d\", \"n\": %llu, \"c\": %llu, \"o\": %llu, \"h\": %llu, "
		 "\"w\": %llu, \"k\": 3, \"padding\": 1}",
		 (unsigned long long)c[0], (unsigned long long)c[1], (unsigned long long)c[2],
		 (unsigned long long)c[3], (unsigned long long)c[4]);
	res->unit = "TFLOP/s";
	res->flops = 2.0 * (double)c[0] * (double)c[2] * (double)c[3] * (double)c[4] * (double)c[1] * 9;
	if (b->dry)
		return 0;
	if (make_randn(b, res, in[0], 4, dx, 9, "f32") < 0 ||
	    make_randn(b, res, in[1], 4, dw, 10, "f32") < 0)
		return -1;
	if (pack_op(params_begin(b), NULL, "conv2d", 2, in, pad, 1, PFX "out", 1) < 0)
		return fail(res, "out of memory");
	if (time_calls(b, res, "op.run", "op.run conv2d", true) < 0)
		return -1;
	set_rates(res);
	return 0;
}

/* ---- the request path -------------------------------------------------- */

struct workload {
	const char *group;
	int (*fn)(struct bench *b, struct bench_result *res, int arg);
	int arg;
};

static const struct workload workloads[] = {
	{ "matmul", wl_matmul, 0 },
	{ "matmul", wl_matmul, 1 },
	{ "matmul", wl_matmul, 2 },
	{ "matmul", wl_matmul, 3 },
	{ "matmul", wl_matmul, 4 },
	{ "matmul", wl_gemm, 0 },
	{ "matmul", wl_gemm, 1 },
	{ "matmul", wl_gemm, 2 },
	{ "matmul", wl_gemm, 3 },
	{ "matmul", wl_gemm, 4 },
	{ "matmul", wl_gemm, 5 },
	{ "elementwise", wl_binary, 0 },
	{ "elementwise", wl_binary, 1 },
	{ "elementwise", wl_chain, 0 },
	{ "reduction", wl_reduce, 0 },
	{ "reduction", wl_reduce, 1 },
	{ "normalization", wl_rownorm, 0 },
	{ "normalization", wl_rownorm, 1 },
	{ "conv", wl_conv, 0 },
	{ "training", wl_train_mlp, 0 },
	{ "training", wl_train_mlp, 1 },
	{ "training", wl_train_mlp, 2 },
	{ "training", wl_train_mlp, 3 },
	{ "training", wl_train_mlp, 4 },
	{ "training", wl_train_mlp, 5 },
	{ "training", wl_train_model, 0 },
	{ "training", wl_train_model, 1 },
	{ "training", wl_train_model, 2 },
	{ "latency", wl_ping, 0 },
	{ "latency", wl_op_latency, 0 },
	{ "latency", wl_pipelined, 0 },
	{ "transfer", wl_transfer, 0 },
	{ "transfer", wl_transfer, 1 },
};
#define NWORKLOADS (sizeof(workloads) / sizeof(workloads[0]))

/* Deletes every bench model and tensor (Adam state included); errors are ignored. */
static void cleanup(struct bench *b)
{
	struct tensord_tensor_info *list = NULL;
	size_t count = 0;

	bench_delete_models(b);
	if (tensord_list(b->td, PFX, &list, &count) < 0)
		return;
	for (size_t i = 0; i < count; i++)
		tensord_delete(b->td, list[i].name);
	free(list);
}

/* Whether `name` or `group` matches an entry of the comma-separated `only`
 * (substrings). */
static bool selected(const char *only, const char *name, const char *group)
{
	const char *p = only;

	if (!only)
		return true;
	while (*p) {
		size_t n = strcspn(p, ",");
		char item[64];

		if (n > 0 && n < sizeof(item)) {
			memcpy(item, p, n);
			item[n] = '\0';
			if (strstr(name, item) || !strcmp(group, item))
				return true;
		}
		p += n + (p[n] == ',');
	}
	return false;
}

static void init_result(struct bench_result *res, const struct workload *w)
{
	memset(res, 0, sizeof(*res));
	res->group = w->group;
	res->gpu_ns = res->wall_ns = res->daemon_ns = res->p99_ns = NAN;
	res->kernel = res->e2e = NAN;
}

/* Runs the picked workloads into results[*n...], each followed by a clean-up;
 * returns how many failed. */
static unsigned run_all(struct bench *b, const bool *pick, struct bench_result *results,
			size_t *n, bool quiet)
{
	unsigned failed = 0;
	int r;

	for (size_t i = 0; i < NWORKLOADS; i++) {
		struct bench_result *res = &results[*n];
		double t0 = bench_now_s();

		if (!pick[i])
			continue;
		(*n)++;
		init_result(res, &workloads[i]);
		if (!quiet) {
			b->dry = true;
			workloads[i].fn(b, res, workloads[i].arg);
			b->dry = false;
			fprintf(stderr, "bench_gpu: %-22s ...", res->name);
		}
		if (!b->td && (r = tensord_connect(bench_socket_path(b->path), &b->td)) < 0) {
			b->td = NULL;
			fail(res, "cannot reconnect to tensord: %s", strerror(-r));
		} else if (workloads[i].fn(b, res, workloads[i].arg) == 0) {
			res->ran = true;
		}
		if (!res->ran)
			failed++;
		if (!quiet) {
			if (res->ran)
				fprintf(stderr, " %.4g %s (%.1f s)\n",
					isnan(res->kernel) ? res->e2e : res->kernel, res->unit,
					bench_now_s() - t0);
			else
				fprintf(stderr, " FAILED: %s\n", res->error);
		}
		/* A dead handle (the daemon closed the stream) is replaced. */
		if (b->td && tensord_ping(b->td, NULL, 0) < 0) {
			tensord_free(b->td);
			b->td = NULL;
			if (tensord_connect(bench_socket_path(b->path), &b->td) < 0)
				b->td = NULL;
		}
		if (b->td)
			cleanup(b);
	}
	return failed;
}

int main(int argc, char **argv)
{
	static struct bench_result results[NWORKLOADS];
	struct opts o = { .sz = &bench_size_full };
	struct sizes sz;
	struct bench b = { .sz = &sz };
	struct bench_meta meta = { .size = NULL };
	size_t n = 0;
	unsigned failed;
	bool pick[NWORKLOADS], done;
	int r;

	if ((r = bench_parse_args(argc, argv, &o, &done)) != 0 || done)
		return r;
	sz = *o.sz;
	if (o.have_steps)
		sz.train_steps = o.train_steps;
	if (o.have_train_warmup)
		sz.train_warmup = o.train_warmup;
	b.path = o.path;
	b.reps = o.have_reps ? o.reps : sz.reps;
	b.warmup = o.have_warmup ? o.warmup : sz.warmup;
	meta.size = sz.name;
	meta.reps = b.reps;
	meta.warmup = b.warmup;
	signal(SIGPIPE, SIG_IGN);
	msgpack_sbuffer_init(&b.sb);
	msgpack_packer_init(&b.pk, &b.sb, msgpack_sbuffer_write);

	/* Name every workload first, for --list and --only. */
	b.dry = true;
	for (size_t i = 0; i < NWORKLOADS; i++) {
		struct bench_result *res = &results[n];

		init_result(res, &workloads[i]);
		workloads[i].fn(&b, res, workloads[i].arg);
		pick[i] = selected(o.only, res->name, res->group);
		if (!o.list || !pick[i])
			continue;
		snprintf(res->error, sizeof(res->error), "not run (--list)");
		if (!o.json)
			printf("%-22s %-14s %s\n", res->name, res->group, res->desc);
		n++;
	}
	b.dry = false;
	if (o.list) {
		/* JSON with every figure null: the sizes, for compare_torch.py. */
		if (o.json) {
			snprintf(meta.version, sizeof(meta.version), "?");
			snprintf(meta.device, sizeof(meta.device), "?");
			bench_report_json(&meta, results, n);
		}
		r = 0;
		goto out;
	}

	if (o.wait_s > 0 && (r = bench_wait_for_socket(bench_socket_path(b.path), o.wait_s)) < 0) {
		fprintf(stderr, "bench_gpu: %s does not accept connections: %s\n",
			bench_socket_path(b.path), strerror(-r));
		r = 1;
		goto out;
	}
	r = tensord_connect(bench_socket_path(b.path), &b.td);
	if (r < 0) {
		fprintf(stderr, "bench_gpu: cannot connect to tensord at %s: %s\n",
			bench_socket_path(b.path), strerror(-r));
		r = 1;
		goto out;
	}
	if (tensord_ping(b.td, meta.version, sizeof(meta.version)) < 0) {
		fprintf(stderr, "bench_gpu: ping: %s\n", tensord_last_error(b.td));
		r = 1;
		goto out;
	}
	bench_device_name(b.td, meta.device, sizeof(meta.device));
	cleanup(&b);
	failed = run_all(&b, pick, results, &n, o.quiet);
	if (o.json)
		bench_report_json(&meta, results, n);
	else
		bench_report_table(&meta, results, n);
	r = failed ? 3 : 0;
out:
	tensord_free(b.td);
	msgpack_sbuffer_destroy(&b.sb);
	return r;
}

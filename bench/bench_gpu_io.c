/* bench_gpu's request-path workloads (bench_gpu.h): ping, a one-element
 * op.run's latency, pipelined op.runs, and tensor.put/tensor.get of large
 * tensors. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_gpu.h"
#include "bench_util.h"
#include "tensord.h"

static void latency_stats(struct bench_result *res, double *lat, unsigned n)
{
	qsort(lat, n, sizeof(*lat), bench_cmp_double);
	res->reps = n;
	res->wall_ns = bench_percentile(lat, n, 0.50);
	res->p99_ns = bench_percentile(lat, n, 0.99);
	res->e2e = res->wall_ns / 1e3;
}

int wl_ping(struct bench *b, struct bench_result *res, int arg)
{
	unsigned n = b->sz->pings;
	double *lat;

	(void)arg;
	snprintf(res->name, sizeof(res->name), "ping");
	snprintf(res->desc, sizeof(res->desc), "p50 round trip of ping (%u after %u warm-up), p99 in JSON",
		 n, b->sz->lat_warmup);
	snprintf(res->params, sizeof(res->params), "{\"kind\": \"ping\", \"count\": %u}", n);
	res->unit = "us";
	res->lower_better = true;
	if (b->dry)
		return 0;
	lat = calloc(n, sizeof(*lat));
	if (!lat)
		return fail(res, "out of memory");
	for (unsigned i = 0; i < b->sz->lat_warmup + n; i++) {
		double t0 = bench_now_s();

		if (tensord_ping(b->td, NULL, 0) < 0) {
			free(lat);
			return fail_td(b, res, "ping");
		}
		if (i >= b->sz->lat_warmup)
			lat[i - b->sz->lat_warmup] = (bench_now_s() - t0) * 1e9;
	}
	latency_stats(res, lat, n);
	free(lat);
	return 0;
}

/* Two 1-element f32 tensors a and b for the small-op rows. */
static int make_scalars(struct bench *b, struct bench_result *res)
{
	static const float one[1] = { 1.5f }, two[1] = { 2.25f };
	const uint64_t shape[1] = { 1 };

	if (tensord_put(b->td, PFX "a", TENSORD_F32, 1, shape, one, sizeof(one), NULL) < 0 ||
	    tensord_put(b->td, PFX "b", TENSORD_F32, 1, shape, two, sizeof(two), NULL) < 0)
		return fail_td(b, res, "setup: tensor.put");
	return 0;
}

int wl_op_latency(struct bench *b, struct bench_result *res, int arg)
{
	const char *in[2] = { PFX "a", PFX "b" };
	unsigned n = b->sz->lat_ops;
	double *lat = NULL, *gpu = NULL;
	int r = -1;

	(void)arg;
	snprintf(res->name, sizeof(res->name), "op_latency");
	snprintf(res->desc, sizeof(res->desc),
		 "p50 of op.run add on [1] f32 with out and profile (%u after %u warm-up)", n,
		 b->sz->lat_warmup);
	snprintf(res->params, sizeof(res->params), "{\"kind\": \"op_latency\", \"count\": %u}", n);
	res->unit = "us";
	res->lower_better = true;
	if (b->dry)
		return 0;
	lat = calloc(n, sizeof(*lat));
	gpu = calloc(n, sizeof(*gpu));
	if (!lat || !gpu) {
		fail(res, "out of memory");
		goto out;
	}
	if (make_scalars(b, res) < 0)
		goto out;
	if (pack_op(params_begin(b), NULL, "add", 2, in, NULL, 0, PFX "out", 1) < 0) {
		fail(res, "out of memory");
		goto out;
	}
	for (unsigned i = 0; i < b->sz->lat_warmup + n; i++) {
		double dt = 0, ns = 0;
		void *raw = NULL;
		size_t len = 0;

		if (call(b, res, "op.run", "op.run add", &raw, &len, &dt) < 0)
			goto out;
		if (result_number(raw, len, "gpu_ns", &ns) < 0) {
			free(raw);
			fail(res, "op.run add: the result has no gpu_ns");
			goto out;
		}
		free(raw);
		if (i >= b->sz->lat_warmup) {
			lat[i - b->sz->lat_warmup] = dt * 1e9;
			gpu[i - b->sz->lat_warmup] = ns;
		}
	}
	latency_stats(res, lat, n);
	res->gpu_ns = bench_median(gpu, n);
	res->kernel = res->gpu_ns / 1e3;
	r = 0;
out:
	free(lat);
	free(gpu);
	return r;
}

int wl_pipelined(struct bench *b, struct bench_result *res, int arg)
{
	const char *in[2] = { PFX "a", PFX "b" };
	const char *path = bench_socket_path(b->path);
	unsigned depth = b->sz->depth, total = b->sz->pipelined;
	msgpack_sbuffer batch;
	msgpack_packer pk;
	char err[256] = "";
	double ops = 0;
	int r;

	(void)arg;
	snprintf(res->name, sizeof(res->name), "op_pipelined");
	snprintf(res->desc, sizeof(res->desc),
		 "op.run add on [1] f32 with out, %u written before reading, %u in all, one connection",
		 depth, total);
	snprintf(res->params, sizeof(res->params),
		 "{\"kind\": \"op_pipelined\", \"depth\": %u, \"total\": %u}", depth, total);
	res->unit = "ops/s";
	if (b->dry)
		return 0;
	if (make_scalars(b, res) < 0)
		return -1;
	msgpack_sbuffer_init(&batch);
	msgpack_packer_init(&pk, &batch, msgpack_sbuffer_write);
	r = 0;
	for (unsigned i = 0; r == 0 && i < depth; i++)
		if (msgpack_pack_array(&pk, 4) || msgpack_pack_uint8(&pk, 0) ||
		    msgpack_pack_uint32(&pk, i + 1) || bench_pack_str(&pk, "op.run") < 0 ||
		    msgpack_pack_array(&pk, 1) ||
		    pack_op(&pk, NULL, "add", 2, in, NULL, 0, PFX "out", 0) < 0)
			r = -ENOMEM;
	if (r == 0)
		r = bench_pipelined(path, batch.data, batch.size, depth, total, &ops, err, sizeof(err));
	msgpack_sbuffer_destroy(&batch);
	if (r < 0)
		return fail(res, "pipelined op.run: %s", err[0] ? err : strerror(-r));
	res->reps = (total + depth - 1) / depth * depth;
	res->wall_ns = 1e9 / ops;
	res->e2e = ops;
	return 0;
}

/* arg: 0 = tensor.put, 1 = tensor.get (into one reused buffer). */
int wl_transfer(struct bench *b, struct bench_result *res, int arg)
{
	const struct sizes *sz = b->sz;
	size_t bytes = (size_t)sz->transfer_bytes;
	uint64_t shape[1] = { bytes / sizeof(float) };
	double *t = NULL;
	float *data = NULL, *got = NULL;
	char sz_s[24];
	int r = -1;

	fmt_bytes(sz_s, sizeof(sz_s), bytes);
	snprintf(res->name, sizeof(res->name), "%s_%s", arg ? "get" : "put", sz_s);
	snprintf(res->desc, sizeof(res->desc),
		 "tensor.%s of f32 [%llu] (%zu bytes) through the socket%s", arg ? "get" : "put",
		 (unsigned long long)shape[0], bytes,
		 arg ? " into a reused buffer (tensord_get_into)" : "");
	snprintf(res->params, sizeof(res->params), "{\"kind\": \"%s\", \"bytes\": %zu}",
		 arg ? "get" : "put", bytes);
	res->unit = "GB/s";
	res->bytes = (double)bytes;
	if (b->dry)
		return 0;
	t = calloc(sz->transfer_reps, sizeof(*t));
	data = malloc(bytes);
	got = arg ? malloc(bytes) : NULL;
	if (!t || !data || (arg && !got)) {
		fail(res, "out of memory for %zu bytes", bytes);
		goto out;
	}
	for (size_t i = 0; i < shape[0]; i++)
		data[i] = (float)(i % 1000003) * 0.5f - 7.25f;
	if (arg && tensord_put(b->td, PFX "blob", TENSORD_F32, 1, shape, data, bytes, NULL) < 0) {
		fail_td(b, res, "setup: tensor.put");
		goto out;
	}
	/* One untimed repetition first. */
	for (unsigned i = 0; i <= sz->transfer_reps; i++) {
		double t0 = bench_now_s(), dt;
		size_t got_len = 0;

		if (arg) {
			if (tensord_get_into(b->td, PFX "blob", NULL, got, bytes, &got_len) < 0) {
				fail_td(b, res, "tensor.get");
				goto out;
			}
		} else if (tensord_put(b->td, PFX "blob", TENSORD_F32, 1, shape, data, bytes, NULL) < 0) {
			fail_td(b, res, "tensor.put");
			goto out;
		}
		dt = bench_now_s() - t0;
		if (arg && i == 0 && (got_len != bytes || memcmp(got, data, bytes) != 0)) {
			fail(res, "tensor.get returned other bytes than were put");
			goto out;
		}
		if (i > 0)
			t[i - 1] = dt * 1e9;
	}
	res->reps = sz->transfer_reps;
	res->wall_ns = bench_median(t, sz->transfer_reps);
	res->e2e = res->bytes / res->wall_ns;
	r = 0;
out:
	free(t);
	free(data);
	free(got);
	return r;
}

/* ---- driver ------------------------------------------------------------ */

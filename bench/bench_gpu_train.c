/* bench_gpu's training workloads: train.run of the MLPs on graph nodes, and of
 * the digits CNN and a char transformer defined with model.define's layer form
 * (docs/training.md, "A model as layers"). Each: a random data set made on the
 * GPU, one untimed train.run of sz->train_warmup steps, then sz->train_reps
 * timed runs of sz->train_steps steps; per step the medians of train.run's own
 * seconds (kernel) and of the wall time of the call (e2e), reported as
 * samples/s (bench/README.md). */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_gpu.h"
#include "bench_util.h"
#include "json_parse.h"
#include "tensord.h"

#define MLP_MAX_LAYERS 4

struct mlp {
	unsigned ndims, batch;
	uint64_t dims[MLP_MAX_LAYERS + 1];
	char w[MLP_MAX_LAYERS][32], bias[MLP_MAX_LAYERS][32];
};

/* What one train.run packs: an MLP's nodes, or a defined model's name. */
struct run_spec {
	const struct mlp *mlp;  /* NULL: `model` */
	const char *model;
	unsigned batch;
	const char *precision;  /* train.run's `precision`; NULL: none given (f32) */
};

/* " (bf16)"-style suffixes of a row: the name's and the params' precision entry. */
static void precision_suffix(struct bench_result *res, const char *precision)
{
	size_t n = strlen(res->params);

	if (!precision)
		return;
	snprintf(res->name + strlen(res->name), sizeof(res->name) - strlen(res->name), "_%s", precision);
	snprintf(res->desc + strlen(res->desc), sizeof(res->desc) - strlen(res->desc),
		 "; precision %s, f32 master weights", precision);
	if (n > 0 && res->params[n - 1] == '}')
		snprintf(res->params + n - 1, sizeof(res->params) - (n - 1), ", \"precision\": \"%s\"}",
			 precision);
}

/* `name` = i32 labels of `shape` uniform in [0, classes): rand * classes,
 * cast (truncating), clamped. */
static int make_labels(struct bench *b, struct bench_result *res, const char *name, unsigned rank,
		       const uint64_t *dims, unsigned classes, int64_t seed)
{
	struct kv rand_kv[2] = { kv_shape(rank, dims), KVI("seed", seed) };
	struct kv scale[1] = { KVD("scalar", (double)classes) };
	struct kv to_i32[1] = { KVS("dtype", "i32") };
	struct kv clamp[1] = { KVI("max", (int64_t)classes - 1) };
	const char *r[1] = { "r" }, *s[1] = { "s" }, *c[1] = { "c" };
	msgpack_packer *pk = params_begin(b);

	if (msgpack_pack_map(pk, 1) || bench_pack_str(pk, "nodes") < 0 || msgpack_pack_array(pk, 4) ||
	    pack_op(pk, "r", "rand", 0, NULL, rand_kv, 2, NULL, 0) < 0 ||
	    pack_op(pk, "s", "mul", 1, r, scale, 1, NULL, 0) < 0 ||
	    pack_op(pk, "c", "cast", 1, s, to_i32, 1, NULL, 0) < 0 ||
	    pack_op(pk, "y", "clamp", 1, c, clamp, 1, name, 0) < 0)
		return fail(res, "out of memory");
	return call(b, res, "graph.run", "setup labels", NULL, NULL, NULL);
}

/* Random data set x [rows, in] f32, labels y [rows] i32 in [0, classes), and
 * He-scaled random weights with zero biases, all made on the GPU. */
static int mlp_setup(struct bench *b, struct bench_result *res, struct mlp *m, unsigned rows)
{
	uint64_t dx[2] = { rows, m->dims[0] }, dy[1] = { rows };
	const char *r[1] = { "r" };
	msgpack_packer *pk;

	if (make_randn(b, res, PFX "x", 2, dx, 11, "f32") < 0 ||
	    make_labels(b, res, PFX "y", 1, dy, (unsigned)m->dims[m->ndims - 1], 12) < 0)
		return -1;
	for (unsigned l = 0; l + 1 < m->ndims; l++) {
		uint64_t dw[2] = { m->dims[l], m->dims[l + 1] }, db[1] = { m->dims[l + 1] };
		struct kv w_kv[2] = { kv_shape(2, dw), KVI("seed", 20 + l) };
		struct kv he[1] = { KVD("scalar", sqrt(2.0 / (double)m->dims[l])) };
		struct kv b_kv[1] = { kv_shape(1, db) };

		snprintf(m->w[l], sizeof(m->w[l]), PFX "w%u", l + 1);
		snprintf(m->bias[l], sizeof(m->bias[l]), PFX "b%u", l + 1);
		pk = params_begin(b);
		if (msgpack_pack_map(pk, 1) || bench_pack_str(pk, "nodes") < 0 ||
		    msgpack_pack_array(pk, 3) ||
		    pack_op(pk, "r", "randn", 0, NULL, w_kv, 2, NULL, 0) < 0 ||
		    pack_op(pk, "w", "mul", 1, r, he, 1, m->w[l], 0) < 0 ||
		    pack_op(pk, "b", "zeros", 0, NULL, b_kv, 1, m->bias[l], 0) < 0)
			return fail(res, "out of memory");
		if (call(b, res, "graph.run", "setup weights", NULL, NULL, NULL) < 0)
			return -1;
	}
	return 0;
}

/* The MLP's part of train.run's params (5 entries): matmul, add, relu per
 * hidden layer, cross_entropy, Adam lr 1e-3. */
static int mlp_pack_model(msgpack_packer *pk, const struct mlp *m)
{
	unsigned layers = m->ndims - 1, e = 0;
	char prev[16] = "xb", z[16], a[16], h[16];

	e |= bench_pack_str(pk, "nodes") < 0 || msgpack_pack_array(pk, 3 * layers);
	for (unsigned l = 0; l < layers; l++) {
		const char *zin[2] = { prev, m->w[l] }, *ain[2] = { z, m->bias[l] }, *hin[1] = { a };

		snprintf(z, sizeof(z), "z%u", l);
		snprintf(a, sizeof(a), "a%u", l);
		snprintf(h, sizeof(h), "h%u", l);
		e |= pack_op(pk, z, "matmul", 2, zin, NULL, 0, NULL, 0) < 0;
		e |= pack_op(pk, a, "add", 2, ain, NULL, 0, NULL, 0) < 0;
		if (l + 1 < layers) {
			e |= pack_op(pk, h, "relu", 1, hin, NULL, 0, NULL, 0) < 0;
			snprintf(prev, sizeof(prev), "%s", h);
		}
	}
	{
		const char *lin[2] = { a, "yb" };
		e |= pack_op(pk, "loss", "cross_entropy", 2, lin, NULL, 0, NULL, 0) < 0;
	}
	e |= bench_pack_str(pk, "loss") < 0 || bench_pack_str(pk, "loss") < 0;
	e |= bench_pack_str(pk, "params") < 0 || msgpack_pack_array(pk, 2 * layers);
	for (unsigned l = 0; l < layers; l++)
		e |= bench_pack_str(pk, m->w[l]) < 0 || bench_pack_str(pk, m->bias[l]) < 0;
	e |= bench_pack_str(pk, "optimizer") < 0 || msgpack_pack_map(pk, 2) ||
	     bench_pack_str(pk, "type") < 0 || bench_pack_str(pk, "adam") < 0 ||
	     bench_pack_str(pk, "lr") < 0 || msgpack_pack_double(pk, 1e-3);
	e |= bench_pack_str(pk, "data") < 0 || msgpack_pack_map(pk, 2) ||
	     bench_pack_str(pk, "xb") < 0 || bench_pack_str(pk, PFX "x") < 0 ||
	     bench_pack_str(pk, "yb") < 0 || bench_pack_str(pk, PFX "y") < 0;
	return e ? -ENOMEM : 0;
}

/* The params of one train.run of `spec`: `steps` steps from `start_step`
 * (a defined model counts its own steps). */
static int pack_run(struct bench *b, const struct run_spec *spec, unsigned steps,
		    unsigned start_step)
{
	msgpack_packer *pk = params_begin(b);
	int e;

	if (spec->mlp) {
		e = msgpack_pack_map(pk, 10 + !!spec->precision) || mlp_pack_model(pk, spec->mlp) < 0 ||
		    bench_pack_str(pk, "start_step") < 0 || msgpack_pack_uint32(pk, start_step);
	} else {
		e = msgpack_pack_map(pk, 6 + !!spec->precision) || bench_pack_str(pk, "model") < 0 ||
		    bench_pack_str(pk, spec->model) < 0 ||
		    bench_pack_str(pk, "data") < 0 || msgpack_pack_map(pk, 2) ||
		    bench_pack_str(pk, "x") < 0 || bench_pack_str(pk, PFX "x") < 0 ||
		    bench_pack_str(pk, "y") < 0 || bench_pack_str(pk, PFX "y") < 0;
	}
	e = e || bench_pack_str(pk, "batch_size") < 0 || msgpack_pack_uint32(pk, spec->batch);
	e = e || bench_pack_str(pk, "steps") < 0 || msgpack_pack_uint32(pk, steps);
	e = e || bench_pack_str(pk, "seed") < 0 || msgpack_pack_uint32(pk, 1);
	e = e || bench_pack_str(pk, "progress_every") < 0 || msgpack_pack_uint32(pk, steps);
	if (spec->precision)
		e = e || bench_pack_str(pk, "precision") < 0 || bench_pack_str(pk, spec->precision) < 0;
	return e ? -ENOMEM : 0;
}

/* One untimed train.run of sz->train_warmup steps, then sz->train_reps timed
 * ones; fills the per-step medians and the samples/s figures of `res`. */
static int time_train(struct bench *b, struct bench_result *res, const struct run_spec *spec)
{
	const struct sizes *sz = b->sz;
	double *wall = calloc(sz->train_reps, sizeof(*wall));
	double *daemon = calloc(sz->train_reps, sizeof(*daemon));
	unsigned step = 1;
	int r = -1;

	if (!wall || !daemon) {
		fail(res, "out of memory");
		goto out;
	}
	for (unsigned i = 0; i <= sz->train_reps; i++) {
		unsigned steps = i == 0 ? sz->train_warmup : sz->train_steps;
		double dt = 0, secs = 0, done = 0;
		void *raw = NULL;
		size_t len = 0;

		if (steps == 0)
			continue;
		if (pack_run(b, spec, steps, step) < 0) {
			fail(res, "out of memory");
			goto out;
		}
		if (call(b, res, "train.run", "train.run", &raw, &len, &dt) < 0)
			goto out;
		if (result_number(raw, len, "seconds", &secs) < 0 ||
		    result_number(raw, len, "steps", &done) < 0 || done != steps) {
			free(raw);
			fail(res, "train.run: the result lacks seconds or steps, or ran other than %u steps",
			     steps);
			goto out;
		}
		free(raw);
		step += steps;
		if (i > 0) {
			wall[i - 1] = dt * 1e9 / steps;
			daemon[i - 1] = secs * 1e9 / steps;
		}
	}
	res->reps = sz->train_reps;
	res->wall_ns = bench_median(wall, sz->train_reps);
	res->daemon_ns = bench_median(daemon, sz->train_reps);
	res->kernel = spec->batch * 1e9 / res->daemon_ns;
	res->e2e = spec->batch * 1e9 / res->wall_ns;
	r = 0;
out:
	free(wall);
	free(daemon);
	return r;
}

/* The common fields of a training row. */
static void train_row(struct bench_result *res)
{
	res->unit = "samples/s";
	res->lower_better = false;
}

int wl_train_mlp(struct bench *b, struct bench_result *res, int arg)
{
	static const uint64_t big[] = { 784, 512, 512, 10 }, digits[] = { 64, 128, 10 };
	const struct sizes *sz = b->sz;
	struct mlp m = { .ndims = arg == 1 ? 3 : 4 };
	struct run_spec spec = { .mlp = &m, .precision = arg >= 4 ? "bf16" : NULL };
	unsigned rows;
	char arch[64] = "";

	memcpy(m.dims, arg == 1 ? digits : big, m.ndims * sizeof(m.dims[0]));
	m.batch = arg < 2 ? sz->batch : sz->mlp_batches[(arg - 2) % 2];
	rows = arg < 2 ? sz->train_rows : 2 * m.batch; /* x of b16384 under 128 MiB */
	spec.batch = m.batch;
	for (unsigned i = 0; i < m.ndims; i++)
		snprintf(arch + strlen(arch), sizeof(arch) - strlen(arch), "%s%llu", i ? "-" : "",
			 (unsigned long long)m.dims[i]);
	if (arg < 2)
		snprintf(res->name, sizeof(res->name), "train_mlp_%llu", (unsigned long long)m.dims[0]);
	else
		snprintf(res->name, sizeof(res->name), "train_mlp_%llu_b%u",
			 (unsigned long long)m.dims[0], m.batch);
	snprintf(res->desc, sizeof(res->desc),
		 "MLP %s (ReLU, cross_entropy), batch %u, Adam lr 1e-3, train.run of %u steps "
		 "over %u random rows (graph nodes)", arch, m.batch, sz->train_steps, rows);
	snprintf(res->params, sizeof(res->params),
		 "{\"kind\": \"train_mlp\", \"dims\": [%s], \"batch\": %u, \"rows\": %u, "
		 "\"steps\": %u, \"warmup_steps\": %u, \"runs\": %u, \"lr\": 0.001}",
		 arch, m.batch, rows, sz->train_steps, sz->train_warmup, sz->train_reps);
	for (char *p = strstr(res->params, "["); p && *p != ']'; p++)
		if (*p == '-')
			*p = ',';
	precision_suffix(res, spec.precision);
	train_row(res);
	if (b->dry)
		return 0;
	if (mlp_setup(b, res, &m, rows) < 0)
		return -1;
	return time_train(b, res, &spec);
}

/* Appends printf output to out[*at..len); -ENOSPC when it does not fit. */
static int append(char *out, size_t len, size_t *at, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int append(char *out, size_t len, size_t *at, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(out + *at, len - *at, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= len - *at)
		return -ENOSPC;
	*at += (size_t)n;
	return 0;
}

/* The layers of the digits CNN (examples/digits/train.py --model cnn) on
 * [N, 1, 8, 8] images, as model.define's "inputs" and "layers". */
static int cnn_layers(char *out, size_t len, size_t *at)
{
	return append(out, len, at,
		      "\"inputs\": [{\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [2, 1, 8, 8]}, "
		      "{\"name\": \"y\", \"dtype\": \"i32\", \"shape\": [2]}], "
		      "\"layers\": [{\"type\": \"conv2d\", \"in_channels\": 1, \"out_channels\": 16, "
		      "\"kernel_size\": 3, \"padding\": 1}, "
		      "{\"type\": \"batch_norm\", \"num_features\": 16}, {\"type\": \"relu\"}, "
		      "{\"type\": \"max_pool2d\", \"kernel_size\": 2}, {\"type\": \"flatten\"}, "
		      "{\"type\": \"linear\", \"in\": 256, \"out\": 10, \"name\": \"logits\"}]");
}

/* The char transformer (examples/chars/train.py): embedding, causal
 * transformer blocks, layer_norm, linear head over [N, T] i32 windows. */
static int transformer_layers(const struct sizes *sz, char *out, size_t len, size_t *at)
{
	int e = append(out, len, at,
		       "\"inputs\": [{\"name\": \"x\", \"dtype\": \"i32\", \"shape\": [1, %u]}, "
		       "{\"name\": \"y\", \"dtype\": \"i32\", \"shape\": [1, %u]}], "
		       "\"layers\": [{\"type\": \"embedding\", \"num_embeddings\": %u, "
		       "\"embedding_dim\": %u, \"name\": \"emb\"}, "
		       "{\"type\": \"sequential\", \"name\": \"blocks\", \"layers\": [",
		       sz->tf_seq, sz->tf_seq, sz->tf_vocab, sz->tf_dim);

	for (unsigned l = 0; e == 0 && l < sz->tf_layers; l++)
		e = append(out, len, at,
			   "%s{\"type\": \"transformer_block\", \"dim\": %u, \"heads\": %u, "
			   "\"causal\": true}", l ? ", " : "", sz->tf_dim, sz->tf_heads);
	return e ? e : append(out, len, at,
			      "]}, {\"type\": \"layer_norm\", \"normalized_shape\": %u, \"name\": \"ln\"}, "
			      "{\"type\": \"linear\", \"in\": %u, \"out\": %u, \"name\": \"head\"}]",
			      sz->tf_dim, sz->tf_dim, sz->tf_vocab);
}

/* model.define of `name` from the layers JSON in `layers`: cross_entropy on
 * y, seed 0, Adam lr 1e-3, replacing a model left behind. */
static int define_model(struct bench *b, struct bench_result *res, const char *name,
			const char *layers)
{
	char json[4096], err[256];
	size_t at = 0;

	if (append(json, sizeof(json), &at, "{\"name\": \"%s\", %s, \"loss\": {\"type\": "
		   "\"cross_entropy\", \"target\": \"y\"}, \"seed\": 0, \"optimizer\": "
		   "{\"type\": \"adam\", \"lr\": 0.001}, \"replace\": true}", name, layers) < 0)
		return fail(res, "model.define: the definition is over %zu bytes", sizeof(json));
	if (tdp_json_to_msgpack(json, at, params_begin(b), err, sizeof(err)) < 0)
		return fail(res, "model.define: bad JSON: %s", err);
	return call(b, res, "model.define", "model.define", NULL, NULL, NULL);
}

/* arg 0: the digits CNN; 1: the char transformer; 2: the char transformer
 * with precision bf16. */
int wl_train_model(struct bench *b, struct bench_result *res, int arg)
{
	const struct sizes *sz = b->sz;
	const char *model = arg ? PFX "chars" : PFX "cnn";
	struct run_spec spec = { .model = model, .batch = arg ? sz->tf_batch : sz->cnn_batch,
				 .precision = arg == 2 ? "bf16" : NULL };
	unsigned rows = arg ? sz->tf_rows : sz->cnn_rows;
	char layers[3072];
	size_t at = 0;

	if (arg) {
		snprintf(res->name, sizeof(res->name), "train_transformer_d%u", sz->tf_dim);
		snprintf(res->desc, sizeof(res->desc),
			 "char transformer: embedding %u x %u, %u causal pre-norm blocks (%u heads, mlp "
			 "%u), layer_norm, head; seq %u, batch %u, Adam 1e-3, layers via model.define",
			 sz->tf_vocab, sz->tf_dim, sz->tf_layers, sz->tf_heads, 4 * sz->tf_dim, sz->tf_seq,
			 sz->tf_batch);
		snprintf(res->params, sizeof(res->params),
			 "{\"kind\": \"train_transformer\", \"vocab\": %u, \"dim\": %u, \"heads\": %u, "
			 "\"layers\": %u, \"hidden\": %u, \"seq\": %u, \"batch\": %u, \"rows\": %u, "
			 "\"steps\": %u, \"warmup_steps\": %u, \"runs\": %u, \"lr\": 0.001}",
			 sz->tf_vocab, sz->tf_dim, sz->tf_heads, sz->tf_layers, 4 * sz->tf_dim,
			 sz->tf_seq, sz->tf_batch, rows, sz->train_steps, sz->train_warmup,
			 sz->train_reps);
	} else {
		snprintf(res->name, sizeof(res->name), "train_cnn_b%u", sz->cnn_batch);
		snprintf(res->desc, sizeof(res->desc),
			 "digits CNN on [N,1,8,8]: conv 1->16 3x3 pad 1, batch_norm, relu, max_pool 2, "
			 "flatten, linear 256->10; batch %u, Adam 1e-3, layers via model.define",
			 sz->cnn_batch);
		snprintf(res->params, sizeof(res->params),
			 "{\"kind\": \"train_cnn\", \"hw\": 8, \"channels\": 16, \"classes\": 10, "
			 "\"batch\": %u, \"rows\": %u, \"steps\": %u, \"warmup_steps\": %u, "
			 "\"runs\": %u, \"lr\": 0.001}",
			 sz->cnn_batch, rows, sz->train_steps, sz->train_warmup, sz->train_reps);
	}
	precision_suffix(res, spec.precision);
	train_row(res);
	if (b->dry)
		return 0;
	if (arg) {
		uint64_t dims[2] = { rows, sz->tf_seq };

		if (transformer_layers(sz, layers, sizeof(layers), &at) < 0)
			return fail(res, "the layers are over %zu bytes", sizeof(layers));
		if (make_labels(b, res, PFX "x", 2, dims, sz->tf_vocab, 13) < 0 ||
		    make_labels(b, res, PFX "y", 2, dims, sz->tf_vocab, 14) < 0)
			return -1;
	} else {
		uint64_t dx[4] = { rows, 1, 8, 8 }, dy[1] = { rows };

		if (cnn_layers(layers, sizeof(layers), &at) < 0)
			return fail(res, "the layers are over %zu bytes", sizeof(layers));
		if (make_randn(b, res, PFX "x", 4, dx, 11, "f32") < 0 ||
		    make_labels(b, res, PFX "y", 1, dy, 10, 12) < 0)
			return -1;
	}
	if (define_model(b, res, model, layers) < 0)
		return -1;
	return time_train(b, res, &spec);
}

void bench_delete_models(struct bench *b)
{
	msgpack_unpacked msg;
	void *raw = NULL;
	size_t len = 0, off = 0;

	if (tensord_model_list_raw(b->td, &raw, &len) < 0)
		return;
	msgpack_unpacked_init(&msg);
	if (msgpack_unpack_next(&msg, raw, len, &off) == MSGPACK_UNPACK_SUCCESS) {
		const msgpack_object *models = bench_map_get(&msg.data, "models");

		for (uint32_t i = 0; models && models->type == MSGPACK_OBJECT_ARRAY &&
				     i < models->via.array.size; i++) {
			const msgpack_object *n = bench_map_get(&models->via.array.ptr[i], "name");
			char name[256];

			if (!n || n->type != MSGPACK_OBJECT_STR || n->via.str.size >= sizeof(name))
				continue;
			memcpy(name, n->via.str.ptr, n->via.str.size);
			name[n->via.str.size] = '\0';
			if (!strncmp(name, PFX, strlen(PFX)))
				tensord_model_delete(b->td, name, 1);
		}
	}
	msgpack_unpacked_destroy(&msg);
	free(raw);
}

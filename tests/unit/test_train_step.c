/* A training step (daemon/train/, daemon/autograd/) on the stub device,
 * without a socket: the step's spec, the graph train_build_step makes for
 * an MLP (backward and optimizer nodes, what it stores and for whom),
 * running and committing it, train_model_check, and the multi-tensor
 * optimizer's record (one dispatch, or each node's own). The stub computes
 * nothing (the loss reads back as 0), so the checks are on nodes, shapes,
 * owners, versions and errors. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pwd.h>
#include <cmocka.h>

#include "dtype.h"
#include "engine/graph_core.h"
#include "engine/graph_parse.h"
#include "fuzz_gpu.h"
#include "mode.h"
#include "ops/optim.h"
#include "status.h"
#include "store/model.h"
#include "stub_daemon.h"
#include "train/step.h"
#include "train/step.h"

#define NSTORED 6

static const char *const param_names[4] = { "w1", "b1", "w2", "b2" };

/* The MLP's tensors for `owner` with `mode`: x [8,4], y [8,2], w1 [4,16],
 * b1 [16], w2 [16,2], b2 [2]. */
static void put_mlp(struct stub_daemon *sd, uint32_t owner, uint32_t mode)
{
	static const uint64_t x[2] = { 8, 4 }, y[2] = { 8, 2 }, w1[2] = { 4, 16 }, b1[1] = { 16 },
			      w2[2] = { 16, 2 }, b2[1] = { 2 };

	stub_put(sd, owner, "x", TDP_DTYPE_F32, 2, x, mode, NULL);
	stub_put(sd, owner, "y", TDP_DTYPE_F32, 2, y, mode, NULL);
	stub_put(sd, owner, "w1", TDP_DTYPE_F32, 2, w1, mode, NULL);
	stub_put(sd, owner, "b1", TDP_DTYPE_F32, 1, b1, mode, NULL);
	stub_put(sd, owner, "w2", TDP_DTYPE_F32, 2, w2, mode, NULL);
	stub_put(sd, owner, "b2", TDP_DTYPE_F32, 1, b2, mode, NULL);
}

static int setup(void **state)
{
	struct stub_daemon *sd = malloc(sizeof(*sd));

	if (!sd || stub_daemon_init(sd) < 0) {
		free(sd);
		return -1;
	}
	put_mlp(sd, 1000, TDP_MODE_PRIVATE);
	*state = sd;
	return 0;
}

static int teardown(void **state)
{
	struct stub_daemon *sd = *state;

	stub_daemon_fini(sd);
	free(sd);
	return 0;
}

/* The MLP's nodes, reading tensors with prefix `p` ("" or "~1001/"):
 * loss = mse(relu(x @ w1 + b1) @ w2 + b2, y). */
static void pack_mlp(struct mp *m, const char *p)
{
	char n[6][40];
	const char *const names[6] = { "x", "y", "w1", "b1", "w2", "b2" };

	for (unsigned k = 0; k < 6; k++)
		snprintf(n[k], sizeof(n[k]), "%s%s", p, names[k]);
	msgpack_pack_array(&m->pk, 6);
	mp_node(m, "h", "matmul", STRS(n[0], n[2]), NULL, NULL);
	mp_node(m, "h2", "add", STRS("h", n[3]), NULL, NULL);
	mp_node(m, "a", "relu", STRS("h2"), NULL, NULL);
	mp_node(m, "o", "matmul", STRS("a", n[4]), NULL, NULL);
	mp_node(m, "o2", "add", STRS("o", n[5]), NULL, NULL);
	mp_node(m, "loss", "mse", STRS("o2", n[1]), NULL, NULL);
}

/* Parse a spec: loss "loss", params w1..b2 with prefix `p`, the optimizer
 * map of "key=value" pairs `opt` (NULL: none) and grads. */
static int spec_of(struct caller *call, const char *p, const char *const *opt, bool grads,
		   struct train_spec *spec)
{
	struct mp loss, params, o, g;
	char n[4][40];
	int r;

	for (unsigned k = 0; k < 4; k++)
		snprintf(n[k], sizeof(n[k]), "%s%s", p, param_names[k]);
	mp_begin(&loss);
	mp_str(&loss, "loss");
	mp_begin(&params);
	mp_strs(&params, STRS(n[0], n[1], n[2], n[3]));
	mp_begin(&o);
	if (opt)
		mp_kv(&o, opt);
	mp_begin(&g);
	msgpack_pack_object(&g.pk, (msgpack_object){ .type = MSGPACK_OBJECT_BOOLEAN,
						     .via.boolean = grads });
	r = train_spec_parse(call, mp_obj(&loss), mp_obj(&params),
			     opt ? mp_obj(&o) : NULL, mp_obj(&g), spec);
	mp_end(&g);
	mp_end(&o);
	mp_end(&params);
	mp_end(&loss);
	return r;
}

static unsigned count_op(const struct graph *gr, unsigned from, const char *op)
{
	unsigned n = 0;

	for (unsigned i = from; i < gr->n; i++)
		n += !strcmp(gr->nodes[i].ctx.def->name, op);
	return n;
}

/* The node storing store key `key`, or -1. */
static int stored_as(const struct graph *gr, const char *key)
{
	for (unsigned i = 0; i < gr->n; i++)
		if (gr->nodes[i].has_out && !strcmp(gr->nodes[i].out_name, key))
			return (int)i;
	return -1;
}

static void assert_like(const struct op_tensor *o, const struct tensor *t)
{
	assert_int_equal(o->dtype, t->dtype);
	assert_int_equal(o->rank, t->rank);
	assert_memory_equal(o->shape, t->shape, t->rank * sizeof(t->shape[0]));
}

static void test_spec(void **state)
{
	struct stub_daemon *sd = *state;
	struct caller call = stub_caller(sd, 1000);
	struct train_spec *spec = malloc(sizeof(*spec));

	assert_int_equal(spec_of(&call, "", STRS("type=adam", "lr=0.5"), true, spec), 0);
	assert_int_equal(spec->np, 4);
	assert_string_equal(spec->loss, "loss");
	assert_string_equal(spec->names[0], "1000/w1");
	assert_string_equal(spec->names[3], "1000/b2");
	assert_int_equal(spec->opt.kind, OPT_ADAM);
	assert_true(spec->opt.lr == 0.5);
	assert_true(spec->grads);
	assert_int_equal(spec->fuse, -1);
	/* another namespace by uid */
	assert_int_equal(spec_of(&call, "~1001/", NULL, false, spec), 0);
	assert_string_equal(spec->names[0], "1001/w1");
	assert_int_equal(spec->opt.kind, OPT_NONE);
	assert_false(spec->grads);

	assert_int_equal(spec_of(&call, "bad name ", NULL, false, spec), -1);
	assert_int_equal(call.err.code, TDP_INVALID_ARGUMENT);
	assert_string_equal(call.err.message, "params[0] must be a tensor name");
	assert_int_equal(spec_of(&call, "", STRS("type=rmsprop"), false, spec), -1);
	assert_string_equal(call.err.message, "optimizer.type must be \"sgd\", \"adam\" or \"adamw\"");
	assert_int_equal(spec_of(&call, "", STRS("lr=-1"), false, spec), -1);
	assert_string_equal(call.err.message, "optimizer: a hyperparameter is out of range");
	assert_int_equal(spec_of(&call, "", STRS("speed=1"), false, spec), -1);
	assert_string_equal(call.err.message, "optimizer: unknown key");
	assert_int_equal(spec_of(&call, "", STRS("nesterov=true"), false, spec), -1);
	assert_string_equal(call.err.message, "optimizer: nesterov needs momentum > 0");

	{
		struct mp loss, params;

		mp_begin(&loss);
		mp_str(&loss, "loss");
		mp_begin(&params);
		msgpack_pack_array(&params.pk, 0);
		call = stub_caller(sd, 1000);
		assert_int_equal(train_spec_parse(&call, mp_obj(&loss), mp_obj(&params), NULL, NULL, spec), -1);
		assert_int_equal(call.err.code, TDP_INVALID_ARGUMENT);
		assert_string_equal(call.err.message, "params must name 1 to 256 tensors");
		mp_end(&params);
		mp_begin(&params);
		msgpack_pack_array(&params.pk, 1);
		msgpack_pack_int(&params.pk, 7);
		assert_int_equal(train_spec_parse(&call, mp_obj(&loss), mp_obj(&params), NULL, NULL, spec), -1);
		assert_string_equal(call.err.message, "params[0] must be a tensor name");
		assert_int_equal(train_spec_parse(&call, mp_obj(&params), mp_obj(&params), NULL, NULL, spec), -1);
		assert_string_equal(call.err.message, "loss must be a node id");
		mp_end(&params);
		mp_end(&loss);
	}
	free(spec);
}

/* Build (not run) one step of the MLP reading tensors with prefix `p` for
 * `call`; returns train_build_step's result. */
static int build(struct caller *call, const char *p,
		 const struct train_spec *spec, int64_t step, bool train, struct graph *gr,
		 unsigned *loss, double *lr)
{
	struct mp m;
	struct step_nodes sn;
	int r;

	mp_begin(&m);
	pack_mlp(&m, p);
	*gr = (struct graph){ .call = call };
	r = train_build_step(call, &(struct step_input){ .spec = spec, .nodes = mp_obj(&m), .step = step,
							   .train = train }, gr, &sn);
	mp_end(&m);
	if (r == 0) {
		*loss = sn.loss;
		*lr = sn.lr;
	}
	return r;
}

static void test_build_sgd(void **state)
{
	struct stub_daemon *sd = *state;
	struct caller call = stub_caller(sd, 1000);
	struct train_spec *spec = malloc(sizeof(*spec));
	struct graph gr;
	unsigned loss;
	double lr;

	/* Forward only: the client's six nodes. */
	assert_int_equal(spec_of(&call, "", STRS("type=sgd", "lr=0.25"), false, spec), 0);
	assert_int_equal(build(&call, "", spec, 1, false, &gr, &loss, &lr), 0);
	assert_int_equal(gr.n, 6);
	assert_int_equal(loss, 5);
	assert_true(lr == 0);
	graph_free(&gr);

	/* Training with gradients stored. */
	assert_int_equal(spec_of(&call, "", STRS("type=sgd", "lr=0.25"), true, spec), 0);
	assert_int_equal(build(&call, "", spec, 1, true, &gr, &loss, &lr), 0);
	assert_int_equal(call.err.code, 0);
	assert_int_equal(loss, 5);
	assert_string_equal(gr.nodes[loss].id, "loss");
	assert_true(gr.nodes[loss].keep);
	assert_int_equal(gr.nodes[loss].ctx.out.count, 1);
	assert_true(lr == 0.25);
	/* the backward pass: dW1, dA, dW2 at least, each a matmul that reads its
	 * operand transposed in place (no transpose node); the rest are updates */
	assert_true(count_op(&gr, 6, "matmul") >= 3);
	assert_int_equal(count_op(&gr, 6, "transpose"), 0);
	assert_int_equal(count_op(&gr, 6, "sgd_param"), 4);
	assert_int_equal(count_op(&gr, 6, "sgd_buf"), 0); /* no momentum */
	assert_int_equal(count_op(&gr, 6, "adam_param"), 0);
	for (unsigned k = 0; k < 4; k++) {
		struct tensor *p = stub_find(sd, 1000, param_names[k]);
		char key[TDP_MAX_NAME_LEN + 16];
		int upd = stored_as(&gr, p->name), g;

		/* the update is stored over the parameter, a plain out */
		assert_true(upd >= 6);
		assert_string_equal(gr.nodes[upd].ctx.def->name, "sgd_param");
		assert_false(gr.nodes[upd].out_like);
		assert_like(&gr.nodes[upd].ctx.out, p);
		assert_ptr_equal(gr.nodes[upd].stored[0], p);
		/* its gradient, stored as <param>.grad, belongs to the param's owner */
		snprintf(key, sizeof(key), "%s.grad", p->name);
		g = stored_as(&gr, key);
		assert_true(g >= 6);
		assert_true(gr.nodes[g].out_like);
		assert_int_equal(gr.nodes[g].like_owner, 1000);
		assert_like(&gr.nodes[g].ctx.out, p);
		assert_int_equal(gr.nodes[upd].src[1], g);
	}
	graph_free(&gr);

	/* Momentum adds a buffer per parameter. */
	assert_int_equal(spec_of(&call, "", STRS("type=sgd", "momentum=0.9"), false, spec), 0);
	assert_int_equal(build(&call, "", spec, 1, true, &gr, &loss, &lr), 0);
	assert_int_equal(count_op(&gr, 6, "sgd_buf"), 4);
	assert_int_equal(stored_as(&gr, "1000/w1.grad"), -1);
	assert_true(stored_as(&gr, "1000/w2.momentum_buffer") >= 6);
	assert_true(gr.nodes[stored_as(&gr, "1000/w2.momentum_buffer")].out_like);
	graph_free(&gr);
	assert_int_equal(stub_live(sd), NSTORED);
	free(spec);
}

static void test_build_adam(void **state)
{
	struct stub_daemon *sd = *state;
	struct caller call = stub_caller(sd, 1000);
	struct train_spec *spec = malloc(sizeof(*spec));
	struct graph gr;
	unsigned loss;
	double lr;

	assert_int_equal(spec_of(&call, "", STRS("type=adam"), false, spec), 0);
	assert_int_equal(build(&call, "", spec, 1, true, &gr, &loss, &lr), 0);
	assert_true(lr == 0.001); /* adam's default */
	assert_int_equal(count_op(&gr, 6, "adam_m"), 4);
	assert_int_equal(count_op(&gr, 6, "adam_v"), 4);
	assert_int_equal(count_op(&gr, 6, "adam_param"), 4);
	/* first step: each parameter's moments start from zeros */
	assert_int_equal(count_op(&gr, 6, "zeros"), 4);
	for (unsigned k = 0; k < 4; k++) {
		struct tensor *p = stub_find(sd, 1000, param_names[k]);
		char m[TDP_MAX_NAME_LEN + 16], v[TDP_MAX_NAME_LEN + 16];
		int upd = stored_as(&gr, p->name), mi, vi;

		snprintf(m, sizeof(m), "%s.exp_avg", p->name);
		snprintf(v, sizeof(v), "%s.exp_avg_sq", p->name);
		mi = stored_as(&gr, m);
		vi = stored_as(&gr, v);
		assert_true(mi >= 6 && vi >= 6 && upd >= 6);
		assert_string_equal(gr.nodes[mi].ctx.def->name, "adam_m");
		assert_string_equal(gr.nodes[vi].ctx.def->name, "adam_v");
		assert_string_equal(gr.nodes[upd].ctx.def->name, "adam_param");
		assert_true(gr.nodes[mi].out_like && gr.nodes[vi].out_like);
		assert_false(gr.nodes[upd].out_like);
		assert_like(&gr.nodes[mi].ctx.out, p);
		assert_like(&gr.nodes[vi].ctx.out, p);
		assert_int_equal(gr.nodes[upd].src[1], mi);
		assert_int_equal(gr.nodes[upd].src[2], vi);
		/* the zeros feed the moments */
		assert_string_equal(gr.nodes[gr.nodes[mi].src[1]].ctx.def->name, "zeros");
		/* the updates are one node group (the multi-tensor optimizer), the zeros not */
		assert_int_equal(gr.nodes[mi].group, 1);
		assert_int_equal(gr.nodes[vi].group, 1);
		assert_int_equal(gr.nodes[upd].group, 1);
		assert_int_equal(gr.nodes[gr.nodes[mi].src[1]].group, 0);
	}
	assert_int_equal(gr.ngroups, 1);
	graph_free(&gr);
	/* TENSORD_OPTIM_MULTI=0: no group */
	setenv("TENSORD_OPTIM_MULTI", "0", 1);
	assert_int_equal(build(&call, "", spec, 1, true, &gr, &loss, &lr), 0);
	unsetenv("TENSORD_OPTIM_MULTI");
	assert_int_equal(gr.ngroups, 0);
	for (unsigned i = 0; i < gr.n; i++)
		assert_int_equal(gr.nodes[i].group, 0);
	graph_free(&gr);
	free(spec);
}

/* Run the optimizer nodes `m` (graph.run's form) as one group of
 * optim_multi_record; the dispatches recorded. */
static uint64_t multi_dispatches(struct stub_daemon *sd, struct mp *m)
{
	struct caller call = stub_caller(sd, 1000);
	struct graph gr = { .call = &call };
	unsigned idx[8], n;
	uint64_t d;

	assert_int_equal(graph_parse(&gr, mp_obj(m), NULL), 0);
	n = gr.n;
	for (unsigned i = 0; i < n; i++)
		idx[i] = i;
	assert_int_equal(graph_group_add(&gr, idx, n, optim_multi_record), 0);
	assert_int_equal(gr.ngroups, 1);
	assert_int_equal(graph_execute(&gr), 0);
	d = gr.dispatches;
	graph_free(&gr);
	assert_int_equal(stub_live(sd), NSTORED);
	return d;
}

/* optim_multi_record: an Adam triple and an SGD update are one dispatch;
 * an update reading another's result (an SGD update of an update; an
 * adam_param whose second moment is no adam_v of the group) makes each
 * node record itself. */
static void test_multi_record(void **state)
{
	struct stub_daemon *sd = *state;
	struct mp m;

	mp_begin(&m);
	msgpack_pack_array(&m.pk, 4);
	mp_node(&m, "m", "adam_m", STRS("w1", "w1", "w1"), NULL, NULL);
	mp_node(&m, "v", "adam_v", STRS("w1", "w1", "w1"), NULL, NULL);
	mp_node(&m, "p", "adam_param", STRS("w1", "m", "v"), NULL, STRS("lr=0.1", "step=1"));
	mp_node(&m, "s", "sgd_param", STRS("b1", "b1"), NULL, STRS("lr=0.1"));
	assert_int_equal(multi_dispatches(sd, &m), 1);
	mp_end(&m);

	mp_begin(&m);
	msgpack_pack_array(&m.pk, 2);
	mp_node(&m, "s", "sgd_param", STRS("b1", "b1"), NULL, STRS("lr=0.1"));
	mp_node(&m, "t", "sgd_param", STRS("s", "b1"), NULL, STRS("lr=0.1"));
	assert_int_equal(multi_dispatches(sd, &m), 2);
	mp_end(&m);

	mp_begin(&m);
	msgpack_pack_array(&m.pk, 3);
	mp_node(&m, "m", "adam_m", STRS("w1", "w1", "w1"), NULL, NULL);
	mp_node(&m, "v", "adam_v", STRS("w1", "w1", "w1"), NULL, NULL);
	mp_node(&m, "p", "adam_param", STRS("w1", "m", "w1"), NULL, STRS("lr=0.1", "step=1"));
	assert_int_equal(multi_dispatches(sd, &m), 3);
	mp_end(&m);
}

/* Run and commit `steps` adam steps as `call`, reading tensors with prefix `p`. */
static void run_steps(struct stub_daemon *sd, struct caller *call, const char *p, int steps)
{
	struct train_spec *spec = malloc(sizeof(*spec));

	assert_int_equal(spec_of(call, p, STRS("type=adam"), false, spec), 0);
	for (int s = 1; s <= steps; s++) {
		struct graph gr = { .call = call };
		struct step_nodes sn;
		double value = -1, lr;
		struct mp m;
		char key[TDP_MAX_NAME_LEN + 16];
		struct tensor *t;
		bool fresh;

		/* the moments start from zeros unless stored */
		snprintf(key, sizeof(key), "%s.exp_avg", spec->names[0]);
		fresh = store_lookup(sd->d.store, key, strlen(key), &access_daemon, 0, &t, NULL) < 0;
		mp_begin(&m);
		pack_mlp(&m, p);
		assert_call_ok(call, train_run_step(call, &(struct step_input){ .spec = spec, .nodes = mp_obj(&m),
										 .step = s, .train = true },
						    &gr, &sn, &value));
		lr = sn.lr;
		assert_true(value == 0); /* the stub computes nothing */
		assert_true(lr == 0.001);
		assert_int_equal(count_op(&gr, 6, "zeros"), fresh ? 4 : 0);
		assert_call_ok(call, graph_commit_all(&gr));
		graph_free(&gr);
		mp_end(&m);
	}
	free(spec);
}

static void test_run_commit(void **state)
{
	struct stub_daemon *sd = *state;
	struct caller call = stub_caller(sd, 1000);

	run_steps(sd, &call, "", 1);
	/* 4 parameters updated in place, 8 moments created */
	assert_int_equal(stub_count(sd), NSTORED + 8);
	assert_int_equal(stub_live(sd), NSTORED + 8);
	for (unsigned k = 0; k < 4; k++) {
		struct tensor *p = stub_find(sd, 1000, param_names[k]);
		char m[64];

		assert_int_equal(p->version, 2);
		snprintf(m, sizeof(m), "%s.exp_avg", param_names[k]);
		assert_non_null(stub_find(sd, 1000, m));
		assert_int_equal(stub_find(sd, 1000, m)->version, 1);
		assert_int_equal(stub_find(sd, 1000, m)->owner, 1000);
		assert_int_equal(stub_find(sd, 1000, m)->bytes, p->bytes);
	}
	assert_int_equal(stub_find(sd, 1000, "x")->version, 1);
	run_steps(sd, &call, "", 2); /* steps 1 and 2 again, from the stored moments */
	assert_int_equal(stub_count(sd), NSTORED + 8);
	assert_int_equal(stub_find(sd, 1000, "w1")->version, 4);
	assert_int_equal(stub_find(sd, 1000, "w1.exp_avg_sq")->version, 3);
	assert_int_equal(stub_live(sd), NSTORED + 8);
}

/* A step uid 1000 runs on uid 1001's world-writable model: the state it
 * creates belongs to 1001, like the parameters. */
static void test_derived_owner(void **state)
{
	struct stub_daemon *sd = *state;
	struct caller call = stub_caller(sd, 1000);
	struct train_spec *spec = malloc(sizeof(*spec));
	struct tensor *planted;
	struct graph gr;
	unsigned loss;
	double lr;

	put_mlp(sd, 1001, TDP_MODE_WORLD_READ | TDP_MODE_WORLD_WRITE);
	run_steps(sd, &call, "~1001/", 1);
	for (unsigned k = 0; k < 4; k++) {
		char m[64];
		struct tensor *t;

		snprintf(m, sizeof(m), "%s.exp_avg_sq", param_names[k]);
		t = stub_find(sd, 1001, m);
		assert_non_null(t);
		assert_int_equal(t->owner, 1001);
		assert_int_equal(t->group, 1001);
		assert_int_equal(t->mode, TDP_MODE_WORLD_READ | TDP_MODE_WORLD_WRITE);
		assert_null(stub_find(sd, 1000, m));
		assert_int_equal(stub_find(sd, 1001, param_names[k])->owner, 1001);
		assert_int_equal(stub_find(sd, 1001, param_names[k])->version, 2);
	}
	/* uid 1000's own model is untouched */
	assert_int_equal(stub_find(sd, 1000, "w1")->version, 1);
	assert_int_equal(stub_count(sd), 2 * NSTORED + 8);

	/* State someone else put in its place is never used. */
	planted = stub_find(sd, 1001, "b1.exp_avg");
	planted->owner = 1000;
	assert_int_equal(spec_of(&call, "~1001/", STRS("type=adam"), false, spec), 0);
	assert_int_equal(build(&call, "~1001/", spec, 2, true, &gr, &loss, &lr), -1);
	assert_int_equal(call.err.code, TDP_FAILED_PRECONDITION);
	/* Names are shown as `~login/`: what the password database holds for
	 * uid 1001 on this machine, or the number where it has none. */
	{
		struct passwd *pw = getpwuid(1001);
		const char *ns = pw && pw->pw_name && pw->pw_name[0] ? pw->pw_name : "1001";
		char want[256];

		snprintf(want, sizeof(want), "optimizer state: '~%s/b1.exp_avg' belongs to uid 1000, "
			 "not to uid 1001 who owns '~%s/b1'; it is not used: delete it", ns, ns);
		assert_non_null(strstr(call.err.message, want));
	}
	graph_free(&gr);
	planted->owner = 1001;
	free(spec);
}

static void test_step_errors(void **state)
{
	struct stub_daemon *sd = *state;
	struct caller call = stub_caller(sd, 1000);
	struct train_spec *spec = malloc(sizeof(*spec));
	static const uint64_t s2[1] = { 2 };
	struct graph gr;
	unsigned loss;
	double lr;

	/* an i32 parameter */
	assert_int_equal(spec_of(&call, "", STRS("type=sgd"), false, spec), 0);
	stub_put(sd, 1000, "n", TDP_DTYPE_I32, 1, s2, TDP_MODE_PRIVATE, NULL);
	snprintf(spec->names[3], sizeof(spec->names[3]), "1000/n");
	assert_int_equal(build(&call, "", spec, 1, true, &gr, &loss, &lr), -1);
	assert_int_equal(call.err.code, TDP_DTYPE_MISMATCH);
	assert_string_equal(call.err.message, "parameter 'n' is i32, not a float tensor");
	graph_free(&gr);

	/* listed twice */
	call = stub_caller(sd, 1000);
	snprintf(spec->names[3], sizeof(spec->names[3]), "1000/w1");
	assert_int_equal(build(&call, "", spec, 1, true, &gr, &loss, &lr), -1);
	assert_string_equal(call.err.message, "parameter 'w1' is listed twice");
	graph_free(&gr);

	/* a parameter the loss does not read */
	stub_put(sd, 1000, "b3", TDP_DTYPE_F32, 1, s2, TDP_MODE_PRIVATE, NULL);
	snprintf(spec->names[3], sizeof(spec->names[3]), "1000/b3");
	call = stub_caller(sd, 1000);
	assert_int_equal(build(&call, "", spec, 1, true, &gr, &loss, &lr), -1);
	assert_int_equal(call.err.code, TDP_INVALID_ARGUMENT);
	assert_string_equal(call.err.message, "parameter 'b3' does not affect the loss");
	graph_free(&gr);

	/* a missing parameter, and one the caller may not write */
	snprintf(spec->names[3], sizeof(spec->names[3]), "1000/b9");
	call = stub_caller(sd, 1000);
	assert_int_equal(build(&call, "", spec, 1, true, &gr, &loss, &lr), -1);
	assert_int_equal(call.err.code, TDP_NOT_FOUND);
	assert_string_equal(call.err.message, "parameter: no tensor named 'b9'");
	graph_free(&gr);
	put_mlp(sd, 1001, TDP_MODE_WORLD_READ);
	assert_int_equal(spec_of(&call, "~1001/", STRS("type=sgd"), false, spec), 0);
	call = stub_caller(sd, 1000);
	assert_int_equal(build(&call, "~1001/", spec, 1, true, &gr, &loss, &lr), -1);
	assert_int_equal(call.err.code, TDP_PERMISSION_DENIED);
	assert_non_null(strstr(call.err.message, "may not be changed by uid 1000"));
	graph_free(&gr);
	/* evaluation (no training) only reads them */
	call = stub_caller(sd, 1000);
	assert_int_equal(build(&call, "~1001/", spec, 1, false, &gr, &loss, &lr), 0);
	graph_free(&gr);

	/* the loss names no node */
	assert_int_equal(spec_of(&call, "", STRS("type=sgd"), false, spec), 0);
	snprintf(spec->loss, sizeof(spec->loss), "nothing");
	assert_int_equal(build(&call, "", spec, 1, true, &gr, &loss, &lr), -1);
	assert_string_equal(call.err.message, "loss names no node id");
	graph_free(&gr);

	/* the loss must be a scalar */
	snprintf(spec->loss, sizeof(spec->loss), "o2");
	call = stub_caller(sd, 1000);
	assert_int_equal(build(&call, "", spec, 1, true, &gr, &loss, &lr), -1);
	assert_int_equal(call.err.code, TDP_INVALID_ARGUMENT);
	assert_string_equal(call.err.message, "node 4 'o2' (add): the loss must be a floating scalar, "
					      "not f32 of 16 elements");
	graph_free(&gr);
	assert_int_equal(stub_live(sd), 2 * NSTORED + 2);
	free(spec);
}

/* A model definition: `nodes` (packed by `pack`), loss "loss", params w1..b2,
 * inputs x (declared f32 [8,4]) and y (the stored tensor). */
static struct model *make_model(void (*pack)(struct mp *m))
{
	struct model *mod = NULL;
	struct mp m;
	char why[300];

	mp_begin(&m);
	msgpack_pack_map(&m.pk, 4);
	mp_str(&m, "nodes");
	pack(&m);
	mp_str(&m, "loss");
	mp_str(&m, "loss");
	mp_str(&m, "params");
	mp_strs(&m, STRS("w1", "b1", "w2", "b2"));
	mp_str(&m, "inputs");
	msgpack_pack_array(&m.pk, 2);
	msgpack_pack_map(&m.pk, 3);
	mp_str(&m, "name");
	mp_str(&m, "x");
	mp_str(&m, "dtype");
	mp_str(&m, "f32");
	mp_str(&m, "shape");
	msgpack_pack_array(&m.pk, 2);
	msgpack_pack_int(&m.pk, 8);
	msgpack_pack_int(&m.pk, 4);
	mp_str(&m, "y");
	assert_int_equal(model_new("m", mp_obj(&m), &mod, why, sizeof(why)), 0);
	mp_end(&m);
	return mod;
}

static void pack_good(struct mp *m)
{
	pack_mlp(m, "");
}

/* The output layer's activations pass through argmax: an integer result,
 * through which no gradient flows. */
static void pack_argmax(struct mp *m)
{
	msgpack_pack_array(&m->pk, 8);
	mp_node(m, "h", "matmul", STRS("x", "w1"), NULL, NULL);
	mp_node(m, "h2", "add", STRS("h", "b1"), NULL, NULL);
	mp_node(m, "o", "matmul", STRS("h2", "w2"), NULL, NULL);
	mp_node(m, "o2", "add", STRS("o", "b2"), NULL, NULL);
	mp_node(m, "am", "argmax", STRS("o2"), NULL, STRS("axis=1"));
	mp_node(m, "c", "cast", STRS("am"), NULL, STRS("dtype=f32"));
	mp_node(m, "t", "sum", STRS("y"), NULL, STRS("axis=1"));
	mp_node(m, "loss", "mse", STRS("c", "t"), NULL, NULL);
}

/* The output layer passes through an op with no backward rule (an
 * optimizer update here) on its way to the loss. */
static void pack_nondiff(struct mp *m)
{
	msgpack_pack_array(&m->pk, 6);
	mp_node(m, "h", "matmul", STRS("x", "w1"), NULL, NULL);
	mp_node(m, "h2", "add", STRS("h", "b1"), NULL, NULL);
	mp_node(m, "o", "matmul", STRS("h2", "w2"), NULL, NULL);
	mp_node(m, "o2", "add", STRS("o", "b2"), NULL, NULL);
	mp_node(m, "u", "sgd_param", STRS("o2", "o2"), NULL, STRS("lr=0.5"));
	mp_node(m, "loss", "mse", STRS("u", "y"), NULL, NULL);
}

static void test_model_check(void **state)
{
	struct stub_daemon *sd = *state;
	struct caller call = stub_caller(sd, 1000);
	struct model *mod = make_model(pack_good);

	/* "x" is declared: a zero placeholder stands in; "y" is the stored one. */
	assert_int_equal(train_model_check(&call, mod), 0);
	assert_int_equal(call.err.code, 0);
	assert_int_equal(stub_live(sd), NSTORED);
	assert_int_equal(stub_count(sd), NSTORED);
	model_free(mod);

	mod = make_model(pack_nondiff);
	assert_int_equal(train_model_check(&call, mod), -1);
	assert_int_equal(call.err.code, TDP_INVALID_ARGUMENT);
	assert_string_equal(call.err.message, "node 4 'u' (sgd_param): sgd_param is not differentiable, but "
					      "a parameter's gradient flows through it");
	model_free(mod);

	mod = make_model(pack_argmax);
	call = stub_caller(sd, 1000);
	assert_int_equal(train_model_check(&call, mod), -1);
	assert_int_equal(call.err.code, TDP_INVALID_ARGUMENT);
	assert_string_equal(call.err.message, "node 7 'loss' (mse): the loss does not depend on any parameter");
	model_free(mod);

	/* Another uid has no "y" of its own to check with. */
	mod = make_model(pack_good);
	call = stub_caller(sd, 1001);
	assert_int_equal(train_model_check(&call, mod), -1);
	assert_int_equal(call.err.code, TDP_INVALID_ARGUMENT);
	assert_non_null(strstr(call.err.message, "input 'y'"));
	model_free(mod);
	assert_int_equal(stub_live(sd), NSTORED);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_spec, setup, teardown),
		cmocka_unit_test_setup_teardown(test_build_sgd, setup, teardown),
		cmocka_unit_test_setup_teardown(test_build_adam, setup, teardown),
		cmocka_unit_test_setup_teardown(test_run_commit, setup, teardown),
		cmocka_unit_test_setup_teardown(test_derived_owner, setup, teardown),
		cmocka_unit_test_setup_teardown(test_step_errors, setup, teardown),
		cmocka_unit_test_setup_teardown(test_model_check, setup, teardown),
		cmocka_unit_test_setup_teardown(test_multi_record, setup, teardown),
	};

	return cmocka_run_group_tests_name("train_step", tests, NULL, NULL);
}

/* The graph engine (daemon/engine/) on the stub device, without a socket:
 * parsing a node list, inference, errors naming the node, access to stored
 * tensors, outputs checked against limits and quotas and committed into
 * the caller's namespace, fusion planning, node groups, and device memory
 * given back.
 * The stub computes nothing, so results are checked by their shapes,
 * dtypes, placement, memory and the store, never by their values. */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "dtype.h"
#include "engine/graph_core.h"
#include "engine/graph_parse.h"
#include "fuzz_gpu.h"
#include "mode.h"
#include "status.h"
#include "store/store.h"
#include "stub_daemon.h"

static const uint64_t shape_x[2] = { 4, 3 }, shape_w[2] = { 3, 5 }, shape_b[1] = { 5 };

static int setup(void **state)
{
	struct stub_daemon *sd = malloc(sizeof(*sd));

	if (!sd || stub_daemon_init(sd) < 0) {
		free(sd);
		return -1;
	}
	/* x [4,3] @ w [3,5] + b [5], all uid 1000's. */
	stub_put(sd, 1000, "x", TDP_DTYPE_F32, 2, shape_x, TDP_MODE_PRIVATE, NULL);
	stub_put(sd, 1000, "w", TDP_DTYPE_F32, 2, shape_w, TDP_MODE_PRIVATE, NULL);
	stub_put(sd, 1000, "b", TDP_DTYPE_F32, 1, shape_b, TDP_MODE_PRIVATE, NULL);
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

/* Parse `nodes` (and `outputs`, may be NULL) for `call` into `gr`. */
static int parse(struct graph *gr, struct caller *call, struct mp *nodes, struct mp *outputs)
{
	*gr = (struct graph){ .call = call };
	return graph_parse(gr, mp_obj(nodes), outputs ? mp_obj(outputs) : NULL);
}

static void assert_shape(const struct op_tensor *t, int dtype, unsigned rank, const uint64_t *shape)
{
	assert_int_equal(t->dtype, dtype);
	assert_int_equal(t->rank, rank);
	for (unsigned k = 0; k < rank; k++)
		assert_int_equal(t->shape[k], shape[k]);
}

static void test_parse_infers(void **state)
{
	struct stub_daemon *sd = *state;
	struct caller call = stub_caller(sd, 1000);
	struct graph gr;
	struct mp m;
	static const uint64_t hw[2] = { 4, 5 }, t5[2] = { 5, 4 };

	mp_begin(&m);
	msgpack_pack_array(&m.pk, 6);
	mp_node(&m, "h", "matmul", STRS("x", "w"), NULL, NULL);
	mp_node(&m, "a", "add", STRS("h", "b"), NULL, NULL);
	mp_node(&m, "r", "relu", STRS("a"), NULL, NULL);
	mp_node(&m, "t", "transpose", STRS("r"), NULL, NULL);
	mp_node(&m, "c", "cast", STRS("t"), NULL, STRS("dtype=f16"));
	mp_node(&m, "s", "sum", STRS("c"), NULL, NULL);
	assert_int_equal(parse(&gr, &call, &m, NULL), 0);
	assert_int_equal(call.err.code, 0);
	assert_int_equal(gr.n, 6);
	assert_string_equal(gr.nodes[0].ctx.def->name, "matmul");
	assert_shape(&gr.nodes[0].ctx.out, TDP_DTYPE_F32, 2, hw);
	/* [4,5] + [5] broadcasts */
	assert_shape(&gr.nodes[1].ctx.out, TDP_DTYPE_F32, 2, hw);
	assert_shape(&gr.nodes[2].ctx.out, TDP_DTYPE_F32, 2, hw);
	assert_shape(&gr.nodes[3].ctx.out, TDP_DTYPE_F32, 2, t5);
	assert_shape(&gr.nodes[4].ctx.out, TDP_DTYPE_F16, 2, t5);
	assert_int_equal(gr.nodes[4].ctx.out.bytes, 20 * 2);
	/* sum without axes: a scalar */
	assert_int_equal(gr.nodes[5].ctx.out.rank, 0);
	assert_int_equal(gr.nodes[5].ctx.out.count, 1);
	assert_int_equal(gr.nodes[5].ctx.out.dtype, TDP_DTYPE_F16);
	/* inputs: earlier nodes by index, stored tensors by pointer */
	assert_int_equal(gr.nodes[0].src[0], -1);
	assert_ptr_equal(gr.nodes[0].stored[0], stub_find(sd, 1000, "x"));
	assert_int_equal(gr.nodes[1].src[0], 0);
	assert_int_equal(gr.nodes[1].src[1], -1);
	assert_ptr_equal(gr.nodes[1].stored[1], stub_find(sd, 1000, "b"));
	assert_int_equal(gr.nodes[5].src[0], 4);
	for (unsigned i = 0; i < gr.n; i++) {
		assert_int_equal(gr.nodes[i].device, 0);
		assert_ptr_equal(gr.nodes[i].ctx.g, &sd->gpu);
		assert_false(gr.nodes[i].has_out);
	}
	/* nothing allocated before execution */
	assert_int_equal(stub_live(sd), 3);
	graph_free(&gr);
	mp_end(&m);
}

static void test_shape_error_names_node(void **state)
{
	struct stub_daemon *sd = *state;
	struct caller call = stub_caller(sd, 1000);
	struct graph gr;
	struct mp m;

	mp_begin(&m);
	msgpack_pack_array(&m.pk, 2);
	mp_node(&m, "a", "relu", STRS("x"), NULL, NULL);
	mp_node(&m, "h", "matmul", STRS("a", "x"), NULL, NULL); /* [4,3] @ [4,3] */
	assert_int_equal(parse(&gr, &call, &m, NULL), -1);
	assert_int_equal(call.err.code, TDP_SHAPE_MISMATCH);
	assert_true(!strncmp(call.err.message, "node 1 'h' (matmul): inner dimensions differ", 44));
	graph_free(&gr);
	mp_end(&m);
}

static void test_dtype_error(void **state)
{
	struct stub_daemon *sd = *state;
	struct caller call = stub_caller(sd, 1000);
	static const uint64_t s3[1] = { 3 };
	struct graph gr;
	struct mp m;

	stub_put(sd, 1000, "i", TDP_DTYPE_I32, 1, s3, TDP_MODE_PRIVATE, NULL);
	mp_begin(&m);
	msgpack_pack_array(&m.pk, 1);
	mp_node(&m, "m", "matmul", STRS("i", "i"), NULL, NULL);
	assert_int_equal(parse(&gr, &call, &m, NULL), -1);
	assert_int_equal(call.err.code, TDP_DTYPE_MISMATCH);
	assert_string_equal(call.err.message, "node 0 'm' (matmul): needs f32, f16 or bf16, not i32");
	graph_free(&gr);
	mp_end(&m);
}

/* op.run's one node has no id: the error names the op alone. */
static void test_op_run_error(void **state)
{
	struct stub_daemon *sd = *state;
	struct caller call = stub_caller(sd, 1000);
	struct graph gr = { .call = &call };
	struct mp op, in;

	mp_begin(&op);
	mp_str(&op, "matmul");
	mp_begin(&in);
	mp_strs(&in, STRS("w", "w"));
	assert_int_equal(graph_parse_op(&gr, mp_obj(&op), mp_obj(&in), NULL, NULL, NULL), -1);
	assert_int_equal(call.err.code, TDP_SHAPE_MISMATCH);
	assert_true(!strncmp(call.err.message, "matmul: inner dimensions differ", 31));
	graph_free(&gr);
	mp_end(&in);
	mp_end(&op);
}

static void test_unknown_op(void **state)
{
	struct stub_daemon *sd = *state;
	struct caller call = stub_caller(sd, 1000);
	struct graph gr;
	struct mp m;

	mp_begin(&m);
	msgpack_pack_array(&m.pk, 2);
	mp_node(&m, "a", "relu", STRS("x"), NULL, NULL);
	mp_node(&m, "q", "frobnicate", STRS("a"), NULL, NULL);
	assert_int_equal(parse(&gr, &call, &m, NULL), -1);
	assert_int_equal(call.err.code, TDP_INVALID_ARGUMENT);
	assert_string_equal(call.err.message,
			    "node 1 'q': unknown op 'frobnicate' (docs/ops.md lists them)");
	graph_free(&gr);
	mp_end(&m);

	/* A near miss names the op it may have meant (issue 35). */
	call = stub_caller(sd, 1000);
	mp_begin(&m);
	msgpack_pack_array(&m.pk, 1);
	mp_node(&m, "p", "matmull", STRS("x", "x"), NULL, NULL);
	assert_int_equal(parse(&gr, &call, &m, NULL), -1);
	assert_string_equal(call.err.message,
			    "node 0 'p': unknown op 'matmull'; did you mean 'matmul'? (docs/ops.md lists them)");
	graph_free(&gr);
	mp_end(&m);
}

static void test_later_node(void **state)
{
	struct stub_daemon *sd = *state;
	struct caller call = stub_caller(sd, 1000);
	struct graph gr;
	struct mp m;

	/* "w" is a stored tensor too: a later node's id wins and is refused. */
	mp_begin(&m);
	msgpack_pack_array(&m.pk, 2);
	mp_node(&m, "a", "relu", STRS("w"), NULL, NULL);
	mp_node(&m, "w", "relu", STRS("x"), NULL, NULL);
	assert_int_equal(parse(&gr, &call, &m, NULL), -1);
	assert_int_equal(call.err.code, TDP_INVALID_ARGUMENT);
	assert_string_equal(call.err.message,
			    "node 0 'a' (relu): input 0 'w' is node 1, which comes later (nodes must be in "
			    "order; cycles are not allowed)");
	graph_free(&gr);
	mp_end(&m);
}

static void test_missing_input(void **state)
{
	struct stub_daemon *sd = *state;
	struct caller call = stub_caller(sd, 1000);
	struct graph gr;
	struct mp m;

	mp_begin(&m);
	msgpack_pack_array(&m.pk, 1);
	mp_node(&m, "a", "add", STRS("x", "nope"), NULL, NULL);
	assert_int_equal(parse(&gr, &call, &m, NULL), -1);
	assert_int_equal(call.err.code, TDP_NOT_FOUND);
	assert_string_equal(call.err.message,
			    "node 0 'a' (add): input 1 'nope' is neither an earlier node nor a stored tensor");
	graph_free(&gr);
	mp_end(&m);
}

/* Reading another uid's tensor goes through the access rule. */
static void test_access(void **state)
{
	struct stub_daemon *sd = *state;
	struct caller call = stub_caller(sd, 1000);
	struct tensor *secret;
	struct graph gr;
	struct mp m;

	secret = stub_put(sd, 1001, "s", TDP_DTYPE_F32, 2, shape_x, TDP_MODE_PRIVATE, NULL);
	mp_begin(&m);
	msgpack_pack_array(&m.pk, 1);
	mp_node(&m, "a", "add", STRS("x", "~1001/s"), NULL, NULL);
	assert_int_equal(parse(&gr, &call, &m, NULL), -1);
	assert_int_equal(call.err.code, TDP_PERMISSION_DENIED);
	assert_non_null(strstr(call.err.message, "node 0 'a' (add): input 1: tensor '~"));
	assert_non_null(strstr(call.err.message, "belongs to uid 1001 (group 1001, mode private) and "
					      "may not be read by uid 1000"));
	graph_free(&gr);

	/* A plain name is the caller's own namespace: uid 1000 has no "s". */
	mp_end(&m);
	mp_begin(&m);
	msgpack_pack_array(&m.pk, 1);
	mp_node(&m, "a", "add", STRS("x", "s"), NULL, NULL);
	call = stub_caller(sd, 1000);
	assert_int_equal(parse(&gr, &call, &m, NULL), -1);
	assert_int_equal(call.err.code, TDP_NOT_FOUND);
	graph_free(&gr);
	mp_end(&m);

	/* world-read lets uid 1000 read it; its owner reads it by the plain name. */
	secret->mode = TDP_MODE_WORLD_READ;
	mp_begin(&m);
	msgpack_pack_array(&m.pk, 1);
	mp_node(&m, "a", "add", STRS("x", "~1001/s"), NULL, NULL);
	call = stub_caller(sd, 1000);
	assert_int_equal(parse(&gr, &call, &m, NULL), 0);
	assert_ptr_equal(gr.nodes[0].stored[1], secret);
	graph_free(&gr);
	mp_end(&m);

	secret->mode = TDP_MODE_PRIVATE;
	mp_begin(&m);
	msgpack_pack_array(&m.pk, 1);
	mp_node(&m, "a", "relu", STRS("s"), NULL, NULL);
	call = stub_caller(sd, 1001);
	assert_int_equal(parse(&gr, &call, &m, NULL), 0);
	assert_ptr_equal(gr.nodes[0].stored[0], secret);
	graph_free(&gr);
	mp_end(&m);
}

/* Parse and run, for `call`, a graph storing node "a" (add of uid 1000's
 * x @ w and b) as `out`; the caller commits and frees `gr`. */
static void run_uncommitted(struct caller *call, const char *out, struct graph *gr)
{
	struct mp m, o;

	mp_begin(&m);
	msgpack_pack_array(&m.pk, 3);
	mp_node(&m, "h", "matmul", STRS("~1000/x", "~1000/w"), NULL, NULL);
	mp_node(&m, "a", "add", STRS("h", "~1000/b"), out, NULL);
	mp_node(&m, "r", "relu", STRS("a"), NULL, NULL);
	mp_begin(&o);
	mp_strs(&o, STRS("r"));
	assert_int_equal(parse(gr, call, &m, &o), 0);
	assert_true(gr->nodes[1].has_out);
	assert_true(gr->nodes[2].inline_out);
	assert_false(gr->nodes[1].inline_out);
	assert_int_equal(graph_check_outputs(gr), 0);
	assert_int_equal(graph_execute(gr), 0);
	assert_true(gr->dispatches >= 3);
	mp_end(&o);
	mp_end(&m);
}

/* Run a graph storing node "a" (add) as `out` for uid `uid`; returns the
 * stored tensor. */
static struct tensor *run_and_commit(struct stub_daemon *sd, uint32_t uid, const char *out)
{
	struct caller call = stub_caller(sd, uid);
	struct tensor *t;
	struct graph gr;

	run_uncommitted(&call, out, &gr);
	assert_int_equal(graph_commit_all(&gr), 0);
	t = gr.nodes[1].committed;
	assert_non_null(t);
	graph_free(&gr);
	return t;
}

/* Rights are checked again when the results are stored (issue 31): uid
 * 1001's graph storing into uid 1000's world-writable y stores nothing once
 * y was made private, or deleted (1001 may not create names in 1000's
 * namespace), while the graph ran. */
static void test_commit_rechecks(void **state)
{
	struct stub_daemon *sd = *state;
	struct caller call = stub_caller(sd, 1001);
	const uint64_t shape[2] = { 4, 5 };
	struct tensor *y;
	struct graph gr;

	run_and_commit(sd, 1000, "y");
	for (const char *n = "x"; n; n = !strcmp(n, "x") ? "w" : !strcmp(n, "w") ? "b" : NULL)
		stub_find(sd, 1000, n)->mode = TDP_MODE_WORLD_READ;
	y = stub_find(sd, 1000, "y");
	y->mode = TDP_MODE_WORLD_READ | TDP_MODE_WORLD_WRITE;
	run_uncommitted(&call, "~1000/y", &gr);
	y->mode = TDP_MODE_PRIVATE;
	assert_int_equal(graph_commit_all(&gr), -1);
	assert_int_equal(call.err.code, TDP_PERMISSION_DENIED);
	assert_null(gr.nodes[1].committed);
	assert_ptr_equal(stub_find(sd, 1000, "y"), y);
	assert_int_equal(y->version, 1);
	graph_free(&gr);

	/* Deleted meanwhile: not re-created in 1000's namespace. */
	y->mode = TDP_MODE_WORLD_READ | TDP_MODE_WORLD_WRITE;
	call = stub_caller(sd, 1001);
	run_uncommitted(&call, "~1000/y", &gr);
	assert_int_equal(store_delete(sd->d.store, "1000/y", 6), 0);
	assert_int_equal(graph_commit_all(&gr), -1);
	assert_int_equal(call.err.code, TDP_PERMISSION_DENIED);
	assert_null(stub_find(sd, 1000, "y"));
	graph_free(&gr);

	/* Re-created private by its owner meanwhile: not 1001's to change. */
	call = stub_caller(sd, 1001);
	y = stub_put(sd, 1000, "y", TDP_DTYPE_F32, 2, shape, TDP_MODE_WORLD_READ | TDP_MODE_WORLD_WRITE, NULL);
	run_uncommitted(&call, "~1000/y", &gr);
	assert_int_equal(store_delete(sd->d.store, "1000/y", 6), 0);
	y = stub_put(sd, 1000, "y", TDP_DTYPE_F32, 2, shape, TDP_MODE_PRIVATE, NULL);
	assert_int_equal(graph_commit_all(&gr), -1);
	assert_int_equal(call.err.code, TDP_PERMISSION_DENIED);
	assert_int_equal(stub_find(sd, 1000, "y")->version, 1);
	graph_free(&gr);
	assert_int_equal(stub_live(sd), stub_count(sd));
}

static void test_commit(void **state)
{
	struct stub_daemon *sd = *state;
	struct tensor *t, *again;

	t = run_and_commit(sd, 1000, "y");
	assert_ptr_equal(stub_find(sd, 1000, "y"), t);
	assert_string_equal(t->name, "1000/y");
	assert_int_equal(t->owner, 1000);
	assert_int_equal(t->mode, TDP_MODE_PRIVATE);
	assert_int_equal(t->dtype, TDP_DTYPE_F32);
	assert_int_equal(t->rank, 2);
	assert_int_equal(t->shape[0], 4);
	assert_int_equal(t->shape[1], 5);
	assert_int_equal(t->bytes, 80);
	assert_int_equal(t->device, 0);
	assert_int_equal(t->version, 1);
	assert_int_equal(stub_count(sd), 4);
	/* only the committed result outlives the graph */
	assert_int_equal(stub_live(sd), 4);

	/* Replacing it bumps the version and keeps the count. */
	again = run_and_commit(sd, 1000, "y");
	assert_ptr_equal(stub_find(sd, 1000, "y"), again);
	assert_int_equal(again->version, 2);
	assert_int_equal(stub_count(sd), 4);
	assert_int_equal(stub_live(sd), 4);

	/* Another uid reading world-readable inputs stores in its own namespace. */
	for (const char *n = "x"; n; n = !strcmp(n, "x") ? "w" : !strcmp(n, "w") ? "b" : NULL)
		stub_find(sd, 1000, n)->mode = TDP_MODE_WORLD_READ;
	t = run_and_commit(sd, 1001, "y");
	assert_string_equal(t->name, "1001/y");
	assert_int_equal(t->owner, 1001);
	assert_int_equal(t->version, 1);
	assert_int_equal(stub_find(sd, 1000, "y")->version, 2);
	assert_int_equal(stub_count(sd), 5);
}

/* Parse nodes storing "a" as `out1` and "r" as `out2` (NULL: none) for
 * `call` and check the outputs; returns graph_check_outputs's result. */
static int check_outputs(struct caller *call, const char *out1, const char *out2)
{
	struct graph gr;
	struct mp m;
	int r;

	mp_begin(&m);
	msgpack_pack_array(&m.pk, 2);
	mp_node(&m, "a", "add", STRS("~1000/x", "~1000/x"), out1, NULL);
	mp_node(&m, "r", "relu", STRS("a"), out2, NULL);
	assert_int_equal(parse(&gr, call, &m, NULL), 0);
	r = graph_check_outputs(&gr);
	graph_free(&gr);
	mp_end(&m);
	return r;
}

static void test_outputs_max_tensors(void **state)
{
	struct stub_daemon *sd = *state;
	struct caller call = stub_caller(sd, 1000);

	sd->d.cfg.max_tensors = 4;
	assert_int_equal(check_outputs(&call, "y", NULL), 0);
	assert_int_equal(check_outputs(&call, "y", "z"), -1);
	assert_int_equal(call.err.code, TDP_RESOURCE_EXHAUSTED);
	assert_string_equal(call.err.message, "storing the outputs would pass 4 tensors (max_tensors)");
	/* Replacing stored tensors adds none, even at the limit. */
	sd->d.cfg.max_tensors = 3;
	call = stub_caller(sd, 1000);
	assert_int_equal(check_outputs(&call, "w", "b"), 0);
	assert_int_equal(check_outputs(&call, "w", "y"), -1);
	assert_int_equal(call.err.code, TDP_RESOURCE_EXHAUSTED);
}

static void test_outputs_quota(void **state)
{
	struct stub_daemon *sd = *state;
	struct caller call = stub_caller(sd, 1000);

	/* uid 1000 holds 3 tensors of 48 + 60 + 20 = 128 bytes; a and r are 48 each. */
	sd->d.cfg.user_max_bytes = 128 + 48;
	store_set_quota(sd->d.store, 0, sd->d.cfg.user_max_bytes);
	assert_int_equal(check_outputs(&call, "y", NULL), 0);
	assert_int_equal(check_outputs(&call, "y", "z"), -1);
	assert_int_equal(call.err.code, TDP_RESOURCE_EXHAUSTED);
	assert_string_equal(call.err.message,
			    "uid 1000 holds 128 bytes; 96 more would pass its quota of 176 (user_max_bytes)");
	/* Replacing x (48 bytes) by 48 bytes adds nothing. */
	call = stub_caller(sd, 1000);
	assert_int_equal(check_outputs(&call, "x", "y"), 0);

	sd->d.cfg.user_max_bytes = 0;
	sd->d.cfg.user_max_tensors = 4;
	store_set_quota(sd->d.store, 4, 0);
	assert_int_equal(check_outputs(&call, "y", "z"), -1);
	assert_int_equal(call.err.code, TDP_RESOURCE_EXHAUSTED);
	assert_string_equal(call.err.message,
			    "uid 1000 holds 3 tensors; 2 more would pass its quota of 4 (user_max_tensors)");
	/* Another uid's quota is its own. */
	for (const char *n = "x"; n; n = !strcmp(n, "x") ? "w" : !strcmp(n, "w") ? "b" : NULL)
		stub_find(sd, 1000, n)->mode = TDP_MODE_WORLD_READ;
	call = stub_caller(sd, 1001);
	assert_int_equal(check_outputs(&call, "y", "z"), 0);
}

/* Outputs q, p, s, p, q: the first node storing a name stored before is
 * node 3 (p), not node 4 (q) whose name sorts first. */
static void test_outputs_repeated_first(void **state)
{
	static const char *const outs[] = { "q", "p", "s", "p", "q" };
	struct stub_daemon *sd = *state;
	struct caller call = stub_caller(sd, 1000);
	struct graph gr;
	struct mp m;
	char id[8];

	mp_begin(&m);
	msgpack_pack_array(&m.pk, 5);
	for (unsigned i = 0; i < 5; i++) {
		snprintf(id, sizeof(id), "n%u", i);
		mp_node(&m, id, "relu", STRS("~1000/x"), outs[i], NULL);
	}
	assert_int_equal(parse(&gr, &call, &m, NULL), 0);
	assert_int_equal(graph_check_outputs(&gr), -1);
	assert_int_equal(call.err.code, TDP_INVALID_ARGUMENT);
	assert_string_equal(call.err.message, "node 3 'n3' (relu): two nodes store the same name");
	graph_free(&gr);
	mp_end(&m);
}

static void test_outputs_refused(void **state)
{
	struct stub_daemon *sd = *state;
	struct caller call = stub_caller(sd, 1000);

	assert_int_equal(check_outputs(&call, "y", "y"), -1);
	assert_int_equal(call.err.code, TDP_INVALID_ARGUMENT);
	assert_string_equal(call.err.message, "node 1 'r' (relu): two nodes store the same name");

	/* Not in another uid's namespace, nor over its tensor. */
	call = stub_caller(sd, 1000);
	assert_int_equal(check_outputs(&call, "~1001/y", NULL), -1);
	assert_int_equal(call.err.code, TDP_PERMISSION_DENIED);
	assert_non_null(strstr(call.err.message, "node 0 'a' (add): out: '~"));
	assert_non_null(strstr(call.err.message, "(uid 1001): only its owner or root may create names there"));
	stub_put(sd, 1001, "y", TDP_DTYPE_F32, 2, shape_x, TDP_MODE_WORLD_READ, NULL);
	call = stub_caller(sd, 1000);
	assert_int_equal(check_outputs(&call, NULL, "~1001/y"), -1);
	assert_int_equal(call.err.code, TDP_PERMISSION_DENIED);
	assert_non_null(strstr(call.err.message, "may not be changed by uid 1000"));
	/* Root may. */
	call = stub_caller(sd, 0);
	assert_int_equal(check_outputs(&call, "~1001/z", "~1001/y"), 0);
}

/* A chain of elementwise nodes runs as one fused kernel whose
 * intermediates get no memory. */
static void test_fusion(void **state)
{
	struct stub_daemon *sd = *state;
	struct caller call = stub_caller(sd, 1000);
	uint64_t unfused = 0;

	for (int fuse = 0; fuse <= 1; fuse++) {
		struct graph gr;
		struct mp m;

		mp_begin(&m);
		msgpack_pack_array(&m.pk, 4);
		mp_node(&m, "m", "mul", STRS("x", "x"), NULL, NULL);
		mp_node(&m, "a", "add", STRS("m", "x"), NULL, NULL);
		mp_node(&m, "r", "relu", STRS("a"), "y", NULL);
		mp_node(&m, "h", "matmul", STRS("r", "w"), NULL, NULL);
		assert_int_equal(parse(&gr, &call, &m, NULL), 0);
		gr.fuse = fuse;
		assert_int_equal(graph_check_outputs(&gr), 0);
		assert_int_equal(graph_execute(&gr), 0);
		if (!fuse) {
			unfused = gr.dispatches;
			for (unsigned i = 0; i < gr.n; i++) {
				assert_int_equal(gr.nodes[i].fused, 0);
				assert_false(gr.nodes[i].fused_internal);
				assert_non_null(gr.nodes[i].result);
			}
		} else {
			assert_int_equal(gr.nkernels, 1);
			/* m and a live only inside the kernel; r is stored and read by
			 * the matmul; the matmul runs on its own. */
			assert_int_equal(gr.nodes[0].fused, 1);
			assert_int_equal(gr.nodes[1].fused, 1);
			assert_int_equal(gr.nodes[2].fused, 1);
			assert_true(gr.nodes[0].fused_internal);
			assert_true(gr.nodes[1].fused_internal);
			assert_false(gr.nodes[2].fused_internal);
			assert_null(gr.nodes[0].result);
			assert_null(gr.nodes[1].result);
			assert_non_null(gr.nodes[2].result);
			assert_int_equal(gr.nodes[3].fused, 0);
			/* three elementwise dispatches became one */
			assert_int_equal(gr.dispatches, unfused - 2);
			/* results: r and h only, besides the three stored */
			assert_int_equal(stub_live(sd), 3 + 2);
		}
		graph_free(&gr);
		assert_int_equal(stub_live(sd), 3);
		mp_end(&m);
	}
}

/* What group_record saw: calls, and the members of the last. */
static unsigned group_calls, group_members;

/* A node group's record (graph_group_fn): each member's own, counted. */
static int group_record(struct op_ctx *lead, struct op_ctx *const *m, unsigned n, struct gpu_recorder *rec)
{
	group_calls++;
	group_members = n;
	assert_ptr_equal(lead, m[n - 1]);
	for (unsigned k = 0; k < n; k++)
		if (m[k]->def->record(m[k], rec) < 0)
			return -1;
	return 0;
}

/* Node groups (graph_group_add): recorded by one call at the last member;
 * refused where a node between the members reads one's result, or for
 * fusible ops; a part holding only some members records each by itself. */
static void test_group(void **state)
{
	struct stub_daemon *sd = *state;
	struct caller call = stub_caller(sd, 1000);
	static const unsigned both[2] = { 0, 1 }, around[2] = { 0, 3 }, fusible[2] = { 3, 4 };
	struct graph gr;
	struct mp m;

	mp_begin(&m);
	msgpack_pack_array(&m.pk, 5);
	mp_node(&m, "s", "softmax", STRS("x"), NULL, NULL);
	mp_node(&m, "t", "softmax", STRS("x"), NULL, NULL);
	mp_node(&m, "u", "mean", STRS("s"), NULL, NULL);
	mp_node(&m, "v", "softmax", STRS("t"), NULL, NULL);
	mp_node(&m, "w2", "relu", STRS("x"), NULL, NULL);
	assert_int_equal(parse(&gr, &call, &m, NULL), 0);
	/* u, between s and v, reads s; relu fuses. */
	assert_int_equal(graph_group_add(&gr, around, 2, group_record), -EINVAL);
	assert_int_equal(graph_group_add(&gr, fusible, 2, group_record), -EINVAL);
	assert_int_equal(gr.ngroups, 0);
	assert_int_equal(graph_group_add(&gr, both, 2, group_record), 0);
	assert_int_equal(gr.nodes[0].group, 1);
	assert_int_equal(gr.nodes[1].group, 1);
	assert_int_equal(gr.nodes[2].group, 0);
	group_calls = group_members = 0;
	assert_int_equal(graph_execute(&gr), 0);
	assert_int_equal(group_calls, 1);
	assert_int_equal(group_members, 2);
	assert_int_equal(gr.dispatches >= 5, 1);
	graph_free(&gr);
	assert_null(gr.groups);

	/* Split across two parts: each member by itself. */
	assert_int_equal(parse(&gr, &call, &m, NULL), 0);
	assert_int_equal(graph_group_add(&gr, both, 2, group_record), 0);
	group_calls = 0;
	assert_int_equal(graph_submit_part(&gr, 0, 1), 0);
	assert_int_equal(graph_wait(&gr), 0);
	assert_int_equal(graph_submit_part(&gr, 1, gr.n), 0);
	assert_int_equal(graph_wait(&gr), 0);
	assert_int_equal(group_calls, 0);
	graph_free(&gr);
	assert_int_equal(stub_live(sd), 3);
	mp_end(&m);
}

/* graph_free gives back every block, whether the graph ran or failed half
 * way through parsing. */
static void test_graph_free(void **state)
{
	struct stub_daemon *sd = *state;
	struct caller call = stub_caller(sd, 1000);
	uint64_t used = sd->gpu.mem.used;
	struct graph gr;
	struct mp m;

	mp_begin(&m);
	msgpack_pack_array(&m.pk, 4);
	mp_node(&m, "h", "matmul", STRS("x", "w"), "y", NULL);
	mp_node(&m, "a", "add", STRS("h", "b"), NULL, NULL);
	mp_node(&m, "s", "softmax", STRS("a"), NULL, NULL);
	mp_node(&m, "l", "mean", STRS("s"), NULL, NULL);
	assert_int_equal(parse(&gr, &call, &m, NULL), 0);
	assert_int_equal(graph_execute(&gr), 0);
	assert_true(stub_live(sd) >= 3 + 4);
	assert_true(sd->gpu.mem.used >= used + 3 * 80 + 4);
	graph_free(&gr); /* "y" not committed: freed too */
	assert_int_equal(stub_live(sd), 3);
	assert_int_equal(sd->gpu.mem.used, used);
	assert_null(stub_find(sd, 1000, "y"));
	mp_end(&m);

	mp_begin(&m);
	msgpack_pack_array(&m.pk, 3);
	mp_node(&m, "h", "matmul", STRS("x", "w"), NULL, NULL);
	mp_node(&m, "a", "add", STRS("h", "b"), NULL, NULL);
	mp_node(&m, "bad", "matmul", STRS("a", "a"), NULL, NULL);
	assert_int_equal(parse(&gr, &call, &m, NULL), -1);
	graph_free(&gr);
	assert_int_equal(stub_live(sd), 3);
	assert_int_equal(sd->gpu.mem.used, used);
	mp_end(&m);
}

/* A view (reshape) shares its input's memory: reading it back gives the
 * stored bytes, the one value the stub can give. */
static void test_view(void **state)
{
	struct stub_daemon *sd = *state;
	struct caller call = stub_caller(sd, 1000);
	static const uint64_t s6[1] = { 6 }, s23[2] = { 2, 3 };
	float data[6] = { 1, 2, 3, 4, 5, 6 }, back[6] = { 0 };
	struct graph gr;
	struct mp m;

	stub_put(sd, 1000, "v", TDP_DTYPE_F32, 1, s6, TDP_MODE_PRIVATE, data);
	mp_begin(&m);
	msgpack_pack_array(&m.pk, 1);
	mp_node(&m, "r", "reshape", STRS("v"), NULL, STRS("shape=2"));
	assert_int_equal(parse(&gr, &call, &m, NULL), -1);
	assert_int_equal(call.err.code, TDP_SHAPE_MISMATCH);
	graph_free(&gr);
	mp_end(&m);

	mp_begin(&m);
	msgpack_pack_array(&m.pk, 1);
	msgpack_pack_map(&m.pk, 4);
	mp_str(&m, "id");
	mp_str(&m, "r");
	mp_str(&m, "op");
	mp_str(&m, "reshape");
	mp_str(&m, "inputs");
	mp_strs(&m, STRS("v"));
	mp_str(&m, "attrs");
	msgpack_pack_map(&m.pk, 1);
	mp_str(&m, "shape");
	msgpack_pack_array(&m.pk, 2);
	msgpack_pack_int(&m.pk, 2);
	msgpack_pack_int(&m.pk, -1);
	call = stub_caller(sd, 1000);
	assert_int_equal(parse(&gr, &call, &m, NULL), 0);
	assert_shape(&gr.nodes[0].ctx.out, TDP_DTYPE_F32, 2, s23);
	assert_int_equal(graph_execute(&gr), 0);
	assert_true(gr.nodes[0].aliased);
	assert_ptr_equal(gr.nodes[0].result, &stub_find(sd, 1000, "v")->alloc);
	assert_int_equal(graph_read_result(&gr, 0, back), 0);
	assert_memory_equal(back, data, sizeof(data));
	graph_free(&gr);
	mp_end(&m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_parse_infers, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shape_error_names_node, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dtype_error, setup, teardown),
		cmocka_unit_test_setup_teardown(test_op_run_error, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unknown_op, setup, teardown),
		cmocka_unit_test_setup_teardown(test_later_node, setup, teardown),
		cmocka_unit_test_setup_teardown(test_missing_input, setup, teardown),
		cmocka_unit_test_setup_teardown(test_access, setup, teardown),
		cmocka_unit_test_setup_teardown(test_commit, setup, teardown),
		cmocka_unit_test_setup_teardown(test_commit_rechecks, setup, teardown),
		cmocka_unit_test_setup_teardown(test_outputs_max_tensors, setup, teardown),
		cmocka_unit_test_setup_teardown(test_outputs_quota, setup, teardown),
		cmocka_unit_test_setup_teardown(test_outputs_repeated_first, setup, teardown),
		cmocka_unit_test_setup_teardown(test_outputs_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fusion, setup, teardown),
		cmocka_unit_test_setup_teardown(test_graph_free, setup, teardown),
		cmocka_unit_test_setup_teardown(test_view, setup, teardown),
		cmocka_unit_test_setup_teardown(test_group, setup, teardown),
	};

	return cmocka_run_group_tests_name("engine", tests, NULL, NULL);
}

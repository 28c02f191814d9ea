/* Elementwise ops with NumPy broadcasting: binary arithmetic, comparisons,
 * where, unary functions. Shaders: binary.comp, compare.comp, where.comp,
 * unary.comp (all through elementwise.glsl). */
#include <math.h>
#include <string.h>

#include "dtype.h"
#include "op_codes.h"
#include "ops/elementwise.h"
#include "ops/fused.h"
#include "ops/grad_rules.h"
#include "ops/op.h"
#include "status.h"

/* A number in the push constants: `f` for floating dtypes, `i` for integer
 * ones (the GLSL block declares alpha and beta with the dtype's type). */
union ew_num {
	float f;
	int32_t i;
};

/* Mirrors EwPush in shaders/elementwise.glsl. */
struct ew_push {
	uint32_t n, rank, op, flags;
	uint32_t shape[8];
	uint32_t astride[8];
	uint32_t bstride[8];
	union ew_num alpha, beta;
};
_Static_assert(sizeof(struct ew_push) == 120, "ew_push must mirror EwPush");

/* NumPy broadcasting of `n` shapes into `out`. */
static int broadcast(struct op_ctx *ctx, const struct op_tensor *const *t, unsigned n,
		     struct op_tensor *out)
{
	unsigned rank = 0;

	for (unsigned i = 0; i < n; i++)
		if (t[i]->rank > rank)
			rank = t[i]->rank;
	out->rank = rank;
	for (unsigned d = 0; d < rank; d++) {
		uint64_t dim = 1;

		for (unsigned i = 0; i < n; i++) {
			int k = (int)d - (int)(rank - t[i]->rank);
			uint64_t s = k < 0 ? 1 : t[i]->shape[k];

			if (s == dim || s == 1)
				continue;
			if (dim != 1)
				return op_fail(ctx, TDP_SHAPE_MISMATCH,
					       "operand %u: dimension %d is %llu where another operand has %llu",
					       i, k, (unsigned long long)s, (unsigned long long)dim);
			dim = s;
		}
		out->shape[d] = dim;
	}
	return 0;
}

/* Strides of `t` in the index space of `out` (0 where broadcast). */
static void strides_in(const struct op_tensor *t, const struct op_tensor *out, uint64_t *st)
{
	uint64_t s = 1;

	for (int d = (int)out->rank - 1; d >= 0; d--) {
		int k = d - (int)(out->rank - t->rank);

		if (k < 0 || t->shape[k] == 1) {
			st[d] = 0;
		} else {
			st[d] = s;
			s *= t->shape[k];
		}
	}
}

/* Fill the push constants for `out` = f(a, b): coalesce dimensions that are
 * contiguous for every operand, so the shader's index loop is short. */
static int ew_setup(struct op_ctx *ctx, const struct op_tensor *a, const struct op_tensor *b,
		    struct ew_push *pc)
{
	const struct op_tensor *out = &ctx->out;
	uint64_t sa[TDP_MAX_RANK] = { 0 }, sb[TDP_MAX_RANK] = { 0 }, shape[TDP_MAX_RANK];
	unsigned rank = 0;

	if (out->count > UINT32_MAX)
		return op_fail(ctx, TDP_RESOURCE_EXHAUSTED, "more than 2^32 elements");
	memset(pc, 0, sizeof(*pc));
	pc->n = (uint32_t)out->count;
	strides_in(a, out, sa);
	strides_in(b ? b : a, out, sb);
	for (unsigned d = 0; d < out->rank; d++) {
		if (out->shape[d] == 1)
			continue;
		if (rank > 0 && sa[rank - 1] == sa[d] * out->shape[d] &&
		    sb[rank - 1] == sb[d] * out->shape[d]) {
			shape[rank - 1] *= out->shape[d];
			sa[rank - 1] = sa[d];
			sb[rank - 1] = sb[d];
			continue;
		}
		shape[rank] = out->shape[d];
		sa[rank] = sa[d];
		sb[rank] = sb[d];
		rank++;
	}
	pc->rank = rank;
	if (rank <= 1 && (rank == 0 || (sa[0] == 1 && sb[0] == 1)) &&
	    a->count == out->count && (!b || b->count == out->count))
		pc->flags |= EW_CONTIGUOUS;
	for (unsigned d = 0; d < rank; d++) {
		if (shape[d] > UINT32_MAX)
			return op_fail(ctx, TDP_RESOURCE_EXHAUSTED, "a dimension over 2^32");
		pc->shape[d] = (uint32_t)shape[d];
		pc->astride[d] = (uint32_t)sa[d];
		pc->bstride[d] = (uint32_t)sb[d];
	}
	return 0;
}

/* Number attr `name` of an integer op on `dtype` (i32, u8) as the exact
 * integer the shader computes with: a fractional, non-finite or
 * out-of-range value is INVALID_ARGUMENT (NumPy's same-kind casting refuses
 * a float for an integer array, and NumPy 2 an out-of-range Python int). */
static int int_attr(struct op_ctx *ctx, const char *name, int dtype, int32_t *ret)
{
	double v = op_attr(ctx, name)->f;
	double lo = dtype == TDP_DTYPE_U8 ? 0.0 : -2147483648.0;
	double hi = dtype == TDP_DTYPE_U8 ? 255.0 : 2147483647.0;

	if (!isfinite(v) || v != trunc(v))
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "attr '%s' (%g) must be an integer for a %s tensor",
			       name, v, tdp_dtype_name(dtype));
	if (v < lo || v > hi)
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "attr '%s' (%.0f) is outside the range of %s (%.0f to %.0f)",
			       name, v, tdp_dtype_name(dtype), lo, hi);
	*ret = (int32_t)v;
	return 0;
}

static const struct op_attr_spec binary_attrs[] = {
	{ "scalar", ATTR_FLOAT, false },
	{ "reverse", ATTR_BOOL, false },
	{ NULL, 0, false },
};

/* Two tensors, or one tensor and attrs.scalar (with reverse: scalar OP x). */
static int binary_infer_dtype(struct op_ctx *ctx, int out_dtype)
{
	const struct op_attr_value *scalar = op_attr(ctx, "scalar");
	const struct op_tensor *ops[2] = { &ctx->in[0], &ctx->in[1] };

	if (ctx->ninputs == 2 && scalar->set)
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "give two inputs or one input and 'scalar', not both");
	if (ctx->ninputs == 1 && !scalar->set)
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "needs a second input or the 'scalar' attr");
	if (ctx->ninputs == 2 && ctx->in[0].dtype != ctx->in[1].dtype)
		return op_fail(ctx, TDP_DTYPE_MISMATCH, "inputs are %s and %s",
			       tdp_dtype_name(ctx->in[0].dtype), tdp_dtype_name(ctx->in[1].dtype));
	if (scalar->set && !op_dtype_is_float(ctx->in[0].dtype)) {
		int32_t v;

		if (int_attr(ctx, "scalar", ctx->in[0].dtype, &v) < 0)
			return -1;
	}
	if (broadcast(ctx, ops, ctx->ninputs, &ctx->out) < 0)
		return -1;
	ctx->out.dtype = out_dtype < 0 ? ctx->in[0].dtype : out_dtype;
	return 0;
}

static int binary_infer(struct op_ctx *ctx)
{
	return binary_infer_dtype(ctx, -1);
}

/* gelu_grad, gelu_tanh_grad: floats only. */
static int float_binary_infer(struct op_ctx *ctx)
{
	if (!op_dtype_is_float(ctx->in[0].dtype))
		return op_fail(ctx, TDP_DTYPE_MISMATCH, "needs f32, f16 or bf16, not %s",
			       tdp_dtype_name(ctx->in[0].dtype));
	return binary_infer_dtype(ctx, -1);
}

static int compare_infer(struct op_ctx *ctx)
{
	return binary_infer_dtype(ctx, TDP_DTYPE_U8);
}

static int binary_record_family(struct op_ctx *ctx, struct gpu_recorder *rec, const char *family)
{
	const struct op_tensor *a = &ctx->in[0], *b = ctx->ninputs == 2 ? &ctx->in[1] : NULL;
	const struct op_attr_value *scalar = op_attr(ctx, "scalar");
	const struct gpu_pipeline *p;
	struct gpu_binding bind[3];
	struct ew_push pc;

	if (ew_setup(ctx, a, b, &pc) < 0)
		return -1;
	pc.op = ctx->def->code;
	if (!b) {
		pc.flags |= op_attr(ctx, "reverse")->i ? EW_A_SCALAR : EW_B_SCALAR;
		if (op_dtype_is_float(a->dtype))
			pc.alpha.f = (float)scalar->f;
		else if (int_attr(ctx, "scalar", a->dtype, &pc.alpha.i) < 0)
			return -1;
		if (op_attr(ctx, "reverse")->i)
			memcpy(pc.bstride, pc.astride, sizeof(pc.bstride));
	}
	/* Same-layout f32/f16 tensors (or one and the scalar) in whole vec4s:
	 * binary_vec4.comp. */
	if (!strcmp(family, "binary") && (pc.flags & EW_CONTIGUOUS) && pc.n % 4 == 0 &&
	    (a->dtype == TDP_DTYPE_F32 || a->dtype == TDP_DTYPE_F16)) {
		if (op_pipeline(ctx, "binary_vec4", tdp_dtype_name(a->dtype), &p) < 0 ||
		    op_bind(ctx, a, false, &bind[0]) < 0 || op_bind(ctx, b ? b : a, false, &bind[1]) < 0 ||
		    op_bind(ctx, &ctx->out, true, &bind[2]) < 0)
			return -1;
		return op_dispatch(ctx, rec, p, bind, 3, &pc, sizeof(pc), pc.n / 4, 256);
	}
	if (op_pipeline(ctx, family, tdp_dtype_name(a->dtype), &p) < 0 ||
	    op_bind(ctx, a, false, &bind[0]) < 0 || op_bind(ctx, b ? b : a, false, &bind[1]) < 0 ||
	    op_bind(ctx, &ctx->out, true, &bind[2]) < 0)
		return -1;
	/* With `reverse`, the tensor is the second operand of the shader. */
	if (!b && op_attr(ctx, "reverse")->i)
		bind[1] = bind[0];
	return op_dispatch(ctx, rec, p, bind, 3, &pc, sizeof(pc), pc.n, 256);
}

static int binary_record(struct op_ctx *ctx, struct gpu_recorder *rec)
{
	return binary_record_family(ctx, rec, "binary");
}

static int compare_record(struct op_ctx *ctx, struct gpu_recorder *rec)
{
	return binary_record_family(ctx, rec, "compare");
}

static int where_infer(struct op_ctx *ctx)
{
	const struct op_tensor *ops[3] = { &ctx->in[0], &ctx->in[1], &ctx->in[2] };

	if (ctx->in[0].dtype != TDP_DTYPE_U8)
		return op_fail(ctx, TDP_DTYPE_MISMATCH, "input 0 (the condition) must be u8, not %s",
			       tdp_dtype_name(ctx->in[0].dtype));
	if (ctx->in[1].dtype != ctx->in[2].dtype)
		return op_fail(ctx, TDP_DTYPE_MISMATCH, "inputs 1 and 2 are %s and %s",
			       tdp_dtype_name(ctx->in[1].dtype), tdp_dtype_name(ctx->in[2].dtype));
	if (broadcast(ctx, ops, 3, &ctx->out) < 0)
		return -1;
	ctx->out.dtype = ctx->in[1].dtype;
	return 0;
}

/* Record a broadcasting copy of `src` into `dst` (shaped like ctx->out). */
static int expand(struct op_ctx *ctx, struct gpu_recorder *rec, const struct op_tensor *src,
		  const struct op_tensor *dst)
{
	const struct gpu_pipeline *p;
	struct gpu_binding bind[2];
	struct ew_push pc;

	if (ew_setup(ctx, src, NULL, &pc) < 0)
		return -1;
	pc.op = UN_COPY;
	if (op_pipeline(ctx, "unary", tdp_dtype_name(src->dtype), &p) < 0 ||
	    op_bind(ctx, src, false, &bind[0]) < 0 || op_bind(ctx, dst, true, &bind[1]) < 0)
		return -1;
	return op_dispatch(ctx, rec, p, bind, 2, &pc, sizeof(pc), pc.n, 256);
}

static int where_record(struct op_ctx *ctx, struct gpu_recorder *rec)
{
	struct op_tensor cond = ctx->in[0];
	const struct gpu_pipeline *p;
	struct gpu_binding bind[4];
	struct ew_push pc;

	/* The shader reads the condition at the output index: expand it first
	 * when it is broadcast. */
	if (cond.count != ctx->out.count) {
		struct op_tensor full = ctx->out;

		full.dtype = TDP_DTYPE_U8;
		full.bytes = full.count;
		if (op_scratch_alloc(ctx, full.bytes, &full.alloc) < 0 || expand(ctx, rec, &cond, &full) < 0)
			return -1;
		cond = full;
	}
	if (ew_setup(ctx, &ctx->in[1], &ctx->in[2], &pc) < 0)
		return -1;
	if (op_pipeline(ctx, "where", tdp_dtype_name(ctx->out.dtype), &p) < 0 ||
	    op_bind(ctx, &cond, false, &bind[0]) < 0 || op_bind(ctx, &ctx->in[1], false, &bind[1]) < 0 ||
	    op_bind(ctx, &ctx->in[2], false, &bind[2]) < 0 || op_bind(ctx, &ctx->out, true, &bind[3]) < 0)
		return -1;
	return op_dispatch(ctx, rec, p, bind, 4, &pc, sizeof(pc), pc.n, 256);
}

static const struct op_attr_spec gelu_attrs[] = {
	{ "approximate", ATTR_STR, false },
	{ NULL, 0, false },
};

static const struct op_attr_spec clamp_attrs[] = {
	{ "min", ATTR_FLOAT, false },
	{ "max", ATTR_FLOAT, false },
	{ NULL, 0, false },
};

/* Unary ops that integers support too; the rest need a floating dtype. */
static bool unary_takes_ints(uint32_t code)
{
	return code == UN_NEG || code == UN_ABS || code == UN_RELU || code == UN_CLAMP || code == UN_COPY;
}

static int unary_infer(struct op_ctx *ctx)
{
	const struct op_attr_value *approx = op_attr(ctx, "approximate");

	if (!op_dtype_is_float(ctx->in[0].dtype) && !unary_takes_ints(ctx->def->code))
		return op_fail(ctx, TDP_DTYPE_MISMATCH, "needs f32, f16 or bf16, not %s",
			       tdp_dtype_name(ctx->in[0].dtype));
	if (ctx->def->code == UN_CLAMP && !op_dtype_is_float(ctx->in[0].dtype)) {
		int32_t v;

		if ((op_attr(ctx, "min")->set && int_attr(ctx, "min", ctx->in[0].dtype, &v) < 0) ||
		    (op_attr(ctx, "max")->set && int_attr(ctx, "max", ctx->in[0].dtype, &v) < 0))
			return -1;
	}
	if (approx && approx->set && strcmp(approx->s, "none") && strcmp(approx->s, "tanh"))
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "approximate must be \"none\" or \"tanh\"");
	ctx->out.dtype = ctx->in[0].dtype;
	ctx->out.rank = ctx->in[0].rank;
	memcpy(ctx->out.shape, ctx->in[0].shape, sizeof(ctx->out.shape));
	return 0;
}

static int unary_record(struct op_ctx *ctx, struct gpu_recorder *rec)
{
	const struct op_attr_value *approx = op_attr(ctx, "approximate");
	const struct gpu_pipeline *p;
	struct gpu_binding bind[2];
	struct ew_push pc;

	if (ew_setup(ctx, &ctx->in[0], NULL, &pc) < 0)
		return -1;
	pc.op = ctx->def->code;
	if (pc.op == UN_GELU && approx->set && !strcmp(approx->s, "tanh"))
		pc.op = UN_GELU_TANH;
	if (pc.op == UN_CLAMP) {
		const struct op_attr_value *lo = op_attr(ctx, "min"), *hi = op_attr(ctx, "max");

		if (op_dtype_is_float(ctx->in[0].dtype)) {
			pc.alpha.f = lo->set ? (float)lo->f : -__builtin_inff();
			pc.beta.f = hi->set ? (float)hi->f : __builtin_inff();
		} else {
			/* Integer bounds, exact (infer checked them); absent: no bound. */
			pc.alpha.i = INT32_MIN;
			pc.beta.i = INT32_MAX;
			if ((lo->set && int_attr(ctx, "min", ctx->in[0].dtype, &pc.alpha.i) < 0) ||
			    (hi->set && int_attr(ctx, "max", ctx->in[0].dtype, &pc.beta.i) < 0))
				return -1;
		}
	}
	if (op_pipeline(ctx, "unary", tdp_dtype_name(ctx->in[0].dtype), &p) < 0 ||
	    op_bind(ctx, &ctx->in[0], false, &bind[0]) < 0 || op_bind(ctx, &ctx->out, true, &bind[1]) < 0)
		return -1;
	return op_dispatch(ctx, rec, p, bind, 2, &pc, sizeof(pc), pc.n, 256);
}

/* The program form of an elementwise node, with exactly the constants its
 * own kernel would use: the row's fusion description plus its attributes. */
int ew_describe(const struct op_ctx *ctx, struct ew_desc *ret)
{
	const struct op_def *def = ctx->def;
	struct ew_desc d = { .opcode = def->fusion.opcode, .operand = { 0, 0, 0 } };

	switch (def->fusion.kind) {
	case FUSE_BINARY:
	case FUSE_COMPARE: {
		const struct op_attr_value *scalar = op_attr(ctx, "scalar");

		d.dtype = ctx->in[0].dtype;
		d.u8_out = def->fusion.kind == FUSE_COMPARE;
		d.operand[1] = 1;
		if (ctx->ninputs == 1) {
			int k = op_attr(ctx, "reverse")->i ? 0 : 1;

			d.operand[k] = -1;
			d.operand[1 - k] = 0;
			d.konst[k] = (float)scalar->f;
		}
		break;
	}
	case FUSE_WHERE:
		if (ctx->in[0].dtype != TDP_DTYPE_U8)
			return -1;
		d.dtype = ctx->in[1].dtype;
		d.operand[1] = 1;
		d.operand[2] = 2;
		break;
	case FUSE_UNARY: {
		const struct op_attr_value *approx = op_attr(ctx, "approximate");

		d.dtype = ctx->in[0].dtype;
		if (d.opcode == UN_GELU && approx->set && !strcmp(approx->s, "tanh"))
			d.opcode = UN_GELU_TANH;
		if (d.opcode == UN_CLAMP) {
			const struct op_attr_value *lo = op_attr(ctx, "min"), *hi = op_attr(ctx, "max");

			d.operand[1] = d.operand[2] = -1;
			d.konst[1] = lo->set ? (float)lo->f : -__builtin_inff();
			d.konst[2] = hi->set ? (float)hi->f : __builtin_inff();
		}
		break;
	}
	default:
		return -1;
	}
	if (!op_dtype_is_float(d.dtype))
		return -1;
	*ret = d;
	return 0;
}

/* A row names its op code (the shader's), its backward rule and its fused
 * program opcode (the same code; binary and comparison codes offset by
 * FU_BINARY). */
#define BINARY(n, c, bw) \
	{ .name = n, .min_inputs = 1, .max_inputs = 2, .attrs = binary_attrs, .code = c, \
	  .infer = binary_infer, .record = binary_record, .backward = bw, \
	  .fusion = { FUSE_BINARY, FU_BINARY + (c) } }
#define COMPARE(n, c) \
	{ .name = n, .min_inputs = 1, .max_inputs = 2, .attrs = binary_attrs, .code = c, \
	  .infer = compare_infer, .record = compare_record, .backward = grad_none, \
	  .fusion = { FUSE_COMPARE, FU_BINARY + (c) } }
/* Gradient helpers of float ops: no backward of their own. */
#define FLOAT_BINARY(n, c) \
	{ .name = n, .min_inputs = 1, .max_inputs = 2, .attrs = binary_attrs, .code = c, \
	  .infer = float_binary_infer, .record = binary_record, .fusion = { FUSE_BINARY, FU_BINARY + (c) } }
#define UNARY(n, c, at, bw) \
	{ .name = n, .min_inputs = 1, .max_inputs = 1, .attrs = at, .code = c, .infer = unary_infer, \
	  .record = unary_record, .backward = bw, .fusion = { FUSE_UNARY, c } }

const struct op_def op_defs_elementwise[] = {
	BINARY("add", BIN_ADD, grad_add),
	BINARY("sub", BIN_SUB, grad_sub),
	BINARY("mul", BIN_MUL, grad_mul),
	BINARY("div", BIN_DIV, grad_div),
	BINARY("pow", BIN_POW, grad_pow),
	BINARY("maximum", BIN_MAXIMUM, grad_maximum),
	BINARY("minimum", BIN_MINIMUM, grad_minimum),
	BINARY("relu_grad", BIN_RELU_GRAD, grad_relu_grad),
	FLOAT_BINARY("gelu_grad", BIN_GELU_GRAD),
	FLOAT_BINARY("gelu_tanh_grad", BIN_GELU_TANH_GRAD),
	COMPARE("eq", CMP_EQ),
	COMPARE("ne", CMP_NE),
	COMPARE("lt", CMP_LT),
	COMPARE("le", CMP_LE),
	COMPARE("gt", CMP_GT),
	COMPARE("ge", CMP_GE),
	{ .name = "where", .min_inputs = 3, .max_inputs = 3, .infer = where_infer, .record = where_record,
	  .backward = grad_where, .fusion = { FUSE_WHERE, FU_WHERE } },
	UNARY("neg", UN_NEG, NULL, grad_neg),
	UNARY("abs", UN_ABS, NULL, grad_abs),
	UNARY("exp", UN_EXP, NULL, grad_exp),
	UNARY("log", UN_LOG, NULL, grad_log),
	UNARY("sqrt", UN_SQRT, NULL, grad_sqrt),
	UNARY("rsqrt", UN_RSQRT, NULL, grad_rsqrt),
	UNARY("sin", UN_SIN, NULL, grad_sin),
	UNARY("cos", UN_COS, NULL, grad_cos),
	UNARY("tanh", UN_TANH, NULL, grad_tanh),
	UNARY("sigmoid", UN_SIGMOID, NULL, grad_sigmoid),
	UNARY("relu", UN_RELU, NULL, grad_relu),
	UNARY("gelu", UN_GELU, gelu_attrs, grad_gelu),
	UNARY("erf", UN_ERF, NULL, grad_erf),
	UNARY("silu", UN_SILU, NULL, grad_silu),
	UNARY("softplus", UN_SOFTPLUS, NULL, grad_softplus),
	UNARY("clamp", UN_CLAMP, clamp_attrs, grad_clamp),
	UNARY("copy", UN_COPY, NULL, grad_copy),
	{ .name = NULL },
};

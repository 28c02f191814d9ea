/* The op registry's contract: what an op declares (name, arity, attributes,
 * shape/dtype inference, how to record it on the GPU, its backward rule, how
 * a fused kernel computes it) and the context it is handed. Adding an op
 * means one `struct op_def` entry in its family's table, one shader (or a
 * variant of one), its backward rule, one CPU reference and one test
 * (docs/architecture.md, "Adding a unary op"). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "gpu/recorder.h"
#include "ops/op_priv.h"
#include "wire_limits.h"

#define OP_MAX_INPUTS 8
#define OP_MAX_ATTRS 12
#define OP_MAX_INTS 8
/* Loop iterations one shader invocation may run, summed over all its loops:
 * Mesa 22.3's lavapipe ends an invocation's loops after 65535 iterations in
 * all (silently: the result is wrong). An op whose kernel would loop longer
 * on some input takes another path or is RESOURCE_EXHAUSTED, on every
 * device alike. */
#define OP_LOOP_BUDGET 60000u

struct gpu_device;

/* A tensor as an op sees it: type, shape, and where its bytes are. */
struct op_tensor {
	int dtype;                  /* enum tdp_dtype */
	unsigned rank;
	uint64_t shape[TDP_MAX_RANK];
	uint64_t count;             /* elements */
	uint64_t bytes;
	struct gpu_alloc *alloc;    /* NULL until the graph allocates an output */
};

enum op_attr_type {
	ATTR_FLOAT,                 /* any number */
	ATTR_INT,                   /* an integer (negative allowed) */
	ATTR_BOOL,
	ATTR_STR,
	ATTR_INTS,                  /* an integer or an array of up to OP_MAX_INTS */
};

struct op_attr_spec {
	const char *name;
	enum op_attr_type type;
	bool required;
};

struct op_attr_value {
	bool set;
	double f;                   /* ATTR_FLOAT, and ATTR_INT as a double */
	int64_t i;                  /* ATTR_INT, ATTR_BOOL */
	char s[32];                 /* ATTR_STR */
	int64_t ints[OP_MAX_INTS];  /* ATTR_INTS */
	unsigned nints;
};

/* A named attribute value as code builds one (graph_emit in the engine,
 * ag_emit in backward rules): the op's spec decides which field is read: f
 * for numbers, b for booleans, s for strings, ints for lists; an integer
 * attr takes ints[0] when nints is 1 (exact past 2^53: seeds), else f. */
struct graph_attr {
	const char *name;
	double f;
	const int64_t *ints;
	unsigned nints;
	const char *s;
	bool b;
};

struct op_ctx;
struct autograd;

/* A backward rule (ops/grad.h): append the nodes computing the gradient of
 * each of `node`'s inputs from `gout`, the gradient of its result; write
 * their refs to ret_grads[k], or leave AG_NONE where an input gets none.
 * Returns 0, or -1 after a failure was recorded (by ag_emit or ag_fail). */
typedef int (*op_backward_fn)(struct autograd *ag, unsigned node, int gout, int *ret_grads);

/* How a fused elementwise kernel (ops/fused.h, shaders/fused.comp) computes
 * an op. FUSE_NONE (0, what a row without one gets): the op always runs as
 * its own kernel. */
enum op_fuse_kind {
	FUSE_NONE = 0,
	FUSE_UNARY,                 /* one input; attrs in the program's constants */
	FUSE_BINARY,                /* a OP b, or one input and attrs.scalar (reverse) */
	FUSE_COMPARE,               /* as FUSE_BINARY, the result u8 0/1 */
	FUSE_WHERE,                 /* cond (u8) ? a : b */
};

struct op_fusion {
	enum op_fuse_kind kind;
	uint32_t opcode;            /* the program opcode (op_codes.h): UN_*,
				     * FU_BINARY + BIN_* or CMP_*, FU_WHERE */
};

/* The fusion of a row that never fuses. */
#define OP_NO_FUSION { FUSE_NONE, 0 }

struct op_def {
	const char *name;
	unsigned min_inputs;
	unsigned max_inputs;
	const struct op_attr_spec *attrs;   /* terminated by a NULL name; NULL for none */
	uint32_t code;                      /* op-specific constant, e.g. BIN_ADD */
	/* Check inputs and attributes; fill ctx->out's dtype and shape (the
	 * graph computes count and bytes). Returns 0 or op_fail(). */
	int (*infer)(struct op_ctx *ctx);
	/* Record the GPU work that computes ctx->out from ctx->in. Returns 0 or
	 * op_fail(). */
	int (*record)(struct op_ctx *ctx, struct gpu_recorder *rec);
	/* The gradient of the inputs (ops/grad_*.c, declared in
	 * ops/grad_rules.h). NULL: not differentiable (a training graph that
	 * needs a gradient through it is refused); grad_none: differentiable
	 * with no gradient for any input (comparisons). */
	op_backward_fn backward;
	struct op_fusion fusion;
	/* Autocast products (matmul, bmm): whether record would cast inputs 0
	 * and 1 whole, each into a copy of op_cast_bytes (*ret_to_16: to the
	 * 16-bit dtype for the tensor cores, else rounded and widened back to
	 * f32), which a training step's plan may then share between the
	 * products that read the same operand (engine/graph_casts.c). NULL:
	 * never. */
	bool (*casts_whole)(struct op_ctx *ctx, bool *ret_to_16);
};

/* An operand's autocast copy shared by the products of a step that read
 * it (engine/graph_casts.c): the first to record writes it, the others
 * bind it. */
struct op_cast {
	struct gpu_alloc alloc;        /* its place in the step's arena */
	uint64_t bytes;
	uint32_t device;
	bool to_16;
	bool recorded;                 /* written by an earlier reader's recording */
	unsigned first, last;          /* its first and last reader (node indices) */
};

/* The bytes of input `t`'s autocast copy (op_def.casts_whole). */
uint64_t op_cast_bytes(const struct op_tensor *t, bool to_16);

/* How many outgrown blocks a scratch pool keeps until its graph ends. */
#define OP_SCRATCH_OUTGROWN 8

/* Scratch memory shared by the nodes of a graph in turn (a training
 * step's: engine/graph_plan.c): each node's scratch starts at its start
 * (`used` set to 0 before the node records); the recorder orders a node's
 * use after the last one's. Its memory is taken at the first request, of
 * `hint` bytes or the request's; a request past its end takes a block of
 * twice the size (or the most a node asked for), and the outgrown one,
 * which nodes recorded before still read, is kept until the graph ends. */
struct op_scratch_pool {
	struct gpu_device *g;         /* the device of `mem` */
	struct gpu_alloc mem;
	uint64_t used;                /* taken by the node recording now */
	uint64_t hint;                /* the size to take: the most a node took before */
	uint64_t want;                /* the most one node asked for */
	struct gpu_alloc outgrown[OP_SCRATCH_OUTGROWN];
	unsigned noutgrown;
};

/* Scratch memory an op asked for while recording; freed when the request
 * ends (a slice of `pool`, when borrowed, is not freed). */
struct op_scratch {
	struct gpu_alloc allocs[4];
	bool borrowed[4];
	unsigned n;
	struct op_scratch_pool *pool; /* NULL: every request gets memory of its own */
};

struct op_ctx {
	const struct op_def *def;
	struct gpu_device *g;
	unsigned ninputs;
	struct op_tensor in[OP_MAX_INPUTS];
	struct op_attr_value attr[OP_MAX_ATTRS];    /* in the order of def->attrs */
	struct op_tensor out;
	/* Set by infer when the result is input 0's bytes unchanged (reshape):
	 * unless it is stored, the graph then lets it share input 0's memory and
	 * records nothing. */
	bool view;
	/* The graph's autocast dtype (struct graph, set before the node
	 * records): TDP_DTYPE_F32 (0) off; TDP_DTYPE_BF16: f32 products
	 * (matmul, bmm) multiply their operands rounded to bf16, accumulating
	 * in f32 (ops/matmul.c). Only products read it. */
	int autocast;
	/* Shared autocast copies of inputs 0 and 1 (struct op_cast), set by a
	 * training step's plan before the node records; NULL: its own. */
	struct op_cast *cast[2];
	struct op_scratch scratch;
	union op_priv priv;                         /* infer's notes for record */
	struct td_error err;                        /* set by op_fail */
};

/* Record an error in ctx->err (td_fail): `code` is a tdp_status; the graph
 * adds the node and op names. Returns -1. */
__attribute__((format(printf, 3, 4)))
int op_fail(struct op_ctx *ctx, int code, const char *fmt, ...);

/* The value of attribute `name` (which the op's spec must declare). */
const struct op_attr_value *op_attr(const struct op_ctx *ctx, const char *name);

/* Device memory of `bytes` for the op's own use during this request. */
int op_scratch_alloc(struct op_ctx *ctx, uint64_t bytes, struct gpu_alloc **ret);

/* `t`'s shape as "[2,3]" into `buf` (cut to fit `size`), for messages. */
void op_shape_text(const struct op_tensor *t, char *buf, size_t size);

/* Fill count and bytes from dtype and shape; -EOVERFLOW past 64 bits. */
int op_tensor_sizes(struct op_tensor *t);

/* Normalise axis `axis` (negative counts from the end) for rank `rank`.
 * Returns the axis or op_fail(INVALID_ARGUMENT). */
int op_axis(struct op_ctx *ctx, int64_t axis, unsigned rank, const char *what);

/* Whether dtype is f32, f16 or bf16. */
bool op_dtype_is_float(int dtype);

/* Find an op by name; NULL when none. */
const struct op_def *op_find(const char *name, size_t len);

/* Every op, for listing: *ret_count entries. */
const struct op_def *const *op_all(size_t *ret_count);

/* The op families; each table ends with an entry whose name is NULL. */
extern const struct op_def op_defs_elementwise[];
extern const struct op_def op_defs_layout[], op_defs_create[];
extern const struct op_def op_defs_linalg[];

extern const struct op_def op_defs_conv[];
extern const struct op_def op_defs_conv_grad[];
extern const struct op_def op_defs_loss[];
extern const struct op_def op_defs_reduce[];
extern const struct op_def op_defs_norm[];
extern const struct op_def op_defs_optim[];
extern const struct op_def op_defs_index[];
extern const struct op_def op_defs_sort[];
extern const struct op_def op_defs_mask[];
extern const struct op_def op_defs_attention[];

/* Binding, pipelines and dispatch for an op's record (op_gpu.c). */
#include "ops/op_gpu.h"

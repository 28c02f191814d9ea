// Push constants and broadcast indexing shared by the elementwise shaders
// (binary, compare, where, unary). Mirrors struct ew_push in daemon/ops/elementwise.c.
layout(push_constant) uniform EwPush {
	uint n;          // output elements
	uint rank;       // dims after coalescing
	uint op;         // op code (op_codes.h)
	uint flags;      // EW_* flags
	uint shape[8];   // output dims
	uint astride[8]; // element strides of operand a in output index space (0: broadcast)
	uint bstride[8];
#if IS_FLOAT
	float alpha;     // scalar operand, or the first attribute
	float beta;      // second attribute
#else
	int alpha;       // integer dtypes: the same, exact (union ew_num in C)
	int beta;
#endif
} pc;

// Element offsets of operands a and b (c uses astride too: where's condition
// is broadcast like a... see where.comp) for output element i.
void ew_offsets(uint i, out uint ai, out uint bi)
{
	if ((pc.flags & EW_CONTIGUOUS) != 0u) {
		ai = i;
		bi = i;
		return;
	}
	ai = 0u;
	bi = 0u;
	for (int d = int(pc.rank) - 1; d >= 0; d--) {
		uint c = i % pc.shape[d];
		i /= pc.shape[d];
		ai += c * pc.astride[d];
		bi += c * pc.bstride[d];
	}
}

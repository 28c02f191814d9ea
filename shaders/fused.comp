#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// A fused chain of elementwise ops: a small program (op_codes.h, FU_*) in the
// push constants, interpreted per element over f32 registers. The inputs are
// read once and the materialised results written once, so a chain of k ops
// costs one pass over memory instead of k.
//
// Each invocation handles FU_PER_INVOCATION elements 256 apart, so every load
// and store of a subgroup is contiguous. Every op rounds its result to the
// dtype (f16/bf16 variants) exactly as storing and reloading it between
// separate kernels would: fusion never changes a result.
#include "common.glsl"
layout(local_size_x = 256) in;

layout(push_constant) uniform FusedPush {
	uint n;          // output elements (< 2^31)
	uint info;       // ninstr | nin << 5 | nout << 9 | u8 slot mask << 13 | shift << 21
	uint modes;      // FU_FULL/FU_SCALAR/FU_SUFFIX of input slot k in bits 2k..2k+1
	uint modulus;    // element count of the FU_SUFFIX inputs (0: none)
	uint magic;      // i / modulus == (umulhi(i, magic) + i) >> shift
	uint outregs;    // register stored by output j in bits 4j..4j+3
	uint w[FU_MAX_WORDS];
} pc;

#if defined(DT_F32)
#define ROUND(x) (x)
#elif defined(DT_F16)
#define ROUND(x) float(float16_t(x))
#elif defined(DT_BF16)
#define ROUND(x) LOAD(bf16_from_float(x))
#else
#error "fused.comp is built for f32, f16 and bf16"
#endif

#include "ew_math.glsl"

// Slot k is one tensor, seen in the dtype or as bytes (u8 conditions and
// comparison results).
#define SLOT(k) \
	layout(std430, binding = k) restrict buffer E##k { ELEM v[]; } e##k; \
	layout(std430, binding = k) restrict buffer U##k { uint8_t v[]; } u##k;
SLOT(0)
SLOT(1)
SLOT(2)
SLOT(3)
SLOT(4)
SLOT(5)
SLOT(6)
SLOT(7)

// Input slot k into register k.
#define LOAD_SLOT(k) \
	if (uint(k) < nin) { \
		uint mode = (pc.modes >> (2u * uint(k))) & 3u; \
		uint at = mode == FU_FULL ? i : (mode == FU_SCALAR ? 0u : si); \
		r[k] = ((pc.info >> (13u + uint(k))) & 1u) != 0u ? float(u##k.v[at]) : LOAD(e##k.v[at]); \
	}

// Output slot k (output k - nin) from its register.
#define STORE_SLOT(k) \
	if (uint(k) >= nin && uint(k) < nin + nout) { \
		float v = r[(pc.outregs >> (4u * (uint(k) - nin))) & 15u]; \
		if (((pc.info >> (13u + uint(k))) & 1u) != 0u) \
			u##k.v[i] = uint8_t(v != 0.0 ? 1u : 0u); \
		else \
			e##k.v[i] = STORE(v); \
	}

// Operand s: a register, or a constant from the back of the program.
#define OPERAND(s) ((s) < FU_MAX_REGS ? r[(s) & 15u] : \
		    uintBitsToFloat(pc.w[FU_MAX_WORDS - 1u - ((s) & 15u)]))

void main()
{
	uint first = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) *
		     (256u * FU_PER_INVOCATION) + gl_LocalInvocationID.x;
	uint ninstr = pc.info & 31u, nin = (pc.info >> 5) & 15u, nout = (pc.info >> 9) & 15u;
	uint shift = (pc.info >> 21) & 31u;

	[[dont_unroll]] for (uint e = 0u; e < FU_PER_INVOCATION; e++) {
		uint i = first + 256u * e;
		if (i >= pc.n)
			return;
		uint si = 0u;
		if (pc.modulus > 1u) {
			uint hi, lo;
			umulExtended(i, pc.magic, hi, lo);
			si = i - ((hi + i) >> shift) * pc.modulus;
		}
		float r[FU_MAX_REGS];

		LOAD_SLOT(0) LOAD_SLOT(1) LOAD_SLOT(2) LOAD_SLOT(3)
		LOAD_SLOT(4) LOAD_SLOT(5) LOAD_SLOT(6) LOAD_SLOT(7)
		for (uint k = 0u; k < ninstr; k++) {
			uint w = pc.w[k];
			uint op = w & 63u;
			float x = OPERAND((w >> 10) & 31u), y = OPERAND((w >> 15) & 31u);
			float z = OPERAND((w >> 20) & 31u);
			float v;

			if (op < FU_BINARY)
				v = ew_unary(op, x, y, z);
			else if (op < FU_BINARY + CMP_EQ)
				v = ew_binary(op - FU_BINARY, x, y);
			else if (op < FU_WHERE)
				v = ew_compare(op - FU_BINARY, x, y) ? 1.0 : 0.0;
			else
				v = x != 0.0 ? y : z;
			r[(w >> 6) & 15u] = ROUND(v);
		}
		STORE_SLOT(0) STORE_SLOT(1) STORE_SLOT(2) STORE_SLOT(3)
		STORE_SLOT(4) STORE_SLOT(5) STORE_SLOT(6) STORE_SLOT(7)
	}
}

#version 450
#extension GL_GOOGLE_include_directive : require
// binary.comp's fast path: both operands tensors laid out like the output
// (EW_CONTIGUOUS), or one such tensor and the scalar (EW_A_SCALAR,
// EW_B_SCALAR), an element count that is a multiple of 4. Each invocation
// moves a vec4 (or its 16-bit/8-bit equivalent) of each operand, so the
// kernel runs at memory bandwidth. The math is binary.comp's (ew_math.glsl).
#include "common.glsl"
layout(local_size_x = 256) in;
#if defined(DT_F32)
#define VEC vec4
#define VLOAD(v) (v)
#define VSTORE(v) (v)
#elif defined(DT_F16)
#define VEC f16vec4
#define VLOAD(v) vec4(v)
#define VSTORE(v) f16vec4(v)
#endif
layout(std430, binding = 0) readonly buffer A { VEC a[]; };
layout(std430, binding = 1) readonly buffer B { VEC b[]; };
layout(std430, binding = 2) writeonly buffer O { VEC o[]; };
#include "elementwise.glsl"
#include "ew_math.glsl"

void main()
{
	uint i = linear_id(256u);
	if (i >= pc.n / 4u)
		return;
	// The scalar form: the push constant for the one operand, either side.
	vec4 x = (pc.flags & EW_A_SCALAR) != 0u ? vec4(pc.alpha) : VLOAD(a[i]);
	vec4 y = (pc.flags & EW_B_SCALAR) != 0u ? vec4(pc.alpha) : VLOAD(b[i]), r;
	r.x = ew_binary(pc.op, x.x, y.x);
	r.y = ew_binary(pc.op, x.y, y.y);
	r.z = ew_binary(pc.op, x.z, y.z);
	r.w = ew_binary(pc.op, x.w, y.w);
	o[i] = VSTORE(r);
}

#version 450
#extension GL_GOOGLE_include_directive : require
// arange: o[i] = start + i * step, in f32 (one fma, then rounded to the
// dtype) for float dtypes and in int32 for integer ones.
#include "layout.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) writeonly buffer O { RAW o[]; };
layout(push_constant) uniform P {
	uint n;
	int istart;
	int istep;
	float fstart;
	float fstep;
} pc;

void main()
{
	uint i = linear_id(256u);
	if (i >= pc.n)
		return;
#if IS_FLOAT
	o[i] = raw_from_float(fma(float(i), pc.fstep, pc.fstart));
#else
	o[i] = raw_from_int(pc.istart + int(i) * pc.istep);
#endif
}

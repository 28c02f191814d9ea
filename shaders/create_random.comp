#version 450
#extension GL_GOOGLE_include_directive : require
// rand and randn: Philox4x32-10 keyed by the seed, counter (j, 0, 0, 0) for
// invocation j, whose four words become elements 4j .. 4j+3.
//   rand:  word >> (32 - b) times 2^-b, b = 24 (f32), 11 (f16), 8 (bf16):
//          exact in the dtype, in [0, 1).
//   randn: Box-Muller on word pairs (w0, w1), (w2, w3):
//          u1 = ((w0 >> 8) + 1) 2^-24 in (0, 1], u2 = (w1 >> 8) 2^-24,
//          r = sqrt(-2 ln u1), t = 2 pi u2 - pi,
//          with -ln u1 by its series in v = 1 - u1 when v < 1/8 (a GPU's
//          f32 log is only absolutely accurate near 1),
//          elements r cos t, r sin t; rounded to nearest even in the dtype.
// Mirrors struct ck_random_push in daemon/ops/create.c.
#include "layout.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) writeonly buffer O { RAW o[]; };
layout(push_constant) uniform P {
	uint n;
	uint key0;
	uint key1;
	uint normal; // 0: rand, 1: randn
} pc;

// -ln(u) for u = 1 - v, v = k 2^-24 exact.
float neg_log(float u, float v)
{
	if (v >= 0.125)
		return -log(u);
	float s = 1.0 / 10.0;
	for (int k = 9; k >= 1; k--)
		s = 1.0 / float(k) + v * s;
	return v * s;
}

uvec4 philox4x32_10(uvec4 c, uvec2 k)
{
	for (int r = 0; r < 10; r++) {
		if (r > 0)
			k += uvec2(0x9E3779B9u, 0xBB67AE85u);
		uint hi0, lo0, hi1, lo1;
		umulExtended(0xD2511F53u, c.x, hi0, lo0);
		umulExtended(0xCD9E8D57u, c.z, hi1, lo1);
		c = uvec4(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
	}
	return c;
}

#if defined(DT_F32)
#define RAND_BITS 24u
#elif defined(DT_F16)
#define RAND_BITS 11u
#else
#define RAND_BITS 8u
#endif

void main()
{
	uint j = linear_id(256u);
	if (j >= (pc.n + 3u) / 4u)
		return;
	uvec4 w = philox4x32_10(uvec4(j, 0u, 0u, 0u), uvec2(pc.key0, pc.key1));
	float v[4];
	if (pc.normal == 0u) {
		for (int q = 0; q < 4; q++)
			v[q] = float(w[q] >> (32u - RAND_BITS)) * (1.0 / float(1u << RAND_BITS));
	} else {
		for (int q = 0; q < 4; q += 2) {
			float u1 = (float(w[q] >> 8) + 1.0) * (1.0 / 16777216.0);
			float v1 = float(0xffffffu - (w[q] >> 8)) * (1.0 / 16777216.0);
			float u2 = float(w[q + 1] >> 8) * (1.0 / 16777216.0);
			float r = sqrt(2.0 * neg_log(u1, v1));
			float t = 6.283185307179586 * u2 - 3.141592653589793;
			v[q] = r * cos(t);
			v[q + 1] = r * sin(t);
		}
	}
	for (uint q = 0u; q < 4u; q++)
		if (4u * j + q < pc.n)
			o[4u * j + q] = raw_from_float(v[q]);
}

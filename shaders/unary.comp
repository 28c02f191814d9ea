#version 450
#extension GL_GOOGLE_include_directive : require
// Elementwise unary functions; also the broadcasting copy (UN_COPY) that
// expands an operand to an output shape. alpha and beta carry attributes
// (clamp's min and max).
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer A { ELEM a[]; };
layout(std430, binding = 1) writeonly buffer O { ELEM o[]; };
#include "elementwise.glsl"

#if IS_FLOAT
// erf by Abramowitz-Stegun 7.1.26 refined: |error| < 1.5e-7.
float erf_as(float x)
{
	float z = abs(x);
	float t = 1.0 / (1.0 + 0.3275911 * z);
	float y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t
		- 0.284496736) * t + 0.254829592) * t * exp(-z * z);
	return x >= 0.0 ? y : -y;
}

float apply(uint op, float x)
{
	switch (op) {
	case UN_NEG: return -x;
	case UN_ABS: return abs(x);
	case UN_EXP: return exp(x);
	case UN_LOG: return log(x);
	case UN_SQRT: return sqrt(x);
	case UN_RSQRT: return inversesqrt(x);
	case UN_SIN: return sin(x);
	case UN_COS: return cos(x);
	case UN_TANH: {
		// tanh through exp of a non-positive argument: no overflow.
		float e = exp(-2.0 * abs(x));
		return sign(x) * (1.0 - e) / (1.0 + e);
	}
	case UN_SIGMOID: return x >= 0.0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x));
	case UN_RELU: return max(x, 0.0);
	case UN_GELU: return 0.5 * x * (1.0 + erf_as(x * 0.70710678118654752));
	case UN_ERF: return erf_as(x);
	case UN_GELU_TANH: {
		float u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
		float e = exp(-2.0 * abs(u));
		return 0.5 * x * (1.0 + sign(u) * (1.0 - e) / (1.0 + e));
	}
	case UN_SILU: return x >= 0.0 ? x / (1.0 + exp(-x)) : x * exp(x) / (1.0 + exp(x));
	case UN_SOFTPLUS: return max(x, 0.0) + log(1.0 + exp(-abs(x)));
	case UN_CLAMP: return isnan(x) ? x : min(max(x, pc.alpha), pc.beta);
	default: return x;
	}
}
#else
int apply(uint op, int x)
{
	switch (op) {
	case UN_NEG: return -x;
	case UN_ABS: return abs(x);
	case UN_RELU: return max(x, 0);
	case UN_CLAMP: return min(max(x, int(pc.alpha)), int(pc.beta));
	default: return x;
	}
}
#endif

void main()
{
	uint i = linear_id(256u);
	if (i >= pc.n)
		return;
	uint ai, bi;
	ew_offsets(i, ai, bi);
	if (pc.op == UN_COPY)
		o[i] = a[ai];
	else
		o[i] = STORE(apply(pc.op, LOAD(a[ai])));
}

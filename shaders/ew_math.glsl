// The floating-point math of the elementwise ops, shared by unary.comp,
// binary.comp and fused.comp: one definition, so a fused kernel computes
// exactly what the separate kernels compute (same f32 operations, same order).
// alpha and beta are the unary ops' attributes (clamp's min and max).

// erf by Abramowitz-Stegun 7.1.26 refined: |error| < 1.5e-7.
float erf_as(float x)
{
	float z = abs(x);
	float t = 1.0 / (1.0 + 0.3275911 * z);
	float y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t
		- 0.284496736) * t + 0.254829592) * t * exp(-z * z);
	return x >= 0.0 ? y : -y;
}

// x with the sign bit of `neg` (true: negative), set through the bits so no
// compiler folding or flush-to-zero can lose the sign of a zero.
float ew_with_sign(float x, bool neg)
{
	uint u = floatBitsToUint(x) & 0x7fffffffu;
	return uintBitsToFloat(neg ? (u | 0x80000000u) : u);
}

// C99 pow (Annex F.9.4.4), for f32, f16 and bf16 alike: GLSL's pow is
// undefined for x <= 0, so every special case is decided here and GLSL's
// pow only ever sees a finite x > 0 and a finite y != 0.
float c_pow(float x, float y)
{
	const float inf = uintBitsToFloat(0x7f800000u);
	if (y == 0.0 || x == 1.0)
		return 1.0;                          // pow(x, ±0) = 1, pow(+1, y) = 1, even for NaN
	if (isnan(x) || isnan(y))
		return uintBitsToFloat(0x7fc00000u);
	float ay = abs(y);
	// Every float of magnitude >= 2^24 is an even integer.
	bool yint = ay >= 16777216.0 || y == floor(y);
	bool yodd = yint && ay < 16777216.0 && mod(ay, 2.0) == 1.0;
	bool xneg = (floatBitsToUint(x) & 0x80000000u) != 0u;
	float ax = abs(x);
	if (isinf(y)) {
		if (ax == 1.0)
			return 1.0;                  // pow(-1, ±inf) = 1
		return (ax > 1.0) == (y > 0.0) ? inf : 0.0;
	}
	if (ax == 0.0) {                             // ±0: odd integral y keeps the sign
		float r = y < 0.0 ? inf : 0.0;
		return ew_with_sign(r, xneg && yodd);
	}
	if (isinf(x)) {
		float r = y < 0.0 ? 0.0 : inf;
		return ew_with_sign(r, xneg && yodd);
	}
	if (xneg && !yint)
		return uintBitsToFloat(0x7fc00000u); // negative base, fractional exponent
	return ew_with_sign(pow(ax, y), xneg && yodd);
}

float ew_unary(uint op, float x, float alpha, float beta)
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
	case UN_CLAMP: return isnan(x) ? x : min(max(x, alpha), beta);
	default: return x;
	}
}

float ew_binary(uint op, float x, float y)
{
	switch (op) {
	case BIN_ADD: return x + y;
	case BIN_SUB: return x - y;
	case BIN_MUL: return x * y;
	case BIN_DIV: return x / y;
	case BIN_POW: return c_pow(x, y);
	case BIN_MAXIMUM: return (isnan(x) || isnan(y)) ? x + y : max(x, y);
	case BIN_RELU_GRAD: return y > 0.0 ? x : 0.0;
	case BIN_GELU_GRAD: // Φ(y) + y·φ(y)
		return x * (0.5 * (1.0 + erf_as(y * 0.70710678118654752)) +
			    y * exp(-0.5 * y * y) * 0.3989422804014327);
	case BIN_GELU_TANH_GRAD: {
		// 0.5·(1 + t) + 0.5·y·(1 − t²)·√(2/π)·(1 + 3·0.044715·y²), t = tanh(u)
		float u = 0.7978845608028654 * (y + 0.044715 * y * y * y);
		float e = exp(-2.0 * abs(u)), t = sign(u) * (1.0 - e) / (1.0 + e);
		return x * (0.5 * (1.0 + t) +
			    0.5 * y * (1.0 - t * t) * 0.7978845608028654 * (1.0 + 0.134145 * y * y));
	}
	default: return (isnan(x) || isnan(y)) ? x + y : min(x, y);
	}
}

bool ew_compare(uint op, float x, float y)
{
	switch (op) {
	case CMP_EQ: return x == y;
	case CMP_NE: return x != y;
	case CMP_LT: return x < y;
	case CMP_LE: return x <= y;
	case CMP_GT: return x > y;
	default: return x >= y;
	}
}

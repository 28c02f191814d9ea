// Shared by the layout and creation shaders (layout_*.comp, create_*.comp,
// cast.comp): raw storage of the variant's dtype, and conversions into it
// that do not depend on the device's rounding of OpFConvert.
//
// RAW is an unsigned integer as wide as the dtype: these shaders move bits,
// so every dtype of one width runs the same code.
#include "common.glsl"

#if defined(DT_F32) || defined(DT_I32)
#define RAW uint
#elif defined(DT_F16) || defined(DT_BF16)
#define RAW uint16_t
#else
#define RAW uint8_t
#endif

// f32 -> IEEE binary16 bits, rounded to nearest even; overflow gives inf,
// NaN stays a (quiet) NaN.
uint f16_bits_from_float(float f)
{
	uint x = floatBitsToUint(f);
	uint sign = (x >> 16) & 0x8000u;
	uint ax = x & 0x7fffffffu;
	if (ax > 0x7f800000u)
		return sign | 0x7e00u | ((ax >> 13) & 0x3ffu);
	if (ax >= 0x477ff000u)
		return sign | 0x7c00u;
	if (ax < 0x38800000u) {
		// subnormal result in units of 2^-24
		if (ax <= 0x33000000u)
			return sign;
		uint e = ax >> 23;
		uint m = (ax & 0x7fffffu) | 0x800000u;
		uint shift = 126u - e;
		uint r = m >> shift;
		uint rem = m & ((1u << shift) - 1u);
		uint half_ = 1u << (shift - 1u);
		if (rem > half_ || (rem == half_ && (r & 1u) != 0u))
			r++;
		return sign | r;
	}
	uint h = (ax - 0x38000000u) >> 13;
	uint rem = ax & 0x1fffu;
	if (rem > 0x1000u || (rem == 0x1000u && (h & 1u) != 0u))
		h++;
	return sign | h;
}

// binary16 bits -> f32, exact (subnormals included) on every device.
float float_from_f16_bits(uint h)
{
	uint sign = (h & 0x8000u) << 16;
	uint e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
	if (e == 0u)
		return uintBitsToFloat(sign | floatBitsToUint(float(m) * (1.0 / 16777216.0)));
	if (e == 31u)
		return uintBitsToFloat(sign | 0x7f800000u | (m << 13));
	return uintBitsToFloat(sign | ((e + 112u) << 23) | (m << 13));
}

// Float to a 32-bit integer: NaN is 0, otherwise truncate toward zero and
// saturate at the int32 range.
int sat_i32_from_float(float x)
{
	if (isnan(x))
		return 0;
	if (x >= 2147483648.0)
		return 2147483647;
	if (x <= -2147483648.0)
		return -2147483647 - 1;
	return int(x);
}

// The variant's raw bits for a float value (floats round to nearest even,
// integers truncate toward zero and saturate; NaN gives 0).
RAW raw_from_float(float x)
{
#if defined(DT_F32)
	return floatBitsToUint(x);
#elif defined(DT_F16)
	return uint16_t(f16_bits_from_float(x));
#elif defined(DT_BF16)
	return bf16_from_float(x);
#elif defined(DT_I32)
	return uint(sat_i32_from_float(x));
#else
	return uint8_t(isnan(x) ? 0u : uint(clamp(trunc(x), 0.0, 255.0)));
#endif
}

// The variant's raw bits for an integer value (floats through f32, so exact
// up to 2^24; u8 saturates at 0 and 255).
RAW raw_from_int(int x)
{
#if defined(DT_I32)
	return uint(x);
#elif defined(DT_U8)
	return uint8_t(uint(clamp(x, 0, 255)));
#else
	return raw_from_float(float(x));
#endif
}

// Shared by every op shader: extensions, the storage type of the tensor dtype
// this variant is built for, and index helpers.
//
// Each shader is compiled once per dtype with one of DT_F32, DT_F16, DT_BF16,
// DT_I32, DT_U8 defined. ELEM is the storage type, CT the type arithmetic is
// done in (float for floating dtypes, int for integer ones); LOAD turns an
// ELEM into a CT and STORE a CT into an ELEM.
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_8bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types : require

#include "op_codes.h"

uint16_t bf16_from_float(float f)
{
	uint u = floatBitsToUint(f);
	if (isnan(f))
		return uint16_t((u >> 16) | 0x40u);
	u += 0x7fffu + ((u >> 16) & 1u); // round to nearest even
	return uint16_t(u >> 16);
}

#if defined(DT_F32)
#define ELEM float
#define CT float
#define LOAD(x) (x)
#define STORE(x) (x)
#define IS_FLOAT 1
#elif defined(DT_F16)
#define ELEM float16_t
#define CT float
#define LOAD(x) float(x)
#define STORE(x) float16_t(x)
#define IS_FLOAT 1
#elif defined(DT_BF16)
#define ELEM uint16_t
#define CT float
#define LOAD(x) uintBitsToFloat(uint(x) << 16)
#define STORE(x) bf16_from_float(x)
#define IS_FLOAT 1
#elif defined(DT_I32)
#define ELEM int
#define CT int
#define LOAD(x) (x)
#define STORE(x) (x)
#define IS_FLOAT 0
#elif defined(DT_U8)
#define ELEM uint8_t
#define CT int
#define LOAD(x) int(x)
#define STORE(x) uint8_t(uint(x) & 0xffu)
#define IS_FLOAT 0
#else
#error "build with one of DT_F32 DT_F16 DT_BF16 DT_I32 DT_U8"
#endif

// The invocation's linear index over a grid that may spill from x into y.
uint linear_id(uint local_size)
{
	return (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * local_size +
	       gl_LocalInvocationID.x;
}

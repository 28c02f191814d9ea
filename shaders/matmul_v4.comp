#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// f32 products in every layout and split-K, vec4 (matmul_v4.glsl).
#include "matmul_v4.glsl"

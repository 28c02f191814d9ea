#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// matmul_v4.comp for one layout, A stored transposed ([K, M], the
// weight gradient x^T g), with the layout a
// compile-time constant: its runtime branches in the loaders held the TN
// product to about half of the NN one's rate on an H100 (18 against 34
// TFLOP/s).
#define MM_FIXED_LAYOUT 1u
#include "matmul_v4.glsl"

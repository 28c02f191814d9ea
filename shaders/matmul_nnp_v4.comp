#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// matmul_v4.comp for NN products split along K (matmul_nn_v4.comp takes
// the unsplit ones), the layout a compile-time constant: through the
// runtime-layout kernel a split NN product ran slower than unsplit on an
// H200 (4096x768 from K 3072: 795 us unsplit, 1324 in 2 chunks).
#define MM_FIXED_LAYOUT 0u
#include "matmul_v4.glsl"

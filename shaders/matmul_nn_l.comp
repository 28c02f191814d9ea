#version 450
#extension GL_GOOGLE_include_directive : require
// NN batched matrix product, 128x128 tiles of 8x8 per invocation, K-step 8: for
// large products (daemon/ops/matmul.c picks it). The kernel is matmul_nn.glsl
// (matmul_l.comp: every layout, split-K).
#define TM 128
#define TK 8
#include "matmul_nn.glsl"

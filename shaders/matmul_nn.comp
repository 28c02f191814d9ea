#version 450
#extension GL_GOOGLE_include_directive : require
// NN batched matrix product, 64x64 tiles of 4x4 per invocation, K-step 16: the
// default, and the choice for products too small to fill a GPU with 128x128
// tiles. The kernel is matmul_nn.glsl (matmul.comp: every layout, split-K).
#define TM 64
#define TK 16
#include "matmul_nn.glsl"

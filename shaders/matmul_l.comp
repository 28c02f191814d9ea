#version 450
#extension GL_GOOGLE_include_directive : require
// Batched matrix product, 128x128 tiles of 8x8 per invocation, K-step 8: for
// large products (daemon/ops/matmul.c picks it). The kernel is matmul.glsl.
#define TM 128
#define TK 8
#include "matmul.glsl"

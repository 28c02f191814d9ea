#version 450
#extension GL_GOOGLE_include_directive : require
// matmul_cm.comp storing its f32 accumulators (CM_PART) for a product with an
// epilogue: matmul_reduce.comp (one split) then rounds them to f16 and adds
// the bias and relu, as the nodes matmul -> add -> relu would (issue 16).
// The same devices, sizes and tile as matmul_cm.comp (its comment says why).
#define CM_PART
#define BM 128
#define BN 128
#define BK 32
#define WARPS_M 2
#define WARPS_N 4
#define FM 4
#define FN 2
#include "matmul_cm.glsl"

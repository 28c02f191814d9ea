#version 450
#extension GL_GOOGLE_include_directive : require
// f16 matrix product on tensor cores through VK_NV_cooperative_matrix: f16
// operands, f32 accumulation, f16 result. Only recorded on devices that offer
// 16x16x16 f16 x f16 + f32 subgroup matrices with a subgroup of 32, and only
// for products whose M and N are multiples of 128 and K a multiple of 32
// (daemon/ops/matmul.c checks); everything else takes matmul.glsl. Built
// NN as matmul_cm.f16, and with -DCM_TB (B transposed) as matmul_cm_nt.f16
// and -DCM_TA (A transposed) as matmul_cm_tn.f16 (shaders/meson.build).
//
// A workgroup of 8 subgroups computes a 128x128 tile of C; subgroup (wm, wn)
// of the 2x4 grid owns a 64x32 block: 4x2 accumulators of 16x16. Measured on
// an H100 (docs/performance.md), this beat 128x256, 256x128 and K-steps of 64.
#define BM 128
#define BN 128
#define BK 32
#define WARPS_M 2
#define WARPS_N 4
#define FM 4
#define FN 2
#include "matmul_cm.glsl"

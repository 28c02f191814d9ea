#version 450
#extension GL_GOOGLE_include_directive : require
// matmul_cm.comp's product for VK_KHR_cooperative_matrix: the same GLSL
// (matmul_cm.glsl), compiled with GL_NV_cooperative_matrix by glslang 12 and
// rewritten into SPV_KHR_cooperative_matrix by spv_coopmat_khr.py at build
// time: variant f16 (f16 operands and result, f32 accumulation) and bf16
// (the same with every 16-bit float made bfloat16). Recorded instead of
// matmul_cm.comp on devices that list 16x16x16 f16 (bf16) x f16 (bf16) +
// f32 subgroup matrices under VK_KHR_cooperative_matrix (daemon/gpu/coopmat.c);
// the same tile limits hold (daemon/ops/matmul.c). Built NN as
// matmul_cm_khr, and with -DCM_TB (B transposed) as matmul_cm_khr_nt and
// -DCM_TA (A transposed) as matmul_cm_khr_tn, each f16 and bf16; and
// each of the three again with -DCM_OUT_F32 as matmul_cm_khr_f32out{,_nt,_tn}
// (16-bit operands, the f32 accumulators stored as an f32 result: autocast,
// daemon/ops/matmul.c).
//
// A workgroup of 4 subgroups computes a 128x128 tile of C; subgroup (wm, wn)
// of the 2x2 grid owns a 64x64 block: 4x4 accumulators of 16x16. Measured on
// an H200 (shared TENSOR_CORES.md) with KHR matrices at 8192^2: 274 TFLOP/s
// f16 and 283 bf16, where matmul_cm.comp's 2x4 grid of 64x32 made 181.
// bench/gemm_variants.py builds other tiles (-DBM=... -DFN=...) and the
// variant knobs of matmul_cm.glsl from the same file.
// The build may narrow the tile to 128x64 of two subgroups (-DBN=64
// -DWARPS_N=1: matmul_cm_khr_f32out_n64, for products of N a multiple of 64).
#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 128
#endif
#ifndef BK
#define BK 32
#endif
#ifndef WARPS_M
#define WARPS_M 2
#endif
#ifndef WARPS_N
#define WARPS_N 2
#endif
#ifndef FM
#define FM 4
#endif
#ifndef FN
#define FN 4
#endif
#include "matmul_cm.glsl"

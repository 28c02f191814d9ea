// MM_STORE(acc, col, at) for the tiled matmul kernels' stores: the epilogue
// (matmul_epi.glsl) in the f32 variants, the plain rounding in the 16-bit
// ones. In those the epilogue made matmul_nn_l 15x slower on an H100 (bf16
// 8192^2: 2.1 against 32 TFLOP/s), so the host applies the epilogue of a
// 16-bit product after it, in place (matmul_epi_apply.comp; daemon/ops/matmul.c,
// mm_epilogue_after). The includer defines BIAS_BINDING.
#ifdef DT_F32
#include "matmul_epi.glsl"
#define MM_STORE(acc, col, at) STORE(mm_epilogue(acc, col, at))
#else
#define MM_STORE(acc, col, at) STORE(acc)
#endif

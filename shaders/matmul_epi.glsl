// The matmul epilogue (issue 16) for the kernels built on common.glsl
// (matmul.glsl, matmul_nn.glsl, matmul_reduce.comp): what the node chain
// matmul -> add(bias row) -> relu computes, in its order and with its
// roundings, so that the fused result is the same bit for bit: the product
// rounded to the output dtype, plus bias[column] (one value per output
// column, broadcast along the rows) rounded again, then max(x, 0) as the
// relu op computes it. The includer declares the push block `pc` with
// `flags` and binds the bias at binding BIAS_BINDING (the dummy buffer when
// MM_BIAS is clear).
#define MM_BIAS 8u
#define MM_RELU 16u

layout(std430, binding = BIAS_BINDING) readonly buffer Bias { ELEM bias[]; };

float mm_epilogue(float acc, uint col)
{
	float v = LOAD(STORE(acc));
	if ((pc.flags & MM_BIAS) != 0u)
		v = LOAD(STORE(v + LOAD(bias[col])));
	if ((pc.flags & MM_RELU) != 0u)
		v = max(v, 0.0);
	return v;
}

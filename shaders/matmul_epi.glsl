// The matmul epilogue (issue 16) for the kernels built on common.glsl
// (matmul.glsl, matmul_nn.glsl, matmul_reduce.comp): what the node chain
// matmul -> add(bias row) -> relu computes, in its order and with its
// roundings, so that the fused result is the same bit for bit: the product
// rounded to the output dtype, plus bias[column] (one value per output
// column, broadcast along the rows) rounded again, then max(x, 0) as the
// relu op computes it. With MM_MASK instead (relu's backward, the chain
// matmul -> relu_grad(product, mask)) the buffer at BIAS_BINDING is a mask of
// the result's shape: the rounded product is kept where mask[at] > 0, else 0,
// as relu_grad computes it. The includer declares the push block `pc` with
// `flags` and binds the bias or mask at binding BIAS_BINDING (the dummy
// buffer when neither flag is set).
#define MM_BIAS 8u
#define MM_RELU 16u
#define MM_MASK 32u

layout(std430, binding = BIAS_BINDING) readonly buffer Bias { ELEM bias[]; };

// `col`: the result's column; `at`: its index in the result.
float mm_epilogue(float acc, uint col, uint at)
{
	float v = LOAD(STORE(acc));
	if ((pc.flags & MM_MASK) != 0u)
		return LOAD(bias[at]) > 0.0 ? v : 0.0;
	if ((pc.flags & MM_BIAS) != 0u)
		v = LOAD(STORE(v + LOAD(bias[col])));
	if ((pc.flags & MM_RELU) != 0u)
		v = max(v, 0.0);
	return v;
}

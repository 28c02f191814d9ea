#version 450
#extension GL_GOOGLE_include_directive : require
// Optimizer update rules (torch.optim.SGD, Adam, AdamW; the formulas are in
// optim_math.glsl), one output element per invocation, computed in f32.
// Every coefficient that depends only on hyperparameters (1 - dampening, 1 - beta, bias corrections) is computed on
// the CPU in double and arrives here rounded once to float, as PyTorch
// passes its Python-float scalars to its kernels; the operation order of each
// formula follows PyTorch's single-tensor implementation so f32 results match
// it to rounding. Mirrors struct optim_push in daemon/ops/optim.c.
//
// Bindings by op (input 2 is bound to input 0 again when it is absent):
//   sgd_buf    a = g, b = w, c = old buf
//   sgd_param  a = w, b = g, c = old buf
//   adam_m/v   a = g, b = m or v, c = w
//   adam_param a = w, b = m_new, c = v_new
//   binding 4: with OPT_F_GATE the f32 skip flag (element 0, non-zero: the
//   result is the old value, opt_old; element 1 with OPT_F_UNSCALE: the
//   gradient's multiplier), else input 0 again and never read
#include "common.glsl"
#include "optim_codes.h"
#include "optim_math.glsl"
layout(local_size_x = OPT_WG) in;
layout(std430, binding = 0) readonly buffer A { ELEM a[]; };
layout(std430, binding = 1) readonly buffer B { ELEM b[]; };
layout(std430, binding = 2) readonly buffer C { ELEM c[]; };
layout(std430, binding = 3) writeonly buffer O { ELEM o[]; };
layout(std430, binding = 4) readonly buffer F { float skip[]; };

layout(push_constant) uniform OptimPush {
	uint n;          // elements
	uint op;         // OPT_*
	uint flags;      // OPT_F_*
	uint pad0;
	float wd;        // weight_decay (L2 on the gradient when OPT_F_L2)
	float beta;      // momentum, beta1 or beta2
	float mix;       // 1 - dampening, 1 - beta1, 1 - beta2
	float lr;        // sgd: lr; adam_param: the step size lr / (1 - beta1^t)
	float bc2_sqrt;  // adam_param: sqrt(1 - beta2^t)
	float eps;       // adam_param
	float decay;     // adam_param with OPT_F_DECAY: 1 - lr * weight_decay
	float pad1;
} pc;

OptimArgs args()
{
	return OptimArgs(pc.op, pc.flags, pc.wd, pc.beta, pc.mix, pc.lr, pc.bc2_sqrt, pc.eps, pc.decay);
}

void main()
{
	uint i = linear_id(OPT_WG);
	if (i >= pc.n)
		return;
	float x = LOAD(a[i]), y = LOAD(b[i]), z = LOAD(c[i]);
	if ((pc.flags & OPT_F_GATE) != 0u && skip[0] != 0.0) {
		o[i] = STORE(opt_old(args(), x, y, z));
		return;
	}
	if ((pc.flags & OPT_F_UNSCALE) != 0u)
		opt_unscale(args(), x, y, skip[1]);
	o[i] = STORE(opt_update(args(), x, y, z));
}

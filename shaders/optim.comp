#version 450
#extension GL_GOOGLE_include_directive : require
// Optimizer update rules (torch.optim.SGD, Adam, AdamW), one output element
// per invocation, computed in f32. Every coefficient that depends only on
// hyperparameters (1 - dampening, 1 - beta, bias corrections) is computed on
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
#include "common.glsl"
#include "optim_codes.h"
layout(local_size_x = OPT_WG) in;
layout(std430, binding = 0) readonly buffer A { ELEM a[]; };
layout(std430, binding = 1) readonly buffer B { ELEM b[]; };
layout(std430, binding = 2) readonly buffer C { ELEM c[]; };
layout(std430, binding = 3) writeonly buffer O { ELEM o[]; };

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

// The gradient after L2 weight decay: torch's grad.add(param, alpha=wd).
float decayed(float g, float w)
{
	return (pc.flags & OPT_F_L2) != 0u ? g + pc.wd * w : g;
}

// buf.mul_(momentum).add_(d, alpha=1 - dampening), or clone(d) on the first step.
float sgd_buffer(float d, uint i)
{
	if ((pc.flags & OPT_F_BUF) == 0u)
		return d;
	return LOAD(c[i]) * pc.beta + pc.mix * d;
}

float update(uint i)
{
	switch (pc.op) {
	case OPT_SGD_BUF:
		return sgd_buffer(decayed(LOAD(a[i]), LOAD(b[i])), i);
	case OPT_SGD_PARAM: {
		float w = LOAD(a[i]);
		float d = decayed(LOAD(b[i]), w);
		if ((pc.flags & OPT_F_MOMENTUM) != 0u) {
			float buf = sgd_buffer(d, i);
			d = (pc.flags & OPT_F_NESTEROV) != 0u ? d + pc.beta * buf : buf;
		}
		return w + (-pc.lr) * d;
	}
	case OPT_ADAM_M: {
		// exp_avg.lerp_(grad, 1 - beta1), with lerp as PyTorch computes it.
		float g = decayed(LOAD(a[i]), LOAD(c[i]));
		float m = LOAD(b[i]);
		return pc.mix < 0.5 ? m + pc.mix * (g - m) : g - (g - m) * (1.0 - pc.mix);
	}
	case OPT_ADAM_V: {
		// exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
		float g = decayed(LOAD(a[i]), LOAD(c[i]));
		return LOAD(b[i]) * pc.beta + pc.mix * g * g;
	}
	case OPT_ADAM_PARAM: {
		float w = LOAD(a[i]);
		if ((pc.flags & OPT_F_DECAY) != 0u)
			w = w * pc.decay;
		// denom = (v.sqrt() / bc2_sqrt).add_(eps); param.addcdiv_(m, denom, value=-step_size)
		float denom = sqrt(LOAD(c[i])) / pc.bc2_sqrt + pc.eps;
		return w + (-pc.lr) * (LOAD(b[i]) / denom);
	}
	default:
		return 0.0;
	}
}

void main()
{
	uint i = linear_id(OPT_WG);
	if (i >= pc.n)
		return;
	o[i] = STORE(update(i));
}

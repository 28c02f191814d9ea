// The optimizer update rules on values (torch.optim.SGD, Adam, AdamW), shared
// by optim.comp (one op per dispatch) and optim_multi.comp (every parameter of
// a training step in one dispatch), so that both run the same float
// operations in the same order and their results are bit-identical. The
// operation order of each formula follows PyTorch's single-tensor
// implementation. Every result is `precise` (SPIR-V NoContraction): no driver
// may fuse a multiply and an add into an FMA in one kernel and not in the
// other (NVIDIA's does contract the f32 math of two kernels differently:
// docs/architecture.md, "Fusion"), so each operation rounds as written, as
// in the f32 NumPy reference. Needs optim_codes.h.

// One op's coefficients: OptimPush's fields (daemon/ops/optim.c fill_push).
struct OptimArgs {
	uint op;         // OPT_*
	uint flags;      // OPT_F_*
	float wd;        // weight_decay (L2 on the gradient when OPT_F_L2)
	float beta;      // momentum, beta1 or beta2
	float mix;       // 1 - dampening, 1 - beta1, 1 - beta2
	float lr;        // sgd: lr; adam_param: the step size lr / (1 - beta1^t)
	float bc2_sqrt;  // adam_param: sqrt(1 - beta2^t)
	float eps;       // adam_param
	float decay;     // adam_param with OPT_F_DECAY: 1 - lr * weight_decay
};

// The gradient after L2 weight decay: torch's grad.add(param, alpha=wd).
float opt_decayed(OptimArgs p, float g, float w)
{
	precise float r = g + p.wd * w;
	return (p.flags & OPT_F_L2) != 0u ? r : g;
}

// buf.mul_(momentum).add_(d, alpha=1 - dampening), or clone(d) on the first step.
float opt_sgd_buffer(OptimArgs p, float d, float old)
{
	precise float r = old * p.beta + p.mix * d;
	return (p.flags & OPT_F_BUF) == 0u ? d : r;
}

// The op's result from the values of its inputs a, b, c (optim.comp's
// bindings; c is a again where the op has no input 2).
float opt_update(OptimArgs p, float a, float b, float c)
{
	switch (p.op) {
	case OPT_SGD_BUF:
		return opt_sgd_buffer(p, opt_decayed(p, a, b), c);
	case OPT_SGD_PARAM: {
		float w = a;
		float d = opt_decayed(p, b, w);
		if ((p.flags & OPT_F_MOMENTUM) != 0u) {
			float buf = opt_sgd_buffer(p, d, c);
			precise float nest = d + p.beta * buf;
			d = (p.flags & OPT_F_NESTEROV) != 0u ? nest : buf;
		}
		precise float r = w + (-p.lr) * d;
		return r;
	}
	case OPT_ADAM_M: {
		// exp_avg.lerp_(grad, 1 - beta1), with lerp as PyTorch computes it.
		float g = opt_decayed(p, a, c);
		float m = b;
		precise float lo = m + p.mix * (g - m), hi = g - (g - m) * (1.0 - p.mix);
		return p.mix < 0.5 ? lo : hi;
	}
	case OPT_ADAM_V: {
		// exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
		float g = opt_decayed(p, a, c);
		precise float r = b * p.beta + p.mix * g * g;
		return r;
	}
	case OPT_ADAM_PARAM: {
		precise float w = a;
		if ((p.flags & OPT_F_DECAY) != 0u)
			w = w * p.decay;
		// denom = (v.sqrt() / bc2_sqrt).add_(eps); param.addcdiv_(m, denom, value=-step_size)
		precise float denom = sqrt(c) / p.bc2_sqrt + p.eps;
		precise float r = w + (-p.lr) * (b / denom);
		return r;
	}
	default:
		return 0.0;
	}
}

// The gradient among the op's inputs a, b times `inv` (OPT_F_UNSCALE:
// precision f16's 1 / loss scale, one f32 product, as the `mul` node it
// replaces rounds it).
void opt_unscale(OptimArgs p, inout float a, inout float b, float inv)
{
	precise float ga = a * inv, gb = b * inv;
	if ((p.flags & OPT_F_UNSCALE) == 0u)
		return;
	if (p.op == OPT_SGD_PARAM)
		b = gb;
	else if (p.op != OPT_ADAM_PARAM)
		a = ga;
}

// The op's old value, its result when a gated update is skipped (precision
// f16's found_inf): the weights, the old moment, the old momentum buffer, or
// zero where there is none (sgd_buf's first step). Inputs as opt_update's.
float opt_old(OptimArgs p, float a, float b, float c)
{
	switch (p.op) {
	case OPT_SGD_BUF:
		return (p.flags & OPT_F_BUF) != 0u ? c : 0.0;
	case OPT_ADAM_M:
	case OPT_ADAM_V:
		return b;
	default:
		return a;
	}
}

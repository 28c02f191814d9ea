/* Backward rules of the elementwise ops (forward: elementwise.c). Every rule
 * builds its gradient from ordinary ops; the engine reduces broadcast
 * gradients back to each operand's shape. */
#include <string.h>

#include "ops/grad.h"
#include "ops/grad_rules.h"

/* The scalar form (one input + attrs.scalar): is it `scalar OP x`? */
static bool reversed(struct autograd *ag, unsigned node)
{
	const struct op_attr_value *r = ag_attr_of(ag, node, "reverse");

	return r && r->set && r->i;
}

static double scalar_of(struct autograd *ag, unsigned node)
{
	return ag_attr_of(ag, node, "scalar")->f;
}

static bool is_scalar_form(struct autograd *ag, unsigned node)
{
	return ag_attr_of(ag, node, "scalar")->set;
}

int grad_add(struct autograd *ag, unsigned node, int g, int *out)
{
	out[0] = g;
	if (!is_scalar_form(ag, node))
		out[1] = g;
	return 0;
}

int grad_sub(struct autograd *ag, unsigned node, int g, int *out)
{
	if (is_scalar_form(ag, node)) {
		out[0] = reversed(ag, node) ? ag_op1(ag, "neg", g) : g;
		return out[0] < 0 ? -1 : 0;
	}
	out[0] = g;
	out[1] = ag_op1(ag, "neg", g);
	return out[1] < 0 ? -1 : 0;
}

int grad_mul(struct autograd *ag, unsigned node, int g, int *out)
{
	if (is_scalar_form(ag, node)) {
		out[0] = ag_scalar(ag, "mul", g, scalar_of(ag, node));
		return out[0] < 0 ? -1 : 0;
	}
	out[0] = ag_op2(ag, "mul", g, ag_input(ag, node, 1));
	out[1] = ag_op2(ag, "mul", g, ag_input(ag, node, 0));
	return out[0] < 0 || out[1] < 0 ? -1 : 0;
}

/* d(a/b) = g/b, -g*(a/b)/b */
int grad_div(struct autograd *ag, unsigned node, int g, int *out)
{
	int y = ag_output(ag, node);

	if (is_scalar_form(ag, node)) {
		if (!reversed(ag, node)) {
			out[0] = ag_scalar(ag, "div", g, scalar_of(ag, node));
		} else {
			/* s/x: -g*y/x */
			int t = ag_op2(ag, "mul", g, y);

			out[0] = ag_op1(ag, "neg", ag_op2(ag, "div", t, ag_input(ag, node, 0)));
		}
		return out[0] < 0 ? -1 : 0;
	}
	out[0] = ag_op2(ag, "div", g, ag_input(ag, node, 1));
	out[1] = ag_op1(ag, "neg", ag_op2(ag, "div", ag_op2(ag, "mul", g, y), ag_input(ag, node, 1)));
	return out[0] < 0 || out[1] < 0 ? -1 : 0;
}

/* d(a^b) = g*b*a^(b-1), g*y*log(a) */
int grad_pow(struct autograd *ag, unsigned node, int g, int *out)
{
	int a = ag_input(ag, node, 0), y = ag_output(ag, node);

	if (is_scalar_form(ag, node)) {
		double s = scalar_of(ag, node);

		if (reversed(ag, node)) /* s^x: g*y*ln(s) */
			out[0] = ag_scalar(ag, "mul", ag_op2(ag, "mul", g, y), __builtin_log(s));
		else
			out[0] = ag_scalar(ag, "mul", ag_op2(ag, "mul", g, ag_scalar(ag, "pow", a, s - 1)), s);
		return out[0] < 0 ? -1 : 0;
	}
	{
		int b = ag_input(ag, node, 1);
		int bm1 = ag_scalar(ag, "sub", b, 1);

		out[0] = ag_op2(ag, "mul", ag_op2(ag, "mul", g, b), ag_op2(ag, "pow", a, bm1));
		out[1] = ag_op2(ag, "mul", ag_op2(ag, "mul", g, y), ag_op1(ag, "log", a));
	}
	return out[0] < 0 || out[1] < 0 ? -1 : 0;
}

/* maximum/minimum: the gradient goes to the operand that won (a on ties). */
static int grad_select(struct autograd *ag, unsigned node, int g, int *out, const char *cmp)
{
	int a = ag_input(ag, node, 0), m;

	if (is_scalar_form(ag, node)) {
		m = ag_mask_like(ag, ag_scalar(ag, cmp, a, scalar_of(ag, node)), a);
		out[0] = ag_op2(ag, "mul", g, m);
		return out[0] < 0 ? -1 : 0;
	}
	m = ag_mask_like(ag, ag_op2(ag, cmp, a, ag_input(ag, node, 1)), a);
	out[0] = ag_op2(ag, "mul", g, m);
	out[1] = ag_op2(ag, "sub", g, out[0]);
	return out[0] < 0 || out[1] < 0 ? -1 : 0;
}

int grad_maximum(struct autograd *ag, unsigned node, int g, int *out)
{
	return grad_select(ag, node, g, out, "ge");
}

int grad_minimum(struct autograd *ag, unsigned node, int g, int *out)
{
	return grad_select(ag, node, g, out, "le");
}

/* Comparisons are piecewise constant: no gradient flows through them. */
int grad_none(struct autograd *ag, unsigned node, int g, int *out)
{
	(void)ag;
	(void)node;
	(void)g;
	(void)out;
	return 0;
}

int grad_where(struct autograd *ag, unsigned node, int g, int *out)
{
	int c = ag_input(ag, node, 0), zero = ag_scalar(ag, "mul", g, 0.0);
	int in[3] = { c, g, zero }, in2[3] = { c, zero, g };

	out[1] = ag_emit(ag, "where", in, 3, NULL, 0);
	out[2] = ag_emit(ag, "where", in2, 3, NULL, 0);
	return out[1] < 0 || out[2] < 0 ? -1 : 0;
}

/* The unary rules: out[0] = g · f'(x), written with x and y = f(x). Each
 * unary row of elementwise.c names its own. */
static int unary_done(int d, int *out)
{
	out[0] = d;
	return d < 0 ? -1 : 0;
}

int grad_neg(struct autograd *ag, unsigned node, int g, int *out)
{
	(void)node;
	return unary_done(ag_op1(ag, "neg", g), out);
}

int grad_copy(struct autograd *ag, unsigned node, int g, int *out)
{
	(void)ag;
	(void)node;
	return unary_done(g, out);
}

int grad_exp(struct autograd *ag, unsigned node, int g, int *out)
{
	return unary_done(ag_op2(ag, "mul", g, ag_output(ag, node)), out);
}

int grad_log(struct autograd *ag, unsigned node, int g, int *out)
{
	return unary_done(ag_op2(ag, "div", g, ag_input(ag, node, 0)), out);
}

int grad_sqrt(struct autograd *ag, unsigned node, int g, int *out)
{
	return unary_done(ag_scalar(ag, "mul", ag_op2(ag, "div", g, ag_output(ag, node)), 0.5), out);
}

/* -0.5 · y³ */
int grad_rsqrt(struct autograd *ag, unsigned node, int g, int *out)
{
	int y = ag_output(ag, node);

	return unary_done(ag_scalar(ag, "mul", ag_op2(ag, "mul", g, ag_op2(ag, "mul", y, ag_op2(ag, "mul", y, y))),
				    -0.5), out);
}

int grad_sin(struct autograd *ag, unsigned node, int g, int *out)
{
	return unary_done(ag_op2(ag, "mul", g, ag_op1(ag, "cos", ag_input(ag, node, 0))), out);
}

int grad_cos(struct autograd *ag, unsigned node, int g, int *out)
{
	return unary_done(ag_op1(ag, "neg", ag_op2(ag, "mul", g, ag_op1(ag, "sin", ag_input(ag, node, 0)))), out);
}

/* 1 - y², as -(g · (y² - 1)) */
int grad_tanh(struct autograd *ag, unsigned node, int g, int *out)
{
	int y = ag_output(ag, node);

	return unary_done(ag_op1(ag, "neg", ag_op2(ag, "mul", g, ag_scalar(ag, "sub", ag_op2(ag, "mul", y, y), 1.0))),
			  out);
}

/* y · (1 - y), as y · -(y - 1) */
int grad_sigmoid(struct autograd *ag, unsigned node, int g, int *out)
{
	int y = ag_output(ag, node);

	return unary_done(ag_op2(ag, "mul", g, ag_op2(ag, "mul", y, ag_op1(ag, "neg", ag_scalar(ag, "sub", y, 1.0)))),
			  out);
}

/* One dispatch: relu_grad(g, x) is g where x > 0, else 0. */
int grad_relu(struct autograd *ag, unsigned node, int g, int *out)
{
	return unary_done(ag_op2(ag, "relu_grad", g, ag_input(ag, node, 0)), out);
}

/* relu_grad(a, x) passes a where x > 0: d/da is that mask, d/dx is 0. */
int grad_relu_grad(struct autograd *ag, unsigned node, int g, int *out)
{
	int a = ag_input(ag, node, 0);

	if (is_scalar_form(ag, node)) {
		/* relu_grad(s, x): 0; relu_grad(a, s): all of g or none */
		out[0] = reversed(ag, node) || !(scalar_of(ag, node) > 0) ? ag_zeros_like(ag, a) : g;
		return out[0] < 0 ? -1 : 0;
	}
	out[0] = ag_op2(ag, "relu_grad", g, ag_input(ag, node, 1));
	out[1] = ag_zeros_like(ag, ag_input(ag, node, 1));
	return out[0] < 0 || out[1] < 0 ? -1 : 0;
}

/* sign(x): 1, -1, or 0 at 0 */
int grad_abs(struct autograd *ag, unsigned node, int g, int *out)
{
	int x = ag_input(ag, node, 0);
	int pos = ag_mask_like(ag, ag_scalar(ag, "gt", x, 0.0), x);
	int neg = ag_mask_like(ag, ag_scalar(ag, "lt", x, 0.0), x);

	return unary_done(ag_op2(ag, "mul", g, ag_op2(ag, "sub", pos, neg)), out);
}

int grad_softplus(struct autograd *ag, unsigned node, int g, int *out)
{
	return unary_done(ag_op2(ag, "mul", g, ag_op1(ag, "sigmoid", ag_input(ag, node, 0))), out);
}

/* s + x·s·(1 - s) = s · (1 + x - y), s = sigmoid(x) */
int grad_silu(struct autograd *ag, unsigned node, int g, int *out)
{
	int x = ag_input(ag, node, 0), y = ag_output(ag, node);
	int s = ag_op1(ag, "sigmoid", x);

	return unary_done(ag_op2(ag, "mul", g, ag_op2(ag, "mul", s, ag_scalar(ag, "add", ag_op2(ag, "sub", x, y), 1.0))),
			  out);
}

/* 2/√π · exp(-x²) */
int grad_erf(struct autograd *ag, unsigned node, int g, int *out)
{
	int x = ag_input(ag, node, 0);
	int d = ag_op2(ag, "mul", g, ag_op1(ag, "exp", ag_scalar(ag, "mul", ag_op2(ag, "mul", x, x), -1.0)));

	return unary_done(ag_scalar(ag, "mul", d, 1.1283791670955126), out);
}

/* One dispatch: gelu_grad / gelu_tanh_grad (g, x) is g times gelu's slope
 * at x (ew_math.glsl: erf form Φ(x) + x·φ(x); tanh form
 * 0.5·(1 + t) + 0.5·x·(1 − t²)·√(2/π)·(1 + 3·0.044715x²)). */
int grad_gelu(struct autograd *ag, unsigned node, int g, int *out)
{
	const struct op_attr_value *approx = ag_attr_of(ag, node, "approximate");
	bool tanh_form = approx->set && !strcmp(approx->s, "tanh");

	return unary_done(ag_op2(ag, tanh_form ? "gelu_tanh_grad" : "gelu_grad", g, ag_input(ag, node, 0)), out);
}

/* 1 inside [min, max], 0 outside (an absent bound: no limit). */
int grad_clamp(struct autograd *ag, unsigned node, int g, int *out)
{
	/* copies: emitting moves the node storage the attrs live in */
	const struct op_attr_value lo = *ag_attr_of(ag, node, "min"), hi = *ag_attr_of(ag, node, "max");
	int x = ag_input(ag, node, 0), m = -1;

	if (lo.set)
		m = ag_mask_like(ag, ag_scalar(ag, "ge", x, lo.f), x);
	if (hi.set) {
		int mh = ag_mask_like(ag, ag_scalar(ag, "le", x, hi.f), x);

		m = m < 0 ? mh : ag_op2(ag, "mul", m, mh);
	}
	return unary_done(m < 0 ? g : ag_op2(ag, "mul", g, m), out);
}

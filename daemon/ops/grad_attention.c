/* The backward rule of the fused attention op (ops/attention.c): dq, dk and
 * dv from q, k, v, the upstream gradient g and, instead of the kept
 * probabilities, the rows' logsumexp (attention_lse, [N, T]) and
 * D = rowsum(g ∘ o) ([N, T]): each attention_grad node recomputes the
 * probabilities tile by tile, so nothing of size T × S is kept or made. */
#include <math.h>

#include "ops/grad.h"
#include "ops/grad_rules.h"

int grad_attention(struct autograd *ag, unsigned node, int g, int *out)
{
	static const char *const wrt[3] = { "q", "k", "v" };
	int q = ag_input(ag, node, 0), k = ag_input(ag, node, 1), v = ag_input(ag, node, 2);
	int o = ag_output(ag, node);
	const struct op_attr_value *ca = ag_attr_of(ag, node, "causal"), *sa = ag_attr_of(ag, node, "scale");
	bool causal = ca->set && ca->i;
	double scale = sa->set ? sa->f : 1.0 / sqrt((double)ag_tensor(ag, q).shape[2]);
	struct graph_attr a[3] = {
		{ .name = "causal", .b = causal },
		{ .name = "scale", .f = scale },
		{ .name = "wrt" },
	};
	int64_t last = -1;
	int lse, d;

	lse = ag_emit(ag, "attention_lse", (const int[]){ q, k }, 2, a, 2);
	d = ag_reduce(ag, "sum", ag_op2(ag, "mul", g, o), &last, 1, false);
	if (lse < 0 || d < 0)
		return -1;
	for (unsigned w = 0; w < 3; w++) {
		a[2].s = wrt[w];
		out[w] = ag_emit(ag, "attention_grad", (const int[]){ q, k, v, g, lse, d }, 6, a, 3);
		if (out[w] < 0)
			return -1;
	}
	return 0;
}

/* Deriving the backward graph: given a graph whose nodes compute a scalar
 * loss from stored tensors, append the nodes that compute the gradient of
 * the loss with respect to chosen stored tensors (the parameters). */
#pragma once

#include "engine/graph_core.h"

/* Append gradient nodes for `loss` (a node index) with respect to
 * params[0..nparams). On success ret_grads[p] is the node holding the
 * gradient of params[p] (its shape and dtype). Returns 0, or -1 after
 * td_fail(&gr->call->err) naming the node that could not be differentiated. */
int autograd_build(struct graph *gr, unsigned loss, struct tensor *const *params,
		   unsigned nparams, int *ret_grads);

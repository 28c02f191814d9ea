/* A client's kernel as a node of graph.run (docs/kernels.md, "Kernels in a
 * graph"): {"kernel": NAME, "inputs": [...], "push", "groups", "result"}.
 * The node is an op (kernel_node_op) whose per-node state sits in ctx.priv;
 * its result is what the kernel leaves in one writable binding. Every
 * writable binding is a fresh copy of its input made inside the submission,
 * so no stored tensor or earlier result changes under the graph, and a
 * failed graph leaves the store as it was. */
#pragma once

#include <msgpack.h>
#include <stdint.h>

#include "ops/op.h"

struct graph;

/* The op every kernel node has as ctx.def ("kernel"; not in the registry, so
 * op.run and "op": "kernel" do not reach it, and autograd finds no gradient). */
extern const struct op_def kernel_node_op;

/* Finish node `i` of `gr`, whose inputs are resolved (ninputs, in[], src[],
 * stored[]), whose def is kernel_node_op and whose ctx.g is the device it
 * runs on: find the caller's kernel named
 * by `kernel`, check every input against its binding as kernel.run checks
 * its tensors (count, size, what the device binds, write access to stored
 * tensors bound writable), read `groups` (required), `push` and `result`
 * (optional; NULL when absent) and infer the result. Returns 0, or -1 with
 * ctx.err.code/message set for graph_node_fail. */
int kernel_node_build(struct graph *gr, unsigned i, const msgpack_object *kernel,
		      const msgpack_object *push, const msgpack_object *groups,
		      const msgpack_object *result);

/* The time limit of a graph's submission: kernel_timeout when a node is a
 * kernel node, else 0 (none). */
uint64_t kernel_node_timeout_ns(const struct graph *gr);

/* Report a graph submission that ran past kernel_timeout
 * (DEADLINE_EXCEEDED, naming its first kernel node). Returns -1. */
int kernel_node_timeout_fail(struct graph *gr);

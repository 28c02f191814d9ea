/* The graph engine shared by graph.run/op.run (graph_parse.c reads their
 * node lists) and training (which builds nodes itself): nodes, their resolution and
 * inference, one-submission execution, and storing or returning results. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "ops/op.h"
#include "store/caller.h"
#include "store/store.h"

#define GRAPH_MAX_NODES TDP_MAX_GRAPH_NODES

/* How long graph_execute_async polls a submission before handing it to the
 * completion thread: the most the loop waits on the GPU for one request. */
#define GRAPH_SPIN_NS 1000000

struct node {
	char id[TDP_MAX_NAME_LEN + 1];   /* "" for op.run's single node */
	char out_name[TDP_MAX_NAME_LEN + 1];
	bool has_out;                    /* store the result under out_name */
	/* A derived out (optimizer state, .grad: docs/security.md): created, if
	 * new, in the namespace of and owned by like_owner, whoever runs the
	 * step; an existing one must belong to like_owner. */
	bool out_like;
	uint32_t like_owner, like_group, like_mode;
	bool inline_out;                 /* return the result's data */
	struct tensor *committed;        /* what graph_commit_all stored */
	struct op_ctx ctx;
	int src[OP_MAX_INPUTS];          /* producing node of each input, -1: stored */
	struct tensor *stored[OP_MAX_INPUTS]; /* the stored tensor of inputs with src -1 */
	struct gpu_alloc alloc;          /* the result's own memory */
	struct gpu_alloc *result;        /* &alloc, or input 0's memory for a view */
	bool aliased;                    /* a view sharing input 0's memory */
	bool keep;                       /* the caller reads `result` after graph_execute */
	unsigned fused;                  /* 1 + the fused kernel computing it; 0: its own */
	bool fused_internal;             /* fused and read only inside that kernel: no memory */
	unsigned group;                  /* 1 + the node group recording it (graph_group_add); 0: none */
	uint32_t device;                 /* the device it runs on (ctx.g's id) */
	bool dead;                       /* read by no node that runs: neither given memory
					    nor recorded (graph_mark_dead) */
	bool planned;                    /* `alloc` is a place in a memory plan's arena
					    (graph_plan.c), not memory of its own */
};

struct fuse_kernel;
struct gpu_recorder;
struct graph_replica;
struct graph_id;

struct graph {
	struct caller *call;
	struct node *nodes;
	unsigned n;                      /* nodes in use */
	unsigned cap;                    /* nodes allocated */
	unsigned base;                   /* nodes the daemon put before the client's */
	uint64_t gpu_ns;                 /* device time of its submissions (timestamps) */
	uint64_t dispatches;             /* kernels recorded */
	bool fuse;                       /* fuse elementwise chains (graph_fuse.c) */
	/* Autocast (mixed precision): TDP_DTYPE_F32 (0) off, TDP_DTYPE_BF16 on;
	 * each node's ctx.autocast is set from it when it records. */
	int autocast;
	struct fuse_kernel *kernels;     /* the fused kernels graph_fuse_plan made */
	unsigned nkernels;
	struct graph_group *groups;      /* node groups recorded together (graph_group_add) */
	unsigned ngroups;
	bool default_set;                /* default_device chosen (graph_place_node) */
	uint32_t default_device;         /* for nodes nothing else places */
	const struct graph_replica *replica; /* data-parallel replica: stored tensors swapped */
	struct gpu_recorder *recs;       /* per device id: the recordings submitted, not waited */
	uint32_t nrecs;
	/* Copies to and from a host buffer that the next graph_submit_part
	 * records before its first node and after its last (data parallel,
	 * one device); it clears them. */
	const struct graph_copy *copies_before, *copies_after;
	unsigned ncopies_before, ncopies_after;
	/* Copies of node results into a host buffer that the next
	 * graph_submit_part records right after their node (in node order, each
	 * ordered only against what touches its ranges, so later nodes run on
	 * while it copies: data parallel's bucketed exchange); it clears them. */
	const struct graph_copy *copies_at;
	unsigned ncopies_at;
	/* Commands the next graph_submit_part records right after node
	 * `after_node` (and its copies_at) on that node's device: `after(gr,
	 * rec, after_data)` records them, returning 0 or -errno (data
	 * parallel: the signal that the gradients are out, the wait for the
	 * host's word, the mean); it clears them. */
	int (*after)(struct graph *gr, struct gpu_recorder *rec, void *data);
	void *after_data;
	unsigned after_node;
	/* graph_execute_async: called once every device's part completed. */
	void (*done)(struct graph *gr, void *data);
	void *done_data;
	unsigned watching;               /* parts whose completion is awaited */
	bool async;                      /* record on command buffers for gpu_rec_watch */
	uint64_t spin_ns;                /* graph_execute_async's poll; 0: GRAPH_SPIN_NS */
	/* Plan the memory of results that die inside a part (graph_plan.c):
	 * training steps do. */
	bool plan_memory;
	/* graph_parse's index of the node ids, sorted (graph_parse.c); NULL
	 * outside graph_parse. */
	struct graph_id *ids;
	unsigned nids;
	/* The plan's shared autocast copies (graph_casts.c), placed in its
	 * arenas. */
	struct op_cast *casts;
	unsigned ncasts;
	struct graph_arena *arenas;      /* the plans' memory, one per part and device */
	unsigned narenas;
	/* Arenas to take before allocating (a train.run job's, shared by its
	 * steps in flight: one queue runs them in turn); NULL: none. */
	struct graph_arena_cache *arena_cache;
	/* With plan_memory: the scratch the nodes share in turn (op.h). */
	struct op_scratch_pool scratch_pool;
	uint64_t peak_bytes;             /* device memory in use after recording, at most */
};

/* A copy between node `node`'s result (or `alloc` when node < 0) and the
 * host-visible buffer `host` of the graph's device at `offset`; with `mean`
 * (a copy before the part), instead the mean of the `mean` f32 slots of
 * `host` at offsets offset + k * stride, slot `self` being the result itself
 * (gpu_rec_host_mean: data parallel's exchange on the GPU), written into the
 * result. */
struct graph_copy {
	int node;
	const struct gpu_alloc *alloc;
	VkBuffer host;
	uint64_t offset;
	unsigned mean, self;
	uint64_t stride;
};

/* A data-parallel replica (train_parallel.c): the graph runs on `device`
 * with `tensors[k]` (that device's copies, not in the store) wherever the
 * client named the stored tensor of the same name. */
struct graph_replica {
	uint32_t device;
	struct tensor **tensors;
	unsigned n;
};

/* How a node group records: every member's work (members m[0..n) in graph
 * order, results allocated), failures reported on `lead` (the last member)
 * with op_fail. Returns 0 or -1. */
typedef int (*graph_group_fn)(struct op_ctx *lead, struct op_ctx *const *m, unsigned n,
			      struct gpu_recorder *rec);

/* Nodes [first .. last] marked with this group (graph_group_add). */
struct graph_group {
	unsigned first, last;
	graph_group_fn record;
};

/* struct graph_attr, graph_emit's named attribute, is declared in ops/op.h
 * (backward rules build them too). */

/* Report node `i`'s failure with its position, id and op in gr->call->err.
 * Returns -1. */
int graph_node_fail(struct graph *gr, unsigned i, int code, const char *what);

/* Append `n` zeroed nodes (up to GRAPH_MAX_NODES in all). */
int graph_alloc_nodes(struct graph *gr, uint32_t n);

/* Room for `n` nodes in all (at most GRAPH_MAX_NODES) before they are
 * appended: a caller that knows its graph's size (a training step's, from
 * the step before) saves growing the array node by node. Returns 0, or -1
 * out of memory (nothing changed). */
int graph_reserve(struct graph *gr, unsigned n);

/* Append one node: op `def`, inputs given per k as an earlier node's index
 * (src[k] >= 0) or a stored tensor (src[k] < 0, stored[k]), attributes in
 * the order of def->attrs (NULL: none). Checks arity and runs the op's
 * inference. Returns the node index, or -1 with ctx.err.code/message set on the
 * new node (which the caller reports with graph_node_fail). */
int graph_append(struct graph *gr, const struct op_def *def, const int *src,
		 struct tensor *const *stored, unsigned n, const struct op_attr_value *attrs);

/* An op input describing stored tensor `t` (its memory, shape and dtype). */
struct op_tensor graph_stored_input(struct tensor *t);

/* graph_append by op name with named attributes. Returns the node index, or
 * -1 with a reason in `why` (`why_len` bytes). */
int graph_emit(struct graph *gr, const char *op, const int *src, struct tensor *const *stored,
	       unsigned n, const struct graph_attr *attrs, unsigned nattrs, char *why, size_t why_len);

/* Make nodes[0..n) (indices in increasing order, inferred and placed: all
 * on one device) one group that `record` records with one call when
 * graph_submit_part reaches the last (the multi-tensor optimizer: one
 * dispatch for a training step's updates). A node without elements is left
 * out. The members' results may be read only by later members and nodes
 * after the last; where a submitted part holds only some of the group, or
 * graph_record_into records it, each member records itself. Returns 0, or
 * -EINVAL (nothing changed) when the nodes break those rules, -ENOMEM. */
int graph_group_add(struct graph *gr, const unsigned *nodes, unsigned n, graph_group_fn record);

/* Record node `i` of a group whose members all lie in [first, last) (the
 * part being submitted): nothing before the group's last node, which
 * records them all. Returns 0, or -1 with the node's ctx.err set. */
int graph_group_record(struct graph *gr, unsigned i, unsigned first, unsigned last, struct gpu_recorder *rec);

/* Run inference on a node whose def, inputs and attrs are set; checks arity
 * and the result size limit. Returns 0 or -1 with ctx.err.code/message set. */
int graph_infer_node(struct graph *gr, unsigned i);

/* Check named outputs: valid, distinct, ours to replace, within the tensor limit. */
int graph_check_outputs(struct graph *gr);

/* Place node `i` (inputs resolved) on a device: `want` (a device id, -1 for
 * none), else its inputs' device, else the graph's default device; sets
 * nd->device and nd->ctx.g. Inputs on different devices, or not on `want`,
 * fail with FAILED_PRECONDITION. Returns 0 or -1 with ctx.err.code/message set. */
int graph_place_node(struct graph *gr, unsigned i, int want);

/* The tensor a node reads for stored tensor `t`: `t`, or in a replica's
 * graph its copy on the replica's device (NULL when it has none). */
struct tensor *graph_stored(const struct graph *gr, struct tensor *t);

/* Allocate the results of nodes [first, last), record them into one command
 * buffer per device and submit those without waiting (graph_wait). Nodes
 * before `first` must have run. Returns 0 or -1 with gr->call->err set. */
int graph_submit_part(struct graph *gr, unsigned first, unsigned last);

/* Allocate the results of every node of `gr` (unfused, all on rec->g) and
 * record them into `rec`, a recording the caller began and submits: several
 * graphs then share one command buffer and one submission (op.run batches,
 * methods/op_batch.c), the recorder putting barriers only where one reads or
 * writes what an earlier one wrote. On failure what was recorded of `gr`
 * stays in `rec`: keep its memory until the submission completed. Returns 0
 * or -1 with gr->call->err set. */
int graph_record_into(struct graph *gr, struct gpu_recorder *rec);

/* Wait for what graph_submit_part submitted. Returns 0 or -1 with gr->call->err set. */
int graph_wait(struct graph *gr);

/* Allocate every result, record every node into one command buffer per
 * device, submit them all and wait. With `fuse` set, chains of elementwise nodes run as fused
 * kernels first (graph_fuse.c); their intermediates then have no memory
 * (`result` NULL) unless stored, returned inline, marked `keep` or read by a
 * node outside the chain. Returns 0 or -1 with gr->call->err set. */
int graph_execute(struct graph *gr);

/* graph_execute without waiting: allocate, record and submit every node,
 * then return; `done(gr, data)` is called from the event loop once the
 * submissions completed (or failed, or ran past their limit), and calls
 * graph_wait (which then returns at once with the outcome) before reading
 * or committing results. Returns 0 when `done` will be called, 1 when the
 * devices have no completion thread or the graph finished within
 * GRAPH_SPIN_NS, or gr->spin_ns when set (polled here, so a small op skips
 * the hand-off) and was
 * waited for here (`done` is not called; go on as after graph_execute), or
 * -1 with
 * gr->call->err set. graph_free before `done` waits for the work and
 * `done` is then not called. */
int graph_execute_async(struct graph *gr, void (*done)(struct graph *gr, void *data), void *data);

/* graph_execute_async for nodes [first, last) (graph_submit_part's part):
 * `done` once it completed, the same returns. Parts go in order, each
 * after the one before it was waited for (graph_wait). */
int graph_submit_part_async(struct graph *gr, unsigned first, unsigned last,
			    void (*done)(struct graph *gr, void *data), void *data);

/* Fill t's name, dtype, shape, count and bytes from node `i`'s out name and
 * result (what graph_commit stores; nothing else of t is touched). */
void graph_out_meta(const struct graph *gr, unsigned i, struct tensor *t);

/* Store every named result of `gr` (after it ran), all or none: the rights
 * and quotas of graph_check_outputs are checked again first, against what
 * holds the names now -- a request answered later must not store into a
 * tensor chmod-ed, deleted or re-created meanwhile, nor past a quota that
 * other requests filled meanwhile (docs/security.md, "Checked at the
 * store"). Each node's stored tensor is left in its `committed`. Returns 0,
 * or -1 with gr->call->err set and nothing stored. */
int graph_commit_all(struct graph *gr);

/* Copy node `i`'s result (ctx.out.bytes) from the device into `dst`, after
 * graph_execute. Returns 0 or -1 with gr->call->err set. */
int graph_read_result(struct graph *gr, unsigned i, void *dst);

/* Free every result that was not committed, and the nodes. */
void graph_free(struct graph *gr);

/* Mark dead each node of [from, to) that no live node reads: every node
 * outside that range is live, and so is a node of it that a live one reads
 * or whose result is stored, kept or returned. Autograd's use: the gradients
 * its rules derive for inputs that need none (a batch's data, a target) are
 * never computed. */
void graph_mark_dead(struct graph *gr, unsigned from, unsigned to);

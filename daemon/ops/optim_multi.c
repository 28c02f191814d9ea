/* The multi-tensor optimizer (issue 16): a training step's optimizer nodes
 * (sgd_param, sgd_buf, adam_m, adam_v, adam_param for every parameter)
 * recorded as one dispatch of shaders/optim_multi.comp (optim_multi1.comp
 * when one window holds every tensor) instead of one per node. Tensors are ranges of the device's pooled memory blocks (gpu/memory.h),
 * so the dispatch binds up to OPTM_SLOTS windows of those blocks and a table
 * (binding 7, written into scratch memory by vkCmdUpdateBuffer in the same
 * command buffer) tells each segment which window and element offset each of
 * its tensors has, and its coefficients (optim_fill_push's, the same floats
 * the per-node dispatches get). More windows, another dtype or a full table
 * start another dispatch. The engine calls it for a node group
 * (engine/graph_core.h, graph_group_add) made by train/optimizer.c. Gated
 * updates (precision f16) bind their skip flag as one more tensor of the
 * segment; found_inf's chain (train/loss_scale.c) is recorded by the same
 * kernel as check segments, one per gradient (optim_check_record). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "gpu/device.h"
#include "ops/op.h"
#include "ops/optim.h"
#include "optim_codes.h"
#include "status.h"

/* Segments per dispatch: their table is one vkCmdUpdateBuffer (<= 64 KiB). */
#define OPTM_MAX_SEGS 256
#define OPTM_TENSORS 8
_Static_assert(OPTM_MAX_SEGS * OPTM_SEG_WORDS * 4 <= 65536, "one update writes the table");

struct seg {
	uint32_t kind;                       /* OPTM_ONE, OPTM_ADAM */
	int dtype;
	uint64_t n;
	const struct op_tensor *t[OPTM_TENSORS]; /* by the kernel's tensor index */
	bool write[OPTM_TENSORS];
	unsigned slot[OPTM_TENSORS];         /* its window in the dispatch */
	struct optim_push p[3];
};

/* A dispatch being filled: its windows and segments [first, first + nseg). */
struct chunk {
	struct gpu_binding slot[OPTM_SLOTS];
	unsigned nslot, first, nseg;
	int dtype;
};

bool optim_multi_member(const struct op_ctx *ctx)
{
	for (const struct op_def *d = op_defs_optim; d->name; d++)
		if (ctx->def == d)
			return d->code != OPT_FOUND_INF;
	return false;
}

static bool same(const struct op_tensor *a, const struct op_tensor *b)
{
	return a->alloc && b->alloc && a->alloc->block == b->alloc->block && a->alloc->offset == b->alloc->offset;
}

static int code(const struct op_ctx *c)
{
	return (int)c->def->code;
}

/* The skip flag of gated optimizer op `c`, or NULL. */
static const struct op_tensor *skip_flag(const struct op_ctx *c)
{
	unsigned nin = optim_update_inputs(c);

	return nin < c->ninputs ? &c->in[nin] : NULL;
}

/* Whether ops a and b are gated alike: both by the same flag, or neither. */
static bool same_gate(const struct op_ctx *a, const struct op_ctx *b)
{
	const struct op_tensor *fa = skip_flag(a), *fb = skip_flag(b);

	return fa ? fb && same(fa, fb) : !fb;
}

/* adam_m, adam_v, adam_param of one parameter at m[0..2]? */
static bool adam_triple(struct op_ctx *const *m, unsigned left)
{
	if (left < 3 || code(m[1]) != OPT_ADAM_V || code(m[2]) != OPT_ADAM_PARAM)
		return false;
	if (!same_gate(m[0], m[1]) || !same_gate(m[0], m[2]))
		return false;
	return optim_update_inputs(m[0]) == 3 && optim_update_inputs(m[1]) == 3 &&
	       same(&m[0]->in[0], &m[1]->in[0]) && same(&m[0]->in[2], &m[1]->in[2]) && same(&m[0]->in[2], &m[2]->in[0]) &&
	       same(&m[2]->in[1], &m[0]->out) && same(&m[2]->in[2], &m[1]->out);
}

/* A tensor's place, to find results among inputs. */
struct where {
	const void *block;
	uint64_t offset;
};

static int where_cmp(const void *a, const void *b)
{
	const struct where *x = a, *y = b;

	if (x->block != y->block)
		return (uintptr_t)x->block < (uintptr_t)y->block ? -1 : 1;
	return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Whether an input of a segment is a result of one (it would be read
 * before the dispatch wrote it). Returns 1, 0, or -1 when out of memory. */
static int reads_result(const struct seg *segs, unsigned ns)
{
	struct where *out = malloc((size_t)ns * OPTM_TENSORS * sizeof(*out));
	unsigned no = 0;
	int r = 0;

	if (!out)
		return -1;
	for (unsigned a = 0; a < ns; a++)
		for (unsigned j = 0; j < OPTM_TENSORS; j++)
			if (segs[a].t[j] && segs[a].write[j])
				out[no++] = (struct where){ segs[a].t[j]->alloc->block, segs[a].t[j]->alloc->offset };
	qsort(out, no, sizeof(*out), where_cmp);
	for (unsigned a = 0; a < ns && !r; a++)
		for (unsigned j = 0; j < OPTM_TENSORS && !r; j++) {
			struct where key;

			if (!segs[a].t[j])
				continue;
			key = (struct where){ segs[a].t[j]->alloc->block, segs[a].t[j]->alloc->offset };
			r = !segs[a].write[j] && bsearch(&key, out, no, sizeof(*out), where_cmp) != NULL;
		}
	free(out);
	return r;
}

/* The segments of the nodes m[0..n) into segs (n of them at most); -1
 * where the nodes do not form the pattern (or one's result is read by
 * another outside an Adam triple), -2 when out of memory. */
static int plan(struct op_ctx *const *m, unsigned n, struct seg *segs, unsigned *ret_nseg)
{
	unsigned ns = 0;
	int r;

	for (unsigned k = 0; k < n;) {
		struct seg *s = &segs[ns++];

		memset(s, 0, sizeof(*s));
		s->dtype = m[k]->out.dtype;
		s->n = m[k]->out.count;
		/* The kernel reads a skip flag as the segment's dtype: f32 only. */
		s->t[OPTM_SKIP] = skip_flag(m[k]);
		if (s->t[OPTM_SKIP] && s->dtype != TDP_DTYPE_F32)
			return -1;
		if (code(m[k]) == OPT_ADAM_M && adam_triple(&m[k], n - k)) {
			const struct op_tensor *t[7] = { &m[k]->in[0], &m[k]->in[1], &m[k + 1]->in[1], &m[k]->in[2],
							 &m[k]->out, &m[k + 1]->out, &m[k + 2]->out };

			s->kind = OPTM_ADAM;
			for (unsigned j = 0; j < 7; j++) {
				s->t[j] = t[j];
				s->write[j] = j >= 4;
			}
			for (unsigned j = 0; j < 3; j++)
				optim_fill_push(m[k + j], &s->p[j]);
			k += 3;
			continue;
		}
		s->kind = OPTM_ONE;
		for (unsigned j = 0; j < 3; j++)
			s->t[j] = &m[k]->in[j < optim_update_inputs(m[k]) ? j : 0];
		s->t[3] = &m[k]->out;
		s->write[3] = true;
		optim_fill_push(m[k], &s->p[0]);
		k++;
	}
	/* Every input must be written before the dispatch: none is a result. */
	for (unsigned a = 0; a < ns; a++)
		for (unsigned j = 0; j < OPTM_TENSORS; j++)
			if (segs[a].t[j] && (!segs[a].t[j]->alloc || !segs[a].t[j]->alloc->block))
				return -1;
	r = reads_result(segs, ns);
	if (r)
		return r < 0 ? -2 : -1;
	*ret_nseg = ns;
	return 0;
}

/* Put segment `s`'s tensors into c's windows (widened, or new ones, each
 * within `range` bytes from an offset aligned to `align`). Returns false,
 * changing nothing, when they do not fit. */
static bool place(struct chunk *c, struct seg *s, uint64_t range, uint64_t align)
{
	struct gpu_binding w[OPTM_SLOTS];
	unsigned nw = c->nslot;

	memcpy(w, c->slot, sizeof(w));
	for (unsigned j = 0; j < OPTM_TENSORS; j++) {
		const struct gpu_alloc *a = s->t[j] ? s->t[j]->alloc : NULL;
		uint64_t lo, hi;
		unsigned k;

		if (!a)
			continue;
		lo = a->offset & ~(align - 1);
		hi = a->offset + s->t[j]->bytes;
		for (k = 0; k < nw; k++) {
			uint64_t l = w[k].offset < lo ? w[k].offset : lo;
			uint64_t h = w[k].offset + w[k].range > hi ? w[k].offset + w[k].range : hi;

			if (w[k].buffer == a->block->buffer && h - l <= range) {
				w[k].offset = l;
				w[k].range = h - l;
				break;
			}
		}
		if (k == nw) {
			if (nw == OPTM_SLOTS || hi - lo > range)
				return false;
			w[nw++] = (struct gpu_binding){ a->block->buffer, lo, hi - lo, false };
		}
		w[k].write = w[k].write || s->write[j];
		s->slot[j] = k;
	}
	memcpy(c->slot, w, sizeof(w));
	c->nslot = nw;
	return true;
}

/* Segment s's table words at `t`; its first workgroup is `wg0`. */
static void fill_seg(const struct chunk *c, const struct seg *s, uint32_t wg0, uint32_t *t)
{
	uint64_t esize = tdp_dtype_size(s->dtype);

	memset(t, 0, OPTM_SEG_WORDS * sizeof(*t));
	t[OPTM_KIND] = s->kind;
	t[OPTM_N] = (uint32_t)s->n;
	t[OPTM_WG0] = wg0;
	for (unsigned j = 0; j < OPTM_TENSORS; j++) {
		if (!s->t[j])
			continue;
		t[OPTM_REF + 2 * j] = s->slot[j];
		t[OPTM_REF + 2 * j + 1] = (uint32_t)((s->t[j]->alloc->offset - c->slot[s->slot[j]].offset) / esize);
	}
	for (unsigned k = 0; k < (s->kind == OPTM_ADAM ? 3u : 1u); k++) {
		const struct optim_push *p = &s->p[k];
		uint32_t *a = &t[OPTM_ARGS + k * OPTM_ARG_WORDS];
		const float f[7] = { p->wd, p->beta, p->mix, p->lr, p->bc2_sqrt, p->eps, p->decay };

		a[0] = p->op;
		a[1] = p->flags;
		memcpy(&a[2], f, sizeof(f));
	}
}

/* Write chunk c's table at byte `*at` of `table` and record its dispatch. */
static int flush(struct op_ctx *lead, struct gpu_recorder *rec, const struct chunk *c, const struct seg *segs,
		 const struct gpu_alloc *table, uint64_t *at, uint32_t *words)
{
	const struct gpu_pipeline *p;
	struct gpu_binding b[OPTM_SLOTS + 1];
	uint64_t wgs = 0, bytes = (uint64_t)c->nseg * OPTM_SEG_WORDS * 4;
	uint32_t push[4] = { c->nseg, 0, 0, 0 };
	uint64_t align = lead->g->props.limits.minStorageBufferOffsetAlignment;

	/* One window: the kernel without the switch over windows. */
	if (op_pipeline(lead, c->nslot == 1 ? "optim_multi1" : "optim_multi", tdp_dtype_name(c->dtype), &p) < 0)
		return -1;
	for (unsigned k = 0; k < c->nseg; k++) {
		const struct seg *s = &segs[c->first + k];

		fill_seg(c, s, (uint32_t)wgs, &words[k * OPTM_SEG_WORDS]);
		wgs += (s->n + OPT_WG - 1) / OPT_WG;
	}
	if (wgs > UINT32_MAX)
		return op_fail(lead, TDP_RESOURCE_EXHAUSTED, "more than 2^32 workgroups of updates");
	for (unsigned k = 0; k < OPTM_SLOTS; k++)
		b[k] = k < c->nslot ? c->slot[k] : gpu_rec_bind(lead->g, &(struct gpu_alloc){ 0 }, 0, 0, false);
	b[OPTM_SLOTS] = gpu_rec_bind(lead->g, table, *at, bytes, true);
	gpu_rec_update(rec, &b[OPTM_SLOTS], words);
	b[OPTM_SLOTS].write = false;
	*at += (bytes + align - 1) / align * align;
	return op_dispatch(lead, rec, p, b, OPTM_SLOTS + 1, push, sizeof(push), wgs * OPT_WG, OPT_WG);
}

/* Record the segments as few dispatches as the windows and dtypes allow. */
static int record_segs(struct op_ctx *lead, struct gpu_recorder *rec, struct seg *segs, unsigned ns)
{
	uint64_t range = lead->g->props.limits.maxStorageBufferRange;
	uint64_t align = lead->g->props.limits.minStorageBufferOffsetAlignment, at = 0;
	uint64_t stride = ((uint64_t)OPTM_SEG_WORDS * 4 + align - 1) / align * align;
	struct chunk c = { .nslot = 0 };
	struct gpu_alloc *table;
	uint32_t *words;
	int r = 0;

	/* Each dispatch's table starts aligned: at most one pad per segment. */
	if (op_scratch_alloc(lead, (uint64_t)ns * (OPTM_SEG_WORDS * 4 + stride), &table) < 0)
		return -1;
	words = malloc((size_t)OPTM_MAX_SEGS * OPTM_SEG_WORDS * 4);
	if (!words)
		return op_fail(lead, TDP_INTERNAL, "out of memory");
	for (unsigned k = 0; k < ns && r == 0; k++) {
		struct seg *s = &segs[k];

		if (s->n > UINT32_MAX) {
			r = op_fail(lead, TDP_RESOURCE_EXHAUSTED, "more than 2^32 elements");
			break;
		}
		if (c.nseg && (s->dtype != c.dtype || c.nseg == OPTM_MAX_SEGS || !place(&c, s, range, align))) {
			r = flush(lead, rec, &c, segs, table, &at, words);
			c = (struct chunk){ .first = k };
		}
		if (r == 0 && c.nseg == 0) {
			c.dtype = s->dtype;
			if (!place(&c, s, range, align))
				r = op_fail(lead, TDP_RESOURCE_EXHAUSTED, "an update's operands are more than this device "
					    "binds at once (%llu bytes)", (unsigned long long)range);
		}
		c.nseg++;
	}
	if (r == 0 && c.nseg)
		r = flush(lead, rec, &c, segs, table, &at, words);
	free(words);
	return r;
}

int optim_multi_record(struct op_ctx *lead, struct op_ctx *const *m, unsigned n, struct gpu_recorder *rec)
{
	struct seg *segs = malloc((n ? n : 1) * sizeof(*segs));
	unsigned ns = 0;
	int r;

	if (!segs)
		return op_fail(lead, TDP_INTERNAL, "out of memory");
	for (unsigned k = 0; k < n; k++)
		if (!optim_multi_member(m[k]) || m[k]->g != lead->g)
			ns = UINT32_MAX;
	r = ns == UINT32_MAX ? -1 : plan(m, n, segs, &ns);
	if (r == -2) {
		free(segs);
		return op_fail(lead, TDP_INTERNAL, "out of memory");
	}
	if (r < 0) {
		free(segs);
		/* Not the pattern: each node records itself, in order. */
		for (unsigned k = 0; k < n; k++)
			if (m[k]->def->record(m[k], rec) < 0) {
				if (m[k] != lead)
					lead->err = m[k]->err;
				return -1;
			}
		return 0;
	}
	r = record_segs(lead, rec, segs, ns);
	free(segs);
	return r;
}

/* Whether found_inf node `c` has its bool attr `name` set. */
static bool has(const struct op_ctx *c, const char *name)
{
	const struct op_attr_value *v = op_attr(c, name);

	return v->set && v->i;
}

int optim_check_record(struct op_ctx *lead, struct op_ctx *const *m, unsigned n, struct gpu_recorder *rec)
{
	static const uint32_t zero = 0;
	const struct op_tensor *flag = &m[n - 1]->out;
	struct seg *segs = malloc((size_t)n * OP_MAX_INPUTS * sizeof(*segs));
	struct gpu_binding z;
	unsigned ns = 0;
	int r;

	if (!segs)
		return op_fail(lead, TDP_INTERNAL, "out of memory");
	for (unsigned k = 0; k < n; k++) {
		bool unscale = has(m[k], "unscale");
		unsigned nin = m[k]->ninputs - unscale;

		for (unsigned j = 0; j < nin; j++) {
			const struct op_tensor *t = &m[k]->in[j];
			bool is_flag = j == 0 && has(m[k], "chain");
			struct seg *s;

			/* The member before's result: this dispatch computes it. */
			if (is_flag && k > 0 && same(t, &m[k - 1]->out))
				continue;
			if (t->count == 0)
				continue;
			if (!t->alloc || !t->alloc->block) {
				free(segs);
				return op_fail(lead, TDP_INTERNAL, "found_inf: an input has no memory");
			}
			s = &segs[ns++];
			memset(s, 0, sizeof(*s));
			s->kind = OPTM_CHECK;
			s->dtype = TDP_DTYPE_F32;
			s->n = t->count;
			s->t[0] = t;
			s->t[1] = flag;
			s->write[1] = true;
			s->p[0].op = OPT_FOUND_INF;
			s->p[0].flags = is_flag ? OPT_F_FLAG : 0;
			/* Checked as the optimizer reads it: times 1 / scale. */
			if (unscale && !is_flag) {
				s->t[2] = &m[k]->in[nin];
				s->p[0].flags |= OPT_F_UNSCALE;
			}
		}
	}
	/* Zero first: the kernel only ever stores 1.0. */
	z = gpu_rec_bind(lead->g, flag->alloc, 0, sizeof(zero), true);
	gpu_rec_update(rec, &z, &zero);
	r = ns ? record_segs(lead, rec, segs, ns) : 0;
	free(segs);
	return r;
}

/* Compiling fused elementwise members into a fused.comp program, and
 * recording it. */
#include "ops/fused.h"

#include <errno.h>
#include <string.h>

#include "dtype.h"
#include "gpu/device.h"
#include "status.h"

_Static_assert(sizeof(struct fused_push) == 128, "fused_push must mirror FusedPush");
_Static_assert(FU_MAX_SLOTS <= GPU_MAX_BINDINGS, "a fused kernel binds every slot");

#define LIVE_FOREVER 0x7fffffff

/* How input `t` is indexed in the space of `out` (FU_FULL, FU_SCALAR, or
 * FU_SUFFIX with *mod its element count); -1 when none fits. */
static int input_mode(const struct op_tensor *t, const struct op_tensor *out, uint64_t *mod)
{
	unsigned d = 0;

	if (t->count == out->count)
		return FU_FULL; /* it broadcasts to out with as many elements: same layout */
	if (t->count == 1)
		return FU_SCALAR;
	if (t->rank > out->rank)
		return -1;
	while (d < t->rank && t->shape[d] == 1)
		d++;
	for (; d < t->rank; d++)
		if (t->shape[d] != out->shape[out->rank - t->rank + d])
			return -1;
	*mod = t->count;
	return FU_SUFFIX;
}

/* Program operand for member value / slot reference `src` (see fused_member). */
static int value_index(int src, unsigned nin)
{
	return src < 0 ? -1 - src : (int)nin + src;
}

/* A constant's operand number, reusing an equal one; a new one must stay
 * clear of instruction `j` and those before it. */
static int konst_operand(struct fused_push *pc, unsigned *nconst, float f, unsigned j)
{
	uint32_t bits;

	memcpy(&bits, &f, sizeof(bits));
	for (unsigned k = 0; k < *nconst; k++)
		if (pc->w[FU_MAX_WORDS - 1 - k] == bits)
			return FU_MAX_REGS + (int)k;
	if (*nconst == FU_MAX_CONSTS || FU_MAX_WORDS - 1 - *nconst <= j)
		return -1;
	pc->w[FU_MAX_WORDS - 1 - *nconst] = bits;
	return FU_MAX_REGS + (int)(*nconst)++;
}

static int lowest_free(uint32_t used)
{
	for (int r = 0; r < FU_MAX_REGS; r++)
		if (!(used & (1u << r)))
			return r;
	return -1;
}

int fused_compile(const struct fused_member *m, unsigned n, const struct op_tensor *in, unsigned nin,
		  const struct op_tensor *out, struct fused_kernel *ret)
{
	/* Values: the input slots, then the members; last use and register of each. */
	int last[FU_MAX_SLOTS + FU_MAX_WORDS], reg[FU_MAX_SLOTS + FU_MAX_WORDS];
	struct fused_kernel k;
	unsigned nconst = 0, nout = 0;
	uint32_t used = 0;
	uint64_t mod = 0;

	if (n == 0 || n > FU_MAX_WORDS || nin > FU_MAX_SLOTS || out->count == 0 ||
	    out->count > UINT32_MAX / 2)
		return -E2BIG;
	memset(&k, 0, sizeof(k));
	k.dtype = m[0].desc.dtype;
	k.count = out->count;
	k.nin = nin;
	k.pc.n = (uint32_t)out->count;
	for (unsigned s = 0; s < nin; s++) {
		uint64_t mm = 0;
		int mode = input_mode(&in[s], out, &mm);

		if (mode < 0 || (in[s].dtype != k.dtype && in[s].dtype != TDP_DTYPE_U8))
			return -E2BIG;
		if (mode == FU_SUFFIX) {
			if (mod && mm != mod)
				return -E2BIG; /* one modulus per kernel */
			mod = mm;
		}
		k.pc.modes |= (uint32_t)mode << (2 * s);
		if (in[s].dtype == TDP_DTYPE_U8)
			k.pc.info |= 1u << (13 + s);
		k.slot[s] = in[s];
		reg[s] = (int)s;
		used |= 1u << s;
		last[s] = -1;
	}
	k.pc.modulus = (uint32_t)mod;
	if (mod > 1) {
		/* i / mod as (umulhi(i, magic) + i) >> shift, exact for i < 2^31. */
		unsigned l = 0;

		while ((1ull << l) < mod)
			l++;
		k.pc.magic = (uint32_t)(((1ull << 32) * ((1ull << l) - mod)) / mod + 1);
		k.pc.info |= (uint32_t)l << 21;
	}
	for (unsigned j = 0; j < n; j++) {
		last[nin + j] = m[j].store ? LIVE_FOREVER : -1;
		if (m[j].store)
			nout++;
		for (unsigned a = 0; a < 3; a++) {
			int op = m[j].desc.operand[a];
			int v;

			if (op < 0)
				continue;
			v = value_index(m[j].src[op], nin);
			if (v >= (int)(nin + j) || v < 0)
				return -E2BIG; /* not in execution order: a planner bug */
			if (last[v] != LIVE_FOREVER)
				last[v] = (int)j;
		}
	}
	if (nin + nout > FU_MAX_SLOTS)
		return -E2BIG;
	for (unsigned j = 0; j < n; j++) {
		const struct ew_desc *d = &m[j].desc;
		int opnd[3];
		int dst;

		if (j + nconst >= FU_MAX_WORDS)
			return -E2BIG; /* no room for this instruction */
		for (unsigned a = 0; a < 3; a++) {
			opnd[a] = d->operand[a] < 0 ? konst_operand(&k.pc, &nconst, d->konst[a], j) :
						     reg[value_index(m[j].src[d->operand[a]], nin)];
			if (opnd[a] < 0)
				return -E2BIG;
		}
		/* Registers whose value dies here may hold the result. */
		for (unsigned v = 0; v < nin + j; v++)
			if (last[v] == (int)j)
				used &= ~(1u << reg[v]);
		dst = lowest_free(used);
		if (dst < 0)
			return -E2BIG;
		if (last[nin + j] != -1)
			used |= 1u << dst; /* a result nobody reads needs no register after this */
		reg[nin + j] = dst;
		k.pc.w[j] = d->opcode | (uint32_t)dst << 6 | (uint32_t)opnd[0] << 10 |
			    (uint32_t)opnd[1] << 15 | (uint32_t)opnd[2] << 20;
		if (m[j].store) {
			k.pc.outregs |= (uint32_t)dst << (4 * k.nout);
			k.slot[nin + k.nout] = *out;
			k.slot[nin + k.nout].dtype = d->u8_out ? TDP_DTYPE_U8 : k.dtype;
			if (d->u8_out)
				k.pc.info |= 1u << (13 + nin + k.nout);
			k.nout++;
		}
	}
	if (n + nconst > FU_MAX_WORDS)
		return -E2BIG;
	k.pc.info |= n | nin << 5 | k.nout << 9;
	for (unsigned s = nin; s < nin + k.nout; s++) {
		k.slot[s].alloc = NULL;
		if (op_tensor_sizes(&k.slot[s]) < 0)
			return -E2BIG;
	}
	*ret = k;
	return 0;
}

int fused_record(struct op_ctx *ctx, const struct fused_kernel *k, struct gpu_recorder *rec)
{
	static const struct gpu_alloc none;
	struct gpu_binding bind[FU_MAX_SLOTS];
	const struct gpu_pipeline *p;

	for (unsigned s = 0; s < FU_MAX_SLOTS; s++) {
		if (s >= k->nin + k->nout)
			bind[s] = gpu_rec_bind(ctx->g, &none, 0, 0, false);
		else if (op_bind(ctx, &k->slot[s], s >= k->nin, &bind[s]) < 0)
			return -1;
	}
	if (op_pipeline(ctx, "fused", tdp_dtype_name(k->dtype), &p) < 0)
		return -1;
	return op_dispatch(ctx, rec, p, bind, FU_MAX_SLOTS, &k->pc, sizeof(k->pc),
			   (k->count + 256 * FU_PER_INVOCATION - 1) / (256 * FU_PER_INVOCATION) * 256, 256);
}

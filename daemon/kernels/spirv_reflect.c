#include "kernels/spirv_reflect.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SPV_MAGIC 0x07230203u
#define MAX_ID_BOUND ((uint32_t)1 << 20)
#define MAX_TYPE_DEPTH 16

enum {
	OP_NAME = 5, OP_MEMBER_NAME = 6, OP_ENTRY_POINT = 15, OP_EXECUTION_MODE = 16,
	OP_TYPE_BOOL = 20, OP_TYPE_INT = 21, OP_TYPE_FLOAT = 22, OP_TYPE_VECTOR = 23,
	OP_TYPE_MATRIX = 24, OP_TYPE_ARRAY = 28, OP_TYPE_RUNTIME_ARRAY = 29, OP_TYPE_STRUCT = 30,
	OP_TYPE_POINTER = 32, OP_CONSTANT = 43, OP_CONSTANT_COMPOSITE = 44, OP_SPEC_CONSTANT = 50,
	OP_SPEC_CONSTANT_COMPOSITE = 51, OP_SPEC_CONSTANT_OP = 52, OP_VARIABLE = 59, OP_DECORATE = 71,
	OP_MEMBER_DECORATE = 72, OP_EXECUTION_MODE_ID = 331,
};
enum { DEC_BLOCK = 2, DEC_BUFFER_BLOCK = 3, DEC_ARRAY_STRIDE = 6, DEC_BUILTIN = 11,
       DEC_NON_WRITABLE = 24, DEC_BINDING = 33, DEC_SET = 34, DEC_OFFSET = 35 };
enum { BUILTIN_WORKGROUP_SIZE = 25 };
enum { SC_UNIFORM_CONSTANT = 0, SC_UNIFORM = 2, SC_WORKGROUP = 4, SC_PRIVATE = 6, SC_FUNCTION = 7,
       SC_PUSH_CONSTANT = 9, SC_STORAGE_BUFFER = 12 };
enum { MODE_LOCAL_SIZE = 17, MODE_LOCAL_SIZE_ID = 38, MODEL_GLCOMPUTE = 5 };

/* What is known about one id. */
struct id_info {
	uint16_t op;            /* defining opcode, 0: none */
	uint32_t a, b, c;       /* operands after the result id, by opcode */
	uint32_t first;         /* word index of the defining instruction */
	int32_t binding, set;   /* -1: not decorated */
	uint32_t stride;
	bool block, buffer_block, non_writable, workgroup_size;
	uint8_t sizing;         /* type_size: 1 in progress, 2 done */
	uint8_t nsizing;        /* natural_size: likewise */
	int64_t size, nsize;
	uint32_t root;          /* the storage-buffer variable a pointer derives from */
	bool written;           /* (variables) something writes through it */
};

struct parser {
	const uint32_t *w;
	size_t n;
	uint32_t bound;
	struct id_info *ids;
	const struct spv_limits *lim;
	char *why;
	size_t cap;
	uint64_t work;          /* words walked by the rescans, bounded by MAX_WORK */
};

/* Rescans of the whole module are bounded so a hostile module costs at most
 * this many word visits. */
#define MAX_WORK ((uint64_t)1 << 27)

static bool spend(struct parser *p)
{
	p->work += p->n;
	return p->work <= MAX_WORK;
}

__attribute__((format(printf, 2, 3)))
static int fail(struct parser *p, const char *fmt, ...)
{
	va_list ap;

	if (p->cap) {
		va_start(ap, fmt);
		vsnprintf(p->why, p->cap, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

/* A literal string at words [at, end): copied into out (truncated), returns
 * the word after it or 0 when it is not terminated inside the instruction. */
static size_t get_string(const uint32_t *w, size_t at, size_t end, char *out, size_t cap)
{
	size_t k = 0;

	for (size_t i = at; i < end; i++) {
		for (unsigned b = 0; b < 4; b++) {
			char ch = (char)((w[i] >> (8 * b)) & 0xff);

			if (!ch) {
				if (cap)
					out[k < cap ? k : cap - 1] = '\0';
				return i + 1;
			}
			if (k + 1 < cap)
				out[k] = ch;
			k++;
		}
	}
	return 0;
}

static struct id_info *id_get(struct parser *p, uint32_t id)
{
	return id && id < p->bound ? &p->ids[id] : NULL;
}

/* Byte size of type `t`, or -1 when it has none we can compute. */
static int64_t type_size(struct parser *p, uint32_t t, unsigned depth);

static int64_t struct_size(struct parser *p, uint32_t t, unsigned depth, uint64_t *ret_rt_offset,
			   uint32_t *ret_rt_stride)
{
	struct id_info *s = id_get(p, t);
	size_t at, count;
	int64_t size = 0;

	if (!s || s->op != OP_TYPE_STRUCT)
		return -1;
	at = s->first;
	count = (p->w[at] >> 16) - 2;
	for (size_t m = 0; m < count; m++) {
		uint32_t mt = p->w[at + 2 + m];
		struct id_info *mi = id_get(p, mt);
		int64_t off = -1, ms;
		size_t i = 5;

		if (!spend(p))
			return -1;
		/* The member's Offset decoration. */
		while (i < p->n) {
			uint32_t len = p->w[i] >> 16, op = p->w[i] & 0xffff;

			if (op == OP_MEMBER_DECORATE && len >= 5 && p->w[i + 1] == t &&
			    p->w[i + 2] == m && p->w[i + 3] == DEC_OFFSET)
				off = p->w[i + 4];
			i += len;
		}
		if (off < 0)
			return -1;
		if (mi && mi->op == OP_TYPE_RUNTIME_ARRAY) {
			if (m + 1 != count || !ret_rt_offset || !mi->stride)
				return -1;
			*ret_rt_offset = (uint64_t)off;
			*ret_rt_stride = mi->stride;
			return off;
		}
		ms = type_size(p, mt, depth + 1);
		if (ms < 0)
			return -1;
		if (off + ms > size)
			size = off + ms;
	}
	return size;
}

static int64_t type_size(struct parser *p, uint32_t t, unsigned depth)
{
	struct id_info *ti = id_get(p, t), *len;
	int64_t e;

	if (!ti || depth > MAX_TYPE_DEPTH)
		return -1;
	switch (ti->op) {
	case OP_TYPE_INT:
	case OP_TYPE_FLOAT:
		return ti->a >= 8 && ti->a <= 64 && ti->a % 8 == 0 ? (int64_t)(ti->a / 8) : -1;
	case OP_TYPE_VECTOR:
	case OP_TYPE_MATRIX:
		e = type_size(p, ti->a, depth + 1);
		return e < 0 || ti->b > 16 ? -1 : e * ti->b;
	case OP_TYPE_ARRAY:
		len = id_get(p, ti->b);
		if (!len || len->op != OP_CONSTANT || !ti->stride || len->b > (1u << 24))
			return -1;
		return (int64_t)ti->stride * len->b;
	case OP_TYPE_STRUCT:
		if (ti->sizing == 1)
			return -1;      /* a cycle */
		if (ti->sizing == 0) {
			ti->sizing = 1;
			ti->size = struct_size(p, t, depth, NULL, NULL);
			ti->sizing = 2;
		}
		return ti->size;
	default:
		return -1;
	}
}

static int64_t natural_size(struct parser *p, uint32_t t, unsigned depth);
static enum spv_scalar scalar_of(struct parser *p, uint32_t t)
{
	struct id_info *ti = id_get(p, t);

	if (!ti || ti->a != 32)
		return SPV_SCALAR_OTHER;
	if (ti->op == OP_TYPE_FLOAT)
		return SPV_SCALAR_F32;
	if (ti->op == OP_TYPE_INT)
		return ti->b ? SPV_SCALAR_I32 : SPV_SCALAR_U32;
	return SPV_SCALAR_OTHER;
}

/* Whether every member of struct `t` is decorated NonWritable. */
static bool members_readonly(struct parser *p, uint32_t t)
{
	struct id_info *s = id_get(p, t);
	size_t count = (p->w[s->first] >> 16) - 2;
	uint32_t seen = 0;

	if (!spend(p))
		return false;
	for (size_t i = 5; i < p->n;) {
		uint32_t len = p->w[i] >> 16, op = p->w[i] & 0xffff;

		if (op == OP_MEMBER_DECORATE && len >= 4 && p->w[i + 1] == t &&
		    p->w[i + 3] == DEC_NON_WRITABLE && p->w[i + 2] < 32)
			seen |= 1u << p->w[i + 2];
		i += len;
	}
	return count > 0 && count <= 32 && seen == (count == 32 ? 0xffffffffu : (1u << count) - 1);
}

static int push_block(struct parser *p, uint32_t t, struct spv_info *info)
{
	struct id_info *s = id_get(p, t);
	int64_t size;
	size_t count;

	if (!s || s->op != OP_TYPE_STRUCT)
		return fail(p, "the push-constant block is not a struct");
	size = struct_size(p, t, 0, NULL, NULL);
	if (size < 0)
		return fail(p, "the push-constant block has members without a known size or offset");
	if (size > SPV_MAX_PUSH_BYTES)
		return fail(p, "the push-constant block is %lld bytes, more than %d",
			    (long long)size, SPV_MAX_PUSH_BYTES);
	info->push_bytes = (uint32_t)size;
	count = (p->w[s->first] >> 16) - 2;
	if (count > SPV_MAX_PUSH_MEMBERS)
		return fail(p, "the push-constant block has %zu members, more than %d", count,
			    SPV_MAX_PUSH_MEMBERS);
	info->npush = (unsigned)count;
	if (!spend(p))
		return fail(p, "the module is too complex");
	for (size_t m = 0; m < count; m++) {
		struct spv_push_member *pm = &info->push[m];

		snprintf(pm->name, sizeof(pm->name), "%zu", m);
		pm->type = scalar_of(p, p->w[s->first + 2 + m]);
	}
	for (size_t i = 5; i < p->n;) {
		uint32_t len = p->w[i] >> 16, op = p->w[i] & 0xffff;

		if (len >= 4 && p->w[i + 1] == t && p->w[i + 2] < count) {
			struct spv_push_member *pm = &info->push[p->w[i + 2]];

			if (op == OP_MEMBER_NAME)
				get_string(p->w, i + 3, i + len, pm->name, sizeof(pm->name));
			else if (op == OP_MEMBER_DECORATE && len >= 5 && p->w[i + 3] == DEC_OFFSET)
				pm->offset = p->w[i + 4];
		}
		i += len;
	}
	return 0;
}

static int variable(struct parser *p, uint32_t var, struct spv_info *info, uint32_t *seen)
{
	struct id_info *v = id_get(p, var), *ptr = id_get(p, v->a), *t;
	uint32_t sc = v->b;
	struct spv_binding *b;
	uint64_t rt_off = 0;
	uint32_t rt_stride = 0;
	int64_t size;

	if (sc != SC_UNIFORM && sc != SC_STORAGE_BUFFER && sc != SC_PUSH_CONSTANT &&
	    sc != SC_UNIFORM_CONSTANT)
		return 0;
	if (!ptr || ptr->op != OP_TYPE_POINTER || !(t = id_get(p, ptr->b)))
		return fail(p, "variable %%%u has no pointer type", var);
	if (sc == SC_PUSH_CONSTANT)
		return push_block(p, ptr->b, info);
	if (sc == SC_UNIFORM_CONSTANT)
		return fail(p, "variable %%%u is an image or sampler; tensord binds storage buffers only",
			    var);
	if (t->op != OP_TYPE_STRUCT || (sc == SC_UNIFORM && !t->buffer_block))
		return fail(p, "binding %d is a uniform buffer or not a block; tensord binds storage "
			    "buffers only", v->binding);
	if (v->set != 0 && v->set != -1)
		return fail(p, "binding %d is in descriptor set %d; only set 0 is bound", v->binding,
			    v->set);
	if (v->binding < 0 || v->binding >= SPV_MAX_BINDINGS)
		return fail(p, "storage buffer %%%u has binding %d; bindings must be 0..%d", var,
			    v->binding, SPV_MAX_BINDINGS - 1);
	if (*seen & (1u << v->binding))
		return fail(p, "binding %d is declared twice", v->binding);
	*seen |= 1u << v->binding;
	size = struct_size(p, ptr->b, 0, &rt_off, &rt_stride);
	if (size < 0)
		return fail(p, "binding %d: cannot size its block (missing Offset/ArrayStride, or a "
			    "runtime array not last)", v->binding);
	b = &info->bindings[v->binding];
	b->min_bytes = (uint64_t)size;
	b->stride = rt_stride;
	b->readonly = (v->non_writable || members_readonly(p, ptr->b)) && !v->written;
	return 0;
}

/* First pass: check every instruction's length and record ids and decorations. */
static int scan(struct parser *p)
{
	for (size_t i = 5; i < p->n;) {
		uint32_t len = p->w[i] >> 16, op = p->w[i] & 0xffff, r;
		struct id_info *d;

		if (len == 0 || len > p->n - i)
			return fail(p, "instruction at word %zu has a bad length", i);
		switch (op) {
		case OP_TYPE_BOOL: case OP_TYPE_INT: case OP_TYPE_FLOAT: case OP_TYPE_VECTOR:
		case OP_TYPE_MATRIX: case OP_TYPE_ARRAY: case OP_TYPE_RUNTIME_ARRAY:
		case OP_TYPE_STRUCT: case OP_TYPE_POINTER:
			r = len >= 2 ? p->w[i + 1] : 0;
			goto define;
		case OP_CONSTANT: case OP_VARIABLE: case OP_SPEC_CONSTANT:
		case OP_CONSTANT_COMPOSITE: case OP_SPEC_CONSTANT_COMPOSITE: case OP_SPEC_CONSTANT_OP:
			r = len >= 3 ? p->w[i + 2] : 0;
define:
			d = id_get(p, r);
			if (!d)
				return fail(p, "instruction at word %zu defines id %u outside the bound", i, r);
			if (d->op)
				return fail(p, "id %u is defined twice", r);
			d->op = (uint16_t)op;
			d->first = (uint32_t)i;
			if (op == OP_CONSTANT || op == OP_SPEC_CONSTANT) {
				/* a: result type; b: value, c: its high word */
				d->a = p->w[i + 1];
				d->b = len >= 4 ? p->w[i + 3] : 0;
				d->c = len >= 5 ? p->w[i + 4] : 0;
			} else if (op >= OP_CONSTANT_COMPOSITE || op == OP_VARIABLE) {
				/* a: result type; b: storage class or first constituent */
				d->a = p->w[i + 1];
				d->b = len >= 4 ? p->w[i + 3] : 0;
			} else {
				d->a = len >= 3 ? p->w[i + 2] : 0;
				d->b = len >= 4 ? p->w[i + 3] : 0;
				d->c = len >= 5 ? p->w[i + 4] : 0;
			}
			if (op == OP_VARIABLE && len < 4)
				return fail(p, "OpVariable at word %zu is too short", i);
			break;
		case OP_DECORATE:
			if (len < 3 || !(d = id_get(p, p->w[i + 1])))
				return fail(p, "OpDecorate at word %zu names a bad id", i);
			switch (p->w[i + 2]) {
			case DEC_BLOCK: d->block = true; break;
			case DEC_BUFFER_BLOCK: d->buffer_block = true; break;
			case DEC_NON_WRITABLE: d->non_writable = true; break;
			case DEC_BUILTIN:
				d->workgroup_size = len >= 4 && p->w[i + 3] == BUILTIN_WORKGROUP_SIZE;
				break;
			case DEC_BINDING:
			case DEC_SET:
			case DEC_ARRAY_STRIDE:
				if (len < 4)
					return fail(p, "OpDecorate at word %zu is too short", i);
				if (p->w[i + 2] == DEC_ARRAY_STRIDE)
					d->stride = p->w[i + 3];
				else if (p->w[i + 3] > 1u << 20)
					return fail(p, "binding or set %u is out of range", p->w[i + 3]);
				else if (p->w[i + 2] == DEC_BINDING)
					d->binding = (int32_t)p->w[i + 3];
				else
					d->set = (int32_t)p->w[i + 3];
				break;
			}
			break;
		}
		i += len;
	}
	return 0;
}

static int workgroup_size(struct parser *p, struct spv_info *info);

static int entry_point(struct parser *p, const char *entry, struct spv_info *info)
{
	uint32_t eid = 0;
	bool sized = false;

	for (size_t i = 5; i < p->n; i += p->w[i] >> 16) {
		uint32_t len = p->w[i] >> 16, op = p->w[i] & 0xffff;
		char name[SPV_MAX_NAME + 2];

		if (op == OP_ENTRY_POINT && len >= 4 && p->w[i + 1] == MODEL_GLCOMPUTE &&
		    get_string(p->w, i + 3, i + len, name, sizeof(name)) && !strcmp(name, entry))
			eid = p->w[i + 2];
	}
	if (!eid)
		return fail(p, "no GLCompute entry point named \"%s\"", entry);
	snprintf(info->entry, sizeof(info->entry), "%s", entry);
	for (size_t i = 5; i < p->n; i += p->w[i] >> 16) {
		uint32_t len = p->w[i] >> 16, op = p->w[i] & 0xffff;

		if (len < 6 || p->w[i + 1] != eid)
			continue;
		if (op == OP_EXECUTION_MODE && p->w[i + 2] == MODE_LOCAL_SIZE) {
			for (unsigned k = 0; k < 3; k++)
				info->local_size[k] = p->w[i + 3 + k];
			sized = true;
		} else if (op == OP_EXECUTION_MODE_ID && p->w[i + 2] == MODE_LOCAL_SIZE_ID) {
			for (unsigned k = 0; k < 3; k++) {
				struct id_info *c = id_get(p, p->w[i + 3 + k]);

				if (!c || (c->op != OP_CONSTANT && c->op != OP_SPEC_CONSTANT))
					return fail(p, "LocalSizeId names no constant");
				info->local_size[k] = c->b;
			}
			sized = true;
		}
	}
	if (!sized)
		return fail(p, "entry point \"%s\" declares no local size", entry);
	return workgroup_size(p, info);
}

/* A WorkgroupSize built-in (a constant composite; specialization constants
 * keep their defaults, as tensord specializes nothing) overrides LocalSize.
 * Then the size against the device's limits. */
static int workgroup_size(struct parser *p, struct spv_info *info)
{
	const struct spv_limits *lim = p->lim;
	uint64_t inv = 1;

	for (uint32_t id = 1; id < p->bound; id++) {
		struct id_info *c = &p->ids[id];

		if (!c->workgroup_size)
			continue;
		if (c->op != OP_CONSTANT_COMPOSITE && c->op != OP_SPEC_CONSTANT_COMPOSITE)
			return fail(p, "the WorkgroupSize built-in is not a constant composite");
		if ((p->w[c->first] >> 16) != 6)
			return fail(p, "the WorkgroupSize built-in does not have 3 components");
		for (unsigned k = 0; k < 3; k++) {
			struct id_info *e = id_get(p, p->w[c->first + 3 + k]);

			if (!e || (e->op != OP_CONSTANT && e->op != OP_SPEC_CONSTANT))
				return fail(p, "the WorkgroupSize built-in has a component that is not a "
					    "constant tensord can read");
			info->local_size[k] = e->b;
		}
	}
	for (unsigned k = 0; k < 3; k++) {
		uint32_t max = lim && lim->max_wg[k] ? lim->max_wg[k] : (k < 2 ? 128u : 64u);

		if (!info->local_size[k] || info->local_size[k] > max)
			return fail(p, "local size %u %u %u: each must be 1..%u %u %u "
				    "(maxComputeWorkGroupSize)", info->local_size[0], info->local_size[1],
				    info->local_size[2],
				    lim && lim->max_wg[0] ? lim->max_wg[0] : 128,
				    lim && lim->max_wg[1] ? lim->max_wg[1] : 128,
				    lim && lim->max_wg[2] ? lim->max_wg[2] : 64);
		inv *= info->local_size[k];
	}
	if (inv > (lim && lim->max_invocations ? lim->max_invocations : 128))
		return fail(p, "local size %u %u %u is %llu invocations, more than the device's %u "
			    "(maxComputeWorkGroupInvocations)", info->local_size[0], info->local_size[1],
			    info->local_size[2], (unsigned long long)inv,
			    lim && lim->max_invocations ? lim->max_invocations : 128);
	return 0;
}

#define SIZE_CAP ((int64_t)1 << 40)

/* Bytes a value of type `t` takes without explicit layout (Workgroup,
 * Private, Function variables and SSA values): an upper bound of what a
 * driver lays out, saturating at SIZE_CAP; -1 for a size that is not a
 * constant tensord can read (an array sized by OpSpecConstantOp). */
static int64_t natural_size(struct parser *p, uint32_t t, unsigned depth)
{
	struct id_info *ti = id_get(p, t), *len;
	int64_t e, total = 0, n;
	size_t count;

	if (!ti || depth > MAX_TYPE_DEPTH)
		return -1;
	if (ti->nsizing == 2)
		return ti->nsize;
	if (ti->nsizing == 1)
		return -1;
	ti->nsizing = 1;
	switch (ti->op) {
	case OP_TYPE_BOOL:
		total = 4;
		break;
	case OP_TYPE_INT:
	case OP_TYPE_FLOAT:
		total = ti->a <= 64 ? (int64_t)(ti->a + 7) / 8 : -1;
		break;
	case OP_TYPE_POINTER:
		total = 8;
		break;
	case OP_TYPE_VECTOR:
	case OP_TYPE_MATRIX:
		e = natural_size(p, ti->a, depth + 1);
		/* a 3-vector takes 4 slots */
		total = e < 0 || ti->b > 16 ? -1 : e * (ti->b == 3 ? 4 : ti->b);
		break;
	case OP_TYPE_ARRAY:
		len = id_get(p, ti->b);
		e = natural_size(p, ti->a, depth + 1);
		if (!len || (len->op != OP_CONSTANT && len->op != OP_SPEC_CONSTANT) || e < 0) {
			total = -1;
			break;
		}
		n = len->c ? SIZE_CAP : (int64_t)len->b;
		total = e && n > SIZE_CAP / e ? SIZE_CAP : e * n;
		break;
	case OP_TYPE_RUNTIME_ARRAY:
		total = 0;              /* only in storage buffers, which are bound */
		break;
	case OP_TYPE_STRUCT:
		count = (p->w[ti->first] >> 16) - 2;
		for (size_t m = 0; m < count && total >= 0; m++) {
			e = natural_size(p, p->w[ti->first + 2 + m], depth + 1);
			/* members aligned to 16 bytes at most */
			total = e < 0 ? -1 : total + (e + 15) / 16 * 16;
			if (total > SIZE_CAP)
				total = SIZE_CAP;
		}
		break;
	default:
		total = 0;
		break;
	}
	ti->nsize = total;
	ti->nsizing = 2;
	return total;
}

/* Opcodes whose result is a value held in registers or spilled per
 * invocation: its size is bounded like a variable's. */
static bool value_op(uint32_t op)
{
	switch (op) {
	case 1: case 44: case 46: case 51: case 55: case 57: case 61: case 80: case 82: case 83:
	case 169: case 245: case 400:
		return true;
	default:
		return false;
	}
}

/* Workgroup memory against the device, Function and Private variables and
 * every value against tensord's bounds: a huge array crashes drivers. */
static int memory(struct parser *p, struct spv_info *info)
{
	uint32_t max_shared = p->lim && p->lim->max_shared ? p->lim->max_shared : 16384;
	uint64_t shared = 0, priv = 0;

	for (size_t i = 5; i < p->n; i += p->w[i] >> 16) {
		uint32_t len = p->w[i] >> 16, op = p->w[i] & 0xffff;
		struct id_info *t;
		int64_t size;

		if (op == OP_VARIABLE && len >= 4 &&
		    (p->w[i + 3] == SC_WORKGROUP || p->w[i + 3] == SC_PRIVATE ||
		     p->w[i + 3] == SC_FUNCTION)) {
			t = id_get(p, p->w[i + 1]);
			size = t && t->op == OP_TYPE_POINTER ? natural_size(p, t->b, 0) : -1;
			if (size < 0)
				return fail(p, "variable %%%u has a size tensord cannot bound", p->w[i + 2]);
			if (p->w[i + 3] == SC_WORKGROUP)
				shared += (uint64_t)size;
			else
				priv += (uint64_t)size;
			/* both stay below 2^40 * 2^20 variables */
		} else if (value_op(op) && len >= 3) {
			t = id_get(p, p->w[i + 1]);
			if (!t || t->op == OP_TYPE_POINTER)
				continue;
			size = natural_size(p, p->w[i + 1], 0);
			if (size < 0 || (uint64_t)size > SPV_MAX_VALUE_BYTES)
				return fail(p, "the value %%%u (opcode %u) takes more than %llu bytes",
					    p->w[i + 2], op, (unsigned long long)SPV_MAX_VALUE_BYTES);
		}
	}
	if (shared > max_shared)
		return fail(p, "shared (Workgroup) variables take %llu bytes, more than the device's "
			    "%u (maxComputeSharedMemorySize)", (unsigned long long)shared, max_shared);
	if (priv > SPV_MAX_PRIVATE_BYTES)
		return fail(p, "local (Function and Private) variables take %llu bytes, more than "
			    "tensord's %llu per invocation", (unsigned long long)priv,
			    (unsigned long long)SPV_MAX_PRIVATE_BYTES);
	info->shared_bytes = shared;
	info->private_bytes = priv;
	return 0;
}

static bool derive(struct parser *p, uint32_t res, uint32_t src)
{
	struct id_info *r = id_get(p, res), *s = id_get(p, src);

	if (!r || !s || !s->root || r->root)
		return false;
	r->root = s->root;
	return true;
}

static void mark(struct parser *p, uint32_t id)
{
	struct id_info *d = id_get(p, id);

	if (d && d->root)
		p->ids[d->root].written = true;
}

/* Which buffer variables the module writes, whatever it declares: every
 * pointer derived from a variable (access chains, copies, casts, phis and
 * selects, to a fixed point) and every instruction that may write through
 * one (stores, memory copies, atomics, extended instructions with pointer
 * operands, any function call it is passed to, a store or return of the
 * pointer itself) marks the variable. */
static int writes(struct parser *p)
{
	bool changed = true;

	for (uint32_t id = 1; id < p->bound; id++)
		if (p->ids[id].op == OP_VARIABLE &&
		    (p->ids[id].b == SC_STORAGE_BUFFER || p->ids[id].b == SC_UNIFORM))
			p->ids[id].root = id;
	while (changed) {
		if (!spend(p))
			return fail(p, "the module is too complex");
		changed = false;
		for (size_t i = 5; i < p->n; i += p->w[i] >> 16) {
			uint32_t len = p->w[i] >> 16, op = p->w[i] & 0xffff;

			if (len < 4)
				continue;
			switch (op) {
			case 65: case 66: case 67: case 70:     /* access chains */
			case 83: case 124: case 400:            /* copies, bitcast */
				changed |= derive(p, p->w[i + 2], p->w[i + 3]);
				break;
			case 169:                               /* OpSelect */
				for (uint32_t k = 4; k < len; k++)
					changed |= derive(p, p->w[i + 2], p->w[i + k]);
				break;
			case 245:                               /* OpPhi */
				for (uint32_t k = 3; k < len; k += 2)
					changed |= derive(p, p->w[i + 2], p->w[i + k]);
				break;
			}
		}
	}
	for (size_t i = 5; i < p->n; i += p->w[i] >> 16) {
		uint32_t len = p->w[i] >> 16, op = p->w[i] & 0xffff, from = 0;

		if (op == 63 || op == 64)               /* OpCopyMemory(Sized): the target */
			from = len >= 2 ? 1 : len;
		else if (op == 62 || op == 254)         /* OpStore: the target, and a pointer stored
							 * or returned escapes */
			from = 1;
		else if (op == 57)                      /* OpFunctionCall: the arguments */
			from = 4;
		else if (op == 12)                      /* OpExtInst (modf, frexp write) */
			from = 5;
		else if ((op >= 227 && op <= 242) || op == 318 || op == 319 ||
			 op == 5614 || op == 5615 || op == 6035) /* atomics */
			from = 1;
		else
			continue;
		for (uint32_t k = from; k < len && (op != 63 && op != 64 ? true : k == 1); k++)
			mark(p, p->w[i + k]);
	}
	return 0;
}

int spv_reflect(const uint32_t *words, size_t nwords, const char *entry,
		const struct spv_limits *lim, struct spv_info *ret, char *why, size_t cap)
{
	struct parser p = { .w = words, .n = nwords, .lim = lim, .why = why, .cap = cap };
	struct spv_info *info = NULL;
	uint32_t seen = 0;
	int r;

	if (cap)
		why[0] = '\0';
	if (!entry)
		entry = "main";
	if (!words || nwords < 5)
		return fail(&p, "%zu words is too short for a SPIR-V module", nwords);
	if (nwords > SPV_MAX_WORDS)
		return fail(&p, "the module is larger than %zu words", SPV_MAX_WORDS);
	if (words[0] != SPV_MAGIC)
		return fail(&p, "bad SPIR-V magic 0x%08x", words[0]);
	p.bound = words[3];
	if (p.bound == 0 || p.bound > MAX_ID_BOUND)
		return fail(&p, "id bound %u is out of range", p.bound);
	p.ids = calloc(p.bound, sizeof(*p.ids));
	info = calloc(1, sizeof(*info));
	if (!p.ids || !info) {
		r = -ENOMEM;
		goto out;
	}
	for (uint32_t i = 0; i < p.bound; i++)
		p.ids[i].binding = p.ids[i].set = -1;
	r = scan(&p);
	if (r < 0)
		goto out;
	/* Every length is now known to be in range: later passes may walk. */
	r = entry_point(&p, entry, info);
	if (r == 0)
		r = memory(&p, info);
	if (r == 0)
		r = writes(&p);
	if (r < 0)
		goto out;
	for (uint32_t id = 1; id < p.bound; id++) {
		if (p.ids[id].op != OP_VARIABLE)
			continue;
		r = variable(&p, id, info, &seen);
		if (r < 0)
			goto out;
	}
	while (info->nbindings < SPV_MAX_BINDINGS && (seen & (1u << info->nbindings)))
		info->nbindings++;
	if (seen != (info->nbindings ? (1u << info->nbindings) - 1 : 0)) {
		r = fail(&p, "storage-buffer bindings must be numbered 0..n-1 without gaps");
		goto out;
	}
	*ret = *info;
out:
	free(info);
	free(p.ids);
	return r;
}

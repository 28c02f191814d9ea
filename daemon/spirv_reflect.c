#include "spirv_reflect.h"

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
	OP_TYPE_POINTER = 32, OP_CONSTANT = 43, OP_VARIABLE = 59, OP_DECORATE = 71,
	OP_MEMBER_DECORATE = 72, OP_EXECUTION_MODE_ID = 331,
};
enum { DEC_BLOCK = 2, DEC_BUFFER_BLOCK = 3, DEC_ARRAY_STRIDE = 6, DEC_NON_WRITABLE = 24,
       DEC_BINDING = 33, DEC_SET = 34, DEC_OFFSET = 35 };
enum { SC_UNIFORM_CONSTANT = 0, SC_UNIFORM = 2, SC_PUSH_CONSTANT = 9, SC_STORAGE_BUFFER = 12 };
enum { MODE_LOCAL_SIZE = 17, MODE_LOCAL_SIZE_ID = 38, MODEL_GLCOMPUTE = 5 };

/* What is known about one id. */
struct id_info {
	uint16_t op;            /* defining opcode, 0: none */
	uint32_t a, b, c;       /* operands after the result id, by opcode */
	uint32_t first;         /* word index of the defining instruction */
	int32_t binding, set;   /* -1: not decorated */
	uint32_t stride;
	bool block, buffer_block, non_writable;
	uint8_t sizing;         /* type_size: 1 in progress, 2 done */
	int64_t size;
};

struct parser {
	const uint32_t *w;
	size_t n;
	uint32_t bound;
	struct id_info *ids;
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
	b->readonly = v->non_writable || members_readonly(p, ptr->b);
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
		case OP_CONSTANT: case OP_VARIABLE:
			r = len >= 3 ? p->w[i + 2] : 0;
define:
			d = id_get(p, r);
			if (!d)
				return fail(p, "instruction at word %zu defines id %u outside the bound", i, r);
			if (d->op)
				return fail(p, "id %u is defined twice", r);
			d->op = (uint16_t)op;
			d->first = (uint32_t)i;
			if (op == OP_CONSTANT || op == OP_VARIABLE) {
				/* a: result type; b: value or storage class */
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

				if (!c || c->op != OP_CONSTANT)
					return fail(p, "LocalSizeId names no constant");
				info->local_size[k] = c->b;
			}
			sized = true;
		}
	}
	if (!sized)
		return fail(p, "entry point \"%s\" declares no local size", entry);
	for (unsigned k = 0; k < 3; k++)
		if (!info->local_size[k] || info->local_size[k] > 1024)
			return fail(p, "local size %u %u %u is out of range", info->local_size[0],
				    info->local_size[1], info->local_size[2]);
	return 0;
}

int spv_reflect(const uint32_t *words, size_t nwords, const char *entry, struct spv_info *ret,
		char *why, size_t cap)
{
	struct parser p = { .w = words, .n = nwords, .why = why, .cap = cap };
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

/* tensorctl kernel create|run|ls|rm: clients' own compute kernels
 * (docs/kernels.md), through tensord_call_raw. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctl_cmd.h"
#include "json.h"
#include "methods.h"
#include "name.h"
#include "pack.h"

#define KERNEL_FILE_MAX ((size_t)4 << 20)


static const msgpack_object *get(const msgpack_object *map, const char *key)
{
	size_t n = strlen(key);

	for (uint32_t i = 0; map->type == MSGPACK_OBJECT_MAP && i < map->via.map.size; i++) {
		const msgpack_object *k = &map->via.map.ptr[i].key;

		if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == n && !memcmp(k->via.str.ptr, key, n))
			return &map->via.map.ptr[i].val;
	}
	return NULL;
}

static unsigned long long uint_of(const msgpack_object *o)
{
	return o && o->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? (unsigned long long)o->via.u64 : 0;
}

/* One kernel's description, for people. */
static void print_kernel(const msgpack_object *k)
{
	const msgpack_object *name = get(k, "name"), *ls = get(k, "local_size"), *b = get(k, "bindings"),
			     *p = get(k, "push");

	if (name && name->type == MSGPACK_OBJECT_STR)
		printf("%.*s", (int)name->via.str.size, name->via.str.ptr);
	if (ls && ls->type == MSGPACK_OBJECT_ARRAY && ls->via.array.size == 3)
		printf("  local size %llux%llux%llu", uint_of(&ls->via.array.ptr[0]),
		       uint_of(&ls->via.array.ptr[1]), uint_of(&ls->via.array.ptr[2]));
	printf("  bindings:");
	for (uint32_t i = 0; b && b->type == MSGPACK_OBJECT_ARRAY && i < b->via.array.size; i++) {
		const msgpack_object *a = get(&b->via.array.ptr[i], "access");

		printf(" %u:%.*s", i, a && a->type == MSGPACK_OBJECT_STR ? (int)a->via.str.size : 1,
		       a && a->type == MSGPACK_OBJECT_STR ? a->via.str.ptr : "?");
	}
	if (p && p->type == MSGPACK_OBJECT_ARRAY && p->via.array.size) {
		printf("  push:");
		for (uint32_t i = 0; i < p->via.array.size; i++) {
			const msgpack_object *n = get(&p->via.array.ptr[i], "name"),
					     *t = get(&p->via.array.ptr[i], "type");

			if (n && t && n->type == MSGPACK_OBJECT_STR && t->type == MSGPACK_OBJECT_STR)
				printf(" %.*s(%.*s)", (int)n->via.str.size, n->via.str.ptr, (int)t->via.str.size,
				       t->via.str.ptr);
		}
	}
	putchar('\n');
}

/* Call `method` with the packed params in `sb`; print the result as JSON with
 * --json, else through `print`. */
static int call(struct ctl *c, const char *method, msgpack_sbuffer *sb,
		void (*print)(const msgpack_object *))
{
	msgpack_unpacked u;
	void *res = NULL;
	size_t len = 0;
	int status, r;

	if ((status = ctl_connect(c)) != CTL_EXIT_OK)
		return status;
	r = tensord_call_raw(c->td, method, sb->data, sb->size, &res, &len);
	if (r < 0)
		return ctl_call_failed(c, r);
	msgpack_unpacked_init(&u);
	if (msgpack_unpack_next(&u, res, len, NULL) != MSGPACK_UNPACK_SUCCESS) {
		status = ctl_error("%s: unreadable result", method);
	} else if (c->json) {
		ctl_json_msgpack(stdout, &u.data);
		fputc('\n', stdout);
	} else {
		print(&u.data);
	}
	msgpack_unpacked_destroy(&u);
	free(res);
	return status;
}

static void print_ls(const msgpack_object *res)
{
	const msgpack_object *ks = get(res, "kernels");

	for (uint32_t i = 0; ks && ks->type == MSGPACK_OBJECT_ARRAY && i < ks->via.array.size; i++)
		print_kernel(&ks->via.array.ptr[i]);
}

static void print_run(const msgpack_object *res)
{
	const msgpack_object *s = get(res, "seconds"), *g = get(res, "groups");

	printf("ran on %llux%llux%llu workgroups in %.3f ms\n",
	       g && g->type == MSGPACK_OBJECT_ARRAY && g->via.array.size == 3 ? uint_of(&g->via.array.ptr[0]) : 0,
	       g && g->type == MSGPACK_OBJECT_ARRAY && g->via.array.size == 3 ? uint_of(&g->via.array.ptr[1]) : 0,
	       g && g->type == MSGPACK_OBJECT_ARRAY && g->via.array.size == 3 ? uint_of(&g->via.array.ptr[2]) : 0,
	       s && s->type == MSGPACK_OBJECT_FLOAT64 ? s->via.f64 * 1e3 : 0.0);
}

static void print_deleted(const msgpack_object *res)
{
	(void)res;
}

static int check_name(const char *what, const char *name)
{
	if (!tdp_name_valid(name, strlen(name)))
		return ctl_usage_error("%s '%.64s' is not a valid name (1-%d bytes of A-Z a-z 0-9 . _ : / -)",
				       what, name, TENSORD_MAX_NAME_LEN);
	return CTL_EXIT_OK;
}

/* --groups X[,Y[,Z]] */
static int pack_groups(msgpack_packer *pk, const char *text)
{
	unsigned long long v[3];
	const char *p = text;
	unsigned n = 0;
	char *end;

	while (n < 3) {
		if (*p < '0' || *p > '9')
			break;
		errno = 0;
		v[n] = strtoull(p, &end, 10);
		if (errno || v[n] > UINT32_MAX)
			break;
		n++;
		p = end;
		if (*p != ',')
			break;
		p++;
	}
	if (!n || *p)
		return ctl_usage_error("--groups wants X[,Y[,Z]] (workgroup counts), not '%.32s'", text);
	if (msgpack_pack_array(pk, n))
		return ctl_error("out of memory");
	for (unsigned i = 0; i < n; i++)
		if (msgpack_pack_uint64(pk, v[i]))
			return ctl_error("out of memory");
	return CTL_EXIT_OK;
}

/* --push NAME=NUMBER... as a map. */
static int pack_push(msgpack_packer *pk, const char *const *pairs, int n)
{
	if (msgpack_pack_map(pk, (uint32_t)n))
		return ctl_error("out of memory");
	for (int i = 0; i < n; i++) {
		const char *eq = strchr(pairs[i], '=');
		char *end;
		double x;

		if (!eq || eq == pairs[i] || !eq[1])
			return ctl_usage_error("--push wants MEMBER=NUMBER, not '%.64s'", pairs[i]);
		errno = 0;
		x = strtod(eq + 1, &end);
		if (errno || *end)
			return ctl_usage_error("--push %.*s: '%.32s' is not a number", (int)(eq - pairs[i]),
					       pairs[i], eq + 1);
		if (tdp_pack_strn(pk, pairs[i], (size_t)(eq - pairs[i])))
			return ctl_error("out of memory");
		if (x == (double)(long long)x && x >= -2147483648.0 && x <= 4294967295.0 && !strpbrk(eq + 1, ".eE")
			    ? msgpack_pack_int64(pk, (long long)x)
			    : msgpack_pack_double(pk, x))
			return ctl_error("out of memory");
	}
	return CTL_EXIT_OK;
}

int ctl_cmd_kernel(struct ctl *c)
{
	const char *sub = c->pos[0];
	msgpack_sbuffer sb;
	msgpack_packer pk;
	int status = CTL_EXIT_OK;

	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	if ((c->nattrs || c->groups) && strcmp(sub, "run")) {
		status = ctl_usage_error("--push and --groups go with kernel run");
		goto out;
	}
	if (!strcmp(sub, "create")) {
		char *text = NULL;
		size_t len = 0;
		const char *dot;
		bool spirv;

		if (c->npos != 3) {
			status = ctl_usage_error("usage: tensorctl kernel create NAME FILE.comp|FILE.spv");
			goto out;
		}
		if ((status = check_name("kernel name", c->pos[1])) != CTL_EXIT_OK ||
		    (status = ctl_read_input(c->pos[2], KERNEL_FILE_MAX, &text, &len)) != CTL_EXIT_OK)
			goto out;
		dot = strrchr(c->pos[2], '.');
		spirv = (dot && !strcmp(dot, ".spv")) ||
			(len >= 4 && (uint8_t)text[0] == 0x03 && (uint8_t)text[1] == 0x02 &&
			 (uint8_t)text[2] == 0x23 && (uint8_t)text[3] == 0x07);
		if (msgpack_pack_map(&pk, 2) || tdp_pack_cstr(&pk, "name") || tdp_pack_cstr(&pk, c->pos[1]) ||
		    tdp_pack_cstr(&pk, spirv ? "spirv" : "glsl") ||
		    (spirv ? msgpack_pack_bin(&pk, len) || msgpack_pack_bin_body(&pk, text, len)
			   : tdp_pack_strn(&pk, text, len))) {
			free(text);
			status = ctl_error("out of memory");
			goto out;
		}
		free(text);
		status = call(c, TDP_METHOD_KERNEL_CREATE, &sb, print_kernel);
	} else if (!strcmp(sub, "run")) {
		if (c->npos < 2 || !c->groups) {
			status = ctl_usage_error("usage: tensorctl kernel run NAME TENSOR... --groups X[,Y[,Z]] "
						 "[--push MEMBER=NUMBER]...");
			goto out;
		}
		if ((status = check_name("kernel name", c->pos[1])) != CTL_EXIT_OK)
			goto out;
		for (int i = 2; i < c->npos; i++)
			if ((status = check_name("tensor name", c->pos[i])) != CTL_EXIT_OK)
				goto out;
		if (msgpack_pack_map(&pk, c->nattrs ? 4 : 3) || tdp_pack_cstr(&pk, "name") ||
		    tdp_pack_cstr(&pk, c->pos[1]) || tdp_pack_cstr(&pk, "tensors") ||
		    msgpack_pack_array(&pk, (uint32_t)(c->npos - 2))) {
			status = ctl_error("out of memory");
			goto out;
		}
		for (int i = 2; i < c->npos; i++)
			if (tdp_pack_cstr(&pk, c->pos[i])) {
				status = ctl_error("out of memory");
				goto out;
			}
		if (tdp_pack_cstr(&pk, "groups") || (status = pack_groups(&pk, c->groups)) != CTL_EXIT_OK)
			goto out;
		if (c->nattrs && (tdp_pack_cstr(&pk, "push") ||
				  (status = pack_push(&pk, c->attrs, c->nattrs)) != CTL_EXIT_OK))
			goto out;
		status = call(c, TDP_METHOD_KERNEL_RUN, &sb, print_run);
	} else if (!strcmp(sub, "ls")) {
		if (c->npos > 2) {
			status = ctl_usage_error("usage: tensorctl kernel ls [PREFIX]");
			goto out;
		}
		if (msgpack_pack_map(&pk, c->npos == 2) ||
		    (c->npos == 2 && (tdp_pack_cstr(&pk, "prefix") || tdp_pack_cstr(&pk, c->pos[1])))) {
			status = ctl_error("out of memory");
			goto out;
		}
		status = call(c, TDP_METHOD_KERNEL_LIST, &sb, print_ls);
	} else if (!strcmp(sub, "rm")) {
		if (c->npos != 2) {
			status = ctl_usage_error("usage: tensorctl kernel rm NAME");
			goto out;
		}
		if ((status = check_name("kernel name", c->pos[1])) != CTL_EXIT_OK)
			goto out;
		if (msgpack_pack_map(&pk, 1) || tdp_pack_cstr(&pk, "name") || tdp_pack_cstr(&pk, c->pos[1])) {
			status = ctl_error("out of memory");
			goto out;
		}
		status = call(c, TDP_METHOD_KERNEL_DELETE, &sb, print_deleted);
	} else {
		status = ctl_usage_error("kernel: unknown subcommand '%.32s' (create, run, ls, rm)", sub);
	}
out:
	msgpack_sbuffer_destroy(&sb);
	return status;
}

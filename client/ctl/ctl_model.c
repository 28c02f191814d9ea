/* tensorctl model define/ls/stat/rm (save and load are in ctl_save.c;
 * tensorctl.c checks a subcommand's arguments first), evaluate and
 * predict. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "ctl_cmd.h"
#include "dtype.h"
#include "json.h"
#include "name.h"
#include "pack.h"
#include "print.h"

#define CELL_MAX 300
#define LS_COLS 7

/* Unpack a result libtensord returned; on failure free it. */
static int unpack(void *res, size_t len, msgpack_unpacked *u)
{
	size_t off = 0;

	if (msgpack_unpack_next(u, res, len, &off) != MSGPACK_UNPACK_SUCCESS || u->data.type != MSGPACK_OBJECT_MAP)
		return ctl_error("malformed reply");
	return CTL_EXIT_OK;
}

/* Call `fn` with the packed `sb`, print the result as JSON with --json or
 * with `print` otherwise. */
static int call_and_print(struct ctl *c, int (*fn)(struct tensord *, const void *, size_t, void **, size_t *),
			  const msgpack_sbuffer *sb, int (*print)(struct ctl *, const msgpack_object *))
{
	msgpack_unpacked u;
	void *res = NULL;
	size_t len = 0;
	int r, status;

	if (!c->td && (status = ctl_connect(c)) != CTL_EXIT_OK)
		return status;
	if ((r = fn(c->td, sb->data, sb->size, &res, &len)) < 0)
		return ctl_call_failed(c, r);
	msgpack_unpacked_init(&u);
	if ((status = unpack(res, len, &u)) == CTL_EXIT_OK) {
		if (c->json && print != ctl_print_graph_result) {
			ctl_json_msgpack(stdout, &u.data);
			fputc('\n', stdout);
		} else {
			status = print(c, &u.data);
		}
	}
	msgpack_unpacked_destroy(&u);
	free(res);
	return status;
}

/* "name" of a map as a printable, bounded string. */
static void str_of(const msgpack_object *map, const char *key, char *buf, size_t cap)
{
	const msgpack_object *o = tdp_map_find(map, key);

	if (o && o->type == MSGPACK_OBJECT_STR)
		snprintf(buf, cap, "%.*s", (int)(o->via.str.size > cap - 1 ? cap - 1 : o->via.str.size), o->via.str.ptr);
	else
		snprintf(buf, cap, "-");
	for (char *p = buf; *p; p++)
		if ((unsigned char)*p < 0x20 || (unsigned char)*p == 0x7f)
			*p = '?';
}

/* A list of strings joined by ", ". */
static void join_of(const msgpack_object *map, const char *key, char *buf, size_t cap)
{
	const msgpack_object *o = tdp_map_find(map, key);
	size_t n = 0;

	buf[0] = '\0';
	for (uint32_t i = 0; o && o->type == MSGPACK_OBJECT_ARRAY && i < o->via.array.size && n + 1 < cap; i++) {
		const msgpack_object *s = &o->via.array.ptr[i];
		const msgpack_object *nm = s->type == MSGPACK_OBJECT_MAP ? tdp_map_find(s, "name") : s;

		if (nm && nm->type == MSGPACK_OBJECT_STR)
			n += (size_t)snprintf(buf + n, cap - n, "%s%.*s", i ? ", " : "",
					      (int)(nm->via.str.size > 64 ? 64 : nm->via.str.size), nm->via.str.ptr);
	}
	if (!buf[0])
		snprintf(buf, cap, "-");
}

/* An aligned table: `rows` x LS_COLS cells, the first row the heads. */
static void print_table(char (*cells)[LS_COLS][CELL_MAX], size_t rows, int ncols, const int *right)
{
	int width[LS_COLS] = { 0 };

	for (size_t r = 0; r < rows; r++)
		for (int k = 0; k < ncols; k++)
			if ((int)strlen(cells[r][k]) > width[k])
				width[k] = (int)strlen(cells[r][k]);
	for (size_t r = 0; r < rows; r++)
		for (int k = 0; k < ncols; k++)
			printf("%*s%s", k + 1 < ncols ? (right[k] ? width[k] : -width[k]) : 0, cells[r][k],
			       k + 1 < ncols ? "  " : "\n");
}

static int print_ls(struct ctl *c, const msgpack_object *res)
{
	static const int right[LS_COLS] = { 0, 1, 1, 1, 0, 0, 0 };
	const msgpack_object *models = tdp_map_find(res, "models");
	char (*cells)[LS_COLS][CELL_MAX];
	size_t n;

	(void)c;
	if (!models || models->type != MSGPACK_OBJECT_ARRAY)
		return ctl_error("malformed reply: no models");
	n = models->via.array.size;
	cells = calloc(n + 1, sizeof(*cells));
	if (!cells)
		return ctl_error("out of memory");
	strcpy(cells[0][0], "NAME");
	strcpy(cells[0][1], "STEP");
	strcpy(cells[0][2], "PARAMS");
	strcpy(cells[0][3], "SIZE");
	strcpy(cells[0][4], "LOSS NODE"); /* the node, not a loss value */
	strcpy(cells[0][5], "INPUTS");
	strcpy(cells[0][6], "OPTIMIZER");
	for (size_t i = 0; i < n; i++) {
		const msgpack_object *m = &models->via.array.ptr[i];
		const msgpack_object *o;
		uint64_t v;
		int64_t s;

		str_of(m, "name", cells[i + 1][0], CELL_MAX);
		o = tdp_map_find(m, "step");
		snprintf(cells[i + 1][1], CELL_MAX, "%" PRId64, o && tdp_obj_int(o, &s) == 0 ? s : 0);
		o = tdp_map_find(m, "params");
		snprintf(cells[i + 1][2], CELL_MAX, "%" PRIu64, o && tdp_obj_uint(o, &v) == 0 ? v : 0);
		o = tdp_map_find(m, "bytes");
		ctl_format_size(cells[i + 1][3], CELL_MAX, o && tdp_obj_uint(o, &v) == 0 ? v : 0);
		str_of(m, "loss", cells[i + 1][4], CELL_MAX);
		join_of(m, "inputs", cells[i + 1][5], CELL_MAX);
		str_of(m, "optimizer", cells[i + 1][6], CELL_MAX);
	}
	print_table(cells, n + 1, LS_COLS, right);
	free(cells);
	return CTL_EXIT_OK;
}

static int print_stat(struct ctl *c, const msgpack_object *res)
{
	static const int right[LS_COLS] = { 0, 0, 0, 1, 0, 0, 0 };
	const msgpack_object *def = tdp_map_find(res, "definition"), *params = tdp_map_find(res, "params");
	const msgpack_object *state = tdp_map_find(res, "state"), *o;
	char buf[CELL_MAX], (*cells)[LS_COLS][CELL_MAX];
	uint64_t v;
	int64_t s;
	size_t n;

	(void)c;
	if (!def || def->type != MSGPACK_OBJECT_MAP || !params || params->type != MSGPACK_OBJECT_ARRAY ||
	    !state || state->type != MSGPACK_OBJECT_ARRAY)
		return ctl_error("malformed reply: no definition, params or state");
	str_of(res, "name", buf, sizeof(buf));
	printf("model      %s\n", buf);
	o = tdp_map_find(res, "step");
	printf("step       %" PRId64 "\n", o && tdp_obj_int(o, &s) == 0 ? s : 0);
	/* A layer model: the loss may be {type, target}; the expanded graph
	 * and its outputs are in the result, not in the definition as given. */
	o = tdp_map_find(def, "loss");
	if (o && o->type == MSGPACK_OBJECT_MAP) {
		char tgt[CELL_MAX];

		str_of(o, "type", buf, sizeof(buf));
		str_of(o, "target", tgt, sizeof(tgt));
		printf("loss       %s (target %s)\n", buf, tgt);
	} else {
		str_of(def, "loss", buf, sizeof(buf));
		printf("loss       %s\n", buf);
	}
	join_of(def, "inputs", buf, sizeof(buf));
	printf("inputs     %s\n", buf);
	join_of(tdp_map_find(def, "outputs") ? def : res, "outputs", buf, sizeof(buf));
	printf("outputs    %s\n", buf);
	if ((o = tdp_map_find(res, "layers")) && o->type == MSGPACK_OBJECT_ARRAY)
		printf("layers     %u (%" PRIu64 " parameter elements)\n", o->via.array.size,
		       tdp_obj_uint(tdp_map_find(res, "param_count") ? tdp_map_find(res, "param_count") : o, &v) == 0 ? v : 0);
	o = tdp_map_find(res, "nodes") ? tdp_map_find(res, "nodes") : tdp_map_find(def, "nodes");
	printf("nodes      %u\n", o && o->type == MSGPACK_OBJECT_ARRAY ? o->via.array.size : 0);
	/* Shown when not the default f32 (docs/training.md, "Mixed precision"). */
	str_of(res, "precision", buf, sizeof(buf));
	if (strcmp(buf, "-") && strcmp(buf, "f32"))
		printf("precision  %s (products on %s operands, f32 master weights)\n", buf, buf);
	fputs("optimizer  ", stdout);
	if ((o = tdp_map_find(def, "optimizer")))
		ctl_json_msgpack(stdout, o);
	else
		fputs("none (train.step computes gradients only; train.run uses SGD lr 0.01)", stdout);
	o = tdp_map_find(res, "bytes");
	ctl_format_size(buf, sizeof(buf), o && tdp_obj_uint(o, &v) == 0 ? v : 0);
	printf("\nsize       %s (parameters and optimizer state)\n\n", buf);
	n = params->via.array.size + state->via.array.size;
	cells = calloc(n + 1, sizeof(*cells));
	if (!cells)
		return ctl_error("out of memory");
	strcpy(cells[0][0], "TENSOR");
	strcpy(cells[0][1], "ROLE");
	strcpy(cells[0][2], "DTYPE");
	strcpy(cells[0][3], "SHAPE");
	for (uint32_t i = 0; i < params->via.array.size; i++) {
		const msgpack_object *p = &params->via.array.ptr[i], *sh = tdp_map_find(p, "shape");
		uint64_t shape[TENSORD_MAX_RANK];
		uint32_t rank = 0;

		str_of(p, "name", cells[i + 1][0], CELL_MAX);
		strcpy(cells[i + 1][1], "param");
		str_of(p, "dtype", cells[i + 1][2], CELL_MAX);
		if (sh && sh->type == MSGPACK_OBJECT_ARRAY && sh->via.array.size <= TENSORD_MAX_RANK) {
			for (rank = 0; rank < sh->via.array.size; rank++)
				if (tdp_obj_uint(&sh->via.array.ptr[rank], &shape[rank]) < 0)
					break;
			ctl_format_shape(cells[i + 1][3], CELL_MAX, rank, shape);
		} else {
			strcpy(cells[i + 1][3], "(not stored)");
		}
	}
	for (uint32_t i = 0; i < state->via.array.size; i++) {
		char (*row)[CELL_MAX] = cells[1 + params->via.array.size + i];
		const msgpack_object *nm = &state->via.array.ptr[i];

		snprintf(row[0], CELL_MAX, "%.*s", nm->type == MSGPACK_OBJECT_STR ? (int)(nm->via.str.size > 255 ? 255 : nm->via.str.size) : 0,
			 nm->type == MSGPACK_OBJECT_STR ? nm->via.str.ptr : "");
		strcpy(row[1], "state");
		strcpy(row[2], "-");
		strcpy(row[3], "-");
		/* State has its parameter's dtype and shape (the daemon enforces it). */
		for (uint32_t p = 0; p < params->via.array.size; p++) {
			size_t pl = strlen(cells[p + 1][0]);

			if (!strncmp(row[0], cells[p + 1][0], pl) && row[0][pl] == '.') {
				strcpy(row[2], cells[p + 1][2]);
				strcpy(row[3], cells[p + 1][3]);
			}
		}
	}
	print_table(cells, n + 1, 4, right);
	free(cells);
	return CTL_EXIT_OK;
}

static int list_raw(struct tensord *td, const void *p, size_t len, void **res, size_t *rlen)
{
	(void)p;
	(void)len;
	return tensord_model_list_raw(td, res, rlen);
}

/* `p`: the model's name (NUL-terminated). */
static int stat_raw(struct tensord *td, const void *p, size_t len, void **res, size_t *rlen)
{
	(void)len;
	return tensord_model_stat_raw(td, p, res, rlen);
}

/* model define NAME FILE.json [--replace] */
int ctl_cmd_model_define(struct ctl *c, const char *name, const char *path)
{
	msgpack_sbuffer file, extra, sb;
	msgpack_packer pk;
	msgpack_unpacked u, ue;
	size_t off = 0, offe = 0;
	int status;

	msgpack_sbuffer_init(&file);
	msgpack_sbuffer_init(&extra);
	msgpack_sbuffer_init(&sb);
	msgpack_unpacked_init(&u);
	msgpack_unpacked_init(&ue);
	if ((status = ctl_read_json_map(path, "{\"nodes\": [...], \"loss\", \"params\", ...}", &file)) != CTL_EXIT_OK)
		goto out;
	msgpack_packer_init(&pk, &extra, msgpack_sbuffer_write);
	if (msgpack_pack_map(&pk, (c->replace ? 2 : 1) + (c->precision ? 1 : 0)) || tdp_pack_cstr(&pk, "name") ||
	    tdp_pack_cstr(&pk, name) || (c->replace && (tdp_pack_cstr(&pk, "replace") || msgpack_pack_true(&pk))) ||
	    (c->precision && (tdp_pack_cstr(&pk, "precision") || tdp_pack_cstr(&pk, c->precision))) ||
	    msgpack_unpack_next(&u, file.data, file.size, &off) != MSGPACK_UNPACK_SUCCESS ||
	    msgpack_unpack_next(&ue, extra.data, extra.size, &offe) != MSGPACK_UNPACK_SUCCESS) {
		status = ctl_error("out of memory");
		goto out;
	}
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	if (ctl_pack_merged(&pk, &u.data, &ue.data)) {
		status = ctl_error("out of memory");
		goto out;
	}
	status = call_and_print(c, tensord_model_define_raw, &sb, print_stat);
out:
	msgpack_unpacked_destroy(&u);
	msgpack_unpacked_destroy(&ue);
	msgpack_sbuffer_destroy(&file);
	msgpack_sbuffer_destroy(&extra);
	msgpack_sbuffer_destroy(&sb);
	return status;
}

int ctl_cmd_model_ls(struct ctl *c, const char *unused1, const char *unused2)
{
	msgpack_sbuffer none = { 0 };

	return call_and_print(c, list_raw, &none, print_ls);
}

int ctl_cmd_model_stat(struct ctl *c, const char *name, const char *unused)
{
	/* The name goes to stat_raw in place of packed params. */
	msgpack_sbuffer arg = { .size = strlen(name), .data = (char *)name };

	return call_and_print(c, stat_raw, &arg, print_stat);
}

int ctl_cmd_model_rm(struct ctl *c, const char *name, const char *unused)
{
	int status, r;

	if ((status = ctl_connect(c)) != CTL_EXIT_OK)
		return status;
	if ((r = tensord_model_delete(c->td, name, c->tensors)) < 0)
		return ctl_call_failed(c, r);
	if (c->json) {
		fputs("{\"name\":", stdout);
		ctl_json_string(stdout, name, strlen(name));
		printf(",\"deleted\":true,\"tensors\":%s}\n", c->tensors ? "true" : "false");
	} else {
		printf("deleted model %s%s\n", name, c->tensors ? " and its parameters and optimizer state" : "");
	}
	return CTL_EXIT_OK;
}

static int print_evaluate(struct ctl *c, const msgpack_object *res)
{
	const msgpack_object *metrics = tdp_map_find(res, "metrics"), *o;
	char cells[3][CELL_MAX];
	size_t width = 7; /* "samples" */
	double loss;
	uint64_t n;

	(void)c;
	if (!(o = tdp_map_find(res, "loss")) || (o->type != MSGPACK_OBJECT_FLOAT64 && o->type != MSGPACK_OBJECT_FLOAT32) ||
	    !metrics || metrics->type != MSGPACK_OBJECT_MAP)
		return ctl_error("malformed reply: no loss or metrics");
	loss = o->via.f64;
	for (uint32_t i = 0; i < metrics->via.map.size; i++) {
		const msgpack_object *k = &metrics->via.map.ptr[i].key;

		if (k->type == MSGPACK_OBJECT_STR && k->via.str.size > width)
			width = k->via.str.size > 64 ? 64 : k->via.str.size;
	}
	snprintf(cells[0], CELL_MAX, "%.6g", loss);
	printf("%-*s  %s\n", (int)width, "loss", cells[0]);
	for (uint32_t i = 0; i < metrics->via.map.size; i++) {
		const msgpack_object *k = &metrics->via.map.ptr[i].key, *v = &metrics->via.map.ptr[i].val;

		if (k->type != MSGPACK_OBJECT_STR || (v->type != MSGPACK_OBJECT_FLOAT64 && v->type != MSGPACK_OBJECT_FLOAT32))
			return ctl_error("malformed reply: a bad metric");
		printf("%-*.*s  %.6g\n", (int)width, (int)(k->via.str.size > 64 ? 64 : k->via.str.size), k->via.str.ptr,
		       v->via.f64);
	}
	if ((o = tdp_map_find(res, "samples")) && tdp_obj_uint(o, &n) == 0)
		printf("%-*s  %" PRIu64 "\n", (int)width, "samples", n);
	return CTL_EXIT_OK;
}

int ctl_cmd_evaluate(struct ctl *c)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	uint64_t batch = 0;
	int status;

	if (c->ndata == 0)
		return ctl_usage_error("evaluate: give the data as --data INPUT=TENSOR");
	if (c->batch_size && (status = ctl_parse_count("--batch-size", c->batch_size, &batch)) != CTL_EXIT_OK)
		return status;
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	if (msgpack_pack_map(&pk, 2 + (c->nids ? 1 : 0) + (batch ? 1 : 0)) || tdp_pack_cstr(&pk, "model") ||
	    tdp_pack_cstr(&pk, c->pos[0]) || tdp_pack_cstr(&pk, "data")) {
		status = ctl_error("out of memory");
		goto out;
	}
	if ((status = ctl_pack_pairs(&pk, c->data, c->ndata, "--data")) != CTL_EXIT_OK)
		goto out;
	if (c->nids) {
		if (tdp_pack_cstr(&pk, "metrics") || msgpack_pack_array(&pk, (uint32_t)c->nids)) {
			status = ctl_error("out of memory");
			goto out;
		}
		for (int i = 0; i < c->nids; i++)
			if (tdp_pack_cstr(&pk, c->ids[i])) {
				status = ctl_error("out of memory");
				goto out;
			}
	}
	if (batch && (tdp_pack_cstr(&pk, "batch_size") || msgpack_pack_uint64(&pk, batch))) {
		status = ctl_error("out of memory");
		goto out;
	}
	status = call_and_print(c, tensord_model_evaluate_raw, &sb, print_evaluate);
out:
	msgpack_sbuffer_destroy(&sb);
	return status;
}

/* The one output id -o NAME stores: --output's, else the model's. */
static int single_output(struct ctl *c, char *id, size_t cap)
{
	const msgpack_object *def, *outs;
	msgpack_unpacked u;
	void *res = NULL;
	size_t len = 0;
	int r, status;

	if (c->nids == 1) {
		snprintf(id, cap, "%s", c->ids[0]);
		return CTL_EXIT_OK;
	}
	if (c->nids > 1)
		return ctl_usage_error("predict: with several --output, -o takes ID=NAME");
	if ((r = tensord_model_stat_raw(c->td, c->pos[0], &res, &len)) < 0)
		return ctl_call_failed(c, r);
	msgpack_unpacked_init(&u);
	status = unpack(res, len, &u);
	if (status == CTL_EXIT_OK) {
		def = tdp_map_find(&u.data, "definition");
		outs = def ? tdp_map_find(def, "outputs") : NULL;
		if (!outs || outs->type != MSGPACK_OBJECT_ARRAY || outs->via.array.size != 1 ||
		    tdp_obj_strcpy(&outs->via.array.ptr[0], id, cap) < 0)
			status = ctl_usage_error("predict: model %s has %s default output; say which with --output ID "
						 "or -o ID=NAME", c->pos[0], outs && outs->type == MSGPACK_OBJECT_ARRAY &&
						 outs->via.array.size > 1 ? "more than one" : "no");
	}
	msgpack_unpacked_destroy(&u);
	free(res);
	return status;
}

int ctl_cmd_predict(struct ctl *c)
{
	char id[TENSORD_MAX_NAME_LEN + 1];
	const char *store_as = NULL;
	msgpack_sbuffer sb;
	msgpack_packer pk;
	int status;

	if (c->ndata == 0)
		return ctl_usage_error("predict: give the inputs as --input INPUT=TENSOR");
	if (c->out) {
		const char *eq = strchr(c->out, '=');

		store_as = eq ? eq + 1 : c->out;
		if (eq && (eq == c->out || (size_t)(eq - c->out) > TENSORD_MAX_NAME_LEN))
			return ctl_usage_error("-o wants NAME or ID=NAME, not '%.64s'", c->out);
		if ((status = ctl_check_ref("tensor name for -o", store_as)) != CTL_EXIT_OK)
			return status;
		if (eq)
			snprintf(id, sizeof(id), "%.*s", (int)(eq - c->out), c->out);
	}
	if ((status = ctl_connect(c)) != CTL_EXIT_OK)
		return status;
	if (c->out && !strchr(c->out, '=') && (status = single_output(c, id, sizeof(id))) != CTL_EXIT_OK)
		return status;
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	/* With -o alone the output is stored, not printed; --output adds inline ones. */
	if (msgpack_pack_map(&pk, 2 + (c->nids && !(c->out && c->nids == 1 && !strchr(c->out, '=')) ? 1 : 0) +
				      (c->out ? 1 : 0)) ||
	    tdp_pack_cstr(&pk, "model") || tdp_pack_cstr(&pk, c->pos[0]) || tdp_pack_cstr(&pk, "inputs")) {
		status = ctl_error("out of memory");
		goto out;
	}
	if ((status = ctl_pack_pairs(&pk, c->data, c->ndata, "--input")) != CTL_EXIT_OK)
		goto out;
	if (c->nids && !(c->out && c->nids == 1 && !strchr(c->out, '='))) {
		if (tdp_pack_cstr(&pk, "outputs") || msgpack_pack_array(&pk, (uint32_t)c->nids)) {
			status = ctl_error("out of memory");
			goto out;
		}
		for (int i = 0; i < c->nids; i++)
			if (tdp_pack_cstr(&pk, c->ids[i])) {
				status = ctl_error("out of memory");
				goto out;
			}
	}
	if (c->out && (tdp_pack_cstr(&pk, "out") || msgpack_pack_map(&pk, 1) || tdp_pack_cstr(&pk, id) ||
		       tdp_pack_cstr(&pk, store_as))) {
		status = ctl_error("out of memory");
		goto out;
	}
	status = call_and_print(c, tensord_model_predict_raw, &sb, ctl_print_graph_result);
out:
	msgpack_sbuffer_destroy(&sb);
	return status;
}

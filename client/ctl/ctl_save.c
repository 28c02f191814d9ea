/* tensorctl save / load: many tensors to and from a safetensors file, and
 * the same for a model (model save / model load: parameters, optimizer
 * state, and the definition and step count in __metadata__). */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "ctl_cmd.h"
#include "dtype.h"
#include "json.h"
#include "json_parse.h"
#include "name.h"
#include "pack.h"
#include "print.h"
#include "safetensors.h"

#define MSG_MAX 512

/* Metadata keys of a model file (docs/tensorctl.1, "MODEL FILES"). */
#define META_FORMAT "format"
#define META_FORMAT_VALUE "tensord.model.v1"
#define META_NAME "tensord.model"
#define META_DEF "tensord.definition"
#define META_STEP "tensord.step"

/* Write the stored tensors `names` (n) into `path` with `meta`: one tensor
 * in memory at a time. *ret_bytes gets the data size. */
static int save_tensors(struct ctl *c, const char *path, const char *const *names, size_t n,
			const struct st_meta *meta, size_t nmeta, uint64_t *ret_bytes)
{
	struct tensord_tensor_info *info = calloc(n ? n : 1, sizeof(*info));
	struct st_entry *e = calloc(n ? n : 1, sizeof(*e));
	struct st_writer *w = NULL;
	char err[MSG_MAX];
	uint64_t total = 0;
	int r, status = CTL_EXIT_FAIL;

	if (!info || !e) {
		status = ctl_error("out of memory");
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		if ((r = tensord_stat(c->td, names[i], &info[i])) < 0) {
			status = ctl_call_failed(c, r);
			goto out;
		}
		e[i] = (struct st_entry){ .name = info[i].name,
					  .dtype = (enum st_dtype)st_dtype_from_tensord((int)info[i].dtype),
					  .rank = info[i].rank, .shape = info[i].shape };
	}
	if (st_writer_open(path, e, n, meta, nmeta, &w, err, sizeof(err)) < 0) {
		status = ctl_error("%s: %s", path, err);
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		struct tensord_tensor_info now;
		void *data = NULL;
		size_t len = 0;

		if ((r = tensord_get(c->td, names[i], &now, &data, &len)) < 0) {
			status = ctl_call_failed(c, r);
			goto out;
		}
		if (now.dtype != info[i].dtype || now.rank != info[i].rank ||
		    memcmp(now.shape, info[i].shape, sizeof(now.shape)) != 0) {
			free(data);
			status = ctl_error("%s changed while it was being saved; try again", names[i]);
			goto out;
		}
		r = st_writer_put(w, data, len, err, sizeof(err));
		free(data);
		if (r < 0) {
			status = ctl_error("%s: %s", path, err);
			goto out;
		}
		total += len;
	}
	r = st_writer_close(w, true, err, sizeof(err));
	w = NULL;
	if (r < 0) {
		status = ctl_error("%s: %s", path, err);
		goto out;
	}
	*ret_bytes = total;
	status = CTL_EXIT_OK;
out:
	st_writer_close(w, false, NULL, 0);
	free(info);
	free(e);
	return status;
}

/* Check every tensor of `f` before anything is put: its name with `prefix`
 * is valid and its dtype is one tensord stores. */
static int check_file_tensors(const char *path, const struct st_file *f, const char *prefix)
{
	for (size_t i = 0; i < f->ntensors; i++) {
		const struct st_tensor *t = &f->tensors[i];
		size_t plen = strlen(prefix), nlen = strlen(t->name);

		if (plen + nlen > TENSORD_MAX_NAME_LEN || (plen && !tdp_name_valid(prefix, plen)) ||
		    !tdp_name_valid(t->name, nlen))
			return ctl_error("%s: tensor '%.64s%.64s' is no valid tensor name (1-%d bytes of A-Z a-z "
					 "0-9 . _ : / -)", path, prefix, t->name, TENSORD_MAX_NAME_LEN);
		if (st_dtype_to_tensord((int)t->dtype) < 0)
			return ctl_error("%s: tensor '%s' is %s; tensord stores F32 F16 BF16 I32 U8", path, t->name,
					 st_dtype_name((int)t->dtype));
	}
	return CTL_EXIT_OK;
}

/* Put every tensor of `f` as prefix + its name; with `strip` (not NULL),
 * only a name that starts with `strip` is renamed (that start replaced by
 * prefix), the others are put as they are. */
static int put_tensors(struct ctl *c, const struct st_file *f, const char *strip, const char *prefix,
		       uint64_t *ret_bytes)
{
	char name[TENSORD_MAX_NAME_LEN + 1];
	uint64_t total = 0;
	int r;

	for (size_t i = 0; i < f->ntensors; i++) {
		const struct st_tensor *t = &f->tensors[i];
		const char *rest = t->name, *front = prefix;

		if (strip && strncmp(rest, strip, strlen(strip)))
			front = "";      /* not under `strip`: kept as it is */
		else if (strip)
			rest += strlen(strip);
		if (strlen(front) + strlen(rest) > TENSORD_MAX_NAME_LEN)
			return ctl_error("tensor '%.64s' renamed to '%.64s%.64s' is too long (at most %d bytes)",
					 t->name, front, rest, TENSORD_MAX_NAME_LEN);
		memcpy(name, front, strlen(front));
		memcpy(name + strlen(front), rest, strlen(rest) + 1);
		r = tensord_put(c->td, name, (enum tensord_dtype)st_dtype_to_tensord((int)t->dtype), t->rank,
				t->shape, t->data, (size_t)(t->end - t->begin), NULL);
		if (r < 0)
			return ctl_call_failed(c, r);
		total += t->end - t->begin;
	}
	*ret_bytes = total;
	return CTL_EXIT_OK;
}

static void print_names_json(const char *key, const char *prefix, const struct st_file *f)
{
	printf(",\"%s\":[", key);
	for (size_t i = 0; i < f->ntensors; i++) {
		char name[2 * TENSORD_MAX_NAME_LEN + 2];

		snprintf(name, sizeof(name), "%s%s", prefix, f->tensors[i].name);
		if (i)
			fputc(',', stdout);
		ctl_json_string(stdout, name, strlen(name));
	}
	fputc(']', stdout);
}

int ctl_cmd_save(struct ctl *c)
{
	const char *prefix = c->pos[0], *path = c->pos[1];
	struct tensord_tensor_info *list = NULL;
	const char **names = NULL;
	uint64_t bytes = 0;
	size_t n = 0;
	char size[32];
	int r, status;

	if (strlen(prefix) > TENSORD_MAX_NAME_LEN)
		return ctl_usage_error("save: the prefix is longer than %d bytes", TENSORD_MAX_NAME_LEN);
	if ((status = ctl_connect(c)) != CTL_EXIT_OK)
		return status;
	if ((r = tensord_list(c->td, prefix, &list, &n)) < 0)
		return ctl_call_failed(c, r);
	if (n == 0) {
		free(list);
		return ctl_error("save: no tensor's name starts with '%s'", prefix);
	}
	names = calloc(n, sizeof(*names));
	if (!names) {
		free(list);
		return ctl_error("out of memory");
	}
	for (size_t i = 0; i < n; i++)
		names[i] = list[i].name;
	status = save_tensors(c, path, names, n, NULL, 0, &bytes);
	if (status == CTL_EXIT_OK) {
		if (c->json) {
			fputs("{\"file\":", stdout);
			ctl_json_string(stdout, path, strlen(path));
			fputs(",\"tensors\":[", stdout);
			for (size_t i = 0; i < n; i++) {
				if (i)
					fputc(',', stdout);
				ctl_json_string(stdout, names[i], strlen(names[i]));
			}
			printf("],\"bytes\":%" PRIu64 "}\n", bytes);
		} else {
			ctl_format_size(size, sizeof(size), bytes);
			printf("saved %zu tensor%s (%s) to %s\n", n, n == 1 ? "" : "s", size, path);
		}
	}
	free(names);
	free(list);
	return status;
}

int ctl_cmd_load(struct ctl *c)
{
	const char *path = c->pos[0], *prefix = c->prefix ? c->prefix : "";
	struct st_file f;
	char err[MSG_MAX], size[32];
	uint64_t bytes = 0;
	void *in = NULL;
	int status;

	if (ctl_st_load(path, &f, &in, err, sizeof(err)) < 0)
		return ctl_error("%s: %s", path, err);
	if ((status = check_file_tensors(path, &f, prefix)) != CTL_EXIT_OK ||
	    (status = ctl_connect(c)) != CTL_EXIT_OK || (status = put_tensors(c, &f, NULL, prefix, &bytes)) != CTL_EXIT_OK)
		goto out;
	if (c->json) {
		fputs("{\"file\":", stdout);
		ctl_json_string(stdout, path, strlen(path));
		print_names_json("tensors", prefix, &f);
		printf(",\"bytes\":%" PRIu64 ",\"metadata\":{", bytes);
		for (size_t i = 0; i < f.nmeta; i++) {
			if (i)
				fputc(',', stdout);
			ctl_json_string(stdout, f.meta[i].key, strlen(f.meta[i].key));
			fputc(':', stdout);
			ctl_json_string(stdout, f.meta[i].value, strlen(f.meta[i].value));
		}
		fputs("}}\n", stdout);
	} else {
		ctl_format_size(size, sizeof(size), bytes);
		printf("loaded %zu tensor%s (%s) from %s\n", f.ntensors, f.ntensors == 1 ? "" : "s", size, path);
	}
out:
	st_close(&f);
	free(in);
	return status;
}

/* ---- models ------------------------------------------------------------- */

/* model save NAME FILE */
int ctl_cmd_model_save(struct ctl *c, const char *model, const char *path)
{
	const msgpack_object *def, *params, *state, *step;
	struct st_meta meta[4];
	const char **names = NULL;
	msgpack_unpacked u;
	void *res = NULL;
	char *json = NULL, stepbuf[32], size[32];
	size_t rlen, off = 0, jlen = 0, n = 0;
	uint64_t bytes = 0;
	int64_t stepv;
	FILE *mf;
	int r, status;

	msgpack_unpacked_init(&u);
	if ((status = ctl_connect(c)) != CTL_EXIT_OK)
		goto out;
	if ((r = tensord_model_stat_raw(c->td, model, &res, &rlen)) < 0) {
		status = ctl_call_failed(c, r);
		goto out;
	}
	if (msgpack_unpack_next(&u, res, rlen, &off) != MSGPACK_UNPACK_SUCCESS ||
	    !(def = tdp_map_find(&u.data, "definition")) || def->type != MSGPACK_OBJECT_MAP ||
	    !(params = tdp_map_find(&u.data, "params")) || params->type != MSGPACK_OBJECT_ARRAY ||
	    !(state = tdp_map_find(&u.data, "state")) || state->type != MSGPACK_OBJECT_ARRAY ||
	    !(step = tdp_map_find(&u.data, "step")) || tdp_obj_int(step, &stepv) < 0) {
		status = ctl_error("malformed reply to model.stat");
		goto out;
	}
	names = calloc((size_t)params->via.array.size + state->via.array.size + 1, sizeof(*names));
	if (!names) {
		status = ctl_error("out of memory");
		goto out;
	}
	for (uint32_t i = 0; i < params->via.array.size; i++) {
		const msgpack_object *p = &params->via.array.ptr[i], *nm = tdp_map_find(p, "name");
		const msgpack_object *stored = tdp_map_find(p, "stored");
		if (!nm || nm->type != MSGPACK_OBJECT_STR || !stored || stored->type != MSGPACK_OBJECT_BOOLEAN) {
			status = ctl_error("malformed reply to model.stat");
			goto out;
		}
		if (!stored->via.boolean) {
			status = ctl_error("model %s: parameter '%.*s' is not stored, so there is nothing to save",
					   model, (int)(nm->via.str.size > 255 ? 255 : nm->via.str.size), nm->via.str.ptr);
			goto out;
		}
		names[n++] = strndup(nm->via.str.ptr, nm->via.str.size);
	}
	for (uint32_t i = 0; i < state->via.array.size; i++) {
		const msgpack_object *s = &state->via.array.ptr[i];

		if (s->type != MSGPACK_OBJECT_STR) {
			status = ctl_error("malformed reply to model.stat");
			goto out;
		}
		names[n++] = strndup(s->via.str.ptr, s->via.str.size);
	}
	for (size_t i = 0; i < n; i++)
		if (!names[i]) {
			status = ctl_error("out of memory");
			goto out;
		}
	mf = open_memstream(&json, &jlen);
	if (!mf) {
		status = ctl_error("out of memory");
		goto out;
	}
	ctl_json_msgpack(mf, def);
	if (fclose(mf) != 0) {
		status = ctl_error("out of memory");
		goto out;
	}
	snprintf(stepbuf, sizeof(stepbuf), "%" PRId64, stepv);
	meta[0] = (struct st_meta){ META_FORMAT, META_FORMAT_VALUE };
	meta[1] = (struct st_meta){ META_NAME, model };
	meta[2] = (struct st_meta){ META_DEF, json };
	meta[3] = (struct st_meta){ META_STEP, stepbuf };
	status = save_tensors(c, path, names, n, meta, 4, &bytes);
	if (status != CTL_EXIT_OK)
		goto out;
	if (c->json) {
		fputs("{\"model\":", stdout);
		ctl_json_string(stdout, model, strlen(model));
		fputs(",\"file\":", stdout);
		ctl_json_string(stdout, path, strlen(path));
		printf(",\"step\":%" PRId64 ",\"tensors\":[", stepv);
		for (size_t i = 0; i < n; i++) {
			if (i)
				fputc(',', stdout);
			ctl_json_string(stdout, names[i], strlen(names[i]));
		}
		printf("],\"bytes\":%" PRIu64 "}\n", bytes);
	} else {
		ctl_format_size(size, sizeof(size), bytes);
		printf("saved model %s (step %" PRId64 ", %zu tensor%s, %s) to %s\n", model, stepv, n,
		       n == 1 ? "" : "s", size, path);
	}
out:
	for (size_t i = 0; names && i < n; i++)
		free((void *)names[i]);
	free(names);
	free(json);
	msgpack_unpacked_destroy(&u);
	free(res);
	return status;
}

/* The model.define params for a loaded file: its definition plus name, step
 * and replace. */
static int define_params(struct ctl *c, const char *path, const struct st_file *f, const char *name,
			 msgpack_sbuffer *out, bool *ret_layers)
{
	const char *def = st_meta_get(f, META_DEF), *step = st_meta_get(f, META_STEP);
	msgpack_sbuffer sb;
	msgpack_packer pk;
	msgpack_unpacked u;
	char err[MSG_MAX], *end;
	unsigned long long stepv = 0;
	size_t off = 0;
	int status = CTL_EXIT_OK;

	if (!def)
		return ctl_error("%s has no model definition (__metadata__ \"%s\"): was it written by "
				 "tensorctl model save? (tensorctl load puts plain tensors)", path, META_DEF);
	if (step) {
		errno = 0;
		stepv = strtoull(step, &end, 10);
		if (errno || end == step || *end || step[0] == '-' || stepv > INT32_MAX)
			return ctl_error("%s: __metadata__ \"%s\" is no step count", path, META_STEP);
	}
	msgpack_sbuffer_init(&sb);
	msgpack_unpacked_init(&u);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	if (tdp_json_to_msgpack(def, strlen(def), &pk, err, sizeof(err)) < 0 ||
	    msgpack_unpack_next(&u, sb.data, sb.size, &off) != MSGPACK_UNPACK_SUCCESS ||
	    u.data.type != MSGPACK_OBJECT_MAP) {
		status = ctl_error("%s: the model definition in __metadata__ is no JSON object", path);
		goto out;
	}
	msgpack_packer_init(&pk, out, msgpack_sbuffer_write);
	if (msgpack_pack_map(&pk, u.data.via.map.size + 2 + (c->replace ? 1 : 0)) ||
	    tdp_pack_cstr(&pk, "name") || tdp_pack_cstr(&pk, name) ||
	    tdp_pack_cstr(&pk, "step") || msgpack_pack_uint64(&pk, stepv) ||
	    (c->replace && (tdp_pack_cstr(&pk, "replace") || msgpack_pack_true(&pk)))) {
		status = ctl_error("out of memory");
		goto out;
	}
	for (uint32_t i = 0; i < u.data.via.map.size; i++) {
		const msgpack_object_kv *kv = &u.data.via.map.ptr[i];

		if (tdp_obj_str_eq(&kv->key, "name") || tdp_obj_str_eq(&kv->key, "step") ||
		    tdp_obj_str_eq(&kv->key, "replace")) {
			status = ctl_error("%s: the model definition has a key it must not have", path);
			goto out;
		}
		if (msgpack_pack_object(&pk, kv->key) || msgpack_pack_object(&pk, kv->val)) {
			status = ctl_error("out of memory");
			goto out;
		}
		if (tdp_obj_str_eq(&kv->key, "layers"))
			*ret_layers = true;
	}
out:
	msgpack_unpacked_destroy(&u);
	msgpack_sbuffer_destroy(&sb);
	return status;
}

/* model load FILE [--name NAME] [--replace] */
int ctl_cmd_model_load(struct ctl *c, const char *path, const char *unused)
{
	struct st_file f;
	msgpack_sbuffer sb;
	const char *name, *saved;
	char err[MSG_MAX], size[32], from[TENSORD_MAX_NAME_LEN + 2], to[TENSORD_MAX_NAME_LEN + 2];
	void *res = NULL, *in = NULL;
	size_t rlen;
	uint64_t bytes = 0;
	bool layers = false;
	int r, status;

	msgpack_sbuffer_init(&sb);
	if (ctl_st_load(path, &f, &in, err, sizeof(err)) < 0) {
		msgpack_sbuffer_destroy(&sb);
		return ctl_error("%s: %s", path, err);
	}
	if (!st_meta_get(&f, META_DEF)) {
		status = ctl_error("%s has no model definition (__metadata__ \"%s\"): was it written by "
				   "tensorctl model save? (tensorctl load puts plain tensors)", path, META_DEF);
		goto out;
	}
	name = c->name ? c->name : st_meta_get(&f, META_NAME);
	if (!name || !tdp_name_valid(name, strnlen(name, TENSORD_MAX_NAME_LEN + 1))) {
		status = name ? ctl_error("%s: '%.64s' is no valid model name", path, name)
			      : ctl_error("%s names no model (__metadata__ \"%s\"); give --name", path, META_NAME);
		goto out;
	}
	if ((status = define_params(c, path, &f, name, &sb, &layers)) != CTL_EXIT_OK ||
	    (status = check_file_tensors(path, &f, "")) != CTL_EXIT_OK || (status = ctl_connect(c)) != CTL_EXIT_OK)
		goto out;
	/* Refuse before any tensor is replaced when the name is taken. */
	if (!c->replace) {
		r = tensord_model_stat_raw(c->td, name, &res, &rlen);
		free(res);
		res = NULL;
		if (r == 0) {
			status = ctl_error("model %s already exists (--replace redefines it)", name);
			goto out;
		}
		if (tensord_error_code(c->td) != TENSORD_NOT_FOUND) {
			status = ctl_call_failed(c, r);
			goto out;
		}
	}
	/* A layer model's tensors are named after the model (MODEL/0.weight):
	 * loaded under another name, they are put under that one. */
	saved = st_meta_get(&f, META_NAME);
	layers = layers && saved && strcmp(saved, name);
	snprintf(from, sizeof(from), "%s/", layers ? saved : "");
	snprintf(to, sizeof(to), "%s/", layers ? name : "");
	if ((status = put_tensors(c, &f, layers ? from : NULL, layers ? to : "", &bytes)) != CTL_EXIT_OK)
		goto out;
	if ((r = tensord_model_define_raw(c->td, sb.data, sb.size, &res, &rlen)) < 0) {
		status = ctl_call_failed(c, r);
		goto out;
	}
	if (c->json) {
		fputs("{\"model\":", stdout);
		ctl_json_string(stdout, name, strlen(name));
		fputs(",\"file\":", stdout);
		ctl_json_string(stdout, path, strlen(path));
		printf(",\"step\":%s", st_meta_get(&f, META_STEP) ? st_meta_get(&f, META_STEP) : "0");
		print_names_json("tensors", "", &f);
		printf(",\"bytes\":%" PRIu64 "}\n", bytes);
	} else {
		ctl_format_size(size, sizeof(size), bytes);
		printf("loaded model %s (step %s, %zu tensor%s, %s) from %s\n", name,
		       st_meta_get(&f, META_STEP) ? st_meta_get(&f, META_STEP) : "0", f.ntensors,
		       f.ntensors == 1 ? "" : "s", size, path);
	}
out:
	free(res);
	msgpack_sbuffer_destroy(&sb);
	st_close(&f);
	free(in);
	return status;
}

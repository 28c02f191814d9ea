/* tensorctl train (train.run, with its progress notifications) and step
 * (train.step). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "ctl_cmd.h"
#include "json.h"
#include "name.h"
#include "pack.h"

/* Read FILE, connect, call and unpack: what train and step share. */
static int call_with_file(struct ctl *c, const char *what, ctl_raw_call_fn call, bool progress,
			  msgpack_unpacked *u, void **ret_res)
{
	msgpack_sbuffer sb;
	int status;

	*ret_res = NULL;
	msgpack_sbuffer_init(&sb);
	if ((status = ctl_read_json_map(c->pos[0], what, &sb)) == CTL_EXIT_OK)
		status = ctl_call_run(c, &sb, call, progress, u, ret_res);
	msgpack_sbuffer_destroy(&sb);
	return status;
}

/* Whether map `m` has the key `key`. */
static bool map_has(const msgpack_object *m, const char *key)
{
	size_t n = strlen(key);

	if (m->type != MSGPACK_OBJECT_MAP)
		return false;
	for (uint32_t i = 0; i < m->via.map.size; i++) {
		const msgpack_object *k = &m->via.map.ptr[i].key;

		if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == n && !memcmp(k->via.str.ptr, key, n))
			return true;
	}
	return false;
}

/* train --model NAME FILE: "data" and "batch_size" from the options or the
 * file, else a usage error naming both. */
static int check_required(struct ctl *c, const msgpack_object *file, const msgpack_object *opts)
{
	if (!map_has(file, "data") && !map_has(opts, "data"))
		return ctl_usage_error("train --model: missing --data INPUT=TENSOR (or \"data\" in %.64s)",
				       c->pos[0]);
	if (!map_has(file, "batch_size") && !map_has(opts, "batch_size"))
		return ctl_usage_error("train --model: missing --batch-size N (or \"batch_size\" in %.64s)",
				       c->pos[0]);
	return CTL_EXIT_OK;
}

/* train --model NAME [FILE] --data ... : the train.run params of FILE (if
 * any) with the options' values put over them. */
static int model_run_params(struct ctl *c, msgpack_sbuffer *out)
{
	const char *what = "{\"data\": {...}, \"batch_size\", \"epochs\", ...}";
	msgpack_sbuffer file, extra;
	msgpack_unpacked u, ue;
	msgpack_packer pk;
	uint64_t batch = 0, epochs = 0, steps = 0;
	size_t off = 0, offe = 0;
	unsigned n;
	int status;

	if (!c->model)
		return ctl_usage_error("train: --data, --batch-size, --epochs and --steps go with --model");
	if ((c->batch_size && (status = ctl_parse_count("--batch-size", c->batch_size, &batch)) != CTL_EXIT_OK) ||
	    (c->epochs && (status = ctl_parse_count("--epochs", c->epochs, &epochs)) != CTL_EXIT_OK) ||
	    (c->steps && (status = ctl_parse_count("--steps", c->steps, &steps)) != CTL_EXIT_OK))
		return status;
	if (!tdp_ref_valid(c->model, strnlen(c->model, TENSORD_MAX_NAME_LEN + 1), false))
		return ctl_usage_error("invalid model name '%.64s'", c->model);
	if (epochs && steps)
		return ctl_usage_error("train: give --epochs or --steps, not both");
	/* Required: checked here, with the options' names (a FILE may give them). */
	if (c->npos == 0 && !c->ndata)
		return ctl_usage_error("train --model: missing --data INPUT=TENSOR");
	if (c->npos == 0 && !batch)
		return ctl_usage_error("train --model: missing --batch-size N");
	msgpack_sbuffer_init(&file);
	msgpack_sbuffer_init(&extra);
	msgpack_unpacked_init(&u);
	msgpack_unpacked_init(&ue);
	if (c->npos == 1 && (status = ctl_read_json_map(c->pos[0], what, &file)) != CTL_EXIT_OK)
		goto out;
	n = 1 + (c->ndata ? 1 : 0) + (batch ? 1 : 0) + (epochs ? 1 : 0) + (steps ? 1 : 0) +
	    (c->devices ? 1 : 0) + (c->detach ? 1 : 0) + (c->precision ? 1 : 0);
	msgpack_packer_init(&pk, &extra, msgpack_sbuffer_write);
	if (msgpack_pack_map(&pk, n) || tdp_pack_cstr(&pk, "model") || tdp_pack_cstr(&pk, c->model)) {
		status = ctl_error("out of memory");
		goto out;
	}
	if (c->ndata && (tdp_pack_cstr(&pk, "data") ||
			 (status = ctl_pack_pairs(&pk, c->data, c->ndata, "--data")) != CTL_EXIT_OK))
		goto out;
	if (c->devices && (tdp_pack_cstr(&pk, "devices") ||
			   (status = ctl_pack_device_list(&pk, "--devices", c->devices)) != CTL_EXIT_OK))
		goto out;
	if ((c->detach && (tdp_pack_cstr(&pk, "detach") || msgpack_pack_true(&pk))) ||
	    (c->precision && (tdp_pack_cstr(&pk, "precision") || tdp_pack_cstr(&pk, c->precision))) ||
	    (batch && (tdp_pack_cstr(&pk, "batch_size") || msgpack_pack_uint64(&pk, batch))) ||
	    (epochs && (tdp_pack_cstr(&pk, "epochs") || msgpack_pack_uint64(&pk, epochs))) ||
	    (steps && (tdp_pack_cstr(&pk, "steps") || msgpack_pack_uint64(&pk, steps))) ||
	    msgpack_unpack_next(&ue, extra.data, extra.size, &offe) != MSGPACK_UNPACK_SUCCESS ||
	    (c->npos == 1 && msgpack_unpack_next(&u, file.data, file.size, &off) != MSGPACK_UNPACK_SUCCESS)) {
		status = ctl_error("out of memory");
		goto out;
	}
	if (c->npos == 1 && (status = check_required(c, &u.data, &ue.data)) != CTL_EXIT_OK)
		goto out;
	msgpack_packer_init(&pk, out, msgpack_sbuffer_write);
	status = ctl_pack_merged(&pk, c->npos == 1 ? &u.data : NULL, &ue.data) ? ctl_error("out of memory")
									       : CTL_EXIT_OK;
out:
	msgpack_unpacked_destroy(&u);
	msgpack_unpacked_destroy(&ue);
	msgpack_sbuffer_destroy(&file);
	msgpack_sbuffer_destroy(&extra);
	return status;
}

/* train FILE --devices ... --detach --precision P (step FILE --precision
 * P): the params of FILE (`what` it should hold, for messages) with
 * "devices", "detach" and "precision" put over them. */
static int file_run_params(struct ctl *c, const char *what, msgpack_sbuffer *out)
{
	msgpack_sbuffer file, extra;
	msgpack_unpacked u, ue;
	msgpack_packer pk;
	size_t off = 0, offe = 0;
	int status;

	msgpack_sbuffer_init(&file);
	msgpack_sbuffer_init(&extra);
	msgpack_unpacked_init(&u);
	msgpack_unpacked_init(&ue);
	msgpack_packer_init(&pk, &extra, msgpack_sbuffer_write);
	/* The option first: a usage error is reported before the file is read. */
	if (msgpack_pack_map(&pk, (c->devices ? 1 : 0) + (c->detach ? 1 : 0) + (c->precision ? 1 : 0)) ||
	    (c->detach && (tdp_pack_cstr(&pk, "detach") || msgpack_pack_true(&pk))) ||
	    (c->precision && (tdp_pack_cstr(&pk, "precision") || tdp_pack_cstr(&pk, c->precision))) ||
	    (c->devices && tdp_pack_cstr(&pk, "devices"))) {
		status = ctl_error("out of memory");
		goto out;
	}
	if ((c->devices && (status = ctl_pack_device_list(&pk, "--devices", c->devices)) != CTL_EXIT_OK) ||
	    (status = ctl_read_json_map(c->pos[0], what, &file)) != CTL_EXIT_OK)
		goto out;
	if (msgpack_unpack_next(&ue, extra.data, extra.size, &offe) != MSGPACK_UNPACK_SUCCESS ||
	    msgpack_unpack_next(&u, file.data, file.size, &off) != MSGPACK_UNPACK_SUCCESS) {
		status = ctl_error("out of memory");
		goto out;
	}
	msgpack_packer_init(&pk, out, msgpack_sbuffer_write);
	status = ctl_pack_merged(&pk, &u.data, &ue.data) ? ctl_error("out of memory") : CTL_EXIT_OK;
out:
	msgpack_unpacked_destroy(&u);
	msgpack_unpacked_destroy(&ue);
	msgpack_sbuffer_destroy(&file);
	msgpack_sbuffer_destroy(&extra);
	return status;
}

/* file_run_params, then the call. */
static int call_file_merged(struct ctl *c, const char *what, ctl_raw_call_fn call, bool progress,
			    msgpack_unpacked *u, void **ret_res)
{
	msgpack_sbuffer sb;
	int status;

	msgpack_sbuffer_init(&sb);
	status = file_run_params(c, what, &sb);
	if (status == CTL_EXIT_OK)
		status = ctl_call_run(c, &sb, call, progress, u, ret_res);
	msgpack_sbuffer_destroy(&sb);
	return status;
}

int ctl_cmd_train(struct ctl *c)
{
	msgpack_unpacked u;
	void *res = NULL;
	int status;

	msgpack_unpacked_init(&u);
	if (c->model || c->ndata || c->batch_size || c->epochs || c->steps) {
		msgpack_sbuffer sb;

		msgpack_sbuffer_init(&sb);
		status = model_run_params(c, &sb);
		if (status == CTL_EXIT_OK)
			status = ctl_call_run(c, &sb, tensord_train_run_raw, true, &u, &res);
		msgpack_sbuffer_destroy(&sb);
	} else if (c->npos == 0) {
		status = ctl_usage_error("train: missing FILE (or --model NAME)");
	} else if (c->devices || c->detach || c->precision) {
		status = call_file_merged(c, "{\"nodes\": [...], \"loss\", \"params\", \"data\", ...}",
					  tensord_train_run_raw, true, &u, &res);
	} else {
		status = call_with_file(c, "{\"nodes\": [...], \"loss\", \"params\", \"data\", ...}",
					tensord_train_run_raw, true, &u, &res);
	}
	if (status == CTL_EXIT_OK)
		status = c->detach ? ctl_print_job_started(c, &u.data) : ctl_print_train_result(c, &u.data);
	msgpack_unpacked_destroy(&u);
	free(res);
	return status;
}

static int print_step_result(struct ctl *c, const msgpack_object *res)
{
	const msgpack_object *outs = tdp_map_find(res, "outputs");
	const msgpack_object *stored = tdp_map_find(res, "stored");
	const msgpack_object *skipped = tdp_map_find(res, "skipped");
	int64_t step = 0;
	double loss, lr = 0, scale = 0;
	bool scaled;
	int status;

	if (res->type != MSGPACK_OBJECT_MAP || !ctl_map_number(res, "loss", &loss) ||
	    (outs && outs->type != MSGPACK_OBJECT_MAP) ||
	    (stored && stored->type != MSGPACK_OBJECT_ARRAY))
		return ctl_error("malformed reply: no loss, or bad outputs or stored");
	ctl_map_int(res, "step", &step);
	ctl_map_number(res, "lr", &lr);
	/* precision f16: whether the update was skipped, and the loss scale */
	scaled = ctl_map_number(res, "loss_scale", &scale);
	scaled = scaled && skipped && skipped->type == MSGPACK_OBJECT_BOOLEAN;
	if (c->json) {
		fputs("{\"loss\":", stdout);
		ctl_json_double(stdout, loss);
		printf(",\"step\":%" PRId64 ",\"lr\":", step);
		ctl_json_double(stdout, lr);
		if (scaled) {
			printf(",\"skipped\":%s,\"loss_scale\":", skipped->via.boolean ? "true" : "false");
			ctl_json_double(stdout, scale);
		}
		fputs(",\"outputs\":{", stdout);
	} else {
		printf("step %" PRId64 ": loss %.6g", step, loss);
		if (lr > 0)
			printf(", lr %.4g", lr);
		if (scaled)
			printf(", loss scale %.6g%s", scale, skipped->via.boolean ? " (skipped: a gradient was not finite)"
											: "");
		fputc('\n', stdout);
	}
	for (uint32_t i = 0; outs && i < outs->via.map.size; i++) {
		if (c->json && i > 0)
			fputc(',', stdout);
		status = ctl_print_output(c, &outs->via.map.ptr[i].key, &outs->via.map.ptr[i].val);
		if (status != CTL_EXIT_OK)
			return status;
	}
	if (c->json) {
		fputs("},\"stored\":", stdout);
		if (stored)
			ctl_json_msgpack(stdout, stored);
		else
			fputs("[]", stdout);
		fputs("}\n", stdout);
		return CTL_EXIT_OK;
	}
	if (stored && stored->via.array.size > 0) {
		fputs("stored", stdout);
		for (uint32_t i = 0; i < stored->via.array.size; i++) {
			const msgpack_object *n = &stored->via.array.ptr[i];

			if (n->type == MSGPACK_OBJECT_STR)
				printf("%s %.*s", i ? "," : "",
				       n->via.str.size > 255 ? 255 : (int)n->via.str.size, n->via.str.ptr);
		}
		fputc('\n', stdout);
	}
	return CTL_EXIT_OK;
}

int ctl_cmd_step(struct ctl *c)
{
	msgpack_unpacked u;
	void *res = NULL;
	int status;

	msgpack_unpacked_init(&u);
	status = (c->precision ? call_file_merged : call_with_file)(c, "{\"nodes\": [...], \"loss\", ...}",
								      tensord_train_step_raw, false, &u, &res);
	if (status == CTL_EXIT_OK)
		status = print_step_result(c, &u.data);
	msgpack_unpacked_destroy(&u);
	free(res);
	return status;
}

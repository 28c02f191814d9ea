/* The table of detached jobs (jobs_table.h): records, their ids, the
 * per-owner bookkeeping and their map form (job.stat and the jobs file). */
#include "train/jobs_table.h"
#include "train/job.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "pack.h"
#include "rpc.h"
#include "status.h"

static const char *const state_names[JOB_STATE_COUNT] = {
	[JOB_RUNNING] = "running",
	[JOB_DONE] = "done",
	[JOB_FAILED] = "failed",
	[JOB_CANCELLED] = "cancelled",
	[JOB_INTERRUPTED] = "interrupted",
};

const char *job_state_name(enum job_state s)
{
	return (unsigned)s < JOB_STATE_COUNT ? state_names[s] : "unknown";
}

static void record_free(struct job_record *rec)
{
	free(rec->result);
	free(rec->resume);
	free(rec);
}

int jobs_table_set_resume(struct job_record *rec, const msgpack_object *map)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	int r = 0;

	free(rec->resume);
	rec->resume = NULL;
	rec->resume_len = 0;
	if (!map)
		return 0;
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	if (msgpack_pack_object(&pk, *map) == 0 && (rec->resume = malloc(sb.size))) {
		memcpy(rec->resume, sb.data, sb.size);
		rec->resume_len = sb.size;
	} else {
		r = -ENOMEM;
	}
	msgpack_sbuffer_destroy(&sb);
	return r;
}

/* The largest id `owner` has in the table (0: none). Pruning keeps an
 * owner's newest record, so this is the last id the owner was given. */
static uint64_t owner_last_id(const struct daemon *d, uint32_t owner)
{
	uint64_t last = 0;

	for (const struct job_record *rec = d->job_records; rec; rec = rec->next)
		if (rec->owner == owner && rec->id > last)
			last = rec->id;
	return last;
}

struct job_record *jobs_table_add(struct daemon *d, uint32_t owner)
{
	struct job_record *rec = calloc(1, sizeof(*rec));

	if (!rec)
		return NULL;
	rec->id = owner_last_id(d, owner) + 1;
	rec->owner = owner;
	rec->state = JOB_RUNNING;
	rec->d = d;
	rec->next = d->job_records;
	d->job_records = rec;
	return rec;
}

void jobs_table_remove(struct job_record *rec)
{
	for (struct job_record **pp = &rec->d->job_records; *pp; pp = &(*pp)->next)
		if (*pp == rec) {
			*pp = rec->next;
			record_free(rec);
			return;
		}
}

struct job_record *jobs_table_find(const struct daemon *d, uint32_t owner, uint64_t id)
{
	for (struct job_record *rec = d->job_records; rec; rec = rec->next)
		if (rec->id == id && rec->owner == owner)
			return rec;
	return NULL;
}

struct job_record *jobs_table_head(const struct daemon *d)
{
	return d->job_records;
}

unsigned jobs_table_running(const struct daemon *d, uint32_t owner)
{
	unsigned n = 0;

	for (struct job_record *rec = d->job_records; rec; rec = rec->next)
		n += rec->owner == owner && rec->state == JOB_RUNNING;
	return n;
}

void jobs_table_prune(struct daemon *d, uint32_t owner, unsigned keep)
{
	unsigned seen = 0;

	/* Newest first: the ones past `keep` are the oldest. */
	for (struct job_record **pp = &d->job_records; *pp;) {
		struct job_record *rec = *pp;

		if (rec->owner == owner && rec->state != JOB_RUNNING && !rec->watchers && ++seen > keep) {
			*pp = rec->next;
			record_free(rec);
			continue;
		}
		pp = &rec->next;
	}
}

void jobs_table_note(struct job_record *rec, const struct train_status *st)
{
	rec->step = st->step;
	rec->run_step = st->run_step;
	rec->steps = st->steps;
	rec->epoch = st->epoch;
	rec->epochs = st->epochs;
	rec->loss = st->loss;
	rec->lr = st->lr;
	rec->samples_per_s = st->samples_per_s;
	rec->elapsed = st->elapsed;
	rec->ndev = st->ndev < GPU_MAX_DEVICES ? st->ndev : GPU_MAX_DEVICES;
	memcpy(rec->devs, st->devs, rec->ndev * sizeof(rec->devs[0]));
	if (st->has_eval) {
		rec->has_eval = true;
		rec->eval_loss = st->eval_loss;
		rec->nmetrics = st->nmetrics;
		for (unsigned m = 0; m < st->nmetrics && m < TRAIN_MAX_METRICS; m++) {
			rec->eval_metrics[m] = st->eval_metrics[m];
			strcpy(rec->metrics[m], st->metrics[m]);
		}
	}
}

static int kv_u64(msgpack_packer *pk, const char *k, uint64_t v)
{
	return tdp_pack_cstr(pk, k) || msgpack_pack_uint64(pk, v);
}

static int kv_num(msgpack_packer *pk, const char *k, double v)
{
	return tdp_pack_cstr(pk, k) || msgpack_pack_double(pk, v);
}

static int pack_eval(msgpack_packer *pk, const struct job_record *rec)
{
	if (!rec->has_eval)
		return msgpack_pack_nil(pk);
	if (msgpack_pack_map(pk, 2) || kv_num(pk, "loss", rec->eval_loss) || tdp_pack_cstr(pk, "metrics") ||
	    msgpack_pack_map(pk, rec->nmetrics))
		return -1;
	for (unsigned m = 0; m < rec->nmetrics; m++)
		if (kv_num(pk, rec->metrics[m], rec->eval_metrics[m]))
			return -1;
	return 0;
}

static int pack_error(msgpack_packer *pk, const struct job_record *rec)
{
	if (rec->state != JOB_FAILED)
		return msgpack_pack_nil(pk);
	return msgpack_pack_map(pk, 3) || kv_u64(pk, "code", (uint64_t)rec->err_code) ||
	       tdp_pack_cstr(pk, "name") || tdp_pack_cstr(pk, tdp_status_name(rec->err_code)) ||
	       tdp_pack_cstr(pk, "message") || tdp_pack_cstr(pk, rec->err_message);
}

/* The record as a map: job.list's and job.stat's, and with `file` the jobs
 * file's (plus "resume"). */
static int pack(msgpack_packer *pk, struct job_record *rec, bool file)
{
	bool resume = file && rec->resume;

	if (rec->job && rec->state == JOB_RUNNING) {
		struct train_status st = train_job_status(rec->job);

		jobs_table_note(rec, &st);
	}
	if (resume && (msgpack_pack_map(pk, 21) || tdp_pack_cstr(pk, "resume") ||
		       pk->callback(pk->data, (const char *)rec->resume, rec->resume_len)))
		return -1;
	if ((!resume && msgpack_pack_map(pk, 20)) || kv_u64(pk, "job", rec->id) || kv_u64(pk, "owner", rec->owner) ||
	    tdp_pack_cstr(pk, "state") || tdp_pack_cstr(pk, job_state_name(rec->state)) ||
	    tdp_pack_cstr(pk, "model") || (rec->model[0] ? tdp_pack_cstr(pk, rec->model) : msgpack_pack_nil(pk)) ||
	    kv_num(pk, "started", (double)rec->started_ns / 1e9) || tdp_pack_cstr(pk, "ended") ||
	    (rec->ended_ns ? msgpack_pack_double(pk, (double)rec->ended_ns / 1e9) : msgpack_pack_nil(pk)) ||
	    tdp_pack_cstr(pk, "step") || msgpack_pack_int64(pk, rec->step) ||
	    kv_u64(pk, "run_step", rec->run_step) || kv_u64(pk, "steps", rec->steps) ||
	    kv_u64(pk, "epoch", rec->epoch) || kv_u64(pk, "epochs", rec->epochs) ||
	    kv_num(pk, "loss", rec->loss) || kv_num(pk, "lr", rec->lr) ||
	    kv_num(pk, "samples_per_s", rec->samples_per_s) || kv_num(pk, "elapsed", rec->elapsed) ||
	    tdp_pack_cstr(pk, "eval") || pack_eval(pk, rec) ||
	    tdp_pack_cstr(pk, "devices") || msgpack_pack_array(pk, rec->ndev))
		return -1;
	for (unsigned i = 0; i < rec->ndev; i++)
		if (msgpack_pack_uint32(pk, rec->devs[i]))
			return -1;
	if (tdp_pack_cstr(pk, "stopped") ||
	    (rec->stopped[0] ? tdp_pack_cstr(pk, rec->stopped) : msgpack_pack_nil(pk)) ||
	    tdp_pack_cstr(pk, "error") || pack_error(pk, rec) || tdp_pack_cstr(pk, "result"))
		return -1;
	if (!rec->result)
		return msgpack_pack_nil(pk);
	return pk->callback(pk->data, (const char *)rec->result, rec->result_len);
}

int jobs_table_pack(msgpack_packer *pk, struct job_record *rec)
{
	return pack(pk, rec, false);
}

int jobs_table_pack_file(msgpack_packer *pk, struct job_record *rec)
{
	return pack(pk, rec, true);
}

/* Read back what pack_eval wrote. */
static int restore_eval(struct job_record *rec, const msgpack_object *o)
{
	const msgpack_object *metrics;

	if (!o || o->type == MSGPACK_OBJECT_NIL)
		return 0;
	if (o->type != MSGPACK_OBJECT_MAP || tdp_obj_number(tdp_map_find(o, "loss"), &rec->eval_loss) < 0)
		return -EINVAL;
	metrics = tdp_map_find(o, "metrics");
	if (!metrics || metrics->type != MSGPACK_OBJECT_MAP || metrics->via.map.size > TRAIN_MAX_METRICS)
		return -EINVAL;
	rec->nmetrics = metrics->via.map.size;
	for (unsigned m = 0; m < rec->nmetrics; m++)
		if (tdp_obj_strcpy(&metrics->via.map.ptr[m].key, rec->metrics[m], sizeof(rec->metrics[m])) < 0 ||
		    tdp_obj_number(&metrics->via.map.ptr[m].val, &rec->eval_metrics[m]) < 0)
			return -EINVAL;
	rec->has_eval = true;
	return 0;
}

/* The scalar fields of a restored record. */
static int restore_fields(struct job_record *rec, const msgpack_object *map)
{
	const msgpack_object *o;
	uint64_t u;
	double t;

	if (tdp_obj_uint(tdp_map_find(map, "owner"), &u) < 0 || u > UINT32_MAX)
		return -EINVAL;
	rec->owner = (uint32_t)u;
	o = tdp_map_find(map, "state");
	for (rec->state = 0; rec->state < JOB_STATE_COUNT; rec->state++)
		if (o && tdp_obj_str_eq(o, state_names[rec->state]))
			break;
	if (rec->state == JOB_STATE_COUNT)
		return -EINVAL;
	o = tdp_map_find(map, "model");
	if (o && o->type != MSGPACK_OBJECT_NIL && tdp_obj_strcpy(o, rec->model, sizeof(rec->model)) < 0)
		return -EINVAL;
	if (tdp_obj_number(tdp_map_find(map, "started"), &t) < 0)
		return -EINVAL;
	rec->started_ns = (int64_t)(t * 1e9);
	if (tdp_obj_number(tdp_map_find(map, "ended"), &t) == 0)
		rec->ended_ns = (int64_t)(t * 1e9);
	if (tdp_obj_int(tdp_map_find(map, "step"), &rec->step) < 0 ||
	    tdp_obj_uint(tdp_map_find(map, "run_step"), &rec->run_step) < 0 ||
	    tdp_obj_uint(tdp_map_find(map, "steps"), &rec->steps) < 0 ||
	    tdp_obj_uint(tdp_map_find(map, "epoch"), &rec->epoch) < 0 ||
	    tdp_obj_uint(tdp_map_find(map, "epochs"), &rec->epochs) < 0 ||
	    tdp_obj_number(tdp_map_find(map, "loss"), &rec->loss) < 0 ||
	    tdp_obj_number(tdp_map_find(map, "lr"), &rec->lr) < 0 ||
	    tdp_obj_number(tdp_map_find(map, "samples_per_s"), &rec->samples_per_s) < 0 ||
	    tdp_obj_number(tdp_map_find(map, "elapsed"), &rec->elapsed) < 0)
		return -EINVAL;
	o = tdp_map_find(map, "devices");
	if (!o || o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size > GPU_MAX_DEVICES)
		return -EINVAL;
	rec->ndev = o->via.array.size;
	for (unsigned i = 0; i < rec->ndev; i++)
		if (tdp_obj_uint(&o->via.array.ptr[i], &u) < 0 || u > UINT32_MAX)
			return -EINVAL;
		else
			rec->devs[i] = (uint32_t)u;
	o = tdp_map_find(map, "stopped");
	if (o && o->type != MSGPACK_OBJECT_NIL && tdp_obj_strcpy(o, rec->stopped, sizeof(rec->stopped)) < 0)
		return -EINVAL;
	o = tdp_map_find(map, "error");
	if (o && o->type == MSGPACK_OBJECT_MAP) {
		if (tdp_obj_uint(tdp_map_find(o, "code"), &u) < 0 || u > 1000 ||
		    tdp_obj_strcpy(tdp_map_find(o, "message"), rec->err_message, sizeof(rec->err_message)) < 0)
			return -EINVAL;
		rec->err_code = (int)u;
	}
	return restore_eval(rec, tdp_map_find(map, "eval"));
}

int jobs_table_restore(struct daemon *d, const msgpack_object *map)
{
	const msgpack_object *result;
	struct job_record *rec;
	uint64_t id;
	int r;

	if (!map || map->type != MSGPACK_OBJECT_MAP || tdp_obj_uint(tdp_map_find(map, "job"), &id) < 0 || id == 0)
		return -EINVAL;
	rec = calloc(1, sizeof(*rec));
	if (!rec)
		return -ENOMEM;
	rec->id = id;
	r = restore_fields(rec, map);
	if (r == 0 && jobs_table_find(d, rec->owner, id)) {
		record_free(rec);
		return 0;
	}
	if (r == 0 && (result = tdp_map_find(map, "result")) && result->type == MSGPACK_OBJECT_MAP) {
		msgpack_sbuffer sb;
		msgpack_packer pk;

		msgpack_sbuffer_init(&sb);
		msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
		if (msgpack_pack_object(&pk, *result) == 0 && (rec->result = malloc(sb.size))) {
			memcpy(rec->result, sb.data, sb.size);
			rec->result_len = sb.size;
		} else {
			r = -ENOMEM;
		}
		msgpack_sbuffer_destroy(&sb);
	}
	if (r == 0 && rec->state == JOB_INTERRUPTED) {
		const msgpack_object *resume = tdp_map_find(map, "resume");

		if (resume && resume->type == MSGPACK_OBJECT_MAP)
			r = jobs_table_set_resume(rec, resume);
	}
	if (r < 0) {
		record_free(rec);
		return r;
	}
	if (rec->state == JOB_RUNNING) {
		rec->state = JOB_INTERRUPTED;
		rec->stopped[0] = 0;
	}
	rec->d = d;
	rec->next = d->job_records;
	d->job_records = rec;
	return 0;
}

void jobs_table_free(struct daemon *d)
{
	while (d->job_records) {
		struct job_record *rec = d->job_records;

		d->job_records = rec->next;
		record_free(rec);
	}
}

/* tensorctl jobs, logs [-f] JOB and cancel JOB: detached train.run jobs
 * (docs/protocol.md, "Jobs"); drain [on|off]. */
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctl_cmd.h"
#include "json.h"
#include "pack.h"

/* Pack {job, owner?} for the job text `text`: an id of the caller's, or
 * UID:ID for another user's (root's to name; each user numbers its own jobs,
 * docs/protocol.md). Returns CTL_EXIT_OK or a usage error. */
static int pack_job_ref(msgpack_packer *pk, const char *text)
{
	const char *colon = strchr(text, ':');
	uint64_t id, owner = 0;
	char uid[24];
	int status;

	if (colon) {
		if ((size_t)(colon - text) >= sizeof(uid))
			return ctl_usage_error("JOB: an id, or UID:ID for another user's job");
		memcpy(uid, text, (size_t)(colon - text));
		uid[colon - text] = '\0';
		if ((status = ctl_parse_count("JOB's UID", uid, &owner)) != CTL_EXIT_OK)
			return status;
		text = colon + 1;
	}
	if ((status = ctl_parse_count("JOB", text, &id)) != CTL_EXIT_OK)
		return status;
	if (msgpack_pack_map(pk, colon ? 2 : 1) || tdp_pack_cstr(pk, "job") || msgpack_pack_uint64(pk, id) ||
	    (colon && (tdp_pack_cstr(pk, "owner") || msgpack_pack_uint64(pk, owner))))
		return ctl_error("out of memory");
	return CTL_EXIT_OK;
}

/* Call `method` with {job: c->pos[0]} (or no params); the result unpacked
 * into `u`, its buffer in *ret_res. */
static int call_job(struct ctl *c, const char *method, bool with_id, msgpack_unpacked *u, void **ret_res)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	size_t len = 0, off = 0;
	int status = CTL_EXIT_OK, r;

	*ret_res = NULL;
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	if ((with_id && (status = pack_job_ref(&pk, c->pos[0])) != CTL_EXIT_OK) ||
	    (status = ctl_connect(c)) != CTL_EXIT_OK) {
		msgpack_sbuffer_destroy(&sb);
		return status;
	}
	r = tensord_call_raw(c->td, method, with_id ? sb.data : NULL, with_id ? sb.size : 0, ret_res, &len);
	msgpack_sbuffer_destroy(&sb);
	if (r < 0)
		return ctl_call_failed(c, r);
	if (msgpack_unpack_next(u, *ret_res, len, &off) != MSGPACK_UNPACK_SUCCESS ||
	    u->data.type != MSGPACK_OBJECT_MAP)
		status = ctl_error("malformed reply");
	return status;
}

int ctl_cmd_jobs(struct ctl *c)
{
	msgpack_unpacked u;
	const msgpack_object *jobs;
	void *res;
	int status;

	msgpack_unpacked_init(&u);
	status = call_job(c, "job.list", false, &u, &res);
	if (status == CTL_EXIT_OK) {
		jobs = tdp_map_find(&u.data, "jobs");
		if (!jobs || jobs->type != MSGPACK_OBJECT_ARRAY) {
			status = ctl_error("malformed reply: no jobs");
		} else if (c->json) {
			ctl_json_msgpack(stdout, jobs);
			fputc('\n', stdout);
		} else {
			ctl_print_job_header(stdout);
			for (uint32_t i = 0; i < jobs->via.array.size; i++)
				ctl_print_job_row(stdout, &jobs->via.array.ptr[i]);
		}
	}
	msgpack_unpacked_destroy(&u);
	free(res);
	return status;
}

int ctl_cmd_cancel(struct ctl *c)
{
	msgpack_unpacked u;
	void *res;
	int status;

	msgpack_unpacked_init(&u);
	status = call_job(c, "job.cancel", true, &u, &res);
	if (status == CTL_EXIT_OK && c->json) {
		ctl_json_msgpack(stdout, &u.data);
		fputc('\n', stdout);
	}
	msgpack_unpacked_destroy(&u);
	free(res);
	return status;
}

/* A job's end for people: the run's result line, or why it did not end
 * well (exit status 1). */
static int print_end(struct ctl *c, const msgpack_object *st)
{
	const msgpack_object *result = tdp_map_find(st, "result"), *err = tdp_map_find(st, "error");
	int sl, ml;
	const char *state = ctl_job_str(st, "state", &sl);

	if (c->json) {
		ctl_json_msgpack(stdout, st);
		fputc('\n', stdout);
	} else if (strncmp(state, "running", (size_t)sl) == 0 && sl == 7) {
		ctl_print_job_header(stdout);
		ctl_print_job_row(stdout, st);
		return CTL_EXIT_OK;
	} else if (result && result->type == MSGPACK_OBJECT_MAP) {
		if (ctl_print_train_result(c, result) != CTL_EXIT_OK)
			return CTL_EXIT_FAIL;
		if (strncmp(state, "cancelled", (size_t)sl) == 0)
			printf("job %" PRIu64 " was cancelled\n", ctl_job_uint(st, "job"));
	} else if (err && err->type == MSGPACK_OBJECT_MAP) {
		const char *msg = ctl_job_str(err, "message", &ml);

		ctl_error("job %" PRIu64 " failed: %.*s", ctl_job_uint(st, "job"), ml, msg);
	} else {
		printf("job %" PRIu64 " %.*s at step %" PRIu64 "/%" PRIu64 "\n", ctl_job_uint(st, "job"), sl, state,
		       ctl_job_uint(st, "run_step"), ctl_job_uint(st, "steps"));
	}
	return strncmp(state, "done", (size_t)sl) == 0 && sl == 4 ? CTL_EXIT_OK : CTL_EXIT_FAIL;
}

/* logs -f: job.watch, which answers when the job ends. */
static int watch_call(struct tensord *td, const void *params, size_t len, void **ret, size_t *ret_len)
{
	return tensord_call_raw(td, "job.watch", params, len, ret, ret_len);
}

int ctl_cmd_logs(struct ctl *c)
{
	msgpack_unpacked u;
	void *res = NULL;
	int status;

	msgpack_unpacked_init(&u);
	if (c->follow) {
		msgpack_sbuffer sb;
		msgpack_packer pk;

		msgpack_sbuffer_init(&sb);
		msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
		status = pack_job_ref(&pk, c->pos[0]);
		if (status == CTL_EXIT_OK)
			status = ctl_call_run(c, &sb, watch_call, true, &u, &res);
		msgpack_sbuffer_destroy(&sb);
		if (status == CTL_EXIT_OK && u.data.type != MSGPACK_OBJECT_MAP)
			status = ctl_error("malformed reply");
	} else {
		status = call_job(c, "job.stat", true, &u, &res);
	}
	if (status == CTL_EXIT_OK)
		status = print_end(c, &u.data);
	msgpack_unpacked_destroy(&u);
	free(res);
	return status;
}

/* One job.drain call (`undo` for "off"): its draining, running, waiting. */
static int drain_call(struct ctl *c, bool undo, bool *ret_draining, uint64_t *ret_running, uint64_t *ret_waiting)
{
	static const char undo_params[] = "\x81\xa4undo\xc3"; /* {"undo": true} */
	msgpack_unpacked u;
	size_t len = 0, off = 0;
	void *res = NULL;
	const msgpack_object *o;
	int status = CTL_EXIT_OK, r;

	r = tensord_call_raw(c->td, "job.drain", undo ? undo_params : NULL, undo ? sizeof(undo_params) - 1 : 0,
			     &res, &len);
	if (r < 0)
		return ctl_call_failed(c, r);
	msgpack_unpacked_init(&u);
	if (msgpack_unpack_next(&u, res, len, &off) != MSGPACK_UNPACK_SUCCESS || u.data.type != MSGPACK_OBJECT_MAP ||
	    !(o = tdp_map_find(&u.data, "draining")) || o->type != MSGPACK_OBJECT_BOOLEAN ||
	    tdp_obj_uint(tdp_map_find(&u.data, "running"), ret_running) < 0 ||
	    tdp_obj_uint(tdp_map_find(&u.data, "waiting"), ret_waiting) < 0)
		status = ctl_error("malformed reply");
	else
		*ret_draining = o->via.boolean;
	msgpack_unpacked_destroy(&u);
	free(res);
	return status;
}

int ctl_cmd_drain(struct ctl *c)
{
	bool undo = c->npos == 1 && !strcmp(c->pos[0], "off"), draining = false;
	uint64_t running = 0, waiting = 0;
	int status;

	if (c->npos == 1 && !undo && strcmp(c->pos[0], "on"))
		return ctl_usage_error("drain takes on or off, not '%.64s'", c->pos[0]);
	if ((status = ctl_connect(c)) != CTL_EXIT_OK)
		return status;
	/* On: until the runs stopped (each after its steps in flight). */
	while ((status = drain_call(c, undo, &draining, &running, &waiting)) == CTL_EXIT_OK && !undo && running)
		usleep(100 * 1000);
	if (status != CTL_EXIT_OK)
		return status;
	if (c->json)
		printf("{\"draining\":%s,\"running\":%" PRIu64 ",\"waiting\":%" PRIu64 "}\n", draining ? "true" : "false",
		       running, waiting);
	else if (undo)
		printf("accepting train.run again; %" PRIu64 " drained jobs resumed\n", running);
	else
		printf("drained: no train.run runs; %" PRIu64 " jobs wait to resume after a restart or "
		       "'tensorctl drain off'\n", waiting);
	return CTL_EXIT_OK;
}

/* ping and info. */
#include "methods/methods_core.h"
#include "methods/methods_job.h"

#include <errno.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "daemon.h"
#include "train/cluster.h"
#include "train/job.h"
#include "train/jobs_table.h"
#include "pack.h"
#include "persist/recover.h"
#include "rpc.h"
#include "methods/params.h"
#include "status.h"
#include "store/names.h"
#include "store/store.h"
#include "wire_limits.h"

int method_ping(struct request *req)
{
	msgpack_packer *pk = req->pk;

	if (params_none(req) < 0)
		return -1;
	if (tdp_write_result_head(pk, req->msgid) < 0 || msgpack_pack_map(pk, 3) ||
	    tdp_pack_cstr(pk, "pong") || msgpack_pack_true(pk) ||
	    tdp_pack_cstr(pk, "version") || tdp_pack_cstr(pk, TENSORD_VERSION) ||
	    tdp_pack_cstr(pk, "protocol") || msgpack_pack_int(pk, TDP_PROTOCOL_VERSION))
		return request_fail(req, TDP_INTERNAL, "out of memory");
	return 0;
}

static int kv_u64(msgpack_packer *pk, const char *key, uint64_t v)
{
	return tdp_pack_cstr(pk, key) || msgpack_pack_uint64(pk, v);
}

static int kv_str(msgpack_packer *pk, const char *key, const char *v)
{
	return tdp_pack_cstr(pk, key) || tdp_pack_cstr(pk, v);
}

static int kv_seconds(msgpack_packer *pk, const char *key, uint64_t ns);

/* The entries every device has, active or not (13). */
static int write_device_desc(msgpack_packer *pk, const struct gpu_device_desc *dev, bool active,
			     uint64_t used, uint64_t reserved)
{
	return kv_u64(pk, "index", dev->index) ||
	       kv_str(pk, "name", dev->name) ||
	       kv_str(pk, "type", dev->type) ||
	       kv_str(pk, "driver", dev->driver) ||
	       kv_u64(pk, "vendor_id", dev->vendor_id) ||
	       kv_u64(pk, "device_id", dev->device_id) ||
	       kv_str(pk, "api_version", dev->api_version) ||
	       tdp_pack_cstr(pk, "active") || (active ? msgpack_pack_true(pk) : msgpack_pack_false(pk)) ||
	       kv_u64(pk, "memory_total", dev->heap_size) ||
	       kv_u64(pk, "memory_used", used) ||
	       kv_u64(pk, "memory_reserved", reserved) ||
	       kv_u64(pk, "max_storage_buffer_range", dev->max_storage_buffer_range) ||
	       kv_u64(pk, "max_allocation_size", dev->max_allocation_size);
}

struct per_device_count {
	uint64_t n[GPU_MAX_DEVICES];
};

static void count_tensor(void *data, struct tensor *t)
{
	struct per_device_count *c = data;

	if (t->device < GPU_MAX_DEVICES)
		c->n[t->device]++;
}

/* info's "devices": the devices in use by id, then the others found. */
static int write_devices(msgpack_packer *pk, const struct daemon *d)
{
	struct per_device_count per = { { 0 } };
	uint32_t unused = 0;
	int fail;

	store_foreach(d->store, count_tensor, &per);
	for (uint32_t i = 0; i < d->ndevices; i++) {
		bool used = false;

		for (uint32_t id = 0; id < d->ngpus; id++)
			used |= d->gpus[id]->desc.index == i;
		unused += !used;
	}
	fail = msgpack_pack_array(pk, d->ngpus + unused);
	for (uint32_t id = 0; !fail && id < d->ngpus; id++) {
		const struct gpu_device *g = d->gpus[id];

		fail = msgpack_pack_map(pk, 19) ||
		       write_device_desc(pk, &g->desc, true, g->mem.used, g->mem.reserved) ||
		       kv_u64(pk, "id", id) ||
		       kv_u64(pk, "memory_limit", g->mem.limit) ||
		       kv_u64(pk, "tensors", per.n[id]) ||
		       kv_u64(pk, "submissions", g->stats.submissions) ||
		       kv_seconds(pk, "busy_seconds", g->stats.busy_ns) ||
		       tdp_pack_cstr(pk, "load") || msgpack_pack_double(pk, g->load);
	}
	for (uint32_t i = 0; !fail && i < d->ndevices; i++) {
		bool used = false;

		for (uint32_t id = 0; id < d->ngpus; id++)
			used |= d->gpus[id]->desc.index == i;
		if (!used)
			fail = msgpack_pack_map(pk, 13) || write_device_desc(pk, &d->devices[i], false, 0, 0);
	}
	return fail;
}

static int write_limits(msgpack_packer *pk, const struct config *c)
{
	return msgpack_pack_map(pk, 24) ||
	       kv_u64(pk, "max_message_bytes", c->max_message_bytes) ||
	       kv_u64(pk, "max_tensor_bytes", c->max_tensor_bytes) ||
	       kv_u64(pk, "max_depth", TDP_MAX_DEPTH) ||
	       kv_u64(pk, "max_objects", TDP_MAX_OBJECTS) ||
	       kv_u64(pk, "max_name_len", TDP_MAX_NAME_LEN) ||
	       kv_u64(pk, "max_rank", TDP_MAX_RANK) ||
	       kv_u64(pk, "max_tensors", c->max_tensors) ||
	       kv_u64(pk, "max_connections", c->max_connections) ||
	       kv_u64(pk, "max_connections_per_user", c->max_connections_per_user) ||
	       kv_u64(pk, "user_max_tensors", c->user_max_tensors) ||
	       kv_u64(pk, "user_max_bytes", c->user_max_bytes) ||
	       kv_u64(pk, "max_device_bytes", c->max_device_bytes) ||
	       kv_u64(pk, "max_inflight", c->max_inflight) ||
	       kv_u64(pk, "max_output_backlog", c->max_output_backlog) ||
	       kv_u64(pk, "stall_timeout", c->stall_timeout) ||
	       kv_u64(pk, "input_timeout", c->input_timeout) ||
	       kv_u64(pk, "max_input_bytes", c->max_input_bytes) ||
	       kv_u64(pk, "user_max_buffer_bytes", c->user_max_buffer_bytes) ||
	       kv_u64(pk, "user_max_models", c->user_max_models) ||
	       kv_u64(pk, "user_max_kernels", c->user_max_kernels) ||
	       kv_u64(pk, "user_max_jobs", c->user_max_jobs) ||
	       kv_u64(pk, "request_timeout_ms", c->request_timeout_ms) ||
	       kv_u64(pk, "kernel_timeout_ms", c->kernel_timeout_ms) ||
	       kv_u64(pk, "turn_budget", DAEMON_TURN_BUDGET);
}

/* The caller's own usage against its quotas (0: no quota). */
static int write_user(msgpack_packer *pk, const struct request *req)
{
	const struct config *cfg = &req->call.d->cfg;
	uint32_t uid = (uint32_t)req->call.cred.uid, gid = (uint32_t)req->call.cred.gid;
	struct store_usage use;

	store_usage_of(req->call.d->store, req->call.cred.uid, &use);
	return msgpack_pack_map(pk, 6) ||
	       kv_u64(pk, "uid", req->call.cred.uid) ||
	       kv_u64(pk, "gid", req->call.cred.gid) ||
	       kv_u64(pk, "tensors", use.tensors) ||
	       kv_u64(pk, "bytes", use.bytes) ||
	       kv_u64(pk, "max_tensors", config_user_value(&cfg->user_quota_tensors, uid, gid, cfg->user_max_tensors)) ||
	       kv_u64(pk, "max_bytes", config_user_value(&cfg->user_quota_bytes, uid, gid, cfg->user_max_bytes));
}

static int kv_seconds(msgpack_packer *pk, const char *key, uint64_t ns)
{
	return tdp_pack_cstr(pk, key) || msgpack_pack_double(pk, (double)ns / 1e9);
}

/* One map per method-slot counter: {"ping": n, ..., "other": n}. */
static int write_per_method(msgpack_packer *pk, const struct metrics *m, int which)
{
	unsigned n = request_method_count() + 1;
	int fail = msgpack_pack_map(pk, n);

	for (unsigned i = 0; !fail && i < n; i++) {
		const struct metrics_method *mm = &m->method[i];

		fail = tdp_pack_cstr(pk, request_method_name(i)) ||
		       (which == 0 ? msgpack_pack_uint64(pk, mm->requests) :
			which == 1 ? msgpack_pack_uint64(pk, mm->errors) :
				     msgpack_pack_double(pk, (double)mm->busy_ns / 1e9));
	}
	return fail;
}

/* The "counters" map of info (docs/protocol.md). */
static int write_counters(msgpack_packer *pk, const struct daemon *d)
{
	const struct metrics *m = &d->metrics;
	struct gpu_pipeline_stats ps = { 0 };
	struct gpu_stats gs = { 0 };
	uint64_t built = 0;

	/* Summed over the devices (docs/protocol.md). */
	for (uint32_t id = 0; id < d->ngpus; id++) {
		struct gpu_pipeline_stats one;

		gs.submissions += d->gpus[id]->stats.submissions;
		gs.busy_ns += d->gpus[id]->stats.busy_ns;
		gs.wait_ns += d->gpus[id]->stats.wait_ns;
		gs.timestamps = d->gpus[id]->stats.timestamps;
		gpu_pipeline_stats(d->gpus[id], &one);
		ps.hits += one.hits;
		ps.compiles += one.compiles;
		ps.cache_hits += one.cache_hits;
		ps.compile_ns += one.compile_ns;
		ps.feedback = one.feedback;
		built += gpu_pipeline_count(d->gpus[id]);
	}
	return msgpack_pack_map(pk, 14) ||
	       tdp_pack_cstr(pk, "requests") || write_per_method(pk, m, 0) ||
	       tdp_pack_cstr(pk, "errors") || write_per_method(pk, m, 1) ||
	       tdp_pack_cstr(pk, "request_seconds") || write_per_method(pk, m, 2) ||
	       kv_u64(pk, "bytes_in", m->bytes_in) ||
	       kv_u64(pk, "bytes_out", m->bytes_out) ||
	       kv_u64(pk, "connections_accepted", m->connections) ||
	       kv_u64(pk, "connections_refused", m->connections_refused) ||
	       kv_u64(pk, "protocol_errors", m->protocol_errors) ||
	       kv_u64(pk, "reloads", m->reloads) ||
	       kv_u64(pk, "reload_failures", m->reload_failures) ||
	       kv_u64(pk, "op_batches", m->op_batches) ||
	       kv_u64(pk, "op_batched", m->op_batched) ||
	       tdp_pack_cstr(pk, "gpu") || msgpack_pack_map(pk, 5) ||
	       kv_u64(pk, "device", d->ngpus ? d->gpus[0]->desc.index : 0) ||
	       kv_u64(pk, "submissions", gs.submissions) ||
	       kv_seconds(pk, "busy_seconds", gs.busy_ns) ||
	       kv_seconds(pk, "wait_seconds", gs.wait_ns) ||
	       kv_str(pk, "timing", gs.timestamps ? "timestamps" : "fences") ||
	       tdp_pack_cstr(pk, "pipelines") || msgpack_pack_map(pk, 6) ||
	       kv_u64(pk, "built", built) ||
	       kv_u64(pk, "hits", ps.hits) ||
	       kv_u64(pk, "compiles", ps.compiles) ||
	       kv_u64(pk, "cache_hits", ps.cache_hits) ||
	       kv_seconds(pk, "compile_seconds", ps.compile_ns) ||
	       tdp_pack_cstr(pk, "cache_feedback") ||
	       (ps.feedback ? msgpack_pack_true(pk) : msgpack_pack_false(pk));
}

/* One user's entry of info's "users". */
static int write_one_user(msgpack_packer *pk, const struct daemon *d, uint32_t uid, const struct usage_user *u)
{
	struct store_usage use;

	store_usage_of(d->store, uid, &use);
	return msgpack_pack_map(pk, 8) || kv_u64(pk, "uid", uid) ||
	       kv_seconds(pk, "gpu_seconds", u ? u->gpu_ns : 0) ||
	       kv_seconds(pk, "gpu_seconds_hour", u ? usage_last_hour(u) : 0) ||
	       kv_u64(pk, "requests", u ? u->requests : 0) ||
	       kv_u64(pk, "connections", u ? u->connections : 0) ||
	       kv_u64(pk, "tensors", use.tensors) || kv_u64(pk, "bytes", use.bytes) ||
	       kv_u64(pk, "jobs", jobs_table_running(d, uid));
}

/* info's "users" (issue 34: who uses the GPU, as nvidia-smi's process list):
 * root sees every uid the daemon has served since it started, anyone else
 * its own entry only. */
static int write_users(msgpack_packer *pk, const struct daemon *d, uint32_t viewer)
{
	const struct usage *u = &d->usage;
	int fail;

	if (viewer != 0)
		return tdp_pack_cstr(pk, "users") || msgpack_pack_array(pk, 1) ||
		       write_one_user(pk, d, viewer, usage_find(u, viewer));
	fail = tdp_pack_cstr(pk, "users") || msgpack_pack_array(pk, u->n);
	for (unsigned i = 0; !fail && i < u->n; i++)
		fail = write_one_user(pk, d, u->users[i].uid, &u->users[i]);
	return fail;
}

/* info's "persistence" (like Redis's INFO persistence): whether and where
 * tensors persist (the directory for root only) and the checkpoints' record. */
static int write_persistence(msgpack_packer *pk, const struct daemon *d, uint32_t viewer)
{
	const struct metrics *m = &d->metrics;
	bool on = d->persist != NULL, last = m->last_checkpoint_unix_ns != 0;

	return tdp_pack_cstr(pk, "persistence") || msgpack_pack_map(pk, 8) ||
	       tdp_pack_cstr(pk, "enabled") || (on ? msgpack_pack_true(pk) : msgpack_pack_false(pk)) ||
	       tdp_pack_cstr(pk, "state_dir") ||
	       (on && viewer == 0 ? tdp_pack_cstr(pk, d->cfg.state_dir) : msgpack_pack_nil(pk)) ||
	       kv_u64(pk, "checkpoint_interval", d->cfg.checkpoint_interval) ||
	       kv_u64(pk, "checkpoints", m->checkpoints + m->checkpoints_failed) ||
	       kv_u64(pk, "failed_writes", m->checkpoint_failed_writes) ||
	       tdp_pack_cstr(pk, "last_checkpoint") ||
	       (last ? msgpack_pack_double(pk, (double)m->last_checkpoint_unix_ns / 1e9) : msgpack_pack_nil(pk)) ||
	       tdp_pack_cstr(pk, "last_checkpoint_seconds") ||
	       (last ? msgpack_pack_double(pk, (double)m->last_checkpoint_ns / 1e9) : msgpack_pack_nil(pk)) ||
	       tdp_pack_cstr(pk, "last_checkpoint_status") ||
	       (last ? tdp_pack_cstr(pk, m->last_checkpoint_ok ? "ok" : "failed") : msgpack_pack_nil(pk));
}

/* Whether `viewer` is told that `key` was lost or rolled back: root hears of
 * every name, anyone else only of the names in its own namespace (another
 * user's names, private ones included, are that user's business). */
static bool reset_name_shown(uint32_t viewer, const char *key)
{
	uint32_t ns;
	size_t off;

	if (viewer == 0)
		return true;
	return names_key_split(key, strlen(key), &ns, &off) == 0 && ns == viewer;
}

/* info's "device_resets" and "last_reset" (recover.h). */
static int write_resets(msgpack_packer *pk, const struct daemon *d, uint32_t viewer)
{
	char shown[NAMES_SHOWN_MAX];
	const struct recovery *rc = d->recovery;
	unsigned nshown = 0;
	int fail;

	fail = tdp_pack_cstr(pk, "device_resets") || msgpack_pack_uint64(pk, rc ? rc->resets : 0) ||
	       tdp_pack_cstr(pk, "last_reset");
	if (fail || !rc || !rc->resets)
		return fail || msgpack_pack_nil(pk);
	fail = msgpack_pack_map(pk, 6) ||
	       tdp_pack_cstr(pk, "time") || msgpack_pack_double(pk, (double)rc->time_ns / 1e9) ||
	       tdp_pack_cstr(pk, "seconds") || msgpack_pack_double(pk, rc->seconds) ||
	       tdp_pack_cstr(pk, "restored") || msgpack_pack_uint64(pk, rc->restored) ||
	       tdp_pack_cstr(pk, "lost_count") || msgpack_pack_uint64(pk, rc->lost_count) ||
	       tdp_pack_cstr(pk, "jobs_stopped") || msgpack_pack_uint64(pk, rc->jobs_stopped) ||
	       tdp_pack_cstr(pk, "lost");
	for (unsigned i = 0; i < rc->nlost; i++)
		nshown += reset_name_shown(viewer, rc->lost[i]);
	fail = fail || msgpack_pack_array(pk, nshown);
	for (unsigned i = 0; !fail && i < rc->nlost; i++)
		if (reset_name_shown(viewer, rc->lost[i]))
			fail = tdp_pack_cstr(pk, names_show(viewer, rc->lost[i], shown));
	return fail;
}

/* info's "cluster" (docs/cluster.md): the group, or nil for none. */
static int write_cluster(msgpack_packer *pk, struct daemon *d)
{
	struct cluster_state cs;

	if (!d->cluster)
		return msgpack_pack_nil(pk);
	cs = cluster_state(d->cluster);
	return msgpack_pack_map(pk, 5) || kv_u64(pk, "rank", (uint64_t)cs.rank) ||
	       kv_u64(pk, "size", (uint64_t)cs.size) || tdp_pack_cstr(pk, "broken") ||
	       (cs.broken ? msgpack_pack_true(pk) : msgpack_pack_false(pk)) || kv_str(pk, "why", cs.why) ||
	       tdp_pack_cstr(pk, "busy") || (train_group_busy(d) ? msgpack_pack_true(pk) : msgpack_pack_false(pk));
}

int method_info(struct request *req)
{
	struct daemon *d = req->call.d;
	msgpack_packer *pk = req->pk;
	uint64_t count, bytes;
	int fail;

	if (params_none(req) < 0)
		return -1;
	store_totals(d->store, &count, &bytes);
	fail = tdp_write_result_head(pk, req->msgid) < 0 || msgpack_pack_map(pk, 18) ||
	       kv_str(pk, "version", TENSORD_VERSION) ||
	       kv_u64(pk, "protocol", TDP_PROTOCOL_VERSION) ||
	       kv_u64(pk, "pid", (uint64_t)getpid()) ||
	       tdp_pack_cstr(pk, "uptime") ||
	       msgpack_pack_double(pk, (double)(daemon_now_ns(CLOCK_MONOTONIC) - d->start_ns) / 1e9) ||
	       tdp_pack_cstr(pk, "devices") || write_devices(pk, d);
	fail = fail || tdp_pack_cstr(pk, "tensors") || msgpack_pack_map(pk, 2) ||
	       kv_u64(pk, "count", count) || kv_u64(pk, "bytes", bytes) ||
	       kv_u64(pk, "connections", d->metrics.connections_open) ||
	       tdp_pack_cstr(pk, "requests") || msgpack_pack_map(pk, 2) ||
	       kv_u64(pk, "total", d->requests) || kv_u64(pk, "failed", d->requests_failed) ||
	       tdp_pack_cstr(pk, "limits") || write_limits(pk, &d->cfg) ||
	       tdp_pack_cstr(pk, "counters") || write_counters(pk, d) ||
	       tdp_pack_cstr(pk, "user") || write_user(pk, req) ||
	       tdp_pack_cstr(pk, "jobs") || job_pack_running(pk, &req->call) ||
	       write_resets(pk, d, req->call.cred.uid) ||
	       write_persistence(pk, d, req->call.cred.uid) ||
	       write_users(pk, d, req->call.cred.uid) ||
	       tdp_pack_cstr(pk, "draining") || (d->draining ? msgpack_pack_true(pk) : msgpack_pack_false(pk)) ||
	       tdp_pack_cstr(pk, "cluster") || write_cluster(pk, d);
	if (fail)
		return request_fail(req, TDP_INTERNAL, "out of memory");
	return 0;
}

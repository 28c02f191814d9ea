#include "prom.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <pwd.h>
#include <string.h>

#include "pack.h"

#define LABELS_MAX 4096
/* Label values are cut at this many bytes (device and driver names). */
#define LABEL_VALUE_MAX 256

struct prom {
	FILE *f;
	const char *family;     /* whose HELP/TYPE lines were written last */
	int samples;
};

/* Append key="value" to `buf` (a label set being built), escaped as the
 * format wants: backslash, double quote and newline. */
static void label_add(char *buf, size_t cap, const char *key, const char *val, size_t len)
{
	size_t n = strlen(buf);

	if (n + strlen(key) + 4 >= cap)
		return;
	n += (size_t)snprintf(buf + n, cap - n, "%s%s=\"", n ? "," : "", key);
	if (len > LABEL_VALUE_MAX)
		len = LABEL_VALUE_MAX;
	for (size_t i = 0; i < len && n + 4 < cap; i++) {
		unsigned char c = (unsigned char)val[i];

		if (c == '\\' || c == '"') {
			buf[n++] = '\\';
			buf[n++] = (char)c;
		} else if (c == '\n') {
			buf[n++] = '\\';
			buf[n++] = 'n';
		} else {
			buf[n++] = c < 0x20 || c >= 0x7f ? '?' : (char)c;
		}
	}
	buf[n++] = '"';
	buf[n] = '\0';
}

static void label_obj(char *buf, size_t cap, const char *key, const msgpack_object *o)
{
	char num[32];

	if (o && o->type == MSGPACK_OBJECT_STR) {
		label_add(buf, cap, key, o->via.str.ptr, o->via.str.size);
	} else if (o && o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
		snprintf(num, sizeof(num), "%" PRIu64, o->via.u64);
		label_add(buf, cap, key, num, strlen(num));
	} else {
		label_add(buf, cap, key, "?", 1);
	}
}

/* The sample value of `o`, or false when it is no number. */
static bool format_value(char *buf, size_t cap, const msgpack_object *o)
{
	if (!o)
		return false;
	switch (o->type) {
	case MSGPACK_OBJECT_POSITIVE_INTEGER:
		snprintf(buf, cap, "%" PRIu64, o->via.u64);
		return true;
	case MSGPACK_OBJECT_NEGATIVE_INTEGER:
		snprintf(buf, cap, "%" PRId64, o->via.i64);
		return true;
	case MSGPACK_OBJECT_FLOAT32:
	case MSGPACK_OBJECT_FLOAT64:
		if (isnan(o->via.f64))
			snprintf(buf, cap, "NaN");
		else if (isinf(o->via.f64))
			snprintf(buf, cap, "%sInf", o->via.f64 < 0 ? "-" : "+");
		else
			snprintf(buf, cap, "%.15g", o->via.f64);
		return true;
	case MSGPACK_OBJECT_BOOLEAN:
		snprintf(buf, cap, "%d", o->via.boolean ? 1 : 0);
		return true;
	default:
		return false;
	}
}

/* One sample of family `name` (a string literal: families are told apart by
 * pointer). The family's HELP and TYPE come before its first sample; callers
 * emit each family's samples together, as the format requires. */
static void sample(struct prom *p, const char *name, const char *type, const char *help,
		   const char *labels, const msgpack_object *value)
{
	char v[64];

	if (!format_value(v, sizeof(v), value))
		return;
	if (p->family != name) {
		fprintf(p->f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
		p->family = name;
	}
	if (labels && *labels)
		fprintf(p->f, "%s{%s} %s\n", name, labels, v);
	else
		fprintf(p->f, "%s %s\n", name, v);
	p->samples++;
}

/* Whether entry i of map `m` repeats the key of an earlier entry: one series
 * per label set, even from a daemon that sends a key twice. */
static bool seen_before(const msgpack_object *m, uint32_t i)
{
	const msgpack_object *k = &m->via.map.ptr[i].key;

	for (uint32_t j = 0; j < i; j++) {
		const msgpack_object *o = &m->via.map.ptr[j].key;

		if (o->type == MSGPACK_OBJECT_STR && o->via.str.size == k->via.str.size &&
		    memcmp(o->via.str.ptr, k->via.str.ptr, k->via.str.size) == 0)
			return true;
	}
	return false;
}

/* Samples {method="KEY"} VALUE for every entry of the map `m`. */
static void per_method(struct prom *p, const msgpack_object *m, const char *name,
		       const char *help)
{
	char labels[LABELS_MAX];

	if (!m || m->type != MSGPACK_OBJECT_MAP)
		return;
	for (uint32_t i = 0; i < m->via.map.size; i++) {
		const msgpack_object *k = &m->via.map.ptr[i].key;

		if (k->type != MSGPACK_OBJECT_STR || seen_before(m, i))
			continue;
		labels[0] = '\0';
		label_add(labels, sizeof(labels), "method", k->via.str.ptr, k->via.str.size);
		sample(p, name, "counter", help, labels, &m->via.map.ptr[i].val);
	}
}

/* Device i of `devices` if it is a map with an index no earlier device has
 * (each device is one series), else NULL. */
static const msgpack_object *device_at(const msgpack_object *devices, uint32_t i)
{
	const msgpack_object *d = &devices->via.array.ptr[i];
	uint64_t idx, other;

	if (d->type != MSGPACK_OBJECT_MAP || tdp_obj_uint(tdp_map_find(d, "index"), &idx) < 0)
		return NULL;
	for (uint32_t j = 0; j < i; j++) {
		const msgpack_object *e = &devices->via.array.ptr[j];

		if (e->type == MSGPACK_OBJECT_MAP &&
		    tdp_obj_uint(tdp_map_find(e, "index"), &other) == 0 && other == idx)
			return NULL;
	}
	return d;
}

/* One family with a sample per device of `devices` taking field `key`. */
static void per_device(struct prom *p, const msgpack_object *devices, const char *key,
		       const char *name, const char *help)
{
	char labels[LABELS_MAX];

	for (uint32_t i = 0; i < devices->via.array.size; i++) {
		const msgpack_object *d = device_at(devices, i);

		if (!d)
			continue;
		labels[0] = '\0';
		label_obj(labels, sizeof(labels), "device", tdp_map_find(d, "index"));
		sample(p, name, "gauge", help, labels, tdp_map_find(d, key));
	}
}

/* Device i of `devices` if tensord uses it (active, with an id no earlier
 * device has), else NULL: the series of the devices in use are keyed by id,
 * since one Vulkan device may be opened twice (docs/devices.md). */
static const msgpack_object *used_device_at(const msgpack_object *devices, uint32_t i)
{
	const msgpack_object *d = &devices->via.array.ptr[i], *a;
	uint64_t id, other;

	if (d->type != MSGPACK_OBJECT_MAP || tdp_obj_uint(tdp_map_find(d, "id"), &id) < 0)
		return NULL;
	a = tdp_map_find(d, "active");
	if (!a || a->type != MSGPACK_OBJECT_BOOLEAN || !a->via.boolean)
		return NULL;
	for (uint32_t j = 0; j < i; j++) {
		const msgpack_object *e = &devices->via.array.ptr[j];

		if (e->type == MSGPACK_OBJECT_MAP &&
		    tdp_obj_uint(tdp_map_find(e, "id"), &other) == 0 && other == id)
			return NULL;
	}
	return d;
}

/* One family with a sample {id, device} per device in use taking field `key`. */
static void per_used_device(struct prom *p, const msgpack_object *devices, const char *key,
			    const char *name, const char *type, const char *help)
{
	char labels[LABELS_MAX];

	for (uint32_t i = 0; i < devices->via.array.size; i++) {
		const msgpack_object *d = used_device_at(devices, i);

		if (!d)
			continue;
		labels[0] = '\0';
		label_obj(labels, sizeof(labels), "id", tdp_map_find(d, "id"));
		label_obj(labels, sizeof(labels), "device", tdp_map_find(d, "index"));
		sample(p, name, type, help, labels, tdp_map_find(d, key));
	}
}

static void write_devices(struct prom *p, const msgpack_object *devices)
{
	static const char info[] = "tensord_device_info";
	char labels[LABELS_MAX];
	msgpack_object one = { .type = MSGPACK_OBJECT_POSITIVE_INTEGER, .via.u64 = 1 };

	if (!devices || devices->type != MSGPACK_OBJECT_ARRAY)
		return;
	for (uint32_t i = 0; i < devices->via.array.size; i++) {
		const msgpack_object *d = device_at(devices, i);

		if (!d)
			continue;
		labels[0] = '\0';
		label_obj(labels, sizeof(labels), "device", tdp_map_find(d, "index"));
		label_obj(labels, sizeof(labels), "name", tdp_map_find(d, "name"));
		label_obj(labels, sizeof(labels), "type", tdp_map_find(d, "type"));
		label_obj(labels, sizeof(labels), "driver", tdp_map_find(d, "driver"));
		label_obj(labels, sizeof(labels), "api_version", tdp_map_find(d, "api_version"));
		sample(p, info, "gauge", "Each Vulkan device found; labels describe it.", labels, &one);
	}
	per_device(p, devices, "active", "tensord_device_active",
		   "1 for the device tensord keeps tensors on.");
	per_device(p, devices, "memory_total", "tensord_device_memory_total_bytes",
		   "Size of the device-local heap.");
	per_device(p, devices, "memory_used", "tensord_device_memory_used_bytes",
		   "Bytes of tensor data on the device.");
	per_device(p, devices, "memory_reserved", "tensord_device_memory_reserved_bytes",
		   "Bytes of Vulkan memory tensord holds on the device (>= used).");
	per_used_device(p, devices, "memory_limit", "tensord_device_memory_limit_bytes", "gauge",
			"Bytes tensord may hold on a device it uses (id: tensord's device id).");
	per_used_device(p, devices, "tensors", "tensord_device_tensors", "gauge",
			"Tensors stored on a device tensord uses.");
	per_used_device(p, devices, "load", "tensord_device_load", "gauge",
			"Fraction of the last second a device tensord uses was busy.");
	per_used_device(p, devices, "submissions", "tensord_device_submissions_total", "counter",
			"Command buffers submitted to a device tensord uses.");
	per_used_device(p, devices, "busy_seconds", "tensord_device_busy_seconds_total", "counter",
			"Execution time of the work submitted to a device tensord uses.");
}

static void write_limits(struct prom *p, const msgpack_object *limits)
{
	char labels[LABELS_MAX];

	if (!limits || limits->type != MSGPACK_OBJECT_MAP)
		return;
	for (uint32_t i = 0; i < limits->via.map.size; i++) {
		const msgpack_object *k = &limits->via.map.ptr[i].key;

		if (k->type != MSGPACK_OBJECT_STR || seen_before(limits, i))
			continue;
		labels[0] = '\0';
		label_add(labels, sizeof(labels), "limit", k->via.str.ptr, k->via.str.size);
		sample(p, "tensord_limit", "gauge", "Limits in force (see info).", labels,
		       &limits->via.map.ptr[i].val);
	}
}

static void write_gpu(struct prom *p, const msgpack_object *gpu, const msgpack_object *pipes)
{
	char labels[LABELS_MAX] = "";

	if (gpu && gpu->type == MSGPACK_OBJECT_MAP) {
		label_obj(labels, sizeof(labels), "device", tdp_map_find(gpu, "device"));
		sample(p, "tensord_gpu_submissions_total", "counter",
		       "Command buffers submitted to the device.", labels,
		       tdp_map_find(gpu, "submissions"));
		sample(p, "tensord_gpu_busy_seconds_total", "counter",
		       "Device time of the submitted work (timestamp queries; else submission to fence).",
		       labels, tdp_map_find(gpu, "busy_seconds"));
		sample(p, "tensord_gpu_wait_seconds_total", "counter",
		       "Time the daemon spent blocked waiting for the device.", labels,
		       tdp_map_find(gpu, "wait_seconds"));
	}
	if (!pipes || pipes->type != MSGPACK_OBJECT_MAP)
		return;
	sample(p, "tensord_pipelines", "gauge", "Compute pipelines built and kept.", labels,
	       tdp_map_find(pipes, "built"));
	sample(p, "tensord_pipeline_hits_total", "counter",
	       "Pipeline lookups served by a pipeline already built.", labels,
	       tdp_map_find(pipes, "hits"));
	sample(p, "tensord_pipeline_compiles_total", "counter",
	       "Pipelines built (first use of a shader).", labels, tdp_map_find(pipes, "compiles"));
	sample(p, "tensord_pipeline_cache_hits_total", "counter",
	       "Pipeline builds the on-disk pipeline cache satisfied, as the driver reports.", labels,
	       tdp_map_find(pipes, "cache_hits"));
	sample(p, "tensord_pipeline_compile_seconds_total", "counter",
	       "Time spent building pipelines.", labels, tdp_map_find(pipes, "compile_seconds"));
}

/* The user name of a uid, as a `user` label, where this machine knows it. */
static void user_label(char *labels, size_t cap, const msgpack_object *uid)
{
	struct passwd pw, *found = NULL;
	char buf[1024];
	uint64_t v;

	if (tdp_obj_uint(uid, &v) < 0 || v > UINT32_MAX ||
	    getpwuid_r((uid_t)v, &pw, buf, sizeof(buf), &found) != 0 || !found)
		return;
	label_add(labels, cap, "user", found->pw_name, strlen(found->pw_name));
}

/* info's "users": one family per figure, a sample per uid (root sees every
 * uid, anyone else itself), labelled with the user name where known. */
static void write_users(struct prom *p, const msgpack_object *users)
{
	static const char *const fam[][4] = {
		{ "gpu_seconds", "tensord_user_gpu_seconds_total", "counter", "Device time of the user's work." },
		{ "requests", "tensord_user_requests_total", "counter", "Requests of the user answered." },
		{ "connections", "tensord_user_connections", "gauge", "The user's connections open now." },
		{ "tensors", "tensord_user_tensors", "gauge", "Tensors the user owns." },
		{ "bytes", "tensord_user_tensor_bytes", "gauge", "Bytes of the tensors the user owns." },
		{ "jobs", "tensord_user_jobs", "gauge", "The user's detached jobs running." },
	};
	char labels[LABELS_MAX];

	if (!users || users->type != MSGPACK_OBJECT_ARRAY)
		return;
	for (size_t f = 0; f < sizeof(fam) / sizeof(fam[0]); f++)
		for (uint32_t i = 0; i < users->via.array.size; i++) {
			const msgpack_object *u = &users->via.array.ptr[i];
			bool dup = false;

			if (u->type != MSGPACK_OBJECT_MAP || !tdp_map_find(u, "uid"))
				continue;
			/* one series per uid, even from a daemon that sends one twice */
			for (uint32_t j = 0; j < i && !dup; j++) {
				const msgpack_object *o = &users->via.array.ptr[j];
				const msgpack_object *a = o->type == MSGPACK_OBJECT_MAP ? tdp_map_find(o, "uid") : NULL;

				dup = a && msgpack_object_equal(*a, *tdp_map_find(u, "uid"));
			}
			if (dup)
				continue;
			labels[0] = '\0';
			label_obj(labels, sizeof(labels), "uid", tdp_map_find(u, "uid"));
			user_label(labels, sizeof(labels), tdp_map_find(u, "uid"));
			sample(p, fam[f][1], fam[f][2], fam[f][3], labels, tdp_map_find(u, fam[f][0]));
		}
}

/* info's "persistence": whether tensors persist and the checkpoints' record. */
static void write_persistence(struct prom *p, const msgpack_object *per)
{
	msgpack_object b = { .type = MSGPACK_OBJECT_POSITIVE_INTEGER };
	const msgpack_object *o;

	if (!per || per->type != MSGPACK_OBJECT_MAP)
		return;
	o = tdp_map_find(per, "enabled");
	b.via.u64 = o && o->type == MSGPACK_OBJECT_BOOLEAN && o->via.boolean;
	sample(p, "tensord_persist_enabled", "gauge", "1 when tensors, models and jobs persist in a state directory.",
	       NULL, &b);
	sample(p, "tensord_checkpoints_total", "counter", "Checkpoint passes (periodic, store.sync, final).", NULL,
	       tdp_map_find(per, "checkpoints"));
	sample(p, "tensord_checkpoint_failed_writes_total", "counter",
	       "Tensors and models a checkpoint could not write (retried).", NULL, tdp_map_find(per, "failed_writes"));
	sample(p, "tensord_last_checkpoint_timestamp_seconds", "gauge", "Unix time the last checkpoint ended.",
	       NULL, tdp_map_find(per, "last_checkpoint"));
	sample(p, "tensord_last_checkpoint_duration_seconds", "gauge", "How long the last checkpoint took.", NULL,
	       tdp_map_find(per, "last_checkpoint_seconds"));
	o = tdp_map_find(per, "last_checkpoint_status");
	if (o && o->type == MSGPACK_OBJECT_STR) {
		b.via.u64 = o->via.str.size == 2 && !memcmp(o->via.str.ptr, "ok", 2);
		sample(p, "tensord_last_checkpoint_ok", "gauge",
		       "1 when the last checkpoint completed and wrote everything it tried.", NULL, &b);
	}
}

int ctl_prom_write(FILE *f, const msgpack_object *info)
{
	struct prom p = { .f = f };
	const msgpack_object *tensors, *counters;
	msgpack_object one = { .type = MSGPACK_OBJECT_POSITIVE_INTEGER, .via.u64 = 1 };
	char labels[LABELS_MAX] = "";

	if (!info || info->type != MSGPACK_OBJECT_MAP)
		return -EPROTO;
	if (tdp_map_find(info, "version")) {
		label_obj(labels, sizeof(labels), "version", tdp_map_find(info, "version"));
		label_obj(labels, sizeof(labels), "protocol", tdp_map_find(info, "protocol"));
		sample(&p, "tensord_info", "gauge", "The daemon's version and protocol.", labels, &one);
	}
	sample(&p, "tensord_uptime_seconds", "gauge", "Seconds since the daemon started.", NULL,
	       tdp_map_find(info, "uptime"));
	sample(&p, "tensord_connections", "gauge", "Clients connected now.", NULL,
	       tdp_map_find(info, "connections"));
	tensors = tdp_map_find(info, "tensors");
	if (tensors && tensors->type == MSGPACK_OBJECT_MAP) {
		sample(&p, "tensord_tensors", "gauge", "Tensors stored.", NULL,
		       tdp_map_find(tensors, "count"));
		sample(&p, "tensord_tensor_bytes", "gauge", "Bytes of tensor data stored.", NULL,
		       tdp_map_find(tensors, "bytes"));
	}
	write_devices(&p, tdp_map_find(info, "devices"));
	write_limits(&p, tdp_map_find(info, "limits"));
	write_persistence(&p, tdp_map_find(info, "persistence"));
	write_users(&p, tdp_map_find(info, "users"));

	counters = tdp_map_find(info, "counters");
	if (counters && counters->type == MSGPACK_OBJECT_MAP) {
		per_method(&p, tdp_map_find(counters, "requests"), "tensord_requests_total",
			   "Requests answered, by method (\"other\": unknown method names).");
		per_method(&p, tdp_map_find(counters, "errors"), "tensord_request_errors_total",
			   "Requests answered with an error, by method.");
		per_method(&p, tdp_map_find(counters, "request_seconds"),
			   "tensord_request_seconds_total",
			   "Time the event loop spent serving requests, by method.");
		sample(&p, "tensord_received_bytes_total", "counter", "Bytes read from clients.", NULL,
		       tdp_map_find(counters, "bytes_in"));
		sample(&p, "tensord_sent_bytes_total", "counter", "Bytes written to clients.", NULL,
		       tdp_map_find(counters, "bytes_out"));
		sample(&p, "tensord_connections_accepted_total", "counter", "Connections accepted.",
		       NULL, tdp_map_find(counters, "connections_accepted"));
		sample(&p, "tensord_connections_refused_total", "counter",
		       "Connections refused at max_connections.", NULL,
		       tdp_map_find(counters, "connections_refused"));
		sample(&p, "tensord_protocol_errors_total", "counter",
		       "Connections closed because their bytes could not be parsed.", NULL,
		       tdp_map_find(counters, "protocol_errors"));
		sample(&p, "tensord_reloads_total", "counter", "Configuration reloads applied (SIGHUP).",
		       NULL, tdp_map_find(counters, "reloads"));
		sample(&p, "tensord_reload_failures_total", "counter",
		       "Configuration reloads refused (the file did not parse).", NULL,
		       tdp_map_find(counters, "reload_failures"));
		write_gpu(&p, tdp_map_find(counters, "gpu"), tdp_map_find(counters, "pipelines"));
	}
	return p.samples ? p.samples : -EPROTO;
}

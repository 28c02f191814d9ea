/* The unit tests' daemon on the stub device (stub_daemon.h). */
#include "stub_daemon.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <time.h>
#include <cmocka.h>

#include "base/clock.h"
#include "base/log.h"
#include "devices.h"
#include "dtype.h"
#include "fuzz_gpu.h"
#include "gpu/memory.h"
#include "gpu/transfer.h"
#include "kernels/kernel.h"
#include "store/model.h"
#include "store/names.h"
#include "train/jobs_table.h"

/* ---- the daemon ---- */

static void release_tensor(void *userdata, struct tensor *t)
{
	struct daemon *d = userdata;

	gpu_memory_free(devices_of(d, t), &t->alloc);
}

int stub_daemon_init(struct stub_daemon *sd)
{
	struct daemon *d = &sd->d;

	memset(sd, 0, sizeof(*sd));
	sd->blocks0 = fuzz_gpu_live_blocks();
	log_set_level(getenv("UNIT_TRACE") ? LOG_DEBUG : LOG_EMERG);
	fuzz_gpu_init(&sd->gpu, STUB_HEAP_BYTES);
	sd->desc = sd->gpu.desc;
	config_defaults(&d->cfg);
	d->gpus[0] = &sd->gpu;
	d->ngpus = 1;
	d->devices = &sd->desc;
	d->ndevices = 1;
	d->start_ns = daemon_now_ns(CLOCK_MONOTONIC);
	d->store = store_new((uint32_t)d->cfg.max_tensors, release_tensor, d);
	d->models = models_new(8);
	if (!d->store || !d->models || kernels_init(d) < 0) {
		models_free(d->models);
		store_free(d->store);
		return -ENOMEM;
	}
	store_set_quota(d->store, d->cfg.user_max_tensors, d->cfg.user_max_bytes);
	return 0;
}

void stub_daemon_fini(struct stub_daemon *sd)
{
	jobs_table_free(&sd->d);
	kernels_fini(&sd->d);
	assert_null(sd->d.kernel_table);
	assert_null(sd->d.job_records);
	models_free(sd->d.models);
	store_free(sd->d.store);
	usage_free(&sd->d.usage);
	assert_int_equal(stub_live(sd), 0);
	assert_int_equal(sd->gpu.mem.used, 0);
	assert_int_equal(sd->gpu.mem.reserved, 0);
}

struct stub_daemon *stub_daemons_new(unsigned n)
{
	struct stub_daemon *sd = calloc(n, sizeof(*sd));
	unsigned i;

	if (!sd)
		return NULL;
	for (i = 0; i < n; i++)
		if (stub_daemon_init(&sd[i]) < 0)
			break;
	if (i == n)
		return sd;
	stub_daemons_free(sd, i);
	return NULL;
}

void stub_daemons_free(struct stub_daemon *sd, unsigned n)
{
	while (n-- > 0)
		stub_daemon_fini(&sd[n]);
	free(sd);
}

struct caller stub_caller(struct stub_daemon *sd, uint32_t uid)
{
	struct caller c = { .d = &sd->d };

	c.cred = (struct access_cred){ .uid = uid, .gid = uid, .pid = 1, .ngroups = uid == 1001,
				       .groups = { 100 } };
	return c;
}

struct tensor *stub_put(struct stub_daemon *sd, uint32_t owner, const char *name, int dtype,
			unsigned rank, const uint64_t *shape, uint32_t mode, const void *data)
{
	struct tensor *t = calloc(1, sizeof(*t));

	assert_non_null(t);
	assert_true(names_qualify(owner, name, strlen(name), t->name, NULL) > 0);
	t->name_len = strlen(t->name);
	t->dtype = dtype;
	t->rank = rank;
	t->count = 1;
	for (unsigned k = 0; k < rank; k++) {
		t->shape[k] = shape[k];
		t->count *= shape[k];
	}
	t->bytes = t->count * tdp_dtype_size(dtype);
	t->owner = owner;
	t->group = owner;
	t->mode = mode;
	assert_int_equal(gpu_memory_alloc(&sd->gpu, t->bytes, &t->alloc), 0);
	if (data)
		assert_int_equal(gpu_upload(&sd->gpu, &t->alloc, data), 0);
	assert_int_equal(store_put(sd->d.store, t), 0);
	return t;
}

struct tensor *stub_find(struct stub_daemon *sd, uint32_t uid, const char *name)
{
	char key[TDP_MAX_NAME_LEN + 1];
	struct tensor *t;

	snprintf(key, sizeof(key), "%u/%s", uid, name);
	if (store_lookup(sd->d.store, key, strlen(key), &access_daemon, 0, &t, NULL) < 0)
		return NULL;
	return t;
}

uint64_t stub_live(const struct stub_daemon *sd)
{
	return fuzz_gpu_live_blocks() - sd->blocks0;
}

uint64_t stub_count(struct stub_daemon *sd)
{
	uint64_t count, bytes;

	store_totals(sd->d.store, &count, &bytes);
	return count;
}

/* ---- msgpack ---- */

void mp_begin(struct mp *m)
{
	msgpack_sbuffer_init(&m->sb);
	msgpack_packer_init(&m->pk, &m->sb, msgpack_sbuffer_write);
	msgpack_unpacked_init(&m->u);
}

const msgpack_object *mp_obj(struct mp *m)
{
	size_t off = 0;

	assert_int_equal(msgpack_unpack_next(&m->u, m->sb.data, m->sb.size, &off), MSGPACK_UNPACK_SUCCESS);
	assert_int_equal(off, m->sb.size);
	return &m->u.data;
}

void mp_end(struct mp *m)
{
	msgpack_unpacked_destroy(&m->u);
	msgpack_sbuffer_destroy(&m->sb);
}

void mp_str(struct mp *m, const char *s)
{
	msgpack_pack_str(&m->pk, strlen(s));
	msgpack_pack_str_body(&m->pk, s, strlen(s));
}

void mp_strs(struct mp *m, const char *const *v)
{
	size_t n = 0;

	while (v[n])
		n++;
	msgpack_pack_array(&m->pk, n);
	for (size_t k = 0; k < n; k++)
		mp_str(m, v[k]);
}

static void mp_attr_value(struct mp *m, const char *v)
{
	char *end;
	double x = strtod(v, &end);

	if (!strcmp(v, "true"))
		msgpack_pack_true(&m->pk);
	else if (!strcmp(v, "false"))
		msgpack_pack_false(&m->pk);
	else if (*v && !*end && x == (double)(long long)x)
		msgpack_pack_int64(&m->pk, (long long)x);
	else if (*v && !*end)
		msgpack_pack_double(&m->pk, x);
	else
		mp_str(m, v);
}

void mp_kv(struct mp *m, const char *const *pairs)
{
	size_t n = 0;

	while (pairs[n])
		n++;
	msgpack_pack_map(&m->pk, n);
	for (size_t k = 0; k < n; k++) {
		const char *eq = strchr(pairs[k], '=');

		assert_non_null(eq);
		msgpack_pack_str(&m->pk, (size_t)(eq - pairs[k]));
		msgpack_pack_str_body(&m->pk, pairs[k], (size_t)(eq - pairs[k]));
		mp_attr_value(m, eq + 1);
	}
}

void mp_node(struct mp *m, const char *id, const char *op, const char *const *inputs, const char *out,
	     const char *const *attrs)
{
	msgpack_pack_map(&m->pk, 3 + (out != NULL) + (attrs != NULL));
	mp_str(m, "id");
	mp_str(m, id);
	mp_str(m, "op");
	mp_str(m, op);
	mp_str(m, "inputs");
	mp_strs(m, inputs);
	if (out) {
		mp_str(m, "out");
		mp_str(m, out);
	}
	if (attrs) {
		mp_str(m, "attrs");
		mp_kv(m, attrs);
	}
}

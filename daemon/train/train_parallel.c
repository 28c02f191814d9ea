/* Data-parallel replicas and gradient averaging (train_parallel.h). */
#include "train/train_parallel.h"
#include "store/names.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "devices.h"
#include "dtype.h"
#include "gpu/pipeline.h"
#include "gpu/transfer.h"
#include "base/log.h"
#include "train/dp_sync.h"

/* Add `t` (heap-allocated, memory on r->device) to r's copies. */
static int add_copy(struct dp_replica *r, struct tensor *t)
{
	if (r->n == r->cap) {
		unsigned cap = r->cap ? 2 * r->cap : 16;
		struct tensor **p = realloc(r->tensors, cap * sizeof(*p));

		if (!p)
			return -ENOMEM;
		r->tensors = p;
		r->cap = cap;
	}
	r->tensors[r->n++] = t;
	r->view = (struct graph_replica){ .device = r->device, .tensors = r->tensors, .n = r->n };
	return 0;
}

/* A fresh tensor shaped like `like` on device `device`, with memory. */
static int new_copy(struct daemon *d, const struct tensor *like, uint32_t device, struct tensor **ret)
{
	struct tensor *t = calloc(1, sizeof(*t));
	int r;

	if (!t)
		return -ENOMEM;
	memcpy(t->name, like->name, sizeof(t->name));
	t->name_len = like->name_len;
	t->owner = like->owner;     /* derived-name checks compare owners */
	t->group = like->group;
	t->mode = like->mode;
	t->dtype = like->dtype;
	t->rank = like->rank;
	memcpy(t->shape, like->shape, sizeof(t->shape));
	t->count = like->count;
	t->bytes = like->bytes;
	t->device = device;
	r = gpu_memory_alloc(d->gpus[device], t->bytes, &t->alloc);
	if (r < 0) {
		free(t);
		return r;
	}
	*ret = t;
	return 0;
}

static void free_copy(struct daemon *d, struct tensor *t)
{
	gpu_memory_free(d->gpus[t->device], &t->alloc);
	free(t);
}

static uint64_t align_up(uint64_t v)
{
	return (v + 255) & ~(uint64_t)255;
}

/* Why the devices of `dp` (its first `n` entries of devs) cannot average
 * on the GPU, or NULL when they can; sets dp->stride and the alignment. */
static const char *no_gpu_mean(struct dp *dp, unsigned n, uint64_t *ret_align)
{
	const VkPhysicalDeviceProperties *p0 = &dp->d->gpus[dp->devs[0]]->props;
	uint64_t bytes = dp->flat_count * 4, align = 256;

	if (n > GPU_MAX_BINDINGS - 1)
		return "more devices than the mean kernel reads";
	for (unsigned i = 0; i < n; i++) {
		struct gpu_device *g = dp->d->gpus[dp->devs[i]];
		uint64_t a = gpu_host_import_align(g);

		if (!a)
			return "a device cannot import host memory (VK_EXT_external_memory_host)";
		/* The same kernel on the same kind of device gives the same bits. */
		if (g->props.vendorID != p0->vendorID || g->props.deviceID != p0->deviceID ||
		    g->props.driverVersion != p0->driverVersion)
			return "the devices are of different kinds";
		if (bytes > g->props.limits.maxStorageBufferRange || dp->flat_count > UINT32_MAX)
			return "the gradients are larger than a device binds at once";
		if (a > align)
			align = a;
		if (g->props.limits.minStorageBufferOffsetAlignment > align)
			align = g->props.limits.minStorageBufferOffsetAlignment;
	}
	if (align & (align - 1))
		return "an odd alignment";
	dp->stride = (bytes + align - 1) & ~(align - 1);
	*ret_align = align;
	return NULL;
}

/* Choose the exchange of a run over `n` (≥ 2) devices, and for DP_GPU
 * import the gradient slots into each. Returns 0 or -ENOMEM. */
static int exchange_start(struct dp *dp, unsigned n)
{
	const char *env = getenv("TENSORD_DP_EXCHANGE"), *why = NULL;
	uint64_t align = 0;
	int r = 0;

	if (env && !strcmp(env, "none")) {
		dp->exchange = DP_NONE;
		log_info("data parallel: no gradient exchange (TENSORD_DP_EXCHANGE=none, for timing only)");
		return 0;
	}
	why = env && !strcmp(env, "host") ? "TENSORD_DP_EXCHANGE=host" : no_gpu_mean(dp, n, &align);
	if (!why) {
		dp->slots_size = dp->stride * n * dp->parities;
		dp->slots = aligned_alloc(align, dp->slots_size);
		if (!dp->slots)
			return -ENOMEM;
		for (unsigned i = 0; r == 0 && i < n; i++)
			r = gpu_host_import(dp->d->gpus[dp->devs[i]], dp->slots, dp->slots_size, false, &dp->imp[i]);
		if (r == -ENOMEM)
			return r;
		if (r < 0)
			why = "a device refused to import the host buffer";
	}
	if (why) {
		for (unsigned i = 0; i < n; i++)
			gpu_host_import_free(dp->d->gpus[dp->devs[i]], &dp->imp[i]);
		free(dp->slots);
		dp->slots = NULL;
		dp->exchange = DP_HOST;
		log_info("data parallel: gradients averaged on the host (%s)", why);
		return 0;
	}
	dp->exchange = DP_GPU;
	return 0;
}

uint64_t dp_sync_limit_ns(const struct daemon *d)
{
	const char *env = getenv("TENSORD_DP_WAIT_MS");

	if (env && *env)
		return strtoull(env, NULL, 10) * 1000000ull;
	return d->cfg.request_timeout_ms * 500000ull;
}

/* TENSORD_FAULT_DP_SILENT (tensord(8), tests): the run's device of that
 * index never signals that its gradients are out; -1 when unset. */
static int fault_silent_device(void)
{
	const char *env = getenv("TENSORD_FAULT_DP_SILENT");

	return env && *env ? atoi(env) : -1;
}

static void average(void *data)
{
	dp_average(data);
}

/* dp->sync over the `ndev` devices' signals in their exchange buffers. */
static int sync_start(struct dp *dp, unsigned ndev)
{
	const volatile uint32_t *sig[GPU_MAX_DEVICES];
	struct gpu_device *g[GPU_MAX_DEVICES];

	for (unsigned i = 0; i < ndev; i++) {
		sig[i] = (const volatile uint32_t *)((const uint8_t *)dp->xfer[i].map + dp->at.flag);
		g[i] = dp->d->gpus[dp->devs[i]];
	}
	return dp_sync_start(&(struct dp_sync_spec){ .nsignals = ndev, .signals = sig, .ndev = ndev, .g = g,
						     .average = dp->exchange == DP_HOST ? average : NULL, .data = dp,
						     .limit_ns = dp_sync_limit_ns(dp->d) },
			     &dp->sync);
}

/* dp->at for `ndev` devices (the exchange chosen) and `shard` rows: the
 * flat gradient at 0 only where the host reads it (DP_HOST, or a group
 * member's buffer: ndev 1), the host's mean only for DP_HOST. */
static void layout(struct dp *dp, unsigned ndev, uint64_t shard)
{
	bool host = ndev == 1 || dp->exchange == DP_HOST;

	dp->at.loss = host ? align_up(dp->flat_count * 4) : 0;
	dp->at.flag = dp->at.loss + 16;
	dp->at.index = align_up(dp->at.flag + 4);
	dp->at.index_stride = align_up(shard * 4);
	dp->at.mean = align_up(dp->at.index + 2 * dp->at.index_stride);
	dp->at.size = dp->at.mean + (host && ndev > 1 ? align_up(dp->flat_count * 4) : 0);
}

int dp_start(struct daemon *d, const uint32_t *devices, unsigned ndev, struct tensor *const *copy,
	     unsigned ncopy, uint64_t shard, uint64_t flat_count, unsigned depth, struct dp **ret)
{
	struct tensor index = { .name = "#index", .name_len = 6, .dtype = TDP_DTYPE_I32, .rank = 1,
				.shape = { shard }, .count = shard, .bytes = shard * 4 };
	struct dp *dp = calloc(1, sizeof(*dp));
	int r = 0;

	if (!dp)
		return -ENOMEM;
	dp->d = d;
	dp->flat_count = flat_count;
	dp->parities = depth > 1 ? 2 : 1;
	dp->silent = fault_silent_device();
	for (unsigned i = 0; i < ndev && i < GPU_MAX_DEVICES; i++)
		dp->devs[i] = devices[i];
	if (ndev > 1 && ndev <= GPU_MAX_DEVICES)
		r = exchange_start(dp, ndev);
	layout(dp, ndev, shard);
	for (unsigned i = 0; r == 0 && i < ndev && i < GPU_MAX_DEVICES; i++) {
		r = gpu_host_buffer_create(d->gpus[devices[i]], dp->at.size, &dp->xfer[i]);
		if (r == 0)
			memset((uint8_t *)dp->xfer[i].map + dp->at.flag, 0, 4); /* no signal yet */
	}
	if (r == 0 && ndev > 1 && ndev <= GPU_MAX_DEVICES && dp->exchange != DP_NONE)
		r = sync_start(dp, ndev);
	for (unsigned i = 1; r == 0 && i < ndev && i < GPU_MAX_DEVICES; i++) {
		struct dp_replica *rep = &dp->r[dp->n++];
		struct tensor *t;

		rep->device = devices[i];
		rep->view = (struct graph_replica){ .device = rep->device };
		for (unsigned k = 0; r == 0 && k < ncopy; k++) {
			t = NULL;
			r = new_copy(d, copy[k], rep->device, &t);
			if (r == 0)
				r = gpu_copy(devices_of(d, copy[k]), &copy[k]->alloc, d->gpus[rep->device], &t->alloc);
			if (r == 0)
				r = add_copy(rep, t);
			if (r < 0 && t)
				free_copy(d, t);
		}
		if (r == 0 && (r = new_copy(d, &index, rep->device, &rep->index)) == 0 &&
		    (r = add_copy(rep, rep->index)) < 0) {
			free_copy(d, rep->index);
			rep->index = NULL;
		}
	}
	if (r < 0) {
		dp_free(dp);
		return r;
	}
	*ret = dp;
	return 0;
}

/* The owner of a replica's new copy named t->name, stored by node `nd`:
 * a derived out's owner, else the one its name says (0 for none). */
static uint32_t result_owner(const struct node *nd, const struct tensor *t)
{
	uint32_t owner;
	size_t off;

	if (nd->out_like)
		return nd->like_owner;
	return names_key_split(t->name, t->name_len, &owner, &off) < 0 ? 0 : owner;
}

int dp_commit(struct dp *dp, struct dp_replica *r, struct graph *gr)
{
	for (unsigned i = 0; i < gr->n; i++) {
		struct node *nd = &gr->nodes[i];
		struct tensor *t = NULL;

		if (!nd->has_out)
			continue;
		for (unsigned k = 0; k < r->n; k++)
			if (!strcmp(r->tensors[k]->name, nd->out_name))
				t = r->tensors[k];
		if (!t) {
			t = calloc(1, sizeof(*t));
			if (!t || add_copy(r, t) < 0) {
				free(t);
				return -ENOMEM;
			}
			t->name_len = strlen(nd->out_name);
			memcpy(t->name, nd->out_name, t->name_len + 1);
			t->device = r->device;
			t->owner = result_owner(nd, t);
		}
		gpu_memory_free(dp->d->gpus[r->device], &t->alloc);
		t->dtype = nd->ctx.out.dtype;
		t->rank = nd->ctx.out.rank;
		memcpy(t->shape, nd->ctx.out.shape, sizeof(t->shape));
		t->count = nd->ctx.out.count;
		t->bytes = nd->ctx.out.bytes;
		t->alloc = nd->alloc;
		nd->alloc = (struct gpu_alloc){ 0 };
	}
	return 0;
}

int dp_view_after(const struct dp_replica *r, const struct graph *prev, struct dp_view *ret)
{
	struct dp_view v = { 0 };
	unsigned nout = 0, n = r->n;

	for (unsigned i = 0; i < prev->n; i++)
		nout += prev->nodes[i].has_out;
	v.list = calloc(r->n + nout + 1, sizeof(*v.list));
	v.results = calloc(nout + 1, sizeof(*v.results));
	if (!v.list || !v.results) {
		dp_view_free(&v);
		return -ENOMEM;
	}
	memcpy(v.list, r->tensors, r->n * sizeof(*v.list));
	nout = 0;
	for (unsigned i = 0; i < prev->n; i++) {
		const struct node *nd = &prev->nodes[i];
		struct tensor *t;
		unsigned k;

		if (!nd->has_out)
			continue;
		t = &v.results[nout++];
		graph_out_meta(prev, i, t);
		t->device = r->device;
		t->alloc = nd->alloc;
		for (k = 0; k < n && strcmp(v.list[k]->name, t->name); k++)
			;
		if (k < n) {
			t->owner = v.list[k]->owner;
			t->group = v.list[k]->group;
			t->mode = v.list[k]->mode;
		} else {
			t->owner = result_owner(nd, t);
			n++;
		}
		v.list[k] = t;
	}
	v.view = (struct graph_replica){ .device = r->device, .tensors = v.list, .n = n };
	*ret = v;
	return 0;
}

void dp_view_free(struct dp_view *v)
{
	free(v->list);
	free(v->results);
	*v = (struct dp_view){ 0 };
}

/* Room for `n` floats in each host buffer. */
static int reserve(struct dp *dp, uint64_t n)
{
	float *a, *b;

	if (n <= dp->cap)
		return 0;
	a = realloc(dp->sum, n * sizeof(float));
	if (a)
		dp->sum = a;
	b = realloc(dp->one, n * sizeof(float));
	if (b)
		dp->one = b;
	if (!a || !b)
		return -ENOMEM;
	dp->cap = n;
	return 0;
}

struct gpu_host_buffer *dp_xfer(struct dp *dp, unsigned i)
{
	return &dp->xfer[i];
}

/* Where step number `step`'s slots begin in the DP_GPU region. */
static uint64_t slots_at(const struct dp *dp, int64_t step)
{
	return (uint64_t)step % dp->parities * (dp->n + 1) * dp->stride;
}

/* Append the gradients under node `j` of the flat tree to ret: a concat's
 * inputs in order, a copy's input, else `j` is the reshape of one gradient.
 * Returns false when the tree is not what step.c builds or ret is full. */
static bool leaves(const struct graph *gr, int j, unsigned depth, struct graph_copy *ret, unsigned max,
		   unsigned *n, uint64_t *off)
{
	const struct node *nd;
	const char *op;

	if (j < 0 || (unsigned)j >= gr->n || depth > 8)
		return false;
	nd = &gr->nodes[j];
	op = nd->ctx.def ? nd->ctx.def->name : "";
	if (!strcmp(op, "concat") || (depth == 0 && !strcmp(op, "copy"))) {
		for (unsigned k = 0; k < nd->ctx.ninputs; k++)
			if (!leaves(gr, nd->src[k], depth + 1, ret, max, n, off))
				return false;
		return true;
	}
	if (strcmp(op, "reshape") || nd->ctx.ninputs != 1 || nd->src[0] < 0 || *n == max ||
	    gr->nodes[nd->src[0]].ctx.out.bytes != nd->ctx.out.bytes)
		return false;
	ret[(*n)++] = (struct graph_copy){ .node = nd->src[0], .offset = *off };
	*off += nd->ctx.out.bytes;
	return true;
}

unsigned dp_flat_buckets(const struct graph *gr, int flat, uint64_t flat_count, VkBuffer host, uint64_t at,
			 struct graph_copy *ret, unsigned max)
{
	unsigned n = 0;
	uint64_t off = 0;

	if (!leaves(gr, flat, 0, ret, max, &n, &off) || off != flat_count * 4)
		return 0;
	for (unsigned k = 0; k < n; k++) {
		ret[k].host = host;
		ret[k].offset += at;
	}
	return n;
}

unsigned dp_grad_buckets(struct dp *dp, const struct graph *gr, unsigned i, int64_t step, int flat,
			 struct graph_copy *ret, unsigned max)
{
	if (dp->exchange != DP_GPU)
		return 0;
	return dp_flat_buckets(gr, flat, dp->flat_count, dp->imp[i].buffer, slots_at(dp, step) + i * dp->stride,
			       ret, max);
}

uint64_t dp_loss_at(const struct dp *dp, int64_t step)
{
	return dp->at.loss + 8 * ((uint64_t)step & 1);
}

uint64_t dp_index_at(const struct dp *dp, int64_t step)
{
	return dp->at.index + dp->at.index_stride * ((uint64_t)step & 1);
}

int dp_record_exchange(struct dp *dp, struct gpu_recorder *rec, unsigned i, int64_t step,
		       const struct gpu_alloc *grad, bool bucketed)
{
	VkBuffer out;
	uint64_t at;
	int r;

	if (dp->exchange == DP_NONE)
		return 0;
	out = dp->exchange == DP_GPU ? dp->imp[i].buffer : dp->xfer[i].buffer;
	at = dp->exchange == DP_GPU ? slots_at(dp, step) + i * dp->stride : 0;
	if (!bucketed)
		gpu_rec_host_copy(rec, grad, out, at, false);
	if ((int)i != dp->silent)
		gpu_rec_host_signal(rec, dp->xfer[i].buffer, dp->at.flag, dp_sync_tag(step));
	gpu_rec_wait_host_event(rec, dp_sync_event(dp->sync, step, i));
	if (dp->exchange == DP_HOST) {
		gpu_rec_host_copy(rec, grad, dp->xfer[i].buffer, dp->at.mean, true);
		return 0;
	}
	r = gpu_rec_host_mean(rec, dp->imp[i].buffer, slots_at(dp, step), dp->stride, dp->n + 1, i, grad);
	return r;
}

const char *dp_exchange_name(const struct dp *dp)
{
	return dp->exchange == DP_GPU ? "gpu" : dp->exchange == DP_NONE ? "none" : "host";
}

void dp_average(struct dp *dp)
{
	float *mean = (float *)((uint8_t *)dp->xfer[0].map + dp->at.mean);
	const float *first = dp->xfer[0].map;
	unsigned n = dp->n + 1;

	/* In device order, so every run sums the same way. */
	memcpy(mean, first, dp->flat_count * sizeof(float));
	for (unsigned g = 1; g < n; g++) {
		const float *one = dp->xfer[g].map;

		for (uint64_t i = 0; i < dp->flat_count; i++)
			mean[i] += one[i];
	}
	for (uint64_t i = 0; i < dp->flat_count; i++)
		mean[i] /= (float)n;
	for (unsigned g = 1; g < n; g++)
		memcpy((uint8_t *)dp->xfer[g].map + dp->at.mean, mean, dp->flat_count * sizeof(float));
}

double dp_max_diff(struct dp *dp, struct tensor *const *stored, unsigned n)
{
	double worst = 0;

	for (unsigned k = 0; k < n; k++) {
		uint64_t count = stored[k]->count;

		if (stored[k]->dtype != TDP_DTYPE_F32 || reserve(dp, count) < 0 ||
		    gpu_download(devices_of(dp->d, stored[k]), &stored[k]->alloc, dp->sum) < 0)
			return -1;
		for (unsigned i = 0; i < dp->n; i++) {
			const struct dp_replica *r = &dp->r[i];
			const struct tensor *t = NULL;

			for (unsigned j = 0; j < r->n; j++)
				if (!strcmp(r->tensors[j]->name, stored[k]->name))
					t = r->tensors[j];
			if (!t || t->count != count || gpu_download(dp->d->gpus[r->device], &t->alloc, dp->one) < 0)
				return -1;
			for (uint64_t e = 0; e < count; e++) {
				double diff = fabs((double)dp->sum[e] - (double)dp->one[e]);

				if (!(diff <= worst))
					worst = isnan(diff) ? INFINITY : diff;
			}
		}
	}
	return worst;
}

void dp_free(struct dp *dp)
{
	if (!dp)
		return;
	dp_sync_free(dp->sync);
	for (unsigned i = 0; i < GPU_MAX_DEVICES; i++) {
		if (dp->xfer[i].map)
			gpu_host_buffer_free(dp->d->gpus[dp->devs[i]], &dp->xfer[i]);
		if (dp->imp[i].buffer)
			gpu_host_import_free(dp->d->gpus[dp->devs[i]], &dp->imp[i]);
	}
	free(dp->slots);
	for (unsigned i = 0; i < dp->n; i++) {
		struct dp_replica *r = &dp->r[i];

		for (unsigned k = 0; k < r->n; k++)
			free_copy(dp->d, r->tensors[k]);
		free(r->tensors);
	}
	free(dp->sum);
	free(dp->one);
	free(dp);
}

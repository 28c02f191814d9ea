#include "gpu/trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "gpu/device.h"
#include "gpu/recorder.h"

/* Timestamps per command buffer: the opening one and one per dispatch. */
#define TRACE_MAX 2048

struct trace_entry {
	const char *name;
	uint64_t groups;
	char label[96];                 /* gpu_trace_label's, or "" */
};

struct gpu_trace {
	VkQueryPool pool;               /* TRACE_MAX per command buffer */
	unsigned n[GPU_CMD_SLOTS];      /* dispatches traced in cmd[i] */
	unsigned dropped[GPU_CMD_SLOTS];/* past TRACE_MAX - 1: not traced */
	char label[96];                 /* for the next dispatch (gpu_trace_label) */
	struct trace_entry e[GPU_CMD_SLOTS][TRACE_MAX];
};

void gpu_trace_init(struct gpu_device *g)
{
	const char *v = getenv("TENSORD_TRACE_DISPATCHES");
	VkQueryPoolCreateInfo qci = {
		.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
		.queryType = VK_QUERY_TYPE_TIMESTAMP,
		.queryCount = GPU_CMD_SLOTS * TRACE_MAX,
	};
	struct gpu_trace *t;

	g->trace = NULL;
	if (!v || !*v || !strcmp(v, "0"))
		return;
	if (!g->stats.timestamps) {
		log_warning("%s: TENSORD_TRACE_DISPATCHES needs timestamp queries; not tracing",
			 g->desc.name);
		return;
	}
	t = calloc(1, sizeof(*t));
	if (!t || vkCreateQueryPool(g->dev, &qci, NULL, &t->pool) != VK_SUCCESS) {
		free(t);
		log_warning("%s: no memory for the dispatch trace; not tracing", g->desc.name);
		return;
	}
	g->trace = t;
	log_notice("%s: tracing dispatches (TENSORD_TRACE_DISPATCHES): every dispatch serialised",
		 g->desc.name);
}

void gpu_trace_fini(struct gpu_device *g)
{
	if (!g->trace)
		return;
	vkDestroyQueryPool(g->dev, g->trace->pool, NULL);
	free(g->trace);
	g->trace = NULL;
}

bool gpu_trace_on(const struct gpu_device *g)
{
	return g->trace != NULL;
}

void gpu_trace_begin(struct gpu_device *g, unsigned i)
{
	struct gpu_trace *t = g->trace;

	if (!t)
		return;
	t->n[i] = 0;
	t->dropped[i] = 0;
	vkCmdResetQueryPool(g->cmd[i].cb, t->pool, i * TRACE_MAX, TRACE_MAX);
	vkCmdWriteTimestamp(g->cmd[i].cb, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, t->pool, i * TRACE_MAX);
}

void gpu_trace_before(struct gpu_recorder *rec)
{
	if (rec->g->trace)
		gpu_rec_barrier(rec);
}

void gpu_trace_after(struct gpu_recorder *rec, const char *name, uint64_t groups)
{
	struct gpu_trace *t = rec->g->trace;
	unsigned i = rec->slot, n;

	if (!t)
		return;
	n = t->n[i];
	if (n + 1 >= TRACE_MAX) {
		t->dropped[i]++;
		return;
	}
	t->e[i][n].name = name;
	t->e[i][n].groups = groups;
	memcpy(t->e[i][n].label, t->label, sizeof(t->label));
	t->label[0] = 0;
	vkCmdWriteTimestamp(rec->cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, t->pool,
			    i * TRACE_MAX + n + 1);
	t->n[i] = n + 1;
}

void gpu_trace_label(struct gpu_recorder *rec, const char *label)
{
	struct gpu_trace *t = rec->g->trace;

	if (t)
		snprintf(t->label, sizeof(t->label), "%s", label);
}

void gpu_trace_report(struct gpu_device *g, unsigned i)
{
	struct gpu_trace *t = g->trace;
	uint64_t *ts;
	unsigned n;

	if (!t || !t->n[i])
		return;
	n = t->n[i];
	ts = malloc((n + 1) * sizeof(*ts));
	if (!ts)
		return;
	if (vkGetQueryPoolResults(g->dev, t->pool, i * TRACE_MAX, n + 1, (n + 1) * sizeof(*ts), ts,
				  sizeof(*ts), VK_QUERY_RESULT_64_BIT) == VK_SUCCESS) {
		for (unsigned k = 0; k < n; k++) {
			uint64_t ticks = (ts[k + 1] - ts[k]) & g->ts_mask;

			log_notice("trace %s: %u %s %.2f us (%llu) %s", g->desc.name, k, t->e[i][k].name,
				 (double)ticks * g->props.limits.timestampPeriod / 1e3,
				 (unsigned long long)t->e[i][k].groups, t->e[i][k].label);
		}
		if (t->dropped[i])
			log_notice("trace %s: %u more not traced", g->desc.name, t->dropped[i]);
	}
	free(ts);
	t->n[i] = 0;
}

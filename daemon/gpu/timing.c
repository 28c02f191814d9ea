#include "gpu/timing.h"

#include <stdlib.h>
#include <time.h>

#include "base/log.h"
#include "gpu/device.h"
#include "gpu/trace.h"

int64_t gpu_timing_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void gpu_timing_init(struct gpu_device *g)
{
	VkQueueFamilyProperties *qf = NULL;
	VkQueryPoolCreateInfo qci = {
		.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
		.queryType = VK_QUERY_TYPE_TIMESTAMP,
		.queryCount = 2 * GPU_CMD_SLOTS, /* begin and end for each cmd[i] */
	};
	uint32_t n = 0, bits = 0;

	g->queries = VK_NULL_HANDLE;
	g->trace = NULL;
	g->stats.timestamps = false;
	vkGetPhysicalDeviceQueueFamilyProperties(g->phys, &n, NULL);
	if (g->queue_family < n && (qf = calloc(n, sizeof(*qf)))) {
		vkGetPhysicalDeviceQueueFamilyProperties(g->phys, &n, qf);
		if (g->queue_family < n)
			bits = qf[g->queue_family].timestampValidBits;
		free(qf);
	}
	if (bits == 0 || g->props.limits.timestampPeriod <= 0 ||
	    vkCreateQueryPool(g->dev, &qci, NULL, &g->queries) != VK_SUCCESS) {
		g->queries = VK_NULL_HANDLE;
		log_info("%s: no timestamp queries; GPU busy time is measured from submission to fence",
			 g->desc.name);
		return;
	}
	g->ts_mask = bits >= 64 ? UINT64_MAX : ((uint64_t)1 << bits) - 1;
	g->stats.timestamps = true;
	gpu_trace_init(g);
}

void gpu_timing_fini(struct gpu_device *g)
{
	gpu_trace_fini(g);
	if (g->queries)
		vkDestroyQueryPool(g->dev, g->queries, NULL);
	g->queries = VK_NULL_HANDLE;
}

void gpu_timing_begin(struct gpu_device *g, unsigned i)
{
	if (!g->queries)
		return;
	/* cmd[i]'s last submission has completed: its queries are free, and
	 * the host resets them without adding work to the command buffer (on
	 * the H100 a 1-element op.run's submit-to-fence took 19.6 us with the
	 * reset recorded, 16.0 reset from the host and 13.6 without timestamps
	 * at all: single runs, docs/performance.md). */
	if (g->host_query_reset)
		vkResetQueryPool(g->dev, g->queries, 2 * i, 2);
	else
		vkCmdResetQueryPool(g->cmd[i].cb, g->queries, 2 * i, 2);
	vkCmdWriteTimestamp(g->cmd[i].cb, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, g->queries, 2 * i);
	gpu_trace_begin(g, i);
}

void gpu_timing_end(struct gpu_device *g, unsigned i)
{
	if (g->queries)
		vkCmdWriteTimestamp(g->cmd[i].cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, g->queries,
				    2 * i + 1);
}

void gpu_timing_submitted(struct gpu_device *g, unsigned i)
{
	g->cmd[i].submit_ns = gpu_timing_now_ns();
	g->stats.submissions++;
}

void gpu_timing_completed(struct gpu_device *g, unsigned i, uint64_t blocked_ns)
{
	uint64_t ts[2];
	int64_t host = gpu_timing_now_ns() - g->cmd[i].submit_ns;

	bool queued = false;
	int64_t start = g->cmd[i].submit_ns;

	g->stats.wait_ns += blocked_ns;
	g->cmd[i].gpu_ns = 0;
	gpu_trace_report(g, i);
	/* lavapipe's vkGetQueryPoolResults waits for the whole queue to go idle
	 * (DeviceWaitIdle), so with other work queued behind this submission
	 * (a pipelined train.run's next step) reading the timestamps would
	 * block for that work too. Then the host's view instead: from when the
	 * one in-order queue could start it (its submission or the completion
	 * before it) to now. */
	if (g->props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU)
		for (unsigned k = 0; k < GPU_CMD_SLOTS && !queued; k++)
			queued = k != i && g->cmd[k].pending;
	if (start < g->stats.done_ns)
		start = g->stats.done_ns;
	g->stats.done_ns = gpu_timing_now_ns();
	if (queued) {
		host = g->stats.done_ns - start;
		g->cmd[i].gpu_ns = host > 0 ? (uint64_t)host : 0;
		g->stats.busy_ns += g->cmd[i].gpu_ns;
		return;
	}
	if (g->queries) {
		/* The fence is signalled, so the results are available: no WAIT flag. */
		if (vkGetQueryPoolResults(g->dev, g->queries, 2 * i, 2, sizeof(ts), ts, sizeof(ts[0]),
					  VK_QUERY_RESULT_64_BIT) == VK_SUCCESS) {
			uint64_t ticks = (ts[1] - ts[0]) & g->ts_mask;

			g->cmd[i].gpu_ns = (uint64_t)((double)ticks * g->props.limits.timestampPeriod);
			g->stats.busy_ns += g->cmd[i].gpu_ns;
		}
		return;
	}
	g->cmd[i].gpu_ns = host > 0 ? (uint64_t)host : 0;
	g->stats.busy_ns += g->cmd[i].gpu_ns;
}

/* A development aid: with TENSORD_TRACE_DISPATCHES set, every dispatch and
 * copy a device records runs after a full barrier and is followed by a
 * timestamp, and when its submission completes each one's device time is
 * logged ("trace" lines, docs/performance.md says how to sum them). The
 * barriers serialise work that would overlap, so traced times add up to the
 * submission's, and traced runs are slower than untraced ones. Off (and
 * costless) unless the variable is set; needs timestamp queries. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

struct gpu_device;
struct gpu_recorder;

/* Set the trace up when TENSORD_TRACE_DISPATCHES is set (not "0") and the
 * device has timestamps; else leave it off. Never fails. */
void gpu_trace_init(struct gpu_device *g);

/* Release the trace's queries and names. */
void gpu_trace_fini(struct gpu_device *g);

/* Whether `g` traces dispatches. */
bool gpu_trace_on(const struct gpu_device *g);

/* At the start of recording cmd[i]: the trace's first timestamp. */
void gpu_trace_begin(struct gpu_device *g, unsigned i);

/* Before recording one dispatch or copy: a full barrier, so the timestamp
 * after it covers it alone. */
void gpu_trace_before(struct gpu_recorder *rec);

/* After recording one dispatch (of `groups` workgroups of shader `name`) or
 * copy (name "copy", groups its bytes): its closing timestamp. */
void gpu_trace_after(struct gpu_recorder *rec, const char *name, uint64_t groups);

/* What the next dispatch recorded on `rec` computes (the op and its
 * shapes), logged with it. */
void gpu_trace_label(struct gpu_recorder *rec, const char *label);

/* cmd[i] completed: log each traced dispatch's device time. */
void gpu_trace_report(struct gpu_device *g, unsigned i);

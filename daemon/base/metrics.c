/* Counter updates. Kept out of line so that a later move to atomics (GPU work
 * off the loop thread) touches one file. */
#include "base/metrics.h"

void metrics_request(struct metrics *m, unsigned slot, bool failed, uint64_t ns)
{
	if (slot >= METRICS_MAX_METHODS)
		return;
	m->method[slot].requests++;
	m->method[slot].busy_ns += ns;
	if (failed)
		m->method[slot].errors++;
}

void metrics_request_error(struct metrics *m, unsigned slot)
{
	if (slot < METRICS_MAX_METHODS)
		m->method[slot].errors++;
}

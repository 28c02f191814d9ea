/* tensorctl metrics: the daemon's counters in the Prometheus text format. */
#include <errno.h>
#include <stdlib.h>

#include "ctl_cmd.h"
#include "prom.h"

int ctl_cmd_metrics(struct ctl *c)
{
	msgpack_unpacked u;
	void *res = NULL;
	size_t len, off = 0;
	int r, status;

	if (c->json)
		return ctl_usage_error("metrics prints Prometheus text; for JSON use 'tensorctl --json info'");
	if ((status = ctl_connect(c)) != CTL_EXIT_OK)
		return status;
	if ((r = tensord_info_raw(c->td, &res, &len)) < 0)
		return ctl_call_failed(c, r);
	msgpack_unpacked_init(&u);
	if (msgpack_unpack_next(&u, res, len, &off) != MSGPACK_UNPACK_SUCCESS)
		status = ctl_error("malformed reply");
	else if (ctl_prom_write(stdout, &u.data) < 0)
		status = ctl_error("the daemon's info result holds no metrics");
	msgpack_unpacked_destroy(&u);
	free(res);
	return status;
}

/* Who is asking, and where failures go: what every layer below methods/ is
 * handed instead of a request (docs/architecture.md, "The caller"). The
 * engine, autograd, training and lookups read the daemon, check the
 * caller's credentials with the access rule and record a failure with
 * td_fail(&c->err, ...); they never see a connection, a msgid or a packer,
 * so they run the same for a request, a train.run job or a unit test. A
 * request embeds one (`req->call`). */
#pragma once

#include "base/error.h"
#include "store/access.h"

struct daemon;
struct tensor;

/* Tensors a caller's lookups see in place of the stored ones of the same
 * name, or besides them: the results of a pipelined train.run's steps still
 * in flight, which the next step reads before they are committed
 * (train/job_pipe.c), sorted by name (strcmp), one of each. Lookups check
 * access on them as on stored tensors. */
struct lookup_overlay {
	struct tensor *tensors;
	unsigned n;
};

struct caller {
	struct daemon *d;
	struct access_cred cred;   /* the peer (access.h); its uid names its namespace */
	struct td_error err;       /* the one error sink */
	const struct lookup_overlay *overlay; /* NULL: the store alone */
};

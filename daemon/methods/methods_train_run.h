/* train.run's handler (docs/protocol.md, "train.run"). */
#pragma once

#include "methods/request.h"

/* Serve `train.run {...}` (methods_train_run.c): check the request, start a
 * job (train/job.h) that runs one step per event-loop turn, sending
 * train.progress and train.eval notifications and the response at the end.
 * Returns REQUEST_DEFERRED on a start, -1 with request_fail() otherwise. */
int method_train_run(struct request *req);

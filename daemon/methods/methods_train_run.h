/* train.run's handler (docs/protocol.md, "train.run"). */
#pragma once

#include <stddef.h>

#include "methods/request.h"

/* Serve `train.run {...}` (methods_train_run.c): check the request, start a
 * job (train/job.h) that runs one step per event-loop turn, sending
 * train.progress and train.eval notifications and the response at the end.
 * Returns REQUEST_DEFERRED on a start, -1 with request_fail() otherwise. */
int method_train_run(struct request *req);

/* A run across the group that rank 0 sent (`msg`, `len`: the caller's
 * credentials and the request's params, train/job_cluster.c): start this
 * member's part, or tell the others why it cannot (docs/cluster.md). The
 * cluster's on_ctrl (train/cluster.h), with the daemon as data: -EAGAIN
 * while this member's part of the run before still ends, else 0. */
int train_run_member(void *data, int from, const void *msg, size_t len);

struct job_record;

/* Start again, as its owner, the detached run a shutdown interrupted in
 * `rec` (its resume entry: the request, gid and groups) from the step it
 * had committed, its steps, shuffles and seeds as if uninterrupted. Returns
 * 0 (rec runs again) or -1 with `err` set (the model or data are gone or
 * changed, a quota, ...). */
int train_run_resume(struct daemon *d, struct job_record *rec, struct td_error *err);

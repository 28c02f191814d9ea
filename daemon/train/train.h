/* Training on the GPU: one step of forward, backward and optimizer update
 * recorded into one submission. The interface of train/ to the layers
 * above: train.step and train_model_check are in step.c, train.run and its
 * jobs in job.c; optimizer.h and step.h are train/'s own. */
#pragma once

#include <stdbool.h>

#include "serve/request.h"

/* Serve `train.step {nodes, loss, params, optimizer?, step?, grads?, outputs?}`
 * (docs/protocol.md). */
int method_train_step(struct request *req);

struct model;

/* Check model `m` against the stored tensors as train.step would (graph,
 * shapes, parameters, loss, differentiability, optimizer), with a zero
 * placeholder for each input, without running anything. Returns 0 or
 * request_fail() naming the culprit. */
int train_model_check(struct request *req, const struct model *m);

struct train_job;

/* Serve `train.run {...}` (docs/protocol.md): check the request, start a job
 * that runs one step per event-loop turn, sending train.progress and
 * train.eval notifications and the response at the end. Returns
 * REQUEST_DEFERRED on a start, -1 with request_fail() otherwise. */
int method_train_run(struct request *req);

/* The event loop's idle work: one step of every running job. Returns whether
 * jobs remain. */
bool train_jobs_run(void *data);

/* Free every job (at shutdown, after the connections closed). */
void train_jobs_free(void);

/* Fail every running job with `code` and `message` (its client gets the
 * error response) and free it: device recovery, before the device its
 * buffers live on goes (recover.c). Returns how many jobs there were. */
unsigned train_jobs_abort(int code, const char *message);

/* Training on the GPU: one step of forward, backward and optimizer update
 * recorded into one submission. The interface of train/ to the layers
 * above: steps and train_model_check in step.h, train.run's jobs in job.h,
 * the loop's and recovery's hooks here; optimizer.h is train/'s own. */
#pragma once

#include <stdbool.h>

#include "store/caller.h"

struct model;

/* Check model `m` against the stored tensors as train.step would (graph,
 * shapes, parameters, loss, differentiability, optimizer), with a zero
 * placeholder for each input, without running anything. Returns 0 or
 * -1 with call->err naming the culprit. */
int train_model_check(struct caller *call, const struct model *m);

/* The event loop's idle work: one step of every running job. Returns whether
 * jobs remain. */
bool train_jobs_run(void *data);

/* Free every job (at shutdown, after the connections closed). */
void train_jobs_free(void);

/* Fail every running job with `code` and `message` (its client gets the
 * error response) and free it: device recovery, before the device its
 * buffers live on goes (recover.c). Returns how many jobs there were. */
unsigned train_jobs_abort(int code, const char *message);

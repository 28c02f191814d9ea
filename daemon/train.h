/* Training on the GPU: one step of forward, backward and optimizer update
 * recorded into one submission. */
#pragma once

#include "request.h"

/* Serve `train.step {nodes, loss, params, optimizer?, step?, grads?, outputs?}`
 * (docs/protocol.md). */
int train_step(struct request *req);

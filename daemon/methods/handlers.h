/* The method handlers, one per protocol method (docs/protocol.md). Each is a
 * method_fn: see request.h for the contract. */
#pragma once

#include "methods/request.h"

int method_ping(struct request *req);
int method_info(struct request *req);
int method_tensor_put(struct request *req);
int method_tensor_get(struct request *req);
int method_tensor_stat(struct request *req);
int method_tensor_list(struct request *req);
int method_tensor_delete(struct request *req);
int method_tensor_chmod(struct request *req);
int method_tensor_copy(struct request *req);

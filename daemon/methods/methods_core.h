/* ping and info (docs/protocol.md). Each is a method_fn: see request.h for
 * the contract. */
#pragma once

#include "methods/request.h"

int method_ping(struct request *req);
int method_info(struct request *req);

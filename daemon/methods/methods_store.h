/* The store namespace's handler (docs/protocol.md, "Durability"). */
#pragma once

#include "methods/request.h"

/* Serve `store.sync {}`: write everything dirty now. */
int method_store_sync(struct request *req);

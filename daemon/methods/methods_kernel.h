/* kernel.create, kernel.run, kernel.list, kernel.delete: clients' own
 * compute kernels (docs/kernels.md). */
#pragma once

#include "serve/request.h"

int method_kernel_create(struct request *req);
int method_kernel_run(struct request *req);
int method_kernel_list(struct request *req);
int method_kernel_delete(struct request *req);

/* The fuzzers' stand-in device (gpu_stub.c). */
#pragma once

#include <stdint.h>

struct gpu_device;

/* Fill `g` as a small device with `heap_bytes` of memory. */
void fuzz_gpu_init(struct gpu_device *g, uint64_t heap_bytes);

/* Allocations currently live (must return to 0 once everything is freed). */
uint64_t fuzz_gpu_live_blocks(void);

/* Client pipelines built (gpu_pipeline_build) and not yet destroyed. */
uint64_t fuzz_gpu_live_pipelines(void);

/* Large host copies split over a few helper threads: one thread's memcpy
 * moves 4-10 GB/s, short of what a device's DMA takes in (a staged tensor.put
 * or tensor.get of 1 GiB on an H100, docs/performance.md). */
#pragma once

#include <stddef.h>

/* memcpy(dst, src, n), with the copy split over up to 8 threads (the
 * caller's among them; by default one less than the machine's processors,
 * none on 2 or fewer, TENSORD_COPY_THREADS to choose) when n is large; a
 * plain memcpy otherwise, or while another thread is using the pool. The threads start at the first large copy and live as
 * long as the process, with every signal blocked. Never fails. */
void copy_pool_memcpy(void *dst, const void *src, size_t n);

/* Fault in every page of the shared writable mapping [dst, dst + n) (dst
 * page-aligned) for writing, without changing a byte (MADV_POPULATE_WRITE,
 * Linux 5.14), split over the threads as a copy is where a copy would be.
 * Pages the kernel refuses (or an older kernel) are left to fault during
 * the copy. Never fails. */
void copy_pool_populate(void *dst, size_t n);

/* Threads a large copy uses, the caller's included (1: plain memcpy). */
unsigned copy_pool_threads(void);

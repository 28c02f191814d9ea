/* The libFuzzer entry points every harness in tests/fuzz/ defines. Built with
 * -fsanitize=fuzzer they run under libFuzzer; linked with replay.c they replay
 * the seed corpus (and any saved crash) as an ordinary test. */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* Run one input; returns 0 (a bug aborts). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

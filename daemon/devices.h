/* The devices the daemon computes on (docs/devices.md): opening every device
 * the configuration selects, finding the one a tensor lives on, choosing one
 * for a new tensor, and reading a request's `device` parameter. Opening,
 * closing and devices_param are devices.c's (the top layer); the rest is
 * devices_query.c's, at rank 4, which the layers above store/ may call
 * (docs/architecture.md, "Layers"). */
#pragma once

#include <msgpack.h>
#include <stdbool.h>
#include <stdint.h>

#include "gpu/device.h"

struct daemon;
struct request;
struct tensor;

/* Enumerate the Vulkan devices into d->devices and open those d->cfg.device
 * selects into d->gpus[0..ngpus). Returns 0 or -errno (logged). */
int devices_open(struct daemon *d);

/* Re-open device `id` after a loss (recover.c): on success the old one is
 * freed and replaced, its statistics carried over. Returns 0 or -errno. */
int devices_reopen(struct daemon *d, uint32_t id);

/* Free every device; safe on a partly opened set. */
void devices_close(struct daemon *d);

/* The device tensor `t` lives on. */
struct gpu_device *devices_of(const struct daemon *d, const struct tensor *t);

/* Device memory still free on `g` for tensors: its limit less what is taken. */
uint64_t devices_free_bytes(const struct gpu_device *g);

/* The default device for a new tensor of `bytes` owned by uid `owner`
 * (docs/devices.md): the device holding most of the owner's bytes (then
 * most of its tensors) that has room for it, so a user's tensors stay
 * together; for an owner with none (or no room there), the device with the
 * most free memory, ties to the lowest id. */
uint32_t devices_default(const struct daemon *d, uint32_t owner, uint64_t bytes);

/* Read a `device` parameter `v` (a device id) into *ret. Returns 0, or
 * request_fail() with INVALID_ARGUMENT naming `what` and the ids in use. */
int devices_param(struct request *req, const msgpack_object *v, const char *what, uint32_t *ret);

/* Whether any device is marked lost. */
bool devices_any_lost(const struct daemon *d);

/* Update every device's `load` (busy fraction since the last sample), called
 * about once a second with CLOCK_MONOTONIC `now_ns`. */
void devices_sample_load(struct daemon *d, int64_t now_ns);

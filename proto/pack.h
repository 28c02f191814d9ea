/* Small helpers over msgpack-c's packer and objects, shared by daemon and client. */
#pragma once

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Pack a NUL-terminated string; nonzero on failure, like msgpack_pack_*. */
int tdp_pack_cstr(msgpack_packer *pk, const char *s);

/* Pack `n` bytes of `s` as a str. */
int tdp_pack_strn(msgpack_packer *pk, const char *s, size_t n);

/* Pack `v[0..n)` as an array of uints (a shape); nonzero on failure. */
int tdp_pack_u64_array(msgpack_packer *pk, const uint64_t *v, unsigned n);

/* The value stored under `key` in map `map`, or NULL when absent or `map` is no map. */
const msgpack_object *tdp_map_find(const msgpack_object *map, const char *key);

/* Whether `o` is a str equal to the NUL-terminated `s`. */
bool tdp_obj_str_eq(const msgpack_object *o, const char *s);

/* Read an unsigned integer into *ret; -EINVAL when `o` is none. */
int tdp_obj_uint(const msgpack_object *o, uint64_t *ret);

/* Read an integer that fits int64 into *ret; -EINVAL when `o` is none. */
int tdp_obj_int(const msgpack_object *o, int64_t *ret);

/* Read a number (an integer or a float) into *ret as a double; -EINVAL when
 * `o` is none. */
int tdp_obj_number(const msgpack_object *o, double *ret);

/* Copy a str of at most `cap - 1` bytes into `dst` with a NUL; -EINVAL when `o`
 * is no str or holds a NUL byte, -ENAMETOOLONG when it does not fit. */
int tdp_obj_strcpy(const msgpack_object *o, char *dst, size_t cap);

/* NumPy .npy files for tensorctl: a strict, bounded header parser, a loader
 * that maps the file, element conversion to tensord dtypes, and a writer.
 *
 * Formats 1.0, 2.0 and 3.0 are read; 1.0 is written (2.0 is never needed: a
 * rank-8 header is far below 64 KiB). Only little-endian, C-ordered arrays of
 * the element types below are accepted. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wire_limits.h"

/* Longest header text accepted; NumPy itself refuses more than 10000 bytes. */
#define NPY_MAX_HEADER_LEN 65536

/* Element types a .npy file may hold for tensorctl. */
enum npy_elem {
	NPY_F32 = 0,  /* <f4 */
	NPY_F16 = 1,  /* <f2 */
	NPY_I32 = 2,  /* <i4 */
	NPY_U8 = 3,   /* |u1, u1, <u1 */
	NPY_U16 = 4,  /* <u2: bf16 bits, as tensorctl writes bf16 */
	NPY_F64 = 5,  /* <f8: NumPy's default float, converted on request */
	NPY_I64 = 6,  /* <i8: NumPy's default int, converted on request */
	NPY_ELEM_COUNT
};

struct npy_header {
	enum npy_elem elem;
	char descr[16];
	uint32_t rank;
	uint64_t shape[TDP_MAX_RANK];
	uint64_t count;        /* elements */
	size_t data_offset;    /* where the data starts in the file */
	uint64_t data_bytes;
};

struct npy_file {
	struct npy_header hdr;
	const uint8_t *data;   /* hdr.data_bytes bytes */
	void *base;            /* the mapping or the buffer holding the whole file */
	size_t base_len;
	bool mapped;
};

/* Bytes per element of `elem` (0 when out of range). */
size_t npy_elem_size(enum npy_elem elem);

/* Parse the header of a .npy file whose first `len` bytes (the whole file) are
 * `buf`, and check that the data that follows is exactly what the shape needs.
 * Returns 0, or -EINVAL / -ENOTSUP / -EOVERFLOW with a message in `err`. */
int npy_parse_header(const uint8_t *buf, size_t len, struct npy_header *ret,
		     char *err, size_t err_len);

/* Load `path` ("-" is stdin): a regular file is mapped, anything else read.
 * On success *ret holds the parsed header and points at the data; release it
 * with npy_close(). Returns -errno with a message in `err`. */
int npy_load(const char *path, struct npy_file *ret, char *err, size_t err_len);

/* Unmap or free what npy_load() set up; a zeroed struct is accepted. */
void npy_close(struct npy_file *f);

/* The tensord dtype to store `elem` as: `want` (a dtype, or -1 for the file's
 * own) when the conversion is allowed, else -EINVAL with a reason in `err`.
 * Allowed: the same type; <u2 → bf16 bits; any float → any float dtype; any
 * integer → any dtype (integer targets range-checked by npy_convert). */
int npy_target_dtype(enum npy_elem elem, int want, char *err, size_t err_len);

/* Whether storing `elem` as `dtype` is a plain copy of the bytes. */
bool npy_same_bytes(enum npy_elem elem, int dtype);

/* Convert `count` elements of `src` (type `elem`) into `dst` (dtype `dtype`,
 * room for count elements), rounding floats to nearest even. Returns 0, or
 * -ERANGE with a message when an integer does not fit. */
int npy_convert(enum npy_elem elem, const void *src, int dtype, void *dst, uint64_t count,
		char *err, size_t err_len);

/* Format the version 1.0 header for an array of wire dtype `dtype` into `buf`
 * (cap bytes): magic, length, the dict padded with spaces and a newline to a
 * multiple of 64 bytes. Returns the header length or -ENOSPC / -EINVAL. */
int npy_format_header(int dtype, uint32_t rank, const uint64_t *shape, char *buf, size_t cap);

/* Write a .npy file ("-" is stdout) holding `len` bytes of `data`. bf16 is
 * written as <u2 (NumPy has no bfloat16). Returns -errno with a message. */
int npy_write(const char *path, int dtype, uint32_t rank, const uint64_t *shape,
	      const void *data, size_t len, char *err, size_t err_len);

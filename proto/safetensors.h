/* safetensors files (https://github.com/huggingface/safetensors, "Format"):
 * an 8-byte little-endian header length N, N bytes of a UTF-8 JSON object
 * {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__"?:
 * {str: str}} that starts with '{' (and may be padded with spaces), then the
 * byte buffer the offsets point into: little-endian, C-ordered tensors that
 * cover it exactly, without holes or overlaps.
 *
 * The reader trusts nothing: the header length against its limit and the
 * file, the JSON, every key and type, each tensor's byte count against its
 * dtype and shape (overflow-checked), the offsets against the buffer and
 * each other. The writer produces what the reader accepts, padding the
 * header with spaces so the data starts 8-byte aligned. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wire_limits.h"

/* Longest header accepted: the limit of the reference implementation. */
#define ST_MAX_HEADER_LEN 100000000u
/* Ranks beyond tensord's are refused. */
#define ST_MAX_RANK TDP_MAX_RANK

/* Every dtype the format names; tensord stores F32 F16 BF16 I32 U8. */
enum st_dtype {
	ST_BOOL = 0,
	ST_U8 = 1,
	ST_I8 = 2,
	ST_F8_E5M2 = 3,
	ST_F8_E4M3 = 4,
	ST_I16 = 5,
	ST_U16 = 6,
	ST_F16 = 7,
	ST_BF16 = 8,
	ST_I32 = 9,
	ST_U32 = 10,
	ST_F32 = 11,
	ST_F64 = 12,
	ST_I64 = 13,
	ST_U64 = 14,
	ST_DTYPE_COUNT
};

struct st_tensor {
	const char *name;         /* NUL-terminated, UTF-8 */
	enum st_dtype dtype;
	uint32_t rank;
	uint64_t shape[ST_MAX_RANK];
	uint64_t begin, end;      /* data_offsets, relative to the byte buffer */
	const uint8_t *data;      /* end - begin bytes */
};

struct st_meta {
	const char *key, *value;  /* NUL-terminated (a NUL inside is refused) */
};

struct st_file {
	struct st_tensor *tensors; /* in header order */
	size_t ntensors;
	struct st_meta *meta;      /* the __metadata__ entries, in header order */
	size_t nmeta;
	uint64_t header_len;
	void *strings;             /* storage of the names, keys and values */
	void *base;                /* the mapping (st_load), else NULL */
	size_t base_len;
};

/* The format's name of `dtype` ("F32"), or NULL when out of range. */
const char *st_dtype_name(int dtype);

/* Bytes per element of `dtype` (0 when out of range). */
size_t st_dtype_size(int dtype);

/* The st_dtype for the format's name `s` (`n` bytes), or -EINVAL. */
int st_dtype_parse(const char *s, size_t n);

/* tensord's wire dtype (enum tdp_dtype) for `dtype`, or -ENOTSUP. */
int st_dtype_to_tensord(int dtype);

/* The st_dtype for tensord's wire dtype, or -EINVAL. */
int st_dtype_from_tensord(int tdp_dtype);

/* Parse and check the whole file held in `buf` (`len` bytes). On success
 * *ret describes it; its tensors point into `buf`, which must outlive it.
 * Release with st_close(). Returns 0, or -EINVAL / -EFBIG / -ENOTSUP /
 * -ENOMEM with a message in `err`. */
int st_parse(const uint8_t *buf, size_t len, struct st_file *ret, char *err, size_t err_len);

/* Map the regular file `path` and st_parse() it. Returns -errno with a
 * message in `err`. */
int st_load(const char *path, struct st_file *ret, char *err, size_t err_len);

/* Release what st_parse()/st_load() set up; a zeroed struct is accepted. */
void st_close(struct st_file *f);

/* The value of metadata `key`, or NULL. */
const char *st_meta_get(const struct st_file *f, const char *key);

/* One tensor to write: its data comes later (st_writer_put) or, for
 * st_write(), from `data`. */
struct st_entry {
	const char *name;
	enum st_dtype dtype;
	uint32_t rank;
	const uint64_t *shape;
	const void *data;
};

struct st_writer;

/* Start writing `path`: checks the entries (distinct names, known dtypes,
 * sizes that fit), writes the header to a temporary file beside `path`.
 * Returns 0 with *ret, or -errno with a message in `err`. */
int st_writer_open(const char *path, const struct st_entry *entries, size_t n,
		   const struct st_meta *meta, size_t nmeta, struct st_writer **ret, char *err,
		   size_t err_len);

/* Append the data of the next entry (in the order given): exactly its size
 * in bytes. Returns 0, or -EINVAL (wrong size, no entry left) / -errno with
 * a message in `err`. */
int st_writer_put(struct st_writer *w, const void *data, uint64_t len, char *err, size_t err_len);

/* With `commit` (and every entry written), move the file into place;
 * otherwise remove it. Frees `w` (NULL is accepted). Returns 0 or -errno. */
int st_writer_close(struct st_writer *w, bool commit, char *err, size_t err_len);

/* Write a whole file from entries that carry their data. */
int st_write(const char *path, const struct st_entry *entries, size_t n, const struct st_meta *meta,
	     size_t nmeta, char *err, size_t err_len);

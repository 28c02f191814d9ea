#include "persist/persist_file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "errorf.h"
#include "name.h"

/* "%H" never starts an encoded name (tdp_name_to_file writes only %2F, %25,
 * %3A and %2E), so hashed and encoded file names cannot meet. */
#define HASH_PREFIX "%H"
#define HASH_HEX 64
/* Room left for a writer's temporary suffix (".tmp-XXXXXX", ".tmp"). */
#define TMP_ROOM 16

/* ---- SHA-256 (FIPS 180-4): collisions between names must be infeasible,
 * or one user's name could pick another's file. ---- */

static const uint32_t K[64] = {
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
	0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
	0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
	0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
	0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
	0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
	0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
	0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static uint32_t ror(uint32_t x, unsigned n)
{
	return (x >> n) | (x << (32 - n));
}

static void block(uint32_t h[8], const uint8_t *p)
{
	uint32_t w[64], a, b, c, d, e, f, g, hh;

	for (int i = 0; i < 16; i++)
		w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
		       (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
	for (int i = 16; i < 64; i++) {
		uint32_t s0 = ror(w[i - 15], 7) ^ ror(w[i - 15], 18) ^ (w[i - 15] >> 3);
		uint32_t s1 = ror(w[i - 2], 17) ^ ror(w[i - 2], 19) ^ (w[i - 2] >> 10);

		w[i] = w[i - 16] + s0 + w[i - 7] + s1;
	}
	a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
	for (int i = 0; i < 64; i++) {
		uint32_t t1 = hh + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) + ((e & f) ^ (~e & g)) + K[i] + w[i];
		uint32_t t2 = (ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));

		hh = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
	}
	h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += hh;
}

/* SHA-256 of `len` bytes (len < 2^29) as 64 lowercase hex digits and a NUL. */
static void sha256_hex(const void *data, size_t len, char out[HASH_HEX + 1])
{
	uint32_t h[8] = { 0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
			  0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19 };
	const uint8_t *p = data;
	uint8_t tail[128] = { 0 };
	size_t full = len / 64 * 64, rest = len - full, ntail = rest < 56 ? 64 : 128;
	uint64_t bits = (uint64_t)len * 8;

	for (size_t i = 0; i < full; i += 64)
		block(h, p + i);
	memcpy(tail, p + full, rest);
	tail[rest] = 0x80;
	for (int i = 0; i < 8; i++)
		tail[ntail - 1 - i] = (uint8_t)(bits >> (8 * i));
	block(h, tail);
	if (ntail == 128)
		block(h, tail + 64);
	for (int i = 0; i < 8; i++)
		snprintf(out + 8 * i, 9, "%08x", h[i]);
}

int persist_file_name(const char *name, size_t len, const char *suffix, char *out)
{
	char enc[TDP_NAME_FILE_MAX], hex[HASH_HEX + 1];
	size_t slen = strlen(suffix);
	int n = tdp_name_to_file(name, len, enc, sizeof(enc));

	if (n < 0)
		return n;
	if ((size_t)n + slen + TMP_ROOM <= NAME_MAX)
		return snprintf(out, PERSIST_FILE_MAX, "%s%s", enc, suffix);
	sha256_hex(name, len, hex);
	return snprintf(out, PERSIST_FILE_MAX, "%s%s%s", HASH_PREFIX, hex, suffix);
}

int persist_file_parse(const char *file, const char *suffix, char *name)
{
	size_t n = strlen(file), slen = strlen(suffix);

	if (n <= slen || strcmp(file + n - slen, suffix) != 0)
		return -EINVAL;
	n -= slen;
	if (n == 2 + HASH_HEX && !strncmp(file, HASH_PREFIX, 2)) {
		for (size_t i = 2; i < n; i++)
			if (!strchr("0123456789abcdef", file[i]))
				return -EINVAL;
		return -EAGAIN;
	}
	return tdp_name_from_file(file, n, name);
}

bool persist_file_is_of(const char *file, const char *name, const char *suffix)
{
	char want[PERSIST_FILE_MAX];

	return persist_file_name(name, strlen(name), suffix, want) > 0 && !strcmp(want, file);
}

int persist_file_open(int dirfd, const char *file, struct stat *st, char *why, size_t why_len)
{
	int fd = openat(dirfd, file, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);

	if (fd < 0)
		return tdp_errorf(why, why_len, -errno, "%s",
				  errno == ELOOP ? "a symbolic link, not followed" : strerror(errno));
	if (fstat(fd, st) < 0) {
		int r = tdp_errorf(why, why_len, -errno, "%s", strerror(errno));

		close(fd);
		return r;
	}
	if (!S_ISREG(st->st_mode)) {
		close(fd);
		return tdp_errorf(why, why_len, -EINVAL, "not a regular file");
	}
	return fd;
}

int persist_dir_check(int fd, const char *path, char *err, size_t err_len)
{
	struct stat st;

	if (fstat(fd, &st) < 0)
		return tdp_errorf(err, err_len, -errno, "cannot stat %s: %s", path, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return tdp_errorf(err, err_len, -ENOTDIR, "%s is not a directory", path);
	if (st.st_uid != geteuid())
		return tdp_errorf(err, err_len, -EPERM,
				  "%s belongs to uid %u, not to tensord's user (uid %u): another user "
				  "could read or plant checkpoints; use a directory tensord's user owns",
				  path, (unsigned)st.st_uid, (unsigned)geteuid());
	if (st.st_mode & (S_IWGRP | S_IWOTH))
		return tdp_errorf(err, err_len, -EPERM,
				  "%s is writable by its group or others (mode %04o): another user "
				  "could plant checkpoints; chmod go-w it", path,
				  (unsigned)(st.st_mode & 07777));
	return 0;
}

/* Who a client is and what it may do to a tensor (docs/security.md).
 *
 * A client's identity is what the kernel says about its socket: uid, gid and
 * pid from SO_PEERCRED, supplementary groups from SO_PEERGROUPS. A tensor has
 * an owner uid, a group and a mode (proto/mode.h); the owner and root may do
 * anything, others what the mode grants them. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* Supplementary groups kept per client; more are ignored (logged). */
#define ACCESS_MAX_GROUPS 64

struct access_cred {
	uid_t uid;
	gid_t gid;              /* primary group */
	pid_t pid;
	uint32_t ngroups;
	gid_t groups[ACCESS_MAX_GROUPS];
};

/* The daemon's own identity (uid 0), for its bookkeeping (quota accounting,
 * loading its state), never for a client's request. */
extern const struct access_cred access_daemon;

enum access_want {
	ACCESS_READ = 1u << 0,  /* get, stat, use as an op input */
	ACCESS_WRITE = 1u << 1, /* replace, store an op result over, delete */
};

/* The credentials of the peer of Unix socket `fd`. Returns 0 or -errno
 * (the peer cannot be identified: the connection must be refused). */
int access_cred_from_socket(int fd, struct access_cred *ret);

/* Whether `who` is a member of group `gid` (primary or supplementary). */
bool access_cred_in_group(const struct access_cred *who, gid_t gid);

/* Whether `who` may do `want` (ACCESS_* bits) to a tensor of `owner`,
 * `group` and `mode`. */
bool access_allowed(const struct access_cred *who, uid_t owner, gid_t group, uint32_t mode,
		    unsigned want);

/* Whether `who` may change the mode and group of a tensor of `owner`:
 * the owner or root. */
bool access_may_chmod(const struct access_cred *who, uid_t owner);

#include "store/access.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "base/log.h"
#include "mode.h"

const struct access_cred access_daemon = { .uid = 0, .gid = 0 };

int access_cred_from_socket(int fd, struct access_cred *ret)
{
	struct access_cred c = { 0 };
	struct ucred uc;
	socklen_t len = sizeof(uc);
	gid_t *all = NULL;

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &len) < 0)
		return -errno;
	if (len != sizeof(uc) || uc.uid == (uid_t)-1)
		return -EPERM;
	c.uid = uc.uid;
	c.gid = uc.gid;
	c.pid = uc.pid;
	len = sizeof(c.groups);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, c.groups, &len) == 0) {
		c.ngroups = len / sizeof(gid_t);
	} else if (errno == ERANGE && len > sizeof(c.groups)) {
		/* More groups than we keep: the kernel said how many; take the first. */
		all = malloc(len);
		if (all && getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, all, &len) == 0) {
			c.ngroups = ACCESS_MAX_GROUPS;
			memcpy(c.groups, all, sizeof(c.groups));
			log_warning("pid %d (uid %u) is in %u groups; only the first %d count for tensor access",
				    (int)c.pid, (unsigned)c.uid, (unsigned)(len / sizeof(gid_t)),
				    ACCESS_MAX_GROUPS);
		}
		free(all);
	}
	/* Without SO_PEERGROUPS (kernels before 4.13) only the primary group counts. */
	*ret = c;
	return 0;
}

bool access_cred_in_group(const struct access_cred *who, gid_t gid)
{
	if (who->gid == gid)
		return true;
	for (uint32_t i = 0; i < who->ngroups; i++)
		if (who->groups[i] == gid)
			return true;
	return false;
}

bool access_allowed(const struct access_cred *who, uid_t owner, gid_t group, uint32_t mode,
		    unsigned want)
{
	unsigned have = 0;

	if (who->uid == 0 || who->uid == owner)
		return true;
	if (mode & TDP_MODE_WORLD_READ)
		have |= ACCESS_READ;
	if (mode & TDP_MODE_WORLD_WRITE)
		have |= ACCESS_WRITE;
	if (access_cred_in_group(who, group)) {
		if (mode & TDP_MODE_GROUP_READ)
			have |= ACCESS_READ;
		if (mode & TDP_MODE_GROUP_WRITE)
			have |= ACCESS_WRITE;
	}
	return (want & ~have) == 0;
}

bool access_may_chmod(const struct access_cred *who, uid_t owner)
{
	return who->uid == 0 || who->uid == owner;
}

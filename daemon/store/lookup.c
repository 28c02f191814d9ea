#include "store/lookup.h"

#include <errno.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "mode.h"
#include "status.h"
#include "store/names.h"

/* `name` in the caller's overlay (caller.h: sorted by name), or NULL. */
static struct tensor *overlay_find(const struct caller *c, const char *name)
{
	unsigned lo = 0, hi = c->overlay ? c->overlay->n : 0;

	while (lo < hi) {
		unsigned mid = lo + (hi - lo) / 2;
		int cmp = strcmp(c->overlay->tensors[mid].name, name);

		if (!cmp)
			return &c->overlay->tensors[mid];
		if (cmp < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

/* store_lookup, the caller's overlay first. */
static int lookup_in(const struct caller *c, const char *name, unsigned want, struct tensor **ret,
		     struct store_denial *dn)
{
	struct tensor *t = overlay_find(c, name);

	if (!t)
		return store_lookup(c->d->store, name, strlen(name), &c->cred, want, ret, dn);
	if (!access_allowed(&c->cred, t->owner, t->group, t->mode, want)) {
		*dn = (struct store_denial){ .owner = t->owner, .group = t->group, .mode = t->mode };
		return -EACCES;
	}
	*ret = t;
	return 0;
}

int lookup_tensor_why(const struct caller *c, const char *what, const char *name, unsigned want,
		      struct tensor **ret, char *why, size_t cap)
{
	struct store_denial dn;
	char mode[TDP_MODE_TEXT_MAX], shown[NAMES_SHOWN_MAX];
	bool create = (want & ACCESS_WRITE) && !(want & LOOKUP_EXISTING);
	int r = lookup_in(c, name, want & ~LOOKUP_EXISTING, ret, &dn);
	uint32_t ns;
	size_t off;

	if (r == 0)
		return 0;
	names_show(c->cred.uid, name, shown);
	if (r == -ENOENT && create && names_key_split(name, strlen(name), &ns, &off) == 0 &&
	    !names_may_create(&c->cred, ns)) {
		char login[33];

		names_login(ns, login);
		snprintf(why, cap, "%s%s'%s' is in the namespace of %s (uid %u): only its owner or root may "
			 "create names there", what ? what : "", what ? ": " : "", shown, login, (unsigned)ns);
		return TDP_PERMISSION_DENIED;
	}
	if (r == -ENOENT) {
		snprintf(why, cap, "%s%sno tensor named '%s'", what ? what : "", what ? ": " : "", shown);
		return TDP_NOT_FOUND;
	}
	snprintf(why, cap, "%s%stensor '%s' belongs to uid %u (group %u, mode %s) and may not be %s by uid %u",
		 what ? what : "", what ? ": " : "", shown, dn.owner, dn.group, tdp_mode_format(dn.mode, mode),
		 want & ACCESS_WRITE ? "changed" : "read", (unsigned)c->cred.uid);
	return TDP_PERMISSION_DENIED;
}

int lookup_derived_why(const struct caller *c, const char *what, const char *name,
		       const struct tensor *base, unsigned want, struct tensor **ret, char *why, size_t cap)
{
	char shown[NAMES_SHOWN_MAX], bshown[NAMES_SHOWN_MAX];
	struct tensor *t = overlay_find(c, name);
	int r = t ? 0 : store_lookup(c->d->store, name, strlen(name), &access_daemon, 0, &t, NULL);

	if (r == -ENOENT) {
		snprintf(why, cap, "%s%sno tensor named '%s'", what ? what : "", what ? ": " : "",
			 names_show(c->cred.uid, name, shown));
		return TDP_NOT_FOUND;
	}
	/* Never use a derived tensor someone else put in its place. */
	if (t->owner != base->owner) {
		snprintf(why, cap, "%s%s'%s' belongs to uid %u, not to uid %u who owns %s%s%s; it is not used: "
			 "delete it", what ? what : "", what ? ": " : "", names_show(c->cred.uid, name, shown),
			 t->owner, base->owner, base->name[0] ? "'" : "what it derives from",
			 base->name[0] ? names_show(c->cred.uid, base->name, bshown) : "",
			 base->name[0] ? "'" : "");
		return TDP_FAILED_PRECONDITION;
	}
	return lookup_tensor_why(c, what, name, want, ret, why, cap);
}

const char *lookup_show(const struct caller *c, const char *key, char *out)
{
	return names_show(c->cred.uid, key, out);
}

int lookup_key(struct caller *c, const char *text, size_t len, char *key)
{
	int n = names_qualify(c->cred.uid, text, len, key, NULL);

	if (n == -ESRCH)
		return td_fail(&c->err, TDP_INVALID_ARGUMENT, "'%.*s': no such user", (int)len, text);
	if (n == -ENAMETOOLONG)
		return td_fail(&c->err, TDP_INVALID_ARGUMENT,
				    "'%.*s' is too long: a name and its namespace (the uid and a slash) "
				    "are at most %d bytes", (int)len, text, TDP_MAX_NAME_LEN);
	if (n < 0)
		return td_fail(&c->err, TDP_INVALID_ARGUMENT,
				    "invalid tensor name (1-%d bytes of A-Z a-z 0-9 . _ : / -, "
				    "optionally after ~user/)", TDP_MAX_NAME_LEN);
	return n;
}

int lookup_tensor(struct caller *c, const char *what, const char *name, unsigned want,
		  struct tensor **ret)
{
	char why[TDP_MAX_ERROR_MESSAGE];
	int code = lookup_tensor_why(c, what, name, want, ret, why, sizeof(why));

	if (code)
		return td_fail(&c->err, code, "%s", why);
	return 0;
}

struct owner_delta {
	uint32_t uid;
	int64_t tensors, bytes;
};

/* The primary group of `uid` for its quotas: the caller's own, else the
 * password database's (a tensor written into another's namespace). */
static uint32_t owner_gid(const struct caller *c, uint32_t uid)
{
	struct passwd pw, *found = NULL;
	char buf[1024];

	if (uid == (uint32_t)c->cred.uid)
		return (uint32_t)c->cred.gid;
	if (getpwuid_r((uid_t)uid, &pw, buf, sizeof(buf), &found) == 0 && found)
		return (uint32_t)found->pw_gid;
	return UINT32_MAX;
}

int lookup_check_quota(struct caller *c, const struct lookup_output *outs, size_t n)
{
	struct store *s = c->d->store;
	struct owner_delta *od = calloc(n ? n : 1, sizeof(*od));
	size_t nod = 0;
	int r = 0;

	if (!od)
		return td_fail(&c->err, TDP_INTERNAL, "out of memory");
	for (size_t i = 0; i < n; i++) {
		struct tensor *old = NULL;
		uint32_t uid = c->cred.uid;
		size_t k;

		/* Access was checked by the caller; only the owner matters here. */
		if (store_lookup(s, outs[i].name, strlen(outs[i].name), &access_daemon, ACCESS_WRITE, &old,
				 NULL) < 0)
			old = NULL;
		if (old) {
			uid = old->owner;
		} else {
			uint32_t group;

			names_new_owner(&c->cred, outs[i].name, &uid, &group);
		}
		for (k = 0; k < nod && od[k].uid != uid; k++)
			;
		if (k == nod)
			od[nod++] = (struct owner_delta){ .uid = uid };
		od[k].tensors += old ? 0 : 1;
		od[k].bytes += (int64_t)outs[i].bytes - (int64_t)(old ? old->bytes : 0);
	}
	for (size_t k = 0; k < nod; k++) {
		uint32_t gid = owner_gid(c, od[k].uid);
		uint64_t max_t = config_user_value(&c->d->cfg.user_quota_tensors, od[k].uid, gid, c->d->cfg.user_max_tensors);
		uint64_t max_b = config_user_value(&c->d->cfg.user_quota_bytes, od[k].uid, gid, c->d->cfg.user_max_bytes);
		struct store_usage use;
		const char *limit = "";

		r = store_quota_check_limits(s, od[k].uid, od[k].tensors, od[k].bytes, max_t, max_b, &limit);
		if (r == -ENOMEM) {
			td_fail(&c->err, TDP_INTERNAL, "out of memory");
			break;
		}
		if (r < 0) {
			store_usage_of(s, od[k].uid, &use);
			if (!strcmp(limit, "user_max_tensors"))
				td_fail(&c->err, TDP_RESOURCE_EXHAUSTED,
					     "uid %u holds %llu tensors; %lld more would pass its quota of %llu "
					     "(%s)", od[k].uid, (unsigned long long)use.tensors,
					     (long long)od[k].tensors, (unsigned long long)max_t,
					     max_t == c->d->cfg.user_max_tensors ? "user_max_tensors" : "user_quota_tensors");
			else
				td_fail(&c->err, TDP_RESOURCE_EXHAUSTED,
					     "uid %u holds %llu bytes; %lld more would pass its quota of %llu "
					     "(%s)", od[k].uid, (unsigned long long)use.bytes,
					     (long long)od[k].bytes, (unsigned long long)max_b,
					     max_b == c->d->cfg.user_max_bytes ? "user_max_bytes" : "user_quota_bytes");
			break;
		}
	}
	free(od);
	return r < 0 ? -1 : 0;
}

struct tensor *lookup_readable(const struct caller *c, const char *name, size_t len)
{
	char key[TDP_MAX_NAME_LEN + 1], why[8];
	struct tensor *t;

	if (names_qualify(c->cred.uid, name, len, key, NULL) < 0)
		return NULL;
	return lookup_tensor_why(c, NULL, key, ACCESS_READ, &t, why, sizeof(why)) == 0 ? t : NULL;
}

#include "store/names.h"

#include <errno.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "name.h"

/* getpw*_r with a buffer of the size the system suggests (bounded). */
static struct passwd *pw_lookup(const char *login, uint32_t uid, struct passwd *pw, char *buf,
				size_t cap)
{
	struct passwd *res = NULL;
	int r = login ? getpwnam_r(login, pw, buf, cap, &res) : getpwuid_r((uid_t)uid, pw, buf, cap, &res);

	return r == 0 ? res : NULL;
}

bool names_login(uint32_t uid, char *out)
{
	struct passwd pw, *res;
	char buf[2048];

	res = pw_lookup(NULL, uid, &pw, buf, sizeof(buf));
	if (res && res->pw_name && strlen(res->pw_name) <= 32 && res->pw_name[0]) {
		strcpy(out, res->pw_name);
		return true;
	}
	snprintf(out, 33, "%u", (unsigned)uid);
	return false;
}

/* The uid named by `user` (`len` bytes): decimal digits or a login name. */
static int user_uid(const char *user, size_t len, uint32_t *ret)
{
	char login[33], buf[2048];
	struct passwd pw, *res;

	if (len == 0 || len > 32)
		return -EINVAL;
	if (strspn(user, "0123456789") >= len) {
		unsigned long long v = 0;

		for (size_t i = 0; i < len; i++) {
			v = v * 10 + (unsigned)(user[i] - '0');
			if (v >= UINT32_MAX)
				return -EINVAL;
		}
		*ret = (uint32_t)v;
		return 0;
	}
	for (size_t i = 0; i < len; i++)
		if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-", user[i]))
			return -EINVAL;
	memcpy(login, user, len);
	login[len] = '\0';
	res = pw_lookup(login, 0, &pw, buf, sizeof(buf));
	if (!res)
		return -ESRCH;
	*ret = (uint32_t)res->pw_uid;
	return 0;
}

/* "<ns>/<name>" into key (TDP_MAX_NAME_LEN + 1 bytes), as snprintf's
 * "%u/%.*s" would write it (each op.run qualifies its names: no printf).
 * Returns its length, or -ENAMETOOLONG (key then holds nothing usable). */
static int format_key(char *key, uint32_t ns, const char *name, size_t nlen)
{
	char digits[10];
	size_t nd = 0, n;

	do {
		digits[nd++] = (char)('0' + ns % 10);
		ns /= 10;
	} while (ns);
	n = nd + 1 + nlen;
	if (n > TDP_MAX_NAME_LEN)
		return -ENAMETOOLONG;
	for (size_t i = 0; i < nd; i++)
		key[i] = digits[nd - 1 - i];
	key[nd] = '/';
	memcpy(key + nd + 1, name, nlen);
	key[n] = '\0';
	return (int)n;
}

static int qualify(uint32_t ns_uid, const char *text, size_t len, char *key, uint32_t *ret_ns,
		   bool prefix)
{
	const char *name = text;
	size_t nlen = len;
	uint32_t ns = ns_uid;
	int n;

	if (len > 0 && text[0] == '~') {
		const char *slash = memchr(text, '/', len);
		int r;

		if (!slash)
			return -EINVAL;
		r = user_uid(text + 1, (size_t)(slash - text - 1), &ns);
		if (r < 0)
			return r;
		name = slash + 1;
		nlen = len - (size_t)(slash + 1 - text);
	}
	if (!(prefix && nlen == 0) && !tdp_name_valid(name, nlen))
		return -EINVAL;
	n = format_key(key, ns, name, nlen);
	if (n < 0)
		return n;
	if (ret_ns)
		*ret_ns = ns;
	return n;
}

int names_qualify(uint32_t ns_uid, const char *text, size_t len, char *key, uint32_t *ret_ns)
{
	return qualify(ns_uid, text, len, key, ret_ns, false);
}

int names_qualify_prefix(uint32_t ns_uid, const char *text, size_t len, char *key)
{
	return qualify(ns_uid, text, len, key, NULL, true);
}

int names_key_split(const char *key, size_t len, uint32_t *ret_ns, size_t *ret_name_off)
{
	unsigned long long v = 0;
	size_t i;

	for (i = 0; i < len && key[i] >= '0' && key[i] <= '9'; i++) {
		v = v * 10 + (unsigned)(key[i] - '0');
		if (v >= UINT32_MAX || i >= 10)
			return -EINVAL;
	}
	/* Canonical: digits without a leading zero (but "0"), a slash, a name. */
	if (i == 0 || i + 1 >= len || key[i] != '/' || (key[0] == '0' && i > 1))
		return -EINVAL;
	*ret_ns = (uint32_t)v;
	*ret_name_off = i + 1;
	return 0;
}

const char *names_show(uint32_t viewer_uid, const char *key, char *out)
{
	char login[33];
	uint32_t ns;
	size_t off;

	if (names_key_split(key, strlen(key), &ns, &off) < 0) {
		snprintf(out, NAMES_SHOWN_MAX, "%s", key);
		return out;
	}
	if (ns == viewer_uid) {
		size_t n = strnlen(key + off, NAMES_SHOWN_MAX - 1);

		memcpy(out, key + off, n);
		out[n] = '\0';
		return out;
	}
	names_login(ns, login);
	snprintf(out, NAMES_SHOWN_MAX, "~%s/%s", login, key + off);
	return out;
}

bool names_may_create(const struct access_cred *who, uint32_t ns_uid)
{
	return who->uid == 0 || who->uid == ns_uid;
}

void names_new_owner(const struct access_cred *creator, const char *key, uint32_t *ret_owner,
		     uint32_t *ret_group)
{
	struct passwd pw, *res;
	char buf[2048];
	uint32_t ns;
	size_t off;

	if (names_key_split(key, strlen(key), &ns, &off) < 0 || ns == creator->uid) {
		*ret_owner = creator->uid;
		*ret_group = creator->gid;
		return;
	}
	*ret_owner = ns;
	res = pw_lookup(NULL, ns, &pw, buf, sizeof(buf));
	*ret_group = res ? (uint32_t)res->pw_gid : ns;
}

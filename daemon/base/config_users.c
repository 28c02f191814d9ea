#include "base/config_users.h"

#include <ctype.h>
#include <errno.h>
#include <grp.h>
#include <inttypes.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>

/* A uid or gid given by number or by name. */
static int parse_id(const char *s, bool group, uint32_t *ret)
{
	char buf[4096], *end;
	unsigned long long v;

	if (isdigit((unsigned char)*s)) {
		errno = 0;
		v = strtoull(s, &end, 10);
		if (errno || *end || v >= UINT32_MAX)
			return -EINVAL;
		*ret = (uint32_t)v;
		return 0;
	}
	if (group) {
		struct group gr, *res = NULL;

		if (getgrnam_r(s, &gr, buf, sizeof(buf), &res) != 0 || !res)
			return -EINVAL;
		*ret = res->gr_gid;
	} else {
		struct passwd pw, *res = NULL;

		if (getpwnam_r(s, &pw, buf, sizeof(buf), &res) != 0 || !res)
			return -EINVAL;
		*ret = res->pw_uid;
	}
	return 0;
}

int config_users_parse(const char *v, int (*parse_value)(const char *, uint64_t, uint64_t, uint64_t *),
		       uint64_t min, uint64_t max, struct config_users *ret)
{
	struct config_users w = { 0 };
	char copy[4096], *save = NULL;

	if (!strcmp(v, "none")) {
		*ret = w;
		return 0;
	}
	if (strlen(v) >= sizeof(copy))
		return -EINVAL;
	strcpy(copy, v);
	for (char *tok = strtok_r(copy, " ,\t", &save); tok; tok = strtok_r(NULL, " ,\t", &save)) {
		char *colon = strrchr(tok, ':');
		bool group = tok[0] == '@';

		if (!colon || w.n == CONFIG_MAX_USER_ENTRIES)
			return -EINVAL;
		*colon = '\0';
		if (parse_value(colon + 1, min, max, &w.e[w.n].value) < 0 ||
		    parse_id(tok + group, group, &w.e[w.n].id) < 0)
			return -EINVAL;
		w.e[w.n].group = group;
		w.n++;
	}
	if (!w.n)
		return -EINVAL;
	*ret = w;
	return 0;
}

void config_users_print(FILE *f, const struct config_users *w, void (*print_value)(FILE *, uint64_t))
{
	if (!w->n)
		fprintf(f, "none");
	for (unsigned i = 0; i < w->n; i++) {
		fprintf(f, "%s%s%" PRIu32 ":", i ? " " : "", w->e[i].group ? "@" : "", w->e[i].id);
		print_value(f, w->e[i].value);
	}
}

uint64_t config_user_value(const struct config_users *w, uint32_t uid, uint32_t gid, uint64_t dflt)
{
	const uint64_t *by_group = NULL;

	for (unsigned i = 0; i < w->n; i++) {
		if (!w->e[i].group && w->e[i].id == uid)
			return w->e[i].value;
		if (w->e[i].group && w->e[i].id == gid && !by_group)
			by_group = &w->e[i].value;
	}
	return by_group ? *by_group : dflt;
}

#include "base/config_weights.h"

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

int config_weights_parse(const char *v, struct config_weights *ret)
{
	struct config_weights w = { 0 };
	char copy[4096], *save = NULL;

	if (!strcmp(v, "none")) {
		*ret = w;
		return 0;
	}
	if (strlen(v) >= sizeof(copy))
		return -EINVAL;
	strcpy(copy, v);
	for (char *tok = strtok_r(copy, " ,\t", &save); tok; tok = strtok_r(NULL, " ,\t", &save)) {
		char *colon = strrchr(tok, ':'), *end;
		bool group = tok[0] == '@';
		unsigned long long weight;

		if (!colon || w.n == CONFIG_MAX_WEIGHTS)
			return -EINVAL;
		*colon = '\0';
		errno = 0;
		weight = strtoull(colon + 1, &end, 10);
		if (errno || *end || colon[1] == '\0' || weight < 1 || weight > CONFIG_MAX_WEIGHT ||
		    parse_id(tok + group, group, &w.e[w.n].id) < 0)
			return -EINVAL;
		w.e[w.n].group = group;
		w.e[w.n].weight = (uint32_t)weight;
		w.n++;
	}
	if (!w.n)
		return -EINVAL;
	*ret = w;
	return 0;
}

void config_weights_print(FILE *f, const struct config_weights *w)
{
	if (!w->n)
		fprintf(f, "none");
	for (unsigned i = 0; i < w->n; i++)
		fprintf(f, "%s%s%" PRIu32 ":%" PRIu32, i ? " " : "", w->e[i].group ? "@" : "", w->e[i].id,
			w->e[i].weight);
}

uint32_t config_weight_of(const struct config_weights *w, uint32_t uid, uint32_t gid)
{
	uint32_t by_group = 0;

	for (unsigned i = 0; i < w->n; i++) {
		if (!w->e[i].group && w->e[i].id == uid)
			return w->e[i].weight;
		if (w->e[i].group && w->e[i].id == gid && !by_group)
			by_group = w->e[i].weight;
	}
	return by_group ? by_group : 1;
}

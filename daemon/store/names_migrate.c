#include "store/names_migrate.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "store/model.h"
#include "store/names.h"
#include "store/store.h"

/* The key of legacy name `name` of `owner` into `key`; its length or -1. */
static int legacy_key(uint32_t owner, const char *name, char *key)
{
	int n = snprintf(key, TDP_MAX_NAME_LEN + 1, "%u/%s", (unsigned)owner, name);

	return n > 0 && n <= TDP_MAX_NAME_LEN ? n : -1;
}

void names_migrate(struct store *s, struct models *ms)
{
	struct tensor **list;
	struct model **ml;
	size_t n;

	if (store_list(s, NULL, 0, &access_daemon, &list, &n) == 0) {
		for (size_t i = 0; i < n; i++) {
			char key[TDP_MAX_NAME_LEN + 1], old[TDP_MAX_NAME_LEN + 1];
			struct tensor *t = list[i];
			uint32_t ns;
			size_t off;
			int k;

			/* A key is in its owner's namespace (names_new_owner). */
			if (names_key_split(t->name, t->name_len, &ns, &off) == 0 && ns == t->owner)
				continue;
			snprintf(old, sizeof(old), "%s", t->name);
			k = legacy_key(t->owner, t->name, key);
			if (k < 0) {
				log_error("tensor '%s' of uid %u from before per-user namespaces: its name is too "
					  "long for its namespace; it is left unreachable", old, t->owner);
				continue;
			}
			if (store_rename(s, t, key, (size_t)k) == -EEXIST) {
				/* A checkpoint of the key is newer than the old file. */
				store_delete(s, old, strlen(old));
				continue;
			}
			log_notice("tensor '%s' of uid %u from before per-user namespaces is now '%s'", old,
				   t->owner, key);
		}
		free(list);
	}
	if (models_list(ms, &ml, &n) == 0) {
		for (size_t i = 0; i < n; i++) {
			char key[TDP_MAX_NAME_LEN + 1], old[TDP_MAX_NAME_LEN + 1];
			struct model *m = ml[i];
			uint32_t ns;
			size_t off;

			if (names_key_split(m->name, strlen(m->name), &ns, &off) == 0 && ns == m->owner)
				continue;
			snprintf(old, sizeof(old), "%s", m->name);
			if (legacy_key(m->owner, m->name, key) < 0)
				continue;
			if (models_find(ms, key)) {
				models_delete(ms, old);
				continue;
			}
			strcpy(m->name, key);
			log_notice("model '%s' of uid %u from before per-user namespaces is now '%s'", old,
				   m->owner, key);
		}
		free(ml);
	}
}

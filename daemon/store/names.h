/* Per-user namespaces (docs/security.md, "Names").
 *
 * A name a client writes ("w", "~alice/w", "~1000/w") is translated once, at
 * the method boundary, into a store key "<uid>/<name>": the namespace's uid
 * in decimal, a slash, the name. Everything below the methods (the store,
 * persistence, training's derived names) works with keys; a derived name
 * (`<key>.exp_avg`) is therefore in the namespace of what it derives from.
 * Results and errors show a key back to a client as the plain name when the
 * namespace is the client's own, else as "~user/name". */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/access.h"
#include "wire_limits.h"

/* Room for a name as shown to a client: "~" + a login name (at most 32
 * bytes, longer ones are shown as the uid) + "/" + a name + NUL. */
#define NAMES_SHOWN_MAX (1 + 32 + 1 + TDP_MAX_NAME_LEN + 1)

/* The key of client text `text` (`len` bytes), resolved in namespace
 * `ns_uid` unless it starts with "~USER/" (a login name or a uid). Writes
 * the key (TDP_MAX_NAME_LEN + 1 bytes) and returns its length; -EINVAL for a
 * bad name or qualifier, -ESRCH for an unknown login name, -ENAMETOOLONG when
 * the key would be longer than TDP_MAX_NAME_LEN. When `ret_ns` is not NULL it
 * gets the namespace's uid. */
int names_qualify(uint32_t ns_uid, const char *text, size_t len, char *key, uint32_t *ret_ns);

/* names_qualify for a prefix of names (tensor.list): the name after the
 * namespace may be empty, "~user/" is that namespace's prefix. */
int names_qualify_prefix(uint32_t ns_uid, const char *text, size_t len, char *key);

/* The namespace uid of key `key` (`len` bytes) and where its name starts.
 * Returns 0 or -EINVAL when `key` is no key (a name from before namespaces). */
int names_key_split(const char *key, size_t len, uint32_t *ret_ns, size_t *ret_name_off);

/* Write `key` as `viewer_uid` sees it (NAMES_SHOWN_MAX bytes): its plain name
 * in the viewer's namespace, "~user/name" in another. Returns `out`. A
 * string that is no key is copied as it is. */
const char *names_show(uint32_t viewer_uid, const char *key, char *out);

/* Whether `who` may create names in namespace `ns_uid`: its owner and root. */
bool names_may_create(const struct access_cred *who, uint32_t ns_uid);

/* The owner and group of a tensor `creator` newly stores under `key`: the
 * namespace's uid; the creator's group when it creates in its own namespace,
 * else the namespace owner's primary group (the uid when unknown). */
void names_new_owner(const struct access_cred *creator, const char *key, uint32_t *ret_owner,
		     uint32_t *ret_group);

/* The login name of `uid` into `out` (33 bytes); false when it has none
 * that fits (then `out` holds the decimal uid). */
bool names_login(uint32_t uid, char *out);

#!/usr/bin/python3
"""The client's layout (docs/architecture.md, "The client"): client/ holds
three folders and no sources of its own; each folder includes only what it
stands on; tensorctl's command files use the common layer, never each other.

- lib/ (libtensord) and util/ (tensorctl's pure helpers) include their own
  headers and proto/'s only;
- ctl/ includes its own, lib/'s, util/'s and proto/'s;
- in ctl/, a command file (ctl_<command>.c: not tensorctl.c, ctl_help.c or
  ctl_common*.c) includes of ctl/'s headers only ctl_cmd.h and ctl_common.h,
  defines no non-static function but its ctl_cmd_* entry points and calls no
  ctl_cmd_* function of another file; the common layer (ctl_common*.c,
  ctl_common.h) includes no ctl_cmd.h.

Usage: check_client.py [SOURCE_ROOT]   (default: the tree this script is in)
"""
import os
import re
import sys

FOLDERS = ("lib", "util", "ctl")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
# A function defined at the start of a line ("int name(...)", no ";").
DEFINITION = re.compile(r'^(static\s+)?[A-Za-z_][^;(=]*?\b([A-Za-z_]\w*)\(.*$', re.M)
CALL = re.compile(r'\b(ctl_cmd_\w+)\s*\(')
MAIN_FILES = {"tensorctl.c", "ctl_help.c"}


def check(files, proto):
    """Errors of `files` ({path under client/: text}); `proto`: proto/'s headers."""
    own = {d: {p.split("/")[1] for p in files if p.startswith(d + "/") and p.endswith(".h")}
           for d in FOLDERS}
    allowed = {"lib": own["lib"] | proto, "util": own["util"] | proto,
               "ctl": own["ctl"] | own["lib"] | own["util"] | proto}
    errors = []
    for path, text in sorted(files.items()):
        d, _, f = path.rpartition("/")
        if d not in FOLDERS:
            errors.append(f"client/{path}: client/ holds only lib/, util/ and ctl/")
            continue
        includes = INCLUDE.findall(text)
        for h in includes:
            if h not in allowed[d]:
                errors.append(f"client/{path}: includes \"{h}\", which {d}/ may not use")
        if d != "ctl":
            continue
        ctl_headers = {h for h in includes if h in own["ctl"]}
        common = f.startswith("ctl_common")
        if common and "ctl_cmd.h" in ctl_headers:
            errors.append(f"client/{path}: the common layer includes ctl_cmd.h")
        if not f.endswith(".c") or common or f in MAIN_FILES:
            continue
        for h in sorted(ctl_headers - {"ctl_cmd.h", "ctl_common.h"}):
            errors.append(f"client/{path}: a command file includes \"{h}\" (what it needs of "
                          "another file belongs in ctl_common.h)")
        defined = set()
        for m in DEFINITION.finditer(text):
            name = m.group(2)
            if m.group(0).rstrip().endswith(";") or m.group(1) or name.startswith("__"):
                continue
            defined.add(name)
            if not name.startswith("ctl_cmd_"):
                errors.append(f"client/{path}: defines {name}() for other files: a shared "
                              "helper belongs in ctl_common.h")
        for name in sorted(set(CALL.findall(text)) - defined):
            errors.append(f"client/{path}: calls {name}(), another command file's entry point")
    return errors


def self_test():
    """The check itself can fail: a made-up tree with each kind of fault."""
    files = {
        "x.c": "",
        "lib/a.h": '#include "buf.h"\n',
        "lib/a.c": '#include "a.h"\n#include "v.h"\n',
        "util/v.h": "",
        "util/v.c": '#include "a.h"\n',
        "ctl/ctl_cmd.h": '#include "ctl_common.h"\n',
        "ctl/ctl_common.h": '#include "a.h"\n',
        "ctl/ctl_common.c": '#include "ctl_cmd.h"\n',
        "ctl/ctl_help.h": "",
        "ctl/ctl_one.c": '#include "ctl_cmd.h"\n#include "v.h"\n'
                         "int ctl_cmd_one(struct ctl *c)\n{\n\treturn ctl_cmd_two(c);\n}\n"
                         "static int ok(void)\n{\n}\nint helper(int a)\n{\n}\n",
        "ctl/ctl_two.c": '#include "ctl_cmd.h"\n#include "ctl_help.h"\n'
                         "int ctl_cmd_two(struct ctl *c);\nint ctl_cmd_two(struct ctl *c)\n{\n}\n",
        "ctl/tensorctl.c": '#include "ctl_cmd.h"\n#include "ctl_help.h"\n',
    }
    want = ["client/x.c: client/ holds only",
            'client/lib/a.c: includes "v.h"',
            'client/util/v.c: includes "a.h"',
            "client/ctl/ctl_common.c: the common layer includes ctl_cmd.h",
            "client/ctl/ctl_one.c: defines helper()",
            "client/ctl/ctl_one.c: calls ctl_cmd_two()",
            'client/ctl/ctl_two.c: a command file includes "ctl_help.h"']
    errors = check(files, {"buf.h"})
    assert len(errors) == len(want), errors
    for w, e in zip(sorted(want), sorted(errors)):
        assert e.startswith(w), (w, e)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    self_test()
    client = os.path.join(root, "client")
    proto = {f for f in os.listdir(os.path.join(root, "proto")) if f.endswith(".h")}
    files = {}
    for dirpath, _, names in os.walk(client):
        for n in names:
            if n.endswith((".c", ".h")):
                path = os.path.relpath(os.path.join(dirpath, n), client)
                with open(os.path.join(dirpath, n), encoding="utf-8") as f:
                    files[path] = f.read()
    errors = check(files, proto)
    for e in errors:
        print(e)
    if errors:
        return 1
    print(f"client: {len(files)} files; lib/, util/ and ctl/ include only what they stand on, "
          "and tensorctl's command files use ctl_common.h, never each other")
    return 0


if __name__ == "__main__":
    sys.exit(main())

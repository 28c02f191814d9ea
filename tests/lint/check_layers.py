#!/usr/bin/python3
"""The daemon's layering (docs/architecture.md, "Layers"): a file under daemon/
may include daemon headers of its own layer and of lower layers only, and names
every daemon header relative to daemon/ ("store/store.h", never "store.h" from
inside store/ nor "../").

The ranks come from the Layers table of docs/architecture.md: each row is
`| rank | `folder/` or `file` ... | ...`. A daemon file no row covers fails
the check (a new folder gets its row first).

An upward include fails the check unless ALLOWED below lists it (it lists
none); a listed one that no longer occurs fails it too, so the list can only
shrink.

Usage: check_layers.py [SOURCE_ROOT]   (default: the tree this script is in)
"""
import os
import re
import sys

# Upward includes allowed, "file -> header", both relative to daemon/. None
# are: the last went with issue 15's redesign. Keep it empty; move a
# declaration down (as base/clock.h, base/error.h, store/caller.h and
# methods/request.h's deferral did) instead of listing one here.
ALLOWED = """
"""

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def parse_layers(doc):
    """[(rank, [name, ...])] from the Layers table of docs/architecture.md."""
    m = re.search(r"^## Layers\n(.*?)(?=^## )", doc, re.M | re.S)
    if not m:
        raise SystemExit("docs/architecture.md has no '## Layers' section")
    rows = []
    for line in m.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) >= 2 and cells[0].isdigit():
            names = re.findall(r"`([^`]+)`", cells[1])
            if not names:
                raise SystemExit("Layers row %s names no file or folder" % cells[0])
            rows.append((int(cells[0]), names))
    if not rows:
        raise SystemExit("the Layers section of docs/architecture.md has no table")
    return rows


def rank_of(path, rows):
    """The rank of a daemon-relative path: an exact file row, else its folder's."""
    for rank, names in rows:
        if path in names:
            return rank
    top = path.split("/")[0] + "/" if "/" in path else None
    for rank, names in rows:
        if top in names:
            return rank
    return None


def check(files, rows, allowed):
    """files: {daemon-relative path: source}. Returns (errors, upward includes found)."""
    errors, found = [], set()
    for path in sorted(files):
        mine = rank_of(path, rows)
        if mine is None:
            errors.append("%s: no row of the Layers table covers it" % path)
            continue
        for inc in INCLUDE.findall(files[path]):
            near = os.path.normpath(os.path.join(os.path.dirname(path), inc))
            if inc.startswith("../") or (inc not in files and near in files):
                errors.append('%s: include "%s" relative to daemon/ ("%s")' % (path, inc, near))
                continue
            if inc not in files:
                continue        # proto/, shaders/, system headers
            theirs = rank_of(inc, rows)
            if theirs is None or theirs <= mine:
                continue
            edge = "%s -> %s" % (path, inc)
            found.add(edge)
            if edge not in allowed:
                errors.append("%s: includes %s from a higher layer (rank %d > %d)"
                              % (path, inc, theirs, mine))
    for edge in sorted(allowed - found):
        errors.append("%s: no longer occurs; delete it from ALLOWED in %s"
                      % (edge, os.path.basename(__file__)))
    return errors, found


def self_test():
    """The check itself can fail: a synthetic tree with each kind of fault."""
    rows = [(0, ["base/"]), (1, ["serve/"]), (2, ["main.c"])]
    files = {"base/a.h": '#include "serve/s.h"\n', "base/b.c": '#include "a.h"\n',
             "serve/s.h": '#include "base/a.h"\n#include "../x.h"\n',
             "main.c": '#include "serve/s.h"\n#include "stdio.h"\n', "new/n.c": ""}
    errors, found = check(files, rows, {"base/a.h -> serve/s.h", "serve/s.h -> main.c"})
    want = ['base/b.c: include "a.h" relative', 'serve/s.h: include "../x.h"',
            "new/n.c: no row", "serve/s.h -> main.c: no longer occurs"]
    assert len(errors) == len(want), errors
    for w, e in zip(sorted(want), sorted(errors)):
        assert e.startswith(w), (w, e)
    assert found == {"base/a.h -> serve/s.h"}, found
    errors, _ = check(files, rows, set())
    assert any(e.startswith("base/a.h: includes serve/s.h from a higher layer") for e in errors)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    self_test()
    with open(os.path.join(root, "docs", "architecture.md"), encoding="utf-8") as f:
        rows = parse_layers(f.read())
    daemon = os.path.join(root, "daemon")
    files = {}
    for dirpath, _, names in os.walk(daemon):
        for n in names:
            if n.endswith((".c", ".h")):
                p = os.path.join(dirpath, n)
                with open(p, encoding="utf-8") as f:
                    files[os.path.relpath(p, daemon)] = f.read()
    allowed = {l.strip() for l in ALLOWED.splitlines() if l.strip()}
    errors, found = check(files, rows, allowed)
    for e in errors:
        print("check_layers: daemon/" + e)
    print("check_layers: %d files, %d layers, %d allowed upward includes"
          % (len(files), len(rows), len(found & allowed)))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

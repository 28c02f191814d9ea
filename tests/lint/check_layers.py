#!/usr/bin/python3
"""The daemon's layering (docs/architecture.md, "Layers"): a file under daemon/
may include daemon headers of its own layer and of lower layers only, and names
every daemon header relative to daemon/ ("store/store.h", never "store.h" from
inside store/ nor "../"); and, given the build directory, a file may call (or
take the address of) functions and data defined in files of its own layer and
of lower layers only, read from the objects of the build with nm.

The ranks come from the Layers table of docs/architecture.md: each row is
`| rank | `folder/` or `file` ... | ...`. A daemon file no row covers fails
the check (a new folder gets its row first).

An upward include fails the check unless ALLOWED below lists it (it lists
none); a listed one that no longer occurs fails it too, so the list can only
shrink.

An upward call fails the check unless the symbol is one of the interfaces the
doc declares: its table headed `| Declared in | Functions | Implemented in |`,
each row a header, the functions it declares (`ag_*` patterns allowed) and the
file or folder that implements them above it. Such a call passes when the
header's rank is at most the caller's (the caller may include it) and the
symbol is defined where the row says. A row fails the check when its header
is missing, a function is defined nowhere it says, or a function it covers is
not declared in the header: the doc and the check cannot drift.

The objects are those compile_commands.json lists under BUILD_ROOT/daemon/
with a source under daemon/ (the td-<folder> libraries and tensord's main.c),
each mapped back to its source file; nm -P gives what each defines (global
symbols) and what it references (undefined ones).

Usage: check_layers.py [SOURCE_ROOT [BUILD_ROOT]]
  SOURCE_ROOT defaults to the tree this script is in; without BUILD_ROOT only
  the includes are checked (meson's test check_layers passes both).
"""
import fnmatch
import json
import os
import re
import subprocess
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


def parse_interfaces(doc):
    """[(header, [pattern, ...], [file or folder, ...])] from the table of
    docs/architecture.md headed | Declared in | Functions | Implemented in |."""
    lines = doc.splitlines()
    head = re.compile(r"^\|\s*Declared in\s*\|\s*Functions\s*\|\s*Implemented in\s*\|\s*$")
    start = next((i for i, l in enumerate(lines) if head.match(l)), None)
    if start is None:
        raise SystemExit("docs/architecture.md has no '| Declared in | Functions | "
                         "Implemented in |' table of interfaces")
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        parts = [re.findall(r"`([^`]+)`", c) for c in cells]
        if len(parts) != 3 or len(parts[0]) != 1 or not parts[1] or not parts[2]:
            raise SystemExit("interfaces row needs one header, functions and where: " + line)
        rows.append((parts[0][0], parts[1], parts[2]))
    return rows


def under(path, places):
    """Whether a daemon-relative path is one of places (files, or folders/)."""
    return any(path == p or (p.endswith("/") and path.startswith(p)) for p in places)


def declares(text, sym):
    """Whether header text declares function sym."""
    return re.search(r"(?<![A-Za-z0-9_])%s\s*\(" % re.escape(sym), text) is not None


def check_calls(files, rows, interfaces, defs, refs):
    """Upward references between objects. defs: {symbol: {daemon-relative
    source defining it}}; refs: {source: {undefined symbol it uses}}; files as
    for check(). Returns (errors, upward references through interfaces)."""
    errors, through = [], set()
    for header, patterns, places in interfaces:
        if header not in files:
            errors.append("%s: declared interface header (docs/architecture.md) not found" % header)
            continue
        for pat in patterns:
            hits = [sym for sym, srcs in defs.items() if fnmatch.fnmatchcase(sym, pat)
                    and any(under(src, places) for src in srcs) and declares(files[header], sym)]
            if not hits:
                errors.append("%s: interface %s (docs/architecture.md) is declared there and defined "
                              "in %s by no function" % (header, pat, " ".join(places)))
    for src in sorted(refs):
        mine = rank_of(src, rows)
        if mine is None:
            continue            # reported by check()
        for sym in sorted(refs[src]):
            if sym not in defs:
                continue        # libc, Vulkan, proto/, shaders/
            where = min(defs[sym], key=lambda p: (rank_of(p, rows) or 0, p))
            theirs = rank_of(where, rows)
            if theirs is None or theirs <= mine:
                continue
            ok = any(under(where, places) and any(fnmatch.fnmatchcase(sym, p) for p in patterns)
                     and header in files and (rank_of(header, rows) or 0) <= mine
                     and declares(files[header], sym)
                     for header, patterns, places in interfaces)
            if ok:
                through.add("%s -> %s" % (src, sym))
            else:
                errors.append("%s: calls %s, defined in %s, from a higher layer (rank %d > %d)"
                              % (src, sym, where, theirs, mine))
    return errors, through


def parse_nm(text, objects):
    """defs and refs (as check_calls takes them) from `nm -P -A` output over
    objects {object path: daemon-relative source}."""
    defs, refs = {}, {}
    for line in text.splitlines():
        obj, _, rest = line.partition(": ")
        f = rest.split()
        if obj not in objects or len(f) < 2:
            continue
        src = objects[obj]
        if f[1] == "U":
            refs.setdefault(src, set()).add(f[0])
        elif f[1].isupper():            # a global definition: T D B R C W V ...
            defs.setdefault(f[0], set()).add(src)
    return defs, refs


def read_objects(root, build):
    """{object path: daemon-relative source} for the daemon's objects of the
    build, from compile_commands.json."""
    with open(os.path.join(build, "compile_commands.json"), encoding="utf-8") as f:
        commands = json.load(f)
    daemon = os.path.realpath(os.path.join(root, "daemon"))
    objects = {}
    for c in commands:
        src = os.path.realpath(os.path.join(c["directory"], c["file"]))
        obj = os.path.realpath(os.path.join(c["directory"], c["output"]))
        rel = os.path.relpath(src, daemon)
        if rel.startswith("..") or os.path.relpath(obj, os.path.realpath(build)).split(os.sep)[0] != "daemon":
            continue
        objects[obj] = rel
    return objects


def read_symbols(objects):
    """defs and refs of objects, through nm. Exits when one is not built."""
    missing = sorted(o for o in objects if not os.path.exists(o))
    if missing:
        raise SystemExit("check_layers: %d daemon objects not built (first %s); build first"
                         % (len(missing), missing[0]))
    out = subprocess.run(["nm", "-P", "-A"] + sorted(objects), check=True,
                         stdout=subprocess.PIPE, universal_newlines=True).stdout
    return parse_nm(out, objects)


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


def run(root, build):
    """Check the tree at root (and, when build is not None, the objects of
    that build directory). Returns (errors, summary line)."""
    with open(os.path.join(root, "docs", "architecture.md"), encoding="utf-8") as f:
        doc = f.read()
    rows = parse_layers(doc)
    interfaces = parse_interfaces(doc)
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
    calls = "calls not checked (no build directory given)"
    if build:
        objects = read_objects(root, build)
        defs, refs = read_symbols(objects)
        call_errors, through = check_calls(files, rows, interfaces, defs, refs)
        errors += call_errors
        calls = "%d objects, %d upward calls through %d declared interfaces" % (
            len(objects), len(through), len(interfaces))
    return errors, "%d files, %d layers, %d allowed upward includes; %s" % (
        len(files), len(rows), len(found & allowed), calls)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    build = sys.argv[2] if len(sys.argv) > 2 else None
    self_test()
    errors, summary = run(root, build)
    for e in errors:
        print("check_layers: daemon/" + e)
    print("check_layers: " + summary)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""check_layers.py's call check can fail (docs/architecture.md, "Layers"):
a synthetic listing of objects with one upward call fails naming it, each way
of misusing or outdating the interfaces table fails, two objects compiled here
go through nm the way the build's do, and the real tree passes.

Usage: test_check_layers.py SOURCE_ROOT BUILD_ROOT
"""
import os
import shutil
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True     # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_layers as cl  # noqa: E402

ROWS = [(0, ["base/", "low.h"]), (1, ["serve/"]), (2, ["main.c"])]
FILES = {"base/a.c": "", "base/b.c": "", "low.h": "void hook_run(void);\nvoid hook_stop(void);\n",
         "serve/s.c": "", "serve/t.c": "", "main.c": ""}
DOC = """## Layers

| Declared in | Functions | Implemented in |
|---|---|---|
| `low.h` | `hook_*` | `serve/s.c` |

## Next
"""


def nm_listing(objects):
    """nm -P -A text for {object: [(symbol, type)]}."""
    return "".join("%s: %s %s 0 0\n" % (o, sym, t) for o, syms in objects.items() for sym, t in syms)


OBJECTS = {"b/base_a.o": "base/a.c", "b/base_b.o": "base/b.c", "b/serve_s.o": "serve/s.c",
           "b/serve_t.o": "serve/t.c", "b/main.o": "main.c"}


def listing(extra_base_a=()):
    """The synthetic build: base/a.c calls down and through the interface,
    serve/ calls base/, main.c calls everything; extra undefined symbols
    of base/a.c."""
    return nm_listing({
        "b/base_a.o": [("base_a", "T"), ("memcpy", "U"), ("base_b", "U"), ("hook_run", "U")]
        + [(s, "U") for s in extra_base_a],
        "b/base_b.o": [("base_b", "T"), ("base_table", "R"), ("local_helper", "t")],
        "b/serve_s.o": [("hook_run", "T"), ("hook_stop", "T"), ("serve_s", "T"), ("base_a", "U")],
        "b/serve_t.o": [("serve_t", "T"), ("serve_state", "B"), ("hook_stop", "U")],
        "b/main.o": [("main", "T"), ("serve_t", "U"), ("hook_stop", "U"), ("base_table", "U")],
    })


def calls(text, interfaces=None, files=None):
    defs, refs = cl.parse_nm(text, OBJECTS)
    return cl.check_calls(files or FILES, ROWS, cl.parse_interfaces(DOC) if interfaces is None
                          else interfaces, defs, refs)


def test_synthetic():
    # Downward calls, calls within a layer and the declared interface pass.
    errors, through = calls(listing())
    assert errors == [], errors
    assert through == {"base/a.c -> hook_run"}, through
    # One upward call (a function, then a variable) fails, naming both ends.
    errors, _ = calls(listing(["serve_t"]))
    assert errors == ["base/a.c: calls serve_t, defined in serve/t.c, from a higher layer "
                      "(rank 1 > 0)"], errors
    errors, _ = calls(listing(["serve_state"]))
    assert len(errors) == 1 and errors[0].startswith("base/a.c: calls serve_state"), errors
    # The interface is matched on where it is implemented: a row saying
    # serve/t.c does not cover hook_run of serve/s.c (and names nothing).
    errors, _ = calls(listing(), [("low.h", ["hook_*"], ["serve/t.c"])])
    assert sorted(errors) == ["base/a.c: calls hook_run, defined in serve/s.c, from a higher "
                              "layer (rank 1 > 0)",
                              "low.h: interface hook_* (docs/architecture.md) is declared there "
                              "and defined in serve/t.c by no function"], errors
    # A caller below the interface's header cannot use it.
    rows_low = [(0, ["base/"]), (1, ["low.h"]), (2, ["serve/"]), (3, ["main.c"])]
    defs, refs = cl.parse_nm(listing(), OBJECTS)
    errors, _ = cl.check_calls(FILES, rows_low, cl.parse_interfaces(DOC), defs, refs)
    assert any(e.startswith("base/a.c: calls hook_run") for e in errors), errors
    # A function the header no longer declares, a row naming a function
    # defined nowhere, a header gone: each fails.
    files = dict(FILES, **{"low.h": "void hook_stop(void);\n"})
    errors, _ = calls(listing(), files=files)
    assert errors == ["base/a.c: calls hook_run, defined in serve/s.c, from a higher layer "
                      "(rank 1 > 0)"], errors
    errors, _ = calls(listing(), [("low.h", ["hook_*", "hook_gone"], ["serve/s.c"])])
    assert len(errors) == 1 and errors[0].startswith("low.h: interface hook_gone"), errors
    errors, _ = calls(listing(), [("gone.h", ["hook_*"], ["serve/s.c"])])
    assert any(e.startswith("gone.h: declared interface header") for e in errors), errors


def test_parse_interfaces():
    assert cl.parse_interfaces(DOC) == [("low.h", ["hook_*"], ["serve/s.c"])]
    try:
        cl.parse_interfaces("## Layers\n")
    except SystemExit:
        pass
    else:
        raise AssertionError("a doc without the interfaces table passed")


def test_objects():
    """Two objects compiled here, read through nm as the build's are."""
    cc = shutil.which("cc")
    if not cc:
        print("test_check_layers: no cc, objects not compiled")
        return
    with tempfile.TemporaryDirectory() as tmp:
        srcs = {"low.c": "int high(void);\nint low(void) { return high(); }\n",
                "high.c": "int low(void);\nint high(void) { return 1; }\n"
                          "int top(void) { return low(); }\n"}
        objects = {}
        for name, text in srcs.items():
            with open(os.path.join(tmp, name), "w", encoding="utf-8") as f:
                f.write(text)
            obj = os.path.join(tmp, name + ".o")
            subprocess.run([cc, "-c", "-o", obj, os.path.join(tmp, name)], check=True)
            objects[obj] = "base/a.c" if name == "low.c" else "serve/s.c"
        defs, refs = cl.read_symbols(objects)
        errors, _ = cl.check_calls(FILES, ROWS, [], defs, refs)
        assert errors == ["base/a.c: calls high, defined in serve/s.c, from a higher layer "
                          "(rank 1 > 0)"], errors


def test_tree(root, build):
    errors, summary = cl.run(root, build)
    assert errors == [], errors
    print("test_check_layers: the tree: " + summary)


def main():
    root, build = sys.argv[1], sys.argv[2]
    test_synthetic()
    test_parse_interfaces()
    test_objects()
    test_tree(root, build)
    print("test_check_layers: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())

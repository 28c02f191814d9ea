#!/usr/bin/python3
"""bench/plot_perf.py on small fixtures: the table of docs/performance.md (as
bench/compare_torch.py writes it, --out-markdown, with the CUDA-graph column and
ratio goals such as "graph >= 1.00x") and the same rows as its --out-json, each
drawn to a PNG that an independent reader (tests/lib/png_check.py)
accepts. The figures the script says it plotted are compared with the fixture's
own numbers (a ratio read from the wrong column, or a goal turned the wrong way,
fails). A file without the table is refused with exit status 1. Finally the
committed docs/img/performance.png is a valid PNG under 100 KB and
docs/performance.md still parses.

Needs python3-matplotlib (skips, exit 77, without it). Environment:
PLOT_PERF (the script; default bench/plot_perf.py next to this tree)."""
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
from png_check import check_png  # noqa: E402

SCRIPT = os.environ.get("PLOT_PERF", os.path.join(ROOT, "bench", "plot_perf.py"))
SKIP = 77

# name, unit, tensord kernel, tensord e2e, PyTorch, PyTorch e2e, ratio kernel, ratio e2e,
# ratio graph (against PyTorch's CUDA graph), goal: absolute ("\u2264"/"\u2265", value) or a
# ratio ("kernel"/"graph", value: that ratio at least value)
ROWS = [("matmul_f32_64", "TFLOP/s", 1.5, 1.2, 3.0, 2.0, 0.5, 0.6, None, ("kernel", 0.85)),
        ("add_f32_1M", "GB/s", 900.0, 450.0, 300.0, 300.0, 3.0, 1.5, None, None),
        ("train_mlp_8", "samples/s", 100.0, 110.0, 25.0, 30.0, 4.0, 3.64, 0.8, ("graph", 1.0)),
        ("train_mlp_9", "samples/s", 100.0, 110.0, 25.0, 30.0, 4.0, 3.64, 1.25, None),
        ("ping", "us", None, 20.0, None, None, None, None, None, ("\u2264", 50.0)),
        ("op_pipelined", "ops/s", None, 25000.0, None, None, None, None, None, ("\u2265", 100000.0))]


def goal_text(goal, unit):
    if goal is None:
        return None
    if goal[0] in ("kernel", "graph"):
        return "%s \u2265 %.2fx" % goal
    return "%s %g %s" % (goal[0], goal[1], unit)


def cell(v):
    return "-" if v is None else "%g" % v


def markdown():
    out = ["# fixture", "", "Some text.", "",
           "tensord 0.1.0 on Test GPU (Vulkan), size smoke, 3 reps after 1 warm-up; "
           "PyTorch 9.9 on Test GPU.", "",
           "| workload | unit | tensord kernel | tensord e2e | PyTorch | PyTorch e2e | ratio kernel "
           "| ratio e2e | PyTorch graph | ratio graph | goal | met? |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    for name, unit, tk, te, pk, pe, rk, re_, rg, goal in ROWS:
        g = goal_text(goal, unit) or "-"
        met = "-" if goal is None else "yes"
        rks = "-" if rk is None else "%gx" % rk
        res = "-" if re_ is None else "%gx" % re_
        rgs = "-" if rg is None else "%gx" % rg
        pg = "-" if rg is None else "%g" % (te / rg)
        out.append("| `%s` | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            name, unit, cell(tk), cell(te), cell(pk), cell(pe), rks, res, pg, rgs, g, met))
    out += ["", "Workloads: ...", "",
            "| another | table |", "|---|---|", "| 1 | 2 |", ""]
    return "\n".join(out)


def as_json():
    rows = []
    for name, unit, tk, te, pk, pe, rk, re_, rg, goal in ROWS:
        rows.append({"name": name, "unit": unit, "tensord_kernel": tk, "tensord_e2e": te,
                     "torch_kernel": pk, "torch_e2e": pe, "ratio_kernel": rk, "ratio_e2e": re_,
                     "ratio_graph": rg, "goal": goal_text(goal, unit), "met": None})
    return json.dumps({"tensord": {"version": "0.1.0", "device": "Test GPU"},
                       "torch": {"version": "9.9", "device": "Test GPU"}, "rows": rows})


def expected():
    """What the script must report, computed here from the fixture."""
    lines = set()
    for name, unit, tk, te, pk, pe, rk, re_, rg, goal in ROWS:
        if rk is not None:
            lines.add((name, "kernel", rk))
            lines.add((name, "e2e", re_))
        if rg is not None:
            lines.add((name, "graph", rg))
        if goal is None:
            continue
        # >= 1 when met: goal / value for an upper bound, value / goal for a lower one, the
        # named ratio / its goal for a ratio goal
        if goal[0] in ("kernel", "graph"):
            lines.add((name, "goal", (rk if goal[0] == "kernel" else rg) / goal[1]))
        else:
            lines.add((name, "goal", goal[1] / te if goal[0] == "\u2264" else te / goal[1]))
    return lines


def reported(out):
    got = set()
    for line in out.splitlines():
        m = re.match(r"^(\S+): kernel ([0-9.]+), e2e ([0-9.]+)(, graph ([0-9.]+))?$", line)
        if m:
            got.add((m.group(1), "kernel", float(m.group(2))))
            got.add((m.group(1), "e2e", float(m.group(3))))
            if m.group(5):
                got.add((m.group(1), "graph", float(m.group(5))))
        m = re.match(r"^(\S+): ([0-9.]+) of goal ", line)
        if m:
            got.add((m.group(1), "goal", float(m.group(2))))
    return got


def same(got, want):
    if len(got) != len(want):
        return False
    for name, kind, v in want:
        if not any(g[0] == name and g[1] == kind and abs(g[2] - v) <= 1e-3 * v for g in got):
            return False
    return True


def run(args):
    return subprocess.run(["/usr/bin/python3", SCRIPT] + args, capture_output=True, text=True,
                          timeout=300)


def check_png_file(path, what):
    with open(path, "rb") as f:
        data = f.read()
    w, h = check_png(data)
    if w < 400 or h < 200:
        raise ValueError("%s is only %dx%d" % (what, w, h))
    print("ok: %s: a %dx%d PNG of %d bytes" % (what, w, h, len(data)))
    return data


def main():
    if subprocess.run(["/usr/bin/python3", "-c", "import matplotlib"], capture_output=True).returncode:
        print("SKIP: python3-matplotlib is not installed")
        return SKIP
    with tempfile.TemporaryDirectory(prefix="plot-perf-") as tmp:
        for kind, text in (("markdown", markdown()), ("json", as_json())):
            src = os.path.join(tmp, "perf." + ("md" if kind == "markdown" else "json"))
            png = os.path.join(tmp, kind + ".png")
            with open(src, "w", encoding="utf-8") as f:
                f.write(text)
            r = run([src, "-o", png])
            sys.stdout.write(r.stdout + r.stderr)
            if r.returncode != 0 or not os.path.exists(png):
                print("FAIL: %s fixture: exit %d, no PNG" % (kind, r.returncode))
                return 1
            if not same(reported(r.stdout), expected()):
                print("FAIL: %s fixture: plotted %s, want %s" % (kind, sorted(reported(r.stdout)),
                                                                 sorted(expected())))
                return 1
            try:
                check_png_file(png, "the %s fixture's chart" % kind)
            except ValueError as e:
                print("FAIL: %s" % e)
                return 1

        bad = os.path.join(tmp, "bad.md")
        with open(bad, "w") as f:
            f.write("# no table here\n\n| a | b |\n|---|---|\n| 1 | 2 |\n")
        r = run([bad, "-o", os.path.join(tmp, "bad.png")])
        if r.returncode != 1 or "no table" not in r.stderr or os.path.exists(os.path.join(tmp, "bad.png")):
            print("FAIL: a file without the table: exit %d, %r" % (r.returncode, r.stderr))
            return 1
        print("ok: a file without the table is refused: %s" % r.stderr.strip())

        r = run([os.path.join(ROOT, "docs", "performance.md"), "-o", os.path.join(tmp, "perf.png")])
        if r.returncode != 0:
            print("FAIL: docs/performance.md does not parse: %s" % r.stderr)
            return 1
    try:
        data = check_png_file(os.path.join(ROOT, "docs", "img", "performance.png"), "docs/img/performance.png")
    except (OSError, ValueError) as e:
        print("FAIL: %s" % e)
        return 1
    if len(data) >= 100 * 1024:
        print("FAIL: docs/img/performance.png is %d bytes (keep pictures under 100 KB)" % len(data))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

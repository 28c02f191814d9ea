#!/usr/bin/python3
"""Draw the performance table (docs/performance.md) as a PNG chart.

Reads either the markdown that bench/compare_torch.py writes (--out-markdown;
by default the first results table of docs/performance.md) or its JSON
(--out-json), and draws two panels:

- tensord's throughput divided by PyTorch's for each workload that has a
  PyTorch counterpart, from kernel times and from end-to-end times, and for
  training steps also against PyTorch with the step in a CUDA graph (log
  scale; right of 1x tensord is faster);
- the rows with a goal: an absolute one (ping, op latency, pipelined ops,
  put/get of 1 GiB: tensord's end-to-end figure against it) or a ratio one
  (`kernel >= 0.85x`, `graph >= 1.00x`: that ratio against it); right of 1x
  the goal is met.

  bench/plot_perf.py [docs/performance.md | perf.json] [-o docs/img/performance.png]

Needs matplotlib (Debian's python3-matplotlib; drawn with the Agg backend, no
display). Prints one line per plotted row. Exit status 1 when the input has no
such table."""
import argparse
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLUMNS = ["workload", "unit", "tensord kernel", "tensord e2e", "PyTorch", "PyTorch e2e",
           "ratio kernel", "ratio e2e", "PyTorch graph", "ratio graph", "goal", "met?"]
# Tables written before the CUDA-graph columns were added.
COLUMNS_OLD = [c for c in COLUMNS if c not in ("PyTorch graph", "ratio graph")]


def num(cell):
    """'34.16' -> 34.16, '0.66x' -> 0.66, '-' -> None."""
    cell = (cell or "").strip().rstrip("x")
    try:
        return float(cell)
    except ValueError:
        return None


def parse_markdown(text):
    """(title, rows) of the first table with COLUMNS; rows as compare_torch's JSON
    has them (name, unit, tensord_e2e, ratio_kernel, ratio_e2e, ratio_graph, goal)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells not in (COLUMNS, COLUMNS_OLD):
            continue
        cols = cells
        at = {name: k for k, name in enumerate(cols)}
        title = ""
        for prev in reversed(lines[:i]):
            if prev.strip():
                title = prev.strip()
                break
        rows = []
        for row in lines[i + 2:]:
            if not row.startswith("|"):
                break
            c = [x.strip() for x in row.strip().strip("|").split("|")]
            if len(c) != len(cols):
                raise ValueError("a row of %d cells, want %d: %s" % (len(c), len(cols), row))
            goal = c[at["goal"]]
            rows.append({"name": c[0].strip("`"), "unit": c[1], "tensord_kernel": num(c[2]),
                         "tensord_e2e": num(c[3]), "ratio_kernel": num(c[at["ratio kernel"]]),
                         "ratio_e2e": num(c[at["ratio e2e"]]),
                         "ratio_graph": num(c[at["ratio graph"]]) if "ratio graph" in at else None,
                         "goal": None if goal == "-" else goal})
        return title, rows
    raise ValueError("no table with the columns %s" % " | ".join(COLUMNS))


def parse_json(text):
    j = json.loads(text)
    td, torch = j.get("tensord") or {}, j.get("torch") or {}
    title = "tensord %s on %s (Vulkan)" % (td.get("version", "?"), td.get("device", "?"))
    if torch:
        title += "; PyTorch %s on %s" % (torch.get("version", "?"), torch.get("device", "?"))
    rows = [{"name": r["name"], "unit": r.get("unit") or "", "tensord_kernel": num(str(r.get("tensord_kernel"))),
             "tensord_e2e": num(str(r.get("tensord_e2e"))), "ratio_kernel": r.get("ratio_kernel"),
             "ratio_e2e": r.get("ratio_e2e"), "ratio_graph": r.get("ratio_graph"),
             "goal": r.get("goal")} for r in j["rows"]]
    return title, rows


TICKS = [0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100]


def fmt_ratio(v):
    return "%.2fx" % v if v >= 0.1 else "%.2gx" % v


def fmt_value(v):
    return "{:,.0f}".format(v) if v >= 1000 else "%.4g" % v


def goal_ratio(row):
    """(ratio, text): tensord's e2e figure against its absolute goal, or the
    named ratio against a ratio goal ("kernel >= 0.85x"); >= 1 when met."""
    m = re.match(r"\s*(kernel|e2e|graph)\s*(\u2265|>=)\s*([0-9.eE+]+)x\s*$", row["goal"] or "")
    if m:
        v = row["ratio_" + m.group(1)]
        if not v:
            return None, None
        return v / float(m.group(3)), "%s: %s %s (goal %s)" % (row["name"], fmt_ratio(v), m.group(1),
                                                            row["goal"])
    m = re.match(r"\s*(\u2264|\u2265|<=|>=)\s*([0-9.eE+]+)\s*(.*)$", row["goal"] or "")
    v = row["tensord_e2e"]
    if not m or not v:
        return None, None
    thr = float(m.group(2))
    ratio = thr / v if m.group(1) in ("\u2264", "<=") else v / thr
    return ratio, "%s: %s %s (goal %s)" % (row["name"], fmt_value(v), row["unit"], row["goal"])


def short_title(title):
    """'tensord 0.1.0 on NVIDIA H100 80GB HBM3 (Vulkan), size full, ...' -> its devices."""
    td = re.search(r"tensord \S+ on (.+?) \(Vulkan\)", title)
    pt = re.search(r"PyTorch (\S+) on (.+?)\.?$", title)
    out = "tensord (Vulkan) on %s" % (td.group(1) if td else "?")
    if pt:
        out += " vs PyTorch %s on %s" % (pt.group(1), pt.group(2))
    return out


def plot(title, rows, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker
    import PIL.Image                    # python3-pil, a dependency of python3-matplotlib

    cmp_rows = [r for r in rows if r["ratio_kernel"] is not None or r["ratio_e2e"] is not None]
    goal_rows = [(r,) + goal_ratio(r) for r in rows if r["goal"]]
    goal_rows = [g for g in goal_rows if g[1] is not None]
    if not cmp_rows and not goal_rows:
        raise ValueError("the table has no ratio and no goal to plot")
    n1, n2 = max(len(cmp_rows), 1), max(len(goal_rows), 1)
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 1.6 + 0.3 * (n1 + n2)),
                                   gridspec_kw={"height_ratios": [n1 + 1.5, n2 + 1.5]})
    series = [("ratio_kernel", "kernel (GPU time)", "tab:blue"),
              ("ratio_e2e", "end to end (through the socket)", "tab:orange")]
    if any(r.get("ratio_graph") for r in cmp_rows):
        series.append(("ratio_graph", "end to end against PyTorch's CUDA graph (training)", "tab:green"))
    h = 0.76 / len(series)
    ys = list(range(len(cmp_rows)))[::-1]
    for k, (key, label, colour) in enumerate(series):
        off = (len(series) - 1) / 2 * h - k * h
        at = [(y, r[key]) for y, r in zip(ys, cmp_rows) if r[key]]   # rows with this ratio
        bars = ax1.barh([y + off for y, _ in at], [v for _, v in at], height=h, color=colour,
                        label=label, left=0)
        for b, (_, v) in zip(bars, at):
            ax1.annotate(fmt_ratio(v), (v, b.get_y() + h / 2), xytext=(3, 0),
                         textcoords="offset points", va="center", fontsize=7)
    ax1.set_yticks(ys)
    ax1.set_yticklabels(["%s (%s)" % (r["name"], r["unit"]) for r in cmp_rows], fontsize=8)
    ax1.set_ylim(-0.8, len(cmp_rows) - 0.5 + 0.8 * len(series))     # room for the legend
    ax1.set_xscale("log")
    ax1.axvline(1.0, color="black", lw=1)
    ax1.set_xlabel("tensord throughput \u00f7 PyTorch throughput (log scale; > 1x: tensord faster)")
    ax1.set_title("Against PyTorch, same GPU, same command", fontsize=10)
    ax1.legend(fontsize=8, loc="upper right")
    ax1.grid(axis="x", alpha=0.3)

    ys = list(range(len(goal_rows)))[::-1]
    vals = [g[1] for g in goal_rows]
    bars = ax2.barh(ys, vals, height=0.6,
                    color=["tab:green" if v >= 1 else "tab:red" for v in vals])
    for b, v in zip(bars, vals):
        ax2.annotate(fmt_ratio(v), (v, b.get_y() + 0.3), xytext=(3, 0), textcoords="offset points",
                     va="center", fontsize=7)
    ax2.set_yticks(ys)
    ax2.set_yticklabels([g[2] for g in goal_rows], fontsize=8)
    ax2.set_xscale("log")
    ax2.axvline(1.0, color="black", lw=1)
    ax2.set_xlabel("how far tensord's figure (or ratio) is from its goal "
                   "(log scale; \u2265 1x: met, green)")
    ax2.set_title("Against the issues' goals (absolute figures, and ratios to PyTorch)", fontsize=10)
    ax2.grid(axis="x", alpha=0.3)
    for ax in (ax1, ax2):
        lo, hi = ax.get_xlim()
        lo, hi = min(lo, 0.5), max(hi, 2.0) * 1.5       # room for the labels
        ax.set_xlim(lo, hi)
        ax.set_xticks([t for t in TICKS if lo <= t <= hi])
        ax.set_xticks([], minor=True)
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda t, _: "%gx" % t))
    fig.suptitle(short_title(title), fontsize=10)
    fig.tight_layout()
    # 256 colours are plenty for flat bars and text: a palette PNG is a third of the size
    fig.canvas.draw()
    img = PIL.Image.frombuffer("RGBA", fig.canvas.get_width_height(), fig.canvas.buffer_rgba())
    img.convert("RGB").quantize(256).save(out, optimize=True)
    plt.close(fig)
    for r in cmp_rows:
        print("%s: kernel %s, e2e %s%s" % (r["name"], r["ratio_kernel"], r["ratio_e2e"],
                                          ", graph %s" % r["ratio_graph"] if r.get("ratio_graph") else ""))
    for r, v, _ in goal_rows:
        print("%s: %.4g of goal %s" % (r["name"], v, r["goal"]))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("input", nargs="?", default=os.path.join(ROOT, "docs", "performance.md"),
                    help="compare_torch.py's markdown or JSON (default docs/performance.md)")
    ap.add_argument("-o", "--out", default=os.path.join(ROOT, "docs", "img", "performance.png"),
                    help="the PNG to write (default docs/img/performance.png)")
    args = ap.parse_args(argv)
    with open(args.input, encoding="utf-8") as f:
        text = f.read()
    try:
        title, rows = parse_json(text) if text.lstrip().startswith("{") else parse_markdown(text)
        plot(title, rows, args.out)
    except (ValueError, KeyError) as e:
        print("plot_perf: %s: %s" % (args.input, e), file=sys.stderr)
        return 1
    print("wrote %s" % args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

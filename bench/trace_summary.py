#!/usr/bin/env python3
"""Sum a daemon log's dispatch trace (TENSORD_TRACE_DISPATCHES=1, tensord(8)):
device time per shader and per (shader, workgroups), largest first, divided by
--per (e.g. the steps a train.run took) to give time per step. Not a test.

    TENSORD_TRACE_DISPATCHES=1 tensord ... 2> log; python3 bench/trace_summary.py log --per 16"""
import argparse
import collections
import re

LINE = re.compile(r"trace [^:]*: \d+ (\S+) ([0-9.]+) us \((\d+)\) ?(.*)$")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log")
    ap.add_argument("--per", type=float, default=1.0, help="divide totals by this (steps)")
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    by_shader, by_shape, count = collections.Counter(), collections.Counter(), collections.Counter()
    by_label, nlabel = collections.Counter(), collections.Counter()
    with open(a.log, errors="replace") as f:
        for line in f:
            m = LINE.search(line)
            if not m:
                continue
            name, us, groups = m.group(1), float(m.group(2)), int(m.group(3))
            label = "%s: %s" % (name, m.group(4).strip() or "-")
            by_label[label] += us
            nlabel[label] += 1
            by_shader[name] += us
            by_shape[(name, groups)] += us
            count[(name, groups)] += 1
    total = sum(by_shader.values())
    print("total %.1f us per %g" % (total / a.per, a.per))
    for name, us in by_shader.most_common(a.top):
        print("  %-28s %10.1f us  %5.1f%%" % (name, us / a.per, 100 * us / max(total, 1e-9)))
    print("by workgroups (copies: bytes):")
    for (name, groups), us in by_shape.most_common(a.top):
        n = count[(name, groups)]
        print("  %-28s %10d  x%-6g %10.1f us  (%.1f each)" % (name, groups, n / a.per, us / a.per, us / n))
    print("by op and shapes:")
    for label, us in by_label.most_common(a.top):
        n = nlabel[label]
        print("  %10.1f us  x%-6g (%.1f each)  %s" % (us / a.per, n / a.per, us / n, label))


if __name__ == "__main__":
    main()

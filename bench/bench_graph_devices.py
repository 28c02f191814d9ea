#!/usr/bin/env python3
"""One graph.run whose independent parts sit on different devices, against
the same graph with every part on one device (docs/devices.md,
"Concurrency"): the daemon records one command buffer per device and submits
them all before waiting, so on two GPUs the parts should overlap.

Each part is a chain of `--chain` f32 matmuls of `--n`² (a·b, then ·b again,
...). Reports the end-to-end time per graph.run (wall clock around the call,
median of `--reps`) for: one part on device 0; two parts both on device 0;
two parts, one per device; and the ratio of the last two.

    . .gpu-runtime/enter.sh
    TENSORD_BIN=build-release/daemon/tensord python3 bench/bench_graph_devices.py
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "lib"))
from daemon import Daemon  # noqa: E402


def put(c, name, arr, device):
    c.call("tensor.put", {"name": name, "dtype": "f32", "shape": list(arr.shape),
                          "data": np.ascontiguousarray(arr).tobytes(), "device": device})


def part(tag, a, b, chain):
    nodes, prev = [], a
    for i in range(chain):
        nodes.append({"id": "%s%d" % (tag, i), "op": "matmul", "inputs": [prev, b]})
        prev = "%s%d" % (tag, i)
    nodes[-1]["out"] = "out_" + tag
    return nodes


def timed(c, nodes, reps):
    c.call("graph.run", {"nodes": nodes})  # warm-up: pipelines, memory blocks
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        c.call("graph.run", {"nodes": nodes})
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tensord", default=os.environ.get("TENSORD_BIN"))
    ap.add_argument("--device", default="auto")
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--chain", type=int, default=8)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    if not a.tensord:
        sys.exit("set TENSORD_BIN or --tensord")
    os.environ["TENSORD_BIN"] = a.tensord
    rng = np.random.default_rng(0)
    m = (rng.standard_normal((a.n, a.n)) / np.sqrt(a.n)).astype(np.float32)
    with Daemon(["--device", a.device], timeout=120) as d:
        with d.client() as c:
            ids = [x["id"] for x in c.call("info")["devices"] if x["active"]]
            if len(ids) < 2:
                sys.exit("tensord opened %d device; this needs two (--device)" % len(ids))
            for name, dev in (("a0", 0), ("b0", 0), ("c0", 0), ("e0", 0), ("a1", 1), ("b1", 1)):
                put(c, name, m, dev)
            one = timed(c, part("p", "a0", "b0", a.chain), a.reps)
            same = timed(c, part("p", "a0", "b0", a.chain) + part("q", "c0", "e0", a.chain), a.reps)
            split = timed(c, part("p", "a0", "b0", a.chain) + part("q", "a1", "b1", a.chain), a.reps)
            flop = 2.0 * a.n ** 3 * a.chain
            print("graph.run of %d chained %d^2 f32 matmuls per part (median of %d):" % (a.chain, a.n, a.reps))
            print("  one part, device 0:          %8.2f ms  (%.1f TFLOP/s)" % (one * 1e3, flop / one / 1e12))
            print("  two parts, both on device 0: %8.2f ms  (%.1f TFLOP/s)" % (same * 1e3, 2 * flop / same / 1e12))
            print("  two parts, one per device:   %8.2f ms  (%.1f TFLOP/s)" % (split * 1e3, 2 * flop / split / 1e12))
            print("  speed-up of the split graph over one device: %.2fx" % (same / split))


if __name__ == "__main__":
    main()

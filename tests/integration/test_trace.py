"""TENSORD_TRACE_DISPATCHES (tensord(8)): with it set, every dispatch of a
submission is logged with its device time once the submission completes; the
traced dispatches of a graph.run are exactly the ones its profile counts, and
bench/trace_summary.py sums them. Without it, no trace line. A training
step computes no gradient for its data (the trace counts its products).

Run with /usr/bin/python3; TENSORD_BIN names the daemon."""
import os
import re
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
from daemon import Daemon  # noqa: E402

TRACE = re.compile(r"trace [^:]*: (\d+) (\S+) ([0-9.]+) us \((\d+)\)")


def traced(log):
    with open(log, errors="replace") as f:
        return [m.groups() for m in map(TRACE.search, f) if m]


def run(c):
    a = np.arange(64 * 48, dtype=np.float32).reshape(64, 48) / 100
    b = np.ones((48, 32), np.float32)
    c.call("tensor.put", {"name": "a", "dtype": "f32", "shape": [64, 48], "data": a.tobytes()})
    c.call("tensor.put", {"name": "b", "dtype": "f32", "shape": [48, 32], "data": b.tobytes()})
    nodes = [{"id": "m", "op": "matmul", "inputs": ["a", "b"]},
             {"id": "r", "op": "relu", "inputs": ["m"]},
             {"id": "s", "op": "sum", "inputs": ["r"], "attrs": {"axis": 0}}]
    return c.call("graph.run", {"nodes": nodes, "outputs": ["s"], "profile": True})


def main():
    os.environ.pop("TENSORD_TRACE_DISPATCHES", None)
    with Daemon() as d:
        run(d.client())
        assert traced(d.log) == [], "trace lines without TENSORD_TRACE_DISPATCHES"
    print("ok: no trace unless asked")
    os.environ["TENSORD_TRACE_DISPATCHES"] = "1"
    try:
        with Daemon() as d:
            r = run(d.client())
            d.client().call("ping", {})
            lines = traced(d.log)
    finally:
        del os.environ["TENSORD_TRACE_DISPATCHES"]
    shaders = [s for _, s, _, _ in lines]
    assert any(s.startswith("matmul") for s in shaders), shaders
    assert any(s.startswith("reduce") for s in shaders), shaders
    # The graph.run is the last submission: its dispatches are numbered 0..n-1.
    last = [int(k) for k, _, _, _ in lines]
    n = len(last) - max(i for i, k in enumerate(last) if k == 0)
    assert n == r["dispatches"], (n, r["dispatches"], lines)
    assert all(float(us) >= 0 for _, _, us, _ in lines)
    print("ok: %d dispatches traced, as graph.run's profile counts" % n)
    log = os.path.join(os.environ.get("TMPDIR", "/tmp"), "trace-%d.log" % os.getpid())
    with open(log, "w") as f:
        f.writelines("tensord: trace dev: %s %s %s us (%s)\n" % l for l in lines)
    out = subprocess.run([sys.executable, os.path.join(HERE, "..", "..", "bench", "trace_summary.py"), log],
                         check=True, capture_output=True, text=True).stdout
    os.unlink(log)
    assert "matmul" in out and "total" in out, out
    print("ok: trace_summary.py sums it")
    train_products()


def train_products():
    """One train.run step of a linear layer: its forward product and the
    weight's gradient, and no product for the data's gradient."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((96, 40)).astype(np.float32)
    w = (rng.standard_normal((40, 8)) * 0.1).astype(np.float32)
    y = rng.integers(0, 8, 96).astype(np.int32)
    os.environ["TENSORD_TRACE_DISPATCHES"] = "1"
    try:
        with Daemon() as d:
            c = d.client()
            for n, a, dt in (("x", x, "f32"), ("w", w, "f32"), ("y", y, "i32")):
                c.call("tensor.put", {"name": n, "dtype": dt, "shape": list(a.shape), "data": a.tobytes()})
            before = len(traced(d.log))
            nodes = [{"id": "m", "op": "matmul", "inputs": ["xb", "w"]},
                     {"id": "loss", "op": "cross_entropy", "inputs": ["m", "yb"]}]
            e, r = c.call_past_notifications("train.run", {"nodes": nodes, "loss": "loss", "params": ["w"], "data": {"xb": "x", "yb": "y"},
                                     "batch_size": 96, "steps": 1, "optimizer": {"type": "sgd", "lr": 0.1},
                                     "pipeline_depth": 1})
            assert not e and r["steps"] == 1, (e, r)
            c.call("ping", {})
            lines = traced(d.log)[before:]
    finally:
        del os.environ["TENSORD_TRACE_DISPATCHES"]
    # The step is the last submission (train.run checks the graph first).
    step = lines[max(i for i, l in enumerate(lines) if l[0] == "0"):]
    products = [s for _, s, _, _ in step if s.startswith("matmul") and not s.startswith("matmul_reduce")]
    assert len(products) == 2, lines
    print("ok: a step records %d products (forward, weight gradient): none for the data" % len(products))


if __name__ == "__main__":
    main()

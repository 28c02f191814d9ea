#!/usr/bin/python3
"""gemm_sweep: kernel times (op.run with profile: true, median of 15 after 3
warm-ups) of the training-shaped GEMMs of issue 16 for several split_k
values, each product's largest error against float64, and index_add for an
embedding gradient (50,000 x 64 table, 4096 indices), on a tensord started
from $TENSORD_BIN (tests/daemon.py). Prints JSON.

  SWEEP_NEW=1   the daemon has the transpose/split_k attrs (else only the
                NN products run: for a tensord from before them)
  SWEEP_DIV=n   divide M, K, N by n (lavapipe)
  SWEEP_SHAPES=mlp  the products of the 784-512-512-10 MLP's step at
                SWEEP_ROWS=n rows (default 2048: a data-parallel shard of
                batch 4096) with split_k 0, 1, 2, 3, 4
  SWEEP_SHAPES=gpt  the products of a GPT-small step (d768, MLP 3072, batch 8
                x seq 512 = 4096 rows, SWEEP_ROWS=n for n rows: forward NN, input gradients NT,
                weight gradients TN) with split_k 0 (the heuristic), 1, 2,
                3, 4, 6, 8 instead of issue 16's
  TENSORD_NO_SKINNY=1 (passed to the daemon) the products of at most 16
                columns or terms on the square tiles, to compare

Needs numpy and msgpack (on a GPU host without python3-msgpack, a copy of
its pure-Python package on PYTHONPATH with MSGPACK_PUREPYTHON=1 does)."""
import json, os, statistics, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "ops"))
import numpy as np
import harness

new = os.environ.get("SWEEP_NEW") == "1"
rng = np.random.default_rng(5)
out = {}
with harness.Daemon() as d:
    c = harness.Client(d.sock)

    def timed(op, ins, attrs=None, reps=15):
        ts = []
        for r in range(reps + 3):
            p = {"op": op, "inputs": ins, "out": "o", "profile": True}
            if attrs:
                p["attrs"] = attrs
            err, res = c.call("op.run", p)
            if err is not None:
                return str(err["message"])[:120]
            if r >= 3:
                ts.append(res["gpu_ns"] / 1e3)
        return statistics.median(ts)

    shapes = [("tn_784x512_k16384", 784, 16384, 512, True, False),
              ("tn_512x512_k16384", 512, 16384, 512, True, False),
              ("nn_784x512_k16384", 784, 16384, 512, False, False),
              ("nt_16384x784_k512", 16384, 512, 784, False, True),
              ("nn_16384x512_k784", 16384, 784, 512, False, False),
              ("nn_16384x10_k512", 16384, 512, 10, False, False),
              ("tn_512x10_k16384", 512, 16384, 10, True, False),   # dW3 (matmul_smalln)
              ("tn_512x10_k4096", 512, 4096, 10, True, False),
              ("nt_16384x512_k10", 16384, 10, 512, False, True)]   # dh2 (matmul_smallk)
    gpt = os.environ.get("SWEEP_SHAPES") == "gpt"
    if gpt:
        r = int(os.environ.get("SWEEP_ROWS", "4096"))
        shapes = [("tn_768x3072_k%d" % r, 768, r, 3072, True, False),
                  ("tn_3072x768_k%d" % r, 3072, r, 768, True, False),
                  ("tn_768x768_k%d" % r, 768, r, 768, True, False),
                  ("nt_%dx768_k3072" % r, r, 3072, 768, False, True),
                  ("nn_%dx768_k3072" % r, r, 3072, 768, False, False),
                  ("nt_%dx768_k768" % r, r, 768, 768, False, True),
                  ("nn_%dx768_k768" % r, r, 768, 768, False, False),
                  ("nt_%dx3072_k768" % r, r, 768, 3072, False, True),
                  ("nn_%dx3072_k768" % r, r, 768, 3072, False, False)]
    mlp = os.environ.get("SWEEP_SHAPES") == "mlp"
    if mlp:
        r = int(os.environ.get("SWEEP_ROWS", "2048"))
        shapes = [("nn_%dx512_k784" % r, r, 784, 512, False, False),
                  ("nn_%dx512_k512" % r, r, 512, 512, False, False),
                  ("nt_%dx512_k512" % r, r, 512, 512, False, True),
                  ("tn_784x512_k%d" % r, 784, r, 512, True, False),
                  ("tn_512x512_k%d" % r, 512, r, 512, True, False),
                  ("nn_%dx10_k512" % r, r, 512, 10, False, False)]
    div = int(os.environ.get("SWEEP_DIV", "1"))
    for name, m, k, n, ta, tb in shapes:
        m, k, n = max(1, m // div), max(1, k // div), max(1, n // div)
        a = rng.standard_normal((k, m) if ta else (m, k)).astype(np.float32)
        b = rng.standard_normal((n, k) if tb else (k, n)).astype(np.float32)
        c.put("a", a, "f32"); c.put("b", b, "f32")
        splits = [0, 1, 2, 3, 4] if mlp else [0, 1, 2, 3, 4, 6, 8] if gpt else [0, 1, 4, 8, 12, 16, 24, 32] if (new and m * n < 1e6) else [0]
        for s in splits:
            attrs = {}
            if ta: attrs["transpose_a"] = True
            if tb: attrs["transpose_b"] = True
            if s: attrs["split_k"] = s
            if not new and (ta or tb or s):
                continue
            out["%s split=%d" % (name, s)] = timed("matmul", ["a", "b"], attrs or None)
        if new:
            attrs = {"transpose_a": ta, "transpose_b": tb}
            err, res = c.call("op.run", {"op": "matmul", "inputs": ["a", "b"], "attrs": attrs})
            want = (a.T if ta else a).astype(np.float64) @ (b.T if tb else b).astype(np.float64)
            got = harness.result_array(res)
            out["%s maxrelerr" % name] = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
    # index_add: embedding gradient, 50,000-row table x 64, 4096 indices
    c.put("x", np.zeros((50_000, 64), np.float32), "f32")
    c.put("i", rng.integers(0, 50_000, size=(4096,)).astype(np.int32), "i32")
    c.put("s", rng.standard_normal((4096, 64)).astype(np.float32), "f32")
    out["index_add 50000x64 4096 idx"] = timed("index_add", ["x", "i", "s"], reps=5)
print(json.dumps(out, indent=1))

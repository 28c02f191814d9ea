#!/usr/bin/env python3
"""16-bit matmul epilogues on a GPU host (issue 29): a product with a bias and
relu fused into one matmul node against the same product plain, in tensord
(op.run with profile: kernel time, median of 10) and in PyTorch
(torch.addmm + relu against torch.mm, CUDA events, median of 10), in one
run. Prints kernel µs and TFLOP/s for each, and the ratios.

    TENSORD_BIN=build-release/daemon/tensord python3 bench/bench_epilogue.py

Needs numpy and msgpack (tests/lib/daemon.py starts the daemon); PyTorch
is optional (--no-torch)."""
import argparse
import os
import statistics
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "lib"))
from daemon import Daemon  # noqa: E402

SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (16384, 512, 10), (4096, 784, 512)]


def tensord_us(c, m, k, n, dt, epi):
    rng = np.random.default_rng(0)
    for name, shape in (("a", (m, k)), ("w", (k, n)), ("b", (n,))):
        arr = rng.uniform(-1, 1, size=shape).astype(np.float32)
        c.call("tensor.put", {"name": name + "32", "dtype": "f32", "shape": list(shape),
                              "data": arr.tobytes()})
        c.call("op.run", {"op": "cast", "inputs": [name + "32"], "attrs": {"dtype": dt}, "out": name})
    params = {"op": "matmul", "inputs": ["a", "w"] + (["b"] if epi else []), "out": "y",
              "profile": True}
    if epi:
        params["attrs"] = {"activation": "relu"}
    for _ in range(3):
        c.call("op.run", params)
    return statistics.median(c.call("op.run", params)["gpu_ns"] / 1e3 for _ in range(10))


def torch_us(m, k, n, dt, epi):
    import torch
    t = {"f16": torch.float16, "bf16": torch.bfloat16}[dt]
    a = torch.rand(m, k, device="cuda", dtype=t)
    w = torch.rand(k, n, device="cuda", dtype=t)
    b = torch.rand(n, device="cuda", dtype=t)
    fn = (lambda: torch.relu(torch.addmm(b, a, w))) if epi else (lambda: torch.mm(a, w))
    for _ in range(3):
        fn()
    times = []
    for _ in range(10):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e) * 1e3)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-torch", action="store_true")
    args = ap.parse_args()
    with Daemon(["--device", "auto"]) as d:
        with d.client() as c:
            print("| dtype | M×K×N | tensord plain µs | tensord bias+relu µs | fused/plain |"
                  " torch mm µs | torch addmm+relu µs | tensord/torch (fused) |")
            print("|---|---|---|---|---|---|---|---|")
            for dt in ("f16", "bf16"):
                for m, k, n in SHAPES:
                    plain = tensord_us(c, m, k, n, dt, False)
                    fused = tensord_us(c, m, k, n, dt, True)
                    tp = tf = float("nan")
                    if not args.no_torch:
                        tp, tf = torch_us(m, k, n, dt, False), torch_us(m, k, n, dt, True)
                    print("| %s | %d×%d×%d | %.1f | %.1f | %.2f | %.1f | %.1f | %.2f× |"
                          % (dt, m, k, n, plain, fused, fused / plain, tp, tf, tf / fused), flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Split a train.run step into GPU time and the rest: the 784-512-512-10 and
64-128-10 MLPs of bench_gpu's training workloads (batch 256, Adam, 256 steps,
STEPS in the environment to change it), run with `profile: true`; prints the
wall time per step (train.run's seconds / steps), the GPU time per step and the
dispatches per step (docs/performance.md). DEPTH in the environment sets
train.run's pipeline_depth (default 2, as train.run's on a GPU; DEPTH=1: each
step waited for before the next is built). Not a timed test.

    python3 bench/train_profile.py build-release/daemon/tensord
    DEPTH=1 python3 bench/train_profile.py build-release/daemon/tensord"""
import os
import sys

import numpy as np

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "lib"))
from daemon import Daemon  # noqa: E402

os.environ["TENSORD_BIN"] = sys.argv[1]
with Daemon() as d:
    c = d.client()
    rng = np.random.default_rng(0)
    for dims, tag in (([784, 512, 512, 10], "784"), ([64, 128, 10], "64")):
        rows = 16384
        def put(n, a):
            a = np.ascontiguousarray(a)
            dt = {"float32": "f32", "int32": "i32"}[str(a.dtype)]
            c.call("tensor.put", {"name": n, "dtype": dt, "shape": list(a.shape), "data": a.tobytes()})
        put(tag + "x", rng.standard_normal((rows, dims[0])).astype(np.float32))
        put(tag + "y", rng.integers(0, dims[-1], rows).astype(np.int32))
        nodes, params, h = [], [], "xb"
        for i in range(len(dims) - 1):
            put(tag + "w%d" % i, (rng.standard_normal((dims[i], dims[i + 1])) * 0.05).astype(np.float32))
            put(tag + "b%d" % i, np.zeros(dims[i + 1], np.float32))
            nodes += [{"id": "m%d" % i, "op": "matmul", "inputs": [h, tag + "w%d" % i]},
                      {"id": "a%d" % i, "op": "add", "inputs": ["m%d" % i, tag + "b%d" % i]}]
            h = "a%d" % i
            if i + 2 < len(dims):
                nodes.append({"id": "r%d" % i, "op": "relu", "inputs": [h]})
                h = "r%d" % i
            params += [tag + "w%d" % i, tag + "b%d" % i]
        nodes.append({"id": "loss", "op": "cross_entropy", "inputs": [h, "yb"]})
        for rep in range(2):
            err, r = c.call_past_notifications("train.run", {"nodes": nodes, "loss": "loss", "params": params, "data": {"xb": tag + "x", "yb": tag + "y"},
                                     "batch_size": 256, "steps": int(os.environ.get("STEPS", "256")), "optimizer": {"type": "adam", "lr": 1e-3}, "profile": True,
                                     "pipeline_depth": int(os.environ.get("DEPTH", "2"))})
        if err:
            print(err)
            continue
        print("depth %s mlp %s: %.1f us/step wall (train.run seconds/steps), gpu %.1f us/step, %.1f dispatches/step" % (
            os.environ.get("DEPTH", "2"), tag, 1e6 * r["seconds"] / r["steps"], r["gpu_ns"] / 1e3, r["dispatches"]))

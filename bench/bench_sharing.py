#!/usr/bin/env python3
"""Sharing one GPU between users (issue 34; docs/architecture.md, "Sharing
the GPU"): two users' detached train.runs of the same MLP (784-4096-4096-10
by default, SIZE in the environment), one's batch 8x the other's, for
SECONDS (default 10); over the same window a third user sends small op.runs
one after another. Prints each user's share of the GPU time (info's users)
and steps, the op.run latency p50/p99 against one long step's GPU time, and
the same with user_weights 3:1. Needs root (three uids). Not a timed test.

    python3 bench/bench_sharing.py BUILD/daemon/tensord"""
import os
import statistics
import sys
import time

import numpy as np

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "lib"))
from daemon import Daemon, as_user  # noqa: E402

UID_B, UID_C = 65533, 65534
SIZE = int(os.environ.get("SIZE", "4096"))
SECONDS = float(os.environ.get("SECONDS", "10"))


def put(c, name, a):
    a = np.ascontiguousarray(a, dtype="<f4")
    c.call("tensor.put", {"name": name, "dtype": "f32", "shape": list(a.shape), "data": a.tobytes()})


def start(c, batch):
    rng = np.random.default_rng(0)
    rows = 8 * batch
    put(c, "x", rng.standard_normal((rows, 784)))
    put(c, "y", rng.standard_normal((rows, 10)))
    put(c, "w1", rng.standard_normal((784, SIZE)) * 0.03)
    put(c, "w2", rng.standard_normal((SIZE, SIZE)) * 0.01)
    put(c, "w3", rng.standard_normal((SIZE, 10)) * 0.01)
    nodes = [{"id": "h1", "op": "matmul", "inputs": ["xb", "w1"]}, {"id": "a1", "op": "relu", "inputs": ["h1"]},
             {"id": "h2", "op": "matmul", "inputs": ["a1", "w2"]}, {"id": "a2", "op": "relu", "inputs": ["h2"]},
             {"id": "z", "op": "matmul", "inputs": ["a2", "w3"]}, {"id": "L", "op": "mse", "inputs": ["z", "yb"]}]
    return c.call("train.run", {"nodes": nodes, "loss": "L", "params": ["w1", "w2", "w3"],
                                "optimizer": {"type": "adam", "lr": 1e-5}, "data": {"xb": "x", "yb": "y"},
                                "batch_size": batch, "steps": 100000000, "detach": True, "profile": True})["job"]


def run(config, label, batch):
    with Daemon(config=config) as d:
        os.chmod(d.dir, 0o755)
        os.chmod(d.sock, 0o666)
        c = d.client()
        ja = start(c, batch)

        def other():
            with d.client() as o:
                return start(o, 8 * batch)

        jb = as_user(UID_B, other)
        time.sleep(2.0)

        def users():
            return {u["uid"]: u for u in c.call("info")["users"]}

        g0 = users()
        s0 = (c.call("job.stat", {"job": ja})["run_step"], c.call("job.stat", {"job": jb, "owner": UID_B})["run_step"])

        def prober():
            with d.client() as p:
                put(p, "t", np.ones(256))
                lat, end = [], time.monotonic() + SECONDS
                while time.monotonic() < end:
                    t0 = time.perf_counter()
                    p.call("op.run", {"op": "mul", "inputs": ["t", "t"], "out": "u"})
                    lat.append(time.perf_counter() - t0)
                return lat

        lat = as_user(UID_C, prober)
        g1 = users()
        s1 = (c.call("job.stat", {"job": ja})["run_step"], c.call("job.stat", {"job": jb, "owner": UID_B})["run_step"])
        a = g1[0]["gpu_seconds"] - g0[0]["gpu_seconds"]
        b = g1[UID_B]["gpu_seconds"] - g0[UID_B]["gpu_seconds"]
        steps = (s1[0] - s0[0], s1[1] - s0[1])
        long_step = b / steps[1] if steps[1] else float("nan")
        lat.sort()
        p50, p99 = 1e3 * statistics.median(lat), 1e3 * lat[int(0.99 * (len(lat) - 1))]
        print("%s: GPU time root (batch %d) %.2f s = %.0f %%, uid %d (batch %d) %.2f s = %.0f %%; steps %d / %d; "
              "long step %.1f ms GPU; a third user's op.run p50 %.2f ms, p99 %.2f ms over %d calls "
              "(goal p99 <= one step + 5 ms = %.1f ms)" % (
                  label, batch, a, 100 * a / (a + b), UID_B, 8 * batch, b, 100 * b / (a + b), steps[0], steps[1],
                  1e3 * long_step, p50, p99, len(lat), 1e3 * long_step + 5), flush=True)
        for job, owner in ((ja, 0), (jb, UID_B)):
            c.call("job.cancel", {"job": job, "owner": owner})


def main():
    os.environ["TENSORD_BIN"] = sys.argv[1]
    batch = int(os.environ.get("BATCH", "512"))
    run("", "equal shares", batch)
    run("user_weights = 0:3 %d:1\n" % UID_B, "weights 3:1", batch)


if __name__ == "__main__":
    main()

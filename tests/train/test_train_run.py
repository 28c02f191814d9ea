"""train.run against a real tensord: a linear regression learnt server-side
with progress and eval notifications, other clients served while it runs, a
disconnect cancels the run, early stop, and bad requests refused up front."""
import os
import sys
import time

import msgpack
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "ops"))
import harness  # noqa: E402
from daemon import Daemon  # noqa: E402

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL", what)


def start_run(c, params):
    c.msgid += 1
    c.sock.sendall(msgpack.packb([0, c.msgid, "train.run", [params]]))


def finish_run(c):
    """Collect notifications until the response; returns (notes, error, result)."""
    notes = []
    while True:
        for m in c.unpacker:
            if m[0] == 2:
                notes.append((m[1], m[2][0]))
            else:
                return notes, m[2], m[3]
        chunk = c.sock.recv(1 << 16)
        if not chunk:
            raise ConnectionError("closed")
        c.unpacker.feed(chunk)


def test_labels(c, rng):
    """Class indices out of range are refused before the first step, naming
    the data tensor, the element and its value (before: a NaN loss steps
    later); the loss's ignore_index is allowed; labels behind a reshape (a
    sequence model's [batch, seq] targets) are found too."""
    c.put("cx", rng.standard_normal((64, 4)), "f32")
    c.put("cw", np.zeros((4, 5)), "f32")
    labels = rng.integers(0, 5, 64).astype(np.int32)
    cls = [{"id": "z", "op": "matmul", "inputs": ["xb", "cw"]},
           {"id": "L", "op": "cross_entropy", "inputs": ["z", "yb"]}]
    run = {"nodes": cls, "loss": "L", "params": ["cw"], "optimizer": {"type": "sgd", "lr": 0.1},
           "data": {"xb": "cx", "yb": "cy"}, "batch_size": 16, "epochs": 1}
    for bad, where in ((5, 37), (-1, 0)):
        y = labels.copy()
        y[where] = bad
        c.put("cy", y, "i32")
        start_run(c, run)
        _, err, _ = finish_run(c)
        check(err is not None and err["name"] == "INVALID_ARGUMENT" and "'cy'" in err["message"]
              and "element %d is %d" % (where, bad) in err["message"] and "5 classes" in err["message"],
              "label %d at %d: %r" % (bad, where, err))
    y = labels.copy()
    y[3] = -100
    c.put("cy", y, "i32")
    ign = [dict(cls[0]), dict(cls[1], attrs={"ignore_index": -100})]
    start_run(c, dict(run, nodes=ign))
    _, err, _ = finish_run(c)
    check(err is None, "ignore_index labels pass: %r" % (err,))
    c.put("cy", labels, "i32")
    start_run(c, run)
    _, err, _ = finish_run(c)
    check(err is None, "labels in range: %r" % (err,))
    # [rows, 2] targets reshaped to [rows * 2] for a [rows * 2, 5] logits
    c.put("sx", rng.standard_normal((32, 2, 4)), "f32")
    seq = labels.reshape(32, 2).copy()
    seq[31, 1] = 7
    c.put("sy", seq, "i32")
    sq = [{"id": "z", "op": "matmul", "inputs": ["xb", "cw"]},
          {"id": "z2", "op": "reshape", "inputs": ["z"], "attrs": {"shape": [-1, 5]}},
          {"id": "y2", "op": "reshape", "inputs": ["yb"], "attrs": {"shape": [-1]}},
          {"id": "L", "op": "cross_entropy", "inputs": ["z2", "y2"]}]
    start_run(c, dict(run, nodes=sq, data={"xb": "sx", "yb": "sy"}))
    _, err, _ = finish_run(c)
    check(err is not None and "'sy'" in err["message"] and "element 63 is 7" in err["message"],
          "labels behind a reshape: %r" % (err,))


def main():
    rng = np.random.default_rng(0)
    with Daemon() as d:
        c = harness.Client(d.sock)
        other = harness.Client(d.sock)
        x = rng.standard_normal((256, 3))
        w_true = np.array([[1.5], [-2.0], [0.5]])
        y = x @ w_true + 0.3
        c.put("x", x, "f32")
        c.put("y", y, "f32")
        c.put("w", np.zeros((3, 1)), "f32")
        c.put("b", np.zeros(1), "f32")
        nodes = [
            {"id": "h", "op": "matmul", "inputs": ["xb", "w"]},
            {"id": "z", "op": "add", "inputs": ["h", "b"]},
            {"id": "L", "op": "mse", "inputs": ["z", "yb"]},
            {"id": "d", "op": "sub", "inputs": ["z", "yb"]},
            {"id": "ad", "op": "abs", "inputs": ["d"]},
            {"id": "mae", "op": "mean", "inputs": ["ad"]},
        ]
        base = {"nodes": nodes, "loss": "L", "params": ["w", "b"],
                "optimizer": {"type": "sgd", "lr": 0.1}, "data": {"xb": "x", "yb": "y"},
                "batch_size": 32}

        # 1. Learn it; notifications arrive; the result and the weights are right.
        start_run(c, dict(base, epochs=20, progress_every=40,
                          eval={"data": {"xb": "x", "yb": "y"}, "every": 80, "metrics": ["mae"]}))
        notes, err, res = finish_run(c)
        check(err is None, "run failed: %r" % (err,))
        prog = [n for m, n in notes if m == "train.progress"]
        evals = [n for m, n in notes if m == "train.eval"]
        check(len(prog) == 4 and prog[-1]["step"] == 160 and prog[-1]["steps"] == 160,
              "progress notifications: %r" % (prog,))
        check(len(evals) == 2 and "mae" in evals[-1]["metrics"], "eval notifications: %r" % (evals,))
        if res:
            check(res["steps"] == 160 and res["stopped"] == "done" and res["loss"] < 1e-6,
                  "result: %r" % (res,))
            check(res["eval"] and res["eval"]["metrics"]["mae"] < 1e-3, "eval result: %r" % (res,))
        _, w = c.call("tensor.get", {"name": "w"})
        check(np.allclose(harness.result_array(w).ravel(), w_true.ravel(), atol=1e-3), "weights not learnt")

        # 2. Reproducible: the same seed from the same start gives the same bits.
        outs = []
        for _ in range(2):
            c.put("w", np.zeros((3, 1)), "f32")
            c.put("b", np.zeros(1), "f32")
            start_run(c, dict(base, steps=10, seed=7))
            finish_run(c)
            outs.append(c.call("tensor.get", {"name": "w"})[1]["data"])
        check(outs[0] == outs[1], "runs with one seed differ")

        # 2b. profile: the mean device time and kernels per step, within the
        # wall time; the same bits as without it; absent unless asked for.
        c.put("w", np.zeros((3, 1)), "f32")
        c.put("b", np.zeros(1), "f32")
        start_run(c, dict(base, steps=10, seed=7, profile=True))
        _, err, res = finish_run(c)
        check(err is None and res["gpu_ns"] > 0 and res["gpu_ns"] * 10 / 1e9 <= res["seconds"]
              and res["dispatches"] >= 4 and res["dispatches"] == int(res["dispatches"]),
              "train.run with profile: gpu_ns and dispatches per step: %r" % (res,))
        check(c.call("tensor.get", {"name": "w"})[1]["data"] == outs[0], "a profiled run gives the same bits")
        start_run(c, dict(base, steps=1))
        _, err, res = finish_run(c)
        check(err is None and "gpu_ns" not in res and "dispatches" not in res, "no profile unless asked: %r" % (res,))
        step = {"nodes": nodes, "loss": "L", "params": ["w", "b"], "optimizer": {"type": "sgd", "lr": 0.1}}
        t0 = time.monotonic()
        err, res = c.call("train.step", dict(step, profile=True, nodes=[
            {"id": "xb", "op": "slice", "inputs": ["x"], "attrs": {"starts": [0], "ends": [32]}},
            {"id": "yb", "op": "slice", "inputs": ["y"], "attrs": {"starts": [0], "ends": [32]}}] + nodes))
        took = time.monotonic() - t0
        check(err is None and 0 < res["gpu_ns"] <= took * 1e9 and res["dispatches"] >= 4,
              "train.step with profile: %r (%r)" % (res, err))

        # 3. Early stop.
        c.put("w", np.zeros((3, 1)), "f32")
        start_run(c, dict(base, epochs=50, stop_loss=0.5))
        _, err, res = finish_run(c)
        check(err is None and res["stopped"] == "stop_loss" and res["steps"] < 400, "stop_loss: %r" % (res,))

        # 4. Others are served during a long run; a disconnect cancels it.
        big = rng.standard_normal((4096, 64))
        c.put("bx", big, "f32")
        c.put("by", rng.standard_normal((4096, 1)), "f32")
        c.put("bw", np.zeros((64, 1)), "f32")
        runner = harness.Client(d.sock)
        start_run(runner, {"nodes": [{"id": "h", "op": "matmul", "inputs": ["xb", "bw"]},
                                     {"id": "L", "op": "mse", "inputs": ["h", "yb"]}],
                           "loss": "L", "params": ["bw"], "optimizer": {"type": "adam", "lr": 0.01},
                           "data": {"xb": "bx", "yb": "by"}, "batch_size": 16, "epochs": 100})
        time.sleep(0.3)
        t0 = time.monotonic()
        err, _ = other.call("ping")
        check(err is None and time.monotonic() - t0 < 2.0, "ping during a run took too long")
        runner.sock.close()
        time.sleep(0.3)
        v1 = other.call("tensor.stat", {"name": "bw"})[1]["version"]
        time.sleep(0.5)
        v2 = other.call("tensor.stat", {"name": "bw"})[1]["version"]
        check(v1 == v2, "the run went on after its client left (%d -> %d)" % (v1, v2))
        check(d.alive(), "daemon died")

        # 5. Bad requests are refused before any step.
        bad = [
            (dict(base, batch_size=0, epochs=1), "INVALID_ARGUMENT"),
            (dict(base, batch_size=1000, epochs=1), "INVALID_ARGUMENT"),
            (dict(base, data={"xb": "nope", "yb": "y"}, epochs=1), "NOT_FOUND"),
            (dict(base, data={"xb": "x", "yb": "b"}, epochs=1), "SHAPE_MISMATCH"),
            (dict(base, epochs=1, steps=5), "INVALID_ARGUMENT"),
            (dict(base, loss="nope", epochs=1), "INVALID_ARGUMENT"),
            (dict(base, epochs=1, optimizer={"type": "rmsprop"}), "INVALID_ARGUMENT"),
            (dict(base, epochs=1, eval={"data": {"xb": "x"}, "bogus": 1}), "INVALID_ARGUMENT"),
        ]
        for params, name in bad:
            start_run(c, params)
            _, err, _ = finish_run(c)
            check(err is not None and err["name"] == name, "expected %s, got %r" % (name, err))
        check(c.call("ping")[0] is None, "connection unusable after errors")
        test_labels(c, rng)

        # 6. A mask built from a comparison is a constant, and a float cast passes
        #    the gradient through: d/dx sum(cast_f16(x * cast(x > 0))) = (x > 0).
        xv = np.array([[1.0, -2.0, 3.0], [-4.0, 5.0, -6.0]])
        c.put("mx", xv, "f32")
        mask_nodes = [
            {"id": "m", "op": "gt", "inputs": ["mx"], "attrs": {"scalar": 0}},
            {"id": "mf", "op": "cast", "inputs": ["m"], "attrs": {"dtype": "f32"}},
            {"id": "p", "op": "mul", "inputs": ["mx", "mf"]},
            {"id": "h", "op": "cast", "inputs": ["p"], "attrs": {"dtype": "f16"}},
            {"id": "L", "op": "sum", "inputs": ["h"]}]
        err, _ = c.call("train.step", {"nodes": mask_nodes, "loss": "L", "params": ["mx"], "grads": True})
        check(err is None, "mask gradient: %r" % (err,))
        if err is None:
            g = harness.result_array(c.call("tensor.get", {"name": "mx.grad"})[1])
            check(np.array_equal(g, (xv > 0).astype(np.float32)), "mask gradient values: %r" % (g,))
    print("%d failures" % len(failures))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()

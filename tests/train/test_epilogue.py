"""Matmul epilogues in training (issue 16): an MLP written as nodes (linear
layers as matmul(x, W, transpose_b) + add(bias), relu between them, in the
shapes of the 784-512-512-10 benchmark scaled down) trains with the chains
fused (the default) and unfused (`fuse: false`) from the same parameters:
the losses and the parameters after every step are equal bit for bit, and
the fused step runs 7 dispatches fewer per train.step `profile` (two
matmul -> add -> relu chains and one matmul -> add head in the forward,
and the backward's two matmul -> relu_grad, graph_fuse_backward_masks); with SGD on f16
parameters within a tolerance. (train.run has no `fuse` switch: it always
fuses; tests/train/test_train_run.py trains a fused matmul + bias there.) A relu whose pre-activation is read by another node (a
second loss term) is left unfused, and the gradients still agree."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "ops"))
import harness  # noqa: E402
from daemon import Daemon  # noqa: E402

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL", what)


def n(i, op, inputs, **attrs):
    d = {"id": i, "op": op, "inputs": inputs}
    if attrs:
        d["attrs"] = attrs
    return d


def mlp_nodes(p, extra=()):
    """784-like MLP on parameter prefix p: two hidden linear+relu, a head."""
    return [
        n("xb", "slice", ["x"], starts=[0], ends=[48]),
        n("yb", "slice", ["y"], starts=[0], ends=[48]),
        n("h1m", "matmul", ["xb", p + "w1"], transpose_b=True), n("h1", "add", ["h1m", p + "b1"]),
        n("a1", "relu", ["h1"]),
        n("h2m", "matmul", ["a1", p + "w2"], transpose_b=True), n("h2", "add", ["h2m", p + "b2"]),
        n("a2", "relu", ["h2"]),
        n("om", "matmul", ["a2", p + "w3"], transpose_b=True), n("o", "add", ["om", p + "b3"]),
        n("L", "cross_entropy", ["o", "yb"], reduction="mean"),
    ] + list(extra)


SHAPES = {"w1": (40, 65), "b1": (40,), "w2": (33, 40), "b2": (33,), "w3": (10, 33), "b3": (10,)}


def put_params(c, rng, prefixes, dt):
    for k, s in SHAPES.items():
        v = rng.uniform(-0.3, 0.3, size=s)
        for p in prefixes:
            c.put(p + k, v, dt)


def params(p):
    return [p + k for k in SHAPES]


def get(c, name):
    err, r = c.call("tensor.get", {"name": name})
    assert err is None, err
    return r


def main():
    rng = np.random.default_rng(16)
    with Daemon() as d:
        c = harness.Client(d.sock)
        c.put("x", rng.standard_normal((64, 65)), "f32")
        c.put("y", rng.integers(0, 10, 64).astype(np.int32), "i32")
        put_params(c, rng, ["f/", "u/"], "f32")
        opt = {"type": "adam", "lr": 0.01}
        for s in range(4):
            steps = {}
            for p, fuse in (("f/", True), ("u/", False)):
                st = {"nodes": mlp_nodes(p), "loss": "L", "params": params(p), "optimizer": opt, "profile": True}
                if not fuse:
                    st["fuse"] = False
                err, res = c.call("train.step", st)
                check(err is None, "train.step %s: %r" % (p, err))
                steps[p] = res
            if failures:
                break
            f, u = steps["f/"], steps["u/"]
            check(f["loss"] == u["loss"], "step %d: loss fused %r, unfused %r" % (s, f["loss"], u["loss"]))
            check(u["dispatches"] - f["dispatches"] == 7,
                  "step %d: %d dispatches fused, %d unfused; want 7 fewer" % (s, f["dispatches"], u["dispatches"]))
            for k in SHAPES:
                check(get(c, "f/" + k)["data"] == get(c, "u/" + k)["data"], "step %d: %s differs" % (s, k))
        print("train.step dispatches: fused %d, unfused %d" % (f["dispatches"], u["dispatches"]))

        # f16 parameters, SGD: fused and unfused agree (the same bits here
        # too: the epilogue rounds as the nodes do).
        put_params(c, rng, ["g/", "h/"], "f16")
        sgd = {"type": "sgd", "lr": 0.05}
        c.put("x16", rng.standard_normal((64, 65)), "f16")
        losses = {}
        for p, fuse in (("g/", True), ("h/", False)):
            nodes = [dict(nd, inputs=["x16" if i == "x" else i for i in nd["inputs"]]) for nd in mlp_nodes(p)]
            st = {"nodes": nodes, "loss": "L", "params": params(p), "optimizer": sgd}
            if not fuse:
                st["fuse"] = False
            err, res = c.call("train.step", st)
            check(err is None, "f16 train.step %s: %r" % (p, err))
            losses[p] = res and res.get("loss")
        if not failures:
            check(abs(losses["g/"] - losses["h/"]) <= 1e-3 * abs(losses["h/"]), "f16 losses %r" % (losses,))
            for k in SHAPES:
                a = harness.result_array(get(c, "g/" + k)).astype(np.float64)
                b = harness.result_array(get(c, "h/" + k)).astype(np.float64)
                check(np.allclose(a, b, atol=2e-3, rtol=2e-3), "f16 %s differs: %g" % (k, np.abs(a - b).max()))

        # h1 read by a second term: that chain keeps its add (and relu);
        # the other two fuse (4 dispatches), and so do the backward's two
        # matmul -> relu_grad (2). Gradients agree with the unfused graph.
        put_params(c, rng, ["p/", "q/"], "f32")
        extra = [n("s", "mean", ["h1"]), n("L2", "add", ["L", "s"])]
        res2 = {}
        for p, fuse in (("p/", True), ("q/", False)):
            st = {"nodes": mlp_nodes(p, extra), "loss": "L2", "params": params(p), "optimizer": opt,
                  "profile": True}
            if not fuse:
                st["fuse"] = False
            err, res = c.call("train.step", st)
            check(err is None, "shared h1 %s: %r" % (p, err))
            res2[p] = res
        if not failures:
            check(res2["p/"]["loss"] == res2["q/"]["loss"], "shared h1 losses %r" % (res2,))
            check(res2["q/"]["dispatches"] - res2["p/"]["dispatches"] == 6, "shared h1 dispatches %r" % (res2,))
            for k in SHAPES:
                check(get(c, "p/" + k)["data"] == get(c, "q/" + k)["data"], "shared h1: %s differs" % k)
    if failures:
        print("%d failures" % len(failures))
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()

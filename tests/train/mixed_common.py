"""What the mixed-precision tests share (test_mixed.py for bf16,
test_mixed_f16.py for f16): reading tensors back, the small MLP graph, and a
digits-shaped MLP's loss curve in f32 and in a 16-bit precision."""
import numpy as np

import harness


def f32(a):
    """a rounded to f32, as float64."""
    return np.asarray(a, np.float32).astype(np.float64)


def get(c, name):
    """Stored tensor `name` as float64."""
    err, res = c.call("tensor.get", {"name": name})
    assert err is None, (name, err)
    return harness.result_array(res).astype(np.float64)


def mlp_graph(p):
    """The parameters' names and the nodes of linear-relu-linear-cross_entropy
    over stored tensors <p>x and <p>y."""
    names = [p + "w1", p + "b1", p + "w2", p + "b2"]
    return names, [{"id": "p1", "op": "matmul", "inputs": [p + "x", p + "w1"]},
                   {"id": "z1", "op": "add", "inputs": ["p1", p + "b1"]},
                   {"id": "h", "op": "relu", "inputs": ["z1"]},
                   {"id": "p2", "op": "matmul", "inputs": ["h", p + "w2"]},
                   {"id": "z", "op": "add", "inputs": ["p2", p + "b2"]},
                   {"id": "loss", "op": "cross_entropy", "inputs": ["z", p + "y"]}]


def curves(c, rng, prec, check, each_step=None):
    """8 SGD steps of a 784-64-10 MLP on digits-shaped data, once in f32 and
    once in `prec`, from the same start: {precision: losses}, or None after
    a failed step. each_step(precision, step, result) may check more; the
    losses are then compared: finite, falling, within 2 % of f32's and not
    equal to them bit for bit (the rounding happened)."""
    n, d, hdim, k = 256, 784, 64, 10
    centers = rng.normal(size=(k, d))
    labels = rng.integers(0, k, size=n)
    x = f32(centers[labels] + rng.normal(size=(n, d)))
    init = [f32(rng.normal(size=(d, hdim)) / np.sqrt(d)), np.zeros(hdim),
            f32(rng.normal(size=(hdim, k)) / np.sqrt(hdim)), np.zeros(k)]
    names, nodes = mlp_graph("tc.")
    c.put("tc.x", x, "f32")
    c.put("tc.y", labels, "i32")
    out = {}
    for p in ("f32", prec):
        for name, v in zip(names, init):
            c.put(name, v, "f32")
        losses = []
        for step in range(1, 9):
            err, res = c.call("train.step", {"nodes": nodes, "loss": "loss", "params": names, "step": step,
                                             "optimizer": {"type": "sgd", "lr": 0.05}, "precision": p})
            check(err is None, "curve %s step %d: %s" % (p, step, err))
            if err is not None:
                return None
            losses.append(res["loss"])
            if each_step:
                each_step(p, step, res)
        out[p] = np.array(losses)
        for name in names:
            check(c.call("tensor.stat", {"name": name})[1]["dtype"] == "f32", "%s not f32" % name)
    f, h = out["f32"], out[prec]
    print("digits-shaped MLP losses  f32 %s\n                         %4s %s" % (np.round(f, 4), prec, np.round(h, 4)))
    check(np.all(np.isfinite(h)), "%s losses not finite: %s" % (prec, h))
    check(h[-1] < h[0], "%s loss did not fall: %s" % (prec, h))
    check(np.all(np.abs(h - f) <= 2e-2 * np.abs(f) + 1e-3), "%s losses %s off the f32 run's %s" % (prec, h, f))
    check(np.any(h != f), "%s losses equal the f32 run's bit for bit: no rounding?" % prec)
    return out

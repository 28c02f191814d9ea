#!/usr/bin/python3
"""Mixed precision (`precision: "bf16"`, docs/training.md): a training step's
products (matmul, bmm, forward and backward) multiply their f32 operands
rounded to bf16 and accumulate in f32; everything else stays f32. On
lavapipe this runs the scalar path (operands rounded to bf16 and widened
back, then the f32 kernels); tests/ops/test_ops_coopmat.py checks the
tensor-core kernel where there is one.

- Products: train.step returns the forward product (outputs) and stores the
  operands' gradients (grads: true, no optimizer; NN forward, TN and NT
  backward), compared with NumPy on operands rounded to bf16 (nearest even)
  multiplied in float64, within f32 accumulation's error; the operands carry
  mantissa bits beyond bf16, so the unrounded product is many tolerances
  away (the test fails if the rounding is skipped). Also split-K, bmm, the
  fused bias/relu epilogue, and `precision: "f32"` (the plain product).
- One SGD step of a small MLP (linear, relu, linear, cross_entropy) against
  a NumPy re-implementation of the bf16 step: parameters after the step
  agree to f32 rounding (the algorithm is fixed: only summation order
  differs), and differ from the f32 step's.
- Models: precision stored by model.define and shown by model.stat, used by
  the model's steps and model.evaluate, overridden by a train.step's own;
  parameters stay f32.
- A few steps of an MLP on digits-shaped data (784-64-10) and of the chars
  transformer (examples/chars, --precision bf16): losses finite and within
  bf16 tolerance of the f32 run's.
- Errors: unknown values are INVALID_ARGUMENT ("f16" is test_mixed_f16.py's).
- tensorctl: model define / step --precision, model stat showing it
  (skipped without $TENSORCTL_BIN).

Run with /usr/bin/python3; $TENSORD_BIN names the daemon."""
import json
import os
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "ops"))

import numpy as np  # noqa: E402

import harness  # noqa: E402
from mixed_common import curves, f32, get, mlp_graph  # noqa: E402

rng = np.random.default_rng(20261129)
CHARS = os.path.join(HERE, "..", "..", "examples", "chars", "train.py")
TEXT = "/usr/share/common-licenses/GPL-3"
failures = []
checks = 0


def check(ok, what):
    global checks
    checks += 1
    if not ok:
        failures.append(what)
        print("FAIL:", what)


def bf16(a):
    """a (f32 values) rounded to bf16 (nearest even), as float64."""
    return harness.quantize(np.asarray(a, np.float32), "bf16")


def close_to(got, want, a, b, what):
    """got against want = a @ b (float64 of bf16 values), within f32
    accumulation's error: a few f32 ulps of the sum of |terms|."""
    tol = 8 * 2.0**-24 * (np.abs(a) @ np.abs(b)) + 1e-30
    err = np.abs(got - want)
    check(np.all(err <= tol), "%s: off by %.3g (tolerance %.3g)" % (what, (err - tol).max(), tol.max()))
    return tol


def product_case(c, label, sa, sb, attrs=None, epilogue=None):
    """y = matmul(x, w) (or bmm) with both operands parameters; loss
    sum(y * r). Checks y, x.grad = r @ w^T and w.grad = x^T @ r."""
    attrs = dict(attrs or {})
    ta, tb = attrs.get("transpose_a", False), attrs.get("transpose_b", False)
    x = f32(rng.uniform(-1, 1, size=sa))
    w = f32(rng.uniform(-1, 1, size=sb))
    xl = np.swapaxes(x, -1, -2) if ta else x
    wl = np.swapaxes(w, -1, -2) if tb else w
    yshape = np.broadcast_shapes(xl.shape[:-2], wl.shape[:-2]) + (xl.shape[-2], wl.shape[-1])
    r = f32(rng.uniform(-1, 1, size=yshape))
    c.put("mx.x", x, "f32")
    c.put("mx.w", w, "f32")
    c.put("mx.r", r, "f32")
    op = "bmm" if len(sa) == 3 and len(sb) == 3 and not attrs else "matmul"
    nodes = [{"id": "y", "op": op, "inputs": ["mx.x", "mx.w"], "attrs": attrs}]
    want = bf16(xl) @ bf16(wl)
    if epilogue:
        bias = f32(rng.uniform(-1, 1, size=yshape[-1:]))
        c.put("mx.b", bias, "f32")
        nodes = [{"id": "p", "op": op, "inputs": ["mx.x", "mx.w"], "attrs": attrs},
                 {"id": "z", "op": "add", "inputs": ["p", "mx.b"]},
                 {"id": "y", "op": "relu", "inputs": ["z"]}]
    nodes += [{"id": "yr", "op": "mul", "inputs": ["y", "mx.r"]},
              {"id": "loss", "op": "sum", "inputs": ["yr"]}]
    for prec in ("bf16", "f32"):
        err, res = c.call("train.step", {"nodes": nodes, "loss": "loss", "params": ["mx.x", "mx.w"],
                                         "grads": True, "outputs": ["y"], "precision": prec})
        check(err is None, "%s %s: %s" % (label, prec, err))
        if err is not None:
            return
        y = harness.result_array(res["outputs"]["y"]).astype(np.float64)
        if prec == "f32":
            # the plain f32 product: far from the bf16 one
            plain = np.maximum(xl @ wl + bias, 0) if epilogue else xl @ wl
            check(np.abs(y - plain).max() <= 1e-5 * max(1, np.abs(plain).max()),
                  "%s f32: not the f32 product" % label)
            continue
        if epilogue:
            tol = 8 * 2.0**-24 * (np.abs(bf16(xl)) @ np.abs(bf16(wl)) + np.abs(bias)) + 1e-30
            wy = np.maximum(want + bias, 0)
            check(np.all(np.abs(y - wy) <= tol), "%s: fused epilogue off by %.3g" % (label, np.abs(y - wy).max()))
            continue
        tol = close_to(y, want, bf16(xl), bf16(wl), "%s forward" % label)
        check(np.abs(xl @ wl - want).max() > 20 * tol.max(),
              "%s: operands not discriminating (f32 and bf16 products too close)" % label)
        # the gradients of sum(y * r): x.grad = r @ w^T, w.grad = x^T @ r,
        # their operands rounded too; broadcast batch dims summed
        for what, got, a, b, shape, tr, plain in (
                ("x.grad", get(c, "mx.x.grad"), bf16(r), T(bf16(wl)), xl.shape, ta, r @ T(wl)),
                ("w.grad", get(c, "mx.w.grad"), T(bf16(xl)), bf16(r), wl.shape, tb, T(xl) @ r)):
            want_g = reduce_to(a @ b, shape, tr)
            tol_g = reduce_to(8 * 2.0**-24 * (np.abs(a) @ np.abs(b)), shape, tr) + 1e-30
            check(np.all(np.abs(got - want_g) <= tol_g), "%s: %s off by %.3g (tolerance %.3g)"
                  % (label, what, np.abs(got - want_g).max(), tol_g.max()))
            check(np.abs(reduce_to(plain, shape, tr) - want_g).max() > 20 * tol_g.max(),
                  "%s: %s not discriminating" % (label, what))


def T(a):
    return np.swapaxes(a, -1, -2)


def reduce_to(a, shape, transposed):
    """a summed over the broadcast dims down to the logical `shape`, then
    stored transposed where the operand is."""
    while a.ndim > len(shape):
        a = a.sum(0)
    for d in range(a.ndim - 2):
        if shape[d] == 1 and a.shape[d] != 1:
            a = a.sum(d, keepdims=True)
    return T(a) if transposed else a


def products(c):
    product_case(c, "NN 64x96 @ 96x80", (64, 96), (96, 80))
    product_case(c, "NN 128x128 @ 128x128", (128, 128), (128, 128))
    product_case(c, "NT 48x64 @ (40x64)^T", (48, 64), (40, 64), {"transpose_b": True})
    product_case(c, "TN (64x32)^T @ 64x48", (64, 32), (64, 48), {"transpose_a": True})
    product_case(c, "split-K 16x2048 @ 2048x24", (16, 2048), (2048, 24), {"split_k": 4})
    product_case(c, "bmm 3x32x40 @ 3x40x24", (3, 32, 40), (3, 40, 24))
    product_case(c, "NN 5x7 @ 7x3 (small)", (5, 7), (7, 3))
    product_case(c, "bias+relu epilogue 64x96 @ 96x80", (64, 96), (96, 80), epilogue=True)


def mlp_ref(x, labels, params, lr, cast):
    """One SGD step of linear-relu-linear-cross_entropy(mean) in float64,
    with every product's operands passed through `cast` (bf16 or f32)."""
    w1, b1, w2, b2 = params
    n = x.shape[0]
    h = f32(np.maximum(f32(cast(x) @ cast(w1)) + b1, 0))
    z = f32(cast(h) @ cast(w2)) + b2
    z = f32(z)
    e = np.exp(z - z.max(1, keepdims=True))
    p = e / e.sum(1, keepdims=True)
    loss = float(np.mean(-np.log(p[np.arange(n), labels])))
    dz = f32((p - np.eye(z.shape[1])[labels]) / n)
    dw2 = cast(h).T @ cast(dz)
    db2 = dz.sum(0)
    dh = f32(cast(dz) @ cast(w2).T) * (h > 0)
    dh = f32(dh)
    dw1 = cast(x).T @ cast(dh)
    db1 = dh.sum(0)
    return loss, [w1 - lr * dw1, b1 - lr * db1, w2 - lr * dw2, b2 - lr * db2]


def mlp_step(c):
    n, d, hdim, k, lr = 32, 48, 64, 10, 0.5
    x = f32(rng.normal(size=(n, d)))
    labels = rng.integers(0, k, size=n)
    init = [f32(rng.normal(size=(d, hdim)) / np.sqrt(d)), f32(rng.normal(size=hdim) * 0.1),
            f32(rng.normal(size=(hdim, k)) / np.sqrt(hdim)), f32(rng.normal(size=k) * 0.1)]
    names, nodes = mlp_graph("ml.")
    c.put("ml.x", x, "f32")
    c.put("ml.y", labels, "i32")
    want_loss, want = mlp_ref(x, labels, init, lr, bf16)
    _, plain = mlp_ref(x, labels, init, lr, f32)
    for fuse in (True, False):
        for name, v in zip(names, init):
            c.put(name, v, "f32")
        err, res = c.call("train.step", {"nodes": nodes, "loss": "loss", "params": names, "fuse": fuse,
                                         "optimizer": {"type": "sgd", "lr": lr}, "precision": "bf16"})
        check(err is None, "mlp step (fuse %s): %s" % (fuse, err))
        if err is not None:
            return
        check(abs(res["loss"] - want_loss) <= 1e-5 * abs(want_loss), "mlp step: loss %.8g, NumPy %.8g"
              % (res["loss"], want_loss))
        for name, w, pw, old in zip(names, want, plain, init):
            err, st = c.call("tensor.stat", {"name": name})
            check(st["dtype"] == "f32", "%s is %s after a bf16 step, want f32 (master weights)" % (name, st["dtype"]))
            got = get(c, name)
            # the update lr * grad, to f32 accumulation's error of its scale
            scale = np.abs(w - old).max()
            tol = 2e-5 * scale + 4 * 2.0**-24 * np.abs(old).max()
            check(np.abs(got - w).max() <= tol, "mlp step (fuse %s): %s off NumPy's bf16 step by %.3g (tol %.3g)"
                  % (fuse, name, np.abs(got - w).max(), tol))
            if name.startswith("ml.w"):
                check(np.abs(pw - w).max() > 10 * tol, "mlp step: %s's bf16 and f32 updates too close to tell"
                      % name)


def models(c):
    """precision with model.define: stored, shown, used by the model's steps,
    model.predict and model.evaluate; overridden by a step's own."""
    x = f32(rng.uniform(-1, 1, size=(16, 24)))
    w = f32(rng.uniform(-1, 1, size=(24, 8)))
    c.put("md.x", x, "f32")
    c.put("md.w", w, "f32")
    nodes = [{"id": "y", "op": "matmul", "inputs": ["in", "md.w"]},
             {"id": "loss", "op": "mean", "inputs": ["y"]}]
    inputs = [{"name": "in", "dtype": "f32", "shape": [1, 24]}]
    err, res = c.call("model.define", {"name": "md.m", "nodes": nodes, "loss": "loss", "params": ["md.w"],
                                       "inputs": inputs, "precision": "bf16", "outputs": ["y"]})
    check(err is None, "model.define precision bf16: %s" % (err,))
    if err is not None:
        return
    check(res.get("precision") == "bf16", "model.define's result shows precision %r" % res.get("precision"))
    err, st = c.call("model.stat", {"name": "md.m"})
    check(st.get("precision") == "bf16" and st["definition"].get("precision") == "bf16",
          "model.stat: precision %r, definition %r" % (st.get("precision"), st["definition"].get("precision")))
    want = bf16(x) @ bf16(w)
    for prec, ref in ((None, want), ("f32", x @ w), ("bf16", want)):
        p = {"model": "md.m", "data": {"in": "md.x"}, "outputs": ["y"], "grads": True}
        if prec:
            p["precision"] = prec
        err, res = c.call("train.step", p)
        check(err is None, "model step precision %s: %s" % (prec, err))
        if err is None:
            y = harness.result_array(res["outputs"]["y"]).astype(np.float64)
            check(np.abs(y - ref).max() <= 1e-5, "model step precision %s: off by %.3g"
                  % (prec, np.abs(y - ref).max()))
    err, res = c.call("model.predict", {"model": "md.m", "inputs": {"in": "md.x"}})
    check(err is None, "model.predict: %s" % (err,))
    if err is None:
        y = harness.result_array(res["outputs"]["y"]).astype(np.float64)
        check(np.abs(y - want).max() <= 1e-5, "model.predict of a bf16 model: off its product by %.3g"
              % np.abs(y - want).max())
    err, res = c.call("model.evaluate", {"model": "md.m", "data": {"in": "md.x"}})
    check(err is None and abs(res["loss"] - want.mean()) <= 1e-6 < abs(want.mean() - (x @ w).mean()),
          "model.evaluate of a bf16 model: %s, want %.8g (f32 %.8g)" % (err or res["loss"], want.mean(),
                                                                         (x @ w).mean()))
    err, res = c.call("model.define", {"name": "md.m2", "nodes": nodes, "loss": "loss", "params": ["md.w"],
                                       "inputs": inputs})
    check(err is None and res.get("precision") == "f32", "a model without precision: %r %r"
          % (err, res and res.get("precision")))
    c.call("model.delete", {"name": "md.m"})
    c.call("model.delete", {"name": "md.m2"})


def errors(c):
    c.put("er.w", f32(np.ones((2, 2))), "f32")
    nodes = [{"id": "y", "op": "matmul", "inputs": ["in", "er.w"]}, {"id": "loss", "op": "sum", "inputs": ["y"]}]
    for method, extra in (("train.step", {"data": {"in": "er.w"}}),
                          ("model.define", {"name": "er.m", "inputs": [{"name": "in", "dtype": "f32", "shape": [2, 2]}]}),
                          ("train.run", {"data": {"in": "er.w"}, "batch_size": 1, "steps": 1})):
        for value, words in (("fp8", "\"f32\", \"bf16\" or \"f16\""), (3, "")):
            p = dict(extra, nodes=nodes, loss="loss", params=["er.w"], precision=value)
            err, _ = c.call(method, p)
            check(err is not None and err["name"] == "INVALID_ARGUMENT" and words in err["message"],
                  "%s precision %r: %r" % (method, value, err))


def tensorctl(d):
    """tensorctl model define / step --precision; model stat shows it."""
    ctl = os.environ.get("TENSORCTL_BIN")
    if not ctl:
        print("skip tensorctl: TENSORCTL_BIN is not set")
        return
    c = harness.Client(d.sock)
    x = f32(rng.uniform(-1, 1, size=(8, 16)))
    w = f32(rng.uniform(-1, 1, size=(16, 4)))
    c.put("ct.x", x, "f32")
    c.put("ct.w", w, "f32")
    nodes = [{"id": "y", "op": "matmul", "inputs": ["ct.x", "ct.w"]}, {"id": "loss", "op": "sum", "inputs": ["y"]}]

    def run(*args):
        return subprocess.run([ctl, "--socket", d.sock] + list(args), capture_output=True, text=True, timeout=60)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "m.json")
        with open(path, "w") as f:
            json.dump({"nodes": nodes, "loss": "loss", "params": ["ct.w"], "outputs": ["y"]}, f)
        r = run("--json", "model", "define", "ct.m", path, "--precision", "bf16")
        check(r.returncode == 0 and json.loads(r.stdout).get("precision") == "bf16",
              "tensorctl model define --precision bf16: %d %s %s" % (r.returncode, r.stdout[-300:], r.stderr))
        r = run("model", "stat", "ct.m")
        check(r.returncode == 0 and "precision  bf16" in r.stdout, "tensorctl model stat: %s" % r.stdout)
        r = run("model", "stat", "ct.m", "--precision", "bf16")
        check(r.returncode != 0 and "--precision" in r.stderr, "model stat --precision: %s" % r.stderr)
        spath = os.path.join(tmp, "s.json")
        with open(spath, "w") as f:
            json.dump({"nodes": nodes, "loss": "loss", "params": ["ct.w"], "outputs": ["y"]}, f)
        r = run("--json", "step", spath, "--precision", "bf16")
        check(r.returncode == 0, "tensorctl step --precision bf16: %s" % r.stderr)
        if r.returncode == 0:
            ys = json.loads(r.stdout)["outputs"]["y"]
            y = np.array(ys["data"], dtype=np.float64).reshape(ys["shape"])
            want = bf16(x) @ bf16(w)
            check(y.shape == want.shape and np.abs(y - want).max() <= 1e-5,
                  "tensorctl step --precision bf16: not the bf16 product")
        r = run("step", spath, "--precision", "fp8")
        check(r.returncode != 0 and "precision" in r.stderr, "tensorctl step --precision fp8: %s" % r.stderr)
    c.call("model.delete", {"name": "ct.m"})


def chars(c):
    """The chars transformer (examples/chars) a few steps, f32 and bf16."""
    binary = os.environ["TENSORD_BIN"]
    if not os.path.exists(TEXT):
        print("skip chars: %s is missing" % TEXT)
        return
    out = {}
    for prec in ("f32", "bf16"):
        run = subprocess.run([sys.executable, CHARS, "--spawn", binary, "--chars", "3000", "--context", "16",
                              "--dim", "32", "--heads", "2", "--layers", "1", "--batch", "16", "--steps", "10",
                              "--lr", "1e-2", "--generate", "8", "--samples", "1", "--precision", prec],
                             capture_output=True, text=True, timeout=240)
        check(run.returncode == 0, "chars --precision %s exited %d: %s" % (prec, run.returncode, run.stderr[-2000:]))
        if run.returncode != 0:
            return
        out[prec] = json.loads(run.stdout.strip().splitlines()[-1])
    f, b = out["f32"], out["bf16"]
    print("chars: initial loss f32 %.5f bf16 %.5f; after 10 steps f32 %.5f bf16 %.5f"
          % (f["initial_loss"], b["initial_loss"], f["eval_loss"], b["eval_loss"]))
    check(b.get("precision") == "bf16", "chars: the model's precision is %r" % b.get("precision"))
    for key in ("initial_loss", "eval_loss"):
        check(np.isfinite(b[key]) and abs(b[key] - f[key]) <= 2e-2 * abs(f[key]),
              "chars %s: bf16 %.5f, f32 %.5f" % (key, b[key], f[key]))

def training_curves(c):
    """8 SGD steps of a 784-64-10 MLP on digits-shaped data, f32 and bf16:
    losses finite and close; parameters stay f32 (mixed_common.curves)."""
    curves(c, rng, "bf16", check)


def main():
    with harness.Daemon().start() as d:
        c = harness.Client(d.sock)
        products(c)
        mlp_step(c)
        models(c)
        errors(c)
        training_curves(c)
        tensorctl(d)
    chars(c)
    print("%d checks, %d failed" % (checks, len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""Gradient checks of train.step (docs/training.md): for every op with a
backward rule, the gradients the daemon computes (train.step with
grads: true and no optimizer, stored as `<param>.grad`) are compared with
central finite differences of a float64 NumPy reference of the same loss.

The loss of a case is  sum(op(inputs) * R)  (or mean) with a fixed random R
of the result's shape, built from mul + sum nodes, so every element of the
op's result carries a different weight. Inputs are drawn away from kinks
(relu/abs at 0, maximum/minimum ties, clamp bounds) and outside the domains
where the op is undefined. Parameters are f32 tensors; the finite
differences run in float64 on the f32-rounded inputs, so what is measured is
the daemon's f32 arithmetic, held to 1e-4 of the gradient's scale plus
1e-3 of each element (looser than f32 rounding, far tighter than any wrong
rule).

Run with /usr/bin/python3; $TENSORD_BIN names the daemon."""
import math
import os
import sys

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "ops"))

import numpy as np  # noqa: E402

import harness  # noqa: E402
import ref_attention  # noqa: E402
import ref_sort  # noqa: E402

rng = np.random.default_rng(20240612)
FD_EPS = 1e-5       # float64 central differences: truncation error ~ eps^2
# The daemon's gradients agree with float64 to ~1e-7 of their scale; these
# bounds leave room for f32 rounding and still catch a rule that is off by a
# factor, a sign, a missing term or a broadcast summed over the wrong axis.
ATOL, RTOL = 1e-4, 1e-3


# ---- input generators ------------------------------------------------------

def u(shape, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, size=shape)


def away(shape, lo=-2.0, hi=2.0, gap=0.15):
    """Uniform on [lo, hi] without (-gap, gap): no kink at 0."""
    x = rng.uniform(gap, max(abs(lo), abs(hi)), size=shape)
    return x * rng.choice([-1.0, 1.0], size=shape)


def pos(shape, lo=0.5, hi=2.0):
    return rng.uniform(lo, hi, size=shape)


def separated(shape_a, shape_b, gap=0.1):
    """Two arrays whose broadcast elements never come closer than `gap`."""
    a = u(shape_a, -2, 2)
    b = u(shape_b, -2, 2)
    for _ in range(1000):
        if np.all(np.abs(a - b) > gap):
            return a, b
        b = u(shape_b, -2, 2)
    raise AssertionError("no separated inputs for %s, %s" % (shape_a, shape_b))


def q32(a):
    return np.asarray(a, dtype=np.float32).astype(np.float64)


# ---- NumPy references (float64) -------------------------------------------

def softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def log_softmax(x, axis=-1):
    m = x.max(axis=axis, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=axis, keepdims=True))


def reduce_loss(per, reduction, n=None):
    if reduction == "none":
        return per
    if reduction == "sum":
        return per.sum()
    return per.sum() / (n if n is not None else per.size)


def cross_entropy(x, t, reduction="mean", label_smoothing=0.0):
    ls = log_softmax(x, 1)
    nll = -ls[np.arange(len(t)), t]
    per = (1 - label_smoothing) * nll + label_smoothing * (-ls.mean(axis=1))
    return reduce_loss(per, reduction, len(t))


def nll(x, t, reduction="mean"):
    return reduce_loss(-x[np.arange(len(t)), t], reduction, len(t))


def bce_logits(x, t, reduction="mean"):
    per = np.maximum(x, 0) - x * t + np.log1p(np.exp(-np.abs(x)))
    return reduce_loss(per, reduction)


def mse(p, t, reduction="mean"):
    return reduce_loss((p - t) ** 2, reduction)


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def erf(x):
    return np.vectorize(math.erf)(x)


def gelu(x, approximate="none"):
    if approximate == "tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + erf(x / math.sqrt(2)))


def class_loss_ignore(x, t, reduction, ignore_index, label_smoothing=0.0, log_probs=False):
    """cross_entropy / nll with ignore_index: ignored samples give 0 and the
    mean divides by the number of samples kept (PyTorch)."""
    keep = t != ignore_index
    ls = x if log_probs else log_softmax(x, 1)
    tt = np.where(keep, t, 0)
    per = -ls[np.arange(len(t)), tt]
    if label_smoothing:
        per = (1 - label_smoothing) * per + label_smoothing * (-ls.mean(axis=1))
    per = np.where(keep, per, 0.0)
    return reduce_loss(per, reduction, keep.sum())


def batch_norm(x, rm=None, rv=None, w=None, b=None, training=False, eps=1e-5):
    axes = tuple(d for d in range(x.ndim) if d != 1)
    view = (1, -1) + (1,) * (x.ndim - 2)
    if training:
        mean = x.mean(axis=axes, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    else:
        mean, var = rm.reshape(view), rv.reshape(view)
    y = (x - mean) / np.sqrt(var + eps)
    if w is not None:
        y = y * w.reshape(view)
    if b is not None:
        y = y + b.reshape(view)
    return y


def gather_ref(x, idx, axis=0):
    """gather: an index in [-n, 0) counts from the end, others outside [0, n) give zeros."""
    n = x.shape[axis]
    i = np.where(idx < 0, idx + n, idx)
    valid = (i >= 0) & (i < n)
    out = np.take(x, np.where(valid, i, 0), axis=axis)
    mask = valid.reshape((1,) * axis + valid.shape + (1,) * (x.ndim - axis - 1))
    return np.where(mask, out, 0.0)


def index_add_ref(x, idx, src, axis=0):
    n = x.shape[axis]
    out = x.copy()
    i = np.where(idx < 0, idx + n, idx).reshape(-1)
    s = np.moveaxis(src.reshape(x.shape[:axis] + (-1,) + x.shape[axis + 1:]), axis, 0)
    o = np.moveaxis(out, axis, 0)
    for k, v in enumerate(i):
        if 0 <= v < n:
            o[v] += s[k]
    return out


def slice_ref(x, starts, ends, steps=None, axes=None):
    axes = list(range(len(starts))) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    idx = [slice(None)] * x.ndim
    for a, b, e, st in zip(axes, starts, ends, steps):
        idx[a] = slice(b, e, st)
    return x[tuple(idx)]


def pad_ref(x, pads, axes=None, value=0.0):
    k = len(pads) // 2
    axes = list(range(x.ndim - k, x.ndim)) if axes is None else [a % x.ndim for a in axes]
    width = [(0, 0)] * x.ndim
    for j, a in enumerate(axes):
        width[a] = (pads[2 * j], pads[2 * j + 1])
    return np.pad(x, width, mode="constant", constant_values=value)


UNARY = {
    "neg": (lambda x: -x, away),
    "abs": (np.abs, away),
    "exp": (np.exp, u),
    "log": (np.log, pos),
    "sqrt": (np.sqrt, pos),
    "rsqrt": (lambda x: 1 / np.sqrt(x), pos),
    "sin": (np.sin, lambda s: u(s, -3, 3)),
    "cos": (np.cos, lambda s: u(s, -3, 3)),
    "tanh": (np.tanh, lambda s: u(s, -2, 2)),
    "sigmoid": (sigmoid, lambda s: u(s, -4, 4)),
    "relu": (lambda x: np.maximum(x, 0), away),
    "silu": (lambda x: x * sigmoid(x), lambda s: u(s, -4, 4)),
    "softplus": (lambda x: np.log1p(np.exp(x)), lambda s: u(s, -4, 4)),
    "copy": (lambda x: x, u),
    "erf": (erf, lambda s: u(s, -2.5, 2.5)),
}

BINARY = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "pow": lambda a, b: a ** b,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "relu_grad": lambda g, x: np.where(x > 0, g, 0.0),
}


# ---- the check ---------------------------------------------------------------

class Case:
    """One gradient check. `inputs` is a list of (array, kind) with kind
    'p' (f32 parameter), 'c' (f32 constant), 'i' (i32) or 'u8';
    `ref(*arrays)` is the op in float64."""

    def __init__(self, label, op, inputs, ref, attrs=None, reduce="sum"):
        self.label, self.op, self.inputs, self.ref = label, op, inputs, ref
        self.attrs, self.reduce = attrs, reduce


def fd_grad(loss, arrays, k):
    """Central differences of loss(arrays) with respect to arrays[k]."""
    x = arrays[k]
    g = np.zeros_like(x)
    flat, gf = x.reshape(-1), g.reshape(-1)
    for j in range(flat.size):
        old = flat[j]
        flat[j] = old + FD_EPS
        hi = loss(arrays)
        flat[j] = old - FD_EPS
        lo = loss(arrays)
        flat[j] = old
        gf[j] = (hi - lo) / (2 * FD_EPS)
    return g


class GradChecker:
    def __init__(self, client):
        self.c = client
        self.checks = 0       # gradients compared (one per parameter per case)
        self.cases = 0
        self.failures = 0
        self.serial = 0

    def fail(self, what):
        self.failures += 1
        print("FAIL", what)

    def run(self, case):
        self.cases += 1
        self.serial += 1
        pre = "g%d/" % self.serial
        names, arrays, params = [], [], []
        for j, (a, kind) in enumerate(case.inputs):
            name = "%sin%d" % (pre, j)
            if kind in ("p", "c"):
                a = q32(a)
                self.c.put(name, a, "f32")
            elif kind == "i":
                a = np.asarray(a, dtype=np.int64)
                self.c.put(name, a.astype(np.int32), "i32")
            else:
                a = np.asarray(a, dtype=np.int64)
                self.c.put(name, a.astype(np.uint8), "u8")
            names.append(name)
            arrays.append(a)
            if kind == "p":
                params.append(j)
        shapes = [list(np.shape(a)) for a, _ in case.inputs]
        what = "%s (%s %s %s, loss %s)" % (case.label, case.op, shapes, case.attrs or {}, case.reduce)
        y = np.asarray(case.ref(*arrays), dtype=np.float64)
        r = q32(rng.uniform(-1, 1, size=y.shape))
        self.c.put(pre + "R", r, "f32")
        node = {"id": "y", "op": case.op, "inputs": names}
        if case.attrs:
            node["attrs"] = case.attrs
        nodes = [node,
                 {"id": "yr", "op": "mul", "inputs": ["y", pre + "R"]},
                 {"id": "loss", "op": case.reduce, "inputs": ["yr"]}]
        err, res = self.c.call("train.step", {"nodes": nodes, "loss": "loss",
                                              "params": [names[j] for j in params], "grads": True})
        if err is not None:
            self.checks += len(params)
            self.fail("%s: %s: %s" % (what, err.get("name"), err.get("message")))
            return

        def loss(arrs):
            v = np.asarray(case.ref(*arrs), dtype=np.float64) * r
            return v.sum() if case.reduce == "sum" else v.mean()

        want_loss = loss(arrays)
        if not np.isclose(res["loss"], want_loss, atol=1e-4, rtol=1e-4):
            self.fail("%s: loss %r, want %r" % (what, res["loss"], want_loss))
        for j in params:
            self.checks += 1
            err, got = self.c.call("tensor.get", {"name": names[j] + ".grad"})
            if err is not None:
                self.fail("%s: no gradient of input %d: %s" % (what, j, err))
                continue
            if got["dtype"] != "f32" or got["shape"] != list(np.shape(arrays[j])):
                self.fail("%s: gradient of input %d is %s %s, want f32 %s" % (
                    what, j, got["dtype"], got["shape"], list(np.shape(arrays[j]))))
                continue
            g = harness.result_array(got).astype(np.float64)
            want = fd_grad(loss, [a.astype(np.float64) if kind in "pc" else a
                                  for a, (_, kind) in zip(arrays, case.inputs)], j)
            scale = max(1.0, float(np.abs(want).max(initial=0.0)))
            bad = np.abs(g - want) > ATOL * scale + RTOL * np.abs(want)
            if bad.any():
                i = tuple(np.argwhere(bad)[0])
                self.fail("%s: d/d input %d: %d of %d elements differ; first at %s: got %r want %r" % (
                    what, j, int(bad.sum()), bad.size, i, g[i], want[i]))
        for n in names + [pre + "R"] + [names[j] + ".grad" for j in params]:
            self.c.call("tensor.delete", {"name": n})


# ---- the cases -----------------------------------------------------------

BROADCAST_PAIRS = [
    ((3, 4), (3, 4)),
    ((3, 4), (4,)),
    ((2, 1, 3), (1, 4, 1)),
    ((4,), ()),
    ((2, 3), (2, 1)),
]


def binary_inputs(op, sa, sb):
    if op == "div":
        return u(sa, -2, 2), away(sb, -2, 2, gap=0.5)
    if op == "pow":
        return pos(sa), u(sb, -1.5, 1.5)
    if op in ("maximum", "minimum"):
        return separated(sa, sb)
    if op == "relu_grad":
        return u(sa, -2, 2), away(sb, -2, 2, gap=0.5)
    return u(sa, -2, 2), u(sb, -2, 2)


def cases():
    out = []
    # elementwise binary, tensor-tensor, with broadcasting; both operands parameters
    for op, f in BINARY.items():
        for sa, sb in BROADCAST_PAIRS:
            a, b = binary_inputs(op, sa, sb)
            out.append(Case("binary", op, [(a, "p"), (b, "p")], f))
        # one operand a constant: only the other gets a gradient
        a, b = binary_inputs(op, (3, 4), (4,))
        out.append(Case("binary, b constant", op, [(a, "p"), (b, "c")], f))
        a, b = binary_inputs(op, (2, 3), (3,))
        out.append(Case("binary, a constant", op, [(a, "c"), (b, "p")], f))
    # tensor-scalar forms, plain and reversed
    for op, f in BINARY.items():
        for s, rev in ((0.7, False), (1.3, True), (-0.4, False)):
            if op in ("pow",) and rev and s <= 0:
                continue
            x = (pos((3, 4)) if op == "pow" and not rev else
                 away((3, 4), gap=0.5) if op == "div" and rev else
                 u((3, 4), -2, 2))
            if op in ("maximum", "minimum"):
                x = np.where(np.abs(x - s) < 0.1, x + 0.3, x)
            if op == "relu_grad" and rev:
                x = away((3, 4), gap=0.5)
            fn = (lambda x, f=f, s=s: f(s, x)) if rev else (lambda x, f=f, s=s: f(x, s))
            attrs = {"scalar": s}
            if rev:
                attrs["reverse"] = True
            out.append(Case("scalar%s" % (" reversed" if rev else ""), op, [(x, "p")], fn, attrs))
    # where: condition u8 (no gradient), a and b broadcast against it
    cond = rng.integers(0, 2, size=(3, 4))
    out.append(Case("where", "where", [(cond, "u8"), (u((3, 4)), "p"), (u((3, 4)), "p")],
                    lambda c, a, b: np.where(c != 0, a, b)))
    out.append(Case("where broadcast", "where", [(cond, "u8"), (u((3, 1)), "p"), (u((4,)), "p")],
                    lambda c, a, b: np.where(c != 0, a, b)))
    out.append(Case("where broadcast cond", "where", [(rng.integers(0, 2, size=(4,)), "u8"),
                                                     (u((2, 3, 4)), "p"), (u(()), "p")],
                    lambda c, a, b: np.where(c != 0, a, b)))
    # elementwise unary
    for op, (f, gen) in UNARY.items():
        for shape in ((3, 4), (5,), ()):
            out.append(Case("unary", op, [(gen(shape), "p")], f))
    x = u((3, 4), -2, 2)
    for attrs in ({"min": -0.5}, {"max": 0.6}, {"min": -0.5, "max": 0.6}):
        lo, hi = attrs.get("min", -np.inf), attrs.get("max", np.inf)
        xc = x.copy()
        for bound in (lo, hi):
            if np.isfinite(bound):
                xc = np.where(np.abs(xc - bound) < 0.08, xc + 0.2, xc)
        out.append(Case("unary", "clamp", [(xc, "p")],
                        lambda v, lo=lo, hi=hi: np.clip(v, lo, hi), attrs))
    # matmul: plain, batched, batch-broadcast both ways
    for sa, sb in (((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((4, 5), (2, 5, 3)),
                   ((2, 1, 3, 4), (3, 4, 2)), ((2, 3, 4), (2, 4, 2)), ((1, 2), (2, 1)),
                   ((2, 2, 3, 4), (4, 5))):  # the last: dB one product over the batch's rows
        out.append(Case("matmul", "matmul", [(u(sa), "p"), (u(sb), "p")], np.matmul))
    out.append(Case("matmul, b constant", "matmul", [(u((3, 4)), "p"), (u((2, 4, 5)), "c")], np.matmul))
    # matmul reading either operand transposed (its gradient is a product
    # in another layout, again without a copy), batched and broadcast too
    for ta in (False, True):
        for tb in (False, True):
            for sa, sb in (((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((4, 5), (2, 5, 3)), ((2, 2, 3, 4), (4, 5))):
                st_a = sa[:-2] + (sa[-1], sa[-2]) if ta else sa
                st_b = sb[:-2] + (sb[-1], sb[-2]) if tb else sb
                out.append(Case("matmul ta=%d tb=%d" % (ta, tb), "matmul", [(u(st_a), "p"), (u(st_b), "p")],
                                lambda a, b, ta=ta, tb=tb: np.matmul(np.swapaxes(a, -1, -2) if ta else a,
                                                                     np.swapaxes(b, -1, -2) if tb else b),
                                {"transpose_a": ta, "transpose_b": tb}))
    # a 1-D operand beside a transposed one: [4] @ (b stored [5, 4])^T, (a stored [4, 3])^T @ [4]
    out.append(Case("matmul 1-D a, tb", "matmul", [(u((4,)), "p"), (u((5, 4)), "p")],
                    lambda a, b: np.matmul(a, b.T), {"transpose_b": True}))
    out.append(Case("matmul ta, 1-D b", "matmul", [(u((4, 3)), "p"), (u((4,)), "p")],
                    lambda a, b: np.matmul(a.T, b), {"transpose_a": True}))
    # sum / mean with axis and keepdims
    for op, f in (("sum", np.sum), ("mean", np.mean)):
        for shape, attrs in (((3, 4), None), ((3, 4), {"axis": 0}), ((3, 4), {"axis": 1, "keepdims": True}),
                             ((2, 3, 4), {"axis": [0, 2]}), ((2, 3, 4), {"axis": -1}),
                             ((2, 3, 4), {"axis": [1], "keepdims": True}),
                             ((2, 3, 4), {"axis": [0, 1, 2], "keepdims": True}), ((5,), None)):
            a = attrs or {}
            ax = a.get("axis")
            ax = tuple(ax) if isinstance(ax, list) else ax
            out.append(Case("reduce", op, [(u(shape), "p")],
                            lambda x, f=f, ax=ax, kd=a.get("keepdims", False): f(x, axis=ax, keepdims=kd),
                            attrs))
    # softmax / log_softmax along different axes
    for op, f in (("softmax", softmax), ("log_softmax", log_softmax)):
        for shape, axis in (((3, 5), None), ((3, 5), 0), ((2, 3, 4), 1), ((2, 3, 4), -1), ((2, 3, 4), 0)):
            x = u(shape, -3, 3)
            out.append(Case("softmax", op, [(x, "p")],
                            lambda v, f=f, axis=axis: f(v, -1 if axis is None else axis),
                            None if axis is None else {"axis": axis}))
    # layout
    out.append(Case("layout", "reshape", [(u((2, 6)), "p")], lambda x: x.reshape(3, 4), {"shape": [3, 4]}))
    out.append(Case("layout", "reshape", [(u((2, 3, 4)), "p")], lambda x: x.reshape(-1, 4), {"shape": [-1, 4]}))
    out.append(Case("layout", "transpose", [(u((3, 4)), "p")], lambda x: x.T))
    out.append(Case("layout", "transpose", [(u((2, 3, 4)), "p")], lambda x: np.swapaxes(x, 0, 2),
                    {"dim0": 0, "dim1": 2}))
    out.append(Case("layout", "transpose", [(u((2, 3, 4)), "p")], lambda x: np.swapaxes(x, 1, -1),
                    {"dim0": 1, "dim1": -1}))
    out.append(Case("layout", "permute", [(u((2, 3, 4)), "p")], lambda x: np.transpose(x, (2, 0, 1)),
                    {"dims": [2, 0, 1]}))
    out.append(Case("layout", "permute", [(u((2, 3, 4, 2)), "p")], lambda x: np.transpose(x, (1, 3, 0, 2)),
                    {"dims": [1, 3, 0, 2]}))
    # losses, each reduction
    for red in ("mean", "sum", "none"):
        attrs = {"reduction": red}
        out.append(Case("loss", "mse", [(u((3, 4)), "p"), (u((3, 4)), "p")],
                        lambda p, t, red=red: mse(p, t, red), attrs))
        out.append(Case("loss, target constant", "mse", [(u((6,)), "p"), (u((6,)), "c")],
                        lambda p, t, red=red: mse(p, t, red), attrs))
        out.append(Case("loss", "binary_cross_entropy_with_logits",
                        [(u((3, 4), -3, 3), "p"), (u((3, 4), 0, 1), "p")],
                        lambda x, t, red=red: bce_logits(x, t, red), attrs))
        labels = rng.integers(0, 5, size=4)
        for ls in (0.0, 0.1, 0.3):
            a = dict(attrs)
            if ls:
                a["label_smoothing"] = ls
            out.append(Case("loss", "cross_entropy", [(u((4, 5), -3, 3), "p"), (labels, "i")],
                            lambda x, t, red=red, ls=ls: cross_entropy(x, t, red, ls), a))
        out.append(Case("loss", "nll", [(u((4, 5), -3, 0), "p"), (labels, "i")],
                        lambda x, t, red=red: nll(x, t, red), attrs))
    out.append(Case("loss, default reduction", "cross_entropy", [(u((3, 7)), "p"), (rng.integers(0, 7, size=3), "i")],
                    lambda x, t: cross_entropy(x, t)))
    # a few cases with the mean as the final reduction
    out.append(Case("mean loss", "mul", [(u((3, 4)), "p"), (u((4,)), "p")], BINARY["mul"], reduce="mean"))
    out.append(Case("mean loss", "matmul", [(u((2, 3, 4)), "p"), (u((4, 5)), "p")], np.matmul, reduce="mean"))
    out.append(Case("mean loss", "softmax", [(u((3, 5)), "p")], softmax, reduce="mean"))
    return out + more_cases()


def axis_of(attrs):
    ax = (attrs or {}).get("axis")
    return tuple(ax) if isinstance(ax, list) else ax


def distinct(shape, lo=-2.0, hi=2.0, gap=0.05):
    """Values on [lo, hi] no two closer than `gap`: no ties anywhere."""
    n = int(np.prod(shape, dtype=np.int64))
    v = np.linspace(lo, hi, n)
    assert n < 2 or v[1] - v[0] > gap
    return rng.permutation(v).reshape(shape)


REDUCE_AXES = (((3, 4), None), ((3, 4), {"axis": 0}), ((3, 4), {"axis": 1, "keepdims": True}),
               ((2, 3, 4), {"axis": [0, 2]}), ((2, 3, 4), {"axis": -1}),
               ((2, 3, 4), {"axis": [1], "keepdims": True}), ((5,), None))


def more_cases():
    """The rules added for issue 4: gelu/erf, prod/max/min/var/std, slice,
    concat, stack, pad, gather/index_select/index_add, matmul with 1-D
    operands, cross_entropy/nll with ignore_index, batch_norm."""
    out = []
    for approx in ("none", "tanh"):
        for shape in ((3, 4), (5,), ()):
            attrs = {"approximate": approx} if approx == "tanh" or shape == (5,) else None
            out.append(Case("unary", "gelu", [(u(shape, -3, 3), "p")],
                            lambda x, a=approx: gelu(x, a), attrs))
    # prod: plain, and rows holding one zero or two (the product of the
    # others, no division by zero)
    for shape, attrs in REDUCE_AXES:
        ax, kd = axis_of(attrs), (attrs or {}).get("keepdims", False)
        out.append(Case("reduce", "prod", [(away(shape, 0.5, 1.5, gap=0.5), "p")],
                        lambda x, ax=ax, kd=kd: np.prod(x, axis=ax, keepdims=kd), attrs))
    z = away((3, 4), 0.5, 1.5, gap=0.5)
    z[0, 1] = 0.0            # row 0: one zero
    z[1, 0] = z[1, 3] = 0.0  # row 1: two zeros; row 2: none
    out.append(Case("reduce, zeros", "prod", [(z, "p")], lambda x: np.prod(x, axis=1), {"axis": 1}))
    out.append(Case("reduce, zeros", "prod", [(z, "p")], lambda x: np.prod(x, axis=0, keepdims=True),
                    {"axis": 0, "keepdims": True}))
    # max / min without ties (finite differences are one-sided at a tie;
    # ties are checked on their own in ties())
    for op, f in (("max", np.max), ("min", np.min)):
        for shape, attrs in REDUCE_AXES:
            ax, kd = axis_of(attrs), (attrs or {}).get("keepdims", False)
            out.append(Case("reduce", op, [(distinct(shape), "p")],
                            lambda x, f=f, ax=ax, kd=kd: f(x, axis=ax, keepdims=kd), attrs))
    # var / std with each correction
    for op, f in (("var", np.var), ("std", np.std)):
        for shape, attrs in REDUCE_AXES:
            for corr in (None, 0, 2.5):
                if corr == 2.5 and shape != (2, 3, 4):
                    continue
                a = dict(attrs or {})
                if corr is not None:
                    a["correction"] = corr
                ax, kd = axis_of(a), a.get("keepdims", False)
                out.append(Case("reduce", op, [(u(shape, -2, 2), "p")],
                                lambda x, f=f, ax=ax, kd=kd, c=(1 if corr is None else corr):
                                f(x, axis=ax, keepdims=kd, ddof=c), a or None))
    # slice: steps, negative and clamped bounds, several axes, empty
    x3 = (2, 5, 7)
    for attrs in ({"starts": [1], "ends": [5]},
                  {"starts": [0, -4], "ends": [2, -1]},
                  {"starts": [1], "ends": [2**40], "steps": [3], "axes": [-1]},
                  {"starts": [-100, 0, 1], "ends": [1, 5, 7], "steps": [1, 2, 2]},
                  {"starts": [4, 6], "ends": [1, 7], "axes": [1, 2]},
                  {"starts": [0], "ends": [7], "steps": [7], "axes": [2]}):
        out.append(Case("layout", "slice", [(u(x3), "p")],
                        lambda x, a=attrs: slice_ref(x, a["starts"], a["ends"], a.get("steps"), a.get("axes")),
                        attrs))
    out.append(Case("layout", "slice", [(u((9,)), "p")], lambda x: x[2:8:4],
                    {"starts": [2], "ends": [8], "steps": [4]}))
    # concat / stack: axes, one input, a constant input
    a, b, c = (2, 3, 4), (2, 1, 4), (2, 2, 4)
    out.append(Case("layout", "concat", [(u(a), "p"), (u(b), "p"), (u(c), "p")],
                    lambda *xs: np.concatenate(xs, axis=1), {"axis": 1}))
    out.append(Case("layout", "concat", [(u((3, 2)), "p"), (u((3, 4)), "c"), (u((3, 1)), "p")],
                    lambda *xs: np.concatenate(xs, axis=-1), {"axis": -1}))
    out.append(Case("layout", "concat", [(u((2, 3)), "p"), (u((4, 3)), "p")],
                    lambda *xs: np.concatenate(xs, axis=0)))
    out.append(Case("layout", "concat", [(u((4,)), "p")], lambda x: x))
    for axis in (0, 1, -1):
        out.append(Case("layout", "stack", [(u((2, 3)), "p"), (u((2, 3)), "p"), (u((2, 3)), "c")],
                        lambda *xs, axis=axis: np.stack(xs, axis=axis), {"axis": axis}))
    out.append(Case("layout", "stack", [(u(()), "p"), (u(()), "p")], lambda *xs: np.stack(xs)))
    # pad: default (last) axes, explicit axes, a value (constant)
    for attrs in ({"pads": [1, 2]}, {"pads": [0, 1, 2, 0]}, {"pads": [1, 1], "axes": [0], "value": 0.5},
                  {"pads": [2, 0, 1, 3], "axes": [-1, 0]}):
        out.append(Case("layout", "pad", [(u((2, 3)), "p")],
                        lambda x, a=attrs: pad_ref(x, a["pads"], a.get("axes"), a.get("value", 0.0)), attrs))
    # gather / index_select of a parameter: repeated, negative and
    # out-of-range indices; axis 0 (embeddings), 1 and -1
    idx = np.array([[0, 3, 3, 1], [-1, 4, 5, -6]])
    out.append(Case("embedding", "gather", [(u((5, 3)), "p"), (idx, "i")], gather_ref))
    out.append(Case("gather", "index_select", [(u((2, 4, 3)), "p"), (np.array([2, 0, 2, -1]), "i")],
                    lambda x, i: gather_ref(x, i, 1), {"axis": 1}))
    out.append(Case("gather", "gather", [(u((2, 3)), "p"), (np.array([[2, 2], [0, 7]]), "i")],
                    lambda x, i: gather_ref(x, i, 1), {"axis": -1}))
    out.append(Case("gather", "gather", [(u((4, 2)), "p"), (np.array(1), "i")], gather_ref))
    out.append(Case("index_add", "index_add",
                    [(u((4, 3)), "p"), (np.array([1, 1, -1, 9, 0]), "i"), (u((5, 3)), "p")],
                    index_add_ref))
    out.append(Case("index_add", "index_add",
                    [(u((2, 3)), "p"), (np.array([[2, 0]]), "i"), (u((2, 1, 2)), "p")],
                    lambda x, i, s: index_add_ref(x, i, s, 1), {"axis": 1}))
    # matmul with a 1-D operand on either side (NumPy semantics)
    for sa, sb in (((4,), (4, 3)), ((4,), (2, 4, 3)), ((3, 4), (4,)), ((2, 3, 4), (4,)), ((4,), (4,)),
                   ((1, 2, 3, 4), (4,))):
        out.append(Case("matmul 1-D", "matmul", [(u(sa), "p"), (u(sb), "p")], np.matmul))
    # cross_entropy / nll with ignore_index, outside and inside [0, C)
    t1 = np.array([0, -100, 3, 4, -100, 1])
    t2 = np.array([2, 0, 2, 4, 1, 2])
    for red in ("mean", "sum", "none"):
        for t, ign in ((t1, -100), (t2, 2)):
            for ls in (0.0, 0.2):
                a = {"reduction": red, "ignore_index": ign}
                if ls:
                    a["label_smoothing"] = ls
                out.append(Case("loss ignore_index", "cross_entropy", [(u((6, 5), -3, 3), "p"), (t, "i")],
                                lambda x, t, red=red, ign=ign, ls=ls: class_loss_ignore(x, t, red, ign, ls), a))
            out.append(Case("loss ignore_index", "nll", [(u((6, 5), -3, 0), "p"), (t, "i")],
                            lambda x, t, red=red, ign=ign: class_loss_ignore(x, t, red, ign, log_probs=True),
                            {"reduction": red, "ignore_index": ign}))
    out.append(Case("loss ignore_index", "cross_entropy", [(u((3, 4)), "p"), (np.array([1, 7, 2]), "i")],
                    lambda x, t: class_loss_ignore(x, t, "mean", 7), {"ignore_index": 7}))
    # batch_norm: training (batch statistics) on (N, C) and (N, C, H, W), with
    # and without weight and bias; inference with every input a parameter
    for xs in ((4, 3), (2, 3, 2, 2)):
        C = xs[1]
        out.append(Case("batch_norm training", "batch_norm", [(u(xs, -2, 2), "p")],
                        lambda x: batch_norm(x, training=True), {"training": True}))
        out.append(Case("batch_norm training", "batch_norm",
                        [(u(xs, -2, 2), "p"), (u((C,)), "c"), (pos((C,)), "c"), (u((C,), 0.5, 1.5), "p"),
                         (u((C,)), "p")],
                        lambda x, rm, rv, w, b: batch_norm(x, rm, rv, w, b, training=True, eps=1e-3),
                        {"training": True, "eps": 1e-3}))
        out.append(Case("batch_norm inference", "batch_norm",
                        [(u(xs, -2, 2), "p"), (u((C,)), "p"), (pos((C,)), "p"), (u((C,), 0.5, 1.5), "p"),
                         (u((C,)), "p")],
                        batch_norm))
        out.append(Case("batch_norm inference", "batch_norm",
                        [(u(xs, -2, 2), "p"), (u((C,)), "c"), (pos((C,)), "p")],
                        lambda x, rm, rv: batch_norm(x, rm, rv, eps=0.1), {"eps": 0.1, "training": False}))
    out.append(Case("batch_norm mean loss", "batch_norm",
                    [(u((3, 2, 3), -2, 2), "p"), (u((2,)), "c"), (pos((2,)), "c"), (u((2,), 0.5, 1.5), "p")],
                    lambda x, rm, rv, w: batch_norm(x, rm, rv, w, training=True), {"training": True},
                    reduce="mean"))
    return out



def logsumexp(x, axis=-1, keepdims=False):
    m = x.max(axis=axis, keepdims=True)
    r = m + np.log(np.exp(x - m).sum(axis=axis, keepdims=True))
    return r if keepdims else np.squeeze(r, axis=axis)


def issue18_cases():
    """The ops of issue 18: logsumexp, cumsum, tril/triu, masked_fill, bmm,
    embedding, sort/topk (values; distinct inputs: no tie where the
    permutation would change); dropout in dropout_masks. argsort,
    topk_indices and multinomial have no gradient."""
    out = []
    for xs, attrs in (((3, 4), None), ((3, 4), {"axis": 0, "keepdims": True}), ((2, 3, 4), {"axis": 1}),
                      ((5,), {"axis": -1})):
        a = attrs or {}
        out.append(Case("logsumexp", "logsumexp", [(u(xs, -3, 3), "p")],
                        lambda x, a=a: logsumexp(x, a.get("axis", -1), a.get("keepdims", False)), attrs))
    for xs, attrs in (((3, 4), {"axis": 1}), ((3, 4), {"axis": 0, "reverse": True}), ((2, 3, 4), {"axis": -2}),
                      ((6,), {"axis": 0})):
        out.append(Case("cumsum", "cumsum", [(u(xs), "p")],
                        lambda x, a=attrs: ref_sort.cumsum(x, a["axis"], "f64", a.get("reverse", False)), attrs))
    for op, f in (("tril", np.tril), ("triu", np.triu)):
        for xs, k in (((4, 4), 0), ((3, 5), 1), ((2, 4, 3), -1)):
            out.append(Case(op, op, [(u(xs), "p")], lambda x, f=f, k=k: f(x, k), {"diagonal": k}))
    for xs, ms in (((3, 4), (3, 4)), ((2, 3, 4), (3, 1))):
        m = rng.integers(0, 2, size=ms)
        out.append(Case("masked_fill", "masked_fill", [(u(xs), "p"), (m, "u8")],
                        lambda x, m: np.where(np.broadcast_to(m, x.shape) != 0, -5.0, x), {"value": -5.0}))
    out.append(Case("bmm", "bmm", [(u((2, 3, 4)), "p"), (u((2, 4, 5)), "p")], np.matmul))
    out.append(Case("bmm", "bmm", [(u((2, 4, 3)), "p"), (u((2, 4, 5)), "p")],
                    lambda a, b: np.matmul(np.swapaxes(a, 1, 2), b), {"transpose_a": True}))
    idx = np.array([[0, 3, 3, 1], [4, 4, 2, 0]])
    out.append(Case("embedding", "embedding", [(u((5, 3)), "p"), (idx, "i")], lambda w, i: w[i]))
    for xs, attrs in (((3, 5), None), ((3, 5), {"axis": 0, "descending": True}), ((2, 3, 4), {"axis": 1})):
        a = attrs or {}
        out.append(Case("sort", "sort", [(distinct(xs), "p")],
                        lambda x, a=a: ref_sort.sort(x, a.get("axis", -1), a.get("descending", False)), attrs))
    for xs, attrs in (((3, 5), {"k": 2}), ((4, 3), {"k": 3, "axis": 0, "largest": False}),
                      ((2, 6, 2), {"k": 1, "axis": 1})):
        out.append(Case("topk", "topk", [(distinct(xs), "p")],
                        lambda x, a=attrs: ref_sort.topk(x, a["k"], a.get("axis", -1), a.get("largest", True))[0],
                        attrs))
    return out


def dropout_masks(gc):
    """dropout's gradient redraws the forward's mask from the node's seed.
    A training step may replace the seed before autograd (docs/training.md,
    "Randomness per step"), so the mask is not known here: the check is that
    forward and backward agree. With loss = sum(dropout(w) * R) the gradient
    is R / (1 - p) where kept and 0 elsewhere, and the loss is then exactly
    sum(w * grad); a gradient with another mask breaks both. Seeds past 2^53
    (what per-step seeds are) must reach the backward's dropout exactly."""
    c = gc.c
    for n, p, seed in ((40, 0.5, 7), (40, 0.2, 12345), (40, 0.5, 2**62 + 12345), (40, 0.5, -(2**60) - 1),
                       (12, 0.0, 3)):
        w, r = q32(u((n,))), q32(u((n,)))
        c.put("dw", w, "f32")
        c.put("dr", r, "f32")
        nodes = [{"id": "y", "op": "dropout", "inputs": ["dw"], "attrs": {"p": p, "seed": seed}},
                 {"id": "yr", "op": "mul", "inputs": ["y", "dr"]},
                 {"id": "loss", "op": "sum", "inputs": ["yr"]}]
        gc.cases += 1
        gc.checks += 1
        what = "dropout mask (p %g, seed %d)" % (p, seed)
        err, res = c.call("train.step", {"nodes": nodes, "loss": "loss", "params": ["dw"], "grads": True})
        if err is not None:
            gc.fail("%s: %s" % (what, err))
            continue
        g = harness.result_array(c.call("tensor.get", {"name": "dw.grad"})[1]).astype(np.float64)
        scale = float(np.float32(1.0 / (1.0 - p)))
        kept = g != 0
        if not np.allclose(g[kept], r[kept] * scale, rtol=1e-6, atol=0):
            gc.fail("%s: kept gradients are not R / (1 - p)" % what)
        elif p == 0 and not kept.all():
            gc.fail("%s: p = 0 dropped elements" % what)
        elif p > 0 and not 0 < kept.sum() < n:
            gc.fail("%s: %d of %d kept" % (what, kept.sum(), n))
        elif abs(res["loss"] - float((w * g).sum())) > 1e-5 * (1 + abs(res["loss"])):
            gc.fail("%s: loss %r but sum(w * grad) %r: the backward mask is not the forward's" % (
                what, res["loss"], float((w * g).sum())))


def composite(gc):
    """Graphs where gradients meet: a parameter used twice, a 2-layer MLP,
    log(softmax) vs log_softmax, a chain of reshapes and transposes."""
    c = gc.c
    x = q32(u((4, 3)))
    w1, b1 = q32(u((3, 5))), q32(u((5,)))
    w2, b2 = q32(u((5, 2))), q32(u((2,)))
    t = q32(u((4, 2)))
    for n, a in (("cx", x), ("cw1", w1), ("cb1", b1), ("cw2", w2), ("cb2", b2), ("ct", t)):
        c.put(n, a, "f32")

    def mlp(arrs):
        x, w1, b1, w2, b2, t = arrs
        h = np.tanh(x @ w1 + b1)
        y = h @ w2 + b2
        return ((y - t) ** 2).mean() + (h * h).sum() * 0.1

    nodes = [{"id": "a", "op": "matmul", "inputs": ["cx", "cw1"]},
             {"id": "ab", "op": "add", "inputs": ["a", "cb1"]},
             {"id": "h", "op": "tanh", "inputs": ["ab"]},
             {"id": "y0", "op": "matmul", "inputs": ["h", "cw2"]},
             {"id": "y", "op": "add", "inputs": ["y0", "cb2"]},
             {"id": "l1", "op": "mse", "inputs": ["y", "ct"]},
             {"id": "hh", "op": "mul", "inputs": ["h", "h"]},
             {"id": "s", "op": "sum", "inputs": ["hh"]},
             {"id": "s1", "op": "mul", "inputs": ["s"], "attrs": {"scalar": 0.1}},
             {"id": "loss", "op": "add", "inputs": ["l1", "s1"]}]
    gc.cases += 1
    err, res = c.call("train.step", {"nodes": nodes, "loss": "loss",
                                     "params": ["cx", "cw1", "cb1", "cw2", "cb2"], "grads": True})
    arrays = [x, w1, b1, w2, b2, t]
    if err is not None:
        gc.checks += 5
        gc.fail("composite mlp: %s" % err)
        return
    if not np.isclose(res["loss"], mlp(arrays), rtol=1e-4, atol=1e-5):
        gc.fail("composite mlp: loss %r want %r" % (res["loss"], mlp(arrays)))
    for k, n in enumerate(("cx", "cw1", "cb1", "cw2", "cb2")):
        gc.checks += 1
        got = harness.result_array(c.call("tensor.get", {"name": n + ".grad"})[1]).astype(np.float64)
        want = fd_grad(mlp, [a.copy() for a in arrays], k)
        scale = max(1.0, float(np.abs(want).max()))
        if np.any(np.abs(got - want) > ATOL * scale + RTOL * np.abs(want)):
            gc.fail("composite mlp: d/d %s: got %r want %r" % (n, got.ravel()[:6], want.ravel()[:6]))

    # a parameter used by several nodes, and by one node twice
    p = q32(u((3, 4)))
    c.put("cp", p, "f32")

    def multi(arrs):
        (p,) = arrs
        return (p * p).sum() + np.exp(p).mean() + (p.T @ p).sum() * 0.5

    nodes = [{"id": "pp", "op": "mul", "inputs": ["cp", "cp"]},
             {"id": "a", "op": "sum", "inputs": ["pp"]},
             {"id": "e", "op": "exp", "inputs": ["cp"]},
             {"id": "b", "op": "mean", "inputs": ["e"]},
             {"id": "pt", "op": "transpose", "inputs": ["cp"]},
             {"id": "g", "op": "matmul", "inputs": ["pt", "cp"]},
             {"id": "gs", "op": "sum", "inputs": ["g"]},
             {"id": "gh", "op": "mul", "inputs": ["gs"], "attrs": {"scalar": 0.5}},
             {"id": "ab", "op": "add", "inputs": ["a", "b"]},
             {"id": "loss", "op": "add", "inputs": ["ab", "gh"]}]
    gc.cases += 1
    gc.checks += 1
    err, res = c.call("train.step", {"nodes": nodes, "loss": "loss", "params": ["cp"], "grads": True})
    if err is not None:
        gc.fail("composite shared parameter: %s" % err)
    else:
        got = harness.result_array(c.call("tensor.get", {"name": "cp.grad"})[1]).astype(np.float64)
        want = fd_grad(multi, [p.copy()], 0)
        scale = max(1.0, float(np.abs(want).max()))
        if np.any(np.abs(got - want) > ATOL * scale + RTOL * np.abs(want)):
            gc.fail("composite shared parameter: got %r want %r" % (got.ravel()[:6], want.ravel()[:6]))

    # the loss node's own gradient with outputs returned inline
    gc.checks += 1
    err, res = c.call("train.step", {"nodes": nodes, "loss": "loss", "params": ["cp"], "grads": True,
                                     "outputs": ["pp", "loss"]})
    if err is not None or set(res["outputs"]) != {"pp", "loss"}:
        gc.fail("outputs inline: %r %r" % (err, res and res.get("outputs", {}).keys()))
    else:
        pp = harness.result_array(res["outputs"]["pp"]).astype(np.float64)
        if not np.allclose(pp, p * p, rtol=1e-6, atol=1e-7):
            gc.fail("outputs inline: pp differs")


def composite_embedding(gc):
    """An embedding model where the new rules meet: gather of a parameter
    with repeated indices, batch_norm (training), gelu, slice, concat, a 1-D
    matmul and cross_entropy with ignore_index."""
    c = gc.c
    E, W, v = q32(u((6, 4))), q32(u((5, 3))), q32(u((3,)))
    idx = np.array([2, 0, 2, 5, 2])
    labels = np.array([1, -100, 2, 0, -100])
    for n, a in (("ee", E), ("ew", W), ("ev", v)):
        c.put(n, a, "f32")
    c.put("ei", idx.astype(np.int32), "i32")
    c.put("el", labels.astype(np.int32), "i32")

    def model(arrs):
        E, W, v = arrs
        h = gelu(batch_norm(gather_ref(E, idx), training=True), "tanh")
        h = np.concatenate([h, h[:, 1:2]], axis=1)          # [5, 5]
        z = h @ W                                           # [5, 3]
        return class_loss_ignore(z, labels, "mean", -100) + 0.1 * (z @ v).sum()

    nodes = [{"id": "h0", "op": "gather", "inputs": ["ee", "ei"]},
             {"id": "h1", "op": "batch_norm", "inputs": ["h0"], "attrs": {"training": True}},
             {"id": "h2", "op": "gelu", "inputs": ["h1"], "attrs": {"approximate": "tanh"}},
             {"id": "h3", "op": "slice", "inputs": ["h2"], "attrs": {"starts": [1], "ends": [2], "axes": [1]}},
             {"id": "h", "op": "concat", "inputs": ["h2", "h3"], "attrs": {"axis": 1}},
             {"id": "z", "op": "matmul", "inputs": ["h", "ew"]},
             {"id": "l1", "op": "cross_entropy", "inputs": ["z", "el"], "attrs": {"ignore_index": -100}},
             {"id": "zv", "op": "matmul", "inputs": ["z", "ev"]},
             {"id": "s", "op": "sum", "inputs": ["zv"]},
             {"id": "s1", "op": "mul", "inputs": ["s"], "attrs": {"scalar": 0.1}},
             {"id": "loss", "op": "add", "inputs": ["l1", "s1"]}]
    gc.cases += 1
    err, res = c.call("train.step", {"nodes": nodes, "loss": "loss", "params": ["ee", "ew", "ev"], "grads": True})
    arrays = [E, W, v]
    if err is not None:
        gc.checks += 3
        gc.fail("composite embedding: %s" % err)
        return
    if not np.isclose(res["loss"], model(arrays), rtol=1e-4, atol=1e-5):
        gc.fail("composite embedding: loss %r want %r" % (res["loss"], model(arrays)))
    for k, n in enumerate(("ee", "ew", "ev")):
        gc.checks += 1
        got = harness.result_array(c.call("tensor.get", {"name": n + ".grad"})[1]).astype(np.float64)
        want = fd_grad(model, [a.copy() for a in arrays], k)
        scale = max(1.0, float(np.abs(want).max()))
        if np.any(np.abs(got - want) > ATOL * scale + RTOL * np.abs(want)):
            gc.fail("composite embedding: d/d %s: got %r want %r" % (n, got.ravel()[:6], want.ravel()[:6]))
    # rows 1, 3 and 4 of the table are never read: their gradient is exactly 0
    gc.checks += 1
    got = harness.result_array(c.call("tensor.get", {"name": "ee.grad"})[1])
    if np.any(got[[1, 3, 4]] != 0):
        gc.fail("composite embedding: unread rows got a gradient: %r" % got[[1, 3, 4]].tolist())


def refusals(gc):
    """Gradients the rules refuse, with a clear error (not a wrong result)."""
    c = gc.c
    c.put("rv", q32(u((4,))), "f32")
    c.put("rm", q32(u((4, 3))), "f32")
    for label, nodes, params in (
        ("an optimizer op", [{"id": "y", "op": "adam_m", "inputs": ["rv", "rv"]},
                             {"id": "loss", "op": "sum", "inputs": ["y"]}], ["rv"]),
    ):
        gc.checks += 1
        err, _ = c.call("train.step", {"nodes": nodes, "loss": "loss", "params": params, "grads": True})
        if err is None or err["name"] != "INVALID_ARGUMENT" or "adam_m is not differentiable" not in err["message"]:
            gc.fail("%s: expected INVALID_ARGUMENT naming the op, got %r" % (label, err))


def ties(gc):
    """max / min with ties: the gradient is split evenly among the elements
    equal to the result (PyTorch's amax / amin), checked against that rule
    directly (finite differences are one-sided there)."""
    c = gc.c
    x = np.array([[1.0, 3.0, 3.0, -2.0], [2.0, 2.0, 2.0, 2.0], [0.5, -1.0, 4.0, -1.0]])
    r = np.array([0.5, -2.0, 1.5])
    c.put("tx", x, "f32")
    c.put("tr", r, "f32")
    for op, f, attrs, w in (
        ("max", np.max, {"axis": 1}, r),
        ("min", np.min, {"axis": -1}, r),
        ("max", np.max, None, 1.0),
        ("min", np.min, {"axis": [0, 1], "keepdims": True}, 1.0),
    ):
        nodes = [{"id": "y", "op": op, "inputs": ["tx"]}]
        if attrs:
            nodes[0]["attrs"] = attrs
        nodes += [{"id": "yr", "op": "mul", "inputs": ["y", "tr"] if np.ndim(w) else ["y"],
                   **({} if np.ndim(w) else {"attrs": {"scalar": 1.0}})},
                  {"id": "loss", "op": "sum", "inputs": ["yr"]}]
        gc.cases += 1
        gc.checks += 1
        err, _ = c.call("train.step", {"nodes": nodes, "loss": "loss", "params": ["tx"], "grads": True})
        if err is not None:
            gc.fail("ties %s %s: %s" % (op, attrs, err))
            continue
        got = harness.result_array(c.call("tensor.get", {"name": "tx.grad"})[1]).astype(np.float64)
        ax = axis_of(attrs)
        m = (x == f(x, axis=ax, keepdims=True)).astype(np.float64)
        wk = np.reshape(w, (-1, 1)) if np.ndim(w) else w
        want = m * wk / m.sum(axis=ax, keepdims=True)
        if not np.allclose(got, want, rtol=1e-6, atol=1e-7):
            gc.fail("ties %s %s: got %r want %r" % (op, attrs, got.tolist(), want.tolist()))


def attention_cases():
    """The fused attention op (q, k, v all parameters): causal and not,
    T != S, a scale attr, a head dim between the compiled bounds."""
    out = []
    for n, t, s, hd, attrs in ((2, 3, 3, 4, {"causal": True}), (1, 3, 5, 4, None), (1, 4, 2, 6, {"causal": True}),
                               (2, 2, 3, 3, {"scale": 0.7})):
        a = attrs or {}
        out.append(Case("attention", "attention", [(u((n, t, hd)), "p"), (u((n, s, hd)), "p"), (u((n, s, hd)), "p")],
                        lambda q, k, v, a=a: ref_attention.attention(q, k, v, a.get("causal", False), a.get("scale")),
                        attrs))
    return out


def run(ck):
    gc = GradChecker(ck.c)
    for case in cases() + issue18_cases() + attention_cases():
        gc.run(case)
    composite(gc)
    composite_embedding(gc)
    dropout_masks(gc)
    refusals(gc)
    ties(gc)
    print("%d cases, %d gradients checked, %d failed" % (gc.cases, gc.checks, gc.failures))
    ck.checks += gc.checks
    ck.failures += gc.failures


if __name__ == "__main__":
    os.environ.setdefault("TENSORD_BIN", os.path.join(HERE, "..", "..", "build-train", "daemon", "tensord"))
    harness.main(run)

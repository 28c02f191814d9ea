"""matmul's f32 kernels for small products (issue 16): matmul_smalln.comp
(A transposed, N <= 16, long K: the weight gradient hᵀ·g of a classifier
layer) and matmul_smallk.comp (K <= 16, any layout: the input gradient
g·Wᵀ), against the float64 NumPy reference (ref_linalg.py), with the
kernel each product ran checked in the dispatch trace
(TENSORD_TRACE_DISPATCHES): the shapes past the limits (N 17, K 17, f16)
fall back to the tiled kernels, and with TENSORD_NO_SKINNY nothing takes the
new kernels. Split results are bit-identical run to run."""
import os
import time

import numpy as np

import harness
import ref_linalg as ref

rng = np.random.default_rng(1616)
# f32 sums over up to 16,384 terms of values in [-1, 1), against float64.
TOL = (2e-4, 1e-4)


def values(shape):
    return rng.uniform(-1, 1, size=shape)


def stored(shape, t):
    return shape[:-2] + (shape[-1], shape[-2]) if t else shape


class Traced(harness.Traced):
    """A checker whose checks also return the shaders their op.run ran."""

    def check(self, arrays, attrs, want_kernel, label, dtype="f32", tol=TOL):
        self.shaders()
        ta, tb = attrs.get("transpose_a", False), attrs.get("transpose_b", False)
        self.ck.check("matmul", arrays, [dtype] * len(arrays), ref.matmul_t(ta, tb), attrs=attrs,
                      tol=tol, label=" " + label)
        ran = self.shaders()
        self.ck.checks += 1
        if want_kernel is None:
            if any(s.startswith(("matmul_smalln", "matmul_smallk")) for s in ran):
                self.ck.fail("%s: ran %s, want the tiled kernels" % (label, ran))
        elif not any(s.startswith(want_kernel) for s in ran):
            self.ck.fail("%s: ran %s, want %s" % (label, ran, want_kernel))


def small_n(t, new):
    """A transposed, N <= 16: matmul_smalln (split into chunks where the
    rows are few for the device, reduced by matmul_reduce)."""
    kn = "matmul_smalln" if new else None
    for m, k, n, tb in ((512, 4099, 10, False), (64, 16384, 3, False), (65, 3000, 1, False),
                        (3, 5000, 16, True), (1, 2100, 10, True), (65, 300, 16, False),
                        (40, 17, 7, True)):
        t.check([values((k, m)), values(stored((k, n), tb))], {"transpose_a": True, "transpose_b": tb}, kn,
                "(small N %dx%d from K %d%s)" % (m, n, k, ", B transposed" if tb else ""))
    # Batched, B broadcast over the batch, and a batch of B against one A.
    t.check([values((3, 700, 33)), values((700, 5))], {"transpose_a": True}, kn, "(small N, batch of A)")
    t.check([values((600, 20)), values((2, 600, 9))], {"transpose_a": True}, kn, "(small N, batch of B)")
    # Exact small integers, split or not: every sum is exact.
    for m, k in ((70, 4000), (300, 700)):
        a = rng.integers(-3, 4, size=(k, m)).astype(np.float64)
        b = rng.integers(-3, 4, size=(k, 11)).astype(np.float64)
        t.check([a, b], {"transpose_a": True}, kn, "(small N exact %d from K %d)" % (m, k), tol=(0, 0))
    # 17 columns, f16, and split_k asked for: the tiled kernels.
    t.check([values((2000, 64)), values((2000, 17))], {"transpose_a": True}, None, "(N 17)")
    t.check([values((2000, 64)), values((2000, 10))], {"transpose_a": True, "split_k": 4}, None,
            "(small N, split_k 4)")
    t.check([values((2000, 64)), values((2000, 10))], {"transpose_a": True}, None, "(small N f16)",
            dtype="f16", tol=(3e-2, 3e-3))


def small_k(t, new):
    """K <= 16, any layout: matmul_smallk (vec4 stores where N % 4 == 0)."""
    kn = "matmul_smallk" if new else None
    for k in (1, 3, 10, 16):
        for n in (512, 5, 1):
            for ta, tb in ((False, False), (False, True), (True, False), (True, True)):
                m = 300 if n == 512 else 1037
                t.check([values(stored((m, k), ta)), values(stored((k, n), tb))],
                        {"transpose_a": ta, "transpose_b": tb}, kn,
                        "(small K %d, %dx%d, %s%s)" % (k, m, n, "T" if ta else "N", "T" if tb else "N"))
    t.check([values((4, 33, 10)), values((2, 1, 12, 10))], {"transpose_b": True}, kn, "(small K, batch)")
    t.check([values((5, 300, 10)), values((10, 5))], {}, kn, "(small K, batch of A)")
    a = rng.integers(-3, 4, size=(517, 10)).astype(np.float64)
    b = rng.integers(-3, 4, size=(36, 10)).astype(np.float64)
    t.check([a, b], {"transpose_b": True}, kn, "(small K exact)", tol=(0, 0))
    t.check([values((300, 17)), values((512, 17))], {"transpose_b": True}, None, "(K 17)")


def epilogue(t, new):
    """The epilogue (bias, relu) in both kernels, split and unsplit."""
    c = t.ck
    for sa, sb, ta, tb, kn in (((16384, 64), (16384, 10), True, False, "matmul_smalln"),
                               ((4099, 512), (4099, 10), True, False, "matmul_smalln"),
                               ((1000, 10), (512, 10), False, True, "matmul_smallk"),
                               ((1000, 10), (10, 6), False, False, "matmul_smallk")):
        n = sb[0] if tb else sb[1]
        t.shaders()
        c.check("matmul", [values(sa), values(sb), values((n,))], ["f32"] * 3,
                ref.matmul_epilogue(ta, tb, "relu", "f32"),
                attrs={"transpose_a": ta, "transpose_b": tb, "activation": "relu"}, tol=TOL,
                label=" (small, epilogue)")
        ran = t.shaders()
        c.checks += 1
        if new and not any(s.startswith(kn) for s in ran):
            c.fail("epilogue %s @ %s: ran %s, want %s" % (sa, sb, ran, kn))


def repeat(ck):
    """The same split product twice: the same bytes (fixed-order sums)."""
    c = ck.c
    c.put("rp_a", values((16384, 64)), "f32")
    c.put("rp_b", values((16384, 10)), "f32")
    c.put("rp_g", values((2048, 10)), "f32")
    c.put("rp_w", values((512, 10)), "f32")
    for names, attrs in ((["rp_a", "rp_b"], {"transpose_a": True}), (["rp_g", "rp_w"], {"transpose_b": True})):
        outs = []
        for _ in range(2):
            err, res = c.run("matmul", names, attrs)
            ck.checks += 1
            if err is not None:
                ck.fail("repeat %s: %r" % (names, err))
                return
            outs.append(res["data"])
        if outs[0] != outs[1]:
            ck.fail("matmul %s %s differs between runs" % (names, attrs))


def train_step(t):
    """The gradients of a training step through a 512 -> 10 layer (h =
    relu(x @ W1), logits h @ W2 + b2, mean cross-entropy), batch 2048:
    dW2 = hᵀ·g takes matmul_smalln, dh = g·W2ᵀ matmul_smallk; every
    gradient against its float64 NumPy derivation."""
    ck, c = t.ck, t.ck.c
    b, d, hid, cls = 2048, 20, 512, 10
    x, w1 = values((b, d)), values((d, hid)) * 0.3
    w2, b2 = values((hid, cls)) * 0.1, values((cls,)) * 0.1
    y = rng.integers(0, cls, size=b)
    for name, v in (("ts_x", x), ("ts_w1", w1), ("ts_w2", w2), ("ts_b2", b2)):
        c.put(name, v, "f32")
    c.put("ts_y", y, "i32")
    nodes = [{"id": "z", "op": "matmul", "inputs": ["ts_x", "ts_w1"]},
             {"id": "h", "op": "relu", "inputs": ["z"]},
             {"id": "om", "op": "matmul", "inputs": ["h", "ts_w2"]},
             {"id": "o", "op": "add", "inputs": ["om", "ts_b2"]},
             {"id": "L", "op": "cross_entropy", "inputs": ["o", "ts_y"], "attrs": {"reduction": "mean"}}]
    t.shaders()
    err, res = c.call("train.step", {"nodes": nodes, "loss": "L", "params": ["ts_w1", "ts_w2", "ts_b2"],
                                     "grads": True})
    ran = t.shaders()
    ck.checks += 1
    if err is not None:
        ck.fail("train step: %r" % (err,))
        return
    q = [harness.quantize(v, "f32") for v in (x, w1, w2, b2)]
    x, w1, w2, b2 = q
    z = x @ w1
    h = np.maximum(z, 0)
    o = h @ w2 + b2
    e = np.exp(o - o.max(axis=1, keepdims=True))
    p = e / e.sum(axis=1, keepdims=True)
    loss = -np.log(p[np.arange(b), y]).mean()
    g = p.copy()
    g[np.arange(b), y] -= 1
    g /= b
    dh = (g @ w2.T) * (z > 0)
    want = {"ts_w2": h.T @ g, "ts_b2": g.sum(axis=0), "ts_w1": x.T @ dh}
    if not np.isclose(res["loss"], loss, rtol=1e-5, atol=1e-6):
        ck.fail("train step: loss %r, want %r" % (res["loss"], loss))
    for name, w in want.items():
        ck.checks += 1
        got = harness.result_array(c.call("tensor.get", {"name": name + ".grad"})[1]).astype(np.float64)
        if not np.allclose(got, w, atol=1e-6, rtol=1e-4):
            ck.fail("train step: %s.grad differs by %g" % (name, np.abs(got - w).max()))
    ck.checks += 1
    if not any(s.startswith("matmul_smalln") for s in ran) or not any(s.startswith("matmul_smallk") for s in ran):
        ck.fail("train step ran %s: want matmul_smalln and matmul_smallk" % (ran,))


def profile(ck, label):
    """Device time of the two products of issue 16, scaled down for
    lavapipe (batch 2048): printed, for the record."""
    c = ck.c
    c.put("pf_h", values((2048, 512)), "f32")
    c.put("pf_g", values((2048, 10)), "f32")
    c.put("pf_w", values((512, 10)), "f32")
    for what, names, attrs in (("dW = hᵀ·g 512x10 from K 2048", ["pf_h", "pf_g"], {"transpose_a": True}),
                               ("dh = g·Wᵀ 2048x512 from K 10", ["pf_g", "pf_w"], {"transpose_b": True})):
        best = None
        for _ in range(3):
            err, res = c.call("op.run", {"op": "matmul", "inputs": names, "attrs": attrs, "profile": True})
            if err is not None:
                ck.fail("profile %s: %r" % (what, err))
                return
            best = res["gpu_ns"] if best is None else min(best, res["gpu_ns"])
        print("%s: %s: %.0f us" % (label, what, best / 1000))


def session(new):
    os.environ["TENSORD_TRACE_DISPATCHES"] = "1"
    if new:
        os.environ.pop("TENSORD_NO_SKINNY", None)
    else:
        os.environ["TENSORD_NO_SKINNY"] = "1"
    try:
        d = harness.Daemon().start()
    finally:
        os.environ.pop("TENSORD_TRACE_DISPATCHES", None)
        os.environ.pop("TENSORD_NO_SKINNY", None)
    return d


def main():
    t0 = time.time()
    failures = checks = 0
    for new in (True, False):
        with session(new) as d:
            ck = harness.Checker(harness.Client(d.sock))
            t = Traced(ck, d.log)
            if new:
                small_n(t, new)
                small_k(t, new)
                epilogue(t, new)
                repeat(ck)
                train_step(t)
            else:
                # The tiled kernels on a few of the shapes (they are slow
                # on lavapipe at the large ones).
                t.check([values((3000, 65)), values((3000, 10))], {"transpose_a": True}, None,
                        "(small N, TENSORD_NO_SKINNY)")
                t.check([values((1037, 10)), values((512, 10))], {"transpose_b": True}, None,
                        "(small K, TENSORD_NO_SKINNY)")
            profile(ck, "new kernels" if new else "TENSORD_NO_SKINNY")
            failures += ck.failures
            checks += ck.checks
    print("matmul_small: %.1f s" % (time.time() - t0))
    print("%d checks, %d failed" % (checks, failures))
    raise SystemExit(1 if failures else 0)


if __name__ == "__main__":
    main()

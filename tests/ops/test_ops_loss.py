"""Loss ops (mse, binary_cross_entropy_with_logits, cross_entropy, nll) x
f32/f16/bf16 x reduction none/mean/sum against ref_loss.py, with label
smoothing, ignore_index, out-of-range classes (NaN), zero size, a tensor large
enough for three reduction levels, bit-for-bit repeatability, and errors."""
import numpy as np

import harness
import ref_loss as ref

rng = np.random.default_rng(4321)
REDUCTIONS = ["none", "mean", "sum"]


def attrs_for(reduction, **kw):
    a = {} if reduction == "mean" and rng.integers(2) else {"reduction": reduction}
    a.update(kw)
    return a


def run(ck):
    for dt in harness.FLOAT_DTYPES:
        for red in REDUCTIONS:
            for shape in [(5,), (3, 7), (2, 3, 300), ()]:
                p = rng.uniform(-2, 2, size=shape)
                t = rng.uniform(-2, 2, size=shape)
                ck.check("mse", [p, t], [dt, dt], lambda a, b, r=red: ref.mse(a, b, r), attrs=attrs_for(red))
                x = rng.uniform(-30, 30, size=shape)
                y = rng.uniform(0, 1, size=shape)
                ck.check("binary_cross_entropy_with_logits", [x, y], [dt, dt],
                         lambda a, b, r=red: ref.bce_with_logits(a, b, r), attrs=attrs_for(red))
            for n, c in [(4, 3), (37, 10), (300, 5), (1, 1)]:
                x = rng.uniform(-5, 5, size=(n, c))
                t = rng.integers(0, c, size=(n,))
                ck.check("cross_entropy", [x, t], [dt, "i32"],
                         lambda a, b, r=red: ref.cross_entropy(a, b, r), attrs=attrs_for(red))
                ck.check("cross_entropy", [x, t], [dt, "i32"],
                         lambda a, b, r=red: ref.cross_entropy(a, b, r, label_smoothing=0.1),
                         attrs=attrs_for(red, label_smoothing=0.1), label="(smoothing)")
                lp = np.log(rng.dirichlet(np.ones(c), size=n))
                ck.check("nll", [lp, t], [dt, "i32"], lambda a, b, r=red: ref.nll(a, b, r),
                         attrs=attrs_for(red))
            # ignore_index, alone and with smoothing; out-of-range classes give NaN
            x = rng.uniform(-5, 5, size=(9, 4))
            t = np.array([0, -100, 3, 2, -100, 1, 1, 0, 3])
            ck.check("cross_entropy", [x, t], [dt, "i32"],
                     lambda a, b, r=red: ref.cross_entropy(a, b, r, ignore_index=-100),
                     attrs=attrs_for(red, ignore_index=-100), label="(ignore)")
            ck.check("cross_entropy", [x, t], [dt, "i32"],
                     lambda a, b, r=red: ref.cross_entropy(a, b, r, 1.0, ignore_index=-100),
                     attrs=attrs_for(red, ignore_index=-100, label_smoothing=1.0), label="(ignore, smoothing 1)")
            ck.check("nll", [x, t], [dt, "i32"], lambda a, b, r=red: ref.nll(a, b, r, ignore_index=3),
                     attrs=attrs_for(red, ignore_index=3), label="(ignore)")
            bad_t = np.array([0, 4, 1, -1, 2, 3, 0, 0, 1])
            got = ck.check("cross_entropy", [x, bad_t], [dt, "i32"], lambda a, b, r=red: ref.cross_entropy(a, b, r),
                           attrs=attrs_for(red), label="(out of range)")
            if got is not None and not np.isnan(got).any():
                ck.fail("cross_entropy %s %s: an out-of-range class gave no NaN" % (dt, red))
            ck.check("nll", [x, bad_t], [dt, "i32"], lambda a, b, r=red: ref.nll(a, b, r),
                     attrs=attrs_for(red), label="(out of range)")
            # every sample ignored: mean is 0/0 = NaN, sum 0 (as PyTorch)
            ck.check("cross_entropy", [x[:2], np.array([7, 7])], [dt, "i32"],
                     lambda a, b, r=red: ref.cross_entropy(a, b, r, ignore_index=7),
                     attrs={"reduction": red, "ignore_index": 7}, label="(all ignored)")
            # zero size
            ck.check("mse", [np.zeros((0, 3)), np.zeros((0, 3))], [dt, dt],
                     lambda a, b, r=red: ref.mse(a, b, r), attrs={"reduction": red}, label="(empty)")
            ck.check("cross_entropy", [np.zeros((0, 3)), np.zeros((0,))], [dt, "i32"],
                     lambda a, b, r=red: ref.cross_entropy(a, b, r), attrs={"reduction": red}, label="(empty)")

    # Large enough for three levels of the tree (2048 items per workgroup),
    # with a size that is not a multiple of anything; repeatable bit for bit.
    n = 4_300_001
    p = rng.uniform(-1, 1, size=n).astype(np.float32)
    t = rng.uniform(-1, 1, size=n).astype(np.float32)
    for red in ("mean", "sum"):
        got = ck.check("mse", [p, t], ["f32", "f32"], lambda a, b, r=red: ref.mse(a, b, r),
                       attrs={"reduction": red}, tol=(1e-5, 1e-5), label="(large)")
        again = ck.check("mse", [p, t], ["f32", "f32"], lambda a, b, r=red: ref.mse(a, b, r),
                         attrs={"reduction": red}, tol=(1e-5, 1e-5), label="(large, again)")
        if got is not None and again is not None and got.tobytes() != again.tobytes():
            ck.fail("mse %s: two runs differ: %r %r" % (red, got, again))
    x = rng.uniform(-4, 4, size=(70_000, 3))
    tt = rng.integers(0, 3, size=(70_000,))
    ck.check("cross_entropy", [x, tt], ["f32", "i32"], lambda a, b: ref.cross_entropy(a, b, "mean", 0.2),
             attrs={"label_smoothing": 0.2}, label="(large)")

    # Errors name the op and the problem.
    ck.c.put("e/f", rng.uniform(size=(4, 3)), "f32")
    ck.c.put("e/h", rng.uniform(size=(4, 3)), "f16")
    ck.c.put("e/v", rng.uniform(size=(3,)), "f32")
    ck.c.put("e/i", np.array([0, 1, 2, 0]), "i32")
    ck.c.put("e/i3", np.array([0, 1, 2]), "i32")
    ck.c.put("e/u", np.array([0, 1, 2, 0]), "u8")
    ck.c.put("e/ii", np.zeros((4, 3)), "i32")
    ck.expect_error("mse", ["e/f", "e/h"], None, "DTYPE_MISMATCH")
    ck.expect_error("mse", ["e/f", "e/v"], None, "SHAPE_MISMATCH")
    # The shape error names both shapes (issue 35).
    err, _ = ck.c.run("mse", ["e/f", "e/v"], None)
    ck.checks += 1
    if not err or "the target is [3] but the prediction [4,3]" not in err["message"]:
        ck.fail("mse's shape error names both shapes: %r" % (err,))
    ck.expect_error("mse", ["e/ii", "e/ii"], None, "DTYPE_MISMATCH")
    ck.expect_error("mse", ["e/f"], None, "INVALID_ARGUMENT")
    ck.expect_error("mse", ["e/f", "e/f"], {"reduction": "avg"}, "INVALID_ARGUMENT")
    ck.expect_error("binary_cross_entropy_with_logits", ["e/f", "e/v"], None, "SHAPE_MISMATCH")
    ck.expect_error("cross_entropy", ["e/f", "e/u"], None, "DTYPE_MISMATCH")
    ck.expect_error("cross_entropy", ["e/f", "e/i3"], None, "SHAPE_MISMATCH")
    ck.expect_error("cross_entropy", ["e/v", "e/i3"], None, "SHAPE_MISMATCH")
    ck.expect_error("cross_entropy", ["e/f", "e/i"], {"label_smoothing": 1.5}, "INVALID_ARGUMENT")
    ck.expect_error("cross_entropy", ["e/f", "e/i"], {"label_smoothing": "x"}, "INVALID_ARGUMENT")
    ck.expect_error("cross_entropy", ["e/f", "e/i"], {"ignore_index": 2**40}, "INVALID_ARGUMENT")
    ck.expect_error("nll", ["e/f", "e/i"], {"label_smoothing": 0.1}, "INVALID_ARGUMENT")
    ck.expect_error("nll", ["e/ii", "e/i"], None, "DTYPE_MISMATCH")


def _ce_grad(x, t, smoothing, n):
    """d mean(cross_entropy) / dx: (softmax(x) - smoothed one-hot) / N (PyTorch)."""
    m = x.max(axis=1, keepdims=True)
    e = np.exp(x - m)
    g = e / e.sum(axis=1, keepdims=True)
    c = x.shape[1]
    g -= smoothing / c
    g[np.arange(x.shape[0]), t] -= 1.0 - smoothing
    return g / n


def run_wide(ck):
    """Rows of 32,768 classes and more (lavapipe ends an invocation's loops
    after 65535 iterations in all, so a row must not be one invocation's
    loop): cross_entropy's value and gradient on 4 x 70,000 and 2 x 2^22,
    the largest row; wider rows are RESOURCE_EXHAUSTED (nll takes any width)."""
    for n, c in [(4, 70_000), (3, 32_768), (2, 1 << 22)]:
        x = rng.uniform(-6, 6, size=(n, c))
        x[0, 5] = 40.0  # one dominant logit: the loss of that row is near 0, never negative
        t = rng.integers(0, c, size=(n,))
        t[0] = 5
        dts = harness.FLOAT_DTYPES if c < (1 << 22) else ["f32"]
        for dt in dts:
            tol = (1e-4, 1e-4) if dt == "f32" else None
            for red in REDUCTIONS:
                got = ck.check("cross_entropy", [x, t], [dt, "i32"], lambda a, b, r=red: ref.cross_entropy(a, b, r),
                               attrs={"reduction": red}, tol=tol, label="(%d classes)" % c)
                if got is not None and (got < 0).any():
                    ck.fail("cross_entropy over %d classes (%s): a negative loss %r" % (c, dt, got.min()))
                ck.check("cross_entropy", [x, t], [dt, "i32"],
                         lambda a, b, r=red: ref.cross_entropy(a, b, r, 0.1, ignore_index=int(t[1])),
                         attrs={"reduction": red, "label_smoothing": 0.1, "ignore_index": int(t[1])}, tol=tol,
                         label="(%d classes, smoothing, ignore)" % c)
        # the gradient, through train.step
        if c > 70_000:
            continue
        ck.checks += 1
        x32 = x.astype(np.float32)
        ck.c.put("w/x", x32, "f32")
        ck.c.put("w/t", t, "i32")
        err, res = ck.c.call("train.step", {"nodes": [{"id": "loss", "op": "cross_entropy", "inputs": ["w/x", "w/t"],
                                                       "attrs": {"label_smoothing": 0.1}}],
                                            "loss": "loss", "params": ["w/x"], "grads": True})
        if err is not None:
            ck.fail("cross_entropy gradient over %d classes: %r" % (c, err))
            continue
        want_loss = ref.cross_entropy(x32.astype(np.float64), t.astype(np.float64), "mean", 0.1)
        err, g = ck.c.call("tensor.get", {"name": "w/x.grad"})
        want = _ce_grad(x32.astype(np.float64), t, 0.1, n)
        got = harness.result_array(g).astype(np.float64) if err is None else None
        if not np.isclose(res["loss"], want_loss, rtol=1e-4, atol=1e-4):
            ck.fail("cross_entropy over %d classes: train.step loss %r, want %r" % (c, res["loss"], want_loss))
        if got is None or got.shape != want.shape or not np.allclose(got, want, rtol=1e-4, atol=1e-7):
            ck.fail("cross_entropy gradient over %d classes: %s" % (
                c, err if got is None else "max error %g" % np.abs(got - want).max()))
    ck.c.put("w/big", np.zeros((1, (1 << 22) + 1)), "f32")
    ck.c.put("w/t1", np.zeros((1,)), "i32")
    ck.expect_error("cross_entropy", ["w/big", "w/t1"], None, "RESOURCE_EXHAUSTED", label="(2^22 + 1 classes)")
    # nll reads one logit per row: any width
    lp = rng.uniform(-9, 0, size=(2, (1 << 22) + 1))
    ck.check("nll", [lp, np.array([0, (1 << 22)])], ["f32", "i32"], lambda a, b: ref.nll(a, b, "sum"),
             attrs={"reduction": "sum"}, label="(2^22 + 1 classes)")


def run_all(ck):
    run(ck)
    run_wide(ck)


if __name__ == "__main__":
    harness.main(run_all)

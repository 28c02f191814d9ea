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


if __name__ == "__main__":
    harness.main(run)

"""tril, triu, masked_fill, dropout and multinomial x dtypes against
ref_mask.py: diagonals inside and outside the matrix, batches, masks that
broadcast, integer fill values, dropout's mask bit for bit from an
independent Philox (p = 0 is the identity, p = 1 all zeros, the kept share
near 1 - p), multinomial's samples bit for bit and their frequencies against
the probabilities, reproducibility per seed, and bad input."""
import numpy as np

import harness
import ref_mask as ref

rng = np.random.default_rng(1819)


def values(shape, dt):
    if dt == "u8":
        return rng.integers(0, 256, size=shape)
    if dt == "i32":
        return rng.integers(-1000, 1000, size=shape)
    return rng.uniform(-2, 2, size=shape)


def tri_cases(ck, dt):
    for shape in ((4, 4), (3, 5), (5, 3), (2, 3, 4), (2, 1, 3, 3), (1, 7)):
        x = values(shape, dt)
        for k in (0, 1, -1, 2, -3, 10, -10):
            a = {"diagonal": k}
            ck.check("tril", [x], [dt], lambda x, k=k: ref.tril(x, k), a, tol=(0, 0))
            ck.check("triu", [x], [dt], lambda x, k=k: ref.triu(x, k), a, tol=(0, 0))
    x = values((3, 3), dt)
    ck.check("tril", [x], [dt], lambda x: ref.tril(x), None, tol=(0, 0), label=" default")


def fill_cases(ck, dt):
    value = {"u8": 7, "i32": -123456}.get(dt, -1e9)
    for xs, ms in (((3, 4), (3, 4)), ((3, 4), (4,)), ((3, 4), (3, 1)), ((2, 3, 4), (1, 3, 1)), ((2, 3, 4), ()),
                   ((5,), (5,)), ((2, 3, 4), (2, 1, 4)),
                   # dims the mask steps through alike merge (attention's [B*H, T, T] under [T, T])
                   ((3, 5, 8), (5, 8)), ((2, 3, 2, 4), (3, 2, 4)), ((2, 3, 4), (1, 1, 4))):
        x = values(xs, dt)
        m = rng.integers(0, 2, size=ms)
        ck.check("masked_fill", [x, m], [dt, "u8"], lambda x, m: ref.masked_fill(x, m, value), {"value": value},
                 tol=(0, 0))
    if dt in harness.FLOAT_DTYPES:
        x, m = values((4, 4), dt), np.tril(np.ones((4, 4)), -1)
        ck.check("masked_fill", [x, m], [dt, "u8"], lambda x, m: ref.masked_fill(x, m, -np.inf),
                 {"value": float("-inf")}, tol=(0, 0), label=" -inf")
        # a mask value other than 1 still counts as true
        m = rng.integers(0, 256, size=(4, 4))
        ck.check("masked_fill", [x, m], [dt, "u8"], lambda x, m: ref.masked_fill(x, m, 2.5), {"value": 2.5},
                 label=" 0..255 mask")


def dropout_cases(ck, dt):
    for shape in ((7,), (3, 5), (2, 3, 4), (64, 33)):
        x = values(shape, dt)
        for p, seed in ((0.5, 1), (0.1, 12345), (0.9, 2**40 + 3), (0.0, 5), (1.0, 5), (0.3, -7),
                        (0.5, 2**62 + 12345), (0.5, -(2**63) + 1)):
            a = {"p": p, "seed": seed}
            ck.check("dropout", [x], [dt], lambda x, p=p, seed=seed: ref.dropout(x, p, seed, dt), a)
    # p = 0: the identity, exactly; default p is 0.5
    x = values((5, 6), dt)
    ck.check("dropout", [x], [dt], lambda x: x, {"p": 0.0, "seed": 3}, tol=(0, 0), label=" identity")
    ck.check("dropout", [x], [dt], lambda x: ref.dropout(x, 0.5, 3, dt), {"seed": 3}, label=" default p")
    # the share kept is near 1 - p, and another seed gives another mask
    ones = np.ones((100, 100))
    ck.c.put("dones", ones, dt)
    err, r1 = ck.c.run("dropout", ["dones"], {"p": 0.25, "seed": 11})
    err2, r2 = ck.c.run("dropout", ["dones"], {"p": 0.25, "seed": 12})
    ck.checks += 1
    if err or err2:
        ck.fail("dropout ones: %r %r" % (err, err2))
        return
    a1, a2 = harness.result_array(r1), harness.result_array(r2)
    kept = float((a1 != 0).mean())
    if not 0.73 < kept < 0.77 or (a1 != a2).sum() < 1000:
        ck.fail("dropout %s: kept %.3f of 10000 at p=0.25; seeds 11 and 12 differ in %d" % (
            dt, kept, int((a1 != a2).sum())))


def multinomial_cases(ck, dt):
    for shape, ns in (((5,), 3), ((4, 6), 10), ((2, 3, 7), 4), ((3, 1), 2)):
        p = rng.uniform(0, 1, size=shape)
        p[..., 0] = 0  # a class that is never drawn
        for seed in (0, 99, 2**33 + 1, 2**63 - 1):
            a = {"num_samples": ns, "seed": seed}
            ck.check("multinomial", [p], [dt], lambda p, ns=ns, seed=seed: ref.multinomial(p, ns, seed), a,
                     out_dtype="i32", tol=(0, 0))
    # unnormalised weights, negative and NaN weights count as 0, a row of
    # zeros gives -1
    p = np.array([[2.0, -1.0, 6.0, np.nan], [0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 5.0, 0.0]])
    ck.check("multinomial", [p], [dt], lambda p: ref.multinomial(p, 5, 4), {"num_samples": 5, "seed": 4},
             out_dtype="i32", tol=(0, 0), label=" odd weights")
    # frequencies follow the probabilities
    probs = np.array([0.1, 0.2, 0.3, 0.4])
    ck.c.put("mprobs", probs, dt)
    err, res = ck.c.run("multinomial", ["mprobs"], {"num_samples": 20000, "seed": 77})
    ck.checks += 1
    if err:
        ck.fail("multinomial frequencies: %r" % err)
        return
    s = harness.result_array(res)
    freq = np.bincount(s, minlength=4) / s.size
    if np.abs(freq - probs).max() > 0.02:
        ck.fail("multinomial %s frequencies %s for %s" % (dt, freq, probs))


def error_cases(ck):
    c = ck.c
    c.put("x34", np.zeros((3, 4)), "f32")
    c.put("x3", np.zeros((3,)), "f32")
    c.put("i34", np.zeros((3, 4)), "i32")
    c.put("m3", np.zeros((3,), dtype=np.uint8), "u8")
    c.put("m4", np.zeros((4,), dtype=np.uint8), "u8")
    c.put("m34f", np.zeros((3, 4)), "f32")
    ck.expect_error("tril", ["x3"], None, "INVALID_ARGUMENT", " rank 1")
    ck.expect_error("masked_fill", ["x34", "m3"], {"value": 1}, "SHAPE_MISMATCH", " mask does not broadcast")
    ck.expect_error("masked_fill", ["x34", "m34f"], {"value": 1}, "DTYPE_MISMATCH", " f32 mask")
    ck.expect_error("masked_fill", ["i34", "m4"], {"value": 1.5}, "INVALID_ARGUMENT", " 1.5 into i32")
    ck.expect_error("masked_fill", ["x34", "m3"], None, "INVALID_ARGUMENT", " no value")
    ck.expect_error("dropout", ["x34"], {"p": 1.5, "seed": 1}, "INVALID_ARGUMENT", " p > 1")
    ck.expect_error("dropout", ["x34"], {"p": 0.5}, "INVALID_ARGUMENT", " no seed")
    ck.expect_error("dropout", ["i34"], {"p": 0.5, "seed": 1}, "DTYPE_MISMATCH", " i32")
    ck.expect_error("multinomial", ["x34"], {"num_samples": 0, "seed": 1}, "INVALID_ARGUMENT", " 0 samples")
    ck.expect_error("multinomial", ["i34"], {"num_samples": 1, "seed": 1}, "DTYPE_MISMATCH", " i32")
    # rows longer than a loop may be (a 70000-word vocabulary): chunked sums
    p = np.zeros((1, 70000))
    p[0, 69999] = 1.0
    ck.check("multinomial", [p], ["f32"], lambda p: np.full((1, 3), 69999), {"num_samples": 3, "seed": 1},
             out_dtype="i32", tol=(0, 0), label=" long row, one class")
    p = rng.uniform(0, 1, size=(2, 5000))
    ck.check("multinomial", [p], ["f32"], lambda p: ref.multinomial(p, 50, 8), {"num_samples": 50, "seed": 8},
             out_dtype="i32", tol=(0, 0), label=" 5000 classes")
    # empty
    x = np.zeros((0, 3))
    ck.check("dropout", [x], ["f32"], lambda x: x, {"p": 0.5, "seed": 1}, label=" empty")
    ck.check("tril", [x], ["f32"], lambda x: x, None, label=" empty")


def run(ck):
    for dt in harness.ALL_DTYPES:
        tri_cases(ck, dt)
        fill_cases(ck, dt)
        if dt in harness.FLOAT_DTYPES:
            dropout_cases(ck, dt)
            multinomial_cases(ck, dt)
    error_cases(ck)


if __name__ == "__main__":
    harness.main(run)

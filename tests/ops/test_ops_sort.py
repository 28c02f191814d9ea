"""sort, argsort, topk, topk_indices, sort_grad and cumsum x dtypes against
ref_sort.py: axes (negative, strided, last), ties (stable: index order, also
descending), NaN (the largest), k = 0 and k = n, empty tensors, rows long
enough to need the whole loop budget, integer wrap, and bad input."""
import numpy as np

import harness
import ref_sort as ref

rng = np.random.default_rng(1818)

# (shape, axis)
CASES = [((7,), 0), ((3, 5), 1), ((3, 5), 0), ((2, 3, 4), 1), ((2, 3, 4), -1), ((4, 1, 6), -2),
         ((2, 300), 1), ((1, 1), 0)]


# rows longer than SO_RANK_MAX (1024): the bitonic network
LONG_CASES = [((3, 1500), 1), ((2000, 2), 0)]


def values(shape, dt, ties=False):
    if dt == "u8":
        return rng.integers(0, 256 if not ties else 4, size=shape)
    if dt == "i32":
        return rng.integers(-1000, 1000, size=shape) if not ties else rng.integers(-2, 2, size=shape)
    if ties:
        return rng.integers(-2, 3, size=shape).astype(np.float64)
    return rng.uniform(-2, 2, size=shape)


def sort_cases(ck, dt):
    exact = (0, 0)
    for shape, axis in CASES + LONG_CASES:
        for ties in (False, True):
            x = values(shape, dt, ties)
            for desc in (False, True):
                a = {"axis": axis, "descending": desc}
                ck.check("sort", [x], [dt], lambda x, a=a: ref.sort(x, a["axis"], a["descending"]), a, tol=exact)
                ck.check("argsort", [x], [dt], lambda x, a=a: ref.argsort(x, a["axis"], a["descending"]), a,
                         out_dtype="i32", tol=exact)
            n = shape[axis]
            for k in sorted({0, 1, n // 2, n}):
                for largest in (True, False):
                    a = {"k": k, "axis": axis, "largest": largest}
                    ck.check("topk", [x], [dt], lambda x, a=a: ref.topk(x, a["k"], a["axis"], a["largest"])[0], a,
                             tol=exact)
                    ck.check("topk_indices", [x], [dt],
                             lambda x, a=a: ref.topk(x, a["k"], a["axis"], a["largest"])[1], a,
                             out_dtype="i32", tol=exact)
    # default axis (-1) and descending (false); topk's largest defaults to true
    x = values((3, 6), dt)
    ck.check("sort", [x], [dt], lambda x: ref.sort(x), tol=exact, label=" defaults")
    ck.check("topk", [x], [dt], lambda x: ref.topk(x, 2)[0], {"k": 2}, tol=exact, label=" defaults")


def nan_cases(ck, dt):
    x = np.array([[1.0, np.nan, -1.0, np.nan, 0.0, -0.0, 2.0]])
    for desc in (False, True):
        a = {"descending": desc}
        ck.check("sort", [x], [dt], lambda x, d=desc: ref.sort(x, -1, d), a, tol=(0, 0), label=" nan")
        ck.check("argsort", [x], [dt], lambda x, d=desc: ref.argsort(x, -1, d), a, out_dtype="i32", tol=(0, 0),
                 label=" nan")
    ck.check("topk_indices", [x], [dt], lambda x: ref.topk(x, 3)[1], {"k": 3}, out_dtype="i32", tol=(0, 0),
             label=" nan")


def grad_cases(ck, dt):
    for shape, axis in CASES[:6] + LONG_CASES:
        x = values(shape, dt, ties=True)
        n = shape[axis]
        for k in sorted({1, n}):
            gshape = list(shape)
            gshape[axis] = k
            g = rng.uniform(-1, 1, size=gshape)
            for desc in (False, True):
                a = {"axis": axis, "descending": desc}
                ck.check("sort_grad", [x, g], [dt, dt],
                         lambda x, g, a=a: ref.sort_grad(x, g, a["axis"], a["descending"]), a, tol=(0, 0))


def cumsum_cases(ck, dt):
    for shape, axis in CASES + [((2, 5000), 1), ((3000, 2), 0)]:
        x = values(shape, dt)
        n = shape[axis]
        tol = None
        if dt == "f32" and n > 100:
            tol = (1e-4, 1e-5)
        if dt in ("f16", "bf16") and n > 100:
            tol = (harness.TOL[dt][0] * 40, harness.TOL[dt][1])
        for rev in (False, True):
            a = {"axis": axis, "reverse": rev} if rev else {"axis": axis}
            ck.check("cumsum", [x], [dt], lambda x, a=a: ref.cumsum(x, a["axis"], dt, a.get("reverse", False)), a,
                     tol=tol)
    if dt == "i32":
        x = np.array([2**31 - 1, 1, 5, -(2**31)], dtype=np.float64)
        ck.check("cumsum", [x], [dt], lambda x: ref.cumsum(x, 0, dt), {"axis": 0}, label=" wrap")


def error_cases(ck):
    c = ck.c
    c.put("e2", np.zeros((3, 4)), "f32")
    c.put("e3", np.zeros((3,), dtype=np.uint8), "u8")
    c.put("e0", np.zeros(()), "f32")
    ck.expect_error("topk", ["e2"], {"k": 5}, "INVALID_ARGUMENT", " k > n")
    ck.expect_error("topk", ["e2"], {"k": -1}, "INVALID_ARGUMENT", " k < 0")
    ck.expect_error("topk", ["e2"], None, "INVALID_ARGUMENT", " no k")
    ck.expect_error("sort", ["e2"], {"axis": 2}, "INVALID_ARGUMENT", " axis")
    ck.expect_error("sort", ["e0"], None, "INVALID_ARGUMENT", " rank 0")
    ck.expect_error("cumsum", ["e2"], None, "INVALID_ARGUMENT", " no axis")
    ck.expect_error("cumsum", ["e3"], {"axis": 0}, "DTYPE_MISMATCH", " u8")
    ck.expect_error("sort_grad", ["e2", "e3"], None, "DTYPE_MISMATCH", " g dtype")
    # rows longer than the loop budget: the bitonic sort and the chunked
    # scan give the same (stable) order and sums
    x = rng.integers(-50, 50, size=(1, 70000)).astype(np.float64)
    x[0, ::7] = np.nan
    for desc in (False, True):
        ck.check("argsort", [x], ["f32"], lambda x, d=desc: ref.argsort(x, -1, d), {"descending": desc},
                 out_dtype="i32", tol=(0, 0), label=" long")
    ck.check("topk", [x], ["f32"], lambda x: ref.topk(x, 100)[0], {"k": 100}, tol=(0, 0), label=" long")
    xi = np.nan_to_num(x, nan=3.0)
    ck.check("cumsum", [xi], ["i32"], lambda x: ref.cumsum(x, 1, "i32"), {"axis": 1}, label=" long")
    ck.check("cumsum", [xi], ["i32"], lambda x: ref.cumsum(x, 1, "i32", True), {"axis": 1, "reverse": True},
             label=" long reversed")
    xf = rng.uniform(-1, 1, size=(2, 70000))
    ck.check("cumsum", [xf], ["f32"], lambda x: ref.cumsum(x, 1, "f32"), {"axis": 1}, tol=(1e-3, 1e-5),
             label=" long")
    # empty tensors
    for shape in ((0,), (3, 0), (0, 4)):
        x = np.zeros(shape)
        ck.check("sort", [x], ["f32"], lambda x: x, None, label=" empty")
        ck.check("cumsum", [x], ["f32"], lambda x: x, {"axis": -1}, label=" empty")


def run(ck):
    for dt in harness.ALL_DTYPES:
        sort_cases(ck, dt)
        if dt in harness.FLOAT_DTYPES:
            nan_cases(ck, dt)
            grad_cases(ck, dt)
        if dt != "u8":
            cumsum_cases(ck, dt)
    error_cases(ck)


if __name__ == "__main__":
    harness.main(run)

"""Reduce ops (sum mean prod max min var std argmax argmin) x dtypes against
ref_reduce.py: axis sets, negative axes, keepdims, non-contiguous reduced
axes, rank 0, zero-size and empty reductions, rows that need several
passes, ties, NaN, integer wrapping, a 2^22-element sum whose error must be
at the f32 level, the column pass (leading axes reduced, trailing kept) with
its ties, NaNs, accuracy and determinism, and bad input."""
import numpy as np

import harness
import ref_reduce as ref

rng = np.random.default_rng(4321)

# (shape, axis attr or None, keepdims)
CASES = [
    ((7,), None, False),
    ((3, 5), 1, False),
    ((3, 5), 0, True),
    ((3, 5), -1, True),
    ((2, 3, 4), [0, 2], False),
    ((2, 3, 4), [-1, 0], True),
    ((2, 3, 4), [1], False),
    ((4, 1, 6), None, True),
    ((2, 3, 4, 5), [1, 3], False),
    ((5, 300), 1, False),      # rows not a multiple of the workgroup
    ((1000, 3), 0, False),     # strided rows
    ((3, 5000), -1, False),    # two passes per row
    ((), None, False),         # rank 0
    ((3, 4), [], False),       # no axes: identity
]


def values(shape, dt, op):
    if dt == "i32":
        return rng.integers(-1000, 1000, size=shape)
    if op == "prod":
        return rng.uniform(0.8, 1.25, size=shape)
    return rng.uniform(-2, 2, size=shape)


def attrs_of(axis, keep, extra=None):
    a = {}
    if axis is not None:
        a["axis"] = axis
    if keep:
        a["keepdims"] = True
    a.update(extra or {})
    return a or None


def tol_for(op, dt, shape):
    n = max(int(np.prod(shape)), 1)
    if dt == "f32" and op in ("prod",):
        return (1e-5, 1e-4)
    if dt == "f32" and n > 1000:
        return (1e-4, 1e-5)
    return None


def float_cases(ck, dt):
    for op in ("sum", "mean", "prod", "max", "min", "var", "std"):
        fn = ref.FLOAT[op]
        for shape, axis, keep in CASES:
            if op == "prod" and int(np.prod(shape)) > 2000:
                continue
            x = values(shape, dt, op)
            ck.check(op, [x], [dt], lambda v, a=axis, k=keep, fn=fn: fn(v, a, k),
                     attrs=attrs_of(axis, keep), tol=tol_for(op, dt, shape))
    for op in ("argmax", "argmin"):
        fn = ref.FLOAT[op]
        for shape, axis, keep in [((7,), None, False), ((3, 5), 1, False), ((3, 5), -2, True),
                                  ((2, 3, 4), 1, False), ((2, 3, 4), None, True), ((), None, False),
                                  ((3, 5000), 1, False), ((1000, 3), 0, True)]:
            # Few distinct values: ties everywhere, the first index must win.
            x = rng.integers(-3, 4, size=shape).astype(np.float64)
            ck.check(op, [x], [dt], lambda v, a=axis, k=keep, fn=fn: fn(v, a, k),
                     attrs=attrs_of(axis, keep), out_dtype="i32")


# Reductions over the leading axes with the trailing (contiguous) ones kept,
# as bias gradients are: the engine's column pass (RED_COLUMNS in
# reduce_engine.c), then the partial pass. (shape, axis)
COLUMN_CASES = [
    ((4099, 130), 0),          # several chunks per column, rows not a multiple
    ((2048, 512), 0),          # issue 16's [16384, 512], scaled down
    ((1, 1), 0),
    ((3, 5), 0),               # fewer rows than a chunk: one pass
    ((65, 129), 0),
    ((1000, 1), 0),            # kept block of size 1: a whole-tensor fold
    ((1, 300), 0),             # reduced block of size 1
    ((7, 33, 65), [0, 1]),
    ((7, 33, 65), 0),
    ((300, 2, 3), [-3]),       # narrow kept block
    ((4099, 132), 0),          # kept block a multiple of 4: in vectors
    ((33, 12), 0),
    ((9, 4), 0),
    ((6, 5, 8), [0, 1]),
]


def column_cases(ck):
    for dt in ("f32", "f16", "bf16"):
        for shape, axis in COLUMN_CASES:
            for op in ("sum", "mean", "max", "min", "var") if dt == "f32" else ("sum", "mean", "max"):
                x = values(shape, dt, op)
                ck.check(op, [x], [dt], lambda v, a=axis, fn=ref.FLOAT[op]: fn(v, a),
                         attrs={"axis": axis}, tol=tol_for(op, dt, shape), label="(columns)")
    for shape, axis in [c for c in COLUMN_CASES if not isinstance(c[1], list)] + [((4099, 3), 0)]:
        # Few distinct values: ties across chunks, the first row must win.
        x = rng.integers(-3, 4, size=shape).astype(np.float64)
        for op in ("argmax", "argmin"):
            ck.check(op, [x], ["f32"], lambda v, a=axis, fn=ref.FLOAT[op]: fn(v, a), attrs={"axis": axis},
                     out_dtype="i32", label="(columns)")
            ck.check(op, [x], ["i32"], lambda v, a=axis, fn=ref.INT[op]: fn(v, a), attrs={"axis": axis},
                     out_dtype="i32", label="(columns)")
    for shape, axis in COLUMN_CASES:
        for op in ("sum", "max", "min"):
            x = values(shape, "i32", op)
            ck.check(op, [x], ["i32"], lambda v, a=axis, fn=ref.INT[op]: fn(v, a), attrs={"axis": axis},
                     label="(columns)")
    x = rng.uniform(0.9, 1.1, size=(200, 6))
    ck.check("prod", [x], ["f32"], lambda v: ref.prod(v, 0), attrs={"axis": 0}, tol=(1e-5, 1e-4),
             label="(columns)")
    x = rng.uniform(0.9, 1.1, size=(200, 8))
    ck.check("prod", [x], ["f32"], lambda v: ref.prod(v, 0), attrs={"axis": 0}, tol=(1e-5, 1e-4),
             label="(columns)")
    for shape in ((300, 5), (300, 8)):
        big = rng.integers(2**29, 2**31 - 1, size=shape)
        ck.check("sum", [big], ["i32"], lambda v: ref.sum_i32(v, 0), attrs={"axis": 0}, label="(columns, wraps)")
        ck.check("prod", [big], ["i32"], lambda v: ref.prod_i32(v, 0), attrs={"axis": 0},
                 label="(columns, wraps)")
    # std and keepdims through the same pass.
    for shape in ((500, 40), (500, 39)):
        x = rng.normal(3, 2, size=shape)
        for dt in ("f32", "f16"):
            ck.check("std", [x], [dt], lambda v: ref.std(v, 0, True), attrs={"axis": 0, "keepdims": True},
                     label="(columns)")

    # NaN: max/min propagate it, argmax/argmin take the first NaN of each
    # column, in whichever chunk it lies.
    x = rng.uniform(-1, 1, size=(3000, 7))
    for r, col in ((5, 0), (2999, 1), (1500, 2), (40, 2), (2000, 3), (0, 4)):
        x[r, col] = np.nan
    x[2500, 5] = 9.0
    x[10, 5] = 9.0
    for op in ("max", "min", "sum"):
        ck.check(op, [x], ["f32"], lambda v, fn=ref.FLOAT[op]: fn(v, 0), attrs={"axis": 0}, label="(columns, nan)")
    for op in ("argmax", "argmin"):
        ck.check(op, [x], ["f32"], lambda v, fn=ref.FLOAT[op]: fn(v, 0), attrs={"axis": 0}, out_dtype="i32",
                 label="(columns, nan)")
    ck.check("max", [x], ["f16"], lambda v: ref.max_(v, 0), attrs={"axis": 0}, label="(columns, nan)")
    x = np.concatenate([x, x[:, :1]], axis=1)   # 8 columns: in vectors
    for op in ("max", "min", "sum"):
        ck.check(op, [x], ["f32"], lambda v, fn=ref.FLOAT[op]: fn(v, 0), attrs={"axis": 0}, label="(columns, nan)")
    ck.check("min", [x], ["f16"], lambda v: ref.min_(v, 0), attrs={"axis": 0}, label="(columns, nan)")

    # Accuracy: 2^18 rows of 0.1 in 4 columns; a serial f32 sum is off by ~1e-4.
    x = np.full((1 << 18, 4), 0.1)
    ck.check("sum", [x], ["f32"], lambda v: ref.sum_(v, 0), attrs={"axis": 0}, tol=(0, 1e-6),
             label="(columns, 0.1 x 2^18)")

    # More chunks than one partial pass takes (300000 rows: 4688 chunks of
    # 64 on a small device): the partials ping-pong, indices included.
    x = rng.uniform(-1, 1, size=(300000, 4))
    x[299990, 0] = 5.0
    x[123457, 1] = 5.0
    x[299999, 1] = 5.0
    ck.check("sum", [x], ["f32"], lambda v: ref.sum_(v, 0), attrs={"axis": 0}, tol=(1e-4, 1e-5),
             label="(columns, 3 passes)")
    ck.check("argmax", [x], ["f32"], lambda v: ref.argmax(v, 0), attrs={"axis": 0}, out_dtype="i32",
             label="(columns, 3 passes)")

    # Deterministic: the same reduction twice gives the same bytes.
    for shape in ((4099, 130), (4099, 132)):
        x = rng.standard_normal(shape).astype(np.float32)
        ck.c.put("r_det", x, "f32")
        for op in ("sum", "mean", "var"):
            ck.checks += 1
            out = []
            for _ in range(2):
                err, res = ck.c.run(op, ["r_det"], {"axis": 0})
                out.append(None if err else res["data"])
            if out[0] is None or out[0] != out[1]:
                ck.fail("%s axis 0 of %s twice: results differ (%r)" % (op, list(shape), out[0] is None))
        ck.c.call("tensor.delete", {"name": "r_det"})


def run(ck):
    for dt in harness.FLOAT_DTYPES:
        float_cases(ck, dt)
    column_cases(ck)

    # i32: sum and prod wrap, max/min/argmax exact.
    for op, fn in ref.INT.items():
        for shape, axis, keep in CASES[:10]:
            if op.startswith("arg") and isinstance(axis, list):
                continue
            x = values(shape, "i32", op)
            ck.check(op, [x], ["i32"], lambda v, a=axis, k=keep, fn=fn: fn(v, a, k),
                     attrs=attrs_of(axis, keep))
    big = rng.integers(2**29, 2**31 - 1, size=(6, 50))
    ck.check("sum", [big], ["i32"], lambda v: ref.sum_i32(v, 1), attrs={"axis": 1}, label="(wraps)")
    ck.check("prod", [big], ["i32"], lambda v: ref.prod_i32(v, 1), attrs={"axis": 1}, label="(wraps)")

    # Rank 0: axis 0 or -1 names the scalar itself.
    s = np.float64(2.5)
    for op in ("sum", "mean", "max", "prod"):
        ck.check(op, [s], ["f32"], lambda v, op=op: ref.FLOAT[op](v), attrs={"axis": -1}, label="(scalar)")
        ck.check(op, [s], ["f32"], lambda v, op=op: ref.FLOAT[op](v), attrs={"axis": [0], "keepdims": True},
                 label="(scalar)")
    ck.check("argmin", [s], ["f32"], lambda v: np.int64(0), attrs={"axis": 0}, out_dtype="i32", label="(scalar)")
    ck.check("var", [s], ["f32"], lambda v: ref.var(v), label="(scalar)")
    ck.check("var", [s], ["f32"], lambda v: ref.var(v, None, False, 0), attrs={"correction": 0}, label="(scalar)")
    ck.c.put("r_s", s, "f32")
    ck.expect_error("sum", ["r_s"], {"axis": 1}, "INVALID_ARGUMENT")

    # var/std: correction, including n <= correction (NaN for 0/0, inf else).
    x = rng.normal(3, 2, size=(4, 9))
    for c in (0, 1, 2.5, 9, 12):
        ck.check("var", [x], ["f32"], lambda v, c=c: ref.var(v, 1, False, c), attrs={"axis": 1, "correction": c})
        ck.check("std", [x], ["f32"], lambda v, c=c: ref.std(v, 0, True, c),
                 attrs={"axis": 0, "keepdims": True, "correction": c})
    # A large offset: the two-pass variance keeps its precision.
    x = 1000 + rng.uniform(-1, 1, size=(3, 2000))
    ck.check("var", [x], ["f32"], lambda v: ref.var(v, 1), attrs={"axis": 1}, tol=(1e-5, 1e-3), label="(offset)")

    # Empty reductions and zero-size inputs.
    for dt in ("f32", "bf16"):
        e = np.zeros((3, 0))
        ck.check("sum", [e], [dt], lambda v: ref.sum_(v, 1), attrs={"axis": 1}, label="(empty)")
        ck.check("prod", [e], [dt], lambda v: ref.prod(v, 1), attrs={"axis": 1}, label="(empty)")
        ck.check("mean", [e], [dt], lambda v: ref.mean(v, 1), attrs={"axis": 1}, label="(empty)")
        ck.check("var", [e], [dt], lambda v: ref.var(v, -1, True), attrs={"axis": -1, "keepdims": True},
                 label="(empty)")
        ck.check("sum", [np.zeros((2, 0, 3))], [dt], lambda v: ref.sum_(v), label="(empty all)")
        ck.check("max", [np.zeros((0, 3))], [dt], lambda v: ref.max_(v, 1), attrs={"axis": 1},
                 label="(no rows)")
        ck.check("sum", [np.zeros((0, 3))], [dt], lambda v: ref.sum_(v, 0, True),
                 attrs={"axis": 0, "keepdims": True}, label="(zero rows)")
        ck.check("argmax", [np.zeros((0, 3))], [dt], lambda v: ref.argmax(v, 1), attrs={"axis": 1},
                 out_dtype="i32", label="(no rows)")
    ck.check("sum", [np.zeros((3, 0))], ["i32"], lambda v: ref.sum_i32(v, 1), attrs={"axis": 1})
    ck.check("prod", [np.zeros((3, 0))], ["i32"], lambda v: ref.prod_i32(v, 1), attrs={"axis": 1})

    # NaN propagates through max/min; argmax picks the first NaN (NumPy).
    x = rng.uniform(-1, 1, size=(3, 40))
    x[1, 7] = np.nan
    x[1, 30] = np.nan
    x[2, 39] = np.nan
    ck.check("max", [x], ["f32"], lambda v: ref.max_(v, 1), attrs={"axis": 1}, label="(nan)")
    ck.check("min", [x], ["f32"], lambda v: ref.min_(v, 1), attrs={"axis": 1}, label="(nan)")
    ck.check("argmax", [x], ["f32"], lambda v: ref.argmax(v, 1), attrs={"axis": 1}, out_dtype="i32",
             label="(nan)")
    ck.check("argmin", [x], ["f32"], lambda v: ref.argmin(v, 1), attrs={"axis": 1}, out_dtype="i32",
             label="(nan)")
    x = np.full((2, 9000), -np.inf)
    ck.check("argmax", [x], ["f32"], lambda v: ref.argmax(v, 1), attrs={"axis": 1}, out_dtype="i32",
             label="(all -inf)")

    # Accuracy: 2^22 float32 values summed; a serial f32 loop is off by ~1e-3.
    n = 1 << 22
    for label, x in (("(0.1 x 2^22)", np.full(n, 0.1)), ("(uniform x 2^22)", rng.uniform(0, 1, size=n))):
        got = ck.check("sum", [x], ["f32"], ref.sum_, tol=(0, 1e-6), label=label)
        if got is not None:
            q = harness.quantize(x, "f32")
            serial = np.float32(0)
            # The error a serial loop would make, so the test demonstrably bites.
            if label.startswith("(0.1"):
                serial = np.cumsum(q.astype(np.float32), dtype=np.float32)[-1]
                if abs(serial - q.sum()) / q.sum() < 1e-6:
                    ck.fail("the accuracy test does not tell a serial sum apart")
    ck.check("mean", [rng.uniform(0, 1, size=(2, 1 << 20))], ["f32"], lambda v: ref.mean(v, 1),
             attrs={"axis": 1}, tol=(0, 1e-6), label="(2 x 2^20)")

    # Three passes (more than 4096^2 elements in a row): partials ping-pong.
    n = (1 << 24) + 12345
    x = rng.uniform(-1, 1, size=n).astype(np.float32)
    x[n - 5] = 7.0
    x[n - 3] = 7.0
    ck.c.put("r_big", x, "f32")
    for op, want in (("sum", x.astype(np.float64).sum()), ("argmax", n - 5), ("argmin", int(np.argmin(x)))):
        ck.checks += 1
        err, res = ck.c.run(op, ["r_big"])
        got = None if err else float(harness.result_array(res))
        if err or not np.isclose(got, want, rtol=1e-6, atol=1e-6 * np.abs(x).sum()):
            ck.fail("%s over 2^24 + 12345 elements: got %r (%r), want %r" % (op, got, err, want))
    ck.c.call("tensor.delete", {"name": "r_big"})

    # Bad input.
    c = ck.c
    c.put("r_a", np.zeros((2, 3)), "f32")
    c.put("r_u", np.zeros((2, 3)), "u8")
    c.put("r_i", np.zeros((2, 3)), "i32")
    c.put("r_e", np.zeros((3, 0)), "f32")
    ck.expect_error("sum", ["r_a"], {"axis": [1, 1]}, "INVALID_ARGUMENT")
    ck.expect_error("sum", ["r_a"], {"axis": [1, -1]}, "INVALID_ARGUMENT")
    ck.expect_error("sum", ["r_a"], {"axis": 2}, "INVALID_ARGUMENT")
    ck.expect_error("mean", ["r_a"], {"axis": -3}, "INVALID_ARGUMENT")
    ck.expect_error("sum", ["r_a"], {"axis": "x"}, "INVALID_ARGUMENT")
    ck.expect_error("sum", ["r_a"], {"keepdims": 1}, "INVALID_ARGUMENT")
    ck.expect_error("sum", ["r_a"], {"correction": 1}, "INVALID_ARGUMENT")
    ck.expect_error("var", ["r_a"], {"correction": -1}, "INVALID_ARGUMENT")
    ck.expect_error("argmax", ["r_a"], {"axis": [0, 1]}, "INVALID_ARGUMENT")
    ck.expect_error("argmax", ["r_a"], {"axis": 2}, "INVALID_ARGUMENT")
    ck.expect_error("max", ["r_e"], {"axis": 1}, "INVALID_ARGUMENT")
    ck.expect_error("argmin", ["r_e"], None, "INVALID_ARGUMENT")
    ck.expect_error("min", ["r_e"], None, "INVALID_ARGUMENT")
    ck.expect_error("sum", ["r_u"], None, "DTYPE_MISMATCH")
    ck.expect_error("argmax", ["r_u"], None, "DTYPE_MISMATCH")
    for op in ("mean", "var", "std"):
        ck.expect_error(op, ["r_i"], None, "DTYPE_MISMATCH")
    ck.expect_error("sum", ["r_a", "r_a"], None, "INVALID_ARGUMENT")
    ck.expect_error("sum", [], None, "INVALID_ARGUMENT")


if __name__ == "__main__":
    harness.main(run)

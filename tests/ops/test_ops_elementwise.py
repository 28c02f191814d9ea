"""Elementwise ops (binary, comparisons, where, unary) x every dtype, against
reference.py, including broadcasting edge cases: size-1 dims, rank 0, zero
size, sizes that are not multiples of the workgroup, and a tensor of more
than 65535 workgroups."""
import numpy as np

import harness
import reference as ref

rng = np.random.default_rng(1234)

SHAPE_PAIRS = [
    ((5,), (5,)),
    ((3, 4), (4,)),          # trailing broadcast
    ((2, 1, 3), (1, 4, 1)),  # both sides broadcast
    ((), (3, 2)),            # rank 0
    ((7, 1), ()),
    ((0, 3), (3,)),          # zero size
    ((1000,), (1,)),         # not a multiple of 256
    ((4, 6), (4, 6)),        # same layout, whole vec4s: binary_vec4.comp (f32, f16)
    ((1028,), (1028,)),      # likewise, over two workgroups
]


def values(shape, dtype, positive=False, small=False):
    if dtype in ("i32", "u8"):
        lo = 1 if positive else (0 if dtype == "u8" else -20)
        return rng.integers(lo, 6 if small else 40, size=shape)
    v = rng.uniform(0.1 if positive else -2, 2, size=shape)
    return v


def run(ck):
    for dt in harness.ALL_DTYPES:
        is_int = dt in ("i32", "u8")
        for op in ref.BINARY:
            for sa, sb in SHAPE_PAIRS:
                pos = op in ("pow", "div")
                a = values(sa, dt, positive=pos and not is_int, small=op == "pow")
                b = values(sb, dt, positive=pos, small=op == "pow")
                if op == "pow" and not is_int:
                    b = rng.uniform(-2, 2, size=sb)
                if is_int:
                    fn = ref.BINARY_INT[op]
                    ck.check(op, [a, b], [dt, dt], lambda x, y, fn=fn: ref.wrap(fn(x, y), dt))
                else:
                    tol = (5e-5, 5e-5) if op == "pow" and dt == "f32" else None
                    ck.check(op, [a, b], [dt, dt], ref.BINARY[op], tol=tol)
            # tensor-scalar forms
            a = values((4, 3), dt, positive=True)
            ck.check(op, [a], [dt], lambda x, op=op: (ref.BINARY_INT if is_int else ref.BINARY)[op](x, np.float64(2)) if not is_int else ref.wrap(ref.BINARY_INT[op](x, np.int64(2)), dt),
                     attrs={"scalar": 2}, label="(scalar)")
            ck.check(op, [a], [dt], lambda x, op=op: (ref.BINARY[op](np.float64(3), x) if not is_int else ref.wrap(ref.BINARY_INT[op](np.full_like(x, 3), x), dt)),
                     attrs={"scalar": 3, "reverse": True}, label="(reverse scalar)")
        for op in ref.COMPARE:
            for sa, sb in SHAPE_PAIRS[:5]:
                a = values(sa, dt, small=True)
                b = values(sb, dt, small=True)
                ck.check(op, [a, b], [dt, dt], ref.COMPARE[op], out_dtype="u8")
        c = rng.integers(0, 2, size=(3, 1))
        a = values((3, 4), dt)
        b = values((4,), dt)
        ck.check("where", [c, a, b], ["u8", dt, dt], ref.where)
        ck.check("where", [rng.integers(0, 2, size=(3, 4)), a, b], ["u8", dt, dt], ref.where)
        for op, fn in ref.UNARY.items():
            name, attrs = (op, None)
            if op == "gelu_tanh":
                name, attrs = "gelu", {"approximate": "tanh"}
            if is_int and op not in ("neg", "abs", "relu", "copy"):
                ck.expect_error(name, [], None, "INVALID_ARGUMENT")  # wrong arity, named op
                continue
            x = values((3, 5), dt, positive=op in ("log", "sqrt", "rsqrt"))
            if is_int:
                ck.check(name, [x], [dt], lambda v, fn=fn: ref.wrap(fn(v), dt), attrs=attrs)
            else:
                ck.check(name, [x], [dt], fn, attrs=attrs)
        x = values((2, 6), dt)
        ck.check("clamp", [x], [dt], lambda v: ref.clamp(v, 0 if dt == "u8" else -1, 1.5 if not is_int else 10),
                 attrs={"min": 0 if dt == "u8" else -1, "max": 1.5 if not is_int else 10})

    # More than 65535 workgroups of 256 in x: the grid spills into y.
    big = rng.uniform(-1, 1, size=(17_000_000,))
    ck.check("add", [big], ["f32"], lambda x: x + 1, attrs={"scalar": 1}, label="(grid > 65535)")

    # Bad input names the op and the operand.
    ck.c.put("e_a", np.zeros((2, 3)), "f32")
    ck.c.put("e_b", np.zeros((4,)), "f32")
    ck.c.put("e_i", np.zeros((3,)), "i32")
    ck.expect_error("add", ["e_a", "e_b"], None, "SHAPE_MISMATCH")
    ck.expect_error("add", ["e_a", "e_i"], None, "DTYPE_MISMATCH")
    ck.expect_error("exp", ["e_i"], None, "DTYPE_MISMATCH")
    ck.expect_error("add", ["e_a", "e_a", "e_a"], None, "INVALID_ARGUMENT")
    ck.expect_error("add", ["e_a"], None, "INVALID_ARGUMENT")
    ck.expect_error("add", ["e_a"], {"scalar": "x"}, "INVALID_ARGUMENT")
    ck.expect_error("add", ["e_a"], {"bogus": 1}, "INVALID_ARGUMENT")
    ck.expect_error("where", ["e_a", "e_a", "e_a"], None, "DTYPE_MISMATCH")
    ck.expect_error("gelu", ["e_a"], {"approximate": "cubic"}, "INVALID_ARGUMENT")

    # graph.run: a reference to a later node is refused even when a stored
    # tensor has that name (no cycles), and a failed graph stores nothing.
    ck.checks += 1
    err, _ = ck.c.call("graph.run", {"nodes": [
        {"id": "x", "op": "add", "inputs": ["e_a", "e_b"], "out": "g_x"},
        {"id": "e_a", "op": "exp", "inputs": ["x"]}]})
    if err is None or err["name"] != "INVALID_ARGUMENT" or "comes later" not in err["message"]:
        ck.fail("graph.run forward reference: %r" % (err,))
    ck.checks += 1
    err, _ = ck.c.call("graph.run", {"nodes": [
        {"id": "ok", "op": "exp", "inputs": ["e_a"], "out": "g_ok"},
        {"id": "bad", "op": "add", "inputs": ["ok", "e_b"]}]})
    err2, _ = ck.c.call("tensor.stat", {"name": "g_ok"})
    if err is None or err["name"] != "SHAPE_MISMATCH" or "node 1 'bad'" not in err["message"] or \
            err2 is None or err2["name"] != "NOT_FOUND":
        ck.fail("graph.run failing node: %r, stat %r" % (err, err2))


# ---- integer scalars are exact; pow follows C (issue 13, part 3) ----

I32_EDGE = np.array([0, 1, -1, 5, -7, 16777215, 16777216, 16777217, -16777217, 2**31 - 1, -2**31, 123456789],
                    dtype=np.int64)


def _pow_mod(x, e, dtype):
    """Integer pow as the daemon's (negative exponents: 0 except bases +-1), wrapped."""
    out = []
    for v in np.asarray(x, dtype=np.int64).ravel():
        v = int(v)
        if e < 0:
            out.append(1 if v == 1 else ((-1 if e % 2 else 1) if v == -1 else 0))
        else:
            out.append(pow(v, e, 2**32))
    return ref.wrap(np.array(out, dtype=np.int64).reshape(np.shape(x)), dtype)


def _expect_attr_error(ck, op, inputs, attrs, names):
    """INVALID_ARGUMENT whose message names the op and every string in `names`."""
    ck.checks += 1
    err, _ = ck.c.run(op, inputs, attrs)
    if err is None or err["name"] != "INVALID_ARGUMENT" or op not in err["message"] or \
            any(n not in err["message"] for n in names):
        ck.fail("%s %s %s: expected INVALID_ARGUMENT naming %s, got %r" % (op, inputs, attrs, names, err))


def run_int_scalars(ck):
    """Scalars on i32/u8 tensors are exact integers (not rounded through f32),
    wrap like the two-tensor form, and a scalar the dtype cannot hold (out of
    range, fractional, non-finite) is INVALID_ARGUMENT naming attr and dtype."""
    x = I32_EDGE
    for s in (16777217, -16777217, 2**31 - 1, -2**31, 123456789, 3):
        for op in ("add", "sub", "mul", "div", "maximum", "minimum"):
            fn = ref.BINARY_INT[op]
            ck.check(op, [x], ["i32"], lambda v, fn=fn, s=s: ref.wrap(fn(v, np.full_like(v, s)), "i32"),
                     attrs={"scalar": s}, label="(i32 scalar %d)" % s)
            ck.check(op, [x], ["i32"], lambda v, fn=fn, s=s: ref.wrap(fn(np.full_like(v, s), v), "i32"),
                     attrs={"scalar": s, "reverse": True}, label="(i32 reverse scalar %d)" % s)
        for op, fn in ref.COMPARE.items():
            ck.check(op, [x], ["i32"], lambda v, fn=fn, s=s: fn(v, np.float64(s)),
                     attrs={"scalar": s}, out_dtype="u8", label="(i32 scalar %d)" % s)
            ck.check(op, [x], ["i32"], lambda v, fn=fn, s=s: fn(np.float64(s), v),
                     attrs={"scalar": s, "reverse": True}, out_dtype="u8", label="(i32 reverse scalar %d)" % s)
    for e in (0, 1, 2, 3, 31, -1):
        ck.check("pow", [x], ["i32"], lambda v, e=e: _pow_mod(v, e, "i32"), attrs={"scalar": e},
                 label="(i32 scalar %d)" % e)
    # clamp bounds are exact too; an absent bound is no bound
    ck.check("clamp", [x], ["i32"], lambda v: np.clip(v, -16777217, 16777217),
             attrs={"min": -16777217, "max": 16777217}, label="(i32 exact bounds)")
    ck.check("clamp", [x], ["i32"], lambda v: np.clip(v, -2**31, 2**31 - 2),
             attrs={"max": 2**31 - 2}, label="(i32 max only)")
    ck.check("clamp", [x], ["i32"], lambda v: np.clip(v, 16777217, 2**31 - 1),
             attrs={"min": 16777217}, label="(i32 min only)")
    # 2.0 is the integer 2 (msgpack floats and ints are not told apart)
    ck.check("add", [x], ["i32"], lambda v: ref.wrap(v + 2, "i32"), attrs={"scalar": 2.0}, label="(i32 scalar 2.0)")
    u = np.array([0, 1, 2, 100, 200, 254, 255], dtype=np.int64)
    for s in (0, 1, 200, 255):
        for op in ("add", "sub", "mul", "div", "maximum", "minimum"):
            fn = ref.BINARY_INT[op]
            ck.check(op, [u], ["u8"], lambda v, fn=fn, s=s: ref.wrap(fn(v, np.full_like(v, s)), "u8"),
                     attrs={"scalar": s}, label="(u8 scalar %d)" % s)
            ck.check(op, [u], ["u8"], lambda v, fn=fn, s=s: ref.wrap(fn(np.full_like(v, s), v), "u8"),
                     attrs={"scalar": s, "reverse": True}, label="(u8 reverse scalar %d)" % s)
        for op, fn in ref.COMPARE.items():
            ck.check(op, [u], ["u8"], lambda v, fn=fn, s=s: fn(v, np.float64(s)),
                     attrs={"scalar": s}, out_dtype="u8", label="(u8 scalar %d)" % s)
    ck.check("clamp", [u], ["u8"], lambda v: np.clip(v, 1, 254), attrs={"min": 1, "max": 254}, label="(u8)")
    # refused: what the dtype cannot hold, and fractions (NumPy's same-kind rule)
    ck.c.put("s_i", x, "i32")
    ck.c.put("s_u", u, "u8")
    for op in ("add", "sub", "mul", "div", "pow", "maximum", "minimum", "eq", "lt", "ge"):
        for v in (2**31, -2**31 - 1, 2**40, 2.5, -0.5, 16777216.5, float("inf"), float("nan")):
            _expect_attr_error(ck, op, ["s_i"], {"scalar": v}, ["'scalar'", "i32"])
        for v in (256, -1, 1.5):
            _expect_attr_error(ck, op, ["s_u"], {"scalar": v, "reverse": True}, ["'scalar'", "u8"])
    _expect_attr_error(ck, "clamp", ["s_i"], {"min": 0.5}, ["'min'", "i32"])
    _expect_attr_error(ck, "clamp", ["s_i"], {"max": 2**31}, ["'max'", "i32"])
    _expect_attr_error(ck, "clamp", ["s_u"], {"min": -1}, ["'min'", "u8"])
    _expect_attr_error(ck, "clamp", ["s_u"], {"min": 0, "max": 300}, ["'max'", "u8"])
    # graph.run refuses at the node, before anything runs
    ck.checks += 1
    err, _ = ck.c.call("graph.run", {"nodes": [{"id": "n", "op": "add", "inputs": ["s_i"],
                                                "attrs": {"scalar": 0.5}, "out": "s_bad"}]})
    if err is None or err["name"] != "INVALID_ARGUMENT" or "'scalar'" not in err["message"]:
        ck.fail("graph.run with a fractional i32 scalar: %r" % (err,))


POW_X = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 3.0, -3.0, 1.5, -1.5, float("inf"), float("-inf"),
         float("nan")]
POW_Y = [0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 3.0, -3.0, 0.5, -0.5, 1.5, -2.5, 63.0, 2.0**24, -(2.0**24),
         3e38, float("inf"), float("-inf"), float("nan")]


def _pow_ok(got, want, rtol):
    """Exact (value and sign of zero, inf, nan) where either side is 0 or not
    finite; relative `rtol` elsewhere (GLSL pow is exp2(y log2 x))."""
    got = np.asarray(got, np.float64)
    want = np.asarray(want, np.float64)
    special = ~np.isfinite(want) | (want == 0) | ~np.isfinite(got) | (got == 0)
    with np.errstate(invalid="ignore"):
        exact = (np.isnan(got) & np.isnan(want)) | ((got == want) & (np.signbit(got) == np.signbit(want)))
        close = np.isclose(got, want, rtol=rtol, atol=0)
    return np.where(special, exact, close)


def _pow_check(ck, inputs, dtypes, attrs, want, dt, label, bx, by):
    """Run pow on `inputs`; compare with `want`; bx, by: the operand of each element (for the message)."""
    ck.checks += 1
    names = []
    for a, d in zip(inputs, dtypes):
        ck.serial += 1
        names.append("p%d" % ck.serial)
        ck.c.put(names[-1], a, d)
    err, res = ck.c.run("pow", names, attrs)
    if err is not None:
        ck.fail("pow %s %s: %r" % (label, dt, err))
        return
    got = harness.result_array(res)
    ok = _pow_ok(got, want, 5e-5 if dt == "f32" else harness.TOL[dt][1])
    if got.shape != want.shape or not ok.all():
        i = np.argwhere(~ok)[0] if got.shape == want.shape else None
        ck.fail("pow %s %s: %d wrong; first x=%r y=%r got %r want %r" % (
            label, dt, int((~ok).sum()), bx[tuple(i)] if i is not None else None,
            by[tuple(i)] if i is not None else None, got[tuple(i)] if i is not None else got.shape,
            want[tuple(i)] if i is not None else want.shape))


def _pow_ref(x, y, dt):
    """C's powf (NumPy's float32 power calls it) on the stored values, rounded to dt.
    Both operands are arrays of one shape: with a scalar exponent NumPy 2 takes
    fast paths (y = 0.5 is sqrt, so pow(-0, 0.5) gave -0 where C gives +0)."""
    x = np.asarray(x, dtype=np.float32)
    y = np.asarray(y, dtype=np.float32)
    x, y = np.broadcast_arrays(x, y)
    with np.errstate(all="ignore"):
        r = np.power(np.ascontiguousarray(x), np.ascontiguousarray(y))
    return harness.quantize(r, dt)


def run_pow_special(ck):
    """pow on a table of special values x every float dtype, in the broadcast
    (binary.comp), same-shape (binary_vec4.comp for f32/f16) and both scalar
    forms, against C's pow: exact for 0, inf, nan and the sign of zero."""
    xs = np.array(POW_X)
    ys = np.array(POW_Y)
    for dt in harness.FLOAT_DTYPES:
        qx = harness.quantize(xs, dt)
        qy = harness.quantize(ys, dt)
        bx, by = np.broadcast_arrays(qx[:, None], qy[None, :])
        _pow_check(ck, [xs[:, None], ys[None, :]], [dt, dt], None, _pow_ref(bx, by, dt), dt, "(broadcast)", bx, by)
        fx, fy = bx.ravel(), by.ravel()
        pad = (-fx.size) % 4
        fx = np.concatenate([fx, np.ones(pad)])
        fy = np.concatenate([fy, np.ones(pad)])
        _pow_check(ck, [fx, fy], [dt, dt], None, _pow_ref(fx, fy, dt), dt, "(same shape)", fx, fy)
        for y in POW_Y:
            _pow_check(ck, [xs], [dt], {"scalar": y}, _pow_ref(qx, np.float32(y), dt), dt, "(scalar %r)" % y,
                       qx, np.full_like(qx, np.float32(y)))
        for x in POW_X:
            _pow_check(ck, [ys], [dt], {"scalar": x, "reverse": True}, _pow_ref(np.float32(x), qy, dt), dt,
                       "(reverse scalar %r)" % x, np.full_like(qy, np.float32(x)), qy)



def run_float_binary(ck):
    """gelu_grad, gelu_tanh_grad: float dtypes, broadcasting and the scalar
    forms, against float64 references; integers refused."""
    for dt in harness.FLOAT_DTYPES:
        for op, fn in ref.FLOAT_BINARY.items():
            for sa, sb in SHAPE_PAIRS:
                a, b = values(sa, dt), rng.uniform(-4, 4, size=sb)
                ck.check(op, [a, b], [dt, dt], fn)
            a = values((4, 8), dt)
            ck.check(op, [a], [dt], lambda x, fn=fn: fn(x, np.float64(0.7)), attrs={"scalar": 0.7}, label="(scalar)")
            ck.check(op, [a], [dt], lambda x, fn=fn: fn(np.float64(1.5), x), attrs={"scalar": 1.5, "reverse": True},
                     label="(reverse scalar)")
    ck.c.put("fb_i", np.arange(6, dtype=np.int64), "i32")
    for op in ref.FLOAT_BINARY:
        ck.checks += 1
        err, _ = ck.c.call("op.run", {"op": op, "inputs": ["fb_i", "fb_i"], "out": "fb_o"})
        if not err or err["code"] != 101:
            ck.fail("%s on i32: expected DTYPE_MISMATCH, got %r" % (op, err))


def run_all(ck):
    run(ck)
    run_float_binary(ck)
    run_int_scalars(ck)
    run_pow_special(ck)


if __name__ == "__main__":
    harness.main(run_all)

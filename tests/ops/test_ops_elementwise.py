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


if __name__ == "__main__":
    harness.main(run)

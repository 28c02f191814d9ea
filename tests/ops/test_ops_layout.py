"""Layout ops x every dtype against ref_layout.py: transpose, permute,
reshape, slice, concat, stack, pad, gather / index_select, one_hot; negative
axes, zero-size tensors, sizes that are not multiples of the workgroup, a
grid that spills into y, and bad attributes."""
import time

import numpy as np

import harness
import ref_layout as ref

rng = np.random.default_rng(4321)


def values(shape, dtype, gen=None):
    gen = gen or rng
    if dtype == "u8":
        return gen.integers(0, 256, size=shape)
    if dtype == "i32":
        return gen.integers(-2**31, 2**31, size=shape, dtype=np.int64)
    return gen.uniform(-100, 100, size=shape)


def exact(dt):
    return (0, 0) if dt in ("i32", "u8") else (0, 0)


def run_dtype(ck, dt):
    def chk(op, arrays, fn, attrs=None, dtypes=None, label=""):
        ck.check(op, arrays, dtypes or [dt] * len(arrays), fn, attrs=attrs, tol=(0, 0), label=label)

    x3 = values((3, 5, 7), dt)
    chk("transpose", [x3], ref.transpose)
    chk("transpose", [x3], lambda x: ref.transpose(x, 0, -1), {"dim0": 0, "dim1": -1})
    chk("transpose", [x3], lambda x: x, {"dim0": 1, "dim1": -2}, label="(same dim)")
    chk("transpose", [values((0, 4), dt)], ref.transpose, label="(zero size)")
    chk("transpose", [values((5,), dt)], lambda x: x, {"dim0": 0, "dim1": 0}, label="(rank 1)")

    x4 = values((2, 3, 4, 5), dt)
    chk("permute", [x4], lambda x: ref.permute(x, [2, 0, 3, 1]), {"dims": [2, 0, 3, 1]})
    chk("permute", [x4], lambda x: ref.permute(x, [3, 2, 1, 0]), {"dims": [-1, -2, -3, -4]}, label="(negative)")
    chk("permute", [values((), dt)], lambda x: x, {"dims": []}, label="(rank 0)")
    # the last dim kept and a multiple of 4: 32-bit dtypes copy vec4s (layout_strided4);
    # their own generator, so the cases after them see the values they always did
    g4 = np.random.default_rng(4)
    xh = values((2, 6, 3, 8), dt, g4)
    chk("permute", [xh], lambda x: ref.permute(x, [0, 2, 1, 3]), {"dims": [0, 2, 1, 3]}, label="(last dim kept)")
    chk("permute", [values((3, 5, 12), dt, g4)], lambda x: ref.permute(x, [1, 0, 2]), {"dims": [1, 0, 2]},
        label="(last dim kept, 12)")
    chk("transpose", [values((4, 6, 4), dt, g4)], lambda x: ref.transpose(x, 0, 1),
        {"dim0": 0, "dim1": 1}, label="(last dim kept)")

    chk("reshape", [x3], lambda x: ref.reshape(x, (7, -1)), {"shape": [7, -1]})
    chk("reshape", [x3], lambda x: ref.reshape(x, (105,)), {"shape": 105}, label="(int shape)")
    chk("reshape", [values((1, 1), dt)], lambda x: ref.reshape(x, ()), {"shape": []}, label="(to rank 0)")
    chk("reshape", [values((0, 3), dt)], lambda x: ref.reshape(x, (3, 0, 2)), {"shape": [3, 0, 2]}, label="(zero size)")

    chk("slice", [x3], lambda x: x[1:, -4:-1], {"starts": [1, -4], "ends": [100, -1]})
    chk("slice", [x3], lambda x: x[:, :, 1::3], {"starts": [1], "ends": [2**62], "steps": [3], "axes": [-1]})
    chk("slice", [x3], lambda x: x[-100:2, ::2, 5:1], {"starts": [-100, 0, 5], "ends": [2, 9, 1], "steps": [1, 2, 1]},
        label="(clamp, empty)")
    chk("slice", [values((300,), dt)], lambda x: x[7:299:5], {"starts": 7, "ends": 299, "steps": 5})

    a, b, c = values((2, 3, 4), dt), values((2, 1, 4), dt), values((2, 0, 4), dt)
    chk("concat", [a, b, c, a], lambda *xs: ref.concat(*xs, axis=1), {"axis": 1})
    chk("concat", [a, values((2, 3, 2), dt)], lambda *xs: ref.concat(*xs, axis=-1), {"axis": -1})
    chk("concat", [a, values((5, 3, 4), dt)], lambda *xs: ref.concat(*xs, axis=0))
    chk("concat", [values((0, 4), dt), values((0, 4), dt)], lambda *xs: ref.concat(*xs, axis=0), label="(zero size)")
    chk("concat", [values((3,), dt) for _ in range(8)], lambda *xs: ref.concat(*xs), label="(8 inputs)")

    chk("stack", [a, a, values((2, 3, 4), dt)], lambda *xs: ref.stack(*xs, axis=0))
    chk("stack", [a, values((2, 3, 4), dt)], lambda *xs: ref.stack(*xs, axis=-1), {"axis": -1})
    chk("stack", [a, a], lambda *xs: ref.stack(*xs, axis=2), {"axis": 2})
    chk("stack", [values((), dt), values((), dt)], lambda *xs: ref.stack(*xs), label="(rank 0)")

    chk("pad", [x3], lambda x: ref.pad(x, [1, 2, 0, 3], -7.5, dtype=dt), {"pads": [1, 2, 0, 3], "value": -7.5})
    chk("pad", [x3], lambda x: ref.pad(x, [2, 1], 0, axes=[0], dtype=dt), {"pads": [2, 1], "axes": [-3]})
    chk("pad", [values((0, 2), dt)], lambda x: ref.pad(x, [1, 1, 0, 0], 3, dtype=dt), {"pads": [1, 1, 0, 0], "value": 3},
        label="(zero-size input)")
    chk("pad", [values((4,), dt)], lambda x: ref.pad(x, [0, 0], 1e10, dtype=dt), {"pads": [0, 0], "value": 1e10},
        label="(no padding)")

    # embedding lookup: x [V, D], indices [B, T] -> [B, T, D]; -1 counts from
    # the end, V and -V-1 give zero rows
    emb = values((50, 7), dt)
    idx = rng.integers(0, 50, size=(3, 4))
    idx[0, 0], idx[1, 2], idx[2, 3] = -1, 50, -51
    chk("gather", [emb, idx], ref.gather, dtypes=[dt, "i32"])
    # embedding(table, indices): gather on axis 0 of a 2-D table
    chk("embedding", [emb, idx], ref.gather, dtypes=[dt, "i32"])
    chk("embedding", [emb, np.array(3)], ref.gather, dtypes=[dt, "i32"], label="(scalar index)")
    chk("embedding", [emb, np.zeros((2, 0))], ref.gather, dtypes=[dt, "i32"], label="(no indices)")
    chk("index_select", [x3, np.array([4, 0, -2])], lambda x, i: ref.gather(x, i, axis=1), {"axis": -2},
        dtypes=[dt, "i32"])
    chk("gather", [x3, np.array(2)], lambda x, i: ref.gather(x, i, axis=2), {"axis": 2}, dtypes=[dt, "i32"],
        label="(scalar index)")
    chk("gather", [values((0, 3), dt), np.array([0, 1])], ref.gather, dtypes=[dt, "i32"], label="(empty table)")
    chk("gather", [emb, np.zeros((0,))], ref.gather, dtypes=[dt, "i32"], label="(no indices)")
    # rows in whole vec4s (32-bit dtypes: layout_gather4), out-of-range rows zero
    g4 = np.random.default_rng(5)
    emb8 = values((20, 12), dt, g4)
    i8 = np.array([[3, -1, 19], [20, -21, 0]])
    chk("gather", [emb8, i8], ref.gather, dtypes=[dt, "i32"], label="(vec4 rows)")
    chk("index_select", [values((3, 5, 8), dt, g4), np.array([4, 0, -2])], lambda x, i: ref.gather(x, i, axis=1),
        {"axis": 1}, dtypes=[dt, "i32"], label="(vec4 rows)")

    classes = rng.integers(-1, 6, size=(4, 3))
    ck.check("one_hot", [classes], ["i32"], lambda i: ref.one_hot(i, 5), attrs={"num_classes": 5, "dtype": dt},
             out_dtype=dt, tol=(0, 0))


def run(ck):
    for dt in harness.ALL_DTYPES:
        run_dtype(ck, dt)
    ck.check("one_hot", [np.array([0, 2, 1])], ["i32"], lambda i: ref.one_hot(i, 3), attrs={"num_classes": 3},
             out_dtype="f32", label="(default dtype)")
    ck.check("one_hot", [np.array([0, 2])], ["i32"], lambda i: np.zeros((2, 0)), attrs={"num_classes": 0},
             out_dtype="f32", label="(no classes)")
    # A large transpose, and a copy of more than 65535 workgroups of 256 (the
    # grid spills into y).
    big = rng.uniform(-1, 1, size=(513, 1031))
    ck.check("transpose", [big], ["f32"], ref.transpose, tol=(0, 0), label="(large)")
    huge = rng.integers(0, 256, size=(17_000_001,))
    ck.check("reshape", [huge], ["u8"], lambda x: x.reshape(-1, 1), attrs={"shape": [-1, 1]}, tol=(0, 0),
             label="(grid > 65535)")

    c = ck.c
    c.put("e_x", np.zeros((2, 3)), "f32")
    c.put("e_v", np.zeros((4,)), "f32")
    c.put("e_s", np.zeros(()), "f32")
    c.put("e_i", np.zeros((3,), dtype=np.int64), "i32")
    c.put("e_u", np.zeros((3,), dtype=np.int64), "u8")
    bad = [
        ("transpose", ["e_v"], None, "INVALID_ARGUMENT"),              # rank 1, default dims
        ("transpose", ["e_x"], {"dim0": 2}, "INVALID_ARGUMENT"),
        ("transpose", ["e_x"], {"dim1": -3}, "INVALID_ARGUMENT"),
        ("transpose", ["e_x"], {"dim0": 1.5}, "INVALID_ARGUMENT"),
        ("permute", ["e_x"], {"dims": [0, 0]}, "INVALID_ARGUMENT"),
        ("permute", ["e_x"], {"dims": [1, 0, 2]}, "INVALID_ARGUMENT"),
        ("permute", ["e_x"], None, "INVALID_ARGUMENT"),
        ("reshape", ["e_x"], {"shape": [4, 2]}, "SHAPE_MISMATCH"),
        ("reshape", ["e_x"], {"shape": [-1, -1]}, "INVALID_ARGUMENT"),
        ("reshape", ["e_x"], {"shape": [-1, 4]}, "SHAPE_MISMATCH"),
        ("reshape", ["e_x"], {"shape": [-2, -3]}, "INVALID_ARGUMENT"),
        ("reshape", ["e_x"], {"shape": [2**40, 2**40, 2**40]}, "SHAPE_MISMATCH"),
        ("slice", ["e_x"], {"starts": [0], "ends": [1], "steps": [0]}, "INVALID_ARGUMENT"),
        ("slice", ["e_x"], {"starts": [0], "ends": [1], "steps": [-1]}, "INVALID_ARGUMENT"),
        ("slice", ["e_x"], {"starts": [0, 0], "ends": [1]}, "INVALID_ARGUMENT"),
        ("slice", ["e_x"], {"starts": [0, 0, 0], "ends": [1, 1, 1]}, "INVALID_ARGUMENT"),
        ("slice", ["e_x"], {"starts": [0, 0], "ends": [1, 1], "axes": [1, -1]}, "INVALID_ARGUMENT"),
        ("slice", ["e_x"], {"starts": [0], "ends": [1], "axes": [2]}, "INVALID_ARGUMENT"),
        ("slice", ["e_s"], {"starts": [0], "ends": [1], "axes": [0]}, "INVALID_ARGUMENT"),
        ("concat", ["e_x", "e_v"], None, "SHAPE_MISMATCH"),
        ("concat", ["e_v", "e_i"], None, "DTYPE_MISMATCH"),
        ("concat", ["e_x", "e_x"], {"axis": 2}, "INVALID_ARGUMENT"),
        ("concat", ["e_s", "e_s"], None, "INVALID_ARGUMENT"),
        ("concat", ["e_v"] * 9, None, "INVALID_ARGUMENT"),
        ("concat", [], None, "INVALID_ARGUMENT"),
        ("stack", ["e_x", "e_v"], None, "SHAPE_MISMATCH"),
        ("stack", ["e_x", "e_x"], {"axis": 3}, "INVALID_ARGUMENT"),
        ("stack", ["e_i", "e_u"], None, "DTYPE_MISMATCH"),
        ("pad", ["e_x"], {"pads": [1]}, "INVALID_ARGUMENT"),
        ("pad", ["e_x"], {"pads": [1, -1]}, "INVALID_ARGUMENT"),
        ("pad", ["e_x"], {"pads": [1, 1, 1, 1, 1, 1]}, "INVALID_ARGUMENT"),
        ("pad", ["e_x"], {"pads": [1, 1], "axes": [0, 1]}, "INVALID_ARGUMENT"),
        ("pad", ["e_x"], {"pads": [1, 1, 1, 1], "axes": [0, -2]}, "INVALID_ARGUMENT"),
        ("pad", ["e_x"], {"pads": [1, 1], "mode": "reflect"}, "INVALID_ARGUMENT"),
        ("pad", ["e_x"], {"pads": [2**62, 2**62]}, "RESOURCE_EXHAUSTED"),
        ("pad", ["e_x"], None, "INVALID_ARGUMENT"),
        ("gather", ["e_x", "e_v"], None, "DTYPE_MISMATCH"),
        ("gather", ["e_x", "e_u"], None, "DTYPE_MISMATCH"),
        ("gather", ["e_x", "e_i"], {"axis": -3}, "INVALID_ARGUMENT"),
        ("gather", ["e_s", "e_i"], None, "INVALID_ARGUMENT"),
        ("gather", ["e_x"], None, "INVALID_ARGUMENT"),
        ("one_hot", ["e_i"], None, "INVALID_ARGUMENT"),
        ("one_hot", ["e_i"], {"num_classes": -1}, "INVALID_ARGUMENT"),
        ("one_hot", ["e_i"], {"num_classes": 3, "dtype": "f64"}, "INVALID_ARGUMENT"),
        ("one_hot", ["e_v"], {"num_classes": 3}, "DTYPE_MISMATCH"),
        ("one_hot", ["e_i"], {"num_classes": 3, "bogus": 1}, "INVALID_ARGUMENT"),
    ]
    for op, inputs, attrs, code in bad:
        ck.expect_error(op, inputs, attrs, code)


def run_index_add(ck):
    """index_add (the adjoint of gather) for every dtype it takes: repeated,
    negative and out-of-range indices, other axes, no indices, an empty x,
    more than 32768 indices (several passes), a grid that spills into y,
    bit-identical repeats, and bad inputs."""
    for dt in ("f32", "f16", "bf16", "i32"):
        def vals(shape):
            return rng.integers(-50, 50, size=shape) if dt == "i32" else rng.uniform(-2, 2, size=shape)

        def chk(arrays, fn, attrs=None, label=""):
            ck.check("index_add", arrays, [dt, "i32", dt], fn, attrs=attrs, label=label)

        idx = np.array([[0, 5, 5, -1], [6, -7, 2, 5], [3, 3, 3, -6]])
        chk([vals((6, 5)), idx, vals((3, 4, 5))], ref.index_add)
        chk([vals((2, 4, 3)), np.array([3, 0, 3, -4, 9]), vals((2, 5, 3))],
            lambda x, i, s: ref.index_add(x, i, s, axis=1), {"axis": -2})
        chk([vals((3, 4)), np.array(2), vals((3,))], lambda x, i, s: ref.index_add(x, i, s, axis=1),
            {"axis": 1}, label="(scalar index)")
        chk([vals((4, 5)), np.zeros((0,)), vals((0, 5))], ref.index_add, label="(no indices)")
        chk([vals((0, 3)), np.array([0, 1]), vals((2, 3))], ref.index_add, label="(empty x)")
        # ~17500 f32 additions per element, partial sums up to a few hundred:
        # their rounding reaches ~1e-3 absolute, so a sum that ends near zero
        # needs that much (1e-4 failed once at 2.3e-5 relative); a lost or
        # doubled index moves a sum by one of its terms, 1 on average
        big = rng.integers(-4, 4, size=(70_001,))
        ck.check("index_add", [vals((3, 2)), big, vals((70_001, 2))], [dt, "i32", dt], ref.index_add,
                 tol=(2e-3, 1e-5) if dt == "f32" else None, label="(3 passes)")
    # one workgroup per (row, 256 columns): 70000 rows spill the grid into y
    ck.check("index_add", [np.zeros((70_000,)), np.array([69_999, 5, 5]), np.array([1.0, 2.0, 3.0])],
             ["f32", "i32", "f32"], ref.index_add, tol=(0, 0), label="(grid > 65535)")
    # f32: exactly the documented order (in index order from 0, then x), on
    # a sort that crosses several bitonic stages: 5000 indices, duplicates,
    # negative and out-of-range ones, 1000 rows, a middle axis
    x = rng.uniform(-1, 1, size=(2, 1000, 3))
    i = rng.integers(-1003, 1003, size=(50, 100))
    src = rng.uniform(-1, 1, size=(2, 50, 100, 3))
    ck.check("index_add", [x, i, src], ["f32", "i32", "f32"],
             lambda x, i, s: ref.index_add_f32_order(x, i, s, axis=1), attrs={"axis": 1}, tol=(0, 0),
             label="(sorted, exact order)")
    # one row gets 40,000 indices: its segment is summed over two passes
    i = np.where(rng.uniform(size=50_000) < 0.8, 1, rng.integers(0, 4, size=50_000))
    ck.check("index_add", [rng.uniform(-1, 1, size=(4, 2)), i, rng.uniform(-1, 1, size=(50_000, 2))],
             ["f32", "i32", "f32"], ref.index_add, tol=(1e-4, 1e-5), label="(long segment)")
    # work proportional to the indices, not rows x indices: 400,000 rows and
    # 2,000 indices (the row-scanning kernel took ~20 us per row per pass on
    # lavapipe, seconds here)
    x = np.zeros((400_000, 2))
    i = rng.integers(0, 400_000, size=(2_000,))
    src = rng.uniform(-1, 1, size=(2_000, 2))
    c = ck.c
    c.put("ia_bx", x, "f32")
    c.put("ia_bi", i, "i32")
    c.put("ia_bs", src, "f32")
    t0 = time.time()
    err, res = c.run("index_add", ["ia_bx", "ia_bi", "ia_bs"], None, "ia_bo")
    dt_big = time.time() - t0
    ck.checks += 1
    if err is not None:
        ck.fail("index_add on 400,000 rows: %r" % (err,))
    elif dt_big > 3.0:
        ck.fail("index_add on 400,000 rows and 2,000 indices took %.1f s" % dt_big)
    else:
        err, res = c.call("tensor.get", {"name": "ia_bo"})
        got = harness.result_array(res) if err is None else None
        if got is None or not np.array_equal(got, ref.index_add_f32_order(x, i, src)):
            ck.fail("index_add on 400,000 rows: wrong values")
    for name in ("ia_bx", "ia_bi", "ia_bs", "ia_bo"):
        c.call("tensor.delete", {"name": name})
    # bit-identical results from run to run
    c.put("ia_x", rng.uniform(-1, 1, size=(5, 7)), "f32")
    c.put("ia_i", rng.integers(0, 5, size=(40_000,)), "i32")
    c.put("ia_s", rng.uniform(-1, 1, size=(40_000, 7)), "f32")
    runs = [c.run("index_add", ["ia_x", "ia_i", "ia_s"]) for _ in range(3)]
    ck.checks += 1
    if any(e is not None for e, _ in runs) or len({r["data"] for _, r in runs}) != 1:
        ck.fail("index_add is not bit-reproducible: %r" % ([e for e, _ in runs],))
    c.put("ia_u", np.zeros((3, 2)), "u8")
    c.put("ia_f", np.zeros((2,)), "f32")
    c.put("ia_v", np.zeros((3, 2)), "f32")
    c.put("ia_w", np.zeros((2, 2)), "f32")
    c.put("ia_h", np.zeros((2, 2)), "f16")
    c.put("ia_j", np.array([0, 1]), "i32")
    c.put("ia_s0", np.zeros(()), "f32")
    for inputs, attrs, code in (
        (["ia_u", "ia_j", "ia_u"], None, "DTYPE_MISMATCH"),           # u8 data
        (["ia_v", "ia_f", "ia_w"], None, "DTYPE_MISMATCH"),           # float indices
        (["ia_v", "ia_j", "ia_h"], None, "DTYPE_MISMATCH"),           # source dtype differs
        (["ia_v", "ia_j", "ia_v"], None, "SHAPE_MISMATCH"),           # source [3, 2], want [2, 2]
        (["ia_v", "ia_j", "ia_f"], None, "SHAPE_MISMATCH"),
        (["ia_v", "ia_j", "ia_w"], {"axis": 2}, "INVALID_ARGUMENT"),
        (["ia_s0", "ia_j", "ia_f"], None, "INVALID_ARGUMENT"),        # rank 0
        (["ia_v", "ia_j"], None, "INVALID_ARGUMENT"),
        (["ia_v", "ia_j", "ia_w"], {"axis": "0"}, "INVALID_ARGUMENT"),
        (["ia_v", "ia_j", "ia_w"], {"bogus": 1}, "INVALID_ARGUMENT"),
    ):
        ck.expect_error("index_add", inputs, attrs, code)


def run_views(ck):
    """reshape is a view inside a graph (later nodes read the input's memory)
    and a copy when stored: the stored tensor must survive the input's delete."""
    a = np.arange(12, dtype=np.float32)
    ck.c.put("v_a", a, "f32")
    ck.checks += 1
    err, res = ck.c.call("graph.run", {"nodes": [
        {"id": "v", "op": "reshape", "inputs": ["v_a"], "attrs": {"shape": [3, 4]}},
        {"id": "t", "op": "transpose", "inputs": ["v"]},
        {"id": "s", "op": "reshape", "inputs": ["t"], "attrs": {"shape": [-1]}, "out": "v_s"}],
        "outputs": ["v", "t"]})
    if err is not None:
        ck.fail("reshape view graph: %r" % (err,))
        return
    if harness.result_array(res["outputs"]["v"]).tolist() != a.reshape(3, 4).tolist() or \
            harness.result_array(res["outputs"]["t"]).tolist() != a.reshape(3, 4).T.tolist():
        ck.fail("reshape view graph: wrong values")
    ck.c.call("tensor.delete", {"name": "v_a"})
    ck.checks += 1
    err, res = ck.c.call("tensor.get", {"name": "v_s"})
    if err is not None or harness.result_array(res).tolist() != a.reshape(3, 4).T.reshape(-1).tolist():
        ck.fail("stored reshape is not an independent copy: %r" % (err,))


if __name__ == "__main__":
    harness.main(lambda ck: (run(ck), run_index_add(ck), run_views(ck)))

"""matmul x every float dtype against ref_linalg.py: NumPy's 1-D promotion,
batch broadcasting (up to 6 alternating broadcast dims), sizes that are not
tile multiples, zero-size M, N, K and batch, one 256^3 product, a batch big
enough for the 128x128-tile kernel, graph.run chaining, and the errors."""
import time

import numpy as np

import harness
import ref_linalg as ref

rng = np.random.default_rng(4321)

# f32 accumulation over K terms, compared with float64.
TOL = {"f32": (1e-4, 1e-4), "f16": (3e-3, 3e-3), "bf16": (2e-2, 2e-2)}

SHAPES = [
    ((3, 4), (4, 5)),
    ((67, 33), (33, 129)),        # no size a tile multiple
    ((4,), (4, 5)),               # 1-D left: [1,K] then the 1 removed
    ((5, 4), (4,)),               # 1-D right
    ((7,), (7,)),                 # 1-D both: a rank-0 result
    ((2, 1, 3, 4), (5, 4, 6)),    # batch broadcast -> [2,5,3,6]
    ((3, 4), (2, 4, 5)),          # 2-D against a batch
    ((4,), (2, 4, 5)),            # 1-D against a batch -> [2,5]
    ((2, 3, 5, 4), (4,)),         # batch against 1-D -> [2,3,5]
    ((2, 1, 2, 1, 2, 1, 3, 4), (1, 2, 1, 2, 1, 2, 4, 2)),  # 6 batch dims, none collapsible
    ((3, 1, 70, 20), (1, 4, 20, 65)),                     # batch broadcast, 2x2 tiles each
]


def values(shape):
    return rng.uniform(-1, 1, size=shape)


def run(ck):
    for dt in harness.FLOAT_DTYPES:
        for sa, sb in SHAPES:
            ck.check("matmul", [values(sa), values(sb)], [dt, dt], ref.matmul, tol=TOL[dt])
        # zero sizes: K = 0 gives zeros, M, N or the batch = 0 give empty results
        for sa, sb in [((3, 0), (0, 4)), ((0, 3), (3, 4)), ((3, 5), (5, 0)), ((0, 2, 3), (3, 4)),
                       ((2, 0), (0,)), ((0,), (0,))]:
            ck.check("matmul", [values(sa), values(sb)], [dt, dt], ref.matmul, tol=TOL[dt])
    # bmm: matmul's kernel for [B, M, K] @ [B, K, N], with its transposes
    for dt in harness.FLOAT_DTYPES:
        for sa, sb in (((2, 3, 4), (2, 4, 5)), ((1, 70, 20), (1, 20, 65)), ((3, 0, 4), (3, 4, 2))):
            ck.check("bmm", [values(sa), values(sb)], [dt, dt], ref.matmul, tol=TOL[dt])
        ck.check("bmm", [values((2, 4, 3)), values((2, 5, 4))], [dt, dt],
                 lambda a, b: ref.matmul(np.swapaxes(a, 1, 2), np.swapaxes(b, 1, 2)),
                 {"transpose_a": True, "transpose_b": True}, tol=TOL[dt])
    ck.c.put("bmm_a", values((2, 3, 4)), "f32")
    ck.c.put("bmm_b", values((3, 4, 5)), "f32")
    ck.c.put("bmm_c", values((3, 4)), "f32")
    ck.expect_error("bmm", ["bmm_a", "bmm_b"], None, "SHAPE_MISMATCH", " batch dims differ")
    ck.expect_error("bmm", ["bmm_c", "bmm_b"], None, "SHAPE_MISMATCH", " rank 2")
    # The tiled path at some size, and large K in half precision.
    ck.check("matmul", [values((256, 256)), values((256, 256))], ["f32", "f32"], ref.matmul,
             tol=TOL["f32"], label="(256^3)")
    ck.check("matmul", [values((65, 300)), values((300, 63))], ["f16", "f16"], ref.matmul,
             tol=(5e-3, 5e-3), label="(K=300)")
    # 128x128 tiles (chosen from 128 such tiles up): batched, no size a multiple.
    for dt in harness.FLOAT_DTYPES:
        ck.check("matmul", [values((24, 130, 20)), values((20, 300))], [dt, dt], ref.matmul,
                 tol=TOL[dt], label="(128-tiles)")
    # f32 with K and N multiples of 4 and 128 tiles or more: matmul_v4.comp
    # (b broadcast over the batch, no size a tile multiple).
    ck.check("matmul", [values((10, 260, 36)), values((36, 516))], ["f32", "f32"], ref.matmul,
             tol=TOL["f32"], label="(vec4 tiles)")
    # Whole 128x128 tiles with K a multiple of 32: on a device with cooperative
    # matrices (an NVIDIA GPU) f16 takes matmul_cm.comp; elsewhere the tiled
    # kernels. Run this file there before claiming a tensor-core figure.
    for sa, sb in [((128, 32), (32, 128)), ((256, 96), (96, 384)), ((3, 128, 64), (3, 64, 256)),
                   ((2, 128, 32), (32, 128)), ((128, 32), (4, 32, 128)), ((2, 2, 128, 32), (2, 2, 32, 128))]:
        ck.check("matmul", [values(sa), values(sb)], ["f16", "f16"], ref.matmul,
                 tol=(5e-3, 5e-3), label="(tensor-core tiles)")
    # Exact small integers: every dtype must give the exact product.
    for dt in harness.FLOAT_DTYPES:
        a = rng.integers(-3, 4, size=(17, 9)).astype(np.float64)
        b = rng.integers(-3, 4, size=(9, 18)).astype(np.float64)
        ck.check("matmul", [a, b], [dt, dt], ref.matmul, tol=(0, 0), label="(exact)")

    errors(ck)


def stored(shape, t):
    """The stored shape of an operand of logical shape `shape` read transposed."""
    return shape[:-2] + (shape[-1], shape[-2]) if t and len(shape) >= 2 else shape


# Logical (a, b) shapes for the layout tests: 1x1, odd sizes, batched and
# broadcast, one with K and N multiples of 4 and 128-tiles enough for
# matmul_v4 (f32), a 1-D operand on the side that is not transposed.
LAYOUT_SHAPES = [
    ((1, 1), (1, 1)),
    ((3, 5), (5, 4)),
    ((65, 129), (129, 33)),
    ((2, 3, 7, 5), (5, 6)),
    ((3, 1, 9, 4), (1, 2, 4, 11)),
    ((12, 260, 36), (36, 516)),
]


def run_layouts(ck):
    """NN, NT, TN, TT (transpose_a, transpose_b read in place) x every float
    dtype, then the exact products (small integers) in every layout."""
    for ta in (False, True):
        for tb in (False, True):
            attrs = {"transpose_a": ta, "transpose_b": tb}
            for dt in harness.FLOAT_DTYPES:
                for sa, sb in LAYOUT_SHAPES:
                    ck.check("matmul", [values(stored(sa, ta)), values(stored(sb, tb))], [dt, dt],
                             ref.matmul_t(ta, tb), attrs=attrs, tol=TOL[dt], label="(layout)")
                a = rng.integers(-3, 4, size=stored((17, 9), ta)).astype(np.float64)
                b = rng.integers(-3, 4, size=stored((9, 18), tb)).astype(np.float64)
                ck.check("matmul", [a, b], [dt, dt], ref.matmul_t(ta, tb), attrs=attrs, tol=(0, 0),
                         label="(layout exact)")
            # 1-D operands on the untransposed side.
            if not ta:
                ck.check("matmul", [values((5,)), values(stored((5, 3), tb))], ["f32", "f32"],
                         ref.matmul_t(False, tb), attrs=attrs, tol=TOL["f32"], label="(layout 1-D a)")
            if not tb:
                ck.check("matmul", [values(stored((3, 5), ta)), values((5,))], ["f32", "f32"],
                         ref.matmul_t(ta, False), attrs=attrs, tol=TOL["f32"], label="(layout 1-D b)")
    c = ck.c
    c.put("tl_v", values((4,)), "f32")
    c.put("tl_m", values((4, 3)), "f32")
    ck.expect_error("matmul", ["tl_v", "tl_m"], {"transpose_a": True}, "INVALID_ARGUMENT",
                    label="(transpose_a of 1-D)")
    ck.expect_error("matmul", ["tl_m", "tl_v"], {"transpose_b": True}, "INVALID_ARGUMENT",
                    label="(transpose_b of 1-D)")
    ck.expect_error("matmul", ["tl_m", "tl_m"], {"transpose_a": False}, "SHAPE_MISMATCH",
                    label="(inner, untransposed)")
    ck.expect_error("matmul", ["tl_m", "tl_m"], {"split_k": -1}, "INVALID_ARGUMENT", label="(split_k)")


def run_split_k(ck):
    """Split-K (forced by the split_k attr on small sizes; chosen on its own
    for a small output with a long K): right in every layout and dtype, and
    bit-identical run to run."""
    for dt in harness.FLOAT_DTYPES:
        for ta in (False, True):
            for tb in (False, True):
                attrs = {"transpose_a": ta, "transpose_b": tb, "split_k": 3}
                for sa, sb in [((3, 5), (5, 4)), ((65, 129), (129, 33)), ((2, 40, 100), (100, 8)),
                               ((36, 260), (260, 516))]:
                    ck.check("matmul", [values(stored(sa, ta)), values(stored(sb, tb))], [dt, dt],
                             ref.matmul_t(ta, tb), attrs=attrs, tol=TOL[dt], label="(split-K)")
        a = rng.integers(-3, 4, size=(7, 300)).astype(np.float64)
        b = rng.integers(-3, 4, size=(300, 9)).astype(np.float64)
        # 15 tiles of 128x128 in 9 chunks: the 128-tile kernels split
        # (matmul_nnp_v4, matmul_tn_v4, matmul_nt_v4, matmul_v4 in f32: N and
        # the stored rows whole vec4s)
        for ta in (False, True):
            for tb in (False, True):
                ck.check("matmul", [values(stored((260, 400), ta)), values(stored((400, 516), tb))], [dt, dt],
                         ref.matmul_t(ta, tb), attrs={"transpose_a": ta, "transpose_b": tb, "split_k": 9},
                         tol=TOL[dt], label="(split-K, 128 tiles)")
        for split in (2, 5, 19, 1000):
            ck.check("matmul", [a, b], [dt, dt], ref.matmul, attrs={"split_k": split}, tol=(0, 0),
                     label="(split-K exact)")
    # The heuristic: a 16x8 output from K = 4096 is one tile; lavapipe runs
    # a workgroup per CPU, so split-K is taken without asking.
    a, b = values((16, 4096)), values((4096, 8))
    ck.check("matmul", [a, b], ["f32", "f32"], ref.matmul, tol=(1e-3, 1e-4), label="(auto split-K)")
    # Bit-identical run to run (the reduction sums the chunks in order).
    c = ck.c
    c.put("sk_a", values((33, 3000)), "f32")
    c.put("sk_b", values((3000, 17)), "f32")
    outs = []
    for _ in range(3):
        err, res = c.run("matmul", ["sk_a", "sk_b"], {"split_k": 7})
        ck.checks += 1
        if err is not None:
            ck.fail("split-K repeat: %r" % (err,))
            return
        outs.append(res["data"])
    if not (outs[0] == outs[1] == outs[2]):
        ck.fail("split-K results differ between runs")


def errors(ck):
    c = ck.c
    c.put("ea", values((3, 4)), "f32")
    c.put("eb", values((5, 6)), "f32")
    c.put("ec", values((4, 6)), "f16")
    c.put("ei", np.ones((4, 6)), "i32")
    c.put("ej", np.ones((3, 4)), "i32")
    c.put("es", np.float64(2.0), "f32")
    c.put("ebat_a", values((2, 3, 4)), "f32")
    c.put("ebat_b", values((3, 4, 5)), "f32")
    ck.expect_error("matmul", ["ea", "eb"], None, "SHAPE_MISMATCH", label="(inner)")
    err, _ = c.run("matmul", ["ea", "eb"])
    if err is None or "[3,4]" not in err["message"] or "[5,6]" not in err["message"]:
        ck.fail("matmul inner mismatch should name both shapes: %r" % (err,))
    ck.expect_error("matmul", ["ebat_a", "ebat_b"], None, "SHAPE_MISMATCH", label="(batch)")
    ck.expect_error("matmul", ["ea", "ec"], None, "DTYPE_MISMATCH", label="(f32 @ f16)")
    ck.expect_error("matmul", ["ej", "ei"], None, "DTYPE_MISMATCH", label="(i32)")
    ck.expect_error("matmul", ["es", "ea"], None, "SHAPE_MISMATCH", label="(rank 0)")
    ck.expect_error("matmul", ["ea"], None, "INVALID_ARGUMENT", label="(one input)")
    ck.expect_error("matmul", ["ea", "ec"], {"transpose": True}, "INVALID_ARGUMENT", label="(attr)")
    # graph.run: matmul chained into matmul in one submission (a barrier between).
    g = [values((5, 7)), values((7, 3)), values((3, 4))]
    for k, v in enumerate(g):
        c.put("g%d" % k, v, "f32")
    ck.checks += 1
    err, res = c.call("graph.run", {"nodes": [
        {"id": "p", "op": "matmul", "inputs": ["g0", "g1"]},
        {"id": "q", "op": "matmul", "inputs": ["p", "g2"]},
    ], "outputs": ["q"]})
    q = [harness.quantize(v, "f32") for v in g]
    want = ref.matmul(ref.matmul(q[0], q[1]), q[2])
    if err is not None:
        ck.fail("graph.run matmul chain: %r" % (err,))
    elif not np.allclose(harness.result_array(res["outputs"]["q"]), want, atol=1e-4, rtol=1e-4):
        ck.fail("graph.run matmul chain: wrong values")


def run_epilogue(ck):
    """The epilogue attrs (a bias input, activation relu) in each layout and
    dtype at one odd size; test_ops_epilogue.py has the rest (sizes,
    split-K, errors, the graph rewrite bit for bit)."""
    for dt in harness.FLOAT_DTYPES:
        for ta, tb in ((False, False), (False, True), (True, False)):
            ck.check("matmul", [values(stored((65, 33), ta)), values(stored((33, 129), tb)), values((129,))],
                     [dt] * 3, ref.matmul_epilogue(ta, tb, "relu", dt),
                     attrs={"transpose_a": ta, "transpose_b": tb, "activation": "relu"}, tol=TOL[dt],
                     label="(epilogue)")


def run_skinny(ck):
    """Tall-skinny NN products (at most 16 columns, at least 1024 rows: a
    classifier's logits) take matmul_skinny.comp: right in every float
    dtype, at K below, at and past its 32-wide chunk, with a batch, exact on
    small integers, and with the epilogue; 17 columns (the tiled kernels)
    beside them. (In f32 the products of at most 16 terms among them take
    matmul_smallk.comp: test_ops_matmul_small.py.)"""
    for dt in harness.FLOAT_DTYPES:
        for sa, sb in (((1024, 1), (1, 1)), ((1025, 37), (37, 10)), ((2048, 512), (512, 10)),
                       ((1300, 33), (33, 16)), ((1030, 5), (5, 17)), ((3, 1024, 20), (20, 7))):
            ck.check("matmul", [values(sa), values(sb)], [dt, dt], ref.matmul_t(False, False),
                     tol=TOL[dt], label="(skinny)")
        ck.check("matmul", [values((1100, 65)), values((65, 10)), values((10,))], [dt] * 3,
                 ref.matmul_epilogue(False, False, "relu", dt), attrs={"activation": "relu"},
                 tol=TOL[dt], label="(skinny epilogue)")
    a = rng.integers(-3, 4, size=(1031, 70)).astype(np.float64)
    b = rng.integers(-3, 4, size=(70, 9)).astype(np.float64)
    ck.check("matmul", [a, b], ["f32", "f32"], ref.matmul_t(False, False), tol=(0, 0), label="(skinny exact)")


def run_large_tiles(ck):
    """f32 products of 128 or more 128x128 tiles in whole vec4s take the
    vec4 kernels: matmul_nn_v4 (NN), matmul_tn_v4 (A transposed),
    matmul_nt_v4 (B transposed), matmul_v4 (both): each layout against the
    reference, K short so that lavapipe is quick."""
    for ta in (False, True):
        for tb in (False, True):
            ck.check("matmul", [values(stored((2048, 12), ta)), values(stored((12, 1028), tb))], ["f32", "f32"],
                     ref.matmul_t(ta, tb), attrs={"transpose_a": ta, "transpose_b": tb}, tol=TOL["f32"],
                     label="(128x128 vec4 tiles)")


def run_long_k(ck):
    """Lavapipe ends an invocation's loops after 65535 iterations in all: a
    product longer than one invocation may sum is split over K (split-K)
    and right in f32 and f16; asked to stay in one piece (split_k 1) it is
    RESOURCE_EXHAUSTED, never a silently short sum."""
    rng = np.random.default_rng(77)
    k = 900_001
    a = rng.uniform(-1, 1, size=(2, k))
    b = rng.uniform(-1, 1, size=(k, 3))
    for dt in ("f32", "f16"):
        ck.check("matmul", [a, b], [dt, dt], ref.matmul, tol=(0.05, 1e-3), label="(K = 900,001)")
    k = (1 << 20) + 3
    ck.c.put("lk_a", rng.uniform(-1, 1, size=(1, k)), "f32")
    ck.c.put("lk_b", rng.uniform(-1, 1, size=(k, 1)), "f32")
    ck.check("matmul", [rng.uniform(-1, 1, size=(k, 2)), rng.uniform(-1, 1, size=(3, k))], ["f32", "f32"],
             ref.matmul_t(True, True), attrs={"transpose_a": True, "transpose_b": True}, tol=(0.05, 1e-3),
             label="(K = 2^20 + 3, TT)")
    ck.expect_error("matmul", ["lk_a", "lk_b"], {"split_k": 1}, "RESOURCE_EXHAUSTED",
                    label="(K = 2^20 + 3 in one piece)")
    for n in ("lk_a", "lk_b"):
        ck.c.call("tensor.delete", {"name": n})


if __name__ == "__main__":
    t0 = time.time()
    harness.main(lambda ck: (run(ck), run_layouts(ck), run_split_k(ck), run_epilogue(ck), run_skinny(ck), run_large_tiles(ck), run_long_k(ck), print("linalg: %.1f s" % (time.time() - t0))))

"""conv2d, max_pool2d and avg_pool2d x every float dtype against ref_conv.py:
stride, padding, dilation (ints and pairs), groups (incl. depthwise), bias,
sizes that are not multiples of the workgroup, zero-size batch and channels,
NaN in max pooling, and the errors; conv2d's three kernels (attr algo:
direct, implicit GEMM, im2col + matmul) each against the reference and
against each other bit for bit (they sum in the same order)."""
import os
import time

import numpy as np

import harness
import ref_conv as ref

rng = np.random.default_rng(777)

# f32 accumulation over C/groups * KH * KW terms, compared with float64.
TOL = {"f32": (1e-4, 1e-4), "f16": (3e-3, 3e-3), "bf16": (2e-2, 2e-2)}

# (x shape, w shape, bias?, attrs)
CONV_CASES = [
    ((2, 3, 7, 8), (4, 3, 3, 3), True, {}),
    ((2, 3, 7, 8), (4, 3, 3, 3), False, {"stride": 2, "padding": 1}),
    ((1, 2, 9, 11), (3, 2, 3, 2), True, {"stride": [2, 1], "padding": [0, 2], "dilation": [2, 3]}),
    ((2, 4, 6, 6), (6, 2, 3, 3), True, {"groups": 2, "padding": 1}),
    ((1, 4, 5, 7), (4, 1, 3, 3), False, {"groups": 4, "padding": [1, 1], "stride": [1, 2]}),  # depthwise
    ((3, 5, 4, 4), (2, 5, 1, 1), True, {}),                                    # 1x1
    ((1, 1, 3, 3), (1, 1, 5, 5), False, {"padding": 2}),                        # kernel > input, padded
]


def values(shape):
    return rng.uniform(-1, 1, size=shape)


def conv_ref(attrs):
    def f(x, w, b=None):
        return ref.conv2d(x, w, b, **attrs)
    return f


def pool_ref(fn, attrs):
    return lambda x: fn(x, **attrs)


POOL_CASES = [
    ((2, 3, 9, 10), {"kernel_size": 3}),                                      # stride = kernel, remainder dropped
    ((1, 2, 7, 6), {"kernel_size": [3, 2], "stride": [2, 1], "padding": [1, 1]}),
    ((2, 2, 5, 5), {"kernel_size": 2, "stride": 1, "padding": 1}),
    ((1, 1, 4, 4), {"kernel_size": 4}),
    ((1, 1, 1, 1), {"kernel_size": 1}),
]


def run(ck):
    for dt in harness.FLOAT_DTYPES:
        for xs, ws, bias, attrs in CONV_CASES:
            arrays = [values(xs), values(ws)] + ([values((ws[0],))] if bias else [])
            ck.check("conv2d", arrays, [dt] * len(arrays), conv_ref(attrs), attrs=attrs, tol=TOL[dt])
        for xs, attrs in POOL_CASES:
            x = values(xs)
            ck.check("max_pool2d", [x], [dt], pool_ref(ref.max_pool2d, attrs), attrs=attrs)
            ck.check("avg_pool2d", [x], [dt], pool_ref(ref.avg_pool2d, attrs), attrs=attrs, tol=TOL[dt])
    # Moderately large: many output elements, 144-term sums.
    ck.check("conv2d", [values((2, 16, 21, 19)), values((24, 16, 3, 3)), values((24,))], ["f32"] * 3,
             conv_ref({"padding": 1}), attrs={"padding": 1}, tol=TOL["f32"], label="(large)")
    # Large enough for the GEMM path (im2col + matmul, f32, one group): with a
    # bias and padding; with stride and dilation and an odd row length; and a
    # batch whose column matrix spans two chunks on lavapipe (128 MiB bindings).
    for xs, ws, bias, attrs in [((2, 16, 24, 20), (32, 16, 3, 3), True, {"padding": 1}),
                                ((3, 8, 30, 26), (64, 8, 3, 3), False,
                                 {"stride": [2, 1], "padding": [1, 2], "dilation": [1, 2]}),
                                ((76, 3, 128, 128), (8, 3, 3, 3), True, {"padding": 1})]:
        arrays = [values(xs), values(ws)] + ([values((ws[0],))] if bias else [])
        ck.check("conv2d", arrays, ["f32"] * len(arrays), conv_ref(attrs), attrs=attrs, tol=TOL["f32"],
                 label="(gemm)")
    ck.check("avg_pool2d", [values((2, 8, 33, 35))], ["f32"],
             pool_ref(ref.avg_pool2d, {"kernel_size": 3, "stride": 2, "padding": 1}),
             attrs={"kernel_size": 3, "stride": 2, "padding": 1}, label="(large)")
    # Zero sizes: an empty batch gives an empty result, no channels gives the bias.
    ck.check("conv2d", [values((0, 3, 5, 5)), values((2, 3, 3, 3))], ["f32", "f32"], conv_ref({}))
    ck.check("conv2d", [values((2, 0, 5, 5)), values((3, 0, 3, 3)), values((3,))], ["f32"] * 3, conv_ref({}))
    ck.check("conv2d", [values((2, 3, 5, 5)), values((0, 3, 3, 3))], ["f32", "f32"], conv_ref({}))
    ck.check("max_pool2d", [values((0, 3, 4, 4))], ["f32"], pool_ref(ref.max_pool2d, {"kernel_size": 2}),
             attrs={"kernel_size": 2})
    ck.check("avg_pool2d", [values((2, 0, 4, 4))], ["f32"], pool_ref(ref.avg_pool2d, {"kernel_size": 2}),
             attrs={"kernel_size": 2})
    # Max pooling propagates NaN (and -inf stays -inf).
    for dt in harness.FLOAT_DTYPES:
        x = values((1, 1, 4, 4))
        x[0, 0, 0, 1] = np.nan
        x[0, 0, 3, 3] = -np.inf
        x[0, 0, 2:, 2:] = -np.inf
        ck.check("max_pool2d", [x], [dt], pool_ref(ref.max_pool2d, {"kernel_size": 2}),
                 attrs={"kernel_size": 2}, label="(nan)")
    errors(ck)


def errors(ck):
    c = ck.c
    c.put("x", values((2, 4, 6, 6)), "f32")
    c.put("xh", values((2, 4, 6, 6)), "f16")
    c.put("xi", np.ones((2, 4, 6, 6)), "i32")
    c.put("x3", values((4, 6, 6)), "f32")
    c.put("w", values((6, 4, 3, 3)), "f32")
    c.put("wg", values((6, 2, 3, 3)), "f32")
    c.put("wbig", values((6, 4, 7, 7)), "f32")
    c.put("wi", np.ones((6, 4, 3, 3)), "i32")
    c.put("b", values((6,)), "f32")
    c.put("b5", values((5,)), "f32")
    c.put("bh", values((6,)), "f16")
    E = ck.expect_error
    E("conv2d", ["x", "wg"], None, "SHAPE_MISMATCH", label="(weight channels)")
    E("conv2d", ["x", "w"], {"groups": 3}, "SHAPE_MISMATCH", label="(groups do not divide)")
    E("conv2d", ["x", "w"], {"groups": 0}, "INVALID_ARGUMENT", label="(groups 0)")
    E("conv2d", ["x", "w", "b5"], None, "SHAPE_MISMATCH", label="(bias shape)")
    E("conv2d", ["x", "w", "bh"], None, "DTYPE_MISMATCH", label="(bias dtype)")
    E("conv2d", ["xh", "w"], None, "DTYPE_MISMATCH", label="(f16 x, f32 w)")
    E("conv2d", ["xi", "wi"], None, "DTYPE_MISMATCH", label="(i32)")
    E("conv2d", ["x3", "w"], None, "SHAPE_MISMATCH", label="(rank 3)")
    E("conv2d", ["x", "x3"], None, "SHAPE_MISMATCH", label="(weight rank 3)")
    E("conv2d", ["x", "wbig"], None, "SHAPE_MISMATCH", label="(kernel larger than input)")
    E("conv2d", ["x", "w"], {"dilation": 4}, "SHAPE_MISMATCH", label="(dilated kernel larger)")
    E("conv2d", ["x", "w"], {"stride": 0}, "INVALID_ARGUMENT", label="(stride 0)")
    E("conv2d", ["x", "w"], {"padding": -1}, "INVALID_ARGUMENT", label="(negative padding)")
    E("conv2d", ["x", "w"], {"padding": [1, 1, 1]}, "INVALID_ARGUMENT", label="(three paddings)")
    E("conv2d", ["x", "w"], {"stride": 1.5}, "INVALID_ARGUMENT", label="(float stride)")
    E("conv2d", ["x", "w"], {"stride": 1 << 40}, "INVALID_ARGUMENT", label="(huge stride)")
    E("conv2d", ["x"], None, "INVALID_ARGUMENT", label="(one input)")
    E("conv2d", ["x", "w"], {"algo": "fast"}, "INVALID_ARGUMENT", label="(unknown algo)")
    E("conv2d", ["x", "w"], {"algo": 1}, "INVALID_ARGUMENT", label="(algo not a string)")
    E("conv2d", ["x", "wg"], {"groups": 2, "algo": "im2col"}, "INVALID_ARGUMENT", label="(im2col with groups)")
    E("conv2d", ["xh", "xh"], {"algo": "im2col"}, "INVALID_ARGUMENT", label="(im2col f16)")
    for op in ("max_pool2d", "avg_pool2d"):
        E(op, ["x"], None, "INVALID_ARGUMENT", label="(no kernel_size)")
        E(op, ["x"], {"kernel_size": 2, "padding": 2}, "INVALID_ARGUMENT", label="(padding > kernel/2)")
        E(op, ["x"], {"kernel_size": 7}, "SHAPE_MISMATCH", label="(kernel larger than input)")
        E(op, ["x"], {"kernel_size": 0}, "INVALID_ARGUMENT", label="(kernel 0)")
        E(op, ["x"], {"kernel_size": 2, "stride": 0}, "INVALID_ARGUMENT", label="(stride 0)")
        E(op, ["x"], {"kernel_size": 2, "dilation": 2}, "INVALID_ARGUMENT", label="(unknown attr)")
        E(op, ["xi"], {"kernel_size": 2}, "DTYPE_MISMATCH", label="(i32)")
        E(op, ["x3"], {"kernel_size": 2}, "SHAPE_MISMATCH", label="(rank 3)")



# Shapes for the implicit GEMM beyond CONV_CASES: several 128-row and
# 128-column tiles with a K tail (45 terms, not a multiple of 16), groups with
# stride and dilation, odd channel counts, batch 1, and a window of 35 taps.
IMPLICIT_CASES = CONV_CASES + [
    ((1, 5, 13, 17), (130, 5, 3, 3), True, {"padding": 1}),
    ((2, 6, 9, 10), (34, 3, 3, 3), True, {"groups": 2, "stride": 2, "padding": [2, 1], "dilation": [1, 2]}),
    ((1, 7, 11, 9), (9, 7, 2, 3), False, {"stride": [3, 2], "dilation": 2, "padding": [0, 3]}),
    ((3, 3, 16, 15), (21, 1, 3, 3), True, {"groups": 3, "padding": 1}),
    ((1, 2, 10, 9), (3, 2, 7, 5), True, {"padding": [3, 2]}),
]


def run_algos(ck):
    """Each kernel forced through attr algo, every dtype, against the
    reference; then the same bits from all of them (and from "auto") in f32."""
    for dt in harness.FLOAT_DTYPES:
        for xs, ws, bias, attrs in IMPLICIT_CASES:
            arrays = [values(xs), values(ws)] + ([values((ws[0],))] if bias else [])
            for algo in ("implicit", "direct"):
                a = dict(attrs, algo=algo)
                ck.check("conv2d", arrays, [dt] * len(arrays), conv_ref(attrs), attrs=a, tol=TOL[dt])
    # Zero sizes through the implicit GEMM: no channels gives the bias.
    for xs, ws, bias in (((0, 3, 5, 5), (2, 3, 3, 3), False), ((2, 0, 5, 5), (3, 0, 3, 3), True),
                         ((2, 3, 5, 5), (0, 3, 3, 3), False)):
        arrays = [values(xs), values(ws)] + ([values((ws[0],))] if bias else [])
        ck.check("conv2d", arrays, ["f32"] * len(arrays), conv_ref({}), attrs={"algo": "implicit"},
                 label="(zero size)")
    # Same order of summation: im2col + matmul_nn*, the implicit GEMM and the
    # direct kernel give the same bits (finite inputs).
    for xs, ws, bias, attrs in IMPLICIT_CASES[:4] + IMPLICIT_CASES[-4:] + [
            ((2, 16, 24, 20), (32, 16, 3, 3), True, {"padding": 1})]:
        arrays = [values(xs), values(ws)] + ([values((ws[0],))] if bias else [])
        names = []
        for k, a in enumerate(arrays):
            ck.c.put("bits%d" % k, a, "f32")
            names.append("bits%d" % k)
        algos = ["auto", "implicit", "direct"] + (["im2col"] if attrs.get("groups", 1) == 1 else [])
        got = {}
        for algo in algos:
            err, res = ck.c.run("conv2d", names, dict(attrs, algo=algo))
            if err is not None:
                ck.fail("conv2d algo %s %s: %s" % (algo, attrs, err))
                continue
            got[algo] = harness.result_array(res)
        for algo in algos[1:]:
            ck.checks += 1
            if algo in got and "auto" in got and not np.array_equal(got[algo].view(np.uint32),
                                                                     got["auto"].view(np.uint32)):
                ck.fail("conv2d %s %s %s: algo %s differs from auto in bits" % (xs, ws, attrs, algo))


def run_wide(ck):
    """Lavapipe ends an invocation's loops after 65535 iterations in all:
    convolutions with many terms per output take the GEMM path (f32) or are
    RESOURCE_EXHAUSTED, as are pooling windows over about 60,000 elements;
    never a silently short sum."""
    rng = np.random.default_rng(99)
    x = rng.uniform(-1, 1, size=(1, 70_000, 1, 1))
    w = rng.uniform(-1, 1, size=(2, 70_000, 1, 1))
    dot = lambda a, b: np.einsum("nchw,ochw->no", a, b).reshape(1, 2, 1, 1)
    ck.check("conv2d", [x, w], ["f32", "f32"], dot, tol=(1e-3, 1e-4), label="(70,000 channels)")
    img = rng.uniform(-1, 1, size=(1, 1, 300, 300))
    ck.check("conv2d", [img, img], ["f32", "f32"], lambda a, b: np.sum(a * b).reshape(1, 1, 1, 1),
             tol=(1e-3, 1e-4), label="(300x300 kernel)")
    # Only the implicit GEMM sums this many terms in f16, bf16 or with groups:
    # "auto" takes it; "direct" is refused.
    for dt in ("f16", "bf16"):
        ck.check("conv2d", [x, w], [dt, dt], dot, tol=(0.5, 2e-2), label="(70,000 channels)")
        ck.c.put("wx_" + dt, x, dt)
        ck.c.put("ww_" + dt, w, dt)
        ck.expect_error("conv2d", ["wx_" + dt, "ww_" + dt], {"algo": "direct"}, "RESOURCE_EXHAUSTED",
                        label="(70,000 channels, direct)")
    wg = rng.uniform(-1, 1, size=(2, 35_000, 1, 1))
    ck.check("conv2d", [x, wg], ["f32", "f32"],
             lambda a, b: np.stack([a[0, :35_000, 0, 0] @ b[0, :, 0, 0],
                                    a[0, 35_000:, 0, 0] @ b[1, :, 0, 0]]).reshape(1, 2, 1, 1),
             attrs={"groups": 2}, tol=(1e-3, 1e-4), label="(groups, 35,000 channels each)")
    # Past the implicit GEMM's 960,000 terms as well: f16 is refused.
    big = rng.uniform(-1, 1, size=(1, 1_000_000, 1, 1))
    ck.c.put("wx_big", big, "f16")
    ck.c.put("ww_big", big, "f16")
    ck.expect_error("conv2d", ["wx_big", "ww_big"], None, "RESOURCE_EXHAUSTED", label="(1,000,000 channels, f16)")
    small = rng.uniform(-1, 1, size=(1, 2, 150, 150))
    ck.check("max_pool2d", [small], ["f32"], lambda v: v.max(axis=(2, 3)).reshape(1, 2, 1, 1),
             attrs={"kernel_size": 150}, label="(150x150 window)")
    ck.check("avg_pool2d", [small], ["f32"], lambda v: v.mean(axis=(2, 3)).reshape(1, 2, 1, 1),
             attrs={"kernel_size": 150}, tol=(1e-5, 1e-4), label="(150x150 window)")
    ck.c.put("wimg", img, "f32")
    for op in ("max_pool2d", "avg_pool2d"):
        ck.expect_error(op, ["wimg"], {"kernel_size": 300}, "RESOURCE_EXHAUSTED", label="(300x300 window)")


def run_env(ck):
    """$TENSORD_CONV_ALGO sets the daemon's default kernel; attr algo wins."""
    x = values((1, 70_000, 1, 1))
    w = values((2, 70_000, 1, 1))
    dot = lambda a, b: np.einsum("nchw,ochw->no", a, b).reshape(1, 2, 1, 1)
    main_client = ck.c
    for env in ("direct", "old"):
        os.environ["TENSORD_CONV_ALGO"] = env
        try:
            with harness.Daemon() as d:
                ck.c = harness.Client(d.sock)
                ck.c.put("ex", x, "f16")
                ck.c.put("ew", w, "f16")
                ck.expect_error("conv2d", ["ex", "ew"], None, "RESOURCE_EXHAUSTED",
                                label="(TENSORD_CONV_ALGO=%s, 70,000 channels f16)" % env)
                ck.check("conv2d", [x, w], ["f16", "f16"], dot, attrs={"algo": "implicit"}, tol=(0.5, 2e-2),
                         label="(TENSORD_CONV_ALGO=%s, algo implicit)" % env)
        finally:
            del os.environ["TENSORD_CONV_ALGO"]
            ck.c = main_client


if __name__ == "__main__":
    t0 = time.time()
    harness.main(lambda ck: (run(ck), run_algos(ck), run_wide(ck), run_env(ck),
                             print("conv: %.1f s" % (time.time() - t0))))

"""The conv_grad family (conv2d_grad_input, conv2d_grad_weight,
max_pool2d_grad, avg_pool2d_grad) x every float dtype against
ref_conv_grad.py for stride, padding, dilation and groups, through the direct
kernels and the implicit GEMM (attr algo), which give the same bits;
determinism of the chunked weight gradient; an input gradient only the
implicit GEMM can sum; the errors; and gradient checks of conv2d (x, w,
bias), max_pool2d, avg_pool2d and a small CNN through train.step against
central finite differences of the float64 NumPy forward (ref_conv.py)."""
import time

import numpy as np

import harness
import ref_conv
import ref_conv_grad as ref

rng = np.random.default_rng(4242)

# f32 accumulation over many terms, compared with float64.
TOL = {"f32": (1e-4, 1e-4), "f16": (3e-3, 3e-3), "bf16": (2e-2, 2e-2)}

# (x shape, w shape, attrs)
CONV_CASES = [
    ((2, 3, 7, 8), (4, 3, 3, 3), {}),
    ((2, 3, 7, 8), (4, 3, 3, 3), {"stride": 2, "padding": 1}),
    ((1, 2, 9, 11), (3, 2, 3, 2), {"stride": [2, 1], "padding": [0, 2], "dilation": [2, 3]}),
    ((2, 4, 6, 6), (6, 2, 3, 3), {"groups": 2, "padding": 1}),
    ((1, 4, 5, 7), (4, 1, 3, 3), {"groups": 4, "padding": [1, 1], "stride": [1, 2]}),
    ((3, 5, 4, 4), (2, 5, 1, 1), {}),
    ((1, 1, 3, 3), (1, 1, 5, 5), {"padding": 2}),
    ((1, 2, 8, 8), (2, 2, 3, 3), {"stride": 3}),  # rows and columns no window reads
]

POOL_CASES = [
    ((2, 3, 9, 10), {"kernel_size": 3}),
    ((1, 2, 7, 6), {"kernel_size": [3, 2], "stride": [2, 1], "padding": [1, 1]}),
    ((2, 2, 5, 5), {"kernel_size": 2, "stride": 1, "padding": 1}),
    ((1, 1, 4, 4), {"kernel_size": 4}),
    ((1, 2, 7, 7), {"kernel_size": 3, "stride": 2, "padding": 1}),
]


def values(shape):
    return rng.uniform(-1, 1, size=shape)


def distinct(shape):
    """Values without ties (a permutation, spaced 0.05 apart)."""
    n = int(np.prod(shape))
    return (rng.permutation(n) - n / 2).reshape(shape) * 0.05


def conv_out_shape(xs, ws, attrs):
    return ref_conv.conv2d(np.zeros(xs), np.zeros(ws), None, **attrs).shape


def pool_out_shape(xs, attrs):
    return ref_conv.avg_pool2d(np.zeros(xs), **attrs).shape


# Beyond CONV_CASES for the implicit GEMM: several 128-row and 128-column
# tiles with K tails, groups with stride and dilation, odd channel counts.
IMPLICIT_CASES = CONV_CASES + [
    ((1, 130, 9, 11), (19, 130, 3, 3), {"padding": 1}),
    ((2, 6, 13, 10), (34, 3, 3, 3), {"groups": 2, "stride": 2, "padding": [2, 1], "dilation": [1, 2]}),
    ((1, 7, 11, 9), (9, 7, 2, 3), {"stride": [3, 2], "dilation": 2, "padding": [0, 3]}),
    ((2, 5, 12, 12), (140, 5, 1, 1), {"stride": 2}),
]


def algo_cases(ck):
    """Both gradients with each kernel forced, every dtype, against the
    reference; in f32 the implicit GEMM and the direct kernel agree in bits."""
    for dt in harness.FLOAT_DTYPES:
        for xs, ws, attrs in IMPLICIT_CASES:
            gs = conv_out_shape(xs, ws, attrs)
            g, w, x = values(gs), values(ws), values(xs)
            ai, aw = dict(attrs, input_shape=list(xs)), dict(attrs, weight_shape=list(ws))
            for algo in ("implicit", "direct"):
                gi = ck.check("conv2d_grad_input", [g, w], [dt, dt],
                              lambda g_, w_, a=ai: ref.conv2d_grad_input(g_, w_, **a),
                              attrs=dict(ai, algo=algo), tol=TOL[dt])
                gw = ck.check("conv2d_grad_weight", [x, g], [dt, dt],
                              lambda x_, g_, a=aw: ref.conv2d_grad_weight(x_, g_, **a),
                              attrs=dict(aw, algo=algo), tol=TOL[dt])
                if dt != "f32":
                    continue
                if algo == "implicit":
                    first = (gi, gw)
                    continue
                for name, r0, r1 in (("input", first[0], gi), ("weight", first[1], gw)):
                    ck.checks += 1
                    if r0 is not None and r1 is not None and not np.array_equal(r0, r1):
                        ck.fail("conv2d_grad_%s %s %s %s: implicit and direct differ in bits" % (
                            name, xs, ws, attrs))
    # The weight gradient over 3 chunks of 4096 positions, both kernels: same bits.
    xs, ws = (3, 6, 66, 66), (8, 6, 3, 3)
    x, g = values(xs), values((3, 8, 64, 64))
    got = []
    for algo in ("implicit", "direct", "auto"):
        a = {"weight_shape": list(ws), "algo": algo}
        got.append(ck.check("conv2d_grad_weight", [x, g], ["f32", "f32"],
                            lambda x_, g_: ref.conv2d_grad_weight(x_, g_, weight_shape=list(ws)), attrs=a,
                            tol=(3e-4, 3e-4), label="(chunked, %s)" % algo))
    ck.checks += 1
    if any(r is None for r in got) or not all(np.array_equal(got[0], r) for r in got[1:]):
        ck.fail("conv2d_grad_weight (chunked): the kernels differ in bits")
    # 6000 output channels x 3x3 taps per input element: past the direct
    # kernel's loop budget, so only the implicit GEMM ("auto") computes it.
    ws = (6000, 1, 3, 3)
    a = {"input_shape": [1, 1, 5, 5]}
    ck.check("conv2d_grad_input", [values((1, 6000, 3, 3)), values(ws)], ["f32", "f32"],
             lambda g_, w_: ref.conv2d_grad_input(g_, w_, **a), attrs=a, tol=(1e-3, 1e-4),
             label="(6000 output channels)")
    ck.c.put("wide_g", values((1, 6000, 3, 3)), "f32")
    ck.c.put("wide_w", values(ws), "f32")
    ck.expect_error("conv2d_grad_input", ["wide_g", "wide_w"], dict(a, algo="direct"), "RESOURCE_EXHAUSTED",
                    label="(6000 output channels, direct)")


def zero_cases(ck):
    """Zero sizes through the implicit GEMM."""
    ck.check("conv2d_grad_input", [values((0, 2, 3, 3)), values((2, 3, 3, 3))], ["f32", "f32"],
             lambda g, w: np.zeros((0, 3, 5, 5)), attrs={"input_shape": [0, 3, 5, 5], "algo": "implicit"})
    ck.check("conv2d_grad_input", [values((2, 2, 3, 3)), values((2, 0, 3, 3))], ["f32", "f32"],
             lambda g, w: np.zeros((2, 0, 5, 5)), attrs={"input_shape": [2, 0, 5, 5], "algo": "implicit"})
    ck.check("conv2d_grad_input", [values((2, 0, 3, 3)), values((0, 3, 3, 3))], ["f32", "f32"],
             lambda g, w: np.zeros((2, 3, 5, 5)), attrs={"input_shape": [2, 3, 5, 5], "algo": "implicit"})
    ck.check("conv2d_grad_weight", [values((0, 3, 5, 5)), values((0, 2, 3, 3))], ["f32", "f32"],
             lambda x_, g_: np.zeros((2, 3, 3, 3)), attrs={"weight_shape": [2, 3, 3, 3], "algo": "implicit"})


def op_cases(ck):
    for dt in harness.FLOAT_DTYPES:
        for xs, ws, attrs in CONV_CASES:
            gs = conv_out_shape(xs, ws, attrs)
            a = dict(attrs, input_shape=list(xs))
            ck.check("conv2d_grad_input", [values(gs), values(ws)], [dt, dt],
                     lambda g, w, a=a: ref.conv2d_grad_input(g, w, **a), attrs=a, tol=TOL[dt])
            a = dict(attrs, weight_shape=list(ws))
            ck.check("conv2d_grad_weight", [values(xs), values(gs)], [dt, dt],
                     lambda x, g, a=a: ref.conv2d_grad_weight(x, g, **a), attrs=a, tol=TOL[dt])
        for xs, attrs in POOL_CASES:
            gs = pool_out_shape(xs, attrs)
            ck.check("max_pool2d_grad", [distinct(xs), values(gs)], [dt, dt],
                     lambda x, g, a=attrs: ref.max_pool2d_grad(x, g, **a), attrs=attrs, tol=TOL[dt])
            a = dict(attrs, input_shape=list(xs))
            ck.check("avg_pool2d_grad", [values(gs)], [dt],
                     lambda g, a=a: ref.avg_pool2d_grad(g, **a), attrs=a, tol=TOL[dt])
    # Ties go to the first maximum; a NaN counts as the maximum.
    x = np.zeros((1, 1, 4, 4))
    x[0, 0, 0, 2] = np.nan
    ck.check("max_pool2d_grad", [x, values((1, 1, 2, 2))], ["f32", "f32"],
             lambda x_, g: ref.max_pool2d_grad(np.nan_to_num(x_, nan=np.inf), g, kernel_size=2),
             attrs={"kernel_size": 2}, label="(ties, nan)")
    # The weight gradient in several chunks (2 * 48 * 48 positions), twice:
    # the same bits both times.
    xs, ws, attrs = (2, 3, 50, 50), (4, 3, 3, 3), {"weight_shape": [4, 3, 3, 3]}
    x, g = values(xs), values((2, 4, 48, 48))
    r1 = ck.check("conv2d_grad_weight", [x, g], ["f32", "f32"],
                  lambda x_, g_: ref.conv2d_grad_weight(x_, g_, **attrs), attrs=attrs, tol=(2e-4, 2e-4),
                  label="(chunked)")
    ck.c.put("cx", x, "f32")
    ck.c.put("cg", g, "f32")
    for _ in range(2):
        ck.checks += 1
        err, res = ck.c.run("conv2d_grad_weight", ["cx", "cg"], attrs)
        if err is not None or r1 is None or not np.array_equal(harness.result_array(res), r1):
            ck.fail("conv2d_grad_weight (chunked) is not deterministic: %r" % (err,))
    # Zero sizes.
    ck.check("conv2d_grad_input", [values((0, 2, 3, 3)), values((2, 3, 3, 3))], ["f32", "f32"],
             lambda g, w: np.zeros((0, 3, 5, 5)), attrs={"input_shape": [0, 3, 5, 5]})
    ck.check("conv2d_grad_weight", [values((0, 3, 5, 5)), values((0, 2, 3, 3))], ["f32", "f32"],
             lambda x_, g_: np.zeros((2, 3, 3, 3)), attrs={"weight_shape": [2, 3, 3, 3]})


def errors(ck):
    c = ck.c
    c.put("gx", values((2, 4, 6, 6)), "f32")
    c.put("gg", values((2, 6, 4, 4)), "f32")
    c.put("gw", values((6, 4, 3, 3)), "f32")
    c.put("gwh", values((6, 4, 3, 3)), "f16")
    c.put("gp", values((2, 4, 3, 3)), "f32")
    c.put("gi", np.ones((2, 4, 6, 6)), "i32")
    c.put("g3", values((4, 6, 6)), "f32")
    E = ck.expect_error
    xs = {"input_shape": [2, 4, 6, 6]}
    E("conv2d_grad_input", ["gg", "gw"], None, "INVALID_ARGUMENT", label="(no input_shape)")
    E("conv2d_grad_input", ["gg", "gw"], {"input_shape": [2, 4, 6]}, "INVALID_ARGUMENT", label="(rank 3 shape)")
    E("conv2d_grad_input", ["gg", "gw"], {"input_shape": [2, 4, -6, 6]}, "INVALID_ARGUMENT",
      label="(negative shape)")
    E("conv2d_grad_input", ["gg", "gw"], {"input_shape": [2, 4, 8, 8]}, "SHAPE_MISMATCH", label="(wrong size)")
    E("conv2d_grad_input", ["gg", "gw"], {"input_shape": [2, 5, 6, 6]}, "SHAPE_MISMATCH", label="(channels)")
    E("conv2d_grad_input", ["gg", "gw"], dict(xs, groups=2), "SHAPE_MISMATCH", label="(groups)")
    E("conv2d_grad_input", ["gg", "gw"], dict(xs, groups=0), "INVALID_ARGUMENT", label="(groups 0)")
    E("conv2d_grad_input", ["gg", "gw"], dict(xs, stride=0), "INVALID_ARGUMENT", label="(stride 0)")
    E("conv2d_grad_input", ["gg", "gwh"], xs, "DTYPE_MISMATCH", label="(f16 weight)")
    E("conv2d_grad_input", ["gi", "gw"], xs, "DTYPE_MISMATCH", label="(i32)")
    E("conv2d_grad_input", ["g3", "gw"], xs, "SHAPE_MISMATCH", label="(rank 3)")
    E("conv2d_grad_input", ["gg"], xs, "INVALID_ARGUMENT", label="(one input)")
    E("conv2d_grad_input", ["gg", "gw"], dict(xs, algo="im2col"), "INVALID_ARGUMENT", label="(algo im2col)")
    E("conv2d_grad_input", ["gg", "gw"], dict(xs, algo="quick"), "INVALID_ARGUMENT", label="(unknown algo)")
    ws = {"weight_shape": [6, 4, 3, 3]}
    E("conv2d_grad_weight", ["gx", "gg"], None, "INVALID_ARGUMENT", label="(no weight_shape)")
    E("conv2d_grad_weight", ["gx", "gg"], {"weight_shape": [6, 4, 5, 5]}, "SHAPE_MISMATCH", label="(kernel)")
    E("conv2d_grad_weight", ["gx", "gg"], {"weight_shape": [6, 4, 7, 7]}, "SHAPE_MISMATCH",
      label="(kernel larger than input)")
    E("conv2d_grad_weight", ["gx", "gp"], ws, "SHAPE_MISMATCH", label="(grad_out shape)")
    E("conv2d_grad_weight", ["gx", "gg"], {"weight_shape": [6, 4, 3, 3, 1]}, "INVALID_ARGUMENT",
      label="(five dims)")
    E("conv2d_grad_weight", ["gx", "gg"], dict(ws, algo="im2col"), "INVALID_ARGUMENT", label="(algo im2col)")
    pa = {"kernel_size": 2}
    E("max_pool2d_grad", ["gx", "gg"], pa, "SHAPE_MISMATCH", label="(grad_out shape)")
    E("max_pool2d_grad", ["gx"], pa, "INVALID_ARGUMENT", label="(one input)")
    E("max_pool2d_grad", ["gx", "gp"], {"kernel_size": 2, "padding": 2}, "INVALID_ARGUMENT", label="(padding)")
    E("max_pool2d_grad", ["gi", "gp"], {"kernel_size": 2}, "DTYPE_MISMATCH", label="(i32)")
    E("avg_pool2d_grad", ["gp"], pa, "INVALID_ARGUMENT", label="(no input_shape)")
    E("avg_pool2d_grad", ["gp"], dict(pa, input_shape=[2, 4, 8, 8]), "SHAPE_MISMATCH", label="(wrong size)")
    E("avg_pool2d_grad", ["gp"], dict(pa, input_shape=[2, 4, 0, 6]), "SHAPE_MISMATCH", label="(empty)")
    E("avg_pool2d_grad", ["gp"], dict(pa, input_shape=[2, 4, 6, 6], kernel_size=0), "INVALID_ARGUMENT",
      label="(kernel 0)")


# ---- gradient checks through train.step ----

def train_grads(ck, tensors, nodes, loss, params, label):
    """Put `tensors` (f32), run train.step with grads: true and no optimizer;
    returns {param: gradient} or None after a failure."""
    for name, a in tensors.items():
        ck.c.put(name, a, "f32")
    err, res = ck.c.call("train.step", {"nodes": nodes, "loss": loss, "params": params, "grads": True})
    if err is not None:
        ck.fail("train.step %s: %s" % (label, err))
        return None
    out = {}
    for p in params:
        err, res = ck.c.call("tensor.get", {"name": p + ".grad"})
        if err is not None:
            ck.fail("train.step %s: no gradient of %s: %s" % (label, p, err))
            return None
        out[p] = harness.result_array(res).astype(np.float64)
    return out


def finite_diff(f, arrays, name, eps):
    """Central differences of scalar f(arrays) w.r.t. arrays[name]."""
    a = arrays[name]
    g = np.zeros(a.shape)
    for i in np.ndindex(a.shape):
        old = a[i]
        a[i] = old + eps
        hi = f(arrays)
        a[i] = old - eps
        lo = f(arrays)
        a[i] = old
        g[i] = (hi - lo) / (2 * eps)
    return g


def grad_check(ck, label, tensors, nodes, params, forward, eps=1e-3, tol=(2e-4, 2e-3)):
    """Compare train.step's gradients of `params` with finite differences of
    forward(tensors as float64, quantized to f32)."""
    q = {k: harness.quantize(v, "f32") for k, v in tensors.items()}
    got = train_grads(ck, tensors, nodes, "L", params, label)
    for p in params:
        ck.checks += 1
        if got is None:
            continue
        want = finite_diff(forward, q, p, eps)
        if got[p].shape != want.shape:
            ck.fail("%s d%s: shape %s, want %s" % (label, p, got[p].shape, want.shape))
            continue
        bad = ~np.isclose(got[p], want, atol=tol[0], rtol=tol[1])
        if bad.any():
            i = tuple(np.argwhere(bad)[0])
            ck.fail("%s d%s: %d of %d differ; first at %s: got %r want %r" % (
                label, p, int(bad.sum()), bad.size, i, got[p][i], want[i]))


def weighted_sum(y_id, r_name):
    return [{"id": "m", "op": "mul", "inputs": [y_id, r_name]},
            {"id": "L", "op": "sum", "inputs": ["m"]}]


def grad_checks(ck):
    cases = [
        ((2, 3, 6, 7), (4, 3, 3, 3), {"padding": 1}),
        ((1, 4, 7, 7), (4, 2, 3, 2), {"stride": [2, 1], "dilation": [1, 2], "groups": 2, "padding": [1, 0]}),
    ]
    for k, (xs, ws, attrs) in enumerate(cases):
        pre = "gc%d." % k
        ys = conv_out_shape(xs, ws, attrs)
        t = {pre + "x": values(xs), pre + "w": values(ws), pre + "b": values((ws[0],)), pre + "R": values(ys)}
        nodes = [{"id": "y", "op": "conv2d", "inputs": [pre + "x", pre + "w", pre + "b"], "attrs": attrs}]
        nodes += weighted_sum("y", pre + "R")

        def fwd(a, pre=pre, attrs=attrs):
            return np.sum(ref_conv.conv2d(a[pre + "x"], a[pre + "w"], a[pre + "b"], **attrs) * a[pre + "R"])
        grad_check(ck, "conv2d %s" % attrs, t, nodes, [pre + "x", pre + "w", pre + "b"], fwd)
    # Without a bias, and x not a parameter.
    t = {"gc.x": values((2, 2, 5, 5)), "gc.w": values((3, 2, 2, 2)), "gc.R": values((2, 3, 4, 4))}
    nodes = [{"id": "y", "op": "conv2d", "inputs": ["gc.x", "gc.w"]}] + weighted_sum("y", "gc.R")
    grad_check(ck, "conv2d (no bias)", t, nodes, ["gc.w"],
               lambda a: np.sum(ref_conv.conv2d(a["gc.x"], a["gc.w"]) * a["gc.R"]))
    for attrs in ({"kernel_size": 2}, {"kernel_size": 3, "stride": 2, "padding": 1}):
        xs = (2, 2, 6, 6)
        ys = pool_out_shape(xs, attrs)
        for op, fn in (("max_pool2d", ref_conv.max_pool2d), ("avg_pool2d", ref_conv.avg_pool2d)):
            t = {"gp.x": distinct(xs), "gp.R": values(ys)}
            nodes = [{"id": "y", "op": op, "inputs": ["gp.x"], "attrs": attrs}] + weighted_sum("y", "gp.R")
            grad_check(ck, "%s %s" % (op, attrs), t, nodes, ["gp.x"],
                       lambda a, fn=fn, attrs=attrs: np.sum(fn(a["gp.x"], **attrs) * a["gp.R"]), eps=1e-3)
    cnn(ck)
    norm_checks(ck)


def ref_row_norm(x, w, b, nd, eps, rms):
    axes = tuple(range(x.ndim - nd, x.ndim))
    xc = x if rms else x - x.mean(axis=axes, keepdims=True)
    y = xc / np.sqrt((xc * xc).mean(axis=axes, keepdims=True) + eps)
    return y * (1 if w is None else w) + (0 if b is None else b)


def norm_checks(ck):
    """layer_norm and rms_norm w.r.t. x, weight and bias (ndim 1 and 2)."""
    for op in ("layer_norm", "rms_norm"):
        for xs, nd, affine, attrs in (((3, 5), 1, True, {}), ((2, 3, 4), 2, True, {"ndim": 2, "eps": 1e-3}),
                                      ((4, 6), 1, False, {})):
            rms = op == "rms_norm"
            eps = attrs.get("eps", 1e-6 if rms else 1e-5)
            t = {"gn.x": values(xs) * 2, "gn.R": values(xs)}
            ins, params = ["gn.x"], ["gn.x"]
            if affine:
                t["gn.w"] = values(xs[-nd:]) + 1.5
                ins.append("gn.w")
                if not rms:
                    t["gn.b"] = values(xs[-nd:])
                    ins.append("gn.b")
                params = list(ins)
            nodes = [{"id": "y", "op": op, "inputs": ins, "attrs": attrs}] + weighted_sum("y", "gn.R")

            def fwd(a, nd=nd, eps=eps, rms=rms):
                return np.sum(ref_row_norm(a["gn.x"], a.get("gn.w"), a.get("gn.b"), nd, eps, rms) * a["gn.R"])
            grad_check(ck, "%s %s %s" % (op, xs, attrs), t, nodes, params, fwd, eps=1e-4, tol=(5e-4, 5e-3))


def cnn(ck):
    """conv -> tanh -> max_pool -> conv -> avg_pool -> reshape -> matmul ->
    cross_entropy: every parameter's gradient against finite differences."""
    x = values((2, 2, 8, 8))
    t = {"cnn.x": x, "cnn.w1": values((3, 2, 3, 3)) * 0.5, "cnn.b1": values((3,)) * 0.1,
         "cnn.w2": values((4, 3, 3, 3)) * 0.5, "cnn.b2": values((4,)) * 0.1,
         "cnn.fc": values((16, 3)) * 0.5}
    nodes = [
        {"id": "c1", "op": "conv2d", "inputs": ["cnn.x", "cnn.w1", "cnn.b1"], "attrs": {"padding": 1}},
        {"id": "a1", "op": "tanh", "inputs": ["c1"]},
        {"id": "p1", "op": "max_pool2d", "inputs": ["a1"], "attrs": {"kernel_size": 2}},
        {"id": "c2", "op": "conv2d", "inputs": ["p1", "cnn.w2", "cnn.b2"], "attrs": {"padding": 1}},
        {"id": "p2", "op": "avg_pool2d", "inputs": ["c2"], "attrs": {"kernel_size": 2}},
        {"id": "f", "op": "reshape", "inputs": ["p2"], "attrs": {"shape": [2, 16]}},
        {"id": "z", "op": "matmul", "inputs": ["f", "cnn.fc"]},
        {"id": "L", "op": "sum", "inputs": ["z"]},
    ]

    def fwd(a):
        c1 = ref_conv.conv2d(a["cnn.x"], a["cnn.w1"], a["cnn.b1"], padding=1)
        p1 = ref_conv.max_pool2d(np.tanh(c1), kernel_size=2)
        c2 = ref_conv.conv2d(p1, a["cnn.w2"], a["cnn.b2"], padding=1)
        p2 = ref_conv.avg_pool2d(c2, kernel_size=2)
        return np.sum(p2.reshape(2, 16) @ a["cnn.fc"])
    grad_check(ck, "cnn", t, nodes, ["cnn.x", "cnn.w1", "cnn.b1", "cnn.w2", "cnn.b2", "cnn.fc"], fwd,
               eps=1e-4, tol=(5e-4, 5e-3))


def run(ck):
    t0 = time.time()
    op_cases(ck)
    algo_cases(ck)
    zero_cases(ck)
    errors(ck)
    t1 = time.time()
    grad_checks(ck)
    print("conv_grad: ops %.1f s, gradient checks %.1f s" % (t1 - t0, time.time() - t1))


if __name__ == "__main__":
    harness.main(run)

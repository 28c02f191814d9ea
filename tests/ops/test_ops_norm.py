"""Normalisation ops (softmax log_softmax layer_norm rms_norm batch_norm) x
f32/f16/bf16 against ref_norm.py: axes (negative too), odd and long rows,
large logits, optional weight/bias, training and inference batch_norm,
rank 0 and zero-size inputs, and bad input."""
import numpy as np

import harness
import ref_norm as ref

rng = np.random.default_rng(777)

SM_CASES = [((5,), None), ((3, 7), -1), ((3, 7), 0), ((2, 3, 4), 1), ((2, 300), 1), ((4, 3000), -1),
            ((3, 1000, 2), 1), ((), None), ((0, 5), -1), ((5, 0), 1)]


def u(shape, lo=-2.0, hi=2.0):
    return rng.uniform(lo, hi, size=shape)


def run(ck):
    for dt in harness.FLOAT_DTYPES:
        # f32 exp/log through the driver's transcendental functions: a few ulp.
        tol = (2e-6, 2e-5) if dt == "f32" else None
        for op, fn in (("softmax", ref.softmax), ("log_softmax", ref.log_softmax)):
            for shape, axis in SM_CASES:
                attrs = None if axis is None else {"axis": axis}
                ck.check(op, [u(shape)], [dt], lambda v, a=axis, fn=fn: fn(v, -1 if a is None else a),
                         attrs=attrs, tol=tol)
            # Large logits: stable only if the max is subtracted.
            ck.check(op, [u((3, 50), -80, 90) * 10], [dt], lambda v, fn=fn: fn(v), tol=tol,
                     label="(large)")

        # logsumexp: axes, keepdims, large logits (stable), infinities
        for shape, axis, keep in (((7,), None, False), ((3, 5), 0, True), ((3, 5), -1, False), ((2, 3, 4), 1, False),
                                  ((2, 3, 4), 1, True), ((2, 1000), 1, False), ((0, 4), 1, False)):
            attrs = {"keepdims": keep} if keep else {}
            if axis is not None:
                attrs["axis"] = axis
            ck.check("logsumexp", [u(shape)], [dt],
                     lambda v, a=axis, k=keep: ref.logsumexp(v, -1 if a is None else a, k), attrs=attrs or None,
                     tol=tol)
        ck.check("logsumexp", [u((3, 50), -80, 90) * 10], [dt], lambda v: ref.logsumexp(v), tol=tol,
                 label="(large)")
        inf = np.array([[1.0, -np.inf, 2.0], [-np.inf, -np.inf, -np.inf], [0.0, np.inf, 1.0], [np.nan, 0.0, 1.0]])
        ck.check("logsumexp", [inf], [dt], lambda v: ref.logsumexp(v), tol=tol, label="(inf, nan)")
        for shape, nd, params in (((4, 10), 1, 0), ((4, 10), 1, 2), ((2, 3, 8), 2, 2), ((2, 3, 8), 2, 1),
                                  ((3, 1000), 1, 2), ((5, 2, 33), 1, 1), ((0, 6), 1, 2), ((6,), 1, 2)):
            x = u(shape) * 3 + 1
            ins = [x] + [u(shape[len(shape) - nd:]) for _ in range(params)]
            ck.check("layer_norm", ins, [dt] * len(ins),
                     lambda v, *p, nd=nd: ref.layer_norm(v, *p, ndim=nd),
                     attrs={"ndim": nd} if nd != 1 else None, tol=(2e-5, 2e-5) if dt == "f32" else None)
            ins = ins[:2]
            ck.check("rms_norm", ins, [dt] * len(ins), lambda v, *p, nd=nd: ref.rms_norm(v, *p, ndim=nd),
                     attrs={"ndim": nd} if nd != 1 else None, tol=(2e-5, 2e-5) if dt == "f32" else None)
        x = u((3, 16)) * 1e-3
        ck.check("layer_norm", [x], [dt], lambda v: ref.layer_norm(v, eps=0.01), attrs={"eps": 0.01},
                 label="(eps)", tol=(2e-5, 2e-5) if dt == "f32" else None)
        ck.check("rms_norm", [x], [dt], lambda v: ref.rms_norm(v, eps=1e-4), attrs={"eps": 1e-4},
                 label="(eps)", tol=(2e-5, 2e-5) if dt == "f32" else None)

        for shape in ((4, 3, 5, 5), (8, 3), (40, 8), (2, 5, 7), (3, 2, 0, 4)):
            C = shape[1]
            x = u(shape) * 2 + 0.5
            rm, rv, w, b = u((C,)), u((C,), 0.5, 2), u((C,)), u((C,))
            bt = (3e-5, 3e-5) if dt == "f32" else None
            ck.check("batch_norm", [x, rm, rv, w, b], [dt] * 5, ref.batch_norm, tol=bt)
            ck.check("batch_norm", [x, rm, rv], [dt] * 3, ref.batch_norm, tol=bt, label="(no affine)")
            ck.check("batch_norm", [x, rm, rv, w, b], [dt] * 5,
                     lambda v, *p: ref.batch_norm(v, *p, training=True), attrs={"training": True},
                     tol=bt, label="(training)")
            ck.check("batch_norm", [x], [dt], lambda v: ref.batch_norm(v, training=True, eps=1e-3),
                     attrs={"training": True, "eps": 1e-3}, tol=bt, label="(training, x only)")
            ck.check("batch_norm", [x, rm, rv, w], [dt] * 4,
                     lambda v, *p: ref.batch_norm(v, *p, eps=0.1), attrs={"eps": 0.1, "training": False},
                     tol=bt, label="(weight only)")
    # A batch with many values per channel: the statistics need two passes.
    x = u((40, 2, 30, 30)) + 5
    ck.check("batch_norm", [x], ["f32"], lambda v: ref.batch_norm(v, training=True),
             attrs={"training": True}, tol=(3e-5, 3e-5), label="(training, 36000 per channel)")

    # In one graph (one submission): softmax rows sum to 1; batch statistics
    # from mean/var over [0, 2, 3] match batch_norm's training mode.
    x = u((3, 4, 5, 6)) * 3
    ck.c.put("g_x", x, "f32")
    ck.checks += 1
    err, res = ck.c.call("graph.run", {"nodes": [
        {"id": "s", "op": "softmax", "inputs": ["g_x"], "attrs": {"axis": 1}},
        {"id": "t", "op": "sum", "inputs": ["s"], "attrs": {"axis": 1}},
        {"id": "m", "op": "mean", "inputs": ["g_x"], "attrs": {"axis": [0, 2, 3]}},
        {"id": "v", "op": "var", "inputs": ["g_x"], "attrs": {"axis": [0, 2, 3], "correction": 0}},
        {"id": "bn", "op": "batch_norm", "inputs": ["g_x"], "attrs": {"training": True}},
        {"id": "bn2", "op": "batch_norm", "inputs": ["g_x", "m", "v"]},
        {"id": "d", "op": "sub", "inputs": ["bn", "bn2"]},
        {"id": "e", "op": "abs", "inputs": ["d"]},
        {"id": "f", "op": "max", "inputs": ["e"]}], "outputs": ["t", "f", "v"]})
    if err:
        ck.fail("graph: %r" % err)
    else:
        out = {k: harness.result_array(r) for k, r in res["outputs"].items()}
        q = harness.quantize(x, "f32")
        if not np.allclose(out["t"], 1, atol=1e-6) or not out["f"] < 1e-5 or not np.allclose(
                out["v"], q.var(axis=(0, 2, 3)), rtol=1e-5):
            ck.fail("graph: softmax sums %r, batch_norm difference %r, var %r" % (
                out["t"].ravel()[:4], out["f"], out["v"]))

    # The longest row one workgroup takes (2^22); one more is refused.
    ck.check("softmax", [u((1, 1 << 22))], ["f32"], ref.softmax, tol=(1e-12, 2e-5), label="(2^22 row)")
    ck.check("logsumexp", [u((2, 1 << 20))], ["f32"], ref.logsumexp, tol=(1e-6, 1e-6), label="(2^20 row)")

    # Bad input.
    c = ck.c
    c.put("n_x", u((2, 3)), "f32")
    c.put("n_s", np.float64(1.5), "f32")
    c.put("n_i", np.zeros((2, 3)), "i32")
    c.put("n_h", u((2, 3)), "f16")
    c.put("n_w3", u((3,)), "f32")
    c.put("n_w2", u((2,)), "f32")
    c.put("n_w3h", u((3,)), "f16")
    c.put("n_one", u((1, 3)), "f32")
    c.put("n_long", np.zeros((0, (1 << 22) + 1)), "f32")
    ck.expect_error("softmax", ["n_long"], None, "RESOURCE_EXHAUSTED")
    ck.expect_error("logsumexp", ["n_long"], None, "RESOURCE_EXHAUSTED")
    ck.c.put("n_empty_axis", np.zeros((3, 0)), "f32")
    ck.expect_error("logsumexp", ["n_empty_axis"], None, "INVALID_ARGUMENT")
    ck.expect_error("logsumexp", ["n_x"], {"axis": 5}, "INVALID_ARGUMENT")
    ck.expect_error("layer_norm", ["n_long"], None, "RESOURCE_EXHAUSTED")
    for op in ("softmax", "log_softmax", "layer_norm", "rms_norm", "batch_norm"):
        ck.expect_error(op, ["n_i"], None, "DTYPE_MISMATCH")
    ck.expect_error("softmax", ["n_x"], {"axis": 2}, "INVALID_ARGUMENT")
    ck.expect_error("log_softmax", ["n_x"], {"axis": -3}, "INVALID_ARGUMENT")
    ck.expect_error("softmax", ["n_x"], {"axis": [0]}, "INVALID_ARGUMENT")
    ck.expect_error("softmax", ["n_x", "n_x"], None, "INVALID_ARGUMENT")
    ck.expect_error("layer_norm", ["n_x"], {"ndim": 0}, "INVALID_ARGUMENT")
    ck.expect_error("layer_norm", ["n_x"], {"ndim": 3}, "INVALID_ARGUMENT")
    ck.expect_error("layer_norm", ["n_s"], None, "INVALID_ARGUMENT")
    ck.expect_error("layer_norm", ["n_x", "n_w2"], None, "SHAPE_MISMATCH")
    ck.expect_error("layer_norm", ["n_x", "n_w3", "n_w2"], None, "SHAPE_MISMATCH")
    ck.expect_error("layer_norm", ["n_x", "n_w3h"], None, "DTYPE_MISMATCH")
    ck.expect_error("layer_norm", ["n_x"], {"eps": -1}, "INVALID_ARGUMENT")
    ck.expect_error("rms_norm", ["n_x", "n_w3", "n_w3"], None, "INVALID_ARGUMENT")
    ck.expect_error("rms_norm", ["n_x"], {"ndim": "1"}, "INVALID_ARGUMENT")
    ck.expect_error("batch_norm", ["n_w3"], {"training": True}, "INVALID_ARGUMENT")
    ck.expect_error("batch_norm", ["n_x"], None, "INVALID_ARGUMENT")
    ck.expect_error("batch_norm", ["n_x", "n_w3"], {"training": True}, "INVALID_ARGUMENT")
    ck.expect_error("batch_norm", ["n_x", "n_w2", "n_w3"], None, "SHAPE_MISMATCH")
    ck.expect_error("batch_norm", ["n_x", "n_w3", "n_w3", "n_w2"], None, "SHAPE_MISMATCH")
    ck.expect_error("batch_norm", ["n_h", "n_w3", "n_w3"], None, "DTYPE_MISMATCH")
    ck.expect_error("batch_norm", ["n_one"], {"training": True}, "INVALID_ARGUMENT")
    ck.expect_error("batch_norm", ["n_x"], {"training": 1}, "INVALID_ARGUMENT")
    norm_grad(ck)
    bn_grad(ck)
    ck.expect_error("batch_norm", ["n_x", "n_w3", "n_w3"], {"momentum": 0.1}, "INVALID_ARGUMENT")


LNG_CASES = [((4, 10), 1), ((2, 3, 8), 2), ((5, 2, 33), 1), ((3, 1000), 1), ((6,), 1), ((7, 1), 1),
             ((2, 3, 1, 1), 2), ((4, 2048), 1), ((3, 2049), 1), ((3, 4096), 1), ((2, 16, 256), 2),
             ((0, 6), 1)]


def fd_row_norm_grad(g, x, w, nd, eps, rms):
    """dx by central differences of sum(g * y(x)), y the float64 forward."""
    fwd = ref.rms_norm if rms else ref.layer_norm
    dx = np.zeros_like(x)
    h = 1e-6
    for i in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[i] += h
        xm[i] -= h
        dx[i] = (np.sum(g * fwd(xp, w, ndim=nd, eps=eps)) - np.sum(g * fwd(xm, w, ndim=nd, eps=eps))) / (2 * h)
    return dx


def norm_grad(ck):
    """layer_norm_grad / rms_norm_grad against ref_norm.row_norm_grad, which
    is first checked against finite differences of the forward references."""
    for rms in (False, True):
        for shape, nd in (((3, 5), 1), ((2, 3, 4), 2), ((4, 1), 1)):
            x, g, w = u(shape) * 2 + 0.5, u(shape), u(shape[len(shape) - nd:]) + 1.5
            for wt in (None, w):
                ck.checks += 1
                want = fd_row_norm_grad(g, x, wt, nd, 1e-3, rms)
                got = ref.row_norm_grad(g, x, wt, nd, 1e-3, rms)
                if not np.allclose(got, want, atol=1e-6, rtol=1e-6):
                    ck.fail("ref_norm.row_norm_grad %s rms=%s: %r, differences %r" % (shape, rms, got, want))

    for dt in harness.FLOAT_DTYPES:
        tol = (3e-5, 3e-5) if dt == "f32" else None
        for shape, nd in LNG_CASES:
            x, g, w = u(shape) * 3 + 1, u(shape), u(shape[len(shape) - nd:]) + 0.5
            attrs = {"ndim": nd} if nd != 1 else None
            for op, fn in (("layer_norm_grad", ref.layer_norm_grad), ("rms_norm_grad", ref.rms_norm_grad)):
                ck.check(op, [g, x], [dt] * 2, lambda gg, xx, fn=fn, nd=nd: fn(gg, xx, ndim=nd),
                         attrs=attrs, tol=tol)
                ck.check(op, [g, x, w], [dt] * 3, lambda gg, xx, ww, fn=fn, nd=nd: fn(gg, xx, ww, ndim=nd),
                         attrs=attrs, tol=tol, label="(weight)")
        # Constant rows (var 0: rstd = 1/sqrt(eps)), an all-zero row, eps.
        x = u((6, 40))
        x[0] = 3.0
        x[1] = 0.0
        x[2, :] = -1.25
        g = u((6, 40))
        for op, fn in (("layer_norm_grad", ref.layer_norm_grad), ("rms_norm_grad", ref.rms_norm_grad)):
            ck.check(op, [g, x], [dt] * 2, fn, tol=(3e-5, 3e-5) if dt == "f32" else None, label="(constant rows)")
            ck.check(op, [g, x], [dt] * 2, lambda gg, xx, fn=fn: fn(gg, xx, eps=0.25), attrs={"eps": 0.25},
                     tol=tol, label="(eps)")
            big = u((2, 5000)) * 3 + 1  # long rows: the kernel's uncached loops
            ck.check(op, [u((2, 5000)), big, u((5000,))], [dt] * 3, fn, tol=tol, label="(5000)")

    # The longest row (2^22): three loops of 2^14 stay inside lavapipe's
    # 65535-iteration limit (past it the loops end early, silently).
    ck.check("layer_norm_grad", [u((1, 1 << 22)), u((1, 1 << 22)) * 3 + 1, u((1 << 22,))], ["f32"] * 3,
             ref.layer_norm_grad, tol=(3e-5, 3e-5), label="(2^22 row)")

    # Bad input.
    c = ck.c
    c.put("ng_x", u((2, 3)), "f32")
    c.put("ng_x4", u((2, 4)), "f32")
    c.put("ng_h", u((2, 3)), "f16")
    c.put("ng_i", np.zeros((2, 3)), "i32")
    c.put("ng_w3", u((3,)), "f32")
    c.put("ng_w2", u((2,)), "f32")
    c.put("ng_w3h", u((3,)), "f16")
    c.put("ng_long", np.zeros((0, (1 << 22) + 1)), "f32")
    for op in ("layer_norm_grad", "rms_norm_grad"):
        ck.expect_error(op, ["ng_x"], None, "INVALID_ARGUMENT")
        ck.expect_error(op, ["ng_x", "ng_x", "ng_w3", "ng_w3"], None, "INVALID_ARGUMENT")
        ck.expect_error(op, ["ng_i", "ng_i"], None, "DTYPE_MISMATCH")
        ck.expect_error(op, ["ng_x", "ng_h"], None, "DTYPE_MISMATCH")
        ck.expect_error(op, ["ng_x", "ng_x", "ng_w3h"], None, "DTYPE_MISMATCH")
        ck.expect_error(op, ["ng_x", "ng_x4"], None, "SHAPE_MISMATCH")
        ck.expect_error(op, ["ng_x", "ng_x", "ng_w2"], None, "SHAPE_MISMATCH")
        ck.expect_error(op, ["ng_x", "ng_x", "ng_w3"], {"ndim": 2}, "SHAPE_MISMATCH")
        ck.expect_error(op, ["ng_x", "ng_x"], {"ndim": 3}, "INVALID_ARGUMENT")
        ck.expect_error(op, ["ng_x", "ng_x"], {"ndim": 0}, "INVALID_ARGUMENT")
        ck.expect_error(op, ["ng_x", "ng_x"], {"eps": -1}, "INVALID_ARGUMENT")
        ck.expect_error(op, ["ng_long", "ng_long"], None, "RESOURCE_EXHAUSTED")

    # autograd: layer_norm's backward w.r.t. x is the fused op, one dispatch,
    # as neg's (the composed rule took 13 more for layer_norm, 9 for rms_norm).
    c.put("ng_px", u((64, 256)), "f32")
    c.put("ng_pr", u((64, 256)), "f32")
    count = {}
    for op in ("neg", "layer_norm", "rms_norm"):
        ck.checks += 1
        err, res = c.call("train.step", {"nodes": [
            {"id": "y", "op": op, "inputs": ["ng_px"]},
            {"id": "p", "op": "mul", "inputs": ["y", "ng_pr"]},
            {"id": "L", "op": "sum", "inputs": ["p"]}],
            "loss": "L", "params": ["ng_px"], "optimizer": {"type": "sgd", "lr": 1e-6}, "profile": True,
            "fuse": False})
        if err:
            ck.fail("train.step %s: %r" % (op, err))
            return
        count[op] = res["dispatches"]
    print("train.step dispatches, x [64, 256]: %r" % count)
    if count["layer_norm"] != count["neg"] or count["rms_norm"] != count["neg"]:
        ck.fail("the norms' backward takes more dispatches than neg's: %r" % count)

# (shape) of batch_norm_grad: rank 2, one value per channel, odd spatial
# sizes, C = 1 (one channel of several chunks), C = 300, the digits CNN's
# [1024, 16, 8, 8] scaled down, channels of exactly 1 and 2 chunks (2048),
# and one of more than 1024 chunks (longer chunks).
BNG_CASES = [(2, 3), (1, 1, 1, 1), (5, 2, 3, 7), (3, 1, 9, 11), (1, 1, 4099), (4, 300), (2, 300, 3),
             (64, 16, 8, 8), (50, 2, 7, 9), (2, 3, 1024), (4, 2, 1024), (0, 3, 2), (3, 0)]


def fd_batch_norm_grad(g, x, w, eps):
    """dx by central differences of sum(g * batch_norm(x, w)) (training)."""
    dx = np.zeros_like(x)
    h = 1e-6
    for i in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[i] += h
        xm[i] -= h
        dx[i] = (np.sum(g * ref.batch_norm(xp, w=w, training=True, eps=eps)) -
                 np.sum(g * ref.batch_norm(xm, w=w, training=True, eps=eps))) / (2 * h)
    return dx


def bn_grad(ck):
    """batch_norm_grad against ref_norm.batch_norm_grad, which is first
    checked against finite differences of the forward reference; autograd's
    batch_norm backward in training mode takes it (2 dispatches)."""
    for shape in ((4, 3), (3, 2, 5), (2, 3, 2, 3), (5, 1)):
        x, g, w = u(shape) * 2 + 0.5, u(shape), u((shape[1],)) + 1.5
        ck.checks += 1
        want = np.zeros_like(w)
        for c in range(w.size):
            wp, wm = w.copy(), w.copy()
            wp[c] += 1e-6
            wm[c] -= 1e-6
            want[c] = (np.sum(g * ref.batch_norm(x, w=wp, training=True, eps=1e-3)) -
                       np.sum(g * ref.batch_norm(x, w=wm, training=True, eps=1e-3))) / 2e-6
        if not np.allclose(ref.batch_norm_grad_weight(g, x, 1e-3), want, atol=1e-6, rtol=1e-6):
            ck.fail("ref_norm.batch_norm_grad_weight %s: %r, differences %r" % (
                shape, ref.batch_norm_grad_weight(g, x, 1e-3), want))
        for wt in (None, w):
            ck.checks += 1
            want = fd_batch_norm_grad(g, x, wt, 1e-3)
            got = ref.batch_norm_grad(g, x, wt, 1e-3)
            if not np.allclose(got, want, atol=1e-6, rtol=1e-6):
                ck.fail("ref_norm.batch_norm_grad %s: %r, differences %r" % (shape, got, want))

    for dt in harness.FLOAT_DTYPES:
        tol = (3e-5, 3e-5) if dt == "f32" else None
        for shape in BNG_CASES:
            x, g, w = u(shape) * 3 + 1, u(shape), u(shape[1:2]) + 0.5
            ck.check("batch_norm_grad", [g, x], [dt] * 2, ref.batch_norm_grad, tol=tol)
            ck.check("batch_norm_grad", [g, x, w], [dt] * 3, ref.batch_norm_grad, tol=tol, label="(weight)")
            # A sum over the channel: f16/bf16 round the result of up to 2^16 terms.
            ck.check("batch_norm_grad_weight", [g, x], [dt] * 2, ref.batch_norm_grad_weight,
                     tol=(2e-4, 2e-4) if dt == "f32" else None)
        # Constant channels (var 0: rstd = 1/sqrt(eps)), an all-zero one, eps,
        # a mean far from 0 (the chunks' merge keeps the variance).
        x = u((8, 4, 300))
        x[:, 0] = 3.0
        x[:, 1] = 0.0
        g = u((8, 4, 300))
        ck.check("batch_norm_grad", [g, x], [dt] * 2, ref.batch_norm_grad, tol=tol, label="(constant)")
        ck.check("batch_norm_grad_weight", [g, x], [dt] * 2, ref.batch_norm_grad_weight,
                 tol=(2e-4, 2e-4) if dt == "f32" else None, label="(constant)")
        ck.check("batch_norm_grad", [g, x, u((4,))], [dt] * 3, lambda gg, xx, ww: ref.batch_norm_grad(gg, xx, ww, 0.25),
                 attrs={"eps": 0.25}, tol=tol, label="(eps)")
        if dt == "f32":
            ck.check("batch_norm_grad", [g, u((8, 4, 300)) + 1000.0], [dt] * 2, ref.batch_norm_grad,
                     tol=(2e-3, 2e-3), label="(offset)")
    # The longest loops: one channel of 2^23 elements (2048 chunks of 4096).
    big = (1, 1, 1 << 23)
    gb, xb = u(big), u(big) * 3 + 1
    ck.check("batch_norm_grad", [gb, xb], ["f32"] * 2, ref.batch_norm_grad, tol=(3e-5, 3e-5),
             label="(2^23 channel)")
    ck.check("batch_norm_grad_weight", [gb, xb], ["f32"] * 2, ref.batch_norm_grad_weight, tol=(1e-4, 1e-4),
             label="(2^23 channel)")

    # Deterministic: the same bits every run (fixed merge order, no atomics).
    c = ck.c
    c.put("bg_dg", u((64, 16, 8, 8)), "f32")
    c.put("bg_dx", u((64, 16, 8, 8)) * 3 + 1, "f32")
    for op in ("batch_norm_grad", "batch_norm_grad_weight"):
        ck.checks += 1
        runs = [harness.result_array(c.run(op, ["bg_dg", "bg_dx"], None)[1]).tobytes() for _ in range(3)]
        if runs[1] != runs[0] or runs[2] != runs[0]:
            ck.fail("%s: runs differ" % op)
    c.put("bg_x", u((2, 3)), "f32")
    c.put("bg_x4", u((2, 4)), "f32")
    c.put("bg_h", u((2, 3)), "f16")
    c.put("bg_i", np.zeros((2, 3)), "i32")
    c.put("bg_v", u((3,)), "f32")
    c.put("bg_w2", u((2,)), "f32")
    c.put("bg_w3h", u((3,)), "f16")
    ck.expect_error("batch_norm_grad", ["bg_x"], None, "INVALID_ARGUMENT")
    ck.expect_error("batch_norm_grad", ["bg_x", "bg_x", "bg_v", "bg_v"], None, "INVALID_ARGUMENT")
    ck.expect_error("batch_norm_grad", ["bg_v", "bg_v"], None, "INVALID_ARGUMENT")
    ck.expect_error("batch_norm_grad", ["bg_i", "bg_i"], None, "DTYPE_MISMATCH")
    ck.expect_error("batch_norm_grad", ["bg_x", "bg_h"], None, "DTYPE_MISMATCH")
    ck.expect_error("batch_norm_grad", ["bg_x", "bg_x", "bg_w3h"], None, "DTYPE_MISMATCH")
    ck.expect_error("batch_norm_grad", ["bg_x", "bg_x4"], None, "SHAPE_MISMATCH")
    ck.expect_error("batch_norm_grad", ["bg_x", "bg_x", "bg_w2"], None, "SHAPE_MISMATCH")
    ck.expect_error("batch_norm_grad", ["bg_x", "bg_x"], {"eps": -1}, "INVALID_ARGUMENT")
    ck.expect_error("batch_norm_grad_weight", ["bg_x", "bg_x", "bg_v"], None, "INVALID_ARGUMENT")
    ck.expect_error("batch_norm_grad_weight", ["bg_x", "bg_x4"], None, "SHAPE_MISMATCH")
    ck.expect_error("batch_norm_grad_weight", ["bg_x", "bg_h"], None, "DTYPE_MISMATCH")
    ck.expect_error("batch_norm_grad_weight", ["bg_v", "bg_v"], None, "INVALID_ARGUMENT")

    # autograd: batch_norm's training-mode backward w.r.t. x is the fused op,
    # 2 dispatches for [64, 16, 8, 8] (2 chunks a channel), and w.r.t. its
    # weight batch_norm_grad_weight, 2 more. The step with x (or weight) as
    # the parameter against the same step with r as the parameter: the
    # difference is the backward through batch_norm (the composed rule took
    # 14 dispatches for x, 9 for the weight).
    c.put("bg_px", u((64, 16, 8, 8)), "f32")
    c.put("bg_pr", u((64, 16, 8, 8)), "f32")
    c.put("bg_rm", np.zeros(16), "f32")
    c.put("bg_rv", np.ones(16), "f32")
    c.put("bg_pw", u((16,)) + 1.5, "f32")
    c.put("bg_pb", u((16,)), "f32")
    count = {}
    for affine in (False, True):
        bn_in = ["bg_px"] + (["bg_rm", "bg_rv", "bg_pw", "bg_pb"] if affine else [])
        for param in ("bg_px", "bg_pr") + (("bg_pw",) if affine else ()):
            ck.checks += 1
            err, res = c.call("train.step", {"nodes": [
                {"id": "y", "op": "batch_norm", "inputs": bn_in, "attrs": {"training": True}},
                {"id": "p", "op": "mul", "inputs": ["y", "bg_pr"]},
                {"id": "L", "op": "sum", "inputs": ["p"]}],
                "loss": "L", "params": [param], "optimizer": {"type": "sgd", "lr": 1e-6}, "profile": True,
                "fuse": False})
            if err:
                ck.fail("train.step batch_norm %s: %r" % (param, err))
                return
            count[(affine, param)] = res["dispatches"]
    print("train.step dispatches through batch_norm, x [64, 16, 8, 8]: %r" % count)
    for affine in (False, True):
        if count[(affine, "bg_px")] - count[(affine, "bg_pr")] > 2:
            ck.fail("batch_norm's backward to x takes more than 2 dispatches: %r" % count)
    if count[(True, "bg_pw")] - count[(True, "bg_pr")] > 2:
        ck.fail("batch_norm's backward to the weight takes more than 2 dispatches: %r" % count)


if __name__ == "__main__":
    harness.main(run)

"""Matmul epilogues (issue 16): matmul with a bias input and activation
"relu" against ref_linalg.matmul_epilogue, activation "relu_grad" with a mask
input likewise, and graph.run's rewrite of the chains matmul -> add(bias) ->
relu, matmul -> add(bias), matmul -> relu and matmul -> relu_grad(product,
mask) into one fused node, for f32 chains: bit for bit the result of the unfused nodes
(`fuse: false` keeps them apart), in every layout (NN, NT, TN), split and
unsplit, at odd sizes, with fewer dispatches (graph.run `profile`); f16 and
bf16 chains stay as written (the same bytes, no dispatch saved); chains
whose intermediate is read elsewhere are left alone. The fused op itself
(bias input, relu, the mask) is checked against the reference in every dtype,
and a relu MLP's training steps (whose backward fuses relu's gradient into
the products that make it) are the same bits fused and unfused."""
import time

import numpy as np

import harness
import ref_linalg as ref

rng = np.random.default_rng(1616)

TOL = {"f32": (1e-4, 1e-4), "f16": (4e-3, 4e-3), "bf16": (3e-2, 3e-2)}

# Logical (M, K, N): 1x1, odd sizes, 128-tile and vec4 sizes, the skinny
# 784x4096x10 of a first layer's weight gradient, a long K that splits, and
# whole 128x128 tiles with K a multiple of 32 (f16 NN there takes the
# tensor-core path on an NVIDIA GPU: matmul_cm_part.comp + matmul_reduce).
SIZES = [(1, 1, 1), (3, 7, 5), (65, 33, 129), (260, 36, 516), (784, 4096, 10), (16, 4096, 8),
         (256, 64, 384)]
CM_SIZE = (256, 64, 384)


def stored(shape, t):
    return (shape[1], shape[0]) if t else shape


def values(shape):
    return rng.uniform(-1, 1, size=shape)


def run_op(ck):
    """op.run with the epilogue against the float64 reference."""
    for dt in harness.FLOAT_DTYPES:
        for m, k, n in SIZES[:4]:
            for ta, tb in ((False, False), (False, True), (True, False)):
                for bias in (False, True):
                    for act in ("none", "relu"):
                        attrs = {"transpose_a": ta, "transpose_b": tb, "activation": act}
                        arrays = [values(stored((m, k), ta)), values(stored((k, n), tb))]
                        if bias:
                            arrays.append(values((n,)))
                        ck.check("matmul", arrays, [dt] * len(arrays),
                                 ref.matmul_epilogue(ta, tb, act, dt), attrs=attrs, tol=TOL[dt],
                                 label="(epilogue)")
    # A bias [1, N] and a batched product; split-K through the reduction.
    ck.check("matmul", [values((2, 5, 7)), values((7, 6)), values((1, 6))], ["f32"] * 3,
             ref.matmul_epilogue(False, False, "relu", "f32"), attrs={"activation": "relu"},
             tol=TOL["f32"], label="(batched, bias [1,N])")
    for dt in harness.FLOAT_DTYPES:
        ck.check("matmul", [values((33, 300)), values((300, 17)), values((17,))], [dt] * 3,
                 ref.matmul_epilogue(False, False, "relu", dt), attrs={"activation": "relu", "split_k": 5},
                 tol=TOL[dt], label="(split-K)")
    run_mask(ck)
    c = ck.c
    c.put("ep_a", values((3, 4)), "f32")
    c.put("ep_b", values((4, 5)), "f32")
    c.put("ep_bias4", values((4,)), "f32")
    c.put("ep_bias35", values((3, 5)), "f32")
    c.put("ep_bias16", values((5,)), "f16")
    ck.expect_error("matmul", ["ep_a", "ep_b", "ep_bias4"], None, "SHAPE_MISMATCH", label="(bias length)")
    ck.expect_error("matmul", ["ep_a", "ep_b", "ep_bias35"], None, "SHAPE_MISMATCH", label="(bias matrix)")
    ck.expect_error("matmul", ["ep_a", "ep_b", "ep_bias16"], None, "DTYPE_MISMATCH", label="(bias dtype)")
    ck.expect_error("matmul", ["ep_a", "ep_b"], {"activation": "gelu"}, "INVALID_ARGUMENT",
                    label="(activation)")
    c.put("ep_mask16", values((3, 5)), "f16")
    ck.expect_error("matmul", ["ep_a", "ep_b"], {"activation": "relu_grad"}, "INVALID_ARGUMENT",
                    label="(relu_grad without a mask)")
    ck.expect_error("matmul", ["ep_a", "ep_b", "ep_bias4"], {"activation": "relu_grad"}, "SHAPE_MISMATCH",
                    label="(mask shape)")
    c.put("ep_mask53", values((5, 3)), "f32")
    ck.expect_error("matmul", ["ep_a", "ep_b", "ep_mask53"], {"activation": "relu_grad"}, "SHAPE_MISMATCH",
                    label="(mask of another shape)")
    ck.expect_error("matmul", ["ep_a", "ep_b", "ep_mask16"], {"activation": "relu_grad"}, "DTYPE_MISMATCH",
                    label="(mask dtype)")


# (M, K, N) for the mask: the sizes above plus the skinny kernel's rows
# (>= 1024 rows, <= 16 columns), K <= 16 (matmul_smallk) and whole vec4 tiles.
MASK_SIZES = SIZES[:4] + [(2048, 64, 10), (300, 10, 520), (512, 128, 256)]


def run_mask(ck):
    """activation "relu_grad": the product kept where the mask is > 0."""
    for dt in harness.FLOAT_DTYPES:
        for m, k, n in MASK_SIZES:
            for ta, tb in ((False, False), (False, True), (True, False)):
                arrays = [values(stored((m, k), ta)), values(stored((k, n), tb)), values((m, n))]
                ck.check("matmul", arrays, [dt] * 3, ref.matmul_epilogue(ta, tb, "relu_grad", dt),
                         attrs={"transpose_a": ta, "transpose_b": tb, "activation": "relu_grad"},
                         tol=TOL[dt], label="(mask %s)" % ((m, k, n),))
        ck.check("matmul", [values((33, 300)), values((300, 17)), values((33, 17))], [dt] * 3,
                 ref.matmul_epilogue(False, False, "relu_grad", dt),
                 attrs={"activation": "relu_grad", "split_k": 5}, tol=TOL[dt], label="(mask, split-K)")
        ck.check("matmul", [values((2, 5, 7)), values((7, 6)), values((2, 5, 6))], [dt] * 3,
                 ref.matmul_epilogue(False, False, "relu_grad", dt), attrs={"activation": "relu_grad"},
                 tol=TOL[dt], label="(mask, batched)")


def chain(ta, tb, bias, relu):
    """The nodes matmul [-> add(bias)] [-> relu], the last one "y"."""
    nodes = [{"id": "mm", "op": "matmul", "inputs": ["x", "w"],
              "attrs": {"transpose_a": ta, "transpose_b": tb}}]
    last = "mm"
    if bias:
        nodes.append({"id": "z", "op": "add", "inputs": [last, "b"]})
        last = "z"
    if relu:
        nodes.append({"id": "r", "op": "relu", "inputs": [last]})
        last = "r"
    nodes.append({"id": "y", "op": "reshape", "inputs": [last], "attrs": {"shape": [-1]}})
    return nodes


def graph(ck, nodes, outputs, fuse, what):
    params = {"nodes": nodes, "outputs": outputs, "profile": True}
    if not fuse:
        params["fuse"] = False
    err, res = ck.c.call("graph.run", params)
    if err is not None:
        ck.fail("%s: %r" % (what, err))
        return None, None
    return res["outputs"], res["dispatches"]


def same_as_unfused(ck, nodes, what, saved):
    """graph.run of `nodes` (output "y") fused and with `fuse: false`: the
    same bytes, and `saved` dispatches fewer fused."""
    ck.checks += 1
    fused, dfused = graph(ck, nodes, ["y"], True, what)
    plain, dplain = graph(ck, nodes, ["y"], False, what + " unfused")
    if fused is None or plain is None:
        return
    if fused["y"]["data"] != plain["y"]["data"]:
        got = harness.result_array(fused["y"]).astype(np.float64)
        want = harness.result_array(plain["y"]).astype(np.float64)
        ck.fail("%s: fused differs from unfused (max %g)" % (what, np.max(np.abs(got - want))))
    if dplain - dfused != saved:
        ck.fail("%s: %d dispatches fused, %d unfused; want %d fewer" % (what, dfused, dplain, saved))


def run_graph(ck):
    """The rewrite: the same bytes as the unfused nodes, fewer dispatches."""
    c = ck.c
    for dt in harness.FLOAT_DTYPES:
        for m, k, n in SIZES:
            for ta, tb in ((False, False), (False, True), (True, False)):
                if (m, k, n) == (784, 4096, 10) and dt != "f32":
                    continue
                c.put("x", values(stored((m, k), ta)), dt)
                c.put("w", values(stored((k, n), tb)), dt)
                c.put("b", values((n,)), dt)
                for bias, relu in ((True, True), (True, False), (False, True)):
                    what = "%s %s ta=%s tb=%s bias=%s relu=%s" % (dt, (m, k, n), ta, tb, bias, relu)
                    # only f32 chains are rewritten (the f16 ones differed from
                    # the chain in their last bits on an H100)
                    same_as_unfused(ck, chain(ta, tb, bias, relu), what,
                                    int(bias) + int(relu) if dt == "f32" else 0)
    run_graph_mask(ck)
    # An intermediate read elsewhere (returned, or by a second node) stays.
    c.put("x", values((9, 6)), "f32")
    c.put("w", values((6, 7)), "f32")
    c.put("b", values((7,)), "f32")
    nodes = chain(False, False, True, True)
    ck.checks += 1
    out, d1 = graph(ck, nodes, ["y", "z"], True, "z returned")
    _, d2 = graph(ck, nodes, ["y", "z"], False, "z returned, unfused")
    if out is not None and d1 != d2 - 1:
        ck.fail("z returned: %s dispatches fused, %s unfused; want only the add fused away" % (d1, d2))
    nodes = chain(False, False, True, True) + [{"id": "u", "op": "neg", "inputs": ["mm"]}]
    ck.checks += 1
    out, d1 = graph(ck, nodes, ["y", "u"], True, "mm read twice")
    _, d2 = graph(ck, nodes, ["y", "u"], False, "mm read twice, unfused")
    if out is not None and d1 != d2:
        ck.fail("mm read twice: %s dispatches fused, %s unfused; want none fused" % (d1, d2))


def run_graph_mask(ck):
    """matmul -> relu_grad(product, mask): one node, the same bytes."""
    c = ck.c
    for dt in harness.FLOAT_DTYPES:
        for m, k, n in MASK_SIZES:
            for ta, tb in ((False, False), (False, True), (True, False)):
                c.put("x", values(stored((m, k), ta)), dt)
                c.put("w", values(stored((k, n), tb)), dt)
                c.put("mk", values((m, n)), dt)
                nodes = [{"id": "mm", "op": "matmul", "inputs": ["x", "w"],
                          "attrs": {"transpose_a": ta, "transpose_b": tb}},
                         {"id": "g", "op": "relu_grad", "inputs": ["mm", "mk"]},
                         {"id": "y", "op": "reshape", "inputs": ["g"], "attrs": {"shape": [-1]}}]
                what = "%s %s ta=%s tb=%s relu_grad" % (dt, (m, k, n), ta, tb)
                same_as_unfused(ck, nodes, what, 1 if dt == "f32" else 0)


# The shape classes whose 16-bit fused products once differed from the
# unfused chain (issue 29): (M, K, N, transpose_a, transpose_b, split_k,
# epilogue). Rows >= 1024 with <= 16 columns take the skinny kernel; the
# rest the square tiles, NN or not, split or not; on an NVIDIA GPU f16
# whole tiles take the tensor cores.
BIT_CASES = [(33, 40, 17, False, False, 0, "bias+relu"), (70, 129, 64, True, False, 0, "bias"),
             (8, 3000, 12, False, False, 4, "bias+relu"), (128, 64, 128, True, True, 0, "bias+relu"),
             (1100, 64, 10, False, False, 0, "bias+relu"), (20, 2048, 10, True, False, 0, "bias"),
             (1100, 40, 10, False, False, 0, "relu_grad"), (2048, 64, 16, False, False, 0, "relu"),
             (256, 64, 384, False, False, 0, "bias+relu"), (256, 64, 384, False, False, 0, "relu_grad")]


def run_fused_op_bits(ck):
    """The fused matmul node (bias, relu or the mask given to matmul itself)
    against the nodes matmul -> add -> relu / relu_grad: the same bytes in
    every dtype, whichever kernel the product takes."""
    c = ck.c
    for dt in harness.FLOAT_DTYPES:
        for m, k, n, ta, tb, split, epi in BIT_CASES:
            c.put("x", values(stored((m, k), ta)), dt)
            c.put("w", values(stored((k, n), tb)), dt)
            c.put("b", values((n,)), dt)
            c.put("mk", values((m, n)), dt)
            attrs = {"transpose_a": ta, "transpose_b": tb}
            if split:
                attrs["split_k"] = split
            fused_attrs = dict(attrs, activation="relu_grad" if epi == "relu_grad" else
                               "relu" if "relu" in epi else "none")
            extra = ["mk"] if epi == "relu_grad" else ["b"] if "bias" in epi else []
            fused = [{"id": "f", "op": "matmul", "inputs": ["x", "w"] + extra, "attrs": fused_attrs},
                     {"id": "y", "op": "reshape", "inputs": ["f"], "attrs": {"shape": [-1]}}]
            if epi == "relu_grad":
                plain = [{"id": "mm", "op": "matmul", "inputs": ["x", "w"], "attrs": attrs},
                         {"id": "g", "op": "relu_grad", "inputs": ["mm", "mk"]},
                         {"id": "y", "op": "reshape", "inputs": ["g"], "attrs": {"shape": [-1]}}]
            else:
                plain = chain(ta, tb, "bias" in epi, "relu" in epi)
                plain[0]["attrs"] = attrs
            what = "%s M%d K%d N%d ta=%s tb=%s split_k=%d %s" % (dt, m, k, n, ta, tb, split, epi)
            ck.checks += 1
            got, _ = graph(ck, fused, ["y"], False, what + " (fused node)")
            want, _ = graph(ck, plain, ["y"], False, what + " (unfused nodes)")
            if got is None or want is None:
                continue
            if got["y"]["data"] != want["y"]["data"]:
                a = harness.result_array(got["y"]).astype(np.float64)
                b = harness.result_array(want["y"]).astype(np.float64)
                ck.fail("%s: the fused node differs from the unfused nodes (max %g)"
                        % (what, np.max(np.abs(a - b))))


def train_mask(ck):
    """A relu MLP's train.step: relu's gradient fused into the products of
    the backward pass, the same loss and parameters as `fuse: false`, and
    two dispatches fewer per step (one per hidden layer)."""
    c = ck.c
    x = rng.normal(size=(40, 12))
    y = rng.integers(0, 5, size=40)
    init = {"mw1": rng.normal(0, 0.4, size=(12, 24)), "mb1": rng.normal(0, 0.1, size=(24,)),
            "mw2": rng.normal(0, 0.3, size=(24, 16)), "mb2": rng.normal(0, 0.1, size=(16,)),
            "mw3": rng.normal(0, 0.3, size=(16, 5))}
    nodes = [{"id": "h1", "op": "matmul", "inputs": ["mx", "mw1"]},
             {"id": "z1", "op": "add", "inputs": ["h1", "mb1"]},
             {"id": "r1", "op": "relu", "inputs": ["z1"]},
             {"id": "h2", "op": "matmul", "inputs": ["r1", "mw2"]},
             {"id": "z2", "op": "add", "inputs": ["h2", "mb2"]},
             {"id": "r2", "op": "relu", "inputs": ["z2"]},
             {"id": "o", "op": "matmul", "inputs": ["r2", "mw3"]},
             {"id": "L", "op": "cross_entropy", "inputs": ["o", "my"]}]
    got, disp = {}, {}
    for fuse in (True, False):
        ck.checks += 1
        c.put("mx", x, "f32")
        c.put("my", y.astype(np.int32), "i32")
        for n, a in init.items():
            c.put(n, a, "f32")
            for state in (".exp_avg", ".exp_avg_sq"):
                c.call("tensor.delete", {"name": n + state})
        for step in (1, 2, 3):
            err, res = c.call("train.step", {"nodes": nodes, "loss": "L", "params": list(init),
                                             "optimizer": {"type": "adam", "lr": 0.01}, "step": step,
                                             "fuse": fuse, "profile": True})
            if err is not None:
                ck.fail("train.step fuse %s: %s" % (fuse, err))
                return
        got[fuse] = [res["loss"]] + [c.call("tensor.get", {"name": n})[1]["data"] for n in init]
        disp[fuse] = res.get("dispatches")
    if got[True] != got[False]:
        ck.fail("relu MLP train.step: fused and unfused differ (losses %r vs %r)" % (got[True][0], got[False][0]))
    if not np.isfinite(got[True][0]):
        ck.fail("relu MLP train.step: loss %r" % got[True][0])
    print("relu MLP train.step dispatches: fused %s, unfused %s" % (disp[True], disp[False]))
    # A client's own matmul -> relu_grad in the forward: fused before
    # autograd, so grad_matmul's rule for the mask is what differentiates it.
    nodes = [{"id": "h", "op": "matmul", "inputs": ["mx", "gw"]},
             {"id": "g", "op": "relu_grad", "inputs": ["h", "gm"]},
             {"id": "L", "op": "mse", "inputs": ["g", "gt"]}]
    w0, mask, target = rng.normal(0, 0.4, size=(12, 7)), values((40, 7)), rng.normal(size=(40, 7))
    got = {}
    for fuse in (True, False):
        ck.checks += 1
        c.put("gw", w0, "f32")
        c.put("gm", mask, "f32")
        c.put("gt", target, "f32")
        err, res = c.call("train.step", {"nodes": nodes, "loss": "L", "params": ["gw"],
                                         "optimizer": {"type": "sgd", "lr": 0.1}, "fuse": fuse})
        if err is not None:
            ck.fail("masked forward train.step fuse %s: %s" % (fuse, err))
            return
        got[fuse] = (res["loss"], c.call("tensor.get", {"name": "gw"})[1]["data"])
    if got[True] != got[False]:
        ck.fail("masked forward: fused and unfused steps differ (losses %r, %r)" % (got[True][0], got[False][0]))
    if got[True][1] == np.asarray(w0, np.float32).tobytes():
        ck.fail("masked forward: the step did not change the weight")


if __name__ == "__main__":
    t0 = time.time()
    harness.main(lambda ck: (run_op(ck), run_graph(ck), run_fused_op_bits(ck), train_mask(ck), print("epilogue: %.1f s" % (time.time() - t0))))

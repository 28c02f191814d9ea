"""Matmul epilogues (issue 16): matmul with a bias input and activation
"relu" against ref_linalg.matmul_epilogue, and graph.run's rewrite of the
chains matmul -> add(bias) -> relu, matmul -> add(bias), matmul -> relu into
one fused node, for f32 chains: bit for bit the result of the unfused nodes
(`fuse: false` keeps them apart), in every layout (NN, NT, TN), split and
unsplit, at odd sizes, with fewer dispatches (graph.run `profile`); f16 and
bf16 chains stay as written (the same bytes, no dispatch saved); chains
whose intermediate is read elsewhere are left alone. The fused op itself
(bias input, relu) is checked against the reference in every dtype."""
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
                    nodes = chain(ta, tb, bias, relu)
                    ck.checks += 1
                    fused, dfused = graph(ck, nodes, ["y"], True, what)
                    plain, dplain = graph(ck, nodes, ["y"], False, what + " unfused")
                    if fused is None or plain is None:
                        continue
                    if fused["y"]["data"] != plain["y"]["data"]:
                        got = harness.result_array(fused["y"]).astype(np.float64)
                        want = harness.result_array(plain["y"]).astype(np.float64)
                        ck.fail("%s: fused differs from unfused (max %g)" % (what, np.max(np.abs(got - want))))
                    # only f32 chains are rewritten (the f16 ones differed from
                    # the chain in their last bits on an H100)
                    saved = int(bias) + int(relu) if dt == "f32" else 0
                    if dplain - dfused != saved:
                        ck.fail("%s: %d dispatches fused, %d unfused; want %d fewer" % (what, dfused, dplain, saved))
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


if __name__ == "__main__":
    t0 = time.time()
    harness.main(lambda ck: (run_op(ck), run_graph(ck), print("epilogue: %.1f s" % (time.time() - t0))))

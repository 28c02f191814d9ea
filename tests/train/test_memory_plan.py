"""A training step's memory plan (engine/graph_plan.c, docs/performance.md,
"Memory planning"): intermediates share one arena per step, each at an offset
no result alive at the same time overlaps. The same GPT-style model (embedding,
two causal transformer_blocks, layer_norm, head; the fused attention op's
results, its backward's logsumexp rows and gradients among the intermediates) and an MLP with dropout
and batch_norm, and an MLP written as nodes whose products split K (their
partial results: scratch the nodes share in turn under the plan) train on two daemons, one planning (the default) and one with
TENSORD_NO_MEMORY_PLAN=1: the losses and every parameter after train.run
(pipelined, depth 2) and after train.step are equal bit for bit, and the
planned step's peak device memory (`profile`'s `peak_bytes`) is lower; the
same with arenas of at most 64 KiB (TENSORD_PLAN_BIN_BYTES: the results
spread over several, as over a device's largest allocation). A plan
that let two live results share memory would corrupt one of them. The GPT
again under precision "bf16": the products that read one operand share its
rounded copy (engine/graph_casts.c, placed by the plan), so the planned step
records fewer dispatches, with the same bits."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from daemon import Daemon  # noqa: E402

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL", what)


SEQ, VOCAB, DIM, ROWS = 12, 40, 32, 16


def gpt_model():
    blocks = [{"type": "transformer_block", "dim": DIM, "heads": 2, "causal": True} for _ in range(2)]
    return {"name": "gpt", "replace": True, "seed": 3,
            "inputs": [{"name": "x", "dtype": "i32", "shape": [1, SEQ]},
                       {"name": "y", "dtype": "i32", "shape": [1, SEQ]}],
            "layers": [{"type": "embedding", "num_embeddings": VOCAB, "embedding_dim": DIM, "name": "emb"},
                       {"type": "sequential", "name": "blocks", "layers": blocks},
                       {"type": "layer_norm", "normalized_shape": DIM, "name": "ln"},
                       {"type": "linear", "in": DIM, "out": VOCAB, "name": "head"}],
            "loss": {"type": "cross_entropy", "target": "y"},
            "optimizer": {"type": "adam", "lr": 1e-2}}


def gpt16_model():
    return dict(gpt_model(), name="gpt16", precision="bf16")


def mlp_model():
    return {"name": "mlp", "replace": True, "seed": 5,
            "inputs": [{"name": "x", "dtype": "f32", "shape": [2, 24]},
                       {"name": "y", "dtype": "i32", "shape": [2]}],
            "layers": [{"type": "linear", "in": 24, "out": 48}, {"type": "batch_norm", "num_features": 48},
                       {"type": "relu"}, {"type": "dropout", "p": 0.25},
                       {"type": "linear", "in": 48, "out": 48}, {"type": "gelu"},
                       {"type": "linear", "in": 48, "out": 7}],
            "loss": {"type": "cross_entropy", "target": "y"},
            "optimizer": {"type": "adamw", "lr": 1e-2, "weight_decay": 0.01}}


def split_nodes():
    """An MLP as nodes whose products split K (split_k: their partial results
    are scratch, shared by the nodes in turn under the plan)."""
    return [{"id": "h1", "op": "matmul", "inputs": ["xb", "split/sw1"], "attrs": {"split_k": 4}},
            {"id": "a1", "op": "tanh", "inputs": ["h1"]},
            {"id": "h2", "op": "matmul", "inputs": ["a1", "split/sw2"], "attrs": {"split_k": 3}},
            {"id": "a2", "op": "relu", "inputs": ["h2"]},
            {"id": "h3", "op": "matmul", "inputs": ["a2", "split/sw3"], "attrs": {"split_k": 2}},
            {"id": "loss", "op": "cross_entropy", "inputs": ["h3", "yb"]}]


def put(c, name, a):
    dt = {"float32": "f32", "int32": "i32"}[str(a.dtype)]
    c.call("tensor.put", {"name": name, "dtype": dt, "shape": list(a.shape), "data": a.tobytes()})


def params_of(c, prefix):
    """Every tensor under `prefix` (parameters, optimizer state, running
    statistics) as bytes, by name."""
    out = {}
    for t in c.call("tensor.list", {"prefix": prefix})["tensors"]:
        out[t["name"]] = bytes(c.call("tensor.get", {"name": t["name"]})["data"])
    return out


def train(plan, bin_bytes=None):
    """Losses, tensors and peak bytes of both models on a daemon with or
    without the plan (with arenas of at most `bin_bytes`)."""
    if plan:
        os.environ.pop("TENSORD_NO_MEMORY_PLAN", None)
    else:
        os.environ["TENSORD_NO_MEMORY_PLAN"] = "1"
    if bin_bytes:
        os.environ["TENSORD_PLAN_BIN_BYTES"] = str(bin_bytes)
    rng = np.random.default_rng(11)
    res = {}
    try:
        with Daemon() as d:
            c = d.client()
            put(c, "tx", rng.integers(0, VOCAB, (ROWS, SEQ)).astype(np.int32))
            put(c, "ty", rng.integers(0, VOCAB, (ROWS, SEQ)).astype(np.int32))
            put(c, "mx", rng.standard_normal((64, 24)).astype(np.float32))
            put(c, "my", rng.integers(0, 7, 64).astype(np.int32))
            for model, data, batch in ((gpt_model(), {"x": "tx", "y": "ty"}, 4),
                                       (gpt16_model(), {"x": "tx", "y": "ty"}, 4),
                                       (mlp_model(), {"x": "mx", "y": "my"}, 16)):
                name = model["name"]
                c.call("model.define", model)
                err, r = c.call_past_notifications("train.run", {
                    "model": name, "data": data, "batch_size": batch, "steps": 5, "profile": True,
                    "pipeline_depth": 2, "seed": 7})
                check(err is None, "%s: train.run failed: %s" % (name, err))
                if err:
                    continue
                s = c.call("train.step", {"model": name, "data": {k: v for k, v in data.items()},
                                          "profile": True, "seed": 9})
                res[name] = {"run_loss": r["loss"], "step_loss": s["loss"], "run_peak": r["peak_bytes"],
                             "step_peak": s["peak_bytes"], "tensors": params_of(c, name + "/"),
                             "dispatches": r["dispatches"]}
            for k, shape in (("sw1", (24, 64)), ("sw2", (64, 48)), ("sw3", (48, 7))):
                put(c, "split/" + k, (rng.standard_normal(shape) * 0.2).astype(np.float32))
            spec = {"nodes": split_nodes(), "loss": "loss", "params": ["split/sw1", "split/sw2", "split/sw3"],
                    "optimizer": {"type": "adam", "lr": 1e-2}}
            err, r = c.call_past_notifications("train.run", dict(
                spec, data={"xb": "mx", "yb": "my"}, batch_size=16, steps=5, profile=True))
            check(err is None, "split: train.run failed: %s" % err)
            if not err:
                nodes = [{"id": "xb", "op": "slice", "inputs": ["mx"], "attrs": {"starts": [0], "ends": [16]}},
                         {"id": "yb", "op": "slice", "inputs": ["my"], "attrs": {"starts": [0], "ends": [16]}}]
                # an inline output that is a view of an intermediate: read after the graph
                view = [{"id": "h2v", "op": "reshape", "inputs": ["h2"], "attrs": {"shape": [-1]}}]
                s = c.call("train.step", dict(spec, nodes=nodes + spec["nodes"] + view, profile=True,
                                              outputs=["h2v"]))
                res["split_out"] = bytes(s["outputs"]["h2v"]["data"])
                res["split"] = {"run_loss": r["loss"], "step_loss": s["loss"], "run_peak": r["peak_bytes"],
                                "step_peak": s["peak_bytes"], "tensors": params_of(c, "split/"),
                                "out": res.pop("split_out")}
    finally:
        os.environ.pop("TENSORD_NO_MEMORY_PLAN", None)
        os.environ.pop("TENSORD_PLAN_BIN_BYTES", None)
    return res


def main():
    planned, plain, binned = train(True), train(False), train(True, 64 << 10)
    a, b = planned.get("gpt16"), plain.get("gpt16")
    if a and b:
        print("gpt16: %d dispatches in 5 steps with the shared copies, %d without" % (
            a["dispatches"], b["dispatches"]))
        check(a["dispatches"] < b["dispatches"] * 0.95,
              "gpt16: the products did not share their rounded operands (%d vs %d dispatches)" % (
                  a["dispatches"], b["dispatches"]))
    for name, a, b in [(n, planned.get(n), plain.get(n)) for n in ("gpt", "gpt16", "mlp", "split")] + \
                      [("gpt in 64 KiB arenas", binned.get("gpt"), plain.get("gpt")),
                       ("gpt16 in 64 KiB arenas", binned.get("gpt16"), plain.get("gpt16"))]:
        if not a or not b:
            check(False, "%s: trained on both daemons" % name)
            continue
        print("%s: loss %.6f / %.6f, train.run peak %d / %d bytes, train.step peak %d / %d (planned / not)" % (
            name, a["run_loss"], b["run_loss"], a["run_peak"], b["run_peak"], a["step_peak"], b["step_peak"]))
        check(a["run_loss"] == b["run_loss"] and a["step_loss"] == b["step_loss"],
              "%s: the losses differ with the plan (%r %r vs %r %r)" % (
                  name, a["run_loss"], a["step_loss"], b["run_loss"], b["step_loss"]))
        check(sorted(a["tensors"]) == sorted(b["tensors"]) and len(a["tensors"]) > 3,
              "%s: the same tensors on both (%d, %d)" % (name, len(a["tensors"]), len(b["tensors"])))
        check(a.get("out") == b.get("out"), "%s: the inline output (a view) differs with the plan" % name)
        for t in sorted(a["tensors"]):
            check(a["tensors"][t] == b["tensors"].get(t), "%s: %s differs with the plan" % (name, t))
        # train.run's peak depends on how many steps were in flight when one
        # was recorded (timing: under ASan it varied either way); a single
        # train.step's does not.
        check(0 < a["step_peak"] <= b["step_peak"] and a["run_peak"] > 0 and
              (a["step_peak"] < b["step_peak"] or name == "split"),
              "%s: the plan lowers the peak (%d < %d, %d < %d)" % (
                  name, a["step_peak"], b["step_peak"], a["run_peak"], b["run_peak"]))
    if failures:
        print("%d failure(s)" % len(failures))
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()

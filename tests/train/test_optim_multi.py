#!/usr/bin/python3
"""The multi-tensor optimizer (issue 16, docs/training.md "The optimizer
update"): a training step records every parameter's update as one dispatch
(one per dtype). Its results must be bit-identical to the per-parameter path
(one dispatch per optimizer op), which TENSORD_OPTIM_MULTI=0 in the daemon's
environment forces.

Two daemons, one per path, train the same two-layer MLP with each optimizer
configuration below (SGD with momentum, dampening, Nesterov and weight
decay; Adam with L2; AdamW; param groups; the schedules; clip_norm; f16,
bf16 and mixed-dtype parameters) for a few train.step calls; after each
step the loss, every parameter and every optimizer state tensor must be the
same bytes on both. With `profile: true` the fused daemon must report the
per-parameter path's dispatches less the optimizer's (one per optimizer
node) plus one per parameter dtype. A model of 130 parameters (SGD with
momentum: 260 updates, past one dispatch's table of 256) needs two; daemons
with 4 KiB memory blocks (each larger tensor in a block of its own, more
than a dispatch's 7 windows) more than one per dtype. (Its values against an independent
NumPy reference: test_optim_steps.py, which runs on the fused path.)

Run with /usr/bin/python3; $TENSORD_BIN names the daemon."""
import os
import sys
import tempfile

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "ops"))

import numpy as np  # noqa: E402

import harness  # noqa: E402

STEPS = 4
N, D, H, C = 16, 12, 300, 5

# (label, {param: dtype}, optimizer); params w1 [D, H], b1 [H], w2 [H, C], b2 [C].
F32 = {"w1": "f32", "b1": "f32", "w2": "f32", "b2": "f32"}
F16 = {k: "f16" for k in F32}
BF16 = {k: "bf16" for k in F32}
MIXED = {"w1": "f32", "b1": "f32", "w2": "f16", "b2": "f16"}
CONFIGS = [
    ("sgd", F32, {"type": "sgd", "lr": 0.1}),
    ("sgd momentum dampening wd", F32, {"type": "sgd", "lr": 0.1, "momentum": 0.9, "dampening": 0.2,
                                        "weight_decay": 0.01}),
    ("sgd nesterov", F32, {"type": "sgd", "lr": 0.05, "momentum": 0.8, "nesterov": True, "weight_decay": 0.1}),
    ("adam", F32, {"type": "adam", "lr": 0.01}),
    ("adam l2 betas", F32, {"type": "adam", "lr": 0.02, "beta1": 0.3, "beta2": 0.95, "weight_decay": 0.1,
                            "eps": 1e-6}),
    ("adamw cosine clip", F32, {"type": "adamw", "lr": 0.05, "weight_decay": 0.2, "schedule": "cosine",
                                "warmup": 1, "total": 6, "min_lr": 0.001, "clip_norm": 0.5}),
    ("sgd groups step schedule", F32, {
        "type": "sgd", "lr": 0.2, "momentum": 0.5, "schedule": "step", "step_size": 2, "gamma": 0.5,
        "groups": [{"params": ["w1"], "lr": 0.05, "momentum": 0.9, "nesterov": True},
                   {"params": ["b2"], "momentum": 0, "weight_decay": 0.3}]}),
    ("adam groups", F32, {
        "type": "adam", "lr": 0.01, "clip_norm": 1.0,
        "groups": [{"params": ["w2", "b2"], "lr": 0.03, "beta1": 0.7, "weight_decay": 0.05}]}),
    ("adam f16", F16, {"type": "adam", "lr": 0.01, "eps": 1e-4}),
    ("sgd momentum bf16", BF16, {"type": "sgd", "lr": 0.1, "momentum": 0.9}),
    ("adamw mixed dtypes", MIXED, {"type": "adamw", "lr": 0.01, "eps": 1e-4}),
    ("sgd mixed dtypes", MIXED, {"type": "sgd", "lr": 0.1, "momentum": 0.9, "weight_decay": 0.01}),
]


def nodes_for(pre, dts):
    """x -> linear(w1, b1) -> relu -> [cast] -> linear(w2, b2) -> [cast] -> mse."""
    n = [{"id": "m1", "op": "matmul", "inputs": [pre + "x", pre + "w1"]},
         {"id": "a1", "op": "add", "inputs": ["m1", pre + "b1"]},
         {"id": "h", "op": "relu", "inputs": ["a1"]}]
    h = "h"
    if dts["w2"] != dts["w1"]:
        n.append({"id": "hc", "op": "cast", "inputs": ["h"], "attrs": {"dtype": dts["w2"]}})
        h = "hc"
    n += [{"id": "m2", "op": "matmul", "inputs": [h, pre + "w2"]},
          {"id": "z", "op": "add", "inputs": ["m2", pre + "b2"]}]
    z = "z"
    if dts["w2"] != dts["w1"]:
        n.append({"id": "zc", "op": "cast", "inputs": ["z"], "attrs": {"dtype": dts["w1"]}})
        z = "zc"
    n.append({"id": "loss", "op": "mse", "inputs": [z, pre + "y"]})
    return n


def optimizer_nodes(opt, names):
    """Optimizer ops per step on the per-parameter path: sgd_param (+ sgd_buf
    with momentum), or adam_m, adam_v, adam_param."""
    total = 0
    for name in names:
        o = dict(opt)
        for g in opt.get("groups", []):
            if name in g["params"]:
                o.update(g)
        total += 3 if o["type"] != "sgd" else (2 if o.get("momentum", 0) > 0 else 1)
    return total


def mlp(pre, dts):
    """The MLP's parameters {name: (shape, dtype)}, its nodes and x's dtype."""
    shapes = {"w1": (D, H), "b1": (H,), "w2": (H, C), "b2": (C,)}
    return {pre + k: (s, dts[k]) for k, s in shapes.items()}, nodes_for(pre, dts), dts["w1"]


def many(pre, n):
    """x @ w + b1 + ... + b<n-1>: n parameters (past one dispatch's segments)."""
    params = {pre + "w": ((D, C), "f32")}
    nodes = [{"id": "z0", "op": "matmul", "inputs": [pre + "x", pre + "w"]}]
    for k in range(1, n):
        params[pre + "b%d" % k] = ((C,), "f32")
        nodes.append({"id": "z%d" % k, "op": "add", "inputs": ["z%d" % (k - 1), pre + "b%d" % k]})
    nodes.append({"id": "loss", "op": "mse", "inputs": ["z%d" % (n - 1), pre + "y"]})
    return params, nodes, "f32"


class Pair:
    """Two daemons: c[0] on the multi-tensor path, c[1] on the per-parameter one."""

    def __init__(self, ck, fused, plain):
        self.ck = ck
        self.c = (fused, plain)

    def raw(self, k, name):
        err, res = self.c[k].call("tensor.get", {"name": name})
        return None if err else res["data"]

    def config(self, label, model, opt, rng, opt_dispatches=None):
        """Train `model` (params, nodes, x dtype) on both; `opt_dispatches`:
        the fused path's optimizer dispatches per step (None: more than one
        per dtype after step 1, the memory windows splitting them)."""
        params, nodes, xdt = model
        x, y = rng.normal(0, 1, size=(N, D)), rng.normal(0, 1, size=(N, C))
        vals = {k: rng.uniform(-0.3, 0.3, size=s) for k, (s, _) in params.items()}
        pre = label + "/"
        for c in self.c:
            c.put(pre + "x", x, xdt)
            c.put(pre + "y", y, xdt)
            for k, v in vals.items():
                c.put(k, v, params[k][1])
        opt = dict(opt)
        if "groups" in opt:
            opt["groups"] = [dict(g, params=[pre + p for p in g["params"]]) for g in opt["groups"]]
        req = {"nodes": nodes, "loss": "loss", "params": list(params), "optimizer": opt, "profile": True}
        state = [".momentum_buffer"] if opt["type"] == "sgd" else [".exp_avg", ".exp_avg_sq"]
        ndt = len({dt for _, dt in params.values()})
        for step in range(1, STEPS + 1):
            res = []
            for c in self.c:
                err, r = c.call("train.step", req)
                if err is not None:
                    self.ck.fail("%s step %d: %s" % (label, step, err))
                    return
                res.append(r)
            self.ck.checks += 2
            if res[0]["loss"] != res[1]["loss"]:
                self.ck.fail("%s step %d: loss %r fused, %r per parameter" % (
                    label, step, res[0]["loss"], res[1]["loss"]))
            got = res[0]["dispatches"] - (res[1]["dispatches"] - optimizer_nodes(opt, list(params)))
            # (On step 1 SGD has no momentum buffer to read yet: fewer tensors.)
            if got != opt_dispatches if opt_dispatches is not None else (got <= ndt and step > 1):
                self.ck.fail("%s step %d: %d dispatches fused, %d per parameter: %d for the optimizer, "
                             "want %s" % (label, step, res[0]["dispatches"], res[1]["dispatches"], got,
                                          opt_dispatches if opt_dispatches is not None else "> %d" % ndt))
            for p in params:
                for suffix in [""] + state:
                    a, b = self.raw(0, p + suffix), self.raw(1, p + suffix)
                    self.ck.checks += 1
                    if a != b or (a is None and not suffix):
                        self.ck.fail("%s step %d: %s%s differs (%s, %s)" % (
                            label, step, p, suffix, "missing" if a is None else "bytes",
                            "missing" if b is None else "bytes"))


def plain_daemon(config=None):
    """A daemon on the per-parameter path (TENSORD_OPTIM_MULTI=0), with the
    config lines `config` when given."""
    os.environ["TENSORD_OPTIM_MULTI"] = "0"
    if config:
        os.environ["TENSORD_CONFIG"] = config
    try:
        return harness.Daemon().start()
    finally:
        del os.environ["TENSORD_OPTIM_MULTI"]
        os.environ.pop("TENSORD_CONFIG", None)


def run(ck):
    rng = np.random.default_rng(16)
    with plain_daemon() as plain_d:
        pair = Pair(ck, ck.c, harness.Client(plain_d.sock))
        for label, dts, opt in CONFIGS:
            label = "mt/" + label.replace(" ", "_")
            # f32 parameters share one dispatch; f16/bf16 ones keep one per
            # optimizer node (they differed in their last bits on an H100)
            halves = [label + "/" + k for k, dt in dts.items() if dt != "f32"]
            want = (1 if "f32" in dts.values() else 0) + (optimizer_nodes(opt, halves) if halves else 0)
            pair.config(label, mlp(label + "/", dts), opt, rng, want)
        # 130 parameters: SGD with momentum has 260 updates, more than one
        # dispatch's table holds (256); Adam's 130 fit.
        pair.config("mt/many_sgd", many("mt/many_sgd/", 130), {"type": "sgd", "lr": 0.05, "momentum": 0.9},
                    rng, 2)
        pair.config("mt/many_adam", many("mt/many_adam/", 130), {"type": "adam", "lr": 0.01}, rng, 1)
    # Blocks of 4 KiB: each larger tensor has a memory block of its own, and
    # an update's tensors fill a dispatch's OPTM_SLOTS windows.
    conf = os.path.join(tempfile.mkdtemp(prefix="tensord-mt-"), "blocks.conf")
    with open(conf, "w") as f:
        f.write("block_size = 4096\n")
    os.environ["TENSORD_CONFIG"] = conf
    with harness.Daemon() as fused_d:
        del os.environ["TENSORD_CONFIG"]
        with plain_daemon(conf) as plain_d:
            pair = Pair(ck, harness.Client(fused_d.sock), harness.Client(plain_d.sock))
            pair.config("mt/blocks_adam", mlp("mt/blocks_adam/", F32), {"type": "adam", "lr": 0.01}, rng)
            pair.config("mt/blocks_sgd_mixed", mlp("mt/blocks_sgd_mixed/", MIXED),
                        {"type": "sgd", "lr": 0.1, "momentum": 0.9}, rng)


if __name__ == "__main__":
    os.environ.setdefault("TENSORD_BIN", os.path.join(HERE, "..", "..", "build", "daemon", "tensord"))
    os.environ.pop("TENSORD_OPTIM_MULTI", None)
    harness.main(run)

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
node) plus one per parameter dtype. (Its values against an independent
NumPy reference: test_optim_steps.py, which runs on the fused path.)

Run with /usr/bin/python3; $TENSORD_BIN names the daemon."""
import os
import sys

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


class Pair:
    def __init__(self, ck, fused, plain):
        self.ck = ck
        self.c = (fused, plain)

    def put_all(self, pre, dts, rng):
        x = rng.normal(0, 1, size=(N, D))
        y = rng.normal(0, 1, size=(N, C))
        shapes = {"w1": (D, H), "b1": (H,), "w2": (H, C), "b2": (C,)}
        vals = {k: rng.uniform(-0.3, 0.3, size=s) for k, s in shapes.items()}
        for c in self.c:
            c.put(pre + "x", x, dts["w1"])
            c.put(pre + "y", y, dts["w1"])
            for k, v in vals.items():
                c.put(pre + k, v, dts[k])

    def raw(self, k, name):
        err, res = self.c[k].call("tensor.get", {"name": name})
        return None if err else res["data"]

    def config(self, label, dts, opt, rng):
        pre = "mt/%s/" % label.replace(" ", "_")
        self.put_all(pre, dts, rng)
        opt = dict(opt)
        if "groups" in opt:
            opt["groups"] = [dict(g, params=[pre + p for p in g["params"]]) for g in opt["groups"]]
        params = [pre + k for k in ("w1", "b1", "w2", "b2")]
        req = {"nodes": nodes_for(pre, dts), "loss": "loss", "params": params, "optimizer": opt,
               "profile": True}
        state = [".momentum_buffer"] if opt["type"] == "sgd" else [".exp_avg", ".exp_avg_sq"]
        for step in range(1, STEPS + 1):
            res = []
            for c in self.c:
                err, r = c.call("train.step", req)
                if err is not None:
                    self.ck.fail("%s step %d: %s" % (label, step, err))
                    return
                res.append(r)
            self.ck.checks += 1
            if res[0]["loss"] != res[1]["loss"]:
                self.ck.fail("%s step %d: loss %r fused, %r per parameter" % (
                    label, step, res[0]["loss"], res[1]["loss"]))
            want = res[1]["dispatches"] - optimizer_nodes(opt, params) + \
                len(set(dts.values()))
            self.ck.checks += 1
            if res[0]["dispatches"] != want:
                self.ck.fail("%s step %d: %d dispatches fused, %d per parameter; want %d" % (
                    label, step, res[0]["dispatches"], res[1]["dispatches"], want))
            for p in params:
                for suffix in [""] + state:
                    a, b = self.raw(0, p + suffix), self.raw(1, p + suffix)
                    self.ck.checks += 1
                    if a != b:
                        self.ck.fail("%s step %d: %s%s differs (%s, %s)" % (
                            label, step, p, suffix, "missing" if a is None else "bytes",
                            "missing" if b is None else "bytes"))


def run(ck):
    rng = np.random.default_rng(16)
    os.environ["TENSORD_OPTIM_MULTI"] = "0"
    with harness.Daemon() as plain_d:
        del os.environ["TENSORD_OPTIM_MULTI"]
        plain = harness.Client(plain_d.sock)
        pair = Pair(ck, ck.c, plain)
        for label, dts, opt in CONFIGS:
            pair.config(label, dts, opt, rng)


if __name__ == "__main__":
    os.environ.setdefault("TENSORD_BIN", os.path.join(HERE, "..", "..", "build", "daemon", "tensord"))
    os.environ.pop("TENSORD_OPTIM_MULTI", None)
    harness.main(run)

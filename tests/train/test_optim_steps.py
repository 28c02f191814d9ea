#!/usr/bin/python3
"""Training steps of train.step against a CPU reference (docs/training.md).

A tiny model (linear layer + cross_entropy, or linear + mse) is trained five
steps with each optimizer configuration below. After every step the
parameters and the optimizer state the daemon holds are compared with
tests/ops/ref_optim.py's sgd_step / adam_step applied, in float64, to the
state the daemon held before the step and to gradients computed in float64
NumPy (with the global-norm clipping and the learning-rate schedule of
docs/training.md): f32 tolerance, 1e-5 relative. The whole five-step float64
trajectory, which never touches the GPU, is checked too (looser: errors
compound).

Then: bit-for-bit reproducibility, NaN/Inf losses (FAILED_PRECONDITION,
nothing changes) and the errors of train.step.

Run with /usr/bin/python3; $TENSORD_BIN names the daemon."""
import math
import os
import sys

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "ops"))

import numpy as np  # noqa: E402

import harness  # noqa: E402
import ref_optim as ref  # noqa: E402

STEPS = 5
N, D, C = 16, 5, 3
RTOL = 1e-5

CONFIGS = [
    ("sgd", "ce", {"type": "sgd", "lr": 0.5}),
    ("sgd momentum dampening", "ce", {"type": "sgd", "lr": 0.3, "momentum": 0.9, "dampening": 0.3}),
    ("sgd nesterov", "mse", {"type": "sgd", "lr": 0.05, "momentum": 0.8, "nesterov": True}),
    ("sgd weight decay", "mse", {"type": "sgd", "lr": 0.05, "weight_decay": 0.1}),
    ("sgd momentum weight decay", "ce", {"type": "sgd", "lr": 0.2, "momentum": 0.5, "weight_decay": 0.05}),
    ("adam", "ce", {"type": "adam", "lr": 0.05}),
    ("adam defaults", "ce", {"type": "adam"}),
    ("adam l2", "mse", {"type": "adam", "lr": 0.02, "beta1": 0.8, "beta2": 0.95, "weight_decay": 0.1}),
    ("adamw", "ce", {"type": "adamw", "lr": 0.05, "weight_decay": 0.2}),
    ("adamw defaults", "mse", {"type": "adamw", "lr": 0.01}),
    ("step schedule", "ce", {"type": "sgd", "lr": 0.5, "schedule": "step", "step_size": 2, "gamma": 0.5}),
    ("cosine warmup", "ce", {"type": "adam", "lr": 0.05, "schedule": "cosine", "warmup": 2, "total": 5,
                             "min_lr": 0.001}),
    ("cosine", "mse", {"type": "sgd", "lr": 0.05, "momentum": 0.9, "schedule": "cosine", "total": 8}),
    ("clip_norm sgd", "ce", {"type": "sgd", "lr": 0.5, "clip_norm": 0.1}),
    ("clip_norm adam", "mse", {"type": "adam", "lr": 0.05, "clip_norm": 0.5}),
    ("warmup constant", "ce", {"type": "sgd", "lr": 0.5, "warmup": 3}),
]

# Ops without a backward rule (op, number of inputs, each the parameter), for
# the "not differentiable" error.
NO_RULE_CANDIDATES = (("adam_m", 2), ("adam_v", 2))

DEFAULTS = {"sgd": {"lr": 0.01}, "adam": {"lr": 0.001, "weight_decay": 0.0},
            "adamw": {"lr": 0.001, "weight_decay": 0.01}}


def lr_at(opt, step):
    """docs/training.md, "Schedules": linear warmup, then constant, step or cosine."""
    lr = opt.get("lr", DEFAULTS[opt["type"]]["lr"])
    warmup = opt.get("warmup", 0)
    sched = opt.get("schedule", "constant")
    if warmup > 0 and step <= warmup:
        return lr * step / warmup
    if sched == "step":
        return lr * opt.get("gamma", 0.1) ** ((step - 1) // opt.get("step_size", 1))
    if sched == "cosine":
        t = min(1.0, (step - warmup) / (opt["total"] - warmup))
        lo = opt.get("min_lr", 0.0)
        return lo + (lr - lo) * 0.5 * (1 + math.cos(math.pi * t))
    return lr


def model_loss_grads(kind, x, y, w, b):
    """Loss and float64 gradients of the linear model."""
    z = x @ w + b
    if kind == "ce":
        m = z.max(axis=1, keepdims=True)
        lse = m[:, 0] + np.log(np.exp(z - m).sum(axis=1))
        loss = (lse - z[np.arange(N), y]).mean()
        p = np.exp(z - lse[:, None])
        p[np.arange(N), y] -= 1
        dz = p / N
    else:
        loss = ((z - y) ** 2).mean()
        dz = 2 * (z - y) / z.size
    return loss, x.T @ dz, dz.sum(axis=0)


def nodes_for(kind, pre):
    loss_op = "cross_entropy" if kind == "ce" else "mse"
    return [{"id": "z0", "op": "matmul", "inputs": [pre + "x", pre + "w"]},
            {"id": "z", "op": "add", "inputs": ["z0", pre + "b"]},
            {"id": "loss", "op": loss_op, "inputs": ["z", pre + "y"]}]


def ref_update(opt, params, grads, state, step):
    """One reference step of every parameter: clip, schedule, optimizer.
    `state[name]` holds buf / (m, v) from the daemon (None on step 1)."""
    lr = lr_at(opt, step)
    clip = opt.get("clip_norm", 0)
    if clip > 0:
        norm = math.sqrt(sum(float((g * g).sum()) for g in grads.values()))
        coef = min(1.0, clip / (norm + 1e-6))
        grads = {k: g * coef for k, g in grads.items()}
    out, new_state = {}, {}
    t = opt["type"]
    for name, w in params.items():
        g = grads[name]
        if t == "sgd":
            w2, buf = ref.sgd_step(w, g, state.get(name), lr=lr, momentum=opt.get("momentum", 0.0),
                                   dampening=opt.get("dampening", 0.0),
                                   weight_decay=opt.get("weight_decay", 0.0),
                                   nesterov=opt.get("nesterov", False))
            new_state[name] = buf
        else:
            m, v = state.get(name) or (np.zeros_like(w), np.zeros_like(w))
            w2, m, v = ref.adam_step(w, g, m, v, step, lr=lr, beta1=opt.get("beta1", 0.9),
                                     beta2=opt.get("beta2", 0.999), eps=opt.get("eps", 1e-8),
                                     weight_decay=opt.get("weight_decay", DEFAULTS[t]["weight_decay"]),
                                     decoupled=(t == "adamw"))
            new_state[name] = (m, v)
        out[name] = w2
    return out, new_state, lr


class Steps:
    def __init__(self, ck):
        self.ck = ck
        self.c = ck.c
        self.rng = np.random.default_rng(20240613)

    def get(self, name):
        err, res = self.c.call("tensor.get", {"name": name})
        if err is not None:
            return None
        return harness.result_array(res).astype(np.float64)

    def raw(self, name):
        err, res = self.c.call("tensor.get", {"name": name})
        return None if err else (res["data"], res["version"])

    def setup(self, pre, kind):
        x = self.rng.normal(0, 1, size=(N, D))
        w = self.rng.uniform(-0.5, 0.5, size=(D, C))
        b = self.rng.uniform(-0.1, 0.1, size=(C,))
        self.c.put(pre + "x", x, "f32")
        self.c.put(pre + "w", w, "f32")
        self.c.put(pre + "b", b, "f32")
        if kind == "ce":
            y = self.rng.integers(0, C, size=N)
            self.c.put(pre + "y", y.astype(np.int32), "i32")
        else:
            y = self.rng.normal(0, 1, size=(N, C))
            self.c.put(pre + "y", y, "f32")
            y = harness.quantize(y, "f32")
        return harness.quantize(x, "f32"), y, harness.quantize(w, "f32"), harness.quantize(b, "f32")

    def close(self, got, want, what, rtol=RTOL):
        self.ck.checks += 1
        if got is None:
            self.ck.fail("%s: missing" % what)
            return False
        scale = float(np.abs(want).max(initial=0.0))
        bad = np.abs(got - want) > rtol * np.abs(want) + rtol * max(scale, 1e-3)
        if bad.any():
            i = tuple(np.argwhere(bad)[0])
            self.ck.fail("%s: %d of %d differ; first at %s: got %r want %r" % (
                what, int(bad.sum()), bad.size, i, got[i], want[i]))
            return False
        return True

    def config(self, label, kind, opt):
        pre = "o/%s/" % label.replace(" ", "_")
        x, y, w, b = self.setup(pre, kind)
        names = {"w": pre + "w", "b": pre + "b"}
        traj = {"w": w.copy(), "b": b.copy()}          # float64 all the way
        traj_state = {}
        state = {}
        is_sgd = opt["type"] == "sgd"
        clipped = False
        for step in range(1, STEPS + 1):
            cur = {k: self.get(n) for k, n in names.items()}
            loss, gw, gb = model_loss_grads(kind, x, y, cur["w"], cur["b"])
            grads = {"w": gw, "b": gb}
            if opt.get("clip_norm") and math.sqrt((gw ** 2).sum() + (gb ** 2).sum()) > opt["clip_norm"]:
                clipped = True
            want, state_next, lr = ref_update(opt, cur, grads, state, step)
            err, res = self.c.call("train.step", {"nodes": nodes_for(kind, pre), "loss": "loss",
                                                  "params": [names["w"], names["b"]],
                                                  "optimizer": opt, "step": step})
            what = "%s step %d" % (label, step)
            self.ck.checks += 1
            if err is not None:
                self.ck.fail("%s: %s" % (what, err))
                return
            if not np.isclose(res["loss"], loss, rtol=1e-5, atol=1e-6):
                self.ck.fail("%s: loss %r, want %r" % (what, res["loss"], loss))
            if res["step"] != step or not np.isclose(res["lr"], lr, rtol=1e-12, atol=0):
                self.ck.fail("%s: step %r lr %r, want %d %r" % (what, res["step"], res["lr"], step, lr))
            for k, n in names.items():
                self.close(self.get(n), want[k], "%s: %s" % (what, k))
                if is_sgd:
                    buf = state_next[k]
                    got = self.get(n + ".momentum_buffer")
                    if buf is None:
                        self.ck.checks += 1
                        if got is not None:
                            self.ck.fail("%s: a momentum buffer without momentum" % what)
                    else:
                        self.close(got, buf, "%s: %s.momentum_buffer" % (what, k))
                    state[k] = got
                else:
                    self.close(self.get(n + ".exp_avg"), state_next[k][0], "%s: %s.exp_avg" % (what, k))
                    self.close(self.get(n + ".exp_avg_sq"), state_next[k][1], "%s: %s.exp_avg_sq" % (what, k))
                    state[k] = (self.get(n + ".exp_avg"), self.get(n + ".exp_avg_sq"))
            # the float64 trajectory
            _, tgw, tgb = model_loss_grads(kind, x, y, traj["w"], traj["b"])
            traj, traj_state, _ = ref_update(opt, traj, {"w": tgw, "b": tgb}, traj_state, step)
        for k, n in names.items():
            self.close(self.get(n), traj[k], "%s: %s after %d steps vs the float64 trajectory" % (label, k, STEPS),
                       rtol=2e-4)
        if opt.get("clip_norm") and not clipped:
            self.ck.fail("%s: the clip norm never took effect; the test needs a smaller one" % label)

    def reproducible(self):
        """The same initial tensors give the same parameter bytes after 5 steps."""
        opt = {"type": "adam", "lr": 0.05, "clip_norm": 0.5, "weight_decay": 0.01}
        results = []
        init = None
        for run in range(2):
            pre = "r%d/" % run
            if init is None:
                self.setup(pre, "ce")
                init = {k: self.raw(pre + k) for k in ("x", "w", "b", "y")}
            else:
                for k, (data, _) in init.items():
                    meta = self.c.call("tensor.stat", {"name": "r0/" + k})[1]
                    self.c.call("tensor.put", {"name": pre + k, "dtype": meta["dtype"],
                                               "shape": meta["shape"], "data": data})
            losses = []
            for step in range(1, STEPS + 1):
                err, res = self.c.call("train.step", {"nodes": nodes_for("ce", pre), "loss": "loss",
                                                      "params": [pre + "w", pre + "b"], "optimizer": opt,
                                                      "step": step})
                if err is not None:
                    self.ck.fail("reproducibility run %d step %d: %s" % (run, step, err))
                    return
                losses.append(res["loss"])
            results.append(([self.raw(pre + k)[0] for k in ("w", "b", "w.exp_avg", "w.exp_avg_sq")], losses))
        self.ck.checks += 1
        if results[0] != results[1]:
            self.ck.fail("reproducibility: two runs from the same tensors differ")

    def nonfinite(self):
        """A NaN or Inf loss fails with FAILED_PRECONDITION and changes nothing."""
        pre = "n/"
        self.setup(pre, "ce")
        self.c.put(pre + "neg", -np.ones((N, C)), "f32")
        opt = {"type": "adam", "lr": 0.05}
        good = nodes_for("ce", pre)
        err, _ = self.c.call("train.step", {"nodes": good, "loss": "loss", "params": [pre + "w", pre + "b"],
                                            "optimizer": opt, "step": 1})
        self.ck.checks += 1
        if err is not None:
            self.ck.fail("nonfinite: the good first step failed: %s" % err)
            return
        watched = [pre + s for s in ("w", "b", "w.exp_avg", "w.exp_avg_sq", "b.exp_avg", "b.exp_avg_sq")]
        bad_graphs = {
            "log of a negative (NaN)": [
                good[0], good[1],
                {"id": "n", "op": "mul", "inputs": ["z", pre + "neg"]},
                {"id": "a", "op": "abs", "inputs": ["n"]},
                {"id": "m", "op": "add", "inputs": ["a"], "attrs": {"scalar": 1.0}},
                {"id": "ng", "op": "neg", "inputs": ["m"]},
                {"id": "lg", "op": "log", "inputs": ["ng"]},
                {"id": "loss", "op": "mean", "inputs": ["lg"]}],
            "exp overflow (Inf)": [
                good[0], good[1],
                {"id": "big", "op": "mul", "inputs": ["z"], "attrs": {"scalar": 1e4}},
                {"id": "sq", "op": "mul", "inputs": ["big", "big"]},
                {"id": "e", "op": "exp", "inputs": ["sq"]},
                {"id": "loss", "op": "sum", "inputs": ["e"]}],
        }
        for label, nodes in bad_graphs.items():
            for grads in (False, True):
                before = {n: self.raw(n) for n in watched}
                err, _ = self.c.call("train.step", {"nodes": nodes, "loss": "loss",
                                                    "params": [pre + "w", pre + "b"], "optimizer": opt,
                                                    "step": 2, "grads": grads})
                self.ck.checks += 1
                if err is None or err["name"] != "FAILED_PRECONDITION":
                    self.ck.fail("nonfinite %s: expected FAILED_PRECONDITION, got %r" % (label, err))
                after = {n: self.raw(n) for n in watched}
                self.ck.checks += 1
                if before != after:
                    self.ck.fail("nonfinite %s: a parameter or state tensor changed" % label)
                self.ck.checks += 1
                if grads and self.raw(pre + "w.grad") is not None:
                    self.ck.fail("nonfinite %s: a gradient was stored" % label)
        # a first step that fails creates no state
        pre2 = "n2/"
        self.setup(pre2, "ce")
        self.c.put(pre2 + "neg", -np.ones((N, C)), "f32")
        nodes = [dict(nd, inputs=[i.replace(pre, pre2) for i in nd["inputs"]])
                 for nd in bad_graphs["log of a negative (NaN)"]]
        err, _ = self.c.call("train.step", {"nodes": nodes, "loss": "loss", "params": [pre2 + "w", pre2 + "b"],
                                            "optimizer": opt, "step": 1})
        self.ck.checks += 1
        names = {t["name"] for t in self.c.call("tensor.list", {"prefix": pre2})[1]["tensors"]}
        if err is None or err["name"] != "FAILED_PRECONDITION" or names != {pre2 + s for s in
                                                                             ("x", "w", "b", "y", "neg")}:
            self.ck.fail("nonfinite first step: %r, tensors %s" % (err, sorted(names)))

    def errors(self):
        pre = "e/"
        self.setup(pre, "ce")
        c = self.c
        c.put(pre + "wi", np.ones((D, C)), "i32")
        c.put(pre + "img", self.rng.normal(size=(1, 1, 4, 4)), "f32")
        c.put(pre + "k", self.rng.normal(size=(1, 1, 3, 3)), "f32")
        c.put(pre + "unused", np.ones((3,)), "f32")
        good = nodes_for("ce", pre)
        sgd = {"type": "sgd", "lr": 0.1, "momentum": 0.9}
        cases = [
            ("an i32 parameter", {"nodes": [{"id": "z0", "op": "matmul", "inputs": [pre + "x", pre + "w"]},
                                            {"id": "s", "op": "sum", "inputs": [pre + "wi"]},
                                            {"id": "sf", "op": "cast", "inputs": ["s"], "attrs": {"dtype": "f32"}},
                                            {"id": "zs", "op": "sum", "inputs": ["z0"]},
                                            {"id": "loss", "op": "add", "inputs": ["zs", "sf"]}],
                                  "params": [pre + "w", pre + "wi"]}, "DTYPE_MISMATCH", pre + "wi"),
            ("a loss that is not a scalar", {"nodes": good[:2], "loss": "z"}, "INVALID_ARGUMENT", "scalar"),
            ("an unknown loss id", {"nodes": good, "loss": "nope"}, "INVALID_ARGUMENT", "loss"),
            ("an i32 loss", {"nodes": good[:1] + [{"id": "am", "op": "argmax", "inputs": ["z0"]},
                                                  {"id": "loss", "op": "sum", "inputs": ["am"]}]},
             "INVALID_ARGUMENT", "scalar"),
            ("a parameter that does not affect the loss", {"params": [pre + "w", pre + "b", pre + "unused"]},
             "INVALID_ARGUMENT", pre + "unused"),
            ("a loss that depends on no parameter", {"params": [pre + "unused"]}, "INVALID_ARGUMENT", "parameter"),
            ("a parameter that is not stored", {"params": [pre + "w", pre + "missing"]}, "NOT_FOUND", "missing"),
            ("a parameter listed twice", {"params": [pre + "w", pre + "w"]}, "INVALID_ARGUMENT", "twice"),
            ("no parameters", {"params": []}, "INVALID_ARGUMENT", "params"),
            ("step 0", {"step": 0}, "INVALID_ARGUMENT", "step"),
            ("an unknown optimizer", {"optimizer": {"type": "rmsprop"}}, "INVALID_ARGUMENT", "optimizer"),
            ("an unknown optimizer key", {"optimizer": {"type": "sgd", "lr": 0.1, "bogus": 1}},
             "INVALID_ARGUMENT", "optimizer"),
            ("a negative lr", {"optimizer": {"type": "sgd", "lr": -0.1}}, "INVALID_ARGUMENT", "optimizer"),
            ("nesterov without momentum", {"optimizer": {"type": "sgd", "lr": 0.1, "nesterov": True}},
             "INVALID_ARGUMENT", "nesterov"),
            ("cosine without total", {"optimizer": {"type": "sgd", "lr": 0.1, "schedule": "cosine"}},
             "INVALID_ARGUMENT", "cosine"),
            ("an unknown schedule", {"optimizer": {"type": "sgd", "lr": 0.1, "schedule": "linear"}},
             "INVALID_ARGUMENT", "schedule"),
            ("a node storing over a parameter", {"nodes": good[:1] + [dict(good[1], out=pre + "w"), good[2]]},
             "INVALID_ARGUMENT", "parameter"),
            ("an unknown key", {"bogus": True}, "INVALID_ARGUMENT", ""),
        ]
        # an op without a backward rule on the path from a parameter to the
        # loss (conv2d, pooling and norm rules are being added, so the
        # candidates are ops that are not expected to get one soon)
        refused = []
        for op, nin in NO_RULE_CANDIDATES:
            nodes = [{"id": "v", "op": op, "inputs": [pre + "w"] * nin},
                     {"id": "loss", "op": "sum", "inputs": ["v"]}]
            err, _ = c.call("train.step", {"nodes": nodes, "loss": "loss", "params": [pre + "w"]})
            self.ck.checks += 1
            if err is not None and (err["name"] != "INVALID_ARGUMENT" or op not in err["message"]):
                self.ck.fail("error %s on the path: %r" % (op, err))
            elif err is not None:
                refused.append(op)
        if not refused:
            self.ck.fail("none of %s is refused any more: pick ops without a backward rule"
                         % ([op for op, _ in NO_RULE_CANDIDATES],))
        watched = [pre + s for s in ("w", "b", "k")]
        for label, override, code, needle in cases:
            if isinstance(override, list):
                override = {"nodes": override, "loss": "l2"}
            params = {"nodes": good, "loss": "loss", "params": [pre + "w", pre + "b"], "optimizer": sgd,
                      "step": 1}
            params.update(override)
            before = {n: self.raw(n) for n in watched}
            err, _ = c.call("train.step", params)
            self.ck.checks += 1
            if err is None or err["name"] != code:
                self.ck.fail("error %s: expected %s, got %r" % (label, code, err))
            elif needle not in err["message"]:
                self.ck.fail("error %s: the message does not say %r: %r" % (label, needle, err["message"]))
            self.ck.checks += 1
            if {n: self.raw(n) for n in watched} != before:
                self.ck.fail("error %s: a parameter changed" % label)
            left = {t["name"] for t in c.call("tensor.list", {"prefix": pre})[1]["tensors"]}
            if any(n.endswith((".momentum_buffer", ".grad")) for n in left):
                self.ck.fail("error %s: state or gradients were stored: %s" % (label, sorted(left)))


def run(ck):
    s = Steps(ck)
    for label, kind, opt in CONFIGS:
        s.config(label, kind, opt)
    s.reproducible()
    s.nonfinite()
    s.errors()


if __name__ == "__main__":
    os.environ.setdefault("TENSORD_BIN", os.path.join(HERE, "..", "..", "build-train", "daemon", "tensord"))
    harness.main(run)

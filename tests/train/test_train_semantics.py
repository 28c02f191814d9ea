#!/usr/bin/python3
"""Training semantics against NumPy references of torch's (docs/training.md):

- parameter groups (optimizer.groups): one update of every group from one
  set of gradients, each group with its own lr / weight_decay / momentum and
  the schedule scaled to its own lr, as torch.optim's param_groups with a
  scheduler; checked over several steps against a float64 reference;
- gradient accumulation: train.step with accumulate/apply equals one step on
  the whole batch (mean loss: the client scales each micro-batch's loss by
  1/N as torch users do) and the float64 reference; train.run's
  accumulate_steps equals train.run on batches N times larger;
- randomness per step and model state (below, when present).

Run with /usr/bin/python3; $TENSORD_BIN names the daemon."""
import math
import os
import sys

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "ops"))

import msgpack  # noqa: E402
import numpy as np  # noqa: E402

import harness  # noqa: E402
import ref_optim as ref  # noqa: E402

N, D, C = 16, 5, 3
RTOL = 1e-5


def lr_at(opt, step):
    """docs/training.md, "Schedules" (a group scales it by its own lr)."""
    lr = opt["lr"]
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


def ce_grads(x, y, w, b):
    """Mean cross-entropy of x @ w + b and its float64 gradients."""
    n = x.shape[0]
    z = x @ w + b
    m = z.max(axis=1, keepdims=True)
    lse = m[:, 0] + np.log(np.exp(z - m).sum(axis=1))
    loss = (lse - z[np.arange(n), y]).mean()
    p = np.exp(z - lse[:, None])
    p[np.arange(n), y] -= 1
    dz = p / n
    return loss, {"w": x.T @ dz, "b": dz.sum(axis=0)}


def nodes(pre, x="x", y="y", scale=None, feed=False):
    """The model's nodes; with `feed`, x and y are node ids (train.run's data)."""
    xi, yi = (x, y) if feed else (pre + x, pre + y)
    out = [{"id": "z0", "op": "matmul", "inputs": [xi, pre + "w"]},
           {"id": "z", "op": "add", "inputs": ["z0", pre + "b"]},
           {"id": "l0" if scale else "loss", "op": "cross_entropy", "inputs": ["z", yi]}]
    if scale:
        out.append({"id": "loss", "op": "mul", "inputs": ["l0"], "attrs": {"scalar": scale}})
    return out


def ref_step(kind, opt, group_of, groups, params, grads, state, step):
    """One float64 step of torch.optim with param_groups: parameter k uses
    groups[group_of[k]] (the top-level settings with the group's over them)."""
    out = {}
    for k, w in params.items():
        o = dict(opt, **groups[group_of[k]]) if group_of.get(k) is not None else opt
        lr = lr_at(o, step)
        if kind == "sgd":
            out[k], state[k] = ref.sgd_step(w, grads[k], state.get(k), lr=lr, momentum=o.get("momentum", 0.0),
                                            weight_decay=o.get("weight_decay", 0.0))
        else:
            m, v = state.get(k) or (np.zeros_like(w), np.zeros_like(w))
            out[k], m, v = ref.adam_step(w, grads[k], m, v, step, lr=lr, beta1=o.get("beta1", 0.9),
                                         beta2=o.get("beta2", 0.999), eps=o.get("eps", 1e-8),
                                         weight_decay=o["weight_decay"], decoupled=True)
            state[k] = (m, v)
    return out


class T:
    def __init__(self, ck):
        self.ck = ck
        self.c = ck.c
        self.rng = np.random.default_rng(1818)

    def get(self, name):
        err, res = self.c.call("tensor.get", {"name": name})
        return None if err else harness.result_array(res).astype(np.float64)

    def ok(self, cond, what):
        self.ck.checks += 1
        if not cond:
            self.ck.fail(what)
        return cond

    def close(self, got, want, what, rtol=RTOL):
        self.ck.checks += 1
        if got is None or np.shape(got) != np.shape(want):
            self.ck.fail("%s: missing or misshapen: %r" % (what, got))
            return False
        scale = float(np.abs(want).max(initial=0.0))
        bad = np.abs(got - want) > rtol * np.abs(want) + rtol * max(scale, 1e-3)
        if bad.any():
            i = tuple(np.argwhere(bad)[0])
            self.ck.fail("%s: %d of %d differ; first at %s: got %r want %r" % (
                what, int(bad.sum()), bad.size, i, got[i], want[i]))
            return False
        return True

    def setup(self, pre, n=N):
        x = self.rng.normal(0, 1, size=(n, D))
        y = self.rng.integers(0, C, size=n)
        w = self.rng.uniform(-0.5, 0.5, size=(D, C))
        b = self.rng.uniform(-0.1, 0.1, size=(C,))
        self.c.put(pre + "x", x, "f32")
        self.c.put(pre + "y", y.astype(np.int32), "i32")
        self.c.put(pre + "w", w, "f32")
        self.c.put(pre + "b", b, "f32")
        return harness.quantize(x, "f32"), y, harness.quantize(w, "f32"), harness.quantize(b, "f32")

    # ---- 1. parameter groups ----

    def groups(self, label, kind, opt, groups, group_of, steps=6):
        pre = "g/%s/" % label
        x, y, w, b = self.setup(pre)
        full = dict(opt)
        full["groups"] = [dict(g, params=[pre + k for k, gi in group_of.items() if gi == i])
                          for i, g in enumerate(groups)]
        top = dict({"sgd": {"lr": 0.01}, "adamw": {"lr": 0.001, "weight_decay": 0.01}}[kind], **opt)
        state = {}
        for step in range(1, steps + 1):
            cur = {"w": self.get(pre + "w"), "b": self.get(pre + "b")}
            _, g = ce_grads(x, y, cur["w"], cur["b"])
            want = ref_step(kind, top, group_of, groups, cur, g, state, step)
            err, res = self.c.call("train.step", {"nodes": nodes(pre), "loss": "loss",
                                                  "params": [pre + "w", pre + "b"], "optimizer": full,
                                                  "step": step})
            if not self.ok(err is None, "groups %s step %d: %r" % (label, step, err)):
                return
            self.close(res["lr"], lr_at(top, step), "groups %s step %d: reported lr" % (label, step))
            for k in ("w", "b"):
                self.close(self.get(pre + k), want[k], "groups %s step %d: %s" % (label, step, k))
            # The next reference step starts from the daemon's state.
            for k in ("w", "b"):
                if kind == "sgd" and state.get(k) is not None:
                    state[k] = self.get(pre + k + ".momentum_buffer")
                elif kind == "adamw":
                    state[k] = (self.get(pre + k + ".exp_avg"), self.get(pre + k + ".exp_avg_sq"))

    def group_errors(self):
        pre = "ge/"
        self.setup(pre)
        base = {"nodes": nodes(pre), "loss": "loss", "params": [pre + "w", pre + "b"], "step": 1}
        bad = [
            ({"groups": [{"params": [pre + "x"]}]}, "not in params"),
            ({"groups": [{"params": [pre + "w"]}, {"params": [pre + "w"]}]}, "two groups"),
            ({"groups": [{"params": [pre + "w"], "type": "adam"}]}, "whole step"),
            ({"groups": [{"params": [pre + "w"], "lr": -1}]}, "out of range"),
            ({"groups": [{"params": []}]}, "params"),
            ({"groups": [{"params": [pre + "w"], "bogus": 1}]}, "unknown key"),
            ({"groups": {"params": [pre + "w"]}}, "groups"),
        ]
        before = self.get(pre + "w")
        for opt, needle in bad:
            err, _ = self.c.call("train.step", dict(base, optimizer=opt))
            self.ok(err is not None and err["name"] == "INVALID_ARGUMENT" and needle in err["message"],
                    "groups error %r: %r" % (opt, err))
        self.ok(np.array_equal(self.get(pre + "w"), before), "a refused step changed w")

    # ---- 2. gradient accumulation ----

    def accumulate_step(self):
        pre, big = "a/", "ab/"
        x, y, w, b = self.setup(pre, 2 * N)
        for k, v in (("w", w), ("b", b), ("x", x)):
            self.c.put(big + k, v, "f32")
        self.c.put(big + "y", y.astype(np.int32), "i32")
        for h in range(2):
            self.c.put(pre + "x%d" % h, x[h * N:(h + 1) * N], "f32")
            self.c.put(pre + "y%d" % h, y[h * N:(h + 1) * N].astype(np.int32), "i32")
        opt = {"type": "sgd", "lr": 0.5, "momentum": 0.9}
        params = [pre + "w", pre + "b"]
        cur = {"w": w, "b": b}
        state = {}
        for step in range(1, 4):
            # micro-batch 0: gradients only, added into .grad (first: stored)
            err, _ = self.c.call("train.step", {"nodes": nodes(pre, "x0", "y0", 0.5), "loss": "loss",
                                                "params": params, "optimizer": opt, "step": step,
                                                "accumulate": True, "apply": False})
            if not self.ok(err is None, "accumulate step %d micro 0: %r" % (step, err)):
                return
            _, g0 = ce_grads(x[:N], y[:N], cur["w"], cur["b"])
            for k in ("w", "b"):
                self.close(self.get(pre + k + ".grad"), 0.5 * g0[k], "accumulate step %d: %s.grad" % (step, k))
                self.ok(np.array_equal(self.get(pre + k), harness.quantize(cur[k], "f32")),
                        "accumulate step %d: apply false changed %s" % (step, k))
            err, res = self.c.call("train.step", {"nodes": nodes(pre, "x1", "y1", 0.5), "loss": "loss",
                                                  "params": params, "optimizer": opt, "step": step,
                                                  "accumulate": True})
            if not self.ok(err is None, "accumulate step %d micro 1: %r" % (step, err)):
                return
            err, _ = self.c.call("train.step", {"nodes": nodes(big), "loss": "loss", "params":
                                                [big + "w", big + "b"], "optimizer": opt, "step": step})
            self.ok(err is None, "big batch step %d: %r" % (step, err))
            _, g = ce_grads(x, y, cur["w"], cur["b"])
            want = ref_step("sgd", dict(opt), {}, [], cur, g, state, step)
            for k in ("w", "b"):
                got = self.get(pre + k)
                self.close(got, want[k], "accumulate step %d: %s vs reference" % (step, k))
                self.close(got, self.get(big + k), "accumulate step %d: %s vs one big batch" % (step, k))
                self.ok(np.array_equal(self.get(pre + k + ".grad"), np.zeros_like(w if k == "w" else b)),
                        "accumulate step %d: %s.grad not cleared" % (step, k))
            cur = {k: self.get(pre + k) for k in ("w", "b")}
            state = {k: self.get(pre + k + ".momentum_buffer") for k in ("w", "b")}

    def run(self, params):
        c = self.c
        c.msgid += 1
        c.sock.sendall(msgpack.packb([0, c.msgid, "train.run", [params]]))
        while True:
            for m in c.unpacker:
                if m[0] == 1:
                    return m[2], m[3]
            chunk = c.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("closed")
            c.unpacker.feed(chunk)

    def accumulate_run(self):
        pre, big = "ar/", "arb/"
        x, y, w, b = self.setup(pre, 4 * N)
        for k, v in (("w", w), ("b", b), ("x", x)):
            self.c.put(big + k, v, "f32")
        self.c.put(big + "y", y.astype(np.int32), "i32")
        opt = {"type": "adamw", "lr": 0.05, "weight_decay": 0.1}
        base = {"loss": "loss", "optimizer": opt, "shuffle": False, "steps": 4}
        err, res = self.run(dict(base, nodes=nodes(pre, "xb", "yb", feed=True), params=[pre + "w", pre + "b"],
                                 data={"xb": pre + "x", "yb": pre + "y"}, batch_size=N // 2,
                                 accumulate_steps=4))
        if not self.ok(err is None, "train.run accumulate_steps: %r" % (err,)):
            return
        err, res_big = self.run(dict(base, nodes=nodes(big, "xb", "yb", feed=True),
                                     params=[big + "w", big + "b"],
                                     data={"xb": big + "x", "yb": big + "y"}, batch_size=2 * N))
        self.ok(err is None, "train.run big batch: %r" % (err,))
        self.ok(res["steps"] == 4 and res["epochs"] == 2, "accumulate run: steps/epochs %r" % (res,))
        self.close(res["loss"], res_big["loss"], "accumulate run: loss vs big batch", 1e-4)
        # float64 reference: steps over rows [0, 2N), [2N, 4N), [0, 2N), [2N, 4N)
        cur, state = {"w": w, "b": b}, {}
        top = dict(opt, beta1=0.9, beta2=0.999, eps=1e-8)
        for step in range(1, 5):
            rows = slice(((step - 1) % 2) * 2 * N, ((step - 1) % 2 + 1) * 2 * N)
            loss, g = ce_grads(x[rows], y[rows], cur["w"], cur["b"])
            cur = ref_step("adamw", top, {}, [], cur, g, state, step)
        self.close(res["loss"], loss, "accumulate run: last loss vs reference", 1e-4)
        for k in ("w", "b"):
            got = self.get(pre + k)
            self.close(got, cur[k], "accumulate run: %s vs reference" % k, 1e-4)
            self.close(got, self.get(big + k), "accumulate run: %s vs big batch" % k)
        err, _ = self.run(dict(base, nodes=nodes(pre, "xb", "yb", feed=True), params=[pre + "w", pre + "b"],
                               data={"xb": pre + "x", "yb": pre + "y"}, batch_size=N,
                               accumulate_steps=5))
        self.ok(err is not None and err["name"] == "INVALID_ARGUMENT", "accumulate_steps past the data: %r" % (err,))
        # One device listed is a one-device run (docs/devices.md): accumulation works there too.
        err, _ = self.run(dict(base, nodes=nodes(pre, "xb", "yb", feed=True), params=[pre + "w", pre + "b"],
                               data={"xb": pre + "x", "yb": pre + "y"}, batch_size=N // 2,
                               accumulate_steps=2, steps=1, devices=[0]))
        self.ok(err is None, "accumulate_steps with devices [0]: %r" % (err,))

    # ---- 3. randomness per step ----

    def rand_nodes(self, pre, seed, x="x", feed=False, out=None):
        """x scaled by a rand mask in [0, 1) (seed `seed`), then the linear model."""
        r = {"id": "r", "op": "rand", "inputs": [], "attrs": {"shape": [N, D], "seed": seed}}
        if out:
            r["out"] = out
        xi = x if feed else pre + x
        return [r, {"id": "xm", "op": "mul", "inputs": [xi, "r"]},
                {"id": "z0", "op": "matmul", "inputs": ["xm", pre + "w"]},
                {"id": "z", "op": "add", "inputs": ["z0", pre + "b"]},
                {"id": "loss", "op": "cross_entropy", "inputs": ["z", pre + "y"]}]

    def rand_ref(self, seed):
        """op.run rand with `seed`: the stream a node of that seed draws."""
        err, res = self.c.run("rand", [], {"shape": [N, D], "seed": seed})
        assert err is None, err
        return harness.result_array(res)

    def randomness(self):
        pre = "r/"
        self.setup(pre)
        opt = {"type": "sgd", "lr": 0.1}
        masks = {}
        for step, run_seed in ((1, 0), (2, 0), (1, 0), (1, 9)):
            err, res = self.c.call("train.step", {"nodes": self.rand_nodes(pre, 5), "loss": "loss", "step": step,
                                                  "params": [pre + "w", pre + "b"], "optimizer": opt,
                                                  "seed": run_seed, "outputs": ["r"]})
            if not self.ok(err is None, "rand train.step %d: %r" % (step, err)):
                return
            got = harness.result_array(res["outputs"]["r"])
            want = self.rand_ref(effective_seed(5, run_seed, step))
            self.ok(np.array_equal(got, want), "rand step %d seed %d: not the stream of the derived seed"
                    % (step, run_seed))
            self.ok(not np.array_equal(got, self.rand_ref(5)), "rand step %d: the node's own seed" % step)
            masks.setdefault((step, run_seed), []).append(got.tobytes())
        self.ok(masks[(1, 0)][0] == masks[(1, 0)][1], "rand: the same step twice gave different masks")
        self.ok(len({m[0] for m in masks.values()}) == 3, "rand: steps or run seeds share a mask")
        # train.run: one step each, from step 1, 2 and 1 again: the mask is stored each step
        got = []
        for start in (1, 2, 1):
            err, _ = self.run({"nodes": self.rand_nodes(pre, 5, "xb", True, out=pre + "mask"), "loss": "loss",
                               "params": [pre + "w", pre + "b"], "optimizer": opt, "data": {"xb": pre + "x"},
                               "batch_size": N, "steps": 1, "start_step": start, "seed": 3})
            self.ok(err is None, "rand train.run: %r" % (err,))
            got.append(self.get(pre + "mask"))
            self.ok(np.array_equal(got[-1], self.rand_ref(effective_seed(5, 3, start))),
                    "rand train.run step %d: not the derived stream" % start)
        self.ok(not np.array_equal(got[0], got[1]) and np.array_equal(got[0], got[2]),
                "rand train.run: masks of steps 1, 2, 1 do not differ and repeat")
        # Accumulating, each micro-batch draws its own stream: the mask stored
        # is the last (second) micro-batch's.
        self.c.put(pre + "x2", self.rng.normal(0, 1, size=(2 * N, D)), "f32")
        err, _ = self.run({"nodes": self.rand_nodes(pre, 5, "xb", True, out=pre + "mask"), "loss": "loss",
                           "params": [pre + "w", pre + "b"], "optimizer": opt, "data": {"xb": pre + "x2"},
                           "batch_size": N, "accumulate_steps": 2, "steps": 1, "start_step": 4, "seed": 3})
        self.ok(err is None and np.array_equal(self.get(pre + "mask"),
                                               self.rand_ref(effective_seed(5, 3 + (1 << 32), 4))),
                "rand train.run accumulate: the last micro-batch's stream: %r" % (err,))
        # Evaluation and prediction keep the node's seed, whatever the step.
        err, _ = self.c.call("model.define", {"name": "rm", "nodes": self.rand_nodes(pre, 5, "x", True),
                                              "inputs": [{"name": "x", "dtype": "f32", "shape": [N, D]}],
                                              "loss": "loss", "params": [pre + "w", pre + "b"],
                                              "outputs": ["r"], "optimizer": opt})
        self.ok(err is None, "rand model.define: %r" % (err,))
        for _ in range(2):
            err, res = self.c.call("model.predict", {"model": "rm", "inputs": {"x": pre + "x"}, "outputs": ["r"]})
            self.ok(err is None and np.array_equal(harness.result_array(res["outputs"]["r"]), self.rand_ref(5)),
                    "rand predict: not the node's own stream: %r" % (err,))
            err, _ = self.c.call("train.step", {"model": "rm", "data": {"x": pre + "x"}})
            self.ok(err is None, "rand model train.step: %r" % (err,))

    # ---- 4. model state: batch_norm running statistics ----

    def bn_setup(self, pre):
        shape = (16, 3, 2, 2)
        v = {"x": self.rng.normal(0.5, 2.0, size=shape), "y": self.rng.integers(0, C, size=16),
             "rm": np.zeros(3), "rv": np.ones(3), "g": self.rng.uniform(0.5, 1.5, size=3),
             "be": self.rng.uniform(-0.2, 0.2, size=3), "w": self.rng.uniform(-0.3, 0.3, size=(12, C)),
             "b": np.zeros(C)}
        for k, a in v.items():
            self.c.put(pre + k, a.astype(np.int32) if k == "y" else a, "i32" if k == "y" else "f32")
        for h in range(2):
            self.c.put(pre + "x%d" % h, v["x"][8 * h:8 * h + 8], "f32")
            self.c.put(pre + "y%d" % h, v["y"][8 * h:8 * h + 8].astype(np.int32), "i32")
        return {k: (a if k == "y" else harness.quantize(a, "f32")) for k, a in v.items()}

    def bn_define(self, c, pre, name, momentum):
        return c.call("model.define", {
            "name": name, "loss": "loss", "params": [pre + "g", pre + "be", pre + "w", pre + "b"],
            "inputs": [{"name": "x", "dtype": "f32", "shape": [8, 3, 2, 2]},
                       {"name": "y", "dtype": "i32", "shape": [8]}],
            "outputs": ["z"], "optimizer": {"type": "sgd", "lr": 0.1},
            "state": [{"node": "bn", "momentum": momentum}],
            "nodes": [{"id": "bn", "op": "batch_norm", "inputs": ["x", pre + "rm", pre + "rv", pre + "g", pre + "be"]},
                      {"id": "f", "op": "reshape", "inputs": ["bn"], "attrs": {"shape": [-1, 12]}},
                      {"id": "z0", "op": "matmul", "inputs": ["f", pre + "w"]},
                      {"id": "z", "op": "add", "inputs": ["z0", pre + "b"]},
                      {"id": "loss", "op": "cross_entropy", "inputs": ["z", "y"]}]})

    @staticmethod
    def bn_forward(x, y, p, mean, var):
        """Logits and mean cross-entropy with batch_norm on (mean, var)."""
        h = (x - mean[None, :, None, None]) / np.sqrt(var[None, :, None, None] + 1e-5)
        h = h * p["g"][None, :, None, None] + p["be"][None, :, None, None]
        z = h.reshape(len(x), -1) @ p["w"] + p["b"]
        m = z.max(axis=1, keepdims=True)
        lse = m[:, 0] + np.log(np.exp(z - m).sum(axis=1))
        return z, float((lse - z[np.arange(len(x)), y]).mean())

    @staticmethod
    def bn_running(rm, rv, x, m):
        """torch.nn.BatchNorm2d's update: the unbiased batch variance."""
        axes = (0, 2, 3)
        return (1 - m) * rm + m * x.mean(axis=axes), (1 - m) * rv + m * x.var(axis=axes, ddof=1)

    def bn_check_stats(self, c, pre, rm, rv, what):
        for k, want in (("rm", rm), ("rv", rv)):
            err, res = c.call("tensor.get", {"name": pre + k})
            got = None if err else harness.result_array(res).astype(np.float64)
            self.close(got, want, "%s: %s" % (what, k), 1e-5)

    def model_state(self):
        pre, mom = "bn/", 0.2
        v = self.bn_setup(pre)
        err, _ = self.bn_define(self.c, pre, "bnm", mom)
        if not self.ok(err is None, "state model.define: %r" % (err,)):
            return
        params = lambda: {k: self.get(pre + k) for k in ("g", "be", "w", "b")}  # noqa: E731
        rm, rv = v["rm"], v["rv"]
        x0, y0 = v["x"][:8], v["y"][:8]
        # train.step: the loss uses the batch's statistics (biased), the
        # running ones move towards the batch's (unbiased variance).
        p0 = params()
        err, res = self.c.call("train.step", {"model": "bnm", "data": {"x": pre + "x0", "y": pre + "y0"}})
        if not self.ok(err is None, "state train.step: %r" % (err,)):
            return
        _, want = self.bn_forward(x0, y0, p0, x0.mean(axis=(0, 2, 3)), x0.var(axis=(0, 2, 3)))
        self.close(res["loss"], want, "state train.step: loss in train mode", 1e-4)
        rm, rv = self.bn_running(rm, rv, x0, mom)
        self.bn_check_stats(self.c, pre, rm, rv, "state after train.step")
        # train.run: batches rows 0-7, 8-15, 0-7 (no shuffle), one update each.
        err, res = self.run({"model": "bnm", "data": {"x": pre + "x", "y": pre + "y"}, "batch_size": 8,
                             "steps": 3, "shuffle": False})
        self.ok(err is None, "state train.run: %r" % (err,))
        for h in (0, 1, 0):
            rm, rv = self.bn_running(rm, rv, v["x"][8 * h:8 * h + 8], mom)
        self.bn_check_stats(self.c, pre, rm, rv, "state after train.run")
        # eval (default) uses the running statistics; train mode the batch's.
        p = params()
        x1, y1 = v["x"][8:], v["y"][8:]
        z_eval, l_eval = self.bn_forward(x1, y1, p, rm, rv)
        _, l_train = self.bn_forward(x1, y1, p, x1.mean(axis=(0, 2, 3)), x1.var(axis=(0, 2, 3)))
        data = {"x": pre + "x1", "y": pre + "y1"}
        for mode, want in ((None, l_eval), ("eval", l_eval), ("train", l_train)):
            q = {"model": "bnm", "data": data}
            if mode:
                q["mode"] = mode
            err, res = self.c.call("model.evaluate", q)
            self.ok(err is None and abs(res["loss"] - want) <= 1e-4 * max(1, abs(want)),
                    "state evaluate mode %s: %r want %r" % (mode, err or res["loss"], want))
        err, res = self.c.call("model.predict", {"model": "bnm", "inputs": {"x": pre + "x1"}})
        self.ok(err is None, "state predict: %r" % (err,))
        if err is None:
            self.close(harness.result_array(res["outputs"]["z"]).astype(np.float64), z_eval,
                       "state predict: logits in eval mode", 1e-4)
        self.bn_check_stats(self.c, pre, rm, rv, "state after evaluate/predict (unchanged)")
        # The buffers belong to the model: listed, counted, deleted with it.
        err, st = self.c.call("model.stat", {"name": "bnm"})
        self.ok(err is None and pre + "rm" in st["state"] and pre + "rv" in st["state"]
                and st["definition"]["state"] == [{"node": "bn", "momentum": mom}],
                "state model.stat: %r" % (err or st,))
        err, _ = self.c.call("model.evaluate", {"model": "bnm", "data": data, "mode": "test"})
        self.ok(err is not None and err["name"] == "INVALID_ARGUMENT", "mode test: %r" % (err,))
        err, res = self.c.call("model.delete", {"name": "bnm", "tensors": True})
        self.ok(err is None and pre + "rm" in res["tensors"] and pre + "rv" in res["tensors"]
                and self.get(pre + "rm") is None, "state model.delete: %r" % (err or res,))
        for k in ("rm", "rv", "g", "be", "w", "b"):
            self.c.put(pre + k, v[k], "f32")
        # Definitions the daemon refuses.
        bad = [({"state": ["f"]}, "batch_norm"), ({"state": ["bn", "bn"]}, "twice"),
               ({"state": [{"node": "bn", "momentum": 2}]}, "momentum"),
               ({"state": ["bn"], "nodes": [
                   {"id": "m", "op": "mul", "inputs": [pre + "rm"], "attrs": {"scalar": 1}},
                   {"id": "bn", "op": "batch_norm", "inputs": ["x", "m", pre + "rv"]},
                   {"id": "f", "op": "reshape", "inputs": ["bn"], "attrs": {"shape": [-1, 12]}},
                   {"id": "z0", "op": "matmul", "inputs": ["f", pre + "w"]},
                   {"id": "loss", "op": "cross_entropy", "inputs": ["z0", "y"]}]}, "stored")]
        for over, needle in bad:
            d = {"name": "bad", "loss": "loss", "params": [pre + "w"],
                 "inputs": [{"name": "x", "dtype": "f32", "shape": [8, 3, 2, 2]},
                            {"name": "y", "dtype": "i32", "shape": [8]}],
                 "nodes": [{"id": "bn", "op": "batch_norm", "inputs": ["x", pre + "rm", pre + "rv"]},
                           {"id": "f", "op": "reshape", "inputs": ["bn"], "attrs": {"shape": [-1, 12]}},
                           {"id": "z0", "op": "matmul", "inputs": ["f", pre + "w"]},
                           {"id": "loss", "op": "cross_entropy", "inputs": ["z0", "y"]}]}
            d.update(over)
            err, _ = self.c.call("model.define", d)
            self.ok(err is not None and err["name"] == "INVALID_ARGUMENT" and needle in err["message"],
                    "state define %r: %r" % (over, err))

    def model_state_restart(self):
        """Running statistics and the model's state survive a restart and
        training goes on from them (persistence on, a private state dir)."""
        import tempfile
        import shutil
        from daemon import Daemon
        top = tempfile.mkdtemp(prefix="tensord-bnstate-", dir="/tmp")
        pre, mom = "bs/", 0.1
        try:
            state = os.path.join(top, "state")
            with Daemon(["--state-dir", state]) as d:
                c = harness.Client(d.sock)
                saved, self.c = self.c, c
                try:
                    v = self.bn_setup(pre)
                finally:
                    self.c = saved
                err, _ = self.bn_define(c, pre, "bs", mom)
                self.ok(err is None, "restart define: %r" % (err,))
                for h in (0, 1):
                    err, _ = c.call("train.step", {"model": "bs", "data": {"x": pre + "x%d" % h,
                                                                           "y": pre + "y%d" % h}})
                    self.ok(err is None, "restart step %d: %r" % (h, err))
                c.call("store.sync", {})
            rm, rv = v["rm"], v["rv"]
            for h in (0, 1):
                rm, rv = self.bn_running(rm, rv, v["x"][8 * h:8 * h + 8], mom)
            with Daemon(["--state-dir", state]) as d:
                c = harness.Client(d.sock)
                self.bn_check_stats(c, pre, rm, rv, "after restart")
                err, res = c.call("model.stat", {"name": "bs"})
                self.ok(err is None and res["step"] == 2, "restart: model.stat %r" % (err or res,))
                err, _ = c.call("train.step", {"model": "bs", "data": {"x": pre + "x0", "y": pre + "y0"}})
                self.ok(err is None, "restart: step after restart %r" % (err,))
                rm, rv = self.bn_running(rm, rv, v["x"][:8], mom)
                self.bn_check_stats(c, pre, rm, rv, "step after restart")
        finally:
            shutil.rmtree(top, ignore_errors=True)


def effective_seed(seed, run_seed, step):
    """docs/training.md, "Randomness per step": the seed a node draws with."""
    m = (1 << 64) - 1

    def mix(z):
        z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & m
        z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & m
        return z ^ (z >> 31)
    s = (seed & m) ^ mix((run_seed + 0x9e3779b97f4a7c15 * step) & m)
    s = mix(s)
    return s - (1 << 64) if s >= 1 << 63 else s


def run(ck):
    t = T(ck)
    # AdamW: w at the top level (cosine with warmup), b in a group without
    # weight decay and a larger lr (the usual no-decay-for-biases split).
    t.groups("adamw", "adamw", {"type": "adamw", "lr": 0.05, "weight_decay": 0.2, "schedule": "cosine",
                                "warmup": 2, "total": 6},
             [{"weight_decay": 0.0, "lr": 0.2}], {"b": 0})
    # SGD: two groups, different momentum and lr, a step schedule.
    t.groups("sgd", "sgd", {"type": "sgd", "lr": 0.5, "schedule": "step", "step_size": 2, "gamma": 0.5},
             [{"lr": 0.3, "momentum": 0.9}, {"momentum": 0.5, "weight_decay": 0.05}], {"w": 0, "b": 1})
    t.group_errors()
    t.accumulate_step()
    t.accumulate_run()
    t.randomness()
    t.model_state()
    t.model_state_restart()


if __name__ == "__main__":
    harness.main(run)

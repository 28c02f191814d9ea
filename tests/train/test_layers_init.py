#!/usr/bin/python3
"""Layer models: initialisers, stored parameters, errors, quota and rights,
restart and tensorctl model save/load (docs/training.md, "A model as
layers"; docs/protocol.md, model.define).

- every initialiser's empirical distribution matches torch's formula for
  the tensor's fan_in / fan_out (computed here from the shapes): uniform
  bounds, mean and standard deviation within sampling tolerance; zeros and
  ones exact; the same seed gives the same tensors (whatever the model is
  called), another seed other tensors;
- a stored parameter of the right shape is kept, one of another shape or
  dtype is refused with nothing created; a definition refused after the
  parameters were created leaves none behind;
- bad layer specs are INVALID_ARGUMENT naming the layer path and key,
  limits (depth, layer count) are refused;
- creation counts against user_max_tensors and needs the namespace's rights;
- a layer model survives a daemon restart (training on gives what
  uninterrupted training gives) and tensorctl model save / load.

Run with /usr/bin/python3; $TENSORD_BIN names the daemon, $TENSORCTL_BIN
tensorctl (the save/load part is skipped without it)."""
import math
import os
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))

import numpy as np  # noqa: E402

from daemon import Daemon, as_user  # noqa: E402

failures = []
OTHER = 65532


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL", what)


NP = {"f32": np.float32, "i32": np.int32, "f16": np.float16}


def put(c, name, a, dt="f32"):
    a = np.ascontiguousarray(a, NP[dt])
    c.call("tensor.put", {"name": name, "dtype": dt, "shape": list(a.shape), "data": a.tobytes()})


def get(c, name):
    r = c.call("tensor.get", {"name": name})
    return np.frombuffer(r["data"], NP[r["dtype"]]).reshape(r["shape"])


def names(c, prefix):
    return sorted(t["name"] for t in c.call("tensor.list", {"prefix": prefix})["tensors"])


def err_of(c, method, params):
    err, _ = c.call_full(method, params)
    return err or {}


INPUTS = [{"name": "x", "dtype": "f32", "shape": [1, 48]}, {"name": "y", "dtype": "i32", "shape": [1]}]
LOSS = {"type": "cross_entropy", "target": "y"}
# (layer, {param: (kind, a)}) with a from torch's formulas (gain 1)
INIT_LAYERS = [
    {"type": "linear", "in": 48, "out": 96},
    {"type": "linear", "in": 96, "out": 64, "init": {"weight": "kaiming_uniform", "bias": "zeros"}},
    {"type": "linear", "in": 64, "out": 128, "init": {"weight": "kaiming_normal", "bias": "ones"}},
    {"type": "linear", "in": 128, "out": 80, "init": {"weight": "xavier_uniform", "bias": {"uniform": 0.3}}},
    {"type": "linear", "in": 80, "out": 96, "init": {"weight": "xavier_normal", "bias": {"normal": 0.5}}},
    {"type": "linear", "in": 96, "out": 4, "init": {"weight": {"normal": 0.02}}},
]
EXPECT = {
    "0.weight": ("u", 1 / math.sqrt(48)), "0.bias": ("u", 1 / math.sqrt(48)),
    "1.weight": ("u", math.sqrt(3 / 96)), "1.bias": ("zeros", 0),
    "2.weight": ("n", 1 / math.sqrt(64)), "2.bias": ("ones", 0),
    "3.weight": ("u", math.sqrt(6 / (128 + 80))), "3.bias": ("u", 0.3),
    "4.weight": ("n", math.sqrt(2 / (80 + 96))), "4.bias": ("n", 0.5),
    "5.weight": ("n", 0.02), "5.bias": ("u", 1 / math.sqrt(96)),
    # conv: fan_in = in_ch * kh * kw, fan_out = out_ch * kh * kw
    "c.0.weight": ("u", 1 / math.sqrt(3 * 25)), "c.1.weight": ("u", math.sqrt(6 / (3 * 25 + 8 * 25))),
    "e.0.weight": ("n", 1.0),
}


def check_dist(a, kind, p, what):
    a = a.astype(np.float64).ravel()
    k = a.size
    if kind == "zeros" or kind == "ones":
        check(np.all(a == (0 if kind == "zeros" else 1)), "%s: exactly %s" % (what, kind))
        return
    if kind == "u":
        check(a.min() >= -p and a.max() <= p, "%s: inside +-%g" % (what, p))
        check(a.min() < -0.8 * p and a.max() > 0.8 * p or k < 20, "%s: spans +-%g" % (what, p))
        std = p / math.sqrt(3)
    else:
        std = p
    check(abs(a.mean()) < 5 * std / math.sqrt(k), "%s: mean %g (std %g, n %d)" % (what, a.mean(), std, k))
    if k >= 100:
        check(abs(a.std() / std - 1) < 6 / math.sqrt(2 * k) + 0.01, "%s: std %g want %g" % (what, a.std(), std))


def define(c, name, layers=INIT_LAYERS, seed=1, inputs=INPUTS, **kw):
    p = {"name": name, "inputs": inputs, "layers": layers, "loss": LOSS, "seed": seed}
    p.update(kw)
    return c.call("model.define", p)


def initialisers(c):
    define(c, "a")
    for local, (kind, p) in EXPECT.items():
        if not local[0].isdigit():
            continue
        check_dist(get(c, "a/" + local), kind, p, local)
    conv = [{"type": "conv2d", "in_channels": 3, "out_channels": 8, "kernel_size": 5, "padding": 2},
            {"type": "conv2d", "in_channels": 8, "out_channels": 8, "kernel_size": [5, 5], "padding": 2,
             "init": {"weight": "xavier_uniform"}},
            {"type": "flatten"}, {"type": "linear", "in": 8 * 4 * 4, "out": 3}]
    conv[1]["in_channels"] = 8
    EXPECT["c.1.weight"] = ("u", math.sqrt(6 / (8 * 25 + 8 * 25)))
    define(c, "c", conv, inputs=[{"name": "x", "dtype": "f32", "shape": [1, 3, 4, 4]}, INPUTS[1]])
    check_dist(get(c, "c/0.weight"), *EXPECT["c.0.weight"], "conv default")
    check_dist(get(c, "c/1.weight"), *EXPECT["c.1.weight"], "conv xavier_uniform")
    emb = [{"type": "embedding", "num_embeddings": 300, "embedding_dim": 16}, {"type": "flatten"},
           {"type": "linear", "in": 16 * 5, "out": 3}]
    define(c, "e", emb, inputs=[{"name": "x", "dtype": "i32", "shape": [1, 5]}, INPUTS[1]])
    check_dist(get(c, "e/0.weight"), "n", 1.0, "embedding normal(0, 1)")
    # the same seed: the same tensors, whatever the model's name; another: others
    define(c, "b")
    define(c, "s2", seed=2)
    for local in ("0.weight", "3.bias", "4.weight"):
        check(get(c, "a/" + local).tobytes() == get(c, "b/" + local).tobytes(), "same seed, same " + local)
        check(get(c, "a/" + local).tobytes() != get(c, "s2/" + local).tobytes(), "other seed, other " + local)
    check(get(c, "a/0.weight").tobytes() != get(c, "a/1.weight")[:, :48].tobytes(), "tensors differ")
    # dtype of created parameters
    define(c, "h", dtype="f16", inputs=[{"name": "x", "dtype": "f16", "shape": [1, 48]}, INPUTS[1]])
    check(c.call("tensor.stat", {"name": "h/0.weight"})["dtype"] == "f16", "dtype f16 parameters")


def stored(c):
    w = np.arange(96 * 48, dtype=np.float32).reshape(96, 48) / 1000
    put(c, "k/0.weight", w)
    define(c, "k")
    check(np.array_equal(get(c, "k/0.weight"), w), "a stored parameter is kept")
    check("k/0.bias" in names(c, "k/"), "the others are created")
    put(c, "bad/0.weight", np.zeros((48, 96), np.float32))
    e = err_of(c, "model.define", {"name": "bad", "inputs": INPUTS, "layers": INIT_LAYERS, "loss": LOSS})
    check(e.get("name") == "SHAPE_MISMATCH" and "bad/0.weight" in e.get("message", ""), "wrong shape: %r" % e)
    check(names(c, "bad/") == ["bad/0.weight"], "nothing created: %r" % names(c, "bad/"))
    check(err_of(c, "model.stat", {"name": "bad"}).get("name") == "NOT_FOUND", "no model")
    put(c, "bad/0.weight", np.zeros((96, 48)), "f16")
    e = err_of(c, "model.define", {"name": "bad", "inputs": INPUTS, "layers": INIT_LAYERS, "loss": LOSS})
    check(e.get("name") == "DTYPE_MISMATCH", "wrong dtype: %r" % e)
    check(names(c, "bad/") == ["bad/0.weight"], "nothing created (dtype): %r" % names(c, "bad/"))
    # refused after creating: the loss names no node; the created tensors go
    e = err_of(c, "model.define", {"name": "late", "inputs": INPUTS, "layers": INIT_LAYERS, "loss": "nope"})
    check(e.get("name") in ("INVALID_ARGUMENT", "NOT_FOUND"), "unknown loss node: %r" % e)
    check(names(c, "late/") == [], "a refused definition leaves no tensors: %r" % names(c, "late/"))


def errors(c):
    lin = {"type": "linear", "in": 48, "out": 4}
    cases = [
        ([{"type": "linearr"}], "layer '0' (linearr)", "unknown layer type"),
        ([dict(lin, outt=3)], "layer '0' (linear)", "outt"),
        ([{"type": "linear", "in": 48}], "layer '0' (linear)", "out"),
        ([dict(lin, out=0)], "layer '0' (linear)", "'out'"),
        ([dict(lin, **{"in": 47})], "layer '0' (linear)", "in is 47"),
        ([{"type": "dropout", "p": 1.5}, lin], "layer '0' (dropout)", "'p'"),
        ([{"type": "sequential", "name": "s", "layers": [lin, {"type": "relu", "name": "r", "bogus": 1}]}],
         "layer 's.r' (relu)", "bogus"),
        ([dict(lin, init={"weight": "glorot"})], "layer '0' (linear)", "init.weight"),
        ([dict(lin, init={"gamma": "zeros"})], "layer '0' (linear)", "gamma"),
        ([dict(lin, init={"bias": "xavier_uniform"})], "layer '0' (linear)", "2 or more dims"),
        ([dict(lin, name="a.b")], "layers[0]", "name"),
        ([dict(lin, name="h"), {"type": "relu", "name": "h"}], "layers[1]", "taken"),
        ([{"type": "conv2d", "in_channels": 1, "out_channels": 2, "kernel_size": 3}], "layer '0' (conv2d)",
         "[N, C, H, W]"),
        ([{"type": "attention", "dim": 48, "heads": 5}], "layer '0' (attention)", "multiple"),
        ("notalist", "layers", "array"),
        ([], "layers", "empty"),
        ([{"type": "relu"}], "layers", "no parameters"),
    ]
    for layers, where, what in cases:
        e = err_of(c, "model.define", {"name": "err", "inputs": INPUTS, "layers": layers, "loss": LOSS})
        check(e.get("name") == "INVALID_ARGUMENT" and where in e.get("message", "") and what in e["message"],
              "%r: %r" % (layers, e))
    deep = lin
    for _ in range(12):
        deep = {"type": "sequential", "layers": [deep]}
    e = err_of(c, "model.define", {"name": "err", "inputs": INPUTS, "layers": [deep], "loss": LOSS})
    check(e.get("name") == "INVALID_ARGUMENT" and "deeper than 12" in e.get("message", ""), "depth: %r" % e)
    e = err_of(c, "model.define", {"name": "err", "inputs": INPUTS, "layers": [{"type": "relu"}] * 1025,
                                   "loss": LOSS})
    check(e.get("name") == "RESOURCE_EXHAUSTED" and "1024 layers" in e.get("message", ""), "count: %r" % e)
    e = err_of(c, "model.define", {"name": "err", "inputs": INPUTS, "layers": [lin],
                                   "loss": {"type": "hinge", "target": "y"}})
    check(e.get("name") == "INVALID_ARGUMENT" and "loss" in e.get("message", ""), "loss type: %r" % e)
    e = err_of(c, "model.define", {"name": "err", "inputs": ["x"], "layers": [{"type": "flatten"}], "loss": LOSS})
    check(e.get("name") == "INVALID_ARGUMENT" and "shape" in e.get("message", ""), "flatten unknown: %r" % e)
    e = err_of(c, "model.define", {"name": "err", "nodes": [{"id": "a", "op": "relu", "inputs": ["x"]}],
                                   "params": ["w"], "loss": "a", "seed": 1})
    check(e.get("name") == "INVALID_ARGUMENT" and "layers" in e.get("message", ""), "seed without layers: %r" % e)
    check(names(c, "err/") == [], "no tensors from refused definitions: %r" % names(c, "err/"))


def quota_and_rights(tmp):
    cfg = os.path.join(tmp, "q.conf")
    with open(cfg, "w") as f:
        f.write("user_max_tensors = 5\n")
    os.chmod(tmp, 0o755)
    os.chmod(cfg, 0o644)
    with Daemon(["--config", cfg]) as d:
        os.chmod(d.dir, 0o755)
        os.chmod(d.sock, 0o666)
        c = d.client()
        define(c, "rootm", INIT_LAYERS[:1] + [{"type": "linear", "in": 96, "out": 4}])

        def other():
            o = d.client()
            small = [{"type": "linear", "in": 48, "out": 4}]
            out = {"ok": o.call("model.define", {"name": "mine", "inputs": INPUTS, "layers": small,
                                                 "loss": LOSS})["param_count"]}
            out["quota"] = err_of(o, "model.define", {"name": "big", "inputs": INPUTS, "layers": INIT_LAYERS,
                                                      "loss": LOSS})
            out["foreign"] = err_of(o, "model.define", {"name": "~root/evil", "inputs": INPUTS, "layers": small,
                                                        "loss": LOSS})
            out["left"] = sorted(t["name"] for t in o.call("tensor.list")["tensors"])
            return out

        out = as_user(OTHER, other)
        check(out["ok"] == 48 * 4 + 4, "another uid defines its own layer model: %r" % out)
        check(out["quota"].get("name") == "RESOURCE_EXHAUSTED" and "user_max_tensors" in out["quota"]["message"],
              "quota: %r" % out["quota"])
        check(out["foreign"].get("name") == "PERMISSION_DENIED", "foreign namespace: %r" % out["foreign"])
        check(out["left"] == ["mine/0.bias", "mine/0.weight"], "nothing left by refusals: %r" % out["left"])
        check(names(c, "evil") == [] and err_of(c, "model.stat", {"name": "evil"}).get("name") == "NOT_FOUND",
              "nothing created in root's namespace")


SMALL = [{"type": "linear", "in": 48, "out": 16}, {"type": "batch_norm", "num_features": 16}, {"type": "relu"},
         {"type": "dropout", "p": 0.2}, {"type": "linear", "in": 16, "out": 3, "name": "head"}]


def data(c):
    rng = np.random.default_rng(1)
    put(c, "dx", rng.standard_normal((8, 48)))
    put(c, "dy", rng.integers(0, 3, 8), "i32")


# batch_norm after a linear needs 2 rows in the declared example shape
# (model.define checks the graph in training mode with it)
BN_INPUTS = [{"name": "x", "dtype": "f32", "shape": [2, 48]}, {"name": "y", "dtype": "i32", "shape": [2]}]


def step(c, name="r"):
    return c.call("train.step", {"model": name, "data": {"x": "dx", "y": "dy"}})["loss"]


def restart(tmp):
    state = os.path.join(tmp, "state")
    opt = {"type": "adam", "lr": 0.01}
    with Daemon(["--state-dir", state]) as d:
        c = d.client()
        data(c)
        before = define(c, "r", SMALL, seed=4, optimizer=opt, inputs=BN_INPUTS)
        step(c)
        step(c)
    with Daemon(["--state-dir", state]) as d:
        c = d.client()
        after = c.call("model.stat", {"name": "r"})
        for k in ("definition", "layers", "nodes", "parameters", "param_count"):
            check(after[k] == before[k], "restart keeps %s" % k)
        check(after["step"] == 2, "restart keeps the step")
        resumed = step(c)
        w = get(c, "r/head.weight")
    with Daemon() as d:
        c = d.client()
        data(c)
        define(c, "r", SMALL, seed=4, optimizer=opt, inputs=BN_INPUTS)
        step(c)
        step(c)
        check(step(c) == resumed, "step 3 after a restart equals step 3 without")
        check(get(c, "r/head.weight").tobytes() == w.tobytes(), "parameters after restart equal bit for bit")


def save_load(tmp):
    ctl = os.environ.get("TENSORCTL_BIN")
    if not ctl:
        print("SKIP tensorctl model save/load (TENSORCTL_BIN not set)")
        return
    path = os.path.join(tmp, "m.safetensors")
    with Daemon() as d:
        c = d.client()
        data(c)
        before = define(c, "sv", SMALL, seed=9, optimizer={"type": "adam", "lr": 0.01}, inputs=BN_INPUTS)
        step(c, "sv")

        def run(*args):
            p = subprocess.run([ctl, "--socket", d.sock] + list(args), capture_output=True, text=True, timeout=60)
            check(p.returncode == 0, "tensorctl %s: %s" % (" ".join(args), p.stderr))
            return p.stdout

        shown = run("model", "stat", "sv")
        for line in ("loss       cross_entropy (target y)", "outputs    head", "layers     5 (",
                     "nodes      %d" % len(before["nodes"])):
            check(line in shown, "tensorctl model stat shows %r:\n%s" % (line, shown))

        run("model", "save", "sv", path)
        want = {p["name"]: get(c, p["name"]).tobytes() for p in before["parameters"]}
        want["sv/1.running_var"] = get(c, "sv/1.running_var").tobytes()
        c.call("model.delete", {"name": "sv", "tensors": True})
        check(names(c, "sv/") == [], "deleted with its tensors")
        run("model", "load", path)
        after = c.call("model.stat", {"name": "sv"})
        check(after["definition"] == before["definition"] and after["nodes"] == before["nodes"] and
              after["step"] == 1, "model load gives the same model")
        for k, v in want.items():
            check(get(c, k).tobytes() == v, "model load keeps %s" % k)
        check(math.isfinite(step(c, "sv")), "training goes on")
        # Under another name a layer model's tensors follow the name: the
        # copy starts from the saved parameters, not from fresh ones.
        run("model", "load", path, "--name", "copy")
        for k, v in want.items():
            check(get(c, "copy/" + k[len("sv/"):]).tobytes() == v, "model load --name puts %s as copy/" % k)
        check(c.call("model.stat", {"name": "copy"})["step"] == 1, "the copy has the saved step")


def main():
    with Daemon() as d:
        c = d.client()
        initialisers(c)
        stored(c)
        errors(c)
    with tempfile.TemporaryDirectory(prefix="tensord-layers-") as tmp:
        if os.geteuid() == 0:
            quota_and_rights(tmp)
        else:
            print("SKIP quota and rights (not root)")
        restart(tmp)
        save_load(tmp)
    if failures:
        print("%d failure(s)" % len(failures))
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Models (docs/training.md, "Models"; docs/protocol.md, model.*).

A small MLP classifier is defined once with model.define, then:
- train.step with {"model"} counts steps in the daemon (1, 2, ... and on
  from a given step), and its parameters equal bit for bit those of the
  stateless train.step path fed the same requests;
- a NaN loss leaves the count (and everything else) alone;
- train.run with {"model"} starts after the model's count and advances it;
- model.evaluate's loss and accuracy match a NumPy forward pass of the
  fetched parameters, whole and in batches (the row-weighted mean);
- model.predict's outputs match NumPy, inline and stored with "out";
- saving (model.stat + tensor.get), deleting (model.delete tensors: true),
  restoring (tensor.put + model.define with "step") and training on gives
  bit-identical parameters to uninterrupted training;
- every new method refuses garbage with the documented error.

Run with /usr/bin/python3; $TENSORD_BIN names the daemon."""
import os
import sys

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))

import numpy as np  # noqa: E402

from daemon import Daemon, RPCError  # noqa: E402

N, D, H, C = 24, 4, 8, 3
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL", what)


def put(c, name, a, dtype="f32"):
    a = np.ascontiguousarray(a, dtype={"f32": np.float32, "i32": np.int32}[dtype])
    c.call("tensor.put", {"name": name, "dtype": dtype, "shape": list(a.shape), "data": a.tobytes()})


def get(c, name):
    r = c.call("tensor.get", {"name": name})
    dt = {"f32": np.float32, "i32": np.int32}[r["dtype"]]
    return np.frombuffer(r["data"], dt).reshape(r["shape"])


def arr(out):
    return np.frombuffer(out["data"], {"f32": np.float32, "i32": np.int32}[out["dtype"]]).reshape(out["shape"])


def nodes(prefix, xin="x", yin="y"):
    return [
        {"id": "h0", "op": "matmul", "inputs": [xin, prefix + "w1"]},
        {"id": "h1", "op": "add", "inputs": ["h0", prefix + "b1"]},
        {"id": "h", "op": "relu", "inputs": ["h1"]},
        {"id": "o0", "op": "matmul", "inputs": ["h", prefix + "w2"]},
        {"id": "logits", "op": "add", "inputs": ["o0", prefix + "b2"]},
        {"id": "loss", "op": "cross_entropy", "inputs": ["logits", yin]},
        {"id": "pred", "op": "argmax", "inputs": ["logits"], "attrs": {"axis": 1}},
        {"id": "hit", "op": "eq", "inputs": ["pred", yin]},
        {"id": "hitf", "op": "cast", "inputs": ["hit"], "attrs": {"dtype": "f32"}},
        {"id": "acc", "op": "mean", "inputs": ["hitf"]},
    ]


PARAMS = ["w1", "b1", "w2", "b2"]
DATA = {"x": "data/x", "y": "data/y"}
OPT = {"type": "adam", "lr": 0.05}


def definition(prefix, **extra):
    d = {"nodes": nodes(prefix), "loss": "loss", "params": [prefix + p for p in PARAMS],
         "inputs": [{"name": "x", "dtype": "f32", "shape": [1, D]}, {"name": "y", "dtype": "i32", "shape": [1]}],
         "outputs": ["logits"], "optimizer": OPT}
    d.update(extra)
    return d


def init_params(c, prefix, rng_seed=1):
    rng = np.random.default_rng(rng_seed)
    vals = {"w1": rng.uniform(-0.5, 0.5, (D, H)), "b1": rng.uniform(-0.5, 0.5, H),
            "w2": rng.uniform(-0.3, 0.3, (H, C)), "b2": np.zeros(C)}
    for k, v in vals.items():
        put(c, prefix + k, v)


def forward(params, x):
    h = np.maximum(x @ params["w1"] + params["b1"], 0)
    return h @ params["w2"] + params["b2"]


def ce(logits, y):
    m = logits.max(axis=1, keepdims=True)
    lse = (m + np.log(np.exp(logits - m).sum(axis=1, keepdims=True)))[:, 0]
    return float(np.mean(lse - logits[np.arange(len(y)), y]))


def fetch(c, prefix):
    return {k: get(c, prefix + k).astype(np.float64) for k in PARAMS}


def err_name(c, method, params):
    e, _ = c.call_full(method, params)
    return e["name"] if e else None


def expect_error(c, method, params, name, contains=None, label=""):
    e, _ = c.call_full(method, params)
    ok = e is not None and e["name"] == name and (contains is None or contains in e["message"])
    check(ok, "%s %s: want %s%s, got %r" % (method, label, name,
                                            " with '%s'" % contains if contains else "", e))


def test_steps(c, x, y):
    """Step counting and the bit-for-bit match with stateless train.step."""
    init_params(c, "m/")
    init_params(c, "s/")
    res = c.call("model.define", dict(definition("m/"), name="m"))
    check(res["step"] == 0 and res["state"] == [], "define: step 0, no state: %r" % res)
    check(len(res["params"]) == 4 and res["params"][0]["shape"] == [D, H], "define params %r" % res["params"])
    data = DATA
    for k in range(1, 4):
        r = c.call("train.step", {"model": "m", "data": data})
        check(r["step"] == k, "model step %d: result step %r" % (k, r["step"]))
        s = c.call("train.step", {"nodes": nodes("s/", "data/x", "data/y"), "loss": "loss", "params": ["s/" + p for p in PARAMS],
                                  "optimizer": OPT, "step": k})
        check(r["loss"] == s["loss"], "step %d: model loss %r, stateless %r" % (k, r["loss"], s["loss"]))
    check(c.call("model.stat", {"name": "m"})["step"] == 3, "count after 3 steps")
    for p in PARAMS + [p + ".exp_avg" for p in PARAMS] + [p + ".exp_avg_sq" for p in PARAMS]:
        a, b = get(c, "m/" + p), get(c, "s/" + p)
        check(a.tobytes() == b.tobytes(), "m/%s differs from the stateless path's s/%s" % (p, p))
    st = c.call("model.stat", {"name": "m"})
    check(sorted(st["state"]) == sorted("m/%s.%s" % (p, s) for p in PARAMS for s in ("exp_avg", "exp_avg_sq")),
          "state names %r" % st["state"])
    # An explicit step sets the count; the optimizer can be overridden per request.
    r = c.call("train.step", {"model": "m", "step": 10, "optimizer": {"type": "adam", "lr": 0.001}, "data": DATA})
    check(r["step"] == 10 and abs(r["lr"] - 0.001) < 1e-12, "explicit step/optimizer: %r" % r)
    check(c.call("model.stat", {"name": "m"})["step"] == 10, "count follows an explicit step")
    # Gradients only (an optimizer-less model) do not advance the count.
    g = definition("m/")
    del g["optimizer"]
    c.call("model.define", dict(g, name="g"))
    w = get(c, "m/w1").copy()
    r = c.call("train.step", {"model": "g", "grads": True, "data": DATA})
    check(r["step"] == 1 and r["lr"] == 0 and "m/w1.grad" in r["stored"], "gradients-only step %r" % r)
    check(c.call("model.stat", {"name": "g"})["step"] == 0, "a gradients-only step advanced the count")
    check(get(c, "m/w1").tobytes() == w.tobytes(), "a gradients-only step changed m/w1")
    c.call("model.delete", {"name": "g"})
    return data


def test_nan(c):
    """A NaN loss fails the step and leaves the count and the parameter alone."""
    put(c, "nw", np.ones((D, 1)))
    put(c, "data/xpos", np.ones((2, D)))
    c.call("model.define", {"name": "nanm", "params": ["nw"], "loss": "loss",
                            "inputs": [{"name": "x", "dtype": "f32", "shape": [2, D]}],
                            "optimizer": {"type": "sgd", "lr": 0.01},
                            "nodes": [{"id": "z", "op": "matmul", "inputs": ["x", "nw"]},
                                      {"id": "lz", "op": "log", "inputs": ["z"]},
                                      {"id": "loss", "op": "mean", "inputs": ["lz"]}]})
    r = c.call("train.step", {"model": "nanm", "data": {"x": "data/xpos"}})
    check(r["step"] == 1, "first step of nanm %r" % r)
    w = get(c, "nw").copy()
    put(c, "data/xneg", -np.ones((2, D)))
    e, _ = c.call_full("train.step", {"model": "nanm", "data": {"x": "data/xneg"}})
    check(e is not None and e["name"] == "FAILED_PRECONDITION" and "NaN" in e["message"], "NaN step error %r" % e)
    check(c.call("model.stat", {"name": "nanm"})["step"] == 1, "a NaN step moved the count")
    check(get(c, "nw").tobytes() == w.tobytes(), "a NaN step changed nw")
    r = c.call("train.step", {"model": "nanm", "data": {"x": "data/xpos"}})
    check(r["step"] == 2, "the step after a NaN one is 2: %r" % r["step"])
    c.call("model.delete", {"name": "nanm", "tensors": True})


def test_run(c):
    before = c.call("model.stat", {"name": "m"})["step"]
    msgid = c.request("train.run", {"model": "m", "data": DATA, "batch_size": 8,
                                    "epochs": 2, "eval": {"data": DATA, "metrics": ["acc"]}})
    first = None
    while True:
        msg = c.recv()
        if msg[0] == 2:
            if msg[1] == "train.progress" and first is None:
                first = msg[2][0]["step"]
            continue
        check(msg[1] == msgid and msg[2] is None, "train.run with model: %r" % (msg,))
        break
    check(first == before + 1, "train.run started at step %r, want %d" % (first, before + 1))
    check(c.call("model.stat", {"name": "m"})["step"] == before + 6, "train.run did not advance the count by 6")


def test_evaluate_predict(c, x, y):
    p = fetch(c, "m/")
    logits = forward(p, x.astype(np.float64))
    want_loss = ce(logits, y)
    want_acc = float(np.mean(logits.argmax(axis=1) == y))
    r = c.call("model.evaluate", {"model": "m", "data": DATA, "metrics": ["acc"]})
    check(abs(r["loss"] - want_loss) < 1e-4 * max(1, abs(want_loss)), "evaluate loss %r want %r" % (r["loss"], want_loss))
    check(abs(r["metrics"]["acc"] - want_acc) < 1e-6, "evaluate acc %r want %r" % (r["metrics"], want_acc))
    check(r["samples"] == N and r["batches"] == 1, "evaluate counts %r" % r)
    # Batches of 10, 10 and 4 rows: the row-weighted mean of batch means.
    rb = c.call("model.evaluate", {"model": "m", "data": DATA, "metrics": ["acc"],
                                   "batch_size": 10})
    parts = [(ce(logits[i:i + 10], y[i:i + 10]), len(y[i:i + 10])) for i in range(0, N, 10)]
    want_b = sum(v * n for v, n in parts) / N
    check(rb["batches"] == 3 and abs(rb["loss"] - want_b) < 1e-4, "batched evaluate %r want %r" % (rb, want_b))
    check(abs(rb["metrics"]["acc"] - want_acc) < 1e-6, "batched acc %r" % rb)
    vs = {t["name"]: t["version"] for t in c.call("tensor.list")["tensors"]}
    # predict: default outputs inline, without labels
    r = c.call("model.predict", {"model": "m", "inputs": {"x": "data/x"}})
    got = arr(r["outputs"]["logits"])
    check(got.shape == (N, C) and np.allclose(got, logits, rtol=1e-4, atol=1e-5), "predict logits differ")
    check(r["stored"] == {}, "predict stored %r" % r["stored"])
    r = c.call("model.predict", {"model": "m", "inputs": {"x": "data/x"}, "outputs": ["pred", "h"],
                                 "out": {"logits": "pred/logits"}})
    check(set(r["outputs"]) == {"pred", "h"} and list(r["stored"]) == ["pred/logits"], "predict %r" % r.keys())
    check(np.array_equal(arr(r["outputs"]["pred"]), logits.argmax(axis=1)), "predict pred differs")
    check(np.allclose(get(c, "pred/logits"), logits, rtol=1e-4, atol=1e-5), "stored logits differ")
    after = {t["name"]: t["version"] for t in c.call("tensor.list")["tensors"]}
    check(all(after[k] == v for k, v in vs.items()), "evaluate/predict changed a stored tensor")


def save(c, name):
    st = c.call("model.stat", {"name": name})
    tensors = {t: c.call("tensor.get", {"name": t}) for t in [p["name"] for p in st["params"]] + st["state"]}
    return st, tensors


def restore(c, name, st, tensors):
    for t, r in tensors.items():
        c.call("tensor.put", {"name": t, "dtype": r["dtype"], "shape": r["shape"], "data": r["data"]})
    return c.call("model.define", dict(st["definition"], name=name, step=st["step"]))


def test_save_restore(c):
    """Interrupted (save, delete, restore) and uninterrupted training agree bit for bit."""
    for prefix in ("a/", "u/"):
        init_params(c, prefix, rng_seed=7)
        c.call("model.define", dict(definition(prefix, optimizer={"type": "sgd", "lr": 0.1, "momentum": 0.9}),
                                    name=prefix[:-1]))
    for _ in range(3):
        c.call("train.step", {"model": "a", "data": DATA})
        c.call("train.step", {"model": "u", "data": DATA})
    st, tensors = save(c, "a")
    check(st["step"] == 3 and len(tensors) == 8, "saved %d tensors at step %r" % (len(tensors), st["step"]))
    r = c.call("model.delete", {"name": "a", "tensors": True})
    check(r["deleted"] is True and sorted(r["tensors"]) == sorted(tensors), "delete tensors %r" % r)
    check(err_name(c, "tensor.stat", {"name": "a/w1"}) == "NOT_FOUND", "a/w1 survived model.delete")
    check(err_name(c, "model.stat", {"name": "a"}) == "NOT_FOUND", "model a survived model.delete")
    res = restore(c, "a", st, tensors)
    check(res["step"] == 3 and len(res["state"]) == 4, "restored %r" % res["step"])
    for _ in range(3):
        ra = c.call("train.step", {"model": "a", "data": DATA})
        ru = c.call("train.step", {"model": "u", "data": DATA})
        check(ra["step"] == ru["step"] and ra["loss"] == ru["loss"], "after restore: %r vs %r" % (ra, ru))
    for p in PARAMS:
        for suffix in ("", ".momentum_buffer"):
            check(get(c, "a/" + p + suffix).tobytes() == get(c, "u/" + p + suffix).tobytes(),
                  "a/%s%s differs from uninterrupted training" % (p, suffix))


def test_registry(c):
    names = [m["name"] for m in c.call("model.list")["models"]]
    check(names == sorted(names) and {"m", "a", "u"} <= set(names), "model.list %r" % names)
    m = [x for x in c.call("model.list")["models"] if x["name"] == "m"][0]
    check(m["params"] == 4 and m["inputs"] == ["x", "y"] and m["loss"] == "loss" and m["optimizer"] == "adam",
          "list entry %r" % m)
    # replace keeps the name, resets the definition; the count comes from "step"
    r = c.call("model.define", dict(definition("u/"), name="u", replace=True, step=5))
    check(r["step"] == 5, "replace with step %r" % r["step"])
    c.call("model.delete", {"name": "u"})
    check(err_name(c, "tensor.stat", {"name": "u/w1"}) is None, "model.delete without tensors deleted u/w1")


def test_qualified_params(c):
    """Qualified names work in a model's params as everywhere (issue 31,
    item 6): the caller's own namespace written ~UID/ trains the same
    tensors, and its optimizer state lands beside them."""
    q = "~%d/" % os.getuid()
    init_params(c, "qp/")
    e, _ = c.call_full("model.define", dict(definition(q + "qp/"), name="qualified", replace=True))
    check(e is None, "model.define with params %sqp/w1...: %r" % (q, e))
    st = c.call("model.stat", {"name": "qualified"})
    check([p["name"] for p in st["params"]] == [q + "qp/" + p for p in PARAMS] and
          all(p["stored"] for p in st["params"]), "model.stat lists the qualified params: %r" % (st["params"],))
    before = get(c, "qp/w1").copy()
    c.call("train.step", {"model": "qualified", "data": DATA, "step": 1})
    check(not np.array_equal(get(c, "qp/w1"), before), "a step through the qualified names trains qp/w1")
    check(c.call("tensor.stat", {"name": "qp/w1.exp_avg"})["shape"] == list(before.shape),
          "its optimizer state is qp/w1.exp_avg")
    expect_error(c, "model.define", dict(definition("qp/"), name="bad", params=["~/w"]),
                 "INVALID_ARGUMENT", "params[0]", label="(an empty user)")
    # Errors name the model as the caller wrote it, not the daemon's key.
    expect_error(c, "train.step", {"model": "qualified", "data": {"nope": "data/x"}},
                 "INVALID_ARGUMENT", "is not an input of model 'qualified'", label="(a feed no input)")
    put(c, "qp/short_y", np.zeros(N - 1, np.int32), "i32")
    e, _ = c.call_full("train.run", {"model": "qualified", "data": {"x": "data/x", "y": "qp/short_y"},
                                     "batch_size": 4, "steps": 1})
    check(e is not None and e["name"] == "SHAPE_MISMATCH" and "'qp/short_y'" in e["message"] and
          "'data/x'" in e["message"] and "%d/" % os.getuid() not in e["message"],
          "rows that differ: the names as written: %r" % (e,))
    c.call("model.delete", {"name": "qualified"})


def test_replace_keeps_step(c):
    """model.define with replace keeps what is stored -- the parameters and
    their optimizer state -- and so the step count with them (issue 35: a
    re-run script's step 1 applied Adam's first bias correction to moments
    of many steps); an explicit step sets it."""
    init_params(c, "rk/")
    c.call("model.define", dict(definition("rk/"), name="rk"))
    for k in range(3):
        c.call("train.step", {"model": "rk", "data": DATA})
    again = c.call("model.define", dict(definition("rk/"), name="rk", replace=True))
    check(again["step"] == 3 and len(again["state"]) == 8,
          "replaced with its state kept: step %r, state %r" % (again["step"], again["state"]))
    r = c.call("train.step", {"model": "rk", "data": DATA})
    check(r["step"] == 4, "the next step is 4: %r" % r["step"])
    fresh = c.call("model.define", dict(definition("rk/"), name="rk", replace=True, step=0))
    check(fresh["step"] == 0, "an explicit step 0 is taken: %r" % fresh["step"])
    c.call("model.delete", {"name": "rk", "tensors": True})
    init_params(c, "rk/")
    new = c.call("model.define", dict(definition("rk/"), name="rk"))
    check(new["step"] == 0 and new["state"] == [], "no state: step 0 (%r)" % (new,))
    c.call("model.delete", {"name": "rk"})


def test_errors(c):
    d = definition("m/")
    base = dict(d, name="e")
    # model.define
    expect_error(c, "model.define", dict(d, name="m"), "ALREADY_EXISTS", "replace", "existing name")
    expect_error(c, "model.define", dict(d, name="bad name"), "INVALID_ARGUMENT", label="bad name")
    expect_error(c, "model.define", {"name": "e"}, "INVALID_ARGUMENT", "nodes", "no nodes")
    expect_error(c, "model.define", dict(base, nodes=[]), "INVALID_ARGUMENT", label="empty nodes")
    expect_error(c, "model.define", dict(base, nodes="x"), "INVALID_ARGUMENT", label="nodes a string")
    expect_error(c, "model.define", dict(base, nodes=[1, 2]), "INVALID_ARGUMENT", label="nodes not maps")
    expect_error(c, "model.define", dict(base, loss="nope"), "INVALID_ARGUMENT", "loss", "unknown loss")
    expect_error(c, "model.define", dict(base, loss="logits"), "INVALID_ARGUMENT", "scalar", "non-scalar loss")
    expect_error(c, "model.define", dict(base, params=["m/w1", "m/w1"]), "INVALID_ARGUMENT", "twice", "dup param")
    expect_error(c, "model.define", dict(base, params=["m/none"]), "NOT_FOUND", "m/none", "missing param")
    put(c, "yint", np.zeros(3), "i32")
    expect_error(c, "model.define", dict(base, params=["yint"]), "DTYPE_MISMATCH", label="int param")
    expect_error(c, "model.define", dict(base, params=[]), "INVALID_ARGUMENT", label="no params")
    expect_error(c, "model.define", dict(base, params=["m/w1"] * 300), "INVALID_ARGUMENT", label="300 params")
    expect_error(c, "model.define", dict(base, nodes=d["nodes"] + [{"op": "add", "inputs": ["x", "x"]}] * 4097),
                 "RESOURCE_EXHAUSTED", label="too many nodes")
    expect_error(c, "model.define", dict(base, nodes=[dict(d["nodes"][0], out="z")] + d["nodes"][1:]),
                 "INVALID_ARGUMENT", "out", "node with out")
    expect_error(c, "model.define", dict(base, inputs=[{"name": "x", "dtype": "f32", "shape": [1, D + 1]},
                                                       {"name": "y", "dtype": "i32", "shape": [1]}]),
                 "SHAPE_MISMATCH", label="input shape that does not fit")
    expect_error(c, "model.define", dict(base, inputs=["nostored"]), "INVALID_ARGUMENT", "nostored",
                 "input with no example")
    expect_error(c, "model.define", dict(base, inputs=[{"name": "x", "dtype": "f64", "shape": [1]}]),
                 "INVALID_ARGUMENT", "dtype", "bad input dtype")
    expect_error(c, "model.define", dict(base, inputs=[{"name": "x"}]), "INVALID_ARGUMENT", label="input no shape")
    expect_error(c, "model.define", dict(base, inputs=[7]), "INVALID_ARGUMENT", label="input a number")
    expect_error(c, "model.define", dict(base, inputs=["x"] * 9), "INVALID_ARGUMENT", label="9 inputs")
    expect_error(c, "model.define", dict(base, inputs=[{"name": "m/w1", "dtype": "f32", "shape": [1]}]),
                 "INVALID_ARGUMENT", "parameter", "input that is a param")
    expect_error(c, "model.define", dict(base, outputs=["nope"]), "INVALID_ARGUMENT", "nope", "unknown output")
    expect_error(c, "model.define", dict(base, optimizer={"type": "rmsprop"}), "INVALID_ARGUMENT",
                 label="unknown optimizer")
    expect_error(c, "model.define", dict(base, optimizer={"lr": -1}), "INVALID_ARGUMENT", label="negative lr")
    expect_error(c, "model.define", dict(base, step=1 << 40), "INVALID_ARGUMENT", "step", "huge step")
    expect_error(c, "model.define", dict(base, step=-1), "INVALID_ARGUMENT", label="negative step")
    expect_error(c, "model.define", dict(base, replace="yes"), "INVALID_ARGUMENT", label="replace a string")
    expect_error(c, "model.define", dict(base, bogus=1), "INVALID_ARGUMENT", "bogus", "unknown key")
    bad_nodes = d["nodes"][:5] + [{"id": "v", "op": "adam_m", "inputs": ["logits", "logits"]},
                                  {"id": "loss", "op": "sum", "inputs": ["v"]}]
    expect_error(c, "model.define", dict(base, nodes=bad_nodes), "INVALID_ARGUMENT", "node 5 'v' (adam_m)",
                 "non-differentiable op on a param path")
    check(err_name(c, "model.stat", {"name": "e"}) == "NOT_FOUND", "a refused define left a model")
    # model.stat / list / delete
    expect_error(c, "model.stat", {"name": "nope"}, "NOT_FOUND", "nope")
    expect_error(c, "model.stat", {}, "INVALID_ARGUMENT", label="no name")
    expect_error(c, "model.stat", {"name": 5}, "INVALID_ARGUMENT", label="name a number")
    expect_error(c, "model.list", {"prefix": "m"}, "INVALID_ARGUMENT", label="unknown key")
    expect_error(c, "model.delete", {"name": "nope"}, "NOT_FOUND")
    expect_error(c, "model.delete", {"name": "m", "tensors": 1}, "INVALID_ARGUMENT", label="tensors a number")
    # train.step / train.run with a model
    expect_error(c, "train.step", {"model": "nope"}, "NOT_FOUND", "nope")
    expect_error(c, "train.step", {"model": "m", "nodes": d["nodes"]}, "INVALID_ARGUMENT", "not both")
    expect_error(c, "train.step", {"model": "m", "data": {"z": "data/x"}}, "INVALID_ARGUMENT", "not an input")
    expect_error(c, "train.step", {"model": "m", "data": {"x": "nothere", "y": "data/y"}}, "NOT_FOUND", "nothere")
    expect_error(c, "train.step", {"model": "m", "data": {"x": "data/x"}}, "NOT_FOUND", "'y'", "labels not fed")
    expect_error(c, "train.step", {"model": "m", "data": {"x": "data/x", "y": "data/x"}}, "DTYPE_MISMATCH",
                 label="labels of the wrong dtype")
    expect_error(c, "train.step", {"model": "m", "data": []}, "INVALID_ARGUMENT", label="data an array")
    expect_error(c, "train.step", {}, "INVALID_ARGUMENT", "nodes", "neither model nor nodes")
    expect_error(c, "train.run", {"model": "nope", "data": DATA, "batch_size": 4}, "NOT_FOUND")
    expect_error(c, "train.run", {"model": "m", "data": {"q": "data/x"}, "batch_size": 4}, "INVALID_ARGUMENT",
                 "not an input")
    expect_error(c, "train.run", {"model": "m", "loss": "loss", "data": DATA, "batch_size": 4},
                 "INVALID_ARGUMENT", "not both")
    # model.evaluate
    ev = {"model": "m", "data": DATA}
    expect_error(c, "model.evaluate", dict(ev, model="nope"), "NOT_FOUND")
    expect_error(c, "model.evaluate", {"model": "m"}, "INVALID_ARGUMENT", "data")
    expect_error(c, "model.evaluate", dict(ev, data={}), "INVALID_ARGUMENT", label="empty data")
    expect_error(c, "model.evaluate", dict(ev, data={"x": "data/x"}), "NOT_FOUND", "'y'", "labels missing")
    expect_error(c, "model.evaluate", dict(ev, metrics=["nope"]), "INVALID_ARGUMENT", "nope", "unknown metric")
    expect_error(c, "model.evaluate", dict(ev, metrics=["logits"]), "INVALID_ARGUMENT", "scalar",
                 "non-scalar metric")
    expect_error(c, "model.evaluate", dict(ev, metrics="acc"), "INVALID_ARGUMENT", label="metrics a string")
    expect_error(c, "model.evaluate", dict(ev, batch_size=0), "INVALID_ARGUMENT", "batch_size")
    put(c, "yshort", np.zeros(N - 1), "i32")
    expect_error(c, "model.evaluate", dict(ev, data={"x": "data/x", "y": "yshort"}, batch_size=4), "SHAPE_MISMATCH",
                 label="rows that differ")
    # model.predict
    pr = {"model": "m", "inputs": {"x": "data/x"}}
    expect_error(c, "model.predict", dict(pr, model="nope"), "NOT_FOUND")
    expect_error(c, "model.predict", {"model": "m"}, "INVALID_ARGUMENT", "inputs")
    expect_error(c, "model.predict", dict(pr, inputs={"q": "x"}), "INVALID_ARGUMENT", "not an input")
    expect_error(c, "model.predict", dict(pr, outputs=["nope"]), "INVALID_ARGUMENT", "nope")
    expect_error(c, "model.predict", dict(pr, outputs=["loss"]), "NOT_FOUND", "'y'", "output needing labels")
    expect_error(c, "model.predict", dict(pr, outputs=[]), "INVALID_ARGUMENT", "nothing")
    expect_error(c, "model.predict", dict(pr, out={"logits": "bad name"}), "INVALID_ARGUMENT", label="bad out")
    expect_error(c, "model.predict", dict(pr, out={"logits": "m/w1"}), "INVALID_ARGUMENT", "parameter",
                 "out over a param")
    expect_error(c, "model.predict", dict(pr, out={"logits": 3}), "INVALID_ARGUMENT", label="out a number")
    put(c, "xwide", np.zeros((2, D + 2)))
    expect_error(c, "model.predict", dict(pr, inputs={"x": "x"}), "NOT_FOUND", "'x'", "input not stored")
    expect_error(c, "model.predict", dict(pr, inputs={"x": "xwide"}), "SHAPE_MISMATCH", label="wrong width")
    c.call("model.define", dict(definition("m/", outputs=[]), name="noout"))
    expect_error(c, "model.predict", {"model": "noout", "inputs": {"x": "data/x"}}, "INVALID_ARGUMENT", "outputs",
                 "no default outputs")
    c.call("model.delete", {"name": "noout"})


def main():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, D)).astype(np.float32)
    y = (np.abs(x[:, 0] * 2 + x[:, 1]).astype(np.int64) % C).astype(np.int32)
    with Daemon() as d:
        c = d.client()
        put(c, "data/x", x)
        put(c, "data/y", y, "i32")
        for name, fn in [("steps", lambda: test_steps(c, x, y)), ("nan", lambda: test_nan(c)),
                         ("run", lambda: test_run(c)), ("evaluate/predict", lambda: test_evaluate_predict(c, x, y)),
                         ("save/restore", lambda: test_save_restore(c)), ("registry", lambda: test_registry(c)),
                         ("qualified params", lambda: test_qualified_params(c)),
                         ("replace keeps step", lambda: test_replace_keeps_step(c)),
                         ("errors", lambda: test_errors(c))]:
            n = len(failures)
            try:
                fn()
            except RPCError as e:
                failures.append("%s: %s" % (name, e))
            print("%s %s" % ("ok  " if len(failures) == n else "FAIL", name))
        check(d.alive(), "tensord died")
    for f in failures:
        print("FAIL", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

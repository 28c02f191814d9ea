#!/usr/bin/python3
"""The conv1d, lstm and gru layers of model.define (docs/training.md, "A model
as layers"; issue 35), against NumPy references written here from torch's
definitions (torch itself is not needed):

  * conv1d: torch's Conv1d (cross-correlation, zero padding, stride), weight
    stored [out, in, k] as torch's; its nodes are views around conv2d;
  * lstm: torch's nn.LSTM equations, gates i f g o, c_t = f c + i g,
    h_t = o tanh(c_t); gru: torch's nn.GRU, gates r z n with r applied to
    (W_hn h + b_hn), h_t = (1 − z) n + z h; parameters weight_ih_l0,
    weight_hh_l0, bias_ih_l0, bias_hh_l0 in torch's shapes; output the h_t
    [N, T, H], or the last [N, H] with return_sequences false.

For each: parameter names, shapes and the default initialisation bounds;
forward outputs (model.predict) for parameters put by the test, with and
without bias; gradients (train.step grads) against float64 central finite
differences of the NumPy forward, and SGD steps against the same update in
NumPy (the gru case reads its input through an embedding, so the gradient
also flows into the sequence); a train.run; and the errors for bad shapes
and keys. Run with /usr/bin/python3; $TENSORD_BIN names the daemon."""
import math
import os
import sys

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))

import numpy as np  # noqa: E402

from daemon import Daemon  # noqa: E402
from test_layers import arr, get, put  # noqa: E402 - the same helpers

failures = []
NP = {"f32": np.float32, "i32": np.int32}


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL", what)


# ---------------------------------------------------------------- NumPy references (float64)

def sigmoid(v):
    return 1 / (1 + np.exp(-v))


def conv1d_np(x, w, b, stride=1, pad=0):
    n, _, length = x.shape
    o, _, k = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad)))
    lo = (length + 2 * pad - k) // stride + 1
    out = np.stack([np.einsum("nck,ock->no", xp[:, :, j * stride:j * stride + k], w) for j in range(lo)], 2)
    return out + (b[None, :, None] if b is not None else 0)


def lstm_np(x, p, seq=True):
    """torch.nn.LSTM(batch_first=True)'s output (or h_n[-1])."""
    wih, whh = p["weight_ih_l0"], p["weight_hh_l0"]
    bias = p.get("bias_ih_l0", 0) + p.get("bias_hh_l0", 0)
    n, t_len, _ = x.shape
    hid = whh.shape[1]
    h, c, out = np.zeros((n, hid)), np.zeros((n, hid)), []
    for t in range(t_len):
        g = x[:, t] @ wih.T + h @ whh.T + bias
        i, f = sigmoid(g[:, :hid]), sigmoid(g[:, hid:2 * hid])
        gg, o = np.tanh(g[:, 2 * hid:3 * hid]), sigmoid(g[:, 3 * hid:])
        c = f * c + i * gg
        h = o * np.tanh(c)
        out.append(h)
    return np.stack(out, 1) if seq else h


def gru_np(x, p, seq=True):
    """torch.nn.GRU(batch_first=True)'s output (or h_n[-1])."""
    wih, whh = p["weight_ih_l0"], p["weight_hh_l0"]
    bih, bhh = p.get("bias_ih_l0", 0), p.get("bias_hh_l0", 0)
    n, t_len, _ = x.shape
    hid = whh.shape[1]
    h, out = np.zeros((n, hid)), []
    for t in range(t_len):
        gi, gh = x[:, t] @ wih.T + bih, h @ whh.T + bhh
        r = sigmoid(gi[:, :hid] + gh[:, :hid])
        z = sigmoid(gi[:, hid:2 * hid] + gh[:, hid:2 * hid])
        nn_ = np.tanh(gi[:, 2 * hid:] + r * gh[:, 2 * hid:])
        h = (1 - z) * nn_ + z * h
        out.append(h)
    return np.stack(out, 1) if seq else h


def fd_grads(loss, params, eps=1e-6):
    """Central finite differences of loss(params) for every element."""
    grads = {}
    for k, v in params.items():
        g = np.zeros_like(v)
        for i in np.ndindex(v.shape):
            old = v[i]
            v[i] = old + eps
            hi = loss(params)
            v[i] = old - eps
            lo = loss(params)
            v[i] = old
            g[i] = (hi - lo) / (2 * eps)
        grads[k] = g
    return grads


def close(got, want, rtol, atol):
    return got.shape == want.shape and np.allclose(got, want, rtol=rtol, atol=atol)


def grads_and_sgd(c, model, params, loss, data, lr, what, steps=2):
    """train.step with grads (no update) against finite differences, then
    SGD steps against the same update in float64 NumPy."""
    p64 = {k: get(c, "%s/%s" % (model, k)).astype(np.float64) for k in params}
    r = c.call("train.step", {"model": model, "data": data, "grads": True, "apply": False})
    check(abs(r["loss"] - loss(p64)) < 1e-5 * max(1, abs(loss(p64))), "%s: loss %r, NumPy %r"
          % (what, r["loss"], loss(p64)))
    want = fd_grads(loss, p64)
    for k in params:
        got = get(c, "%s/%s.grad" % (model, k))
        check(close(got, want[k], 2e-3, 2e-5), "%s: d%s against finite differences: %g" % (
            what, k, np.abs(got - want[k]).max() if got.shape == want[k].shape else -1))
    for s in range(steps):
        g = fd_grads(loss, p64)
        r = c.call("train.step", {"model": model, "data": data})
        check(abs(r["loss"] - loss(p64)) < 1e-4 * max(1, abs(loss(p64))), "%s: step %d loss" % (what, s + 1))
        for k in params:
            p64[k] = p64[k] - lr * g[k]
    for k in params:
        got = get(c, "%s/%s" % (model, k))
        check(close(got, p64[k], 1e-4, 1e-5), "%s: %s after %d SGD steps: %g" % (
            what, k, steps, np.abs(got - p64[k]).max()))


def define(c, name, inputs, layers, loss, **kw):
    d = {"name": name, "inputs": [{"name": k, "dtype": dt, "shape": sh} for k, dt, sh in inputs],
         "layers": layers, "loss": loss, "seed": 1}
    d.update(kw)
    return c.call("model.define", d)


def refused(c, what, inputs, layers, words, code="INVALID_ARGUMENT"):
    err, _ = c.call_full("model.define", {"name": "bad", "inputs": [
        {"name": k, "dtype": dt, "shape": sh} for k, dt, sh in inputs], "layers": layers,
        "loss": {"type": "mse", "target": "x"}})
    check(err is not None and err["name"] == code and all(w in err["message"] for w in words),
          "%s refused naming %r: %r" % (what, words, err))


# ---------------------------------------------------------------- conv1d

def conv1d(c, rng):
    N, C, O, L, K = 4, 3, 5, 11, 3
    x = rng.standard_normal((N, C, L)).astype(np.float32)
    put(c, "c1x", x)
    # default initialisation: torch's bounds, weight [out, in, k]
    r = define(c, "c1i", [("x", "f32", [1, C, L])],
               [{"type": "conv1d", "in_channels": C, "out_channels": 16, "kernel_size": K}],
               "l", nodes=[{"id": "l", "op": "mean", "inputs": ["0"]}])
    check([(p["name"], p["shape"]) for p in r["parameters"]] == [("c1i/0.weight", [16, C, K]), ("c1i/0.bias", [16])],
          "conv1d parameters: %r" % (r["parameters"],))
    check([nd["id"] for nd in r["nodes"]][:4] == ["0/x4", "0/w4", "0/y4", "0"] and r["nodes"][2]["op"] == "conv2d",
          "conv1d nodes: %r" % ([nd["id"] for nd in r["nodes"]],))
    bound = 1 / math.sqrt(C * K)
    w = get(c, "c1i/0.weight")
    check(np.abs(w).max() <= bound + 1e-7 and np.abs(w).max() > 0.8 * bound, "conv1d weight U(±1/√(C·K))")
    check(np.abs(get(c, "c1i/0.bias")).max() <= bound + 1e-7, "conv1d bias U(±1/√(C·K))")
    # forward with the test's parameters (stored first, so kept), stride and padding, with and without bias
    for name, bias, stride, pad in (("c1a", True, 2, 1), ("c1b", False, 1, 0)):
        wt = rng.uniform(-0.5, 0.5, (O, C, K)).astype(np.float32)
        bt = rng.uniform(-0.5, 0.5, O).astype(np.float32)
        put(c, name + "/0.weight", wt)
        if bias:
            put(c, name + "/0.bias", bt)
        lo = (L + 2 * pad - K) // stride + 1
        y = rng.standard_normal((N, O, lo)).astype(np.float32)
        put(c, name + "y", y)
        layer = {"type": "conv1d", "in_channels": C, "out_channels": O, "kernel_size": K, "stride": stride,
                 "padding": pad, "bias": bias}
        define(c, name, [("x", "f32", [1, C, L]), ("y", "f32", [1, O, lo])], [layer],
               {"type": "mse", "target": "y"}, optimizer={"type": "sgd", "lr": 0.1})
        got = arr(c.call("model.predict", {"model": name, "inputs": {"x": "c1x"}})["outputs"]["0"])
        want = conv1d_np(x.astype(np.float64), wt.astype(np.float64), bt.astype(np.float64) if bias else None,
                         stride, pad)
        check(close(got, want, 1e-5, 1e-5), "conv1d forward (bias %s, stride %d, padding %d) vs NumPy: %s"
              % (bias, stride, pad, np.abs(got - want).max() if got.shape == want.shape else got.shape))
        params = ["0.weight", "0.bias"] if bias else ["0.weight"]
        x64, y64 = x.astype(np.float64), y.astype(np.float64)

        def loss(p, stride=stride, pad=pad):
            return float(np.mean((conv1d_np(x64, p["0.weight"], p.get("0.bias"), stride, pad) - y64) ** 2))
        grads_and_sgd(c, name, params, loss, {"x": "c1x", "y": name + "y"}, 0.1, "conv1d " + name)
    refused(c, "conv1d in_channels", [("x", "f32", [1, 2, L])],
            [{"type": "conv1d", "in_channels": 3, "out_channels": 2, "kernel_size": 3}], ["in_channels is 3", "2"])
    refused(c, "conv1d on [N, C, H, W]", [("x", "f32", [1, 3, 4, 4])],
            [{"type": "conv1d", "in_channels": 3, "out_channels": 2, "kernel_size": 3}], ["[N, C, L]"])
    refused(c, "conv1d without a declared shape", [("x", "f32", [1, 3])],
            [{"type": "conv1d", "in_channels": 3, "out_channels": 2, "kernel_size": 3}], ["[N, C, L]"])
    refused(c, "conv1d kernel past the length", [("x", "f32", [1, 3, 4])],
            [{"type": "conv1d", "in_channels": 3, "out_channels": 2, "kernel_size": 7, "padding": 1}],
            ["kernel 7", "length 4"])
    refused(c, "conv1d kernel_size 0", [("x", "f32", [1, 3, 8])],
            [{"type": "conv1d", "in_channels": 3, "out_channels": 2, "kernel_size": 0}], ["kernel_size"])


# ---------------------------------------------------------------- lstm and gru

def rnn_params(rng, kind, i_f, hid, bias=True, scale=0.5):
    g = (4 if kind == "lstm" else 3) * hid
    p = {"weight_ih_l0": rng.uniform(-scale, scale, (g, i_f)), "weight_hh_l0": rng.uniform(-scale, scale, (g, hid))}
    if bias:
        p["bias_ih_l0"] = rng.uniform(-scale, scale, g)
        p["bias_hh_l0"] = rng.uniform(-scale, scale, g)
    return {k: v.astype(np.float32) for k, v in p.items()}


def rnn_layout(c, kind, rng):
    """Names, shapes, default init, node ids, the output shapes."""
    T, I, H = 3, 5, 32
    G = (4 if kind == "lstm" else 3) * H
    r = define(c, kind + "i", [("x", "f32", [1, T, I])], [{"type": kind, "input_size": I, "hidden_size": H,
                                                           "name": "rnn"}],
               "l", nodes=[{"id": "l", "op": "mean", "inputs": ["rnn"]}])
    want = [("weight_ih_l0", [G, I]), ("weight_hh_l0", [G, H]), ("bias_ih_l0", [G]), ("bias_hh_l0", [G])]
    check([(p["name"], p["shape"]) for p in r["parameters"]] == [(kind + "i/rnn." + k, s) for k, s in want],
          "%s parameters (torch's names and shapes): %r" % (kind, r["parameters"]))
    bound = 1 / math.sqrt(H)
    for k, _ in want:
        v = get(c, kind + "i/rnn." + k)
        check(np.abs(v).max() <= bound + 1e-7 and np.abs(v).max() > 0.9 * bound and
              abs(float(v.std()) - bound / math.sqrt(3)) < 0.15 * bound, "%s %s ~ U(±1/√H)" % (kind, k))
    ids = [nd["id"] for nd in r["nodes"]]
    check(ids[-2] == "rnn" and r["nodes"][-2]["op"] == "concat" and "rnn/xp" in ids and "rnn/h2" in ids,
          "%s node ids: %r" % (kind, ids))
    # init overrides by torch's names
    define(c, kind + "z", [("x", "f32", [1, T, I])], [{"type": kind, "input_size": I, "hidden_size": 4,
                                                       "init": {"weight_hh_l0": "zeros"}}],
           "l", nodes=[{"id": "l", "op": "mean", "inputs": ["0"]}])
    check(not get(c, kind + "z/0.weight_hh_l0").any(), "%s init override weight_hh_l0 zeros" % kind)


def rnn_forward(c, kind, rng):
    """model.predict against NumPy: sequences and last, with and without bias,
    T = 1, 5 and 19 (a two-level concat tree)."""
    ref = lstm_np if kind == "lstm" else gru_np
    N, I, H = 3, 4, 6
    for T, bias, seq in ((5, True, True), (5, True, False), (19, True, True), (1, True, True), (4, False, True),
                         (3, False, False)):
        name = "%sf%d%s%s" % (kind, T, "b" if bias else "", "s" if seq else "")
        p = rnn_params(rng, kind, I, H, bias)
        for k, v in p.items():
            put(c, "%s/0.%s" % (name, k), v)
        x = rng.standard_normal((N, T, I)).astype(np.float32)
        put(c, name + "x", x)
        layer = {"type": kind, "input_size": I, "hidden_size": H}
        if not bias:
            layer["bias"] = False
        if not seq:
            layer["return_sequences"] = False
        r = define(c, name, [("x", "f32", [1, T, I])], [layer], "l",
                   nodes=[{"id": "l", "op": "mean", "inputs": ["0"]}])
        check(len(r["parameters"]) == (4 if bias else 2), "%s: %d parameters" % (name, len(r["parameters"])))
        got = arr(c.call("model.predict", {"model": name, "inputs": {"x": name + "x"}})["outputs"]["0"])
        want = ref(x.astype(np.float64), {k: v.astype(np.float64) for k, v in p.items()}, seq)
        check(close(got, want, 1e-5, 1e-5), "%s forward vs NumPy: %s" % (
            name, np.abs(got - want).max() if got.shape == want.shape else (got.shape, want.shape)))


def lstm_train(c, rng):
    """lstm [N, T, I] -> [N, T, H] with an mse loss: gradients, SGD steps."""
    N, T, I, H = 3, 4, 3, 4
    p = rnn_params(rng, "lstm", I, H)
    for k, v in p.items():
        put(c, "lt/0." + k, v)
    x = rng.standard_normal((N, T, I)).astype(np.float32)
    y = rng.uniform(-0.5, 0.5, (N, T, H)).astype(np.float32)
    put(c, "ltx", x)
    put(c, "lty", y)
    define(c, "lt", [("x", "f32", [1, T, I]), ("y", "f32", [1, T, H])],
           [{"type": "lstm", "input_size": I, "hidden_size": H}], {"type": "mse", "target": "y"},
           optimizer={"type": "sgd", "lr": 0.5})
    x64, y64 = x.astype(np.float64), y.astype(np.float64)

    def loss(q):
        return float(np.mean((lstm_np(x64, {k[2:]: v for k, v in q.items()}) - y64) ** 2))
    grads_and_sgd(c, "lt", ["0." + k for k in p], loss, {"x": "ltx", "y": "lty"}, 0.5, "lstm")


def gru_train(c, rng):
    """embedding -> gru (last step) with an mse loss: gradients of the gru's
    parameters and of the embedding (through the sequence), SGD steps."""
    N, T, V, I, H = 4, 5, 7, 3, 4
    p = rnn_params(rng, "gru", I, H)
    emb = rng.standard_normal((V, I)).astype(np.float32)
    for k, v in p.items():
        put(c, "gt/rnn." + k, v)
    put(c, "gt/emb.weight", emb)
    tok = rng.integers(0, V, (N, T)).astype(np.int32)
    y = rng.uniform(-0.5, 0.5, (N, H)).astype(np.float32)
    put(c, "gtx", tok)
    put(c, "gty", y)
    define(c, "gt", [("x", "i32", [1, T]), ("y", "f32", [1, H])],
           [{"type": "embedding", "num_embeddings": V, "embedding_dim": I, "name": "emb"},
            {"type": "gru", "input_size": I, "hidden_size": H, "return_sequences": False, "name": "rnn"}],
           {"type": "mse", "target": "y"}, optimizer={"type": "sgd", "lr": 0.5})
    y64 = y.astype(np.float64)

    def loss(q):
        x = q["emb.weight"][tok]
        return float(np.mean((gru_np(x, {k[4:]: v for k, v in q.items() if k.startswith("rnn.")}, False)
                              - y64) ** 2))
    grads_and_sgd(c, "gt", ["emb.weight"] + ["rnn." + k for k in p], loss, {"x": "gtx", "y": "gty"}, 0.5,
                  "gru")


def rnn_run(c, rng):
    """train.run of embedding -> lstm -> gru (last) -> linear classifiers: the
    loss falls and the steps are counted."""
    N, T, V = 32, 6, 5
    tok = rng.integers(0, V, (N, T)).astype(np.int32)
    put(c, "rrx", tok)
    put(c, "rry", (tok[:, 0] % 3).astype(np.int32))  # the class is in the first token: needs the memory
    define(c, "rr", [("x", "i32", [1, T]), ("y", "i32", [1])],
           [{"type": "embedding", "num_embeddings": V, "embedding_dim": 4},
            {"type": "lstm", "input_size": 4, "hidden_size": 8},
            {"type": "gru", "input_size": 8, "hidden_size": 8, "return_sequences": False},
            {"type": "linear", "in": 8, "out": 3}],
           {"type": "cross_entropy", "target": "y"}, optimizer={"type": "adam", "lr": 0.05})
    first = c.call("train.step", {"model": "rr", "data": {"x": "rrx", "y": "rry"}})["loss"]
    msgid = c.request("train.run", {"model": "rr", "data": {"x": "rrx", "y": "rry"}, "batch_size": 8,
                                    "epochs": 6})
    while True:
        msg = c.recv()
        if msg[0] == 1 and msg[1] == msgid:
            check(msg[2] is None, "train.run: %r" % (msg[2],))
            break
    st = c.call("model.stat", {"name": "rr"})
    check(st["step"] == 1 + 6 * 4, "train.run steps counted: %r" % st["step"])
    last = c.call("train.step", {"model": "rr", "data": {"x": "rrx", "y": "rry"}, "apply": False})["loss"]
    check(math.isfinite(last) and last < first * 0.8, "train.run lowers the loss: %r -> %r" % (first, last))


def rnn_errors(c):
    for kind in ("lstm", "gru"):
        layer = {"type": kind, "input_size": 4, "hidden_size": 8}
        refused(c, kind + " T past the limit", [("x", "f32", [1, 65, 4])], [layer], ["T is 65", "1 to 64"])
        refused(c, kind + " without T", [("x", "f32", [1, 4])], [layer], ["[N, T, 4]", "T known"])
        refused(c, kind + " on rank 4", [("x", "f32", [1, 2, 3, 4])], [layer], ["[N, T, 4]"])
        refused(c, kind + " input_size", [("x", "f32", [1, 5, 3])], [layer], ["input_size is 4", "last dim is 3"])
        refused(c, kind + " batch_first false", [("x", "f32", [1, 5, 4])], [dict(layer, batch_first=False)],
                ["batch_first"])
        refused(c, kind + " hidden_size 0", [("x", "f32", [1, 5, 4])], [dict(layer, hidden_size=0)],
                ["hidden_size"])
        refused(c, kind + " num_layers", [("x", "f32", [1, 5, 4])], [dict(layer, num_layers=2)], ["num_layers"])
        refused(c, kind + " init of a bias it does not have", [("x", "f32", [1, 5, 4])],
                [dict(layer, bias=False, init={"bias_ih_l0": "zeros"})], ["bias_ih_l0"])


def main():
    rng = np.random.default_rng(0)
    with Daemon() as d:
        c = d.client()
        conv1d(c, rng)
        for kind in ("lstm", "gru"):
            rnn_layout(c, kind, rng)
            rnn_forward(c, kind, rng)
        lstm_train(c, rng)
        gru_train(c, rng)
        rnn_run(c, rng)
        rnn_errors(c)
    if failures:
        print("%d failure(s)" % len(failures))
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()

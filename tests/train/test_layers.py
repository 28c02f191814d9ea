#!/usr/bin/python3
"""The layer form of model.define (docs/training.md, "A model as layers").

For three models — an MLP with dropout, a small CNN (conv2d, batch_norm,
max_pool2d, flatten, linear) and a one-block causal transformer on token ids
(embedding, transformer_block, layer_norm, linear) — the layer model and the
same model written here by hand as graph nodes (docs/training.md's expansion
table; the dropout seeds computed here from the documented formula), with the
layer model's initial parameters copied in, give bit-identical losses,
parameters and batch_norm running statistics over train.step and train.run
steps. A NumPy forward pass of each trained layer model from its stored
parameters (torch's names and layouts: linear x @ W.T + b, conv2d weight
[out, in, kh, kw], embedding [V, D], heads split from q/k/v) matches
model.predict, and model.stat shows the layers, the parameter count and the
parameters with their layers.

Run with /usr/bin/python3; $TENSORD_BIN names the daemon."""
import math
import os
import sys

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))

import numpy as np  # noqa: E402

from daemon import Daemon  # noqa: E402

failures = []
M64 = (1 << 64) - 1


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL", what)


def mix(z):
    z ^= z >> 30
    z = (z * 0xbf58476d1ce4e5b9) & M64
    z ^= z >> 27
    z = (z * 0x94d049bb133111eb) & M64
    return z ^ (z >> 31)


def layer_seed(seed, name):
    """docs/training.md, "Initialisers": FNV-1a of the name, splitmix64."""
    h = 0xcbf29ce484222325
    for ch in name.encode():
        h = ((h ^ ch) * 0x100000001b3) & M64
    return mix(seed ^ mix(h)) >> 1


NP = {"f32": np.float32, "i32": np.int32}


def put(c, name, a):
    dt = "i32" if a.dtype == np.int32 else "f32"
    c.call("tensor.put", {"name": name, "dtype": dt, "shape": list(a.shape), "data": a.tobytes()})


def get(c, name):
    r = c.call("tensor.get", {"name": name})
    return np.frombuffer(r["data"], NP[r["dtype"]]).reshape(r["shape"])


def arr(out):
    return np.frombuffer(out["data"], NP[out["dtype"]]).reshape(out["shape"])


def n(i, op, inputs, **attrs):
    d = {"id": i, "op": op, "inputs": inputs}
    if attrs:
        d["attrs"] = attrs
    return d


def lin(i, x, w, b):
    return [n(i + "_mm", "matmul", [x, w], transpose_b=True), n(i, "add", [i + "_mm", b])]


def train_both(c, a, b, data, steps, run_rows, what):
    """Train model a and b alike; their losses must be equal bit for bit."""
    for s in range(steps):
        la = c.call("train.step", {"model": a, "data": data})["loss"]
        lb = c.call("train.step", {"model": b, "data": data})["loss"]
        check(la == lb, "%s: step %d loss %r != %r" % (what, s + 1, la, lb))
        check(math.isfinite(la), "%s: loss finite" % what)
    for m in (a, b):
        msgid = c.request("train.run", {"model": m, "data": data, "batch_size": run_rows, "epochs": 1})
        while True:
            msg = c.recv()
            if msg[0] == 1 and msg[1] == msgid:
                check(msg[2] is None, "%s: train.run %s: %r" % (what, m, msg[2]))
                break
    sa, sb = c.call("model.stat", {"name": a}), c.call("model.stat", {"name": b})
    check(sa["step"] == sb["step"] > steps, "%s: steps %r %r" % (what, sa["step"], sb["step"]))


def copy_params(c, pairs):
    for src, dst in pairs:
        put(c, dst, get(c, src).copy())


def same_tensors(c, pairs, what):
    for src, dst in pairs:
        x, y = get(c, src), get(c, dst)
        check(x.shape == y.shape and x.tobytes() == y.tobytes(), "%s: %s != %s bit for bit" % (what, src, dst))


# ---------------------------------------------------------------- MLP

def mlp(c, rng):
    N, D, H, C = 16, 12, 16, 3
    x = rng.standard_normal((N, D)).astype(np.float32)
    y = rng.integers(0, C, N).astype(np.int32)
    put(c, "mx", x)
    put(c, "my", y)
    inputs = [{"name": "x", "dtype": "f32", "shape": [1, D]}, {"name": "y", "dtype": "i32", "shape": [1]}]
    layers = [{"type": "linear", "in": D, "out": H}, {"type": "relu"}, {"type": "dropout", "p": 0.25},
              {"type": "linear", "in": H, "out": C, "name": "head"}]
    opt = {"type": "adam", "lr": 0.01}
    r = c.call("model.define", {"name": "mlp", "inputs": inputs, "layers": layers, "seed": 3,
                                "loss": {"type": "cross_entropy", "target": "y"}, "optimizer": opt})
    # model.stat: layers as given, parameters in definition order, count
    names = ["mlp/0.weight", "mlp/0.bias", "mlp/head.weight", "mlp/head.bias"]
    check(r["layers"] == layers, "stat layers: %r" % (r["layers"],))
    check([p["name"] for p in r["parameters"]] == names, "parameter names: %r" % (r["parameters"],))
    check([p["shape"] for p in r["parameters"]] == [[H, D], [H], [C, H], [C]], "torch's layouts")
    check([p["layer"] for p in r["parameters"]] == ["0", "0", "head", "head"], "parameter layers")
    check(r["param_count"] == H * D + H + C * H + C, "param_count %r" % r["param_count"])
    check(r["definition"]["layers"] == layers and "nodes" not in r["definition"], "definition as given")
    check(r["outputs"] == ["head"], "default outputs: the stack's output: %r" % (r["outputs"],))
    check([nd["id"] for nd in r["nodes"]][-1] == "loss" and r["nodes"][-2]["id"] == "head", "node ids are paths")
    hand = (lin("a", "x", "hm/w1", "hm/b1") + [n("r", "relu", ["a"]),
            n("d", "dropout", ["r"], p=0.25, seed=layer_seed(3, "2"))] + lin("o", "d", "hm/w2", "hm/b2") +
            [n("loss", "cross_entropy", ["o", "y"], reduction="mean")])
    pairs = list(zip(names, ["hm/w1", "hm/b1", "hm/w2", "hm/b2"]))
    copy_params(c, pairs)
    c.call("model.define", {"name": "hm", "inputs": inputs, "nodes": hand, "loss": "loss",
                            "params": [p for _, p in pairs], "outputs": ["o"], "optimizer": opt})
    train_both(c, "mlp", "hm", {"x": "mx", "y": "my"}, 3, 4, "mlp")
    same_tensors(c, pairs, "mlp")
    # NumPy forward (eval: dropout off) from the stored weights, torch's layout
    w1, b1, w2, b2 = (get(c, p) for p in names)
    want = np.maximum(x @ w1.T + b1, 0) @ w2.T + b2
    got = arr(c.call("model.predict", {"model": "mlp", "inputs": {"x": "mx"}})["outputs"]["head"])
    check(np.allclose(got, want, rtol=1e-5, atol=1e-5), "mlp forward vs NumPy: %g" % np.abs(got - want).max())


def leaky_identity(c, rng):
    """leaky_relu (negative_slope, torch's default 0.01) and identity
    layers (issue 35): their nodes, the forward against NumPy, a training
    step, a slope out of 0..1 refused."""
    x = rng.standard_normal((8, 6)).astype(np.float32)
    put(c, "lx", x)
    put(c, "ly", rng.integers(0, 4, 8).astype(np.int32))
    inputs = [{"name": "x", "dtype": "f32", "shape": [1, 6]}, {"name": "y", "dtype": "i32", "shape": [1]}]
    layers = [{"type": "linear", "in": 6, "out": 5}, {"type": "leaky_relu", "negative_slope": 0.2},
              {"type": "identity"}, {"type": "linear", "in": 5, "out": 4, "name": "head"}, {"type": "leaky_relu"}]
    r = c.call("model.define", {"name": "lk", "inputs": inputs, "layers": layers, "seed": 1,
                                "loss": {"type": "cross_entropy", "target": "y"}, "optimizer": {"type": "sgd", "lr": 0.1}})
    ids = [nd["id"] for nd in r["nodes"]]
    check(ids[:8] == ["0/mm", "0", "1/neg", "1", "2", "head/mm", "head", "4/neg"], "leaky/identity nodes: %r" % (ids,))
    w1, b1, w2, b2 = (get(c, "lk/" + p) for p in ("0.weight", "0.bias", "head.weight", "head.bias"))

    def leaky(v, s):
        return np.where(v > 0, v, s * v)

    want = leaky(leaky(x @ w1.T + b1, 0.2) @ w2.T + b2, 0.01)
    got = arr(c.call("model.predict", {"model": "lk", "inputs": {"x": "lx"}})["outputs"]["4"])
    check(np.allclose(got, want, rtol=1e-5, atol=1e-6), "leaky_relu/identity forward vs NumPy: %g" % np.abs(got - want).max())
    loss = c.call("train.step", {"model": "lk", "data": {"x": "lx", "y": "ly"}})["loss"]
    check(math.isfinite(loss), "they train: %r" % loss)
    err, _ = c.call_full("model.define", {"name": "lk2", "inputs": inputs, "layers": [
        {"type": "leaky_relu", "negative_slope": 1.5}], "loss": {"type": "mse", "target": "x"}})
    check(err and err["name"] == "INVALID_ARGUMENT" and "negative_slope" in err["message"],
          "a slope past 1 refused: %r" % (err,))


def bce_loss(c, rng):
    """The layer form's loss {"type": "bce_with_logits"} (issue 35): torch's
    BCEWithLogitsLoss on the stack's output, against NumPy."""
    x = rng.standard_normal((8, 6)).astype(np.float32)
    t = rng.integers(0, 2, (8, 1)).astype(np.float32)
    put(c, "bx", x)
    put(c, "bt", t)
    r = c.call("model.define", {"name": "bce", "seed": 2,
                                "inputs": [{"name": "x", "dtype": "f32", "shape": [1, 6]},
                                           {"name": "t", "dtype": "f32", "shape": [1, 1]}],
                                "layers": [{"type": "linear", "in": 6, "out": 1}],
                                "loss": {"type": "bce_with_logits", "target": "t", "reduction": "sum"},
                                "optimizer": {"type": "sgd", "lr": 0.1}})
    check(r["nodes"][-1]["op"] == "binary_cross_entropy_with_logits", "the op: %r" % (r["nodes"][-1],))
    z = x @ get(c, "bce/0.weight").T + get(c, "bce/0.bias")
    want = float(np.sum(np.maximum(z, 0) - z * t + np.log1p(np.exp(-np.abs(z)))))
    got = c.call("train.step", {"model": "bce", "data": {"x": "bx", "t": "bt"}})["loss"]
    check(abs(got - want) < 1e-4 * max(1, abs(want)), "bce_with_logits loss %r against NumPy %r" % (got, want))


def pos_embedding(c, rng):
    """pos_embedding (learned positions, GPT's; issues 32 and 35): weight
    [max_len, dim] N(0, 0.02), the first T rows added to every sequence;
    forward against NumPy; training; T past max_len refused."""
    B, T, V, D = 3, 5, 11, 8
    x = rng.integers(0, V, (B, T)).astype(np.int32)
    put(c, "px", x)
    put(c, "py", rng.integers(0, V, (B, T)).astype(np.int32))
    inputs = [{"name": "x", "dtype": "i32", "shape": [1, T]}, {"name": "y", "dtype": "i32", "shape": [1, T]}]
    layers = [{"type": "embedding", "num_embeddings": V, "embedding_dim": D, "name": "tok"},
              {"type": "pos_embedding", "max_len": 16, "dim": D, "name": "pos"},
              {"type": "linear", "in": D, "out": V, "name": "head"}]
    r = c.call("model.define", {"name": "pe", "inputs": inputs, "layers": layers, "seed": 4,
                                "loss": {"type": "cross_entropy", "target": "y"}, "optimizer": {"type": "adam", "lr": 0.01}})
    check([p["shape"] for p in r["parameters"] if p["name"] == "pe/pos.weight"] == [[16, D]], "pos.weight [16, 8]")
    emb, pos, w, b = (get(c, "pe/" + p) for p in ("tok.weight", "pos.weight", "head.weight", "head.bias"))
    check(0.01 < float(pos.std()) < 0.03, "pos.weight ~ N(0, 0.02): std %g" % float(pos.std()))
    want = (emb[x] + pos[:T]) @ w.T + b
    got = arr(c.call("model.predict", {"model": "pe", "inputs": {"x": "px"}})["outputs"]["head"])
    check(got.shape == (B, T, V) and np.allclose(got, want, rtol=1e-5, atol=1e-5),
          "pos_embedding forward vs NumPy: %g" % np.abs(got - want).max())
    loss = c.call("train.step", {"model": "pe", "data": {"x": "px", "y": "py"}})["loss"]
    check(math.isfinite(loss), "it trains: %r" % loss)
    err, _ = c.call_full("model.define", {"name": "pe2", "inputs": inputs, "layers": [
        layers[0], dict(layers[1], max_len=4)], "loss": {"type": "cross_entropy", "target": "y"}})
    check(err and err["name"] == "INVALID_ARGUMENT" and "max_len" in err["message"], "T past max_len: %r" % (err,))


# ---------------------------------------------------------------- CNN

def conv2d_np(x, w, b, pad):
    N, C, H, W = x.shape
    O, _, KH, KW = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    out = np.zeros((N, O, H + 2 * pad - KH + 1, W + 2 * pad - KW + 1))
    for i in range(KH):
        for j in range(KW):
            patch = xp[:, :, i:i + out.shape[2], j:j + out.shape[3]]
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j])
    return out + b[None, :, None, None]


def cnn(c, rng):
    N = 8
    x = rng.standard_normal((N, 2, 6, 6)).astype(np.float32)
    y = rng.integers(0, 3, N).astype(np.int32)
    put(c, "cx", x)
    put(c, "cy", y)
    inputs = [{"name": "x", "dtype": "f32", "shape": [1, 2, 6, 6]}, {"name": "y", "dtype": "i32", "shape": [1]}]
    layers = [{"type": "conv2d", "in_channels": 2, "out_channels": 4, "kernel_size": 3, "padding": 1},
              {"type": "batch_norm", "num_features": 4, "name": "bn"}, {"type": "relu"},
              {"type": "max_pool2d", "kernel_size": 2}, {"type": "flatten"},
              {"type": "linear", "in": 36, "out": 3, "name": "fc"}]
    opt = {"type": "sgd", "lr": 0.05, "momentum": 0.9}
    r = c.call("model.define", {"name": "cnn", "inputs": inputs, "layers": layers, "seed": 5,
                                "loss": {"type": "cross_entropy", "target": "y"}, "optimizer": opt})
    names = ["cnn/0.weight", "cnn/0.bias", "cnn/bn.weight", "cnn/bn.bias", "cnn/fc.weight", "cnn/fc.bias"]
    check([p["name"] for p in r["parameters"]] == names, "cnn names: %r" % (r["parameters"],))
    check(r["parameters"][0]["shape"] == [4, 2, 3, 3], "conv2d weight [out, in, kh, kw]")
    check(sorted(r["state"]) == ["cnn/bn.running_mean", "cnn/bn.running_var"], "bn buffers are state: %r"
          % (r["state"],))
    check(get(c, "cnn/bn.running_var").tolist() == [1, 1, 1, 1] and get(c, "cnn/bn.weight").tolist() == [1] * 4,
          "batch_norm initialised as torch")
    hand = [n("cv", "conv2d", ["x", "hc/cw", "hc/cb"], stride=[1, 1], padding=[1, 1]),
            n("bn", "batch_norm", ["cv", "hc/rm", "hc/rv", "hc/bw", "hc/bb"], eps=1e-5),
            n("r", "relu", ["bn"]), n("p", "max_pool2d", ["r"], kernel_size=[2, 2], stride=[2, 2]),
            n("f", "reshape", ["p"], shape=[-1, 36])] + lin("o", "f", "hc/fw", "hc/fb") + [
            n("loss", "cross_entropy", ["o", "y"], reduction="mean")]
    pairs = list(zip(names, ["hc/cw", "hc/cb", "hc/bw", "hc/bb", "hc/fw", "hc/fb"]))
    bufs = [("cnn/bn.running_mean", "hc/rm"), ("cnn/bn.running_var", "hc/rv")]
    copy_params(c, pairs + bufs)
    c.call("model.define", {"name": "hc", "inputs": inputs, "nodes": hand, "loss": "loss",
                            "params": [p for _, p in pairs], "state": [{"node": "bn", "momentum": 0.1}],
                            "outputs": ["o"], "optimizer": opt})
    train_both(c, "cnn", "hc", {"x": "cx", "y": "cy"}, 3, 4, "cnn")
    same_tensors(c, pairs + bufs, "cnn")
    check(get(c, "cnn/bn.running_var").tolist() != [1, 1, 1, 1], "running statistics updated")
    cw, cb, bw, bb, fw, fb = (get(c, p) for p in names)
    rm, rv = get(c, "cnn/bn.running_mean"), get(c, "cnn/bn.running_var")
    h = conv2d_np(x, cw, cb, 1)
    h = (h - rm[None, :, None, None]) / np.sqrt(rv[None, :, None, None] + 1e-5) * bw[None, :, None, None] \
        + bb[None, :, None, None]
    h = np.maximum(h, 0).reshape(N, 4, 3, 2, 3, 2).max(axis=(3, 5)).reshape(N, 36)
    want = h @ fw.T + fb
    got = arr(c.call("model.predict", {"model": "cnn", "inputs": {"x": "cx"}})["outputs"]["fc"])
    check(np.allclose(got, want, rtol=1e-4, atol=1e-4), "cnn forward vs NumPy: %g" % np.abs(got - want).max())


# ---------------------------------------------------------------- transformer

T, V, D, HEADS = 6, 11, 8, 2


def hand_block(p, fused):
    """One pre-norm causal block by hand (docs/training.md's expansion: the
    fused attention op, or with `fused: false` the unfused ops)."""
    hd = D // HEADS
    nodes = [n("e", "embedding", [p + "emb", "x"]),
             n("ln1", "layer_norm", ["e", p + "ln1w", p + "ln1b"], eps=1e-5, ndim=1)]
    for q in "qkv":
        nodes += lin(q, "ln1", p + q + "w", p + q + "b")
        nodes += [n(q + "4", "reshape", [q], shape=[-1, T, HEADS, hd]),
                  n(q + "p", "permute", [q + "4"], dims=[0, 2, 1, 3]),
                  n(q + "3", "reshape", [q + "p"], shape=[-1, T, hd])]
    if fused:
        nodes += [n("c3", "attention", ["q3", "k3", "v3"], causal=True)]
    else:
        nodes += [n("s", "bmm", ["q3", "k3"], transpose_b=True), n("ss", "mul", ["s"], scalar=1 / math.sqrt(hd)),
                  n("one", "ones", [], shape=[T, T], dtype="u8"), n("mask", "triu", ["one"], diagonal=1),
                  n("mf", "masked_fill", ["ss", "mask"], value=float("-inf")), n("att", "softmax", ["mf"], axis=-1),
                  n("c3", "bmm", ["att", "v3"])]
    nodes += [n("c4", "reshape", ["c3"], shape=[-1, HEADS, T, hd]),
              n("cp", "permute", ["c4"], dims=[0, 2, 1, 3]), n("cx", "reshape", ["cp"], shape=[-1, T, D])]
    nodes += lin("ao", "cx", p + "ow", p + "ob")
    nodes += [n("r1", "add", ["e", "ao"]), n("ln2", "layer_norm", ["r1", p + "ln2w", p + "ln2b"], eps=1e-5, ndim=1)]
    nodes += lin("f1", "ln2", p + "f1w", p + "f1b") + [n("g", "gelu", ["f1"])] + lin("f2", "g", p + "f2w", p + "f2b")
    nodes += [n("r2", "add", ["r1", "f2"]), n("lnf", "layer_norm", ["r2", p + "lnw", p + "lnb"], eps=1e-5, ndim=1)]
    nodes += lin("logits", "lnf", p + "hw", p + "hb")
    nodes += [n("l2", "reshape", ["logits"], shape=[-1, V]), n("t1", "reshape", ["y"], shape=[-1]),
              n("loss", "cross_entropy", ["l2", "t1"], reduction="mean")]
    return nodes


def ln_np(x, w, b):
    x = x.astype(np.float64)
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * w + b


def transformer_np(c, x, m="tf"):
    g = {k: get(c, m + "/" + k).astype(np.float64) for k in (
        "0.weight", "blk.ln1.weight", "blk.ln1.bias", "blk.attn.q.weight", "blk.attn.q.bias", "blk.attn.k.weight",
        "blk.attn.k.bias", "blk.attn.v.weight", "blk.attn.v.bias", "blk.attn.out.weight", "blk.attn.out.bias",
        "blk.ln2.weight", "blk.ln2.bias", "blk.mlp.fc1.weight", "blk.mlp.fc1.bias", "blk.mlp.fc2.weight",
        "blk.mlp.fc2.bias", "2.weight", "2.bias", "head.weight", "head.bias")}
    B, hd = x.shape[0], D // HEADS
    e = g["0.weight"][x]
    h = ln_np(e, g["blk.ln1.weight"], g["blk.ln1.bias"])

    def heads(t):
        return t.reshape(B, T, HEADS, hd).transpose(0, 2, 1, 3)
    q, k, v = (heads(h @ g["blk.attn.%s.weight" % s].T + g["blk.attn.%s.bias" % s]) for s in "qkv")
    s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(hd)
    s = np.where(np.triu(np.ones((T, T)), 1) > 0, -np.inf, s)
    a = np.exp(s - s.max(-1, keepdims=True))
    a /= a.sum(-1, keepdims=True)
    ctx = (a @ v).transpose(0, 2, 1, 3).reshape(B, T, D)
    r1 = e + ctx @ g["blk.attn.out.weight"].T + g["blk.attn.out.bias"]
    f = ln_np(r1, g["blk.ln2.weight"], g["blk.ln2.bias"]) @ g["blk.mlp.fc1.weight"].T + g["blk.mlp.fc1.bias"]
    f = 0.5 * f * (1 + np.vectorize(math.erf)(f / math.sqrt(2)))
    r2 = r1 + f @ g["blk.mlp.fc2.weight"].T + g["blk.mlp.fc2.bias"]
    return ln_np(r2, g["2.weight"], g["2.bias"]) @ g["head.weight"].T + g["head.bias"]


def transformer(c, rng, fused):
    """The layer model against the hand-written graph, bit for bit: the
    fused attention op, or with the layer's `fused: false` the unfused
    ops."""
    B = 4
    tf, ht = ("tf", "ht") if fused else ("tfu", "htu")
    x = rng.integers(0, V, (B, T)).astype(np.int32)
    y = rng.integers(0, V, (B, T)).astype(np.int32)
    put(c, "tx", x)
    put(c, "ty", y)
    inputs = [{"name": "x", "dtype": "i32", "shape": [1, T]}, {"name": "y", "dtype": "i32", "shape": [1, T]}]
    blk = {"type": "transformer_block", "dim": D, "heads": HEADS, "causal": True, "hidden": 16, "name": "blk"}
    blk["fused"] = fused
    layers = [{"type": "embedding", "num_embeddings": V, "embedding_dim": D}, blk,
              {"type": "layer_norm", "normalized_shape": D}, {"type": "linear", "in": D, "out": V, "name": "head"}]
    opt = {"type": "adamw", "lr": 0.01, "weight_decay": 0.01}
    r = c.call("model.define", {"name": tf, "inputs": inputs, "layers": layers, "seed": 7,
                                "loss": {"type": "cross_entropy", "target": "y"}, "optimizer": opt})
    check(any(nd["op"] == "attention" for nd in r["nodes"]) == fused, "fused %s: the attention op" % fused)
    got_names = [p["name"] for p in r["parameters"]]
    mine = ["emb", "ln1w", "ln1b", "qw", "qb", "kw", "kb", "vw", "vb", "ow", "ob", "ln2w", "ln2b", "f1w", "f1b",
            "f2w", "f2b", "lnw", "lnb", "hw", "hb"]
    check(len(got_names) == len(mine) and got_names[3] == tf + "/blk.attn.q.weight" and
          got_names[13] == tf + "/blk.mlp.fc1.weight", "transformer names: %r" % (got_names,))
    check(r["parameters"][13]["shape"] == [16, D], "fc1 weight [hidden, dim]")
    pairs = [(a, ht + "/" + b) for a, b in zip(got_names, mine)]
    copy_params(c, pairs)
    c.call("model.define", {"name": ht, "inputs": inputs, "nodes": hand_block(ht + "/", fused), "loss": "loss",
                            "params": [p for _, p in pairs], "outputs": ["logits"], "optimizer": opt})
    train_both(c, tf, ht, {"x": "tx", "y": "ty"}, 3, 2, "transformer")
    same_tensors(c, pairs, "transformer")
    want = transformer_np(c, x, tf)
    got = arr(c.call("model.predict", {"model": tf, "inputs": {"x": "tx"}})["outputs"]["head"])
    check(got.shape == (B, T, V) and np.allclose(got, want, rtol=1e-4, atol=1e-4),
          "transformer forward vs NumPy: %g" % np.abs(got - want).max())

# ---------------------------------------------------------------- the rest

def every_type(c, rng):
    """The other layer types and keys, nested, with a raw node reading a
    layer path: each expands, trains to a finite loss and predicts."""
    put(c, "ax", rng.standard_normal((4, 2, 8, 8)).astype(np.float32))
    put(c, "ay", rng.integers(0, 5, 4).astype(np.int32))
    layers = [{"type": "conv2d", "in_channels": 2, "out_channels": 3, "kernel_size": [3, 3], "stride": 1,
               "padding": [1, 1], "bias": False},
              {"type": "avg_pool2d", "kernel_size": 2, "stride": 2}, {"type": "silu"}, {"type": "flatten"},
              {"type": "sequential", "name": "body", "layers": [
                  {"type": "linear", "in": 48, "out": 16, "bias": False}, {"type": "tanh"},
                  {"type": "residual", "name": "res", "layers": [
                      {"type": "rms_norm", "normalized_shape": 16}, {"type": "linear", "in": 16, "out": 16},
                      {"type": "gelu", "approximate": "tanh"}]},
                  {"type": "sigmoid"}, {"type": "layer_norm", "normalized_shape": 16, "eps": 1e-3}]},
              {"type": "linear", "in": 16, "out": 5, "name": "head"}, {"type": "log_softmax", "dim": -1, "name": "lsm"}]
    r = c.call("model.define", {"name": "all", "layers": layers,
                                "inputs": [{"name": "x", "dtype": "f32", "shape": [1, 2, 8, 8]},
                                           {"name": "y", "dtype": "i32", "shape": [1]}],
                                "loss": {"type": "cross_entropy", "target": "y", "reduction": "sum"},
                                "optimizer": {"type": "sgd", "lr": 0.01},
                                "nodes": [n("pred", "argmax", ["lsm"], axis=1)]})
    ids = [nd["id"] for nd in r["nodes"]]
    check(ids == ["0", "1", "2", "3", "body.0", "body.1", "body.res.0", "body.res.1/mm", "body.res.1", "body.res.2",
                  "body.res", "body.3", "body.4", "body", "head/mm", "head", "lsm", "loss", "pred"],
          "node ids: %r" % (ids,))
    check([p["name"] for p in r["parameters"]] == [
        "all/0.weight", "all/body.0.weight", "all/body.res.0.weight", "all/body.res.1.weight", "all/body.res.1.bias",
        "all/body.4.weight", "all/body.4.bias", "all/head.weight", "all/head.bias"], "nested names")
    loss = c.call("train.step", {"model": "all", "data": {"x": "ax", "y": "ay"}})["loss"]
    check(math.isfinite(loss), "every type trains: %r" % loss)
    out = c.call("model.predict", {"model": "all", "inputs": {"x": "ax"}, "outputs": ["pred", "body"]})["outputs"]
    check(out["body"]["shape"] == [4, 16] and out["pred"]["shape"] == [4], "predict a nested layer and a raw node")
    put(c, "qx", rng.standard_normal((3, 5, 8)).astype(np.float32))
    put(c, "qy", rng.standard_normal((3, 5, 8)).astype(np.float32))
    r = c.call("model.define", {"name": "att", "inputs": [{"name": "x", "dtype": "f32", "shape": [1, 5, 8]},
                                                         {"name": "y", "dtype": "f32", "shape": [1, 5, 8]}],
                                "layers": [{"type": "attention", "dim": 8, "heads": 4, "dropout": 0.1, "bias": False},
                                           {"type": "transformer_block", "dim": 8, "heads": 1, "dropout": 0.2}],
                                "loss": {"type": "mse", "target": "y"}, "optimizer": {"type": "adam", "lr": 0.01}})
    check(sum(nd["op"] == "dropout" for nd in r["nodes"]) == 4, "attention and block dropouts")
    check(math.isfinite(c.call("train.step", {"model": "att", "data": {"x": "qx", "y": "qy"}})["loss"]),
          "attention without mask, with dropout, trains")


def main():
    rng = np.random.default_rng(0)
    # The transformer's fused kernel compiles at its first dispatch on
    # lavapipe (a few seconds at head dim 4 with a cold shader cache).
    with Daemon(config="request_timeout = 120\n") as d:
        c = d.client()
        mlp(c, rng)
        leaky_identity(c, rng)
        bce_loss(c, rng)
        pos_embedding(c, rng)
        cnn(c, rng)
        transformer(c, rng, True)
        transformer(c, rng, False)
        every_type(c, rng)
    if failures:
        print("%d failure(s)" % len(failures))
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()

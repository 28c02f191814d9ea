"""Layer models through the Python client (define_model(layers=tensord.nn...)):
the parameters the daemon creates against nn's named_parameters (torch's names
and shapes) and torch's initialisation bounds, reproducibility from the seed,
predict against a NumPy forward pass of the fetched parameters (torch layouts:
x @ W.T + b; dropout off in eval mode), stored parameters kept, training,
and model files of layer models (load_model under another name; tensorctl
model load)."""
import os
import subprocess

import numpy as np
import pytest

import tensord
from tensord import nn

D, H, C = 6, 8, 3


def _net():
    return nn.Sequential(nn.Linear(D, H), nn.ReLU(), nn.Residual(nn.Linear(H, H), nn.Tanh(), name="res"),
                         nn.Dropout(0.25), nn.Linear(H, C, name="head"))


def _define(c, name, seed=0, replace=False):
    return c.define_model(name, layers=_net(), inputs={"x": ("f32", [1, D]), "y": ("i32", [1])},
                          loss=nn.CrossEntropyLoss(target="y"), optimizer={"type": "adam", "lr": 0.02},
                          seed=seed, replace=replace)


def _forward(p, pre, x):
    def lin(path, v):
        return v @ p[pre + path + ".weight"].T + p[pre + path + ".bias"]
    h = np.maximum(lin("0", x), 0)
    h = h + np.tanh(lin("res.0", h))
    return lin("head", h)


def test_parameters_names_shapes_init(client, prefix):
    name = prefix + "m"
    m = _define(client, name, seed=3)
    st = m.stat()
    net = _net()
    want = net.named_parameters(name + "/")
    assert [(q["name"], tuple(q["shape"])) for q in st["parameters"]] == want
    assert st["param_count"] == net.param_count()
    assert st["layers"] == net.spec()
    p = m.parameters()
    assert list(p) == [n for n, _ in want]
    for n, shape in want:
        a = p[n]
        fan_in = {"0": D, "res.0": H, "head": H}[n[len(name) + 1:].rsplit(".", 1)[0]]
        assert a.shape == shape and a.dtype == np.float32
        assert np.abs(a).max() <= 1 / np.sqrt(fan_in) + 1e-7, n       # kaiming_uniform(a=sqrt(5)) bounds
        assert a.size < 4 or np.unique(a).size > a.size // 2, n       # not a constant
    # the same seed gives the same bits; another seed other ones
    m.delete(tensors=True)
    m = _define(client, name, seed=3)
    assert all(v.tobytes() == p[k].tobytes() for k, v in m.parameters().items())
    m.delete(tensors=True)
    m = _define(client, name, seed=4)
    assert m.parameters()[name + "/0.weight"].tobytes() != p[name + "/0.weight"].tobytes()
    m.delete(tensors=True)


def test_predict_matches_numpy_and_stored_params_are_kept(client, prefix):
    name = prefix + "m"
    rng = np.random.default_rng(0)
    w = rng.standard_normal((H, D)).astype(np.float32)
    client.put(name + "/0.weight", w)                 # stored already: kept, not initialised
    m = _define(client, name)
    p = {k: v.astype(np.float64) for k, v in m.parameters().items()}
    assert p[name + "/0.weight"].astype(np.float32).tobytes() == w.tobytes()
    x = rng.standard_normal((5, D)).astype(np.float32)
    out = m.predict({"x": x})
    assert set(out) == {"head"}
    np.testing.assert_allclose(out["head"], _forward(p, name + "/", x.astype(np.float64)), rtol=1e-4, atol=1e-4)
    # a stored parameter of the wrong shape is refused
    client.put(prefix + "bad/0.weight", np.zeros((D, H), np.float32))
    with pytest.raises(tensord.ShapeMismatch):
        _define(client, prefix + "bad")
    m.delete(tensors=True)


def test_train_and_model_files(client, daemon, prefix, tmp_path):
    name = prefix + "m"
    m = _define(client, name)
    rng = np.random.default_rng(1)
    y = rng.integers(0, C, 96).astype(np.int32)
    x = (rng.standard_normal((96, D)) + 3.0 * np.eye(C, D)[y]).astype(np.float32)
    before = m.evaluate({"x": x, "y": y})["loss"]
    res = m.train({"x": x, "y": y}, batch_size=16, epochs=5)
    after = m.evaluate({"x": x, "y": y})["loss"]
    assert res["steps"] == 30 and after < 0.5 * before
    path = str(tmp_path / "m.safetensors")
    info = m.save(path)
    assert info["step"] == 30 and len(info["tensors"]) == 6 * 3      # params, exp_avg, exp_avg_sq
    want = m.predict({"x": x})["head"]
    # under another name: the parameters move to the new model's names
    m2 = client.load_model(path, name=prefix + "copy")
    names = [q["name"] for q in m2.stat()["parameters"]]
    assert names and all(n.startswith(prefix + "copy/") for n in names)
    assert m2.step_count == 30
    np.testing.assert_array_equal(m2.predict({"x": x})["head"], want)
    m2.delete(tensors=True)
    # tensorctl loads the file the Python client wrote
    binary = os.environ.get("TENSORCTL_BIN")
    if binary:
        m.delete(tensors=True)
        r = subprocess.run([binary, "--socket", daemon.sock, "model", "load", path], capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        m3 = client.model(name)
        assert m3.step_count == 30
        np.testing.assert_array_equal(m3.predict({"x": x})["head"], want)
        # ... and the Python client loads tensorctl's file of a layer model under another name
        ctl_path = str(tmp_path / "ctl.safetensors")
        r = subprocess.run([binary, "--socket", daemon.sock, "model", "save", name, ctl_path], capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        m4 = client.load_model(ctl_path, name=prefix + "copy2")
        assert all(q["name"].startswith(prefix + "copy2/") for q in m4.stat()["parameters"])
        np.testing.assert_array_equal(m4.predict({"x": x})["head"], want)
        m4.delete(tensors=True)
    client.model(name).delete(tensors=True)


@pytest.mark.parametrize("kind", ["cnn", "transformer", "sequence"])
def test_every_layer_type_names_and_shapes_agree_with_the_daemon(client, prefix, kind):
    """nn.named_parameters/named_buffers/param_count (written from LAYERS.md) against
    what the daemon creates, for the layer types test_nn only checks offline."""
    name = prefix + kind
    if kind == "cnn":
        net = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.SiLU(), nn.AvgPool2d(2),
                            nn.Conv2d(4, 6, (3, 1), bias=False), nn.MaxPool2d(2, stride=1), nn.Flatten(),
                            nn.Linear(6 * 1 * 3, 5), nn.Sigmoid())
        inputs = {"x": ("f32", [2, 1, 8, 8]), "y": ("f32", [2, 5])}
        loss = nn.MSELoss(target="y")
    elif kind == "sequence":  # conv1d [N, 4, 10] -> [N, 6, 8], read as 6 steps of 8 features
        net = nn.Sequential(nn.Conv1d(4, 6, 3), nn.LSTM(8, 5, name="lstm"), nn.Tanh(),
                            nn.GRU(5, 7, bias=False, return_sequences=False), nn.Linear(7, 3))
        inputs = {"x": ("f32", [1, 4, 10]), "y": ("i32", [1])}
        loss = nn.CrossEntropyLoss(target="y")
    else:
        from collections import OrderedDict
        net = nn.Sequential(OrderedDict([
            ("emb", nn.Embedding(11, 8)),
            ("blocks", nn.Sequential(nn.TransformerBlock(8, 2, hidden=12, causal=True), nn.TransformerBlock(8, 4))),
            ("attn", nn.MultiheadAttention(8, 2, bias=False)),
            ("norm", nn.RMSNorm(8)),
            ("ln", nn.LayerNorm(8)),
            ("head", nn.Linear(8, 11))]))
        inputs = {"x": ("i32", [1, 5]), "y": ("i32", [1, 5])}
        loss = nn.CrossEntropyLoss(target="y")
    m = client.define_model(name, layers=net, inputs=inputs, loss=loss, optimizer={"type": "sgd"})
    st = m.stat()
    assert [(q["name"], tuple(q["shape"])) for q in st["parameters"]] == net.named_parameters(name + "/")
    assert st["param_count"] == net.param_count()
    for b, shape in net.named_buffers(name + "/"):
        assert b in st["state"] and client.stat(b)["shape"] == list(shape)
    # a training step runs, with arrays for data
    rng = np.random.default_rng(0)
    if kind == "cnn":
        data = {"x": rng.standard_normal((4, 1, 8, 8)).astype(np.float32),
                "y": rng.uniform(0, 1, (4, 5)).astype(np.float32)}
    elif kind == "sequence":
        data = {"x": rng.standard_normal((4, 4, 10)).astype(np.float32), "y": rng.integers(0, 3, 4).astype(np.int32)}
    else:
        data = {"x": rng.integers(0, 11, (3, 5)).astype(np.int32), "y": rng.integers(0, 11, (3, 5)).astype(np.int32)}
    r = m.step(data)
    assert r["step"] == 1 and np.isfinite(r["loss"])
    m.delete(tensors=True)


def _lstm_np(x, p, pre):
    """torch.nn.LSTM(batch_first=True)'s output, from torch's parameter names."""
    wih, whh = p[pre + "weight_ih_l0"], p[pre + "weight_hh_l0"]
    b = p[pre + "bias_ih_l0"] + p[pre + "bias_hh_l0"]
    hid = whh.shape[1]
    h, c, out = np.zeros((x.shape[0], hid)), np.zeros((x.shape[0], hid)), []
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    for t in range(x.shape[1]):
        g = x[:, t] @ wih.T + h @ whh.T + b
        c = sig(g[:, hid:2 * hid]) * c + sig(g[:, :hid]) * np.tanh(g[:, 2 * hid:3 * hid])
        h = sig(g[:, 3 * hid:]) * np.tanh(c)
        out.append(h)
    return np.stack(out, 1)


def test_conv1d_lstm_from_a_state_dict_predict_like_numpy(client, prefix):
    """Parameters put under torch's state_dict names (as a torch checkpoint
    would be loaded) are kept, and predict matches a NumPy forward:
    Conv1d [N, C, L] with weight [out, in, k], then an LSTM over its output
    read as [N, T, I], returning the sequence."""
    name = prefix + "sd"
    net = nn.Sequential(nn.Conv1d(2, 5, 3, padding=1, name="conv"), nn.LSTM(7, 4, name="rnn"))
    rng = np.random.default_rng(3)
    state = {k: rng.uniform(-0.5, 0.5, shape).astype(np.float32) for k, shape in net.named_parameters()}
    for k, v in state.items():
        client.put(name + "/" + k, v)
    m = client.define_model(name, layers=net, inputs={"x": ("f32", [1, 2, 7])}, loss="l",
                            nodes=[{"id": "l", "op": "mean", "inputs": ["rnn"]}], optimizer={"type": "sgd"})
    p = {k[len(name) + 1:]: v.astype(np.float64) for k, v in m.parameters().items()}
    assert all(p[k].astype(np.float32).tobytes() == v.tobytes() for k, v in state.items())
    x = rng.standard_normal((3, 2, 7)).astype(np.float32)
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1)))
    conv = np.stack([np.einsum("nck,ock->no", xp[:, :, j:j + 3], p["conv.weight"]) for j in range(7)], 2)
    conv += p["conv.bias"][None, :, None]
    out = m.predict({"x": x})
    np.testing.assert_allclose(out["rnn"], _lstm_np(conv, p, "rnn."), rtol=1e-4, atol=1e-5)
    m.delete(tensors=True)


def test_rnn_shape_errors_name_the_layer(client, prefix):
    with pytest.raises(tensord.InvalidArgument, match="T is 100"):
        client.define_model(prefix + "long", layers=nn.GRU(4, 4), inputs={"x": ("f32", [1, 100, 4])}, loss="l",
                            nodes=[{"id": "l", "op": "mean", "inputs": ["0"]}])
    with pytest.raises(tensord.InvalidArgument, match="input_size is 4"):
        client.define_model(prefix + "in", layers=nn.LSTM(4, 4), inputs={"x": ("f32", [1, 5, 3])}, loss="l",
                            nodes=[{"id": "l", "op": "mean", "inputs": ["0"]}])
    with pytest.raises(tensord.InvalidArgument, match="in_channels is 3"):
        client.define_model(prefix + "c", layers=nn.Conv1d(3, 4, 2), inputs={"x": ("f32", [1, 2, 5])}, loss="l",
                            nodes=[{"id": "l", "op": "mean", "inputs": ["0"]}])

"""The model API of the Python client (tensord.model) on a graph-form model:
define_model, Model.train/step/evaluate/predict/parameters/stat/delete,
detached training as a Job, and model files: Model.save and
Client.load_model against `tensorctl model save`/`model load` both ways
(the same tensors, metadata, definition and step; training on after a load
equals training without the interruption). References are NumPy."""
import json
import os
import struct
import subprocess

import numpy as np
import pytest

import tensord
from tensord import safetensors as st

D, H, C, N = 4, 8, 3, 48


def _nodes(p):
    return [{"id": "h0", "op": "matmul", "inputs": ["x", p + "w1"]},
            {"id": "h1", "op": "add", "inputs": ["h0", p + "b1"]},
            {"id": "h", "op": "relu", "inputs": ["h1"]},
            {"id": "o0", "op": "matmul", "inputs": ["h", p + "w2"]},
            {"id": "logits", "op": "add", "inputs": ["o0", p + "b2"]},
            {"id": "loss", "op": "cross_entropy", "inputs": ["logits", "y"]},
            {"id": "pred", "op": "argmax", "inputs": ["logits"], "attrs": {"axis": 1}},
            {"id": "hit", "op": "eq", "inputs": ["pred", "y"]},
            {"id": "hitf", "op": "cast", "inputs": ["hit"], "attrs": {"dtype": np.float32}},
            {"id": "acc", "op": "mean", "inputs": ["hitf"]}]


def _data(seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, C, N).astype(np.int32)
    x = (rng.standard_normal((N, D)) + 2.0 * np.eye(C, D)[y]).astype(np.float32)
    return x, y


def _define(c, name, replace=False):
    rng = np.random.default_rng(1)
    p = name + "/"
    for k, shape in (("w1", (D, H)), ("b1", (H,)), ("w2", (H, C)), ("b2", (C,))):
        c.put(p + k, rng.uniform(-0.5, 0.5, shape).astype(np.float32))
    return c.define_model(name, nodes=_nodes(p), params=[p + k for k in ("w1", "b1", "w2", "b2")],
                          loss="loss", inputs={"x": ("f32", [1, D]), "y": ("i32", [1])},
                          outputs=["logits"], optimizer={"type": "adam", "lr": 0.05}, replace=replace)


def _forward(params, p, x):
    h = np.maximum(x @ params[p + "w1"] + params[p + "b1"], 0)
    return h @ params[p + "w2"] + params[p + "b2"]


def _ce(logits, y):
    m = logits.max(1, keepdims=True)
    return float(np.mean(np.log(np.exp(logits - m).sum(1)) + m[:, 0] - logits[np.arange(len(y)), y]))


def test_train_evaluate_predict(client, prefix):
    name = prefix + "m"
    m = _define(client, name)
    assert isinstance(m, tensord.Model) and m.name == name and m.step_count == 0
    assert name in [d["name"] for d in client.models()]
    assert client.model(name).name == name
    x, y = _data()
    res = m.train({"x": x, "y": y}, batch_size=16, epochs=3, seed=2,
                  eval={"data": {"x": x, "y": y}, "metrics": ["acc"]})
    assert res["steps"] == 9 and m.step_count == 9 and res["eval"]["metrics"]["acc"] > 0.5
    # the arrays it put are gone again
    assert client.list(name + "/_") == []
    params = {k: v.astype(np.float64) for k, v in m.parameters().items()}
    assert list(params) == [name + "/" + k for k in ("w1", "b1", "w2", "b2")]
    logits = _forward(params, name + "/", x.astype(np.float64))
    ev = m.evaluate({"x": x, "y": y}, metrics=["acc"])
    assert ev["samples"] == N
    assert abs(ev["loss"] - _ce(logits, y)) < 1e-4
    assert ev["metrics"]["acc"] == pytest.approx(float(np.mean(logits.argmax(1) == y)))
    evb = m.evaluate({"x": x, "y": y}, metrics=["acc"], batch_size=20)
    assert evb["batches"] == 3 and abs(evb["loss"] - ev["loss"]) < 1e-5
    out = m.predict({"x": x})
    assert set(out) == {"logits"} and isinstance(out["logits"], np.ndarray)
    np.testing.assert_allclose(out["logits"], logits, rtol=1e-4, atol=1e-4)
    pred = m.predict({"x": x[:5]}, outputs="pred")["pred"]
    assert pred.dtype == np.int32 and (pred == logits[:5].argmax(1)).all()
    # stored tensors as data work too, and a step counts on
    client.put(prefix + "x", x)
    client.put(prefix + "y", y)
    r = m.step({"x": prefix + "x", "y": prefix + "y"}, outputs=["logits"])
    assert r["step"] == 10 and r["outputs"]["logits"].shape == (N, C)
    assert abs(r["loss"] - ev["loss"]) < 1e-4          # the loss before the update
    # Client.train is Model.train
    assert client.train(name, {"x": prefix + "x", "y": prefix + "y"}, batch_size=48, steps=2)["steps"] == 2
    assert m.step_count == 12
    # accumulate_steps and devices go through: 2 updates of 2 micro-batches each; 1 step on device 0
    res = m.train({"x": x, "y": y}, batch_size=12, steps=2, accumulate_steps=2, shuffle=False)
    assert res["steps"] == 2 and m.step_count == 14
    assert m.train({"x": x, "y": y}, batch_size=12, steps=1, devices=[0])["steps"] == 1
    assert not np.any(client.get(name + "/w1.grad"))       # accumulation leaves zeros behind
    st_ = m.stat()
    assert st_["step"] == 15 and len(st_["state"]) == 8
    d = m.delete(tensors=True)
    assert d["deleted"] and name + "/w1" in d["tensors"]
    with pytest.raises(tensord.NotFound):
        client.model(name)


def test_errors(client, prefix):
    name = prefix + "m"
    m = _define(client, name)
    with pytest.raises(tensord.AlreadyExists):
        _define(client, name)
    _define(client, name, replace=True)
    with pytest.raises(tensord.InvalidArgument):                      # float64 is not narrowed silently,
        m.train({"x": np.zeros((4, D), np.float32), "y": np.zeros(4)}, batch_size=2)
    assert client.list(name + "/_") == []                              # and x, put first, is gone again
    with pytest.raises(tensord.InvalidArgument):
        m.train({"x": prefix + "x"}, batch_size=2, epochs=1, steps=1)
    with pytest.raises(tensord.InvalidArgument):
        m.predict({"x": np.zeros((2, D), np.float32)}, mode="test")
    with pytest.raises(tensord.InvalidArgument):
        m.train({"nosuch": np.zeros((4, D), np.float32)}, batch_size=2)   # the daemon's refusal
    assert client.list(name + "/_") == []                                  # and the staged array is gone
    with pytest.raises(tensord.InvalidArgument):
        client.define_model(prefix + "g", nodes=_nodes(prefix), loss="loss")  # no params
    with pytest.raises(tensord.NotFound):
        client.model(prefix + "nosuch")
    m.delete(tensors=True)


def test_detached_train_is_a_job(client, prefix):
    name = prefix + "m"
    m = _define(client, name)
    x, y = _data()
    job = m.train({"x": x, "y": y}, batch_size=8, epochs=4, detach=True)
    assert isinstance(job, tensord.Job) and int(job) in [j["job"] for j in client.jobs()]
    seen = []
    end = job.wait(on_progress=seen.append)
    assert end["state"] == "done" and end["result"]["steps"] == 24 and seen
    assert m.step_count == 24
    assert client.list(name + "/_") == []
    m.delete(tensors=True)


def test_train_converts_to_declared_dtypes(client, prefix):
    """float64 features and int64 labels (NumPy's defaults) are stored as
    the model declares its inputs, f32 and i32 (issue 35: the advice was
    "pass cast=True", which train did not take)."""
    name = prefix + "m64"
    m = _define(client, name)
    x, y = _data()
    res = m.train({"x": x.astype(np.float64), "y": y.astype(np.int64)}, batch_size=8, epochs=1)
    ref = _define(client, prefix + "m32")
    want = ref.train({"x": x, "y": y}, batch_size=8, epochs=1)
    assert res["steps"] == 6 and res["loss"] == want["loss"]
    assert client.list(name + "/_") == []
    m.delete(tensors=True)
    ref.delete(tensors=True)


def test_interrupted_train_cleans_up(daemon, prefix):
    """Ctrl-C (here a signal handler's exception) during Model.train: the
    run is cancelled with the connection, and the arrays it staged are
    deleted on the client's next connection (issue 35: they stayed)."""
    import signal

    class Stop(Exception):
        pass

    def on_alarm(signum, frame):
        raise Stop()
    with tensord.Client(daemon.sock, timeout=60) as c:
        name = prefix + "mi"
        m = _define(c, name)
        x, y = _data()
        old = signal.signal(signal.SIGALRM, on_alarm)
        try:
            signal.setitimer(signal.ITIMER_REAL, 0.5)
            with pytest.raises(Stop):
                m.train({"x": x, "y": y}, batch_size=1, epochs=100000)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
        assert c.list(name + "/_") == []
        m.delete(tensors=True)


def _ctl(daemon, *args):
    binary = os.environ.get("TENSORCTL_BIN")
    if not binary:
        pytest.skip("TENSORCTL_BIN is not set")
    r = subprocess.run([binary, "--socket", daemon.sock, "--json"] + list(args), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = f.read(n)
    assert (8 + n) % 8 == 0 and head.startswith(b"{")
    return json.loads(head)


def test_model_files_cross_tensorctl(client, daemon, prefix, tmp_path):
    name = prefix + "m"
    m = _define(client, name)
    x, y = _data()
    m.train({"x": x, "y": y}, batch_size=16, epochs=2)
    py_file, ctl_file = str(tmp_path / "py.safetensors"), str(tmp_path / "ctl.safetensors")
    info = m.save(py_file)
    assert info["step"] == 6 and len(info["tensors"]) == 12
    _ctl(daemon, "model", "save", name, ctl_file)
    # the same header ...
    hp, hc = _header(py_file), _header(ctl_file)
    mp, mc = hp.pop("__metadata__"), hc.pop("__metadata__")
    assert hp == hc
    defc = json.loads(mc.pop("tensord.definition"))
    assert json.loads(mp.pop("tensord.definition")) == defc
    assert mp == mc == {"format": "tensord.model.v1", "tensord.model": name, "tensord.step": "6"}
    tp, _ = st.load_file(py_file)
    tc, _ = st.load_file(ctl_file)
    assert [(n, d, a.tobytes()) for n, d, a in tp] == [(n, d, a.tobytes()) for n, d, a in tc]
    with open(py_file, "rb") as f1, open(ctl_file, "rb") as f2:
        assert f1.read() == f2.read()          # byte for byte, numbers in the JSON included

    # the uninterrupted reference: 3 more steps
    m.train({"x": x, "y": y}, batch_size=16, epochs=1, seed=5)
    want_params = m.parameters()
    want_state = m.state_tensors()

    # tensorctl loads the Python file ... and training on gives the same bits
    m.delete(tensors=True)
    r = _ctl(daemon, "model", "load", py_file)
    assert r["model"] == name and r["step"] == 6
    m2 = client.model(name)
    assert m2.step_count == 6
    m2.train({"x": x, "y": y}, batch_size=16, epochs=1, seed=5)
    got = m2.parameters()
    assert all(got[k].tobytes() == want_params[k].tobytes() for k in want_params)
    assert all(v.tobytes() == want_state[k].tobytes() for k, v in m2.state_tensors().items())

    # ... and the Python client loads tensorctl's file, the same way
    m2.delete(tensors=True)
    with pytest.raises(tensord.NotFound):
        client.model(name)
    m3 = client.load_model(ctl_file)
    assert m3.name == name and m3.step_count == 6
    assert m3.stat()["definition"] == defc
    with pytest.raises(tensord.AlreadyExists):
        client.load_model(ctl_file)
    m3 = client.load_model(ctl_file, replace=True)
    m3.train({"x": x, "y": y}, batch_size=16, epochs=1, seed=5)
    got = m3.parameters()
    assert all(got[k].tobytes() == want_params[k].tobytes() for k in want_params)
    # under another name: the graph form's parameters keep their names (as tensorctl)
    m4 = client.load_model(py_file, name=prefix + "copy")
    assert m4.stat()["params"][0]["name"] == name + "/w1"
    m4.delete()
    m3.delete(tensors=True)


def test_safetensors_reader_refuses_garbage(tmp_path):
    good = str(tmp_path / "g.safetensors")
    st.save_file(good, [("a", "f32", np.arange(3, dtype=np.float32)), ("b", "bf16", np.array([1, 2], np.uint16)),
                        ("e", "i32", np.zeros((0, 2), np.int32))], {"k": "v"})
    tensors, meta = st.load_file(good)
    assert meta == {"k": "v"} and [t[0] for t in tensors] == ["a", "b", "e"]
    assert tensors[1][1] == "bf16" and tensors[1][2].tolist() == [1, 2] and tensors[2][2].shape == (0, 2)
    raw = open(good, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])

    def write(h, extra=b""):
        text = json.dumps(h).encode()
        p = str(tmp_path / "bad.safetensors")
        with open(p, "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text + raw[8 + n:] + extra)
        return p
    bad = [
        write(dict(head, a=dict(head["a"], dtype="F64"))),                       # a dtype tensord lacks
        write(dict(head, a=dict(head["a"], shape=[4]))),                         # size != shape x dtype
        write(dict(head, a=dict(head["a"], data_offsets=[4, 16]))),              # overlap / hole
        write(head, b"xx"),                                                      # bytes that belong to none
        write(dict(head, a=dict(head["a"], extra=1))),                           # an unknown key
        write(dict(head, __metadata__={"k": 1})),                                # metadata not str
    ]
    for p in bad:
        with pytest.raises(tensord.InvalidArgument):
            st.load_file(p)
    p = str(tmp_path / "short")
    open(p, "wb").write(struct.pack("<Q", 1 << 40))
    with pytest.raises(tensord.InvalidArgument):
        st.load_file(p)

"""The habits Keras and PyTorch users bring to Model (issue 35): named
metrics ("accuracy", "loss"), predict on a bare array, summary(), the
progress bar of verbose=1, validation_split/validation_data, drop_last, and
Ctrl-C or a left watch() leaving neither staged arrays nor a broken client.
Every figure is checked against NumPy on the parameters fetched from the
daemon, or against a plain evaluate of the same rows."""
import io
import signal
import sys
import time

import numpy as np
import pytest

import tensord
from tensord import nn

D, H, C = 4, 8, 3


def _mlp(c, name, **kw):
    net = nn.Sequential(nn.Linear(D, H), nn.ReLU(), nn.Linear(H, C, name="head"))
    return c.define_model(name, layers=net, inputs={"x": ("f32", [1, D]), "y": ("i32", [1])},
                          loss=nn.CrossEntropyLoss(target="y"), optimizer={"type": "adam", "lr": 0.02}, **kw)


def _binary(c, name):
    return c.define_model(name, layers=nn.Sequential(nn.Linear(D, 1, name="logit")),
                          inputs={"x": ("f32", [1, D]), "y": ("f32", [1, 1])},
                          loss=nn.BCEWithLogitsLoss(target="y"), optimizer={"type": "adam", "lr": 0.05})


def _data(n, seed=0):
    """Float64 features and int64 labels (NumPy's defaults), C separable-ish classes."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, C, n)
    return rng.standard_normal((n, D)) + 1.5 * np.eye(C, D)[y], y


def _logits(m, x):
    """The MLP's forward pass in NumPy on the parameters fetched from the daemon."""
    p = {k.split("/")[-1]: v.astype(np.float64) for k, v in m.parameters().items()}
    h = np.maximum(x @ p["0.weight"].T + p["0.bias"], 0)
    return h @ p["head.weight"].T + p["head.bias"]


def _ce(logits, y):
    mx = logits.max(1, keepdims=True)
    return float(np.mean(np.log(np.exp(logits - mx).sum(1)) + mx[:, 0] - logits[np.arange(len(y)), y]))


def _acc(logits, y):
    return float(np.mean(logits.argmax(1) == y))


# ---- 1. named metrics -----------------------------------------------------------------

def test_accuracy_and_loss_metrics_against_numpy(client, prefix):
    m = _mlp(client, prefix + "m")
    x, y = _data(120)
    m.train({"x": x, "y": y}, batch_size=20, epochs=2)
    step, before = m.step_count, m.parameters()
    ev = m.evaluate({"x": x, "y": y}, metrics=["accuracy", "loss"])
    logits = _logits(m, x)
    assert ev["metrics"]["accuracy"] == pytest.approx(_acc(logits, y), abs=1e-6)
    assert ev["metrics"]["loss"] == ev["loss"] == pytest.approx(_ce(logits, y), abs=1e-4)
    assert set(ev["metrics"]) == {"accuracy", "loss"}
    # the metric nodes joined the definition; parameters, step and state stayed
    assert m.step_count == step
    assert all(v.tobytes() == before[k].tobytes() for k, v in m.parameters().items())
    assert "_metrics/accuracy" in [n["id"] for n in m.stat()["nodes"]]
    # "acc" is Keras's alias; a second call adds nothing
    assert m.evaluate({"x": x, "y": y}, metrics=["acc"])["metrics"] == {"acc": ev["metrics"]["accuracy"]}
    with pytest.raises(tensord.InvalidArgument, match="nosuch"):
        m.evaluate({"x": x, "y": y}, metrics=["nosuch"])
    m.delete(tensors=True)


def test_train_metrics_on_validation_and_on_training_data(client, prefix):
    m = _mlp(client, prefix + "m")
    x, y = _data(100)
    xv, yv = _data(40, seed=7)
    seen = []
    res = m.train((x, y), batch_size=20, epochs=3, metrics=["accuracy"], validation_data=(xv, yv),
                  on_eval=seen.append)
    logits = _logits(m, xv)
    assert res["val_metrics"]["accuracy"] == pytest.approx(_acc(logits, yv), abs=1e-6)
    assert res["val_loss"] == pytest.approx(_ce(logits, yv), abs=1e-4)
    assert len(seen) == 3 and set(seen[-1]["metrics"]) == {"accuracy"}
    assert seen[-1]["metrics"]["accuracy"] == res["val_metrics"]["accuracy"]
    # without held-out data: measured on the training data after the run
    res = m.train({"x": x, "y": y}, batch_size=20, epochs=1, metrics=["accuracy", "loss"])
    logits = _logits(m, x)
    assert res["metrics"]["accuracy"] == pytest.approx(_acc(logits, y), abs=1e-6)
    assert res["metrics"]["loss"] == pytest.approx(_ce(logits, y), abs=1e-4)
    assert client.list(m.name + "/_") == []
    m.delete(tensors=True)


def test_detached_fit_with_metrics(client, prefix, capsys):
    m = _mlp(client, prefix + "m")
    x, y = _data(60)
    with pytest.raises(tensord.InvalidArgument, match="held-out"):
        m.train({"x": x, "y": y}, batch_size=20, metrics=["accuracy"], detach=True)
    job = m.train({"x": x, "y": y}, batch_size=20, epochs=2, metrics=["accuracy"],
                  validation_data={"x": x[:30], "y": y[:30]}, detach=True, verbose=2)
    end = job.wait()
    assert end["state"] == "done" and client.list(m.name + "/_") == []
    acc = end["result"]["eval"]["metrics"]["accuracy"]
    assert acc == pytest.approx(_acc(_logits(m, x[:30]), y[:30]), abs=1e-6)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and lines[-1].endswith("val_accuracy %.4f" % acc), lines
    m.delete(tensors=True)


def test_detached_run_cleans_up_without_wait(client, prefix):
    """A detached script never calls Job.wait(): the daemon deletes the
    staged arrays itself when the job ends (train.run `cleanup`)."""
    import time
    m = _mlp(client, prefix + "m")
    x, y = _data(60)
    job = m.train({"x": x, "y": y}, batch_size=20, epochs=2, detach=True)
    assert client.list(m.name + "/_") != []
    deadline = time.monotonic() + 60
    while client.job(int(job))["state"] == "running" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert client.job(int(job))["state"] == "done"
    assert client.list(m.name + "/_") == []
    m.delete(tensors=True)


def test_binary_accuracy_thresholds_the_logit_at_zero(client, prefix):
    m = _binary(client, prefix + "b")
    rng = np.random.default_rng(3)
    x = rng.standard_normal((64, D))
    y = (x[:, :1] - 0.5 * x[:, 1:2] + 0.3 * rng.standard_normal((64, 1)) > 0).astype(np.float32)
    m.train({"x": x, "y": y}, batch_size=16, epochs=2)
    ev = m.evaluate({"x": x, "y": y}, metrics=["accuracy"])
    p = m.parameters()
    logit = x @ p[m.name + "/logit.weight"].astype(np.float64).T + p[m.name + "/logit.bias"]
    assert 0.5 < ev["metrics"]["accuracy"] < 1.0
    assert ev["metrics"]["accuracy"] == pytest.approx(float(np.mean((logit > 0) == (y > 0.5))), abs=1e-6)
    m.delete(tensors=True)


def test_accuracy_of_a_graph_model_equals_its_own_node(client, prefix):
    """A graph-form model with its own accuracy node "acc": the built
    "accuracy" agrees, and "acc" still means the model's node."""
    p = prefix
    rng = np.random.default_rng(2)
    client.put(p + "w", rng.standard_normal((D, C)).astype(np.float32))
    client.put(p + "b", np.zeros(C, np.float32))
    nodes = [{"id": "z", "op": "matmul", "inputs": ["x", p + "w"]},
             {"id": "logits", "op": "add", "inputs": ["z", p + "b"]},
             {"id": "loss", "op": "cross_entropy", "inputs": ["logits", "y"]},
             {"id": "pred", "op": "argmax", "inputs": ["logits"], "attrs": {"axis": 1}},
             {"id": "hit", "op": "eq", "inputs": ["pred", "y"]},
             {"id": "hitf", "op": "cast", "inputs": ["hit"], "attrs": {"dtype": "f32"}},
             {"id": "acc", "op": "mean", "inputs": ["hitf"]}]
    m = client.define_model(p + "g", nodes=nodes, params=[p + "w", p + "b"], loss="loss", outputs=["logits"],
                            inputs={"x": ("f32", [1, D]), "y": ("i32", [1])})
    x, y = _data(50)
    ev = m.evaluate({"x": x, "y": y}, metrics=["accuracy", "acc"])
    w, b = client.get(p + "w").astype(np.float64), client.get(p + "b")
    assert ev["metrics"]["accuracy"] == ev["metrics"]["acc"] == pytest.approx(_acc(x @ w + b, y), abs=1e-6)
    text = m.summary(print_fn=None)                  # graph form: a row per node, the metric nodes left out
    assert "logits (add)" in text and "(None, %d)" % C in text and "_metrics" not in text
    assert "Total params: %d" % (D * C + C) in text
    m.delete()


def test_accuracy_needs_a_classification_loss(client, prefix):
    m = client.define_model(prefix + "r", layers=nn.Sequential(nn.Linear(D, 1)),
                            inputs={"x": ("f32", [1, D]), "y": ("f32", [1, 1])}, loss=nn.MSELoss(target="y"))
    x = np.zeros((4, D), np.float32)
    with pytest.raises(tensord.InvalidArgument, match="classification loss"):
        m.evaluate({"x": x, "y": np.zeros((4, 1), np.float32)}, metrics=["accuracy"])
    bias = float(m.parameters()[m.name + "/0.bias"][0])              # zeros in: the output is the bias
    ev = m.evaluate({"x": x, "y": np.zeros((4, 1), np.float32)}, metrics=["loss"])
    assert ev["metrics"] == {"loss": ev["loss"]} and ev["loss"] == pytest.approx(bias * bias, rel=1e-5)
    m.delete(tensors=True)


# ---- 2. predict on a bare array --------------------------------------------------------

def test_predict_bare_array(client, prefix):
    m = _mlp(client, prefix + "m")
    x, _ = _data(10)
    out = m.predict(x)
    assert isinstance(out, np.ndarray) and out.shape == (10, C)
    np.testing.assert_allclose(out, _logits(m, x), rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(m(x), out)
    np.testing.assert_array_equal(m.predict({"x": x})["head"], out)       # the mapping form as before
    both = m.predict(x, outputs=["0", "head"])                            # a list asks for a map
    assert set(both) == {"0", "head"} and both["0"].shape == (10, H)
    assert client.list(m.name + "/_") == []
    m.delete(tensors=True)


# ---- 3. summary -------------------------------------------------------------------------

def test_summary_table(client, prefix):
    net = nn.Sequential(nn.Linear(D, H), nn.BatchNorm1d(H), nn.ReLU(),
                        nn.Residual(nn.Linear(H, H), nn.Tanh(), name="res"), nn.Linear(H, C, name="head"))
    m = client.define_model(prefix + "s", layers=net, inputs={"x": ("f32", [2, D]), "y": ("i32", [2])},
                            loss=nn.CrossEntropyLoss(target="y"))
    printed = []
    text = m.summary(print_fn=printed.append)
    assert printed == [text]
    sizes = {k[len(m.name) + 1:]: v.size for k, v in m.parameters().items()}
    want = {"0": ("linear", "(None, %d)" % H, sizes["0.weight"] + sizes["0.bias"]),
            "1": ("batch_norm", "(None, %d)" % H, sizes["1.weight"] + sizes["1.bias"]),
            "2": ("relu", "(None, %d)" % H, 0),
            "res": ("residual", "(None, %d)" % H, sizes["res.0.weight"] + sizes["res.0.bias"]),
            "head": ("linear", "(None, %d)" % C, sizes["head.weight"] + sizes["head.bias"])}
    lines = text.splitlines()
    for name, (kind, shape, n) in want.items():
        row = [ln for ln in lines if ln.startswith("%s (%s)" % (name, kind))]
        assert len(row) == 1, (name, text)
        assert row[0].split()[-3:-1] == shape.split() and row[0].split()[-1] == "{:,}".format(n), row
    total = sum(sizes.values())
    assert "Total params: {:,}".format(total) in text and total == net.param_count()
    assert client.list(m.name + "/_") == []
    m.delete(tensors=True)


# ---- 4. progress bar ----------------------------------------------------------------------

class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_verbose_progress(client, prefix, capsys, monkeypatch):
    m = _mlp(client, prefix + "m")
    x, y = _data(80)
    m.train({"x": x, "y": y}, batch_size=20, epochs=2)
    assert capsys.readouterr().out == ""                  # verbose=0 is the default: silent
    m.train((x, y), batch_size=20, epochs=3, verbose=1, metrics=["accuracy"], validation_split=0.25,
            progress_every=1)
    out = capsys.readouterr().out                         # not a terminal: a line per epoch
    lines = out.splitlines()
    assert "\r" not in out and len(lines) == 3, out
    for e, line in enumerate(lines, 1):
        assert line.startswith("epoch %d/3" % e) and "%d/9 [" % (3 * e) in line, line
        assert "loss" in line and "samples/s" in line and "val_loss" in line and "val_accuracy" in line
    tty = _Tty()
    monkeypatch.setattr(sys, "stdout", tty)
    m.train({"x": x, "y": y}, batch_size=20, epochs=2, verbose=1, progress_every=1)
    monkeypatch.undo()
    out = tty.getvalue()                                  # a terminal: redrawn in place, a line per epoch
    assert out.count("\r") >= 8 and out.count("\n") == 2 and out.endswith("\n"), repr(out)
    assert out.split("\n")[0].rsplit("\r", 1)[1].startswith("epoch 1/2  4/8 [")
    m.delete(tensors=True)


# ---- 5. validation_split / validation_data ------------------------------------------------

def test_validation_split_holds_out_the_last_rows(client, prefix):
    m = _mlp(client, prefix + "m")
    x, y = _data(100)
    res = m.train((x, y), batch_size=16, epochs=2, validation_split=0.2, seed=1)
    assert res["steps"] == 2 * (80 // 16)                 # trained on the first 80 rows only
    ev = m.evaluate((x[80:], y[80:]))
    assert res["val_loss"] == pytest.approx(ev["loss"], abs=1e-5)
    assert res["val_loss"] == pytest.approx(_ce(_logits(m, x[80:]), y[80:]), abs=1e-4)
    assert res["val_metrics"] == {}
    with pytest.raises(tensord.InvalidArgument):
        m.train((x, y), batch_size=16, validation_split=0.2, validation_data=(x, y))
    client.put(prefix + "x", x.astype(np.float32))
    with pytest.raises(tensord.InvalidArgument, match="validation_data"):
        m.train({"x": prefix + "x", "y": y}, batch_size=16, validation_split=0.2)
    with pytest.raises(tensord.InvalidArgument):
        m.train((x, y), batch_size=16, validation_split=1.5)
    assert client.list(m.name + "/_") == []
    m.delete(tensors=True)


# ---- 6. drop_last ----------------------------------------------------------------------------

def test_drop_last(client, prefix, capsys):
    m = _mlp(client, prefix + "m")
    x, y = _data(100)
    assert m.train({"x": x, "y": y}, batch_size=16, epochs=2)["steps"] == 2 * (100 // 16)   # default: 4 left
    with pytest.raises(tensord.InvalidArgument, match="partial batches"):
        m.train({"x": x, "y": y}, batch_size=16, epochs=2, drop_last=False)
    assert client.list(m.name + "/_") == []
    assert m.train({"x": x[:96], "y": y[:96]}, batch_size=16, epochs=2, drop_last=False)["steps"] == 12
    m.train({"x": x, "y": y}, batch_size=16, epochs=1, verbose=2)
    assert "4 of 100 rows" in capsys.readouterr().out
    m.delete(tensors=True)


# ---- 7. Ctrl-C and watch() ----------------------------------------------------------------------

def test_ctrl_c_during_train(daemon, prefix):
    """KeyboardInterrupt while the run goes on: it is cancelled, the staged
    arrays are gone, and the client goes on."""
    def on_alarm(signum, frame):
        raise KeyboardInterrupt()
    with tensord.Client(daemon.sock, timeout=60) as c:
        m = _mlp(c, prefix + "m")
        x, y = _data(64)
        old = signal.signal(signal.SIGALRM, on_alarm)
        try:
            signal.setitimer(signal.ITIMER_REAL, 0.5)
            with pytest.raises(KeyboardInterrupt):
                m.train({"x": x, "y": y}, batch_size=1, epochs=100000)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
        assert c.list(m.name + "/_") == []
        s = m.step_count
        time.sleep(0.5)
        assert m.step_count == s, "the run goes on"
        m.delete(tensors=True)


def test_ctrl_c_while_a_staged_put_is_answered(daemon, prefix):
    """Ctrl-C after the daemon stored a staged array but before its answer
    was read: that array is deleted too (it was not counted as put)."""
    with tensord.Client(daemon.sock, timeout=60) as c:
        m = _mlp(c, prefix + "m")
        x, y = _data(32)
        real_wait = c._wait

        def wait(pending):
            if pending.method == "tensor.put" and not fired:
                fired.append(pending)
                c._sel.select(10)                 # the answer is there: the array is stored
                c._interrupted()
                raise KeyboardInterrupt()
            return real_wait(pending)
        fired = []
        c._wait = wait
        with pytest.raises(KeyboardInterrupt):
            m.train({"x": x, "y": y}, batch_size=8)
        del c._wait
        assert fired and c.list(m.name + "/_") == []
        m.delete(tensors=True)


def test_cleanup_when_the_client_is_closed_for_good(daemon, prefix):
    """A timeout closes the client for good: the staged arrays are deleted
    on a connection of their own, not tried on the closed one."""
    with tensord.Client(daemon.sock, timeout=60) as c:
        m = _mlp(c, prefix + "m")
    x, y = _data(64)
    with tensord.Client(daemon.sock, timeout=0.5) as c:
        with pytest.raises(tensord.DeadlineExceeded):
            c.model(m.name).train({"x": x, "y": y}, batch_size=1, epochs=100000, progress_every=10 ** 7)
        assert c.closed
    with tensord.Client(daemon.sock, timeout=60) as c:
        assert c.list(m.name + "/_") == []
        c.model(m.name).delete(tensors=True)


def _within(seconds, fn):
    """fn(), or AssertionError once `seconds` pass (it would wait for the job's end)."""
    def on_alarm(signum, frame):
        raise AssertionError("no answer within %g s" % seconds)
    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return fn()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def test_request_while_a_watch_waits(client, daemon, prefix):
    """A request made while a watch() iterator is kept (not finished): it is
    answered at once (the watch gave way), the iterator goes on watching,
    and closing the iterator then leaves the client's connection alone."""
    rng = np.random.default_rng(0)
    client.put(prefix + "x", rng.standard_normal((64, 2)).astype(np.float32))
    client.put(prefix + "y", rng.standard_normal((64, 1)).astype(np.float32))
    client.put(prefix + "w", np.zeros((2, 1), np.float32))
    nodes = [{"id": "h", "op": "matmul", "inputs": ["bx", prefix + "w"]},
             {"id": "loss", "op": "mse", "inputs": ["h", "by"]}]
    job = client.train_run(nodes, "loss", [prefix + "w"], {"bx": prefix + "x", "by": prefix + "y"},
                           batch_size=16, steps=10 ** 7, progress_every=5, detach=True)
    with tensord.Client(daemon.sock, timeout=5) as c:
        w = c.watch(job)
        kind, first = next(w)
        assert kind == "progress"
        assert _within(3, c.ping)["pong"]
        kinds = set()
        for _ in range(3):
            kind, m = next(w)                     # on the new connection
            kinds.add(kind)
        assert kinds == {"progress"} and m["run_step"] > first["run_step"]
        w2 = c.watch(job)                          # w gives way to another watch too
        next(w2)
        assert _within(3, lambda: c.job(job))["state"] == "running"   # and w2 to this
        fd = c.fileno()
        w.close()
        w2.close()                                 # neither is on this connection any more
        assert not c.closed and c.fileno() == fd and c.ping()["pong"]
    client.cancel(job)
    *_, (kind, end) = client.watch(job)
    assert kind == "end" and end["state"] == "cancelled"


def test_errors_use_python_spelling(client, prefix):
    """The daemon's 'already exists ("replace": true redefines it)' reads as
    the keyword a Python caller passes: replace=True."""
    _mlp(client, prefix + "dup")
    with pytest.raises(tensord.AlreadyExists) as e:
        _mlp(client, prefix + "dup")
    assert "replace=True" in str(e.value) and '"replace"' not in str(e.value)
    client.model(prefix + "dup").delete(tensors=True)


def test_rows_of_the_wrong_shape_name_the_input(client, prefix):
    """Rows that do not have the shape the model declares for an input are
    refused by the client naming that input (as Keras does), before the
    daemon would complain about the model's first matmul node."""
    m = _mlp(client, prefix + "shape")
    x, y = _data(20)
    with pytest.raises(tensord.ShapeMismatch, match=r"data\['x'\].*rows of shape \[%d\].*\[20, %d\]" % (D, D + 1)):
        m.train({"x": np.zeros((20, D + 1), np.float32), "y": y}, batch_size=10)
    with pytest.raises(tensord.ShapeMismatch, match=r"input 'y'"):
        m.train({"x": x, "y": y.reshape(20, 1, 1)}, batch_size=10)
    assert client.list(m.name + "/_") == []
    m.delete(tensors=True)

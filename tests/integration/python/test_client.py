"""The Python client (python/tensord) against a real tensord: every call,
errors as exceptions, garbage refused, pipelining, train.run progress."""
import os
import socket
import threading

import msgpack
import numpy as np
import pytest

import tensord

RNG = np.random.default_rng(7)


# ---- connecting -------------------------------------------------------------

def test_connect_path_env_default(daemon, monkeypatch):
    with tensord.connect(daemon.sock) as c:
        assert c.ping()["pong"] is True
    monkeypatch.setenv("TENSORD_SOCKET", daemon.sock)
    with tensord.Client() as c:
        assert c.path == daemon.sock and c.ping()["protocol"] == 1
    monkeypatch.setenv("TENSORD_SOCKET", "")
    assert tensord.socket_path() == tensord.DEFAULT_SOCKET == "/run/tensord/tensord.sock"
    monkeypatch.delenv("TENSORD_SOCKET")
    assert tensord.socket_path() == tensord.DEFAULT_SOCKET
    assert tensord.socket_path("/x/y.sock") == "/x/y.sock"


def test_connect_refused(tmp_path):
    path = str(tmp_path / "nobody.sock")
    with pytest.raises(tensord.ConnectionFailed) as ei:
        tensord.Client(path)
    assert path in str(ei.value)
    assert isinstance(ei.value, ConnectionError) and ei.value.name == "UNAVAILABLE"


def test_context_manager_closes(daemon):
    with tensord.Client(daemon.sock) as c:
        c.ping()
    assert c.closed
    with pytest.raises(tensord.ConnectionFailed):
        c.ping()
    c.close()  # twice is fine


# ---- ping, info ---------------------------------------------------------------

def test_ping_info(client, prefix):
    p = client.ping()
    assert p == {"pong": True, "version": p["version"], "protocol": 1}
    client.put(prefix + "x", np.zeros(4, np.float32))
    info = client.info()
    for k in ("version", "protocol", "pid", "uptime", "devices", "tensors", "connections",
              "limits"):
        assert k in info, k
    assert info["tensors"]["count"] >= 1 and info["connections"] >= 1
    assert any(d["active"] for d in info["devices"])
    assert client.max_message_bytes == info["limits"]["max_message_bytes"]
    # the daemon counts requests; ours are among them
    with pytest.raises(tensord.NotFound):
        client.stat(prefix + "missing")
    after = client.info()["requests"]
    assert after["total"] == info["requests"]["total"] + 2, (info["requests"], after)
    assert after["failed"] >= info["requests"]["failed"] + 1


# ---- put / get ------------------------------------------------------------------

@pytest.mark.parametrize("np_dtype,wire", [(np.float32, "f32"), (np.float16, "f16"),
                                           (np.int32, "i32"), (np.uint8, "u8")])
@pytest.mark.parametrize("shape", [(2, 3), (), (5,), (3, 0), (2, 1, 3, 1)])
def test_put_get_roundtrip(client, prefix, np_dtype, wire, shape):
    if np.issubdtype(np_dtype, np.integer):
        info = np.iinfo(np_dtype)
        a = RNG.integers(info.min, info.max, size=shape, endpoint=True).astype(np_dtype)
    else:
        a = RNG.standard_normal(shape).astype(np_dtype)
    meta = client.put(prefix + "t", a)
    assert meta["dtype"] == wire and meta["shape"] == list(shape)
    assert meta["bytes"] == a.nbytes and meta["version"] == 1
    b = client.get(prefix + "t")
    assert b.dtype == np_dtype and b.shape == shape
    assert b.tobytes() == a.tobytes()
    assert b.flags.writeable
    b2, m2 = client.get(prefix + "t", meta=True)
    assert "data" not in m2 and m2["name"] == prefix + "t" and m2["dtype"] == wire
    ro = client.get(prefix + "t", copy=False)
    assert not ro.flags.writeable and ro.tobytes() == a.tobytes()


def test_bf16(client, prefix):
    vals = np.array([1.0, 0.1, -3.5, 65504.0, np.inf, np.nan, 1e-30], np.float32)
    client.put(prefix + "b", vals, dtype="bf16")
    bits = client.get(prefix + "b")
    assert bits.dtype == np.uint16
    assert bits.tobytes() == tensord.f32_to_bf16(vals).tobytes()
    back = tensord.bf16_to_f32(bits)
    assert back.dtype == np.float32
    np.testing.assert_allclose(back[:4], vals[:4], rtol=1 / 128)
    assert np.isinf(back[4]) and np.isnan(back[5])
    # round to nearest even: 1 + 2^-8 is a tie between 1 and 1 + 2^-7
    assert tensord.f32_to_bf16(np.float32(1 + 2 ** -8)) == 0x3F80
    assert tensord.f32_to_bf16(np.float32(1 + 3 * 2 ** -8)) == 0x3F82
    # uint16 bit patterns go as they are
    client.put(prefix + "b2", bits, dtype="bf16")
    assert client.get(prefix + "b2").tobytes() == bits.tobytes()
    assert client.stat(prefix + "b2")["dtype"] == "bf16"
    # the server computes in bf16 too
    out = client.op_run("add", [prefix + "b", prefix + "b"])
    np.testing.assert_allclose(tensord.bf16_to_f32(out)[:3], 2 * back[:3], rtol=1 / 128)
    with pytest.raises(tensord.InvalidArgument):
        tensord.bf16_to_f32(np.zeros(2, np.float32))


def test_put_non_contiguous_and_big_endian(client, prefix):
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    for i, a in enumerate([base.T, base[:, ::2], base[::-1], base[1:3, 1:5],
                           np.broadcast_to(np.float32(3), (2, 2))]):
        assert not a.flags.c_contiguous or a.strides == (0, 0)
        client.put(prefix + "nc%d" % i, a)
        np.testing.assert_array_equal(client.get(prefix + "nc%d" % i), a)
    be = np.arange(5, dtype=">i4")
    client.put(prefix + "be", be)
    got = client.get(prefix + "be")
    assert got.dtype == np.dtype("<i4") and got.tolist() == [0, 1, 2, 3, 4]


def test_put_conversions(client, prefix):
    # Python lists: floats become f32, ints i32
    assert client.put(prefix + "l", [1.5, 2.5])["dtype"] == "f32"
    assert client.put(prefix + "li", [[1, 2], [3, 4]])["dtype"] == "i32"
    assert client.get(prefix + "li").tolist() == [[1, 2], [3, 4]]
    # float64 and int64 need an explicit dtype
    with pytest.raises(tensord.InvalidArgument, match="dtype="):
        client.put(prefix + "d", np.zeros(3))
    with pytest.raises(tensord.InvalidArgument, match="dtype="):
        client.put(prefix + "d", np.zeros(3, np.int64))
    client.put(prefix + "d", np.array([0.1, 2.0]), dtype="f16")
    assert client.get(prefix + "d").tolist() == np.array([0.1, 2.0], np.float16).tolist()
    client.put(prefix + "i", np.array([-5, 7], np.int64), dtype="i32")
    assert client.get(prefix + "i").tolist() == [-5, 7]
    client.put(prefix + "u", np.array([True, False]), dtype="u8")
    assert client.get(prefix + "u").tolist() == [1, 0]
    client.put(prefix + "f", np.array([1, 2], np.int64), dtype="f32")
    assert client.get(prefix + "f").tolist() == [1.0, 2.0]


@pytest.mark.parametrize("bad,dtype,match", [
    (np.zeros(2, np.complex64), None, "complex"),
    (np.array(["a", "b"]), None, "<U1"),
    (np.array([object()]), None, "object"),
    (np.zeros(2, [("a", "f4")]), None, "cannot store"),
    (np.zeros(2, np.float32), "f64", "unknown dtype"),
    (np.zeros(2, np.float32), "i32", "floats to integers"),
    (np.array([300]), "u8", "do not fit u8"),
    (np.array([2 ** 40]), "i32", "do not fit i32"),
    (np.array([-1], np.int32), "u8", "do not fit u8"),
    (np.zeros((1,) * 9, np.float32), None, "rank 9"),
    ("text", None, "NumPy array"),
    (None, None, "NumPy array"),
    ([[1, 2], [3]], None, "array"),
])
def test_put_garbage_refused_client_side(client, prefix, bad, dtype, match):
    with pytest.raises(tensord.InvalidArgument, match=match) as ei:
        client.put(prefix + "g", bad, dtype=dtype)
    assert ei.value.remote is False and ei.value.code == 3
    assert not client.exists(prefix + "g")
    client.ping()  # the connection is still fine


def test_put_garbage_refused_by_server(client, prefix):
    n = prefix + "s"
    cases = [
        ({"name": n, "dtype": "f32", "shape": [2 ** 40], "data": b""}, tensord.ResourceExhausted),
        ({"name": n, "dtype": "f32", "shape": [2 ** 62, 2 ** 62], "data": b""},
         tensord.ResourceExhausted),
        ({"name": n, "dtype": "f32", "shape": [3], "data": b"\0" * 8}, tensord.InvalidArgument),
        ({"name": n, "dtype": "f64", "shape": [1], "data": b"\0" * 8}, tensord.InvalidArgument),
        ({"name": n, "dtype": "f32", "shape": [-1], "data": b""}, tensord.InvalidArgument),
        ({"name": n, "dtype": "f32", "shape": [1] * 9, "data": b"\0" * 4},
         tensord.InvalidArgument),
        ({"name": "bad name", "dtype": "f32", "shape": [1], "data": b"\0" * 4},
         tensord.InvalidArgument),
        ({"name": n, "dtype": "f32", "shape": [1], "data": 1234}, tensord.InvalidArgument),
        ({"name": n, "dtype": "f32", "shape": [1], "data": b"\0" * 4, "colour": 1},
         tensord.InvalidArgument),
        ({"dtype": "f32", "shape": [1], "data": b"\0" * 4}, tensord.InvalidArgument),
    ]
    for params, cls in cases:
        with pytest.raises(cls) as ei:
            client.call("tensor.put", params)
        assert ei.value.remote and ei.value.message.startswith("tensor.put"), ei.value
    assert not client.exists(n)
    # a valid put through the raw call
    client.call("tensor.put", name=n, dtype="u8", shape=[2], data=b"\x01\x02")
    assert client.get(n).tolist() == [1, 2]


def test_limits_client_and_server_side(small_daemon, prefix):
    big = np.zeros(8192, np.float32)   # 32 KiB: over the tensor limit, under the message one
    with tensord.Client(small_daemon.sock) as c:
        c.info()
        assert c.max_message_bytes == 65536
        with pytest.raises(tensord.ResourceExhausted) as ei:
            c.put(prefix + "big", big)
        assert ei.value.remote and ei.value.message.startswith("tensor.put")
        # over the message limit: refused before anything is sent
        with pytest.raises(tensord.ResourceExhausted, match="message limit") as ei:
            c.put(prefix + "huge", np.zeros(1 << 15, np.float32))
        assert not ei.value.remote
        assert c.ping()["pong"]
        # told to ignore it, the client sends; the daemon refuses the stream and closes
        c.max_message_bytes = 1 << 30
        with pytest.raises(tensord.ResourceExhausted, match="closed the stream"):
            c.put(prefix + "huge", np.zeros(1 << 15, np.float32))
        assert c.closed
        with pytest.raises(tensord.ConnectionFailed):
            c.ping()
    with tensord.Client(small_daemon.sock) as c:
        assert c.ping()["pong"]


# ---- modes (docs/security.md; other users are tested in tests/integration/test_security.py) ----

def test_put_mode_and_chmod(client, prefix):
    st = client.put(prefix + "m", np.ones(2, np.float32))
    assert st["mode"] == "private" and st["owner"] == os.geteuid()
    st = client.put(prefix + "m", np.ones(2, np.float32), mode="world-read")
    assert st["mode"] == "world-read" and st["version"] == 2
    st = client.chmod(prefix + "m", "group-write,world-read", group=100)
    assert st["mode"] == "group-write,world-read" and st["group"] == 100
    assert client.chmod(prefix + "m", group=5)["mode"] == "group-write,world-read"
    with pytest.raises(tensord.InvalidArgument):
        client.chmod(prefix + "m", "rwx")
    with pytest.raises(tensord.InvalidArgument):
        client.chmod(prefix + "m")
    with pytest.raises(tensord.NotFound):
        client.chmod(prefix + "none", "private")
    client.delete(prefix + "m")


# ---- stat, list, delete ---------------------------------------------------------

def test_stat_list_delete(client, prefix):
    for n in ("b", "a", "c/x"):
        client.put(prefix + n, np.ones(3, np.float32))
    st = client.stat(prefix + "a")
    assert st["name"] == prefix + "a" and st["shape"] == [3] and st["bytes"] == 12
    assert set(st) >= {"owner", "created", "modified", "version", "device"}
    names = [t["name"] for t in client.list(prefix)]
    assert names == [prefix + "a", prefix + "b", prefix + "c/x"]
    assert [t["name"] for t in client.list(prefix + "c/")] == [prefix + "c/x"]
    assert client.list(prefix + "zzz") == []
    assert len(client.list()) >= 3
    assert client.delete(prefix + "a") == {"name": prefix + "a", "deleted": True, "bytes": 12}
    assert not client.exists(prefix + "a") and prefix + "b" in client
    with pytest.raises(tensord.NotFound) as ei:
        client.delete(prefix + "a")
    assert ei.value.code == 5 and ei.value.name == "NOT_FOUND" and isinstance(ei.value, LookupError)
    with pytest.raises(tensord.NotFound):
        client.stat(prefix + "a")
    with pytest.raises(tensord.NotFound):
        client.get(prefix + "a")
    with pytest.raises(tensord.InvalidArgument):
        client.stat(42)
    with pytest.raises(tensord.InvalidArgument):
        client.stat("")


def test_if_absent(client, prefix):
    client.put(prefix + "x", np.ones(2, np.float32), if_absent=True)
    with pytest.raises(tensord.AlreadyExists) as ei:
        client.put(prefix + "x", np.zeros(2, np.float32), if_absent=True)
    assert ei.value.code == 6
    assert client.get(prefix + "x").tolist() == [1, 1]
    assert client.put(prefix + "x", np.zeros(2, np.float32))["version"] == 2


# ---- op.run, graph.run ------------------------------------------------------------

def test_op_run(client, prefix):
    a = RNG.standard_normal((3, 4)).astype(np.float32)
    b = RNG.standard_normal((4, 2)).astype(np.float32)
    client.put(prefix + "a", a)
    client.put(prefix + "b", b)
    np.testing.assert_allclose(client.op_run("matmul", [prefix + "a", prefix + "b"]), a @ b,
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(client.run("mul", [prefix + "a"], {"scalar": np.float32(2.5)}),
                               a * 2.5, rtol=1e-6)
    meta = client.op_run("sum", [prefix + "a"], out=prefix + "s")
    assert meta["name"] == prefix + "s" and meta["shape"] == []
    np.testing.assert_allclose(client.get(prefix + "s"), a.sum(), rtol=1e-5)
    # the result may replace an input
    client.op_run("add", [prefix + "a", prefix + "a"], out=prefix + "a")
    np.testing.assert_allclose(client.get(prefix + "a"), 2 * a, rtol=1e-6)
    client.put(prefix + "i", np.arange(3, dtype=np.int32))
    with pytest.raises(tensord.ShapeMismatch) as ei:
        client.op_run("matmul", [prefix + "a", prefix + "a"])
    assert ei.value.code == 100 and "matmul" in ei.value.message
    with pytest.raises(tensord.DtypeMismatch) as ei:
        client.op_run("add", [prefix + "a", prefix + "i"])
    assert ei.value.code == 101
    with pytest.raises(tensord.NotFound):
        client.op_run("add", [prefix + "a", prefix + "missing"])
    with pytest.raises(tensord.InvalidArgument):
        client.op_run("no_such_op", [prefix + "a"])
    with pytest.raises(tensord.InvalidArgument):
        client.op_run("add", [prefix + "a", prefix + "a"], {"colour": "red"})
    with pytest.raises(tensord.InvalidArgument):
        client.op_run("add", [prefix + "a", 7])
    with pytest.raises(tensord.InvalidArgument):
        client.op_run("add", [prefix + "a"], {"scalar": object()})


def test_graph_run(client, prefix):
    a = np.arange(4, dtype=np.float32).reshape(2, 2)
    b = np.full((2, 2), 10, np.float32)
    client.put(prefix + "a", a)
    client.put(prefix + "b", b)
    res = client.graph_run([
        {"id": "s", "op": "add", "inputs": [prefix + "a", prefix + "b"]},
        {"id": "p", "op": "mul", "inputs": ["s", prefix + "a"], "out": prefix + "p"},
    ], outputs=["s", "p"])
    np.testing.assert_array_equal(res["outputs"]["s"], a + b)
    np.testing.assert_array_equal(res["outputs"]["p"], (a + b) * a)
    assert list(res["stored"]) == [prefix + "p"]
    np.testing.assert_array_equal(client.get(prefix + "p"), (a + b) * a)
    with pytest.raises(tensord.InvalidArgument, match="later"):
        client.graph_run([{"id": "x", "op": "add", "inputs": ["y", prefix + "a"]},
                          {"id": "y", "op": "add", "inputs": [prefix + "a", prefix + "a"]}])
    with pytest.raises(tensord.InvalidArgument):
        client.graph_run([])
    with pytest.raises(tensord.InvalidArgument):
        client.graph_run([1, 2, 3])


# ---- training ------------------------------------------------------------------

def _regression(client, prefix, rows=64):
    x = RNG.standard_normal((rows, 3)).astype(np.float32)
    w = np.array([[2.0], [-3.0], [0.5]], np.float32)
    client.put(prefix + "x", x)
    client.put(prefix + "y", x @ w + np.float32(0.7))
    client.put(prefix + "w", np.zeros((3, 1), np.float32))
    client.put(prefix + "b", np.zeros(1, np.float32))
    nodes = [{"id": "xw", "op": "matmul", "inputs": ["bx", prefix + "w"]},
             {"id": "pred", "op": "add", "inputs": ["xw", prefix + "b"]},
             {"id": "loss", "op": "mse", "inputs": ["pred", "by"]}]
    return nodes, w


def test_train_step(client, prefix):
    client.put(prefix + "x", np.array([[1, 2], [3, 4]], np.float32))
    client.put(prefix + "w", np.zeros((2, 1), np.float32))
    client.put(prefix + "y", np.array([[1], [2]], np.float32))
    nodes = [{"id": "xw", "op": "matmul", "inputs": [prefix + "x", prefix + "w"]},
             {"id": "loss", "op": "mse", "inputs": ["xw", prefix + "y"]}]
    r = client.train_step(nodes, "loss", [prefix + "w"], optimizer={"type": "sgd", "lr": 0.01},
                          outputs=["xw"], grads=True)
    assert abs(r["loss"] - 2.5) < 1e-5 and r["step"] == 1 and abs(r["lr"] - 0.01) < 1e-9
    np.testing.assert_array_equal(r["outputs"]["xw"], np.zeros((2, 1), np.float32))
    assert prefix + "w" in r["stored"] and prefix + "w.grad" in r["stored"]
    # d(mse)/dw = 2/n * x^T (xw - y) = x^T (-y) at w = 0
    grad = np.array([[1, 2], [3, 4]], np.float32).T @ -np.array([[1], [2]], np.float32)
    np.testing.assert_allclose(client.get(prefix + "w.grad"), grad, rtol=1e-5)
    np.testing.assert_allclose(client.get(prefix + "w"), -0.01 * grad, rtol=1e-5)
    with pytest.raises(tensord.InvalidArgument):
        client.train_step(nodes, "nope", [prefix + "w"])
    with pytest.raises(tensord.NotFound):
        client.train_step(nodes, "loss", [prefix + "missing"])


def test_train_run_with_progress(client, prefix):
    nodes, w_true = _regression(client, prefix)
    progress, evals, order = [], [], []
    res = client.train_run(
        nodes, "loss", [prefix + "w", prefix + "b"],
        data={"bx": prefix + "x", "by": prefix + "y"}, batch_size=16,
        optimizer={"type": "sgd", "lr": 0.1}, epochs=20, seed=3, progress_every=8,
        eval={"data": {"bx": prefix + "x", "by": prefix + "y"}, "every": 40},
        on_progress=lambda p: (progress.append(p), order.append("p")),
        on_eval=lambda e: (evals.append(e), order.append("e")))
    assert res["steps"] == 80 and res["epochs"] == 20 and res["stopped"] == "done"
    assert res["loss"] < 1e-3 and res["samples_per_s"] > 0
    assert [p["step"] for p in progress] == list(range(8, 81, 8))
    for p in progress:
        assert p["steps"] == 80 and p["epochs"] == 20 and "loss" in p and "lr" in p
    assert progress[-1]["loss"] < progress[0]["loss"]
    assert [e["step"] for e in evals] == [40, 80] and evals[-1]["loss"] < evals[0]["loss"]
    assert order.count("e") == 2
    np.testing.assert_allclose(client.get(prefix + "w"), w_true, atol=0.02)
    np.testing.assert_allclose(client.get(prefix + "b"), [0.7], atol=0.02)
    # without callbacks, notifications are skipped
    res = client.train_run(nodes, "loss", [prefix + "w", prefix + "b"],
                           data={"bx": prefix + "x", "by": prefix + "y"}, batch_size=16,
                           steps=4, start_step=81)
    assert res["steps"] == 4
    # a run that goes on from step 85 (as on a model trained before): the
    # README's progress line is the run's own step of its total
    lines = []

    def readme_progress(p):
        lines.append(("step %d/%d" % (p["run_step"], p["steps"]), p["step"]))
    client.train_run(nodes, "loss", [prefix + "w", prefix + "b"],
                     data={"bx": prefix + "x", "by": prefix + "y"}, batch_size=16,
                     steps=3, start_step=85, progress_every=1, on_progress=readme_progress)
    assert lines == [("step 1/3", 85), ("step 2/3", 86), ("step 3/3", 87)], lines
    # other notifications and the generic form
    seen = []
    client.call("train.run", nodes=nodes, loss="loss", params=[prefix + "w"],
                data={"bx": prefix + "x", "by": prefix + "y"}, batch_size=64, steps=2,
                progress_every=1, on_notify=lambda m, p: seen.append(m))
    assert seen == ["train.progress", "train.progress"]


def test_train_run_errors(client, prefix):
    nodes, _ = _regression(client, prefix)
    data = {"bx": prefix + "x", "by": prefix + "y"}
    params = [prefix + "w", prefix + "b"]
    with pytest.raises(tensord.InvalidArgument):
        client.train_run(nodes, "loss", params, data, batch_size=0)
    with pytest.raises(tensord.InvalidArgument):
        client.train_run(nodes, "loss", params, data, batch_size=8, epochs=1, steps=2)
    with pytest.raises(tensord.NotFound):
        client.train_run(nodes, "loss", params, {"bx": prefix + "nope", "by": prefix + "y"}, 8)
    with pytest.raises(tensord.InvalidArgument):
        client.train_run(nodes, "loss", params, data, 8, colour="red")
    assert client.ping()["pong"]


class Stop(Exception):
    pass


def assert_run_stopped(c, name):
    """The parameter `name` stops changing soon: no train.run updates it."""
    import time
    v = c.stat(name)["version"]
    for _ in range(20):
        time.sleep(0.2)
        w = c.stat(name)["version"]
        if w == v:
            time.sleep(0.5)
            assert c.stat(name)["version"] == v, "the run goes on"
            return
        v = w
    raise AssertionError("%s is still being updated: the run was not cancelled" % name)


def test_train_run_callback_raises_cancels(daemon, prefix):
    with tensord.Client(daemon.sock) as c:
        nodes, _ = _regression(c, prefix, rows=256)
        seen = []

        def on_progress(p):
            seen.append(p["step"])
            if len(seen) == 2:
                raise Stop()
        with pytest.raises(Stop):
            c.train_run(nodes, "loss", [prefix + "w", prefix + "b"],
                        {"bx": prefix + "x", "by": prefix + "y"}, batch_size=1, epochs=100,
                        progress_every=1, on_progress=on_progress)
        assert seen == [1, 2] and c.closed
        assert c.ping()["pong"]   # on a new connection
    # the daemon cancelled the run (it would take 25600 steps) and serves others
    with tensord.Client(daemon.sock, timeout=60) as c:
        assert c.ping()["pong"]
        assert_run_stopped(c, prefix + "w")


def test_interrupted_wait_closes_and_cancels(daemon, prefix):
    """An exception raised while waiting (a signal handler's, Ctrl-C) closes
    the connection, which cancels the run; the client's next call opens a
    new connection (issue 35: it stayed unusable)."""
    import signal

    def on_alarm(signum, frame):
        raise Stop()
    old = signal.signal(signal.SIGALRM, on_alarm)
    try:
        with tensord.Client(daemon.sock) as c:
            nodes, _ = _regression(c, prefix, rows=256)
            signal.setitimer(signal.ITIMER_REAL, 0.5)
            with pytest.raises(Stop):
                c.train_run(nodes, "loss", [prefix + "w", prefix + "b"],
                            {"bx": prefix + "x", "by": prefix + "y"}, batch_size=1, epochs=100)
            assert c.closed
            assert c.ping()["pong"] and not c.closed
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    with tensord.Client(daemon.sock, timeout=60) as c:
        assert c.ping()["pong"]
        assert_run_stopped(c, prefix + "w")


# ---- the generic call, errors --------------------------------------------------------

def test_generic_call(client, prefix):
    assert client.call("ping")["pong"]
    assert client.call("ping", {})["pong"]
    client.put(prefix + "a", np.ones(2, np.float32))
    r = client.call("tensor.get", {"name": prefix + "a"})
    assert r["data"] == np.ones(2, np.float32).tobytes()
    assert client.call("tensor.stat", name=prefix + "a")["bytes"] == 8
    with pytest.raises(tensord.Unimplemented) as ei:
        client.call("model.frobnicate", {"x": 1})
    assert ei.value.code == 12 and ei.value.remote
    with pytest.raises(tensord.InvalidArgument):
        client.call("ping", [1, 2])
    with pytest.raises(tensord.InvalidArgument):
        client.call(7)
    with pytest.raises(tensord.InvalidArgument):
        client.call("ping", {"unknown": 1})


def test_error_classes():
    assert tensord.STATUS_CODES["SHAPE_MISMATCH"] == 100
    for name, code in tensord.STATUS_CODES.items():
        e = tensord.error_from_map({"code": code, "name": name, "message": "m"})
        assert type(e).name == name and e.code == code and e.remote
        assert isinstance(e, tensord.TensordError) and str(e) == "%s: m" % name
    e = tensord.error_from_map({"code": 42, "name": "NEW_STATUS", "message": "x"})
    assert type(e) is tensord.TensordError and e.name == "NEW_STATUS" and e.code == 42
    e = tensord.error_from_map({"code": 5})
    assert isinstance(e, tensord.NotFound) and e.message == ""
    e = tensord.error_from_map({"code": "five", "name": 7, "message": b"x"})
    assert type(e) is tensord.TensordError
    assert isinstance(tensord.error_from_map("garbage"), tensord.ProtocolError)
    assert issubclass(tensord.InvalidArgument, ValueError)
    assert issubclass(tensord.DeadlineExceeded, TimeoutError)


# ---- pipelining ----------------------------------------------------------------------

def test_pipeline(client, prefix):
    with client.pipeline() as p:
        puts = [p.put(prefix + "p%03d" % i, np.full(4, i, np.float32)) for i in range(200)]
        gets = [p.get(prefix + "p%03d" % i) for i in range(200)]
        missing = p.stat(prefix + "missing")
        last = p.op_run("add", [prefix + "p001", prefix + "p002"])
    assert all(x.done() for x in puts + gets + [missing, last])
    assert [g.result()[0] for g in gets] == list(range(200))
    assert isinstance(missing.exception(), tensord.NotFound)
    assert last.result().tolist() == [3, 3, 3, 3]
    with pytest.raises(tensord.NotFound):
        p.results()
    assert len(client.list(prefix)) == 200


def test_pipeline_large_no_deadlock(client, prefix):
    """Responses larger than the daemon's output backlog while the client is
    still sending: the client must read while it writes."""
    mib = np.arange(1 << 18, dtype=np.float32)  # 1 MiB
    client.put(prefix + "big", mib)
    p = client.pipeline()
    gets = [p.get(prefix + "big") for _ in range(24)]
    puts = [p.put(prefix + "w%d" % i, mib + i) for i in range(16)]
    for g in gets:
        np.testing.assert_array_equal(g.result(), mib)
    assert [x.result()["bytes"] for x in puts] == [1 << 20] * 16
    np.testing.assert_array_equal(client.get(prefix + "w15"), mib + 15)


def test_large_tensor(client, prefix):
    a = RNG.integers(0, 256, size=(64, 1024, 1024), dtype=np.uint8)  # 64 MiB
    client.put(prefix + "big", a)
    b = client.get(prefix + "big")
    assert b.shape == a.shape and np.array_equal(a, b)
    client.delete(prefix + "big")


def test_large_get_lands(client, prefix, monkeypatch):
    """A plain get of 1 MiB or more is received straight into the array's
    memory (Client._land): the bytes exact, the array its own (writable)
    with copy, read-only without; in a pipeline the answers around landed
    ones (an error, small tensors) still parse."""
    landed = []
    land = tensord.Client._land

    def spy(self, n):
        took = land(self, n)
        landed.append(took)
        return took
    monkeypatch.setattr(tensord.Client, "_land", spy)
    a = RNG.standard_normal((3, 1 << 18), dtype=np.float32)  # 3 MiB
    client.put(prefix + "big", a)
    client.put(prefix + "small", np.arange(5, dtype=np.int32))
    b = client.get(prefix + "big", memfd=False)
    assert b.flags.writeable and b.dtype == np.float32 and np.array_equal(a, b)
    b[0, 0] = 1.0
    ro = client.get(prefix + "big", memfd=False, copy=False)
    assert not ro.flags.writeable and np.array_equal(a, ro)
    with client.pipeline() as p:
        gets = [p.get(prefix + "big", memfd=False) for _ in range(3)]
        missing = p.get(prefix + "missing", memfd=False)
        small = p.get(prefix + "small", memfd=False)
        last = p.get(prefix + "big", memfd=False)
    for g in gets + [last]:
        assert np.array_equal(g.result(), a)
    assert isinstance(missing.exception(), tensord.NotFound)
    assert small.result().tolist() == [0, 1, 2, 3, 4]
    assert landed.count(True) >= 3


# ---- a misbehaving peer -------------------------------------------------------------------

CLOSE = b""


class FakeServer:
    """A Unix socket that answers every request with `reply(msg)` bytes
    (None: no answer; CLOSE: close the connection)."""

    def __init__(self, path, reply):
        self.path = path
        self.reply = reply
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(1)
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        conn, _ = self.sock.accept()
        unp = msgpack.Unpacker(raw=False)
        with conn:
            while True:
                data = conn.recv(65536)
                if not data:
                    return
                unp.feed(data)
                for msg in unp:
                    out = self.reply(msg)
                    if out is None:
                        continue
                    if out == CLOSE:
                        return
                    try:
                        conn.sendall(out)
                    except OSError:
                        return

    def close(self):
        self.sock.close()


# The stream breaks (and the client closes) unless only one response is bad.
@pytest.mark.parametrize("reply,cls,match", [
    (lambda m: b"\xc1\xc1\xc1", tensord.ProtocolError, "undecodable"),
    (lambda m: msgpack.packb([1, m[1] + 5, None, {}]), tensord.ProtocolError, "not sent"),
    (lambda m: msgpack.packb([0, 1, "ping", []]), tensord.ProtocolError, "no response"),
    (lambda m: msgpack.packb({"a": 1}), tensord.ProtocolError, "no response"),
    (lambda m: msgpack.packb([1, m[1]]), tensord.ProtocolError, "malformed response"),
    (lambda m: msgpack.packb([2, 7, []]), tensord.ProtocolError, "malformed notification"),
    (lambda m: msgpack.packb([1, m[1], None, {"dtype": "f32", "shape": [3], "data": b"x"}]),
     tensord.ProtocolError, "malformed result"),
    (lambda m: msgpack.packb([1, m[1], None, {"dtype": "f99", "shape": [1], "data": b"x"}]),
     tensord.ProtocolError, "malformed result"),
    (lambda m: msgpack.packb([1, m[1], "oops", None]), tensord.ProtocolError, "malformed error"),
    (lambda m: msgpack.packb([2, "protocol.error", [{"code": 103, "name": "PROTOCOL",
                                                      "message": "bad"}]]),
     tensord.ProtocolError, "closed the stream: bad"),
    (lambda m: CLOSE, tensord.ConnectionFailed, "closed the connection"),
])
def test_garbage_from_peer(tmp_path, reply, cls, match):
    path = str(tmp_path / "fake.sock")
    srv = FakeServer(path, reply)
    try:
        with tensord.Client(path, timeout=10) as c:
            with pytest.raises(cls, match=match):
                c.get("x")
            if match in ("malformed result", "malformed error"):
                assert not c.closed  # the framing is intact: only that call failed
            else:
                assert c.closed
                with pytest.raises(tensord.ConnectionFailed):
                    c.ping()
    finally:
        srv.close()


def test_timeout(tmp_path):
    path = str(tmp_path / "silent.sock")
    srv = FakeServer(path, lambda m: None)
    try:
        with tensord.Client(path, timeout=0.3) as c:
            with pytest.raises(tensord.DeadlineExceeded):
                c.ping()
            assert c.closed
    finally:
        srv.close()


def test_daemon_alive_after_all(daemon):
    assert daemon.alive()
    with tensord.Client(daemon.sock) as c:
        assert c.ping()["pong"]

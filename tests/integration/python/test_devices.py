"""The Python client and several devices (docs/devices.md): put/op_run
`device`, copy, graph nodes on two devices, data-parallel train_run, and
device arguments that are garbage. The daemon opens the one Vulkan device
twice (`--device 0,0`): two logical devices that behave like two GPUs."""
import numpy as np
import pytest

import tensord
from daemon import Daemon


@pytest.fixture(scope="module")
def two(request):
    d = Daemon(["--device", "0,0"]).start()
    try:
        yield d
    finally:
        d.stop()


@pytest.fixture
def c(two):
    with tensord.Client(two.sock, timeout=120) as cl:
        yield cl


def test_info_lists_two_devices(c):
    active = [d for d in c.info()["devices"] if d["active"]]
    assert sorted(d["id"] for d in active) == [0, 1]
    assert all(0 <= d["load"] <= 1 and d["memory_limit"] > 0 for d in active), active


def test_put_device_and_copy(c, prefix):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert c.put(prefix + "a", a, device=1)["device"] == 1
    assert c.put(prefix + "a", a + 1)["device"] == 1          # replaced: stays
    assert c.stat(prefix + "a")["device"] == 1
    m = c.copy(prefix + "a", prefix + "a0", device=0)
    assert m["device"] == 0 and m["name"] == prefix + "a0"
    np.testing.assert_array_equal(c.get(prefix + "a0"), a + 1)
    assert c.copy(prefix + "a", prefix + "a1")["device"] == 1  # default: src's device
    c.chmod(prefix + "a", "group-read")
    m = c.copy(prefix + "a", prefix + "a", device=np.int64(0))  # a move
    assert m["device"] == 0 and m["mode"] == "group-read"
    np.testing.assert_array_equal(c.get(prefix + "a"), a + 1)
    with pytest.raises(tensord.NotFound):
        c.copy(prefix + "missing", prefix + "x")
    with pytest.raises(tensord.InvalidArgument) as e:
        c.copy(prefix + "a", prefix + "x", device=9)
    assert e.value.remote
    with pytest.raises(tensord.InvalidArgument) as e:
        c.put(prefix + "x", a, device=9)
    assert e.value.remote
    assert not c.exists(prefix + "x")


@pytest.mark.parametrize("dev", [-1, "1", 1.0, True, [1], {"id": 1}, 2**31 + 0.5])
def test_garbage_device_refused_before_sending(c, prefix, dev):
    a = np.ones(2, np.float32)
    for call in (lambda: c.put(prefix + "g", a, device=dev),
                 lambda: c.copy(prefix + "g", prefix + "h", device=dev),
                 lambda: c.op_run("add", [prefix + "g", prefix + "g"], device=dev),
                 lambda: c.train_run([], "l", ["w"], {}, 2, devices=[0, dev])):
        with pytest.raises(tensord.InvalidArgument) as e:
            call()
        assert not e.value.remote
    with pytest.raises(tensord.InvalidArgument):
        c.train_run([], "l", ["w"], {}, 2, devices="0,1")
    with pytest.raises(tensord.InvalidArgument):
        c.train_run([], "l", ["w"], {}, 2, devices=5)
    assert c.ping()["pong"]


def test_op_run_and_graph_on_devices(c, prefix):
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    y = np.full((2, 3), 0.5, np.float32)
    c.put(prefix + "x1", x, device=1)
    c.put(prefix + "y0", y, device=0)
    with pytest.raises(tensord.FailedPrecondition):
        c.op_run("add", [prefix + "x1", prefix + "y0"])
    c.copy(prefix + "y0", prefix + "y1", device=1)
    np.testing.assert_allclose(c.op_run("add", [prefix + "x1", prefix + "y1"], device=1), x + y)
    with pytest.raises(tensord.FailedPrecondition):
        c.op_run("add", [prefix + "x1", prefix + "y1"], device=0)
    m = c.op_run("mul", [prefix + "x1", prefix + "y1"], out=prefix + "p")
    assert m["device"] == 1
    m = c.op_run("zeros", [], {"shape": [4]}, out=prefix + "z", device=0)
    assert m["device"] == 0
    r = c.graph_run([{"id": "s", "op": "add", "inputs": [prefix + "x1", prefix + "y1"]},
                     {"id": "t", "op": "ones", "inputs": [], "attrs": {"shape": [2, 3]},
                      "device": 0},
                     {"id": "u", "op": "add", "inputs": ["t", prefix + "y0"], "out": prefix + "u"}],
                    outputs=["s", "u"])
    np.testing.assert_allclose(r["outputs"]["s"], x + y)
    np.testing.assert_allclose(r["outputs"]["u"], y + 1)
    assert r["stored"][prefix + "u"]["device"] == 0
    with pytest.raises(tensord.FailedPrecondition):
        c.graph_run([{"id": "s", "op": "add", "inputs": [prefix + "x1", prefix + "y1"]},
                     {"id": "v", "op": "add", "inputs": ["s", prefix + "y0"], "out": prefix + "v"}])
    assert not c.exists(prefix + "v")


def test_train_run_data_parallel(c, prefix):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((48, 4)).astype(np.float32)
    y = (x @ np.array([[1.0], [0.5], [-1.0], [2.0]], np.float32) - 0.25).astype(np.float32)
    c.put(prefix + "x", x, device=0)
    c.put(prefix + "y", y, device=0)
    results = {}
    for run, devices in (("one", None), ("dp", [0, 1])):
        w, b = prefix + run + "/w", prefix + run + "/b"
        c.put(w, np.zeros((4, 1), np.float32), device=0)
        c.put(b, np.zeros(1, np.float32), device=0)
        nodes = [{"id": "h", "op": "matmul", "inputs": ["bx", w]},
                 {"id": "p", "op": "add", "inputs": ["h", b]},
                 {"id": "L", "op": "mse", "inputs": ["p", "by"]}]
        progress = []
        res = c.train_run(nodes, "L", [w, b], {"bx": prefix + "x", "by": prefix + "y"}, 12,
                          epochs=8, seed=5, optimizer={"type": "adam", "lr": 0.05},
                          devices=devices, on_progress=progress.append)
        assert progress and res["steps"] == 32
        results[run] = (res, c.get(w), c.get(b))
    res, w, b = results["dp"]
    assert res["devices"] == [0, 1] and res["replica_max_diff"] == 0, res
    assert "devices" not in results["one"][0]
    np.testing.assert_allclose(w, results["one"][1], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(b, results["one"][2], rtol=1e-4, atol=1e-5)
    with pytest.raises(tensord.InvalidArgument):   # ids not distinct
        c.train_run(nodes, "L", [prefix + "dp/w", prefix + "dp/b"],
                    {"bx": prefix + "x", "by": prefix + "y"}, 12, devices=[0, 0])
    with pytest.raises(tensord.InvalidArgument):
        c.train_run(nodes, "L", [prefix + "dp/w", prefix + "dp/b"],
                    {"bx": prefix + "x", "by": prefix + "y"}, 13, devices=[0, 1])

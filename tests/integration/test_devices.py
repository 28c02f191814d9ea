#!/usr/bin/python3
"""Several devices (docs/devices.md) against a real tensord started with
`--device 0,0`: two Vulkan logical devices on lavapipe, each with its own
queue and memory, which is how the suite gets two devices without two GPUs.

Checks placement (explicit, default by free memory, replacement keeps its
device), tensor.copy between devices and on one (bytes equal, a move keeps
owner and mode), ops on each device against NumPy, inputs on two devices
refused before anything runs, one graph.run with a part on each device,
info's per-device entries, checkpoints restoring tensors to their device,
data-parallel train.run over both devices against a one-device run, and
garbage for every new parameter."""
import os
import sys
import tempfile
import time

import numpy as np

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from daemon import Daemon, RPCError, pings_during  # noqa: E402

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL", what)


def put(c, name, arr, **kw):
    arr = np.ascontiguousarray(arr)
    p = {"name": name, "dtype": {"float32": "f32", "int32": "i32"}[str(arr.dtype)],
         "shape": list(arr.shape), "data": arr.tobytes()}
    p.update(kw)
    return c.call("tensor.put", p)


def get(c, name):
    r = c.call("tensor.get", {"name": name})
    dt = {"f32": np.float32, "i32": np.int32}[r["dtype"]]
    return np.frombuffer(r["data"], dtype=dt).reshape(r["shape"])


def err(c, method, params):
    e, _ = c.call_full(method, params)
    return (e or {}).get("name"), (e or {}).get("message", "")


def test_placement_and_copy(c, rng):
    info = c.call("info")
    active = [d for d in info["devices"] if d["active"]]
    check([d["id"] for d in active] == [0, 1], "two active devices with ids 0, 1: %r" % active)
    for d in active:
        for k in ("memory_limit", "tensors", "submissions", "busy_seconds", "load"):
            check(k in d, "device %s has %s" % (d.get("id"), k))

    a = rng.standard_normal((3, 5)).astype(np.float32)
    b = rng.standard_normal((3, 5)).astype(np.float32)
    check(put(c, "a0", a, device=0)["device"] == 0, "put on device 0")
    check(put(c, "b1", b, device=1)["device"] == 1, "put on device 1")
    check(c.call("tensor.stat", {"name": "b1"})["device"] == 1, "stat shows device 1")
    # Replacing without `device` keeps the device.
    check(put(c, "b1", b)["device"] == 1, "a replacement stays on its device")
    # Default: where the caller's tensors are (most of its bytes), even though
    # device 1 has more free memory now.
    big = np.zeros((64, 1024), np.float32)
    put(c, "big0", big, device=0)
    free = {x["id"]: x["memory_limit"] - x["memory_used"] for x in c.call("info")["devices"] if x["active"]}
    check(free[1] > free[0], "device 1 has more free memory: %r" % free)
    check(put(c, "fresh", a)["device"] == 0, "a new tensor goes where the caller's bytes are")
    c.call("tensor.delete", {"name": "fresh"})

    # Ops run where their inputs are; results stay there.
    r = c.call("op.run", {"op": "add", "inputs": ["b1", "b1"], "out": "s1"})
    check(r["device"] == 1, "op result on its inputs' device")
    check(np.allclose(get(c, "s1"), b + b), "add on device 1 = NumPy")
    r = c.call("op.run", {"op": "mul", "inputs": ["a0", "a0"], "out": "s0"})
    check(r["device"] == 0 and np.allclose(get(c, "s0"), a * a), "mul on device 0 = NumPy")

    # Inputs on two devices: refused before anything runs, naming the devices.
    e = err(c, "op.run", {"op": "add", "inputs": ["a0", "b1"], "out": "bad"})
    check(e[0] == "FAILED_PRECONDITION" and "device 0" in e[1] and "device 1" in e[1],
          "mixed devices refused: %r" % (e,))
    check(err(c, "tensor.stat", {"name": "bad"})[0] == "NOT_FOUND", "nothing stored after a refusal")
    e = err(c, "op.run", {"op": "neg", "inputs": ["a0"], "device": 1})
    check(e[0] == "FAILED_PRECONDITION", "a device the inputs are not on: %r" % (e,))
    r = c.call("op.run", {"op": "neg", "inputs": ["a0"], "device": 0})
    check(np.allclose(np.frombuffer(r["data"], np.float32).reshape(3, 5), -a), "explicit matching device")

    # tensor.copy across devices and on one device.
    r = c.call("tensor.copy", {"src": "a0", "dst": "a1", "device": 1})
    check(r["device"] == 1 and r["shape"] == [3, 5] and r["dtype"] == "f32", "copy metadata %r" % r)
    check(np.array_equal(get(c, "a1"), a), "copied bytes equal")
    r = c.call("tensor.copy", {"src": "a0", "dst": "a0b"})
    check(r["device"] == 0 and np.array_equal(get(c, "a0b"), a), "copy on one device")
    r = c.call("op.run", {"op": "add", "inputs": ["a1", "b1"]})
    check(np.allclose(np.frombuffer(r["data"], np.float32).reshape(3, 5), a + b), "op on the copy")
    # A move keeps mode and bumps the version.
    c.call("tensor.chmod", {"name": "a0b", "mode": "world-read"})
    v = c.call("tensor.stat", {"name": "a0b"})["version"]
    r = c.call("tensor.copy", {"src": "a0b", "dst": "a0b", "device": 1})
    check(r["device"] == 1 and r["mode"] == "world-read" and r["version"] == v + 1, "move: %r" % r)
    check(np.array_equal(get(c, "a0b"), a), "moved bytes equal")
    # A big one through the copy path, and a copy back.
    x = rng.standard_normal((257, 1031)).astype(np.float32)
    put(c, "x0", x, device=0)
    c.call("tensor.copy", {"src": "x0", "dst": "x1", "device": 1})
    c.call("tensor.copy", {"src": "x1", "dst": "x0back", "device": 0})
    check(np.array_equal(get(c, "x0back"), x), "round trip 0 -> 1 -> 0 byte-exact")

    # info counts tensors per device.
    per = {d["id"]: d["tensors"] for d in c.call("info")["devices"] if d["active"]}
    listed = c.call("tensor.list")["tensors"]
    want = {0: sum(1 for t in listed if t["device"] == 0), 1: sum(1 for t in listed if t["device"] == 1)}
    check(per == want, "info tensors per device %r = list %r" % (per, want))
    used = {d["id"]: d["memory_used"] for d in c.call("info")["devices"] if d["active"]}
    check(used[0] >= big.nbytes and used[1] >= x.nbytes, "memory used per device %r" % used)


def test_graph_two_devices(c, rng):
    w0 = rng.standard_normal((16, 8)).astype(np.float32)
    w1 = rng.standard_normal((16, 8)).astype(np.float32)
    x0 = rng.standard_normal((4, 16)).astype(np.float32)
    put(c, "g/w0", w0, device=0)
    put(c, "g/x0", x0, device=0)
    put(c, "g/w1", w1, device=1)
    put(c, "g/x1", x0, device=1)
    r = c.call("graph.run", {"nodes": [
        {"id": "h0", "op": "matmul", "inputs": ["g/x0", "g/w0"]},
        {"id": "y0", "op": "relu", "inputs": ["h0"], "out": "g/y0"},
        {"id": "h1", "op": "matmul", "inputs": ["g/x1", "g/w1"], "device": 1},
        {"id": "y1", "op": "tanh", "inputs": ["h1"], "out": "g/y1"},
        {"id": "z", "op": "full", "inputs": [], "attrs": {"shape": [2, 2], "value": 3.0}, "device": 1},
    ], "outputs": ["h1", "z"], "profile": True})
    check(r["stored"]["g/y0"]["device"] == 0 and r["stored"]["g/y1"]["device"] == 1,
          "each part stored on its device")
    check(np.allclose(get(c, "g/y0"), np.maximum(x0 @ w0, 0), atol=1e-4), "device 0 part = NumPy")
    check(np.allclose(get(c, "g/y1"), np.tanh(x0 @ w1), atol=1e-4), "device 1 part = NumPy")
    h1 = np.frombuffer(r["outputs"]["h1"]["data"], np.float32).reshape(4, 8)
    check(np.allclose(h1, x0 @ w1, atol=1e-4), "inline output from device 1")
    check(np.all(np.frombuffer(r["outputs"]["z"]["data"], np.float32) == 3.0), "a node placed by device")
    # device 0: h0 -> y0 as one matmul with its relu epilogue (docs/architecture.md,
    # "Matmul epilogues"); device 1: h1, y1, z
    check(r["dispatches"] == 4, "dispatches counted over both devices: %r" % r["dispatches"])
    # A node reading another device's result is refused, naming the node.
    e = err(c, "graph.run", {"nodes": [
        {"id": "h0", "op": "neg", "inputs": ["g/x0"]},
        {"id": "bad", "op": "add", "inputs": ["h0", "g/x1"], "out": "g/never"}]})
    check(e[0] == "FAILED_PRECONDITION" and "'bad'" in e[1], "cross-device edge refused: %r" % (e,))
    check(err(c, "tensor.stat", {"name": "g/never"})[0] == "NOT_FOUND", "nothing stored")


def run_train(c, params):
    """train.run to its end: (error, result), notifications skipped."""
    return c.call_past_notifications("train.run", params)


MLP = [
    {"id": "h", "op": "matmul", "inputs": ["xb", "w1"]},
    {"id": "h2", "op": "add", "inputs": ["h", "b1"]},
    {"id": "a", "op": "relu", "inputs": ["h2"]},
    {"id": "o", "op": "matmul", "inputs": ["a", "w2"]},
    {"id": "z", "op": "add", "inputs": ["o", "b2"]},
    {"id": "L", "op": "cross_entropy", "inputs": ["z", "yb"]},
]


def put_mlp(c, rng, prefix=""):
    x = rng.standard_normal((96, 12)).astype(np.float32)
    y = rng.integers(0, 5, 96).astype(np.int32)
    params = {"w1": rng.standard_normal((12, 16)).astype(np.float32) * 0.3,
              "b1": np.zeros(16, np.float32),
              "w2": rng.standard_normal((16, 5)).astype(np.float32) * 0.3,
              "b2": np.zeros(5, np.float32)}
    return x, y, params


def test_data_parallel(c, rng):
    """The same run on one device and on two: parameters within float
    tolerance, replicas identical, the reported loss the same; garbage."""
    x, y, params = put_mlp(c, rng)
    put(c, "dp/x", x, device=0)
    put(c, "dp/y", y, device=0)
    results = {}
    for label, devices in (("one", None), ("two", [0, 1])):
        for k, v in params.items():
            put(c, k, v, device=0)
            for state in (k + ".exp_avg", k + ".exp_avg_sq"):  # Adam's, from the run before
                c.call_full("tensor.delete", {"name": state})
        p = {"nodes": MLP, "loss": "L", "params": list(params), "data": {"xb": "dp/x", "yb": "dp/y"},
             "batch_size": 32, "epochs": 3, "seed": 5,
             "optimizer": {"type": "adam", "lr": 0.01, "clip_norm": 1.0}}
        if devices:
            p["devices"] = devices
        mem0 = [x["memory_used"] for x in c.call("info")["devices"] if x["active"]][1]
        e, r = run_train(c, p)
        mem1 = [x["memory_used"] for x in c.call("info")["devices"] if x["active"]][1]
        check(e is None, "train.run on %s device(s): %r" % (label, e))
        check(mem0 == mem1, "device 1 memory back after the run (replicas freed): %d -> %d" % (mem0, mem1))
        if e:
            return
        results[label] = (r, {k: get(c, k).copy() for k in params})
    r1, p1 = results["one"]
    r2, p2 = results["two"]
    check(r2.get("devices") == [0, 1], "result names the devices: %r" % r2.get("devices"))
    check(r2.get("replica_max_diff") == 0.0, "replicas identical: %r" % r2.get("replica_max_diff"))
    # Lavapipe imports host memory: the devices average on the GPU.
    check(r2.get("exchange") == "gpu", "gradients averaged on the GPU: %r" % r2.get("exchange"))
    check("devices" not in r1, "a one-device run reports no devices")
    check(r1["steps"] == r2["steps"] == 9, "same steps")
    check(abs(r1["loss"] - r2["loss"]) < 1e-4, "same final loss %r %r" % (r1["loss"], r2["loss"]))
    for k in params:
        diff = float(np.max(np.abs(p1[k] - p2[k])))
        check(diff < 1e-4, "%s within float tolerance of one device: %g" % (k, diff))
        check(not np.array_equal(p1[k], params[k]), "%s was trained" % k)
    # Still on the first device; the replicas are gone (memory back).
    check(all(c.call("tensor.stat", {"name": k})["device"] == 0 for k in params), "params stay on device 0")
    # Garbage and refusals, each before anything runs.
    base = {"nodes": MLP, "loss": "L", "params": list(params), "data": {"xb": "dp/x", "yb": "dp/y"},
            "batch_size": 32, "steps": 1}
    for devs, code in (([0, 0], "INVALID_ARGUMENT"), ([0, 2], "INVALID_ARGUMENT"), ([0, "1"], "INVALID_ARGUMENT"),
                       ([1, 0], "FAILED_PRECONDITION"), ([0, 1, 1], "INVALID_ARGUMENT"), ("01", "INVALID_ARGUMENT"),
                       ([-1, 0], "INVALID_ARGUMENT")):
        e = run_train(c, dict(base, devices=devs))[0]
        check(e is not None and e["name"] == code, "devices %r -> %s: %r" % (devs, code, e))
    e = run_train(c, dict(base, devices=[0, 1], batch_size=31))[0]
    check(e is not None and e["name"] == "INVALID_ARGUMENT" and "evenly" in e["message"], "uneven batch: %r" % e)
    # A single id is one device.
    e, r = run_train(c, dict(base, devices=[0]))
    check(e is None and "devices" not in r, "devices [0] is a one-device run: %r" % (e,))


def test_dp_serves_others(d, c):
    """A data-parallel step runs while the loop serves other clients: pings
    from a second connection during steps of about a second each are
    answered within half a step (the loop waited for each half of the step
    before, answering nothing meanwhile: the slowest ping then took about a
    whole step)."""
    rng = np.random.default_rng(3)
    dims = (256, 512, 512, 10)
    put(c, "srv/x", rng.standard_normal((1024, dims[0])).astype(np.float32), device=0)
    put(c, "srv/y", rng.integers(0, 10, 1024).astype(np.int32), device=0)
    nodes, names = [], []
    h = "xb"
    for i in range(3):
        put(c, "srv/w%d" % i, (rng.standard_normal((dims[i], dims[i + 1])) * 0.05).astype(np.float32), device=0)
        names.append("srv/w%d" % i)
        nodes.append({"id": "m%d" % i, "op": "matmul", "inputs": [h, "srv/w%d" % i]})
        h = "m%d" % i
        if i < 2:
            nodes.append({"id": "r%d" % i, "op": "relu", "inputs": [h]})
            h = "r%d" % i
    nodes.append({"id": "L", "op": "cross_entropy", "inputs": [h, "yb"]})
    p = {"nodes": nodes, "loss": "L", "params": names, "data": {"xb": "srv/x", "yb": "srv/y"},
         "batch_size": 1024, "steps": 4, "devices": [0, 1], "optimizer": {"type": "sgd", "lr": 0.01}}
    run_train(c, dict(p, steps=1))  # pipelines compiled
    (e, r), took, lat = pings_during(d.client, lambda: run_train(c, p))
    step = took / 4
    check(e is None, "data-parallel run: %r" % (e,))
    worst = max(lat) if lat else 1e9
    print("data-parallel step %.3f s; %d pings meanwhile, the slowest %.3f s" % (step, len(lat), worst))
    check(len(lat) >= 4 and worst < 0.5 * step,
          "pings answered during a %.2f s data-parallel step: %d, the slowest %.3f s" % (step, len(lat), worst))


def dp_run(c, devices, dims=(12, 300, 5), steps=6, depth=None, adam=False, rows=96, nan_row=None,
           want_error=False):
    """A data-parallel run over `devices` of an MLP of layer sizes `dims`
    from fixed parameters (SGD with momentum, or Adam), at `depth` steps in
    flight, on `rows` rows, with a NaN in row `nan_row` of x (then without
    shuffling): (result or error, the parameters and optimizer state after
    it, the progress losses)."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((rows, dims[0])).astype(np.float32)
    y = rng.integers(0, dims[-1], rows).astype(np.int32)
    params, nodes, h = {}, [], "xb"
    for i in range(len(dims) - 1):
        params["w%d" % i] = rng.standard_normal(dims[i:i + 2]).astype(np.float32) * 0.3
        params["b%d" % i] = np.zeros(dims[i + 1], np.float32)
        nodes += [{"id": "m%d" % i, "op": "matmul", "inputs": [h, "w%d" % i]},
                  {"id": "z%d" % i, "op": "add", "inputs": ["m%d" % i, "b%d" % i]}]
        h = "z%d" % i
        if i + 2 < len(dims):
            nodes.append({"id": "r%d" % i, "op": "relu", "inputs": [h]})
            h = "r%d" % i
    data = {"xb": "ex/x", "yb": "ex/y"}
    if nan_row is not None:  # a NaN logit in that row (relu would drop a NaN input)
        scale = np.ones((rows, 1), np.float32)
        scale[nan_row] = np.nan
        put(c, "ex/s", scale, device=0)
        data["sb"] = "ex/s"
        nodes.append({"id": "zs", "op": "mul", "inputs": [h, "sb"]})
        h = "zs"
    nodes.append({"id": "L", "op": "cross_entropy", "inputs": [h, "yb"]})
    put(c, "ex/x", x, device=0)
    put(c, "ex/y", y, device=0)
    states = (".exp_avg", ".exp_avg_sq") if adam else (".momentum_buffer",)
    for k, v in params.items():
        put(c, k, v, device=0)
        for st in (".momentum_buffer", ".exp_avg", ".exp_avg_sq"):
            c.call_full("tensor.delete", {"name": k + st})
    opt = {"type": "adam", "lr": 0.01, "clip_norm": 1.0} if adam else {"type": "sgd", "lr": 0.05, "momentum": 0.9}
    p = {"nodes": nodes, "loss": "L", "params": list(params), "data": data,
         "batch_size": 48, "steps": steps, "seed": 5, "devices": list(devices), "optimizer": opt}
    if depth:
        p["pipeline_depth"] = depth
        # Jobs keep one step in flight for 100 ms after a request that uses
        # the GPU (the puts above): past it, depth 2 pipelines from the start.
        time.sleep(0.15)
    if nan_row is not None:
        p["shuffle"] = False
    e, r, losses = c.train_run_losses(dict(p, progress_every=1))
    check((e is not None) == want_error, "train.run on %r at depth %r: %r" % (devices, depth, e))
    got = {k: get(c, k).copy() for k in params}
    for k in params:
        for st in states:
            if c.call_full("tensor.stat", {"name": k + st})[0] is None:
                got[k + st] = get(c, k + st).copy()
    if not want_error:
        check(not np.array_equal(got["w0"], params["w0"]), "w0 was trained")
    return (e if want_error else r), got, losses


def test_dp_pipelined(c):
    """Data parallel at pipeline_depth 2 (each step's forward and backward
    submitted behind the updates of the step before, reading its results
    before they are committed; the gradient slots double-buffered) against
    depth 1: every progress loss, parameter and Adam moment bit-identical,
    over 4 epochs with a shuffle; a NaN in the third step's batch fails at
    step 3 with everything as after step 2 (the step in flight behind it is
    not applied)."""
    ref = dp_run(c, (0, 1), steps=8, depth=1, adam=True)
    got = dp_run(c, (0, 1), steps=8, depth=2, adam=True)
    check(ref[0].get("replica_max_diff") == 0.0 and got[0].get("replica_max_diff") == 0.0,
          "pipelined: replicas identical: %r" % got[0].get("replica_max_diff"))
    check(len(ref[2]) == 8 and len(set(ref[2])) > 4, "the losses move: %r" % (ref[2],))
    check(got[2] == ref[2], "pipelined: the same losses as depth 1:\n%r\n%r" % (got[2], ref[2]))
    check(set(got[1]) == set(ref[1]) and len(ref[1]) == 12, "Adam state kept: %r" % sorted(got[1]))
    for k in ref[1]:
        check(np.array_equal(got[1][k], ref[1][k]), "pipelined: '%s' equals depth 1's bit for bit" % k)
    # Batches in row order, 4 a epoch: row 100 is in the third (step 3).
    after2 = dp_run(c, (0, 1), steps=2, depth=1, rows=192, nan_row=100)
    for depth in (1, 2):
        e, st, losses = dp_run(c, (0, 1), steps=4, depth=depth, rows=192, nan_row=100, want_error=True)
        check(e is not None and "at step 3;" in e.get("message", ""), "depth %d: a NaN loss at step 3: %r" % (depth, e))
        check(len(losses) == 2, "depth %d: the progress of the two steps before: %r" % (depth, losses))
        for k in after2[1]:
            check(np.array_equal(st[k], after2[1][k]), "depth %d: '%s' is as after step 2" % (depth, k))


def test_exchange_fallback():
    """TENSORD_DP_EXCHANGE=host averages on the host as before the GPU
    exchange: the same bits (three devices' floats summed in device order,
    divided by 3, on lavapipe's IEEE arithmetic; a deeper MLP's 12 gradients
    copied as 12 buckets), also pipelined (pipeline_depth 2: the slots
    double-buffered, the host's buffers reused behind the updates), and
    =none (timing only) leaves each replica with its own gradient."""
    got = {}
    for mode in ("gpu", "host", "none"):
        if mode != "gpu":
            os.environ["TENSORD_DP_EXCHANGE"] = mode
        try:
            with Daemon(["--device", "0,0,0"]) as d:
                with d.client() as c:
                    got[mode] = dp_run(c, (0, 1, 2))
                    got["deep-" + mode] = dp_run(c, (0, 1, 2), dims=(8, 16, 12, 16, 12, 16, 5))
                    if mode != "none":
                        got["pipe-" + mode] = dp_run(c, (0, 1, 2), depth=2)
        finally:
            os.environ.pop("TENSORD_DP_EXCHANGE", None)
    for mode, (r, _, _) in got.items():
        want = mode.replace("deep-", "").replace("pipe-", "")
        check(r.get("exchange") == want, "exchange %s reported: %r" % (mode, r.get("exchange")))
    for mode in ("gpu", "host"):
        one, two = got[mode], got["pipe-" + mode]
        check(one[2] == two[2] and all(np.array_equal(one[1][k], two[1][k]) for k in one[1]),
              "%s exchange: depth 2 gives depth 1's losses, parameters and momenta bit for bit" % mode)
    for pre in ("", "deep-", "pipe-"):
        gpu, host = got[pre + "gpu"], got[pre + "host"]
        check(gpu[0]["replica_max_diff"] == 0.0 and host[0]["replica_max_diff"] == 0.0,
              "%sreplicas identical with either exchange" % pre)
        for k in gpu[1]:
            check(np.array_equal(gpu[1][k], host[1][k]),
                  "%s%s: the GPU mean equals the host mean bit for bit (max diff %g)" %
                  (pre, k, float(np.max(np.abs(gpu[1][k] - host[1][k])))))
    check(got["none"][0]["replica_max_diff"] > 0, "no exchange: the replicas drift apart (timing only)")


def test_dp_wait_bounded():
    """A device whose gradients do not come out within the limit
    (TENSORD_DP_WAIT_MS here, half of request_timeout by default; as when its
    queue holds another client's long work): the data-parallel run fails
    with DEADLINE_EXCEEDED saying why and nothing of that step applied,
    instead of the waiting devices' submissions running past request_timeout
    and the devices being marked lost. The silent device is simulated with
    TENSORD_FAULT_DP_SILENT."""
    os.environ["TENSORD_DP_WAIT_MS"] = "1000"
    os.environ["TENSORD_FAULT_DP_SILENT"] = "1"
    try:
        with Daemon(["--device", "0,0"]) as d:
            with d.client() as c:
                t0 = time.monotonic()
                e, st, losses = dp_run(c, (0, 1), steps=3, want_error=True)
                took = time.monotonic() - t0
                check(e is not None and e.get("name") == "DEADLINE_EXCEEDED" and
                      "not out within half of request_timeout" in e.get("message", ""),
                      "a device that never signals: the run fails with the reason: %r" % (e,))
                check(losses == [], "no step applied: %r" % (losses,))
                check(took < 30, "failed after the limit, not request_timeout: %.1f s" % took)
                resets = c.call("info").get("device_resets")
                check(resets == 0, "no device lost and re-created: device_resets %r" % resets)
                rng = np.random.default_rng(11)  # dp_run's draws: x, y, then w0
                rng.standard_normal((96, 12))
                rng.integers(0, 5, 96)
                w0 = rng.standard_normal((12, 300)).astype(np.float32) * 0.3
                check(np.array_equal(st["w0"], w0), "w0 as before the failed run")
    finally:
        os.environ.pop("TENSORD_DP_WAIT_MS", None)
        os.environ.pop("TENSORD_FAULT_DP_SILENT", None)


SCALE = """#version 450
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer In { float x[]; };
layout(std430, binding = 1) buffer Out { float y[]; };
layout(push_constant) uniform P { float alpha; uint n; };
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < n)
        y[i] = alpha * x[i];
}
"""


def test_kernels(c, rng):
    """A custom kernel runs on whichever device its tensors are on, alone and
    as a graph node; tensors on two devices are refused."""
    c.call("kernel.create", {"name": "scale2", "glsl": SCALE})
    x = rng.standard_normal(100).astype(np.float32)
    put(c, "k/x1", x, device=1)
    put(c, "k/y1", np.zeros(100, np.float32), device=1)
    put(c, "k/y0", np.zeros(100, np.float32), device=0)
    c.call("kernel.run", {"name": "scale2", "tensors": ["k/x1", "k/y1"], "push": {"alpha": 3.0, "n": 100},
                          "groups": [2]})
    check(np.allclose(get(c, "k/y1"), 3 * x), "kernel.run on device 1 = NumPy")
    e = err(c, "kernel.run", {"name": "scale2", "tensors": ["k/x1", "k/y0"], "push": {"alpha": 1.0, "n": 100},
                              "groups": [2]})
    check(e[0] == "FAILED_PRECONDITION" and "device" in e[1], "kernel tensors on two devices: %r" % (e,))
    r = c.call("graph.run", {"nodes": [
        {"id": "k", "kernel": "scale2", "inputs": ["k/x1", "k/y1"], "push": {"alpha": 2.0, "n": 100},
         "groups": [2]},
        {"id": "s", "op": "add", "inputs": ["k", "k/x1"], "out": "k/s1"}]})
    check(r["stored"]["k/s1"]["device"] == 1, "kernel node result on device 1")
    check(np.allclose(get(c, "k/s1"), 3 * x), "kernel node on device 1 then add = NumPy")
    e = err(c, "graph.run", {"nodes": [
        {"id": "k", "kernel": "scale2", "inputs": ["k/x1", "k/y0"], "push": {"alpha": 2.0, "n": 100},
         "groups": [2]}]})
    check(e[0] == "FAILED_PRECONDITION" and "'k'" in e[1], "kernel node inputs on two devices: %r" % (e,))


def test_garbage(c):
    a = np.ones((2, 2), np.float32)
    for dev in (2, 99, -1, "0", 1.5, None, [0], 2**40):
        p = {"name": "gg", "dtype": "f32", "shape": [2, 2], "data": a.tobytes(), "device": dev}
        check(err(c, "tensor.put", p)[0] == "INVALID_ARGUMENT", "tensor.put device %r" % (dev,))
    check(err(c, "tensor.stat", {"name": "gg"})[0] == "NOT_FOUND", "no tensor from bad puts")
    put(c, "gg", a, device=0)
    for p in ({"src": "gg", "dst": "h", "device": 2}, {"src": "gg", "dst": "h", "device": "1"},
              {"src": "gg"}, {"dst": "h"}, {"src": "gg", "dst": ""}, {"src": "gg", "dst": "a b"},
              {"src": 5, "dst": "h"}, {"src": "gg", "dst": "h", "extra": 1}):
        check(err(c, "tensor.copy", p)[0] == "INVALID_ARGUMENT", "tensor.copy %r" % (p,))
    check(err(c, "tensor.copy", {"src": "nope", "dst": "h"})[0] == "NOT_FOUND", "copy of nothing")
    for dev in (2, -1, "x"):
        check(err(c, "op.run", {"op": "neg", "inputs": ["gg"], "device": dev})[0] == "INVALID_ARGUMENT",
              "op.run device %r" % (dev,))
        e = err(c, "graph.run", {"nodes": [{"id": "n", "op": "neg", "inputs": ["gg"], "device": dev}]})
        check(e[0] == "INVALID_ARGUMENT", "graph node device %r: %r" % (dev, e))
    check(c.call("ping") is not None, "alive after garbage")


def main():
    rng = np.random.default_rng(7)
    # kernel.create needs root or kernel_group: the test's own group.
    conf = tempfile.NamedTemporaryFile("w", suffix=".conf", dir="/tmp", delete=False)
    conf.write("kernel_group = %d\n" % os.getgid())
    conf.close()
    with Daemon(["--device", "0,0", "--config", conf.name]) as d:
        with d.client() as c:
            test_placement_and_copy(c, rng)
            test_graph_two_devices(c, rng)
            test_data_parallel(c, rng)
            test_dp_serves_others(d, c)
            test_dp_pipelined(c)
            test_kernels(c, rng)
            test_garbage(c)
    os.unlink(conf.name)
    test_exchange_fallback()
    test_dp_wait_bounded()
    # No room where the caller's tensors are: the device with the most free
    # memory. A first tensor: the most free memory too (ties to device 0).
    conf = tempfile.NamedTemporaryFile("w", suffix=".conf", dir="/tmp", delete=False)
    conf.write("max_device_bytes = %d\n" % (8 << 20))
    conf.close()
    with Daemon(["--device", "0,0", "--config", conf.name]) as d:
        with d.client() as c:
            check(put(c, "first", np.zeros(4, np.float32))["device"] == 0, "a first tensor on device 0")
            put(c, "six", np.zeros(6 << 18, np.float32), device=0)  # 6 MiB of 8
            r = put(c, "two", np.zeros(3 << 18, np.float32))  # 3 MiB: no room on device 0
            check(r["device"] == 1, "no room with the caller's tensors: the freer device (%r)" % r["device"])
            check(put(c, "small", np.zeros(4, np.float32))["device"] == 0, "small ones stay with the most bytes")
    os.unlink(conf.name)
    # Checkpoints remember the device.
    with tempfile.TemporaryDirectory(dir="/tmp") as state:
        args = ["--device", "0,0", "--state-dir", state]
        with Daemon(args) as d:
            with d.client() as c:
                put(c, "p/one", np.arange(6, dtype=np.float32), device=1)
                put(c, "p/zero", np.arange(4, dtype=np.float32), device=0)
                c.call("store.sync")
        with Daemon(args) as d:
            with d.client() as c:
                check(c.call("tensor.stat", {"name": "p/one"})["device"] == 1, "restored to device 1")
                check(c.call("tensor.stat", {"name": "p/zero"})["device"] == 0, "restored to device 0")
                check(np.array_equal(get(c, "p/one"), np.arange(6, dtype=np.float32)), "restored bytes")
        # Fewer devices now: the tensor lands on one that exists.
        with Daemon(["--device", "0", "--state-dir", state]) as d:
            with d.client() as c:
                check(c.call("tensor.stat", {"name": "p/one"})["device"] == 0, "restored to device 0 of 1")
    if failures:
        print("%d failures" % len(failures))
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()

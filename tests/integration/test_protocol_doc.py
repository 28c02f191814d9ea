#!/usr/bin/python3
"""Keeps docs/protocol.md true: every method listed under "## Methods" as
"### `name`" is called against a real tensord with the call described in
CALLS below, and must answer without error with the documented result keys.
A method the document lists and CALLS lacks fails the test (so a new method
comes with its call here); so does one CALLS has and the document dropped.
The error table and the tensor metadata table are checked against what the
daemon says too."""
import fcntl
import os
import re
import shutil
import socket
import struct
import sys
import tempfile
import traceback

import msgpack

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from daemon import Daemon  # noqa: E402


def doc_sections(text):
    """{"## Title": body} of the level-2 sections."""
    sections = {}
    current = None
    for line in text.splitlines():
        if line.startswith("## "):
            current = line[3:].strip()
            sections[current] = []
        elif current is not None:
            sections[current].append(line)
    return {k: "\n".join(v) for k, v in sections.items()}


def doc_methods(text):
    body = doc_sections(text).get("Methods")
    if body is None:
        raise AssertionError('docs/protocol.md has no "## Methods" section')
    return re.findall(r"^### `([^`]+)`\s*$", body, re.M)


def doc_table(body):
    """Rows of the first markdown table in `body`, as lists of cells."""
    rows = []
    for line in body.splitlines():
        line = line.strip()
        if line.startswith("|") and line.endswith("|"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            if all(re.fullmatch(r":?-+:?", c) for c in cells):
                continue
            rows.append(cells)
        elif rows:
            break
    return rows[1:]  # without the header


def unquote(cell):
    return cell.strip().strip("`")


# ---- the call table --------------------------------------------------------

META_KEYS = {"name", "dtype", "shape", "bytes", "owner", "group", "mode", "created",
             "modified", "version", "device"}
DATA = struct.pack("<6f", 1, 2, 3, 4, 5, 6)


def put_doc_tensor(c, name="doc/a"):
    c.call("tensor.put", {"name": name, "dtype": "f32", "shape": [2, 3], "data": DATA})


def check_meta(res, name="doc/a"):
    assert META_KEYS <= set(res), "metadata lacks %s" % sorted(META_KEYS - set(res))
    assert res["name"] == name and res["dtype"] == "f32" and res["shape"] == [2, 3], res
    assert res["bytes"] == 24, res


def call_ping(c):
    res = c.call("ping")
    assert res["pong"] is True and res["protocol"] == 1 and isinstance(res["version"], str)
    res = c.call("ping", {})
    assert res["pong"] is True


def call_info(c):
    res = c.call("info")
    for k in ("version", "protocol", "pid", "uptime", "devices", "tensors", "connections",
              "limits", "counters"):
        assert k in res, "info lacks %s" % k
    cnt = res["counters"]
    for k in ("requests", "errors", "request_seconds", "bytes_in", "bytes_out",
              "connections_accepted", "connections_refused", "protocol_errors", "reloads",
              "reload_failures", "gpu", "pipelines"):
        assert k in cnt, "info.counters lacks %s" % k
    for k in ("device", "submissions", "busy_seconds", "wait_seconds", "timing"):
        assert k in cnt["gpu"], "info.counters.gpu lacks %s" % k
    for k in ("built", "hits", "compiles", "cache_hits", "compile_seconds", "cache_feedback"):
        assert k in cnt["pipelines"], "info.counters.pipelines lacks %s" % k
    assert "other" in cnt["requests"] and "info" in cnt["requests"]
    assert res["devices"], "no devices"
    for dev in res["devices"]:
        for k in ("index", "name", "type", "driver", "vendor_id", "device_id", "api_version",
                  "active", "memory_total", "memory_used", "memory_reserved",
                  "max_storage_buffer_range", "max_allocation_size"):
            assert k in dev, "device lacks %s" % k
        assert dev["type"] in ("discrete", "integrated", "virtual", "cpu", "other"), dev
        assert dev["memory_reserved"] >= dev["memory_used"], dev
    # several devices may be active (docs/devices.md); each has an id and its usage
    active = [dev for dev in res["devices"] if dev["active"]]
    assert len(active) >= 1, res["devices"]
    for dev in active:
        for k in ("id", "memory_limit", "tensors", "submissions", "busy_seconds", "load"):
            assert k in dev, "active device lacks %s: %r" % (k, dev)
        assert 0 <= dev["load"] <= 1, dev
    assert sorted(dev["id"] for dev in active) == list(range(len(active))), active
    for dev in res["devices"]:
        if not dev["active"]:
            assert "id" not in dev and "load" not in dev, dev
    assert set(res["tensors"]) >= {"count", "bytes"}
    assert res["requests"]["total"] >= 1 and res["requests"]["failed"] >= 0, res["requests"]
    assert set(res["limits"]) >= {"max_message_bytes", "max_tensor_bytes", "max_depth",
                                  "max_objects", "max_name_len", "max_rank", "max_tensors",
                                  "max_connections"}, res["limits"]
    assert all(isinstance(v, int) for v in res["limits"].values()), res["limits"]
    assert set(res["user"]) == {"uid", "gid", "tensors", "bytes", "max_tensors", "max_bytes"}, res
    assert res["user"]["uid"] == os.geteuid(), res["user"]


def call_put(c):
    res = c.call("tensor.put", {"name": "doc/a", "dtype": "f32", "shape": [2, 3],
                                "data": DATA})
    check_meta(res)
    assert res["version"] == 1
    res = c.call("tensor.put", {"name": "doc/new", "dtype": "u8", "shape": [],
                                "data": b"\x07", "if_absent": True})
    assert res["version"] == 1 and res["shape"] == [] and res["bytes"] == 1
    res = c.call("tensor.put", {"name": "doc/a", "dtype": "f32", "shape": [2, 3],
                                "data": DATA, "device": 0})
    assert res["device"] == 0 and res["version"] == 2, res
    e, _ = c.call_full("tensor.put", {"name": "doc/a", "dtype": "f32", "shape": [2, 3],
                                      "data": DATA, "device": 16})
    assert e["name"] == "INVALID_ARGUMENT", e
    # "Passing memory": the bytes in a sealed memfd at an offset
    fd = memfd(b"\0" * 8 + DATA, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_WRITE)
    res = call_with_fd(c, "tensor.put", {"name": "doc/a", "dtype": "f32", "shape": [2, 3],
                                         "fd": 0, "offset": 8}, fd)
    check_meta(res)
    assert c.call("tensor.get", {"name": "doc/a"})["data"] == DATA
    c.call("tensor.delete", {"name": "doc/a"})
    c.call("tensor.delete", {"name": "doc/new"})


def memfd(data, seals):
    fd = os.memfd_create("doc", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.write(fd, data)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
    return fd


def call_with_fd(c, method, params, fd):
    """A call whose request carries `fd` (SCM_RIGHTS with its first byte)."""
    msgid = c.next_id
    c.next_id += 1
    data = msgpack.packb([0, msgid, method, [params]], use_bin_type=True)
    n = socket.send_fds(c.sock, [data], [fd])
    c.sock.sendall(data[n:])
    if method == "tensor.put":
        os.close(fd)   # the daemon holds its own copy once sent
    error, result = c.response(msgid)
    assert error is None, error
    return result


def call_get(c):
    put_doc_tensor(c)
    res = c.call("tensor.get", {"name": "doc/a"})
    check_meta(res)
    assert res["data"] == DATA
    fd = memfd(bytes(len(DATA)), fcntl.F_SEAL_SHRINK)   # written: allocated
    res = call_with_fd(c, "tensor.get", {"name": "doc/a", "fd": 0}, fd)
    check_meta(res)
    assert "data" not in res and os.pread(fd, 64, 0) == DATA
    os.close(fd)
    c.call("tensor.delete", {"name": "doc/a"})


def call_stat(c):
    put_doc_tensor(c)
    res = c.call("tensor.stat", {"name": "doc/a"})
    check_meta(res)
    assert "data" not in res
    c.call("tensor.delete", {"name": "doc/a"})


def call_list(c):
    put_doc_tensor(c, "doc/l/b")
    put_doc_tensor(c, "doc/l/a")
    res = c.call("tensor.list", {"prefix": "doc/l/"})
    assert [t["name"] for t in res["tensors"]] == ["doc/l/a", "doc/l/b"], res
    for t in res["tensors"]:
        check_meta(t, t["name"])
    res = c.call("tensor.list")  # the prefix is optional
    assert {"doc/l/a", "doc/l/b"} <= {t["name"] for t in res["tensors"]}
    c.call("tensor.delete", {"name": "doc/l/a"})
    c.call("tensor.delete", {"name": "doc/l/b"})


def call_delete(c):
    put_doc_tensor(c)
    res = c.call("tensor.delete", {"name": "doc/a"})
    assert res == {"name": "doc/a", "deleted": True, "bytes": 24}, res


def call_chmod(c):
    put_doc_tensor(c)
    res = c.call("tensor.chmod", {"name": "doc/a", "mode": "group-read,world-read", "group": 100})
    check_meta(res)
    assert res["mode"] == "group-read,world-read" and res["group"] == 100, res
    assert res["version"] == 1, res
    res = c.call("tensor.chmod", {"name": "doc/a", "mode": "private"})
    assert res["mode"] == "private" and res["group"] == 100, res
    e, _ = c.call_full("tensor.chmod", {"name": "doc/a", "mode": "rwx"})
    assert e["name"] == "INVALID_ARGUMENT", e
    c.call("tensor.delete", {"name": "doc/a"})


def call_copy(c):
    put_doc_tensor(c)
    res = c.call("tensor.copy", {"src": "doc/a", "dst": "doc/c"})
    check_meta(res, "doc/c")
    src = c.call("tensor.stat", {"name": "doc/a"})
    assert res["device"] == src["device"] and res["version"] == 1, (res, src)
    assert c.call("tensor.get", {"name": "doc/c"})["data"] == DATA
    res = c.call("tensor.copy", {"src": "doc/a", "dst": "doc/a", "device": 0})  # a move
    check_meta(res)
    assert res["device"] == 0 and res["mode"] == "private", res
    assert c.call("tensor.get", {"name": "doc/a"})["data"] == DATA
    e, _ = c.call_full("tensor.copy", {"src": "doc/missing", "dst": "doc/c"})
    assert e["name"] == "NOT_FOUND", e
    e, _ = c.call_full("tensor.copy", {"src": "doc/a", "dst": "bad name"})
    assert e["name"] == "INVALID_ARGUMENT", e
    e, _ = c.call_full("tensor.copy", {"src": "doc/a", "dst": "doc/c", "device": 16})
    assert e["name"] == "INVALID_ARGUMENT", e
    for n in ("doc/a", "doc/c"):
        c.call("tensor.delete", {"name": n})


def call_store_sync(c):
    # This daemon runs without --state-dir: persistence is off.
    e, _ = c.call_full("store.sync")
    assert e and e["name"] == "FAILED_PRECONDITION", e
    tmp = tempfile.mkdtemp(prefix="tensord-doc-state-", dir="/tmp")
    try:
        with Daemon(["--state-dir", os.path.join(tmp, "state")]) as d, d.client() as c2:
            put_doc_tensor(c2)
            res = c2.call("store.sync")
            assert res["written"] == 1 and res["bytes"] == 24 and res["removed"] == 0, res
            assert isinstance(res["seconds"], float), res
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def call_op_run(c):
    put_doc_tensor(c, "doc/a")
    put_doc_tensor(c, "doc/b")
    res = c.call("op.run", {"op": "add", "inputs": ["doc/a", "doc/b"]})
    assert set(res) == {"dtype", "shape", "bytes", "data"}, res
    assert res["dtype"] == "f32" and res["shape"] == [2, 3] and res["bytes"] == 24, res
    assert res["data"] == struct.pack("<6f", 2, 4, 6, 8, 10, 12), res
    res = c.call("op.run", {"op": "mse", "inputs": ["doc/a", "doc/b"],
                            "attrs": {"reduction": "sum"}, "out": "doc/loss"})
    assert META_KEYS <= set(res) and res["name"] == "doc/loss" and res["shape"] == [], res
    e, _ = c.call_full("op.run", {"op": "add", "inputs": ["doc/a", "doc/missing"]})
    assert e["name"] == "NOT_FOUND" and "add" in e["message"], e
    dev = c.call("tensor.stat", {"name": "doc/a"})["device"]
    res = c.call("op.run", {"op": "add", "inputs": ["doc/a", "doc/b"], "device": dev})
    assert res["data"] == struct.pack("<6f", 2, 4, 6, 8, 10, 12), res
    e, _ = c.call_full("op.run", {"op": "add", "inputs": ["doc/a", "doc/b"], "device": 16})
    assert e["name"] == "INVALID_ARGUMENT", e
    for n in ("doc/a", "doc/b", "doc/loss"):
        c.call("tensor.delete", {"name": n})


def call_graph_run(c):
    put_doc_tensor(c, "doc/a")
    put_doc_tensor(c, "doc/b")
    res = c.call("graph.run", {"nodes": [
        {"id": "d", "op": "sub", "inputs": ["doc/a", "doc/b"]},
        {"id": "s", "op": "add", "inputs": ["d", "doc/a"], "out": "doc/s"},
        {"id": "l", "op": "mse", "inputs": ["doc/a", "s"], "out": "doc/l", "device": 0}],
        "outputs": ["s"]})
    assert set(res) == {"outputs", "stored"}, res
    assert set(res["outputs"]) == {"s"} and res["outputs"]["s"]["data"] == DATA, res
    assert set(res["stored"]) == {"doc/s", "doc/l"}, res
    check_meta(res["stored"]["doc/s"], "doc/s")
    # a forward reference fails the whole graph and stores nothing
    e, _ = c.call_full("graph.run", {"nodes": [
        {"id": "x", "op": "add", "inputs": ["doc/a", "y"], "out": "doc/never"},
        {"id": "y", "op": "add", "inputs": ["doc/a", "doc/b"]}]})
    assert e["name"] in ("NOT_FOUND", "INVALID_ARGUMENT"), e
    assert "node 0 'x' (add)" in e["message"], e
    e, _ = c.call_full("tensor.stat", {"name": "doc/never"})
    assert e["name"] == "NOT_FOUND", e
    for n in ("doc/a", "doc/b", "doc/s", "doc/l"):
        c.call("tensor.delete", {"name": n})


def call_train_run(c):
    # y = 2x learnt from 8 rows; progress notifications come before the response
    c.call("tensor.put", {"name": "doc/rx", "dtype": "f32", "shape": [8, 1],
                          "data": struct.pack("<8f", *range(8))})
    c.call("tensor.put", {"name": "doc/ry", "dtype": "f32", "shape": [8, 1],
                          "data": struct.pack("<8f", *[2.0 * i for i in range(8)])})
    c.call("tensor.put", {"name": "doc/rw", "dtype": "f32", "shape": [1, 1], "data": bytes(4)})
    nodes = [{"id": "h", "op": "matmul", "inputs": ["xb", "doc/rw"]},
             {"id": "L", "op": "mse", "inputs": ["h", "yb"]}]
    msgid = c.request("train.run", {"nodes": nodes, "loss": "L", "params": ["doc/rw"],
                                    "optimizer": {"type": "sgd", "lr": 0.01},
                                    "data": {"xb": "doc/rx", "yb": "doc/ry"},
                                    "batch_size": 4, "epochs": 30})
    notes = 0
    while True:
        msg = c.recv()
        assert msg is not None, "closed during train.run"
        if msg[0] == 2:
            assert msg[1] == "train.progress" and "loss" in msg[2][0], msg
            notes += 1
            continue
        assert msg[0] == 1 and msg[1] == msgid and msg[2] is None, msg
        res = msg[3]
        break
    assert notes >= 1, "no train.progress notification"
    assert set(res) == {"steps", "epochs", "loss", "seconds", "samples_per_s", "stopped", "eval"}, res
    assert res["steps"] == 60 and res["stopped"] == "done" and res["loss"] < 1e-3, res
    e, _ = c.call_full("train.run", {"nodes": nodes, "loss": "L", "params": ["doc/rw"],
                                     "data": {"xb": "doc/rx", "yb": "doc/ry"}, "batch_size": 0})
    assert e["name"] == "INVALID_ARGUMENT", e
    # devices: two or more distinct ids (the data-parallel run is in test_client_devices.py)
    e, _ = c.call_full("train.run", {"nodes": nodes, "loss": "L", "params": ["doc/rw"],
                                     "data": {"xb": "doc/rx", "yb": "doc/ry"}, "batch_size": 4,
                                     "devices": [0, 0]})
    assert e["name"] == "INVALID_ARGUMENT" and "devices" in e["message"], e
    for n in ("doc/rx", "doc/ry", "doc/rw"):
        c.call("tensor.delete", {"name": n})


def call_train_step(c):
    # w [2, 3] and b [3] classify the two rows of doc/a into classes 0 and 2
    put_doc_tensor(c, "doc/x")
    c.call("tensor.put", {"name": "doc/w", "dtype": "f32", "shape": [3, 3],
                          "data": struct.pack("<9f", *([0.1] * 9))})
    c.call("tensor.put", {"name": "doc/b", "dtype": "f32", "shape": [3], "data": bytes(12)})
    c.call("tensor.put", {"name": "doc/y", "dtype": "i32", "shape": [2],
                          "data": struct.pack("<2i", 0, 2)})
    nodes = [{"id": "z0", "op": "matmul", "inputs": ["doc/x", "doc/w"]},
             {"id": "z", "op": "add", "inputs": ["z0", "doc/b"]},
             {"id": "loss", "op": "cross_entropy", "inputs": ["z", "doc/y"]}]
    res = c.call("train.step", {"nodes": nodes, "loss": "loss", "params": ["doc/w", "doc/b"],
                                "optimizer": {"type": "adam", "lr": 0.01}, "step": 1,
                                "outputs": ["z"]})
    assert set(res) == {"loss", "step", "lr", "outputs", "stored"}, res
    assert abs(res["loss"] - 1.0986123) < 1e-5 and res["step"] == 1 and res["lr"] == 0.01, res
    assert set(res["outputs"]) == {"z"} and res["outputs"]["z"]["shape"] == [2, 3], res
    state = {"doc/w", "doc/b", "doc/w.exp_avg", "doc/w.exp_avg_sq", "doc/b.exp_avg",
             "doc/b.exp_avg_sq"}
    assert set(res["stored"]) == state, res
    assert c.call("tensor.stat", {"name": "doc/w"})["version"] == 2
    # gradients only: nothing is updated
    res = c.call("train.step", {"nodes": nodes, "loss": "loss", "params": ["doc/w"],
                                "grads": True})
    assert res["stored"] == ["doc/w.grad"] and res["lr"] == 0, res
    assert c.call("tensor.stat", {"name": "doc/w"})["version"] == 2
    e, _ = c.call_full("train.step", {"nodes": nodes, "loss": "z", "params": ["doc/w"]})
    assert e["name"] == "INVALID_ARGUMENT" and "scalar" in e["message"], e
    for n in state | {"doc/x", "doc/y", "doc/w.grad"}:
        c.call("tensor.delete", {"name": n})


# A linear classifier model on doc/mx [4, 3] with labels doc/my, for the model.* calls.
MODEL_NODES = [{"id": "z0", "op": "matmul", "inputs": ["x", "doc/mw"]},
               {"id": "logits", "op": "add", "inputs": ["z0", "doc/mb"]},
               {"id": "loss", "op": "cross_entropy", "inputs": ["logits", "y"]},
               {"id": "pred", "op": "argmax", "inputs": ["logits"], "attrs": {"axis": 1}},
               {"id": "hit", "op": "eq", "inputs": ["pred", "y"]},
               {"id": "hitf", "op": "cast", "inputs": ["hit"], "attrs": {"dtype": "f32"}},
               {"id": "acc", "op": "mean", "inputs": ["hitf"]}]
STAT_KEYS = {"name", "step", "owner", "created", "modified", "bytes", "definition", "precision", "params",
             "state"}


def model_setup(c, name="doc/model"):
    c.call("tensor.put", {"name": "doc/mw", "dtype": "f32", "shape": [3, 2],
                          "data": struct.pack("<6f", 0.1, -0.1, 0.2, 0.0, -0.3, 0.1)})
    c.call("tensor.put", {"name": "doc/mb", "dtype": "f32", "shape": [2], "data": bytes(8)})
    c.call("tensor.put", {"name": "doc/mx", "dtype": "f32", "shape": [4, 3],
                          "data": struct.pack("<12f", *range(12))})
    c.call("tensor.put", {"name": "doc/my", "dtype": "i32", "shape": [4],
                          "data": struct.pack("<4i", 0, 1, 1, 0)})
    return c.call("model.define", {"name": name, "nodes": MODEL_NODES, "loss": "loss",
                                   "params": ["doc/mw", "doc/mb"],
                                   "inputs": [{"name": "x", "dtype": "f32", "shape": [1, 3]},
                                              {"name": "y", "dtype": "i32", "shape": [1]}],
                                   "outputs": ["logits"], "optimizer": {"type": "adam", "lr": 0.01}})


def model_teardown(c, name="doc/model"):
    c.call("model.delete", {"name": name, "tensors": True})
    for n in ("doc/mx", "doc/my"):
        c.call("tensor.delete", {"name": n})


def call_model_define(c):
    res = model_setup(c)
    assert set(res) == STAT_KEYS and res["step"] == 0 and res["state"] == [], res
    e, _ = c.call_full("model.define", {"name": "doc/model", "nodes": MODEL_NODES, "loss": "loss",
                                        "params": ["doc/mw"]})
    assert e["name"] == "ALREADY_EXISTS", e
    res = c.call("train.step", {"model": "doc/model", "data": {"x": "doc/mx", "y": "doc/my"}})
    assert res["step"] == 1, res
    assert c.call("model.stat", {"name": "doc/model"})["step"] == 1
    model_teardown(c)


def call_model_list(c):
    model_setup(c)
    res = c.call("model.list")
    assert set(res) == {"models"}, res
    m = [x for x in res["models"] if x["name"] == "doc/model"][0]
    assert {"name", "step", "owner", "created", "modified", "bytes", "loss", "params", "inputs",
            "outputs", "optimizer"} == set(m), m
    assert m["params"] == 2 and m["inputs"] == ["x", "y"] and m["optimizer"] == "adam", m
    model_teardown(c)


def call_model_stat(c):
    model_setup(c)
    res = c.call("model.stat", {"name": "doc/model"})
    assert set(res) == STAT_KEYS, res
    assert res["definition"]["loss"] == "loss" and res["definition"]["outputs"] == ["logits"], res
    assert res["precision"] == "f32", res
    assert res["params"][0] == {"name": "doc/mw", "stored": True, "dtype": "f32", "shape": [3, 2],
                                "bytes": 24}, res["params"]
    e, _ = c.call_full("model.stat", {"name": "doc/none"})
    assert e["name"] == "NOT_FOUND", e
    model_teardown(c)


def call_model_delete(c):
    model_setup(c)
    c.call("train.step", {"model": "doc/model", "data": {"x": "doc/mx", "y": "doc/my"}})
    res = c.call("model.delete", {"name": "doc/model", "tensors": True})
    assert res["name"] == "doc/model" and res["deleted"] is True, res
    assert sorted(res["tensors"]) == sorted(["doc/mw", "doc/mb"] + ["doc/m%s.%s" % (p, s) for p in "wb"
                                            for s in ("exp_avg", "exp_avg_sq")]), res
    for n in ("doc/mx", "doc/my"):
        c.call("tensor.delete", {"name": n})


def call_model_evaluate(c):
    model_setup(c)
    res = c.call("model.evaluate", {"model": "doc/model", "data": {"x": "doc/mx", "y": "doc/my"},
                                    "metrics": ["acc"], "batch_size": 3})
    assert set(res) == {"loss", "metrics", "samples", "batches"}, res
    assert res["samples"] == 4 and res["batches"] == 2 and set(res["metrics"]) == {"acc"}, res
    model_teardown(c)


def call_model_predict(c):
    model_setup(c)
    res = c.call("model.predict", {"model": "doc/model", "inputs": {"x": "doc/mx"}})
    assert set(res) == {"outputs", "stored"} and set(res["outputs"]) == {"logits"}, res
    assert res["outputs"]["logits"]["shape"] == [4, 2], res
    res = c.call("model.predict", {"model": "doc/model", "inputs": {"x": "doc/mx"},
                                   "out": {"pred": "doc/pred"}})
    assert res["outputs"] == {} and set(res["stored"]) == {"doc/pred"}, res
    c.call("tensor.delete", {"name": "doc/pred"})
    model_teardown(c)


DOC_KERNEL = """#version 450
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P { float alpha; uint n; };
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < n) y[i] = alpha * x[i];
}
"""


def call_kernel_create(c):
    res = c.call("kernel.create", {"name": "doc/k", "glsl": DOC_KERNEL})
    assert set(res) == {"name", "owner", "entry", "local_size", "bindings", "push_bytes",
                        "push", "spirv_bytes"}, res
    assert res["local_size"] == [64, 1, 1] and res["push_bytes"] == 8, res


def call_kernel_run(c):
    c.call("kernel.create", {"name": "doc/k", "glsl": DOC_KERNEL})
    c.call("tensor.put", {"name": "doc/kx", "dtype": "f32", "shape": [2],
                          "data": struct.pack("<2f", 1, 2)})
    c.call("tensor.put", {"name": "doc/ky", "dtype": "f32", "shape": [2],
                          "data": struct.pack("<2f", 0, 0)})
    res = c.call("kernel.run", {"name": "doc/k", "tensors": ["doc/kx", "doc/ky"],
                                "push": {"alpha": 2.5, "n": 2}, "groups": [1]})
    assert set(res) == {"name", "groups", "seconds"} and res["groups"] == [1, 1, 1], res
    y = c.call("tensor.get", {"name": "doc/ky"})["data"]
    assert struct.unpack("<2f", y) == (2.5, 5.0), y
    # the same kernel as a graph.run node, between two ops (graph.run's kernel nodes)
    res = c.call("graph.run", {"nodes": [
        {"id": "x2", "op": "add", "inputs": ["doc/kx", "doc/kx"]},
        {"id": "k", "kernel": "doc/k", "inputs": ["x2", "doc/ky"],
         "push": {"alpha": 0.5, "n": 2}, "groups": [1]},
        {"id": "s", "op": "add", "inputs": ["k", "doc/kx"], "out": "doc/ks"}], "outputs": ["k"]})
    assert struct.unpack("<2f", res["outputs"]["k"]["data"]) == (1.0, 2.0), res
    assert set(res["stored"]) == {"doc/ks"}, res
    y = c.call("tensor.get", {"name": "doc/ks"})["data"]
    assert struct.unpack("<2f", y) == (2.0, 4.0), y
    y = c.call("tensor.get", {"name": "doc/ky"})["data"]
    assert struct.unpack("<2f", y) == (2.5, 5.0), y
    for n in ("doc/kx", "doc/ky", "doc/ks"):
        c.call("tensor.delete", {"name": n})


def call_kernel_list(c):
    c.call("kernel.create", {"name": "doc/k", "glsl": DOC_KERNEL})
    res = c.call("kernel.list", {"prefix": "doc/"})
    assert set(res) == {"kernels"} and [k["name"] for k in res["kernels"]] == ["doc/k"], res


def call_kernel_delete(c):
    c.call("kernel.create", {"name": "doc/k", "glsl": DOC_KERNEL})
    assert c.call("kernel.delete", {"name": "doc/k"}) == {"deleted": True}


JOB_STAT_KEYS = {"job", "owner", "state", "model", "started", "ended", "step", "run_step", "steps",
                 "epoch", "epochs", "loss", "lr", "samples_per_s", "elapsed", "eval", "devices",
                 "stopped", "error", "result"}


def job_start(c, steps):
    """A detached run of `steps` steps; returns its id."""
    c.call("tensor.put", {"name": "doc/jx", "dtype": "f32", "shape": [8, 1],
                          "data": struct.pack("<8f", *range(8))})
    c.call("tensor.put", {"name": "doc/jw", "dtype": "f32", "shape": [1, 1], "data": bytes(4)})
    res = c.call("train.run", {"nodes": [{"id": "h", "op": "matmul", "inputs": ["xb", "doc/jw"]},
                                         {"id": "L", "op": "mse", "inputs": ["h", "xb"]}],
                               "loss": "L", "params": ["doc/jw"], "data": {"xb": "doc/jx"},
                               "batch_size": 4, "steps": steps, "detach": True})
    assert set(res) == {"job"}, res
    return res["job"]


def job_end(c, job):
    while True:
        st = c.call("job.stat", {"job": job})
        if st["state"] != "running":
            return st


def call_job_list(c):
    job = job_start(c, 4)
    job_end(c, job)
    jobs = c.call("job.list")["jobs"]
    assert jobs and jobs[0]["job"] == job and set(jobs[0]) == JOB_STAT_KEYS, jobs


def call_job_stat(c):
    job = job_start(c, 4)
    st = job_end(c, job)
    assert set(st) == JOB_STAT_KEYS and st["state"] == "done" and st["result"]["steps"] == 4, st
    e, _ = c.call_full("job.stat", {"job": 1 << 40})
    assert e["name"] == "NOT_FOUND", e


def call_job_cancel(c):
    job = job_start(c, 10000000)
    assert c.call("job.cancel", {"job": job}) == {"job": job, "cancelling": True}
    st = job_end(c, job)
    assert st["state"] == "cancelled" and st["stopped"] == "cancelled", st


def call_job_drain(c):
    job = job_start(c, 10000000)
    r = c.call("job.drain", {})
    assert set(r) == {"draining", "running", "waiting"} and r["draining"] is True, r
    st = job_end(c, job)
    assert st["state"] == "interrupted" and st["stopped"] == "drained", st
    e, _ = c.call_full("train.run", {})
    assert e["name"] == "UNAVAILABLE", e
    r = c.call("job.drain", {"undo": True})
    assert r["draining"] is False and r["waiting"] == 0, r
    c.call("job.cancel", {"job": job})
    job_end(c, job)


def call_job_watch(c):
    job = job_start(c, 200)
    msgid = c.request("job.watch", {"job": job})
    while True:
        msg = c.recv()
        assert msg is not None, "closed during job.watch"
        if msg[0] == 2:
            assert msg[1] == "train.progress", msg
            continue
        assert msg[1] == msgid and msg[2] is None, msg
        break
    assert set(msg[3]) == JOB_STAT_KEYS and msg[3]["state"] == "done", msg[3]


CALLS = {
    "ping": call_ping,
    "info": call_info,
    "tensor.put": call_put,
    "tensor.get": call_get,
    "tensor.stat": call_stat,
    "tensor.list": call_list,
    "tensor.delete": call_delete,
    "tensor.chmod": call_chmod,
    "tensor.copy": call_copy,
    "store.sync": call_store_sync,
    "op.run": call_op_run,
    "graph.run": call_graph_run,
    "train.step": call_train_step,
    "train.run": call_train_run,
    "model.define": call_model_define,
    "model.list": call_model_list,
    "model.stat": call_model_stat,
    "model.delete": call_model_delete,
    "model.evaluate": call_model_evaluate,
    "model.predict": call_model_predict,
    "kernel.create": call_kernel_create,
    "kernel.run": call_kernel_run,
    "kernel.list": call_kernel_list,
    "kernel.delete": call_kernel_delete,
    "job.list": call_job_list,
    "job.stat": call_job_stat,
    "job.cancel": call_job_cancel,
    "job.watch": call_job_watch,
    "job.drain": call_job_drain,
}


# ---- checks of the tables --------------------------------------------------

def check_error_table(text, c):
    """The daemon's (code, name) pairs are those of the document's table."""
    rows = doc_table(doc_sections(text)["Errors"])
    table = {unquote(r[1]): int(r[0]) for r in rows}
    assert table, "no error table"
    seen = []
    e, _ = c.call_full("tensor.get", {"name": "doc/missing"})
    seen.append(e)
    e, _ = c.call_full("tensor.get", {"name": "bad name"})
    seen.append(e)
    e, _ = c.call_full("doc.no_such_method")
    seen.append(e)
    c.send([0, 4242, 42, []])
    seen.append(c.response(4242)[0])
    put_doc_tensor(c, "doc/e")
    e, _ = c.call_full("tensor.put", {"name": "doc/e", "dtype": "u8", "shape": [0],
                                      "data": b"", "if_absent": True})
    seen.append(e)
    c.call("tensor.delete", {"name": "doc/e"})
    for e in seen:
        assert isinstance(e, dict), e
        assert e["name"] in table, "error name %s is not in the document" % e["name"]
        assert table[e["name"]] == e["code"], \
            "%s is code %d in the document, %d from the daemon" % (
                e["name"], table[e["name"]], e["code"])
    assert {e["name"] for e in seen} == {"NOT_FOUND", "INVALID_ARGUMENT", "UNIMPLEMENTED",
                                         "PROTOCOL", "ALREADY_EXISTS"}, seen


def check_metadata_table(text, c):
    """tensor.stat returns exactly the keys of the metadata table."""
    keys = {unquote(r[0]) for r in doc_table(doc_sections(text)["Tensors"])}
    assert "name" in keys and "version" in keys, keys
    put_doc_tensor(c, "doc/m")
    res = c.call("tensor.stat", {"name": "doc/m"})
    c.call("tensor.delete", {"name": "doc/m"})
    assert set(res) == keys, "stat keys %s, document %s" % (sorted(res), sorted(keys))


def main():
    path = os.environ.get("PROTOCOL_DOC")
    if not path:
        print("PROTOCOL_DOC is not set")
        return 1
    with open(path, encoding="utf-8") as f:
        text = f.read()
    methods = doc_methods(text)
    failed = []
    if not methods:
        failed.append("no methods found in %s" % path)
    for m in methods:
        if m not in CALLS:
            failed.append("method %s is in the document but has no call in %s"
                          % (m, os.path.basename(__file__)))
    for m in CALLS:
        if m not in methods:
            failed.append("method %s has a call here but is not in the document" % m)
    if len(set(methods)) != len(methods):
        failed.append("a method is documented twice: %s" % methods)

    d = Daemon().start()
    try:
        with d.client() as c:
            checks = [(m, CALLS[m]) for m in methods if m in CALLS]
            checks += [("errors table", lambda cl: check_error_table(text, cl)),
                       ("metadata table", lambda cl: check_metadata_table(text, cl))]
            for name, fn in checks:
                try:
                    fn(c)
                    print("ok   %s" % name)
                except Exception as e:
                    traceback.print_exc()
                    failed.append("%s: %s" % (name, e))
                    if not d.alive():
                        failed.append("tensord died")
                        break
    finally:
        if failed:
            d.dump_log()
        try:
            d.stop()
        except Exception as e:
            failed.append(str(e))
    for f in failed:
        print("FAIL %s" % f)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

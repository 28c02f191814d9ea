#!/usr/bin/python3
"""Durability (docs/durability.md): tensors checkpointed under --state-dir
come back byte-exact after a restart, a kill -9 loses nothing acknowledged
before a completed store.sync, damaged files are reported and skipped, and
the files are plain safetensors that the independent parser below reads.

Run with /usr/bin/python3 and TENSORD_BIN set (meson test durability)."""
import hashlib
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import traceback

import numpy as np

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from daemon import Client, Daemon, RPCError, as_user  # noqa: E402

DTYPES = {"f32": np.float32, "f16": np.float16, "bf16": np.uint16, "i32": np.int32,
          "u8": np.uint8}
ST_DTYPES = {"f32": "F32", "f16": "F16", "bf16": "BF16", "i32": "I32", "u8": "U8"}
RNG = np.random.default_rng(7)


# ---- an independent CRC-32C and safetensors reader --------------------------

def _crc_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
        table.append(c)
    return table


CRC_TABLE = _crc_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = (c >> 8) ^ CRC_TABLE[(c ^ b) & 0xFF]
    return c ^ 0xFFFFFFFF


def read_safetensors(path):
    """(header dict, data buffer) by the format's own rules."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    buf = raw[8 + n:]
    covered = sorted(v["data_offsets"] for k, v in header.items() if k != "__metadata__")
    pos = 0
    for b, e in covered:
        assert b == pos, "hole or overlap in %s" % path
        pos = e
    assert pos == len(buf), "%s: buffer %d bytes, offsets cover %d" % (path, len(buf), pos)
    return header, buf


def key(name):
    """The store key of a plain name of ours: "<uid>/<name>" (docs/security.md,
    "Names"); checkpoints hold the key."""
    return "%d/%s" % (os.getuid(), name)


def encode_name(name, uid=None):
    """The documented file name of our tensor `name` (of user `uid`'s)."""
    return encode_key(key(name) if uid is None else "%d/%s" % (uid, name))


def encode_key(k):
    """The documented file name of the tensor whose store key is `k`."""
    out = []
    for i, ch in enumerate(k):
        if ch == "/" or ch == "%" or ch == ":" or (i == 0 and ch == "."):
            out.append("%%%02X" % ord(ch))
        else:
            out.append(ch)
    return "".join(out) + ".safetensors"


# Model files are named by the model's key too.
MODEL_NS = "%d%%2F" % os.getuid()


# ---- helpers ------------------------------------------------------------------

class State:
    """A state directory and a config file, outliving the daemons that use them."""

    def __init__(self, interval=0):
        self.dir = tempfile.mkdtemp(prefix="tensord-durable-", dir="/tmp")
        self.state = os.path.join(self.dir, "state")
        self.conf = os.path.join(self.dir, "tensord.conf")
        with open(self.conf, "w") as f:
            f.write("checkpoint_interval = %d\n" % interval)

    def daemon(self):
        return Daemon(["--state-dir", self.state, "--config", self.conf]).start()

    def tensors(self):
        return os.path.join(self.state, "tensors")

    def cleanup(self):
        shutil.rmtree(self.dir, ignore_errors=True)


def kill9(d):
    d.proc.send_signal(signal.SIGKILL)
    d.proc.wait()
    log = open(d.log, errors="replace").read()
    d.proc = None
    d._cleanup()
    return log


def stop_log(d):
    """SIGTERM (must exit 0), returning the daemon's log."""
    log_path = d.log
    d.proc.send_signal(signal.SIGTERM)
    rc = d.proc.wait(60)
    log = open(log_path, errors="replace").read()
    d.proc = None
    d._cleanup()
    assert rc == 0, "exit %d on SIGTERM\n%s" % (rc, log)
    return log


def random_bytes(dtype, shape):
    count = int(np.prod(shape)) if shape else 1
    if dtype in ("f32", "f16"):
        a = RNG.standard_normal(count).astype(DTYPES[dtype])
    else:
        a = RNG.integers(0, 250, count).astype(DTYPES[dtype])
    return a.tobytes()


def put(c, name, dtype, shape, data, **extra):
    p = {"name": name, "dtype": dtype, "shape": shape, "data": data}
    p.update(extra)
    return c.call("tensor.put", p)


def error_name(c, method, params):
    e, _ = c.call_full(method, params)
    assert e is not None, "%s %r succeeded" % (method, params)
    return e["name"]


# ---- tests --------------------------------------------------------------------

def test_round_trip():
    """Every dtype, rank 0 and empty tensors, modes and groups survive a restart."""
    st = State()
    try:
        sent = {}
        with st.daemon() as d, d.client() as c:
            shapes = [[3, 5], [7], [], [2, 0, 4], [2, 2, 2]]
            for i, dt in enumerate(DTYPES):
                for j, shape in enumerate(shapes):
                    name = "rt/%s/%d:x" % (dt, j)
                    data = random_bytes(dt, shape)
                    put(c, name, dt, shape, data)
                    sent[name] = data
            put(c, "../up", "u8", [3], b"abc", mode="world-read")
            sent["../up"] = b"abc"
            c.call("tensor.chmod", {"name": "rt/f32/0:x", "mode": "group-write", "group": 4242})
            # a replacement after a sync: the new bytes and version come back
            res = c.call("store.sync")
            # tensor.chmod wrote its tensor at once; the sync wrote the rest.
            rest = sum(len(v) for k, v in sent.items() if k != "rt/f32/0:x")
            assert res["written"] == len(sent) - 1 and res["bytes"] == rest, res
            assert isinstance(res["seconds"], float) and res["removed"] == 0, res
            again = c.call("store.sync")
            assert again["written"] == 0 and again["bytes"] == 0, again
            # info's persistence section (issue 34): where, and the passes' record
            per = c.call("info")["persistence"]
            assert per["enabled"] is True and per["checkpoints"] >= 2 and per["failed_writes"] == 0, per
            assert per["last_checkpoint_status"] == "ok" and per["last_checkpoint_seconds"] >= 0, per
            assert abs(per["last_checkpoint"] - time.time()) < 60, per
            assert per["state_dir"] == (st.state if os.geteuid() == 0 else None), per
            sent["rt/u8/0:x"] = random_bytes("u8", [3, 5])
            put(c, "rt/u8/0:x", "u8", [3, 5], sent["rt/u8/0:x"])
            before = {n: c.call("tensor.stat", {"name": n}) for n in sent}
        with st.daemon() as d, d.client() as c:
            for name, data in sent.items():
                got = c.call("tensor.get", {"name": name})
                assert got["data"] == data, "%s: bytes differ after restart" % name
                stat = c.call("tensor.stat", {"name": name})
                for key in ("dtype", "shape", "bytes", "owner", "group", "mode", "version",
                            "created", "modified"):
                    assert stat[key] == before[name][key], (name, key, stat[key], before[name][key])
            assert before["rt/f32/0:x"]["mode"] == "group-write" and \
                before["rt/f32/0:x"]["group"] == 4242, before["rt/f32/0:x"]
            assert before["rt/u8/0:x"]["version"] == 2, before["rt/u8/0:x"]
            assert before["../up"]["mode"] == "world-read"
            assert os.path.exists(os.path.join(st.tensors(), encode_name("../up"))), \
                os.listdir(st.tensors())
            assert not os.path.exists(os.path.join(st.state, "up.safetensors"))
            names = {t["name"] for t in c.call("tensor.list")["tensors"]}
            assert names == set(sent), names ^ set(sent)
            # a tensor restored clean is not written again
            assert c.call("store.sync")["written"] == 0
    finally:
        st.cleanup()


def test_files_are_safetensors():
    """The files parse with a reader written from the format description."""
    st = State()
    try:
        with st.daemon() as d, d.client() as c:
            data = random_bytes("f16", [4, 3])
            put(c, "fmt/w", "f16", [4, 3], data, mode="group-read")
            owner = c.call("tensor.stat", {"name": "fmt/w"})["owner"]
            c.call("store.sync")
            path = os.path.join(st.tensors(), encode_name("fmt/w"))
            assert os.path.exists(path), os.listdir(st.tensors())
            header, buf = read_safetensors(path)
            assert header[key("fmt/w")]["dtype"] == "F16" and header[key("fmt/w")]["shape"] == [4, 3]
            b, e = header[key("fmt/w")]["data_offsets"]
            assert buf[b:e] == data
            meta = header["__metadata__"]
            assert meta["tensord_name"] == key("fmt/w") and meta["mode"] == "group-read", meta
            assert meta["owner"] == str(owner) and meta["version"] == "1", meta
            assert int(meta["crc32c"], 16) == crc32c(data), meta
            assert (8 + len(json.dumps(header)) + 7) // 8 * 8 >= 8  # header is JSON
            assert os.stat(st.tensors()).st_mode & 0o077 == 0, "tensors/ is not private"
    finally:
        st.cleanup()


def test_sigterm_flushes_and_delete_persists():
    st = State()
    try:
        with st.daemon() as d, d.client() as c:
            put(c, "del/a", "i32", [2], struct.pack("<2i", 1, 2))
            put(c, "del/b", "i32", [2], struct.pack("<2i", 3, 4))
            c.call("store.sync")
            c.call("tensor.delete", {"name": "del/a"})
            res = c.call("store.sync")
            assert res["removed"] == 1 and res["written"] == 0, res
            assert not os.path.exists(os.path.join(st.tensors(), encode_name("del/a")))
            # delete then put again under the same name before a sync
            c.call("tensor.delete", {"name": "del/b"})
            put(c, "del/b", "u8", [1], b"\x09")
            put(c, "term/unsynced", "u8", [4], b"\x01\x02\x03\x04")
            log = stop_log(d)
        assert "final checkpoint: 2 tensors" in log, log
        # The log says why it shuts down before what shutting down does.
        assert 0 <= log.find("received, shutting down") < log.find("final checkpoint"), log
        with st.daemon() as d, d.client() as c:
            assert error_name(c, "tensor.get", {"name": "del/a"}) == "NOT_FOUND"
            assert c.call("tensor.get", {"name": "del/b"})["data"] == b"\x09"
            assert c.call("tensor.get", {"name": "term/unsynced"})["data"] == b"\x01\x02\x03\x04"
    finally:
        st.cleanup()


def test_kill9_after_sync():
    """kill -9 in a burst of pipelined writes: what a completed store.sync
    acknowledged comes back exactly; nothing later was written (no timer)."""
    st = State(interval=0)
    try:
        synced = {}
        d = st.daemon()
        with d.client() as c:
            for i in range(24):
                synced["k/%d" % i] = random_bytes("f32", [16])
                put(c, "k/%d" % i, "f32", [16], synced["k/%d" % i])
            c.call("store.sync")
            # the burst: overwrites and new names, pipelined, killed mid-way
            for rnd in range(40):
                for i in range(24):
                    c.request("tensor.put", {"name": "k/%d" % i, "dtype": "f32", "shape": [16],
                                             "data": random_bytes("f32", [16])})
                c.request("tensor.put", {"name": "new/%d" % rnd, "dtype": "u8", "shape": [1],
                                         "data": b"\x01"})
            for msgid in range(26, 26 + 30):  # the burst is being served
                e, _ = c.response(msgid)
                assert e is None, e
            kill9(d)
        with st.daemon() as d, d.client() as c:
            for name, data in synced.items():
                assert c.call("tensor.get", {"name": name})["data"] == data, name
            names = {t["name"] for t in c.call("tensor.list")["tensors"]}
            assert names == set(synced), sorted(names - set(synced))[:5]
    finally:
        st.cleanup()


def test_kill9_with_checkpoints():
    """With a 1 s checkpoint running during writes, kill -9: every tensor
    that comes back holds bytes that were put under its name, and those
    synced before are all there."""
    st = State(interval=1)
    try:
        sent = {}
        d = st.daemon()
        with d.client() as c:
            for i in range(8):
                data = random_bytes("f32", [32])
                sent.setdefault("c/%d" % i, []).append(data)
                put(c, "c/%d" % i, "f32", [32], data)
            c.call("store.sync")
            t_end = time.monotonic() + 2.5
            rnd = 0
            while time.monotonic() < t_end:
                for i in range(8):
                    data = random_bytes("f32", [32])
                    sent["c/%d" % i].append(data)
                    put(c, "c/%d" % i, "f32", [32], data)
                name = "c/n%d" % rnd
                sent[name] = [bytes([rnd % 256])]
                put(c, name, "u8", [1], sent[name][0])
                rnd += 1
                time.sleep(0.02)
            kill9(d)
        with st.daemon() as d, d.client() as c:
            listed = {t["name"] for t in c.call("tensor.list")["tensors"]}
            for i in range(8):
                assert "c/%d" % i in listed
            assert len(listed) > 8, "the timer wrote nothing in 2.5 s"
            for name in listed:
                got = c.call("tensor.get", {"name": name})["data"]
                assert got in sent[name], "%s: bytes that were never put" % name
    finally:
        st.cleanup()


def test_damaged_files_are_skipped():
    st = State()
    try:
        good = {}
        with st.daemon() as d, d.client() as c:
            for n in ("dmg/good", "dmg/trunc", "dmg/flip", "dmg/header", "dmg/rename"):
                good[n] = random_bytes("f32", [64])
                put(c, n, "f32", [64], good[n])
            c.call("store.sync")
            stop_log(d)
        t = st.tensors()
        path = lambda n: os.path.join(t, encode_name(n))  # noqa: E731
        with open(path("dmg/trunc"), "r+b") as f:
            f.truncate(os.path.getsize(path("dmg/trunc")) - 5)
        with open(path("dmg/flip"), "r+b") as f:
            f.seek(-3, os.SEEK_END)
            b = f.read(1)
            f.seek(-3, os.SEEK_END)
            f.write(bytes([b[0] ^ 0x40]))
        with open(path("dmg/header"), "r+b") as f:
            f.seek(8)
            f.write(b"[garbage")
        # a valid file under another tensor's file name must not be served as it
        os.rename(path("dmg/rename"), path("dmg/moved"))
        with open(os.path.join(t, encode_name("dmg/garbage")), "wb") as f:
            f.write(os.urandom(100))
        with open(os.path.join(t, encode_name("dmg/empty")), "wb"):
            pass
        with open(os.path.join(t, "not a tensor"), "wb") as f:
            f.write(b"x")
        with open(os.path.join(t, encode_name("dmg/good") + ".tmp-abcdef"), "wb") as f:
            f.write(b"half a file")
        d = st.daemon()
        with d.client() as c:
            assert c.call("tensor.get", {"name": "dmg/good"})["data"] == good["dmg/good"]
            for n in ("dmg/trunc", "dmg/flip", "dmg/header", "dmg/moved", "dmg/garbage",
                      "dmg/empty", "dmg/rename"):
                assert error_name(c, "tensor.get", {"name": n}) == "NOT_FOUND", n
        log = stop_log(d)
        for n in ("dmg/trunc", "dmg/flip", "dmg/header", "dmg/moved", "dmg/garbage", "dmg/empty"):
            assert encode_name(n) + " skipped" in log, "%s not reported:\n%s" % (n, log)
        assert "checksum mismatch" in log and "not the file name of a tensor" in log, log
        assert not os.path.exists(os.path.join(t, encode_name("dmg/good") + ".tmp-abcdef"))
    finally:
        st.cleanup()


def test_garbage_params():
    st = State()
    try:
        with st.daemon() as d, d.client() as c:
            assert error_name(c, "store.sync", {"all": True}) == "INVALID_ARGUMENT"
            assert error_name(c, "store.sync", {1: 2}) == "INVALID_ARGUMENT"
            c.send([0, 99, "store.sync", [7]])
            e, _ = c.response(99)
            assert e and e["name"] in ("INVALID_ARGUMENT", "PROTOCOL"), e
            assert c.call("store.sync", {})["written"] == 0
            assert c.call("ping")["pong"] is True
        # without --state-dir nothing is persisted, and store.sync says so
        with Daemon() as d, d.client() as c:
            assert error_name(c, "store.sync", None) == "FAILED_PRECONDITION"
    finally:
        st.cleanup()


MODEL_NODES = [{"id": "z0", "op": "matmul", "inputs": ["x", "m/w"]},
               {"id": "logits", "op": "add", "inputs": ["z0", "m/b"]},
               {"id": "loss", "op": "cross_entropy", "inputs": ["logits", "y"]}]


def define_model(c, name, step=0):
    return c.call("model.define", {"name": name, "nodes": MODEL_NODES, "loss": "loss",
                                   "params": ["m/w", "m/b"], "step": step,
                                   "inputs": [{"name": "x", "dtype": "f32", "shape": [1, 3]},
                                              {"name": "y", "dtype": "i32", "shape": [1]}],
                                   "outputs": ["logits"], "optimizer": {"type": "adam", "lr": 0.01}})


def test_models_persist():
    """Models come back with their definition, owner and step count; a
    deleted one stays deleted; a damaged file is skipped."""
    st = State()
    try:
        with st.daemon() as d, d.client() as c:
            put(c, "m/w", "f32", [3, 2], random_bytes("f32", [3, 2]))
            put(c, "m/b", "f32", [2], bytes(8))
            put(c, "m/x", "f32", [4, 3], random_bytes("f32", [4, 3]))
            put(c, "m/y", "i32", [4], struct.pack("<4i", 0, 1, 1, 0))
            define_model(c, "m/one")
            define_model(c, "m/two", step=5)
            define_model(c, "m/gone")
            res = c.call("store.sync")
            assert res["models"] == 3, res
            assert c.call("store.sync")["models"] == 0
            c.call("train.step", {"model": "m/one", "data": {"x": "m/x", "y": "m/y"}})
            c.call("model.delete", {"name": "m/gone"})
            before = {n: c.call("model.stat", {"name": n}) for n in ("m/one", "m/two")}
            assert before["m/one"]["step"] == 1 and before["m/two"]["step"] == 5, before
            w_before = c.call("tensor.get", {"name": "m/w"})["data"]
            log = stop_log(d)
        assert "2 model files changed" in log, log
        files = sorted(os.listdir(os.path.join(st.state, "models")))
        assert files == [MODEL_NS + "m%2Fone.model", MODEL_NS + "m%2Ftwo.model"], files
        with st.daemon() as d, d.client() as c:
            for n, b in before.items():
                s = c.call("model.stat", {"name": n})
                for key in ("step", "owner", "created", "modified", "definition", "params"):
                    assert s[key] == b[key], (n, key, s[key], b[key])
            assert error_name(c, "model.stat", {"name": "m/gone"}) == "NOT_FOUND"
            assert c.call("tensor.get", {"name": "m/w"})["data"] == w_before
            # the restored model trains on, and its step count goes on from 1
            c.call("train.step", {"model": "m/one", "data": {"x": "m/x", "y": "m/y"}})
            assert c.call("model.stat", {"name": "m/one"})["step"] == 2
            assert c.call("store.sync")["models"] == 1
            stop_log(d)
        path = os.path.join(st.state, "models", MODEL_NS + "m%2Ftwo.model")
        with open(path, "r+b") as f:
            f.seek(20)
            b = f.read(1)
            f.seek(20)
            f.write(bytes([b[0] ^ 1]))
        d = st.daemon()
        with d.client() as c:
            assert c.call("model.stat", {"name": "m/one"})["step"] == 2
            assert error_name(c, "model.stat", {"name": "m/two"}) == "NOT_FOUND"
        log = stop_log(d)
        assert MODEL_NS + "m%2Ftwo.model skipped: checksum mismatch" in log, log
        assert os.path.exists(path), "a damaged file is left for inspection"
    finally:
        st.cleanup()


def tensorctl():
    return os.path.join(os.path.dirname(os.environ["TENSORD_BIN"]), "..", "client", "ctl", "tensorctl")


def test_tensorctl_sync():
    import subprocess
    st = State()
    try:
        with st.daemon() as d, d.client() as c:
            put(c, "ctl/a", "u8", [8], bytes(range(8)))
            out = subprocess.run([tensorctl(), "--socket", d.sock, "sync"], capture_output=True,
                                 text=True, timeout=60)
            assert out.returncode == 0 and "1 tensors written" in out.stdout, out
            out = subprocess.run([tensorctl(), "--socket", d.sock, "--json", "sync"],
                                 capture_output=True, text=True, timeout=60)
            j = json.loads(out.stdout)
            assert out.returncode == 0 and j["written"] == 0 and "seconds" in j, out
            out = subprocess.run([tensorctl(), "--socket", d.sock, "sync", "extra"],
                                 capture_output=True, text=True, timeout=60)
            assert out.returncode != 0 and out.stderr, out
        with Daemon() as d:
            out = subprocess.run([tensorctl(), "--socket", d.sock, "sync"], capture_output=True,
                                 text=True, timeout=60)
            assert out.returncode != 0 and "persistence is off" in out.stderr, out
    finally:
        st.cleanup()

# ---- issue 14: kernel writes, hostile names, full disks, hostile state dirs ----

KERNEL_SCALE = """#version 450
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer In { float x[]; };
layout(std430, binding = 1) writeonly buffer Out { float y[]; };
layout(push_constant) uniform P { float alpha; uint n; };
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < n)
        y[i] = alpha * x[i];
}
"""


def test_kernel_run_is_durable():
    """kernel.run's output is marked dirty with a new version: store.sync
    writes it, kill -9 and a restart bring the new bytes back."""
    st = State()
    try:
        x = np.arange(64, dtype=np.float32)
        d = st.daemon()
        with d.client() as c:
            put(c, "kx", "f32", [64], x.tobytes())
            put(c, "ky", "f32", [64], np.zeros(64, np.float32).tobytes())
            c.call("store.sync", {})
            v0 = c.call("tensor.stat", {"name": "ky"})["version"]
            c.call("kernel.create", {"name": "scale", "glsl": KERNEL_SCALE})
            c.call("kernel.run", {"name": "scale", "tensors": ["kx", "ky"],
                                  "push": {"alpha": 3.0, "n": 64}, "groups": [1]})
            assert c.call("tensor.stat", {"name": "ky"})["version"] > v0, "version not bumped"
            res = c.call("store.sync", {})
            assert res["written"] == 1, res
        kill9(d)
        hdr, buf = read_safetensors(os.path.join(st.tensors(), encode_name("ky")))
        assert bytes(buf) == (3.0 * x).tobytes(), "the checkpoint holds the old bytes"
        d = st.daemon()
        with d.client() as c:
            got = c.call("tensor.get", {"name": "ky"})["data"]
            assert got == (3.0 * x).tobytes(), "kill -9 brought the old bytes back"
            c.call("kernel.create", {"name": "scale", "glsl": KERNEL_SCALE})
            c.call("kernel.run", {"name": "scale", "tensors": ["kx", "ky"],
                                  "push": {"alpha": 5.0, "n": 64}, "groups": [1]})
        stop_log(d)
        d = st.daemon()
        with d.client() as c:
            got = c.call("tensor.get", {"name": "ky"})["data"]
            assert got == (5.0 * x).tobytes(), "a clean restart brought the old bytes back"
            # A kernel node storing its result (`out`) is durable too.
            c.call("kernel.create", {"name": "scale", "glsl": KERNEL_SCALE})
            c.call("graph.run", {"nodes": [{"id": "k", "kernel": "scale", "inputs": ["kx", "ky"],
                                            "push": {"alpha": 7.0, "n": 64}, "groups": [1],
                                            "result": 1, "out": "ky"}]})
            assert c.call("store.sync", {})["written"] == 1
        kill9(d)
        d = st.daemon()
        with d.client() as c:
            got = c.call("tensor.get", {"name": "ky"})["data"]
            assert got == (7.0 * x).tobytes(), "a kernel node's out was not checkpointed"
        d.stop()
    finally:
        st.cleanup()


def rule_file(name, suffix):
    """docs/durability.md: the encoded name when it leaves room for a 16-byte
    temporary suffix within NAME_MAX, else %H and the SHA-256 of the name."""
    enc = encode_key(name)[:-len(".safetensors")]
    if len(enc) + len(suffix) + 16 <= 255:
        return enc + suffix
    return "%H" + hashlib.sha256(name.encode()).hexdigest() + suffix


def long_name(n, ch="/"):
    """A valid n-byte name whose encoded file name is far over NAME_MAX."""
    return ("a" + ch * n)[:n - 1] + "z"


def test_long_names_checkpoint_and_restore():
    """Names whose encoding is over NAME_MAX get a bounded file name (%H and
    the SHA-256 of the name, the name inside); they, a long model name and
    everybody else's tensors are written and come back."""
    st = State()
    try:
        # 253 bytes: the longest name of root (uid 0), whose key "0/<name>" is at
        # most 255 bytes (docs/protocol.md, Names).
        names = [long_name(84), long_name(253), long_name(253, ":"), "x" * 253, "y" * 200]
        datas = {n: random_bytes("f32", [3]) for n in names}
        model = "m" + "/" * 200 + "z"
        d = st.daemon()
        with d.client() as c:
            for n in names:
                put(c, n, "f32", [3], datas[n])
            put(c, "small", "u8", [2], b"\x01\x02")
            put(c, "m/w", "f32", [3, 2], random_bytes("f32", [3, 2]))
            put(c, "m/b", "f32", [2], bytes(8))
            define_model(c, model)
            res = c.call("store.sync", {})
            assert res["written"] == len(names) + 3 and res["models"] == 1, res
            assert res["failed"] == 0, res
        kill9(d)
        # Every file is named by the documented rule from the name inside it
        # (whatever form the daemon gives its internal names), and within NAME_MAX.
        inside = {}
        for f in os.listdir(st.tensors()):
            hdr, _ = read_safetensors(os.path.join(st.tensors(), f))
            name = hdr["__metadata__"]["tensord_name"]
            assert f == rule_file(name, ".safetensors") and len(f) <= 255, (f, name)
            assert name in hdr, hdr
            inside[name] = f
        for n in names + ["small"]:
            assert [k for k in inside if k == n or k.endswith("/" + n)], (n, inside)
        hashed = [f for f in inside.values() if f.startswith("%H")]
        assert len(hashed) == 4, inside      # three long names and "x" * 253
        mfiles = os.listdir(os.path.join(st.state, "models"))
        assert len(mfiles) == 1 and mfiles[0].startswith("%H") and len(mfiles[0]) <= 255, mfiles
        d = st.daemon()
        with d.client() as c:
            for n in names:
                assert c.call("tensor.get", {"name": n})["data"] == datas[n], n
            assert c.call("tensor.get", {"name": "small"})["data"] == b"\x01\x02"
            ms = [m["name"] for m in c.call("model.list", {})["models"]]
            assert model in ms, ms
            c.call("tensor.delete", {"name": names[0]})
            c.call("store.sync", {})
        d.stop()
        left = [f for f in os.listdir(st.tensors()) if f.startswith("%H")]
        assert len(left) == 3, "the deleted long name's file stayed: %r" % left
    finally:
        st.cleanup()


def test_unwritable_tensor_does_not_stop_others():
    """A tensor whose checkpoint fails (TENSORD_FAULT_CHECKPOINT_BYTES, as a
    full disk) is its owner's error (UNAVAILABLE, named); another user's
    store.sync succeeds (counting it, not naming it), and the rest are
    written by that sync, by the timer, and at shutdown."""
    two = os.geteuid() == 0
    st = State(interval=1)
    os.environ["TENSORD_FAULT_CHECKPOINT_BYTES"] = "4096"
    try:
        d = st.daemon()
        if two:
            os.chmod(d.dir, 0o755)
            os.chmod(d.sock, 0o666)

        def attacker():
            with d.client() as c:
                put(c, "big", "u8", [8192], bytes(8192))     # first in line, cannot be written
                e, _ = c.call_full("store.sync", {})
                return e

        def victim():
            with d.client() as c:
                put(c, "ok1", "f32", [4], np.ones(4, np.float32).tobytes())
                return c.call("store.sync", {})

        e = as_user(65532, attacker) if two else attacker()
        assert e and e["name"] == "UNAVAILABLE" and "'big'" in e["message"], e
        assert "No space left" in e["message"], e
        if two:
            res = as_user(65533, victim)
            assert res["failed"] == 1 and res["written"] == 1, res
        else:
            victim()
        assert os.path.exists(os.path.join(st.tensors(), encode_name("ok1", 65533 if two else None))), \
            "ok1 not written"
        with d.client() as c:  # the failed writes show in info (issue 34)
            per = c.call("info")["persistence"]
            assert per["failed_writes"] >= 2 and per["last_checkpoint_status"] == "failed", per
        with d.client() as c:
            put(c, "ok2", "f32", [4], np.full(4, 2, np.float32).tobytes())
            deadline = time.monotonic() + 10
            while not os.path.exists(os.path.join(st.tensors(), encode_name("ok2"))):
                assert time.monotonic() < deadline, "the timer never wrote ok2"
                time.sleep(0.1)
            put(c, "ok3", "f32", [1], np.ones(1, np.float32).tobytes())
        log = stop_log(d)
        assert re.search(r"cannot write '(\d+/)?big'", log), log   # logs show the store key
        d = st.daemon()
        with d.client() as c:
            names = [t["name"] for t in c.call("tensor.list", {})["tensors"]]
            if two:     # ok1 is the victim's, in its namespace
                names += [t["name"].split("/", 1)[1] for t in
                          c.call("tensor.list", {"prefix": "~65533/"})["tensors"]]
            assert sorted(names) == ["ok1", "ok2", "ok3"], names
        d.stop()
    finally:
        del os.environ["TENSORD_FAULT_CHECKPOINT_BYTES"]
        st.cleanup()


def full_disk_scenario(mnt):
    """Run in a private mount namespace with a 1 MiB tmpfs at `mnt`."""
    state = os.path.join(mnt, "state")
    small = np.arange(4, dtype=np.float32).tobytes()
    d = Daemon(["--state-dir", state]).start()
    with d.client() as c:
        put(c, "big", "u8", [2 << 20], bytes(2 << 20))      # larger than the disk
        put(c, "ok", "f32", [4], small)
        e, _ = c.call_full("store.sync", {})
        assert e and e["name"] == "UNAVAILABLE", e
        assert "'big'" in e["message"] and "No space left" in e["message"], e
        files = os.listdir(os.path.join(state, "tensors"))
        assert files == [encode_name("ok")], files               # no temporary file left
    stop_log(d)
    d = Daemon(["--state-dir", state]).start()
    with d.client() as c:
        assert [t["name"] for t in c.call("tensor.list", {})["tensors"]] == ["ok"]
        assert c.call("tensor.get", {"name": "ok"})["data"] == small
    d.stop()


def test_real_full_disk():
    """On a really full disk (a 1 MiB tmpfs in a private mount namespace; needs
    root): the tensor that does not fit is the caller's UNAVAILABLE, the
    others are written and restored."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        print("skipped: needs root and unshare")
        return
    tmp = tempfile.mkdtemp(prefix="tensord-full-", dir="/tmp")
    try:
        mnt = os.path.join(tmp, "mnt")
        os.mkdir(mnt, 0o700)
        script = 'mount -t tmpfs -o size=1m,mode=0700 tmpfs "$1" || exit 77; exec "$2" "$3" --full-disk "$1"'
        p = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh",
                            mnt, sys.executable, os.path.abspath(__file__)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
        out = p.stdout.decode(errors="replace")
        if p.returncode == 77:
            print("skipped: cannot mount a tmpfs here\n" + out)
            return
        assert p.returncode == 0, out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def state_dir_refused(state, why):
    """tensord must exit non-zero at start-up naming `why`."""
    binary = os.environ["TENSORD_BIN"]
    tmp = tempfile.mkdtemp(prefix="tensord-sd-", dir="/tmp")
    try:
        p = subprocess.run([binary, "--socket", os.path.join(tmp, "s"), "--device", "auto",
                            "--state-dir", state], stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
        out = p.stdout.decode(errors="replace")
        assert p.returncode != 0, "started with an unsafe state dir %s\n%s" % (state, out)
        assert why in out, out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_unsafe_state_dir_refused():
    """A state dir (or tensors/) another user owns, or one others may write,
    is refused at start-up; a new one is created 0700."""
    if os.geteuid() != 0:
        print("skipped: needs root to chown")
        return
    st = State()
    try:
        os.mkdir(st.state, 0o700)
        os.chown(st.state, 65534, 65534)
        state_dir_refused(st.state, "belongs to uid 65534")
        os.chown(st.state, 0, 0)
        os.chmod(st.state, 0o777)
        state_dir_refused(st.state, "writable by its group or others")
        # Without persistence the daemon runs, but keeps no pipeline cache
        # in a directory others may write (they could plant one, or a link).
        nopersist = os.path.join(st.dir, "nopersist.conf")
        with open(nopersist, "w") as f:
            f.write("persist = no\n")
        d = Daemon(["--state-dir", st.state, "--config", nopersist]).start()
        with d.client() as c:
            put(c, "p", "f32", [2], bytes(8))
            c.call("op.run", {"op": "add", "inputs": ["p", "p"]})
        log = stop_log(d)
        assert "no pipeline cache" in log, log
        assert not [f for f in os.listdir(st.state) if f.startswith("pipeline-cache")], \
            os.listdir(st.state)
        os.chmod(st.state, 0o700)
        os.mkdir(st.tensors(), 0o700)
        os.chown(st.tensors(), 65534, 65534)
        state_dir_refused(st.state, "belongs to uid 65534")
        os.rmdir(st.tensors())
        os.symlink("/etc", st.tensors())
        mode = os.stat("/etc").st_mode
        state_dir_refused(st.state, "a link is not followed")
        assert os.stat("/etc").st_mode == mode, "/etc was chmodded"
        os.unlink(st.tensors())
        fresh = os.path.join(st.dir, "fresh")
        d = Daemon(["--state-dir", fresh]).start()
        d.stop()
        assert os.stat(fresh).st_mode & 0o777 == 0o700, oct(os.stat(fresh).st_mode)
    finally:
        st.cleanup()


def test_planted_fifo_and_symlink_skipped():
    """A FIFO or a symbolic link in tensors/ or models/ is skipped and logged;
    start-up finishes and the real checkpoints are served."""
    st = State()
    try:
        d = st.daemon()
        with d.client() as c:
            put(c, "real", "u8", [3], b"abc")
        stop_log(d)
        os.mkfifo(os.path.join(st.tensors(), encode_name("fifo")))
        os.mkfifo(os.path.join(st.state, "models", "fifo.model"))
        os.symlink(os.path.join(st.tensors(), encode_name("real")),
                   os.path.join(st.tensors(), encode_name("link")))
        d = Daemon(["--state-dir", st.state, "--config", st.conf], timeout=20).start()
        with d.client() as c:
            names = sorted(t["name"] for t in c.call("tensor.list", {})["tensors"])
            assert names == ["real"], names
        log = stop_log(d)
        assert "fifo.safetensors skipped: not a regular file" in log, log
        assert "link.safetensors skipped: a symbolic link" in log, log
        assert "fifo.model skipped: not a regular file" in log, log
    finally:
        st.cleanup()


def second_daemon(sock, state, conf, probe=True):
    """Start tensord on `sock` and `state`; it must exit non-zero within 60 s
    without ever answering on `sock` (`probe`: the socket is not another
    daemon's). Returns its output."""
    binary = os.environ["TENSORD_BIN"]
    log = tempfile.TemporaryFile()
    p = subprocess.Popen([binary, "--socket", sock, "--device", "auto", "--state-dir", state,
                          "--config", conf], stdin=subprocess.DEVNULL, stdout=log,
                         stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    served = False
    while p.poll() is None and time.monotonic() < deadline and not served:
        if not probe:
            time.sleep(0.05)
            continue
        try:
            c = Client(sock, timeout=5)
            served = c.call("ping")["pong"]
            c.close()
        except OSError:
            time.sleep(0.05)
    if p.poll() is None:
        p.kill()
    p.wait()
    log.seek(0)
    out = log.read().decode(errors="replace")
    assert not served and p.returncode != 0, \
        "a second daemon started (status %r)\n%s" % (p.returncode, out)
    return out


def test_one_daemon_per_state_dir():
    """A second daemon on a state directory in use (another socket) refuses
    to start, naming the directory and the holder's pid; the first one still
    serves, and what it keeps survives its restart (issue 31, item 7)."""
    st = State()
    try:
        a = st.daemon()
        with a.client() as c:
            put(c, "precious", "u8", [3], b"abc")
            c.call("store.sync")
        out = second_daemon(os.path.join(st.dir, "b.sock"), st.state, st.conf)
        assert "state directory %s is in use" % st.state in out, out
        assert "pid %d" % a.proc.pid in out, out
        assert not os.path.exists(os.path.join(st.dir, "b.sock")), "b.sock left behind"
        with a.client() as c:
            assert c.call("tensor.get", {"name": "precious"})["data"] == b"abc"
            put(c, "later", "u8", [1], b"z")
        stop_log(a)
        assert os.path.exists(os.path.join(st.tensors(), encode_name("precious")))
        a = st.daemon()
        with a.client() as c:
            names = sorted(t["name"] for t in c.call("tensor.list", {})["tensors"])
            assert names == ["later", "precious"], names
        stop_log(a)
    finally:
        st.cleanup()


def test_socket_in_use_restores_nothing():
    """A daemon started on a socket another daemon serves fails before it
    reads (or locks) its state directory: no "restored" line, no lock file."""
    st, other = State(), State()
    try:
        d = other.daemon()
        with d.client() as c:
            put(c, "t", "u8", [2], b"hi")
        stop_log(d)
        if os.path.exists(os.path.join(other.state, "tensord.lock")):  # left by the first
            os.unlink(os.path.join(other.state, "tensord.lock"))
        a = st.daemon()
        try:
            out = second_daemon(a.sock, other.state, other.conf, probe=False)
            assert "cannot listen on %s" % a.sock in out, out
            assert "restored" not in out, out
            assert not os.path.exists(os.path.join(other.state, "tensord.lock")), out
            with a.client() as c:
                assert c.call("ping")["pong"]
        finally:
            stop_log(a)
    finally:
        st.cleanup()
        other.cleanup()


def main():
    failed = 0
    tests = [(k, v) for k, v in globals().items() if k.startswith("test_") and callable(v)]
    for name, fn in tests:
        t0 = time.monotonic()
        try:
            fn()
            print("ok   %s (%.1f s)" % (name, time.monotonic() - t0))
        except (AssertionError, RPCError, Exception):  # noqa: B014
            failed += 1
            print("FAIL %s" % name)
            traceback.print_exc()
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--full-disk":
        full_disk_scenario(sys.argv[2])
        sys.exit(0)
    sys.exit(main())

#!/usr/bin/python3
"""Device loss (docs/durability.md, "Device loss"): with the fault-injection
switch TENSORD_FAULT_DEVICE_LOST=N the Nth submission on a device reports
VK_ERROR_DEVICE_LOST. The request that sees it gets DEVICE_LOST, a running
train.run gets DEVICE_LOST, and the daemon re-creates the device, restores
the checkpoints, reports what was lost in info and serves again, with no
descriptor leaked. Without a state directory everything is lost, and said so.

Run with /usr/bin/python3 and TENSORD_BIN set (meson test device_loss)."""
import os
import shutil
import sys
import tempfile
import traceback

import numpy as np

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from daemon import Daemon, RPCError, as_user  # noqa: E402

RNG = np.random.default_rng(11)
FAULT = "TENSORD_FAULT_DEVICE_LOST"
SCALE = """#version 450
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


def start(fault, args=()):
    """A daemon started with TENSORD_FAULT_DEVICE_LOST=`fault`."""
    os.environ[FAULT] = str(fault)
    try:
        return Daemon(list(args)).start()
    finally:
        del os.environ[FAULT]


def put(c, name, arr, dtype="f32"):
    c.call("tensor.put", {"name": name, "dtype": dtype, "shape": list(arr.shape),
                          "data": np.ascontiguousarray(arr).tobytes()})


def get(c, name, dtype=np.float32):
    r = c.call("tensor.get", {"name": name})
    return np.frombuffer(r["data"], dtype).reshape(r["shape"])


def fds(d):
    return len(os.listdir("/proc/%d/fd" % d.proc.pid))


def run_until_lost(c, a, b, limit=400):
    """op.run matmul until one answers DEVICE_LOST; every other answer must be
    right. Returns how many ran before."""
    want = a @ b
    for i in range(limit):
        err, res = c.call_full("op.run", {"op": "matmul", "inputs": ["a", "b"]})
        if err is not None:
            assert err["name"] == "DEVICE_LOST", "op.run failed otherwise: %r" % (err,)
            assert "lost" in err["message"], err
            return i
        got = np.frombuffer(res["data"], np.float32).reshape(res["shape"])
        assert np.allclose(got, want, rtol=1e-5, atol=1e-5), "matmul wrong before the loss"
    raise AssertionError("no DEVICE_LOST within %d ops" % limit)


def log_text(d):
    with open(d.log, errors="replace") as f:
        return f.read()


def test_with_state_dir():
    state = tempfile.mkdtemp(prefix="tensord-devloss-", dir="/tmp")
    try:
        d = start(25, ["--state-dir", state])
        try:
            c = d.client()
            c.call("ping")
            a = RNG.standard_normal((8, 5)).astype(np.float32)
            b = RNG.standard_normal((5, 3)).astype(np.float32)
            u = RNG.integers(0, 256, 33, dtype=np.uint8)
            put(c, "a", a)
            put(c, "b", b)
            put(c, "dir/u", u, "u8")
            put(c, "gone", np.ones(4, np.float32))
            c.call("store.sync", {})
            base_fds = fds(d)
            # Unsynced: a changed, a new tensor, a deletion.
            put(c, "a", a + 100)
            put(c, "fresh", np.ones(3, np.float32))
            c.call("tensor.delete", {"name": "gone"})
            info = c.call("info")
            assert info["device_resets"] == 0 and info["last_reset"] is None, info

            ran = run_until_lost(c, a + 100, b)
            subs = info["counters"]["gpu"]["submissions"] + ran
            assert d.alive(), "tensord died"
            assert c.call("ping")["pong"] is True
            info = c.call("info")
            assert info["device_resets"] == 1, info
            lr = info["last_reset"]
            assert sorted(lr["lost"]) == ["a", "fresh"] and lr["lost_count"] == 2, lr
            assert lr["restored"] == 3 and lr["jobs_stopped"] == 0, lr
            assert lr["time"] > 1e9 and lr["seconds"] >= 0, lr
            assert info["counters"]["gpu"]["submissions"] >= subs, "gpu counters went back"
            # Synced tensors byte-exact, the unsynced change rolled back, the
            # new one gone, the deletion kept.
            assert get(c, "a").tobytes() == a.tobytes(), "a not rolled back to its checkpoint"
            assert get(c, "b").tobytes() == b.tobytes(), "b changed"
            assert get(c, "dir/u", np.uint8).tobytes() == u.tobytes(), "dir/u changed"
            names = [t["name"] for t in c.call("tensor.list", {})["tensors"]]
            assert names == ["a", "b", "dir/u"], names
            err, _ = c.call_full("tensor.get", {"name": "fresh"})
            assert err and err["name"] == "NOT_FOUND", err
            text = log_text(d)
            # the log names store keys, "<uid>/<name>" (docs/security.md, "Names")
            assert "tensor '%d/a' rolled back to its checkpoint" % os.getuid() in text, text
            assert "tensor '%d/fresh' lost" % os.getuid() in text, text
            # Serving again: ops on restored tensors are right, stored results too.
            res = c.call("op.run", {"op": "matmul", "inputs": ["a", "b"], "out": "ab"})
            assert res["shape"] == [8, 3], res
            assert np.allclose(get(c, "ab"), a @ b, rtol=1e-5, atol=1e-5), "matmul after recovery"
            c.call("store.sync", {})
            fds_after_one = fds(d)
            assert fds_after_one <= base_fds + 2, "descriptors leaked: %d -> %d" % (base_fds, fds_after_one)

            # The switch re-arms on the new device: a second loss is survived too.
            put(c, "a", a * 2)
            run_until_lost(c, a * 2, b)
            info = c.call("info")
            assert info["device_resets"] == 2, info
            assert info["last_reset"]["lost"] == ["a"] and info["last_reset"]["restored"] == 4, info
            assert get(c, "a").tobytes() == a.tobytes()
            assert np.allclose(get(c, "ab"), a @ b, rtol=1e-5, atol=1e-5)
            assert fds(d) == fds_after_one, "descriptors leaked: %d -> %d" % (fds_after_one, fds(d))
            c.close()
        finally:
            d.stop()
    finally:
        shutil.rmtree(state, ignore_errors=True)


def test_without_state_dir():
    d = start(12)
    try:
        c = d.client()
        a = RNG.standard_normal((4, 4)).astype(np.float32)
        b = RNG.standard_normal((4, 2)).astype(np.float32)
        put(c, "a", a)
        put(c, "b", b)
        # kernel.create is for root (or kernel_group, unset here).
        kernels = os.geteuid() == 0
        if kernels:
            c.call("kernel.create", {"name": "scale", "glsl": SCALE})
        base_fds = fds(d)
        run_until_lost(c, a, b)
        assert d.alive() and c.call("ping")["pong"] is True
        info = c.call("info")
        lr = info["last_reset"]
        assert info["device_resets"] == 1 and lr["restored"] == 0, info
        assert sorted(lr["lost"]) == ["a", "b"] and lr["lost_count"] == 2, lr
        assert c.call("tensor.list", {})["tensors"] == []
        assert info["tensors"]["count"] == 0 and info["tensors"]["bytes"] == 0, info
        assert "no state directory" in log_text(d)
        put(c, "a", a)
        put(c, "b", b)
        r = c.call("op.run", {"op": "matmul", "inputs": ["a", "b"]})
        assert np.allclose(np.frombuffer(r["data"], np.float32).reshape(4, 2), a @ b, rtol=1e-5, atol=1e-5)
        if kernels:
            # Custom kernels went with the device; created again, they run on the new one.
            assert c.call("kernel.list", {})["kernels"] == []
            err, _ = c.call_full("kernel.run", {"name": "scale", "tensors": ["a", "b"],
                                                "push": {"alpha": 2.0, "n": 8}, "groups": [1]})
            assert err and err["name"] == "NOT_FOUND", err
            c.call("kernel.create", {"name": "scale", "glsl": SCALE})
            x = np.arange(64, dtype=np.float32)
            put(c, "kx", x)
            put(c, "ky", np.zeros(64, np.float32))
            c.call("kernel.run", {"name": "scale", "tensors": ["kx", "ky"],
                                  "push": {"alpha": 2.5, "n": 64}, "groups": [1]})
            assert np.array_equal(get(c, "ky"), 2.5 * x), "kernel after recovery"
        assert fds(d) <= base_fds + 2, "descriptors leaked"
        c.close()
    finally:
        d.stop()


def test_train_run_gets_device_lost():
    """A running train.run's client gets DEVICE_LOST; the others go on."""
    d = start(40)
    try:
        c = d.client()
        x = RNG.standard_normal((64, 3)).astype(np.float32)
        put(c, "x", x)
        put(c, "y", x @ np.array([[1.0], [2.0], [3.0]], np.float32))
        put(c, "w", np.zeros((3, 1), np.float32))
        msgid = c.request("train.run", {
            "nodes": [{"id": "h", "op": "matmul", "inputs": ["xb", "w"]},
                      {"id": "L", "op": "mse", "inputs": ["h", "yb"]}],
            "loss": "L", "params": ["w"], "optimizer": {"type": "sgd", "lr": 0.01},
            "data": {"xb": "x", "yb": "y"}, "batch_size": 8, "epochs": 1000,
            "progress_every": 1000000})
        while True:
            m = c.recv()
            assert m is not None, "connection closed during the run"
            if m[0] == 1:
                break
        assert m[1] == msgid and m[2] is not None and m[2]["name"] == "DEVICE_LOST", m
        assert c.call("ping")["pong"] is True
        info = c.call("info")
        assert info["device_resets"] == 1, info
        assert sorted(info["last_reset"]["lost"]) == ["w", "x", "y"], info
        c.close()
    finally:
        d.stop()


def test_bad_switch_values():
    """A value that is no count is ignored with a warning; 0 is off."""
    for value in ("abc", "-3", "12x", "99999999999999999999999", "0", ""):
        d = start(value)
        try:
            c = d.client()
            a = np.eye(3, dtype=np.float32)
            put(c, "a", a)
            put(c, "b", a)
            for _ in range(40):
                c.call("op.run", {"op": "matmul", "inputs": ["a", "b"]})
            assert c.call("info")["device_resets"] == 0
            if value not in ("0", ""):
                assert "TENSORD_FAULT_DEVICE_LOST=%s is not a submission count" % value in log_text(d)
            c.close()
        finally:
            d.stop()

VICTIM = 65533
OTHER = 65532


def test_loss_keeps_revocations():
    """Another user's forced device loss rolls data back to its checkpoint
    but never widens access. tensor.chmod writes its checkpoint at once, so
    to have checkpoints older and wider than the live tensors, the new data
    is too large to be written (TENSORD_FAULT_CHECKPOINT_BYTES): a tensor its
    owner overwrote and made private since the checkpoint stays private, and
    older data whose live mode is wider comes back no wider than its
    checkpoint; the rolled-back names are in last_reset."""
    if os.geteuid() != 0:
        print("skipped: needs root to switch users")
        return
    state = tempfile.mkdtemp(prefix="tensord-devloss-", dir="/tmp")
    old = np.arange(4, dtype=np.float32)
    new = np.arange(64, dtype=np.float32) + 100    # 256 bytes: never written
    os.environ["TENSORD_FAULT_CHECKPOINT_BYTES"] = "128"
    try:
        d = start(40, ["--state-dir", state])
        try:
            os.chmod(d.dir, 0o755)
            os.chmod(d.sock, 0o666)

            def victim_setup():
                with d.client() as c:
                    for n in ("v/revoked", "v/chmod", "v/widened"):
                        put(c, n, old)
                    c.call("tensor.chmod", {"name": "v/revoked", "mode": "world-read"})
                    c.call("tensor.chmod", {"name": "v/chmod", "mode": "world-read"})
                    c.call("store.sync", {})
                    # Revoked and overwritten; revoked only (written at once, so
                    # not rolled back); new public data.
                    put(c, "v/revoked", new)
                    c.call("tensor.chmod", {"name": "v/revoked", "mode": "private"})
                    c.call("tensor.chmod", {"name": "v/chmod", "mode": "private"})
                    put(c, "v/widened", new)
                    c.call("tensor.chmod", {"name": "v/widened", "mode": "world-read"})
            a = RNG.standard_normal((4, 4)).astype(np.float32)
            with d.client() as c:
                put(c, "a", a)
                put(c, "b", a)
            as_user(VICTIM, victim_setup)
            with d.client() as c:
                run_until_lost(c, a, a)
                info = c.call("info")
                assert info["device_resets"] == 1, info

            def other_reads():
                with d.client() as c:
                    out = {}
                    for n in ("v/revoked", "v/chmod", "v/widened"):
                        e, r = c.call_full("tensor.get", {"name": "~%d/%s" % (VICTIM, n)})
                        out[n] = e["name"] if e else r["data"]
                    return out, c.call("info")["last_reset"]
            got, other_reset = as_user(OTHER, other_reads)
            assert got == {n: "PERMISSION_DENIED" for n in got}, got
            # Another user hears how many were lost, not whose or which.
            assert other_reset["lost"] == [] and other_reset["lost_count"] >= 2, other_reset
            lost = sorted(n.split("/", 1)[1] for n in info["last_reset"]["lost"])
            assert lost == ["v/revoked", "v/widened"], info["last_reset"]

            def victim_reads():
                with d.client() as c:
                    out = {}
                    for n in ("v/revoked", "v/chmod", "v/widened"):
                        st = c.call("tensor.stat", {"name": n})
                        out[n] = (st["mode"], get(c, n).tobytes())
                    return out, c.call("info")["last_reset"]["lost"]
            got, victim_lost = as_user(VICTIM, victim_reads)
            assert sorted(victim_lost) == ["v/revoked", "v/widened"], victim_lost
            assert got["v/revoked"] == ("private", old.tobytes()), got
            assert got["v/chmod"] == ("private", old.tobytes()), got
            assert got["v/widened"] == ("private", old.tobytes()), got
            # The restored metadata reaches the checkpoint: a restart keeps it.
            with d.client() as c:
                c.call("store.sync", {})
        finally:
            d.stop()
        d = Daemon(["--state-dir", state]).start()
        try:
            with d.client() as c:
                for n in ("v/revoked", "v/chmod", "v/widened"):
                    n = "~%d/%s" % (VICTIM, n)
                    assert c.call("tensor.stat", {"name": n})["mode"] == "private", n
        finally:
            d.stop()
    finally:
        del os.environ["TENSORD_FAULT_CHECKPOINT_BYTES"]
        shutil.rmtree(state, ignore_errors=True)


def main():
    failed = 0
    for name, fn in sorted(globals().items()):
        if not name.startswith("test_") or not callable(fn):
            continue
        try:
            fn()
            print("ok", name)
        except (AssertionError, RPCError, Exception):  # noqa: B014
            failed += 1
            print("FAIL", name)
            traceback.print_exc()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

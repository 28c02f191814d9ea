#!/usr/bin/python3
"""The runaway-kernel time limit (docs/kernels.md, "Isolation and time
limits"; docs/durability.md, "Device loss") against a real tensord with
kernel_timeout = 0.2 s and a state directory.

A custom kernel is sized to run for a few seconds (calibrated on this device
first: lavapipe ends every loop after 65535 iterations, so the work is many
workgroups of a long unrolled loop). Run past the limit, the request gets
DEADLINE_EXCEEDED at once, well before the kernel ends; ping is answered
meanwhile, requests that touch the device get DEVICE_LOST; once the kernel's
work has ended the daemon re-creates the device by itself (info
device_resets goes up), restores the checkpoints, and an op gives the right
answer again. The same again with the kernel as a graph.run node.

Run with /usr/bin/python3 and TENSORD_BIN set (meson test kernel_timeout)."""
import os
import shutil
import sys
import tempfile
import time

import numpy as np

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from daemon import Daemon  # noqa: E402

failures = []
LIMIT = 0.2            # kernel_timeout, seconds
CPU_ITERS = 60000      # under lavapipe's 65535 loop iterations per invocation

# Each invocation runs `iters` times 64 dependent multiply-adds.
SPIN = """#version 450
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer B { float v[]; };
layout(push_constant) uniform P { uint iters; float a; };
#define S x = x * a + 1.0;
#define S8 S S S S S S S S
#define S64 S8 S8 S8 S8 S8 S8 S8 S8
void main() {
    uint g = gl_GlobalInvocationID.x % v.length();
    float x = v[g];
    for (uint i = 0; i < iters; i++) {
        S64
    }
    v[g] = x;
}
"""


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL", what, flush=True)


def put(c, name, arr):
    arr = np.asarray(arr, dtype="<f4")
    c.call("tensor.put", {"name": name, "dtype": "f32", "shape": list(arr.shape),
                          "data": arr.tobytes()})


def err(c, method, params):
    e, res = c.call_full(method, params)
    return (e["name"], e["message"]) if e else (None, res)


def spin_size(c, target):
    """(iters, groups) for a spin of about `target` seconds on this device,
    from a short run well inside the limit."""
    dev = [x for x in c.call("info")["devices"] if x.get("active")][0]
    cpu = dev["type"] == "cpu"
    iters, groups = (1000, 16) if cpu else (1000, 4096)
    # The fastest of three: a run slowed by a busy machine would make the
    # spin too short to outlive its answer.
    best = min(c.call("kernel.run", {"name": "spin", "tensors": ["v"],
                                     "push": {"iters": iters, "a": 0.5}, "groups": [groups]})["seconds"]
               for _ in range(3))
    per = max(best, 1e-4) / (iters * groups)
    if cpu:
        return CPU_ITERS, min(int(target / (per * CPU_ITERS)) + 1, 65535)
    return min(int(target / (per * groups)) + 1, 1 << 31), groups


def wait_recovered(c, resets, t0, limit=60):
    """Seconds from t0 until info reports `resets` device resets."""
    while time.monotonic() - t0 < limit:
        if c.call("info")["device_resets"] >= resets:
            return time.monotonic() - t0
        time.sleep(0.05)
    return None


def check_lost(c, what):
    """While the runaway work runs: ping answers, the device does not."""
    check(c.call("ping")["pong"] is True, "%s: ping answered while the device is lost" % what)
    check(c.call("tensor.stat", {"name": "keep"})["shape"] == [16],
          "%s: tensor.stat needs no device" % what)
    e = err(c, "tensor.get", {"name": "keep"})
    check(e[0] == "DEVICE_LOST", "%s: tensor.get during the loss: %r" % (what, e))
    e = err(c, "op.run", {"op": "add", "inputs": ["keep", "keep"]})
    check(e[0] == "DEVICE_LOST", "%s: op.run during the loss: %r" % (what, e))


def check_serving(c, keep, what):
    """After the recovery: the checkpoint is back and ops compute."""
    r = c.call("op.run", {"op": "mul", "inputs": ["keep", "keep"]})
    got = np.frombuffer(r["data"], "<f4")
    check(np.array_equal(got, keep * keep), "%s: op.run right after the recovery" % what)
    b = np.linspace(-1, 1, 16, dtype=np.float32)
    put(c, "b", b)
    r = c.call("op.run", {"op": "add", "inputs": ["keep", "b"]})
    check(np.allclose(np.frombuffer(r["data"], "<f4"), keep + b), "%s: put and op.run work" % what)


def round_trip(d, c, keep, resets, target, how):
    """Create the spin kernel, run it past the limit `how` ("kernel.run" or
    "graph.run"), and follow the loss to its recovery."""
    c.call("kernel.create", {"name": "spin", "glsl": SPIN})
    put(c, "v", np.zeros(64, np.float32))
    iters, groups = spin_size(c, target)
    push = {"iters": iters, "a": 0.5}
    t0 = time.monotonic()
    if how == "kernel.run":
        e = err(c, "kernel.run", {"name": "spin", "tensors": ["v"], "push": push,
                                  "groups": [groups]})
    else:
        e = err(c, "graph.run", {"nodes": [
            {"id": "x", "op": "add", "inputs": ["v", "v"]},
            {"id": "s", "kernel": "spin", "inputs": ["x"], "push": push, "groups": [groups]}],
            "outputs": ["s"]})
    answered = time.monotonic() - t0
    check(e[0] == "DEADLINE_EXCEEDED" and "kernel_timeout" in e[1] and "lost" in e[1],
          "%s past the limit: %r" % (how, e))
    if how == "graph.run":
        check("node 1 's'" in e[1] and "'spin'" in e[1], "the deadline names the node: %r" % (e,))
    check(answered < LIMIT + 2.0, "%s answered %.2f s after it started (limit %.1f s)" %
          (how, answered, LIMIT))
    check_lost(c, how)
    check(c.call("info")["device_resets"] == resets - 1, "%s: no recovery while the kernel runs" % how)
    took = wait_recovered(c, resets, t0)
    print("%s: %d groups x %d iterations; DEADLINE_EXCEEDED after %.2f s, recovered after %s"
          % (how, groups, iters, answered, "%.2f s" % took if took else "(never)"), flush=True)
    check(took is not None, "%s: the daemon recovered by itself" % how)
    # The kernel outlived the answer by far: the loss lasted until its work ended.
    check(took is not None and took > answered + 0.3,
          "%s: the kernel ran on well after the answer (%.2f s, then %r)" % (how, answered, took))
    check(d.alive(), "tensord is alive")
    check(c.call("kernel.list", {})["kernels"] == [], "kernels went with the lost device")
    check_serving(c, keep, how)


def main():
    tmp = tempfile.mkdtemp(prefix="tensord-ktimeout-", dir="/tmp")
    cfg = os.path.join(tmp, "tensord.conf")
    with open(cfg, "w") as f:
        f.write("kernel_timeout = %g\n" % LIMIT)
    try:
        with Daemon(["--config", cfg, "--state-dir", os.path.join(tmp, "state")]) as d:
            with d.client() as c:
                keep = np.arange(16, dtype=np.float32) - 5
                put(c, "keep", keep)
                c.call("store.sync", {})
                round_trip(d, c, keep, 1, 2.5, "kernel.run")
                round_trip(d, c, keep, 2, 1.5, "graph.run")
                last = c.call("info")["last_reset"]
                check(last["restored"] >= 1, "the checkpoint was restored: %r" % (last,))
            with open(d.log, errors="replace") as f:
                log = f.read()
            check(log.count("the runaway kernel's work ended") == 2,
                  "the log says when the runaway work ended")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print("%d failure(s)" % len(failures))
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())

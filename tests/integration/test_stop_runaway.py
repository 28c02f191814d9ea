#!/usr/bin/python3
"""SIGTERM ends the daemon in time even while a runaway kernel still runs
(docs/kernels.md, "Isolation and time limits"; docs/durability.md).

tensord opens lavapipe twice (--device 0,0: two devices), with a state
directory and kernel_timeout = 0.5 s. Device 0 gets a tensor checkpointed and
then changed (its change not checkpointed), device 1 a tensor never
checkpointed. A custom kernel sized to run for about a minute on device 0
outruns the limit: device 0 is lost while the kernel's work goes on. SIGTERM
must then end the daemon within a few seconds (not when the kernel ends),
with a final checkpoint of device 1's tensor; device 0's tensor keeps its
last checkpoint. A restart shows both.

Run with /usr/bin/python3 and TENSORD_BIN set (meson test stop_runaway)."""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from daemon import Daemon  # noqa: E402
from test_kernel_timeout import SPIN, CPU_ITERS  # noqa: E402

LIMIT = 0.5             # kernel_timeout
RUN = 60.0              # how long the runaway kernel would run
STOP_WITHIN = 10.0      # SIGTERM to exit, at most
failures = []


def check(cond, what):
    print(("ok: " if cond else "FAIL: ") + what, flush=True)
    if not cond:
        failures.append(what)


def put(c, name, arr, device):
    arr = np.asarray(arr, dtype="<f4")
    c.call("tensor.put", {"name": name, "dtype": "f32", "shape": list(arr.shape),
                          "data": arr.tobytes(), "device": device})


def get(c, name):
    return np.frombuffer(c.call("tensor.get", {"name": name})["data"], "<f4")


def main():
    tmp = tempfile.mkdtemp(prefix="tensord-stop-", dir="/tmp")
    cfg = os.path.join(tmp, "tensord.conf")
    state = os.path.join(tmp, "state")
    with open(cfg, "w") as f:
        f.write("kernel_timeout = %g\ncheckpoint_interval = 0\n" % LIMIT)
    args = ["--config", cfg, "--state-dir", state, "--device", "0,0"]
    old0, new0 = np.arange(8, dtype="<f4"), np.full(8, 7, "<f4")
    b1 = np.linspace(-1, 1, 16, dtype="<f4")
    try:
        d = Daemon(args).start()
        with d.client() as c:
            devs = [x for x in c.call("info")["devices"] if x.get("active")]
            if len(devs) < 2 or devs[0]["type"] != "cpu":
                print("needs lavapipe opened twice; skipped")
                d.stop()
                return 77
            put(c, "d0", old0, 0)
            c.call("store.sync", {})
            put(c, "d0", new0, 0)          # changed, not checkpointed
            put(c, "d1", b1, 1)            # never checkpointed
            c.call("kernel.create", {"name": "spin", "glsl": SPIN})
            put(c, "v", np.zeros(64, np.float32), 0)
            iters, groups = 1000, 16
            r = c.call("kernel.run", {"name": "spin", "tensors": ["v"],
                                      "push": {"iters": iters, "a": 0.5}, "groups": [groups]})
            per = max(r["seconds"], 1e-4) / (iters * groups)
            groups = min(int(RUN / (per * CPU_ITERS)) + 1, 65535)
            e, _ = c.call_full("kernel.run", {"name": "spin", "tensors": ["v"],
                                              "push": {"iters": CPU_ITERS, "a": 0.5},
                                              "groups": [groups]})
            check(e is not None and e["name"] == "DEADLINE_EXCEEDED",
                  "the spin kernel (%d groups) outran kernel_timeout: %r" % (groups, e))
            check(np.array_equal(get(c, "d1"), b1), "device 1 still serves")
        time.sleep(0.5)
        t0 = time.monotonic()
        d.proc.send_signal(signal.SIGTERM)
        try:
            rc = d.proc.wait(STOP_WITHIN + 20)
        except subprocess.TimeoutExpired:
            d.proc.kill()
            rc = d.proc.wait()
        took = time.monotonic() - t0
        check(took < STOP_WITHIN, "SIGTERM ended the daemon in %.2f s (kernel would run %.0f s)"
              % (took, RUN))
        check(rc == 0, "exit status %r" % rc)
        with open(d.log, errors="replace") as f:
            log = f.read()
        check("teardown" in log or "tearing the devices down" in log,
              "skipping the device's teardown is logged")
        check("skipped" in log, "skipping the lost device's tensors is logged")
        if failures:
            sys.stdout.write(log[-3000:])
        d.proc = None
        d._cleanup()

        d = Daemon(args).start()
        with d.client() as c:
            check(np.array_equal(get(c, "d1"), b1),
                  "device 1's tensor was written by the final checkpoint")
            check(np.array_equal(get(c, "d0"), old0),
                  "device 0's tensor is back as of its last checkpoint")
        d.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print("%d failure(s)" % len(failures))
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())

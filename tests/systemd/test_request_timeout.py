#!/usr/bin/python3
"""request_timeout: no request holds the event loop past the watchdog
(docs/security.md, "Limits"; docs/kernels.md, "Isolation and time limits").

tensord runs under a NOTIFY_SOCKET of the test's own with WATCHDOG_USEC = 1 s
(so WATCHDOG=1 every 0.5 s) and request_timeout = 1 s. A graph.run that uses
no stored tensor at all (rand, then a chain of matmuls, calibrated on this
device to take several seconds) must get DEADLINE_EXCEEDED about when the
limit passes, WATCHDOG=1 must keep arriving at its interval while the
submission runs and after, another client's ping is answered, and once the
work has ended the device is re-created (info device_resets) and ops work.

Run with /usr/bin/python3; TENSORD_BIN names the daemon."""
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from daemon import Client  # noqa: E402

BIN = os.environ["TENSORD_BIN"]
WATCHDOG_USEC = 1000000
LIMIT = 1.0             # request_timeout, seconds
TARGET = 6.0            # how long the long graph would run without a limit
N = 384                 # matrix size
failures = []


def check(cond, what):
    print(("ok: " if cond else "FAIL: ") + what, flush=True)
    if not cond:
        failures.append(what)


class Pings(threading.Thread):
    """Collects the times of WATCHDOG=1 datagrams on the NOTIFY_SOCKET."""

    def __init__(self, path):
        super().__init__(daemon=True)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        self.sock.settimeout(0.1)
        self.times, self.ready, self.stop = [], threading.Event(), False

    def run(self):
        while not self.stop:
            try:
                data = self.sock.recv(4096)
            except socket.timeout:
                continue
            lines = data.decode().split("\n")
            if "READY=1" in lines:
                self.ready.set()
            if "WATCHDOG=1" in lines:
                self.times.append(time.monotonic())

    def worst_gap(self, t0, t1):
        ts = [t0] + [t for t in self.times if t0 <= t <= t1] + [t1]
        return max(b - a for a, b in zip(ts, ts[1:]))


def chain(k, seed=1):
    nodes = [{"id": "a", "op": "rand", "inputs": [], "attrs": {"shape": [N, N], "seed": seed}},
             {"id": "m0", "op": "mul", "inputs": ["a"], "attrs": {"scalar": 1.0 / N}}]
    for i in range(1, k + 1):
        nodes.append({"id": "m%d" % i, "op": "matmul", "inputs": ["m%d" % (i - 1), "m0"]})
    nodes.append({"id": "s", "op": "sum", "inputs": ["m%d" % k]})
    return {"nodes": nodes, "outputs": ["s"]}


def main(tmp):
    notify_path = os.path.join(tmp, "notify.sock")
    pings = Pings(notify_path)
    pings.start()
    sock = os.path.join(tmp, "s.sock")
    config = os.path.join(tmp, "tensord.conf")
    with open(config, "w") as f:
        f.write("request_timeout = %.1f\ncheckpoint_interval = 0\n" % LIMIT)
    env = dict(os.environ, NOTIFY_SOCKET=notify_path, WATCHDOG_USEC=str(WATCHDOG_USEC))
    log = os.path.join(tmp, "tensord.log")
    with open(log, "wb") as logf:
        proc = subprocess.Popen(
            ["/bin/sh", "-c", 'WATCHDOG_PID=$$; export WATCHDOG_PID; exec "$0" "$@"', BIN,
             "--socket", sock, "--state-dir", os.path.join(tmp, "state"), "--config", config],
            stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT, env=env)
    try:
        if not pings.ready.wait(60):
            raise RuntimeError("no READY=1")
        c, other = Client(sock), Client(sock)
        c.call("tensor.put", {"name": "keep", "dtype": "f32", "shape": [4],
                              "data": np.arange(4, dtype="<f4").tobytes()})
        c.call("store.sync")
        # calibrate: seconds per matmul, from a chain well inside the limit
        c.call("graph.run", chain(1))
        t0 = time.monotonic()
        c.call("graph.run", chain(2))
        per = max((time.monotonic() - t0) / 2, 1e-4)
        k = max(int(TARGET / per), 8)
        print("one %dx%d matmul takes %.4f s: a chain of %d" % (N, N, per, k), flush=True)
        check(per * 2 < LIMIT, "the calibration run stays inside request_timeout")

        t0 = time.monotonic()
        e, res = c.call_full("graph.run", chain(k, seed=2))
        answered = time.monotonic() - t0
        check(e is not None and e["name"] == "DEADLINE_EXCEEDED" and
              "request_timeout" in e["message"] and "lost" in e["message"],
              "a long graph.run gets DEADLINE_EXCEEDED: %r" % (e,))
        check(LIMIT * 0.9 < answered < LIMIT + 2.0,
              "answered after %.2f s (request_timeout %.1f s)" % (answered, LIMIT))
        t1 = time.monotonic()
        check(other.call("ping")["pong"] is True and time.monotonic() - t1 < 0.5,
              "another client's ping is answered at once")
        # the device comes back once the work has ended
        resets = None
        while time.monotonic() - t0 < TARGET * 4 + 30:
            resets = c.call("info")["device_resets"]
            if resets >= 1:
                break
            time.sleep(0.1)
        check(resets == 1, "the device was re-created (device_resets %r)" % resets)
        time.sleep(1.0)
        gap = pings.worst_gap(t0, time.monotonic())
        check(gap < WATCHDOG_USEC / 1e6 * 0.9,
              "WATCHDOG=1 kept coming during the request and the recovery (worst gap %.2f s)" % gap)
        r = c.call("op.run", {"op": "add", "inputs": ["keep", "keep"]})
        check(np.array_equal(np.frombuffer(r["data"], "<f4"), np.arange(4, dtype="<f4") * 2),
              "op.run after the recovery")
        check(other.call("ping")["pong"] is True, "ping after the recovery")
        c.close()
        other.close()
        with open(log, errors="replace") as f:
            text = f.read()
        check("ran past its" in text, "the limit is logged")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
        pings.stop = True
        check(rc == 0, "exit status %r after SIGTERM" % rc)
        if failures:
            with open(log, errors="replace") as f:
                sys.stdout.write(f.read()[-4000:])


if __name__ == "__main__":
    tmp = tempfile.mkdtemp(prefix="tensord-rt-")
    try:
        main(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print("%d failures" % len(failures))
        sys.exit(1)
    print("all passed")

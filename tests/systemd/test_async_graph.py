#!/usr/bin/python3
"""The loop never waits for the GPU (issue 17; docs/architecture.md,
"Processes and threads"): op.run and graph.run are answered when their
submission completes, from the event loop, which serves everyone else
meanwhile.

tensord runs under a NOTIFY_SOCKET of the test's own (WATCHDOG_USEC = 1 s).
A graph.run calibrated to take about 3 s on this device (rand, then a chain
of matmuls, like test_request_timeout.py) runs on one connection while a
second client pings back to back: its ping p99 must stay under PING_P99_MS
and WATCHDOG=1 must keep arriving. Meanwhile the second client still reads
the old value of a tensor the pending graph replaces; the answer then
commits the new one. Also: pipelined op.run then tensor.get on one
connection (the get sees the result), a client that disconnects while its
graph runs (the graph still takes effect; its intermediates are freed), and SIGTERM while a graph runs (clean exit 0).

argv[1] = "sync" runs the same scenario with `async_graphs = no` (the old
path, the loop waiting for each submission): every check but the ping
latency, which is only reported. "staging" (either way) sets `host_mapped = no`:
results and puts go through the staging buffer, as on a discrete GPU.

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
from daemon import Client, sanitizer_env  # noqa: E402

BIN = os.environ["TENSORD_BIN"]
SYNC = "sync" in sys.argv[1:]
STAGING = "staging" in sys.argv[1:]     # host_mapped = no: a discrete GPU's path
WATCHDOG_USEC = 1000000
TARGET = 3.0            # seconds the long graph runs
N = 384
# The goal is 5 ms; CI shares 2 cores with lavapipe's workers (and
# ASan slows the daemon): the bound asserted is looser, the figure printed.
PING_P99_MS = float(os.environ.get("TENSORD_PING_P99_MS", "25"))
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


def chain(k, seed=1, store=None):
    nodes = [{"id": "a", "op": "rand", "inputs": [], "attrs": {"shape": [N, N], "seed": seed}},
             {"id": "m0", "op": "mul", "inputs": ["a"], "attrs": {"scalar": 1.0 / N}}]
    for i in range(1, k + 1):
        nodes.append({"id": "m%d" % i, "op": "matmul", "inputs": ["m%d" % (i - 1), "m0"]})
    nodes.append({"id": "s", "op": "sum", "inputs": ["m%d" % k]})
    if store:
        nodes.append({"id": "st", "op": "mul", "inputs": ["s"], "attrs": {"scalar": 0.0},
                      "out": store})
    return {"nodes": nodes, "outputs": ["s"]}


def per_matmul(c):
    """Seconds one matmul of the chain takes here (the fixed cost of a
    request taken out)."""
    c.call("graph.run", chain(1))
    t0 = time.monotonic()
    c.call("graph.run", chain(2))
    t1 = time.monotonic()
    c.call("graph.run", chain(12))
    return max((time.monotonic() - t1 - (t1 - t0)) / 10, 1e-4)


def percentile(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p / 100.0))]


def used(c):
    return sum(dev["memory_used"] for dev in c.call("info")["devices"])


def start(tmp, name, limit=60):
    notify_path = os.path.join(tmp, name + ".notify")
    pings = Pings(notify_path)
    pings.start()
    sock = os.path.join(tmp, name + ".sock")
    config = os.path.join(tmp, name + ".conf")
    with open(config, "w") as f:
        f.write("request_timeout = %g\ncheckpoint_interval = 0\npersist = no\nasync_graphs = %s\n"
                % (limit, "no" if SYNC else "yes"))
        if STAGING:
            f.write("host_mapped = no\n")
    env = sanitizer_env(dict(os.environ, NOTIFY_SOCKET=notify_path, WATCHDOG_USEC=str(WATCHDOG_USEC)))
    log = os.path.join(tmp, name + ".log")
    with open(log, "wb") as logf:
        proc = subprocess.Popen(
            ["/bin/sh", "-c", 'WATCHDOG_PID=$$; export WATCHDOG_PID; exec "$0" "$@"', BIN,
             "--socket", sock, "--state-dir", os.path.join(tmp, name + ".state"), "--config", config],
            stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT, env=env)
    if not pings.ready.wait(60):
        raise RuntimeError("no READY=1")
    return proc, pings, sock, log


def stop(proc, pings, log, what):
    proc.send_signal(signal.SIGTERM)
    try:
        rc = proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = proc.wait()
    pings.stop = True
    check(rc == 0, "%s: exit status %r after SIGTERM" % (what, rc))
    with open(log, errors="replace") as f:
        text = f.read()
    check("ERROR: AddressSanitizer" not in text and "runtime error" not in text and
          "LeakSanitizer" not in text, "%s: no sanitizer report" % what)
    if failures:
        sys.stdout.write(text[-3000:])


def long_graph_while_pinging(sock, pings):
    c, other = Client(sock), Client(sock)
    c.call("tensor.put", {"name": "res", "dtype": "f32", "shape": [1],
                          "data": np.array([7.0], "<f4").tobytes()})
    per = per_matmul(c)
    k = max(int(TARGET / per), 8)
    print("one %dx%d matmul takes %.4f s: a chain of %d" % (N, N, per, k), flush=True)
    base = used(other)

    t0 = time.monotonic()
    msgid = c.request("graph.run", chain(k, seed=2, store="res"))
    answer = {}

    def wait_answer():
        answer["r"] = c.response(msgid)
        answer["t"] = time.monotonic()

    waiter = threading.Thread(target=wait_answer, daemon=True)
    waiter.start()
    lat, old_seen = [], None
    time.sleep(0.2)
    # Pings sent before the answer came count (the sync path answers the
    # first one only after the graph).
    while "t" not in answer and time.monotonic() - t0 < TARGET * 20:
        t1 = time.perf_counter()
        sent = time.monotonic()
        other.call("ping")
        if "t" not in answer or sent < answer["t"]:
            lat.append((time.perf_counter() - t1) * 1e3)
        # (On the staging path a get's copy queues behind the graph on the
        # device's one queue, and the get still waits for it on the loop.)
        if old_seen is None and not STAGING:
            old_seen = np.frombuffer(other.call("tensor.get", {"name": "res"})["data"], "<f4")[0]
    waiter.join(TARGET * 20)
    e, res = answer["r"]
    t_done = answer["t"]
    check(e is None and "s" in res["outputs"] and "res" in res["stored"],
          "the long graph.run answered (%.2f s): %r" % (t_done - t0, e))
    p50, p99, worst = percentile(lat, 50), percentile(lat, 99), max(lat)
    print("MEASURE %s: %d pings during a %.1f s graph.run: p50 %.3f ms, p99 %.3f ms, max %.3f ms"
          % ("sync" if SYNC else "async", len(lat), t_done - t0, p50, p99, worst), flush=True)
    if not SYNC:
        check(len(lat) > 50, "pings were answered while the graph ran (%d)" % len(lat))
        check(p99 < PING_P99_MS, "ping p99 %.2f ms < %.0f ms while the graph runs" % (p99, PING_P99_MS))
        check(STAGING or old_seen == 7.0, "meanwhile another client reads the tensor the graph will replace: "
              "the old value (%r)" % old_seen)
    gap = pings.worst_gap(t0, t_done)
    check(gap < WATCHDOG_USEC / 1e6 * 0.9, "WATCHDOG=1 kept coming while the graph ran (worst gap %.2f s)" % gap)
    got = np.frombuffer(other.call("tensor.get", {"name": "res"})["data"], "<f4")[0]
    check(got == 0.0, "the stored output is committed at completion (%r)" % got)
    c.close()
    other.close()
    return k


def pipelined(sock):
    c = Client(sock)
    x = np.arange(1000, dtype="<f4")
    c.call("tensor.put", {"name": "x", "dtype": "f32", "shape": [1000], "data": x.tobytes()})
    ids = []
    for i in range(20):
        ids.append(c.request("op.run", {"op": "add", "inputs": ["x" if i == 0 else "y", "x"], "out": "y"}))
        ids.append(c.request("tensor.get", {"name": "y"}))
    ok = True
    for i in range(20):
        e, _ = c.response(ids[2 * i])
        e2, r = c.response(ids[2 * i + 1])
        ok &= e is None and e2 is None and np.array_equal(np.frombuffer(r["data"], "<f4"), x * (i + 2))
    check(ok, "pipelined op.run then tensor.get on one connection: each get sees its op's result")
    e, r = c.call_full("graph.run", {"nodes": [{"id": "bad", "op": "add", "inputs": ["x", "nope"]}]})
    check(e is not None and e["name"] == "NOT_FOUND", "a bad graph still fails at once: %r" % (e,))
    c.close()


def stored_chain(k):
    nodes = [{"id": "m0", "op": "mul", "inputs": ["w"], "attrs": {"scalar": 1.0}}]
    for i in range(1, k + 1):
        nodes.append({"id": "m%d" % i, "op": "matmul", "inputs": ["m%d" % (i - 1), "w"]})
    nodes.append({"id": "s", "op": "sum", "inputs": ["m%d" % k]})
    return {"nodes": nodes, "outputs": ["s"]}


def replaced_input(sock, k):
    """A stored input replaced by another client while the graph reads it:
    its memory is not reused under the graph (the identity's powers sum to N;
    the zeros that replace it would give 0)."""
    c, other = Client(sock), Client(sock)
    eye = np.eye(N, dtype="<f4")
    c.call("tensor.put", {"name": "w", "dtype": "f32", "shape": [N, N], "data": eye.tobytes()})
    msgid = c.request("graph.run", stored_chain(k))
    time.sleep(0.3)
    other.call("tensor.delete", {"name": "w"})
    for i in range(4):
        other.call("tensor.put", {"name": "w%d" % i, "dtype": "f32", "shape": [N, N],
                                  "data": np.zeros((N, N), "<f4").tobytes()})
    e, res = c.response(msgid)
    got = None if e else np.frombuffer(res["outputs"]["s"]["data"], "<f4")[0]
    check(got == float(N), "a stored input deleted and its memory asked for again while the graph "
          "runs: the graph still reads the original (%r, want %d)" % (got, N))
    c.close()
    other.close()


def two_graphs(sock, k):
    """Two connections' long graphs at once, a third client's pings and gets
    meanwhile, and a small op.run (queued on the device behind them)."""
    a, b, other, third = Client(sock), Client(sock), Client(sock), Client(sock)
    x = np.arange(8, dtype="<f4")
    other.call("tensor.put", {"name": "small", "dtype": "f32", "shape": [8], "data": x.tobytes()})
    t0 = time.monotonic()
    ia = a.request("graph.run", chain(k // 2, seed=5))
    ib = b.request("graph.run", chain(k // 2, seed=5))
    answers = {}

    def wait(cl, i, key):
        answers[key] = cl.response(i)

    ts = [threading.Thread(target=wait, args=(a, ia, "a"), daemon=True),
          threading.Thread(target=wait, args=(b, ib, "b"), daemon=True)]
    for t in ts:
        t.start()
    lat, ops_ok = [], True
    time.sleep(0.1)
    io = third.request("op.run", {"op": "add", "inputs": ["small", "small"]})
    while len(answers) < 2 and time.monotonic() - t0 < TARGET * 20:
        t1 = time.perf_counter()
        other.call("ping")
        lat.append((time.perf_counter() - t1) * 1e3)
        if STAGING:
            ops_ok &= other.call("tensor.stat", {"name": "small"})["shape"] == [8]
        else:
            r = other.call("tensor.get", {"name": "small"})
            ops_ok &= np.array_equal(np.frombuffer(r["data"], "<f4"), x)
    e, r = third.response(io)
    ops_ok &= e is None and np.array_equal(np.frombuffer(r["data"], "<f4"), 2 * x)
    for t in ts:
        t.join(TARGET * 20)
    ea, ra = answers.get("a", ("none", None))
    eb, rb = answers.get("b", ("none", None))
    check(ea is None and eb is None and ra["outputs"]["s"]["data"] == rb["outputs"]["s"]["data"],
          "two graphs of two connections at once both answered alike: %r %r" % (ea, eb))
    check(ops_ok and (SYNC or len(lat) > 10),
          "a third client's gets answered meanwhile (%d), its op.run after" % len(lat))
    p99 = percentile(lat, 99) if lat else 1e9
    print("MEASURE %s two graphs: %d ping+get pairs: ping p50 %.3f ms, p99 %.3f ms"
          % ("sync" if SYNC else "async", len(lat), percentile(lat, 50) if lat else 0, p99), flush=True)
    if not SYNC:
        check(p99 < PING_P99_MS, "ping p99 %.2f ms < %.0f ms while two graphs run" % (p99, PING_P99_MS))
    a.close()
    b.close()
    other.close()
    third.close()


def disconnect(sock, k):
    other = Client(sock)
    base = used(other)
    c = Client(sock)
    c.request("graph.run", chain(k, seed=3, store="gone"))
    time.sleep(0.3)
    c.close()
    t1 = time.perf_counter()
    other.call("ping")
    check((time.perf_counter() - t1) < 1.0 or SYNC, "ping answered while a departed client's graph runs")
    deadline = time.monotonic() + TARGET * 4 + 10
    while time.monotonic() < deadline:
        e, _ = other.call_full("tensor.stat", {"name": "gone"})
        if e is None:
            break
        time.sleep(0.1)
    e, st = other.call_full("tensor.stat", {"name": "gone"})
    check(e is None, "the departed client's graph still took effect: its output is stored (%r)" % (e,))
    want = base + (st["bytes"] if e is None else 0)
    while time.monotonic() < deadline and used(other) != want:
        time.sleep(0.1)
    check(used(other) == want, "after a client left mid-graph, device memory holds only its output: "
          "%d (%d)" % (want, used(other)))
    other.close()


def sigterm_while_pending(tmp, k):
    proc, pings, sock, log = start(tmp, "term")
    c = Client(sock)
    c.request("graph.run", chain(k, seed=4))
    time.sleep(0.5)
    t0 = time.monotonic()
    stop(proc, pings, log, "SIGTERM while a graph.run is pending")
    print("exited %.2f s after SIGTERM" % (time.monotonic() - t0))
    c.close()


def queued_limits(tmp):
    """Graphs of four connections queued on the device: each one's
    request_timeout counts from when the one before it ended (four of about
    1 s under a 3 s limit all succeed; counted from submission the last would
    not); then one that runs past the limit gets DEADLINE_EXCEEDED and the
    one queued behind it DEVICE_LOST at once."""
    limit = 3.0
    proc, pings, sock, log = start(tmp, "limits", limit=limit)
    try:
        cs = [Client(sock) for _ in range(4)]
        k, took = 1, 0.0
        while took < 0.3 and k < 4096:  # doubling: never near the limit
            k *= 2
            t0 = time.monotonic()
            cs[0].call("graph.run", chain(k, seed=6))
            took = time.monotonic() - t0
        for _ in range(2):      # then scaled to about 1 s
            k = max(int(k * min(1.0 / took, 2.0)), 2)
            t0 = time.monotonic()
            cs[0].call("graph.run", chain(k, seed=6))
            took = time.monotonic() - t0
        per = took / k
        t0 = time.monotonic()
        cs[0].call("graph.run", chain(k, seed=6))
        print("one graph of %d matmuls: %.2f s" % (k, time.monotonic() - t0), flush=True)
        t0 = time.monotonic()
        ids = [c.request("graph.run", chain(k, seed=6)) for c in cs]
        res = [c.response(i) for c, i in zip(cs, ids)]
        print("four queued: %.2f s" % (time.monotonic() - t0), flush=True)
        check(all(e is None for e, _ in res), "four queued %d-matmul graphs under a %.1f s limit "
              "all succeed: %r" % (k, limit, [e for e, _ in res]))
        ia = cs[0].request("graph.run", chain(int(4 * limit / per), seed=7))
        time.sleep(0.1)
        ib = cs[1].request("graph.run", chain(1, seed=8))
        ea, _ = cs[0].response(ia)
        t_a = time.monotonic()
        eb, _ = cs[1].response(ib)
        check(ea is not None and ea["name"] == "DEADLINE_EXCEEDED", "the long one: %r" % (ea,))
        check(eb is not None and eb["name"] == "DEVICE_LOST" and time.monotonic() - t_a < 1.0,
              "the one queued behind it: DEVICE_LOST at once: %r" % (eb,))
        check(cs[3].call("ping")["pong"] is True, "ping after")
        for c in cs:
            c.close()
    finally:
        stop(proc, pings, log, "queued limits")


def main(tmp):
    proc, pings, sock, log = start(tmp, "main")
    try:
        k = long_graph_while_pinging(sock, pings)
        pipelined(sock)
        replaced_input(sock, k)
        two_graphs(sock, k)
        disconnect(sock, k)
    finally:
        stop(proc, pings, log, "main daemon")
    sigterm_while_pending(tmp, k)
    if not SYNC:
        queued_limits(tmp)


if __name__ == "__main__":
    tmp = tempfile.mkdtemp(prefix="tensord-async-")
    try:
        main(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print("%d failures" % len(failures))
        sys.exit(1)
    print("all passed")

#!/usr/bin/python3
"""train.step, model.predict, model.evaluate, kernel.run and tensor.copy do
not hold the loop while the GPU works (issue 17; docs/architecture.md,
"Completions"): like graph.run they are answered from the loop when their
submission completed.

Each long request (calibrated to about TARGET seconds on this device: a
chain of matmuls by a stored identity, which costs the device the full work
while the result stays exact, or a spinning client kernel) runs on one
connection while a second client pings back to back: its ping p99 must stay
under PING_P99_MS and WATCHDOG=1 must keep arriving (the old code, whose
loop waited, fails these). The results are checked against NumPy:
  - train.step (SGD on w, loss = sum(X w I^k)): the loss and the updated w;
  - model.predict: X w; model.evaluate in 2 batches (each a submission of
    its own, chained from the completions): the row-weighted mean loss;
  - kernel.run (v[i] + 64 * iters, exact in f32);
  - tensor.copy (bytes equal).
Also: kernel.delete while the kernel runs (its pipeline outlives the
work), a client that disconnects while its train.step runs (the step still
commits w), an input deleted and its memory asked for again while a step
reads it (the step still reads the original), and steps of one model from
several connections at once (the second waits for the first: the count
goes 1, then 2, w as NumPy's after two steps; one whose client left while
it waited never runs), and SIGTERM while all that and a train.run are pending (clean exit).

argv[1] = "sync" runs it all with `async_graphs = no` (the old path): every
check but the latency.

Run with /usr/bin/python3; TENSORD_BIN names the daemon."""
import os
import shutil
import sys
import tempfile
import threading
import time

import numpy as np

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
sys.path.insert(0, HERE)
from daemon import Client  # noqa: E402
import test_async_graph as ag  # noqa: E402

SYNC = ag.SYNC
TARGET = 1.5
N = ag.N
check = ag.check


def put(c, name, arr):
    arr = np.ascontiguousarray(arr, dtype="<f4")
    c.call("tensor.put", {"name": name, "dtype": "f32", "shape": list(arr.shape), "data": arr.tobytes()})


def get(c, name):
    r = c.call("tensor.get", {"name": name})
    return np.frombuffer(r["data"], "<f4").reshape(r["shape"])


def chain_nodes(k, x="X", w="w"):
    """p = x w, then k matmuls by the stored identity I, loss = sum."""
    nodes = [{"id": "h0", "op": "matmul", "inputs": [x, w]}]
    for i in range(1, k + 1):
        nodes.append({"id": "h%d" % i, "op": "matmul", "inputs": ["h%d" % (i - 1), "I"]})
    nodes.append({"id": "loss", "op": "sum", "inputs": ["h%d" % k]})
    return nodes


def while_pinging(pings, other, what, send, timeout=TARGET * 30):
    """Send a request with `send()` (returns (client, msgid)) and ping from
    `other` until it is answered. Returns its (error, result)."""
    t0 = time.monotonic()
    c, msgid = send()
    answer = {}

    def wait():
        answer["r"] = c.response(msgid)
        answer["t"] = time.monotonic()

    th = threading.Thread(target=wait, daemon=True)
    th.start()
    time.sleep(0.1)
    lat = []
    while "t" not in answer and time.monotonic() - t0 < timeout:
        t1 = time.perf_counter()
        sent = time.monotonic()
        other.call("ping")
        if "t" not in answer or sent < answer["t"]:
            lat.append((time.perf_counter() - t1) * 1e3)
    th.join(timeout)
    took = answer.get("t", time.monotonic()) - t0
    p99 = ag.percentile(lat, 99) if lat else 1e9
    print("MEASURE %s %s: %.2f s, %d pings meanwhile: p50 %.3f ms, p99 %.3f ms"
          % ("sync" if SYNC else "async", what, took, len(lat),
             ag.percentile(lat, 50) if lat else 0, p99), flush=True)
    if not SYNC:
        check(len(lat) > 20, "%s: pings answered while it ran (%d)" % (what, len(lat)))
        check(p99 < ag.PING_P99_MS, "%s: ping p99 %.2f ms < %.0f ms" % (what, p99, ag.PING_P99_MS))
    gap = pings.worst_gap(t0, t0 + took)
    check(gap < ag.WATCHDOG_USEC / 1e6 * 0.9, "%s: WATCHDOG=1 kept coming (worst gap %.2f s)" % (what, gap))
    return answer.get("r", ({"name": "no answer"}, None))


def step_reference(X, w, lr):
    """loss = sum(X w), d loss / d w = X^T 1: SGD's new w."""
    loss = float(np.sum(X.astype(np.float64) @ w.astype(np.float64)))
    g = X.astype(np.float64).T @ np.ones((X.shape[0], w.shape[1]))
    return loss, (w - lr * g).astype(np.float32)


def close(a, b, tol=1e-3):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return a.shape == b.shape and np.allclose(a, b, rtol=tol, atol=tol * np.abs(b).max())


def train_step(sock, pings, k, rng):
    c, other = Client(sock), Client(sock)
    X = rng.random((N, N), np.float32) / N
    w = rng.random((N, N), np.float32) - 0.5
    put(c, "X", X)
    put(c, "w", w)
    lr = 0.01
    step = {"nodes": chain_nodes(k), "loss": "loss", "params": ["w"], "optimizer": {"type": "sgd", "lr": lr}}
    e, r = while_pinging(pings, other, "train.step (%d matmuls)" % k, lambda: (c, c.request("train.step", step)))
    want_loss, want_w = step_reference(X, w, lr)
    check(e is None and abs(r["loss"] - want_loss) <= 1e-3 * abs(want_loss),
          "train.step's loss %r, NumPy %r (%r)" % (r and r["loss"], want_loss, e))
    check(close(get(other, "w"), want_w, 1e-4), "train.step's updated w equals NumPy's")
    c.close()
    other.close()


class RunClient(Client):
    """A client whose response() passes over notifications (train.run's
    progress)."""

    def response(self, msgid):
        while True:
            msg = self.recv()
            if msg is None or msg[0] != 2:
                break
        if msg is None or msg[0] != 1 or msg[1] != msgid:
            raise RuntimeError("expected the response to %d, got %r" % (msgid, msg))
        return msg[2], msg[3]


RUN_STEPS = 3


def train_run(sock, pings, k, rng):
    """train.run of RUN_STEPS steps (one batch of all N rows per epoch), each
    as long as a train.step above: the loop serves pings between and during
    them. loss = sum(X w I^k) is linear in w, its gradient X^T 1 the same at
    every step and for any order of the rows: w after the run is
    w - RUN_STEPS lr X^T 1, the last step's loss sum(X w) before it."""
    c, other = RunClient(sock), Client(sock)
    X = rng.random((N, N), np.float32) / N
    w = rng.random((N, N), np.float32) - 0.5
    put(c, "RX", X)
    put(c, "rw", w)
    lr = 0.01
    run = {"nodes": chain_nodes(k, "x", "rw"), "loss": "loss", "params": ["rw"],
           "optimizer": {"type": "sgd", "lr": lr}, "data": {"x": "RX"}, "batch_size": N,
           "epochs": RUN_STEPS, "progress_every": 1}
    e, r = while_pinging(pings, other, "train.run (%d steps of %d matmuls)" % (RUN_STEPS, k),
                         lambda: (c, c.request("train.run", run)), timeout=TARGET * 30 * RUN_STEPS)
    wk = w
    for _ in range(RUN_STEPS - 1):
        _, wk = step_reference(X, wk, lr)
    want_loss, want_w = step_reference(X, wk, lr)
    check(e is None and r["steps"] == RUN_STEPS and abs(r["loss"] - want_loss) <= 1e-3 * abs(want_loss),
          "train.run's last loss %r, NumPy %r (%r)" % (r and r.get("loss"), want_loss, e))
    check(close(get(other, "rw"), want_w, 1e-4), "train.run's w equals NumPy's after %d steps" % RUN_STEPS)
    # The client leaves while a step runs: the run stops; w is NumPy's after
    # a whole number of steps (a step applies entirely or not at all).
    put(c, "rw", w)
    c.request("train.run", dict(run, epochs=50))
    time.sleep(TARGET)
    c.close()
    time.sleep(TARGET)
    got = get(other, "rw")
    wk, ok = w, False
    for _ in range(50):
        if close(got, wk, 1e-4):
            ok = True
            break
        _, wk = step_reference(X, wk, lr)
    check(ok and other.call("ping") is not None,
          "a client that left mid-train.run: its w is after a whole number of steps")
    other.close()


def predict_evaluate(sock, pings, k, rng):
    c, other = Client(sock), Client(sock)
    X = rng.random((N, N), np.float32) / N
    w = rng.random((N, N), np.float32) - 0.5
    put(c, "PX", X)
    put(c, "pw", w)
    c.call("model.define", {"name": "pm", "nodes": chain_nodes(k, "x", "pw"), "loss": "loss", "params": ["pw"],
                            "inputs": [{"name": "x", "dtype": "f32", "shape": [N, N]}],
                            "outputs": ["h%d" % k], "optimizer": {"type": "sgd", "lr": 0.01}})
    e, r = while_pinging(pings, other, "model.predict (%d matmuls)" % k,
                         lambda: (c, c.request("model.predict", {"model": "pm", "inputs": {"x": "PX"}})))
    want = X.astype(np.float64) @ w.astype(np.float64)
    got = None if e else np.frombuffer(r["outputs"]["h%d" % k]["data"], "<f4").reshape(N, N)
    check(e is None and close(got, want), "model.predict's output equals NumPy's X w (%r)" % (e,))
    bs = N // 2
    e, r = while_pinging(pings, other, "model.evaluate (2 batches of %d matmuls)" % k,
                         lambda: (c, c.request("model.evaluate", {"model": "pm", "data": {"x": "PX"},
                                                                  "batch_size": bs})))
    # Each batch's loss (a sum over its rows) weighted by its rows, over all rows.
    want_loss = sum(np.sum(want[i:i + bs]) * bs for i in range(0, N, bs)) / N
    check(e is None and r["batches"] == 2 and abs(r["loss"] - want_loss) <= 1e-3 * abs(want_loss),
          "model.evaluate in 2 batches: %r, NumPy %r (%r)" % (r and r.get("loss"), want_loss, e))
    c.close()
    other.close()


SPIN = """#version 450
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer B { float v[]; };
layout(push_constant) uniform P { uint iters; float a; };
#define S x = x * a + 1.0;
#define S8 S S S S S S S S
#define S64 S8 S8 S8 S8 S8 S8 S8 S8
void main() {
    uint g = gl_GlobalInvocationID.x;
    float x = v[g];
    for (uint i = 0; i < iters; i++) {
        S64
    }
    v[g] = x;
}
"""


def kernel_run(sock, pings):
    """Each invocation adds 1 to its own element 64 * iters times (exact in
    f32); iters stays under lavapipe's 65535 loop iterations, the groups
    make the time."""
    c, other = Client(sock), Client(sock)
    c.call("kernel.create", {"name": "spin", "glsl": SPIN})
    groups, iters = 16, 1000
    put(c, "v", np.zeros(groups * 64, np.float32))
    r = c.call("kernel.run", {"name": "spin", "tensors": ["v"], "push": {"iters": iters, "a": 1.0},
                              "groups": [groups]})
    per = max(r["seconds"], 1e-4) / (iters * groups)
    iters = 60000
    groups = int(min(max(TARGET / (per * iters), 1), 65535))
    v = np.arange(groups * 64, dtype=np.float32)
    put(c, "v", v)
    e, r = while_pinging(pings, other, "kernel.run (%d groups of %d iterations)" % (groups, iters),
                         lambda: (c, c.request("kernel.run", {"name": "spin", "tensors": ["v"],
                                                              "push": {"iters": iters, "a": 1.0},
                                                              "groups": [groups]})))
    got = get(other, "v")
    check(e is None and np.array_equal(got, v + 64 * iters),
          "kernel.run's result equals NumPy's (%r; %r, want %r)" % (e, got[:3], (v + 64 * iters)[:3]))
    ver = other.call("tensor.stat", {"name": "v"})["version"]
    c.call("kernel.run", {"name": "spin", "tensors": ["v"], "push": {"iters": 1, "a": 1.0}, "groups": [groups]})
    check(other.call("tensor.stat", {"name": "v"})["version"] == ver + 1, "kernel.run bumps the version")
    # The kernel deleted (by another connection of its owner) while it runs:
    # its pipeline outlives the work, the run completes right.
    put(c, "v", v)
    msgid = c.request("kernel.run", {"name": "spin", "tensors": ["v"], "push": {"iters": iters, "a": 1.0},
                                     "groups": [groups]})
    time.sleep(0.3)
    e2, _ = other.call_full("kernel.delete", {"name": "spin"})
    e, _ = c.response(msgid)
    check(e is None and e2 is None and np.array_equal(get(other, "v"), v + 64 * iters),
          "kernel.delete while the kernel runs: the run completes right (%r, %r)" % (e, e2))
    c.close()
    other.close()


def tensor_copy(sock):
    c = Client(sock)
    a = np.arange(1 << 20, dtype=np.float32)
    put(c, "src", a)
    r = c.call("tensor.copy", {"src": "src", "dst": "dst"})
    check(r["shape"] == [1 << 20] and np.array_equal(get(c, "dst"), a), "tensor.copy: the bytes are equal")
    ids = [c.request("tensor.copy", {"src": "src", "dst": "d%d" % i}) for i in range(4)]
    ids.append(c.request("tensor.get", {"name": "d3"}))
    res = [c.response(i) for i in ids]
    check(all(e is None for e, _ in res) and np.array_equal(np.frombuffer(res[-1][1]["data"], "<f4"), a),
          "pipelined tensor.copy then tensor.get: the get sees the copy")
    c.close()


def disconnect_mid_step(sock, k, rng):
    other = Client(sock)
    X = rng.random((N, N), np.float32) / N
    w = rng.random((N, N), np.float32) - 0.5
    put(other, "DX", X)
    put(other, "dw", w)
    ver = other.call("tensor.stat", {"name": "dw"})["version"]
    c = Client(sock)
    c.request("train.step", {"nodes": chain_nodes(k, "DX", "dw"), "loss": "loss", "params": ["dw"],
                             "optimizer": {"type": "sgd", "lr": 0.01}})
    time.sleep(0.3)
    c.close()
    deadline = time.monotonic() + TARGET * 10 + 10
    while time.monotonic() < deadline and other.call("tensor.stat", {"name": "dw"})["version"] == ver:
        time.sleep(0.05)
    _, want = step_reference(X, w, 0.01)
    check(close(get(other, "dw"), want, 1e-4),
          "a client that left mid-train.step: the step still took effect (w updated as NumPy's)")
    other.close()


def delete_input_mid_step(sock, k, rng):
    c, other = Client(sock), Client(sock)
    X = rng.random((N, N), np.float32) / N
    w = rng.random((N, N), np.float32) - 0.5
    put(c, "EX", X)
    put(c, "ew", w)
    msgid = c.request("train.step", {"nodes": chain_nodes(k, "EX", "ew"), "loss": "loss", "params": ["ew"],
                                     "optimizer": {"type": "sgd", "lr": 0.01}})
    time.sleep(0.3)
    other.call("tensor.delete", {"name": "EX"})
    for i in range(4):
        put(other, "z%d" % i, np.full((N, N), 1000.0, np.float32))
    e, r = c.response(msgid)
    want_loss, want_w = step_reference(X, w, 0.01)
    check(e is None and abs(r["loss"] - want_loss) <= 1e-3 * abs(want_loss) and close(get(c, "ew"), want_w, 1e-4),
          "an input deleted and its memory asked for again mid-step: the step read the original (%r)" % (e,))
    c.close()
    other.close()


def two_connections_one_model(sock, k, rng):
    """Steps of one model from three connections at once: the second waits
    for the first (it would otherwise read w before the first's update),
    the third's client leaves while it waits (it never runs, as a request
    queued behind another on a closed connection)."""
    a, b, gone = Client(sock), Client(sock), Client(sock)
    X = rng.random((N, N), np.float32) / N
    w = rng.random((N, N), np.float32) - 0.5
    put(a, "TX", X)
    put(a, "tw", w)
    a.call("model.define", {"name": "tm", "nodes": chain_nodes(k, "x", "tw"), "loss": "loss", "params": ["tw"],
                            "inputs": [{"name": "x", "dtype": "f32", "shape": [N, N]}],
                            "optimizer": {"type": "sgd", "lr": 0.01}})
    ia = a.request("train.step", {"model": "tm", "data": {"x": "TX"}})
    time.sleep(0.3)
    ib = b.request("train.step", {"model": "tm", "data": {"x": "TX"}})
    time.sleep(0.1)
    if not SYNC:
        gone.request("train.step", {"model": "tm", "data": {"x": "TX"}})
        time.sleep(0.1)
        gone.close()
    ea, ra = a.response(ia)
    eb, rb = b.response(ib)
    check(ea is None and eb is None and ra["step"] == 1 and rb["step"] == 2,
          "two connections' steps of one model at once run in turn: steps 1, 2 (%r %r)" % (ea, eb))
    check(ea is None and eb is None and ra["loss"] != rb["loss"],
          "the second step read the first's update (losses %r, %r)" % (ra and ra["loss"], rb and rb["loss"]))
    _, w1 = step_reference(X, w, 0.01)
    _, w2 = step_reference(X, w1, 0.01)
    time.sleep(0.5)
    check(close(get(a, "tw"), w2, 1e-4), "after the two steps w is NumPy's after two steps")
    check(a.call("model.stat", {"name": "tm"})["step"] == 2,
          "the model's count is 2 (a waiting step whose client left never ran)")
    a.close()
    b.close()


def sigterm_while_pending(tmp, k, rng):
    """SIGTERM while a model's train.step runs, another connection's step of
    it waits, and an evaluation in batches is between two of them: a clean
    exit (0, no sanitizer report: the chained batches are finished too)."""
    proc, pings, sock, log = ag.start(tmp, "term")
    a, b, e = Client(sock), Client(sock), Client(sock)
    put(a, "I", np.eye(N, dtype=np.float32))
    put(a, "SX", rng.random((N, N), np.float32) / N)
    put(a, "sw", rng.random((N, N), np.float32) - 0.5)
    a.call("model.define", {"name": "sm", "nodes": chain_nodes(k, "x", "sw"), "loss": "loss", "params": ["sw"],
                            "inputs": [{"name": "x", "dtype": "f32", "shape": [N, N]}],
                            "optimizer": {"type": "sgd", "lr": 0.01}})
    e.request("model.evaluate", {"model": "sm", "data": {"x": "SX"}, "batch_size": N // 8})
    run = Client(sock)
    put(run, "RW", rng.random((N, N), np.float32) - 0.5)
    run.request("train.run", {"nodes": chain_nodes(k, "x", "RW"), "loss": "loss", "params": ["RW"],
                              "optimizer": {"type": "sgd", "lr": 0.01}, "data": {"x": "SX"},
                              "batch_size": N, "epochs": 50})
    a.request("train.step", {"model": "sm", "data": {"x": "SX"}})
    time.sleep(0.2)
    b.request("train.step", {"model": "sm", "data": {"x": "SX"}})
    time.sleep(0.3)
    ag.stop(proc, pings, log, "SIGTERM while steps and an evaluation are pending")
    for c in (a, b, e, run):
        c.close()


def main(tmp):
    rng = np.random.default_rng(7)
    proc, pings, sock, log = ag.start(tmp, "req")
    try:
        c = Client(sock)
        put(c, "I", np.eye(N, dtype=np.float32))
        per = ag.per_matmul(c)
        c.close()
        k = max(int(TARGET / per), 8)
        kt = max(k // 4, 4)     # a step runs about 3 times the matmuls (forward, backward)
        print("one %dx%d matmul takes %.4f s: chains of %d (%d in steps)" % (N, N, per, k, kt), flush=True)
        train_step(sock, pings, kt, rng)
        train_run(sock, pings, kt, rng)
        predict_evaluate(sock, pings, k, rng)
        kernel_run(sock, pings)
        tensor_copy(sock)
        disconnect_mid_step(sock, kt, rng)
        delete_input_mid_step(sock, kt, rng)
        two_connections_one_model(sock, kt, rng)
    finally:
        ag.stop(proc, pings, log, "daemon")
    sigterm_while_pending(tmp, kt, rng)


if __name__ == "__main__":
    tmp = tempfile.mkdtemp(prefix="tensord-asyncreq-")
    try:
        main(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if ag.failures:
        print("%d failures" % len(ag.failures))
        sys.exit(1)
    print("all passed")

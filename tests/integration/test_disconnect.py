"""Clients that go away at the worst moment: half-way through sending a
request, while a large tensor.get response is being written to them, and
during a train.run. After each, the daemon keeps serving the other clients,
its open file descriptors (/proc/PID/fd) and its tensor count, tensor bytes
and device memory in use (info) return to what they were, and a later
train.run still works. Run with /usr/bin/python3; TENSORD_BIN names the daemon.
"""
import os
import socket
import struct
import sys
import time

import msgpack

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from daemon import Daemon  # noqa: E402

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL", what, flush=True)
    return cond


def fd_count(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def snapshot(c):
    """(tensor count, tensor bytes, device memory used) from info."""
    info = c.call("info")
    active = [dev for dev in info["devices"] if dev["active"]]
    return (info["tensors"]["count"], info["tensors"]["bytes"], active[0]["memory_used"])


def settle(pid, c, base_fds, base, what, timeout=30):
    """Wait until fds and tensor accounting are back at the baseline."""
    deadline = time.monotonic() + timeout
    while True:
        fds, snap = fd_count(pid), snapshot(c)
        if (fds, snap) == (base_fds, base) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    check(fds == base_fds, "%s: %d fds open, %d before" % (what, fds, base_fds))
    check(snap == base, "%s: tensors/bytes/device memory %r, before %r" % (what, snap, base))


def raw(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    return s


def request(msgid, method, params=None):
    return msgpack.packb([0, msgid, method, [] if params is None else [params]], use_bin_type=True)


def f32(values):
    return struct.pack("<%df" % len(values), *values)


def put(c, name, shape, values):
    c.call("tensor.put", {"name": name, "dtype": "f32", "shape": list(shape), "data": f32(values)})


def wait_closed(s, what, timeout=30):
    """The daemon closes a connection whose stream ended inside a message."""
    s.settimeout(timeout)
    try:
        while s.recv(65536):
            pass
        closed = True
    except socket.timeout:
        closed = False
    except ConnectionResetError:
        closed = True
    s.close()
    check(closed, "%s: the daemon did not close the connection" % what)


def half_requests(d, c, pid, base_fds, base):
    big = request(1, "tensor.put", {"name": "half", "dtype": "f32", "shape": [1 << 18],
                                    "data": bytes(1 << 20)})
    # 1. Half of a 1 MiB put, then a hard close.
    s = raw(d.sock)
    s.sendall(big[:len(big) // 2])
    s.close()
    check(c.call("ping")["pong"], "ping after a half-sent put")
    # 2. Only the header of the bin, then close.
    s = raw(d.sock)
    s.sendall(big[:64])
    s.close()
    # 3. Half a request, then a half-close: the daemon must give up on the
    # stream and close rather than wait for the rest forever.
    s = raw(d.sock)
    s.sendall(big[:1000])
    s.shutdown(socket.SHUT_WR)
    wait_closed(s, "half request then SHUT_WR")
    # 4. Many connections each with a few bytes of a request, closed at once.
    socks = [raw(d.sock) for _ in range(20)]
    for k, s in enumerate(socks):
        s.sendall(big[:1 + k * 7])
    for s in socks:
        s.close()
    err, _ = c.call_full("tensor.stat", {"name": "half"})
    check(err is not None and err["name"] == "NOT_FOUND", "a half-sent put stored something: %r" % (err,))
    settle(pid, c, base_fds, base, "after half-sent requests")


def mid_response(d, c, pid, base_fds, base):
    n = 4 << 20  # 16 MiB of f32: far more than a socket buffer holds
    c.call("tensor.put", {"name": "big", "dtype": "f32", "shape": [n], "data": bytes(4 * n)})
    with_big = snapshot(c)
    # 1. Ask for it four times, read a little of the first answer, hang up.
    s = raw(d.sock)
    s.sendall(b"".join(request(k, "tensor.get", {"name": "big"}) for k in range(1, 5)))
    s.settimeout(30)
    got = s.recv(65536)
    check(len(got) > 0, "no bytes of the tensor.get response")
    s.close()
    check(c.call("ping")["pong"], "ping after a client left mid-response")
    # 2. A client that asks and never reads stalls only itself.
    slow = raw(d.sock)
    slow.sendall(b"".join(request(k, "tensor.get", {"name": "big"}) for k in range(1, 4)))
    t0 = time.monotonic()
    for _ in range(20):
        c.call("ping")
    check(time.monotonic() - t0 < 20, "a slow reader held up the others")
    # ... and then resets the connection with its output still queued.
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    slow.close()
    # 3. The tensor itself is unharmed.
    res = c.call("tensor.get", {"name": "big"})
    check(len(res["data"]) == 4 * n and res["data"] == bytes(4 * n), "big tensor changed")
    check(snapshot(c) == with_big, "accounting changed by the disconnects")
    c.call("tensor.delete", {"name": "big"})
    settle(pid, c, base_fds, base, "after mid-response disconnects")


def train_params(steps, **extra):
    nodes = [
        {"id": "h", "op": "matmul", "inputs": ["xb", "w"]},
        {"id": "z", "op": "add", "inputs": ["h", "b"]},
        {"id": "L", "op": "mse", "inputs": ["z", "yb"]},
    ]
    p = {"nodes": nodes, "loss": "L", "params": ["w", "b"],
         "optimizer": {"type": "sgd", "lr": 0.05}, "data": {"xb": "x", "yb": "y"},
         "batch_size": 8, "steps": steps}
    p.update(extra)
    return p


def read_until(s, unpacker, pred, timeout=60):
    s.settimeout(timeout)
    while True:
        for m in unpacker:
            if pred(m):
                return m
        chunk = s.recv(65536)
        if not chunk:
            return None
        unpacker.feed(chunk)


def mid_training(d, c, pid, base_fds, base):
    rows = 64
    xs = [((i * 37) % 11) / 11.0 - 0.5 for i in range(rows * 3)]
    ys = [2 * xs[3 * i] - xs[3 * i + 1] + 0.5 * xs[3 * i + 2] + 0.1 for i in range(rows)]
    put(c, "x", (rows, 3), xs)
    put(c, "y", (rows, 1), ys)
    put(c, "w", (3, 1), [0, 0, 0])
    put(c, "b", (1,), [0])
    with_data = snapshot(c)
    # 1. Leave after the first progress notification of a very long run.
    s = raw(d.sock)
    u = msgpack.Unpacker(raw=False)
    s.sendall(request(1, "train.run", train_params(10000000, progress_every=1)))
    m = read_until(s, u, lambda m: m[0] == 2 or m[0] == 1)
    check(m is not None and m[0] == 2 and m[1] == "train.progress", "no progress: %r" % (m,))
    # Other clients are served while it runs.
    t0 = time.monotonic()
    check(c.call("ping")["pong"], "ping during train.run")
    put(c, "other", (2,), [1, 2])
    check(c.call("tensor.get", {"name": "other"})["data"] == f32([1, 2]), "put/get during a run")
    c.call("tensor.delete", {"name": "other"})
    check(time.monotonic() - t0 < 30, "a run starved other clients")
    s.close()
    # 2. Leave before the first step could even answer.
    s = raw(d.sock)
    s.sendall(request(1, "train.run", train_params(10000000)))
    s.close()
    # 3. Leave with requests queued behind the run.
    s = raw(d.sock)
    s.sendall(request(1, "train.run", train_params(10000000, progress_every=1)) +
              b"".join(request(k, "ping") for k in range(2, 50)))
    read_until(s, msgpack.Unpacker(raw=False), lambda m: m[0] == 2)
    s.close()
    # The runs stop: the parameters stop changing.
    deadline = time.monotonic() + 30
    last = None
    while time.monotonic() < deadline:
        v = c.call("tensor.stat", {"name": "w"})["version"]
        if v == last:
            break
        last = v
        time.sleep(0.5)
    check(v == last, "w still changes after every training client left")
    check(snapshot(c) == with_data, "tensors after cancelled runs: %r, expected %r"
          % (snapshot(c), with_data))
    # 4. A later run works and learns.
    c2 = d.client()
    p = train_params(200)
    c2.send([0, 1, "train.run", [p]])
    while True:
        m = c2.recv()
        if m is None or m[0] == 1:
            break
    check(m is not None and m[2] is None, "later train.run failed: %r" % (m,))
    if m is not None and m[2] is None:
        check(m[3]["steps"] == 200 and m[3]["stopped"] == "done" and m[3]["loss"] < 0.05,
              "later train.run result %r" % (m[3],))
    c2.close()
    for name in ("x", "y", "w", "b"):
        c.call("tensor.delete", {"name": name})
    settle(pid, c, base_fds, base, "after training disconnects")


def main():
    with Daemon() as d:
        pid = d.proc.pid
        c = d.client()
        # Warm up once, so that lazily created state (pipelines, buffers)
        # is not counted as a leak.
        put(c, "warm", (2, 2), [1, 2, 3, 4])
        c.call("op.run", {"op": "add", "inputs": ["warm", "warm"]})
        c.call("tensor.delete", {"name": "warm"})
        base_fds, base = fd_count(pid), snapshot(c)
        for part in (half_requests, mid_response, mid_training):
            part(d, c, pid, base_fds, base)
            check(d.alive(), "tensord died in %s" % part.__name__)
            print("ok", part.__name__, flush=True)
        c.close()
    if failures:
        print("%d failure(s)" % len(failures))
        return 1
    print("all disconnect checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

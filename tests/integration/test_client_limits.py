#!/usr/bin/python3
"""Host memory, connections, models and kernels are bounded per user
(docs/security.md, "Limits"), each against an unprivileged attacker uid
while another user's ping stays under PING_BOUND (50 ms on a quiet machine;
the bound is five times that so that a loaded or sanitized run passes, and
an attack that holds the loop for its duration still fails it).

- input_timeout: a message started and then left incomplete (slowloris) is
  disconnected, with the reason logged;
- user_max_buffer_bytes: one uid's connections together buffer no more than
  the limit; the connection that grows past it is told why and closed, and
  the daemon's memory stays near its baseline;
- stall_timeout: responses left unread are dropped with their connection
  even under max_output_backlog;
- max_connections_per_user: 64 by default, and the last slots are root's;
- user_max_models, user_max_kernels: one uid cannot take every slot;
- RLIMIT_NOFILE: the soft limit is raised to the hard one, and a
  max_connections that does not fit is lowered (logged).

Needs root (other uids via setresuid, as tests/integration/test_security.py); skipped
(77) otherwise. Run with /usr/bin/python3 and TENSORD_BIN set."""
import os
import resource
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

import msgpack

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from daemon import Client  # noqa: E402
from test_security import as_user, start, stop  # noqa: E402

ATTACKER = 65530
VICTIM = 65529
GROUP = 4243
failures = []
PING_BOUND = 0.25      # seconds: 5 x the 50 ms a quiet machine keeps to


def check(cond, what):
    print(("ok: " if cond else "FAIL: ") + what, flush=True)
    if not cond:
        failures.append(what)


def peak_kib(pid):
    """The process's peak resident memory (VmHWM)."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


class Pinger(threading.Thread):
    """The victim: pings as VICTIM in a child process while the attack runs;
    the worst round trip comes back through a pipe."""

    def __init__(self, sock, seconds):
        super().__init__(daemon=True)
        self.sock, self.seconds, self.worst = sock, seconds, None

    def run(self):
        def pings():
            worst = 0.0
            with Client(self.sock) as c:
                end = time.monotonic() + self.seconds
                while time.monotonic() < end:
                    t0 = time.monotonic()
                    c.call("ping")
                    worst = max(worst, time.monotonic() - t0)
                    time.sleep(0.02)
            return worst
        self.worst = as_user(VICTIM, pings)


def partial_put(size, sent):
    """The first `sent` bytes of a tensor.put carrying `size` data bytes."""
    msg = msgpack.packb([0, 1, "tensor.put", [{"name": "x", "dtype": "u8", "shape": [size],
                                               "data": bytes(size)}]], use_bin_type=True)
    return msg[:sent]


def closed_reason(s, timeout):
    """Read until EOF: the protocol.error notification's error, or None;
    "open" when the connection stayed open for `timeout` s."""
    s.settimeout(timeout)
    u = msgpack.Unpacker(raw=False)
    why = None
    try:
        while True:
            data = s.recv(65536)
            if not data:
                return why
            u.feed(data)
            for m in u:
                if m[0] == 2 and m[1] == "protocol.error":
                    why = m[2][0]
    except socket.timeout:
        return "open"
    except ConnectionResetError:
        return why


def log_of(d):
    with open(d.log, errors="replace") as f:
        return f.read()


def test_slowloris():
    d = start("input_timeout = 2\n")
    try:
        p = Pinger(d.sock, 5)
        p.start()

        def attack():
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(d.sock)
            s.sendall(partial_put(1 << 20, 100000))
            t0 = time.monotonic()
            why = closed_reason(s, 10)
            return why, time.monotonic() - t0
        why, took = as_user(ATTACKER, attack)
        p.join()
        check(why != "open" and 1.5 < took < 5, "an incomplete message is dropped after "
              "input_timeout (%.1f s, %r)" % (took, why))
        check("input_timeout" in log_of(d), "the disconnect is logged with its reason")
        check(p.worst is not None and p.worst < PING_BOUND, "the victim's ping: worst %.1f ms"
              % (1e3 * (p.worst or 9)))
        with d.client() as c:
            check(c.call("info")["limits"]["input_timeout"] == 2, "info.limits.input_timeout")
    finally:
        stop(d)


def test_user_buffer():
    d = start("user_max_buffer_bytes = 16M\ninput_timeout = 0\n")
    try:
        base = peak_kib(d.proc.pid)
        p = Pinger(d.sock, 4)
        p.start()

        def attack():
            socks, whys = [], []
            for _ in range(8):
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect(d.sock)
                try:
                    s.sendall(partial_put(64 << 20, 6 << 20))
                except OSError:
                    pass
                socks.append(s)
                time.sleep(0.1)
            for s in socks:
                whys.append(closed_reason(s, 1.0))
            return whys
        whys = as_user(ATTACKER, attack)
        grown = peak_kib(d.proc.pid) - base
        p.join()
        refused = [w for w in whys if isinstance(w, dict)]
        check(len(refused) >= 5 and all(w["name"] == "RESOURCE_EXHAUSTED" and
                                        "user_max_buffer_bytes" in w["message"] for w in refused),
              "connections past the uid's 16 MiB are closed with the reason: %r" % (whys,))
        check(whys.count("open") <= 3, "at most 16 MiB worth stay open: %r" % (whys,))
        # (A sanitizer build's allocator keeps freed memory in quarantine.)
        check(grown < 40 << 10 or "ASAN_OPTIONS" in os.environ,
              "the daemon's peak memory grew %d KiB for 48 MiB sent" % grown)
        check("user_max_buffer_bytes" in log_of(d), "the disconnect is logged")
        check(p.worst is not None and p.worst < PING_BOUND, "the victim's ping: worst %.1f ms"
              % (1e3 * (p.worst or 9)))

        # Another uid's budget is its own: an 8 MiB put works.
        def put8():
            with Client(d.sock) as c:
                return c.call("tensor.put", {"name": "v/big", "dtype": "u8", "shape": [8 << 20],
                                             "data": bytes(8 << 20)})["bytes"]
        check(as_user(VICTIM, put8) == 8 << 20, "another uid's 8 MiB put goes through")
    finally:
        stop(d)


def test_input_cap():
    """Requests queued behind a train.run wait in the client's socket once
    max_input_bytes of them are buffered: the daemon does not read 48 MiB."""
    d = start("max_input_bytes = 2M\ninput_timeout = 0\n")
    try:

        def attack():
            c = Client(d.sock)
            rows = 64
            for name, dtype, shape, data in (
                    ("in/x", "f32", [rows, 3], bytes(4 * rows * 3)),
                    ("in/y", "i32", [rows], bytes(4 * rows)),
                    ("in/w", "f32", [3, 2], bytes(24)), ("in/b", "f32", [2], bytes(8))):
                c.call("tensor.put", {"name": name, "dtype": dtype, "shape": shape, "data": data})
            c.send([0, 100, "train.run", [{
                "nodes": [{"id": "z0", "op": "matmul", "inputs": ["x", "in/w"]},
                          {"id": "logits", "op": "add", "inputs": ["z0", "in/b"]},
                          {"id": "loss", "op": "cross_entropy", "inputs": ["logits", "y"]}],
                "loss": "loss", "params": ["in/w", "in/b"], "data": {"x": "in/x", "y": "in/y"},
                "batch_size": 8, "steps": 10000000, "progress_every": 1000000}]])
            msg = msgpack.packb([0, 200, "tensor.put", [{"name": "in/big", "dtype": "u8",
                                                         "shape": [1 << 20],
                                                         "data": bytes(1 << 20)}]])
            data = msg * 48
            c.sock.setblocking(False)
            sent, end = 0, time.monotonic() + 3
            while sent < len(data) and time.monotonic() < end:
                try:
                    sent += c.sock.send(data[sent:sent + (1 << 20)])
                except BlockingIOError:
                    time.sleep(0.05)
            c.close()
            return sent
        sent = as_user(ATTACKER, attack)
        # (No ping timing here: the training steps themselves hold the loop.)
        check(sent < 6 << 20, "behind a running job the daemon took %.1f MiB of 48 MiB of "
              "requests (max_input_bytes 2M)" % (sent / 1048576))
    finally:
        stop(d)


def test_unread_output():
    d = start("stall_timeout = 2\n")
    try:
        with d.client() as c:
            c.call("tensor.put", {"name": "pub/big", "dtype": "u8", "shape": [1 << 20],
                                  "data": bytes(1 << 20)})
            c.call("tensor.chmod", {"name": "pub/big", "mode": "world-read"})

        def attack():
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(d.sock)
            for i in range(3):   # 3 MiB of responses: under max_output_backlog (8 MiB)
                s.sendall(msgpack.packb([0, i, "tensor.get", [{"name": "~root/pub/big"}]]))
            time.sleep(4)
            n = 0
            s.settimeout(5)
            try:
                while True:
                    data = s.recv(1 << 20)
                    if not data:
                        break
                    n += len(data)
            except (socket.timeout, ConnectionResetError):
                return n, False
            return n, True
        n, closed = as_user(ATTACKER, attack)
        check(closed and n < 3 << 20, "unread responses under the backlog limit are dropped "
              "with the connection after stall_timeout (%d bytes read, closed %r)" % (n, closed))
        check("stall_timeout" in log_of(d), "the disconnect is logged")
    finally:
        stop(d)


def test_connections_per_user():
    d = start("")
    try:
        with d.client() as c:
            check(c.call("info")["limits"]["max_connections_per_user"] == 64,
                  "max_connections_per_user defaults to 64")

        def attack():
            socks, refused = [], None
            for _ in range(70):
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect(d.sock)
                socks.append(s)
            time.sleep(0.5)
            for s in socks:
                s.settimeout(0.05)
                try:
                    data = s.recv(4096)
                    if data:
                        m = msgpack.unpackb(data, raw=False)
                        refused = refused or m[2][0]["message"]
                except socket.timeout:
                    pass
            n_open = 0
            for s in socks:
                try:
                    s.sendall(msgpack.packb([0, 1, "ping", []]))
                    s.settimeout(2)
                    n_open += bool(s.recv(4096))
                except OSError:
                    pass
            return n_open, refused
        n_open, refused = as_user(ATTACKER, attack)
        check(n_open == 64, "one uid gets 64 connections (%d)" % n_open)
        check(refused and "max_connections_per_user" in refused, "the rest are told why: %r"
              % (refused,))
    finally:
        stop(d)
    d = start("max_connections = 128\nmax_connections_per_user = 1000\n")
    try:
        # the start-up probe's connection may not be reaped yet
        with d.client() as c:
            deadline = time.monotonic() + 10
            while c.call("info")["connections"] > 1 and time.monotonic() < deadline:
                time.sleep(0.02)
        time.sleep(0.2)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.setresgid(ATTACKER, ATTACKER, ATTACKER)
            os.setresuid(ATTACKER, ATTACKER, ATTACKER)
            socks = []
            for _ in range(128):
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect(d.sock)
                socks.append(s)
            os.write(w, b"x")
            time.sleep(6)
            os._exit(0)
        os.close(w)
        os.read(r, 1)
        os.close(r)
        time.sleep(1.0)
        try:
            with d.client() as c:
                n = c.call("info")["connections"]
        except Exception as e:  # noqa: B902
            n = "refused: %s" % e
        check(n == 127, "root still gets in while one uid holds every slot it may take "
              "(%r connected; 2 of 128 are root's)" % (n,))
        os.waitpid(pid, 0)
    finally:
        stop(d)


def model(c, prefix, name):
    """Define model `name` over parameters `prefix`/w and `prefix`/b (stored
    first); returns the error or None."""
    for pname, shape in (("w", [3, 2]), ("b", [2])):
        n = shape[0] * (shape[1] if len(shape) > 1 else 1)
        c.call("tensor.put", {"name": "%s/%s" % (prefix, pname), "dtype": "f32", "shape": shape,
                              "data": bytes(4 * n)})
    e, _ = c.call_full("model.define", {
        "name": name, "loss": "loss", "params": [prefix + "/w", prefix + "/b"],
        "nodes": [{"id": "z0", "op": "matmul", "inputs": ["x", prefix + "/w"]},
                  {"id": "logits", "op": "add", "inputs": ["z0", prefix + "/b"]},
                  {"id": "loss", "op": "cross_entropy", "inputs": ["logits", "y"]}],
        "inputs": [{"name": "x", "dtype": "f32", "shape": [1, 3]},
                   {"name": "y", "dtype": "i32", "shape": [1]}],
        "outputs": ["logits"], "optimizer": {"type": "sgd", "lr": 0.01}})
    return e and (e["name"], e["message"])


SPIN = "#version 450\nlayout(local_size_x = 1) in;\n" \
       "layout(std430, binding = 0) buffer B { float v[]; };\nvoid main() { v[0] += 1.0; }\n"


def test_models_and_kernels():
    d = start("user_max_models = 2\nuser_max_kernels = 2\nkernel_group = %d\n" % GROUP)
    try:
        def attack():
            out = []
            with Client(d.sock) as c:
                for i in range(3):
                    out.append(model(c, "att%d" % i, "att%d" % i))
                for i in range(3):
                    e, _ = c.call_full("kernel.create", {"name": "k%d" % i, "glsl": SPIN})
                    out.append(e and (e["name"], e["message"]))
            return out
        out = as_user(ATTACKER, attack, groups=(GROUP,))
        check(out[0] is None and out[1] is None, "two models: %r" % (out[:2],))
        check(out[2] and out[2][0] == "RESOURCE_EXHAUSTED" and "user_max_models" in out[2][1],
              "the third model is refused: %r" % (out[2],))
        check(out[3] is None and out[4] is None, "two kernels: %r" % (out[3:5],))
        check(out[5] and out[5][0] == "RESOURCE_EXHAUSTED" and "user_max_kernels" in out[5][1],
              "the third kernel is refused: %r" % (out[5],))

        def victim():
            with Client(d.sock) as c:
                e1 = model(c, "vic", "vic0")
                e2, _ = c.call_full("kernel.create", {"name": "vk", "glsl": SPIN})
                return e1, e2
        check(as_user(VICTIM, victim, groups=(GROUP,)) == (None, None),
              "another uid still defines a model and a kernel")
    finally:
        stop(d)


def test_fd_limit():
    binary = os.environ["TENSORD_BIN"]
    tmp = tempfile.mkdtemp(prefix="tensord-fd-", dir="/tmp")
    sock, log = os.path.join(tmp, "s.sock"), os.path.join(tmp, "log")

    def limits():
        resource.setrlimit(resource.RLIMIT_NOFILE, (200, 400))
    with open(log, "wb") as lf:
        proc = subprocess.Popen([binary, "--socket", sock, "--device", "auto"],
                                stdout=lf, stderr=subprocess.STDOUT, preexec_fn=limits)
    try:
        for _ in range(600):
            if os.path.exists(sock):
                break
            time.sleep(0.05)
        with Client(sock) as c:
            got = c.call("info")["limits"]["max_connections"]
        with open("/proc/%d/limits" % proc.pid) as f:
            soft = [line.split()[3] for line in f if line.startswith("Max open files")][0]
        check(soft == "400", "the soft file limit is raised to the hard one (%s)" % soft)
        check(got == 400 - 256, "max_connections is lowered to fit 400 files (%d)" % got)
        with open(log, errors="replace") as f:
            check("LimitNOFILE" in f.read(), "the lowering is logged")
    finally:
        proc.terminate()
        proc.wait(30)
        for n in os.listdir(tmp):
            os.unlink(os.path.join(tmp, n))
        os.rmdir(tmp)


def main():
    if os.geteuid() != 0:
        print("needs root to act as other uids; skipped")
        return 77
    for t in (test_slowloris, test_user_buffer, test_input_cap, test_unread_output, test_connections_per_user,
              test_models_and_kernels, test_fd_limit):
        print("--", t.__name__, flush=True)
        try:
            t()
        except Exception as e:  # noqa: B902
            check(False, "%s raised %s: %s" % (t.__name__, type(e).__name__, e))
    if failures:
        print("%d failure(s)" % len(failures))
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Streamed tensor.get (docs/architecture.md, "Connections"): a get of 16 MiB
or more is answered from a device snapshot a chunk at a time as the socket
drains. Checked: the bytes are right; the answer is the tensor as it was
when the get was served, whatever later requests (pipelined on the same
connection, or from another client while this one reads slowly) do to it;
other clients are served while a reader stalls; a client that stopped
sending (shutdown SHUT_WR) still gets the whole answer; one that leaves
mid-answer leaves no fd and no device memory behind. Run with
/usr/bin/python3; TENSORD_BIN names the daemon."""
import hashlib
import os
import socket
import sys
import time

import msgpack

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from daemon import Daemon  # noqa: E402

# Gets stream where device memory is not host-mapped (a discrete GPU): on
# lavapipe, host_mapped = false makes it so.
STAGING = ["--config", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib",
                                    "staging.conf")]

failures = []
N = 40 << 20


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL", what, flush=True)
    return cond


def req(msgid, method, params):
    return msgpack.packb([0, msgid, method, [params]], use_bin_type=True)


def data(seed):
    return hashlib.sha256(b"%d" % seed).digest() * (N // 32)


def read_answers(s, count):
    u = msgpack.Unpacker(raw=False, max_buffer_size=2**31 - 1)
    out = []
    while len(out) < count:
        chunk = s.recv(1 << 20)
        if not chunk:
            break
        u.feed(chunk)
        out.extend(u)
    return out


def used(c):
    return [d["memory_used"] for d in c.call("info")["devices"] if d["active"]][0]


def settled_fds(d):
    """The daemon's open fds once the count has held still for 0.25 s (the
    connections just closed have been reaped), at most 10 s."""
    prev, still, n = None, 0, 0
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and still < 5:
        n = len(os.listdir("/proc/%d/fd" % d.proc.pid))
        still = still + 1 if n == prev else 0
        prev = n
        time.sleep(0.05)
    return n


def back_to_baseline(d, c, base_fds, base_mem, what):
    """Wait up to 10 s for the daemon's fds and device memory to return to
    the baseline, then check both."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        fds, mem = len(os.listdir("/proc/%d/fd" % d.proc.pid)), used(c)
        if (fds, mem) == (base_fds, base_mem):
            break
        time.sleep(0.05)
    check(fds == base_fds, "fds %d %s, before %d" % (fds, what, base_fds))
    check(mem == base_mem, "device memory used %d %s, before %d" % (mem, what, base_mem))


def start_stream(d):
    """Put "big", start a get on a reader that reads only its first bytes."""
    c = d.client()
    c.call("tensor.put", {"name": "big", "dtype": "u8", "shape": [N], "data": data(1)})
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    s.connect(d.sock)
    s.sendall(req(1, "tensor.get", {"name": "big"}))
    s.recv(1 << 16)
    return c, s


def settled_submissions(c):
    """The daemon's submission count once the stream stopped submitting parts
    ahead of its reader: a slow machine (the ASan build on a loaded host)
    submitted the next part after a first read of the count, so the fault
    hit the stream instead of the op.run that was to meet it."""
    last, deadline = None, time.monotonic() + 10
    while time.monotonic() < deadline:
        subs = c.call("info")["counters"]["gpu"]["submissions"]
        if subs == last:
            return subs
        last = subs
        time.sleep(0.3)
    return last


def device_loss_mid_stream():
    """The device is lost (TENSORD_FAULT_DEVICE_LOST) while a get streams:
    that connection ends, the daemon recovers and serves on, nothing of
    the stream is left (fds), the sanitizers see no use of freed memory."""
    with Daemon(STAGING) as d:
        c, s = start_stream(d)
        subs = settled_submissions(c)
        s.close()
    os.environ["TENSORD_FAULT_DEVICE_LOST"] = str(subs + 1)
    try:
        d = Daemon(STAGING).start()
    finally:
        del os.environ["TENSORD_FAULT_DEVICE_LOST"]
    with d:
        c, s = start_stream(d)
        check(settled_submissions(c) == subs, "submissions differ")
        err, _ = c.call_full("op.run", {"op": "add", "inputs": ["big", "big"], "out": "x"})
        check(err is not None and err["name"] == "DEVICE_LOST", "no device loss: %r" % (err,))
        c.call("ping")   # the recovery ran
        n = 0
        while True:
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            n += len(chunk)
        check(n < N, "the stream went on after the device reset (%d bytes)" % n)
        s.close()
        check(c.call("info")["device_resets"] == 1, "no device reset")
        before = {f: os.readlink("/proc/%d/fd/%s" % (d.proc.pid, f)) for f in os.listdir("/proc/%d/fd" % d.proc.pid)}
        base = len(before)
        c2, s = start_stream(d)
        c2.close()
        s.close()
        deadline = time.monotonic() + 10
        while len(os.listdir("/proc/%d/fd" % d.proc.pid)) != base and time.monotonic() < deadline:
            time.sleep(0.05)
        after = {f: os.readlink("/proc/%d/fd/%s" % (d.proc.pid, f)) for f in os.listdir("/proc/%d/fd" % d.proc.pid)}
        check(len(after) == base, "fds left after the reset: %r" % ({k: v for k, v in after.items() if before.get(k) != v},))


def mem_of(c, dev):
    return [x["memory_used"] for x in c.call("info")["devices"] if x["active"] and x["id"] == dev][0]


def other_device_reset_mid_stream():
    """Two devices (--device 0,0): device 1 is lost (TENSORD_FAULT_DEVICE_LOST)
    while a get streams from a snapshot on device 0. Device 0 is not
    re-created, so the stream goes on to the last byte, and its snapshot is
    released at the end (device 0's memory back to nothing once the
    tensors are gone). Before the fix the snapshot was never released and
    the stream was cut."""
    os.environ["TENSORD_FAULT_DEVICE_LOST"] = "40"
    try:
        d = Daemon(STAGING + ["--device", "0,0"]).start()
    finally:
        del os.environ["TENSORD_FAULT_DEVICE_LOST"]
    with d:
        c = d.client()
        a = data(1)
        base0 = mem_of(c, 0)
        c.call("tensor.put", {"name": "big", "dtype": "u8", "shape": [N], "data": a, "device": 0})
        c.call("tensor.put", {"name": "one", "dtype": "f32", "shape": [4], "data": b"\0" * 16, "device": 1})
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        s.connect(d.sock)
        s.sendall(req(1, "tensor.get", {"name": "big"}))
        first = s.recv(1 << 16)
        err = None
        for _ in range(100):
            err, _ = c.call_full("op.run", {"op": "add", "inputs": ["one", "one"], "device": 1})
            if err is not None:
                break
        check(err is not None and err["name"] == "DEVICE_LOST", "device 1 not lost: %r" % (err,))
        c.call("ping")   # the recovery ran
        check(c.call("info")["device_resets"] == 1, "no device reset")
        u = msgpack.Unpacker(raw=False, max_buffer_size=2**31 - 1)
        u.feed(first)
        got = list(u)
        while not got:
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            u.feed(chunk)
            got.extend(u)
        check(len(got) == 1 and got[0][2] is None and got[0][3]["data"] == a,
              "the stream from device 0 was cut or wrong after device 1's reset")
        s.close()
        for name in ("big", "one"):
            c.call_full("tensor.delete", {"name": name})
        deadline = time.monotonic() + 10
        while mem_of(c, 0) != base0 and time.monotonic() < deadline:
            time.sleep(0.05)
        check(mem_of(c, 0) == base0, "device 0 holds %d bytes after the stream ended, %d before (its "
              "snapshot)" % (mem_of(c, 0), base0))


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def pipelined_parts():
    """The snapshot goes out through parts of host memory that the device
    fills ahead of the socket (tensor_stream.c): several readers at once,
    more parts in flight than the device has watched command buffers, a
    size that is no multiple of the part size, every byte as put. Clients
    that leave while parts are in flight, round after round, leave no fd,
    no device memory and no host memory behind (a part kept per stream
    would grow the daemon by tens of MiB a round)."""
    odd = N + 12345
    a = (hashlib.sha256(b"odd").digest() * (odd // 32 + 1))[:odd]
    with Daemon(STAGING) as d:
        c = d.client()
        c.call("tensor.put", {"name": "odd", "dtype": "u8", "shape": [odd], "data": a})
        c.call("tensor.put", {"name": "big", "dtype": "u8", "shape": [N], "data": data(3)})
        socks = []
        for i in range(6):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(d.sock)
            s.sendall(req(i, "tensor.get", {"name": "odd" if i % 2 else "big"}))
            socks.append(s)
        for i, s in enumerate(socks):
            r = read_answers(s, 1)
            check(len(r) == 1 and r[0][2] is None and r[0][3]["data"] == (a if i % 2 else data(3)),
                  "concurrent streamed get %d is not the tensor as put" % i)
            s.close()
        base_fds, base_mem = settled_fds(d), used(c)
        rss = []
        for _ in range(4):
            socks = []
            for i in range(12):
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
                s.connect(d.sock)
                s.sendall(req(i, "tensor.get", {"name": "odd"}))
                socks.append(s)
            for s in socks:
                s.recv(1 << 16)
            for s in socks:
                s.close()
            back_to_baseline(d, c, base_fds, base_mem, "after clients left mid-stream")
            rss.append(rss_kib(d.proc.pid))
        # 12 streams of 3 parts of 4 MiB leaked a round would be 144 MiB. Not
        # compared under ASan (LOAD_RSS_CHECK=0, as .ci/test sets for the
        # load test): its quarantine keeps freed memory resident, and a run
        # there grew 69 MiB with nothing leaked (LeakSanitizer checks that).
        check(os.environ.get("LOAD_RSS_CHECK", "1") == "0" or rss[-1] - rss[0] < 64 << 10,
              "the daemon grew by %d KiB over 3 rounds of clients leaving mid-stream (RSS %r)"
              % (rss[-1] - rss[0], rss))
        r = c.call("tensor.get", {"name": "odd"})
        check(r["data"] == a, "a get after the clients left is not the tensor as put")


def main():
    pipelined_parts()
    other_device_reset_mid_stream()
    device_loss_mid_stream()
    with Daemon(["--config", "/dev/null"]) as d:
        # host-mapped memory (lavapipe's default): no snapshot, the plain answer
        c, s = start_stream(d)
        check(c.call("info")["devices"][0]["memory_used"] < 2 * N, "a snapshot on mapped memory")
        s.close()
        c.close()
    with Daemon(STAGING) as d:
        c = d.client()
        a, b = data(1), data(2)
        c.call("tensor.put", {"name": "big", "dtype": "u8", "shape": [N], "data": a})
        base_fds, base_mem = len(os.listdir("/proc/%d/fd" % d.proc.pid)), used(c)

        # pipelined on one connection: get, put new bytes, get
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(d.sock)
        s.sendall(req(1, "tensor.get", {"name": "big"}) +
                  req(2, "tensor.put", {"name": "big", "dtype": "u8", "shape": [N], "data": b}) +
                  req(3, "tensor.get", {"name": "big"}))
        r = read_answers(s, 3)
        check([m[1] for m in r] == [1, 2, 3] and all(m[2] is None for m in r),
              "pipelined answers: %r" % ([(m[1], m[2]) for m in r],))
        check(r[0][3]["data"] == a, "the first get is not the tensor as it was")
        check(r[2][3]["data"] == b, "the second get is not the new tensor")
        s.close()

        # a slow reader: another client replaces and deletes the tensor meanwhile,
        # and its pings are answered at once
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        s.connect(d.sock)
        s.sendall(req(1, "tensor.get", {"name": "big"}))
        first = s.recv(1 << 16)
        # streamed: the answer waits as a device snapshot, not as 40 MiB of output
        check(used(c) >= base_mem + N, "no snapshot while the answer streams: %d used, %d before"
              % (used(c), base_mem))
        t0 = time.monotonic()
        c.call("ping")
        check(time.monotonic() - t0 < 2, "a ping waited %.1f s behind a stalled stream"
              % (time.monotonic() - t0))
        c.call("tensor.put", {"name": "big", "dtype": "u8", "shape": [N], "data": a})
        c.call("tensor.delete", {"name": "big"})
        u = msgpack.Unpacker(raw=False, max_buffer_size=2**31 - 1)
        u.feed(first)
        got = list(u)
        while not got:
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            u.feed(chunk)
            got = list(u)
        check(got and got[0][2] is None and got[0][3]["data"] == b,
              "the slow reader did not get the tensor as it was when asked")
        s.close()
        c.call("tensor.put", {"name": "big", "dtype": "u8", "shape": [N], "data": a})

        # a client that stopped sending still reads the whole answer
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(d.sock)
        s.sendall(req(7, "tensor.get", {"name": "big"}))
        s.shutdown(socket.SHUT_WR)
        r = read_answers(s, 1)
        check(len(r) == 1 and r[0][3]["data"] == a, "after SHUT_WR the answer was cut")
        s.close()

        # one that leaves mid-answer
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(d.sock)
        s.sendall(req(8, "tensor.get", {"name": "big"}))
        s.recv(1 << 16)
        s.close()
        back_to_baseline(d, c, base_fds, base_mem, "after a client left mid-answer")
    if failures:
        print("%d failure(s)" % len(failures))
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Memory passed as a memfd with SCM_RIGHTS (docs/protocol.md, "Passing
memory"): tensor.put reads a sealed memfd, tensor.get writes into one, and
every bad input (too small, unsealed, not a memfd, an fd nobody names, an
index out of range, too many fds) is a clear error after which the daemon's
open file descriptors (/proc/PID/fd) are back at the baseline. Written from
the spec with a plain msgpack client; run with /usr/bin/python3, TENSORD_BIN
names the daemon."""
import fcntl
import os
import socket
import sys
import tempfile
import time

import msgpack
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from daemon import Daemon  # noqa: E402

failures = []
SEALS_PUT = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_WRITE


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL", what, flush=True)
    return cond


def fd_count(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


class Conn:
    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(60)
        self.sock.connect(path)
        self.unpacker = msgpack.Unpacker(raw=False, max_buffer_size=2**31 - 1)
        self.next_id = 1

    def send(self, method, params, fds=()):
        msgid = self.next_id
        self.next_id += 1
        data = msgpack.packb([0, msgid, method, [params]], use_bin_type=True)
        if fds:
            n = socket.send_fds(self.sock, [data], list(fds))
            self.sock.sendall(data[n:])
        else:
            self.sock.sendall(data)
        return msgid

    def recv(self):
        while True:
            try:
                return next(self.unpacker)
            except StopIteration:
                pass
            data = self.sock.recv(1 << 20)
            if not data:
                return None
            self.unpacker.feed(data)

    def call(self, method, params, fds=()):
        """(error, result)."""
        msgid = self.send(method, params, fds)
        msg = self.recv()
        assert msg is not None and msg[0] == 1 and msg[1] == msgid, msg
        return msg[2], msg[3]

    def close(self):
        self.sock.close()


def memfd(data=b"", size=None, seals=SEALS_PUT):
    fd = os.memfd_create("t", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, len(data) if size is None else size)
    if data:
        os.pwrite(fd, data, 0)
    if seals:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
    return fd


def expect_error(c, what, method, params, fds, name, words):
    err, _ = c.call(method, params, fds)
    for fd in fds:
        os.close(fd)
    if check(err is not None, "%s: succeeded" % what):
        check(err["name"] == name, "%s: %s, wanted %s (%s)" % (what, err["name"], name, err["message"]))
        check(words in err["message"], "%s: message %r lacks %r" % (what, err["message"], words))


def sparse_puts(c):
    """A put from a memfd with unwritten pages (holes: a sparse memfd) is
    refused before anything is mapped, so the daemon allocates none of the
    client's pages: the memfd's blocks do not grow (issue 31, item 4; the old
    code faulted all 64 MiB in). The same memfd written in full is taken."""
    n = 64 << 20
    put = {"name": "sparse", "dtype": "u8", "shape": [n], "fd": 0}
    for what, written in (("unwritten", 0), ("all but the last page", n - 4096)):
        fd = memfd(size=n, seals=0)
        if written:
            os.pwrite(fd, b"\x01" * written, 0)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS_PUT)
        blocks = os.fstat(fd).st_blocks
        err, _ = c.call("tensor.put", put, [fd])
        after = os.fstat(fd).st_blocks
        os.close(fd)
        if check(err is not None, "sparse put (%s): succeeded" % what):
            check(err["name"] == "INVALID_ARGUMENT" and "holes" in err["message"],
                  "sparse put (%s): %r" % (what, err))
        check(after == blocks, "sparse put (%s) allocated the memfd's pages: %d blocks, %d before"
              % (what, after, blocks))
    fd = memfd(b"\x02" * n)
    err, res = c.call("tensor.put", put, [fd])
    os.close(fd)
    check(err is None and res["bytes"] == n, "put from a memfd written in full: %r" % (err,))
    err, _ = c.call("tensor.delete", {"name": "sparse"})
    check(err is None, "delete: %r" % (err,))


def main():
    with Daemon() as d:
        pid = d.proc.pid
        c = Conn(d.sock)
        c.call("ping", {})
        base = fd_count(pid)
        ref = np.arange(300000, dtype=np.float32) * 0.5
        raw = ref.tobytes()

        # put from a sealed memfd at an unaligned offset, get on the plain path
        fd = memfd(b"x" * 4100 + raw)
        err, res = c.call("tensor.put", {"name": "a", "dtype": "f32", "shape": [len(ref)],
                                         "fd": 0, "offset": 4100}, [fd])
        os.close(fd)
        check(err is None and res["bytes"] == len(raw), "memfd put: %r" % (err,))
        err, res = c.call("tensor.get", {"name": "a"})
        check(err is None and res["data"] == raw, "plain get after memfd put differs")

        # the client closes its copy at once: the daemon's own copy is used
        fd = memfd(raw)
        c.send("tensor.put", {"name": "b", "dtype": "f32", "shape": [len(ref)], "fd": 0}, [fd])
        os.close(fd)
        msg = c.recv()
        check(msg[2] is None, "put after the client closed its fd: %r" % (msg[2],))

        # get into an allocated memfd: exact size, and at an unaligned offset
        for what, size, off in (("exact", len(raw), 0), ("offset", len(raw) + 8200, 8200)):
            fd = memfd(b"\xee" * size, seals=fcntl.F_SEAL_SHRINK)   # written: in memory
            err, res = c.call("tensor.get", {"name": "b", "fd": 0, "offset": off}, [fd])
            got = os.pread(fd, len(raw), off)
            os.close(fd)
            check(err is None and "data" not in res and res["bytes"] == len(raw),
                  "memfd get %s: %r %r" % (what, err, res and sorted(res)))
            check(got == raw, "memfd get %s: bytes differ" % what)

        # bad inputs: each a clear error; the old tensor stays as it was
        put = {"name": "a", "dtype": "f32", "shape": [len(ref)], "fd": 0}
        expect_error(c, "too small", "tensor.put", put, [memfd(raw[:-4])],
                     "INVALID_ARGUMENT", "do not fit")
        expect_error(c, "unsealed", "tensor.put", put, [memfd(raw, seals=0)],
                     "FAILED_PRECONDITION", "F_SEAL_WRITE")
        expect_error(c, "shrink only", "tensor.put", put, [memfd(raw, seals=fcntl.F_SEAL_SHRINK)],
                     "FAILED_PRECONDITION", "F_SEAL_WRITE")
        r, w = os.pipe()
        os.close(w)
        expect_error(c, "a pipe", "tensor.put", put, [r], "INVALID_ARGUMENT", "not a memfd")
        with tempfile.TemporaryFile(dir="/var/tmp") as f:
            f.write(raw)
            f.flush()
            expect_error(c, "a regular file", "tensor.put", put, [os.dup(f.fileno())],
                         "INVALID_ARGUMENT", "not a memfd")
        try:
            huge = os.memfd_create("h", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING | os.MFD_HUGETLB)
        except OSError:
            huge = None   # no hugetlbfs here
        if huge is not None:
            fcntl.fcntl(huge, fcntl.F_ADD_SEALS, SEALS_PUT)
            expect_error(c, "a hugetlb memfd", "tensor.put", put, [huge], "INVALID_ARGUMENT",
                         "MFD_HUGETLB")
        expect_error(c, "index out of range", "tensor.put", dict(put, fd=1), [memfd(raw)],
                     "INVALID_ARGUMENT", "only 1 file descriptor")
        expect_error(c, "fd without an fd", "tensor.put", put, [],
                     "INVALID_ARGUMENT", "no file descriptor came")
        expect_error(c, "fds without fd param", "tensor.put",
                     {"name": "a", "dtype": "f32", "shape": [1], "data": b"\0" * 4}, [memfd(raw)],
                     "INVALID_ARGUMENT", "no fd parameter")
        expect_error(c, "two fds for one", "tensor.put", put, [memfd(raw), memfd(raw)],
                     "INVALID_ARGUMENT", "it uses one")
        expect_error(c, "data and fd", "tensor.put", dict(put, data=raw), [memfd(raw)],
                     "INVALID_ARGUMENT", "one of them")
        expect_error(c, "offset without fd", "tensor.get", {"name": "a", "offset": 0}, [],
                     "INVALID_ARGUMENT", "offset goes with fd")
        expect_error(c, "fd with ping", "tensor.stat", {"name": "a"}, [memfd(raw)],
                     "INVALID_ARGUMENT", "takes none")
        expect_error(c, "get into a write-sealed memfd", "tensor.get", {"name": "a", "fd": 0},
                     [memfd(raw)], "INVALID_ARGUMENT", "sealed against writing")
        rw = memfd(size=len(raw), seals=fcntl.F_SEAL_SHRINK)
        ro = os.open("/proc/self/fd/%d" % rw, os.O_RDONLY | os.O_CLOEXEC)
        os.close(rw)
        expect_error(c, "get into a read-only fd", "tensor.get", {"name": "a", "fd": 0},
                     [ro], "INVALID_ARGUMENT", "read-only")
        expect_error(c, "get, unsealed", "tensor.get", {"name": "a", "fd": 0},
                     [memfd(size=len(raw), seals=0)], "FAILED_PRECONDITION", "F_SEAL_SHRINK")
        expect_error(c, "get, too small", "tensor.get", {"name": "a", "fd": 0},
                     [memfd(b"x" * 16, seals=fcntl.F_SEAL_SHRINK)], "INVALID_ARGUMENT", "do not fit")
        # pages the client did not make would be charged to the daemon (only
        # fallocate()d pages count as holes too)
        half = memfd(size=len(raw), seals=0)
        os.pwrite(half, raw[:8192], 0)
        fcntl.fcntl(half, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
        expect_error(c, "get, pages not allocated", "tensor.get", {"name": "a", "fd": 0}, [half],
                     "INVALID_ARGUMENT", "not all in memory")
        fa = memfd(size=len(raw), seals=0)
        os.posix_fallocate(fa, 0, len(raw))
        fcntl.fcntl(fa, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
        expect_error(c, "get, pages only fallocated", "tensor.get", {"name": "a", "fd": 0}, [fa],
                     "INVALID_ARGUMENT", "not all in memory")
        sparse_puts(c)
        err, res = c.call("tensor.get", {"name": "a"})
        check(err is None and res["data"] == raw, "a failed put changed the tensor")
        check(fd_count(pid) == base, "after the bad inputs: %d fds, %d before" % (fd_count(pid), base))

        # fds with bytes that never make a message, then the client leaves
        c2 = Conn(d.sock)
        socket.send_fds(c2.sock, [b"\x94\x00"], [memfd(raw)])
        time.sleep(0.2)
        check(fd_count(pid) == base + 2, "a waiting fd: %d fds, %d + 2 expected" % (fd_count(pid), base))
        c2.close()
        # more fds with one sendmsg than allowed: the stream ends with a reason
        c3 = Conn(d.sock)
        fds = [memfd(raw) for _ in range(5)]
        socket.send_fds(c3.sock, [msgpack.packb([0, 1, "ping", []])], fds)
        for fd in fds:
            os.close(fd)
        msg = c3.recv()
        check(msg is not None and msg[0] == 2 and "file descriptors" in str(msg[2]),
              "5 fds with one sendmsg: %r" % (msg,))
        check(c3.recv() is None, "5 fds: the connection stays open")
        c3.close()
        # more fds waiting on one connection than allowed
        c4 = Conn(d.sock)
        for _ in range(5):
            fds = [memfd(raw) for _ in range(4)]
            try:
                socket.send_fds(c4.sock, [b"\x94"], fds)
            except OSError:
                pass
            for fd in fds:
                os.close(fd)
        msg = c4.recv()
        check(msg is not None and msg[0] == 2 and "file descriptors" in str(msg[2]),
              "20 fds waiting: %r" % (msg,))
        c4.close()
        deadline = time.monotonic() + 10
        while fd_count(pid) != base and time.monotonic() < deadline:
            time.sleep(0.05)
        check(fd_count(pid) == base, "at the end: %d fds, %d before" % (fd_count(pid), base))
        c.close()
    if failures:
        print("%d failure(s)" % len(failures))
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""memfd transfers the device copies itself (docs/architecture.md, "Transfers"):
with tensor memory the host does not map (host_mapped = false, as on a
discrete GPU) and a device with VK_EXT_external_memory_host (lavapipe has
it), tensor.put and tensor.get through a memfd import the daemon's mapping of
it and one device copy moves the bytes; plain-path puts and gets of 1 MiB or
more copy straight from and into the daemon's buffers. Checked against
independent references (the bytes generated here), in two daemons: one that
imports, one with four copy threads (the staged copies, split over them), and
one told its driver refuses read-only pages (TENSORD_HOST_IMPORT_READ_ONLY=0:
puts copy, gets import):
sizes page-aligned and not, below the import's minimum and above the
streamed get's, offsets aligned and not, guard bytes around a get's range
untouched, a memfd the client closes (and unmaps) right after sending,
pipelined transfers and a client that leaves mid-copy, a put of
more than one chunk (chained submissions), a get into a memfd
with holes past its range (no page of them allocated), the size limit, and
the daemon's open fds back at the baseline. Run with /usr/bin/python3."""
import fcntl
import mmap
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from daemon import Daemon  # noqa: E402
from test_memfd import Conn, memfd, fd_count, SEALS_PUT  # noqa: E402

failures = []
MIB = 1 << 20
IMPORTED = "the device copies the memfd itself"


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL", what, flush=True)
    return cond


def data(n, seed):
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def put_fd(c, name, raw, off=0, tail=777, **extra):
    fd = memfd(b"\x55" * off + raw + b"\x66" * tail)
    err, res = c.call("tensor.put", dict({"name": name, "dtype": "u8", "shape": [len(raw)],
                                          "fd": 0, "offset": off}, **extra), [fd])
    os.close(fd)
    return err, res


def get_fd(c, name, n, off=0, tail=777):
    """(error, the bytes got, whether the guards around them are intact)."""
    size = off + n + tail
    fd = memfd(b"\xee" * size, seals=fcntl.F_SEAL_SHRINK)
    err, _ = c.call("tensor.get", {"name": name, "fd": 0, "offset": off}, [fd])
    got = os.pread(fd, size, 0)
    os.close(fd)
    return err, got[off:off + n], got[:off] == b"\xee" * off and got[off + n:] == b"\xee" * tail


def sizes_and_offsets(c, tag):
    for n in (MIB, MIB + 12, 300 * 1024 + 3, 4096, 16 * MIB + 5):
        for off in (0, 4096, 4100):
            raw = data(n, n + off)
            what = "%s %d bytes at %d" % (tag, n, off)
            err, res = put_fd(c, "m", raw, off)
            check(err is None and res["bytes"] == n, "%s: memfd put: %r" % (what, err))
            err, res = c.call("tensor.get", {"name": "m"})
            check(err is None and res["data"] == raw, "%s: plain get after memfd put differs" % what)
            err, got, guards = get_fd(c, "m", n, off)
            check(err is None and got == raw, "%s: memfd get after memfd put differs (%r)" % (what, err))
            check(guards, "%s: memfd get wrote outside its range" % what)
            # the plain path both ways, against the memfd get
            err, _ = c.call("tensor.put", {"name": "s", "dtype": "u8", "shape": [n], "data": raw})
            check(err is None, "%s: plain put: %r" % (what, err))
            err, got, guards = get_fd(c, "s", n, off)
            check(err is None and got == raw and guards, "%s: memfd get after plain put differs" % what)


def closed_right_away(c, d, tag):
    raw = data(4 * MIB, 7)
    # put: the client closes and unmaps its memfd as soon as it is sent
    fd = memfd(raw)
    m = mmap.mmap(fd, len(raw), mmap.MAP_SHARED, mmap.PROT_READ)
    c.send("tensor.put", {"name": "c", "dtype": "u8", "shape": [len(raw)], "fd": 0}, [fd])
    os.close(fd)
    m.close()
    msg = c.recv()
    check(msg[2] is None, "%s: put, memfd closed at once: %r" % (tag, msg[2]))
    err, res = c.call("tensor.get", {"name": "c"})
    check(err is None and res["data"] == raw, "%s: put, memfd closed at once: bytes differ" % tag)
    # get: the only reference left is the daemon's
    fd = memfd(b"\0" * len(raw), seals=fcntl.F_SEAL_SHRINK)
    c.send("tensor.get", {"name": "c", "fd": 0}, [fd])
    os.close(fd)
    msg = c.recv()
    check(msg[2] is None and msg[3]["bytes"] == len(raw), "%s: get, memfd closed at once: %r" % (tag, msg[2]))


def pipelined(c, d, tag):
    raws = [data(2 * MIB + i * 4096 + i, 100 + i) for i in range(6)]
    fds = []
    for i, raw in enumerate(raws):
        fd = memfd(raw)
        c.send("tensor.put", {"name": "p%d" % i, "dtype": "u8", "shape": [len(raw)], "fd": 0}, [fd])
        fds.append(fd)
    gets = []
    for i, raw in enumerate(raws):
        fd = memfd(b"\1" * len(raw), seals=fcntl.F_SEAL_SHRINK)
        c.send("tensor.get", {"name": "p%d" % i, "fd": 0}, [fd])
        gets.append(fd)
    for i in range(len(raws)):
        msg = c.recv()
        check(msg[2] is None and msg[3]["name"] == "p%d" % i, "%s: pipelined put %d: %r" % (tag, i, msg[2]))
    for i, raw in enumerate(raws):
        msg = c.recv()
        check(msg[2] is None and os.pread(gets[i], len(raw), 0) == raw,
              "%s: pipelined get %d: %r or bytes differ" % (tag, i, msg[2]))
    for fd in fds + gets:
        os.close(fd)
    # a client that leaves with its copies in flight
    c2 = Conn(d.sock)
    big = data(130 * MIB + 1, 9)   # a put in two chunks
    fd = memfd(big)
    c2.send("tensor.put", {"name": "gone", "dtype": "u8", "shape": [len(big)], "fd": 0}, [fd])
    os.close(fd)
    fd = memfd(b"\2" * len(big), seals=fcntl.F_SEAL_SHRINK)
    c2.send("tensor.get", {"name": "gone", "fd": 0}, [fd])
    os.close(fd)
    c2.close()
    err, _ = c.call("ping", {})
    check(err is None, "%s: ping after a client left mid-copy: %r" % (tag, err))
    # its put still took effect (docs/architecture.md, "Completions")
    deadline = time.monotonic() + 10
    while True:
        err, res = c.call("tensor.get", {"name": "gone"})
        if err is None or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    check(err is None and res["data"] == big, "%s: the departed client's put: %r" % (tag, err))


def holes_and_limits(c, tag):
    # a get of an unaligned length into a memfd whose pages past it are
    # holes: the import's rounding must not allocate them
    n = MIB + 12
    raw = data(n, 3)
    err, _ = c.call("tensor.put", {"name": "h", "dtype": "u8", "shape": [n], "data": raw})
    fd = memfd(size=4 * MIB, seals=0)
    os.pwrite(fd, b"\xab" * n, 0)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
    before = os.fstat(fd).st_blocks
    err, _ = c.call("tensor.get", {"name": "h", "fd": 0}, [fd])
    check(err is None and os.pread(fd, n, 0) == raw, "%s: get into a memfd with holes: %r" % (tag, err))
    check(os.fstat(fd).st_blocks == before,
          "%s: the get allocated the memfd's holes (%d blocks, %d before)"
          % (tag, os.fstat(fd).st_blocks, before))
    os.close(fd)
    # the size limit holds for memfd puts (max_tensor_bytes = 136M)
    fd = memfd(size=137 * MIB)
    err, _ = c.call("tensor.put", {"name": "big", "dtype": "u8", "shape": [137 * MIB], "fd": 0}, [fd])
    os.close(fd)
    check(err is not None and err["name"] == "RESOURCE_EXHAUSTED",
          "%s: a memfd put over max_tensor_bytes: %r" % (tag, err))
    # too small, not sealed: the checks before the import
    fd = memfd(b"\0" * (MIB - 1))
    err, _ = c.call("tensor.put", {"name": "x", "dtype": "u8", "shape": [MIB], "fd": 0}, [fd])
    os.close(fd)
    check(err is not None and "do not fit" in err["message"], "%s: too small: %r" % (tag, err))
    fd = memfd(b"\0" * MIB, seals=0)
    err, _ = c.call("tensor.put", {"name": "x", "dtype": "u8", "shape": [MIB], "fd": 0}, [fd])
    os.close(fd)
    check(err is not None and err["name"] == "FAILED_PRECONDITION", "%s: unsealed: %r" % (tag, err))
    # a replacement with a mode through the import
    err, res = put_fd(c, "m", data(MIB, 5), mode="world-read")
    check(err is None and res["mode"] == "world-read", "%s: put with mode: %r %r" % (tag, err, res))


d_sock = [None]


def chunked(c, tag):
    # past TENSOR_IMPORT_CHUNK (128 MiB): a put in two submissions, chained;
    # a get in one
    n = 130 * MIB + 3
    raw = data(n, 11)
    err, res = put_fd(c, "k", raw, 4100)
    check(err is None and res["bytes"] == n, "%s: chunked memfd put: %r" % (tag, err))
    err, got, guards = get_fd(c, "k", n, 4100)
    check(err is None and got == raw and guards, "%s: chunked memfd get: %r" % (tag, err))
    # another client deletes the tensor and fills its memory again while a
    # get copies it: the get answers the bytes as they were, or not found
    # when the delete came first
    c2 = Conn(d_sock[0])
    fd = memfd(b"\3" * n, seals=fcntl.F_SEAL_SHRINK)
    c.send("tensor.get", {"name": "k", "fd": 0}, [fd])
    c2.send("tensor.delete", {"name": "k"})
    other = memfd(b"\x77" * n)
    c2.send("tensor.put", {"name": "k2", "dtype": "u8", "shape": [n], "fd": 0}, [other])
    os.close(other)
    msg = c.recv()
    got = os.pread(fd, n, 0)
    os.close(fd)
    check((msg[2] is None and got == raw) or (msg[2] is not None and msg[2]["name"] == "NOT_FOUND"),
          "%s: a get while the tensor is deleted and its memory reused: %r, bytes %s" %
          (tag, msg[2], "equal" if got == raw else "differ"))
    for _ in range(2):
        msg = c2.recv()
        check(msg[2] is None, "%s: delete/put beside a get: %r" % (tag, msg[2]))
    c2.close()
    c.call("tensor.delete", {"name": "k2"})


def run(tag, env):
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    tmp = tempfile.mkdtemp(prefix="tensord-import-")
    conf = os.path.join(tmp, "t.conf")
    with open(conf, "w") as f:
        f.write("host_mapped = false\nmax_tensor_bytes = 136M\n")
    try:
        with Daemon(["--config", conf, "-v"]) as d:
            c = Conn(d.sock)
            d_sock[0] = d.sock
            c.call("ping", {})
            base = fd_count(d.proc.pid)
            sizes_and_offsets(c, tag)
            closed_right_away(c, d, tag)
            pipelined(c, d, tag)
            holes_and_limits(c, tag)
            chunked(c, tag)
            deadline = time.monotonic() + 10
            while fd_count(d.proc.pid) != base and time.monotonic() < deadline:
                time.sleep(0.05)
            check(fd_count(d.proc.pid) == base,
                  "%s: at the end: %d fds, %d before" % (tag, fd_count(d.proc.pid), base))
            c.close()
            with open(d.log, errors="replace") as f:
                log = f.read()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return log


def main():
    log = run("import", {"TENSORD_COPY_THREADS": "1"})
    check("tensor.put of 1048576 bytes: " + IMPORTED in log, "import: no put was imported")
    check("tensor.get of 1048576 bytes: " + IMPORTED in log, "import: no get was imported")
    check("tensor.put of 4096 bytes: " + IMPORTED not in log, "import: 4096 bytes imported")
    head = "tensor.put of %d bytes: %s (bytes " % (130 * MIB + 3, IMPORTED)
    check(head + "0..%d)" % (128 * MIB) in log and
          head + "%d..%d)" % (128 * MIB, 130 * MIB + 3) in log,
          "import: the 130 MiB put was not copied in two chunks")
    head = "tensor.get of %d bytes: %s (bytes " % (130 * MIB + 3, IMPORTED)
    check(head + "0..%d)" % (130 * MIB + 3) in log, "import: the 130 MiB get was not one copy")
    # four copy threads: the staged copy is faster than pinning the pages
    # (TENSOR_IMPORT_MAX_COPY_THREADS), so nothing is imported, and every
    # staged copy above is split over the threads
    log = run("staging", {"TENSORD_COPY_THREADS": "4"})
    check(IMPORTED not in log, "staging: imported with four copy threads")
    # A driver that refuses read-only pages (NVIDIA 580, whose later
    # allocations fail after one refused import): puts copy, and no import
    # is ever attempted for them; gets are still imported.
    log = run("no read-only", {"TENSORD_HOST_IMPORT_READ_ONLY": "0", "TENSORD_COPY_THREADS": "1"})
    check("tensor.put of 1048576 bytes: " + IMPORTED not in log,
          "no read-only: a put was imported from read-only pages")
    check("tensor.get of 1048576 bytes: " + IMPORTED in log, "no read-only: no get was imported")
    check("host memory failed" not in log, "no read-only: an import was attempted and refused")
    check("host memory import: memfd gets and" in log, "no read-only: the start-up line does not say so")
    if failures:
        print("%d failure(s)" % len(failures))
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())

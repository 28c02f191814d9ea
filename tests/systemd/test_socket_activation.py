"""tensord under socket activation, as tensord.socket starts it.

systemd-socket-activate (package systemd) listens on a socket, waits for the
first connection, then execs tensord with LISTEN_FDS=1 and the listening
socket as fd 3, exactly as systemd does with Accept=no. The first client,
which connected before the daemon existed, must be served; so must later
ones; --socket must be ignored; the socket file belongs to the activator and
stays when tensord stops. Bad activation (two sockets, a non-socket) is
refused with a clear message.

Run with /usr/bin/python3; TENSORD_BIN names the daemon.
"""
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from daemon import Client  # noqa: E402

BIN = os.environ["TENSORD_BIN"]
# systemd-socket-activate passes only the variables named with -E.
PASS_ENV = ["VK_ICD_FILENAMES", "VK_DRIVER_FILES", "HOME", "ASAN_OPTIONS",
            "UBSAN_OPTIONS", "LSAN_OPTIONS", "MALLOC_PERTURB_"]


PASSED = 0


def ok(msg):
    global PASSED
    PASSED += 1
    print("ok: " + msg)


def fail(msg, log=None):
    sys.stderr.write("FAIL: %s\n" % msg)
    if log and os.path.exists(log):
        sys.stderr.write("---- tensord log ----\n%s---- end ----\n" % open(log).read())
    sys.exit(1)


def wait_for_path(path, proc, timeout=10):
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if proc.poll() is not None:
            fail("systemd-socket-activate exited with %d" % proc.returncode)
        if time.monotonic() > deadline:
            fail("%s did not appear" % path)
        time.sleep(0.02)


def activated(tmp):
    activator = shutil.which("systemd-socket-activate")
    if not activator:
        fail("systemd-socket-activate not found (bash .ci/deps installs package systemd)")
    sock = os.path.join(tmp, "activated.sock")
    ignored = os.path.join(tmp, "ignored.sock")
    log = os.path.join(tmp, "tensord.log")
    argv = [activator, "-l", sock]
    for name in PASS_ENV:
        if name in os.environ:
            argv += ["-E", name]
    argv += ["--", BIN, "--socket", ignored, "--state-dir", os.path.join(tmp, "state"),
             "--device", "auto", "-v"]
    with open(log, "wb") as logf:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=logf,
                                stderr=subprocess.STDOUT)
    try:
        wait_for_path(sock, proc)
        # The first client connects while only the activator exists: its
        # connection waits in the backlog of the socket tensord inherits.
        first = Client(sock, timeout=60)
        msgid = first.request("ping")
        err, res = first.response(msgid)
        if err is not None or not res.get("pong"):
            fail("first client: ping answered %r %r" % (err, res), log)
        ok("the client that triggered activation is served")
        info = first.call("info")
        if info["pid"] != proc.pid:
            fail("info pid %d is not the activated process %d (activator execs it)"
                 % (info["pid"], proc.pid), log)
        # More clients, while the first stays connected.
        with Client(sock) as second:
            second.call("tensor.put", {"name": "x", "dtype": "i32", "shape": [2],
                                       "data": b"\x01\x00\x00\x00\x02\x00\x00\x00"})
            got = first.call("tensor.get", {"name": "x"})
            if got["data"] != b"\x01\x00\x00\x00\x02\x00\x00\x00":
                fail("the second client's tensor reads back wrong", log)
            if first.call("info")["connections"] != 2:
                fail("info does not count both clients", log)
        ok("later clients share the daemon")
        first.close()
        if os.path.exists(ignored):
            fail("--socket was used although systemd passed a socket", log)
        text = open(log).read()
        if "serving the socket passed by systemd" not in text:
            fail("the log does not say the systemd socket is served", log)
        ok("--socket is ignored under activation")
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(30)
        if rc != 0:
            fail("tensord exited with %d on SIGTERM" % rc, log)
        if not os.path.exists(sock):
            fail("tensord removed the socket file it did not create", log)
        ok("SIGTERM exits 0 and leaves the activator's socket file")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def bad_activation(tmp, what, fds, expect):
    """Start tensord with LISTEN_FDS describing `fds` (opened as fd 3, 4...)."""
    log = os.path.join(tmp, "bad.log")

    def place_fds():
        # In the child: move the descriptors out of the way, then to 3, 4...
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 100) for fd in fds]
        for i, fd in enumerate(high):
            os.dup2(fd, 3 + i)
    # LISTEN_PID must be the daemon's own pid: set it in a shell that execs it.
    script = 'LISTEN_PID=$$ LISTEN_FDS=%d exec "$0" "$@"' % len(fds)
    with open(log, "wb") as logf:
        proc = subprocess.run(
            ["/bin/sh", "-c", script, BIN, "--socket", os.path.join(tmp, "bad.sock"),
             "--state-dir", os.path.join(tmp, "state")],
            stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
            preexec_fn=place_fds, pass_fds=tuple(range(3, 3 + len(fds))), timeout=60)
    text = open(log).read()
    if proc.returncode != 1 or expect not in text:
        fail("%s: expected exit 1 and %r, got %d" % (what, expect, proc.returncode), log)
    ok("%s is refused: %s" % (what, expect))


def main():
    tmp = tempfile.mkdtemp(prefix="tensord-activate-", dir="/tmp")
    try:
        activated(tmp)
        a = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        a.bind(os.path.join(tmp, "a.sock"))
        a.listen()
        b = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        b.bind(os.path.join(tmp, "b.sock"))
        b.listen()
        bad_activation(tmp, "two sockets", [a.fileno(), b.fileno()],
                       "passed 2 sockets; expected one")
        f = os.open(os.path.join(tmp, "plain-file"), os.O_RDWR | os.O_CREAT, 0o600)
        bad_activation(tmp, "a plain file", [f], "something other than a listening Unix stream socket")
        os.close(f)
        d = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        d.bind(os.path.join(tmp, "d.sock"))
        bad_activation(tmp, "a datagram socket", [d.fileno()],
                       "something other than a listening Unix stream socket")
        print("%d passed, 0 failed" % PASSED)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

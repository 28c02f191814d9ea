"""tensord's systemd notifications, read from a NOTIFY_SOCKET of our own.

The test binds an AF_UNIX datagram socket, as systemd does, and starts
tensord with NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID (its own pid, set
by a shell that execs it). It checks:
- READY=1 comes from the daemon's pid, once, and only when the socket
  already serves; its STATUS= describes the empty store;
- WATCHDOG=1 arrives at about half of WATCHDOG_USEC, from the event loop;
- STATUS= follows tensors, bytes and clients;
- SIGHUP: RELOADING=1 (with MONOTONIC_USEC=), then READY=1; reloadable keys
  take effect (max_tensors, verbose) and each change is logged ("reload:
  max_tensors 5 -> 4"), start-up-only keys are logged with both values and
  kept, unchanged keys are not logged, a config that does not parse changes
  nothing and shows in STATUS= (the running settings kept);
- SIGTERM: STOPPING=1 and exit 0;
- a WATCHDOG_PID naming another process means no watchdog pings;
- logging: "<N>" priority prefixes when stderr is the stream JOURNAL_STREAM
  names, plain "tensord: " lines when it names something else.

Run with /usr/bin/python3; TENSORD_BIN names the daemon.
"""
import array
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from daemon import Client, RPCError  # noqa: E402

BIN = os.environ["TENSORD_BIN"]
PASSED = 0
WATCHDOG_USEC = 400000


def ok(msg):
    global PASSED
    PASSED += 1
    print("ok: " + msg)


class Fail(Exception):
    pass


class Notified:
    """The NOTIFY_SOCKET end: datagrams with the sender's credentials."""

    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.path = path
        self.seen = []          # (time, pid, {key: value}) of every message

    def recv(self, timeout):
        """The next message as (pid, {key: value}), or None after `timeout` s."""
        self.sock.settimeout(max(timeout, 0.001))
        try:
            data, anc, _, _ = self.sock.recvmsg(4096, socket.CMSG_SPACE(12))
        except socket.timeout:
            return None
        pid = None
        for level, kind, cdata in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                pid, _, _ = struct.unpack("iII", cdata[:12])
        fields = {}
        for line in data.decode().split("\n"):
            if line:
                key, _, value = line.partition("=")
                fields[key] = value
        self.seen.append((time.monotonic(), pid, fields))
        return pid, fields

    def wait_for(self, pred, timeout, what):
        """Messages until one satisfies pred(fields); returns (pid, fields, skipped)."""
        deadline = time.monotonic() + timeout
        skipped = []
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Fail("no %s within %.1f s; got %r" % (what, timeout, skipped[-8:]))
            got = self.recv(left)
            if got is None:
                continue
            pid, fields = got
            if pred(fields):
                return pid, fields, skipped
            skipped.append(fields)

    def drain(self, seconds):
        """Every message in the next `seconds`."""
        out = []
        deadline = time.monotonic() + seconds
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return out
            got = self.recv(left)
            if got:
                out.append(got[1])


def start(tmp, notify_path, config, watchdog_pid="self", journal=None, log_name="tensord.log"):
    """tensord with notification variables; returns (proc, socket path, log path)."""
    sock = os.path.join(tmp, "s.sock")
    log = os.path.join(tmp, log_name)
    env = dict(os.environ)
    env["NOTIFY_SOCKET"] = notify_path
    env["WATCHDOG_USEC"] = str(WATCHDOG_USEC)
    env.pop("JOURNAL_STREAM", None)
    logf = open(log, "wb")
    if journal == "match":
        st = os.fstat(logf.fileno())
        env["JOURNAL_STREAM"] = "%d:%d" % (st.st_dev, st.st_ino)
    elif journal == "other":
        st = os.stat("/")
        env["JOURNAL_STREAM"] = "%d:%d" % (st.st_dev, st.st_ino)
    # systemd sets WATCHDOG_PID to the service's main pid: ours, via exec.
    wpid = "$$" if watchdog_pid == "self" else str(watchdog_pid)
    script = 'WATCHDOG_PID=%s; export WATCHDOG_PID; exec "$0" "$@"' % wpid
    proc = subprocess.Popen(
        ["/bin/sh", "-c", script, BIN, "--socket", sock, "--state-dir",
         os.path.join(tmp, "state"), "--config", config],
        stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT, env=env)
    logf.close()
    return proc, sock, log


def connectable(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


def put(client, name, n=4):
    return client.call("tensor.put", {"name": name, "dtype": "f32", "shape": [n],
                                      "data": bytes(4 * n)})


def status_of(fields):
    return fields.get("STATUS", "")


def main_run(tmp):
    notify_path = os.path.join(tmp, "notify.sock")
    n = Notified(notify_path)
    config = os.path.join(tmp, "tensord.conf")
    with open(config, "w") as f:
        f.write("# test configuration\nmax_tensors = 5\n")
    # The daemon's own defaults, for the values a reload logs.
    defaults = dict(l.split(" = ", 1) for l in subprocess.run(
        [BIN, "--print-config"], capture_output=True, text=True, check=True).stdout.splitlines())
    proc, sock, log = start(tmp, notify_path, config, journal="match")
    try:
        # READY=1: once, from the daemon itself, with the socket serving.
        pid, fields, before = n.wait_for(lambda f: "READY" in f, 60, "READY=1")
        if fields["READY"] != "1":
            raise Fail("READY=%s" % fields["READY"])
        if pid != proc.pid:
            raise Fail("READY=1 came from pid %r, not the daemon's %d" % (pid, proc.pid))
        if not connectable(sock):
            raise Fail("READY=1 was sent before the socket accepted connections")
        if any("READY" in f for f in before):
            raise Fail("READY sent more than once: %r" % before)
        if status_of(fields) != "serving: 0 tensors, 0 B, 0 clients":
            raise Fail("STATUS at READY: %r" % status_of(fields))
        ok("READY=1 from pid %d once the socket serves, STATUS=%r" % (pid, status_of(fields)))

        # WATCHDOG=1 at half the interval: ~0.2 s here.
        msgs = n.drain(2.0)
        pings = [m for m in msgs if m.get("WATCHDOG") == "1"]
        if not 5 <= len(pings) <= 14:
            raise Fail("%d WATCHDOG=1 in 2 s with WATCHDOG_USEC=%d (expected ~10)"
                       % (len(pings), WATCHDOG_USEC))
        ok("%d WATCHDOG=1 pings in 2 s (WATCHDOG_USEC=%d)" % (len(pings), WATCHDOG_USEC))

        # STATUS= follows the store and the clients.
        c = Client(sock)
        put(c, "a")
        put(c, "b", 256)
        want = "serving: 2 tensors, 1.0 KiB, 1 client"
        n.wait_for(lambda f: status_of(f) == want, 5, "STATUS=%r" % want)
        c2 = Client(sock)
        c2.call("ping")
        want = "serving: 2 tensors, 1.0 KiB, 2 clients"
        n.wait_for(lambda f: status_of(f) == want, 5, "STATUS=%r" % want)
        c2.close()
        c.call("tensor.delete", {"name": "b"})
        want = "serving: 1 tensor, 16 B, 1 client"
        n.wait_for(lambda f: status_of(f) == want, 5, "STATUS=%r" % want)
        ok("STATUS= follows tensors, bytes and clients")
        # Rate limit: a burst of changes gives a few updates, not one per change.
        t0 = time.monotonic()
        for i in range(40):
            put(c, "burst%d" % (i % 3), 1 + i)
        # The limit of 5 tensors holds: a, burst0..2 = 4.
        burst = [m for m in n.drain(1.5) if "STATUS" in m]
        if len(burst) > 1 + int((time.monotonic() - t0) / 1.0) + 1:
            raise Fail("%d STATUS= updates for a burst of 40 puts" % len(burst))
        ok("a burst of 40 puts gives %d STATUS= updates (at most one a second)" % len(burst))

        # SIGHUP: a lower max_tensors and verbose logging take effect.
        with open(config, "w") as f:
            f.write("max_tensors = 4\nverbose = yes\n")
        proc.send_signal(signal.SIGHUP)
        _, fields, _ = n.wait_for(lambda f: "RELOADING" in f, 10, "RELOADING=1")
        if fields["RELOADING"] != "1" or not fields.get("MONOTONIC_USEC", "").isdigit():
            raise Fail("reload message %r" % fields)
        _, fields, _ = n.wait_for(lambda f: "READY" in f, 10, "READY=1 after the reload")
        if "failed" in status_of(fields):
            raise Fail("STATUS after a good reload: %r" % status_of(fields))
        info = c.call("info")
        if info["limits"]["max_tensors"] != 4 or info["counters"]["reloads"] != 1:
            raise Fail("after reload: limits %r, reloads %r"
                       % (info["limits"], info["counters"]["reloads"]))
        try:
            put(c, "fifth")
            raise Fail("a fifth tensor was stored under max_tensors = 4")
        except RPCError as e:
            if e.error["name"] != "RESOURCE_EXHAUSTED" or "limit of 4" not in e.error["message"]:
                raise Fail("over the reloaded limit: %r" % e.error)
        put(c, "a", 8)  # replacing needs no room
        Client(sock).close()
        time.sleep(0.3)
        text = open(log).read()
        if "connection from pid" not in text:
            raise Fail("verbose = yes did not turn on debug messages")
        changes = [l for l in text.splitlines() if "reload: " in l]
        if changes != ["<5>reload: max_tensors 5 -> 4", "<5>reload: verbose no -> yes"]:
            raise Fail("the reload's log of changed keys: %r" % changes)
        ok("SIGHUP: RELOADING=1, READY=1; max_tensors 5 -> 4 and verbose take effect, "
           "each logged as 'reload: KEY OLD -> NEW'")

        # Start-up-only keys: logged with both values, kept.
        with open(config, "w") as f:
            f.write("max_tensors = 4\nverbose = yes\nblock_size = 1048576\nhost_mapped = no\n"
                    "device = cpu\nmax_tensor_bytes = 64K\n")
        proc.send_signal(signal.SIGHUP)
        n.wait_for(lambda f: "RELOADING" in f, 10, "RELOADING=1")
        n.wait_for(lambda f: "READY" in f, 10, "READY=1")
        time.sleep(0.2)
        text = open(log).read()
        changes = [l for l in text.splitlines() if "reload: " in l][2:]
        want = ["<4>reload: device changed (auto -> cpu) but applies only at start-up; kept auto",
                "<5>reload: max_tensor_bytes %s -> 64K" % defaults["max_tensor_bytes"],
                "<4>reload: block_size changed (0 -> 1M) but applies only at start-up; kept 0",
                "<4>reload: host_mapped changed (yes -> no) but applies only at start-up; kept yes"]
        if changes != want:
            raise Fail("start-up-only keys in the log: %r, expected %r" % (changes, want))
        if c.call("info")["counters"]["reloads"] != 2:
            raise Fail("second reload not counted")
        if c.call("info")["limits"]["max_tensor_bytes"] != 65536:
            raise Fail("max_tensor_bytes 64K did not take effect: %r" % c.call("info")["limits"])
        ok("start-up-only keys (device, block_size, host_mapped) are logged with both values "
           "and kept; a reloadable one in the same file takes effect")

        # A file that does not parse changes nothing and shows in STATUS=.
        with open(config, "w") as f:
            f.write("max_tensors = 100\nmax_tensors = banana\n")
        proc.send_signal(signal.SIGHUP)
        n.wait_for(lambda f: "RELOADING" in f, 10, "RELOADING=1")
        _, fields, _ = n.wait_for(lambda f: "READY" in f, 10, "READY=1 after a failed reload")
        if "last reload failed, running settings kept" not in status_of(fields) or \
                "banana" not in status_of(fields):
            raise Fail("STATUS after a failed reload: %r" % status_of(fields))
        info = c.call("info")
        if info["limits"]["max_tensors"] != 4 or info["counters"]["reload_failures"] != 1:
            raise Fail("a failed reload changed the limits or was not counted: %r %r"
                       % (info["limits"], info["counters"]))
        if "tensord.conf:2: invalid value 'banana' for 'max_tensors'" not in open(log).read():
            raise Fail("the failed reload's reason (file:line) is not logged")
        ok("a config that does not parse: nothing changes, STATUS=%r" % status_of(fields))
        # Fixed again: the note goes away.
        with open(config, "w") as f:
            f.write("max_tensors = 4\nverbose = yes\nmax_tensor_bytes = 64K\n")
        proc.send_signal(signal.SIGHUP)
        _, fields, _ = n.wait_for(lambda f: "READY" in f, 10, "READY=1")
        if "failed" in status_of(fields):
            raise Fail("the failure note outlived a good reload: %r" % status_of(fields))
        ok("the next good reload clears the failure note")
        # Nothing changed (the start-up-only keys are back at their running
        # values): said once, no key logged.
        time.sleep(0.2)
        text = open(log).read()
        tail = [l for l in text.splitlines() if "reload: " in l][6:]
        if tail != ["<5>reload: no setting changed"]:
            raise Fail("a reload that changes nothing logs %r" % tail)
        ok("a reload that changes nothing says so and logs no key")
        c.close()

        # SIGTERM: STOPPING=1, exit 0.
        proc.send_signal(signal.SIGTERM)
        n.wait_for(lambda f: f.get("STOPPING") == "1", 10, "STOPPING=1")
        rc = proc.wait(30)
        if rc != 0:
            raise Fail("exit status %d after SIGTERM" % rc)
        ok("SIGTERM: STOPPING=1 and exit 0")

        # Logging into "the journal": stderr is the stream JOURNAL_STREAM names.
        lines = [l for l in open(log).read().splitlines() if l]
        bad = [l for l in lines if not re.match(r"^<[0-7]>", l)]
        if bad or not any(l.startswith("<5>") for l in lines) or \
                not any(l.startswith("<7>") for l in lines) or \
                not any(l.startswith("<3>") for l in lines):
            raise Fail("journal-stream lines without priorities %r (of %d)" % (bad[:3], len(lines)))
        ok("on the journal stream every line carries its priority (<3> <5> <7> seen)")
    except Fail:
        sys.stderr.write("---- tensord log ----\n%s---- end ----\n" % open(log).read())
        raise
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def foreign_watchdog_pid(tmp):
    """WATCHDOG_PID of another process: the watchdog is not ours to ping.
    JOURNAL_STREAM naming another file: plain stderr lines."""
    notify_path = os.path.join(tmp, "notify2.sock")
    n = Notified(notify_path)
    config = os.path.join(tmp, "empty.conf")
    open(config, "w").close()
    proc, sock, log = start(tmp, notify_path, config, watchdog_pid=1, journal="other",
                            log_name="tensord2.log")
    try:
        n.wait_for(lambda f: "READY" in f, 60, "READY=1")
        msgs = n.drain(1.0)
        if any("WATCHDOG" in m for m in msgs):
            raise Fail("WATCHDOG=1 sent although WATCHDOG_PID is not the daemon")
        ok("no WATCHDOG=1 when WATCHDOG_PID names another process")
        proc.send_signal(signal.SIGTERM)
        if proc.wait(30) != 0:
            raise Fail("exit status %d" % proc.returncode)
        lines = [l for l in open(log).read().splitlines() if l]
        if not lines or not all(l.startswith("tensord: ") for l in lines):
            raise Fail("stderr is not the journal stream, yet lines are %r" % lines[:3])
        ok("JOURNAL_STREAM naming another file: plain 'tensord: ' lines")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def main():
    tmp = tempfile.mkdtemp(prefix="tensord-notify-", dir="/tmp")
    try:
        main_run(tmp)
        foreign_watchdog_pid(tmp)
    except Fail as e:
        print("FAIL: %s" % e)
        print("%d passed, 1 failed" % PASSED)
        sys.exit(1)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d passed, 0 failed" % PASSED)


if __name__ == "__main__":
    main()

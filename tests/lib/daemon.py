"""A real tensord for Python integration tests, and a plain msgpack-RPC client.

Run with /usr/bin/python3 (Debian's python3-msgpack). The daemon binary comes
from $TENSORD_BIN; it serves on a socket in a fresh temporary directory, its
output goes to a log file there, printed when something goes wrong.
"""
import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback

import msgpack


class DaemonError(Exception):
    pass


LSAN_SUPPRESSIONS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lsan.supp")


def sanitizer_env(env=None):
    """`env` (default: ours) with tests/lib/lsan.supp in LSAN_OPTIONS, unless
    suppressions are named there already: leaks inside the Vulkan driver do
    not fail a sanitizer run, tensord's own still do (docs/testing.md)."""
    env = dict(os.environ if env is None else env)
    opts = env.get("LSAN_OPTIONS", "")
    if "suppressions=" not in opts:
        env["LSAN_OPTIONS"] = ":".join(
            o for o in (opts, "suppressions=" + LSAN_SUPPRESSIONS, "print_suppressions=0") if o)
    return env


def private_state_args(tmpdir, extra_args=(), config=""):
    """Arguments that give a test daemon a state directory under `tmpdir`, so
    that no test reads or writes /var/lib/tensord (its pipeline cache goes
    there otherwise). Nothing when the test names a --state-dir itself. With
    no --config of the test's, a config file in `tmpdir` sets the directory
    and `persist = no`: the daemon behaves as one started without
    --state-dir; the lines of $TENSORD_CONFIG, when set, are added to it
    (TENSORD_CONFIG=tests/lib/staging.conf runs a test on the staging path). Nothing either when the test sets $STATE_DIRECTORY (as
    systemd's StateDirectory= does). With the test's own --config (which the test may rewrite and
    reload), --state-dir is given on the command line: persistence is then on
    (persist = auto), into that private, empty directory. `config` holds
    more lines for the generated file (a test's own --config excludes it)."""
    args = list(extra_args)
    if any(a == "--state-dir" or a.startswith("--state-dir=") for a in args):
        return []
    if os.environ.get("STATE_DIRECTORY"):  # the test plays systemd's StateDirectory=
        return []
    state = os.path.join(tmpdir, "state")
    if any(a == "--config" or a.startswith("--config=") for a in args):
        if config:
            raise DaemonError("a test with its own --config writes its settings there")
        return ["--state-dir", state]
    conf = os.path.join(tmpdir, "test-state.conf")
    with open(conf, "w") as f:
        f.write("state_dir = %s\npersist = no\n" % state)
        f.write(config)
        if os.environ.get("TENSORD_CONFIG"):
            with open(os.environ["TENSORD_CONFIG"]) as extra:
                f.write(extra.read())
    return ["--config", conf]


class Daemon:
    def __init__(self, extra_args=(), timeout=60, config=""):
        self.extra_args = list(extra_args)
        self.config = config
        self.timeout = timeout
        self.proc = None
        self.dir = None
        self.sock = None
        self.log = None

    def start(self):
        # Started already (`with Daemon(...).start() as d`): one daemon, not two.
        if self.proc is not None and self.proc.poll() is None:
            return self
        binary = os.environ.get("TENSORD_BIN")
        if not binary:
            raise DaemonError("TENSORD_BIN is not set")
        self.dir = tempfile.mkdtemp(prefix="tensord-py-", dir="/tmp")
        self.sock = os.path.join(self.dir, "s.sock")
        self.log = os.path.join(self.dir, "tensord.log")
        argv = [binary, "--socket", self.sock, "--device", "auto"]
        argv += private_state_args(self.dir, self.extra_args, self.config) + self.extra_args
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env=sanitizer_env())
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect(self.sock)
                # The socket listens before the devices are open and the
                # state directory restored (docs/durability.md): up means
                # it answers, so that a test's baseline (memory, tensors)
                # is taken of a daemon that finished starting.
                s.settimeout(max(1.0, deadline - time.monotonic()))
                s.sendall(msgpack.packb([0, 0, "ping", []]))
                unpacker = msgpack.Unpacker(raw=False)
                while True:
                    data = s.recv(65536)
                    if not data:
                        raise OSError("closed before answering")
                    unpacker.feed(data)
                    if any(m[0] == 1 for m in unpacker):
                        break
                s.close()
                return self
            except OSError:
                s.close()
            if self.proc.poll() is not None:
                self.dump_log()
                self._cleanup()
                raise DaemonError("tensord exited with %d before serving" % self.proc.returncode)
            if time.monotonic() > deadline:
                self.proc.kill()
                self.proc.wait()
                self.dump_log()
                self._cleanup()
                raise DaemonError("tensord did not accept connections in %d s" % self.timeout)
            time.sleep(0.02)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def dump_log(self):
        sys.stderr.write("---- tensord log (%s) ----\n" % self.log)
        try:
            with open(self.log, "r", errors="replace") as f:
                sys.stderr.write(f.read())
        except OSError as e:
            sys.stderr.write("(cannot read: %s)\n" % e)
        sys.stderr.write("---- end of tensord log ----\n")

    def stop(self, timeout=30):
        """SIGTERM; raises DaemonError unless it exits 0 in time."""
        if self.proc is None:
            return
        try:
            if self.proc.poll() is not None:
                self.dump_log()
                raise DaemonError("tensord died before it was stopped (status %d)"
                                  % self.proc.returncode)
            self.proc.send_signal(signal.SIGTERM)
            try:
                rc = self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                self.dump_log()
                raise DaemonError("tensord did not exit within %d s of SIGTERM" % timeout)
            if rc != 0:
                self.dump_log()
                raise DaemonError("tensord exited with %d on SIGTERM" % rc)
        finally:
            self.proc = None
            self._cleanup()

    def _cleanup(self):
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def client(self):
        return Client(self.sock)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False


class RPCError(Exception):
    def __init__(self, error):
        self.error = error
        super().__init__("%s (%s): %s" % (error.get("name"), error.get("code"),
                                          error.get("message")))


class Client:
    """A msgpack-RPC client written from the spec alone: requests
    [0, msgid, method, params], responses [1, msgid, error, result]."""

    def __init__(self, path, timeout=60):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.unpacker = msgpack.Unpacker(raw=False, max_buffer_size=2**31 - 1)
        self.next_id = 1

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def send(self, obj):
        self.sock.sendall(msgpack.packb(obj, use_bin_type=True))

    def send_raw(self, data):
        self.sock.sendall(data)

    def recv(self):
        """The next message, or None at the end of the stream."""
        while True:
            try:
                return next(self.unpacker)
            except StopIteration:
                pass
            try:
                data = self.sock.recv(1 << 20)
            except ConnectionResetError:
                data = b""
            if not data:
                return None
            self.unpacker.feed(data)

    def request(self, method, params=None):
        """Send a request; `params` is the map of named arguments, or None for []."""
        msgid = self.next_id
        self.next_id += 1
        self.send([0, msgid, method, [] if params is None else [params]])
        return msgid

    def response(self, msgid):
        msg = self.recv()
        if msg is None:
            raise DaemonError("connection closed while waiting for msgid %d" % msgid)
        if not (isinstance(msg, list) and len(msg) == 4 and msg[0] == 1):
            raise DaemonError("expected a response, got %r" % (msg,))
        if msg[1] != msgid:
            raise DaemonError("expected msgid %d, got %r" % (msgid, msg[1]))
        return msg[2], msg[3]

    def call_full(self, method, params=None):
        """(error, result) of one call."""
        return self.response(self.request(method, params))

    def train_run_losses(self, params):
        """train.run to its end: (error, result, the loss of every
        train.progress notification, in order)."""
        msgid = self.request("train.run", params)
        losses = []
        while True:
            m = self.recv()
            if m is None:
                raise ConnectionError("closed")
            if m[0] == 2 and m[1] == "train.progress":
                losses.append(m[2][0]["loss"])
            elif m[0] == 1 and m[1] == msgid:
                return m[2], m[3], losses

    def call_past_notifications(self, method, params=None):
        """(error, result) of a call whose answer may follow notifications
        (train.run's progress and eval), which are skipped."""
        msgid = self.request(method, params)
        while True:
            msg = self.recv()
            if msg is None:
                raise DaemonError("connection closed while waiting for msgid %d" % msgid)
            if msg[0] == 1 and msg[1] == msgid:
                return msg[2], msg[3]

    def call(self, method, params=None):
        error, result = self.call_full(method, params)
        if error is not None:
            raise RPCError(error)
        return result


def as_user(uid, fn, gid=None, groups=()):
    """Run fn() in a forked child running as `uid` (gid `gid`, default `uid`;
    supplementary `groups`, default none; needs root); returns what it
    returns (picklable), re-raises its failure as AssertionError."""
    gid = uid if gid is None else gid
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            os.setgroups(list(groups))
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
            res = ("ok", fn())
        except BaseException as e:  # noqa: B902 - everything goes back to the parent
            res = ("err", "%s: %s\n%s" % (type(e).__name__, e, traceback.format_exc()))
        data = pickle.dumps(res)
        while data:
            data = data[os.write(w, data):]
        os._exit(0)
    os.close(w)
    chunks = []
    while True:
        chunk = os.read(r, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(r)
    os.waitpid(pid, 0)
    kind, val = pickle.loads(b"".join(chunks))
    if kind == "err":
        raise AssertionError("as uid %d: %s" % (uid, val))
    return val


def pings_during(connect, fn, gap=0.02):
    """Run fn() while another connection (connect() gives a Client) sends a
    ping every `gap` seconds: (fn's result, the seconds fn took, the pings'
    round trips). A loop blocked by fn's work shows as round trips as long
    as that work."""
    import threading
    lat, stop = [], threading.Event()

    def pinger():
        other = connect()
        try:
            while not stop.is_set():
                t0 = time.monotonic()
                other.call("ping")
                lat.append(time.monotonic() - t0)
                time.sleep(gap)
        finally:
            other.close()

    th = threading.Thread(target=pinger)
    t0 = time.monotonic()
    th.start()
    try:
        res = fn()
    finally:
        took = time.monotonic() - t0
        stop.set()
        th.join()
    return res, took, lat

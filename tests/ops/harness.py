"""Shared harness of the op tests: a raw msgpack-RPC client, dtype mapping,
and `check()`, which runs an op through op.run on the daemon and compares it
with a NumPy reference computed in float64 on the CPU.

Every op test file builds on this; the references live in reference.py."""
import os
import re
import socket
import sys

import msgpack
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from daemon import Daemon  # noqa: E402  (tests/lib/daemon.py)

try:
    from ml_dtypes import bfloat16 as _bf16  # not in Debian; bf16 is emulated below
except ImportError:
    _bf16 = None

DTYPES = {"f32": np.float32, "f16": np.float16, "i32": np.int32, "u8": np.uint8}
FLOAT_DTYPES = ["f32", "f16", "bf16"]
ALL_DTYPES = ["f32", "f16", "bf16", "i32", "u8"]

# Tolerances (absolute + relative, per element) for results computed in each
# dtype: f32 near float32 rounding, f16 and bf16 by their mantissa widths.
TOL = {"f32": (1e-5, 1e-5), "f16": (2e-3, 2e-3), "bf16": (1.6e-2, 1.6e-2), "i32": (0, 0), "u8": (0, 0)}


def bf16_round(x):
    """float64/float32 -> float32 values rounded to bfloat16 (nearest even)."""
    f = np.array(x, dtype=np.float32, ndmin=1)
    shape = np.shape(x)
    u = f.view(np.uint32).astype(np.uint64)
    s16, one = np.uint64(16), np.uint64(1)
    r = ((u + np.uint64(0x7FFF) + ((u >> s16) & one)) >> s16).astype(np.uint16)
    nan = np.isnan(f)
    r[nan] = ((u[nan] >> s16) | np.uint64(0x40)).astype(np.uint16)
    return r.reshape(shape)


def to_bytes(a, dtype):
    if dtype == "bf16":
        return bf16_round(a).tobytes()
    return np.ascontiguousarray(a, dtype=DTYPES[dtype]).tobytes()


def from_bytes(data, dtype, shape):
    if dtype == "bf16":
        u = np.frombuffer(data, np.uint16).astype(np.uint32) << 16
        return u.view(np.float32).reshape(shape)
    return np.frombuffer(data, DTYPES[dtype]).reshape(shape)


def quantize(a, dtype):
    """The values `a` takes once stored as `dtype` (as float64)."""
    return from_bytes(to_bytes(a, dtype), dtype, np.shape(a)).astype(np.float64)


class Client:
    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.unpacker = msgpack.Unpacker(raw=False, max_buffer_size=2**31 - 1)
        self.msgid = 0

    def call(self, method, params=None):
        """Returns (error, result)."""
        self.msgid += 1
        self.sock.sendall(msgpack.packb([0, self.msgid, method, [params] if params is not None else []]))
        while True:
            for msg in self.unpacker:
                assert msg[0] == 1 and msg[1] == self.msgid, msg
                return msg[2], msg[3]
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("daemon closed the connection")
            self.unpacker.feed(chunk)

    def put(self, name, array, dtype):
        err, res = self.call("tensor.put", {"name": name, "dtype": dtype, "shape": list(np.shape(array)),
                                            "data": to_bytes(array, dtype)})
        assert err is None, err
        return res

    def run(self, op, inputs, attrs=None, out=None):
        params = {"op": op, "inputs": inputs}
        if attrs:
            params["attrs"] = attrs
        if out:
            params["out"] = out
        return self.call("op.run", params)


def result_array(res):
    return from_bytes(res["data"], res["dtype"], res["shape"])


class Checker:
    """Counts checks and failures; prints one line per failure."""

    def __init__(self, client):
        self.c = client
        self.checks = 0
        self.failures = 0
        self.serial = 0

    def fail(self, what):
        self.failures += 1
        print("FAIL", what)

    def check(self, op, arrays, dtypes, reference, attrs=None, out_dtype=None, tol=None, label=""):
        """Put `arrays` (as `dtypes`), run `op`, compare with
        reference(*quantized float64 arrays). Returns the result array."""
        self.checks += 1
        names = []
        for a, dt in zip(arrays, dtypes):
            self.serial += 1
            name = "t%d" % self.serial
            self.c.put(name, a, dt)
            names.append(name)
        err, res = self.c.run(op, names, attrs)
        what = "%s%s %s %s %s" % (op, label, dtypes, [np.shape(a) for a in arrays], attrs or "")
        if err is not None:
            self.fail("%s: %s" % (what, err))
            return None
        q = [quantize(a, dt) for a, dt in zip(arrays, dtypes)]
        want = np.asarray(reference(*q))
        got = result_array(res).astype(np.float64)
        odt = out_dtype or res["dtype"]
        if res["dtype"] != odt:
            self.fail("%s: dtype %s, want %s" % (what, res["dtype"], odt))
            return None
        if list(got.shape) != list(want.shape):
            self.fail("%s: shape %s, want %s" % (what, list(got.shape), list(want.shape)))
            return None
        want = quantize(want, odt) if odt in ("f16", "bf16") else want
        atol, rtol = tol or TOL[odt]
        with np.errstate(invalid="ignore"):
            bad = ~(np.isclose(got, want, atol=atol, rtol=rtol, equal_nan=True))
        if bad.any():
            i = np.argwhere(bad)[0]
            self.fail("%s: %d of %d elements differ; first at %s: got %r want %r" % (
                what, int(bad.sum()), bad.size, tuple(i), got[tuple(i)], want[tuple(i)]))
        return got

    def expect_error(self, op, inputs, attrs, code_name, label=""):
        self.checks += 1
        err, _ = self.c.run(op, inputs, attrs)
        if err is None or err["name"] != code_name:
            self.fail("%s%s %s %s: expected %s, got %r" % (op, label, inputs, attrs, code_name, err))
        elif op not in err["message"]:
            self.fail("%s: the error does not name the op: %r" % (op, err["message"]))


# A dispatch line of a daemon started with TENSORD_TRACE_DISPATCHES=1 -v:
# its shader ("<family>.<variant>").
TRACE = re.compile(r"trace [^:]*: \d+ (\S+) [0-9.]+ us")


class Traced:
    """A checker's view of the daemon's dispatch trace in its log: which
    shaders the requests since the last look ran (tests that check which
    kernel took a product subclass it with their `check`)."""

    def __init__(self, ck, log):
        self.ck, self.log, self.seen = ck, log, 0

    def shaders(self):
        """The shaders dispatched since the last call (a ping first, so the
        daemon has written the lines of the requests before it)."""
        self.ck.c.call("ping", {})
        with open(self.log, errors="replace") as f:
            lines = [m.group(1) for m in map(TRACE.search, f) if m]
        new, self.seen = lines[self.seen:], len(lines)
        return new


def main(run_cases):
    """Start a daemon, run `run_cases(checker)`, print a summary, exit 1 on failure."""
    # The op tests check results, not time limits: the longest (a K of
    # 2^20 on lavapipe) takes seconds on a quiet machine, and a machine
    # five or more times slower (a loaded CI host) must not turn them into
    # DEADLINE_EXCEEDED. Time limits have their own tests (request_timeout).
    with Daemon(config="request_timeout = 300\n") as d:
        ck = Checker(Client(d.sock))
        run_cases(ck)
    print("%d checks, %d failed" % (ck.checks, ck.failures))
    sys.exit(1 if ck.failures else 0)

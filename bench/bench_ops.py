#!/usr/bin/python3
"""Time the main tensord ops through the socket: op.run with `out`, so the
result stays on the GPU and only the request crosses the socket.

Inputs are made on the GPU with randn (or uploaded with tensor.put when the
daemon has no randn). Ops the daemon does not have are skipped. Prints one
table: op, shape, dtype, ms per call (median), GB/s (bytes read + written),
GFLOP/s where the op does arithmetic worth counting.

    /usr/bin/python3 bench/bench_ops.py [--socket PATH] [--reps N] [--size auto|small|full]

Run it with /usr/bin/python3 (Debian's python3-msgpack, python3-numpy)."""
import argparse
import json
import os
import socket
import statistics
import sys
import time

import msgpack

DTYPE_SIZE = {"f32": 4, "f16": 2, "bf16": 2, "i32": 4, "u8": 1}
PREFIX = "bench_ops."


class Client:
    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.unpacker = msgpack.Unpacker(raw=False, max_buffer_size=2**31 - 1)
        self.msgid = 0

    def call(self, method, params=None):
        """(error, result) of one request."""
        self.msgid += 1
        self.sock.sendall(msgpack.packb([0, self.msgid, method, [params] if params is not None else []]))
        while True:
            for msg in self.unpacker:
                if msg[0] == 1 and msg[1] == self.msgid:
                    return msg[2], msg[3]
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("tensord closed the connection")
            self.unpacker.feed(chunk)


def missing_op(err):
    """Whether an error says the daemon lacks the op (rather than a real failure)."""
    return err["name"] == "UNIMPLEMENTED" or (err["name"] == "INVALID_ARGUMENT" and "unknown op" in err["message"])


def count(shape):
    n = 1
    for s in shape:
        n *= s
    return n


class Bench:
    def __init__(self, client, reps, warmup):
        self.c = client
        self.reps = reps
        self.warmup = warmup
        self.made = set()
        self.rows = []

    def tensor(self, shape, dtype="f32", tag="a"):
        """The name of a random tensor of this shape and dtype (one per tag), made once."""
        name = "%s%s.%s.%s" % (PREFIX, dtype, "x".join(map(str, shape)) or "scalar", tag)
        if name in self.made:
            return name
        err, _ = self.c.call("op.run", {"op": "randn", "inputs": [], "out": name,
                                        "attrs": {"shape": list(shape), "seed": len(self.made),
                                                  "dtype": dtype}})
        if err is not None:
            if not missing_op(err):
                raise RuntimeError("randn %s %s: %s" % (shape, dtype, err["message"]))
            import numpy as np  # only for the fallback upload
            a = np.random.default_rng(len(self.made)).standard_normal(shape).astype(
                {"f32": np.float32, "f16": np.float16}[dtype])
            err, _ = self.c.call("tensor.put", {"name": name, "dtype": dtype, "shape": list(shape),
                                                "data": a.tobytes()})
            if err is not None:
                raise RuntimeError("put %s: %s" % (name, err["message"]))
        self.made.add(name)
        return name

    def run(self, op, label_shape, dtype, inputs, attrs, bytes_moved, flops=None):
        params = {"op": op, "inputs": inputs, "out": PREFIX + "out"}
        if attrs:
            params["attrs"] = attrs
        err, res = self.c.call("op.run", params)
        if err is not None:
            why = "not in this daemon" if missing_op(err) else err["name"] + ": " + err["message"]
            self.rows.append({"op": op, "shape": label_shape, "dtype": dtype, "skipped": why})
            return
        out_bytes = res.get("bytes", 0)
        for _ in range(self.warmup - 1):
            self.c.call("op.run", params)
        times = []
        for _ in range(self.reps):
            t0 = time.perf_counter()
            err, _ = self.c.call("op.run", params)
            times.append(time.perf_counter() - t0)
            if err is not None:
                raise RuntimeError("%s: %s" % (op, err["message"]))
        s = statistics.median(times)
        total = bytes_moved + out_bytes
        self.rows.append({"op": op, "shape": label_shape, "dtype": dtype, "ms": s * 1e3,
                          "gbps": total / s / 1e9, "gflops": flops / s / 1e9 if flops else None})

    def cleanup(self):
        for name in sorted(self.made) + [PREFIX + "out"]:
            self.c.call("tensor.delete", {"name": name})


SIZES = {
    # elementwise elements, softmax rows x cols, matmul n, conv (N, C, HW, O), transpose side
    "full": {"n": 1 << 24, "sm": (4096, 1024), "mm": 1024, "conv": (8, 64, 56, 64), "tr": 4096},
    "small": {"n": 1 << 20, "sm": (256, 1024), "mm": 512, "conv": (1, 32, 32, 32), "tr": 1024},
}


def run_all(b, sz):
    n = sz["n"]
    x, y = b.tensor([n]), b.tensor([n], tag="b")
    shp = "[%d]" % n
    b.run("add", shp, "f32", [x, y], None, 8 * n)
    b.run("mul", shp, "f32", [x, y], None, 8 * n)
    b.run("exp", shp, "f32", [x], None, 4 * n)
    b.run("sum", shp, "f32", [x], None, 4 * n, n)
    r, cols = sz["sm"]
    b.run("softmax", "[%d, %d]" % (r, cols), "f32", [b.tensor([r, cols])], {"axis": -1}, 4 * r * cols)
    m = sz["mm"]
    for dt in ("f32", "f16"):
        b.run("matmul", "[%d, %d] @ [%d, %d]" % (m, m, m, m), dt,
              [b.tensor([m, m], dt), b.tensor([m, m], dt, tag="b")], None,
              2 * m * m * DTYPE_SIZE[dt], 2 * m * m * m)
    nb, c, hw, o = sz["conv"]
    b.run("conv2d", "[%d, %d, %d, %d] * [%d, %d, 3, 3]" % (nb, c, hw, hw, o, c), "f32",
          [b.tensor([nb, c, hw, hw]), b.tensor([o, c, 3, 3])], {"padding": 1},
          4 * (nb * c * hw * hw + o * c * 9), 2 * nb * o * hw * hw * c * 9)
    t = sz["tr"]
    b.run("transpose", "[%d, %d]" % (t, t), "f32", [b.tensor([t, t])], None, 4 * t * t)
    b.run("cast", shp + " -> f16", "f32", [x], {"dtype": "f16"}, 4 * n)
    b.run("cast", shp + " -> f32", "f16", [b.tensor([n], "f16")], {"dtype": "f32"}, 2 * n)


def print_table(rows, device):
    print("tensord op benchmark on %s: op.run with out, wall clock through the socket, median" % device)
    head = ("op", "shape", "dtype", "ms/call", "GB/s", "GFLOP/s")
    lines = []
    for r in rows:
        if "skipped" in r:
            lines.append((r["op"], r["shape"], r["dtype"], "-", "-", "skipped (%s)" % r["skipped"]))
        else:
            lines.append((r["op"], r["shape"], r["dtype"], "%.3f" % r["ms"], "%.3g" % r["gbps"],
                          "%.4g" % r["gflops"] if r["gflops"] else ""))
    w = [max(len(str(x[i])) for x in [head] + lines) for i in range(len(head))]
    for i, x in enumerate([head] + lines):
        print("  ".join(str(v).ljust(w[k]) if k < 3 else str(v).rjust(w[k]) for k, v in enumerate(x)).rstrip())
        if i == 0:
            print("  ".join("-" * k for k in w))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--socket", default=os.environ.get("TENSORD_SOCKET", "/run/tensord/tensord.sock"))
    ap.add_argument("--reps", type=int, default=10, help="timed calls per op (median reported)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed calls per op, the first included")
    ap.add_argument("--size", choices=("auto", "small", "full"), default="auto",
                    help="problem sizes; auto: small on a CPU device (lavapipe), else full")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")
    args = ap.parse_args()
    c = Client(args.socket)
    err, info = c.call("info")
    if err is not None:
        sys.exit("info: %s" % err["message"])
    dev = next((d for d in info.get("devices", []) if d.get("active")), {})
    size = args.size
    if size == "auto":
        size = "small" if dev.get("type") == "cpu" else "full"
    b = Bench(c, max(1, args.reps), max(1, args.warmup))
    try:
        run_all(b, SIZES[size])
    finally:
        b.cleanup()
    if args.json:
        print(json.dumps({"device": dev.get("name"), "size": size, "rows": b.rows}, indent=1))
    else:
        print_table(b.rows, "%s (%s sizes)" % (dev.get("name", "?"), size))


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Batched op.runs (batch_requests, docs/architecture.md "Batching"): small
op.runs that arrive together share one GPU submission and are answered
together. Checks, against NumPy and against a daemon with batch_requests = no:

- pipelined op.runs of several ops: each answer equals the NumPy reference
  and the unbatched daemon's, in msgid order, and they took far fewer
  submissions than requests (info.counters.op_batches/op_batched and
  gpu.submissions);
- bad requests in a pipeline (unknown op, missing input, shapes that differ,
  malformed params, an unknown method, a too-large op) each get their own
  error, in order, and the good ones around them are right;
- per-connection order: op.run out=t then op.run reading t (and tensor.get
  t, a second op.run out=t, then one reading it) pipelined see the earlier
  results;
- two connections pipelining op.runs that store the same name: every answer
  right, the name holds one of the two values, one tensor;
- a client that leaves with op.runs batched: their outputs are still stored;
- a client pipelining thousands of op.runs does not starve another client's
  pings (each answered within a bound while the flood runs);
- batch_requests = no: nothing batched, one submission per op.run.
"""
import os
import socket
import sys
import threading
import time

import msgpack
import numpy as np

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from daemon import Client, Daemon  # noqa: E402

FAILED = []


def check(cond, what):
    print("%s: %s" % ("ok" if cond else "FAIL", what))
    if not cond:
        FAILED.append(what)


def put(c, name, arr):
    arr = np.ascontiguousarray(arr, dtype=np.float32)
    c.call("tensor.put", {"name": name, "dtype": "f32", "shape": list(arr.shape),
                          "data": arr.tobytes()})


def get(c, name):
    r = c.call("tensor.get", {"name": name})
    return np.frombuffer(r["data"], dtype=np.float32).reshape(r["shape"])


def pipeline(c, reqs):
    """Send every (method, params) in one write, then read the answers in
    order: [(error, result)]. Answers must come in msgid order."""
    first = c.next_id
    data = b"".join(msgpack.packb([0, first + i, m, [p]], use_bin_type=True)
                    for i, (m, p) in enumerate(reqs))
    c.next_id += len(reqs)
    c.send_raw(data)
    out = []
    for i in range(len(reqs)):
        out.append(c.response(first + i))
    return out


def value(res):
    """An op.run's inline result as an array."""
    return np.frombuffer(res["data"], dtype=np.float32).reshape(res["shape"])


def counters(c):
    cnt = c.call("info")["counters"]
    return cnt.get("op_batches", 0), cnt.get("op_batched", 0), cnt["gpu"]["submissions"]


def setup(c, rng):
    a = rng.standard_normal(7).astype(np.float32)
    b = rng.standard_normal(7).astype(np.float32)
    m1 = rng.standard_normal((4, 5)).astype(np.float32)
    m2 = rng.standard_normal((5, 3)).astype(np.float32)
    for name, arr in (("a", a), ("b", b), ("m1", m1), ("m2", m2)):
        put(c, name, arr)
    return {"a": a, "b": b, "m1": m1, "m2": m2}


def mixed_ops(n):
    """n op.runs with inline results and their NumPy references (lambdas)."""
    kinds = [
        ({"op": "add", "inputs": ["a", "b"]}, lambda v: v["a"] + v["b"]),
        ({"op": "mul", "inputs": ["a", "b"]}, lambda v: v["a"] * v["b"]),
        ({"op": "sub", "inputs": ["b", "a"]}, lambda v: v["b"] - v["a"]),
        ({"op": "relu", "inputs": ["a"]}, lambda v: np.maximum(v["a"], 0)),
        ({"op": "matmul", "inputs": ["m1", "m2"]}, lambda v: v["m1"] @ v["m2"]),
    ]
    return [kinds[i % len(kinds)] for i in range(n)]


def test_results(d, ref_d):
    rng = np.random.default_rng(7)
    with d.client() as c, ref_d.client() as rc:
        v = setup(c, rng)
        setup(rc, np.random.default_rng(7))
        ops = mixed_ops(200)
        b0, n0, s0 = counters(c)
        got = pipeline(c, [("op.run", p) for p, _ in ops])
        b1, n1, s1 = counters(c)
        ref = pipeline(rc, [("op.run", p) for p, _ in ops])
        bad = [i for i, ((e, r), (p, f)) in enumerate(zip(got, ops))
               if e is not None or not np.allclose(value(r), f(v), rtol=1e-5, atol=1e-5)]
        check(not bad, "200 pipelined op.runs match NumPy (wrong: %r)" % bad[:5])
        same = all(e is None and re is None and r["data"] == rr["data"] and r["shape"] == rr["shape"]
                   for (e, r), (re, rr) in zip(got, ref))
        check(same, "each batched answer equals the unbatched daemon's, byte for byte")
        check(n1 - n0 >= 150, "most of them were batched (op_batched grew by %d)" % (n1 - n0))
        check(0 < b1 - b0 < (n1 - n0) / 2,
              "in far fewer submissions (%d batches for %d op.runs)" % (b1 - b0, n1 - n0))
        check(s1 - s0 < 100, "gpu.submissions grew by %d for 200 op.runs" % (s1 - s0))
        rb0, rn0, rs0 = counters(rc)
        pipeline(rc, [("op.run", p) for p, _ in ops])
        rb1, rn1, rs1 = counters(rc)
        check(rb1 == rb0 == 0 and rn1 == rn0 == 0 and rs1 - rs0 >= 200,
              "batch_requests = no: nothing batched, %d submissions for 200" % (rs1 - rs0))


def test_errors(d):
    with d.client() as c:
        v = setup(c, np.random.default_rng(8))
        big = 1 << 17
        put(c, "big", np.ones(big, dtype=np.float32))
        good = {"op": "add", "inputs": ["a", "b"]}
        reqs = [
            ("op.run", good),
            ("op.run", {"op": "no_such_op", "inputs": ["a"]}),
            ("op.run", good),
            ("op.run", {"op": "add", "inputs": ["a", "missing"]}),
            ("op.run", {"op": "add", "inputs": ["a", "m1"]}),
            ("op.run", dict(good, out="g1")),
            ("op.run", {"op": "add", "inputs": "a"}),
            ("no.such.method", {}),
            ("op.run", {"op": "add", "inputs": ["big", "big"]}),
            ("op.run", {"op": "add", "inputs": ["a", "b"], "out": 7}),
            ("op.run", dict(good, out="g2")),
            ("op.run", {"op": "mul", "inputs": ["g1", "g1"]}),
        ]
        got = pipeline(c, reqs * 3)
        ok = True
        for k in range(3):
            r = got[12 * k:12 * k + 12]
            for i in (0, 2):
                ok &= r[i][0] is None and np.allclose(value(r[i][1]), v["a"] + v["b"])
            for i in (5, 10):
                ok &= r[i][0] is None and r[i][1]["shape"] == [7]
            ok &= r[8][0] is None and r[8][1]["shape"] == [big]
            ok &= r[11][0] is None and np.allclose(value(r[11][1]), (v["a"] + v["b"]) ** 2)
            for i, want in ((1, "no_such_op"), (3, "missing"), (4, ""), (6, "inputs"), (7, "method"),
                            (9, "out")):
                e = r[i][0]
                ok &= e is not None and want in e.get("message", "")
                if e is None or want not in e.get("message", ""):
                    print("request %d: %r" % (i, e))
        check(ok, "bad requests fail alone with their own errors, the good ones around them right")
        check(np.allclose(get(c, "g2"), v["a"] + v["b"]), "the stored outputs are right")


def test_order(d):
    with d.client() as c:
        v = setup(c, np.random.default_rng(9))
        a, b = v["a"], v["b"]
        reqs = [
            ("op.run", {"op": "add", "inputs": ["a", "b"], "out": "t"}),
            ("op.run", {"op": "mul", "inputs": ["t", "t"], "out": "u"}),
            ("op.run", {"op": "add", "inputs": ["t", "u"]}),
            ("tensor.get", {"name": "u"}),
            ("op.run", {"op": "sub", "inputs": ["u", "t"], "out": "t"}),
            ("op.run", {"op": "mul", "inputs": ["t", "a"]}),
            ("ping", {}),
            ("op.run", {"op": "add", "inputs": ["t", "t"], "out": "t"}),
            ("op.run", {"op": "relu", "inputs": ["t"]}),
        ]
        for rnd in range(20):
            got = pipeline(c, reqs)
            t = a + b
            u = t * t
            t2 = u - t
            t3 = t2 + t2
            ok = all(e is None for e, _ in got)
            ok = ok and np.allclose(value(got[2][1]), t + u, rtol=1e-5)
            ok = ok and np.allclose(np.frombuffer(got[3][1]["data"], dtype=np.float32), u, rtol=1e-5)
            ok = ok and np.allclose(value(got[5][1]), t2 * a, rtol=1e-5)
            ok = ok and np.allclose(value(got[8][1]), np.maximum(t3, 0), rtol=1e-5)
            if not ok:
                break
        check(ok, "a connection's later requests see its earlier op.runs' outputs (20 rounds)")


def test_two_writers(d):
    with d.client() as c1, d.client() as c2:
        v = setup(c1, np.random.default_rng(10))
        p1 = [("op.run", {"op": "add", "inputs": ["a", "b"], "out": "same"})] * 64
        p2 = [("op.run", {"op": "mul", "inputs": ["a", "b"], "out": "same"})] * 64
        for _ in range(5):
            data1 = b"".join(msgpack.packb([0, c1.next_id + i, m, [p]], use_bin_type=True)
                             for i, (m, p) in enumerate(p1))
            data2 = b"".join(msgpack.packb([0, c2.next_id + i, m, [p]], use_bin_type=True)
                             for i, (m, p) in enumerate(p2))
            c1.send_raw(data1)
            c2.send_raw(data2)
            r1 = [c1.response(c1.next_id + i) for i in range(64)]
            r2 = [c2.response(c2.next_id + i) for i in range(64)]
            c1.next_id += 64
            c2.next_id += 64
        ok = all(e is None and r["name"] == "same" for e, r in r1 + r2)
        check(ok, "two connections storing one name: every answer right")
        s = get(c1, "same")
        check(np.allclose(s, v["a"] + v["b"]) or np.allclose(s, v["a"] * v["b"]),
              "the name holds one of the two values")
        names = [t["name"] for t in c1.call("tensor.list")["tensors"]]
        check(names.count("same") == 1, "one tensor of that name")


def test_departed(d):
    with d.client() as c:
        v = setup(c, np.random.default_rng(11))
        c2 = d.client()
        reqs = [("op.run", {"op": "add", "inputs": ["a", "b"], "out": "left%d" % i}) for i in range(40)]
        c2.send_raw(b"".join(msgpack.packb([0, i + 1, m, [p]], use_bin_type=True)
                             for i, (m, p) in enumerate(reqs)))
        c2.sock.shutdown(socket.SHUT_RDWR)
        c2.close()
        deadline = time.monotonic() + 10
        names = []
        while time.monotonic() < deadline:
            names = [t["name"] for t in c.call("tensor.list")["tensors"] if t["name"].startswith("left")]
            if len(names) == 40:
                break
            time.sleep(0.05)
        # Those read before the close take effect; the connection may have
        # been closed before reading them all.
        ok = all(np.allclose(get(c, n), v["a"] + v["b"]) for n in names)
        check(ok, "a departed client's batched op.runs that were read are stored right (%d)" % len(names))
        check(c.call("ping") is not None or True, "the daemon still serves")


def test_no_starvation(d):
    with d.client() as c:
        setup(c, np.random.default_rng(12))
    stop = threading.Event()
    flood_done = [0]
    errors = []

    def flood():
        with d.client() as f:
            reqs = [("op.run", {"op": "add", "inputs": ["a", "b"], "out": "fl"})] * 64
            while not stop.is_set():
                got = pipeline(f, reqs)
                if any(e is not None for e, _ in got):
                    errors.append(got)
                    return
                flood_done[0] += 64

    th = threading.Thread(target=flood)
    th.start()
    lat = []
    try:
        with d.client() as p:
            deadline = time.monotonic() + 10
            while flood_done[0] == 0 and not errors and time.monotonic() < deadline:
                time.sleep(0.01)
            start_ops = flood_done[0]
            until = time.monotonic() + 0.5
            while len(lat) < 200 or time.monotonic() < until:
                t0 = time.monotonic()
                p.call("ping")
                lat.append(time.monotonic() - t0)
            during = flood_done[0] - start_ops
    finally:
        stop.set()
        th.join()
    lat.sort()
    p99 = lat[int(len(lat) * 0.99) - 1]
    check(not errors, "the flood's op.runs all succeeded")
    check(during > 0, "the flood ran while the pings were answered (%d op.runs)" % during)
    # 2 shared cores, lavapipe: the bound is loose; without a bound on the
    # batch a ping would wait behind thousands of op.runs (seconds).
    check(p99 < 0.1, "ping p99 %.1f ms (max %.1f ms) while a client floods op.runs"
          % (p99 * 1e3, lat[-1] * 1e3))


def chain(n, k):
    """A graph.run of k n x n matmuls: long enough on lavapipe to hold the queue."""
    nodes = [{"id": "r", "op": "rand", "inputs": [], "attrs": {"shape": [n, n], "seed": 3}},
             {"id": "m0", "op": "mul", "inputs": ["r"], "attrs": {"scalar": 1.0 / n}}]
    for i in range(1, k + 1):
        nodes.append({"id": "m%d" % i, "op": "matmul", "inputs": ["m%d" % (i - 1), "m0"]})
    nodes.append({"id": "s", "op": "sum", "inputs": ["m%d" % k]})
    return {"nodes": nodes, "outputs": ["s"]}


def test_held(d):
    """Batches queued behind a long graph: handed to the completion thread,
    their connections held until answered (order kept), others served."""
    with d.client() as c:
        v = setup(c, np.random.default_rng(13))
        a, b = v["a"], v["b"]
        # Names stored already: a batch holds one request creating a name.
        for i in range(20):
            put(c, "gone%d" % i, np.zeros(7, dtype=np.float32))
        t0 = time.monotonic()
        c.call("graph.run", chain(256, 2))
        per = max((time.monotonic() - t0) / 2, 1e-3)
        k = max(2, min(400, int(1.0 / per)))
        with d.client() as long_c, d.client() as held, d.client() as pinger:
            gid = long_c.request("graph.run", chain(256, k))
            time.sleep(0.1)
            b0, n0, _ = counters(pinger)
            reqs = [
                ("op.run", {"op": "add", "inputs": ["a", "b"], "out": "h1"}),
                ("op.run", {"op": "mul", "inputs": ["h1", "h1"]}),
                ("ping", {}),
                ("op.run", {"op": "add", "inputs": ["h1", "missing"]}),
                ("tensor.get", {"name": "h1"}),
                ("op.run", {"op": "sub", "inputs": ["h1", "a"], "out": "h1"}),
                ("op.run", {"op": "relu", "inputs": ["h1"]}),
            ]
            first = held.next_id
            held.send_raw(b"".join(msgpack.packb([0, first + i, m, [p]], use_bin_type=True)
                                   for i, (m, p) in enumerate(reqs)))
            held.next_id += len(reqs)
            gone = d.client()
            gone.send_raw(b"".join(msgpack.packb([0, i + 1, "op.run", [{"op": "add", "inputs": ["a", "b"],
                                                                      "out": "gone%d" % i}]],
                                                 use_bin_type=True) for i in range(20)))
            time.sleep(0.05)
            gone.sock.shutdown(socket.SHUT_RDWR)
            gone.close()
            t1 = time.monotonic()
            pinger.call("ping")
            ping_s = time.monotonic() - t1
            got = [held.response(first + i) for i in range(len(reqs))]
            e, _ = long_c.response(gid)
            check(e is None, "the long graph ran (%d matmuls)" % k)
            t = a + b
            ok = got[0][0] is None and got[1][0] is None and got[2][0] is None
            ok = ok and np.allclose(value(got[1][1]), t * t, rtol=1e-5)
            ok = ok and got[3][0] is not None and "missing" in got[3][0]["message"]
            ok = ok and np.allclose(np.frombuffer(got[4][1]["data"], dtype=np.float32), t, rtol=1e-5)
            ok = ok and got[5][0] is None and np.allclose(value(got[6][1]), np.maximum(t - a, 0), rtol=1e-5)
            check(ok, "requests queued behind a long graph: answered in order, each right")
            check(ping_s < 0.5, "another client's ping meanwhile: %.1f ms" % (ping_s * 1e3))
            b1, n1, _ = counters(pinger)
            check(n1 > n0, "they were batched (%d op.runs in %d batches)" % (n1 - n0, b1 - b0))
            deadline = time.monotonic() + 10
            names = []
            while time.monotonic() < deadline:
                names = [x["name"] for x in pinger.call("tensor.list")["tensors"]
                         if x["name"].startswith("gone")]
                if len(names) == 20:
                    break
                time.sleep(0.05)
            check(len(names) == 20 and all(np.allclose(get(pinger, n), t) for n in names),
                  "a client that left while its batch waited: its outputs stored (%d)" % len(names))


def test_limits(conf_dir):
    """One pipeline creating more names than the limits allow: the batch
    holds one new name at a time, so each request is checked against the
    tensors stored before it and the limits hold exactly."""
    conf = os.path.join(conf_dir, "tensord-batch-limits-%d.conf" % os.getpid())
    with open(conf, "w") as f:
        f.write("persist = no\nmax_tensors = 40\nuser_max_tensors = 12\nuser_max_bytes = 24K\n")
    try:
        with Daemon(["--config", conf]) as d, d.client() as c:
            v = setup(c, np.random.default_rng(14))
            have = len(c.call("tensor.list")["tensors"])
            reqs = [("op.run", {"op": "add", "inputs": ["a", "b"], "out": "new%d" % i}) for i in range(30)]
            got = pipeline(c, reqs)
            ok = [r for e, r in got if e is None]
            bad = [e for e, r in got if e is not None]
            check(len(ok) == 12 - have and all(r["name"] == "new%d" % i for i, r in enumerate(ok)),
                  "user_max_tensors 12: the first %d new names stored (%d)" % (12 - have, len(ok)))
            check(all(e["name"] == "RESOURCE_EXHAUSTED" and "user_max_tensors" in e["message"] for e in bad),
                  "the rest refused by the quota (%r)" % (bad[:1],))
            check(len(c.call("tensor.list")["tensors"]) == 12, "12 tensors stored")
            check(np.allclose(get(c, "new0"), v["a"] + v["b"]), "with the right values")
            # Growing stored tensors under user_max_bytes: one growth per batch.
            for r in ok[-2:]:
                c.call("tensor.delete", {"name": r["name"]})
            put(c, "big", np.ones(1024, dtype=np.float32))
            total = sum(t["bytes"] for t in c.call("tensor.list")["tensors"])
            reqs = [("op.run", {"op": "relu", "inputs": ["big"], "out": r["name"]}) for r in ok[:-2]] * 2
            got = pipeline(c, reqs)
            grow = 4096 - 28
            want = (24 * 1024 - total) // grow
            ok = [r for e, r in got if e is None and r["bytes"] == 4096]
            bad = [e for e, r in got if e is not None]
            after = sum(t["bytes"] for t in c.call("tensor.list")["tensors"])
            grown = {r["name"] for r in ok}
            check(len(grown) == want and after <= 24 * 1024,
                  "user_max_bytes 24K: %d of %d tensors grown (want %d), %d bytes"
                  % (len(grown), len(reqs) // 2, want, after))
            check(all(e["name"] == "RESOURCE_EXHAUSTED" and "user_max_bytes" in e["message"] for e in bad),
                  "the rest refused by the quota (%r)" % (bad[:1],))
    finally:
        os.unlink(conf)


def test_sigterm():
    """SIGTERM while four clients flood pipelined op.runs: the daemon exits 0
    in time (under ASan: nothing leaked; the batches running at the stop
    are answered, and no new request is served after it)."""
    for trial in range(2):
        d = Daemon().start()
        with d.client() as c:
            setup(c, np.random.default_rng(15))
        stop = threading.Event()
        sent = [0] * 4

        def flood(k):
            try:
                with d.client() as f:
                    reqs = [("op.run", {"op": "add", "inputs": ["a", "b"], "out": "st%d" % k})] * 64
                    data = b"".join(msgpack.packb([0, i + 1, m, [p]], use_bin_type=True)
                                    for i, (m, p) in enumerate(reqs))
                    while not stop.is_set():
                        f.send_raw(data)
                        sent[k] += 1
                        for _ in range(64):
                            if f.recv() is None:
                                return
            except OSError:
                pass

        ths = [threading.Thread(target=flood, args=(k,)) for k in range(4)]
        for t in ths:
            t.start()
        deadline = time.monotonic() + 10
        while min(sent) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.05 * trial)
        err = None
        try:
            d.stop()
        except Exception as e:  # DaemonError: not exit 0 in time
            err = e
        stop.set()
        for t in ths:
            t.join()
        check(err is None, "SIGTERM during a flood of batched op.runs: exit 0 (%s)" % err)


def main():
    tmp = os.environ.get("TMPDIR", "/tmp")
    conf = os.path.join(tmp, "tensord-batch-off-%d.conf" % os.getpid())
    with open(conf, "w") as f:
        f.write("batch_requests = no\npersist = no\n")
    try:
        with Daemon() as d, Daemon(["--config", conf]) as ref:
            test_results(d, ref)
            test_errors(d)
            test_order(d)
            test_two_writers(d)
            test_departed(d)
            test_no_starvation(d)
            test_held(d)
        test_limits(tmp)
        test_sigterm()
    finally:
        os.unlink(conf)
    if FAILED:
        print("FAILED: %s" % "; ".join(FAILED))
        return 1
    print("all ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""tensord spoken to by a plain msgpack-RPC client (python3-msgpack), written
from docs/protocol.md alone: any msgpack-RPC client must be able to use it."""
import os
import struct
import sys
import time
import traceback

import msgpack

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from daemon import Daemon, RPCError  # noqa: E402

META_KEYS = {"name", "dtype", "shape", "bytes", "owner", "created", "modified",
             "version", "device"}


def check_meta(meta, name, dtype, shape, nbytes, version):
    assert isinstance(meta, dict), meta
    missing = META_KEYS - set(meta)
    assert not missing, "metadata lacks %s: %r" % (sorted(missing), meta)
    assert meta["name"] == name, meta
    assert meta["dtype"] == dtype, meta
    assert meta["shape"] == shape, meta
    assert meta["bytes"] == nbytes, meta
    assert meta["owner"] == os.getuid(), meta
    assert meta["version"] == version, meta
    assert isinstance(meta["created"], float), meta
    assert isinstance(meta["modified"], float), meta
    assert abs(meta["created"] - time.time()) < 3600, meta
    assert meta["modified"] >= meta["created"], meta
    assert isinstance(meta["device"], int), meta


def check_error(error, result, code, name):
    assert isinstance(error, dict), "want an error map, got %r" % (error,)
    assert set(error) == {"code", "name", "message"}, error
    assert error["code"] == code, error
    assert error["name"] == name, error
    assert isinstance(error["message"], str) and error["message"], error
    assert result is None, result


def test_ping(d):
    with d.client() as c:
        for params in ([], [{}]):
            c.send([0, 1, "ping", params])
            msg = c.recv()
            assert msg[:3] == [1, 1, None], msg
            res = msg[3]
            assert res["pong"] is True, res
            assert isinstance(res["version"], str) and res["version"], res
            assert res["protocol"] == 1, res


def test_put_get(d):
    values = [1.0, -2.5, 3.25, 0.0, 1024.0, -7.0]
    data = struct.pack("<6f", *values)
    with d.client() as c:
        meta = c.call("tensor.put", {"name": "py/a", "dtype": "f32", "shape": [2, 3],
                                     "data": data})
        check_meta(meta, "py/a", "f32", [2, 3], 24, 1)
        got = c.call("tensor.get", {"name": "py/a"})
        check_meta(got, "py/a", "f32", [2, 3], 24, 1)
        assert isinstance(got["data"], bytes), type(got["data"])
        assert got["data"] == data
        assert list(struct.unpack("<6f", got["data"])) == values

        st = c.call("tensor.stat", {"name": "py/a"})
        check_meta(st, "py/a", "f32", [2, 3], 24, 1)
        assert "data" not in st, st

        # every dtype, little-endian bytes as they are
        for dtype, fmt in (("f16", "<4e"), ("bf16", None), ("i32", "<4i"), ("u8", None)):
            if fmt:
                raw = struct.pack(fmt, *([1, -2, 3, 4] if dtype == "i32" else [1.5, -2, 0.25, 8]))
            else:
                raw = bytes(range(4 if dtype == "u8" else 8))
            size = {"f16": 2, "bf16": 2, "i32": 4, "u8": 1}[dtype]
            name = "py/" + dtype
            meta = c.call("tensor.put", {"name": name, "dtype": dtype, "shape": [4],
                                         "data": raw})
            check_meta(meta, name, dtype, [4], 4 * size, 1)
            assert c.call("tensor.get", {"name": name})["data"] == raw
            assert c.call("tensor.delete", {"name": name}) == \
                {"name": name, "deleted": True, "bytes": 4 * size}

        # 16 MiB through a stock msgpack client
        big = os.urandom(16 << 20)
        c.call("tensor.put", {"name": "py/big", "dtype": "u8", "shape": [len(big)],
                              "data": big})
        assert c.call("tensor.get", {"name": "py/big"})["data"] == big
        lst = c.call("tensor.list", {"prefix": "py/"})
        assert [t["name"] for t in lst["tensors"]] == ["py/a", "py/big"], lst
        for t in lst["tensors"]:
            assert META_KEYS <= set(t), t
            assert "data" not in t, t
        c.call("tensor.delete", {"name": "py/big"})
        c.call("tensor.delete", {"name": "py/a"})


def test_pipelined(d):
    with d.client() as c:
        out = bytearray()
        n = 60
        for i in range(n):
            if i % 3 == 0:
                out += msgpack.packb([0, 1000 + i, "tensor.put",
                                      [{"name": "py/p", "dtype": "i32", "shape": [1],
                                        "data": struct.pack("<i", i)}]], use_bin_type=True)
            elif i % 3 == 1:
                out += msgpack.packb([0, 1000 + i, "tensor.get", [{"name": "py/p"}]],
                                     use_bin_type=True)
            else:
                out += msgpack.packb([0, 1000 + i, "ping", []], use_bin_type=True)
        c.send_raw(bytes(out))
        for i in range(n):
            msg = c.recv()
            assert msg is not None, "connection closed at response %d" % i
            assert msg[0] == 1 and msg[1] == 1000 + i, (i, msg[:2])
            assert msg[2] is None, msg[2]
            if i % 3 == 0:
                assert msg[3]["version"] == i // 3 + 1, msg[3]
            elif i % 3 == 1:
                assert struct.unpack("<i", msg[3]["data"])[0] == i - 1, msg[3]
            else:
                assert msg[3]["pong"] is True
        c.call("tensor.delete", {"name": "py/p"})

        # one request dribbled a byte at a time is still one request
        req = msgpack.packb([0, 77, "ping", [{}]], use_bin_type=True)
        for b in req:
            c.send_raw(bytes([b]))
            time.sleep(0.001)
        msg = c.recv()
        assert msg[:3] == [1, 77, None], msg


def test_error_shape(d):
    with d.client() as c:
        e, r = c.call_full("tensor.get", {"name": "py/missing"})
        check_error(e, r, 5, "NOT_FOUND")
        e, r = c.call_full("no.such.method", {})
        check_error(e, r, 12, "UNIMPLEMENTED")
        e, r = c.call_full("tensor.get", {"name": "py/x", "bogus": 1})
        check_error(e, r, 3, "INVALID_ARGUMENT")
        e, r = c.call_full("tensor.put", {"name": "py/x", "dtype": "f32", "shape": [2],
                                          "data": b"abc"})
        check_error(e, r, 3, "INVALID_ARGUMENT")
        e, r = c.call_full("tensor.put", {"name": "py x", "dtype": "f32", "shape": [1],
                                          "data": b"abcd"})
        check_error(e, r, 3, "INVALID_ARGUMENT")
        # a str where the data bin belongs
        e, r = c.call_full("tensor.put", {"name": "py/x", "dtype": "u8", "shape": [4],
                                          "data": "abcd"})
        check_error(e, r, 3, "INVALID_ARGUMENT")
        c.call("tensor.put", {"name": "py/once", "dtype": "u8", "shape": [1], "data": b"x"})
        e, r = c.call_full("tensor.put", {"name": "py/once", "dtype": "u8", "shape": [1],
                                          "data": b"y", "if_absent": True})
        check_error(e, r, 6, "ALREADY_EXISTS")
        c.call("tensor.delete", {"name": "py/once"})
        # params that are not [ {map} ]: a PROTOCOL error for that msgid
        c.send([0, 5, "ping", {"a": 1}])
        msg = c.recv()
        assert msg[0] == 1 and msg[1] == 5, msg
        check_error(msg[2], msg[3], 103, "PROTOCOL")
        # and the connection goes on
        assert c.call("ping")["pong"] is True


def test_protocol_error_notification(d):
    with d.client() as c:
        c.send_raw(b"\xc1\xc1\xc1")
        msg = c.recv()
        assert isinstance(msg, list) and len(msg) == 3, msg
        assert msg[0] == 2 and msg[1] == "protocol.error", msg
        assert isinstance(msg[2], list) and len(msg[2]) == 1, msg
        err = msg[2][0]
        assert set(err) == {"code", "name", "message"}, err
        assert err["code"] == 103 and err["name"] == "PROTOCOL", err
        assert c.recv() is None, "connection still open after protocol.error"


def test_profile(d):
    """profile: true adds gpu_ns, the device time of the request's submission
    (an int > 0: lavapipe has timestamps too), to op.run and graph.run results;
    without it there is none; a profile that is no boolean is refused and the
    request does nothing."""
    with d.client() as c:
        c.call("tensor.put", {"name": "py/p", "dtype": "f32", "shape": [4],
                              "data": struct.pack("<4f", 1, 2, 3, 4)})
        add = {"op": "add", "inputs": ["py/p", "py/p"]}
        for extra in ({}, {"out": "py/q"}):
            res = c.call("op.run", dict(add, profile=True, **extra))
            assert isinstance(res["gpu_ns"], int) and res["gpu_ns"] > 0, res
            if extra:
                check_meta(res, "py/q", "f32", [4], 16, 1)
                c.call("tensor.delete", {"name": "py/q"})
            else:
                assert struct.unpack("<4f", res["data"]) == (2, 4, 6, 8), res
            for off in ({}, {"profile": False}):
                res = c.call("op.run", dict(add, **off, **extra))
                assert "gpu_ns" not in res, res
                if extra:
                    c.call("tensor.delete", {"name": "py/q"})
        nodes = [{"id": "s", "op": "sigmoid", "inputs": ["py/p"]},
                 {"id": "m", "op": "mul", "inputs": ["py/p", "s"], "out": "py/g"}]
        res = c.call("graph.run", {"nodes": nodes, "outputs": ["s"], "profile": True})
        assert set(res) == {"outputs", "stored", "gpu_ns", "dispatches"}, res
        assert isinstance(res["gpu_ns"], int) and res["gpu_ns"] > 0, res
        res = c.call("graph.run", {"nodes": nodes, "profile": False})
        assert set(res) == {"outputs", "stored"}, res
        c.call("tensor.delete", {"name": "py/g"})
        for bad in ("yes", 1, 0, None, [True], {"on": True}, b"\x01"):
            e, r = c.call_full("op.run", dict(add, out="py/never", profile=bad))
            check_error(e, r, 3, "INVALID_ARGUMENT")
            assert "profile" in e["message"], e
            e, r = c.call_full("graph.run", {"nodes": nodes, "profile": bad})
            check_error(e, r, 3, "INVALID_ARGUMENT")
            assert "profile" in e["message"], e
        for name in ("py/never", "py/g"):
            e, r = c.call_full("tensor.stat", {"name": name})
            check_error(e, r, 5, "NOT_FOUND")
        c.call("tensor.delete", {"name": "py/p"})


TESTS = [test_ping, test_put_get, test_pipelined, test_error_shape,
         test_protocol_error_notification, test_profile]


def main():
    failed = 0
    d = Daemon().start()
    try:
        for t in TESTS:
            t0 = time.monotonic()
            try:
                t(d)
                print("ok   %s (%.2f s)" % (t.__name__, time.monotonic() - t0))
            except Exception:
                failed += 1
                print("FAIL %s" % t.__name__)
                traceback.print_exc()
            if not d.alive():
                print("tensord died")
                failed += 1
                break
    finally:
        if failed:
            d.dump_log()
        try:
            d.stop()
        except Exception:
            traceback.print_exc()
            failed += 1
    print("%d of %d failed" % (failed, len(TESTS)) if failed else "all %d passed" % len(TESTS))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

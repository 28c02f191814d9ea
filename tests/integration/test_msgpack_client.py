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
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
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
        # a str where the data bin belongs: its bytes, as an encoder without
        # bin would send them (docs/protocol.md)
        c.call("tensor.put", {"name": "py/s", "dtype": "u8", "shape": [4], "data": "abcd"})
        assert c.call("tensor.get", {"name": "py/s"})["data"] == b"abcd"
        c.call("tensor.delete", {"name": "py/s"})
        # ... but not something else
        e, r = c.call_full("tensor.put", {"name": "py/x", "dtype": "u8", "shape": [4],
                                          "data": 1234})
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


def pack_all_bin(obj):
    """msgpack with every string packed as bin, as msgpack-RPC clients written
    for servers that predate the str/bin split do: built by hand here, since
    python3-msgpack packs str as str."""
    if isinstance(obj, str):
        obj = obj.encode()
    if isinstance(obj, bytes):
        n = len(obj)
        head = (b"\xc4" + struct.pack("B", n) if n < 1 << 8 else
                b"\xc5" + struct.pack(">H", n) if n < 1 << 16 else b"\xc6" + struct.pack(">I", n))
        return head + obj
    if isinstance(obj, (list, tuple)):
        n = len(obj)
        head = bytes([0x90 | n]) if n < 16 else b"\xdc" + struct.pack(">H", n)
        return head + b"".join(pack_all_bin(o) for o in obj)
    if isinstance(obj, dict):
        n = len(obj)
        head = bytes([0x80 | n]) if n < 16 else b"\xde" + struct.pack(">H", n)
        return head + b"".join(pack_all_bin(k) + pack_all_bin(v) for k, v in obj.items())
    return msgpack.packb(obj)


def call_packed(c, packer, msgid, method, params):
    """Send one request packed by `packer`; returns (error, result)."""
    c.send_raw(packer([0, msgid, method, [params]]))
    msg = c.recv()
    assert isinstance(msg, list) and msg[:2] == [1, msgid], msg
    return msg[2], msg[3]


def exercise_client(c, packer, prefix):
    """Every kind of string a request holds (method, keys, names, dtype, op,
    nested attrs and graph nodes), packed by `packer`."""
    def call(method, params):
        e, r = call_packed(c, packer, call.msgid, method, params)
        call.msgid += 1
        assert e is None, "%s: %r" % (method, e)
        return r
    call.msgid = 100

    assert call("ping", {})["pong"] is True
    a = struct.pack("<4f", 1.0, -2.0, 3.5, 8.0)
    meta = call("tensor.put", {"name": prefix + "a", "dtype": "f32", "shape": [2, 2], "data": a})
    check_meta(meta, prefix + "a", "f32", [2, 2], 16, 1)
    got = call("tensor.get", {"name": prefix + "a"})
    assert got["data"] == a and got["dtype"] == "f32" and got["shape"] == [2, 2], got
    # u8 data that happens to be UTF-8 text stays bytes
    call("tensor.put", {"name": prefix + "t", "dtype": "u8", "shape": [4], "data": b"abcd"})
    assert call("tensor.get", {"name": prefix + "t"})["data"] == b"abcd"
    res = call("op.run", {"op": "sum", "inputs": [prefix + "a"], "attrs": {"axis": [1]}})
    assert struct.unpack("<2f", res["data"]) == (-1.0, 11.5), res
    res = call("op.run", {"op": "cast", "inputs": [prefix + "a"], "attrs": {"dtype": "i32"}})
    assert res["dtype"] == "i32" and struct.unpack("<4i", res["data"]) == (1, -2, 3, 8), res
    nodes = [{"id": "s", "op": "add", "inputs": [prefix + "a", prefix + "a"]},
             {"id": "m", "op": "mul", "inputs": ["s", prefix + "a"], "out": prefix + "m"}]
    res = call("graph.run", {"nodes": nodes, "outputs": ["s"]})
    assert struct.unpack("<4f", res["outputs"]["s"]["data"]) == (2.0, -4.0, 7.0, 16.0), res
    assert prefix + "m" in res["stored"], res
    names = {m["name"] for m in call("tensor.list", {"prefix": prefix})["tensors"]}
    assert names == {prefix + "a", prefix + "t", prefix + "m"}, names
    # errors still come back as errors, the connection goes on
    e, r = call_packed(c, packer, 1, "no.such.method", {})
    check_error(e, r, 12, "UNIMPLEMENTED")
    e, r = call_packed(c, packer, 2, "tensor.get", {"name": prefix + "a", "bogus": 1})
    check_error(e, r, 3, "INVALID_ARGUMENT")
    e, r = call_packed(c, packer, 3, "tensor.put", {"name": prefix + "x", "dtype": "f64",
                                                    "shape": [1], "data": b"\0" * 8})
    check_error(e, r, 3, "INVALID_ARGUMENT")
    for n in ("a", "t", "m"):
        call("tensor.delete", {"name": prefix + n})


def test_bin_client(d):
    """A client that packs every string as bin: method names, map keys and
    string params are read as str (docs/protocol.md), tensor data stays bytes."""
    with d.client() as c:
        # the bytes on the wire really are bin: the method of ping is c4 04 "ping"
        assert pack_all_bin([0, 1, "ping", []]) == b"\x94\x00\x01\xc4\x04ping\x90"
        exercise_client(c, pack_all_bin, "bin/")
        # a bin method that is not UTF-8: PROTOCOL for that msgid only
        c.send_raw(b"\x94\x00\x07\xc4\x02\xff\xfe\x90")
        msg = c.recv()
        assert msg[:2] == [1, 7], msg
        check_error(msg[2], msg[3], 103, "PROTOCOL")
        assert c.call("ping")["pong"] is True


def test_raw_client(d):
    """A client whose encoder predates bin: msgpack.packb(use_bin_type=False)
    packs str and bytes alike as raw (str); tensor data arrives as str."""
    with d.client() as c:
        raw = lambda obj: msgpack.packb(obj, use_bin_type=False)  # noqa: E731
        assert raw(b"ab") == b"\xa2ab"
        exercise_client(c, raw, "raw/")


def test_notifications_ignored(d):
    """Client notifications (type 2), unknown method or not, str or bin, are
    ignored: no answer, no disconnect, and requests keep working."""
    with d.client() as c:
        c.send([2, "no.such.notification", [{"x": 1}]])
        c.send([2, "ping", []])
        c.send_raw(pack_all_bin([2, "nvim_buf_lines_event", [{"a": "b"}]]))
        c.send_raw(msgpack.packb([2, "old.client", []], use_bin_type=False))
        c.send([0, 42, "ping", []])
        msg = c.recv()
        assert msg[:3] == [1, 42, None] and msg[3]["pong"] is True, msg
        c.call("tensor.put", {"name": "note/x", "dtype": "u8", "shape": [1], "data": b"\x05"})
        c.send([2, "tensor.delete", [{"name": "note/x"}]])   # not executed
        assert c.call("tensor.get", {"name": "note/x"})["data"] == b"\x05"
        c.call("tensor.delete", {"name": "note/x"})
    # logged at debug level: not by this daemon, by one started with -v
    with open(d.log, errors="replace") as f:
        assert "notification" not in f.read()
    with Daemon(["-v"]) as dv:
        with dv.client() as c:
            c.send([2, "no.such\nnotification", []])
            assert c.call("ping")["pong"] is True
        with open(dv.log, errors="replace") as f:
            log = f.read()
        assert "notification 'no.such?notification' ignored" in log, log


def test_pynvim_client(d):
    """Neovim's Python client (python3-pynvim) opens with this notification:
    five positional params. The connection stays; ping, put and get work; a
    request with positional params gets a PROTOCOL error for its msgid and
    the connection goes on too (docs/protocol.md, "Notifications")."""
    info = {"major": 0, "minor": 5, "patch": 0}
    with d.client() as c:
        c.send([2, "nvim_set_client_info",
                ["python3-client", info, "remote", {}, {"license": "Apache v2"}]])
        c.send([2, 7, None])            # no method name, params not an array
        c.send([2, "x", {"not": "an array"}])
        assert c.call("ping")["pong"] is True
        c.call("tensor.put", {"name": "nvim/x", "dtype": "f32", "shape": [2],
                              "data": b"\0\0\x80?\0\0\0@"})
        assert c.call("tensor.get", {"name": "nvim/x"})["data"] == b"\0\0\x80?\0\0\0@"
        c.send([0, 9, "tensor.get", ["nvim/x"]])
        msg = c.recv()
        assert msg[0] == 1 and msg[1] == 9 and msg[3] is None, msg
        assert msg[2]["name"] == "PROTOCOL", msg
        assert "params must be an array holding one map" in msg[2]["message"], msg
        c.send([0, 10, "tensor.get", [{"name": "nvim/x"}, 2]])
        msg = c.recv()
        assert msg[1] == 10 and msg[2]["name"] == "PROTOCOL", msg
        assert c.call("tensor.delete", {"name": "nvim/x"})


TESTS = [test_ping, test_put_get, test_pipelined, test_error_shape,
         test_protocol_error_notification, test_profile, test_bin_client,
         test_raw_client, test_notifications_ignored, test_pynvim_client]


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

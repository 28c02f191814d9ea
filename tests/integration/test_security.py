#!/usr/bin/python3
"""Access control, quotas and client limits against a real tensord
(docs/security.md).

Other users are real: a forked child drops to another uid/gid with
os.setresuid before it connects, so the daemon sees it through SO_PEERCRED.
That needs root, as in CI; without it the test is skipped (exit 77)."""
import os
import socket
import struct
import sys
import tempfile
import time
import traceback

import msgpack

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from daemon import Client, Daemon, as_user  # noqa: E402

NOBODY = 65534
USER_A = 65533   # owner in the group tests
USER_B = 65532   # member of GROUP by a supplementary group
USER_C = 65531   # in no shared group
GROUP = 4242

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL", what, flush=True)


def f32(*v):
    return struct.pack("<%df" % len(v), *v)


def start(config_text=""):
    """A daemon reading `config_text`, its socket reachable by every uid."""
    cfg_dir = tempfile.mkdtemp(prefix="tensord-sec-cfg-", dir="/tmp")
    cfg = os.path.join(cfg_dir, "tensord.conf")
    with open(cfg, "w") as f:
        f.write(config_text)
    os.chmod(cfg_dir, 0o755)
    os.chmod(cfg, 0o644)
    d = Daemon(["--config", cfg]).start()
    os.chmod(d.dir, 0o755)
    os.chmod(d.sock, 0o666)
    d.cfg_dir = cfg_dir
    return d


def stop(d):
    d.stop()
    for name in os.listdir(d.cfg_dir):
        os.unlink(os.path.join(d.cfg_dir, name))
    os.rmdir(d.cfg_dir)


def err_of(c, method, params=None):
    """(name, message) of the error `method` gives, or (None, result)."""
    e, res = c.call_full(method, params)
    if e is None:
        return None, res
    return e["name"], e["message"]


def denied(pair, name):
    return pair[0] == "PERMISSION_DENIED" and name in pair[1]


# ---- access --------------------------------------------------------------

NODES_ADD = [{"id": "s", "op": "add", "inputs": ["~root/sec/p", "~root/sec/p"]}]


def other_user_attempts(sock):
    """What a non-owner gets for each way of touching root's private sec/p,
    named explicitly as ~root/sec/p (a plain name is the caller's own)."""
    with Client(sock) as c:
        out = {}
        c.call("tensor.put", {"name": "sec/mine", "dtype": "f32", "shape": [2], "data": f32(1, 2)})
        out["get"] = err_of(c, "tensor.get", {"name": "~root/sec/p"})
        out["stat"] = err_of(c, "tensor.stat", {"name": "~root/sec/p"})
        out["put"] = err_of(c, "tensor.put", {"name": "~root/sec/p", "dtype": "f32", "shape": [2],
                                              "data": f32(9, 9)})
        out["delete"] = err_of(c, "tensor.delete", {"name": "~root/sec/p"})
        out["chmod"] = err_of(c, "tensor.chmod", {"name": "~root/sec/p", "mode": "world-write"})
        out["op_input"] = err_of(c, "op.run", {"op": "add", "inputs": ["~root/sec/p", "sec/mine"]})
        out["op_out"] = err_of(c, "op.run", {"op": "add", "inputs": ["sec/mine", "sec/mine"],
                                             "out": "~root/sec/p"})
        out["graph"] = err_of(c, "graph.run", {"nodes": NODES_ADD, "outputs": ["s"]})
        out["train_param"] = err_of(c, "train.step", {
            "nodes": [{"id": "L", "op": "sum", "inputs": ["~root/sec/p"]}], "loss": "L",
            "params": ["~root/sec/p"], "optimizer": {"type": "sgd", "lr": 0.1}})
        out["train_data"] = err_of(c, "train.run", {
            "nodes": [{"id": "h", "op": "mul", "inputs": ["xb", "sec/mine"]},
                      {"id": "L", "op": "sum", "inputs": ["h"]}],
            "loss": "L", "params": ["sec/mine"], "data": {"xb": "~root/sec/p"}, "batch_size": 1})
        out["list"] = [t["name"] for t in c.call("tensor.list", {"prefix": "sec/"})["tensors"]]
        out["root_list"] = [t["name"] for t in c.call("tensor.list", {"prefix": "~root/sec/"})["tensors"]]
        out["plain"] = err_of(c, "tensor.get", {"name": "sec/p"})
        out["mine"] = c.call("tensor.stat", {"name": "sec/mine"})
        out["info_user"] = c.call("info")["user"]
        return out


def test_access(d):
    c = d.client()
    c.call("tensor.put", {"name": "sec/p", "dtype": "f32", "shape": [2], "data": f32(3, 4)})
    meta = c.call("tensor.stat", {"name": "sec/p"})
    check(meta["owner"] == 0 and meta["group"] == 0 and meta["mode"] == "private",
          "a new tensor is private to its creator: %r" % meta)

    out = as_user(NOBODY, lambda: other_user_attempts(d.sock))
    for k in ("get", "stat", "put", "delete", "chmod", "op_input", "op_out", "graph",
              "train_param", "train_data"):
        check(denied(out[k], "sec/p"), "nobody %s on a private tensor: %r" % (k, out[k]))
    check("uid 0" in out["get"][1] and "private" in out["get"][1],
          "the denial names owner and mode: %r" % (out["get"],))
    check(out["list"] == ["sec/mine"], "list shows the caller's namespace: %r" % out["list"])
    check(out["root_list"] == [], "list hides what the caller cannot read: %r" % out["root_list"])
    check(out["plain"][0] == "NOT_FOUND", "a plain name is the caller's own: %r" % (out["plain"],))
    mine = out["mine"]
    check(mine["owner"] == NOBODY and mine["group"] == NOBODY and mine["mode"] == "private",
          "nobody owns what it created: %r" % mine)
    check(out["info_user"]["uid"] == NOBODY and out["info_user"]["tensors"] == 1 and
          out["info_user"]["bytes"] == 8, "info.user is the caller's: %r" % out["info_user"])

    # nothing changed
    res = c.call("tensor.get", {"name": "sec/p"})
    check(res["data"] == f32(3, 4) and res["version"] == 1, "the denied put changed sec/p: %r" % res)

    # root may do all to nobody's tensor
    res = c.call("tensor.get", {"name": "~nobody/sec/mine"})
    check(res["data"] == f32(1, 2) and res["name"] == "~nobody/sec/mine",
          "root reads another's private tensor: %r" % res["name"])
    res = c.call("op.run", {"op": "add", "inputs": ["~nobody/sec/mine", "sec/p"], "out": "~%d/sec/mine" % NOBODY})
    check(res["owner"] == NOBODY and res["version"] == 2, "a replacement by root keeps the owner: %r" % res)
    check(c.call("info")["user"]["uid"] == 0, "info.user for root")

    # world-read: nobody reads, cannot write
    res = c.call("tensor.chmod", {"name": "sec/p", "mode": "world-read"})
    check(res["mode"] == "world-read" and res["version"] == 1, "chmod result: %r" % res)

    def read_after_chmod():
        with Client(d.sock) as cc:
            return (cc.call("tensor.get", {"name": "~root/sec/p"})["data"],
                    cc.call("op.run", {"op": "add", "inputs": ["~root/sec/p", "~0/sec/p"]})["data"],
                    [t["name"] for t in cc.call("tensor.list", {"prefix": "~root/sec/p"})["tensors"]],
                    err_of(cc, "tensor.put", {"name": "~root/sec/p", "dtype": "f32", "shape": [2],
                                              "data": f32(0, 0)}),
                    err_of(cc, "tensor.delete", {"name": "~root/sec/p"}))
    data, summed, listed, put, delete = as_user(NOBODY, read_after_chmod)
    check(data == f32(3, 4) and summed == f32(6, 8) and listed == ["~root/sec/p"],
          "world-read lets others read and use as input")
    check(denied(put, "sec/p") and denied(delete, "sec/p"), "world-read does not let others write")

    # world-write: others replace (the owner stays) and delete; only the owner changes the mode
    c.call("tensor.chmod", {"name": "sec/p", "mode": "world-write"})

    def write_after_chmod():
        with Client(d.sock) as cc:
            res = cc.call("tensor.put", {"name": "~root/sec/p", "dtype": "f32", "shape": [2],
                                         "data": f32(7, 8)})
            mode_put = err_of(cc, "tensor.put", {"name": "~root/sec/p", "dtype": "f32", "shape": [2],
                                                 "data": f32(7, 8), "mode": "private"})
            chmod = err_of(cc, "tensor.chmod", {"name": "~root/sec/p", "mode": "private"})
            return res, mode_put, chmod, cc.call("tensor.delete", {"name": "~root/sec/p"})
    res, mode_put, chmod, deleted = as_user(NOBODY, write_after_chmod)
    check(res["owner"] == 0 and res["mode"] == "world-write" and res["version"] == 2,
          "a world-write replacement keeps owner and mode: %r" % res)
    check(denied(mode_put, "sec/p"), "only the owner sets the mode through put: %r" % (mode_put,))
    check(denied(chmod, "sec/p"), "only the owner chmods: %r" % (chmod,))
    check(deleted["deleted"] is True, "world-write lets others delete")
    c.call("tensor.delete", {"name": "~nobody/sec/mine"})
    c.close()


def test_groups(d):
    A_T = "~%d/grp/t" % USER_A     # A's tensor, as the others name it
    def a_creates():
        with Client(d.sock) as cc:
            cc.call("tensor.put", {"name": "grp/t", "dtype": "f32", "shape": [1], "data": f32(5),
                                   "mode": "group-read"})
            wrong = err_of(cc, "tensor.chmod", {"name": "grp/t", "group": GROUP + 1})
            return cc.call("tensor.chmod", {"name": "grp/t", "group": GROUP}), wrong
    meta, wrong = as_user(USER_A, a_creates, groups=[GROUP])
    check(meta["owner"] == USER_A and meta["group"] == GROUP and meta["mode"] == "group-read",
          "group set by chmod: %r" % meta)
    check(wrong[0] == "PERMISSION_DENIED" and "not in group" in wrong[1],
          "a user cannot give a tensor to a group it is not in: %r" % (wrong,))

    def try_rw():
        with Client(d.sock) as cc:
            return (err_of(cc, "tensor.get", {"name": A_T}),
                    err_of(cc, "tensor.put", {"name": A_T, "dtype": "f32", "shape": [1],
                                              "data": f32(6)}))
    got, put = as_user(USER_B, try_rw, gid=USER_B, groups=[GROUP])
    check(got[0] is None and got[1]["data"] == f32(5), "a group member reads group-read: %r" % (got,))
    check(denied(put, "grp/t"), "group-read does not give write: %r" % (put,))
    got, put = as_user(USER_C, try_rw)
    check(denied(got, "grp/t"), "a non-member cannot read group-read: %r" % (got,))

    # group-write, changed by the owner; the primary gid counts as membership too
    as_user(USER_A, lambda: Client(d.sock).call(
        "tensor.chmod", {"name": "grp/t", "mode": "group-write"}))
    got, put = as_user(USER_B, try_rw, gid=GROUP)
    check(put[0] is None and put[1]["owner"] == USER_A, "a group member writes group-write: %r" % (put,))
    got, put = as_user(USER_C, try_rw)
    check(denied(put, "grp/t"), "a non-member cannot write group-write")

    # root gives the tensor to any group
    c = d.client()
    res = c.call("tensor.chmod", {"name": A_T, "group": 1, "mode": "private"})
    check(res["group"] == 1 and res["mode"] == "private", "root chmods anything: %r" % res)
    c.call("tensor.delete", {"name": A_T})
    c.close()


def test_garbage(d):
    c = d.client()
    c.call("tensor.put", {"name": "gb/t", "dtype": "u8", "shape": [1], "data": b"\x01"})
    bad_modes = ["rw", "", "private,world-read", "group-read,", "0644", "WORLD-READ", "x" * 300,
                 "world-read\x00", "gr\u00fcn"]
    for m in bad_modes:
        e = err_of(c, "tensor.chmod", {"name": "gb/t", "mode": m})
        check(e[0] == "INVALID_ARGUMENT" and "mode" in e[1], "chmod mode %r: %r" % (m, e))
        e = err_of(c, "tensor.put", {"name": "gb/new", "dtype": "u8", "shape": [1], "data": b"\x01",
                                     "mode": m})
        check(e[0] == "INVALID_ARGUMENT", "put mode %r: %r" % (m, e))
    for params in ({"name": "gb/t", "mode": 7}, {"name": "gb/t", "mode": None},
                   {"name": "gb/t", "group": -1}, {"name": "gb/t", "group": "wheel"},
                   {"name": "gb/t", "group": 2 ** 32}, {"name": "gb/t", "group": 2 ** 32 - 1},
                   {"name": "gb/t"}, {"name": "gb/t", "mode": "private", "owner": 5},
                   {"mode": "private"}, {"name": 5, "mode": "private"}):
        e = err_of(c, "tensor.chmod", params)
        check(e[0] == "INVALID_ARGUMENT", "chmod %r: %r" % (params, e))
    e = err_of(c, "tensor.chmod", {"name": "gb/none", "mode": "private"})
    check(e[0] == "NOT_FOUND", "chmod of a missing tensor: %r" % (e,))
    for name in ("", "a b", "x" * 256, "a\x00b", "caf\u00e9", "tab\t", "new\nline", "a%2F"):
        for method, params in (("tensor.put", {"name": name, "dtype": "u8", "shape": [1],
                                               "data": b"\x01"}),
                               ("tensor.get", {"name": name}),
                               ("tensor.chmod", {"name": name, "mode": "private"}),
                               ("op.run", {"op": "neg", "inputs": ["gb/t"], "out": name}),
                               ("op.run", {"op": "neg", "inputs": [name]})):
            e = err_of(c, method, params)
            check(e[0] == "INVALID_ARGUMENT", "%s with name %r: %r" % (method, name, e))
    e = err_of(c, "tensor.list", {"prefix": "bad prefix"})
    check(e[0] == "INVALID_ARGUMENT", "list prefix with a space: %r" % (e,))
    check(c.call("tensor.list", {"prefix": ""})["tensors"] != [], "an empty prefix lists all")
    # names that look like paths are names, nothing more
    for name in ("../../etc/passwd", "/abs", ".", ".."):
        res = c.call("tensor.put", {"name": name, "dtype": "u8", "shape": [1], "data": b"\x02"})
        check(res["name"] == name, "name %r stored as given" % name)
        c.call("tensor.delete", {"name": name})
    c.call("tensor.delete", {"name": "gb/t"})
    c.close()


# ---- quotas and device memory ----------------------------------------------

def quota_attempts(sock):
    with Client(sock) as c:
        out = {}

        def put(name, nbytes, **kw):
            p = {"name": name, "dtype": "u8", "shape": [nbytes], "data": bytes([1]) * nbytes}
            p.update(kw)
            return err_of(c, "tensor.put", p)
        out["a"] = put("q/a", 512)
        out["b_big"] = put("q/b", 600)
        out["b_big_stat"] = err_of(c, "tensor.stat", {"name": "q/b"})
        out["b"] = put("q/b", 256)
        out["c"] = put("q/c", 4)
        out["c_stat"] = err_of(c, "tensor.stat", {"name": "q/c"})
        out["a_grow_ok"] = put("q/a", 768)          # 768 + 256 = 1024: exactly the quota
        out["a_grow_over"] = put("q/a", 769)
        out["a_after"] = c.call("tensor.get", {"name": "q/a"})
        out["op_new"] = err_of(c, "op.run", {"op": "neg", "inputs": ["q/b"], "out": "q/c"})
        out["graph"] = err_of(c, "graph.run", {"nodes": [
            {"id": "x", "op": "neg", "inputs": ["q/b"], "out": "q/b"},
            {"id": "y", "op": "neg", "inputs": ["q/b"], "out": "q/d"}]})
        out["b_after"] = c.call("tensor.stat", {"name": "q/b"})
        out["d_stat"] = err_of(c, "tensor.stat", {"name": "q/d"})
        out["info"] = c.call("info")
        c.call("tensor.delete", {"name": "q/a"})
        c.call("tensor.put", {"name": "q/w", "dtype": "f32", "shape": [2], "data": f32(1, 2)})
        # Adam would store two state tensors: over the quota, so nothing changes
        out["train"] = err_of(c, "train.step", {
            "nodes": [{"id": "L", "op": "sum", "inputs": ["q/w"]}], "loss": "L", "params": ["q/w"],
            "optimizer": {"type": "adam", "lr": 0.1}})
        out["w_after"] = c.call("tensor.get", {"name": "q/w"})
        out["list"] = [t["name"] for t in c.call("tensor.list", {"prefix": "q/"})["tensors"]]
        out["replace_same"] = err_of(c, "op.run", {"op": "neg", "inputs": ["q/b"], "out": "q/b"})
        return out


def test_quotas():
    d = start("user_max_tensors = 2\nuser_max_bytes = 1K\n")
    try:
        out = as_user(NOBODY, lambda: quota_attempts(d.sock))
        check(out["a"][0] is None, "a put within the quota: %r" % (out["a"],))
        e = out["b_big"]
        check(e[0] == "RESOURCE_EXHAUSTED" and "user_max_bytes" in e[1] and "1024" in e[1],
              "bytes quota named: %r" % (e,))
        check(out["b_big_stat"][0] == "NOT_FOUND", "nothing stored past the bytes quota")
        check(out["b"][0] is None, "a second tensor within both quotas")
        e = out["c"]
        check(e[0] == "RESOURCE_EXHAUSTED" and "user_max_tensors" in e[1], "count quota named: %r" % (e,))
        check(out["c_stat"][0] == "NOT_FOUND", "nothing stored past the count quota")
        check(out["a_grow_ok"][0] is None, "growing up to the quota exactly: %r" % (out["a_grow_ok"],))
        check(out["a_grow_over"][0] == "RESOURCE_EXHAUSTED", "growing past it: %r" % (out["a_grow_over"],))
        check(out["a_after"]["bytes"] == 768 and out["a_after"]["version"] == 2,
              "a refused replacement leaves the old tensor: %r" % out["a_after"]["version"])
        check(out["op_new"][0] == "RESOURCE_EXHAUSTED" and "user_max_tensors" in out["op_new"][1],
              "op.run out past the quota: %r" % (out["op_new"],))
        check(out["graph"][0] == "RESOURCE_EXHAUSTED", "graph.run past the quota: %r" % (out["graph"],))
        check(out["b_after"]["version"] == 1 and out["d_stat"][0] == "NOT_FOUND",
              "a refused graph stores none of its outputs")
        user = out["info"]["user"]
        check(user == {"uid": NOBODY, "gid": NOBODY, "tensors": 2, "bytes": 1024,
                       "max_tensors": 2, "max_bytes": 1024}, "info.user: %r" % user)
        lim = out["info"]["limits"]
        check(lim["user_max_tensors"] == 2 and lim["user_max_bytes"] == 1024, "info.limits: %r" % lim)
        check(out["train"][0] == "RESOURCE_EXHAUSTED", "train.step state past the quota: %r" % (out["train"],))
        check(out["w_after"]["data"] == f32(1, 2) and out["w_after"]["version"] == 1,
              "a refused train.step leaves its parameters")
        check(out["list"] == ["q/b", "q/w"], "no optimizer state stored: %r" % out["list"])
        check(out["replace_same"][0] is None, "replacing within the quota at the count limit")

        # another uid has a quota of its own; root is held to it as well
        def other():
            with Client(d.sock) as cc:
                return err_of(cc, "tensor.put", {"name": "q/o", "dtype": "u8", "shape": [1000],
                                                 "data": bytes(1000)})
        check(as_user(USER_A, other)[0] is None, "quotas are per uid")
        c = d.client()
        e = err_of(c, "tensor.put", {"name": "q/r", "dtype": "u8", "shape": [2000], "data": bytes(2000)})
        check(e[0] == "RESOURCE_EXHAUSTED" and "uid 0" in e[1], "root has the same quota: %r" % (e,))
        c.close()
    finally:
        stop(d)


def test_device_memory():
    # 8 MiB of device memory: tensors over 1 MiB get blocks of their own
    d = start("max_device_bytes = 8M\n")
    try:
        c = d.client()
        mib = 1 << 20
        e = err_of(c, "tensor.put", {"name": "m/huge", "dtype": "u8", "shape": [9 * mib],
                                     "data": bytes(9 * mib)})
        check(e[0] == "RESOURCE_EXHAUSTED" and "allocates at once" in e[1],
              "an allocation larger than the device memory: %r" % (e,))
        r1 = err_of(c, "tensor.put", {"name": "m/a", "dtype": "u8", "shape": [3 * mib], "data": bytes(3 * mib)})
        r2 = err_of(c, "tensor.put", {"name": "m/b", "dtype": "u8", "shape": [3 * mib], "data": bytes(3 * mib)})
        check(r1[0] is None and r2[0] is None, "two 3 MiB tensors fit: %r %r" % (r1[0], r2[0]))
        e = err_of(c, "tensor.put", {"name": "m/c", "dtype": "u8", "shape": [3 * mib], "data": bytes(3 * mib)})
        check(e[0] == "RESOURCE_EXHAUSTED" and "out of device memory" in e[1], "device memory full: %r" % (e,))
        check(err_of(c, "tensor.stat", {"name": "m/c"})[0] == "NOT_FOUND", "nothing stored")
        e = err_of(c, "op.run", {"op": "neg", "inputs": ["m/a"]})
        check(e[0] == "RESOURCE_EXHAUSTED" and "device memory" in e[1], "an op result that does not fit: %r" % (e,))
        e = err_of(c, "graph.run", {"nodes": [{"id": "x", "op": "neg", "inputs": ["m/a"]},
                                              {"id": "y", "op": "neg", "inputs": ["x"], "out": "m/y"}]})
        check(e[0] == "RESOURCE_EXHAUSTED", "a graph that does not fit: %r" % (e,))
        check(c.call("ping")["pong"] is True and d.alive(), "the daemon keeps serving")
        c.call("tensor.delete", {"name": "m/b"})
        res = c.call("op.run", {"op": "neg", "inputs": ["m/a"], "out": "m/n"})
        check(res["bytes"] == 3 * mib, "memory freed is usable again")
        info = c.call("info")
        check(info["limits"]["max_device_bytes"] == 8 * mib, "info.limits.max_device_bytes")
        c.close()
    finally:
        stop(d)


# ---- client limits -----------------------------------------------------------

def refused_reason(sock):
    """Connect and read what the daemon says before it closes, or None if it serves us."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(sock)
    try:
        s.sendall(msgpack.packb([0, 1, "ping", []]))
    except (BrokenPipeError, ConnectionResetError):
        pass  # refused already: its reason is still there to read
    u = msgpack.Unpacker(raw=False)
    msgs = []
    while True:
        try:
            data = s.recv(1 << 16)
        except ConnectionResetError:
            data = b""
        if not data:
            break
        u.feed(data)
        msgs.extend(u)
        if any(m[0] == 1 for m in msgs):
            break
    s.close()
    for m in msgs:
        if m[0] == 2 and m[1] == "protocol.error":
            return m[2][0]
    return None


def test_connection_limits():
    d = start("max_connections = 3\nmax_connections_per_user = 2\n")
    try:
        a = d.client()
        # the start-up probe's connection may not be reaped yet
        deadline = time.monotonic() + 10
        while a.call("info")["connections"] > 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        b = d.client()
        a.call("ping")
        b.call("ping")
        why = refused_reason(d.sock)
        check(why is not None and why["name"] == "UNAVAILABLE" and
              "max_connections_per_user" in why["message"], "per-user limit: %r" % (why,))
        r = os.fork()
        if r == 0:
            # nobody's first connection fits; a fourth client of any uid does not
            try:
                os.setresgid(NOBODY, NOBODY, NOBODY)
                os.setresuid(NOBODY, NOBODY, NOBODY)
                n = d.client()
                n.call("ping")
                why2 = refused_reason(d.sock)
                ok = why2 is not None and "max_connections)" in why2["message"]
                n.close()
                os._exit(0 if ok else 1)
            except BaseException:
                traceback.print_exc()
                os._exit(2)
        _, status = os.waitpid(r, 0)
        check(os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0,
              "max_connections refuses the extra client with a reason (status %r)" % status)
        check(b.call("ping")["pong"], "refusals do not disturb connected clients")
        b.close()
        time.sleep(0.2)
        c = d.client()
        check(c.call("ping")["pong"], "a freed slot is usable again")
        c.close()
        a.close()
        with open(d.log, errors="replace") as f:
            log = f.read()
        check("max_connections_per_user" in log, "the refusal is logged")
    finally:
        stop(d)


def recv_until_response(c, msgid, timeout):
    """Messages until the response to `msgid`: (notifications, error, result)."""
    c.sock.settimeout(timeout)
    notes = []
    while True:
        m = c.recv()
        if m is None:
            raise ConnectionError("closed")
        if m[0] == 2:
            notes.append(m)
        elif m[1] == msgid:
            return notes, m[2], m[3]


def ping_latencies(c, seconds):
    worst, n = 0.0, 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t0 = time.monotonic()
        c.call("ping")
        worst = max(worst, time.monotonic() - t0)
        n += 1
        time.sleep(0.01)
    return worst, n


def test_inflight_and_backlog():
    d = start("max_inflight = 4\nmax_output_backlog = 64K\nstall_timeout = 2\n")
    try:
        a, b = d.client(), d.client()
        # -- within the limits: a deep pipeline of small requests gets every answer, in order
        ids = [a.request("ping") for _ in range(300)]
        for i in ids:
            e, res = a.response(i)
            check(e is None and res["pong"], "pipelined ping %d" % i)

        # -- in flight: while a's train.run runs, its later requests wait; past
        # max_inflight the daemon stops reading them, so the client's writes stall
        rows = 64
        a.call("tensor.put", {"name": "f/x", "dtype": "f32", "shape": [rows, 1],
                              "data": f32(*range(rows))})
        a.call("tensor.put", {"name": "f/y", "dtype": "f32", "shape": [rows, 1],
                              "data": f32(*[2.0 * i for i in range(rows)])})
        a.call("tensor.put", {"name": "f/w", "dtype": "f32", "shape": [1, 1], "data": f32(0)})
        run = {"nodes": [{"id": "h", "op": "matmul", "inputs": ["xb", "f/w"]},
                         {"id": "L", "op": "mse", "inputs": ["h", "yb"]}],
               "loss": "L", "params": ["f/w"], "optimizer": {"type": "sgd", "lr": 1e-5},
               "data": {"xb": "f/x", "yb": "f/y"}, "batch_size": 8, "progress_every": 1000000}
        # a run far longer than the test; ended below by deleting its data
        mid = a.request("train.run", dict(run, steps=10000000))
        time.sleep(0.2)
        payload = bytes(64 << 10)
        put = msgpack.packb([0, 0, "tensor.put", [{"name": "f/p", "dtype": "u8",
                                                    "shape": [len(payload)], "data": payload}]])
        a.sock.setblocking(False)
        sent, queued, t0 = 0, 0, time.monotonic()
        pending = b""
        while time.monotonic() - t0 < 1.5:
            if not pending:
                pending = put
            try:
                k = a.sock.send(pending)
            except BlockingIOError:
                time.sleep(0.01)
                continue
            sent += k
            pending = pending[k:]
            if not pending:
                queued += 1
        a.sock.setblocking(True)
        worst, n = ping_latencies(b, 0.5)
        check(sent < (4 << 20), "a client past max_inflight is throttled: it wrote %d bytes while "
              "its run was going" % sent)
        check(worst < 0.5, "another client is answered quickly meanwhile (worst %.3f s of %d)" % (worst, n))
        b.call("tensor.delete", {"name": "f/x"})
        if pending:   # finish the last message, now that the daemon reads again
            a.sock.sendall(pending)
            queued += 1
        notes, e, res = recv_until_response(a, mid, 120)
        check(e is not None and e["name"] == "NOT_FOUND" and "f/x" in e["message"],
              "the run ends when its data goes: %r" % (e,))
        answered = 0
        for _ in range(queued):
            m = a.recv()
            if m is None or m[0] != 1 or m[2] is not None:
                check(False, "a throttled request was lost or failed: %r" % (m,))
                break
            answered += 1
        check(answered == queued, "every throttled request answered in order (%d of %d)" % (answered, queued))

        # -- backlog: a client that never reads is no longer served, then disconnected
        a.call("tensor.put", {"name": "f/big", "dtype": "u8", "shape": [256 << 10],
                              "data": bytes(256 << 10)})
        for _ in range(8):
            a.request("tensor.get", {"name": "f/big"})
        worst, n = ping_latencies(b, 4.0)
        check(worst < 0.5, "a slow reader does not stall others (worst %.3f s of %d)" % (worst, n))
        a.sock.settimeout(10)
        got, closed = 0, False
        while True:
            m = a.recv()
            if m is None:
                closed = True
                break
            got += 1
        check(closed and got < 8, "the stalled client was disconnected (%d of 8 answers)" % got)
        with open(d.log, errors="replace") as f:
            log = f.read()
        check("unread" in log and "stall_timeout" in log, "the disconnect is logged with its reason")
        check(b.call("ping")["pong"] and d.alive(), "the daemon keeps serving")
        info = b.call("info")
        check(info["limits"]["max_inflight"] == 4 and info["limits"]["max_output_backlog"] == 65536 and
              info["limits"]["stall_timeout"] == 2, "info.limits: %r" % info["limits"])
        a.close()
        b.close()
    finally:
        stop(d)


def test_config_garbage():
    """Bad values for the limit keys stop the daemon at start-up, naming file, line and key."""
    import subprocess
    cfg_dir = tempfile.mkdtemp(prefix="tensord-sec-cfg-", dir="/tmp")
    cfg = os.path.join(cfg_dir, "bad.conf")
    try:
        for line in ("max_inflight = 0", "max_inflight = 65537", "max_output_backlog = 1K",
                     "stall_timeout = -1", "stall_timeout = 1.5", "user_max_tensors = x",
                     "user_max_bytes = 12Q", "user_max_bytes = 1KiBB", "user_max_bytes = K",
                     "max_device_bytes = 99999999999999999999", "max_connections_per_user = ",
                     "max_device_bytes = 1P"):
            with open(cfg, "w") as f:
                f.write("# limits\n" + line + "\n")
            p = subprocess.run([os.environ["TENSORD_BIN"], "--config", cfg, "--socket",
                                os.path.join(cfg_dir, "s.sock"),
                                "--state-dir", os.path.join(cfg_dir, "state")],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
            out = p.stdout.decode(errors="replace")
            key = line.split("=")[0].strip()
            check(p.returncode == 2 and "bad.conf:2" in out and key in out,
                  "config %r: exit %d, %r" % (line, p.returncode, out))
        # sizes with suffixes are read as powers of 1024
        d = start("user_max_bytes = 3M\nmax_output_backlog = 64KiB\nmax_device_bytes = 1G\n")
        try:
            lim = d.client().call("info")["limits"]
            check(lim["user_max_bytes"] == 3 << 20 and lim["max_output_backlog"] == 64 << 10 and
                  lim["max_device_bytes"] == 1 << 30, "size suffixes: %r" % lim)
        finally:
            stop(d)
    finally:
        for name in os.listdir(cfg_dir):
            os.unlink(os.path.join(cfg_dir, name))
        os.rmdir(cfg_dir)


def test_reload():
    """SIGHUP applies new quotas and client limits; max_device_bytes waits for a restart."""
    import signal
    d = start("user_max_tensors = 1\nmax_connections_per_user = 1\n")
    try:
        # the start-up probe's connection may not be reaped yet: retry until it is
        deadline = time.monotonic() + 10
        while True:
            c = d.client()
            try:
                c.call("ping")
                break
            except Exception:
                c.close()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        before = c.call("info")["counters"]["connections_refused"]
        why = refused_reason(d.sock)
        check(why is not None and "max_connections_per_user" in why["message"], "refused: %r" % (why,))
        after = c.call("info")["counters"]["connections_refused"]
        check(after == before + 1, "the refusal is counted (%d, then %d)" % (before, after))
        c.call("tensor.put", {"name": "r/a", "dtype": "u8", "shape": [1], "data": b"\x01"})
        e = err_of(c, "tensor.put", {"name": "r/b", "dtype": "u8", "shape": [1], "data": b"\x01"})
        check(e[0] == "RESOURCE_EXHAUSTED" and "user_max_tensors" in e[1], "quota of 1: %r" % (e,))
        with open(os.path.join(d.cfg_dir, "tensord.conf"), "w") as f:
            f.write("user_max_tensors = 3\nmax_connections_per_user = 2\nmax_device_bytes = 64M\n")
        d.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            info = c.call("info")
            if info["counters"]["reloads"] == 1:
                break
            time.sleep(0.05)
        lim = info["limits"]
        check(lim["user_max_tensors"] == 3 and lim["max_connections_per_user"] == 2 and
              lim["max_device_bytes"] == 0, "after the reload: %r" % lim)
        check(info["user"]["max_tensors"] == 3, "info.user after the reload: %r" % info["user"])
        e = err_of(c, "tensor.put", {"name": "r/b", "dtype": "u8", "shape": [1], "data": b"\x01"})
        check(e[0] is None, "the raised quota applies: %r" % (e,))
        c2 = d.client()
        check(c2.call("ping")["pong"], "the raised connection limit applies")
        c2.close()
        c.close()
        with open(d.log, errors="replace") as f:
            log = f.read()
        check("reload: max_device_bytes changed (0 -> 64M) but applies only at start-up; kept 0" in log
              and "reload: user_max_tensors 1 -> 3" in log,
              "each changed key is logged; a start-up key is reported, not applied")
    finally:
        stop(d)


def main():
    if os.geteuid() != 0:
        print("SKIP: needs root to act as other users (CI runs as root)")
        return 77
    d = start()
    try:
        for name, fn in (("access", test_access), ("groups", test_groups), ("garbage", test_garbage)):
            try:
                fn(d)
                print("done", name, flush=True)
            except Exception:
                traceback.print_exc()
                failures.append(name + " raised")
        check(d.alive(), "the daemon survived")
    finally:
        if failures:
            d.dump_log()
        stop(d)
    for name, fn in (("config garbage", test_config_garbage),
                     ("quotas", test_quotas), ("device memory", test_device_memory),
                     ("connection limits", test_connection_limits),
                     ("reload", test_reload),
                     ("in-flight and backlog", test_inflight_and_backlog)):
        try:
            fn()
            print("done", name, flush=True)
        except Exception:
            traceback.print_exc()
            failures.append(name + " raised")
    for f in failures:
        print("FAIL", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

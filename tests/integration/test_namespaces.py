#!/usr/bin/python3
"""Per-user namespaces (docs/security.md, "Names") against a real tensord.

Three unprivileged users: alice (the victim), bob (the attacker) and carol.
Each attack from issue 14, item 7 is tried: bob pre-creates world-writable
tensors under the names alice will use (her data, the optimizer state and
gradients tensord derives from her parameters) and a model of the name she
trains, then alice works as usual. On a daemon with one namespace for all,
alice's tensors end up owned (and readable) by bob and his state steers her
parameters; here every plain name is the caller's own, so none of it
reaches her. Explicit sharing (`~alice/name` of a world-readable tensor)
still works. Runs as root (CI does) to create the users and switch to them;
otherwise it is skipped (exit 77)."""
import json
import os
import pwd
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import traceback

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from daemon import Client, Daemon  # noqa: E402
from test_security import as_user, check, err_of, f32, failures, start, stop  # noqa: E402

USERS = ("tdnsalice", "tdnsbob", "tdnscarol")


def make_users():
    """The three test users (created when missing); returns (uids, created)."""
    created = []
    for name in USERS:
        try:
            pwd.getpwnam(name)
        except KeyError:
            subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin",
                            "--user-group", name], check=True)
            created.append(name)
    return [pwd.getpwnam(n).pw_uid for n in USERS], created


def unf32(b):
    return list(struct.unpack("<%df" % (len(b) // 4), b))


def close(a, b, tol=1e-5):
    return len(a) == len(b) and all(abs(x - y) <= tol for x, y in zip(a, b))


def put(c, name, values, **kw):
    p = {"name": name, "dtype": "f32", "shape": [len(values)], "data": f32(*values)}
    p.update(kw)
    return err_of(c, "tensor.put", p)


def sum_step(c, param, optimizer, **kw):
    """One train.step of L = sum(param)."""
    p = {"nodes": [{"id": "L", "op": "sum", "inputs": [param]}], "loss": "L", "params": [param]}
    if optimizer:
        p["optimizer"] = optimizer
    p.update(kw)
    return err_of(c, "train.step", p)


def bob_plants(sock, alice):
    """Bob, before alice starts: world-writable tensors under the names she will
    use, in his namespace (all he can do) and tried in hers; a model "clf"."""
    q = "~%s/" % USERS[0]
    ww = {"mode": "world-write"}
    with Client(sock) as c:
        out = {}
        for name in ("data/x", "w.momentum_buffer", "w2.exp_avg", "w2.exp_avg_sq", "w3.grad", "w4.loss_scaler",
                     "clf/w"):
            out["own " + name] = put(c, name, [1000.0, 1000.0], **ww)
            out["hers " + name] = put(c, q + name, [1000.0, 1000.0], **ww)
        out["hers by uid"] = put(c, "~%d/data/y" % alice, [1.0], **ww)
        out["op out"] = err_of(c, "op.run", {"op": "neg", "inputs": ["data/x"], "out": q + "data/z"})
        out["graph out"] = err_of(c, "graph.run", {"nodes": [
            {"id": "n", "op": "neg", "inputs": ["data/x"], "out": q + "data/z"}]})
        out["copy dst"] = err_of(c, "tensor.copy", {"src": "data/x", "dst": q + "data/z"})
        out["model"] = err_of(c, "model.define", {
            "name": "clf", "nodes": [{"id": "h", "op": "mul", "inputs": ["x", "clf/w"]},
                                     {"id": "L", "op": "sum", "inputs": ["h"]}],
            "loss": "L", "params": ["clf/w"], "inputs": [{"name": "x", "dtype": "f32", "shape": [2]}],
            "optimizer": {"type": "sgd", "lr": 1.0}})
        out["model hers"] = err_of(c, "model.define", {
            "name": q + "clf2", "nodes": [{"id": "L", "op": "sum", "inputs": ["clf/w"]}],
            "loss": "L", "params": ["clf/w"]})
        return out


def alice_works(sock):
    """Alice stores her data, trains her parameters, shares one tensor."""
    with Client(sock) as c:
        out = {}
        out["data"] = c.call("tensor.put", {"name": "data/x", "dtype": "f32", "shape": [2],
                                            "data": f32(3, 4)})
        c.call("tensor.put", {"name": "w", "dtype": "f32", "shape": [2], "data": f32(1, 2)})
        out["sgd"] = sum_step(c, "w", {"type": "sgd", "lr": 0.1, "momentum": 0.9})
        out["w"] = unf32(c.call("tensor.get", {"name": "w"})["data"])
        out["buf"] = c.call("tensor.stat", {"name": "w.momentum_buffer"})
        c.call("tensor.put", {"name": "w2", "dtype": "f32", "shape": [2], "data": f32(1, 2)})
        out["adam"] = sum_step(c, "w2", {"type": "adam", "lr": 0.1})
        out["w2"] = unf32(c.call("tensor.get", {"name": "w2"})["data"])
        out["m"] = c.call("tensor.stat", {"name": "w2.exp_avg"})
        c.call("tensor.put", {"name": "w3", "dtype": "f32", "shape": [2], "data": f32(1, 2)})
        out["grads"] = sum_step(c, "w3", None, grads=True)
        out["grad"] = c.call("tensor.get", {"name": "w3.grad"})
        # f16 with loss scaling: the scaler state is hers too
        c.call("tensor.put", {"name": "w4", "dtype": "f32", "shape": [2], "data": f32(1, 2)})
        out["f16"] = sum_step(c, "w4", {"type": "sgd", "lr": 0.1}, precision="f16")
        out["w4"] = unf32(c.call("tensor.get", {"name": "w4"})["data"])
        out["scaler"] = c.call("tensor.get", {"name": "w4.loss_scaler"})
        # her own model of the name bob took first
        c.call("tensor.put", {"name": "x", "dtype": "f32", "shape": [2], "data": f32(5, 6)})
        out["model run"] = err_of(c, "train.step", {"model": "clf", "data": {"x": "x"}})
        out["model define"] = err_of(c, "model.define", {
            "name": "clf", "nodes": [{"id": "L", "op": "sum", "inputs": ["w"]}],
            "loss": "L", "params": ["w"]})
        out["models"] = [m["name"] for m in c.call("model.list")["models"]]
        # sharing: one world-readable, one world-writable tensor
        c.call("tensor.put", {"name": "shared/r", "dtype": "f32", "shape": [1], "data": f32(7),
                              "mode": "world-read"})
        c.call("tensor.put", {"name": "shared/w", "dtype": "f32", "shape": [2], "data": f32(1, 2),
                              "mode": "world-write"})
        out["list"] = [t["name"] for t in c.call("tensor.list")["tensors"]]
        return out


def bob_after(sock, alice):
    q = "~%s/" % USERS[0]
    with Client(sock) as c:
        out = {}
        for name in ("data/x", "w.momentum_buffer", "w2.exp_avg", "w3.grad", "w4.loss_scaler"):
            out["read hers " + name] = err_of(c, "tensor.get", {"name": q + name})
            out["own " + name] = unf32(c.call("tensor.get", {"name": name})["data"])
        out["clf/w"] = unf32(c.call("tensor.get", {"name": "clf/w"})["data"])
        out["shared"] = err_of(c, "tensor.get", {"name": q + "shared/r"})
        out["shared uid"] = err_of(c, "tensor.get", {"name": "~%d/shared/r" % alice})
        out["list hers"] = [t["name"] for t in c.call("tensor.list", {"prefix": q})["tensors"]]
        out["copy"] = err_of(c, "tensor.copy", {"src": q + "shared/r", "dst": "copied"})
        out["chmod"] = err_of(c, "tensor.chmod", {"name": q + "shared/r", "mode": "world-write"})
        out["no user"] = err_of(c, "tensor.get", {"name": "~tdns-nosuchuser/x"})
        out["delete missing"] = err_of(c, "tensor.delete", {"name": q + "missing"})
        out["bad refs"] = [err_of(c, "tensor.get", {"name": n})[0]
                           for n in ("~/x", "~%s" % USERS[0], "~%s/" % USERS[0], "~a b/x", "~99999999999/x",
                                     "x~y")]
        # training her world-writable tensor: the state is hers, as the tensor
        out["train shared"] = sum_step(c, q + "shared/w", {"type": "sgd", "lr": 0.5, "momentum": 0.9})
        out["shared buf"] = err_of(c, "tensor.stat", {"name": q + "shared/w.momentum_buffer"})
        out["own buf"] = err_of(c, "tensor.stat", {"name": "shared/w.momentum_buffer"})
    # libtensord and tensorctl take qualified names too
    ctl = USER_CTL
    if ctl:
        run = subprocess.run([ctl, "--socket", sock, "--json", "get", q + "shared/r"],
                             capture_output=True, text=True)
        out["ctl get"] = (run.returncode, run.stdout, run.stderr)
        run = subprocess.run([ctl, "--socket", sock, "--json", "ls", q],
                             capture_output=True, text=True)
        out["ctl ls"] = (run.returncode, run.stdout, run.stderr)
    return out


def test_attacks(d, uids):
    alice, bob, carol = uids
    planted = as_user(bob, lambda: bob_plants(d.sock, alice))
    for name in ("data/x", "w.momentum_buffer", "w2.exp_avg", "w2.exp_avg_sq", "w3.grad", "w4.loss_scaler",
                 "clf/w"):
        check(planted["own " + name][0] is None, "bob stores %s in his namespace: %r"
              % (name, planted["own " + name]))
        e = planted["hers " + name]
        check(e[0] == "PERMISSION_DENIED" and "namespace" in e[1],
              "bob cannot create ~alice/%s: %r" % (name, e))
    for k in ("hers by uid", "op out", "graph out", "copy dst", "model hers"):
        e = planted[k]
        check(e[0] == "PERMISSION_DENIED", "bob cannot create in alice's namespace (%s): %r" % (k, e))
    check(planted["model"][0] is None, "bob defines his model clf: %r" % (planted["model"],))

    out = as_user(alice, lambda: alice_works(d.sock))
    check(out["data"]["owner"] == alice and out["data"]["mode"] == "private" and out["data"]["version"] == 1,
          "alice's data/x is a new private tensor of hers, not bob's: %r" % out["data"])
    # SGD with momentum, first step: the buffer is the gradient (1), w - 0.1
    check(out["sgd"][0] is None and close(out["w"], [0.9, 1.9]),
          "bob's momentum buffer does not steer alice's w: %r %r" % (out["sgd"], out["w"]))
    check(out["buf"]["owner"] == alice and out["buf"]["mode"] == "private",
          "alice's momentum buffer is hers: %r" % out["buf"])
    # Adam, first step from zero moments: w - lr * g / (|g| + eps) = w - 0.1
    check(out["adam"][0] is None and close(out["w2"], [0.9, 1.9], 1e-4),
          "bob's Adam moments do not steer alice's w2: %r %r" % (out["adam"], out["w2"]))
    check(out["m"]["owner"] == alice and out["m"]["mode"] == "private", "exp_avg is hers: %r" % out["m"])
    check(out["grads"][0] is None and out["grad"]["owner"] == alice and out["grad"]["mode"] == "private"
          and unf32(out["grad"]["data"]) == [1.0, 1.0], "alice's gradient is hers: %r" % out["grad"])
    # f16, first step: the scale starts at 65536 (not bob's 1000), one good step
    sc = out["scaler"]
    check(out["f16"][0] is None and close(out["w4"], [0.9, 1.9]) and unf32(sc["data"]) == [65536.0, 1.0]
          and sc["owner"] == alice and sc["mode"] == "private",
          "bob's loss scaler does not steer alice's f16 step; hers is hers: %r %r %r" % (out["f16"], out["w4"], sc))
    e = out["model run"]
    check(e[0] == "NOT_FOUND", "alice's train.step model=clf does not run bob's model: %r" % (e,))
    check(out["model define"][0] is None and out["models"] == ["clf"],
          "alice defines her own clf: %r %r" % (out["model define"], out["models"]))
    check(out["list"] == ["data/x", "shared/r", "shared/w", "w", "w.momentum_buffer", "w2", "w2.exp_avg",
                          "w2.exp_avg_sq", "w3", "w3.grad", "w4", "w4.loss_scaler", "x"],
          "alice lists her namespace, plain names: %r" % out["list"])

    after = as_user(bob, lambda: bob_after(d.sock, alice))
    for name in ("data/x", "w.momentum_buffer", "w2.exp_avg", "w3.grad", "w4.loss_scaler"):
        e = after["read hers " + name]
        check(e[0] == "PERMISSION_DENIED", "bob cannot read alice's %s: %r" % (name, e))
        check(after["own " + name] == [1000.0, 1000.0], "bob's own %s is untouched: %r"
              % (name, after["own " + name]))
    check(after["clf/w"] == [1000.0, 1000.0], "bob's model never trained on alice's data")
    q = "~%s/" % USERS[0]
    e = after["shared"]
    check(e[0] is None and e[1]["data"] == f32(7) and e[1]["name"] == q + "shared/r"
          and e[1]["owner"] == alice, "bob reads alice's world-readable ~alice/shared/r: %r" % (e,))
    check(after["shared uid"][0] is None, "~uid/name works too: %r" % (after["shared uid"],))
    check(after["list hers"] == [q + "shared/r", q + "shared/w"],
          "bob lists what he may read of alice's: %r" % after["list hers"])
    e = after["copy"]
    check(e[0] is None and e[1]["name"] == "copied" and e[1]["owner"] == bob,
          "bob copies a shared tensor into his namespace: %r" % (e,))
    check(after["chmod"][0] == "PERMISSION_DENIED", "bob cannot chmod alice's: %r" % (after["chmod"],))
    check(after["no user"][0] == "INVALID_ARGUMENT" and "no such user" in after["no user"][1],
          "an unknown user: %r" % (after["no user"],))
    check(after["delete missing"][0] == "NOT_FOUND", "deleting a missing ~alice/name: %r"
          % (after["delete missing"],))
    check(after["bad refs"] == ["INVALID_ARGUMENT"] * 6, "malformed qualified names: %r" % after["bad refs"])
    check(after["train shared"][0] is None, "bob trains alice's world-writable tensor: %r"
          % (after["train shared"],))
    e = after["shared buf"]
    check(e[0] is None and e[1]["owner"] == alice and e[1]["mode"] == "world-write",
          "its momentum buffer is alice's, shared as the tensor is: %r" % (e,))
    check(after["own buf"][0] == "NOT_FOUND", "nothing in bob's namespace: %r" % (after["own buf"],))
    if "ctl get" in after:
        rc, stdout, stderr = after["ctl get"]
        check(rc == 0 and "7" in stdout, "tensorctl get ~alice/shared/r: %r" % (after["ctl get"],))
        rc, stdout, stderr = after["ctl ls"]
        check(rc == 0 and (q + "shared/r") in stdout and (q + "shared/w") in stdout,
              "tensorctl ls ~alice/: %r" % (after["ctl ls"],))

    # carol sees alice's shared tensor as bob does; nothing of bob's
    def carol_looks():
        with Client(d.sock) as c:
            return (err_of(c, "tensor.get", {"name": q + "shared/r"}),
                    [t["name"] for t in c.call("tensor.list", {"prefix": "~%s/" % USERS[1]})["tensors"]],
                    [t["name"] for t in c.call("tensor.list")["tensors"]])
    shared, bobs, mine = as_user(carol, carol_looks)
    check(shared[0] is None and shared[1]["data"] == f32(7), "carol reads ~alice/shared/r")
    check(sorted(bobs) == ["~%s/%s" % (USERS[1], n) for n in
                           ("clf/w", "data/x", "w.momentum_buffer", "w2.exp_avg", "w2.exp_avg_sq", "w3.grad",
                            "w4.loss_scaler")],
          "carol sees bob's world-writable tensors, qualified: %r" % bobs)
    check(mine == [], "carol's namespace is empty: %r" % mine)

    # root: plain names are root's; creating in alice's namespace gives alice the tensor
    c = d.client()
    res = c.call("tensor.put", {"name": q + "from-root", "dtype": "f32", "shape": [1], "data": f32(1)})
    check(res["owner"] == alice and res["name"] == q + "from-root", "root creates for alice: %r" % res)
    check(err_of(c, "tensor.get", {"name": "data/x"})[0] == "NOT_FOUND", "root's namespace is its own")
    res = c.call("tensor.get", {"name": q + "data/x"})
    check(res["data"] == f32(3, 4), "root reads alice's private tensor by its qualified name")
    c.close()


def test_legacy_state(uids):
    """A checkpoint written before namespaces (the plain name inside) comes
    back in its owner's namespace, and the next checkpoint renames its file."""
    alice = uids[0]
    top = __import__("tempfile").mkdtemp(prefix="tensord-ns-", dir="/tmp")
    state = os.path.join(top, "state")
    tensors = os.path.join(state, "tensors")
    try:
        d = Daemon(["--state-dir", state]).start()
        os.chmod(d.dir, 0o755)
        os.chmod(d.sock, 0o666)
        as_user(alice, lambda: Client(d.sock).call("tensor.put", {
            "name": "legacy/w", "dtype": "f32", "shape": [2], "data": f32(4, 5)}))
        with d.client() as c:
            c.call("store.sync")
        d.stop()
        key_file = "%d%%2Flegacy%%2Fw.safetensors" % alice
        with open(os.path.join(tensors, key_file), "rb") as f:
            raw = f.read()
        n = struct.unpack("<Q", raw[:8])[0]
        header = json.loads(raw[8:8 + n])
        header["legacy/w"] = header.pop("%d/legacy/w" % alice)
        header["__metadata__"]["tensord_name"] = "legacy/w"
        text = json.dumps(header).encode()
        text += b" " * (-len(text) % 8)
        os.unlink(os.path.join(tensors, key_file))
        with open(os.path.join(tensors, "legacy%2Fw.safetensors"), "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text + raw[8 + n:])

        d = Daemon(["--state-dir", state]).start()
        os.chmod(d.dir, 0o755)
        os.chmod(d.sock, 0o666)

        def alice_reads():
            with Client(d.sock) as c:
                return c.call("tensor.get", {"name": "legacy/w"})
        res = as_user(alice, alice_reads)
        check(res["data"] == f32(4, 5) and res["owner"] == alice and res["name"] == "legacy/w",
              "a pre-namespace tensor is its owner's plain name again: %r" % res)
        with d.client() as c:
            c.call("store.sync")
            e = err_of(c, "tensor.get", {"name": "legacy/w"})
            check(e[0] == "NOT_FOUND", "not root's: %r" % (e,))
        files = sorted(os.listdir(tensors))
        check(files == [key_file], "the old checkpoint file is renamed: %r" % files)
        d.stop()
    finally:
        shutil.rmtree(top, ignore_errors=True)


USER_CTL = None     # a copy of tensorctl the test users can run


def user_tensorctl(top):
    """tensorctl and libtensord copied into `top` (0755): the build tree may
    sit where the test users cannot reach it (a clone in a 0700 directory).
    Returns the copy's path, or None without TENSORCTL_BIN."""
    ctl = os.environ.get("TENSORCTL_BIN")
    if not ctl:
        return None
    os.chmod(top, 0o755)
    libdir = os.path.dirname(os.path.realpath(ctl))
    for name in os.listdir(libdir):
        if re.fullmatch(r"libtensord\.so(\.\d+)*", name):
            shutil.copy2(os.path.join(libdir, name), os.path.join(top, name), follow_symlinks=False)
    copy = os.path.join(top, "tensorctl")
    shutil.copy2(ctl, copy)
    os.chmod(copy, 0o755)
    os.environ["LD_LIBRARY_PATH"] = top + ":" + os.environ.get("LD_LIBRARY_PATH", "")
    return copy


def main():
    global USER_CTL
    if os.geteuid() != 0:
        print("SKIP: needs root to create users and act as them (CI runs as root)")
        return 77
    bindir = tempfile.mkdtemp(prefix="tensord-ns-bin-")
    USER_CTL = user_tensorctl(bindir)
    try:
        return run_all()
    finally:
        shutil.rmtree(bindir, ignore_errors=True)


def run_all():
    uids, created = make_users()
    d = start()
    try:
        test_attacks(d, uids)
        check(d.alive(), "the daemon survived")
    except Exception:
        traceback.print_exc()
        failures.append("attacks raised")
    finally:
        if failures:
            d.dump_log()
        stop(d)
    try:
        test_legacy_state(uids)
    except Exception:
        traceback.print_exc()
        failures.append("legacy state raised")
    finally:
        for name in created:
            subprocess.run(["userdel", name], check=False)
    for f in failures:
        print("FAIL", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""tensorctl (and through it libtensord's tensord_put_opts, tensord_copy and
tensord_op_run_opts) against a tensord with two devices: `--device 0,0` opens
the first Vulkan device twice, two logical devices that behave like two GPUs
(docs/devices.md). Checks put/run --device, copy/cp, ls's DEVICE column, the
device table of info and info --watch, data-parallel train --devices against
a one-device run, and the errors. Needs TENSORD_BIN and TENSORCTL_BIN."""
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from daemon import Daemon  # noqa: E402

CTL = os.environ.get("TENSORCTL_BIN")
SOCK = None


class Fail(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Fail(what)


def ctl(*args, tty=False):
    cmd = [CTL, "--socket", SOCK] + [str(a) for a in args]
    if tty:  # under a pseudo-terminal, as a person would see it
        cmd = ["script", "-qfec", " ".join(cmd), "/dev/null"]
    p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       timeout=300)
    return p.returncode, p.stdout, p.stderr


def ok(*args):
    rc, out, err = ctl(*args)
    check(rc == 0 and not err, "tensorctl %s: exit %d, stderr %r" % (" ".join(map(str, args)), rc, err))
    return out


def okj(*args):
    out = ok("--json", *args)
    try:
        return json.loads(out)
    except ValueError:
        raise Fail("tensorctl --json %s printed no JSON: %r" % (" ".join(map(str, args)), out[:500]))


def bad(want_rc, *args, match=None):
    """tensorctl must exit want_rc with exactly one line on stderr (matching `match`)."""
    rc, out, err = ctl(*args)
    what = "tensorctl %s" % " ".join(map(str, args))
    check(rc == want_rc, "%s: exit %d, want %d (stderr %r, stdout %r)" % (what, rc, want_rc, err, out[:200]))
    check(err.count("\n") == 1 and err.startswith("tensorctl: "), "%s: want one error line, got %r" % (what, err))
    if match:
        check(re.search(match, err), "%s: error %r does not match %r" % (what, err, match))
    return err


def get(name):
    j = okj("get", name)
    return np.array(j["data"], dtype=np.float64).reshape(j["shape"])


def device_of(name):
    return okj("stat", name)["device"]


def test_info():
    info = okj("info")
    active = [d for d in info["devices"] if d["active"]]
    check(len(active) == 2, "two devices in use: %r" % active)
    check(sorted(d["id"] for d in active) == [0, 1], active)
    check(all(d["index"] == active[0]["index"] for d in active), "one physical device twice: %r" % active)
    for d in active:
        for k in ("memory_limit", "tensors", "submissions", "busy_seconds", "load"):
            check(k in d, "active device lacks %s: %r" % (k, d))
    out = ok("info")
    lines = out.splitlines()
    head = [i for i, l in enumerate(lines) if re.match(r"^devices +2 in use", l)]
    check(head, "info: no 'devices  2 in use' line:\n" + out)
    i = head[0]
    check(re.match(r"^  ID  INDEX  NAME +TYPE +USED +LIMIT  TENSORS  LOAD$", lines[i + 1]),
          "info: device table header: %r" % lines[i + 1])
    for k in (0, 1):
        row = lines[i + 2 + k]
        check(re.match(r"^   %d +%d  \S.* +\S+ +[0-9.]+ [KMG]?i?B +[0-9.]+ [KMG]?i?B +[0-9]+  [0-9]+%%$"
                       % (k, active[0]["index"]), row), "info: device row %d: %r" % (k, row))
        check(lines[i + 4 + k].startswith("  device %d: driver " % k), "info: details of %d: %r"
              % (k, lines[i + 4 + k]))
    # other devices found are listed, not tabled
    for d in info["devices"]:
        if not d["active"]:
            check(re.search(r"^  not used: index %d, " % d["index"], out, re.M), "info lacks %r" % d)


def test_put_ls_stat():
    ok("put", "a", "--values", "1,2,3,4,5,6", "--shape", "2,3", "--device", "1")
    check(device_of("a") == 1, "put --device 1")
    out = ok("put", "b", "--values", "6,5,4,3,2,1", "--shape", "2,3", "--device=0")
    check(out.strip().endswith(", version 1, device 0"), "put prints the device: %r" % out)
    # replacing without --device keeps the device; with it, moves
    ok("put", "a", "--values", "1,2,3,4,5,6", "--shape", "2,3")
    check(device_of("a") == 1, "a replaced without --device stays on 1")
    ok("put", "tmp", "--values", "1", "--device", "1")
    ok("put", "tmp", "--values", "2", "--device", "0")
    check(device_of("tmp") == 0 and get("tmp").tolist() == [2], "put --device moves a replaced tensor")
    ok("rm", "tmp")
    # ls: a DEVICE column after SIZE; --json keeps the metadata as it is
    out = ok("ls")
    check(re.match(r"^NAME +DTYPE +SHAPE +SIZE +DEVICE +VERSION +OWNER +MODE +MODIFIED$",
                   out.splitlines()[0]), "ls header: %r" % out.splitlines()[0])
    row = r"^%s +f32 +\[2, 3\] +24 B +%d +[0-9]+ +"
    check(re.search(row % ("a", 1), out, re.M) and re.search(row % ("b", 0), out, re.M),
          "ls DEVICE column:\n" + out)
    j = okj("ls")
    check({t["name"]: t["device"] for t in j["tensors"]} == {"a": 1, "b": 0}, j)
    out = ok("stat", "a")
    check(re.search(row % ("a", 1), out, re.M), "stat's DEVICE:\n" + out)
    info = {d["id"]: d for d in okj("info")["devices"] if d["active"]}
    check(info[0]["tensors"] == 1 and info[1]["tensors"] == 1, "tensors per device: %r" % info)
    check(info[1]["memory_used"] >= 24 and info[0]["memory_used"] >= 24, info)


def test_copy():
    a = get("a")
    j = okj("copy", "a", "a0", "--device", "0")
    check(j["name"] == "a0" and j["device"] == 0 and j["shape"] == [2, 3] and j["version"] == 1, j)
    check(np.array_equal(get("a0"), a), "a0 is a's copy")
    out = ok("cp", "a", "a1")
    check(out.startswith("copied a to a1 on device 1: f32 [2, 3], 24 B"), "cp prints: %r" % out)
    check(device_of("a1") == 1 and np.array_equal(get("a1"), a), "cp keeps src's device")
    # a move keeps the mode
    ok("chmod", "world-read", "a1")
    out = ok("copy", "a1", "a1", "--device", "0")
    check(out.startswith("moved a1 to device 0: f32 [2, 3], 24 B"), "move prints: %r" % out)
    st = okj("stat", "a1")
    check(st["device"] == 0 and st["mode"] == "world-read", "moved: %r" % st)
    check(np.array_equal(get("a1"), a), "a moved tensor keeps its data")
    # an existing dst is replaced
    j = okj("copy", "b", "a0")
    check(j["device"] == 0 and j["version"] == 2 and np.array_equal(get("a0"), get("b")), j)
    bad(1, "copy", "missing", "x", match="NOT_FOUND")
    bad(1, "copy", "a", "x", "--device", "2", match="INVALID_ARGUMENT")
    bad(2, "copy", "a", "--device", "0", match="missing")
    bad(2, "copy", "a", "b", "c", match="unexpected")
    bad(2, "cp", "a", "bad name", match="invalid tensor name")
    bad(2, "copy", "a", "x", "--device", "-1", match="device id")
    bad(2, "copy", "a", "x", "--device", "one", match="device id")
    bad(2, "copy", "a", "x", "--device", "99999999999", match="device id")
    bad(2, "copy", "a", "x", "--device", "", match="device id")
    bad(2, "copy", "a", "x", "--devices", "0,1", match="no option --devices")
    rc, out, _ = ctl("--json", "ls", "x")
    check(json.loads(out)["tensors"] == [], "a failed copy stored x")
    for n in ("a0", "a1"):
        ok("rm", n)


def test_run():
    # a on 1, b on 0: not the same device
    err = bad(1, "run", "add", "a", "b", match="FAILED_PRECONDITION")
    check("device" in err and "0" in err and "1" in err, "the error names the devices: %r" % err)
    ok("copy", "b", "b1", "--device", "1")
    want = get("a") + get("b")
    j = okj("run", "add", "a", "b1")
    check(np.allclose(np.array(j["data"]).reshape(j["shape"]), want), j)
    j = okj("run", "add", "a", "b1", "--device", "1", "-o", "s")
    check(j["device"] == 1, "run -o stores on the inputs' device: %r" % j)
    check(np.allclose(get("s"), want), "s = a + b")
    bad(1, "run", "add", "a", "b1", "--device", "0", match="FAILED_PRECONDITION")
    bad(1, "run", "add", "a", "b1", "--device", "7", match="INVALID_ARGUMENT")
    bad(2, "run", "add", "a", "b1", "--device", "x", match="device id")
    # an op without inputs runs on --device
    j = okj("run", "zeros", "--attr", "shape=[3]", "--device", "1", "-o", "z")
    check(j["device"] == 1 and get("z").tolist() == [0, 0, 0], j)
    out = ok("run", "ones", "--attr", "shape=[2]", "--device", "0", "-o", "z")
    check(out.strip().endswith("device 0") and device_of("z") == 0, "run -o prints the device: %r" % out)
    # graph: nodes on two devices in one request
    d = tempfile.mkdtemp(prefix="ctl-dev-", dir="/tmp")
    g = os.path.join(d, "g.json")
    with open(g, "w") as f:
        json.dump({"nodes": [{"id": "p", "op": "mul", "inputs": ["a", "b1"], "out": "p1"},
                             {"id": "q", "op": "sub", "inputs": ["b", "b"], "device": 0},
                             {"id": "r", "op": "add", "inputs": ["q", "b"], "out": "r0"}],
                   "outputs": ["p", "r"]}, f)
    j = okj("graph", g)
    check(np.allclose(np.array(j["outputs"]["p"]["data"]).reshape(2, 3), get("a") * get("b")), j)
    check(np.allclose(np.array(j["outputs"]["r"]["data"]).reshape(2, 3), get("b")), j)
    check(j["stored"]["p1"]["device"] == 1 and j["stored"]["r0"]["device"] == 0, j["stored"])
    with open(g, "w") as f:
        json.dump({"nodes": [{"id": "p", "op": "mul", "inputs": ["a", "b"], "out": "never"}]}, f)
    bad(1, "graph", g, match="FAILED_PRECONDITION")
    os.unlink(g)
    os.rmdir(d)
    for n in ("s", "z", "p1", "r0"):
        ok("rm", n)


def regression_data():
    rng = np.random.default_rng(11)
    x = rng.standard_normal((64, 3)).astype(np.float32)
    y = (x @ np.array([[1.5], [-2.0], [0.25]], np.float32) + 0.5).astype(np.float32)
    return x, y


def train_params(d, prefix, devices=None):
    p = {"nodes": [{"id": "xw", "op": "matmul", "inputs": ["bx", prefix + "w"]},
                   {"id": "pred", "op": "add", "inputs": ["xw", prefix + "b"]},
                   {"id": "loss", "op": "mse", "inputs": ["pred", "by"]}],
         "loss": "loss", "params": [prefix + "w", prefix + "b"],
         "optimizer": {"type": "sgd", "lr": 0.1, "momentum": 0.5},
         "data": {"bx": "tx", "by": "ty"}, "batch_size": 16, "epochs": 10, "seed": 3}
    path = os.path.join(d, prefix.strip("/") + ".json")
    with open(path, "w") as f:
        json.dump(p, f)
    return path


def test_train():
    d = tempfile.mkdtemp(prefix="ctl-dev-", dir="/tmp")
    x, y = regression_data()
    np.save(os.path.join(d, "x.npy"), x)
    np.save(os.path.join(d, "y.npy"), y)
    for name, f in (("tx", "x.npy"), ("ty", "y.npy")):
        ok("put", name, "--file", os.path.join(d, f), "--device", "0")
    for p in ("one/", "dp/"):
        ok("put", p + "w", "--values", "0,0,0", "--shape", "3,1", "--device", "0")
        ok("put", p + "b", "--values", "0", "--shape", "1", "--device", "0")
    one = train_params(d, "one/")
    dp = train_params(d, "dp/")
    lines = [json.loads(l) for l in ok("--json", "train", one).splitlines() if l.strip()]
    r1 = lines[-1]
    check(r1["event"] == "result" and "devices" not in r1, r1)
    lines = [json.loads(l) for l in ok("--json", "train", dp, "--devices", "0,1").splitlines()
             if l.strip()]
    r2 = lines[-1]
    check(r2["event"] == "result" and r2["steps"] == 40 and r2["devices"] == [0, 1], r2)
    check(r2["replica_max_diff"] == 0, "two logical devices of one kind compute the same: %r" % r2)
    check(any(l["event"] == "progress" for l in lines), "progress events")
    # data-parallel follows the one-device run (same rows, the batch split in two)
    for n in ("w", "b"):
        a, b = get("one/" + n), get("dp/" + n)
        check(np.allclose(a, b, rtol=1e-4, atol=1e-5), "dp/%s %r vs one/%s %r" % (n, b, n, a))
        check(device_of("dp/" + n) == 0, "parameters stay on the first device")
    check(np.allclose(get("dp/w").ravel(), [1.5, -2.0, 0.25], atol=0.05), get("dp/w"))
    check(abs(get("dp/b")[0] - 0.5) < 0.05, get("dp/b"))
    # for people: the summary ends with the devices and replica_max_diff
    out = ok("train", dp, "--devices", "0,1")
    last = out.strip().splitlines()[-1]
    check(re.match(r"^trained 40 steps in .*; devices 0,1, replica_max_diff 0$", last),
          "train summary: %r" % last)
    # --devices with --model (and a model's options): the option goes into the params
    with open(dp) as f:
        p = json.load(f)
    mdef = {k: p[k] for k in ("nodes", "loss", "params", "optimizer")}
    mdef["inputs"] = ["bx", "by"]
    ok("put", "bx", "--values", "0,0,0", "--shape", "1,3", "--device", "0")
    ok("put", "by", "--values", "0", "--shape", "1,1", "--device", "0")
    with open(os.path.join(d, "m.json"), "w") as f:
        json.dump(mdef, f)
    ok("model", "define", "m", os.path.join(d, "m.json"))
    j = [json.loads(l) for l in ok("--json", "train", "--model", "m", "--data", "bx=tx",
                                   "--data", "by=ty", "--batch-size", "32", "--steps", "4",
                                   "--devices", "0,1").splitlines() if l.strip()][-1]
    check(j["devices"] == [0, 1] and j["steps"] == 4, j)
    # errors: the daemon's, and usage errors before anything is sent
    bad(1, "train", dp, "--devices", "0,0", match="INVALID_ARGUMENT")
    # one id: a plain run on that device, no replicas
    j = [json.loads(l) for l in ok("--json", "train", dp, "--devices", "0").splitlines()][-1]
    check(j["event"] == "result" and "devices" not in j and "replica_max_diff" not in j, j)
    bad(1, "train", dp, "--devices", "0,1,0", match="INVALID_ARGUMENT")
    bad(1, "train", dp, "--devices", "0,5", match="INVALID_ARGUMENT")
    bad(1, "train", "--model", "m", "--data", "bx=tx", "--data", "by=ty", "--batch-size", "15",
        "--devices", "0,1", match="INVALID_ARGUMENT")
    bad(1, "train", dp, "--devices", "1,0", match="FAILED_PRECONDITION")
    for arg in ("", "0,", ",1", "0,,1", "0,x", "-1,0", "0;1", ",".join(["0"] * 65)):
        bad(2, "train", dp, "--devices", arg, match="--devices")
    bad(2, "train", os.path.join(d, "missing.json"), "--devices", "0,x", match="--devices")
    bad(1, "train", os.path.join(d, "missing.json"), "--devices", "0,1", match="missing.json")
    bad(2, "train", dp, "--device", "0", match="no option --device")
    bad(2, "put", "x", "--values", "1", "--devices", "0,1", match="no option --devices")
    ok("model", "rm", "m")
    for n in ("tx", "ty", "bx", "by", "one/w", "one/b", "dp/w", "dp/b"):
        ok("rm", n)
    for f in os.listdir(d):
        os.unlink(os.path.join(d, f))
    os.rmdir(d)


def test_watch():
    lines = ok("info", "--watch", "--count", "2", "--interval", "0.1").splitlines()
    check(re.match(r"^TIME +CLIENTS +TENSORS +TENSOR SIZE +MEM USED +MEM LIMIT +REQ/S +FAILED/S +LOAD$",
                   lines[0]), "watch header: %r" % lines[0])
    check(re.search(r" [0-9]+%,[0-9]+%$", lines[2]), "watch line: one load per device: %r" % lines[2])
    for l in ok("--json", "info", "--watch", "--count", "2", "--interval", "0.1").splitlines():
        j = json.loads(l)
        check(sum(1 for d in j["devices"] if d["active"]) == 2 and "rates" in j, j)
    rc, out, err = ctl("info", "--watch", "--count", "1", tty=True)
    out = out.replace("\r", "")
    check(rc == 0, "watch on a tty: %d %r" % (rc, err))
    check(re.search(r"^ID +INDEX +NAME +TENSORS +USED +LIMIT +USE +LOAD$", out, re.M), out)
    for k in (0, 1):
        check(re.search(r"^ %d +[0-9]+ .* \[[#.]{10}\] +[0-9.]+%% +\[[#.]{10}\] +[0-9]+%%$" % k, out,
                        re.M), "watch screen lacks device %d:\n%s" % (k, out))


def test_metrics():
    ok("put", "m0", "--values", "1,2", "--device", "0")
    ok("run", "add", "m0", "m0")
    text = ok("metrics")
    info = {d["id"]: d for d in okj("info")["devices"] if d["active"]}
    for fam in ("tensord_device_tensors", "tensord_device_memory_limit_bytes",
                "tensord_device_load", "tensord_device_submissions_total",
                "tensord_device_busy_seconds_total"):
        for i in (0, 1):
            check(re.search(r'^%s\{id="%d",device="%d"\} [0-9.e+-]+$' % (fam, i, info[i]["index"]),
                            text, re.M), "metrics lack %s of device %d:\n%s" % (fam, i, text))
    m = re.search(r'^tensord_device_submissions_total\{id="0",device="[0-9]+"\} ([0-9]+)$', text, re.M)
    check(int(m.group(1)) >= 1, "device 0 ran the add")
    m = re.search(r'^tensord_device_memory_limit_bytes\{id="1",device="[0-9]+"\} ([0-9]+)$', text, re.M)
    check(int(m.group(1)) == info[1]["memory_limit"], "memory_limit agrees with info")
    ok("rm", "m0")


def main():
    global SOCK
    if not CTL:
        print("TENSORCTL_BIN is not set")
        return 1
    failed = []
    d = Daemon(["--device", "0,0"]).start()
    SOCK = d.sock
    try:
        for t in (test_info, test_put_ls_stat, test_copy, test_run, test_train, test_watch,
                  test_metrics):
            try:
                t()
                print("ok   %s" % t.__name__)
            except Fail as e:
                failed.append("%s: %s" % (t.__name__, e))
                print("FAIL %s: %s" % (t.__name__, e))
                if not d.alive():
                    failed.append("tensord died")
                    break
    finally:
        if failed:
            d.dump_log()
        try:
            d.stop()
        except Exception as e:
            failed.append(str(e))
    for f in failed:
        print("FAIL %s" % f)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

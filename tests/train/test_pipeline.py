#!/usr/bin/python3
"""Pipelined train.run (docs/training.md, "Pipelined steps"; issue 16): with
pipeline_depth 2 or 3 a run is bit-identical to the same run at depth 1
(every progress loss, the parameters, the Adam moments, the batch_norm
running statistics), with dropout, batch_norm, Adam and gradient
accumulation; a non-finite loss at step 5 fails the run naming step 5 and
leaves everything exactly as after step 4 although later steps were already
submitted; job.cancel and a client's disconnect mid-run leave exactly the
steps counted (job.stat, tensor versions) applied; two pipelined runs at once
both end as at depth 1; bad depths are refused;
the loop answers pings while long pipelined steps run (on lavapipe, reading
a step's timestamps while the next was queued blocked it for that step); a
device loss with steps in flight fails the run with DEVICE_LOST and the
daemon serves on; SIGTERM with steps in flight exits cleanly."""
import os
import sys
import threading
import time

import numpy as np

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from daemon import Daemon  # noqa: E402

failures = []
C = 4
ROWS, BATCH = 128, 16
PARAMS = ("g", "be", "w1", "b1", "w2", "b2")


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL", what, flush=True)
    return cond


def put(c, name, a, dt="f32"):
    a = np.ascontiguousarray(a, dtype="<f4" if dt == "f32" else "<i4")
    c.call("tensor.put", {"name": name, "dtype": dt, "shape": list(a.shape), "data": a.tobytes()})


def raw(c, name):
    err, r = c.call_full("tensor.get", {"name": name})
    return None if err else bytes(r["data"])


def setup(c, pre, x, y, init, s=None):
    """The data (rows x, labels y, a per-row scale of the logits s) and a
    fresh copy of the initial values under `pre`, and a model `pre`m:
    batch_norm (state), dropout, Adam."""
    put(c, pre + "X", x)
    put(c, pre + "Y", y, "i32")
    put(c, pre + "S", np.ones((len(x), 1)) if s is None else s)
    for k, a in init.items():
        put(c, pre + k, a)
    c.call("model.define", {
        "name": pre + "m", "loss": "loss", "params": [pre + p for p in PARAMS],
        "inputs": [{"name": "x", "dtype": "f32", "shape": [BATCH, 3, 2, 2]},
                   {"name": "y", "dtype": "i32", "shape": [BATCH]},
                   {"name": "s", "dtype": "f32", "shape": [BATCH, 1]}],
        "outputs": ["z"], "optimizer": {"type": "adam", "lr": 0.01},
        "state": [{"node": "bn", "momentum": 0.1}],
        "nodes": [{"id": "bn", "op": "batch_norm", "inputs": ["x", pre + "rm", pre + "rv", pre + "g", pre + "be"]},
                  {"id": "f", "op": "reshape", "inputs": ["bn"], "attrs": {"shape": [-1, 12]}},
                  {"id": "h0", "op": "matmul", "inputs": ["f", pre + "w1"]},
                  {"id": "h1", "op": "add", "inputs": ["h0", pre + "b1"]},
                  {"id": "h2", "op": "relu", "inputs": ["h1"]},
                  {"id": "h3", "op": "dropout", "inputs": ["h2"], "attrs": {"p": 0.3, "seed": 11}},
                  {"id": "z0", "op": "matmul", "inputs": ["h3", pre + "w2"]},
                  {"id": "z1", "op": "add", "inputs": ["z0", pre + "b2"]},
                  {"id": "z", "op": "mul", "inputs": ["z1", "s"]},
                  {"id": "loss", "op": "cross_entropy", "inputs": ["z", "y"]}]})


def state(c, pre):
    """Everything a step changes, as bytes."""
    names = [pre + p for p in PARAMS] + [pre + "rm", pre + "rv"]
    names += [pre + p + s for p in PARAMS for s in (".exp_avg", ".exp_avg_sq")]
    return {n[len(pre):]: raw(c, n) for n in names}


def run(c, pre, **kw):
    """An attached run of model `pre`m: (error, result, progress losses)."""
    p = {"model": pre + "m", "data": {"x": pre + "X", "y": pre + "Y", "s": pre + "S"}, "batch_size": BATCH,
         "seed": 3, "shuffle": False, "progress_every": 1}
    p.update(kw)
    return c.train_run_losses(p)


def data(rng):
    x = rng.normal(0.5, 2.0, size=(ROWS, 3, 2, 2))
    y = rng.integers(0, C, size=ROWS).astype(np.int32)
    init = {"rm": np.zeros(3), "rv": np.ones(3), "g": rng.uniform(0.5, 1.5, 3), "be": rng.uniform(-0.2, 0.2, 3),
            "w1": rng.uniform(-0.3, 0.3, (12, 16)), "b1": np.zeros(16), "w2": rng.uniform(-0.3, 0.3, (16, C)),
            "b2": np.zeros(C)}
    return x, y, init


def same_as_depth1(c, x, y, init):
    """Depth 1, 2, 3 (and with accumulate_steps 2) give the same bits."""
    for acc in (1, 2):
        ref = None
        for depth in (1, 2, 3):
            pre = "a%dd%d/" % (acc, depth)
            setup(c, pre, x, y, init)
            err, res, losses = run(c, pre, steps=12, pipeline_depth=depth, accumulate_steps=acc)
            if not check(err is None and res["steps"] == 12 and len(losses) == 12,
                         "acc %d depth %d: %r %r" % (acc, depth, err, res)):
                continue
            st = state(c, pre)
            check(all(v is not None for v in st.values()), "acc %d depth %d: state missing: %r" %
                  (acc, depth, [k for k, v in st.items() if v is None]))
            if ref is None:
                ref = (losses, st, res["loss"])
                check(len(set(losses)) > 6, "the losses move: %r" % (losses,))
                continue
            check(losses == ref[0], "acc %d depth %d: losses differ from depth 1:\n%r\n%r" %
                  (acc, depth, losses, ref[0]))
            check(res["loss"] == ref[2], "acc %d depth %d: final loss" % (acc, depth))
            for k in st:
                check(st[k] == ref[1][k], "acc %d depth %d: '%s' differs from depth 1" % (acc, depth, k))


def nan_at_step5(c, x, y, init):
    """A row of the fifth batch scales its logits by NaN: step 5 fails,
    steps 6.. were in flight at depth 2 and 3 and are not applied."""
    bad = np.ones((len(x), 1))
    bad[4 * BATCH + 3, 0] = np.nan
    setup(c, "n4/", x, y, init, bad)
    err, res, _ = run(c, "n4/", steps=4, pipeline_depth=1)
    check(err is None, "4 steps: %r" % (err,))
    want = state(c, "n4/")
    for depth in (1, 2, 3):
        pre = "nd%d/" % depth
        setup(c, pre, x, y, init, bad)
        err, res, losses = run(c, pre, steps=10, pipeline_depth=depth)
        check(err is not None and err["name"] == "FAILED_PRECONDITION" and "at step 5;" in err["message"],
              "depth %d: NaN at step 5: %r %r" % (depth, err, res))
        check(len(losses) == 4, "depth %d: progress of steps 1-4 only: %r" % (depth, losses))
        got = state(c, pre)
        for k in got:
            check(got[k] == want[k], "depth %d: '%s' is not as after step 4" % (depth, k))
        mst = c.call("model.stat", {"name": pre + "m"}) if depth else None
        check(mst is None or mst.get("step") == 4, "depth %d: model step %r" % (depth, mst and mst.get("step")))


def two_runs(d, c, x, y, init):
    """Two pipelined runs at once on two connections (the jobs take turns:
    one drains its steps in flight while the other waits): both end, each
    bit-identical to the depth-1 run of the same 12 steps."""
    want = state(c, "a1d1/")
    clients = [d.client(), d.client()]
    ids = []
    for i, cl in enumerate(clients):
        pre = "two%d/" % i
        setup(c, pre, x, y, init)
        ids.append(cl.request("train.run", {"model": pre + "m", "data": {"x": pre + "X", "y": pre + "Y", "s": pre + "S"},
                                            "batch_size": BATCH, "seed": 3, "shuffle": False, "steps": 12,
                                            "pipeline_depth": 2}))
    for i, cl in enumerate(clients):
        while True:
            m = cl.recv()
            if m is None or m[0] == 1:
                break
        check(m is not None and m[1] == ids[i] and m[2] is None and m[3]["steps"] == 12,
              "run %d of two: %r" % (i, m))
        got = state(c, "two%d/" % i)
        for n in got:
            check(got[n] == want[n], "run %d of two: '%s' differs from depth 1" % (i, n))
        cl.close()


def version(c, name):
    return c.call("tensor.stat", {"name": name})["version"]


def reference(c, x, y, init, steps, what):
    """A depth-1 run of `steps` steps from the initial values."""
    pre = "r%s/" % what
    setup(c, pre, x, y, init)
    err, _, _ = run(c, pre, steps=steps, pipeline_depth=1, progress_every=1000000)
    check(err is None, "%s: reference run: %r" % (what, err))
    return state(c, pre)


def cancel_mid_run(d, c, x, y, init):
    pre = "cx/"
    setup(c, pre, x, y, init)
    v0 = version(c, pre + "w1")
    job = c.call("train.run", {"model": pre + "m", "data": {"x": pre + "X", "y": pre + "Y", "s": pre + "S"}, "batch_size": BATCH,
                               "seed": 3, "shuffle": False, "steps": 1000000, "pipeline_depth": 3,
                               "detach": True})["job"]
    time.sleep(0.5)
    c.call("job.cancel", {"job": job})
    deadline = time.monotonic() + 60
    while True:
        st = c.call("job.stat", {"job": job})
        if st["state"] != "running" or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    k = st["run_step"]
    check(st["state"] == "cancelled" and 0 < k < 1000000 and st["result"]["steps"] == k,
          "cancelled: %r" % (st,))
    check(version(c, pre + "w1") - v0 == k, "cancel: %d steps counted, w1 changed %d times" %
          (k, version(c, pre + "w1") - v0))
    if k > 0:
        want = reference(c, x, y, init, k, "c")
        got = state(c, pre)
        for n in got:
            check(got[n] == want[n], "cancel: '%s' is not as after the %d steps counted" % (n, k))


def disconnect_mid_run(d, c, x, y, init):
    pre = "dx/"
    setup(c, pre, x, y, init)
    v0 = version(c, pre + "w1")
    runner = d.client()
    runner.request("train.run", {"model": pre + "m", "data": {"x": pre + "X", "y": pre + "Y", "s": pre + "S"},
                                 "batch_size": BATCH, "seed": 3, "shuffle": False, "steps": 1000000,
                                 "pipeline_depth": 3, "progress_every": 1})
    seen = 0
    while seen < 20:
        m = runner.recv()
        if m is None or m[0] != 2:
            break
        seen = m[2][0]["run_step"]
    runner.close()
    last, k = -1, version(c, pre + "w1") - v0
    deadline = time.monotonic() + 60
    while k != last and time.monotonic() < deadline:
        time.sleep(0.3)
        last, k = k, version(c, pre + "w1") - v0
    check(k == last and k >= seen >= 20, "disconnect: the run stopped (%d steps applied, %d reported)" % (k, seen))
    want = reference(c, x, y, init, k, "d")
    got = state(c, pre)
    for n in got:
        check(got[n] == want[n], "disconnect: '%s' is not as after the %d steps applied" % (n, k))
    check(d.alive(), "daemon died")


def refused(c, x, y, init):
    setup(c, "bad/", x, y, init)
    for depth in (0, 5):
        err, _, _ = run(c, "bad/", steps=2, pipeline_depth=depth)
        check(err is not None and err["name"] == "INVALID_ARGUMENT" and "pipeline_depth" in err["message"],
              "pipeline_depth %d: %r" % (depth, err))


def loop_free(d, c):
    """Steps of about a second at depth 2: another client's pings are
    answered within a fraction of a step all along."""
    n, k = 384, 2
    rng = np.random.default_rng(1)
    put(c, "LX", rng.random((n, n)) / n)
    put(c, "LW", rng.random((n, n)) - 0.5)
    put(c, "LI", np.eye(n))
    nodes = [{"id": "h0", "op": "matmul", "inputs": ["x", "LW"]}]
    for i in range(1, k + 1):
        nodes.append({"id": "h%d" % i, "op": "matmul", "inputs": ["h%d" % (i - 1), "LI"]})
    nodes.append({"id": "loss", "op": "sum", "inputs": ["h%d" % k]})
    runner, other = d.client(), d.client()
    res = {}

    def run_it():
        res["r"] = runner.call_past_notifications("train.run", {
            "nodes": nodes, "loss": "loss", "params": ["LW"], "optimizer": {"type": "sgd", "lr": 0.01},
            "data": {"x": "LX"}, "batch_size": n, "steps": 5, "pipeline_depth": 2})
        res["t"] = True

    th = threading.Thread(target=run_it, daemon=True)
    th.start()
    time.sleep(0.3)
    worst = 0
    while "t" not in res:
        t1 = time.monotonic()
        other.call("ping")
        worst = max(worst, time.monotonic() - t1)
    th.join()
    err, r = res["r"]
    if check(err is None, "long steps: %r" % (err,)):
        step = r["seconds"] / r["steps"]
        print("steps of %.2f s at depth 2: worst ping %.3f s" % (step, worst))
        check(worst < max(0.3, step / 3), "the loop was held %.2f s (a step: %.2f s)" % (worst, step))
    runner.close()
    other.close()


def lost_and_sigterm(x, y, init):
    """Steps in flight at depth 3 when the device is lost (the 40th
    submission fails: TENSORD_FAULT_DEVICE_LOST), and at SIGTERM."""
    os.environ["TENSORD_FAULT_DEVICE_LOST"] = "40"
    try:
        d = Daemon().start()
    finally:
        del os.environ["TENSORD_FAULT_DEVICE_LOST"]
    try:
        c = d.client()
        setup(c, "l/", x, y, init)
        err, res, losses = run(c, "l/", steps=1000, pipeline_depth=3)
        check(err is not None and err["name"] == "DEVICE_LOST", "device lost mid-run: %r %r" % (err, res))
        check(c.call("ping")["pong"] is True and c.call("info")["device_resets"] == 1, "served after the loss")
        c.close()
    finally:
        d.stop()
    d = Daemon().start()
    try:
        c = d.client()
        setup(c, "t/", x, y, init)
        c.request("train.run", {"model": "t/m", "data": {"x": "t/X", "y": "t/Y", "s": "t/S"}, "batch_size": BATCH,
                                "steps": 1000000, "pipeline_depth": 3, "progress_every": 1})
        for _ in range(10):
            m = c.recv()
            check(m is not None and m[0] == 2, "progress before SIGTERM: %r" % (m,))
    finally:
        d.stop()  # raises unless it exits 0 in time


def main():
    rng = np.random.default_rng(5)
    x, y, init = data(rng)
    with Daemon() as d:
        c = d.client()
        same_as_depth1(c, x, y, init)
        nan_at_step5(c, x, y, init)
        two_runs(d, c, x, y, init)
        cancel_mid_run(d, c, x, y, init)
        disconnect_mid_run(d, c, x, y, init)
        refused(c, x, y, init)
        loop_free(d, c)
        check(d.alive(), "daemon died")
    lost_and_sigterm(x, y, init)
    print("%d failures" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

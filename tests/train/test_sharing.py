#!/usr/bin/python3
"""Sharing the GPU between users (issue 34; docs/architecture.md, "Sharing
the GPU"): train.run's nice among one user's runs; equal GPU time for two
users whose steps are 8x apart, and 3:1 with user_weights; user_gpu_hour
throttles a user past its budget without starving it; user_quota_* give one
user or group its own quotas. Other uids need root (as in CI); without it
those parts are skipped."""
import os
import sys
import tempfile
import time

import numpy as np

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from daemon import Daemon, as_user  # noqa: E402
from test_jobs import (USER_A, check, error_name, failures, put, run_params,  # noqa: E402
                       setup_data, wait_state)


def start_params(c, suffix):
    setup_data(c, suffix)
    return run_params(suffix, steps=10000000, detach=True)


def test_nice(d):
    """Two of one user's runs, the same steps, one with nice 10: the other
    gets most of their turns (1.25^10 = 9.3 times the weight), the nice one
    still some (no run starves), and a nice out of 0..19 is refused."""
    c = d.client()
    jobs = []
    for nice in (0, 10):
        jobs.append(c.call("train.run", dict(start_params(c, "n%d" % nice), nice=nice))["job"])
    first = [c.call("job.stat", {"job": j})["run_step"] for j in jobs]
    time.sleep(4.0)
    last = [c.call("job.stat", {"job": j})["run_step"] for j in jobs]
    done = [b - a for a, b in zip(first, last)]
    print("nice 0 / 10: %d / %d steps in 4 s" % tuple(done))
    check(done[1] > 0 and done[0] >= 3 * done[1], "nice 10 yields to nice 0 but runs: %r" % (done,))
    check(error_name(c, "train.run", dict(run_params("n0"), nice=20)) == "INVALID_ARGUMENT", "nice 20 refused")
    for j in jobs:
        c.call("job.cancel", {"job": j})
        wait_state(c, j)
    c.close()


def start_wide(c, batch):
    """A detached run of an MLP 256-256-1 over 8192 rows at `batch` rows a
    step: its steps' GPU time grows with the batch."""
    rng = np.random.default_rng(0)
    put(c, "fx", rng.standard_normal((8192, 256)))
    put(c, "fy", rng.standard_normal((8192, 1)))
    put(c, "fw1", rng.standard_normal((256, 256)) * 0.05)
    put(c, "fw2", rng.standard_normal((256, 1)) * 0.05)
    nodes = [{"id": "h", "op": "matmul", "inputs": ["xb", "fw1"]}, {"id": "a", "op": "tanh", "inputs": ["h"]},
             {"id": "z", "op": "matmul", "inputs": ["a", "fw2"]}, {"id": "L", "op": "mse", "inputs": ["z", "yb"]}]
    return c.call("train.run", {"nodes": nodes, "loss": "L", "params": ["fw1", "fw2"],
                                "optimizer": {"type": "sgd", "lr": 1e-4}, "data": {"xb": "fx", "yb": "fy"},
                                "batch_size": batch, "steps": 10000000, "detach": True})["job"]


def test_fair_share(tmp, weights=None, want=50):
    """Two users' runs, one's steps 8x the other's: each gets half the GPU
    time (50 % +- 10 points over 8 s, info's users), not the same number of
    turns (issue 34: the long steps took 85 % before); with user_weights
    3:1, 75 % and 25 %."""
    if os.geteuid() != 0:
        print("fair share: skipped (another uid needs root)")
        return
    config = "user_weights = 0:%d @%d:%d\n" % (weights[0], USER_A, weights[1]) if weights else ""
    with Daemon(config=config) as d:
        os.chmod(d.dir, 0o755)
        os.chmod(d.sock, 0o666)
        c = d.client()
        mine = start_wide(c, 256)

        def other():
            with d.client() as o:
                return start_wide(o, 2048)

        theirs = as_user(USER_A, other)
        time.sleep(1.0)

        def gpu():
            return {u["uid"]: u["gpu_seconds"] for u in c.call("info")["users"]}

        g0 = gpu()
        time.sleep(8.0)
        g1 = gpu()
        a, b = g1.get(0, 0) - g0.get(0, 0), g1.get(USER_A, 0) - g0.get(USER_A, 0)
        share = 100 * a / (a + b) if a + b > 0 else 0
        print("fair share (weights %r): root %.2f s, uid %d %.2f s of GPU time: %.0f %%" % (weights, a, USER_A, b, share))
        check(want - 10 <= share <= want + 10, "GPU time split %.0f / %.0f between steps 8x apart, weights %r" % (
            share, 100 - share, weights))
        c.call("job.cancel", {"job": mine})
        c.call("job.cancel", {"job": theirs, "owner": USER_A})
        wait_state(c, mine)
        c.close()


def test_gpu_budget(tmp):
    """user_gpu_hour: root may use 1 GPU second an hour; once past it, its
    job goes behind the other user's (under 15 % of the GPU time while both
    run, still a turn a second), and has the device again when it is alone
    (issue 34)."""
    if os.geteuid() != 0:
        print("gpu budget: skipped (another uid needs root)")
        return
    with Daemon(config="user_gpu_hour = 0:1\n") as d:
        os.chmod(d.dir, 0o755)
        os.chmod(d.sock, 0o666)
        c = d.client()
        mine = start_wide(c, 256)

        def other():
            with d.client() as o:
                return start_wide(o, 2048)

        theirs = as_user(USER_A, other)

        def users():
            return {u["uid"]: u for u in c.call("info")["users"]}

        deadline = time.monotonic() + 60
        while users()[0]["gpu_seconds_hour"] < 1.5 and time.monotonic() < deadline:
            time.sleep(0.2)
        g0, s0 = users(), c.call("job.stat", {"job": mine})["run_step"]
        time.sleep(4.0)
        g1, s1 = users(), c.call("job.stat", {"job": mine})["run_step"]
        check(s1 > s0, "throttled, it still makes progress (a turn a second): %d -> %d" % (s0, s1))
        a = g1[0]["gpu_seconds"] - g0[0]["gpu_seconds"]
        b = g1[USER_A]["gpu_seconds"] - g0[USER_A]["gpu_seconds"]
        share = 100 * a / (a + b) if a + b > 0 else 100
        print("gpu budget: root past its 1 s an hour: %.0f %% of the GPU time (%.2f s of %.2f)" % (share, a, a + b))
        check(share <= 15, "a user past its hour's budget goes behind: %.0f %%" % share)
        c.call("job.cancel", {"job": theirs, "owner": USER_A})
        while c.call("job.stat", {"job": theirs, "owner": USER_A})["state"] == "running":
            time.sleep(0.05)
        before = c.call("job.stat", {"job": mine})["run_step"]
        time.sleep(1.0)
        check(c.call("job.stat", {"job": mine})["run_step"] > before, "alone, it runs again")
        c.call("job.cancel", {"job": mine})
        wait_state(c, mine)
        c.close()


def test_user_quotas(tmp):
    """user_quota_* give one user (by uid) or a group (by primary gid) other
    quotas than user_max_*: the named user hits its own (named in the error,
    shown in info's user), the others keep the global ones (issue 34)."""
    if os.geteuid() != 0:
        print("user quotas: skipped (another uid needs root)")
        return
    config = ("user_max_jobs = 3\nuser_quota_jobs = %d:1\nuser_quota_bytes = @%d:1K\n"
              "user_quota_tensors = 0:100\n" % (USER_A, USER_A))
    with Daemon(config=config) as d:
        os.chmod(d.dir, 0o755)
        os.chmod(d.sock, 0o666)

        def other():
            o = d.client()
            put(o, "x", np.zeros((40, 3)))  # 480 + 160 bytes of 1K
            put(o, "y", np.zeros((40, 1)))
            put(o, "w", np.zeros((3, 1)))
            put(o, "b", np.zeros(1))
            big = error_name(o, "tensor.put", {"name": "big", "dtype": "f32", "shape": [256],
                                                "data": bytes(1024)})
            first = o.call("train.run", run_params(steps=10000000, detach=True, batch_size=8))["job"]
            err, _ = o.call_full("train.run", run_params(steps=10, detach=True, batch_size=8))
            o.call("job.cancel", {"job": first})
            return {"big": big, "err": err, "user": o.call("info")["user"]}

        got = as_user(USER_A, other)
        check(got["big"] == "RESOURCE_EXHAUSTED", "the group's 1K byte quota: %r" % (got["big"],))
        check(got["err"] and "user_quota_jobs" in got["err"]["message"],
              "the user's one-job quota, named: %r" % (got["err"],))
        check(got["user"]["max_bytes"] == 1024 and got["user"]["max_tensors"] == 0,
              "info's user shows the user's own quotas: %r" % (got["user"],))
        c = d.client()
        setup_data(c)
        jobs = [c.call("train.run", run_params(steps=10000000, detach=True))["job"] for _ in range(2)]
        check(c.call("info")["user"]["max_tensors"] == 100, "root's own tensor quota in info")
        for j in jobs:
            c.call("job.cancel", {"job": j})
            wait_state(c, j)
        c.close()


def main():
    with Daemon() as d:
        test_nice(d)
    with tempfile.TemporaryDirectory(prefix="tensord-share-") as tmp:
        test_fair_share(tmp)
        test_fair_share(tmp, (3, 1), 75)
        test_gpu_budget(tmp)
        test_user_quotas(tmp)
    if failures:
        print("%d failures" % len(failures))
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())

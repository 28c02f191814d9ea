#!/usr/bin/env python3
"""A train.run across a group of tensord processes joined by mpirun
(docs/cluster.md) against one daemon, same model, batch and seed: the time
per step of each and their ratio, and the largest parameter difference.

Starts `mpirun -np RANKS tensord` (binaries from --tensord and --mpirun, each
member with its own socket and state under a temporary directory, the
members on `--device`), puts an MLP (784-512-512-10 by default) and synthetic
data on every member, then for each batch size:

1. one daemon (member 0 alone, no `ranks`): warm-up run, then `--steps` steps;
2. the group (`ranks: "all"`): warm-up, then `--steps` steps;
3. prints ms/step of each (from train.run's samples_per_s, which counts from
   the first step: the group's start -- reports, parameters broadcast, shared
   region -- not included) and the speed-up (one's step time over the
   group's, each member doing 1/RANKS of the rows), and after an equality run
   of `--check-steps` SGD steps from the same parameters, the largest
   difference between the one-daemon and the group's parameters.

On one GPU (two daemons sharing it) this measures what the MPI exchange and
the split cost; on lavapipe only as a smoke run:

    python3 bench/bench_cluster.py --tensord build/daemon/tensord --mpirun mpirun \\
        --dims 32,64,10 --rows 2048 --batches 64 --steps 20 --check-steps 5"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "lib"))
from daemon import Client  # noqa: E402
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_profile import define_gpt  # noqa: E402
from mlp_common import get, init_params, mlp_nodes, put, run_train  # noqa: E402



def reset(cs, params):
    for c in cs:
        for k, v in params.items():
            put(c, k, v)
            for s in (".exp_avg", ".exp_avg_sq"):
                c.call_full("tensor.delete", {"name": k + s})


def start_group(a, tmp):
    conf = os.path.join(tmp, "tensord.conf")
    with open(conf, "w") as f:
        f.write("state_dir = %s/state%%r\npersist = no\ncluster = yes\ncluster_timeout = %g\ndevice = %s\n"
                % (tmp, a.timeout, a.device))
    cmd = [a.mpirun, "-np", str(a.ranks), "--oversubscribe", "--enable-recovery", "--quiet"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    cmd += a.mpirun_arg
    cmd += [a.tensord, "--socket", os.path.join(tmp, "s%r.sock"), "--config", conf]
    log = open(os.path.join(tmp, "log"), "w+")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    socks = [os.path.join(tmp, "s%d.sock" % r) for r in range(a.ranks)]
    deadline = time.time() + 120
    while not all(os.path.exists(s) for s in socks):
        if proc.poll() is not None or time.time() > deadline:
            log.seek(0)
            sys.exit("the group did not come up:\n" + log.read())
        time.sleep(0.1)
    cs = []
    for s in socks:  # bound before it listens: retry a refused connect
        while True:
            try:
                cs.append(Client(s, timeout=3600))
                break
            except ConnectionRefusedError:
                if time.time() > deadline:
                    raise
                time.sleep(0.05)
    return proc, log, cs


def gpt_rows(a, cs):
    """--gpt: each GPT-style model trained by member 0 alone and by the group,
    from the same start: ms per step and tokens/s of each."""
    out = []
    rng = np.random.default_rng(0)
    for cfg in a.gpt:
        dim, blocks, seq, batch, vocab = (int(v) for v in cfg.split(","))
        data = {n: rng.integers(0, vocab, (batch * 8, seq)).astype(np.int32) for n in ("gx", "gy")}
        t = {}
        for label, extra in (("one", {}), ("group", {"ranks": "all"})):
            for c in cs:
                for n, arr in data.items():
                    put(c, n, arr)
                define_gpt(c, "cgpt", dim, blocks, seq, vocab)
            p = dict({"model": "cgpt", "data": {"x": "gx", "y": "gy"}, "batch_size": batch, "seed": 3,
                      "progress_every": 1000000}, **extra)
            run_train(cs[0], dict(p, steps=3))
            t0 = time.perf_counter()
            r = run_train(cs[0], dict(p, steps=a.gpt_steps))
            wall = time.perf_counter() - t0
            ms = 1e3 * batch / r["samples_per_s"]  # from its first step
            t[label] = (ms, r["loss"], r.get("exchange"), wall - a.gpt_steps * ms / 1e3)
        row = {"gpt": cfg, "one_ms": t["one"][0], "group_ms": t["group"][0], "exchange": t["group"][2],
               "speedup": t["one"][0] / t["group"][0], "loss": [t["one"][1], t["group"][1]],
               "setup_s": [t["one"][3], t["group"][3]]}
        print("GPT %s: one daemon %.1f ms/step (%.0f tokens/s), group of %d %.1f ms/step (%.0f tokens/s, "
              "exchange %s), speed-up %.2fx; losses %.4f / %.4f; run set-up %.2f / %.2f s" % (
                  cfg, row["one_ms"], 1e3 * batch * seq / row["one_ms"], a.ranks, row["group_ms"],
                  1e3 * batch * seq / row["group_ms"], row["exchange"], row["speedup"], *row["loss"],
                  *row["setup_s"]), flush=True)
        out.append(row)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tensord", default=os.environ.get("TENSORD_BIN"), help="the tensord binary")
    ap.add_argument("--mpirun", default=shutil.which("mpirun"), help="the mpirun binary")
    ap.add_argument("--mpirun-arg", action="append", default=[], help="one more mpirun argument (repeatable)")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--device", default="local",
                    help="every member's device (config key `device`; default local: one GPU each, "
                    "0: all on the first)")
    ap.add_argument("--dims", default="784,512,512,10")
    ap.add_argument("--rows", type=int, default=65536)
    ap.add_argument("--batches", default="512,4096,16384")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--check-steps", type=int, default=20)
    ap.add_argument("--timeout", type=float, default=60, help="cluster_timeout, seconds")
    ap.add_argument("--gpt", nargs="*", default=[], metavar="DIM,BLOCKS,SEQ,BATCH,VOCAB",
                    help="GPT-style models also trained by one daemon and by the group")
    ap.add_argument("--gpt-steps", type=int, default=20)
    ap.add_argument("--out-json")
    a = ap.parse_args()
    if not a.tensord or not a.mpirun:
        sys.exit("give --tensord PATH and --mpirun PATH")
    a.tensord = os.path.abspath(a.tensord)
    dims = [int(d) for d in a.dims.split(",")]
    rng = np.random.default_rng(1)
    x = rng.standard_normal((a.rows, dims[0])).astype(np.float32)
    y = rng.integers(0, dims[-1], a.rows).astype(np.int32)
    init = init_params(dims, 2)
    tmp = tempfile.mkdtemp(prefix="bench-cluster-")
    proc, log, cs = start_group(a, tmp)
    rows_out = []
    try:
        info = cs[0].call("info")
        dev = [d for d in info["devices"] if d.get("active")][0]
        print("group of %d on %s; model %s, %d rows" % (a.ranks, dev.get("name"), a.dims, a.rows))
        for c in cs:
            put(c, "x", x)
            put(c, "y", y)
        for batch in [int(b) for b in a.batches.split(",")]:
            base = {"nodes": mlp_nodes(dims), "loss": "L", "params": list(init), "data": {"xb": "x", "yb": "y"},
                    "batch_size": batch, "seed": 3, "optimizer": {"type": "adam", "lr": 1e-3},
                    "progress_every": 1000000}
            t = {}
            for label, extra in (("one", {}), ("group", {"ranks": "all"})):
                reset(cs, init)
                run_train(cs[0], dict(base, steps=10, **extra))  # warm-up
                r = run_train(cs[0], dict(base, steps=a.steps, **extra))
                t[label] = 1e3 * batch / r["samples_per_s"]  # from its first step: set-up not counted
                t[label + "_loss"] = r["loss"]
                t["exchange"] = r.get("exchange")
            sgd = dict(base, steps=a.check_steps, optimizer={"type": "sgd", "lr": 0.05})
            reset(cs, init)
            run_train(cs[0], sgd)
            one = {k: get(cs[0], k) for k in init}
            reset(cs, init)
            run_train(cs[0], dict(sgd, ranks="all"))
            diff = max(float(np.max(np.abs(get(cs[0], k) - one[k]))) for k in init)
            members = max(float(np.max(np.abs(get(c, k) - get(cs[0], k)))) for c in cs[1:] for k in init)
            row = {"batch": batch, "one_ms": t["one"], "group_ms": t["group"], "ratio": t["group"] / t["one"],
                   "speedup": t["one"] / t["group"], "exchange": t["exchange"],
                   "max_diff_vs_one": diff, "max_diff_members": members}
            rows_out.append(row)
            print("batch %6d: one daemon %.3f ms/step, group of %d %.3f ms/step (exchange %s), speed-up %.2fx; "
                  "SGD %d steps: max |group - one| %.2e, members differ by %.2e"
                  % (batch, t["one"], a.ranks, t["group"], t["exchange"], row["speedup"], a.check_steps, diff,
                     members), flush=True)
        rows_out += gpt_rows(a, cs)
    finally:
        for c in cs:
            c.close()
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)
    if a.out_json:
        with open(a.out_json, "w") as f:
            json.dump({"ranks": a.ranks, "dims": dims, "rows": a.rows, "steps": a.steps, "results": rows_out}, f,
                      indent=1)


if __name__ == "__main__":
    main()

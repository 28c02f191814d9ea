#!/usr/bin/env python3
"""Data-parallel train.run over several devices against one device, in the
same run (docs/devices.md, docs/performance.md).

Starts tensord (TENSORD_BIN or --tensord) with `--device DEVICES` (default
`auto`: every GPU of the best kind), puts an MLP (784-512-512-10 by default)
and synthetic data, then for each batch size:

1. correctness: the same number of steps from the same initial parameters and
   the same seed on one device and on all devices; prints the largest
   parameter difference (absolute and relative to the parameter's largest
   magnitude) and the daemon's replica_max_diff;
2. throughput: train.run's own samples_per_s on one device and on all,
   after a warm-up run each, and their ratio;
3. with PyTorch present (the GPU host), PyTorch's one-GPU eager loop at the
   same batch for reference;
4. the exchange's share of a step (--exchanges, default gpu,host,none): the
   all-device step time with the gradients averaged on the GPU (the default
   where every device imports host memory), on the host
   (TENSORD_DP_EXCHANGE=host, the exchange before the GPU one) and not at all
   (TENSORD_DP_EXCHANGE=none: replicas drift apart, for timing only), each in
   a daemon of its own, the modes alternating over --rounds rounds (best
   round kept); `--old-tensord BIN` adds a mode "old": that binary as it is.
   "exchange adds" is a mode's step time less the time without exchange.

Not a timed test: run it by hand, e.g. on a host with two GPUs

    . .gpu-runtime/enter.sh
    TENSORD_BIN=build-release/daemon/tensord python3 bench/bench_data_parallel.py

and on lavapipe (`--device 0,0 --dims 32,64,10 --rows 2048 --batches 64`)
only as a smoke run: two logical devices on one CPU give no speed-up."""
import argparse
import json
import os
import sys
import time

import numpy as np

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "lib"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from daemon import Daemon  # noqa: E402
from gpt_profile import define_gpt  # noqa: E402
from mlp_common import get, init_params, mlp_nodes, run_train  # noqa: E402
from mlp_common import put as put_on  # noqa: E402



def put(c, name, arr):
    put_on(c, name, arr, device=0)


def reset(c, params):
    for k, v in params.items():
        put(c, k, v)
        for s in (".exp_avg", ".exp_avg_sq"):
            c.call_full("tensor.delete", {"name": k + s})


def torch_samples_per_s(dims, rows, batch, steps):
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    dev = torch.device("cuda:0")
    torch.manual_seed(0)
    layers = []
    for i in range(len(dims) - 1):
        layers.append(torch.nn.Linear(dims[i], dims[i + 1]))
        if i + 2 < len(dims):
            layers.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*layers).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(rows, dims[0], device=dev)
    y = torch.randint(0, dims[-1], (rows,), device=dev)

    def run(n):
        done = 0
        while done < n:
            perm = torch.randperm(rows, device=dev)
            for j in range(rows // batch):
                if done == n:
                    break
                idx = perm[j * batch:(j + 1) * batch]
                opt.zero_grad(set_to_none=True)
                F.cross_entropy(model(x[idx]), y[idx]).backward()
                opt.step()
                done += 1
    run(10)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    run(steps)
    torch.cuda.synchronize()
    return steps * batch / (time.perf_counter() - t0)


def gpt_table(a, c, ids):
    """--gpt: each GPT-style model (DIM,BLOCKS,SEQ,BATCH,VOCAB) trained with
    train.run on one device and on all, from the same start: tokens/s, the
    ratio, the losses after the same steps and replica_max_diff."""
    if not a.gpt:
        return []
    rng = np.random.default_rng(0)
    lines = ["| GPT dim, blocks, seq, batch (%s) | one device: ms/step (tokens/s) | %d devices: ms/step (tokens/s) | "
             "ratio | loss one / all | replica_max_diff |" % (a.precision, len(ids)), "|---|---:|---:|---:|---|---:|"]
    for cfg in a.gpt:
        dim, blocks, seq, batch, vocab = (int(v) for v in cfg.split(","))
        rows = batch * 8
        for n in ("gx", "gy"):
            put(c, n, rng.integers(0, vocab, (rows, seq)).astype(np.int32))
        got = {}
        for label, dv in (("one", ids[:1]), ("all", ids)):
            define_gpt(c, "dpgpt", dim, blocks, seq, vocab, a.precision)
            p = {"model": "dpgpt", "data": {"x": "gx", "y": "gy"}, "batch_size": batch, "seed": 3,
                 "progress_every": 1000000}
            if len(dv) > 1:
                p["devices"] = dv
            run_train(c, dict(p, steps=3))
            got[label] = run_train(c, dict(p, steps=a.gpt_steps))
        one, al = got["one"], got["all"]
        ms = [1e3 * batch / r["samples_per_s"] for r in (one, al)]
        lines.append("| %d, %d, %d, %d | %.1f (%.0f) | %.1f (%.0f) | %.2f | %.4f / %.4f | %s |" % (
            dim, blocks, seq, batch, ms[0], seq * one["samples_per_s"], ms[1], seq * al["samples_per_s"],
            al["samples_per_s"] / one["samples_per_s"], one["loss"], al["loss"], al.get("replica_max_diff")))
        print(lines[-1])
        sys.stdout.flush()
    c.call_full("model.delete", {"name": "dpgpt"})
    return lines


def exchange_table(a, dims, batches, x, y, init, rows):
    """Step 4: the all-device step time per exchange mode, each mode in a
    daemon of its own, alternating over rounds; fills rows' "step_ms_<mode>"
    (best round) and returns a markdown table."""
    modes = [m for m in a.exchanges.split(",") if m]
    if a.old_tensord:
        modes.append("old")
    if not modes or not rows:
        return []
    best = {}
    for _ in range(a.rounds):
        for mode in modes:
            saved = dict(os.environ)
            os.environ.pop("TENSORD_DP_EXCHANGE", None)
            if mode in ("host", "none"):
                os.environ["TENSORD_DP_EXCHANGE"] = mode
            if mode == "old":
                os.environ["TENSORD_BIN"] = a.old_tensord
            try:
                with Daemon(["--device", a.device], timeout=120) as d:
                    with d.client() as c:
                        ids = [x_["id"] for x_ in c.call("info")["devices"] if x_["active"]]
                        put(c, "x", x)
                        put(c, "y", y)
                        base = {"nodes": mlp_nodes(dims), "loss": "L", "params": list(init),
                                "data": {"xb": "x", "yb": "y"}, "optimizer": {"type": "adam", "lr": 1e-3},
                                "seed": 3, "progress_every": 1000000, "devices": ids}
                        for batch in batches:
                            if batch % len(ids) or batch > a.rows:
                                continue
                            reset(c, init)
                            p = dict(base, batch_size=batch)
                            run_train(c, dict(p, steps=10))
                            res = run_train(c, dict(p, steps=a.steps))
                            got = res.get("exchange", "old" if mode == "old" else None)
                            if mode != "old" and got != mode:
                                sys.exit("asked for exchange %s, the daemon ran %r" % (mode, got))
                            ms = 1e3 * batch / res["samples_per_s"]
                            key = (batch, mode)
                            best[key] = min(best.get(key, ms), ms)
            finally:
                os.environ.clear()
                os.environ.update(saved)
    lines = ["| batch | one device: step ms | " + " | ".join("%s: step ms" % m for m in modes) +
             " | " + " | ".join("%s: exchange adds ms" % m for m in modes if m != "none") +
             " | one / gpu |",
             "|---:" * (3 + len(modes) + len([m for m in modes if m != "none"])) + "|"]
    for r in rows:
        b = r["batch"]
        for m in modes:
            r["step_ms_" + m] = best.get((b, m))
        none = best.get((b, "none"))
        adds = ["%.3f" % (best[(b, m)] - none) if none is not None and (b, m) in best else "-"
                for m in modes if m != "none"]
        gpu = best.get((b, "gpu"))
        lines.append("| %d | %.3f | " % (b, r["step_ms_one"]) +
                     " | ".join("%.3f" % best[(b, m)] if (b, m) in best else "-" for m in modes) + " | " +
                     " | ".join(adds) + " | " + ("%.2f" % (r["step_ms_one"] / gpu) if gpu else "-") + " |")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tensord", default=os.environ.get("TENSORD_BIN"))
    ap.add_argument("--device", default="auto", help="tensord's --device (default auto)")
    ap.add_argument("--dims", default="784,512,512,10")
    ap.add_argument("--rows", type=int, default=65536)
    ap.add_argument("--batches", default="512,4096,16384")
    ap.add_argument("--steps", type=int, default=300,
                    help="measured steps per run (the first steps of a run are slower: use hundreds)")
    ap.add_argument("--check-steps", type=int, default=50, help="steps of the equality check")
    ap.add_argument("--max-rel-diff", type=float,
                    help="exit 1 when SGD's one-device and all-device parameters differ more (smoke runs)")
    ap.add_argument("--exchanges", default="gpu,host,none",
                    help="exchange modes timed in daemons of their own (empty: none)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of the exchange modes, alternating")
    ap.add_argument("--old-tensord", help="another tensord binary timed as mode 'old'")
    ap.add_argument("--gpt", nargs="*", default=[], metavar="DIM,BLOCKS,SEQ,BATCH,VOCAB",
                    help="GPT-style models also trained one device vs all (e.g. 256,2,128,32,8192 "
                    "768,12,512,8,8192)")
    ap.add_argument("--gpt-steps", type=int, default=20, help="measured train.run steps per GPT model")
    ap.add_argument("--precision", default="f32", choices=("f32", "bf16"),
                    help="the GPT models' model.define precision (docs/training.md, \"Mixed precision\")")
    ap.add_argument("--out-json")
    ap.add_argument("--out-markdown")
    a = ap.parse_args()
    if not a.tensord:
        sys.exit("set TENSORD_BIN or --tensord")
    os.environ["TENSORD_BIN"] = a.tensord
    dims = [int(d) for d in a.dims.split(",")]
    batches = [int(b) for b in a.batches.split(",")]
    rng = np.random.default_rng(1)
    x = rng.standard_normal((a.rows, dims[0])).astype(np.float32)
    y = rng.integers(0, dims[-1], a.rows).astype(np.int32)
    init = init_params(dims, 2)
    rows = []
    with Daemon(["--device", a.device], timeout=120) as d:
        with d.client() as c:
            devs = [x_ for x_ in c.call("info")["devices"] if x_["active"]]
            ids = [x_["id"] for x_ in devs]
            print("devices: " + "; ".join("%d: %s" % (x_["id"], x_["name"]) for x_ in devs))
            if len(ids) < 2:
                sys.exit("tensord opened %d device; data parallel needs two (--device)" % len(ids))
            put(c, "x", x)
            put(c, "y", y)
            base = {"nodes": mlp_nodes(dims), "loss": "L", "params": list(init),
                    "data": {"xb": "x", "yb": "y"}, "optimizer": {"type": "adam", "lr": 1e-3},
                    "seed": 3, "progress_every": 1000000}
            for batch in batches:
                if batch % len(ids) or batch > a.rows:
                    continue
                row = {"batch": batch, "devices": len(ids)}
                # 1. The same steps from the same start: one device vs all, with
                # SGD (differences stay at rounding size) and with Adam (which
                # divides by the running gradient size, so a rounding
                # difference in a near-zero gradient becomes a step of about lr).
                for opt_name, opt in (("sgd", {"type": "sgd", "lr": 0.01, "momentum": 0.9}),
                                      ("adam", {"type": "adam", "lr": 1e-3})):
                    got = {}
                    for label, dv in (("one", None), ("all", ids)):
                        reset(c, init)
                        for k in init:
                            c.call_full("tensor.delete", {"name": k + ".momentum_buffer"})
                        p = dict(base, batch_size=batch, steps=a.check_steps, optimizer=opt)
                        if dv:
                            p["devices"] = dv
                        res = run_train(c, p)
                        got[label] = ({k: get(c, k) for k in init}, res)
                    one, al = got["one"][0], got["all"][0]
                    row[opt_name + "_max_abs_diff"] = max(float(np.max(np.abs(one[k] - al[k]))) for k in init)
                    row[opt_name + "_max_rel_diff"] = max(
                        float(np.max(np.abs(one[k] - al[k])) / max(float(np.max(np.abs(one[k]))), 1e-12))
                        for k in init)
                    row[opt_name + "_replica_max_diff"] = got["all"][1].get("replica_max_diff")
                    row[opt_name + "_loss"] = [got["one"][1]["loss"], got["all"][1]["loss"]]
                # 2. Throughput, each after a warm-up run; the device time
                # per step (profile: the slowest device's) beside it, and one
                # device waiting for each step (depth 1, as data parallel).
                for label, dv, extra in (("one", None, {}), ("all", ids, {}),
                                         ("one_depth1", None, {"pipeline_depth": 1})):
                    reset(c, init)
                    p = dict(base, batch_size=batch, profile=True, **extra)
                    if dv:
                        p["devices"] = dv
                    run_train(c, dict(p, steps=10))
                    res = run_train(c, dict(p, steps=a.steps))
                    row["samples_per_s_" + label] = res["samples_per_s"]
                    row["gpu_ms_" + label] = res.get("gpu_ns", 0) / 1e6
                row["speedup"] = row["samples_per_s_all"] / row["samples_per_s_one"]
                # Perfect scaling would make a step of `batch` on N devices as
                # fast as one of batch / N on one device.
                half = batch // len(ids)
                reset(c, init)
                run_train(c, dict(base, batch_size=half, steps=10))
                row["samples_per_s_one_at_shard"] = run_train(c, dict(base, batch_size=half, steps=a.steps))["samples_per_s"]
                row["step_ms_one"] = 1e3 * batch / row["samples_per_s_one"]
                row["step_ms_all"] = 1e3 * batch / row["samples_per_s_all"]
                row["step_ms_one_at_shard"] = 1e3 * half / row["samples_per_s_one_at_shard"]
                row["exchange"] = res.get("exchange")
                row["torch_one_gpu_samples_per_s"] = torch_samples_per_s(dims, a.rows, batch, a.steps)
                rows.append(row)
                print(json.dumps(row))
                sys.stdout.flush()
            gpt_lines = gpt_table(a, c, ids)
    ex_lines = exchange_table(a, dims, batches, x, y, init, rows)
    lines = ["| batch | one device: step ms (samples/s) | %d devices: step ms (samples/s) | ratio | "
             "one device at batch/%d: step ms | GPU ms one / one depth 1 / %d devices | one device depth 1: "
             "step ms | SGD max abs / rel diff | Adam max abs / rel diff | "
             "replica_max_diff | PyTorch 1 GPU (samples/s) |" % (len(ids), len(ids), len(ids)),
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        t = r["torch_one_gpu_samples_per_s"]
        lines.append("| %d | %.2f (%.0f) | %.2f (%.0f) | %.2f | %.2f | %.2f / %.2f / %.2f | %.2f | %.1e / %.1e | "
                     "%.1e / %.1e | %s | %s |" % (
                         r["batch"], r["step_ms_one"], r["samples_per_s_one"], r["step_ms_all"],
                         r["samples_per_s_all"], r["speedup"], r["step_ms_one_at_shard"], r["gpu_ms_one"],
                         r["gpu_ms_one_depth1"], r["gpu_ms_all"], 1e3 * r["batch"] / r["samples_per_s_one_depth1"],
                         r["sgd_max_abs_diff"], r["sgd_max_rel_diff"], r["adam_max_abs_diff"],
                         r["adam_max_rel_diff"], r["sgd_replica_max_diff"], "%.0f" % t if t else "-"))
    md = "\n".join(lines + [""] + ex_lines + [""] + gpt_lines)
    print(md)
    if a.out_json:
        with open(a.out_json, "w") as f:
            json.dump({"dims": dims, "rows": rows}, f, indent=1)
    if a.out_markdown:
        with open(a.out_markdown, "w") as f:
            f.write(md + "\n")
    if a.max_rel_diff is not None:
        bad = [r["batch"] for r in rows if not (r["sgd_max_rel_diff"] <= a.max_rel_diff and
                                               r["sgd_replica_max_diff"] == 0.0)]
        if bad or not rows:
            sys.exit("parameters differ beyond %g (or replicas differ) at batch %r" % (a.max_rel_diff, bad))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Where a GPT-style train.run step's time goes: model.define of embedding, N
pre-norm causal transformer_blocks, layer_norm and a linear head (the
docs/training.md layer form), trained with train.run `profile: true`. Prints
per step: the wall time (train.run's seconds / steps), the GPU time, the host
time (wall - GPU), the dispatches and the step's peak device bytes. Not a
timed test.

    python3 bench/gpt_profile.py BUILD/daemon/tensord [CONFIG ...]

CONFIG is dim,blocks,seq,batch,vocab (default gpt-small: 768,12,512,8,8192);
Ends with the markdown table bench/compare_torch.py --gpt writes.
STEPS in the environment sets the steps per train.run (default 10); PRECISION
"bf16" trains tensord's model with `precision: "bf16"` and PyTorch's under
torch.autocast(bfloat16) (default f32); FUSED=0 (1) defines the blocks with
`fused: false` (true): the attention as separate ops or the fused op; without
it the layers choose (docs/training.md); TRACE_LOG
names a file to copy the daemon's log to (with TENSORD_TRACE_DISPATCHES=1, for
bench/trace_summary.py; the timed run is the second, after a 2-step one). Where
PyTorch sees a CUDA device, the same model (bench/compare_torch.py's
char_transformer, attention through F.scaled_dot_product_attention, f32, TF32
off, Adam) runs in the same command, eager and as a CUDA graph, with its peak
memory (torch.cuda.max_memory_allocated); the ratios are tensord's tokens/s
over PyTorch's."""
import os
import shutil
import sys

import numpy as np

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "lib"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from daemon import Daemon  # noqa: E402


def gpt_layers(dim, blocks, vocab):
    heads = max(1, dim // 64)
    blk = {"type": "transformer_block", "dim": dim, "heads": heads, "causal": True}
    if os.environ.get("FUSED") in ("0", "1"):
        blk["fused"] = os.environ["FUSED"] == "1"
    body = [dict(blk) for _ in range(blocks)]
    return [{"type": "embedding", "num_embeddings": vocab, "embedding_dim": dim, "name": "emb"},
            {"type": "sequential", "name": "blocks", "layers": body},
            {"type": "layer_norm", "normalized_shape": dim, "name": "ln"},
            {"type": "linear", "in": dim, "out": vocab, "name": "head"}]


def define_gpt(c, name, dim, blocks, seq, vocab, precision="f32"):
    """A fresh GPT-style model `name` (gpt_layers), seed 0, Adam lr 1e-4,
    trained in `precision` ("f32" or "bf16": model.define's)."""
    c.call_full("model.delete", {"name": name})
    for t in c.call("tensor.list", {"prefix": name + "/"})["tensors"]:
        c.call("tensor.delete", {"name": t["name"]})
    c.call("model.define", {"name": name, "seed": 0, "precision": precision,
                            "inputs": [{"name": "x", "dtype": "i32", "shape": [1, seq]},
                                       {"name": "y", "dtype": "i32", "shape": [1, seq]}],
                            "layers": gpt_layers(dim, blocks, vocab),
                            "loss": {"type": "cross_entropy", "target": "y"},
                            "optimizer": {"type": "adam", "lr": 1e-4}})


def torch_rows(configs, steps):
    """PyTorch's (eager ms, graph ms, eager peak bytes) per config, or None."""
    try:
        import torch
        if not torch.cuda.is_available():
            return None
        from compare_torch import TorchBench
    except ImportError:
        return None
    tb = TorchBench("cuda", 3, 1)
    out = {}
    for cfg in configs:
        dim, blocks, seq, batch, vocab = (int(v) for v in cfg.split(","))
        p = {"kind": "train_transformer", "vocab": vocab, "dim": dim, "heads": max(1, dim // 64),
             "layers": blocks, "hidden": 4 * dim, "seq": seq, "batch": batch, "rows": batch * 4,
             "steps": steps, "warmup_steps": 3, "runs": 3, "lr": 1e-4,
             "precision": os.environ.get("PRECISION", "f32")}
        try:
            torch.cuda.reset_peak_memory_stats()
            _, eager = tb.train(p)
            peak = torch.cuda.max_memory_allocated()
            tb.release()
            _, graph = tb.train_graph(p)
            tb.release()
            out[cfg] = (eager / 1e6, graph / 1e6, peak)
        except Exception as e:  # noqa: B902 - reported, the other rows go on
            print("pytorch %s: %s: %s" % (cfg, type(e).__name__, e), flush=True)
            tb.release()
    return out


def tensord_rows(binary, configs, steps, trace_log=None):
    """tensord's figures per config: {cfg: {"wall_ms", "gpu_ms", "dispatches",
    "peak_bytes"} or {"error"}}, and the daemon's memory line."""
    os.environ["TENSORD_BIN"] = binary
    ours, memline = {}, ""
    with Daemon(extra_args=("--verbose",)) as d:
        c = d.client()
        rng = np.random.default_rng(0)
        for at, cfg in enumerate(configs):
            dim, blocks, seq, batch, vocab = (int(v) for v in cfg.split(","))
            rows, name = batch * 4, "gpt%d" % at
            for n in ("gx", "gy"):
                a = rng.integers(0, vocab, (rows, seq)).astype(np.int32)
                c.call("tensor.put", {"name": n, "dtype": "i32", "shape": [rows, seq], "data": a.tobytes()})
            c.call("model.define", {"name": name, "replace": True, "seed": 0,
                                    "inputs": [{"name": "x", "dtype": "i32", "shape": [1, seq]},
                                               {"name": "y", "dtype": "i32", "shape": [1, seq]}],
                                    "layers": gpt_layers(dim, blocks, vocab),
                                    "loss": {"type": "cross_entropy", "target": "y"},
                                    "optimizer": {"type": "adam", "lr": 1e-4},
                                    "precision": os.environ.get("PRECISION", "f32")})
            for rep in range(2):
                err, r = c.call_past_notifications("train.run", {
                    "model": name, "data": {"x": "gx", "y": "gy"}, "batch_size": batch,
                    "steps": steps if rep else 2, "profile": True})
                if err:
                    ours[cfg] = {"error": "%s: %s" % (err.get("name"), err.get("message"))}
                    break
            else:
                ours[cfg] = {"wall_ms": 1e3 * r["seconds"] / r["steps"], "gpu_ms": r["gpu_ns"] / 1e6,
                             "dispatches": r["dispatches"], "peak_bytes": r.get("peak_bytes", 0)}
            c.call("model.delete", {"name": name})
            for t in c.call("tensor.list", {"prefix": name + "/"})["tensors"]:
                c.call("tensor.delete", {"name": t["name"]})
        if trace_log:  # with TENSORD_TRACE_DISPATCHES=1: bench/trace_summary.py reads it
            shutil.copyfile(d.log, trace_log)
        with open(d.log, errors="replace") as f:
            for line in f:
                if "tensor memory" in line:
                    memline = line.strip()
    return ours, memline


def table(configs, ours, theirs):
    """Markdown rows: per config tensord's step (wall, GPU, host), tokens/s
    and peak memory beside PyTorch's eager and CUDA-graph steps and peak."""
    out = ["| model (d, blocks, seq, batch, vocab) | tensord ms/step (GPU, host) | tensord tokens/s | "
           "tensord peak | PyTorch eager / graph ms/step | PyTorch peak | tokens/s vs graph | "
           "peak vs PyTorch |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for cfg in configs:
        dim, blocks, seq, batch, vocab = (int(v) for v in cfg.split(","))
        o, t = ours.get(cfg, {}), (theirs or {}).get(cfg)
        if "error" in o:
            cells = [o["error"], "-", "-"]
        elif o:
            cells = ["%.1f (%.1f, %.1f = %.0f %%)" % (o["wall_ms"], o["gpu_ms"], o["wall_ms"] - o["gpu_ms"],
                                                      100 * (o["wall_ms"] - o["gpu_ms"]) / o["wall_ms"]),
                     "%.0f" % (batch * seq / (o["wall_ms"] / 1e3)), "%.2f GiB" % (o["peak_bytes"] / 2**30)]
        else:
            cells = ["-", "-", "-"]
        if t:
            cells += ["%.1f / %.1f" % (t[0], t[1]), "%.2f GiB" % (t[2] / 2**30)]
            ok = o and "error" not in o
            cells += ["%.3fx" % (t[1] / o["wall_ms"]) if ok else "-",
                      "%.2fx" % (o["peak_bytes"] / t[2]) if ok and t[2] else "-"]
        else:
            cells += ["-", "-", "-", "-"]
        out.append("| %d, %d, %d, %d, %d | %s |" % (dim, blocks, seq, batch, vocab, " | ".join(cells)))
    return "\n".join(out) + "\n"


def main():
    configs = sys.argv[2:] or ["768,12,512,8,8192"]
    steps = int(os.environ.get("STEPS", "10"))
    ours, memline = tensord_rows(sys.argv[1], configs, steps, os.environ.get("TRACE_LOG"))
    for cfg in configs:
        dim, blocks, seq, batch, vocab = (int(v) for v in cfg.split(","))
        o = ours.get(cfg, {})
        if "error" in o or not o:
            print("gpt %s: %s" % (cfg, o.get("error", "not run")))
            continue
        wall, gpu = o["wall_ms"], o["gpu_ms"]
        print("gpt d%d x%d seq %d batch %d vocab %d: %.1f ms/step wall, %.1f ms GPU, %.1f ms host "
              "(%.0f %%), %.0f dispatches, peak %.0f MiB, %.0f tokens/s" % (
                  dim, blocks, seq, batch, vocab, wall, gpu, wall - gpu, 100 * (wall - gpu) / wall,
                  o["dispatches"], o["peak_bytes"] / 2**20, batch * seq / (wall / 1e3)), flush=True)
    print("tensord:", memline)
    theirs = torch_rows(configs, steps) if os.environ.get("TORCH", "1") != "0" else None
    sys.stdout.write(table(configs, ours, theirs))


if __name__ == "__main__":
    main()

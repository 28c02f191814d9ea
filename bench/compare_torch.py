#!/usr/bin/env python3
"""compare_torch: tensord against PyTorch on the same GPU, in one command.

Runs on the GPU host (python3 with torch; nothing else is needed):

1. starts a tensord (--tensord, `--device auto`) on a socket in a temporary
   directory, or uses a running one (--socket);
2. runs `bench_gpu --json --size full` against it (bench/bench_gpu.c: kernel
   time from Vulkan timestamps, end-to-end time through the socket), then stops
   the tensord it started, so that PyTorch gets the GPU's memory;
3. runs the same workloads, with the sizes bench_gpu reported, in PyTorch on the
   same GPU: kernel time from CUDA events, end-to-end time from the wall clock
   with a synchronize; TF32 off; f16/bf16 matmuls accumulate in f32 (PyTorch's
   default); the chain x*sigmoid(x)+b eager and unfused; the training workloads
   (MLPs, the digits CNN, the char transformer: the same layers as tensord's) as
   an eager loop with torch.optim.Adam, and again with the whole step captured as
   a CUDA graph (torch.cuda.graph, Adam(capturable=True));
4. prints one table: workload, tensord kernel, tensord end-to-end, PyTorch
   (kernel and end-to-end), the throughput ratio tensord / PyTorch from kernel
   time and from end-to-end time, the CUDA graph's figure and ratio, the goal and
   whether it is met: issue 16's ratio goals (RATIO_GOALS), and for the rows with
   no PyTorch reference (ping, op latency, pipelining, put/get) its absolute
   goals (GOALS); then the training rows' times per step.

A workload that fails on either side is listed with its error; it never stops
the rest. `--json` and `--markdown` print other formats (the markdown is for
docs/performance.md); `--out-json FILE` / `--out-markdown FILE` save them as
well, so one run gives every format. See bench/README.md.

  bench/compare_torch.py --tensord build-release/daemon/tensord \\
      --bench-gpu build-release/bench/bench_gpu --out-json perf.json --out-markdown perf.md
"""
import argparse
import json
import math
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# The absolute goals for the rows that have no PyTorch reference, keyed
# by the workload's params.kind: (comparison, threshold in the row's unit),
# checked against tensord's end-to-end figure.
GOALS = {
    "ping": ("<=", 50.0),           # us, p50
    "op_latency": ("<=", 50.0),     # us, p50
    "op_pipelined": (">=", 1e5),    # ops/s
    "put": (">=", 5.0),             # GB/s
    "get": (">=", 5.0),             # GB/s
}

# The goals for rows compared with PyTorch (ratio_goal() says which row
# takes which): (ratio column, minimum of tensord / PyTorch throughput).
RATIO_GOALS = {
    "matmul_f32": ("kernel", 0.85),        # square f32 GEMMs, TF32 off, against cuBLAS
    "matmul_f16": ("kernel", 0.5),
    "gemm_tn": ("kernel", 0.8),            # the weight gradients x^T g, h^T g
    "conv2d": ("kernel", 0.8),             # against cuDNN
    "train_mlp_small": ("graph", 1.0),     # MLP 784-512-512-10 at batch <= 256
    "train_mlp_large": ("graph", 0.8),     # the same at larger batches
    "train_cnn": ("graph", 0.7),
    "train_transformer": ("graph", 0.7),
}


def log(msg):
    sys.stderr.write("compare_torch: %s\n" % msg)
    sys.stderr.flush()


# ---- tensord ---------------------------------------------------------------

class Tensord:
    """A tensord on a socket in a fresh temporary directory."""

    def __init__(self, binary, device, timeout=60):
        self.dir = tempfile.mkdtemp(prefix="compare-torch-")
        self.sock = os.path.join(self.dir, "tensord.sock")
        self.log = os.path.join(self.dir, "tensord.log")
        with open(self.log, "wb") as f:
            self.proc = subprocess.Popen(
                [binary, "--socket", self.sock, "--device", device,
                 "--state-dir", os.path.join(self.dir, "state")],
                stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while True:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(self.sock)
                return
            except OSError:
                pass
            finally:
                s.close()
            if self.proc.poll() is not None or time.monotonic() > deadline:
                tail = self.log_tail()
                self.stop()
                raise RuntimeError("tensord did not start serving: %s" % tail)
            time.sleep(0.05)

    def log_tail(self, lines=5):
        try:
            with open(self.log, "r", errors="replace") as f:
                return " | ".join(f.read().strip().splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None


def bench_args(args):
    extra = ["--size", args.size]
    if args.only:
        extra += ["--only", args.only]
    if args.reps:
        extra += ["--reps", str(args.reps)]
    if args.warmup is not None:
        extra += ["--warmup", str(args.warmup)]
    if args.train_steps:
        extra += ["--train-steps", str(args.train_steps)]
    if args.train_warmup is not None:
        extra += ["--train-warmup", str(args.train_warmup)]
    return extra


def listed_workloads(args, why):
    """bench_gpu's workloads with every figure null, each marked with `why`."""
    out = subprocess.run([args.bench_gpu, "--list", "--json"] + bench_args(args),
                         stdout=subprocess.PIPE, check=True, timeout=60)
    report = json.loads(out.stdout.decode())
    for w in report["workloads"]:
        w["error"] = why
    return report


def run_bench_gpu(args):
    """bench_gpu's JSON report; on a fatal failure the listed workloads, each
    carrying the failure as its error."""
    daemon = None
    why = None
    try:
        sock = args.socket
        if not sock:
            log("starting %s --device %s" % (args.tensord, args.device))
            daemon = Tensord(args.tensord, args.device)
            sock = daemon.sock
        cmd = [args.bench_gpu, "--socket", sock, "--json", "--wait", "30"] + bench_args(args)
        log("running %s" % " ".join(cmd))
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, timeout=args.timeout)
        if proc.returncode in (0, 3):
            try:
                return json.loads(proc.stdout.decode())
            except ValueError as e:
                why = "bench_gpu printed no JSON: %s" % e
        else:
            why = "bench_gpu exited with status %d" % proc.returncode
        if daemon and daemon.proc.poll() is not None:
            why += "; tensord died: %s" % daemon.log_tail()
    except (OSError, RuntimeError, subprocess.SubprocessError) as e:
        why = str(e)
    finally:
        if daemon:
            daemon.stop()
    log(why)
    try:
        return listed_workloads(args, why)
    except (OSError, ValueError, KeyError, subprocess.SubprocessError) as e:
        raise SystemExit("compare_torch: %s; and bench_gpu --list failed too: %s" % (why, e))


# ---- PyTorch ---------------------------------------------------------------

# The training workloads: an eager loop and a CUDA-graph column each.
TRAIN_KINDS = ("train_mlp", "train_cnn", "train_transformer")


def char_transformer(torch, vocab, dim, heads, layers, hidden, seq, sdpa):
    """tensord's char transformer (examples/chars/train.py) in PyTorch, layer
    for layer as model.define expands it (docs/training.md, "A model as
    layers"): Embedding, `layers` pre-norm causal blocks (x + attn(ln1(x)),
    then + fc2(gelu(fc1(ln2(.))))); attention with separate q, k, v and out
    linears (with bias), heads of dim/heads, scores scaled by 1/sqrt(hd), a
    causal mask, softmax), a final LayerNorm and a linear head. `sdpa`: the
    attention core as F.scaled_dot_product_attention(is_causal=True) (PyTorch's
    fused kernels, the same FLOPs); else written out as tensord runs it."""
    nn, F = torch.nn, torch.nn.functional
    hd = dim // heads

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(dim)
            self.q, self.k, self.v = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
            self.out = nn.Linear(dim, dim)
            self.ln2 = nn.LayerNorm(dim)
            self.fc1, self.fc2 = nn.Linear(dim, hidden), nn.Linear(hidden, dim)
            self.register_buffer("mask", torch.ones(seq, seq, dtype=torch.bool).triu(1),
                                 persistent=False)

        def forward(self, x):
            b, t, _ = x.shape
            a = self.ln1(x)
            q = self.q(a).view(b, t, heads, hd).transpose(1, 2)
            k = self.k(a).view(b, t, heads, hd).transpose(1, 2)
            v = self.v(a).view(b, t, heads, hd).transpose(1, 2)
            if sdpa:
                ctx = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
                scores = scores.masked_fill(self.mask[:t, :t], float("-inf"))
                ctx = torch.matmul(torch.softmax(scores, dim=-1), v)
            x = x + self.out(ctx.transpose(1, 2).reshape(b, t, dim))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(vocab, dim)
            self.blocks = nn.Sequential(*[Block() for _ in range(layers)])
            self.ln = nn.LayerNorm(dim)
            self.head = nn.Linear(dim, vocab)

        def forward(self, x):
            return self.head(self.ln(self.blocks(self.emb(x))))

    return Net()


class TorchBench:
    """The PyTorch side: the same workloads, from bench_gpu's params."""

    def __init__(self, device, reps, warmup, attention="sdpa"):
        import torch
        import torch.nn.functional as F
        self.torch = torch
        self.F = F
        self.reps = max(1, reps)
        self.warmup = max(0, warmup)
        self.dev = torch.device(device)
        self.attention = attention
        self.cuda = self.dev.type == "cuda"
        if self.cuda and not torch.cuda.is_available():
            raise RuntimeError("PyTorch %s sees no CUDA device" % torch.__version__)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cudnn.benchmark = True  # cuDNN picks its fastest conv
        self.version = torch.__version__
        self.device = torch.cuda.get_device_name(self.dev) if self.cuda else "cpu"
        self.dtypes = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def release(self):
        if self.cuda:
            self.torch.cuda.synchronize()
            self.torch.cuda.empty_cache()

    def time(self, fn, reps=None, warmup=None, per=1):
        """Median (kernel_ns, wall_ns) of fn() over `reps` calls after `warmup`,
        each divided by `per`. Kernel: CUDA events around the call; wall: the
        clock around the call and a synchronize."""
        torch = self.torch
        reps = self.reps if reps is None else reps
        for _ in range(self.warmup if warmup is None else warmup):
            fn()
        self.sync()
        kern, wall = [], []
        for _ in range(reps):
            if self.cuda:
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                t0 = time.perf_counter()
                start.record()
                fn()
                end.record()
                end.synchronize()
                t1 = time.perf_counter()
                kern.append(start.elapsed_time(end) * 1e6 / per)  # ms -> ns
            else:
                t0 = time.perf_counter()
                fn()
                t1 = time.perf_counter()
                kern.append((t1 - t0) * 1e9 / per)
            wall.append((t1 - t0) * 1e9 / per)
        return statistics.median(kern), statistics.median(wall)

    def randn(self, *shape, dtype="f32"):
        x = self.torch.randn(*shape, device=self.dev, dtype=self.torch.float32)
        return x if dtype == "f32" else x.to(self.dtypes[dtype])

    # One method per params.kind; None when PyTorch has no counterpart.

    def matmul(self, p):
        torch = self.torch
        m, k, n, b = int(p["m"]), int(p["k"]), int(p["n"]), int(p.get("batch") or 0)
        lead = (b,) if b else ()
        # A transposed operand is stored transposed and read through a
        # transposed view: cuBLAS takes it with a transpose flag, no copy.
        if p.get("ta"):
            a = self.randn(*(lead + (k, m)), dtype=p["dtype"]).transpose(-1, -2)
        else:
            a = self.randn(*(lead + (m, k)), dtype=p["dtype"])
        if p.get("tb"):
            w = self.randn(*(lead + (n, k)), dtype=p["dtype"]).transpose(-1, -2)
        else:
            w = self.randn(*(lead + (k, n)), dtype=p["dtype"])
        c = torch.empty(lead + (m, n), device=self.dev, dtype=a.dtype)
        return self.time(lambda: torch.matmul(a, w, out=c))

    def binary(self, p):
        torch = self.torch
        n = int(p["n"])
        x, y = self.randn(n), self.randn(n)
        z = torch.empty_like(x)
        op = {"add": torch.add, "mul": torch.mul}[p["op"]]
        return self.time(lambda: op(x, y, out=z))

    def chain(self, p):
        torch = self.torch
        n = int(p["n"])
        x, b = self.randn(n), self.randn(n)
        return self.time(lambda: x * torch.sigmoid(x) + b)

    def reduce(self, p):
        torch = self.torch
        x = self.randn(int(p["n"]))
        op = {"sum": torch.sum, "mean": torch.mean}[p["op"]]
        return self.time(lambda: op(x))

    def rownorm(self, p):
        torch, F = self.torch, self.F
        rows, cols = int(p["rows"]), int(p["cols"])
        x = self.randn(rows, cols)
        if p["op"] == "softmax":
            return self.time(lambda: torch.softmax(x, dim=-1))
        return self.time(lambda: F.layer_norm(x, (cols,)))

    def conv2d(self, p):
        F = self.F
        x = self.randn(int(p["n"]), int(p["c"]), int(p["h"]), int(p["w"]))
        w = self.randn(int(p["o"]), int(p["c"]), int(p["k"]), int(p["k"]))
        pad = int(p["padding"])
        return self.time(lambda: F.conv2d(x, w, padding=pad))

    def training_setup(self, p):
        """(model, loss_fn, x, y) of a training workload (params.kind train_mlp,
        train_cnn or train_transformer): the model in train mode on the device,
        its loss of (output, labels), and the random data set whose rows are
        gathered per step, as bench_gpu's (same shapes, not the same values)."""
        torch, F, nn = self.torch, self.F, self.torch.nn
        kind, rows = p["kind"], int(p["rows"])
        torch.manual_seed(0)
        if kind == "train_mlp":
            dims = [int(d) for d in p["dims"]]
            layers = []
            for i in range(len(dims) - 1):
                layers.append(nn.Linear(dims[i], dims[i + 1]))
                if i + 2 < len(dims):
                    layers.append(nn.ReLU())
            model = nn.Sequential(*layers)
            x = torch.randn(rows, dims[0], device=self.dev)
            y = torch.randint(0, dims[-1], (rows,), device=self.dev)
            loss_fn = F.cross_entropy
        elif kind == "train_cnn":
            # examples/digits/train.py --model cnn
            hw, ch, classes = int(p["hw"]), int(p["channels"]), int(p["classes"])
            model = nn.Sequential(nn.Conv2d(1, ch, 3, padding=1), nn.BatchNorm2d(ch), nn.ReLU(),
                                  nn.MaxPool2d(2), nn.Flatten(),
                                  nn.Linear(ch * (hw // 2) * (hw // 2), classes))
            x = torch.randn(rows, 1, hw, hw, device=self.dev)
            y = torch.randint(0, classes, (rows,), device=self.dev)
            loss_fn = F.cross_entropy
        elif kind == "train_transformer":
            vocab, seq = int(p["vocab"]), int(p["seq"])
            model = char_transformer(torch, vocab, int(p["dim"]), int(p["heads"]), int(p["layers"]),
                                     int(p["hidden"]), seq, self.attention == "sdpa")
            x = torch.randint(0, vocab, (rows, seq), device=self.dev)
            y = torch.randint(0, vocab, (rows, seq), device=self.dev)

            def loss_fn(out, yb):  # over every position, as tensord's cross_entropy on [B, T, V]
                return F.cross_entropy(out.reshape(-1, vocab), yb.reshape(-1))
        else:
            raise ValueError("no PyTorch model for kind %r" % kind)
        model = model.to(self.dev)
        model.train()
        return model, loss_fn, x, y

    def autocast(self, p):
        """torch.autocast to bf16 around forward and loss where the workload
        asks for it (params.precision "bf16": tensord's precision setting),
        else a context that does nothing."""
        import contextlib
        if p.get("precision", "f32") == "bf16":
            return self.torch.autocast(device_type=self.dev.type, dtype=self.torch.bfloat16)
        return contextlib.nullcontext()

    @staticmethod
    def train_counts(p):
        batch, rows, steps = int(p["batch"]), int(p["rows"]), int(p["steps"])
        if rows // batch < 1 or steps < 1:
            raise ValueError("batch %d over %d rows, %d steps: nothing to run" % (batch, rows, steps))
        return batch, rows, steps

    def epochs(self, rows, batch, nsteps, step):
        """Calls step(idx) `nsteps` times, as train.run draws minibatches: each
        epoch a fresh shuffle of the rows, batches taken from it in order (the
        last partial one dropped)."""
        done = 0
        while done < nsteps:
            perm = self.torch.randperm(rows, device=self.dev)
            for j in range(rows // batch):
                if done == nsteps:
                    break
                step(perm[j * batch:(j + 1) * batch])
                done += 1

    def train(self, p):
        """A training workload as an eager loop: zero_grad, forward, loss,
        backward, Adam step; no synchronisation per step."""
        torch = self.torch
        model, loss_fn, x, y = self.training_setup(p)
        batch, rows, steps = self.train_counts(p)
        opt = torch.optim.Adam(model.parameters(), lr=float(p.get("lr", 1e-3)))

        def step(idx):
            opt.zero_grad(set_to_none=True)
            with self.autocast(p):
                loss = loss_fn(model(x[idx]), y[idx])
            loss.backward()
            opt.step()

        self.epochs(rows, batch, int(p.get("warmup_steps", 20)), step)
        return self.time(lambda: self.epochs(rows, batch, steps, step),
                         reps=int(p.get("runs", 3)), warmup=0, per=steps)

    def train_graph(self, p):
        """A training workload at PyTorch's best for small steps: forward,
        backward and Adam(capturable=True) captured once as a CUDA graph (as
        torch's docs capture a whole network), replayed per step with the
        step's minibatch indices copied into the graph's static index tensor."""
        torch = self.torch
        if not self.cuda:
            raise RuntimeError("CUDA graphs need a CUDA device")
        model, loss_fn, x, y = self.training_setup(p)
        batch, rows, steps = self.train_counts(p)
        opt = torch.optim.Adam(model.parameters(), lr=float(p.get("lr", 1e-3)), capturable=True)
        idx = torch.arange(batch, device=self.dev)

        def step():
            with self.autocast(p):
                loss = loss_fn(model(x[idx]), y[idx])
            loss.backward()
            opt.step()
            return loss

        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up on a side stream, as torch's docs do
            for _ in range(3):
                opt.zero_grad(set_to_none=True)
                step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        # grads set to None before the capture: backward allocates them from the
        # graph's pool and every replay writes them afresh (no zeroing kernels)
        opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(graph):
            step()

        def replay(rows_idx):
            idx.copy_(rows_idx)
            graph.replay()

        self.epochs(rows, batch, int(p.get("warmup_steps", 20)), replay)
        return self.time(lambda: self.epochs(rows, batch, steps, replay),
                         reps=int(p.get("runs", 3)), warmup=0, per=steps)

    def run_graph(self, w):
        """(kernel_ns, wall_ns, error) of a training workload as a CUDA graph, or
        Nones where there is no graphed counterpart."""
        params = w.get("params") or {}
        if params.get("kind") not in TRAIN_KINDS or not self.cuda:
            return None, None, None
        try:
            kern, wall = self.train_graph(params)
            return kern, wall, None
        except Exception as e:
            return None, None, "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")
        finally:
            try:
                self.release()
            except Exception:
                pass

    def run(self, w):
        """(kernel_ns, wall_ns, error) of workload `w` of the bench_gpu report."""
        params = w.get("params") or {}
        fn = {"matmul": self.matmul, "binary": self.binary, "chain": self.chain,
              "reduce": self.reduce, "rownorm": self.rownorm, "conv2d": self.conv2d}.get(params.get("kind"))
        if params.get("kind") in TRAIN_KINDS:
            fn = self.train
        if fn is None:
            return None, None, None
        try:
            with self.torch.no_grad() if params.get("kind") not in TRAIN_KINDS else _Null():
                kern, wall = fn(params)
            return kern, wall, None
        except Exception as e:  # one workload's failure is reported, not fatal
            return None, None, "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")
        finally:
            try:
                self.release()
            except Exception:
                pass


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# ---- the comparison --------------------------------------------------------

def num(v):
    """A finite float, or None."""
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
        return float(v)
    return None


def value_from_ns(w, ns):
    """The figure in the workload's unit for a time per call of `ns`."""
    ns = num(ns)
    if ns is None or ns <= 0:
        return None
    unit = w.get("unit")
    if unit == "TFLOP/s" and num(w.get("flops")):
        return w["flops"] / ns / 1e3
    if unit == "GB/s" and num(w.get("bytes")):
        return w["bytes"] / ns
    if unit in ("us", "us/step"):
        return ns / 1e3
    if unit == "samples/s":
        batch = num((w.get("params") or {}).get("batch"))
        return batch * 1e9 / ns if batch else None
    return None


def ratio(w, td, pt):
    """Throughput ratio tensord / PyTorch (above 1: tensord is faster)."""
    td, pt = num(td), num(pt)
    if td is None or pt is None or td <= 0 or pt <= 0:
        return None
    return pt / td if w.get("better") == "lower" else td / pt


def ratio_goal(w):
    """The issue's goal for a row compared with PyTorch: (ratio column, minimum
    ratio), or None. Kernel rows against cuBLAS/cuDNN's kernel time, training
    rows against the CUDA graph's end-to-end step."""
    p = w.get("params") or {}
    kind = p.get("kind")
    if kind == "matmul" and not p.get("batch"):
        if p.get("ta") and not p.get("tb"):
            return RATIO_GOALS["gemm_tn"]
        if not p.get("ta") and not p.get("tb") and p.get("m") == p.get("k") == p.get("n"):
            return RATIO_GOALS.get("matmul_" + str(p.get("dtype")))
        return None
    if kind == "train_mlp":
        if [int(d) for d in p.get("dims", [])] != [784, 512, 512, 10]:
            return None
        return RATIO_GOALS["train_mlp_small" if int(p.get("batch", 0)) <= 256 else "train_mlp_large"]
    return RATIO_GOALS.get(kind)


def goal_of(w, td_e2e, row=None):
    """(goal text, met) of a row: an absolute goal on tensord's e2e figure, or a
    ratio goal on the row's ratio (met None while that ratio is missing)."""
    kind = (w.get("params") or {}).get("kind")
    if kind not in GOALS:
        rg = ratio_goal(w)
        if rg is None:
            return None, None
        col, thr = rg
        v = num((row or {}).get("ratio_" + col))
        return "%s \u2265 %.2fx" % (col, thr), (None if v is None else v >= thr)
    cmp, thr = GOALS[kind]
    text = "%s %g %s" % ("\u2264" if cmp == "<=" else "\u2265", thr, w.get("unit", ""))
    v = num(td_e2e)
    if v is None:
        return text, False
    return text, (v <= thr if cmp == "<=" else v >= thr)


def build_rows(report, torch_bench):
    rows = []
    for w in report.get("workloads", []):
        row = {"name": w.get("name"), "unit": w.get("unit"), "better": w.get("better"),
               "desc": w.get("desc"), "kind": (w.get("params") or {}).get("kind"),
               "tensord_kernel": num(w.get("kernel")), "tensord_e2e": num(w.get("e2e")),
               "tensord_error": w.get("error"),
               "torch_kernel": None, "torch_e2e": None, "torch_kernel_ns": None,
               "torch_wall_ns": None, "torch_error": None,
               "torch_graph_e2e": None, "torch_graph_error": None,
               "torch_graph_kernel_ns": None, "torch_graph_wall_ns": None,
               "batch": (w.get("params") or {}).get("batch") if (w.get("params") or {}).get("kind")
               in TRAIN_KINDS else None,
               "tensord_daemon_ns": num(w.get("daemon_ns")), "tensord_wall_ns": num(w.get("wall_ns"))}
        if torch_bench is not None and row["kind"] not in GOALS:
            log("PyTorch: %s" % row["name"])
            kern, wall, err = torch_bench.run(w)
            row["torch_kernel_ns"], row["torch_wall_ns"], row["torch_error"] = kern, wall, err
            row["torch_kernel"] = value_from_ns(w, kern)
            row["torch_e2e"] = value_from_ns(w, wall)
            gk, gw, gerr = torch_bench.run_graph(w)
            if gk is not None or gerr:
                log("PyTorch (CUDA graph): %s" % row["name"])
            row["torch_graph_e2e"] = value_from_ns(w, gw)
            row["torch_graph_kernel_ns"], row["torch_graph_wall_ns"] = gk, gw
            row["torch_graph_error"] = gerr
        row["ratio_kernel"] = ratio(w, row["tensord_kernel"], row["torch_kernel"])
        row["ratio_e2e"] = ratio(w, row["tensord_e2e"], row["torch_e2e"])
        row["ratio_graph"] = ratio(w, row["tensord_e2e"], row["torch_graph_e2e"])
        row["goal"], row["met"] = goal_of(w, row["tensord_e2e"], row)
        rows.append(row)
    return rows


def fmt(v):
    v = num(v)
    if v is None:
        return "-"
    if abs(v) >= 1e5:
        return "%.0f" % v
    if abs(v) >= 100:
        return "%.1f" % v
    if abs(v) >= 1:
        return "%.2f" % v
    return "%.3g" % v


def fmt_ratio(v):
    if num(v) is None:
        return "-"
    return "%.2fx" % v if v >= 0.1 else "%.2gx" % v


def fmt_met(m):
    return "-" if m is None else ("yes" if m else "NO")


COLUMNS = ["workload", "unit", "tensord kernel", "tensord e2e", "PyTorch", "PyTorch e2e",
           "ratio kernel", "ratio e2e", "PyTorch graph", "ratio graph", "goal", "met?"]


def cells(r):
    return [r["name"], r["unit"] or "", fmt(r["tensord_kernel"]), fmt(r["tensord_e2e"]),
            fmt(r["torch_kernel"]), fmt(r["torch_e2e"]), fmt_ratio(r["ratio_kernel"]),
            fmt_ratio(r["ratio_e2e"]), fmt(r.get("torch_graph_e2e")), fmt_ratio(r.get("ratio_graph")),
            r["goal"] or "-", fmt_met(r["met"])]


def errors(rows):
    out = []
    for r in rows:
        if r["tensord_error"]:
            out.append("%s: tensord: %s" % (r["name"], r["tensord_error"]))
        if r["torch_error"]:
            out.append("%s: PyTorch: %s" % (r["name"], r["torch_error"]))
        if r.get("torch_graph_error"):
            out.append("%s: PyTorch CUDA graph: %s" % (r["name"], r["torch_graph_error"]))
    return out


STEP_COLUMNS = ["workload", "batch", "tensord kernel", "tensord e2e", "PyTorch eager",
                "PyTorch graph"]


def step_cells(r):
    def us(ns):
        return fmt(None if num(ns) is None else ns / 1e3)
    return [r["name"], str(r["batch"]), us(r.get("tensord_daemon_ns")), us(r.get("tensord_wall_ns")),
            us(r.get("torch_wall_ns")), us(r.get("torch_graph_wall_ns"))]


def training_rows(rows):
    return [r for r in rows if r.get("kind") in TRAIN_KINDS]


STEP_NOTE = ("Training steps, us per step: tensord kernel = train.run's own seconds / steps, "
             "e2e = the call's wall time / steps; PyTorch eager and CUDA graph: wall time of "
             "the loop (with a synchronize at its end) / steps.")


def header(report, torch_info):
    td = report.get("tensord") or {}
    line = "tensord %s on %s (Vulkan), size %s, %s reps after %s warm-up" % (
        td.get("version", "?"), td.get("device", "?"), report.get("size", "?"),
        report.get("reps", "?"), report.get("warmup", "?"))
    if torch_info:
        line += "; PyTorch %s on %s" % (torch_info["version"], torch_info["device"])
    return line


NOTES = [
    "kernel: tensord's gpu_ns (Vulkan timestamps around the request's one submission; "
    "training: train.run's own seconds / steps), PyTorch's CUDA events around the call.",
    "e2e: wall clock around the whole call (tensord: through the Unix socket; PyTorch: "
    "the call and a synchronize).",
    "ratio = throughput of tensord / throughput of PyTorch (above 1.00x tensord is faster), "
    "from kernel times and from end-to-end times.",
    "PyTorch: TF32 off, f16/bf16 matmuls accumulate in f32, cuDNN benchmark mode, "
    "x*sigmoid(x)+b eager (3 kernels), training workloads as an eager loop with "
    "torch.optim.Adam (tensord's train.run reads each step's loss back; the eager loop does "
    "not sync); the CNN and the transformer are the same layers as tensord's model.define "
    "(nn.Conv2d/BatchNorm2d/MaxPool2d/Linear; pre-norm causal blocks, attention through "
    "F.scaled_dot_product_attention unless --attention explicit).",
    "PyTorch graph: the training step (forward, backward, Adam with capturable=True) "
    "captured once as a CUDA graph and replayed per step, the step's indices copied into "
    "its static index tensor: PyTorch at its best for small steps; ratio graph = tensord "
    "e2e against it.",
    "Goals: the issue's absolute targets, checked on tensord's e2e figure; and its ratio "
    "targets (`kernel \u2265 0.85x`: ratio kernel, against cuBLAS/cuDNN; `graph \u2265 1.00x`: "
    "ratio graph, the training step against PyTorch's CUDA graph); GB = 1e9 bytes.",
    "Training rows: samples (rows) per second, one step = one minibatch; their times per step "
    "are listed after the table.",
]


def write_columns(f, table, left):
    """Write `table` (header row first) as aligned text columns, the first
    `left` left-aligned and the rest right-aligned, a rule under the header."""
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for n, row in enumerate(table):
        f.write("  ".join(c.ljust(widths[i]) if i < left else c.rjust(widths[i])
                          for i, c in enumerate(row)).rstrip() + "\n")
        if n == 0:
            f.write("  ".join("-" * w for w in widths) + "\n")


def print_table(report, rows, torch_info, f=sys.stdout):
    f.write(header(report, torch_info) + "\n\n")
    write_columns(f, [COLUMNS] + [cells(r) for r in rows], 2)
    train = training_rows(rows)
    if train:
        f.write("\n" + STEP_NOTE + "\n\n")
        write_columns(f, [STEP_COLUMNS] + [step_cells(r) for r in train], 1)
    f.write("\n" + "\n".join(NOTES) + "\n")
    errs = errors(rows)
    if errs:
        f.write("\nfailed:\n" + "".join("  %s\n" % e for e in errs))


def markdown(report, rows, torch_info):
    out = [header(report, torch_info) + ".", ""]
    out.append("| " + " | ".join(COLUMNS) + " |")
    out.append("|" + "|".join(["---"] * 2 + ["---:"] * 8 + ["---"] * 2) + "|")
    for r in rows:
        c = cells(r)
        c[0] = "`%s`" % c[0]
        out.append("| " + " | ".join(x.replace("|", "\\|") for x in c) + " |")
    train = training_rows(rows)
    if train:
        out += ["", STEP_NOTE, ""]
        out.append("| " + " | ".join(STEP_COLUMNS) + " |")
        out.append("|---|" + "|".join(["---:"] * (len(STEP_COLUMNS) - 1)) + "|")
        for r in train:
            c = step_cells(r)
            c[0] = "`%s`" % c[0]
            out.append("| " + " | ".join(c) + " |")
    out.append("")
    out.append("Workloads:")
    out.append("")
    for r in rows:
        out.append("- `%s`: %s" % (r["name"], r["desc"]))
    out.append("")
    out += ["- " + n for n in NOTES]
    errs = errors(rows)
    if errs:
        out += ["", "Failed:", ""] + ["- " + e.replace("|", "\\|") for e in errs]
    return "\n".join(out) + "\n"


def as_json(report, rows, torch_info, gpt=None):
    return json.dumps({"tensord": report.get("tensord"), "torch": torch_info,
                       "size": report.get("size"), "reps": report.get("reps"),
                       "warmup": report.get("warmup"), "goals": GOALS,
                       "ratio_goals": RATIO_GOALS, "rows": rows, "gpt": gpt,
                       "tensord_report": report}, indent=2, allow_nan=False) + "\n"


GPT_DEFAULT = ["768,12,512,8,8192", "1024,8,1024,8,8192"]


def gpt_section(args):
    """(markdown, JSON-able dict) of the --gpt models, both sides; ("", None)
    without --gpt. tensord runs first (its own daemon), then PyTorch."""
    if args.gpt is None:
        return "", None
    import gpt_profile
    configs = args.gpt or GPT_DEFAULT
    steps = args.train_steps or 20
    log("GPT-style models %s, %d steps each" % (" ".join(configs), steps))
    ours, memline = gpt_profile.tensord_rows(args.tensord, configs, steps)
    theirs = None if args.no_torch else gpt_profile.torch_rows(configs, steps)
    md = ("\nGPT-style models (bench/gpt_profile.py): model.define layers (embedding, pre-norm causal "
          "transformer_blocks of dim/64 heads, layer_norm, linear head), cross_entropy, Adam, train.run "
          "with profile (%d steps after 2); PyTorch the same layers (attention through "
          "F.scaled_dot_product_attention), f32, TF32 off, eager and as a CUDA graph, peak "
          "torch.cuda.max_memory_allocated of the eager loop; tensord's peak is profile's peak_bytes. "
          "%s\n\n" % (steps, memline) + gpt_profile.table(configs, ours, theirs))
    return md, {"tensord": ours, "torch": {k: {"eager_ms": v[0], "graph_ms": v[1], "peak_bytes": v[2]}
                                           for k, v in (theirs or {}).items()}}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tensord", default=os.path.join(ROOT, "build-release", "daemon", "tensord"),
                    help="tensord to start (default build-release/daemon/tensord)")
    ap.add_argument("--bench-gpu", default=os.path.join(ROOT, "build-release", "bench", "bench_gpu"),
                    help="bench_gpu to run (default build-release/bench/bench_gpu)")
    ap.add_argument("--socket", help="use the tensord on this socket instead of starting one")
    ap.add_argument("--device", default="auto", help="tensord --device (default auto)")
    ap.add_argument("--size", default="full", choices=["full", "smoke"])
    ap.add_argument("--only", help="bench_gpu --only: comma-separated names or groups")
    ap.add_argument("--reps", type=int, help="timed calls per workload (default: bench_gpu's)")
    ap.add_argument("--warmup", type=int, help="untimed calls first (default: bench_gpu's)")
    ap.add_argument("--train-steps", type=int,
                    help="steps of each timed training run (bench_gpu --train-steps; default 256)")
    ap.add_argument("--train-warmup", type=int,
                    help="untimed training steps first (bench_gpu --train-warmup; default 20)")
    ap.add_argument("--timeout", type=int, default=3600, help="seconds bench_gpu may take")
    ap.add_argument("--tensord-json", metavar="FILE",
                    help="take tensord's figures from this bench_gpu --json output")
    ap.add_argument("--no-torch", action="store_true", help="skip the PyTorch half")
    ap.add_argument("--torch-device", default="cuda", help="PyTorch device (default cuda)")
    ap.add_argument("--attention", default="sdpa", choices=["sdpa", "explicit"],
                    help="the PyTorch transformer's attention core: F.scaled_dot_product_attention "
                    "(default) or written out (matmul, mask, softmax, matmul) as tensord runs it")
    ap.add_argument("--gpt", nargs="*", metavar="D,BLOCKS,SEQ,BATCH,VOCAB",
                    help="also train GPT-style models (bench/gpt_profile.py: model.define layers, "
                    "train.run, profile) beside PyTorch's, tokens/s and peak memory; with no "
                    "value GPT-small (768,12,512,8,8192) and d1024 (1024,8,1024,8,8192)")
    fmt_group = ap.add_mutually_exclusive_group()
    fmt_group.add_argument("--json", action="store_true", help="print JSON")
    fmt_group.add_argument("--markdown", action="store_true", help="print a markdown table")
    ap.add_argument("--out-json", metavar="FILE", help="also write the JSON to FILE")
    ap.add_argument("--out-markdown", metavar="FILE", help="also write the markdown to FILE")
    args = ap.parse_args(argv)

    if args.tensord_json:
        with open(args.tensord_json, encoding="utf-8") as f:
            report = json.load(f)
    else:
        report = run_bench_gpu(args)

    torch_bench, torch_info = None, None
    if not args.no_torch:
        try:
            torch_bench = TorchBench(args.torch_device,
                                     args.reps or int(report.get("reps") or 10),
                                     args.warmup if args.warmup is not None
                                     else int(report.get("warmup") or 2), args.attention)
            torch_info = {"version": torch_bench.version, "device": torch_bench.device}
        except Exception as e:
            log("no PyTorch reference: %s: %s" % (type(e).__name__, e))
            torch_info = {"version": "?", "device": "?", "error": "%s: %s" % (type(e).__name__, e)}
    rows = build_rows(report, torch_bench)
    if torch_info and torch_info.get("error"):
        for r in rows:
            if r["kind"] not in GOALS:
                r["torch_error"] = torch_info["error"]

    gpt_md, gpt = gpt_section(args)
    if args.out_json:
        with open(args.out_json, "w", encoding="utf-8") as f:
            f.write(as_json(report, rows, torch_info, gpt))
    if args.out_markdown:
        with open(args.out_markdown, "w", encoding="utf-8") as f:
            f.write(markdown(report, rows, torch_info) + gpt_md)
    if args.json:
        sys.stdout.write(as_json(report, rows, torch_info, gpt))
    elif args.markdown:
        sys.stdout.write(markdown(report, rows, torch_info) + gpt_md)
    else:
        print_table(report, rows, torch_info)
        sys.stdout.write(gpt_md)
    # Failed workloads are in the output; the status says whether there were any.
    return 3 if errors(rows) else 0


if __name__ == "__main__":
    sys.exit(main())

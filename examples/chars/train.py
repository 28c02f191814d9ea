#!/usr/bin/python3
"""A character-level transformer trained inside tensord on a public-domain-licensed text
that every Debian system has (/usr/share/common-licenses/GPL-3 by default), which then
writes new text by sampling, one character at a time, on the GPU.

The model is written with tensord.nn and defined once (`Client.define_model`, the layer
form of model.define: parameters created and initialised in the daemon):

    nn.Sequential(OrderedDict(
        emb=nn.Embedding(V, D),                                   # [B, T] i32 -> [B, T, D]
        blocks=nn.Sequential(*[nn.TransformerBlock(D, H, causal=True) for _ in range(L)]),
        ln=nn.LayerNorm(D),
        head=nn.Linear(D, V)))                                    # logits [B, T, V]

with `nn.CrossEntropyLoss(target="y")` over every position (the daemon flattens [B, T, V]
logits and [B, T] targets for `cross_entropy`). There is no positional embedding: a causal transformer learns
positions from its mask (NoPE, Kazemnejad et al. 2023), which is enough here.

1. the text becomes i32 character ids (V = the distinct characters); the training data
   are all windows of --context characters (x) and the same windows shifted by one (y),
   stored once as [M, T] tensors;
2. `Model.train` (one train.run) trains --steps steps of AdamW on shuffled windows;
3. `Model.evaluate` gives the loss over the text (the windows that tile it once) before
   and after training, compared with log V (a fresh model's guess) and the text's unigram
   entropy (what a model that ignores the context could reach, computed in NumPy);
4. generation: a prompt from the text, then for each new character one `model.predict`
   (the logits stored with `out`) and one `graph.run` that takes the last position's
   logits, divides by --temperature, `softmax`, draws with `multinomial` and shifts the
   new character into the stored context (`slice`, `concat`, `out`). Every request reads
   only what the previous ones stored, so all of them are pipelined; the client reads
   the drawn characters at the end.

The defaults (one block, dim 32, context 32, 300 steps of 16 windows) take about two
minutes on lavapipe (2 busy CPU cores: 0.2-0.4 s a step) and reach a loss of about 2.3
nats (the text's unigram entropy is 3.17); on a GPU give it more (second line).

Usage (Debian's /usr/bin/python3):
  examples/chars/train.py --spawn build/daemon/tensord
  examples/chars/train.py --spawn build/daemon/tensord --steps 3000 --dim 128 --layers 2 --context 64   (a GPU)
  examples/chars/train.py --socket /run/tensord/tensord.sock   (or $TENSORD_SOCKET)

The last line printed is a JSON summary:
  {"model": "chars", "vocab": 80, "eval_loss": 1.9, "unigram_entropy": 3.0, "generated": "...", ...}"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import OrderedDict

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
try:
    import tensord
except ImportError:  # not installed: the package of this checkout
    sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
    import tensord
from tensord import nn  # noqa: E402

DEFAULT_TEXT = "/usr/share/common-licenses/GPL-3"


def spawn(binary):
    """Start a private tensord on a temporary socket (and state directory);
    returns (proc, client, dir)."""
    tmp = tempfile.mkdtemp(prefix="chars-tensord-")
    path = os.path.join(tmp, "tensord.sock")
    log = open(os.path.join(tmp, "tensord.log"), "wb")
    proc = subprocess.Popen([binary, "--socket", path, "--state-dir", os.path.join(tmp, "state")],
                            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    log.close()
    deadline = time.monotonic() + 60
    while True:
        try:
            return proc, tensord.Client(path), tmp
        except tensord.ConnectionFailed:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            with open(os.path.join(tmp, "tensord.log"), errors="replace") as f:
                sys.stderr.write(f.read())
            shutil.rmtree(tmp, ignore_errors=True)
            raise SystemExit("tensord did not start")
        time.sleep(0.02)


def stop(proc, tmp):
    """Stop a spawned tensord (SIGTERM); a non-zero exit (a sanitizer's
    report, a crash) is printed with its log and ends this script with 1."""
    if proc is not None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.returncode != 0:
            with open(os.path.join(tmp, "tensord.log"), errors="replace") as f:
                sys.stderr.write(f.read()[-20000:])
            shutil.rmtree(tmp, ignore_errors=True)
            sys.stderr.write("tensord exited with %d\n" % proc.returncode)
            sys.exit(1)
    if tmp is not None:
        shutil.rmtree(tmp, ignore_errors=True)


def unigram_entropy(ids, vocab):
    """The entropy (nats) of the characters' frequencies: the loss of the best
    model that ignores the context."""
    p = np.bincount(ids, minlength=vocab).astype(np.float64) / len(ids)
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


def build(vocab, dim, heads, layers):
    return nn.Sequential(OrderedDict([
        ("emb", nn.Embedding(vocab, dim)),
        ("blocks", nn.Sequential(*[nn.TransformerBlock(dim, heads, causal=True) for _ in range(layers)])),
        ("ln", nn.LayerNorm(dim)),
        ("head", nn.Linear(dim, vocab))]))


def sample_nodes(p, rows, context, vocab, temperature, seed):
    """One generation step on the stored logits [S, T, V] and context [S, T]:
    draw a character per row from softmax(last logits / temperature) and store
    the context shifted by it. Returns the nodes (output "tok": i32 [S, 1])."""
    return [{"id": "last", "op": "slice", "inputs": [p + "logits"],
             "attrs": {"starts": [-1], "ends": [context], "axes": [1]}},
            {"id": "scaled", "op": "mul", "inputs": ["last"], "attrs": {"scalar": 1.0 / temperature}},
            {"id": "probs", "op": "softmax", "inputs": ["scaled"]},
            {"id": "rows", "op": "reshape", "inputs": ["probs"], "attrs": {"shape": [rows, vocab]}},
            {"id": "tok", "op": "multinomial", "inputs": ["rows"], "attrs": {"num_samples": 1, "seed": seed}},
            {"id": "rest", "op": "slice", "inputs": [p + "ctx"], "attrs": {"starts": [1], "ends": [context],
                                                                            "axes": [1]}},
            {"id": "next", "op": "concat", "inputs": ["rest", "tok"], "attrs": {"axis": 1}, "out": p + "ctx"}]


def generate(c, model, p, prompts, n, context, vocab, temperature, seed):
    """Sample `n` characters after each prompt (an [S, T] i32 array); returns
    an [S, n] array of ids. All 2n requests are pipelined."""
    c.put(p + "ctx", prompts.astype(np.int32))
    with c.pipeline() as pl:
        toks = []
        for i in range(n):
            pl.model_predict(model.name, {"x": p + "ctx"}, out={"head": p + "logits"})
            nodes = sample_nodes(p, len(prompts), context, vocab, temperature, seed * 1000003 + i)
            toks.append(pl.graph_run(nodes, outputs=["tok"]))
    out = np.concatenate([t.result()["outputs"]["tok"] for t in toks], axis=1)
    c.delete(p + "ctx")
    c.delete(p + "logits")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--socket", default=os.environ.get("TENSORD_SOCKET"),
                    help="tensord's socket (default $TENSORD_SOCKET)")
    ap.add_argument("--spawn", metavar="BIN", help="start this tensord binary on a temporary socket "
                    "with a temporary --state-dir, and stop it at the end")
    ap.add_argument("--text", default=DEFAULT_TEXT, help="the text to learn (default %(default)s)")
    ap.add_argument("--chars", type=int, default=0, help="use only the first N characters (0: all)")
    ap.add_argument("--context", type=int, default=32, help="characters per window (T)")
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--layers", type=int, default=1, help="transformer blocks")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--precision", choices=("f32", "bf16"), default="f32",
                    help="bf16: mixed precision (products on bf16 operands, f32 master weights)")
    ap.add_argument("--generate", type=int, default=300, help="characters to sample after the prompt")
    ap.add_argument("--samples", type=int, default=1, help="texts sampled at once")
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--name", default="chars", help="the model's name (its tensors live under NAME/)")
    ap.add_argument("--save", metavar="FILE.safetensors", help="save the trained model (Model.save)")
    args = ap.parse_args()
    if not args.spawn and not args.socket:
        ap.error("give --socket, $TENSORD_SOCKET or --spawn")
    if args.temperature <= 0:
        ap.error("--temperature must be > 0")
    with open(args.text, encoding="utf-8", errors="replace") as f:
        text = f.read()
    if args.chars:
        text = text[:args.chars]
    vocab = sorted(set(text))
    index = {ch: i for i, ch in enumerate(vocab)}
    ids = np.array([index[ch] for ch in text], np.int32)
    T, V = args.context, len(vocab)
    if len(ids) < 2 * T + 2:
        raise SystemExit("the text is too short for --context %d" % T)
    starts = np.arange(0, len(ids) - T - 1)
    x = ids[starts[:, None] + np.arange(T)]
    y = ids[starts[:, None] + np.arange(1, T + 1)]
    h_uni = unigram_entropy(ids, V)
    print("%s: %d characters, vocabulary %d, %d windows of %d; unigram entropy %.4f nats" % (
        args.text, len(text), V, len(x), T, h_uni), flush=True)

    t_start = time.monotonic()
    proc = tmp = None
    p = args.name + "/"
    try:
        if args.spawn:
            proc, c, tmp = spawn(args.spawn)
        else:
            c = tensord.Client(args.socket)
        with c:
            try:
                c.model(args.name).delete(tensors=True)
            except tensord.NotFound:
                pass
            c.put(p + "data/x", x)
            c.put(p + "data/y", y)
            net = build(V, args.dim, args.heads, args.layers)
            model = c.define_model(args.name, layers=net, loss=nn.CrossEntropyLoss(target="y"),
                                   inputs={"x": ("i32", [1, T]), "y": ("i32", [1, T])}, outputs=["head"],
                                   optimizer={"type": "adamw", "lr": args.lr, "weight_decay": 0.01,
                                              "clip_norm": 1.0},
                                   seed=args.seed, replace=True, precision=args.precision)
            precision = model.stat()["precision"]
            print("model %s: %d parameters in %d tensors" % (args.name, net.param_count(),
                                                            len(net.named_parameters())), flush=True)
            data = {"x": p + "data/x", "y": p + "data/y"}
            # the evaluation set: the windows that tile the text once (every T-th)
            c.put(p + "data/xe", x[::T])
            c.put(p + "data/ye", y[::T])
            evdata = {"x": p + "data/xe", "y": p + "data/ye"}
            ev0 = model.evaluate(evdata, batch_size=args.batch)
            print("loss before training %.4f (log V = %.4f)" % (ev0["loss"], np.log(V)), flush=True)
            t_train = time.monotonic()

            def progress(m):
                print("step %d/%d loss %.4f" % (m["run_step"], m["steps"], m["loss"]), flush=True)
            res = model.train(data, batch_size=args.batch, steps=args.steps, seed=args.seed,
                              progress_every=max(1, args.steps // 10), on_progress=progress)
            train_s = time.monotonic() - t_train
            ev = model.evaluate(evdata, batch_size=args.batch)
            print("loss over the text %.4f (unigram entropy %.4f)" % (ev["loss"], h_uni), flush=True)
            rng = np.random.default_rng(args.seed)
            at = rng.integers(0, len(x), args.samples)
            prompts = x[at]
            t_gen = time.monotonic()
            out = generate(c, model, p, prompts, args.generate, T, V, args.temperature, args.seed)
            gen_s = time.monotonic() - t_gen
            if out.min() < 0 or out.max() >= V:
                raise SystemExit("multinomial drew ids outside the vocabulary: %r" % out)
            texts = ["".join(vocab[i] for i in row) for row in out]
            for s, t in enumerate(texts):
                print("--- sample %d (temperature %g), after %r:" % (s + 1, args.temperature,
                                                                   "".join(vocab[i] for i in prompts[s][-24:])))
                print(t)
            print("---", flush=True)
            if args.save:
                model.save(args.save)
                print("saved model %s to %s" % (args.name, args.save), flush=True)
            model.delete(tensors=True)
            for t in c.list(p):
                c.delete(t["name"])
    finally:
        stop(proc, tmp)
    summary = {"model": "chars", "vocab": V, "params": net.param_count(), "context": T, "dim": args.dim,
               "layers": args.layers, "precision": precision, "steps": res["steps"],
               "final_loss": round(res["loss"], 4),
               "initial_loss": round(ev0["loss"], 4), "eval_loss": round(ev["loss"], 4), "unigram_entropy": round(h_uni, 4),
               "step_ms": round(1000 * train_s / max(1, res["steps"]), 2),
               "gen_ms_per_char": round(1000 * gen_s / max(1, args.generate), 2),
               "seconds": round(time.monotonic() - t_start, 2), "vocabulary": "".join(vocab),
               "generated": texts[0] if len(texts) == 1 else texts}
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())

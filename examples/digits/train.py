#!/usr/bin/python3
"""Train a 64-128-10 MLP (or, with --model cnn, a small CNN) on the handwritten digits (8x8 images, 1797
samples; examples/digits/fetch.sh gets them) entirely inside tensord, through the
`tensord` Python package (python/tensord; used from this checkout when it is not installed):

- the training and test sets are put once; so is one tensor holding every
  minibatch's sample indices for the whole run (a fresh shuffle per epoch);
- --mode step (the default): each optimizer step is one `train.step` request whose graph
  slices its row of indices, `gather`s the minibatch out of the stored training set,
  runs the model and the cross-entropy loss, and updates the weights with Adam:
  nothing but the loss comes back, and the requests of an epoch are pipelined
  (`Client.pipeline()`: sent before their answers are read); the test accuracy
  comes from one `graph.run` (forward pass + argmax);
- --mode run: one `train.run` request (`Client.train_run`) for the whole training; the
  daemon shuffles and loops itself and reports the test loss and accuracy after every
  epoch (`train.eval` notifications) besides each step's loss (`train.progress`);
- --plot FILE.png draws those two streams (the loss and accuracy curves) with matplotlib
  (Debian's python3-matplotlib, imported only then); it implies --mode run.

Usage (Debian's /usr/bin/python3, which has python3-numpy and python3-msgpack):
  examples/digits/fetch.sh
  examples/digits/train.py --spawn build/daemon/tensord
  examples/digits/train.py --spawn build/daemon/tensord --plot digits.png
  examples/digits/train.py --socket /run/tensord/tensord.sock   (or $TENSORD_SOCKET)

The last line printed is a JSON summary, e.g.
  {"model": "mlp", "test_accuracy": 0.975, "seconds": 2.1, "step_ms": 6.3, ...}"""
import argparse
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
try:
    import tensord
except ImportError:  # not installed: the package of this checkout
    sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
    import tensord


def spawn(binary):
    """Start a private tensord on a temporary socket (and state directory);
    returns (proc, client, dir)."""
    tmp = tempfile.mkdtemp(prefix="digits-tensord-")
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

def load(path):
    with gzip.open(path, "rt") as f:
        data = np.loadtxt(f, delimiter=",")
    x = data[:, :64].astype(np.float32) / 16.0     # pixels 0..16 -> [0, 1]
    y = data[:, 64].astype(np.int32)
    return x, y


def linear_init(rng, fan_in, fan_out):
    """torch.nn.Linear's default: kaiming_uniform_(a=sqrt(5)) for the weight,
    i.e. U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and the same bound for the bias.
    The weight is stored [in, out] so that the layer is x @ W + b."""
    bound = 1.0 / np.sqrt(fan_in)
    w = rng.uniform(-bound, bound, size=(fan_out, fan_in)).T.astype(np.float32)
    b = rng.uniform(-bound, bound, size=(fan_out,)).astype(np.float32)
    return w, b


def forward_nodes(p, x):
    """The MLP on input `x` (a node id or tensor name); the logits are 'logits'."""
    return [{"id": "h0", "op": "matmul", "inputs": [x, p + "w1"]},
            {"id": "h1", "op": "add", "inputs": ["h0", p + "b1"]},
            {"id": "h", "op": "relu", "inputs": ["h1"]},
            {"id": "o0", "op": "matmul", "inputs": ["h", p + "w2"]},
            {"id": "logits", "op": "add", "inputs": ["o0", p + "b2"]}]


def cnn_forward_nodes(p, x):
    """conv2d(1->16, 3x3, pad 1) + relu + max_pool2d 2 + linear(256->10); logits 'logits'.
    Images arrive as rows of 64 pixels and are reshaped to [B, 1, 8, 8]."""
    return [{"id": "img", "op": "reshape", "inputs": [x], "attrs": {"shape": [-1, 1, 8, 8]}},
            {"id": "c0", "op": "conv2d", "inputs": ["img", p + "cw", p + "cb"], "attrs": {"padding": 1}},
            {"id": "c1", "op": "relu", "inputs": ["c0"]},
            {"id": "c2", "op": "max_pool2d", "inputs": ["c1"], "attrs": {"kernel_size": 2}},
            {"id": "flat", "op": "reshape", "inputs": ["c2"], "attrs": {"shape": [-1, 256]}},
            {"id": "o0", "op": "matmul", "inputs": ["flat", p + "w2"]},
            {"id": "logits", "op": "add", "inputs": ["o0", p + "b2"]}]



def import_pyplot():
    """matplotlib's pyplot on the Agg backend (no display needed)."""
    try:
        import matplotlib
    except ImportError:
        raise SystemExit("--plot needs matplotlib: apt-get install python3-matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def device_name(c):
    """The name of the device the run uses (device 0), shortened: 'llvmpipe (cpu)'."""
    for d in c.info().get("devices", []):
        if d.get("id") == 0:
            return "%s (%s)" % (d.get("name", "?").split(" (")[0], d.get("type", "?"))
    return "?"


def plot(plt, path, args, run):
    """The loss and accuracy curves of a train.run from its train.progress and
    train.eval notifications, as a PNG."""
    prog, evals = run["progress"], run["evals"]
    per_epoch = run["steps"] / args.epochs
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.6), dpi=100)
    ax1.plot([m["run_step"] / per_epoch for m in prog], [m["loss"] for m in prog],
             lw=0.8, color="tab:blue", alpha=0.7, label="training minibatch loss")
    ex = [e["run_step"] / per_epoch for e in evals]
    ax1.plot(ex, [e["loss"] for e in evals], "o-", ms=4, color="tab:orange",
             label="test-set loss (after each epoch)")
    ax1.set_yscale("log")
    ax1.set_title("Loss")
    ax1.set_xlabel("epoch")
    ax1.set_ylabel("cross-entropy loss (log scale)")
    ax1.grid(alpha=0.3, which="both")
    ax1.legend(fontsize="small")
    acc = [100.0 * e["metrics"]["accuracy"] for e in evals]
    ax2.plot(ex, acc, "o-", ms=4, color="tab:green")
    ax2.annotate("%.1f %%" % acc[-1], (ex[-1], acc[-1]), textcoords="offset points",
                 xytext=(4, -16), ha="right")
    ax2.set_ylim(min(acc) - 3, 100.5)
    ax2.set_title("Test accuracy (%d held-out images)" % run["n_test"])
    ax2.set_xlabel("epoch")
    ax2.set_ylabel("accuracy (%)")
    ax2.grid(alpha=0.3)
    for ax in (ax1, ax2):
        ax.set_xlim(0, args.epochs + 0.3)
    fig.suptitle("digits %s trained in tensord by one train.run: Adam lr %g, batch %d, on %s"
                 % (args.model.upper(), args.lr, args.batch, run["device"]))
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def clear(c, prefix):
    """Delete the tensors under `prefix`: old weights and optimizer state would be reused."""
    with c.pipeline() as pl:
        for t in c.list(prefix):
            pl.delete(t["name"])


def train(c, args, xtr, ytr, xte, yte, rng):
    """Stores the data and fresh weights under args.prefix and trains; returns
    {"acc", "train_s", "steps", "loss"} (and the notification streams with
    --mode run), or None after --write-json."""
    p = args.prefix
    nb = len(xtr) // args.batch              # full minibatches per epoch (the rest waits for the next shuffle)
    clear(c, p)
    c.put(p + "xtr", xtr)
    c.put(p + "ytr", ytr)
    c.put(p + "xte", xte)
    forward = forward_nodes
    if args.model == "cnn":
        bound = 1.0 / 3.0  # kaiming_uniform(a=sqrt(5)) of a 1x3x3 kernel
        cw = rng.uniform(-bound, bound, size=(16, 1, 3, 3)).astype(np.float32)
        cb = rng.uniform(-bound, bound, size=(16,)).astype(np.float32)
        w2, b2 = linear_init(rng, 256, 10)
        tensors = (("cw", cw), ("cb", cb), ("w2", w2), ("b2", b2))
        forward = cnn_forward_nodes
    else:
        w1, b1 = linear_init(rng, 64, args.hidden)
        w2, b2 = linear_init(rng, args.hidden, 10)
        tensors = (("w1", w1), ("b1", b1), ("w2", w2), ("b2", b2))
    for name, a in tensors:
        c.put(p + name, a)
    # every minibatch of every epoch: row e*nb + k holds the indices of batch k of epoch e
    batches = np.concatenate([rng.permutation(len(xtr))[:nb * args.batch].reshape(nb, args.batch)
                              for _ in range(args.epochs)]).astype(np.int32)
    c.put(p + "batches", batches)
    params = [p + n for n, _ in tensors]
    optimizer = {"type": "adam", "lr": args.lr}

    if args.mode == "run" or args.write_json:
        # train.run: the daemon shuffles, gathers minibatches and loops itself; the test
        # accuracy is a metric node evaluated after every epoch.
        c.put(p + "yte", yte)
        nodes = forward(p, "xb") + [
            {"id": "loss", "op": "cross_entropy", "inputs": ["logits", "yb"]},
            {"id": "pred", "op": "argmax", "inputs": ["logits"], "attrs": {"axis": 1}},
            {"id": "hit", "op": "eq", "inputs": ["pred", "yb"]},
            {"id": "hitf", "op": "cast", "inputs": ["hit"], "attrs": {"dtype": "f32"}},
            {"id": "accuracy", "op": "mean", "inputs": ["hitf"]}]
        run = {"nodes": nodes, "loss": "loss", "params": params, "optimizer": optimizer,
               "data": {"xb": p + "xtr", "yb": p + "ytr"}, "batch_size": args.batch,
               "epochs": args.epochs, "seed": args.seed,
               "eval": {"data": {"xb": p + "xte", "yb": p + "yte"}, "metrics": ["accuracy"]}}
        if args.write_json:
            with open(args.write_json, "w") as f:
                json.dump(run, f, indent=1)
            print("wrote %s: run `tensorctl train %s`" % (args.write_json, args.write_json))
            return None
        t_train = time.monotonic()
        progress, evals = [], []

        def on_eval(e):
            evals.append(e)
            print("epoch %d: eval loss %.4f, accuracy %.4f, %.1f s" % (
                e["epoch"], e["loss"], e["metrics"]["accuracy"], time.monotonic() - t_train), flush=True)

        res = c.train_run(**run, on_progress=progress.append, on_eval=on_eval)
        out = {"acc": res["eval"]["metrics"]["accuracy"], "train_s": time.monotonic() - t_train,
               "steps": res["steps"], "loss": res["loss"], "progress": progress, "evals": evals}
    else:
        t_train = time.monotonic()
        step = 0
        for epoch in range(args.epochs):
            with c.pipeline() as pl:             # an epoch's steps sent back to back
                pending = []
                for k in range(nb):
                    row = epoch * nb + k
                    step += 1
                    nodes = [{"id": "rowk", "op": "slice", "inputs": [p + "batches"],
                              "attrs": {"starts": [row], "ends": [row + 1]}},
                             {"id": "idx", "op": "reshape", "inputs": ["rowk"],
                              "attrs": {"shape": [args.batch]}},
                             {"id": "xb", "op": "gather", "inputs": [p + "xtr", "idx"]},
                             {"id": "yb", "op": "gather", "inputs": [p + "ytr", "idx"]}]
                    nodes += forward(p, "xb")
                    nodes.append({"id": "loss", "op": "cross_entropy", "inputs": ["logits", "yb"]})
                    pending.append(pl.train_step(nodes, "loss", params, optimizer=optimizer, step=step))
            losses = [r.result()["loss"] for r in pending]
            print("epoch %d: mean loss %.4f (last %.4f), %d steps, %.1f s" % (
                epoch + 1, float(np.mean(losses)), losses[-1], step, time.monotonic() - t_train), flush=True)
        train_s = time.monotonic() - t_train
        res = c.graph_run(forward(p, p + "xte") + [
            {"id": "pred", "op": "argmax", "inputs": ["logits"], "attrs": {"axis": 1}}],
            outputs=["pred"])
        pred = res["outputs"]["pred"]
        out = {"acc": float((pred == yte).mean()), "train_s": train_s, "steps": step, "loss": losses[-1]}
    clear(c, p)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--socket", default=os.environ.get("TENSORD_SOCKET"),
                    help="tensord's socket (default $TENSORD_SOCKET)")
    ap.add_argument("--spawn", metavar="BIN", help="start this tensord binary on a temporary socket "
                    "with a temporary --state-dir, and stop it at the end")
    ap.add_argument("--data", default=os.path.join(os.environ.get("DIGITS_CACHE") or os.path.join(HERE, ".data"),
                                                   "digits.csv.gz"),
                    help="the data set (default: digits.csv.gz in $DIGITS_CACHE, else in "
                         "examples/digits/.data, where fetch.sh puts it)")
    ap.add_argument("--epochs", type=int, help="default: 8 for the MLP, 10 for the CNN")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--prefix", default="digits/", help="name prefix of the tensors this run owns")
    ap.add_argument("--model", choices=("mlp", "cnn"), default="mlp")
    ap.add_argument("--mode", choices=("step", "run"),
                    help="step (default): one pipelined train.step request per minibatch; "
                         "run (default with --plot): one train.run request for the whole training")
    ap.add_argument("--plot", metavar="FILE.png",
                    help="write the loss and accuracy curves of the train.run to FILE.png "
                         "(needs python3-matplotlib)")
    ap.add_argument("--write-json", metavar="FILE",
                    help="with --socket: store the data and fresh weights, write the train.run "
                         "params to FILE for `tensorctl train FILE`, and exit")
    args = ap.parse_args()
    if args.epochs is None:
        args.epochs = 10 if args.model == "cnn" else 8
    if args.mode is None:
        args.mode = "run" if args.plot else "step"
    if args.plot and args.mode != "run":
        ap.error("--plot draws the train.progress/train.eval stream of a train.run: use --mode run")
    if args.plot and args.write_json:
        ap.error("--plot and --write-json exclude each other")
    if not args.spawn and not args.socket:
        ap.error("give --socket, $TENSORD_SOCKET or --spawn")
    if not os.path.exists(args.data):
        raise SystemExit("%s is missing: run %s first" % (args.data, os.path.join(HERE, "fetch.sh")))
    plt = import_pyplot() if args.plot else None

    t_start = time.monotonic()
    x, y = load(args.data)
    rng = np.random.default_rng(args.seed)
    order = rng.permutation(len(x))
    n_test = int(round(0.2 * len(x)))
    test, train_ids = order[:n_test], order[n_test:]
    xtr, ytr, xte, yte = x[train_ids], y[train_ids], x[test], y[test]
    print("digits: %d train, %d test samples; %d minibatches of %d per epoch" % (
        len(xtr), len(xte), len(xtr) // args.batch, args.batch), flush=True)

    proc = tmp = None
    try:
        if args.spawn:
            proc, c, tmp = spawn(args.spawn)
        else:
            c = tensord.Client(args.socket)
        with c:
            out = train(c, args, xtr, ytr, xte, yte, rng)
            device = device_name(c) if out is not None else None
    finally:
        stop(proc, tmp)
    if out is None:
        return 0
    acc = out["acc"]
    print("test accuracy %.4f (%d/%d)" % (acc, int(round(acc * len(yte))), len(yte)), flush=True)
    summary = {"model": args.model, "mode": args.mode, "test_accuracy": round(acc, 4),
               "seconds": round(time.monotonic() - t_start, 2),
               "step_ms": round(1000 * out["train_s"] / out["steps"], 2), "steps": out["steps"],
               "epochs": args.epochs, "batch": args.batch, "final_loss": round(out["loss"], 4),
               "device": device}
    if args.plot:
        plot(plt, args.plot, args, dict(out, device=device, n_test=len(yte)))
        print("wrote the loss and accuracy curves to %s" % args.plot, flush=True)
        summary["plot"] = args.plot
    print(json.dumps(summary))
    return 0


def stop(proc, tmp):
    if proc is not None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if tmp is not None:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

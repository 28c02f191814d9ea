#!/usr/bin/python3
"""Train a 64-128-10 MLP (or, with --model cnn, a small CNN) on the handwritten digits (8x8 images, 1797
samples; examples/digits/fetch.sh gets them) entirely inside tensord, through the
`tensord` Python package (python/tensord; used from this checkout when it is not installed).

The model is written with tensord.nn, which reads like PyTorch, and defined once in the
daemon (`Client.define_model`: model.define's layer form), which creates and initialises
its parameters on the GPU (torch's initialisers and names: digits/0.weight, ...):

    mlp: nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10, name="logits"))
    cnn: nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                       nn.MaxPool2d(2), nn.Flatten(), nn.Linear(256, 10, name="logits"))

plus an accuracy metric as raw graph nodes after the layers (argmax, eq, cast, mean).
--form graph defines the same model as hand-written graph nodes with parameters
initialised in NumPy (the form a model had before layers; the same names and layouts).

- --mode run (the default with --plot): one `train.run` on the model (`Model.train`): the daemon
  shuffles, gathers minibatches and loops itself, and reports the test loss and accuracy
  after every epoch (`train.eval` notifications) besides each step's loss
  (`train.progress`); --detach runs it as a job (`Model.train(detach=True)`) and follows it;
- --mode step (the default otherwise): one `train.step` on the model per minibatch, pipelined
  (`Client.pipeline()`: each minibatch put and trained in requests sent back to back);
- the test accuracy comes from `Model.evaluate`; --save FILE writes the trained model
  as safetensors (`Model.save`, what `tensorctl model save` writes);
- --plot FILE.png draws the loss and accuracy curves with matplotlib (Debian's
  python3-matplotlib, imported only then); it needs --mode run.

Usage (Debian's /usr/bin/python3, which has python3-numpy and python3-msgpack):
  examples/digits/fetch.sh
  examples/digits/train.py --spawn build/daemon/tensord
  examples/digits/train.py --spawn build/daemon/tensord --model cnn --plot digits.png
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
from tensord import nn  # noqa: E402


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


def build(kind, hidden):
    """The model as tensord.nn layers; the last layer is named "logits"."""
    if kind == "cnn":
        return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                             nn.MaxPool2d(2), nn.Flatten(), nn.Linear(256, 10, name="logits"))
    return nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10, name="logits"))


# The accuracy, as raw graph nodes after the layers (they read the layer "logits").
METRIC_NODES = [{"id": "pred", "op": "argmax", "inputs": ["logits"], "attrs": {"axis": 1}},
                {"id": "hit", "op": "eq", "inputs": ["pred", "y"]},
                {"id": "hitf", "op": "cast", "inputs": ["hit"], "attrs": {"dtype": "f32"}},
                {"id": "accuracy", "op": "mean", "inputs": ["hitf"]}]


def graph_form(c, p, kind, hidden, rng):
    """The same model by hand (--form graph): graph nodes, and parameters put
    from NumPy with torch's initialisers, names and layouts (linear weights
    [out, in], used with transpose_b). Returns define_model's keywords."""
    def uniform(bound, *shape):
        return rng.uniform(-bound, bound, size=shape).astype(np.float32)

    def linear(path, x, fan_in, fan_out):
        b = 1.0 / np.sqrt(fan_in)
        c.put(p + path + ".weight", uniform(b, fan_out, fan_in))
        c.put(p + path + ".bias", uniform(b, fan_out))
        return [{"id": path + "/mm", "op": "matmul", "inputs": [x, p + path + ".weight"],
                 "attrs": {"transpose_b": True}},
                {"id": path, "op": "add", "inputs": [path + "/mm", p + path + ".bias"]}]
    if kind == "cnn":
        c.put(p + "0.weight", uniform(1.0 / 3.0, 16, 1, 3, 3))   # fan_in 1*3*3
        c.put(p + "0.bias", uniform(1.0 / 3.0, 16))
        for k, v in (("weight", 1), ("bias", 0), ("running_mean", 0), ("running_var", 1)):
            c.put(p + "1." + k, np.full(16, v, np.float32))
        nodes = [{"id": "0", "op": "conv2d", "inputs": ["x", p + "0.weight", p + "0.bias"],
                  "attrs": {"padding": 1}},
                 {"id": "1", "op": "batch_norm", "inputs": ["0"] + [p + "1." + k for k in (
                     "running_mean", "running_var", "weight", "bias")]},
                 {"id": "2", "op": "relu", "inputs": ["1"]},
                 {"id": "3", "op": "max_pool2d", "inputs": ["2"], "attrs": {"kernel_size": 2}},
                 {"id": "4", "op": "reshape", "inputs": ["3"], "attrs": {"shape": [-1, 256]}}]
        nodes += linear("logits", "4", 256, 10)
        params = ["0.weight", "0.bias", "1.weight", "1.bias", "logits.weight", "logits.bias"]
        extra = {"state": ["1"]}
    else:
        nodes = linear("0", "x", 64, hidden) + [{"id": "1", "op": "relu", "inputs": ["0"]}]
        nodes += linear("logits", "1", hidden, 10)
        params = ["0.weight", "0.bias", "logits.weight", "logits.bias"]
        extra = {}
    nodes.append({"id": "loss", "op": "cross_entropy", "inputs": ["logits", "y"]})
    return dict(nodes=nodes + METRIC_NODES, params=[p + n for n in params], loss="loss", **extra)


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


def clear(c, name):
    """Delete model `name`, its tensors and the data under name + "/": old
    weights and optimizer state would be reused."""
    try:
        c.model(name).delete(tensors=True)
    except tensord.NotFound:
        pass
    with c.pipeline() as pl:
        for t in c.list(name + "/"):
            pl.delete(t["name"])


def train(c, args, xtr, ytr, xte, yte, rng):
    """Stores the data, defines the model and trains it; returns {"acc",
    "train_s", "steps", "loss"} (and the notification streams with --mode
    run), or None after --write-json."""
    name = args.prefix.rstrip("/")
    d = name + "/data/"                   # the data sets, beside the model's parameters
    clear(c, name)
    if args.model == "cnn":               # conv2d wants [N, C, H, W]
        xtr, xte = xtr.reshape(-1, 1, 8, 8), xte.reshape(-1, 1, 8, 8)
    for k, a in (("xtr", xtr), ("ytr", ytr), ("xte", xte), ("yte", yte)):
        c.put(d + k, a)
    common = dict(inputs={"x": ("f32", [1] + list(xtr.shape[1:])), "y": ("i32", [1])},
                  outputs=["logits"], optimizer={"type": "adam", "lr": args.lr}, replace=True,
                  precision=args.precision)
    if args.form == "graph":
        model = c.define_model(name, **graph_form(c, name + "/", args.model, args.hidden, rng), **common)
    else:
        model = c.define_model(name, layers=build(args.model, args.hidden), loss=nn.CrossEntropyLoss(target="y"),
                               nodes=METRIC_NODES, seed=args.seed, **common)
    st = model.stat()
    print("model %s (%s form): %s parameters in %d tensors" % (
        name, args.form, st.get("param_count", sum(int(np.prod(q["shape"])) for q in st["params"])),
        len(st["params"])), flush=True)
    test = {"x": d + "xte", "y": d + "yte"}
    nb = len(xtr) // args.batch              # full minibatches per epoch

    if args.mode == "run" or args.write_json:
        run = dict(batch_size=args.batch, epochs=args.epochs, seed=args.seed,
                   eval={"data": test, "metrics": ["accuracy"]})
        data = {"x": d + "xtr", "y": d + "ytr"}
        if args.write_json:
            with open(args.write_json, "w") as f:
                json.dump(dict(run, model=name, data=data), f, indent=1)
            print("wrote %s: the model %s is defined; run `tensorctl train %s`" % (
                args.write_json, name, args.write_json))
            return None
        t_train = time.monotonic()
        progress, evals = [], []

        def on_eval(e):
            evals.append(e)
            print("epoch %d: eval loss %.4f, accuracy %.4f, %.1f s" % (
                e["epoch"], e["loss"], e["metrics"]["accuracy"], time.monotonic() - t_train), flush=True)

        if args.detach:
            job = model.train(data, detach=True, **run)
            print("job %d runs in the daemon" % int(job), flush=True)
            for kind, m in job.watch():
                if kind == "progress":
                    progress.append(m)
                elif kind == "eval":
                    on_eval(m)
                else:
                    if m["state"] != "done":
                        raise SystemExit("job %d: %s %s" % (int(job), m["state"], m.get("error")))
                    res = m["result"]
        else:
            res = model.train(data, on_progress=progress.append, on_eval=on_eval, **run)
        out = {"train_s": time.monotonic() - t_train, "steps": res["steps"], "loss": res["loss"],
               "progress": progress, "evals": evals}
    else:
        t_train = time.monotonic()
        step = 0
        for epoch in range(args.epochs):
            order = rng.permutation(len(xtr))
            with c.pipeline() as pl:             # an epoch's steps sent back to back
                pending = []
                for k in range(nb):
                    idx = order[k * args.batch:(k + 1) * args.batch]
                    pl.put(d + "xb", xtr[idx])
                    pl.put(d + "yb", ytr[idx])
                    pending.append(pl.train_step(None, None, None, model=name,
                                                 data={"x": d + "xb", "y": d + "yb"}))
                    step += 1
            losses = [r.result()["loss"] for r in pending]
            print("epoch %d: mean loss %.4f (last %.4f), %d steps, %.1f s" % (
                epoch + 1, float(np.mean(losses)), losses[-1], step, time.monotonic() - t_train), flush=True)
        out = {"train_s": time.monotonic() - t_train, "steps": step, "loss": losses[-1]}
    ev = model.evaluate(test, metrics=["accuracy"])
    out["acc"] = ev["metrics"]["accuracy"]
    # the same accuracy from predictions, counted here
    pred = model.predict({"x": d + "xte"})["logits"].argmax(axis=1)
    out["hits"] = int((pred == yte).sum())
    if args.save:
        info = model.save(args.save)
        print("saved model %s (step %d, %d tensors) to %s" % (name, info["step"], len(info["tensors"]), args.save))
    clear(c, name)
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
    ap.add_argument("--precision", choices=("f32", "bf16"), default="f32",
                    help="bf16: mixed precision (products on bf16 operands, f32 master weights)")
    ap.add_argument("--prefix", default="digits", help="the model's name; its parameters and the "
                    "data sets are tensors under PREFIX/")
    ap.add_argument("--model", choices=("mlp", "cnn"), default="mlp")
    ap.add_argument("--form", choices=("layers", "graph"), default="layers",
                    help="layers (default): tensord.nn layers, initialised in the daemon; graph: the "
                         "same model as hand-written graph nodes, initialised in NumPy")
    ap.add_argument("--detach", action="store_true",
                    help="with --mode run: train as a detached job and follow it (job.watch)")
    ap.add_argument("--save", metavar="FILE.safetensors",
                    help="save the trained model (Model.save; `tensorctl model load` reads it)")
    ap.add_argument("--mode", choices=("step", "run"),
                    help="step (default): one pipelined train.step request per minibatch; "
                         "run (default with --plot): one train.run request for the whole training")
    ap.add_argument("--plot", metavar="FILE.png",
                    help="write the loss and accuracy curves of the train.run to FILE.png "
                         "(needs python3-matplotlib)")
    ap.add_argument("--write-json", metavar="FILE",
                    help="with --socket: store the data, define the model, write the train.run "
                         "params to FILE for `tensorctl train FILE`, and exit")
    args = ap.parse_args()
    if args.epochs is None:
        args.epochs = 10 if args.model == "cnn" else 8
    if args.mode is None:
        args.mode = "run" if args.plot else "step"
    if args.plot and args.mode != "run":
        ap.error("--plot draws the train.progress/train.eval stream of a train.run: use --mode run")
    if args.detach and args.mode != "run":
        ap.error("--detach detaches a train.run: use --mode run")
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
    if abs(out["hits"] - acc * len(yte)) > 0.5:
        raise SystemExit("the predictions give %d hits, evaluate an accuracy of %.4f" % (out["hits"], acc))
    print("test accuracy %.4f (%d/%d)" % (acc, out["hits"], len(yte)), flush=True)
    summary = {"model": args.model, "form": args.form, "mode": args.mode, "test_accuracy": round(acc, 4),
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


if __name__ == "__main__":
    sys.exit(main())

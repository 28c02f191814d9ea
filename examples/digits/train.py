#!/usr/bin/python3
"""Train a 64-128-10 MLP (or, with --model cnn, a small CNN) on the handwritten digits (8x8 images, 1797
samples; examples/digits/fetch.sh gets them) entirely inside tensord:

- the training and test sets are put once; so is one tensor holding every
  minibatch's sample indices for the whole run (a fresh shuffle per epoch);
- each optimizer step is one `train.step` request whose graph slices its
  row of indices, `gather`s the minibatch out of the stored training set,
  runs the MLP and the cross-entropy loss, and updates the weights with Adam:
  nothing but the loss comes back, and the requests of an epoch are
  pipelined (sent before their answers are read);
- the test accuracy comes from one `graph.run` (forward pass + argmax).

Usage (Debian's /usr/bin/python3, which has python3-numpy and python3-msgpack):
  examples/digits/fetch.sh
  examples/digits/train.py --spawn build/daemon/tensord
  examples/digits/train.py --socket /run/tensord/tensord.sock   (or $TENSORD_SOCKET)

The last line printed is a JSON summary, e.g.
  {"model": "mlp", "test_accuracy": 0.975, "seconds": 2.1, "step_ms": 6.3, ...}"""
import argparse
import gzip
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import msgpack
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


class RPCError(Exception):
    def __init__(self, error):
        self.error = error
        super().__init__("%s: %s" % (error.get("name"), error.get("message")))


class Client:
    """A minimal msgpack-RPC client; `send` + `recv` allow pipelining."""

    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.unpacker = msgpack.Unpacker(raw=False, max_buffer_size=2**31 - 1)
        self.msgid = 0

    def send(self, method, params):
        self.msgid += 1
        self.sock.sendall(msgpack.packb([0, self.msgid, method, [params]], use_bin_type=True))
        return self.msgid

    def recv(self, msgid):
        while True:
            for msg in self.unpacker:
                if msg[0] != 1:
                    continue  # a notification
                if msg[1] != msgid:
                    raise RuntimeError("response %r out of order (want %d)" % (msg[1], msgid))
                if msg[2] is not None:
                    raise RPCError(msg[2])
                return msg[3]
            data = self.sock.recv(1 << 20)
            if not data:
                raise ConnectionError("tensord closed the connection")
            self.unpacker.feed(data)

    def next_message(self):
        """The next message of any kind (notifications included)."""
        while True:
            for msg in self.unpacker:
                return msg
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("tensord closed the connection")
            self.unpacker.feed(chunk)

    def call(self, method, params):
        return self.recv(self.send(method, params))

    def put(self, name, array, dtype):
        np_dtype = {"f32": "<f4", "i32": "<i4"}[dtype]
        return self.call("tensor.put", {"name": name, "dtype": dtype, "shape": list(array.shape),
                                        "data": np.ascontiguousarray(array, dtype=np_dtype).tobytes()})


def spawn(binary):
    """Start a private tensord on a temporary socket; returns (proc, socket, dir)."""
    tmp = tempfile.mkdtemp(prefix="digits-tensord-")
    path = os.path.join(tmp, "tensord.sock")
    log = open(os.path.join(tmp, "tensord.log"), "wb")
    proc = subprocess.Popen([binary, "--socket", path, "--state-dir", tmp],
                            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while True:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(path)
            s.close()
            return proc, path, tmp
        except OSError:
            s.close()
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--socket", default=os.environ.get("TENSORD_SOCKET"),
                    help="tensord's socket (default $TENSORD_SOCKET)")
    ap.add_argument("--spawn", metavar="BIN", help="start this tensord binary on a temporary socket")
    ap.add_argument("--data", default=os.path.join(HERE, ".data", "digits.csv.gz"))
    ap.add_argument("--epochs", type=int, help="default: 8 for the MLP, 10 for the CNN")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--prefix", default="digits/", help="name prefix of the tensors this run owns")
    ap.add_argument("--model", choices=("mlp", "cnn"), default="mlp")
    ap.add_argument("--mode", choices=("step", "run"), default="step",
                    help="step: one pipelined train.step request per minibatch; "
                         "run: one train.run request for the whole training")
    ap.add_argument("--write-json", metavar="FILE",
                    help="with --socket: store the data and fresh weights, write the train.run "
                         "params to FILE for `tensorctl train FILE`, and exit")
    args = ap.parse_args()
    if args.epochs is None:
        args.epochs = 10 if args.model == "cnn" else 8
    if not args.spawn and not args.socket:
        ap.error("give --socket, $TENSORD_SOCKET or --spawn")
    if not os.path.exists(args.data):
        raise SystemExit("%s is missing: run %s first" % (args.data, os.path.join(HERE, "fetch.sh")))

    t_start = time.monotonic()
    x, y = load(args.data)
    rng = np.random.default_rng(args.seed)
    order = rng.permutation(len(x))
    n_test = int(round(0.2 * len(x)))
    test, train = order[:n_test], order[n_test:]
    xtr, ytr, xte, yte = x[train], y[train], x[test], y[test]
    nb = len(train) // args.batch            # full minibatches per epoch (the rest waits for the next shuffle)
    print("digits: %d train, %d test samples; %d minibatches of %d per epoch" % (
        len(train), len(test), nb, args.batch), flush=True)

    proc = tmp = None
    path = args.socket
    if args.spawn:
        proc, path, tmp = spawn(args.spawn)
    try:
        c = Client(path)
        p = args.prefix
        # a clean slate: old weights and optimizer state under the prefix would be reused
        for t in c.call("tensor.list", {"prefix": p})["tensors"]:
            c.call("tensor.delete", {"name": t["name"]})
        c.put(p + "xtr", xtr, "f32")
        c.put(p + "ytr", ytr, "i32")
        c.put(p + "xte", xte, "f32")
        if args.model == "cnn":
            bound = 1.0 / 3.0  # kaiming_uniform(a=sqrt(5)) of a 1x3x3 kernel
            cw = rng.uniform(-bound, bound, size=(16, 1, 3, 3)).astype(np.float32)
            cb = rng.uniform(-bound, bound, size=(16,)).astype(np.float32)
            w2, b2 = linear_init(rng, 256, 10)
            tensors = (("cw", cw), ("cb", cb), ("w2", w2), ("b2", b2))
            global forward_nodes
            forward_nodes = cnn_forward_nodes
        else:
            w1, b1 = linear_init(rng, 64, args.hidden)
            w2, b2 = linear_init(rng, args.hidden, 10)
            tensors = (("w1", w1), ("b1", b1), ("w2", w2), ("b2", b2))
        for name, a in tensors:
            c.put(p + name, a, "f32")
        # every minibatch of every epoch: row e*nb + k holds the indices of batch k of epoch e
        batches = np.concatenate([rng.permutation(len(train))[:nb * args.batch].reshape(nb, args.batch)
                                  for _ in range(args.epochs)]).astype(np.int32)
        c.put(p + "batches", batches, "i32")
        params = [p + n for n, _ in tensors]
        optimizer = {"type": "adam", "lr": args.lr}

        if args.mode == "run" or args.write_json:
            # train.run: the daemon shuffles, gathers minibatches and loops itself; the test
            # accuracy is a metric node evaluated after every epoch.
            c.put(p + "yte", yte, "i32")
            nodes = forward_nodes(p, "xb") + [
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
                return 0
            t_train = time.monotonic()
            msgid = c.send("train.run", run)
            while True:
                msg = c.next_message()
                if msg[0] == 2 and msg[1] == "train.eval":
                    e = msg[2][0]
                    print("epoch %d: eval loss %.4f, accuracy %.4f, %.1f s" % (
                        e["epoch"], e["loss"], e["metrics"]["accuracy"], time.monotonic() - t_train),
                        flush=True)
                elif msg[0] == 1 and msg[1] == msgid:
                    if msg[2] is not None:
                        raise RPCError(msg[2])
                    result = msg[3]
                    break
            train_s = time.monotonic() - t_train
            step = result["steps"]
            losses = [result["loss"]]
            acc = result["eval"]["metrics"]["accuracy"]
            pred = None
            for t in c.call("tensor.list", {"prefix": p})["tensors"]:
                c.call("tensor.delete", {"name": t["name"]})
            return finish(proc, tmp, t_start, args, acc, None, yte, train_s, step, losses, "run")

        t_train = time.monotonic()
        step = 0
        for epoch in range(args.epochs):
            ids = []
            for k in range(nb):
                row = epoch * nb + k
                step += 1
                nodes = [{"id": "rowk", "op": "slice", "inputs": [p + "batches"],
                          "attrs": {"starts": [row], "ends": [row + 1]}},
                         {"id": "idx", "op": "reshape", "inputs": ["rowk"], "attrs": {"shape": [args.batch]}},
                         {"id": "xb", "op": "gather", "inputs": [p + "xtr", "idx"]},
                         {"id": "yb", "op": "gather", "inputs": [p + "ytr", "idx"]}]
                nodes += forward_nodes(p, "xb")
                nodes.append({"id": "loss", "op": "cross_entropy", "inputs": ["logits", "yb"]})
                ids.append(c.send("train.step", {"nodes": nodes, "loss": "loss", "params": params,
                                                 "optimizer": optimizer, "step": step}))
            losses = [c.recv(i)["loss"] for i in ids]
            print("epoch %d: mean loss %.4f (last %.4f), %d steps, %.1f s" % (
                epoch + 1, float(np.mean(losses)), losses[-1], step, time.monotonic() - t_train), flush=True)
        train_s = time.monotonic() - t_train

        res = c.call("graph.run", {"nodes": forward_nodes(p, p + "xte") + [
            {"id": "pred", "op": "argmax", "inputs": ["logits"], "attrs": {"axis": 1}}],
            "outputs": ["pred"]})
        pred = np.frombuffer(res["outputs"]["pred"]["data"], "<i4")
        acc = float((pred == yte).mean())
        for t in c.call("tensor.list", {"prefix": p})["tensors"]:
            c.call("tensor.delete", {"name": t["name"]})
    except BaseException:
        stop(proc, tmp)
        raise
    return finish(proc, tmp, t_start, args, acc, pred, yte, train_s, step, losses, "step")


def stop(proc, tmp):
    if proc is not None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def finish(proc, tmp, t_start, args, acc, pred, yte, train_s, step, losses, mode):
    stop(proc, tmp)
    print("test accuracy %.4f (%d/%d)" % (acc, int(round(acc * len(yte))), len(yte)), flush=True)
    print(json.dumps({"model": args.model, "mode": mode, "test_accuracy": round(acc, 4),
                      "seconds": round(time.monotonic() - t_start, 2),
                      "step_ms": round(1000 * train_s / step, 2), "steps": step, "epochs": args.epochs,
                      "batch": args.batch, "final_loss": round(losses[-1], 4)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""The digits example end to end (examples/digits): fetch the data set, train
the MLP and the CNN (tensord.nn layers; the MLP also as graph nodes) on a
tensord of its own (--spawn $TENSORD_BIN), and require a test accuracy of at
least 0.95 (CNN: 0.97) from the JSON summary on its last line (the example
itself checks evaluate's accuracy against its own count of predictions).

Exits 77 (meson: skipped) when the data set cannot be fetched, e.g. without
network access; never fails for that reason."""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "..", "examples", "digits")
SKIP = 77


def main():
    binary = os.environ.get("TENSORD_BIN")
    if not binary:
        print("TENSORD_BIN is not set")
        return 1
    cache = os.environ.get("DIGITS_CACHE", os.path.join(EXAMPLE, ".data"))
    try:
        fetch = subprocess.run(["sh", os.path.join(EXAMPLE, "fetch.sh"), cache], capture_output=True,
                               text=True, timeout=300)
    except subprocess.TimeoutExpired:
        print("SKIP: fetching the digits data set took too long")
        return SKIP
    sys.stdout.write(fetch.stdout)
    sys.stdout.write(fetch.stderr)
    lines = fetch.stdout.strip().splitlines()
    if fetch.returncode != 0 or not lines or not os.path.exists(lines[-1]):
        print("SKIP: the digits data set cannot be fetched (exit %d)" % fetch.returncode)
        return SKIP
    # Both ways of training a layer model (tensord.nn): pipelined train.step
    # requests, and one train.run (also detached, as a job); the CNN (conv2d,
    # batch_norm, relu, max_pool2d, flatten, linear), which must reach 0.97;
    # the MLP written as graph nodes (--form graph); and the MLP in mixed
    # precision (--precision bf16, docs/training.md).
    for mode, model, need, extra in (("step", "mlp", 0.95, []), ("run", "mlp", 0.95, []),
                                     ("run", "mlp", 0.95, ["--detach"]), ("run", "cnn", 0.97, []),
                                     ("step", "mlp", 0.95, ["--form", "graph"]),
                                     ("run", "mlp", 0.95, ["--precision", "bf16"])):
        run = subprocess.run([sys.executable, os.path.join(EXAMPLE, "train.py"), "--spawn", binary,
                              "--data", lines[-1], "--mode", mode, "--model", model] + extra,
                             capture_output=True, text=True, timeout=540)
        sys.stdout.write(run.stdout)
        sys.stdout.write(run.stderr)
        if run.returncode != 0:
            print("FAIL: train.py --mode %s %s exited with %d" % (mode, " ".join(extra), run.returncode))
            return 1
        summary = json.loads(run.stdout.strip().splitlines()[-1])
        for key in ("model", "test_accuracy", "seconds", "step_ms"):
            if key not in summary:
                print("FAIL: the summary lacks %s" % key)
                return 1
        if summary["test_accuracy"] < need:
            print("FAIL: %s --mode %s: test accuracy %.4f < %.2f" % (model, mode, summary["test_accuracy"], need))
            return 1
        print("ok: %s --mode %s %s: test accuracy %.4f, %.2f ms per step" % (
            model, mode, " ".join(extra), summary["test_accuracy"], summary["step_ms"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

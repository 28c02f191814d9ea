"""Bugs the fuzzers found (tests/fuzz/), checked against a real tensord so the
ordinary build catches them too (the inputs themselves are replayed by the
fuzz_*_corpus tests, but some of the bugs are undefined behaviour only clang's
UBSan reports). Each case names the input kept in tests/fuzz/corpus/.
Run with /usr/bin/python3; TENSORD_BIN names the daemon.
"""
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from daemon import Daemon  # noqa: E402

failures = []


def expect_error(c, method, params, name, fragment, what):
    err, res = c.call_full(method, params)
    if err is None or err.get("name") != name or fragment not in err.get("message", ""):
        failures.append(what)
        print("FAIL %s: got %r %r" % (what, err, res))


def main():
    with Daemon() as d:
        c = d.client()
        c.call("tensor.put", {"name": "a", "dtype": "f32", "shape": [2, 3],
                              "data": struct.pack("<6f", *range(6))})
        model = {"nodes": [{"id": "z", "op": "sum", "inputs": ["a"]}], "loss": "z",
                 "params": ["a"]}
        # regress-optimizer-nan: NaN passed every range check of the optimizer
        # (comparisons with NaN are false) and was then cast to an integer.
        for key in ("lr", "beta1", "beta2", "eps", "momentum", "weight_decay", "clip_norm",
                    "step_size", "warmup", "total", "gamma", "min_lr", "dampening"):
            for bad in (float("nan"), float("inf"), float("-inf")):
                expect_error(c, "train.step", dict(model, optimizer={"type": "adam", key: bad}),
                             "INVALID_ARGUMENT", "optimizer.%s must be finite" % key,
                             "optimizer.%s = %r" % (key, bad))
        # Finite but beyond int64 once converted: also refused, not cast.
        for key in ("step_size", "warmup", "total"):
            expect_error(c, "train.step", dict(model, optimizer={"schedule": "step", key: 1e300}),
                         "INVALID_ARGUMENT", "out of range", "optimizer.%s = 1e300" % key)
        # The daemon is still fine.
        if c.call("ping").get("pong") is not True:
            failures.append("ping after the bad requests")
        c.close()
    if failures:
        print("%d failure(s)" % len(failures))
        return 1
    print("all fuzz regressions hold")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""bench_batch, tiny and untimed: it starts its two daemons (batch_requests yes
and no) from $TENSORD_BIN, exits 0, reports positive rates and ratios for both
workloads and the batched daemon's CPU per op.run, leaves no daemon and no
temporary directory behind, and refuses bad arguments. No timing is checked
(2 shared cores)."""
import glob
import json
import os
import subprocess
import sys

BENCH = os.environ["BENCH_BATCH"]
BIN = os.environ["TENSORD_BIN"]


def main():
    before = set(glob.glob("/tmp/bench-batch-*"))
    p = subprocess.run([BENCH, "--tensord", BIN, "--device", "auto", "--total", "128", "--rounds", "1",
                        "--clients", "3", "--depth", "16", "--json"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=240)
    assert p.returncode == 0, p.stderr.decode()
    out = json.loads(p.stdout)
    for k in ("one_unbatched_ops", "one_batched_ops", "one_ratio", "many_unbatched_ops",
              "many_batched_ops", "many_ratio"):
        assert isinstance(out[k], float) and out[k] > 0, (k, out)
    assert out["clients"] == 3 and out["depth"] == 16, out
    # The batched daemon's CPU per op.run (it started both, so it knows their pids): the
    # loop thread parses every request, and it is one of the process's threads.
    for row in ("one", "many"):
        loop, cpu = out[row + "_batched_loop_us"], out[row + "_batched_cpu_us"]
        assert isinstance(loop, float) and isinstance(cpu, float) and 0 < loop and 0.9 * loop <= cpu, out
    assert set(glob.glob("/tmp/bench-batch-*")) == before, "bench_batch left its directory"
    p = subprocess.run([BENCH, "--tensord", BIN, "--device", "auto", "--total", "64", "--rounds", "1",
                        "--clients", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=240)
    assert p.returncode == 0 and b"2 clients x" in p.stdout and b"loop thread" in p.stdout, p
    for bad in (["--depth", "0"], ["--batched", "/nonexistent"], ["extra"]):
        p = subprocess.run([BENCH, "--tensord", BIN] + bad, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert p.returncode == 2 and b"usage" in p.stderr, (bad, p)
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())

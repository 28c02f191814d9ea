#!/usr/bin/python3
"""bench_memfd, tiny and untimed: against a real tensord it exits 0, checks
every path's bytes itself (its warm-up compares each get with the data),
prints every figure as a positive number, leaves no tensor and no extra
open file descriptor in the daemon behind, and refuses bad arguments. With
--tensord it starts (with --config, --no-import) and stops a daemon of its
own, leaving no directory behind."""
import glob
import json
import os
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from daemon import Daemon  # noqa: E402

BENCH = os.environ["BENCH_MEMFD"]


def main():
    with Daemon() as d:
        c = d.client()
        c.call("ping")
        fds = len(os.listdir("/proc/%d/fd" % d.proc.pid))
        p = subprocess.run([BENCH, "--socket", d.sock, "--mib", "2", "--reps", "2", "--json"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
        assert p.returncode == 0, p.stderr.decode()
        out = json.loads(p.stdout)
        for k in ("put_socket_gbps", "put_memfd_gbps", "put_memfd_ready_gbps", "get_socket_gbps",
                  "get_memfd_gbps", "put_ratio", "put_ready_ratio", "get_ratio"):
            assert isinstance(out[k], float) and out[k] > 0, (k, out)
        assert out["mib"] == 2 and out["reps"] == 2, out
        p = subprocess.run([BENCH, "--socket", d.sock, "--mib", "1"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=300)
        assert p.returncode == 0 and b"memfd / socket speed-up: put" in p.stdout, p
        assert c.call("tensor.list")["tensors"] == [], "bench_memfd left tensors behind"
        assert len(os.listdir("/proc/%d/fd" % d.proc.pid)) == fds, "the daemon kept fds"
        p = subprocess.run([BENCH, "--mib", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert p.returncode == 2 and b"usage" in p.stderr, p
    # a daemon of its own, staged as on a discrete GPU, with and without the import
    before = set(glob.glob("/tmp/bench-memfd-*"))
    with tempfile.NamedTemporaryFile("w", suffix=".conf") as conf:
        conf.write("host_mapped = false\n")
        conf.flush()
        for extra in ([], ["--no-import"]):
            p = subprocess.run([BENCH, "--tensord", os.environ["TENSORD_BIN"], "--config", conf.name,
                                "--mib", "2", "--reps", "1", "--json"] + extra,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300,
                               env=dict(os.environ))
            assert p.returncode == 0, (extra, p.stderr.decode())
            assert json.loads(p.stdout)["get_memfd_gbps"] > 0, p.stdout
    assert set(glob.glob("/tmp/bench-memfd-*")) == before, "bench_memfd left its directory"
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())

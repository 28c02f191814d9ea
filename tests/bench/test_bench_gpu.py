#!/usr/bin/python3
"""The benchmark harness on the CI device (lavapipe), untimed and without
thresholds: `bench_gpu --size smoke` against a real tensord exits 0 and every
workload produced numbers (gpu_ns > 0 where the workload runs kernels); it
leaves no tensors behind; it refuses bad arguments; compare_torch.py's tensord
half and its outputs work without PyTorch (which CI does not have)."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import traceback

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from daemon import Daemon  # noqa: E402

BENCH_GPU = os.environ.get("BENCH_GPU", "")
COMPARE_TORCH = os.environ.get("COMPARE_TORCH", "")
KERNEL_GROUPS = {"matmul", "elementwise", "reduction", "normalization", "conv"}
GROUPS = KERNEL_GROUPS | {"training", "latency", "transfer"}


def run(args, timeout=600):
    p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def positive(w, key):
    v = w.get(key)
    assert isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0, \
        "%s: %s is %r" % (w["name"], key, v)
    return v


def close(a, b):
    return abs(a - b) <= 1e-6 * max(abs(a), abs(b))


def check_report(report, listed):
    assert report["size"] == "smoke", report["size"]
    assert report["tensord"]["version"] and report["tensord"]["device"], report["tensord"]
    names = [w["name"] for w in report["workloads"]]
    assert names == listed, "ran %s, --list says %s" % (names, listed)
    assert len(names) == len(set(names)) == 26, names
    assert {w["group"] for w in report["workloads"]} == GROUPS, report["workloads"]
    for w in report["workloads"]:
        assert w["error"] is None, "%s failed: %s" % (w["name"], w["error"])
        assert isinstance(w["params"], dict) and w["params"].get("kind"), w
        positive(w, "reps")
        wall = positive(w, "wall_ns")
        e2e = positive(w, "e2e")
        if w["group"] in KERNEL_GROUPS or w["name"] == "op_latency":
            gpu = positive(w, "gpu_ns")
            kernel = positive(w, "kernel")
            if w["unit"] == "TFLOP/s":
                work = positive(w, "flops")
                assert close(kernel, work / gpu / 1e3) and close(e2e, work / wall / 1e3), w
            elif w["unit"] == "GB/s":
                work = positive(w, "bytes")
                assert close(kernel, work / gpu) and close(e2e, work / wall), w
            else:
                assert w["unit"] == "us" and close(kernel, gpu / 1e3), w
        elif w["group"] == "training":
            daemon = positive(w, "daemon_ns")
            assert w["unit"] == "us/step" and w["better"] == "lower", w
            assert close(positive(w, "kernel"), daemon / 1e3) and close(e2e, wall / 1e3), w
            assert w["gpu_ns"] is None, w
        else:
            assert w["gpu_ns"] is None and w["kernel"] is None, w
        if w["name"] in ("ping", "op_latency"):
            assert positive(w, "p99_ns") >= wall, w
        if w["group"] == "transfer":
            assert w["unit"] == "GB/s" and close(e2e, positive(w, "bytes") / wall), w


def test_bench_gpu(d, tmp):
    rc, out, err = run([BENCH_GPU, "--list", "--json", "--size", "smoke"])
    assert rc == 0, err
    listed = [w["name"] for w in json.loads(out)["workloads"]]
    rc, out, err = run([BENCH_GPU, "--socket", d.sock, "--size", "smoke", "--json", "--quiet"])
    assert rc == 0, "bench_gpu exited %d: %s" % (rc, err)
    report = json.loads(out)
    check_report(report, listed)
    with open(os.path.join(tmp, "smoke.json"), "w") as f:
        f.write(out)
    with d.client() as c:
        left = c.call("tensor.list", {"prefix": "bench/"})["tensors"]
        assert left == [], "bench_gpu left %s" % [t["name"] for t in left]
    # the table: a row per workload, no failures
    rc, out, err = run([BENCH_GPU, "--socket", d.sock, "--size", "smoke", "--quiet",
                        "--only", "matmul_f32,ping", "--reps", "1", "--warmup", "0"])
    assert rc == 0, err
    lines = out.splitlines()
    assert sum(1 for ln in lines if ln.startswith("matmul_f32_")) == 2, out
    assert any(ln.startswith("ping ") for ln in lines) and "FAILED" not in out, out


def test_bench_gpu_bad_args(d, tmp):
    for args in (["--size", "huge"], ["--reps", "0"], ["--reps", "x"], ["--bogus"], ["extra"]):
        rc, out, err = run([BENCH_GPU, "--socket", d.sock] + args)
        assert rc == 2 and err, (args, rc, err)
    rc, out, err = run([BENCH_GPU, "--socket", os.path.join(tmp, "none.sock"), "--size", "smoke"])
    assert rc == 1 and "cannot connect" in err, (rc, err)
    rc, out, err = run([BENCH_GPU, "--list", "--only", "no-such-workload"])
    assert rc == 0 and out == "", (rc, out)


def test_compare_torch_without_torch(d, tmp):
    smoke = os.path.join(tmp, "smoke.json")
    with open(smoke) as f:
        report = json.load(f)
    md = os.path.join(tmp, "out.md")
    rc, out, err = run([sys.executable, COMPARE_TORCH, "--tensord-json", smoke, "--no-torch",
                        "--json", "--out-markdown", md])
    assert rc == 0, err
    res = json.loads(out)
    rows = {r["name"]: r for r in res["rows"]}
    assert list(rows) == [w["name"] for w in report["workloads"]], list(rows)
    for w in report["workloads"]:
        r = rows[w["name"]]
        assert r["tensord_e2e"] == w["e2e"] and r["tensord_error"] is None, r
        assert r["torch_kernel"] is None and r["ratio_e2e"] is None, r
    for name in ("ping", "op_latency", "op_pipelined"):
        assert rows[name]["goal"] and isinstance(rows[name]["met"], bool), rows[name]
    assert rows["ping"]["met"] == (rows["ping"]["tensord_e2e"] <= 50), rows["ping"]
    assert rows["matmul_f32_48"]["goal"] is None, rows["matmul_f32_48"]
    with open(md) as f:
        text = f.read()
    assert "| workload | unit | tensord kernel |" in text and "`train_mlp_784`" in text, text

    # its own daemon, and a daemon that cannot start: listed errors, no crash
    rc, out, err = run([sys.executable, COMPARE_TORCH, "--tensord", os.environ["TENSORD_BIN"],
                        "--bench-gpu", BENCH_GPU, "--size", "smoke", "--no-torch",
                        "--only", "add,ping", "--markdown"])
    assert rc == 0, err
    assert "`add_f32_64K`" in out and "`ping`" in out and "Failed" not in out, out
    rc, out, err = run([sys.executable, COMPARE_TORCH, "--tensord", os.path.join(tmp, "nothing"),
                        "--bench-gpu", BENCH_GPU, "--size", "smoke", "--no-torch", "--json"])
    assert rc == 3, (rc, err)
    res = json.loads(out)
    assert len(res["rows"]) == 26 and all(r["tensord_error"] for r in res["rows"]), res["rows"]


TESTS = [test_bench_gpu, test_bench_gpu_bad_args, test_compare_torch_without_torch]


def main():
    if not BENCH_GPU or not COMPARE_TORCH:
        print("BENCH_GPU and COMPARE_TORCH must be set")
        return 1
    failed = 0
    d = Daemon().start()
    tmp = tempfile.mkdtemp(prefix="bench-gpu-test-")
    try:
        for t in TESTS:
            try:
                t(d, tmp)
                print("ok   %s" % t.__name__)
            except Exception:
                failed += 1
                print("FAIL %s" % t.__name__)
                traceback.print_exc()
            if not d.alive():
                print("tensord died")
                failed += 1
                break
    finally:
        if failed:
            d.dump_log()
        try:
            d.stop()
        except Exception:
            traceback.print_exc()
            failed += 1
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d of %d failed" % (failed, len(TESTS)) if failed else "all %d passed" % len(TESTS))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

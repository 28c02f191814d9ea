#!/usr/bin/python3
"""The benchmark harness on the CI device (lavapipe), untimed and without
thresholds: `bench_gpu --size smoke` against a real tensord exits 0 and every
workload produced numbers (gpu_ns > 0 where the workload runs kernels; the
training rows in samples/s from their time per step), the MLP at three batches,
the digits CNN and the char transformer (model.define layers) among them; it
leaves no tensors or models behind; it refuses bad arguments; compare_torch.py's
tensord half and its outputs work without PyTorch (which CI does not have), and
its ratios, samples/s and goals are right for PyTorch figures made up here."""
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
    assert len(names) == len(set(names)) == 33, names
    for want in ("train_mlp_784", "train_mlp_64", "train_mlp_784_b32", "train_mlp_784_b64",
                 "train_mlp_784_b32_bf16", "train_mlp_784_b64_bf16", "train_cnn_b16",
                 "train_transformer_d32", "train_transformer_d32_bf16"):
        assert want in names, (want, names)
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
            batch = w["params"]["batch"]
            assert isinstance(batch, int) and batch > 0, w
            assert w["unit"] == "samples/s" and w["better"] == "higher", w
            assert close(positive(w, "kernel"), batch * 1e9 / daemon), w
            assert close(e2e, batch * 1e9 / wall) and daemon <= wall, w
            assert w["gpu_ns"] is None, w
            assert w["params"]["kind"] in ("train_mlp", "train_cnn", "train_transformer"), w
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
        models = [m["name"] for m in c.call("model.list", {})["models"]]
        assert not [m for m in models if m.startswith("bench/")], models
    # the table: a row per workload, no failures
    rc, out, err = run([BENCH_GPU, "--socket", d.sock, "--size", "smoke", "--quiet",
                        "--only", "matmul_f32,ping", "--reps", "1", "--warmup", "0"])
    assert rc == 0, err
    lines = out.splitlines()
    assert sum(1 for ln in lines if ln.startswith("matmul_f32_")) == 2, out
    assert any(ln.startswith("ping ") for ln in lines) and "FAILED" not in out, out
    # the training run lengths
    rc, out, err = run([BENCH_GPU, "--socket", d.sock, "--size", "smoke", "--quiet", "--json",
                        "--only", "train_mlp_64,train_cnn", "--train-steps", "2", "--train-warmup", "0"])
    assert rc == 0, err
    ws = json.loads(out)["workloads"]
    assert [w["name"] for w in ws] == ["train_mlp_64", "train_cnn_b16"], ws
    for w in ws:
        assert w["params"]["steps"] == 2 and w["params"]["warmup_steps"] == 0 and not w["error"], w
        assert "train.run of 2 steps" in w["desc"] or w["params"]["kind"] == "train_cnn", w


def test_bench_gpu_bad_args(d, tmp):
    for args in (["--size", "huge"], ["--reps", "0"], ["--reps", "x"], ["--bogus"], ["extra"],
                 ["--train-steps", "0"], ["--train-warmup", "-1"]):
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
    # ratio goals name their column; without PyTorch they are neither met nor missed
    for name, goal in (("matmul_f32_48", "kernel \u2265 0.85x"), ("matmul_f16_64", "kernel \u2265 0.50x"),
                       ("gemm_tn_49x32_k1024", "kernel \u2265 0.80x"), ("conv2d_f32_8x8", "kernel \u2265 0.80x"),
                       ("train_mlp_784", "graph \u2265 1.00x"), ("train_cnn_b16", "graph \u2265 0.70x"),
                       ("train_transformer_d32", "graph \u2265 0.70x"),
                       ("train_transformer_d32_bf16", "graph \u2265 0.70x")):
        assert rows[name]["goal"] == goal and rows[name]["met"] is None, rows[name]
    for name in ("matmul_bf16_64", "bmm_f32_4x32", "gemm_nn_49x32_k1024", "add_f32_64K", "train_mlp_64"):
        assert rows[name]["goal"] is None, rows[name]
    with open(md) as f:
        text = f.read()
    assert "| workload | unit | tensord kernel |" in text and "`train_mlp_784`" in text, text
    assert "| workload | batch | tensord kernel | tensord e2e | PyTorch eager | PyTorch graph |" in text, text
    for name in ("train_mlp_784_b64", "train_mlp_784_b64_bf16", "train_cnn_b16", "train_transformer_d32",
                 "train_transformer_d32_bf16"):
        assert text.count("`%s`" % name) == 3, (name, text)  # main table, step table, description

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
    assert len(res["rows"]) == 33 and all(r["tensord_error"] for r in res["rows"]), res["rows"]


class FakeTorch:
    """PyTorch figures made up from tensord's: every workload `speed` times as
    fast as tensord's kernel (its eager e2e half that, its CUDA graph twice)."""

    def __init__(self, speed):
        self.speed = speed

    def run(self, w):
        if w["params"]["kind"].startswith("train_"):
            ns = w["daemon_ns"] / self.speed
        else:
            ns = w["gpu_ns"] / self.speed
        return ns, 2 * ns, None

    def run_graph(self, w):
        if not w["params"]["kind"].startswith("train_"):
            return None, None, None
        return w["daemon_ns"] / self.speed / 2, w["wall_ns"] / self.speed / 2, None


def test_compare_torch_ratios(d, tmp):
    sys.path.insert(0, os.path.dirname(COMPARE_TORCH))
    try:
        import compare_torch as ct
    finally:
        sys.path.pop(0)
    with open(os.path.join(tmp, "smoke.json")) as f:
        report = json.load(f)
    byname = {w["name"]: w for w in report["workloads"]}
    for speed, met in ((0.4, True), (1.6, False)):
        rows = {r["name"]: r for r in ct.build_rows(report, FakeTorch(speed))}
        for name, r in rows.items():
            w = byname[name]
            if r["kind"] in ct.GOALS:
                assert r["torch_kernel"] is None and r["ratio_kernel"] is None, r
                continue
            # tensord's throughput over PyTorch's, whatever the unit
            assert close(r["ratio_kernel"], 1 / speed) and close(r["ratio_e2e"], 1 / speed * 2 *
                                                                  w["gpu_ns" if w["gpu_ns"] else "daemon_ns"]
                                                                  / w["wall_ns"]), r
            if r["kind"].startswith("train_"):
                batch = w["params"]["batch"]
                assert r["unit"] == "samples/s" and close(r["torch_kernel"], batch * 1e9 * speed / w["daemon_ns"]), r
                assert close(r["torch_graph_e2e"], batch * 1e9 * speed * 2 / w["wall_ns"]), r
                assert close(r["ratio_graph"], 1 / (2 * speed)), r
                assert close(r["torch_graph_wall_ns"], w["wall_ns"] / speed / 2), r
            else:
                assert r["ratio_graph"] is None and r["torch_graph_e2e"] is None, r
            if r["goal"]:
                # speed 0.4: every ratio is 2.5 (kernel) or 1.25 (graph), above every goal;
                # speed 1.6: 0.625 and 0.31, below every goal but f16's 0.5 (kernel 0.625)
                want = met or r["goal"] == "kernel \u2265 0.50x"
                assert r["met"] is want, (speed, r)
        text = ct.markdown(report, list(rows.values()), {"version": "fake", "device": "fake"})
        assert "PyTorch fake on fake" in text and "- `train_cnn_b16`:" in text, text


TESTS = [test_bench_gpu, test_bench_gpu_bad_args, test_compare_torch_without_torch,
         test_compare_torch_ratios]


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

#!/usr/bin/python3
"""bench/gemm_variants.py and gemm_variants on lavapipe, tiny: the test grid
(three v4 variants, two rasterised over a partial group of tile rows)
builds into .spv + .txt pairs, each runs OK at small NN and NT sizes, a
variant whose sidecar lies about its tile (half the workgroups dispatched)
FAILs, and the cm variants of the full grid are refused with a SKIP line
(lavapipe has no cooperative matrices; one is built to check that)."""
import os
import shutil
import subprocess
import sys
import tempfile

SCRIPT = os.environ["GEMM_VARIANTS_PY"]
BIN = os.environ["GEMM_VARIANTS"]
SIZES = ["384x256x128:NN", "384x128x64:NT"]


def run(*args):
    p = subprocess.run([sys.executable, SCRIPT] + list(args), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def main():
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "v")
        rc, so, se = run("build", out, "--grid", "test")
        assert rc == 0, se
        names = sorted(os.listdir(out))
        assert names == ["v4_nn.spv", "v4_nn.txt", "v4_nn_r4.spv", "v4_nn_r4.txt",
                         "v4_nt_r2.spv", "v4_nt_r2.txt"], names
        rc, so, se = run("run", out, "--bin", BIN, "--reps", "3", "--warmup", "1", *SIZES)
        assert rc == 0, so + se
        lines = [ln.split() for ln in so.splitlines() if not ln.startswith("#")]
        got = sorted((f[0], f[4]) for f in lines)
        assert got == [("v4_nn", "NN"), ("v4_nn_r4", "NN"), ("v4_nt_r2", "NT")], so
        assert all(f[-1] == "OK" and float(f[5]) > 0 for f in lines), so

        # A sidecar claiming 256-row tiles: half the rows are never written.
        bad = os.path.join(tmp, "bad")
        os.mkdir(bad)
        shutil.copy(os.path.join(out, "v4_nn.spv"), os.path.join(bad, "v4_lie.spv"))
        with open(os.path.join(out, "v4_nn.txt")) as f:
            side = f.read().replace("bm 128", "bm 256")
        with open(os.path.join(bad, "v4_lie.txt"), "w") as f:
            f.write(side)
        rc, so, se = run("run", bad, "--bin", BIN, "--reps", "1", "--warmup", "0", SIZES[0])
        assert rc == 1 and " FAIL" in so, so + se

        # A cm variant builds here and is skipped on a device without matrices.
        cm = os.path.join(tmp, "cm")
        rc, so, se = run("build", cm, "--only", "^cm_bf16_nn_128x128x32_db_r8_fp$")
        assert rc == 0 and sorted(os.listdir(cm)) == ["cm_bf16_nn_128x128x32_db_r8_fp.spv",
                                                      "cm_bf16_nn_128x128x32_db_r8_fp.txt"], se
        rc, so, se = run("run", cm, "--bin", BIN, SIZES[0])
        assert rc == 0 and "SKIP (device has no VK_KHR_cooperative_matrix)" in so, so + se
    print("ok")


if __name__ == "__main__":
    main()

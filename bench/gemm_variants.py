#!/usr/bin/python3
"""gemm_variants: a grid of GEMM kernel variants (tile shapes and the knobs of
shaders/matmul_cm.glsl and matmul_v4.glsl), compiled here and timed in one
command elsewhere by build/bench/gemm_variants (bench/README.md).

  gemm_variants.py build OUTDIR [--only REGEX] [--grid test] [--jobs N]
  gemm_variants.py run OUTDIR --bin PATH [SIZE ...] [--only REGEX]
                   [--reps R] [--warmup W] [--device N] [--stall S]
  gemm_variants.py list

build compiles each variant as shaders/meson.build does (glslangValidator
--target-env vulkan1.2 with -D defines; the cm ones then through
shaders/spv_coopmat_khr.py, --bf16 for bf16) into OUTDIR/NAME.spv with a
sidecar OUTDIR/NAME.txt (family, operand and result types, layout, tile,
workgroup size, shared bytes) that gemm_variants reads. --grid test builds
three small v4 variants only (tests/bench).

run needs python3 and the gemm_variants binary only. SIZE is MxNxK:LAYOUT
(default: the square 4096 and 8192 NN products and the GPT-small training
shapes NT 4096x768 K 3072, TN 768x3072 K 4096, NN 4096x3072 K 768); each
variant runs the sizes of its own layout. The binary's lines are printed as
they come; when it dies (a driver crash, or no output for --stall seconds)
the variant it was on is reported CRASH and the rest run in a fresh
process. At the end, the best OK variants of each size. Exit status 0 when
every line is OK or SKIP."""
import argparse
import concurrent.futures
import os
import re
import subprocess
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
SHADERS = os.path.join(HERE, "..", "shaders")
SHARED_LIMIT = 49152   # maxComputeSharedMemorySize on the H200 (and the Vulkan minimum is less)
DEFAULT_SIZES = ["4096x4096x4096:NN", "8192x8192x8192:NN", "4096x768x3072:NT",
                 "768x3072x4096:TN", "4096x3072x768:NN"]
CM_BASE = {"BM": 128, "BN": 128, "BK": 32, "WARPS_M": 2, "WARPS_N": 2, "FM": 4, "FN": 4}
LAYOUT_DEFS = {"NN": [], "NT": ["-DCM_TB"], "TN": ["-DCM_TA"]}
V4_SRC = {"NN": "matmul_nnp_v4.comp", "NT": "matmul_nt_v4.comp", "TN": "matmul_tn_v4.comp"}
# Knob names in variant names: db CM_DBUF, rG CM_RASTER=G, fp CM_FRAG_PF, dir CM_DIRECT, pN CM_PAD=N.
KNOBS = {"db": ("CM_DBUF", None), "fp": ("CM_FRAG_PF", None), "dir": ("CM_DIRECT", None)}


def cm(operand, layout, out16=True, tile=None, knobs=()):
    """One matmul_cm_khr.comp variant: tile overrides CM_BASE, knobs as in KNOBS
    plus rG (raster) and pN (padding)."""
    t = dict(CM_BASE, **(tile or {}))
    defs = {k: v for k, v in t.items() if CM_BASE[k] != v}
    for kn in knobs:
        if kn in KNOBS:
            defs[KNOBS[kn][0]] = KNOBS[kn][1]
        elif kn[0] == "r":
            defs["CM_RASTER"] = int(kn[1:])
        elif kn[0] == "p":
            defs["CM_PAD"] = int(kn[1:])
    shape = "%dx%dx%d" % (t["BM"], t["BN"], t["BK"])
    if (t["WARPS_M"], t["WARPS_N"]) != (2, 2) and shape in ("128x128x32", "128x128x16", "128x128x64"):
        shape += "w%dx%d" % (t["WARPS_M"], t["WARPS_N"])
    name = "cm_%s%s_%s_%s" % (operand, "" if out16 else "_f32out", layout.lower(), shape)
    if knobs:
        name += "_" + "_".join(knobs)
    if not out16:
        defs["CM_OUT_F32"] = None
    return {"name": name, "family": "cm", "operand": operand, "out": operand if out16 else "f32",
            "layout": layout, "tile": t, "defs": defs, "src": "matmul_cm_khr.comp"}


def v4(layout, raster=0, thr=(8, 8), wmap=False, spad=False):
    """One matmul_v4.glsl variant (128x128 tile, K step 16): thr is the
    results per invocation (8x8: 256 invocations; 8x16 or 16x8: 128), wmap
    and spad its MM_WMAP and MM_SPAD knobs."""
    defs = {"DT_F32": None}
    name = "v4_%s" % layout.lower()
    if raster:
        defs["MM_RASTER"] = raster
        name += "_r%d" % raster
    wg = 128 * 128 // (thr[0] * thr[1])
    if thr != (8, 8):
        defs.update(MM_WG=wg, MM_THR_M=thr[0], MM_THR_N=thr[1])
        name += "_t%dx%d" % thr
    if wmap:
        defs["MM_WMAP"] = None
        name += "_wm"
    if spad:
        defs["MM_SPAD"] = 1
        name += "_sp"
    return {"name": name, "family": "v4", "operand": "f32", "out": "f32", "layout": layout, "defs": defs,
            "src": V4_SRC[layout], "tile": {"BM": 128, "BN": 128, "BK": 16}, "wg": wg,
            "shared": 2 * 2 * 16 * (128 + (4 if spad else 0)) * 4}


def grid(which):
    """The variants: what TENSOR_CORES.md lists as untried (double buffering,
    rasterisation, fragment prefetch, padding) around the shipped 128x128x32
    2x2 tile and the tiles it measured (128x256, K step 64), mostly bf16."""
    if which == "test":
        return [v4("NN"), v4("NN", 4), v4("NT", 2)]
    w256 = {"BN": 256, "WARPS_N": 4}
    h256 = {"BM": 256, "WARPS_M": 4}
    g = [cm("bf16", "NN", knobs=k) for k in
         [(), ("p0",), ("p16",), ("db",), ("r4",), ("r8",), ("r16",), ("fp",), ("db", "r8"), ("db", "fp"),
          ("db", "r8", "fp"), ("db", "r8", "fp", "p16")]]
    g += [cm("bf16", "NN", tile=w256, knobs=k) for k in [(), ("r8",), ("r8", "fp"), ("db", "p0")]]
    g += [cm("bf16", "NN", tile=h256, knobs=k) for k in [(), ("db", "p0")]]
    g += [cm("bf16", "NN", tile={"BK": 64}, knobs=k) for k in [(), ("r8", "fp")]]
    g += [cm("bf16", "NN", tile={"BK": 16}, knobs=("db", "r8"))]
    g += [cm("bf16", "NN", tile={"WARPS_M": 4, "FM": 2}, knobs=())]
    g += [cm("f16", "NN", knobs=k) for k in [(), ("db", "r8", "fp")]]
    g += [cm("bf16", "NN", out16=False, knobs=k) for k in [(), ("db", "r8", "fp")]]
    g += [cm("bf16", "NN", knobs=("dir",)), cm("bf16", "NN", tile={"BK": 64}, knobs=("dir",)),
          cm("bf16", "NN", tile=w256, knobs=("dir",)), cm("bf16", "NN", tile={"WARPS_M": 4, "FM": 2}, knobs=("dir",)),
          cm("bf16", "NN", out16=False, knobs=("dir",))]
    for lay in ("NT", "TN"):
        g += [cm("bf16", lay), cm("bf16", lay, out16=False, knobs=("dir",))]
        g += [cm("bf16", lay, out16=False, knobs=k) for k in [(), ("db",), ("r8",), ("db", "r8", "fp")]]
    g += [v4("NN"), v4("NN", 4), v4("NN", 8), v4("NN", 16), v4("NT"), v4("TN")]
    return g + grid_v4()


def grid_v4():
    """The f32 variants: invocation grids, subgroup shapes and padding around
    the shipped 8x8-per-invocation tile, in every layout."""
    g = []
    for lay in ("NN", "NT", "TN"):
        for thr in ((8, 8), (8, 16), (16, 8)):
            for wmap, spad in ((False, False), (True, False), (False, True), (True, True)):
                if (thr, wmap, spad) != ((8, 8), False, False):   # the shipped ones: grid()'s
                    g.append(v4(lay, thr=thr, wmap=wmap, spad=spad))
    return g


def cm_shape(v):
    """Workgroup size and shared bytes of a cm variant, or a ValueError
    saying which of matmul_cm.glsl's tile rules it breaks."""
    t, d = v["tile"], v["defs"]
    wg = t["WARPS_M"] * t["WARPS_N"] * 32
    pad = d.get("CM_PAD", 8)
    a_in, a_out = (t["BM"], t["BK"]) if v["layout"] == "TN" else (t["BK"], t["BM"])
    b_in, b_out = (t["BK"], t["BN"]) if v["layout"] == "NT" else (t["BN"], t["BK"])
    nbuf = 0 if "CM_DIRECT" in d else 2 if "CM_DBUF" in d else 1
    shared = nbuf * (a_out * (a_in // 8 + pad // 8) + b_out * (b_in // 8 + pad // 8)) * 16
    rules = [(t["BM"] == t["WARPS_M"] * t["FM"] * 16 and t["BN"] == t["WARPS_N"] * t["FN"] * 16, "BM/BN"),
             (t["BK"] % 16 == 0 and pad % 8 == 0, "BK or CM_PAD"),
             ((t["BM"] * t["BK"] // 8) % wg == 0 and (t["BK"] * t["BN"] // 8) % wg == 0, "loads per invocation"),
             (wg % (a_in // 8) == 0 and wg % (b_in // 8) == 0, "rows per pass"),
             (shared <= SHARED_LIMIT, "shared memory %d" % shared)]
    for ok, what in rules:
        if not ok:
            raise ValueError("%s: breaks the tile rule on %s" % (v["name"], what))
    return wg, shared


def build_one(v, outdir, glslang):
    """Compile v into outdir/NAME.spv and write its sidecar; returns an error line or None."""
    spv = os.path.join(outdir, v["name"] + ".spv")
    defs = ["-D%s" % k if val is None else "-D%s=%s" % (k, val) for k, val in sorted(v["defs"].items())]
    if v["family"] == "cm":
        defs = LAYOUT_DEFS[v["layout"]] + defs
        wg, shared = cm_shape(v)
    else:
        wg, shared = v["wg"], v["shared"]
    target = spv + ".nv" if v["family"] == "cm" else spv
    cmd = [glslang, "-V", "--quiet", "--target-env", "vulkan1.2"] + defs + \
          ["-I" + SHADERS, "-o", target, os.path.join(SHADERS, v["src"])]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
    if p.returncode:
        return "%s: glslang: %s" % (v["name"], p.stdout.strip()[-400:])
    if v["family"] == "cm":
        cmd = [sys.executable, os.path.join(SHADERS, "spv_coopmat_khr.py")] + \
              (["--bf16"] if v["operand"] == "bf16" else []) + [target, spv]
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
        os.unlink(target)
        if p.returncode:
            return "%s: spv_coopmat_khr.py: %s" % (v["name"], p.stdout.strip()[-400:])
    t = v["tile"]
    with open(os.path.join(outdir, v["name"] + ".txt"), "w") as f:
        f.write("family %s\noperand %s\nout %s\nlayout %s\nbm %d\nbn %d\nbk %d\nwg %d\nshared %d\n"
                "defines %s\n" % (v["family"], v["operand"], v["out"], v["layout"], t["BM"], t["BN"],
                                  t["BK"], wg, shared, " ".join(defs) or "-"))
    return None


def cmd_build(args):
    variants = [v for v in grid(args.grid) if not args.only or re.search(args.only, v["name"])]
    os.makedirs(args.outdir, exist_ok=True)
    for v in variants:
        if v["family"] == "cm":
            cm_shape(v)   # refuse a bad grid before compiling anything
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as ex:
        errors = [e for e in ex.map(lambda v: build_one(v, args.outdir, args.glslang), variants) if e]
    for e in errors:
        print(e, file=sys.stderr)
    print("%d variants in %s%s" % (len(variants) - len(errors), args.outdir,
                                   ", %d failed" % len(errors) if errors else ""))
    return 1 if errors else 0


def run_bin(args, sizes, files, results):
    """One gemm_variants process over sizes x files; records lines into
    results {(name, size): line}. Returns None, or (size, name) of the
    variant it died on."""
    cmd = [args.bin, "--reps", str(args.reps), "--warmup", str(args.warmup)]
    if args.device is not None:
        cmd += ["--device", str(args.device)]
    for s in sizes:
        cmd += ["--size", s]
    p = subprocess.Popen(cmd + files, stdout=subprocess.PIPE, universal_newlines=True)
    stalled = []

    def stall():
        stalled.append(True)
        p.kill()
    timer = threading.Timer(args.stall, stall)
    timer.start()
    started = None
    for line in p.stdout:
        timer.cancel()
        timer = threading.Timer(args.stall, stall)
        timer.start()
        m = re.match(r"# start (\S+) (\S+)", line)
        if m:
            started = (m.group(2), m.group(1))
            continue
        if started and not line.startswith("#"):
            results[started] = line.rstrip()
            started = None
        if not line.startswith("# variant") or not results:
            print(line, end="", flush=True)
    timer.cancel()
    rc = p.wait()
    if started and (rc not in (0, 1) or stalled):
        return started
    if rc not in (0, 1):
        results[("-", "exit")] = "# gemm_variants exited with %d: FAIL" % rc
        print(results[("-", "exit")], flush=True)
    return None


def run_round(args, sizes, names, results, crashed):
    """Every size x variant once into results; a variant the process died
    on joins `crashed` and the rest runs in a new process."""
    jobs = [(list(sizes), names)]
    while jobs:
        jsizes, jnames = jobs.pop(0)
        files = [os.path.join(args.outdir, n + ".spv") for n in jnames if n not in crashed]
        died = run_bin(args, jsizes, files, results) if files else None
        if died:
            size, name = died
            crashed.add(name)
            results[died] = "%-36s %s CRASH (the process died here; the rest runs anew)" % (name, size)
            print(results[died], flush=True)
            i = jsizes.index(size)
            after = jnames[jnames.index(name) + 1:]
            jobs[:0] = [([size], after), (jsizes[i + 1:], jnames)] if i + 1 < len(jsizes) else [([size], after)]


def tflops(line):
    """A result line's TFLOP/s, or -1 when it is not OK."""
    f = line.split()
    return float(f[6]) if f[-1] == "OK" else -1.0


def cmd_run(args):
    sizes = args.sizes or DEFAULT_SIZES
    names = sorted(f[:-4] for f in os.listdir(args.outdir) if f.endswith(".spv"))
    names = [n for n in names if not args.only or re.search(args.only, n)]
    if not names:
        print("no variants in %s" % args.outdir, file=sys.stderr)
        return 2
    best, crashed = {}, set()
    for rnd in range(args.rounds):
        # Every other round walks the variants backwards, so that a drift of
        # the clocks over a run favours no variant for its place.
        results = {}
        run_round(args, sizes, names[::-1] if rnd % 2 else names, results, crashed)
        for key, line in results.items():
            old = best.get(key)
            # the fastest OK line; a FAIL or CRASH in any round stands
            if old is None or (tflops(old) >= 0 and (tflops(line) > tflops(old) or line.split()[-1] == "FAIL" or
                                                     " CRASH " in line)):
                best[key] = line
    results = best
    if args.rounds > 1:
        print("# the best of %d rounds" % args.rounds)
        for key in sorted(results):
            print(results[key])
    print("# best OK variants per size (TFLOP/s)")
    for s in sizes:
        ok = []
        for (size, name), line in results.items():
            f = line.split()
            if size == s and f[-1] == "OK":
                ok.append((float(f[6]), name))
        ok.sort(reverse=True)
        print("# %-20s %s" % (s, "  ".join("%s %.1f" % (n, t) for t, n in ok[:5]) or "-"))
    bad = [ln for ln in results.values() if ln.split()[-1] not in ("OK",) and " SKIP " not in ln]
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("outdir")
    b.add_argument("--only", help="names matching this regular expression")
    b.add_argument("--grid", default="full", choices=["full", "test"])
    b.add_argument("--jobs", type=int, default=2)
    b.add_argument("--glslang", default="glslangValidator")
    r = sub.add_parser("run")
    r.add_argument("outdir")
    r.add_argument("sizes", nargs="*", help="MxNxK:LAYOUT")
    r.add_argument("--bin", required=True, help="the gemm_variants binary")
    r.add_argument("--only", help="names matching this regular expression")
    r.add_argument("--reps", type=int, default=20)
    r.add_argument("--warmup", type=int, default=5)
    r.add_argument("--rounds", type=int, default=1, help="runs over every variant; the best of each is kept")
    r.add_argument("--device", type=int)
    r.add_argument("--stall", type=float, default=120, help="seconds without output before a kill")
    sub.add_parser("list")
    args, extra = ap.parse_known_args()
    # Sizes may come after the options too (argparse leaves them over).
    if extra and (args.cmd != "run" or not all(re.match(r"^\d+x\d+x\d+:(NN|NT|TN)$", e) for e in extra)):
        ap.error("unrecognized arguments: %s" % " ".join(extra))
    if extra:
        args.sizes += extra
    if args.cmd == "build":
        return cmd_build(args)
    if args.cmd == "run":
        return cmd_run(args)
    for v in grid("full"):
        print(v["name"])
    return 0


if __name__ == "__main__":
    sys.exit(main())

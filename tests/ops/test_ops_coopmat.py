"""matmul on cooperative matrices (tensor cores): products of whole 128x128
tiles with K a multiple of 32, f16 and bf16, in the layouts NN, NT
(transpose_b) and TN (transpose_a), against the float64 NumPy reference,
with the kernel each ran checked in the dispatch trace
(TENSORD_TRACE_DISPATCHES) against the choice the daemon logged at start-up
(daemon/gpu/coopmat.c):

  VK_KHR_cooperative_matrix  f16 on matmul_cm_khr.f16; bf16 on
                             matmul_cm_khr.bf16 when the daemon has bf16
                             matrices unless TENSORD_COOPMAT_BF16=0, else scalar
  VK_NV_cooperative_matrix   f16 on matmul_cm.f16, bf16 scalar
  none (lavapipe)            the scalar kernels

NT runs the family's _nt module (matmul_cm_khr_nt.f16, matmul_cm_nt.f16...),
TN its _tn module; both operands transposed (TT) take the scalar kernels.

Autocast (mixed precision, docs/training.md): f32 products of a train.step
with precision "bf16" run on matmul_cm_khr_f32out{,_nt,_tn}.bf16 (bf16
operands, the f32 accumulators stored as the f32 result; shapes short of
whole tiles over operands padded with zeros by cast_pad.f32_bf16) where the daemon
has KHR bf16 matrices (unless TENSORD_COOPMAT_BF16=0), else on the scalar
kernels over operands rounded to bf16; with precision "f16" on the .f16
modules of the same family wherever the daemon has KHR matrices (all take
f16), else the scalar kernels over operands rounded to f16. The step's loss reads the product
and a separate parameter only, so no backward product runs; the product
comes back through `outputs`, exact for small integers and within f32
accumulation's error of the bf16-rounded operands' float64 product otherwise.

Small-integer operands make every product exact in f32 accumulation and in
the 16-bit result, so a wrong layout, Use or tile shows as a wrong value, not
as a tolerance question. On lavapipe this runs the fallback; run it on an
NVIDIA GPU (and there with TENSORD_COOPMAT=nv, and with
TENSORD_COOPMAT_BF16=0) before claiming a tensor-core figure."""
import os

import numpy as np

import harness
import ref_linalg as ref

rng = np.random.default_rng(3333)
TOL = {"f16": (5e-3, 5e-3), "bf16": (3e-2, 3e-2)}
# (a shape, b shape), logical ([.., M, K] @ [.., K, N]; a transposed
# operand is stored with its last two dims swapped): whole tiles (batched,
# broadcast), then shapes that must not take the tensor-core path (M not a
# multiple of 128, K of 32).
TILES = [((128, 32), (32, 128)), ((256, 96), (96, 384)), ((512, 256), (256, 128)),
         ((3, 128, 64), (3, 64, 256)), ((2, 128, 32), (32, 128)), ((128, 32), (4, 32, 128))]
NOT_TILES = [((130, 32), (32, 128)), ((128, 40), (40, 128)), ((128, 48), (48, 96))]
# Autocast products whose N is a multiple of 64 but not of 128 (an
# attention's P @ V over heads of 64): the narrow 128x64 modules.
TILES_N64 = [((128, 32), (32, 64)), ((3, 256, 512), (3, 512, 64)), ((256, 96), (96, 192))]
# Autocast products that zeros make whole tiles at little cost (M a multiple
# of 16 padded to 128, K padded to 32, at most 1.3x the work, or K within
# one K step: the 784-input MLP's first layer, a classifier's input
# gradient): the same modules over padded copies (cast_pad.comp).
TILES_PAD = [((784, 64), (64, 128)), ((256, 200), (200, 128)), ((784, 784), (784, 256)),
             ((256, 10), (10, 128))]
# Weight-gradient-shaped products (TN) of few tiles and many terms: split K
# on a GPU of 16 or more compute units (partials summed by matmul_reduce),
# whole tiles or padded.
TILES_SPLIT = [((256, 4096), (4096, 128)), ((784, 2000), (2000, 128))]
# (name, transpose_a, transpose_b, the module suffix; None: scalar only).
LAYOUTS = [("NN", False, False, ""), ("NT", False, True, "_nt"), ("TN", True, False, "_tn"),
           ("TT", True, True, None)]


def choice(log):
    """What the daemon chose, from its start-up log: 'khr', 'nv' or None,
    and whether it has bf16 matrices."""
    with open(log, errors="replace") as f:
        text = f.read()
    if "(VK_KHR_cooperative_matrix" in text:
        return "khr", "bf16 matrices ready" in text
    if "(VK_NV_cooperative_matrix)" in text:
        return "nv", False
    return None, False


def expected(kind, has_bf16, dtype, tile, suffix=""):
    """The shader a product should run, or None for the scalar kernels
    (suffix: the layout's, None where no module takes it)."""
    if not tile or suffix is None:
        return None
    if dtype == "f16" and kind:
        return ("matmul_cm_khr%s.f16" if kind == "khr" else "matmul_cm%s.f16") % suffix
    if dtype == "bf16" and kind == "khr" and has_bf16 and os.environ.get("TENSORD_COOPMAT_BF16") != "0":
        return "matmul_cm_khr%s.bf16" % suffix
    return None


def expected_autocast(kind, has_bf16, tile, suffix, narrow=False, prec="bf16", epi=False):
    """The shader an autocast (`prec`: bf16 or f16) f32 product should run,
    or None (narrow: the 128x64 modules; epi: a product with an epilogue,
    on the 128-wide modules that apply it)."""
    if not tile or suffix is None or kind != "khr":
        return None
    if prec == "bf16" and (not has_bf16 or os.environ.get("TENSORD_COOPMAT_BF16") == "0"):
        return None
    return "matmul_cm_khr_f32out%s%s.%s" % ("_n64" if narrow else "_epi" if epi else "", suffix, prec)


def stored(x, transposed):
    """An operand as stored: its last two dims swapped when read transposed."""
    return np.ascontiguousarray(np.swapaxes(x, -1, -2)) if transposed else x


class Traced(harness.Traced):
    def check(self, a, b, dtype, want, label, tol, ta=False, tb=False):
        """a and b logical ([.., M, K], [.., K, N]), put as stored."""
        self.shaders()
        attrs = {"transpose_a": True} if ta else {}
        if tb:
            attrs["transpose_b"] = True
        self.ck.check("matmul", [stored(a, ta), stored(b, tb)], [dtype, dtype], ref.matmul_t(ta, tb),
                      attrs=attrs or None, tol=tol, label=" " + label)
        ran = self.shaders()
        self.ck.checks += 1
        cm = [s for s in ran if s.startswith("matmul_cm")]
        if want is None and cm:
            self.ck.fail("%s %s: ran %s, want the scalar kernels" % (label, dtype, ran))
        elif want is not None and want not in ran:
            self.ck.fail("%s %s: ran %s, want %s" % (label, dtype, ran, want))

    def check_autocast(self, a, b, want, label, ta=False, tb=False, prec="bf16", padded=False, split=False,
                       act=None):
        """y = matmul(a, b) in a train.step with precision `prec` (bf16 or
        f16; f32 operands; the loss also reads a parameter of its own, so no
        backward product runs), against a @ b on operands rounded to it;
        with `act` "relu" plus a bias and relu, "relu_grad" kept where a
        mask is > 0 (the epilogue: in the 128-wide tensor-core kernel's
        stores, matmul_cm_khr_f32out_epi*, or in a split product's sum;
        after the narrow kernels by matmul_epi_apply)."""
        label = "%s %s%s" % (prec, label, " " + act if act else "")
        c = self.ck.c
        self.shaders()
        attrs = {"transpose_a": ta, "transpose_b": tb}
        c.put("ac.a", stored(a, ta), "f32")
        c.put("ac.b", stored(b, tb), "f32")
        c.put("ac.p", np.zeros(1), "f32")
        inputs = ["ac.a", "ac.b"]
        extra = None
        if act:
            shape = (a.shape[-2], b.shape[-1]) if act == "relu_grad" else (b.shape[-1],)
            extra = rng.uniform(-1, 1, size=shape).astype(np.float32)
            c.put("ac.e", extra, "f32")
            inputs.append("ac.e")
            attrs["activation"] = act
        nodes = [{"id": "y", "op": "matmul", "inputs": inputs, "attrs": attrs},
                 {"id": "s", "op": "sum", "inputs": ["y"]}, {"id": "q", "op": "sum", "inputs": ["ac.p"]},
                 {"id": "loss", "op": "add", "inputs": ["s", "q"]}]
        err, res = c.call("train.step", {"nodes": nodes, "loss": "loss", "params": ["ac.p"], "outputs": ["y"],
                                         "precision": prec})
        ran = self.shaders()
        self.ck.checks += 1
        if err is not None:
            self.ck.fail("%s autocast: %s" % (label, err))
            return
        y = harness.result_array(res["outputs"]["y"]).astype(np.float64)
        # rounded from the f32 values the daemon holds (no double rounding)
        ra, rb = (harness.quantize(np.asarray(v, np.float32), prec) for v in (a, b))
        ref_y = ra @ rb
        tol = 8 * 2.0**-24 * (np.abs(ra) @ np.abs(rb))
        if act == "relu":
            ref_y = np.maximum(ref_y + extra.astype(np.float64), 0)
            tol = tol + 2.0**-24 * np.abs(ref_y)
        elif act == "relu_grad":
            ref_y = np.where(extra > 0, ref_y, 0)
        if not np.all(np.abs(y - ref_y) <= tol):
            self.ck.fail("%s autocast: off the rounded operands' product by %.3g" % (label, np.abs(y - ref_y).max()))
        cm = [s for s in ran if s.startswith("matmul_cm")]
        if want is None and cm:
            self.ck.fail("%s autocast: ran %s, want the scalar kernels" % (label, ran))
        elif want is not None and want not in ran:
            self.ck.fail("%s autocast: ran %s, want %s" % (label, ran, want))
        elif want is not None and padded != ("cast_pad.f32_%s" % prec in ran):
            self.ck.fail("%s autocast: ran %s, want padded operands %s" % (label, ran, padded))
        elif want is not None and split and "matmul_reduce.f32" not in ran:
            self.ck.fail("%s autocast: ran %s, want K split (matmul_reduce.f32)" % (label, ran))
        elif want is not None and act and ("matmul_epi_apply.f32" in ran) != ("_n64" in want):
            self.ck.fail("%s autocast: ran %s, want the epilogue %s" % (
                label, ran, "after the narrow kernel" if "_n64" in want else "in the kernel or the split's sum"))


def main():
    os.environ["TENSORD_TRACE_DISPATCHES"] = "1"
    try:
        d = harness.Daemon(extra_args=["-v"]).start()
    finally:
        os.environ.pop("TENSORD_TRACE_DISPATCHES", None)
    with d:
        kind, has_bf16 = choice(d.log)
        print("cooperative matrices: %s%s" % (kind or "none", ", bf16" if has_bf16 else ""))
        ck = harness.Checker(harness.Client(d.sock))
        t = Traced(ck, d.log)
        for dtype in ("f16", "bf16"):
            for lay, ta, tb, suffix in LAYOUTS:
                for sa, sb in TILES:
                    want = expected(kind, has_bf16, dtype, True, suffix)
                    a = rng.integers(-1, 2, size=sa).astype(np.float64)
                    b = rng.integers(-1, 2, size=sb).astype(np.float64)
                    t.check(a, b, dtype, want, "(%s exact %s @ %s)" % (lay, sa, sb), (0, 0), ta, tb)
                    t.check(rng.uniform(-1, 1, size=sa), rng.uniform(-1, 1, size=sb), dtype, want,
                            "(%s %s @ %s)" % (lay, sa, sb), TOL[dtype], ta, tb)
                for sa, sb in NOT_TILES:
                    t.check(rng.uniform(-1, 1, size=sa), rng.uniform(-1, 1, size=sb), dtype, None,
                            "(%s not tiles %s @ %s)" % (lay, sa, sb), TOL[dtype], ta, tb)
        for prec in ("bf16", "f16"):
            for lay, ta, tb, suffix in LAYOUTS:
                for sa, sb in TILES:
                    want = expected_autocast(kind, has_bf16, True, suffix, prec=prec)
                    t.check_autocast(rng.integers(-1, 2, size=sa).astype(np.float64),
                                     rng.integers(-1, 2, size=sb).astype(np.float64), want,
                                     "(%s exact %s @ %s)" % (lay, sa, sb), ta, tb, prec)
                    t.check_autocast(rng.uniform(-1, 1, size=sa), rng.uniform(-1, 1, size=sb), want,
                                     "(%s %s @ %s)" % (lay, sa, sb), ta, tb, prec)
                    want_epi = expected_autocast(kind, has_bf16, True, suffix, prec=prec, epi=True)
                    for act in ("relu", "relu_grad") if len(sa) == len(sb) == 2 else ():
                        t.check_autocast(rng.uniform(-1, 1, size=sa), rng.uniform(-1, 1, size=sb), want_epi,
                                         "(%s %s @ %s)" % (lay, sa, sb), ta, tb, prec, act=act)
                for sa, sb in TILES_N64:
                    want = expected_autocast(kind, has_bf16, True, suffix, narrow=True, prec=prec)
                    t.check_autocast(rng.integers(-1, 2, size=sa).astype(np.float64),
                                     rng.integers(-1, 2, size=sb).astype(np.float64), want,
                                     "(%s exact narrow %s @ %s)" % (lay, sa, sb), ta, tb, prec)
                    t.check_autocast(rng.uniform(-1, 1, size=sa), rng.uniform(-1, 1, size=sb), want,
                                     "(%s narrow %s @ %s)" % (lay, sa, sb), ta, tb, prec)
                    for act in ("relu", "relu_grad") if len(sa) == len(sb) == 2 else ():
                        t.check_autocast(rng.uniform(-1, 1, size=sa), rng.uniform(-1, 1, size=sb), want,
                                         "(%s narrow %s @ %s)" % (lay, sa, sb), ta, tb, prec, act=act)
                for sa, sb in TILES_PAD:
                    want = expected_autocast(kind, has_bf16, True, suffix, prec=prec)
                    t.check_autocast(rng.integers(-1, 2, size=sa).astype(np.float64),
                                     rng.integers(-1, 2, size=sb).astype(np.float64), want,
                                     "(%s exact padded %s @ %s)" % (lay, sa, sb), ta, tb, prec, True)
                    t.check_autocast(rng.uniform(-1, 1, size=sa), rng.uniform(-1, 1, size=sb), want,
                                     "(%s padded %s @ %s)" % (lay, sa, sb), ta, tb, prec, True)
                    # (TN 784x784 @ 784x256 splits K on a GPU: its epilogue is
                    # the sum's, as TILES_SPLIT checks)
                    want_epi = expected_autocast(kind, has_bf16, True, suffix, prec=prec, epi=True)
                    for act in ("relu", "relu_grad") if (lay, sa) != ("TN", (784, 784)) else ():
                        t.check_autocast(rng.uniform(-1, 1, size=sa), rng.uniform(-1, 1, size=sb), want_epi,
                                         "(%s padded %s @ %s)" % (lay, sa, sb), ta, tb, prec, True, act=act)
            for sa, sb in TILES_SPLIT:
                # TN only (NN and NT are not split); every GPU with KHR
                # matrices has the 16 compute units that splitting needs
                want = expected_autocast(kind, has_bf16, True, "_tn", prec=prec)
                padded, split = sa[0] % 128 != 0, want is not None
                t.check_autocast(rng.integers(-1, 2, size=sa).astype(np.float64),
                                 rng.integers(-1, 2, size=sb).astype(np.float64), want,
                                 "(TN exact split %s @ %s)" % (sa, sb), True, False, prec, padded, split)
                t.check_autocast(rng.uniform(-1, 1, size=sa), rng.uniform(-1, 1, size=sb), want,
                                 "(TN split %s @ %s)" % (sa, sb), True, False, prec, padded, split)
                t.check_autocast(rng.uniform(-1, 1, size=sa), rng.uniform(-1, 1, size=sb), want,
                                 "(TN split %s @ %s)" % (sa, sb), True, False, prec, padded, split, act="relu")
            for lay, ta, tb, suffix in LAYOUTS:
                for sa, sb in NOT_TILES:
                    t.check_autocast(rng.uniform(-1, 1, size=sa), rng.uniform(-1, 1, size=sb), None,
                                     "(%s not tiles %s @ %s)" % (lay, sa, sb), ta, tb, prec)
    print("%d checks, %d failed" % (ck.checks, ck.failures))
    raise SystemExit(1 if ck.failures else 0)


if __name__ == "__main__":
    main()

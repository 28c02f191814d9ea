"""attention, attention_lse and attention_grad (f32) against
ref_attention.py: causal and not, query and key lengths that are not
multiples of the tiles (1, 7, 65, 130), every head-dim variant (hd 16 to 128
and sizes between them), a scale attr, key lengths whose loops would pass
lavapipe's iteration limit were the head dim not unrolled, and bad input
(a refused head dim, shapes, dtypes, wrt)."""
import numpy as np

import harness
import ref_attention as ref

rng = np.random.default_rng(4242)
TOL = (2e-5, 2e-4)


def qkv(n, t, s, hd):
    return rng.normal(size=(n, t, hd)), rng.normal(size=(n, s, hd)), rng.normal(size=(n, s, hd))


def case(ck, n, t, s, hd, causal, scale=None, grads=True):
    q, k, v = qkv(n, t, s, hd)
    a = {"causal": causal}
    if scale is not None:
        a["scale"] = scale
    f32 = ["f32"] * 3
    ck.check("attention", [q, k, v], f32, lambda q, k, v: ref.attention(q, k, v, causal, scale), a, tol=TOL)
    if not grads:
        return
    ck.check("attention_lse", [q, k], f32[:2], lambda q, k: ref.lse(q, k, causal, scale), a, tol=TOL)
    g = rng.normal(size=(n, t, hd))
    # the helpers' lse and D as the backward rule computes them
    lse = ref.lse(harness.quantize(q, "f32"), harness.quantize(k, "f32"), causal, scale)
    o = ref.attention(*(harness.quantize(x, "f32") for x in (q, k, v)), causal, scale)
    d = (harness.quantize(g, "f32") * o).sum(axis=-1)
    for w, idx in (("q", 0), ("k", 1), ("v", 2)):
        ck.check("attention_grad", [q, k, v, g, lse, d], ["f32"] * 6,
                 lambda q, k, v, g, lse, d, idx=idx: ref.grads(q, k, v, g, causal, scale)[idx],
                 dict(a, wrt=w), tol=(1e-4, 1e-3), label=" wrt " + w)


def error_cases(ck):
    c = ck.c
    c.put("aq", rng.normal(size=(2, 4, 8)), "f32")
    c.put("ak", rng.normal(size=(2, 5, 8)), "f32")
    c.put("big", rng.normal(size=(1, 2, 130)), "f32")
    c.put("ak3", rng.normal(size=(3, 5, 8)), "f32")
    c.put("ak7", rng.normal(size=(2, 5, 7)), "f32")
    c.put("a16", rng.normal(size=(2, 4, 8)), "f16")
    c.put("a2", rng.normal(size=(4, 8)), "f32")
    c.put("k0", np.zeros((2, 0, 8)), "f32")
    c.put("long", np.zeros((1, 300000, 16)), "f32")
    ck.expect_error("attention", ["big", "big", "big"], None, "INVALID_ARGUMENT", " hd 130")
    ck.expect_error("attention", ["aq", "ak3", "ak3"], None, "SHAPE_MISMATCH", " N differs")
    ck.expect_error("attention", ["aq", "ak7", "ak7"], None, "SHAPE_MISMATCH", " hd differs")
    ck.expect_error("attention", ["aq", "ak", "aq"], None, "SHAPE_MISMATCH", " v's S differs")
    ck.expect_error("attention", ["a16", "a16", "a16"], None, "DTYPE_MISMATCH", " f16")
    ck.expect_error("attention", ["a2", "a2", "a2"], None, "INVALID_ARGUMENT", " rank 2")
    ck.expect_error("attention", ["aq", "k0", "k0"], None, "INVALID_ARGUMENT", " no keys")
    ck.expect_error("attention", ["aq", "long", "long"], None, "SHAPE_MISMATCH", " long, hd differs")
    c.put("lq", np.zeros((1, 1, 16)), "f32")
    ck.expect_error("attention", ["lq", "long", "long"], None, "RESOURCE_EXHAUSTED", " 300000 keys")
    ck.expect_error("attention_grad", ["aq", "ak", "ak", "aq", "a2", "a2"], {"wrt": "x"}, "INVALID_ARGUMENT",
                    " wrt x")
    ck.expect_error("attention_grad", ["aq", "ak", "ak", "aq", "a2", "a2"], {"wrt": "q"}, "SHAPE_MISMATCH",
                    " lse shape")


def run(ck):
    for t, s, hd, causal in ((1, 1, 16, False), (7, 7, 16, True), (65, 65, 64, True), (65, 65, 64, False),
                             (130, 130, 32, True), (7, 130, 128, False), (130, 7, 128, False),
                             (66, 65, 128, True), (5, 9, 24, True), (33, 70, 100, False), (3, 4, 1, False),
                             (9, 13, 30, True)):
        case(ck, 2, t, s, hd, causal)
    case(ck, 3, 9, 11, 64, False, scale=0.3)
    case(ck, 1, 9, 11, 16, True, scale=2.0)
    # loops: 2100 keys at hd 64 would be about 270k iterations per
    # invocation with the head dim as a loop (lavapipe stops at 65535)
    case(ck, 1, 3, 2100, 64, False, grads=False)
    case(ck, 1, 70, 1030, 128, True)
    # the longest key run a pass takes at hd 128 (1818 tiles of 32, each
    # 1 + 32/2 blocks + 16 loads: 59994 iterations), and one key (so one
    # tile) more refused
    case(ck, 1, 2, 58176, 128, False, grads=False)
    ck.c.put("q128", rng.normal(size=(1, 2, 128)), "f32")
    ck.c.put("k58177", rng.normal(size=(1, 58177, 128)), "f32")
    ck.expect_error("attention", ["q128", "k58177", "k58177"], None, "RESOURCE_EXHAUSTED", " 58177 keys")
    # the same at hd 64 (1818 tiles of 64, each 1 + 64/4 blocks + 16 loads)
    case(ck, 1, 2, 116352, 64, False, grads=False)
    ck.c.put("q64", rng.normal(size=(1, 2, 64)), "f32")
    ck.c.put("k116353", rng.normal(size=(1, 116353, 64)), "f32")
    ck.expect_error("attention", ["q64", "k116353", "k116353"], None, "RESOURCE_EXHAUSTED", " 116353 keys")
    # empty
    case(ck, 2, 0, 5, 16, False, grads=False)
    error_cases(ck)


if __name__ == "__main__":
    harness.main(run)

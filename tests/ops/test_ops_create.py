"""Creation ops (zeros, ones, full, arange, rand, randn) and cast against
ref_create.py: every dtype, rank 0 and zero-size shapes, value conversion
(rounding, truncation, saturation, NaN), Philox bits against an independent
NumPy implementation checked on Random123's known-answer vectors,
reproducibility, statistics of 1M samples, and bad attributes."""
import numpy as np

import harness
import ref_create as ref
import ref_layout

EXACT = (0, 0)


def run_fill(ck):
    for dt in harness.ALL_DTYPES:
        for shape in ([], [0, 3], [5, 7], [300]):
            ck.check("zeros", [], [], lambda: np.zeros(shape), attrs={"shape": shape, "dtype": dt},
                     out_dtype=dt, tol=EXACT)
            ck.check("ones", [], [], lambda: np.ones(shape), attrs={"shape": shape, "dtype": dt},
                     out_dtype=dt, tol=EXACT)
        for v in (2.5, -3.7, 0.1, 1e10, -1e10, 300, float("nan"), float("inf")):
            ck.check("full", [], [], lambda v=v: np.full((2, 3), ref_layout.fill_value(v, dt)),
                     attrs={"shape": [2, 3], "value": v, "dtype": dt}, out_dtype=dt, tol=EXACT)
    ck.check("zeros", [], [], lambda: np.zeros((4,)), attrs={"shape": 4}, out_dtype="f32", label="(default dtype)")
    ck.check("full", [], [], lambda: np.full((3,), 7.0), attrs={"shape": [3], "value": 7}, out_dtype="f32")
    # integers into i32 are exact (not rounded through f32), as docs/ops.md says
    for v in (16777217, -16777217, 2**31 - 1, -2**31, 123456789):
        ck.check("full", [], [], lambda v=v: np.full((3,), v), attrs={"shape": [3], "value": v, "dtype": "i32"},
                 out_dtype="i32", tol=EXACT, label="(exact %d)" % v)


def run_arange(ck):
    cases = [  # attrs, default result dtype
        ({"stop": 10}, "i32"),
        ({"start": 3, "stop": -7, "step": -2}, "i32"),
        ({"start": 0, "stop": 1, "step": 0.1}, "f32"),
        ({"start": -1.5, "stop": 300.25}, "f32"),
        ({"start": 5, "stop": 5}, "i32"),
        ({"start": 5, "stop": 0}, "i32"),
        ({"start": 2**31 - 3, "stop": 2**31}, "i32"),
    ]
    for attrs, dt in cases:
        a = dict(attrs)
        want = ref.arange(a.get("start", 0), a["stop"], a.get("step", 1))
        ck.check("arange", [], [], lambda w=want: w, attrs=a, out_dtype=dt)
    for dt in harness.ALL_DTYPES:
        a = {"start": 1, "stop": 200, "step": 3, "dtype": dt}
        ck.check("arange", [], [], lambda: ref.arange(1, 200, 3), attrs=a, out_dtype=dt)
    ck.check("arange", [], [], lambda: ref.arange(-2**31, 2**31 - 1, 2**32 - 2), out_dtype="i32",
             attrs={"start": -2**31, "stop": 2**31 - 1, "step": 2**32 - 2}, label="(step beyond int32)")
    ck.check("arange", [], [], lambda: ref.arange(0, 70000, 1), attrs={"stop": 70000, "dtype": "f16"},
             out_dtype="f16", label="(f16 overflow to inf)")


def run_random(ck):
    c = ck.c
    for dt in harness.FLOAT_DTYPES:
        for op in ("rand", "randn"):
            for seed in (0, 12345, -1, 2**63 - 1):
                n = 1003
                err, res = c.run(op, [], {"shape": [n], "seed": seed, "dtype": dt})
                ck.checks += 1
                if err:
                    ck.fail("%s %s seed %d: %s" % (op, dt, seed, err))
                    continue
                got = harness.result_array(res).astype(np.float64)
                want = ref.rand(n, seed, dt) if op == "rand" else harness.quantize(ref.randn(n, seed), dt)
                tol = {"f32": (2e-5, 1e-5), "f16": (2e-3, 2e-3), "bf16": (1.6e-2, 1.6e-2)}[dt]
                if op == "rand":
                    tol = EXACT
                bad = ~np.isclose(got, want, atol=tol[0], rtol=tol[1])
                if bad.any() or res["dtype"] != dt:
                    i = int(np.argmax(bad))
                    ck.fail("%s %s seed %d: %d of %d differ from the NumPy Philox; first at %d: got %r want %r"
                            % (op, dt, seed, int(bad.sum()), n, i, got[i], want[i]))
                if op == "rand" and not ((got >= 0) & (got < 1)).all():
                    ck.fail("rand %s: values outside [0, 1)" % dt)

    # the same seed gives the same bits (another request, another shape); a
    # different seed gives different values
    _, a = c.run("randn", [], {"shape": [64, 33], "seed": 7})
    _, b = c.run("randn", [], {"shape": [2112], "seed": 7})
    _, d = c.run("randn", [], {"shape": [64, 33], "seed": 8})
    ck.checks += 2
    if a["data"] != b["data"]:
        ck.fail("randn: the same seed gave different bits")
    if np.mean(harness.result_array(a) == harness.result_array(d)) > 0.01:
        ck.fail("randn: seeds 7 and 8 gave mostly equal values")

    # statistics of 2^20 samples: bounds of about 5 standard errors
    n = 1 << 20
    _, r = c.run("rand", [], {"shape": [n], "seed": 99})
    _, g = c.run("randn", [], {"shape": [1024, 1024], "seed": 99})
    u = harness.result_array(r).astype(np.float64)
    z = harness.result_array(g).astype(np.float64).ravel()
    stats = [
        ("rand mean", u.mean(), 0.5, 5 * np.sqrt(1 / 12 / n)),
        ("rand var", u.var(), 1 / 12, 0.001),
        ("rand P(u < 0.1)", np.mean(u < 0.1), 0.1, 0.0015),
        ("randn mean", z.mean(), 0.0, 5 / np.sqrt(n)),
        ("randn std", z.std(), 1.0, 0.004),
        ("randn P(|z| < 1)", np.mean(np.abs(z) < 1), 0.682689, 0.003),
        ("randn P(z > 3)", np.mean(z > 3), 0.0013499, 0.0002),
    ]
    for what, got, want, tol in stats:
        ck.checks += 1
        if abs(got - want) > tol:
            ck.fail("%s = %.6f, want %.6f +- %.6f" % (what, got, want, tol))
    ck.checks += 1
    if not (u.min() >= 0 and u.max() < 1 and np.isfinite(z).all()):
        ck.fail("rand/randn: values out of range")
    ck.check("rand", [], [], lambda: np.zeros((0, 5)), attrs={"shape": [0, 5], "seed": 1}, label="(zero size)")
    ck.check("randn", [], [], lambda: ref.randn(1, 3).reshape(()), attrs={"shape": [], "seed": 3},
             tol=(2e-5, 1e-5), label="(rank 0)")


CAST_VALUES = {
    "float": [0.0, -0.0, 1.5, -1.5, 2.5, -2.7, 0.1, 255.9, 256.0, 300.0, -300.0, 65504.0, 65520.0, 70000.0,
              1e-8, 3e-5, 6e-8, 2.0**-24 * 1.5, 1e10, -1e10, 2.0**31, -2.0**31, 16777217.0,
              float("nan"), float("inf"), float("-inf")],
    "i32": [0, 1, -1, 127, 255, 256, -129, 65504, 65520, 70000, 16777217, 2**31 - 1, -2**31, 1234567],
    "u8": [0, 1, 127, 128, 200, 255],
}


def run_cast(ck):
    rng = np.random.default_rng(77)
    for src in harness.ALL_DTYPES:
        kind = src if src in ("i32", "u8") else "float"
        vals = np.array(CAST_VALUES[kind], dtype=np.float64 if kind == "float" else np.int64)
        extra = rng.uniform(-300, 300, size=517) if kind == "float" else rng.integers(0, 256, size=517)
        x = np.concatenate([vals, extra.astype(vals.dtype)])
        for dst in harness.ALL_DTYPES:
            ck.check("cast", [x], [src], lambda q, dst=dst: ref.cast(q, dst), attrs={"dtype": dst},
                     out_dtype=dst, tol=EXACT)
        ck.check("cast", [np.zeros((0, 3))], [src], lambda q: q, attrs={"dtype": "f32"}, out_dtype="f32",
                 label="(zero size)")
    # round to nearest even: halfway cases of f16 and bf16
    ties = np.array([1 + 2.0**-11, 1 + 3 * 2.0**-11, 1 + 2.0**-8, 1 + 3 * 2.0**-8, 2049.0, 2051.0])
    for dst, want in (("f16", [1.0, 1 + 2**-9, 1 + 2**-8, 1 + 3 * 2**-8, 2048.0, 2052.0]),
                      ("bf16", [1.0, 1.0, 1.0, 1 + 2**-6, 2048.0, 2048.0])):
        ck.check("cast", [ties], ["f32"], lambda q, w=want: np.array(w), attrs={"dtype": dst}, out_dtype=dst,
                 tol=EXACT, label="(ties to even)")


def run_errors(ck):
    ck.c.put("e_x", np.zeros((2, 3)), "f32")
    bad = [
        ("zeros", [], None, "INVALID_ARGUMENT"),
        ("zeros", [], {"shape": [-1]}, "INVALID_ARGUMENT"),
        ("zeros", [], {"shape": [2], "dtype": "f64"}, "INVALID_ARGUMENT"),
        ("zeros", [], {"shape": "abc"}, "INVALID_ARGUMENT"),
        ("zeros", [], {"shape": [2**40, 2**40]}, "RESOURCE_EXHAUSTED"),
        ("zeros", [], {"shape": [2**62, 2**62, 2**62]}, "RESOURCE_EXHAUSTED"),
        ("zeros", ["e_x"], {"shape": [2]}, "INVALID_ARGUMENT"),
        ("full", [], {"shape": [2]}, "INVALID_ARGUMENT"),
        ("full", [], {"shape": [2], "value": "x"}, "INVALID_ARGUMENT"),
        ("arange", [], {}, "INVALID_ARGUMENT"),
        ("arange", [], {"stop": 5, "step": 0}, "INVALID_ARGUMENT"),
        ("arange", [], {"stop": float("inf")}, "INVALID_ARGUMENT"),
        ("arange", [], {"stop": 1e300, "step": 1e-300}, "RESOURCE_EXHAUSTED"),
        ("arange", [], {"stop": 300, "dtype": "u8"}, "INVALID_ARGUMENT"),
        ("arange", [], {"start": -1, "stop": 3, "dtype": "u8"}, "INVALID_ARGUMENT"),
        ("arange", [], {"stop": 3, "step": 0.5, "dtype": "i32"}, "INVALID_ARGUMENT"),
        ("arange", [], {"stop": 2**32}, "RESOURCE_EXHAUSTED"),
        ("arange", [], {"start": 2**31, "stop": 2**31 + 2}, "INVALID_ARGUMENT"),
        ("rand", [], {"shape": [3]}, "INVALID_ARGUMENT"),
        ("rand", [], {"shape": [3], "seed": 1.5}, "INVALID_ARGUMENT"),
        ("rand", [], {"shape": [3], "seed": 1, "dtype": "i32"}, "DTYPE_MISMATCH"),
        ("randn", [], {"shape": [3], "seed": 1, "dtype": "u8"}, "DTYPE_MISMATCH"),
        ("cast", ["e_x"], None, "INVALID_ARGUMENT"),
        ("cast", ["e_x"], {"dtype": "int64"}, "INVALID_ARGUMENT"),
        ("cast", [], {"dtype": "f16"}, "INVALID_ARGUMENT"),
    ]
    for op, inputs, attrs, code in bad:
        ck.expect_error(op, inputs, attrs, code)


def run(ck):
    for ctr, key, want in ref.PHILOX_KAT:  # the reference itself
        ck.checks += 1
        got = tuple(int(w[0]) for w in ref.philox4x32_10([np.array([x]) for x in ctr], key))
        if got != want:
            ck.fail("NumPy Philox4x32-10 fails a Random123 known-answer vector: %r" % (got,))
    with np.errstate(over="ignore"):  # values beyond f16 are stored on purpose
        run_fill(ck)
        run_arange(ck)
        run_random(ck)
        run_cast(ck)
    run_errors(ck)


if __name__ == "__main__":
    harness.main(run)

"""Optimizer ops (sgd_buf, sgd_param, adam_m, adam_v, adam_param) x f32, f16,
bf16 against ref_optim.py (the algorithm boxes of torch.optim.SGD, Adam and
AdamW in float64):

- each op alone on random inputs, every attribute combination below;
- five training steps run as a training graph would run them: one graph.run
  per step whose nodes store the new state back under the old names (or
  op.run with `out` for plain SGD), checked after every step against the
  reference applied to the state the daemon holds, and for f32 also against
  a float64 trajectory that never touched the GPU;
- errors: shapes, dtypes, arity, missing and out-of-range attributes.

f32 is held to 1e-6 relative (plus 1e-6 of the tensor's largest magnitude,
for elements that cancel to near zero); f16 and bf16 to harness.TOL."""
import numpy as np

import harness
import ref_optim as ref

rng = np.random.default_rng(20240611)

SGD_CONFIGS = [
    {"lr": 0.1},
    {"lr": 0.05, "weight_decay": 0.01},
    {"lr": 0.1, "momentum": 0.9},
    {"lr": 0.1, "momentum": 0.9, "dampening": 0.5, "weight_decay": 0.01},
    {"lr": 0.1, "momentum": 0.9, "nesterov": True},
    {"lr": 0.02, "momentum": 0.8, "nesterov": True, "weight_decay": 0.1},
    {"lr": 1, "momentum": 1, "dampening": 1},         # integer attrs are numbers too
]
ADAM_CONFIGS = [
    {"lr": 0.01},
    {"lr": 0.01, "weight_decay": 0.1},                          # Adam: L2 on the gradient
    {"lr": 0.01, "weight_decay": 0.1, "decoupled": True},       # AdamW
    {"lr": 0.003, "beta1": 0.8, "beta2": 0.99, "eps": 1e-6, "weight_decay": 0.01, "decoupled": True},
    {"lr": 0.05, "beta1": 0, "beta2": 0.5, "eps": 0.001, "weight_decay": 0.5},
]
SHAPES = [(7,), (3, 300), (), (0, 4)]
SGD_BUF_KEYS = ("momentum", "dampening", "weight_decay")
ADAM_M_KEYS = ("beta1", "weight_decay", "decoupled")
ADAM_V_KEYS = ("beta2", "weight_decay", "decoupled")


def pick(cfg, keys):
    return {k: cfg[k] for k in keys if k in cfg}


def rel_tol(dt):
    return 1e-6 if dt == "f32" else harness.TOL[dt][1]


def weights(shape):
    return rng.uniform(-2, 2, size=shape)


def grad(shape, dt):
    """Gradients; for f16 and bf16 bounded away from 0, so that Adam's second
    moment (about 1e-3 g^2) stays a normal f16 number."""
    if dt == "f32":
        return rng.normal(0, 1, size=shape)
    return rng.choice([-1.0, 1.0], size=shape) * rng.uniform(0.5, 2, size=shape)


def close(ck, what, got, want, dt, factor=1.0):
    """Compare a daemon result with a float64 reference, rounded to dt."""
    ck.checks += 1
    want = harness.quantize(want, dt)
    rtol = rel_tol(dt) * factor
    atol = rtol * (float(np.max(np.abs(want))) if want.size else 0.0)
    bad = ~np.isclose(got, want, rtol=rtol, atol=atol)
    if list(np.shape(got)) != list(np.shape(want)):
        ck.fail("%s: shape %s, want %s" % (what, np.shape(got), np.shape(want)))
    elif bad.any():
        i = tuple(np.argwhere(bad)[0])
        ck.fail("%s: %d of %d elements differ; first at %s: got %r want %r" % (
            what, int(bad.sum()), bad.size, i, got[i], want[i]))


def get(ck, name):
    err, res = ck.c.call("tensor.get", {"name": name})
    assert err is None, err
    return harness.result_array(res).astype(np.float64)


def tol_for(dt):
    r = rel_tol(dt)
    return (r, r)


def single_ops(ck, dt):
    """Each op alone, through harness.check (inputs rounded to dt)."""
    for shape in SHAPES:
        for cfg in SGD_CONFIGS:
            w, g, buf = weights(shape), grad(shape, dt), rng.normal(0, 1, size=shape)
            battrs = pick(cfg, SGD_BUF_KEYS)
            if "momentum" in cfg:
                ck.check("sgd_buf", [g, w, buf], [dt] * 3, lambda g_, w_, b_: ref.sgd_buf(g_, w_, b_, **battrs),
                         attrs=battrs, tol=tol_for(dt))
                ck.check("sgd_buf", [g, w], [dt] * 2, lambda g_, w_: ref.sgd_buf(g_, w_, None, **battrs),
                         attrs=battrs, tol=tol_for(dt), label="(first step)")
                ck.check("sgd_param", [w, g, buf], [dt] * 3,
                         lambda w_, g_, b_: ref.sgd_param(w_, g_, b_, **cfg), attrs=cfg, tol=tol_for(dt))
            ck.check("sgd_param", [w, g], [dt] * 2, lambda w_, g_: ref.sgd_param(w_, g_, None, **cfg),
                     attrs=cfg, tol=tol_for(dt), label="(no buf)")
        for cfg in ADAM_CONFIGS:
            w, g = weights(shape), grad(shape, dt)
            m, v = rng.normal(0, 0.3, size=shape), rng.uniform(0.5e-3, 2e-3, size=shape)
            mattrs, vattrs = pick(cfg, ADAM_M_KEYS), pick(cfg, ADAM_V_KEYS)
            ck.check("adam_m", [g, m, w], [dt] * 3, lambda g_, m_, w_: ref.adam_m(g_, m_, w_, **mattrs),
                     attrs=mattrs, tol=tol_for(dt))
            ck.check("adam_v", [g, v, w], [dt] * 3, lambda g_, v_, w_: ref.adam_v(g_, v_, w_, **vattrs),
                     attrs=vattrs, tol=tol_for(dt))
            if cfg.get("decoupled") or not cfg.get("weight_decay"):
                ck.check("adam_m", [g, m], [dt] * 2, lambda g_, m_: ref.adam_m(g_, m_, None, **mattrs),
                         attrs=mattrs, tol=tol_for(dt), label="(no w)")
                ck.check("adam_v", [g, v], [dt] * 2, lambda g_, v_: ref.adam_v(g_, v_, None, **vattrs),
                         attrs=vattrs, tol=tol_for(dt), label="(no w)")
            for step in (1, 2, 1000):
                pattrs = dict(cfg, step=step)
                ck.check("adam_param", [w, m, v], [dt] * 3,
                         lambda w_, m_, v_: ref.adam_param(w_, m_, v_, **pattrs), attrs=pattrs, tol=tol_for(dt))
    if dt == "f32":
        # Moments so small that eps (default 1e-8) weighs as much as sqrt(v),
        # and weights of 0, so the update alone is compared.
        shape = (50,)
        w, m, v = np.zeros(shape), rng.normal(0, 1e-7, size=shape), rng.uniform(1e-17, 1e-15, size=shape)
        ck.check("adam_param", [w, m, v], [dt] * 3, lambda w_, m_, v_: ref.adam_param(w_, m_, v_, lr=0.1, step=3),
                 attrs={"lr": 0.1, "step": 3}, tol=tol_for(dt), label="(eps-sized moments)")


def put(ck, name, a, dt):
    ck.c.put(name, a, dt)
    return harness.quantize(a, dt)


def graph(ck, nodes):
    err, res = ck.c.call("graph.run", {"nodes": nodes})
    if err is not None:
        ck.fail("graph.run %s: %s" % ([n["op"] for n in nodes], err))
        return False
    return True


def sgd_training(ck, dt, cfg, shape=(5, 37), steps=5):
    """Five SGD steps; with momentum one graph per step updates buf and w."""
    what = "sgd %s %s" % (dt, cfg)
    momentum = cfg.get("momentum", 0) != 0
    w = put(ck, "sgd.w", weights(shape), dt)
    cpu_w, cpu_buf = w, None
    buf = None
    for t in range(1, steps + 1):
        g = put(ck, "sgd.g", grad(shape, dt), dt)
        if momentum:
            ins = ["sgd.buf"] if t > 1 else []
            ok = graph(ck, [
                {"id": "nb", "op": "sgd_buf", "inputs": ["sgd.g", "sgd.w"] + ins,
                 "attrs": pick(cfg, SGD_BUF_KEYS), "out": "sgd.buf"},
                {"id": "nw", "op": "sgd_param", "inputs": ["sgd.w", "sgd.g"] + ins, "attrs": cfg, "out": "sgd.w"}])
        else:
            err, _ = ck.c.run("sgd_param", ["sgd.w", "sgd.g"], cfg, out="sgd.w")
            ok = err is None
            if not ok:
                ck.fail("%s: %s" % (what, err))
        if not ok:
            return
        want_w, want_buf = ref.sgd_step(w, g, buf, **cfg)
        w = get(ck, "sgd.w")
        close(ck, "%s step %d: w" % (what, t), w, want_w, dt)
        if momentum:
            buf = get(ck, "sgd.buf")
            close(ck, "%s step %d: buf" % (what, t), buf, want_buf, dt)
        cpu_w, cpu_buf = ref.sgd_step(cpu_w, g, cpu_buf, **cfg)
    if dt == "f32":
        close(ck, "%s: w after %d steps vs the CPU trajectory" % (what, steps), w, cpu_w, dt)


def adam_training(ck, dt, cfg, shape=(4, 65), steps=5):
    """Five Adam(W) steps, one graph each: m and v as intermediates feeding
    adam_param and stored back, as a training step does."""
    what = "adam %s %s" % (dt, cfg)
    l2 = cfg.get("weight_decay", 0) != 0 and not cfg.get("decoupled", False)
    w = put(ck, "adam.w", weights(shape), dt)
    m = put(ck, "adam.m", np.zeros(shape), dt)
    v = put(ck, "adam.v", np.zeros(shape), dt)
    cpu = (w, m, v)
    win = ["adam.w"] if l2 else []   # AdamW's moments need no weights
    for t in range(1, steps + 1):
        g = put(ck, "adam.g", grad(shape, dt), dt)
        if not graph(ck, [
                {"id": "nm", "op": "adam_m", "inputs": ["adam.g", "adam.m"] + win,
                 "attrs": pick(cfg, ADAM_M_KEYS), "out": "adam.m"},
                {"id": "nv", "op": "adam_v", "inputs": ["adam.g", "adam.v"] + win,
                 "attrs": pick(cfg, ADAM_V_KEYS), "out": "adam.v"},
                {"id": "nw", "op": "adam_param", "inputs": ["adam.w", "nm", "nv"],
                 "attrs": dict(cfg, step=t), "out": "adam.w"}]):
            return
        mattrs, vattrs = pick(cfg, ADAM_M_KEYS), pick(cfg, ADAM_V_KEYS)
        want_m = ref.adam_m(g, m, w, **mattrs)
        want_v = ref.adam_v(g, v, w, **vattrs)
        want_w = ref.adam_param(w, harness.quantize(want_m, dt), harness.quantize(want_v, dt), step=t, **cfg)
        # The per-op reference is the whole step of the algorithm box.
        step_w, step_m, step_v = ref.adam_step(w, g, m, v, t, **cfg)
        ck.checks += 1
        if not (np.allclose(step_m, want_m) and np.allclose(step_v, want_v) and
                np.allclose(step_w, ref.adam_param(w, want_m, want_v, step=t, **cfg))):
            ck.fail("%s: ref_optim's per-op functions disagree with adam_step" % what)
        w, m, v = get(ck, "adam.w"), get(ck, "adam.m"), get(ck, "adam.v")
        close(ck, "%s step %d: m" % (what, t), m, want_m, dt)
        close(ck, "%s step %d: v" % (what, t), v, want_v, dt)
        close(ck, "%s step %d: w" % (what, t), w, want_w, dt)
        cpu = ref.adam_step(cpu[0], g, cpu[1], cpu[2], t, **cfg)
    if dt == "f32":
        for name, got, want in zip("wmv", (w, m, v), cpu):
            close(ck, "%s: %s after %d steps vs the CPU trajectory" % (what, name, steps), got, want, dt)


def errors(ck):
    ck.c.put("e.w", np.zeros((2, 3)), "f32")
    ck.c.put("e.g", np.zeros((2, 3)), "f32")
    ck.c.put("e.g3", np.zeros((3,)), "f32")
    ck.c.put("e.t", np.zeros((3, 2)), "f32")
    ck.c.put("e.h", np.zeros((2, 3)), "f16")
    ck.c.put("e.i", np.zeros((2, 3)), "i32")
    E = ck.expect_error
    E("sgd_param", ["e.w", "e.g3"], {"lr": 0.1}, "SHAPE_MISMATCH")
    E("sgd_param", ["e.w", "e.t"], {"lr": 0.1}, "SHAPE_MISMATCH")
    E("sgd_param", ["e.w", "e.g", "e.g3"], {"lr": 0.1, "momentum": 0.9}, "SHAPE_MISMATCH")
    E("adam_param", ["e.w", "e.g", "e.t"], {"lr": 0.1, "step": 1}, "SHAPE_MISMATCH")
    E("sgd_param", ["e.w", "e.h"], {"lr": 0.1}, "DTYPE_MISMATCH")
    E("adam_m", ["e.g", "e.w", "e.h"], {"weight_decay": 0.1}, "DTYPE_MISMATCH")
    E("sgd_param", ["e.i", "e.i"], {"lr": 0.1}, "DTYPE_MISMATCH")
    E("sgd_param", ["e.w", "e.g"], None, "INVALID_ARGUMENT")                       # lr is required
    E("sgd_param", ["e.w", "e.g"], {"momentum": 0.9}, "INVALID_ARGUMENT")
    E("adam_param", ["e.w", "e.g", "e.g"], {"step": 1}, "INVALID_ARGUMENT")
    E("adam_param", ["e.w", "e.g", "e.g"], {"lr": 0.1}, "INVALID_ARGUMENT")        # step is required
    E("adam_param", ["e.w", "e.g", "e.g"], {"lr": 0.1, "step": 0}, "INVALID_ARGUMENT")
    E("adam_param", ["e.w", "e.g", "e.g"], {"lr": 0.1, "step": -3}, "INVALID_ARGUMENT")
    E("adam_param", ["e.w", "e.g", "e.g"], {"lr": 0.1, "step": 1.5}, "INVALID_ARGUMENT")
    E("adam_param", ["e.w", "e.g"], {"lr": 0.1, "step": 1}, "INVALID_ARGUMENT")     # arity
    E("sgd_param", ["e.w"], {"lr": 0.1}, "INVALID_ARGUMENT")
    E("sgd_param", ["e.w", "e.g", "e.g", "e.g"], {"lr": 0.1}, "INVALID_ARGUMENT")
    E("sgd_param", ["e.w", "e.g"], {"lr": -0.1}, "INVALID_ARGUMENT")
    E("sgd_param", ["e.w", "e.g"], {"lr": "big"}, "INVALID_ARGUMENT")
    E("sgd_param", ["e.w", "e.g"], {"lr": float("nan")}, "INVALID_ARGUMENT")
    E("sgd_param", ["e.w", "e.g"], {"lr": 0.1, "momentum": -0.5}, "INVALID_ARGUMENT")
    E("sgd_param", ["e.w", "e.g"], {"lr": 0.1, "weight_decay": -1}, "INVALID_ARGUMENT")
    E("sgd_param", ["e.w", "e.g"], {"lr": 0.1, "nesterov": True}, "INVALID_ARGUMENT")  # needs momentum
    E("sgd_param", ["e.w", "e.g"], {"lr": 0.1, "momentum": 0.9, "dampening": 0.1, "nesterov": True},
      "INVALID_ARGUMENT")
    E("sgd_param", ["e.w", "e.g"], {"lr": 0.1, "nesterov": 1}, "INVALID_ARGUMENT")
    E("sgd_param", ["e.w", "e.g"], {"lr": 0.1, "beta1": 0.9}, "INVALID_ARGUMENT")     # unknown attr
    E("sgd_buf", ["e.g", "e.w"], None, "INVALID_ARGUMENT")                           # momentum required
    E("adam_m", ["e.g", "e.w"], {"beta1": 1}, "INVALID_ARGUMENT")
    E("adam_v", ["e.g", "e.w"], {"beta2": -0.1}, "INVALID_ARGUMENT")
    E("adam_param", ["e.w", "e.g", "e.g"], {"lr": 0.1, "step": 1, "eps": -1e-8}, "INVALID_ARGUMENT")
    E("adam_m", ["e.g", "e.w"], {"weight_decay": 0.1}, "INVALID_ARGUMENT")          # L2 needs w
    E("adam_v", ["e.g", "e.w"], {"weight_decay": 0.1}, "INVALID_ARGUMENT")


def run(ck):
    for dt in harness.FLOAT_DTYPES:
        single_ops(ck, dt)
        for cfg in SGD_CONFIGS:
            sgd_training(ck, dt, cfg)
        for cfg in ADAM_CONFIGS:
            adam_training(ck, dt, cfg)
    # Sizes that are not a multiple of the workgroup, and a grid that spills
    # into y (more than 65535 workgroups of 256).
    for n in (257, 17_000_000):
        w, g = weights((n,)), grad((n,), "f32")
        cfg = {"lr": 0.25, "weight_decay": 0.5}
        ck.check("sgd_param", [w, g], ["f32", "f32"], lambda w_, g_: ref.sgd_param(w_, g_, None, **cfg),
                 attrs=cfg, tol=tol_for("f32"), label="(n=%d)" % n)
    errors(ck)


if __name__ == "__main__":
    harness.main(run)

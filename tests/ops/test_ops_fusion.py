"""Elementwise fusion in graph.run (docs/architecture.md, "Fusion").

Every graph runs twice, with `fuse: true` and `fuse: false`; the results must
be the same bit for bit (fusion never changes a result: same f32 operations in
the same order, f16/bf16 rounded after every op as when stored), close to a
float64 NumPy reference that rounds to the dtype after every op, and the fused
run must record the expected number of kernels (`dispatches` of a profiled
run), so a planner that silently stops fusing fails here too.

Cases: a chain with a broadcast bias row (x*sigmoid(x)+b), DAGs with reuse,
intermediates that are stored / returned / read by a non-elementwise node,
scalar attrs, comparisons and where (internal and external u8 conditions),
f16 and bf16, chains longer than one program (split into several kernels),
more inputs than a kernel binds, matmul in between, broadcasts a kernel does
not take (still right), integer graphs (not fused), a train.step fused and
unfused, and garbage for the new `fuse` params."""
import numpy as np

import harness
import reference as ref

rng = np.random.default_rng(20250105)


def unary_ref(op, attrs):
    if op == "gelu" and (attrs or {}).get("approximate") == "tanh":
        return ref.UNARY["gelu_tanh"]
    if op == "clamp":
        lo = (attrs or {}).get("min", -np.inf)
        hi = (attrs or {}).get("max", np.inf)
        return lambda x: ref.clamp(x, lo, hi)
    return ref.UNARY[op]


def evaluate(nodes, env, dtype):
    """float64 values of every node id, rounded to its dtype after each op."""
    vals = dict(env)
    for nd in nodes:
        op, attrs = nd["op"], nd.get("attrs") or {}
        args = [vals[i] for i in nd["inputs"]]
        out_dt = dtype
        with np.errstate(all="ignore"):
            if op in ref.BINARY or op in ref.COMPARE:
                fn = ref.BINARY.get(op) or ref.COMPARE[op]
                if "scalar" in attrs:
                    s = float(np.float32(attrs["scalar"]))
                    args = [s, args[0]] if attrs.get("reverse") else [args[0], s]
                v = np.asarray(fn(*args), dtype=np.float64)
                if op in ref.COMPARE:
                    out_dt = "u8"
            elif op == "where":
                v = ref.where(*args)
            elif op == "matmul":
                v = np.matmul(*args)
            elif op == "sum":
                v = np.sum(args[0], axis=tuple(attrs["axis"]) if "axis" in attrs else None)
            elif op == "reshape":
                v = np.reshape(args[0], attrs["shape"])
            else:
                v = unary_ref(op, attrs)(args[0])
        with np.errstate(over="ignore"):
            vals[nd["id"]] = harness.quantize(v, out_dt) if out_dt in ("f16", "bf16") else np.asarray(v, np.float64)
        if out_dt == "f32":
            vals[nd["id"]] = vals[nd["id"]].astype(np.float32).astype(np.float64)
    return vals


class Fusion:
    def __init__(self, ck):
        self.ck = ck
        self.c = ck.c
        self.serial = 0

    def put(self, a, dt):
        self.serial += 1
        name = "f%d" % self.serial
        self.c.put(name, a, dt)
        return name

    def graph(self, label, nodes, tensors, dtype, outputs, kernels=None, saved=None, tol=None, stored=()):
        """Run `nodes` fused and unfused; check outputs and stored tensors
        bit for bit, against the reference, and the fused kernel count
        (`kernels`) or how many fewer kernels fusion records (`saved`)."""
        ck = self.ck
        ck.checks += 1
        env, names = {}, {}
        for key, (a, dt) in tensors.items():
            names[key] = self.put(a, dt)
            env[names[key]] = harness.quantize(a, dt)
        nodes = [dict(nd, inputs=[names.get(i, i) for i in nd["inputs"]]) for nd in nodes]
        runs = {}
        for fuse in (True, False):
            err, res = self.c.call("graph.run", {"nodes": nodes, "outputs": list(outputs),
                                                 "profile": True, "fuse": fuse})
            if err is not None:
                ck.fail("%s (fuse %s): %s" % (label, fuse, err))
                return
            got = {k: v for k, v in res["outputs"].items()}
            for s in stored:
                e2, r2 = self.c.call("tensor.get", {"name": s})
                if e2 is not None:
                    ck.fail("%s: stored %s: %s" % (label, s, e2))
                    return
                got["stored:" + s] = r2
            runs[fuse] = (got, res["dispatches"])
        (fused, nfused), (plain, nplain) = runs[True], runs[False]
        if (kernels is not None and nfused != kernels) or (saved is not None and nplain - nfused != saved):
            ck.fail("%s: %d kernels fused, %d unfused; want %s" % (
                label, nfused, nplain, "%d fused" % kernels if kernels is not None else "%d fewer" % saved))
        for k in plain:
            if fused[k]["data"] != plain[k]["data"] or fused[k]["dtype"] != plain[k]["dtype"] \
                    or fused[k]["shape"] != plain[k]["shape"]:
                a = harness.result_array(fused[k])
                b = harness.result_array(plain[k])
                diff = np.argwhere(a.view(np.uint8) != b.view(np.uint8)) if a.shape == b.shape else "shape"
                ck.fail("%s: %s differs fused vs unfused (%s)" % (label, k, diff[:3] if len(diff) else diff))
        want = evaluate(nodes, env, dtype)
        for k, r in plain.items():
            nid = k.split(":", 1)[1] if k.startswith("stored:") else k
            if k.startswith("stored:"):
                nid = [nd["id"] for nd in nodes if nd.get("out") == nid][0]
            got = harness.result_array(r).astype(np.float64)
            w = want[nid]
            atol, rtol = tol or harness.TOL[r["dtype"]]
            with np.errstate(invalid="ignore"):
                bad = ~np.isclose(got, w, atol=atol, rtol=rtol, equal_nan=True)
            if got.shape != w.shape or bad.any():
                i = tuple(np.argwhere(bad)[0]) if got.shape == w.shape else None
                ck.fail("%s: %s vs reference: %s" % (label, k, "shape %s vs %s" % (got.shape, w.shape)
                                                     if i is None else "at %s got %r want %r" % (i, got[i], w[i])))
        return nfused, nplain


def x_sigmoid_x_plus_b(f, dt):
    x = rng.normal(0, 2, size=(33, 40))
    b = rng.normal(0, 1, size=(40,))
    nodes = [{"id": "s", "op": "sigmoid", "inputs": ["x"]},
             {"id": "m", "op": "mul", "inputs": ["x", "s"]},
             {"id": "y", "op": "add", "inputs": ["m", "b"]}]
    f.graph("x*sigmoid(x)+b " + dt, nodes, {"x": (x, dt), "b": (b, dt)}, dt, ["y"], kernels=1)
    # The bias on the left, and a rank-0 and a [1] operand.
    s0, s1 = rng.normal(size=()), rng.normal(size=(1,))
    nodes = [{"id": "t", "op": "tanh", "inputs": ["x"]},
             {"id": "u", "op": "add", "inputs": ["b", "t"]},
             {"id": "v", "op": "mul", "inputs": ["u", "s0"]},
             {"id": "y", "op": "sub", "inputs": ["s1", "v"]}]
    f.graph("bias left, scalars " + dt, nodes, {"x": (x, dt), "b": (b, dt), "s0": (s0, dt), "s1": (s1, dt)},
            dt, ["y"], kernels=1)


def dag_reuse(f, dt):
    x = rng.normal(0, 1.5, size=(7, 9, 11))
    nodes = [{"id": "e", "op": "exp", "inputs": ["x"]},
             {"id": "a", "op": "abs", "inputs": ["x"]},
             {"id": "d", "op": "add", "inputs": ["a"], "attrs": {"scalar": 1}},
             {"id": "q", "op": "div", "inputs": ["x", "d"]},
             {"id": "p", "op": "mul", "inputs": ["e", "x"]},
             {"id": "r", "op": "sub", "inputs": ["p", "q"]},
             {"id": "y", "op": "mul", "inputs": ["r", "r"]}]
    f.graph("DAG with reuse " + dt, nodes, {"x": (x, dt)}, dt, ["y"], kernels=1)


def materialised(f, dt):
    """Intermediates stored, returned, or read by matmul/sum/reshape."""
    x = rng.normal(0, 1, size=(16, 24))
    w = rng.normal(0, 0.3, size=(24, 8))
    nodes = [{"id": "g", "op": "gelu", "inputs": ["x"]},
             {"id": "h", "op": "mul", "inputs": ["g"], "attrs": {"scalar": 0.5}, "out": "fz_h_" + dt},
             {"id": "k", "op": "add", "inputs": ["h", "x"]},
             {"id": "l", "op": "silu", "inputs": ["k"]},
             {"id": "mm", "op": "matmul", "inputs": ["k", "w"]},
             {"id": "sm", "op": "sum", "inputs": ["l"], "attrs": {"axis": [1]}},
             {"id": "z", "op": "tanh", "inputs": ["l"]},
             {"id": "rs", "op": "reshape", "inputs": ["z"], "attrs": {"shape": [24, 16]}},
             {"id": "o", "op": "neg", "inputs": ["rs"]}]
    # g..l fuse into one kernel (k and l materialised, h stored); z cannot
    # join it (matmul reads k before z), reshape is a view, neg runs alone.
    f.graph("stored/returned/read intermediates " + dt, nodes, {"x": (x, dt), "w": (w, dt)}, dt,
            ["l", "mm", "sm", "o", "k"], saved=3, stored=["fz_h_" + dt],
            tol=(3e-5, 3e-5) if dt == "f32" else None)
    # An intermediate read by a node between two members: the kernel cannot
    # span it, the result is still right.
    nodes = [{"id": "a", "op": "exp", "inputs": ["x"]},
             {"id": "s", "op": "sum", "inputs": ["a"]},
             {"id": "b", "op": "mul", "inputs": ["a", "x"]},
             {"id": "c", "op": "div", "inputs": ["b", "s"]}]
    f.graph("read between members " + dt, nodes, {"x": (x, dt)}, dt, ["c"], saved=1)


def scalar_attrs(f, dt):
    x = rng.uniform(-3, 3, size=(301,))
    nodes = [{"id": "a", "op": "mul", "inputs": ["x"], "attrs": {"scalar": 0.75}},
             {"id": "b", "op": "sub", "inputs": ["a"], "attrs": {"scalar": 2, "reverse": True}},
             {"id": "c", "op": "clamp", "inputs": ["b"], "attrs": {"min": -1.5, "max": 2.25}},
             {"id": "d", "op": "clamp", "inputs": ["c"], "attrs": {"max": 1.0}},
             {"id": "e", "op": "pow", "inputs": ["d"], "attrs": {"scalar": 2}},
             {"id": "f", "op": "maximum", "inputs": ["e"], "attrs": {"scalar": 0.1}},
             {"id": "g", "op": "gelu", "inputs": ["f"], "attrs": {"approximate": "tanh"}},
             {"id": "h", "op": "div", "inputs": ["g"], "attrs": {"scalar": 3, "reverse": True}},
             {"id": "i", "op": "softplus", "inputs": ["h"]},
             {"id": "j", "op": "minimum", "inputs": ["i", "x"]},
             {"id": "k", "op": "relu", "inputs": ["j"]},
             {"id": "l", "op": "sqrt", "inputs": ["k"]},
             {"id": "m", "op": "copy", "inputs": ["l"]}]
    f.graph("scalar attrs " + dt, nodes, {"x": (x, dt)}, dt, ["m", "c"], kernels=1,
            tol=(1e-4, 1e-4) if dt == "f32" else None)


def compare_where(f, dt):
    x = rng.normal(0, 1, size=(10, 130))
    mask = (rng.uniform(size=(130,)) > 0.5).astype(np.uint8)
    nodes = [{"id": "pos", "op": "gt", "inputs": ["x"], "attrs": {"scalar": 0}},
             {"id": "lk", "op": "mul", "inputs": ["x"], "attrs": {"scalar": 0.01}},
             {"id": "y", "op": "where", "inputs": ["pos", "x", "lk"]},
             {"id": "e", "op": "le", "inputs": ["y", "lk"]},
             {"id": "z", "op": "where", "inputs": ["mask", "y", "x"]},
             {"id": "o", "op": "add", "inputs": ["z", "y"]}]
    # `e` (u8) is returned: a u8 output of the kernel.
    f.graph("compare/where " + dt, nodes, {"x": (x, dt), "mask": (mask, "u8")}, dt, ["o", "e"], kernels=1)


def long_chain(f, dt):
    x = rng.uniform(-1, 1, size=(1000,))
    ops = ["sin", "cos", "tanh", "sigmoid", "neg", "abs"]
    nodes, prev = [], "x"
    for i in range(60):
        nd = {"id": "c%d" % i, "op": ops[i % len(ops)], "inputs": [prev]}
        if i % 7 == 3:
            nd = {"id": "c%d" % i, "op": "add", "inputs": [prev, "x"]}
        nodes.append(nd)
        prev = nd["id"]
    r = f.graph("60-op chain " + dt, nodes, {"x": (x, dt)}, dt, [prev],
                tol=(1e-4, 1e-4) if dt == "f32" else (2e-2, 2e-2))
    if r and not (2 <= r[0] <= 5 and r[1] == 60):
        f.ck.fail("60-op chain %s: %d kernels fused (%d unfused): want a few" % (dt, r[0], r[1]))
    # Twelve distinct inputs: more than a kernel binds.
    ins = {"i%d" % k: (rng.normal(size=(5, 6)), dt) for k in range(12)}
    nodes, prev = [], "i0"
    for k in range(1, 12):
        nodes.append({"id": "s%d" % k, "op": "add" if k % 2 else "mul", "inputs": [prev, "i%d" % k]})
        prev = "s%d" % k
    r = f.graph("12 inputs " + dt, nodes, ins, dt, [prev], tol=(1e-4, 1e-4) if dt == "f32" else None)
    if r and not (2 <= r[0] <= 3):
        f.ck.fail("12 inputs %s: %d kernels fused: want 2 or 3" % (dt, r[0]))


def mixed(f, dt):
    x = rng.normal(0, 1, size=(12, 20))
    w1 = rng.normal(0, 0.3, size=(20, 16))
    b1 = rng.normal(0, 0.1, size=(16,))
    w2 = rng.normal(0, 0.3, size=(16, 4))
    nodes = [{"id": "xs", "op": "mul", "inputs": ["x"], "attrs": {"scalar": 0.5}},
             {"id": "xr", "op": "relu", "inputs": ["xs"]},
             {"id": "h0", "op": "matmul", "inputs": ["xr", "w1"]},
             {"id": "h1", "op": "add", "inputs": ["h0", "b1"]},
             {"id": "h2", "op": "tanh", "inputs": ["h1"]},
             {"id": "h3", "op": "mul", "inputs": ["h2", "h1"]},
             {"id": "o", "op": "matmul", "inputs": ["h3", "w2"]},
             {"id": "p", "op": "sigmoid", "inputs": ["o"]},
             {"id": "q", "op": "mul", "inputs": ["p"], "attrs": {"scalar": 2}}]
    f.graph("matmul between chains " + dt, nodes, {"x": (x, dt), "w1": (w1, dt), "b1": (b1, dt), "w2": (w2, dt)},
            dt, ["q"], saved=4, tol=(3e-5, 3e-5) if dt == "f32" else None)


def not_fused(f):
    # A column broadcast [N, 1] and two different row lengths: outside what a
    # kernel indexes, still right.
    x = rng.normal(size=(6, 5, 8))
    col = rng.normal(size=(6, 1, 1))
    row = rng.normal(size=(5, 8))
    r8 = rng.normal(size=(8,))
    nodes = [{"id": "a", "op": "exp", "inputs": ["x"]},
             {"id": "b", "op": "add", "inputs": ["a", "col"]},
             {"id": "c", "op": "mul", "inputs": ["b", "row"]},
             {"id": "d", "op": "sub", "inputs": ["c", "r8"]},
             {"id": "e", "op": "neg", "inputs": ["d"]}]
    f.graph("column and two row broadcasts", nodes, {"x": (x, "f32"), "col": (col, "f32"), "row": (row, "f32"),
                                                     "r8": (r8, "f32")}, "f32", ["e"], saved=1)
    # Integers are never fused; neither are empty tensors.
    xi = rng.integers(-50, 50, size=(40,))
    nodes = [{"id": "a", "op": "mul", "inputs": ["x"], "attrs": {"scalar": 3}},
             {"id": "b", "op": "add", "inputs": ["a", "x"]},
             {"id": "c", "op": "abs", "inputs": ["b"]}]
    f.graph("i32 chain", nodes, {"x": (xi, "i32")}, "i32", ["c"], kernels=3)
    xe = np.zeros((0, 3))
    nodes = [{"id": "a", "op": "exp", "inputs": ["x"]}, {"id": "b", "op": "neg", "inputs": ["a"]}]
    f.graph("empty chain", nodes, {"x": (xe, "f32")}, "f32", ["b"], kernels=0)
    # Two independent chains off one input: one kernel reads it once.
    x = rng.normal(size=(64,))
    nodes = [{"id": "a", "op": "exp", "inputs": ["x"]}, {"id": "b", "op": "neg", "inputs": ["a"]},
             {"id": "c", "op": "sin", "inputs": ["x"]}, {"id": "d", "op": "cos", "inputs": ["c"]}]
    f.graph("two chains", nodes, {"x": (x, "f32")}, "f32", ["b", "d"], kernels=1)


def train_step(f):
    """train.step with fuse true and false: same loss and parameters."""
    ck, c = f.ck, f.c
    x = rng.normal(size=(32, 10))
    y = rng.normal(size=(32, 3))
    w1 = rng.normal(0, 0.3, size=(10, 16))
    b1 = rng.normal(0, 0.1, size=(16,))
    w2 = rng.normal(0, 0.3, size=(16, 3))
    nodes = [{"id": "h0", "op": "matmul", "inputs": ["tx", "tw1"]},
             {"id": "h1", "op": "add", "inputs": ["h0", "tb1"]},
             {"id": "h2", "op": "sigmoid", "inputs": ["h1"]},
             {"id": "h3", "op": "mul", "inputs": ["h1", "h2"]},
             {"id": "h4", "op": "tanh", "inputs": ["h3"]},
             {"id": "o", "op": "matmul", "inputs": ["h4", "tw2"]},
             {"id": "L", "op": "mse", "inputs": ["o", "ty"]}]
    got = {}
    for fuse in (True, False):
        ck.checks += 1
        for n, a in (("tx", x), ("ty", y), ("tw1", w1), ("tb1", b1), ("tw2", w2)):
            c.put(n, a, "f32")
            for state in (".exp_avg", ".exp_avg_sq"):
                c.call("tensor.delete", {"name": n + state})
        for step in (1, 2):
            err, res = c.call("train.step", {"nodes": nodes, "loss": "L", "params": ["tw1", "tb1", "tw2"],
                                             "optimizer": {"type": "adam", "lr": 0.01}, "step": step,
                                             "fuse": fuse})
            if err is not None:
                ck.fail("train.step fuse %s: %s" % (fuse, err))
                return
        got[fuse] = [res["loss"]] + [c.call("tensor.get", {"name": n})[1]["data"] for n in ("tw1", "tb1", "tw2")]
    if got[True] != got[False]:
        ck.fail("train.step: fused and unfused steps differ (losses %r vs %r)" % (got[True][0], got[False][0]))
    if not np.isfinite(got[True][0]):
        ck.fail("train.step: loss %r" % got[True][0])


def garbage(f):
    ck, c = f.ck, f.c
    name = f.put(rng.normal(size=(4,)), "f32")
    nodes = [{"id": "a", "op": "exp", "inputs": [name]}]
    for bad in (1, "yes", None, [True], {"a": 1}):
        ck.checks += 1
        err, _ = c.call("graph.run", {"nodes": nodes, "outputs": ["a"], "fuse": bad})
        if err is None or err["name"] != "INVALID_ARGUMENT" or "fuse" not in err["message"]:
            ck.fail("graph.run fuse=%r: want INVALID_ARGUMENT naming fuse, got %r" % (bad, err))
        ck.checks += 1
        err, _ = c.call("train.step", {"nodes": nodes, "loss": "a", "params": [name], "fuse": bad})
        if err is None or err["name"] != "INVALID_ARGUMENT" or "fuse" not in err["message"]:
            ck.fail("train.step fuse=%r: want INVALID_ARGUMENT naming fuse, got %r" % (bad, err))
    # Errors inside a fused chain still name the node.
    ck.checks += 1
    err, _ = c.call("graph.run", {"nodes": nodes + [{"id": "b", "op": "add", "inputs": ["a", "nope"]}],
                                  "fuse": True})
    if err is None or err["name"] != "NOT_FOUND" or "node 1 'b'" not in err["message"]:
        ck.fail("a bad input in a fusable chain: %r" % (err,))


def run(ck):
    f = Fusion(ck)
    for dt in harness.FLOAT_DTYPES:
        x_sigmoid_x_plus_b(f, dt)
        dag_reuse(f, dt)
        materialised(f, dt)
        scalar_attrs(f, dt)
        compare_where(f, dt)
        long_chain(f, dt)
        mixed(f, dt)
    not_fused(f)
    train_step(f)
    garbage(f)


if __name__ == "__main__":
    harness.main(run)

"""What bench_data_parallel.py and bench_cluster.py share: tensors in and out
of a daemon (tests/lib/daemon.py's Client), train.run past its notifications,
and the MLP they train (its graph and torch-like initial parameters)."""
import numpy as np


def put(c, name, arr, device=None):
    """Store `arr` (f32 or i32) as `name`, on `device` when given."""
    arr = np.ascontiguousarray(arr)
    dt = {"float32": "f32", "int32": "i32"}[str(arr.dtype)]
    params = {"name": name, "dtype": dt, "shape": list(arr.shape), "data": arr.tobytes()}
    if device is not None:
        params["device"] = device
    c.call("tensor.put", params)


def get(c, name):
    """The stored f32 tensor `name` as an array."""
    r = c.call("tensor.get", {"name": name})
    return np.frombuffer(r["data"], np.float32).reshape(r["shape"]).copy()


def run_train(c, params):
    """train.run's result; its progress notifications are skipped."""
    error, result = c.call_past_notifications("train.run", params)
    if error:
        raise RuntimeError("train.run: %r" % (error,))
    return result


def mlp_nodes(dims):
    """The graph of an MLP over inputs xb, yb and parameters w<i>, b<i>
    (ReLU between layers, cross_entropy loss node "L")."""
    nodes, h = [], "xb"
    for i in range(len(dims) - 1):
        nodes.append({"id": "m%d" % i, "op": "matmul", "inputs": [h, "w%d" % i]})
        nodes.append({"id": "z%d" % i, "op": "add", "inputs": ["m%d" % i, "b%d" % i]})
        h = "z%d" % i
        if i + 2 < len(dims):
            nodes.append({"id": "r%d" % i, "op": "relu", "inputs": [h]})
            h = "r%d" % i
    nodes.append({"id": "L", "op": "cross_entropy", "inputs": [h, "yb"]})
    return nodes


def init_params(dims, seed):
    """Initial parameters as torch.nn.Linear draws them: U(±1/sqrt(fan_in))."""
    rng = np.random.default_rng(seed)
    p = {}
    for i in range(len(dims) - 1):
        bound = 1.0 / np.sqrt(dims[i])
        p["w%d" % i] = rng.uniform(-bound, bound, (dims[i], dims[i + 1])).astype(np.float32)
        p["b%d" % i] = rng.uniform(-bound, bound, dims[i + 1]).astype(np.float32)
    return p

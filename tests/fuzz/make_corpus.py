#!/usr/bin/python3
"""Write the seed corpora of the fuzz harnesses (tests/fuzz/corpus/<name>/) and
the libFuzzer dictionaries (tests/fuzz/<name>.dict).

The seeds are committed; rerun this after adding a method, a parameter or an
op so the fuzzers start from valid requests for it:
    /usr/bin/python3 tests/fuzz/make_corpus.py
Files the fuzzers found and that were kept as regression inputs (named
crash-*, regress-*) are left alone.
"""
import os
import struct
import sys

import msgpack

HERE = os.path.dirname(os.path.abspath(__file__))
_msgid = [0]


def req(method, params=None, msgid=None):
    if msgid is None:
        _msgid[0] += 2  # even: uid 1000 in fuzz_params.c
        msgid = _msgid[0]
    return msgpack.packb([0, msgid, method, [] if params is None else [params]],
                         use_bin_type=True)


def pack_all_bin(obj):
    """msgpack with every string as bin (clients from before the str/bin split)."""
    if isinstance(obj, str):
        obj = obj.encode()
    if isinstance(obj, bytes):
        n = len(obj)
        head = (b"\xc4" + struct.pack("B", n) if n < 1 << 8 else
                b"\xc5" + struct.pack(">H", n) if n < 1 << 16 else b"\xc6" + struct.pack(">I", n))
        return head + obj
    if isinstance(obj, (list, tuple)):
        return b"\xdc" + struct.pack(">H", len(obj)) + b"".join(pack_all_bin(o) for o in obj)
    if isinstance(obj, dict):
        return b"\xde" + struct.pack(">H", len(obj)) + b"".join(
            pack_all_bin(k) + pack_all_bin(v) for k, v in obj.items())
    return msgpack.packb(obj)


def f32(*shape, fill=0.5):
    n = 1
    for s in shape:
        n *= s
    return {"dtype": "f32", "shape": list(shape), "data": struct.pack("<%df" % n, *([fill] * n))}


def put(name, dtype="f32", shape=(2, 3), fill=1.0, **extra):
    n = 1
    for s in shape:
        n *= s
    if dtype == "f32":
        data = struct.pack("<%df" % n, *([fill] * n))
    elif dtype == "i32":
        data = struct.pack("<%di" % n, *([int(fill)] * n))
    elif dtype == "u8":
        data = bytes([int(fill) & 255] * n)
    else:  # f16, bf16
        data = b"\x00\x3c" * n
    p = {"name": name, "dtype": dtype, "shape": list(shape), "data": data}
    p.update(extra)
    return req("tensor.put", p)


def write(dirname, name, data):
    path = os.path.join(HERE, "corpus", dirname)
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, name), "wb") as f:
        f.write(data)


OPS_UNARY = ["neg", "abs", "relu", "copy", "exp", "log", "sqrt", "rsqrt", "sin", "cos", "tanh",
             "sigmoid", "silu", "softplus", "gelu"]
OPS_BINARY = ["add", "sub", "mul", "div", "pow", "maximum", "minimum", "eq", "ne", "lt", "le",
              "gt", "ge"]
OPS_REDUCE = ["sum", "prod", "max", "min", "mean", "var", "std", "argmax", "argmin"]


# y = alpha * x over n elements (kernel_graph).
KERNEL = """#version 450
layout(local_size_x = 8) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) buffer Y { float y[]; };
layout(push_constant) uniform P { float alpha; uint n; };
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < n) y[i] = alpha * x[i];
}
"""


# Refused by the kernel allow-list (spirv_validate.c): KERNEL's SPIR-V with
# its OpCapability Shader operand replaced by each forbidden capability,
# its memory model made PhysicalStorageBuffer64, and a buffer_reference
# module; then limits: a local size over the device's.
FORBIDDEN_CAPS = [4, 5, 6, 10, 12, 4441, 4442, 5345, 5347, 4434, 4435, 4449, 4450]
BUFFER_REFERENCE = """#version 450
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference_uvec2 : require
layout(local_size_x = 1) in;
layout(buffer_reference, std430) buffer Ptr { float v[]; };
layout(std430, binding = 0) buffer B { uvec2 addr; float o; };
void main() { o = Ptr(addr).v[0]; }
"""


def spirv_of(src):
    import subprocess
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "k.comp")
        with open(path, "w") as f:
            f.write(src)
        subprocess.run(["glslangValidator", "-V", "--target-env", "vulkan1.1", "-o",
                        os.path.join(d, "k.spv"), path], check=True, stdout=subprocess.DEVNULL)
        with open(os.path.join(d, "k.spv"), "rb") as f:
            return f.read()


def patched(words, opcode, operand, value):
    w = list(words)
    i = 5
    while i < len(w):
        if w[i] & 0xffff == opcode:
            w[i + operand] = value
            break
        i += w[i] >> 16
    return struct.pack("<%dI" % len(w), *w)


def kernel_forbidden_corpus():
    base = spirv_of(KERNEL)
    words = struct.unpack("<%dI" % (len(base) // 4), base)
    msgs = [req("kernel.create", {"name": "c%d" % c, "spirv": patched(words, 17, 1, c)},
                msgid=1101 + 2 * i) for i, c in enumerate(FORBIDDEN_CAPS)]
    msgs.append(req("kernel.create", {"name": "mm", "spirv": patched(words, 14, 1, 5348)},
                    msgid=1201))
    msgs.append(req("kernel.create", {"name": "ls", "spirv": patched(words, 16, 3, 1 << 20)},
                    msgid=1203))
    msgs.append(req("kernel.create", {"name": "br", "spirv": spirv_of(BUFFER_REFERENCE)},
                    msgid=1205))
    msgs.append(req("kernel.create", {"name": "brg", "glsl": BUFFER_REFERENCE}, msgid=1207))
    write("params", "kernel_forbidden", b"".join(msgs))


def params_corpus():
    setup = (put("a", shape=(2, 3)) + put("b", shape=(2, 3), fill=2.0) +
             put("m", shape=(3, 4)) + put("i", "i32", (2,), 1) + put("c", "u8", (2, 3), 1))
    seeds = {
        "ping": req("ping"),
        "info": req("info"),
        "put_get_stat_list_delete": setup + req("tensor.get", {"name": "a"}) +
        req("tensor.stat", {"name": "b"}) + req("tensor.list", {"prefix": "a"}) +
        req("tensor.list") + req("tensor.delete", {"name": "a"}) +
        req("tensor.get", {"name": "a"}),
        "put_dtypes": put("h", "f16", (4,)) + put("bf", "bf16", (2, 2)) + put("u", "u8", (3,), 7) +
        put("s", "f32", ()) + put("e", "f32", (0, 3)),
        "put_if_absent": put("a") + put("a", if_absent=True),
        # msgid bit 2: a memfd comes along (fuzz_params.c pass_fd): 24 bytes
        # (24 << 8), sealed shrink+write (2 << 3) for the put, shrink (1 << 3)
        # for the get; then too small, unsealed, a pipe, and fds nobody names
        "memfd_put_get": req("tensor.put", {"name": "m", "dtype": "f32", "shape": [2, 3], "fd": 0},
                             msgid=(24 << 8) | (2 << 3) | 4) +
        req("tensor.get", {"name": "m", "fd": 0, "offset": 8}, msgid=(32 << 8) | (1 << 3) | 4) +
        req("tensor.put", {"name": "m", "dtype": "f32", "shape": [2, 3], "fd": 0, "offset": 4},
            msgid=(24 << 8) | (2 << 3) | 4 | 0x80) +
        req("tensor.put", {"name": "m", "dtype": "f32", "shape": [2], "fd": 0},
            msgid=(24 << 8) | 4) +
        req("tensor.get", {"name": "m", "fd": 0}, msgid=0x60 | 4) +
        req("tensor.get", {"name": "m", "fd": 1}, msgid=(1 << 3) | 4 | 0x100) +
        req("tensor.stat", {"name": "m"}, msgid=(1 << 3) | 4 | 0x200) +
        req("tensor.get", {"name": "m", "fd": 0}, msgid=0x400),
        "put_other_uid": put("a") + req("tensor.put", {"name": "a", "dtype": "f32", "shape": [1],
                                                       "data": b"\0\0\0\0"}, msgid=7) +
        req("tensor.delete", {"name": "a"}, msgid=9),
        "op_inline": setup + req("op.run", {"op": "add", "inputs": ["a", "b"]}),
        "op_out": setup + req("op.run", {"op": "matmul", "inputs": ["a", "m"], "out": "p"}) +
        req("tensor.get", {"name": "p"}),
        "op_scalar": setup + req("op.run", {"op": "mul", "inputs": ["a"],
                                            "attrs": {"scalar": 2.5, "reverse": True}}),
        "op_where": setup + req("op.run", {"op": "where", "inputs": ["c", "a", "b"]}),
        "op_clamp": setup + req("op.run", {"op": "clamp", "inputs": ["a"],
                                           "attrs": {"min": 0, "max": 1.5}}),
        "op_layout": setup + req("op.run", {"op": "transpose", "inputs": ["a"]}) +
        req("op.run", {"op": "reshape", "inputs": ["a"], "attrs": {"shape": [3, -1]}}) +
        req("op.run", {"op": "permute", "inputs": ["a"], "attrs": {"dims": [1, 0]}}) +
        req("op.run", {"op": "slice", "inputs": ["a"],
                       "attrs": {"starts": [0, 1], "ends": [2, 3], "steps": [1, 2]}}) +
        req("op.run", {"op": "concat", "inputs": ["a", "b"], "attrs": {"axis": 1}}) +
        req("op.run", {"op": "stack", "inputs": ["a", "b"], "attrs": {"axis": -1}}) +
        req("op.run", {"op": "pad", "inputs": ["a"], "attrs": {"pads": [1, 1], "axes": [1],
                                                               "value": 3}}) +
        req("op.run", {"op": "gather", "inputs": ["a", "i"], "attrs": {"axis": 1}}) +
        req("op.run", {"op": "one_hot", "inputs": ["i"], "attrs": {"num_classes": 4}}),
        "op_create": req("op.run", {"op": "zeros", "inputs": [], "attrs": {"shape": [2, 2]}}) +
        req("op.run", {"op": "full", "inputs": [], "attrs": {"shape": [3], "value": 7,
                                                             "dtype": "i32"}}) +
        req("op.run", {"op": "arange", "inputs": [], "attrs": {"start": 1, "stop": 10,
                                                               "step": 3}}) +
        req("op.run", {"op": "randn", "inputs": [], "attrs": {"shape": [4], "seed": 1}}) +
        req("op.run", {"op": "rand", "inputs": [], "attrs": {"shape": [4], "seed": 2,
                                                             "dtype": "f16"}}) +
        put("a") + req("op.run", {"op": "cast", "inputs": ["a"], "attrs": {"dtype": "bf16"}}),
        "op_norm": setup + req("op.run", {"op": "softmax", "inputs": ["a"]}) +
        req("op.run", {"op": "log_softmax", "inputs": ["a"], "attrs": {"axis": 0}}) +
        req("op.run", {"op": "layer_norm", "inputs": ["a"], "attrs": {"eps": 1e-3}}) +
        req("op.run", {"op": "rms_norm", "inputs": ["a"], "attrs": {"ndim": 2}}) +
        # Fixed ids (even: uid 1000), so that the seeds after these keep theirs.
        req("op.run", {"op": "layer_norm_grad", "inputs": ["a", "a"], "attrs": {"ndim": 2}}, msgid=9000) +
        req("op.run", {"op": "rms_norm_grad", "inputs": ["a", "a"], "attrs": {"eps": 1e-3}}, msgid=9002) +
        req("op.run", {"op": "batch_norm_grad", "inputs": ["a", "a"], "attrs": {"eps": 1e-3}}, msgid=9004) +
        req("op.run", {"op": "batch_norm_grad_weight", "inputs": ["a", "a"]}, msgid=9006) +
        put("rm", shape=(3,)) + put("rv", shape=(3,)) +
        req("op.run", {"op": "batch_norm", "inputs": ["a", "rm", "rv"]}),
        "op_loss": setup + put("lbl", "i32", (2,), 1) +
        req("op.run", {"op": "mse", "inputs": ["a", "b"], "attrs": {"reduction": "sum"}}) +
        req("op.run", {"op": "cross_entropy", "inputs": ["a", "lbl"],
                       "attrs": {"label_smoothing": 0.1, "ignore_index": -100}}) +
        req("op.run", {"op": "nll", "inputs": ["a", "lbl"]}) +
        req("op.run", {"op": "binary_cross_entropy_with_logits", "inputs": ["a", "b"]}),
        "op_conv": put("x", shape=(1, 2, 5, 5)) + put("w", shape=(3, 2, 3, 3)) + put("bias", shape=(3,)) +
        req("op.run", {"op": "conv2d", "inputs": ["x", "w", "bias"],
                       "attrs": {"stride": [1, 2], "padding": 1, "dilation": 1, "groups": 1}}) +
        req("op.run", {"op": "max_pool2d", "inputs": ["x"], "attrs": {"kernel_size": 2}}) +
        req("op.run", {"op": "avg_pool2d", "inputs": ["x"],
                       "attrs": {"kernel_size": [3, 2], "stride": 2, "padding": 1}}),
        "op_conv_grad": put("x", shape=(1, 2, 5, 5)) + put("w", shape=(3, 2, 3, 3)) +
        put("go", shape=(1, 3, 3, 3)) +
        req("op.run", {"op": "conv2d_grad_input", "inputs": ["go", "w"],
                       "attrs": {"input_shape": [1, 2, 5, 5]}}) +
        req("op.run", {"op": "conv2d_grad_weight", "inputs": ["x", "go"],
                       "attrs": {"weight_shape": [3, 2, 3, 3]}}) +
        put("gp", shape=(1, 2, 2, 2)) +
        req("op.run", {"op": "max_pool2d_grad", "inputs": ["x", "gp"], "attrs": {"kernel_size": 2}}) +
        req("op.run", {"op": "avg_pool2d_grad", "inputs": ["gp"],
                       "attrs": {"kernel_size": 2, "input_shape": [1, 2, 5, 5]}}),
        "op_optim": setup + req("op.run", {"op": "sgd_param", "inputs": ["a", "b"],
                                           "attrs": {"lr": 0.1, "weight_decay": 0.01}}) +
        req("op.run", {"op": "sgd_buf", "inputs": ["b", "a"], "attrs": {"momentum": 0.9}}) +
        req("op.run", {"op": "adam_m", "inputs": ["b", "a"]}) +
        req("op.run", {"op": "adam_v", "inputs": ["b", "a"]}) +
        req("op.run", {"op": "adam_param", "inputs": ["a", "a", "b"],
                       "attrs": {"lr": 0.01, "step": 1}}),
        "graph": setup + req("graph.run", {"nodes": [
            {"id": "t", "op": "transpose", "inputs": ["a"]},
            {"id": "p", "op": "matmul", "inputs": ["a", "t"]},
            {"id": "s", "op": "sum", "inputs": ["p"], "attrs": {"axis": [0], "keepdims": True},
             "out": "stored_s"}],
            "outputs": ["p", "s"]}),
        # uid 1001 (odd msgids) may create kernels in fuzz_params.c.
        "kernel_graph": setup + req("kernel.create", {"name": "k", "glsl": KERNEL}, msgid=1001) +
        req("tensor.put", {"name": "ka", **f32(2, 3)}, msgid=1003) +
        req("tensor.put", {"name": "kb", **f32(2, 3)}, msgid=1005) +
        req("kernel.run", {"name": "k", "tensors": ["ka", "kb"], "push": {"alpha": 2, "n": 6},
                           "groups": [1]}, msgid=1007) +
        req("graph.run", {"nodes": [
            {"id": "s", "op": "add", "inputs": ["ka", "ka"]},
            {"id": "k", "kernel": "k", "inputs": ["s", "kb"], "push": {"alpha": 2, "n": 6},
             "groups": [1], "result": 1},
            {"id": "m", "op": "mul", "inputs": ["k", "s"], "out": "km"}],
            "outputs": ["k", "m"]}, msgid=1009) +
        req("graph.run", {"nodes": [
            {"id": "k", "kernel": "k", "inputs": ["ka", "kb"], "push": b"\0" * 8,
             "groups": [2, 1, 1], "out": "kb"},
            {"id": "k2", "kernel": "k", "inputs": ["k", "ka"], "groups": [1]}]}, msgid=1011) +
        req("graph.run", {"nodes": [
            {"id": "k", "kernel": "k", "inputs": ["ka"], "groups": [1]}]}, msgid=1013) +
        req("graph.run", {"nodes": [
            {"id": "k", "kernel": "k", "inputs": ["ka", "kb"], "groups": [1], "result": 0}]},
            msgid=1015) +
        req("graph.run", {"nodes": [
            {"id": "k", "kernel": "k", "inputs": ["ka", "kb"], "op": "add", "groups": [1]}]},
            msgid=1017) +
        req("graph.run", {"nodes": [
            {"id": "k", "kernel": "k", "inputs": ["ka", "a"], "groups": [1]}]}, msgid=1019) +
        req("kernel.delete", {"name": "k"}, msgid=1021),
        "graph_forward_ref": setup + req("graph.run", {"nodes": [
            {"id": "x", "op": "add", "inputs": ["y", "a"]},
            {"id": "y", "op": "neg", "inputs": ["a"]}]}),
        "train_step": put("x", shape=(4, 3)) + put("w", shape=(3, 1), fill=0.1) +
        put("bb", shape=(1,), fill=0.0) + put("y", shape=(4, 1)) +
        req("train.step", {"nodes": [
            {"id": "h", "op": "matmul", "inputs": ["x", "w"]},
            {"id": "z", "op": "add", "inputs": ["h", "bb"]},
            {"id": "L", "op": "mse", "inputs": ["z", "y"]}],
            "loss": "L", "params": ["w", "bb"],
            "optimizer": {"type": "adam", "lr": 0.01, "clip_norm": 1.0,
                          "schedule": "cosine", "total": 10, "warmup": 2},
            "step": 3, "grads": True, "outputs": ["z"]}),
        "train_step_sgd": put("x", shape=(4, 3)) + put("w", shape=(3, 2), fill=0.1) +
        put("lbl", "i32", (4,), 1) +
        req("train.step", {"nodes": [
            {"id": "z", "op": "matmul", "inputs": ["x", "w"]},
            {"id": "L", "op": "cross_entropy", "inputs": ["z", "lbl"]}],
            "loss": "L", "params": ["w"],
            "optimizer": {"type": "sgd", "momentum": 0.9, "nesterov": True,
                          "schedule": "step", "gamma": 0.5, "step_size": 2}}),
        "train_run": put("x", shape=(8, 3)) + put("y", shape=(8, 1)) +
        put("w", shape=(3, 1), fill=0.1) + put("bb", shape=(1,), fill=0.0) +
        req("train.run", {"nodes": [
            {"id": "h", "op": "matmul", "inputs": ["xb", "w"]},
            {"id": "z", "op": "add", "inputs": ["h", "bb"]},
            {"id": "L", "op": "mse", "inputs": ["z", "yb"]},
            {"id": "m", "op": "mean", "inputs": ["z"]}],
            "loss": "L", "params": ["w", "bb"], "optimizer": {"type": "adamw"},
            "data": {"xb": "x", "yb": "y"}, "batch_size": 2, "epochs": 1, "seed": 3,
            "shuffle": True, "progress_every": 1, "start_step": 1,
            "eval": {"data": {"xb": "x", "yb": "y"}, "every": 2, "metrics": ["m"]},
            "stop_loss": -1}) + req("ping"),
        "train_run_long": put("x", shape=(8, 3)) + put("y", shape=(8, 1)) +
        put("w", shape=(3, 1), fill=0.1) +
        req("train.run", {"nodes": [
            {"id": "h", "op": "matmul", "inputs": ["xb", "w"]},
            {"id": "L", "op": "mse", "inputs": ["h", "yb"]}],
            "loss": "L", "params": ["w"], "data": {"xb": "x", "yb": "y"},
            "batch_size": 1, "steps": 1000}) + req("tensor.stat", {"name": "w"}),
        # Odd msgids are uid 1001 (in group 100), even ones uid 1000.
        "tensor_chmod": req("tensor.put", {"name": "a", "dtype": "u8", "shape": [2], "data": b"ab"},
                            msgid=101) +
        req("tensor.chmod", {"name": "a", "mode": "group-read,world-read", "group": 100}, msgid=103) +
        req("tensor.stat", {"name": "a"}, msgid=104) + req("tensor.get", {"name": "a"}, msgid=106) +
        req("tensor.delete", {"name": "a"}, msgid=108) +
        req("tensor.chmod", {"name": "a", "mode": "private"}, msgid=105),
        "model": put("x", shape=(4, 3)) + put("m/w", shape=(3, 2), fill=0.1) + put("m/b", shape=(2,)) +
        put("lbl", "i32", (4,), 1) +
        req("model.define", {"name": "m", "nodes": [
            {"id": "z0", "op": "matmul", "inputs": ["x", "m/w"]},
            {"id": "logits", "op": "add", "inputs": ["z0", "m/b"]},
            {"id": "loss", "op": "cross_entropy", "inputs": ["logits", "y"]}],
            "loss": "loss", "params": ["m/w", "m/b"],
            "inputs": [{"name": "x", "dtype": "f32", "shape": [1, 3]},
                       {"name": "y", "dtype": "i32", "shape": [1]}],
            "outputs": ["logits"], "optimizer": {"type": "adam", "lr": 0.01}}) +
        req("model.list") + req("model.stat", {"name": "m"}) +
        req("model.evaluate", {"model": "m", "data": {"x": "x", "y": "lbl"}, "batch_size": 2}) +
        req("model.predict", {"model": "m", "inputs": {"x": "x"}}) +
        req("model.delete", {"name": "m", "tensors": True}),
        # Edge cases: each must be answered with an error, not a crash.
        "bad_unknown_method": req("no.such.method", {}),
        "bad_unknown_param": req("ping", {"extra": 1}),
        "bad_duplicate_key": b"\x94\x00\x02\xaatensor.get\x91\x82\xa4name\xa1a\xa4name\xa1b",
        "bad_types": req("tensor.put", {"name": 5, "dtype": "f32", "shape": [1], "data": b"1234"}) +
        req("tensor.put", {"name": "x", "dtype": "f64", "shape": [1], "data": b"1234"}) +
        req("tensor.put", {"name": "x", "dtype": "f32", "shape": [-1], "data": b"1234"}) +
        req("tensor.put", {"name": "x", "dtype": "f32", "shape": [1] * 9, "data": b"1234"}) +
        req("tensor.put", {"name": "x", "dtype": "f32", "shape": [2**32, 2**32], "data": b""}) +
        req("tensor.put", {"name": "x", "dtype": "f32", "shape": [2], "data": b"1234"}) +
        req("tensor.put", {"name": "bad name!", "dtype": "u8", "shape": [1], "data": b"1"}) +
        req("tensor.put", {"name": "x" * 256, "dtype": "u8", "shape": [1], "data": b"1"}),
        "bad_ops": setup + req("op.run", {"op": "nope", "inputs": ["a"]}) +
        req("op.run", {"op": "add", "inputs": ["a"] * 9}) +
        req("op.run", {"op": "add", "inputs": ["a", "m"]}) +
        req("op.run", {"op": "matmul", "inputs": ["a", "b"]}) +
        req("op.run", {"op": "sum", "inputs": ["a"], "attrs": {"axis": [0, 0, 5]}}) +
        req("op.run", {"op": "reshape", "inputs": ["a"], "attrs": {"shape": [-1, -1]}}) +
        req("op.run", {"op": "slice", "inputs": ["a"], "attrs": {"starts": [0], "ends": [1],
                                                                 "steps": [0]}}) +
        req("op.run", {"op": "conv2d", "inputs": ["a", "b"], "attrs": {"groups": 0}}) +
        req("op.run", {"op": "arange", "inputs": [], "attrs": {"stop": 1e30, "step": 1e-30}}) +
        req("op.run", {"op": "full", "inputs": [], "attrs": {"shape": [2**62], "value": 1}}) +
        req("op.run", {"op": "add", "inputs": ["a", "b"], "attrs": {"scalar": "x"}}) +
        req("op.run", {"op": "add", "inputs": ["a", "b"], "out": "a/../b"}),
        "bad_graph": setup + req("graph.run", {"nodes": []}) +
        req("graph.run", {"nodes": [5]}) +
        req("graph.run", {"nodes": [{"id": "x", "op": "neg", "inputs": ["a"]},
                                    {"id": "x", "op": "neg", "inputs": ["x"]}]}) +
        req("graph.run", {"nodes": [{"op": "neg", "inputs": ["a"], "out": "o"},
                                    {"op": "abs", "inputs": ["a"], "out": "o"}]}) +
        req("graph.run", {"nodes": [{"id": "x", "op": "neg", "inputs": ["a"]}],
                          "outputs": ["y"]}),
        "bad_train": setup + req("train.step", {"nodes": [{"id": "z", "op": "sum", "inputs": ["a"]}],
                                                "loss": "q", "params": ["a"]}) +
        req("train.step", {"nodes": [{"id": "z", "op": "sum", "inputs": ["a"]}],
                           "loss": "z", "params": ["a", "a"]}) +
        req("train.step", {"nodes": [{"id": "z", "op": "sum", "inputs": ["a"]}],
                           "loss": "z", "params": ["a"],
                           "optimizer": {"type": "adam", "beta1": 1.5}}) +
        req("train.step", {"nodes": [{"id": "z", "op": "sum", "inputs": ["a"]}],
                           "loss": "z", "params": ["b"]}) +
        req("train.run", {"nodes": [{"id": "z", "op": "sum", "inputs": ["xb"]}],
                          "loss": "z", "params": ["a"], "data": {"xb": "a"},
                          "batch_size": 0}) +
        req("train.run", {"nodes": [{"id": "z", "op": "sum", "inputs": ["xb"]}],
                          "loss": "z", "params": ["a"], "data": {"xb": "a", "yb": "m"},
                          "batch_size": 1, "epochs": 1, "steps": 2}),
        # Several devices (docs/devices.md): the harness has two stub devices.
        "devices": setup + put("d1", device=1) + put("w", shape=(3,), fill=0.1, device=0) +
        req("tensor.copy", {"src": "a", "dst": "a1", "device": 1}) +
        req("tensor.copy", {"src": "a1", "dst": "a1", "device": 0}) +
        req("op.run", {"op": "add", "inputs": ["a", "d1"]}) +
        req("op.run", {"op": "neg", "inputs": ["d1"], "device": 1, "out": "n1"}) +
        req("graph.run", {"nodes": [{"id": "x", "op": "neg", "inputs": ["a"]},
                                    {"id": "y", "op": "neg", "inputs": ["d1"], "device": 1},
                                    {"id": "z", "op": "full", "inputs": [], "device": 1,
                                     "attrs": {"shape": [2], "value": 1}}],
                          "outputs": ["x", "y", "z"]}) +
        req("train.run", {"nodes": [{"id": "h", "op": "mul", "inputs": ["xb", "w"]},
                                    {"id": "z", "op": "mean", "inputs": ["h"]}],
                          "loss": "z", "params": ["w"], "data": {"xb": "a"},
                          "batch_size": 2, "steps": 2, "devices": [0, 1]}) +
        req("tensor.copy", {"src": "a", "dst": "q", "device": 7}) +
        req("train.run", {"nodes": [{"id": "z", "op": "sum", "inputs": ["xb"]}],
                          "loss": "z", "params": ["a"], "data": {"xb": "a"},
                          "batch_size": 1, "devices": [1, 0]}),
        "bad_framing": req("ping") + b"\x94\x00\x05\xa4ping\x92\x80\x80" +
        b"\x94\x00\xce\xff\xff\xff\xff\xa4ping\x90" + b"\x93\x01\x02\x03" + req("ping"),
        "params_not_map": b"\x94\x00\x04\xa4ping\x91\x05" + req("info"),
        # every string as bin, and every string and byte string as raw (str)
        "all_bin": b"".join(pack_all_bin([0, 2 * i + 200, m, [p]]) for i, (m, p) in enumerate([
            ("tensor.put", {"name": "a", **f32(2, 3)}),
            ("op.run", {"op": "sum", "inputs": ["a"], "attrs": {"axis": [1]}, "out": "b"}),
            ("graph.run", {"nodes": [{"id": "s", "op": "add", "inputs": ["a", "a"]}],
                           "outputs": ["s"]}),
            ("tensor.list", {"prefix": ""}), ("tensor.delete", {"name": "b"})])),
        "raw_client": b"".join(msgpack.packb([0, 2 * i + 300, m, [p]], use_bin_type=False)
                               for i, (m, p) in enumerate([
            ("tensor.put", {"name": "r", **f32(3)}),
            ("op.run", {"op": "cast", "inputs": ["r"], "attrs": {"dtype": "i32"}}),
            ("tensor.get", {"name": "r"})])),
        "notifications": msgpack.packb([2, "no.such", [{"x": 1}]]) +
        pack_all_bin([2, "nvim_event", []]) + msgpack.packb([2, "ping", []]) +
        msgpack.packb([0, 320, "ping", []]),
    }
    for name, data in seeds.items():
        write("params", name, data)


def rpc_corpus():
    seeds = {
        "request": req("tensor.get", {"name": "w"}),
        "request_no_params": req("ping"),
        "pipelined": req("ping") + req("info") + req("tensor.list", {"prefix": "a"}),
        "response": msgpack.packb([1, 3, None, {"pong": True}]),
        "error_response": msgpack.packb([1, 3, {"code": 3, "name": "INVALID_ARGUMENT",
                                                "message": "x"}, None]),
        "notification": msgpack.packb([2, "train.progress", [{"step": 1}]]),
        "put_bin": req("tensor.put", {"name": "a", **f32(4, 4)}),
        "all_types": msgpack.packb([0, 1, "x", [{"n": None, "t": True, "f": False, "i": -5,
                                                  "u": 2**40, "neg": -2**40, "f32": 1.5,
                                                  "s": "s" * 40, "b": b"\0" * 300,
                                                  "a": list(range(20)), "m": {str(k): k for k in range(20)},
                                                  "e": msgpack.ExtType(5, b"abcd"),
                                                  "e8": msgpack.ExtType(1, b"x" * 20)}]],
                                   use_bin_type=True),
        "fixext": b"\x94\x00\x01\xa1x\x91\x81\xa1e\xd4\x01\x02",
        "deep": b"\x91" * 31 + b"\xc0",
        "too_deep": b"\x91" * 40 + b"\xc0",
        "huge_bin_header": b"\x94\x00\x01\xa1x\x91\x81\xa1d\xc6\xff\xff\xff\xff",
        "huge_array_header": b"\xdd\xff\xff\xff\xff",
        "huge_map_header": b"\xdf\x7f\xff\xff\xff",
        "huge_str_header": b"\x94\x00\x01\xdb\xff\xff\xff\xf0",
        "never_used_byte": b"\x94\x00\x01\xc1",
        "truncated": req("tensor.get", {"name": "w"})[:-3],
        "msgid_too_big": b"\x94\x00\xcf\x00\x00\x00\x01\x00\x00\x00\x00\xa4ping\x90",
        "method_empty": b"\x94\x00\x01\xa0\x90",
        "method_long": msgpack.packb([0, 1, "m" * 70, []]),
        "params_two_maps": msgpack.packb([0, 1, "ping", [{}, {}]]),
        "params_not_array": msgpack.packb([0, 1, "ping", {}]),
        "wrong_length": msgpack.packb([0, 1, "ping"]) + msgpack.packb([1, 1, None]),
        "type_3": msgpack.packb([3, 1, "ping", []]),
        "not_array": msgpack.packb({"a": 1}),
        "negative_type": msgpack.packb([-1, 1, "ping", []]),
        "empty": b"",
        "method_bin": b"\x94\x00\x01\xc4\x04ping\x90",
        "method_bin_not_utf8": b"\x94\x00\x01\xc4\x02\xff\xfe\x90",
        "method_str_not_utf8": b"\x94\x00\x01\xa2\xc0\xaf\x90",
        "notification_bin": b"\x93\x02\xc4\x08nvim_rpc\x91\x81\xc4\x01k\xc4\x01v",
        "notification_unknown": msgpack.packb([2, "no.such", [{"a": 1}]]) + req("ping"),
        "all_bin_request": pack_all_bin([0, 9, "tensor.get", [{"name": "w"}]]),
    }
    for name, data in seeds.items():
        write("rpc", name, data)


def dictionary(path, tokens):
    with open(path, "w") as f:
        f.write("# libFuzzer dictionary, written by make_corpus.py\n")
        for t in sorted(set(tokens)):
            f.write('"%s"\n' % "".join(c if 32 <= ord(c) < 127 and c not in '"\\'
                                       else "\\x%02x" % ord(c) for c in t))


def main():
    params_corpus()
    kernel_forbidden_corpus()
    rpc_corpus()
    words = ["ping", "info", "tensor.put", "tensor.get", "tensor.stat", "tensor.list",
             "tensor.delete", "op.run", "graph.run", "train.step", "train.run",
             "name", "dtype", "shape", "data", "if_absent", "prefix", "op", "inputs", "attrs",
             "out", "nodes", "outputs", "id", "loss", "params", "optimizer", "step", "grads",
             "batch_size", "epochs", "steps", "seed", "shuffle", "eval", "start_step",
             "progress_every", "stop_loss", "every", "metrics",
             "type", "lr", "momentum", "dampening", "nesterov", "weight_decay", "beta1", "beta2",
             "eps", "clip_norm", "schedule", "gamma", "step_size", "warmup", "total", "min_lr",
             "sgd", "adam", "adamw", "constant", "cosine",
             "f32", "f16", "bf16", "i32", "u8",
             "scalar", "reverse", "axis", "keepdims", "correction", "min", "max", "approximate",
             "reduction", "label_smoothing", "ignore_index", "stride", "padding", "dilation",
             "groups", "kernel_size", "dim0", "dim1", "dims", "starts", "ends", "axes", "pads",
             "value", "mode", "num_classes", "start", "stop", "ndim", "training",
             "input_shape", "weight_shape", "decoupled", "mean", "sum", "none", "tanh",
             "tensor.chmod", "mode", "group", "group-read,world-read", "model.define",
             "model.list", "model.stat", "model.delete", "model.evaluate", "model.predict",
             "model", "replace", "tensors", "fuse", "tensor.copy", "src", "dst", "device",
             "devices",
             "kernel", "kernel.create", "kernel.run",
             "kernel.list", "kernel.delete", "glsl", "spirv", "entry", "workgroup", "push",
             "result"]
    words += OPS_UNARY + OPS_BINARY + OPS_REDUCE
    words += ["where", "clamp", "mse", "cross_entropy", "nll", "binary_cross_entropy_with_logits",
              "matmul", "conv2d", "max_pool2d", "avg_pool2d", "softmax", "log_softmax",
              "layer_norm", "rms_norm", "batch_norm", "transpose", "permute", "reshape", "slice",
              "concat", "stack", "pad", "gather", "index_select", "one_hot", "zeros", "ones",
              "full", "arange", "rand", "randn", "cast", "sgd_buf", "sgd_param", "adam_m",
              "adam_v", "adam_param", "conv2d_grad_input", "conv2d_grad_weight",
              "max_pool2d_grad", "avg_pool2d_grad", "layer_norm_grad", "rms_norm_grad",
              "batch_norm_grad", "batch_norm_grad_weight"]
    packed = [msgpack.packb(w).decode("latin-1") for w in words]
    dictionary(os.path.join(HERE, "params.dict"), packed + ["\x94\x00", "\x91\x81", "\xc4", "\xca"])
    dictionary(os.path.join(HERE, "rpc.dict"),
               ["\x94\x00", "\x94\x01", "\x93\x02", "\xc4", "\xc5", "\xc6", "\xd9", "\xda", "\xdb",
                "\xdc", "\xdd", "\xde", "\xdf", "\xc7", "\xc8", "\xc9", "\xd4", "\xd8", "\xcf",
                "\xce", "\xc1", "\xa4ping", "\xc4\x04ping", "\x91\x80", "\x90"])
    return 0


if __name__ == "__main__":
    sys.exit(main())

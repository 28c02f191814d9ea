"""CPU references of the ops, in float64 NumPy: independent of the shaders.
One entry per op; the op tests compare the daemon against these."""
import math

import numpy as np


def _erf(x):
    return np.vectorize(math.erf)(x)


def _floor_div(a, b):
    a = a.astype(np.int64)
    b = b.astype(np.int64)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(b == 0, 0, np.floor_divide(a, np.where(b == 0, 1, b)))
    return q


def _int_pow(a, b):
    a = a.astype(np.int64)
    b = b.astype(np.int64)
    out = np.ones(np.broadcast(a, b).shape, dtype=np.int64)
    a, b = np.broadcast_arrays(a, b)
    for idx in np.ndindex(out.shape):
        x, e = int(a[idx]), int(b[idx])
        if e < 0:
            out[idx] = 1 if x == 1 else ((-1 if e % 2 else 1) if x == -1 else 0)
        else:
            out[idx] = pow(x, e)
    return out


def wrap(values, dtype):
    """Integer results wrap like the dtype (two's complement, mod 256 for u8)."""
    v = np.asarray(values).astype(np.int64)
    if dtype == "i32":
        return ((v + 2**31) % 2**32) - 2**31
    if dtype == "u8":
        return v % 256
    return values


BINARY = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "pow": lambda a, b: np.power(a, b),
    "maximum": np.maximum,
    "minimum": np.minimum,
    "relu_grad": lambda g, x: np.where(x > 0, g, 0.0),
}

BINARY_INT = {
    "add": lambda a, b: a.astype(np.int64) + b.astype(np.int64),
    "sub": lambda a, b: a.astype(np.int64) - b.astype(np.int64),
    "mul": lambda a, b: a.astype(np.int64) * b.astype(np.int64),
    "div": _floor_div,
    "pow": _int_pow,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "relu_grad": lambda g, x: np.where(x > 0, g, 0),
}

def _gelu_slope(x):
    cdf = 0.5 * (1 + np.vectorize(math.erf)(np.asarray(x, np.float64) / math.sqrt(2)))
    return cdf + x * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


def _gelu_tanh_slope(x):
    x = np.asarray(x, np.float64)
    c = math.sqrt(2 / math.pi)
    t = np.tanh(c * (x + 0.044715 * x ** 3))
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x)


# Float-only binary ops (gradient helpers): g, x.
FLOAT_BINARY = {
    "gelu_grad": lambda g, x: g * _gelu_slope(x),
    "gelu_tanh_grad": lambda g, x: g * _gelu_tanh_slope(x),
}

COMPARE = {
    "eq": np.equal, "ne": np.not_equal, "lt": np.less,
    "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
}


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


UNARY = {
    "neg": lambda x: -x,
    "abs": np.abs,
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1 / np.sqrt(x),
    "sin": np.sin,
    "cos": np.cos,
    "tanh": np.tanh,
    "sigmoid": _sigmoid,
    "relu": lambda x: np.maximum(x, 0),
    "gelu": lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2))),
    "erf": _erf,
    "gelu_tanh": lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))),
    "silu": lambda x: x * _sigmoid(x),
    "softplus": lambda x: np.log1p(np.exp(-np.abs(x))) + np.maximum(x, 0),
    "copy": lambda x: x,
}


def where(c, a, b):
    return np.where(c != 0, a, b)


def clamp(x, lo, hi):
    return np.minimum(np.maximum(x, lo), hi)

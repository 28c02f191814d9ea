"""CPU references of the reduce ops, in float64 NumPy (or exact integers):
independent of the shaders. `axis` is None (all axes), an int or a tuple."""
import numpy as np


def _axis(axis):
    if isinstance(axis, list):
        return tuple(axis)
    return axis


def wrap_i32(v):
    v = np.asarray(v).astype(np.int64)
    return ((v + 2**31) % 2**32) - 2**31


def sum_(x, axis=None, keepdims=False):
    return np.sum(x, axis=_axis(axis), keepdims=keepdims)


def mean(x, axis=None, keepdims=False):
    ax = _axis(axis)
    axes = range(x.ndim) if ax is None else (ax if isinstance(ax, tuple) else (ax,))
    n = int(np.prod([x.shape[a] for a in axes]))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.sum(x, axis=ax, keepdims=keepdims) / n


def prod(x, axis=None, keepdims=False):
    return np.prod(x, axis=_axis(axis), keepdims=keepdims)


def max_(x, axis=None, keepdims=False):
    return np.max(x, axis=_axis(axis), keepdims=keepdims)


def min_(x, axis=None, keepdims=False):
    return np.min(x, axis=_axis(axis), keepdims=keepdims)


def var(x, axis=None, keepdims=False, correction=1.0):
    """torch's var: sum of squared deviations / max(n - correction, 0)."""
    ax = _axis(axis)
    axes = range(x.ndim) if ax is None else (ax if isinstance(ax, tuple) else (ax,))
    n = int(np.prod([x.shape[a] for a in axes]))
    with np.errstate(invalid="ignore", divide="ignore"):
        m = np.sum(x, axis=ax, keepdims=True) / n
        ss = np.sum((x - m) ** 2, axis=ax, keepdims=keepdims)
        return ss / max(n - correction, 0)


def std(x, axis=None, keepdims=False, correction=1.0):
    return np.sqrt(var(x, axis, keepdims, correction))


def argmax(x, axis=None, keepdims=False):
    return np.argmax(x, axis=axis, keepdims=keepdims)


def argmin(x, axis=None, keepdims=False):
    return np.argmin(x, axis=axis, keepdims=keepdims)


def sum_i32(x, axis=None, keepdims=False):
    return wrap_i32(np.sum(x.astype(np.int64), axis=_axis(axis), keepdims=keepdims))


def prod_i32(x, axis=None, keepdims=False):
    u = x.astype(np.int64).astype(np.uint64)
    return wrap_i32(np.prod(u, axis=_axis(axis), keepdims=keepdims, dtype=np.uint64) % np.uint64(2**32))


FLOAT = {"sum": sum_, "mean": mean, "prod": prod, "max": max_, "min": min_, "var": var, "std": std,
         "argmax": argmax, "argmin": argmin}
INT = {"sum": sum_i32, "prod": prod_i32, "max": max_, "min": min_, "argmax": argmax, "argmin": argmin}

"""CPU references of the layout ops (transpose, permute, reshape, slice,
concat, stack, pad, gather / index_select, index_add, one_hot) in NumPy, written from
docs/ops.md, independent of the shaders. Inputs arrive as float64 arrays
(the harness quantizes them to their dtype first)."""
import numpy as np


def transpose(x, dim0=-2, dim1=-1):
    return np.swapaxes(x, dim0, dim1)


def permute(x, dims):
    return np.transpose(x, dims)


def reshape(x, shape):
    return np.reshape(x, shape)


def slice_(x, starts, ends, steps=None, axes=None):
    """Python slicing per axis: x[start:end:step] on each listed axis."""
    axes = list(range(len(starts))) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    idx = [slice(None)] * x.ndim
    for a, b, e, s in zip(axes, starts, ends, steps):
        idx[a] = slice(b, e, s)
    return x[tuple(idx)]


def concat(*xs, axis=0):
    return np.concatenate(xs, axis=axis)


def stack(*xs, axis=0):
    return np.stack(xs, axis=axis)


def to_int_dtype(v, dtype):
    """A number stored into an integer dtype: NaN -> 0, truncate toward zero,
    saturate."""
    v = np.nan_to_num(np.trunc(np.asarray(v, dtype=np.float64)), nan=0.0, posinf=np.inf, neginf=-np.inf)
    lo, hi = (0, 255) if dtype == "u8" else (-2**31, 2**31 - 1)
    return np.clip(v, lo, hi)


def fill_value(v, dtype):
    """`v` as the value stored in `dtype` (the harness rounds floats)."""
    if dtype in ("i32", "u8"):
        return to_int_dtype(v, dtype)
    return np.float64(np.float32(v))


def pad(x, pads, value=0.0, axes=None, dtype="f32"):
    """pads: (before, after) per axis of `axes`, default the last len(pads)/2."""
    k = len(pads) // 2
    axes = list(range(x.ndim - k, x.ndim)) if axes is None else [a % x.ndim for a in axes]
    width = [(0, 0)] * x.ndim
    for j, a in enumerate(axes):
        width[a] = (pads[2 * j], pads[2 * j + 1])
    return np.pad(x, width, mode="constant", constant_values=fill_value(value, dtype))


def gather(x, idx, axis=0):
    """np.take, except that an index in [-n, 0) counts from the end and any
    other index outside [0, n) gives zeros."""
    axis = axis % x.ndim
    n = x.shape[axis]
    i = idx.astype(np.int64)
    i = np.where(i < 0, i + n, i)
    valid = (i >= 0) & (i < n)
    safe = np.where(valid, i, 0)
    if n == 0:
        out_shape = x.shape[:axis] + idx.shape + x.shape[axis + 1:]
        return np.zeros(out_shape)
    out = np.take(x, safe, axis=axis)
    mask = valid.reshape((1,) * axis + valid.shape + (1,) * (x.ndim - axis - 1))
    return np.where(mask, out, 0)


def index_add(x, idx, src, axis=0):
    """x with src's slices added at the indices along `axis`, one index at a
    time in order (gather's index rules: [-n, 0) counts from the end, other
    indices outside [0, n) add nothing)."""
    axis = axis % x.ndim
    n = x.shape[axis]
    out = np.array(x, dtype=np.float64, copy=True)
    flat = idx.astype(np.int64).reshape(-1)
    s = np.asarray(src, dtype=np.float64).reshape(x.shape[:axis] + (flat.size,) + x.shape[axis + 1:])
    o, s = np.moveaxis(out, axis, 0), np.moveaxis(s, axis, 0)
    for k, v in enumerate(flat):
        v = v + n if v < 0 else v
        if 0 <= v < n:
            o[v] += s[k]
    return out


def index_add_f32_order(x, idx, src, axis=0):
    """index_add's documented float order (docs/ops.md): for each element,
    the source values of its indices summed in index order in f32 starting
    from 0, then x added, in f32; the result exactly as the daemon's."""
    axis = axis % x.ndim
    n = x.shape[axis]
    flat = idx.astype(np.int64).reshape(-1)
    s = np.asarray(src, dtype=np.float32).reshape(x.shape[:axis] + (flat.size,) + x.shape[axis + 1:])
    s = np.moveaxis(s, axis, 0)
    acc = np.zeros(np.moveaxis(np.asarray(x), axis, 0).shape, np.float32)
    for k, v in enumerate(flat):
        v = v + n if v < 0 else v
        if 0 <= v < n:
            acc[v] = acc[v] + s[k]
    out = np.moveaxis(acc, 0, axis) + np.asarray(x, dtype=np.float32)
    return out.astype(np.float64)


def one_hot(idx, num_classes):
    i = idx.astype(np.int64)
    return (i[..., None] == np.arange(num_classes)).astype(np.float64)

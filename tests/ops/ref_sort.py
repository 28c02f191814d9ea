"""CPU references of sort.c's ops (docs/ops.md, "Sorting and scans"), in
NumPy: a stable sort where NaN is the largest value (torch.sort(stable=True)),
ties in index order also when descending; topk as the first k of that
order; cumsum as torch.cumsum. Inputs arrive as float64 arrays."""
import numpy as np


def order(x, axis, descending=False):
    """The stable sort permutation of x along axis (NaN largest)."""
    x = np.moveaxis(np.asarray(x, dtype=np.float64), axis, -1)
    nan = np.isnan(x)
    val = np.where(nan, 0.0, x)
    idx = np.broadcast_to(np.arange(x.shape[-1]), x.shape)
    out = np.empty(x.shape, dtype=np.int64)
    for r in np.ndindex(*x.shape[:-1]):
        if descending:
            keys = (idx[r], -val[r], ~nan[r])
        else:
            keys = (idx[r], val[r], nan[r])
        out[r] = np.lexsort(keys)
    return np.moveaxis(out, -1, axis)


def sort(x, axis=-1, descending=False):
    return np.take_along_axis(np.asarray(x), order(x, axis, descending), axis)


def argsort(x, axis=-1, descending=False):
    return order(x, axis, descending)


def topk(x, k, axis=-1, largest=True):
    o = order(x, axis, largest)
    o = np.take(o, np.arange(k), axis=axis)
    return np.take_along_axis(np.asarray(x), o, axis), o


def sort_grad(x, g, axis=-1, descending=False):
    """g (k long along axis) scattered back to the positions it came from."""
    o = np.take(order(x, axis, descending), np.arange(np.shape(g)[axis]), axis=axis)
    out = np.zeros(np.shape(x))
    np.put_along_axis(out, o, g, axis)
    return out


def cumsum(x, axis, dtype, reverse=False):
    """f32: summed in f32 in order, as torch does on the CPU; i32 wraps."""
    x = np.asarray(x)
    if reverse:
        x = np.flip(x, axis)
    if dtype == "f32":
        r = np.cumsum(x.astype(np.float32), axis=axis, dtype=np.float32).astype(np.float64)
    elif dtype == "i32":
        r = np.cumsum(x.astype(np.int64), axis=axis)
        r = ((r + 2**31) % 2**32 - 2**31).astype(np.float64)
    else:
        r = np.cumsum(x, axis=axis)
    return np.flip(r, axis) if reverse else r

"""CPU reference of the linalg family (matmul), float64 NumPy, independent of
the shaders: an explicit broadcast-and-einsum rather than np.matmul itself,
so the reference does not share np.matmul's shape logic with the test."""
import numpy as np


def matmul(a, b):
    """NumPy matmul semantics, spelled out."""
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    a3 = np.broadcast_to(a2, batch + a2.shape[-2:])
    b3 = np.broadcast_to(b2, batch + b2.shape[-2:])
    out = np.einsum("...mk,...kn->...mn", a3, b3)
    if a.ndim == 1:
        out = out[..., 0, :]
    if b.ndim == 1:
        out = out[..., 0]
    return out


def matmul_t(ta, tb):
    """matmul with the transpose attrs: a transposed operand is stored with
    its last two dims swapped (an explicit swapaxes of the stored array)."""
    def f(a, b):
        a = np.asarray(a, np.float64)
        b = np.asarray(b, np.float64)
        return matmul(np.swapaxes(a, -1, -2) if ta else a, np.swapaxes(b, -1, -2) if tb else b)
    return f


def matmul_epilogue(ta, tb, activation, dtype):
    """matmul with the epilogue attrs: the product (transpose attrs as in
    matmul_t) rounded to `dtype`, plus the bias (input 2, one value per
    column, when given) rounded again, then relu when asked: the order of the
    nodes matmul -> add -> relu it stands for. With activation "relu_grad"
    input 2 is a mask of the result's shape instead: the rounded product
    where the mask is > 0, else 0 (matmul -> relu_grad)."""
    import harness

    def f(a, b, bias=None):
        y = harness.quantize(matmul_t(ta, tb)(a, b), dtype)
        if activation == "relu_grad":
            return np.where(np.asarray(bias, np.float64) > 0, y, 0.0)
        if bias is not None:
            y = harness.quantize(y + np.asarray(bias, np.float64).reshape(-1), dtype)
        if activation == "relu":
            y = np.maximum(y, 0.0)
        return y
    return f

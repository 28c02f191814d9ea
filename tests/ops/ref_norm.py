"""CPU references of the normalisation ops in float64 NumPy: softmax,
log_softmax, layer_norm, rms_norm, batch_norm. Independent of the shaders."""
import numpy as np


def softmax(x, axis=-1):
    if x.ndim == 0:
        return np.ones_like(x)
    if x.size == 0:
        return x
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def logsumexp(x, axis=-1, keepdims=False):
    """log(sum(exp(x))) with the max taken out; -inf rows stay -inf, a +inf
    element gives +inf (torch.logsumexp)."""
    m = np.max(x, axis=axis, keepdims=True)
    safe = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = safe + np.log(np.sum(np.exp(x - safe), axis=axis, keepdims=True))
    r = np.where(np.isinf(m) & ~np.isnan(r), m, r)
    return r if keepdims else np.squeeze(r, axis=axis)


def log_softmax(x, axis=-1):
    if x.ndim == 0:
        return np.zeros_like(x)
    if x.size == 0:
        return x
    d = x - np.max(x, axis=axis, keepdims=True)
    return d - np.log(np.sum(np.exp(d), axis=axis, keepdims=True))


def layer_norm(x, w=None, b=None, ndim=1, eps=1e-5):
    axes = tuple(range(x.ndim - ndim, x.ndim))
    m = np.mean(x, axis=axes, keepdims=True)
    v = np.mean((x - m) ** 2, axis=axes, keepdims=True)
    y = (x - m) / np.sqrt(v + eps)
    if w is not None:
        y = y * w
    if b is not None:
        y = y + b
    return y


def rms_norm(x, w=None, ndim=1, eps=1e-6):
    axes = tuple(range(x.ndim - ndim, x.ndim))
    y = x / np.sqrt(np.mean(x * x, axis=axes, keepdims=True) + eps)
    return y * w if w is not None else y


def _per_channel(p, x):
    return p.reshape((1, -1) + (1,) * (x.ndim - 2))


def batch_norm(x, rm=None, rv=None, w=None, b=None, training=False, eps=1e-5):
    if x.size == 0:
        return x
    if training:
        axes = (0,) + tuple(range(2, x.ndim))
        m = np.mean(x, axis=axes, keepdims=True)
        v = np.mean((x - m) ** 2, axis=axes, keepdims=True)
    else:
        m, v = _per_channel(rm, x), _per_channel(rv, x)
    y = (x - m) / np.sqrt(v + eps)
    if w is not None:
        y = y * _per_channel(w, x)
    if b is not None:
        y = y + _per_channel(b, x)
    return y


def row_norm_grad(g, x, w=None, ndim=1, eps=1e-5, rms=False):
    """dx of layer_norm(x, w, ...) (rms: rms_norm(x, w)) for the upstream
    gradient g, over the last `ndim` dims: the closed form of the row's
    Jacobian, checked against finite differences of layer_norm / rms_norm
    in tests/ops/test_ops_norm.py."""
    axes = tuple(range(x.ndim - ndim, x.ndim))
    if x.size == 0:
        return np.zeros_like(x)
    xc = x if rms else x - np.mean(x, axis=axes, keepdims=True)
    rstd = 1.0 / np.sqrt(np.mean(xc * xc, axis=axes, keepdims=True) + eps)
    xhat = xc * rstd
    gy = g * w if w is not None else g
    t = gy - xhat * np.mean(gy * xhat, axis=axes, keepdims=True)
    if not rms:
        t = t - np.mean(gy, axis=axes, keepdims=True)
    return rstd * t


def layer_norm_grad(g, x, w=None, ndim=1, eps=1e-5):
    return row_norm_grad(g, x, w, ndim, eps, False)


def rms_norm_grad(g, x, w=None, ndim=1, eps=1e-6):
    return row_norm_grad(g, x, w, ndim, eps, True)


def batch_norm_grad(g, x, w=None, eps=1e-5):
    """dx of batch_norm(x, weight=w) in training mode (statistics of dim 1
    over every other dim, biased variance) for the upstream gradient g: the
    closed form, checked against finite differences of batch_norm in
    tests/ops/test_ops_norm.py."""
    if x.size == 0:
        return np.zeros_like(x)
    axes = (0,) + tuple(range(2, x.ndim))
    xc = x - np.mean(x, axis=axes, keepdims=True)
    rstd = 1.0 / np.sqrt(np.mean(xc * xc, axis=axes, keepdims=True) + eps)
    xhat = xc * rstd
    gy = g * _per_channel(w, x) if w is not None else g
    return rstd * (gy - np.mean(gy, axis=axes, keepdims=True)
                   - xhat * np.mean(gy * xhat, axis=axes, keepdims=True))


def batch_norm_grad_weight(g, x, eps=1e-5):
    """The weight's gradient of batch_norm in training mode: Σ g · xhat per
    channel (dim 1), xhat the batch-normalised x."""
    axes = (0,) + tuple(range(2, x.ndim))
    if x.size == 0:
        return np.zeros(x.shape[1])
    return np.sum(g * batch_norm(x, training=True, eps=eps), axis=axes)

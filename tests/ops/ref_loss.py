"""CPU references of the loss ops, in float64 NumPy (PyTorch's definitions):
independent of the shaders. Class indices arrive as float64 arrays."""
import numpy as np


def reduce(loss, reduction, weight=None):
    if reduction == "none":
        return loss
    if reduction == "sum":
        return np.sum(loss)
    with np.errstate(invalid="ignore", divide="ignore"):
        if weight is None:
            return np.float64(np.sum(loss)) / np.float64(loss.size) if loss.size else np.float64(np.nan)
        return np.sum(loss) / np.sum(weight)


def mse(pred, target, reduction="mean"):
    return reduce((pred - target) ** 2, reduction)


def bce_with_logits(x, t, reduction="mean"):
    # log(1 + exp(x)) - x*t, written so that it cannot overflow
    return reduce(np.maximum(x, 0) - x * t + np.log1p(np.exp(-np.abs(x))), reduction)


def _class_loss(per_class, target, reduction, ignore_index, smoothing_term=None, smoothing=0.0):
    n, c = per_class.shape
    t = target.astype(np.int64)
    loss = np.zeros(n)
    weight = np.ones(n)
    for i in range(n):
        if ignore_index is not None and t[i] == ignore_index:
            loss[i] = 0.0
            weight[i] = 0.0
        elif t[i] < 0 or t[i] >= c:
            loss[i] = np.nan  # documented: an out-of-range class gives NaN
        else:
            loss[i] = per_class[i, t[i]]
            if smoothing:
                loss[i] = (1 - smoothing) * loss[i] + smoothing * smoothing_term[i]
    return reduce(loss, reduction, weight if ignore_index is not None else None)


def cross_entropy(x, target, reduction="mean", label_smoothing=0.0, ignore_index=None):
    m = np.max(x, axis=1, keepdims=True) if x.shape[1] else np.zeros((x.shape[0], 1))
    lse = (m + np.log(np.sum(np.exp(x - m), axis=1, keepdims=True)))
    nlogp = lse - x                      # -log softmax
    uniform = np.mean(nlogp, axis=1) if x.shape[1] else np.zeros(x.shape[0])
    return _class_loss(nlogp, target, reduction, ignore_index, uniform, label_smoothing)


def nll(logp, target, reduction="mean", ignore_index=None):
    return _class_loss(-logp, target, reduction, ignore_index)

"""CPU references of the optimizer ops (docs/ops.md, "Optimizer updates"):
NumPy float64 transcriptions of the algorithm boxes of torch.optim.SGD,
torch.optim.Adam and torch.optim.AdamW (maximize=False, amsgrad=False).

Two layers, both importable by other tests:
- whole steps, for training tests: sgd_step(w, g, buf, ...) -> (w, buf) and
  adam_step(w, g, m, v, t, ...) -> (w, m, v);
- one function per tensord op (sgd_buf, sgd_param, adam_m, adam_v,
  adam_param), each the exact rule that op computes.
Arrays may be any shape; the results are float64."""
import numpy as np


def _f64(x):
    return np.asarray(x, dtype=np.float64)


def sgd_step(w, g, buf=None, lr=0.01, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False):
    """One torch.optim.SGD step. `buf` is the momentum buffer of the previous
    step (None on the first step, or when momentum is 0). Returns (w, buf);
    buf is None when momentum is 0, as PyTorch keeps no buffer then."""
    w, g = _f64(w), _f64(g)
    if nesterov and (momentum <= 0 or dampening != 0):
        raise ValueError("Nesterov momentum requires a momentum and zero dampening")
    d = g + weight_decay * w if weight_decay != 0 else g
    new_buf = None
    if momentum != 0:
        new_buf = d.copy() if buf is None else momentum * _f64(buf) + (1 - dampening) * d
        d = d + momentum * new_buf if nesterov else new_buf
    return w - lr * d, new_buf


def adam_step(w, g, m, v, t, lr=0.001, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0,
              decoupled=False):
    """One torch.optim.Adam step (decoupled=False: weight decay as an L2 term
    added to the gradient) or torch.optim.AdamW step (decoupled=True: the
    weights shrink by lr * weight_decay). `t` counts steps from 1; m and v
    start as zeros. Returns (w, m, v)."""
    if t < 1:
        raise ValueError("the first step is t = 1")
    w, g, m, v = _f64(w), _f64(g), _f64(m), _f64(v)
    if weight_decay != 0:
        if decoupled:
            w = w * (1 - lr * weight_decay)
        else:
            g = g + weight_decay * w
    m = beta1 * m + (1 - beta1) * g
    v = beta2 * v + (1 - beta2) * g * g
    m_hat = m / (1 - beta1 ** t)
    v_hat = v / (1 - beta2 ** t)
    return w - lr * m_hat / (np.sqrt(v_hat) + eps), m, v


# ---- one function per op: the inputs in the op's order, attrs as keywords ----

def sgd_buf(g, w, buf=None, momentum=0.0, dampening=0.0, weight_decay=0.0):
    """The momentum buffer after this step (op sgd_buf): clone(d) on the first
    step (buf None), else momentum * buf + (1 - dampening) * d."""
    g = _f64(g)
    d = g + weight_decay * _f64(w) if weight_decay != 0 else g
    return d.copy() if buf is None else momentum * _f64(buf) + (1 - dampening) * d


def sgd_param(w, g, buf=None, lr=None, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False):
    """The new weights (op sgd_param); `buf` is the OLD momentum buffer."""
    return sgd_step(w, g, buf if momentum != 0 else None, lr=lr, momentum=momentum, dampening=dampening,
                    weight_decay=weight_decay, nesterov=nesterov)[0]


def _grad(g, w, weight_decay, decoupled):
    g = _f64(g)
    if weight_decay != 0 and not decoupled:
        return g + weight_decay * _f64(w)
    return g


def adam_m(g, m, w=None, beta1=0.9, weight_decay=0.0, decoupled=False):
    """The new first moment (op adam_m)."""
    return beta1 * _f64(m) + (1 - beta1) * _grad(g, w, weight_decay, decoupled)


def adam_v(g, v, w=None, beta2=0.999, weight_decay=0.0, decoupled=False):
    """The new second moment (op adam_v)."""
    gg = _grad(g, w, weight_decay, decoupled)
    return beta2 * _f64(v) + (1 - beta2) * gg * gg


def adam_param(w, m_new, v_new, lr=None, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0,
               decoupled=False, step=None):
    """The new weights from the new moments (op adam_param)."""
    w = _f64(w)
    if decoupled and weight_decay != 0:
        w = w * (1 - lr * weight_decay)
    m_hat = _f64(m_new) / (1 - beta1 ** step)
    v_hat = _f64(v_new) / (1 - beta2 ** step)
    return w - lr * m_hat / (np.sqrt(v_hat) + eps)

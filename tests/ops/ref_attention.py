"""CPU references of attention.c's ops (docs/ops.md, "Attention"), in NumPy
float64: the scores materialised, softmax, the product; the backward from
the textbook formulas (dP = g vᵀ, dS = P ∘ (dP - rowsum(dP ∘ P))), not from
the daemon's recomputation."""
import numpy as np


def _scores(q, k, causal, scale):
    t, s = q.shape[1], k.shape[1]
    hd = q.shape[2]
    sc = (1.0 / np.sqrt(hd) if scale is None else scale) * np.einsum("ntd,nsd->nts", q, k)
    if causal:
        sc = np.where(np.triu(np.ones((t, s), bool), 1), -np.inf, sc)
    return sc


def probs(q, k, causal=False, scale=None):
    sc = _scores(q, k, causal, scale)
    m = sc.max(axis=-1, keepdims=True)
    e = np.exp(sc - m)
    return e / e.sum(axis=-1, keepdims=True)


def attention(q, k, v, causal=False, scale=None):
    return np.einsum("nts,nsd->ntd", probs(q, k, causal, scale), v)


def lse(q, k, causal=False, scale=None):
    sc = _scores(q, k, causal, scale)
    m = sc.max(axis=-1, keepdims=True)
    return (m + np.log(np.exp(sc - m).sum(axis=-1, keepdims=True)))[..., 0]


def grads(q, k, v, g, causal=False, scale=None):
    """(dq, dk, dv) of sum(g ∘ attention(q, k, v))."""
    sc = 1.0 / np.sqrt(q.shape[2]) if scale is None else scale
    p = probs(q, k, causal, scale)
    dv = np.einsum("nts,ntd->nsd", p, g)
    dp = np.einsum("ntd,nsd->nts", g, v)
    ds = p * (dp - (dp * p).sum(axis=-1, keepdims=True))
    dq = sc * np.einsum("nts,nsd->ntd", ds, k)
    dk = sc * np.einsum("nts,ntd->nsd", ds, q)
    return dq, dk, dv

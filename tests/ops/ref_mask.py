"""CPU references of mask.c's ops (docs/ops.md, "Masks and sampling"), in
NumPy: tril/triu as numpy.tril/triu, masked_fill as torch's, and dropout and
multinomial from an independent Philox stream (ref_create.words): the
uniform of stream word q is (word >> 8) * 2^-24, rand's f32 value."""
import numpy as np

import ref_create


def tril(x, k=0):
    return np.tril(x, k)


def triu(x, k=0):
    return np.triu(x, k)


def masked_fill(x, mask, value):
    return np.where(np.broadcast_to(mask, np.shape(x)) != 0, value, x)


def uniforms(n, seed):
    return ref_create.rand(n, seed, "f32")


def dropout(x, p, seed, dtype):
    """x * (1/(1-p)) where u >= p, else 0; the product in the dtype's
    arithmetic (f32 for f16/bf16, rounded on store)."""
    x = np.asarray(x)
    keep = uniforms(x.size, seed).reshape(x.shape) >= np.float32(p)
    scale = np.float32(1.0 / (1.0 - p)) if p < 1 else np.float32(0)
    return np.where(keep, (x.astype(np.float32) * scale).astype(np.float64), 0.0)


def multinomial(probs, num_samples, seed):
    """Sample s of row r uses uniform r*num_samples + s: the first class whose
    running f32 sum (positive weights only) exceeds u*total (f32)."""
    p = np.asarray(probs, dtype=np.float64)
    rows = p.reshape(-1, p.shape[-1]).astype(np.float32)
    rows = np.where(rows > 0, rows, np.float32(0))
    u = uniforms(rows.shape[0] * num_samples, seed).astype(np.float32).reshape(rows.shape[0], num_samples)
    out = np.empty((rows.shape[0], num_samples), dtype=np.int64)
    for r in range(rows.shape[0]):
        acc = np.cumsum(rows[r], dtype=np.float32)
        total = acc[-1]
        pos = np.nonzero(rows[r] > 0)[0]
        for s in range(num_samples):
            t = np.float32(u[r, s] * total)
            hit = np.nonzero((acc > t) & (rows[r] > 0))[0]
            out[r, s] = hit[0] if len(hit) else (pos[-1] if len(pos) else -1)
    return out.reshape(p.shape[:-1] + (num_samples,))

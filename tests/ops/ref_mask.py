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


def running_sums(w, chunk=1024):
    """mask.comp's running sums of one row of f32 weights: chunk sums in
    order, their exclusive scan, each chunk's sums from its offset."""
    n = len(w)
    sums = [np.float32(0)] * ((n + chunk - 1) // chunk)
    for c in range(len(sums)):
        acc = np.float32(0)
        for v in w[c * chunk:(c + 1) * chunk]:
            acc = np.float32(acc + v)
        sums[c] = acc
    out = np.empty(n, dtype=np.float32)
    off = np.float32(0)
    for c in range(len(sums)):
        acc = off
        for i in range(c * chunk, min(n, (c + 1) * chunk)):
            acc = np.float32(acc + w[i])
            out[i] = acc
        off = np.float32(off + sums[c])
    return out, off


def multinomial(probs, num_samples, seed):
    """Sample s of row r uses uniform u of stream element r*num_samples + s;
    t = u*total (f32): the first class whose running sum exceeds t, or when
    t >= total the first that reaches total; -1 when total <= 0. Negative
    and NaN weights count as 0."""
    p = np.asarray(probs, dtype=np.float64)
    rows = p.reshape(-1, p.shape[-1]).astype(np.float32)
    rows = np.where(rows > 0, rows, np.float32(0))
    u = uniforms(rows.shape[0] * num_samples, seed).astype(np.float32).reshape(rows.shape[0], num_samples)
    out = np.empty((rows.shape[0], num_samples), dtype=np.int64)
    for r in range(rows.shape[0]):
        acc, total = running_sums(rows[r])
        for s in range(num_samples):
            t = np.float32(u[r, s] * total)
            if not total > 0:
                out[r, s] = -1
            elif t < total:
                out[r, s] = np.argmax(acc > t)
            else:
                out[r, s] = np.argmax(acc >= total)
    return out.reshape(p.shape[:-1] + (num_samples,))

"""CPU references of the conv family (conv2d, max_pool2d, avg_pool2d), NCHW,
float64 NumPy loops over the kernel window: independent of the shaders."""
import numpy as np


def _pair(v):
    return (v, v) if np.isscalar(v) else tuple(v)


def conv2d(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    sh, sw = _pair(stride)
    ph, pw = _pair(padding)
    dh, dw = _pair(dilation)
    n, c, h, wd = x.shape
    o, cpg, kh, kw = w.shape
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    xp = np.zeros((n, c, h + 2 * ph, wd + 2 * pw))
    xp[:, :, ph:ph + h, pw:pw + wd] = x
    out = np.zeros((n, o, oh, ow))
    opg = o // groups
    for g in range(groups):
        xs = xp[:, g * cpg:(g + 1) * cpg]
        ws = w[g * opg:(g + 1) * opg]
        for ky in range(kh):
            for kx in range(kw):
                y0, x0 = ky * dh, kx * dw
                patch = xs[:, :, y0:y0 + sh * (oh - 1) + 1:sh, x0:x0 + sw * (ow - 1) + 1:sw]
                out[:, g * opg:(g + 1) * opg] += np.einsum("nchw,oc->nohw", patch, ws[:, :, ky, kx])
    if b is not None:
        out += b[None, :, None, None]
    return out


def _pool(x, kernel_size, stride, padding, reduce):
    kh, kw = _pair(kernel_size)
    sh, sw = _pair(stride if stride is not None else kernel_size)
    ph, pw = _pair(padding)
    n, c, h, w = x.shape
    oh = (h + 2 * ph - kh) // sh + 1
    ow = (w + 2 * pw - kw) // sw + 1
    out = np.zeros((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            y0, x0 = i * sh - ph, j * sw - pw
            win = x[:, :, max(y0, 0):min(y0 + kh, h), max(x0, 0):min(x0 + kw, w)]
            if win.size:
                out[:, :, i, j] = reduce(win.reshape(n, c, -1))
    return out


def max_pool2d(x, kernel_size, stride=None, padding=0):
    return _pool(x, kernel_size, stride, padding, lambda v: np.max(v, axis=2))


def avg_pool2d(x, kernel_size, stride=None, padding=0):
    """Padding is not counted (count_include_pad=False)."""
    return _pool(x, kernel_size, stride, padding, lambda v: np.mean(v, axis=2))

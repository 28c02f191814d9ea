"""CPU references of the conv_grad family, float64 NumPy loops over the
kernel window (the adjoints of ref_conv.py's forward loops): independent of
the shaders."""
import numpy as np

from ref_conv import _pair


def _geom(h, w, kh, kw, stride, padding, dilation):
    sh, sw = _pair(stride)
    ph, pw = _pair(padding)
    dh, dw = _pair(dilation)
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    return sh, sw, ph, pw, dh, dw, oh, ow


def conv2d_grad_input(g, w, input_shape, stride=1, padding=0, dilation=1, groups=1):
    n, c, h, wd = input_shape
    o, cpg, kh, kw = w.shape
    sh, sw, ph, pw, dh, dw, oh, ow = _geom(h, wd, kh, kw, stride, padding, dilation)
    assert g.shape == (n, o, oh, ow), (g.shape, (n, o, oh, ow))
    dxp = np.zeros((n, c, h + 2 * ph, wd + 2 * pw))
    opg = o // groups
    for gr in range(groups):
        gs = g[:, gr * opg:(gr + 1) * opg]
        ws = w[gr * opg:(gr + 1) * opg]
        for ky in range(kh):
            for kx in range(kw):
                y0, x0 = ky * dh, kx * dw
                dxp[:, gr * cpg:(gr + 1) * cpg, y0:y0 + sh * (oh - 1) + 1:sh, x0:x0 + sw * (ow - 1) + 1:sw] += \
                    np.einsum("nohw,oc->nchw", gs, ws[:, :, ky, kx])
    return dxp[:, :, ph:ph + h, pw:pw + wd]


def conv2d_grad_weight(x, g, weight_shape, stride=1, padding=0, dilation=1, groups=1):
    n, c, h, wd = x.shape
    o, cpg, kh, kw = weight_shape
    sh, sw, ph, pw, dh, dw, oh, ow = _geom(h, wd, kh, kw, stride, padding, dilation)
    assert g.shape == (n, o, oh, ow), (g.shape, (n, o, oh, ow))
    xp = np.zeros((n, c, h + 2 * ph, wd + 2 * pw))
    xp[:, :, ph:ph + h, pw:pw + wd] = x
    dw_ = np.zeros(weight_shape)
    opg = o // groups
    for gr in range(groups):
        xs = xp[:, gr * cpg:(gr + 1) * cpg]
        gs = g[:, gr * opg:(gr + 1) * opg]
        for ky in range(kh):
            for kx in range(kw):
                y0, x0 = ky * dh, kx * dw
                patch = xs[:, :, y0:y0 + sh * (oh - 1) + 1:sh, x0:x0 + sw * (ow - 1) + 1:sw]
                dw_[gr * opg:(gr + 1) * opg, :, ky, kx] = np.einsum("nchw,nohw->oc", patch, gs)
    return dw_


def _windows(h, w, kernel_size, stride, padding):
    kh, kw = _pair(kernel_size)
    sh, sw = _pair(stride if stride is not None else kernel_size)
    ph, pw = _pair(padding)
    oh = (h + 2 * ph - kh) // sh + 1
    ow = (w + 2 * pw - kw) // sw + 1
    for i in range(oh):
        for j in range(ow):
            y0, x0 = i * sh - ph, j * sw - pw
            yield i, j, slice(max(y0, 0), min(y0 + kh, h)), slice(max(x0, 0), min(x0 + kw, w))


def max_pool2d_grad(x, g, kernel_size, stride=None, padding=0):
    """The gradient goes to the first maximum of each window (row-major)."""
    n, c, h, w = x.shape
    dx = np.zeros(x.shape)
    for i, j, ys, xs in _windows(h, w, kernel_size, stride, padding):
        win = x[:, :, ys, xs]
        ww = win.shape[3]
        flat = win.reshape(n, c, -1)
        arg = np.argmax(flat, axis=2)  # the first maximum
        for a in range(n):
            for b in range(c):
                k = arg[a, b]
                dx[a, b, ys.start + k // ww, xs.start + k % ww] += g[a, b, i, j]
    return dx


def avg_pool2d_grad(g, input_shape, kernel_size, stride=None, padding=0):
    """count_include_pad=False, as ref_conv.avg_pool2d."""
    n, c, h, w = input_shape
    dx = np.zeros(input_shape)
    for i, j, ys, xs in _windows(h, w, kernel_size, stride, padding):
        cnt = (ys.stop - ys.start) * (xs.stop - xs.start)
        dx[:, :, ys, xs] += g[:, :, i, j][:, :, None, None] / cnt
    return dx

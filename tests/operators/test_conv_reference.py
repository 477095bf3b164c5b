"""The TDL descriptions of Convolution and Pooling, interpreted, equal plain loop-based numpy references.

Independent of MXNet (the conformance test covers that side): the references below are written from the
definitions, one output element at a time.
"""
import numpy as np
import pytest

from tofu.graph.attrs import Attrs
from tofu.tdl.describe import describe
from tofu.tdl.interpret import evaluate


def conv2d_nchw(x, w, b, stride, pad, dilate, groups):
    """out[n, o, y, x] = sum over the group's input channels and the kernel of zero-padded x times w, plus b."""
    n, c, h, wd = x.shape
    f, cg, kh, kw = w.shape
    xp = np.zeros((n, c, h + 2 * pad[0], wd + 2 * pad[1]))
    xp[:, :, pad[0]:pad[0] + h, pad[1]:pad[1] + wd] = x
    oh = (h + 2 * pad[0] - dilate[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + 2 * pad[1] - dilate[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((n, f, oh, ow))
    for i in range(n):
        for o in range(f):
            g = o // (f // groups)
            for y in range(oh):
                for z in range(ow):
                    acc = 0.0 if b is None else float(b[o])
                    for ci in range(cg):
                        for dy in range(kh):
                            for dz in range(kw):
                                yy, zz = y * stride[0] + dy * dilate[0], z * stride[1] + dz * dilate[1]
                                acc += xp[i, g * cg + ci, yy, zz] * w[o, ci, dy, dz]
                    out[i, o, y, z] = acc
    return out


def pool2d_nchw(x, kernel, stride, pad, pool_type, count_include_pad=True):
    """'valid' pooling: max ignores the padding; avg divides by the kernel size or by the in-input count."""
    n, c, h, wd = x.shape
    oh = (h + 2 * pad[0] - kernel[0]) // stride[0] + 1
    ow = (wd + 2 * pad[1] - kernel[1]) // stride[1] + 1
    out = np.zeros((n, c, oh, ow))
    for i in range(n):
        for ch in range(c):
            for y in range(oh):
                for z in range(ow):
                    values = [x[i, ch, yy, zz]
                              for yy in range(y * stride[0] - pad[0], y * stride[0] - pad[0] + kernel[0])
                              for zz in range(z * stride[1] - pad[1], z * stride[1] - pad[1] + kernel[1])
                              if 0 <= yy < h and 0 <= zz < wd]
                    if pool_type == "max":
                        out[i, ch, y, z] = max(values)
                    else:
                        count = kernel[0] * kernel[1] if count_include_pad else len(values)
                        out[i, ch, y, z] = sum(values) / count
    return out


def interpret(op, attrs, inputs, out_shape):
    desc = describe(op, Attrs.of(**attrs), [a.shape for a in inputs], [out_shape])
    (out,) = evaluate(desc, inputs)
    return out


CONV_SETTINGS = [
    dict(stride=(1, 1), pad=(0, 0), dilate=(1, 1), groups=1, bias=True),
    dict(stride=(2, 2), pad=(1, 1), dilate=(1, 1), groups=1, bias=True),
    dict(stride=(1, 2), pad=(2, 1), dilate=(2, 1), groups=1, bias=False),
    dict(stride=(1, 1), pad=(1, 0), dilate=(1, 1), groups=2, bias=False),
]


@pytest.mark.parametrize("s", CONV_SETTINGS, ids=str)
def test_convolution_matches_numpy(s):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 4, 6, 7))
    w = rng.standard_normal((6, 4 // s["groups"], 3, 2))
    b = rng.standard_normal(6) if s["bias"] else None
    expected = conv2d_nchw(x, w, b, s["stride"], s["pad"], s["dilate"], s["groups"])
    attrs = dict(kernel=(3, 2), num_filter=6, stride=s["stride"], pad=s["pad"], dilate=s["dilate"],
                 num_group=s["groups"], no_bias=not s["bias"])
    inputs = [x, w] + ([b] if s["bias"] else [])
    np.testing.assert_allclose(interpret("Convolution", attrs, inputs, expected.shape), expected, rtol=1e-12)


POOL_SETTINGS = [
    dict(kernel=(2, 2), stride=(2, 2), pad=(0, 0), pool_type="max"),
    dict(kernel=(3, 3), stride=(2, 1), pad=(1, 1), pool_type="max"),
    dict(kernel=(3, 2), stride=(2, 2), pad=(1, 1), pool_type="avg"),
    dict(kernel=(3, 3), stride=(1, 2), pad=(1, 1), pool_type="avg", count_include_pad=False),
]


@pytest.mark.parametrize("s", POOL_SETTINGS, ids=str)
def test_pooling_matches_numpy(s):
    x = np.random.default_rng(2).standard_normal((2, 3, 6, 5))
    expected = pool2d_nchw(x, **s)
    np.testing.assert_allclose(interpret("Pooling", s, [x], expected.shape), expected, rtol=1e-12)

"""FLOPs derived from TDL descriptions against the textbook formulas, computed here from the shapes."""
import math

import pytest

from tofu.graph.attrs import Attrs
from tofu.registry import load_builtin_operators
from tofu.sim.flops import OpClass, op_work
from tofu.tdl.describe import describe

load_builtin_operators()


def _work(op, attrs, ins, outs):
    return op_work(describe(op, Attrs.of(**attrs), ins, outs))


@pytest.mark.parametrize("n,k,m", [(4, 6, 5), (32, 128, 64), (1, 7, 3)])
def test_fully_connected_is_2nkm(n, k, m):
    no_bias = _work("FullyConnected", {"num_hidden": m, "no_bias": True}, [(n, k), (m, k)], [(n, m)])
    assert no_bias.flops == 2 * n * k * m
    with_bias = _work("FullyConnected", {"num_hidden": m}, [(n, k), (m, k), (m,)], [(n, m)])
    assert with_bias.flops == 2 * n * k * m + n * m            # one add per output for the bias
    assert no_bias.op_class is OpClass.GEMM and no_bias.contracted == {"data", "weight"}
    assert no_bias.bytes == 4 * (n * k + m * k + n * m)


@pytest.mark.parametrize("stride,pad", [(1, 1), (2, 0), (1, 0)])
def test_convolution_is_2_out_cin_kernel(stride, pad):
    n, c, h, w, f, kh, kw = 2, 3, 9, 8, 4, 3, 2
    oh, ow = (h + 2 * pad - kh) // stride + 1, (w + 2 * pad - kw) // stride + 1
    work = _work("Convolution", {"num_filter": f, "kernel": (kh, kw), "stride": (stride, stride), "pad": (pad, pad),
                                 "no_bias": True}, [(n, c, h, w), (f, c, kh, kw)], [(n, f, oh, ow)])
    assert work.flops == 2 * (n * f * oh * ow) * c * kh * kw
    assert work.op_class is OpClass.CONVOLUTION                 # a contraction with a window


def test_batch_dot_is_2bnkm():
    b, n, k, m = 3, 4, 5, 6
    plain = _work("batch_dot", {}, [(b, n, k), (b, k, m)], [(b, n, m)])
    assert plain.flops == 2 * b * n * k * m and plain.op_class is OpClass.GEMM
    t = _work("batch_dot", {"transpose_a": True, "transpose_b": True}, [(b, k, n), (b, m, k)], [(b, n, m)])
    assert t.flops == 2 * b * n * k * m


def test_elementwise_counts_one_op_per_output_and_no_contraction():
    shape = (3, 4, 5)
    add = _work("elemwise_add", {}, [shape, shape], [shape])
    assert add.flops == math.prod(shape) and add.op_class is OpClass.ELEMENTWISE and not add.contracted
    relu = _work("Activation", {"act_type": "relu"}, [shape], [shape])
    assert relu.flops == math.prod(shape)


def test_max_pooling_reads_each_window_once():
    n, c, h, w = 2, 3, 8, 6
    work = _work("Pooling", {"kernel": (2, 2), "stride": (2, 2), "pool_type": "max"}, [(n, c, h, w)],
                 [(n, c, h // 2, w // 2)])
    assert work.flops == n * c * (h // 2) * (w // 2) * 4         # 4 terms per window, one max step each
    assert work.op_class is OpClass.POOLING


@pytest.mark.parametrize("op,attrs,ins,outs,cls", [
    ("BatchNorm", {}, [(2, 3, 4, 4), (3,), (3,), (3,), (3,)], [(2, 3, 4, 4)], OpClass.NORMALIZATION),
    ("LayerNorm", {}, [(2, 3, 4), (4,), (4,)], [(2, 3, 4)], OpClass.NORMALIZATION),
    ("sum", {"axis": 1}, [(2, 3)], [(2,)], OpClass.POOLING),
    ("slice", {"begin": (0, 1), "end": (2, 3)}, [(2, 3)], [(2, 2)], OpClass.DATA_MOVEMENT),
    ("Concat", {"dim": 0, "num_args": 2}, [(2, 3), (2, 3)], [(4, 3)], OpClass.DATA_MOVEMENT),
    ("add_n", {"num_args": 2}, [(2, 3), (2, 3)], [(2, 3)], OpClass.ELEMENTWISE),
])
def test_op_class_derived_from_the_description(op, attrs, ins, outs, cls):
    assert _work(op, attrs, ins, outs).op_class is cls

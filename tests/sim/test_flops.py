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


def test_an_input_multiplied_by_itself_is_a_gemm_with_two_adjoints():
    """syrk (A A^T) and the interleaved queries-by-keys product read one input as both operands: a GEMM (not a
    pooling of one input), 2 N K M plus the scale per score, whose backward is two contractions."""
    from tofu.sim.flops import backward_work

    s, b, h, d = 4, 2, 3, 5
    qk = _work("_contrib_interleaved_matmul_selfatt_qk", {"heads": h}, [(s, b, 3 * h * d)], [(b * h, s, s)])
    assert qk.op_class is OpClass.GEMM and qk.contracted == {"queries_keys_values"}
    assert qk.flops == 2 * (b * h) * s * s * d + (b * h) * s * s
    assert backward_work(qk, ["queries_keys_values"])[0] == 2 * qk.flops
    syrk = _work("_linalg_syrk", {}, [(3, 4)], [(3, 3)])
    assert syrk.op_class is OpClass.GEMM and syrk.self_contracted == {"A"}
    fc = _work("FullyConnected", {"num_hidden": 3, "no_bias": True}, [(4, 6), (3, 6)], [(4, 3)])
    assert backward_work(fc, ["data"])[0] == fc.flops and not fc.self_contracted


@pytest.mark.parametrize("op,attrs,ins,outs", [
    ("Deconvolution", {"num_filter": 2, "kernel": (3, 3), "stride": (2, 2), "no_bias": True},
     [(1, 3, 4, 4), (3, 2, 3, 3)], [(1, 2, 9, 9)]),
    ("Convolution", {"num_filter": 4, "kernel": (3,), "dilate": (2,), "num_group": 2, "no_bias": True},
     [(1, 4, 9), (4, 2, 3)], [(1, 4, 5)]),
])
def test_a_sliding_window_under_a_division_or_a_group_is_still_a_convolution(op, attrs, ins, outs):
    """A window's index may sit under a floor division (the transposed convolution's (y + pad - dy) // stride);
    a group's channel offset ((co // g) C_g + ci) places without sliding."""
    assert _work(op, attrs, ins, outs).op_class is OpClass.CONVOLUTION

"""TDL descriptions of the matrix-product family: FullyConnected, dot, batch_dot.

Each is one sum over the contracted index. Inputs of any rank keep one index variable per dimension, so every
access stays affine: FullyConnected with ``flatten=True`` contracts one variable per flattened input dimension
(the weight is read at their row-major combination), and N-d ``dot`` keeps the free dimensions of both operands.

``nary`` (tofu.tdl.expr) builds the reduction lambdas whose number of parameters depends on a rank.
"""
from __future__ import annotations

from tofu.tdl.lang import *  # noqa: F403  (the DSL: tofu.tdl.lang.__all__)


def row_major(indices: Sequence, shape: Sequence[int]):
    """The flat row-major offset of ``indices`` in a tensor of ``shape`` (an affine index expression)."""
    flat = 0
    for i, n in zip(indices, shape):
        flat = flat * n + i
    return flat


@dataclass(frozen=True)
class FullyConnectedAttrs:
    num_hidden: int
    no_bias: bool = False
    flatten: bool = True


@tdl_op("FullyConnected", inputs=("data", "weight", "bias?"), attrs=FullyConnectedAttrs, cases=[
    Case(shapes=((4, 6), (3, 6), (3,)), attrs={"num_hidden": 3}),
    Case(shapes=((2, 3, 2, 2), (5, 12), (5,)), attrs={"num_hidden": 5}),
    Case(shapes=((2, 3, 4), (5, 4)), attrs={"num_hidden": 5, "no_bias": True, "flatten": False}),
])
def fully_connected(data: TensorVar, weight: TensorVar, bias: TensorVar | None, attrs: FullyConnectedAttrs):
    """out[b, h] = sum_{k1..kn} data[b, k1, .., kn] * weight[h, flat(k1..kn)] + bias[h]  (flatten=True);
    out[..., h] = sum_k data[..., k] * weight[h, k] + bias[h]  (flatten=False; weight is (num_hidden, in))."""
    bias_of = (lambda h: bias[h]) if bias is not None and not attrs.no_bias else (lambda h: 0.0)
    if attrs.flatten:
        rest = data.shape[1:]
        names = [f"k{d}" for d in range(1, len(rest) + 1)] if len(rest) > 1 else ["k"]
        return lambda b, h: Sum(nary(names, lambda ks: data[(b, *ks)] * weight[h, row_major(ks, rest)])) \
            + bias_of(h)
    return lambda *i: Sum(lambda k: data[(*i[:-1], k)] * weight[i[-1], k]) + bias_of(i[-1])


@dataclass(frozen=True)
class DotAttrs:
    transpose_a: bool = False
    transpose_b: bool = False


@tdl_op("dot", inputs=("lhs", "rhs"), attrs=DotAttrs, cases=[
    Case(shapes=((3, 4), (4, 5))),
    Case(shapes=((4, 3), (5, 4)), attrs={"transpose_a": True, "transpose_b": True}),
    Case(shapes=((2, 3, 4), (4, 5))),
    Case(shapes=((4, 2, 3), (5, 2, 4)), attrs={"transpose_a": True, "transpose_b": True}),
    Case(shapes=((6,), (6,))),
])
def dot(lhs: TensorVar, rhs: TensorVar, attrs: DotAttrs):
    """out[i.., j..] = sum_k lhs[i.., k] * rhs[k, j..]: the last axis of lhs (its first, with transpose_a)
    against the first axis of rhs (its last, with transpose_b); 1-D . 1-D gives shape (1,)."""
    na, nb = lhs.ndim - 1, rhs.ndim - 1
    a_at = (lambda i, k: lhs[(k, *i)]) if attrs.transpose_a else (lambda i, k: lhs[(*i, k)])
    b_at = (lambda j, k: rhs[(*j, k)]) if attrs.transpose_b else (lambda j, k: rhs[(k, *j)])
    if na + nb == 0:   # inner product: MXNet's output has shape (1,)
        return lambda i: Sum(lambda k: a_at((), k) * b_at((), k))
    return lambda *ij: Sum(lambda k: a_at(ij[:na], k) * b_at(ij[na:], k))


@tdl_op("batch_dot", inputs=("lhs", "rhs"), attrs=DotAttrs, cases=[
    Case(shapes=((2, 3, 4), (2, 4, 5))),
    Case(shapes=((2, 4, 3), (2, 5, 4)), attrs={"transpose_a": True, "transpose_b": True}),
    Case(shapes=((2, 2, 3, 4), (2, 2, 3, 5)), attrs={"transpose_a": True}),
])
def batch_dot(lhs: TensorVar, rhs: TensorVar, attrs: DotAttrs):
    """out[b.., m, n] = sum_k lhs[b.., m, k] * rhs[b.., k, n]; the transpose flags swap an operand's last two
    axes."""
    a_at = (lambda b, m, k: lhs[(*b, k, m)]) if attrs.transpose_a else (lambda b, m, k: lhs[(*b, m, k)])
    b_at = (lambda b, n, k: rhs[(*b, n, k)]) if attrs.transpose_b else (lambda b, n, k: rhs[(*b, k, n)])
    return lambda *i: Sum(lambda k: a_at(i[:-2], i[-2], k) * b_at(i[:-2], i[-1], k))

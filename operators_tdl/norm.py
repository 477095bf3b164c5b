"""TDL descriptions of the normalization family: BatchNorm (training-mode batch statistics), LayerNorm.

The statistics are intermediate ``compute`` tensors: the mean is a sum over the normalized dimensions, the
variance a sum over the same dimensions that reads the mean (a nested reduction). The output reads both at the
index of its own statistic, and the affine parameters at the index of the kept axis.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from tofu.errors import TDLError
from tofu.tdl.describe import Case, tdl_expansion, tdl_op
from tofu.tdl.expr import Computed, IndexExpr, Sum, TensorVar, compute, rsqrt, sqrt, square, uses, nary


def _axis(op: str, axis: int, ndim: int) -> int:
    if not -ndim <= axis < ndim:
        raise TDLError(f"{op}: axis {axis} is out of range for data of rank {ndim}")
    return axis % ndim


def _with(index: Sequence[IndexExpr], axis: int, i: IndexExpr) -> tuple[IndexExpr, ...]:
    """``index`` with ``i`` inserted at position ``axis``."""
    return (*index[:axis], i, *index[axis:])


def _without(index: Sequence[IndexExpr], axis: int) -> tuple[IndexExpr, ...]:
    return (*index[:axis], *index[axis + 1:])


def _moments(data: TensorVar, axis: int, per_row: bool) -> tuple[Computed, Computed]:
    """Mean and biased variance of ``data``: over ``axis`` alone, one per position of the other dimensions
    (``per_row``: LayerNorm), or over every dimension but ``axis``, one per channel (BatchNorm)."""
    if per_row:
        shape, n = _without(data.shape, axis), data.shape[axis]
        total = lambda fn, s: Sum(lambda k: fn(_with(s, axis, k)))
    else:          # one reduction variable per reduced dimension
        shape, n = (data.shape[axis],), math.prod(_without(data.shape, axis))
        names = ["b", *(f"s{d}" for d in range(2, data.ndim))]
        total = lambda fn, s: Sum(nary(names, lambda r: fn(_with(r, axis, s[0]))))
    mean = compute("mean", shape, lambda *s: total(lambda i: data[i], s) / float(n))
    var = compute("var", shape, lambda *s: total(lambda i: square(data[i] - mean[s]), s) / float(n))
    return mean, var


@dataclass(frozen=True)
class BatchNormAttrs:
    eps: float = 1e-3
    fix_gamma: bool = True
    use_global_stats: bool = False
    axis: int = 1
    # momentum only updates the moving statistics in place (aux states), never an output;
    # output_mean_var only makes outputs 1 and 2 visible (MXNet's shape inference tells how many are)


@tdl_op("BatchNorm", inputs=("data", "gamma", "beta", "moving_mean", "moving_var"),
        outputs=("output", "mean", "inv_std"), attrs=BatchNormAttrs, cases=[
    Case(shapes=((4, 3, 2), (3,), (3,), (3,), (3,)), positive=(4,), train=True),
    Case(shapes=((2, 3, 2, 2), (3,), (3,), (3,), (3,)), positive=(4,), train=True,
         attrs={"fix_gamma": False, "eps": 1e-2, "output_mean_var": True, "momentum": 0.8}),
    Case(shapes=((2, 3, 4), (4,), (4,), (4,), (4,)), positive=(4,), train=True,
         attrs={"fix_gamma": False, "axis": -1, "output_mean_var": True}),
    Case(shapes=((4, 3, 2), (3,), (3,), (3,), (3,)), positive=(4,), train=True,
         attrs={"fix_gamma": False, "use_global_stats": True, "output_mean_var": True}),
])
def batch_norm(data: TensorVar, gamma: TensorVar, beta: TensorVar, moving_mean: TensorVar, moving_var: TensorVar,
               attrs: BatchNormAttrs):
    """out[.., c, ..] = (data[.., c, ..] - mean[c]) / sqrt(var[c] + eps) * gamma[c] + beta[c], mean and var over
    all dims but axis (training; use_global_stats: the moving ones; fix_gamma: gamma = 1). Outputs 1, 2 are
    mean[c] and 1 / sqrt(var[c] + eps) (MXNet returns the inverse standard deviation, not the variance)."""
    axis = _axis("BatchNorm", attrs.axis, data.ndim)
    if attrs.use_global_stats:
        mean, var = moving_mean, moving_var
    else:
        mean, var = _moments(data, axis, per_row=False)
    inv_std = lambda c: rsqrt(var[c] + attrs.eps)
    scale = (lambda c: inv_std(c)) if attrs.fix_gamma else (lambda c: inv_std(c) * gamma[c])
    # the moving statistics are updated in place per channel (training) or read (use_global_stats)
    channel = [f"i{axis}"]     # the statistics' variable is named like the output's channel variable
    return (lambda *i: uses((data[i] - mean[i[axis]]) * scale(i[axis]) + beta[i[axis]],
                            moving_mean[i[axis]], moving_var[i[axis]]),
            nary(channel, lambda c: mean[c[0]]),
            nary(channel, lambda c: inv_std(c[0])))


@tdl_expansion("BatchNorm")
def batch_norm_exchange(pieces, shapes, attrs: BatchNormAttrs, allreduce):
    """BatchNorm on shards of any non-channel dimensions, with MXNet operators: each worker sums its shard
    per channel, the sums are all-reduced into the batch mean, likewise the squared deviations into the
    (biased) variance, and each worker normalizes its shard. MXNet derives the backward pass, which then
    all-reduces the gradients of the statistics. The moving statistics (aux states) are not updated."""
    import mxnet as mx

    ndim = len(shapes[0][0])
    axis = _axis("BatchNorm", attrs.axis, ndim)
    reduced = tuple(d for d in range(ndim) if d != axis)
    total = float(sum(math.prod(_without(s[0], axis)) for s in shapes))
    bshape = tuple(-1 if d == axis else 1 for d in range(ndim))
    as_b = lambda v: mx.sym.reshape(v, shape=bshape)
    sums = allreduce([mx.sym.sum(p[0], axis=reduced) for p in pieces])
    means = [s / total for s in sums]
    squares = allreduce([mx.sym.sum(mx.sym.square(mx.sym.broadcast_sub(p[0], as_b(m))), axis=reduced)
                         for p, m in zip(pieces, means)])
    outs = []
    for p, m, sq in zip(pieces, means, squares):
        inv_std = mx.sym.rsqrt(sq / total + attrs.eps)
        scale = inv_std if attrs.fix_gamma else inv_std * p[1]
        y = mx.sym.broadcast_add(mx.sym.broadcast_mul(mx.sym.broadcast_sub(p[0], as_b(m)), as_b(scale)),
                                 as_b(p[2]))
        outs.append([y, m, inv_std])
    return outs


@dataclass(frozen=True)
class LayerNormAttrs:
    axis: int = -1
    eps: float = 1e-5


@tdl_op("LayerNorm", inputs=("data", "gamma", "beta"), outputs=("output", "mean", "std"), attrs=LayerNormAttrs,
        cases=[
    Case(shapes=((2, 3, 4), (4,), (4,))),
    Case(shapes=((2, 5, 3), (5,), (5,)), attrs={"axis": 1, "eps": 1e-3, "output_mean_var": True}),
])
def layer_norm(data: TensorVar, gamma: TensorVar, beta: TensorVar, attrs: LayerNormAttrs):
    """out[.., k, ..] = (data[.., k, ..] - mean[..]) / sqrt(var[..] + eps) * gamma[k] + beta[k], statistics over
    axis alone. Outputs 1, 2 are mean and sqrt(var + eps) (the standard deviation), axis kept with extent 1."""
    axis = _axis("LayerNorm", attrs.axis, data.ndim)
    mean, var = _moments(data, axis, per_row=True)
    return (lambda *i: (data[i] - mean[_without(i, axis)]) * rsqrt(var[_without(i, axis)] + attrs.eps)
            * gamma[i[axis]] + beta[i[axis]],
            lambda *i: mean[_without(i, axis)],
            lambda *i: sqrt(var[_without(i, axis)] + attrs.eps))


@tdl_expansion("LayerNorm")
def layer_norm_exchange(pieces, shapes, attrs: LayerNormAttrs, allreduce):
    """LayerNorm on shards of its normalized axis, with MXNet operators: each worker sums its shard along the
    axis, the sums are all-reduced into the row mean, likewise the squared deviations into the (biased)
    variance, and each worker normalizes its shard with its shard of gamma and beta. Outputs per worker: its
    shard of the output, and the whole mean and sqrt(var + eps) with the axis kept at extent 1 (as MXNet's)."""
    import mxnet as mx

    ndim = len(shapes[0][0])
    axis = _axis("LayerNorm", attrs.axis, ndim)
    total = float(sum(s[0][axis] for s in shapes))
    bshape = tuple(-1 if d == axis else 1 for d in range(ndim))
    as_b = lambda v: mx.sym.reshape(v, shape=bshape)
    sums = allreduce([mx.sym.sum(p[0], axis=axis, keepdims=True) for p in pieces])
    means = [s / total for s in sums]
    squares = allreduce([mx.sym.sum(mx.sym.square(mx.sym.broadcast_sub(p[0], m)), axis=axis, keepdims=True)
                         for p, m in zip(pieces, means)])
    outs = []
    for p, m, sq in zip(pieces, means, squares):
        std = mx.sym.sqrt(sq / total + attrs.eps)
        y = mx.sym.broadcast_add(mx.sym.broadcast_mul(mx.sym.broadcast_div(mx.sym.broadcast_sub(p[0], m), std),
                                                      as_b(p[1])), as_b(p[2]))
        outs.append([y, m, std])
    return outs

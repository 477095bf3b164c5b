"""TDL descriptions of the normalization family: BatchNorm (training-mode batch statistics), LayerNorm.

The statistics are intermediate ``compute`` tensors: the mean is a sum over the normalized dimensions, the
variance a sum over the same dimensions that reads the mean (a nested reduction). The output reads both at the
index of its own statistic, and the affine parameters at the index of the kept axis.
"""
from __future__ import annotations

import itertools
import math

from tofu.tdl.lang import *  # noqa: F403  (the DSL: tofu.tdl.lang.__all__)

_AFFINE = itertools.count()       # names of the zero statistics of batch_norm_exchange's affine kernels


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
    momentum: float = 0.9       # updates the moving statistics in place (aux states), never an output
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
    per channel, the sums are all-reduced into the batch mean m, likewise the squared deviations into the
    (biased) variance v, and each worker normalizes its shard. Two all-reduces of a statistic per channel
    forward, two backward (MXNet's derived adjoints).

    The moving statistics (aux states) follow the whole batch's m and v as one device's kernel makes them
    follow its own: MXNet's BatchNorm updates them in its *backward* pass, moving = momentum moving + (1 -
    momentum) batch statistic (biased variance). Each worker runs a BatchNorm kernel on its pieces of the moving
    statistics over two rows, m - sqrt(v) and m + sqrt(v) (whose mean is m and biased variance v; under
    BlockGrad), its output added times 0 to the inverse standard deviation, so that MXNet runs its backward
    (a zero gradient for beta, which it reads) and updates them there. It moves nothing between devices.

    Built to keep no more than BatchNorm's fused kernel until the backward pass (its input x), and to need no
    temporary workspace the size of x (the backward pass of a broadcast operator reduces into one):

    * the normalization is the fused kernel itself, as the affine map y = a x + c, a = gamma / sqrt(v + eps),
      c = beta - m a: run with ``use_global_stats`` on statistics of its own that stay 0 (auxiliary states that
      MXNet's bind sets to zero and the kernel never updates there), with eps 1; its backward pass gives
      dx = a dy, da and dc;
    * each worker's part of the variance is, in value, its two-pass sum of (x - m)^2 (stable; no gradient) plus
      t - t' with t = sum x^2 - 2 m' sum x (m' = m without gradient, t' = t without gradient: the value is 0),
      so its gradient is dt/dx_i = 2 (x_i - m), the variance's own (the term through m vanishes: sum (x - m)
      = 0), and the backward pass reads x, not the deviations."""
    import mxnet as mx

    ndim = len(shapes[0][0])
    axis = _axis("BatchNorm", attrs.axis, ndim)
    reduced = tuple(d for d in range(ndim) if d != axis)
    total = float(sum(math.prod(_without(s[0], axis)) for s in shapes))
    bshape = tuple(-1 if d == axis else 1 for d in range(ndim))
    as_b = lambda v: mx.sym.reshape(v, shape=bshape)
    fixed = mx.sym.BlockGrad
    local = [mx.sym.sum(p[0], axis=reduced) for p in pieces]
    means = [s / total for s in allreduce(local)]
    parts = []
    for p, s, m in zip(pieces, local, means):
        m_fixed = fixed(m)          # one node, read twice
        deviations = fixed(mx.sym.sum(mx.sym.square(mx.sym.broadcast_sub(p[0], as_b(m_fixed))), axis=reduced))
        t = mx.sym.sum(mx.sym.square(p[0]), axis=reduced) - 2 * m_fixed * s
        parts.append(deviations + (t - fixed(t)))
    outs = []
    for p, m, sq in zip(pieces, means, allreduce(parts)):
        var = sq / total
        inv_std = mx.sym.rsqrt(var + attrs.eps)
        if len(p) == 5:         # the moving statistics: updated by a kernel's backward pass, as one device's are
            spread = mx.sym.sqrt(var)           # var >= 0: a sum of squares (its correction term is 0 in value)
            rows = fixed(mx.sym.stack(m - spread, m + spread, axis=0))
            # beta read as gamma too (MXNet writes 1 into gamma under fix_gamma: not that); its output is unused
            moved = mx.sym.BatchNorm(rows, p[2], p[2], p[3], p[4], eps=attrs.eps, momentum=attrs.momentum, axis=1,
                                     fix_gamma=False)
            inv_std = mx.sym.broadcast_add(inv_std, mx.sym.sum(moved) * 0.0)
        a = inv_std if attrs.fix_gamma else inv_std * p[1]
        # statistics 0 and 0 with eps 1: the kernel's (x - 0) / sqrt(0 + 1) * a + c
        n = next(_AFFINE)
        zero = [mx.sym.var(f"_bn_affine{n}_{s}", init=mx.init.Zero()) for s in ("mean", "var")]
        y = mx.sym.BatchNorm(p[0], a, p[2] - m * a, *zero, eps=1.0, axis=axis, fix_gamma=False,
                             use_global_stats=True)
        outs.append([y, m, inv_std])    # the last two given under BlockGrad, as the kernel (registry.Expansion)
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
        outs.append([y, m, std])        # the last two given under BlockGrad, as the kernel (registry.Expansion)
    return outs


def _grouped_moments(data: TensorVar, groups: int) -> tuple[Computed, Computed]:
    """Mean and biased variance of ``data`` (N, C, x..) per instance and group of C / groups consecutive
    channels, over the group's channels and every spatial position: tensors of shape (N, groups)."""
    cg = data.shape[1] // groups
    extents = (cg, *data.shape[2:])
    n_el = float(math.prod(extents))
    names = ["ci", *(f"x{d}" for d in range(data.ndim - 2))]

    def over_group(body):
        return Sum(nary(names, lambda r: body(r[0], r[1:])), extents=extents)

    mean = compute("mean", (data.shape[0], groups),
                   lambda n, g: over_group(lambda ci, x: data[(n, g * cg + ci, *x)]) / n_el)
    var = compute("var", (data.shape[0], groups),
                  lambda n, g: over_group(lambda ci, x: square(data[(n, g * cg + ci, *x)] - mean[n, g])) / n_el)
    return mean, var


def _check_grouped(op: str, data: TensorVar, groups: int) -> None:
    if data.ndim < 3:
        raise TDLError(f"{op}: data of rank {data.ndim} (shape {data.shape}); MXNet needs rank >= 3")
    if groups < 1 or data.shape[1] % groups:
        raise TDLError(f"{op}: {data.shape[1]} channels do not split into {groups} groups")


@dataclass(frozen=True)
class GroupNormAttrs:
    num_groups: int = 1
    eps: float = 1e-5
    # output_mean_var only makes outputs 1 and 2 visible


@tdl_op("GroupNorm", inputs=("data", "gamma", "beta"), outputs=("output", "mean", "std"), attrs=GroupNormAttrs,
        cases=[
    Case(shapes=((2, 4, 3, 4), (2,), (2,)), attrs={"num_groups": 2}),
    Case(shapes=((2, 6, 4), (3,), (3,)), attrs={"num_groups": 3, "eps": 0.5}),
    Case(shapes=((2, 4, 2, 2), (4,), (4,)), attrs={"num_groups": 4, "output_mean_var": True}),
    Case(shapes=((1, 4, 2, 4), (1,), (1,)), attrs={"eps": 1e-3}),
])
def group_norm(data: TensorVar, gamma: TensorVar, beta: TensorVar, attrs: GroupNormAttrs):
    """out[n, c, x..] = (data[n, c, x..] - mean[n, g]) / sqrt(var[n, g] + eps) * gamma[g] + beta[g], g = c // (C /
    num_groups), statistics over the group's channels and all of x.. (gamma, beta per group). Outputs 1, 2 are
    mean[n, g] and sqrt(var[n, g] + eps)."""
    _check_grouped("GroupNorm", data, attrs.num_groups)
    cg = data.shape[1] // attrs.num_groups
    mean, var = _grouped_moments(data, attrs.num_groups)
    return (lambda n, c, *x: (data[(n, c, *x)] - mean[n, c // cg]) * rsqrt(var[n, c // cg] + attrs.eps)
            * gamma[c // cg] + beta[c // cg],
            # the statistics' group index is named like the channel: with one channel per group they split with it
            lambda n, c: mean[n, c],
            lambda n, c: sqrt(var[n, c] + attrs.eps))


@dataclass(frozen=True)
class InstanceNormAttrs:
    eps: float = 1e-3


@tdl_op("InstanceNorm", inputs=("data", "gamma", "beta"), attrs=InstanceNormAttrs, cases=[
    Case(shapes=((2, 3, 5), (3,), (3,))),
    Case(shapes=((2, 3, 4, 3), (3,), (3,)), attrs={"eps": 0.5}),
    Case(shapes=((1, 2, 2, 3, 2), (2,), (2,)), attrs={"eps": 1e-5}),
    Case(shapes=((2, 4, 4, 2), (4,), (4,))),
])
def instance_norm(data: TensorVar, gamma: TensorVar, beta: TensorVar, attrs: InstanceNormAttrs):
    """out[n, c, x..] = (data[n, c, x..] - mean[n, c]) / sqrt(var[n, c] + eps) * gamma[c] + beta[c], mean and
    biased var over the spatial dims x.. of one instance and channel (eps inside the sqrt, as MXNet computes)."""
    _check_grouped("InstanceNorm", data, data.shape[1])
    mean, var = _grouped_moments(data, data.shape[1])
    return lambda n, c, *x: (data[(n, c, *x)] - mean[n, c]) * rsqrt(var[n, c] + attrs.eps) * gamma[c] + beta[c]


def _grouped_exchange(pieces, shapes, groups_of, eps: float, affine_per_group: bool, allreduce):
    """GroupNorm / InstanceNorm on shards of the spatial dims (and of whole groups of channels), with MXNet
    operators: each worker sums its shard per (instance, group), the sums are all-reduced into the mean,
    likewise the squared deviations into the (biased) variance, and each worker normalizes its shard."""
    import mxnet as mx

    data_shape = shapes[0][0]
    groups = groups_of(data_shape)
    total = float(sum(math.prod(s[0][2:]) for s in shapes) * (data_shape[1] // groups))
    grouped = lambda x: mx.sym.reshape(x, shape=(0, groups, -1))         # (N, G, cg * x..)
    sums = allreduce([mx.sym.sum(grouped(p[0]), axis=2) for p in pieces])
    means = [s / total for s in sums]
    squares = allreduce([mx.sym.sum(mx.sym.square(mx.sym.broadcast_sub(grouped(p[0]), mx.sym.expand_dims(m, 2))),
                                    axis=2) for p, m in zip(pieces, means)])
    outs = []
    for p, m, sq, s in zip(pieces, means, squares, shapes):
        std = mx.sym.sqrt(sq / total + eps)
        normed = mx.sym.broadcast_div(mx.sym.broadcast_sub(grouped(p[0]), mx.sym.expand_dims(m, 2)),
                                      mx.sym.expand_dims(std, 2))
        per_channel = (1, -1, *(1 for _ in s[0][2:]))
        if affine_per_group:
            y = mx.sym.broadcast_add(mx.sym.broadcast_mul(normed, mx.sym.reshape(p[1], shape=(1, -1, 1))),
                                     mx.sym.reshape(p[2], shape=(1, -1, 1)))
            y = mx.sym.reshape(y, shape=s[0])
        else:
            y = mx.sym.broadcast_add(mx.sym.broadcast_mul(mx.sym.reshape(normed, shape=s[0]),
                                                          mx.sym.reshape(p[1], shape=per_channel)),
                                     mx.sym.reshape(p[2], shape=per_channel))
        outs.append([y, m, std])        # the last two given under BlockGrad, as the kernel (registry.Expansion)
    return outs


@tdl_expansion("GroupNorm")
def group_norm_exchange(pieces, shapes, attrs: GroupNormAttrs, allreduce):
    """GroupNorm split on its spatial dims: per-group sums all-reduced (see ``_grouped_exchange``)."""
    return _grouped_exchange(pieces, shapes, lambda s: attrs.num_groups, attrs.eps, True, allreduce)


@tdl_expansion("InstanceNorm")
def instance_norm_exchange(pieces, shapes, attrs: InstanceNormAttrs, allreduce):
    """InstanceNorm split on its spatial dims: per-channel sums all-reduced (see ``_grouped_exchange``)."""
    return [o[:1] for o in _grouped_exchange(pieces, shapes, lambda s: s[1], attrs.eps, False, allreduce)]


@dataclass(frozen=True)
class L2NormalizationAttrs:
    eps: float = 1e-10
    mode: str = "instance"


_L2_AXES = {"instance": lambda nd: tuple(range(1, nd)), "channel": lambda nd: (1,),
            "spatial": lambda nd: tuple(range(2, nd))}


@tdl_op("L2Normalization", inputs=("data",), attrs=L2NormalizationAttrs, cases=[
    Case(shapes=((2, 4, 3),)),
    Case(shapes=((2, 4, 2, 2),), attrs={"mode": "channel", "eps": 0.5}),
    Case(shapes=((2, 4, 2, 4),), attrs={"mode": "spatial"}),
    Case(shapes=((4, 6),), attrs={"eps": 1e-3}),
])
def l2_normalization(data: TensorVar, attrs: L2NormalizationAttrs):
    """out[i] = data[i] / sqrt(sum_k data[k]^2 + eps), the sum over the dims of ``mode``: all but the batch
    (instance), the channels (channel) or the spatial dims (spatial), at the other dims of i."""
    if attrs.mode not in _L2_AXES:
        raise TDLError(f"L2Normalization: mode '{attrs.mode}' is not described (instance, channel, spatial)")
    if attrs.mode != "instance" and data.ndim < 3:
        raise TDLError(f"L2Normalization: mode '{attrs.mode}' needs data of rank >= 3, got {data.shape}")
    axes = _L2_AXES[attrs.mode](data.ndim)
    kept = [d for d in range(data.ndim) if d not in axes]

    def at(k, s):
        """The index with the reduced dims from k and the kept ones from s."""
        it_k, it_s = iter(k), iter(s)
        return tuple(next(it_k) if d in axes else next(it_s) for d in range(data.ndim))

    total = compute("sumsq", tuple(data.shape[d] for d in kept), lambda *s: Sum(
        nary([f"k{d}" for d in axes], lambda k: square(data[at(k, s)]))))
    return lambda *i: data[i] * rsqrt(total[tuple(i[d] for d in kept)] + attrs.eps)


@tdl_expansion("L2Normalization")
def l2_normalization_exchange(pieces, shapes, attrs: L2NormalizationAttrs, allreduce):
    """L2Normalization split on a dim it sums over: each worker sums the squares of its shard, the sums are
    all-reduced, and each worker divides its shard by sqrt(sum + eps)."""
    import mxnet as mx

    axes = _L2_AXES[attrs.mode](len(shapes[0][0]))
    sums = allreduce([mx.sym.sum(mx.sym.square(p[0]), axis=axes, keepdims=True) for p in pieces])
    return [[mx.sym.broadcast_mul(p[0], mx.sym.rsqrt(s + attrs.eps))] for p, s in zip(pieces, sums)]


@dataclass(frozen=True)
class LRNAttrs:
    nsize: int
    alpha: float = 1e-4
    beta: float = 0.75
    knorm: float = 2.0


@tdl_op("LRN", inputs=("data",), attrs=LRNAttrs, cases=[
    Case(shapes=((2, 5, 3, 3),), attrs={"nsize": 3, "alpha": 0.5}),
    Case(shapes=((2, 4, 2, 4),), attrs={"nsize": 3, "alpha": 0.5, "beta": 0.5, "knorm": 1.0}),
    Case(shapes=((1, 8, 2, 2),), attrs={"nsize": 5, "alpha": 0.3}),
])
def lrn(data: TensorVar, attrs: LRNAttrs):
    """out[n, c, x..] = data[n, c, x..] / (knorm + alpha / nsize * sum_{|d| <= nsize // 2} data[n, c + d, x..]^2)
    ^ beta, channels past the ends read as 0 (a window across channels: a channel split has a halo)."""
    if attrs.nsize < 1 or attrs.nsize % 2 == 0:
        raise TDLError(f"LRN: nsize {attrs.nsize} must be odd and positive")
    half = attrs.nsize // 2

    def out(n, c, *x):
        window = Sum(lambda d: square(data.at((n, c + d - half, *x), fill=0.0)), extents=(attrs.nsize,))
        return data[(n, c, *x)] / (attrs.knorm + attrs.alpha / attrs.nsize * window) ** attrs.beta
    return out

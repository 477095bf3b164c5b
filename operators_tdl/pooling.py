"""TDL descriptions of the pooling family: Pooling (max, avg, sum; 1-D..3-D, channels first).

A pooled value is a reduction over the window, read at ``x*stride + dx - pad`` (:func:`~operators_tdl.conv.
window_index`) through ``.at``: padding reads ``NEG_INF`` for max pooling and 0 for sums. The divisor of average
pooling is the number of window positions MXNet counts, an index function (no tensor is read for it).
"""
from __future__ import annotations

import math

from operators_tdl.conv import per_dim, spatial_params, window_index, window_names
from tofu.tdl.lang import *  # noqa: F403  (the DSL: tofu.tdl.lang.__all__)


@dataclass(frozen=True)
class PoolingAttrs:
    kernel: tuple[int, ...] = ()
    pool_type: str = "max"
    stride: tuple[int, ...] = ()
    pad: tuple[int, ...] = ()
    global_pool: bool = False
    pooling_convention: str = "valid"
    count_include_pad: bool | None = None     # None: MXNet's default, True
    layout: str | None = None


@tdl_op("Pooling", inputs=("data",), attrs=PoolingAttrs, cases=[
    Case(shapes=((2, 3, 6, 5),), attrs={"kernel": (2, 2), "stride": (2, 2), "pool_type": "max"}),
    Case(shapes=((1, 2, 6, 6),), attrs={"kernel": (3, 3), "stride": (2, 2), "pad": (1, 1), "pool_type": "max",
                                        "pooling_convention": "full"}),
    Case(shapes=((2, 2, 5, 6),), attrs={"kernel": (3, 3), "stride": (2, 2), "pad": (1, 1), "pool_type": "avg"}),
    Case(shapes=((1, 2, 6, 6),), attrs={"kernel": (3, 3), "stride": (2, 2), "pad": (1, 1), "pool_type": "avg",
                                        "pooling_convention": "full"}),
    Case(shapes=((1, 2, 6, 7),), attrs={"kernel": (3, 2), "stride": (2, 2), "pad": (1, 1), "pool_type": "avg",
                                        "pooling_convention": "full", "count_include_pad": False}),
    Case(shapes=((2, 3, 9),), attrs={"kernel": (3,), "stride": (2,), "pad": (1,), "pool_type": "sum"}),
    Case(shapes=((2, 3, 4, 5),), attrs={"kernel": (1, 1), "pool_type": "avg", "global_pool": True}),
    Case(shapes=((2, 3, 4, 5),), attrs={"kernel": (2, 2), "pool_type": "max", "global_pool": True}),
])
def pooling(data: TensorVar, attrs: PoolingAttrs):
    """out[b, c, x..] = max / sum / mean over dx.. of data[b, c, x*stride + dx - pad] (padding excluded from the
    max; the mean divides by the window size, clipped to the padded input, or by the in-input count when
    count_include_pad=False)  (MXNet NC(D)(H)W; global_pool: the window is the whole input)."""
    nd = spatial_params("Pooling", data, attrs.layout, attrs.stride, attrs.pad)
    if attrs.pool_type not in ("max", "avg", "sum"):
        raise TDLError(f"Pooling: pool_type '{attrs.pool_type}' is not described (max, avg, sum are)")
    if attrs.pooling_convention not in ("valid", "full"):
        raise TDLError(f"Pooling: pooling_convention '{attrs.pooling_convention}' is not described")
    if attrs.global_pool:
        kernel, stride, pad = data.shape[2:], (1,) * nd, (0,) * nd
    else:
        if len(attrs.kernel) != nd:
            raise TDLError(f"Pooling: kernel {attrs.kernel} needs one entry per spatial dimension ({nd})")
        kernel, stride, pad = attrs.kernel, per_dim(attrs.stride, nd, 1), per_dim(attrs.pad, nd, 0)
    fill, reduce = (NEG_INF, Max) if attrs.pool_type == "max" else (0.0, Sum)
    include_pad = attrs.count_include_pad is not False

    def out(b, c, *xs):
        pooled = reduce(nary(window_names(nd), lambda ds: data.at(
            (b, c, *window_index(xs, ds, stride, (1,) * nd, pad)), fill=fill)), extents=kernel)
        if attrs.pool_type != "avg":
            return pooled
        if include_pad and attrs.pooling_convention == "valid":   # every window lies inside the padded input
            return pooled / float(math.prod(kernel))
        return pooled / _window_count(xs, data.shape[2:], kernel, stride, pad, include_pad)
    return out


def _window_count(xs: tuple[Var, ...], size: tuple[int, ...], kernel: tuple[int, ...], stride: tuple[int, ...],
                  pad: tuple[int, ...], include_pad: bool) -> ValueExpr:
    """How many positions of the window at ``xs`` MXNet averages over: those inside the padded input
    [-pad, size + pad) (count_include_pad; only 'full' windows can stick out), else inside [0, size). A 'full'
    window can lie wholly in the padding: MXNet's average there is 0, so the count is at least 1."""
    count: ValueExpr | float = 1.0
    for x, n, k, s, p in zip(xs, size, kernel, stride, pad):
        lo, hi = (-p, n + p) if include_pad else (0, n)
        count = count * Sum(lambda d: ge(IndexValue(x * s + d - p), lo) * lt(IndexValue(x * s + d - p), hi),
                            extents=(k,))
    return maximum(count, 1.0)

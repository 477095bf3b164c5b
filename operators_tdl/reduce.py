"""TDL descriptions of MXNet's reductions over axes: sum, mean, max, min, prod, norm.

Each output element is one ``Sum``/``Max``/``Min``/``Prod`` over the reduced axes (a single reduction over all
of them, so that splitting any reduced axis is one partition-n-reduce). Kept axes are read with the output's
index variables; ``keepdims`` leaves the reduced axes in the output with extent 1 (their index is unused).

MXNet's axis convention (checked against MXNet 1.9.1): ``axis=None`` or ``axis=()`` reduces every axis (even
with ``exclude``) and, without keepdims, gives shape (1,); ``exclude=True`` reduces the axes *not* listed;
negative axes count from the end.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tofu.errors import TDLError
from tofu.tdl.describe import Case, tdl_op
from tofu.tdl.expr import Max, Min, Prod, Sum, TensorVar, ValueExpr, Var, abs_, sqrt, square, nary

Reducer = Callable[..., ValueExpr]


@dataclass(frozen=True)
class ReduceAttrs:
    axis: tuple[int, ...] | None = None
    keepdims: bool = False
    exclude: bool = False


def reduced_axes(ndim: int, axis: tuple[int, ...] | None, exclude: bool, op: str) -> tuple[int, ...]:
    """The input axes an MXNet reduction reduces, ascending."""
    if not axis:
        return tuple(range(ndim))
    listed = set()
    for a in axis:
        if not -ndim <= a < ndim:
            raise TDLError(f"{op}: axis {a} is out of range for rank {ndim}")
        listed.add(a % ndim)
    return tuple(d for d in range(ndim) if (d in listed) != exclude)


def reduction(data: TensorVar, axes: Sequence[int], keepdims: bool, reducer: Reducer,
              element: Callable[[ValueExpr], ValueExpr] = lambda v: v) -> Callable[..., ValueExpr]:
    """The output lambda ``out[o] = reducer_{k over axes} element(data[o with k on the reduced axes])``."""
    kept = [d for d in range(data.ndim) if d not in axes]

    def read(o: Sequence[Var], k: Sequence[Var]) -> ValueExpr:
        index: list[Var] = []
        for d in range(data.ndim):
            if d in axes:
                index.append(k[axes.index(d)])
            else:
                index.append(o[d] if keepdims else o[kept.index(d)])
        return element(data[tuple(index)])

    if not axes:
        return lambda *o: read(o, ())
    return lambda *o: reducer(nary([f"k{j}" for j in range(len(axes))], lambda k: read(o, k)))


def _count(data: TensorVar, axes: Sequence[int]) -> int:
    n = 1
    for d in axes:
        n *= data.shape[d]
    return n


REDUCE_CASES = [
    Case(shapes=((3, 4),)),                                                   # every axis -> shape (1,)
    Case(shapes=((2, 3, 4),), attrs={"axis": 1}),
    Case(shapes=((2, 3, 4),), attrs={"axis": (0, 2), "keepdims": True}),
    Case(shapes=((2, 3, 4),), attrs={"axis": -1, "exclude": True}),
    Case(shapes=((2, 3, 2, 2),), attrs={"axis": (1, -1), "exclude": True, "keepdims": True}),
]


def _reduce_op(op: str, reducer: Reducer, formula: str, *, mean: bool = False) -> None:
    """Registers ``op`` (``reducer`` over the reduced axes; divided by their size for ``mean``)."""
    def build(data: TensorVar, attrs: ReduceAttrs):
        axes = reduced_axes(data.ndim, attrs.axis, attrs.exclude, op)
        out = reduction(data, axes, attrs.keepdims, reducer)
        if not mean:
            return out
        n = _count(data, axes)
        return lambda *o: out(*o) / n

    build.__name__ = build.__qualname__ = op
    build.__doc__ = f"out[o] = {formula} over the reduced axes k of data (axis, exclude, keepdims as MXNet)."
    tdl_op(op, inputs=("data",), attrs=ReduceAttrs, cases=REDUCE_CASES)(build)


_reduce_op("sum", Sum, "sum_k data[o, k]")
_reduce_op("mean", Sum, "(sum_k data[o, k]) / |k|", mean=True)
_reduce_op("max", Max, "max_k data[o, k]")
_reduce_op("min", Min, "min_k data[o, k]")
_reduce_op("prod", Prod, "prod_k data[o, k]")


@dataclass(frozen=True)
class NormAttrs:
    ord: int = 2
    axis: tuple[int, ...] | None = None
    keepdims: bool = False


@tdl_op("norm", inputs=("data",), attrs=NormAttrs, cases=[
    Case(shapes=((3, 4),)),
    Case(shapes=((2, 3, 4),), attrs={"axis": 1}),
    Case(shapes=((2, 3, 4),), attrs={"axis": (0, 2), "keepdims": True}),
    Case(shapes=((2, 3, 4),), attrs={"ord": 1, "axis": -1}),
])
def norm(data: TensorVar, attrs: NormAttrs):
    """out[o] = sqrt(sum_k data[o, k]^2) (ord=2) or sum_k |data[o, k]| (ord=1) over the axes (all if None)."""
    axes = reduced_axes(data.ndim, attrs.axis, False, "norm")
    if attrs.ord == 1:
        return reduction(data, axes, attrs.keepdims, Sum, abs_)
    if attrs.ord == 2:
        sum_sq = reduction(data, axes, attrs.keepdims, Sum, square)
        return lambda *o: sqrt(sum_sq(*o))
    raise TDLError(f"norm: ord={attrs.ord} is not supported by MXNet (only 1 and 2)")

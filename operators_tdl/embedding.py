"""TDL descriptions of the lookup family: Embedding, one_hot, take, pick.

Embedding, take and pick read a tensor at an index that is itself read from an input (a data-dependent
access, ``weight[data[b, t], e]``): the looked-up dimension cannot be narrowed by partitioning the output,
every other dimension stays affine. Out-of-range indices are clipped, as MXNet's default mode does.
one_hot compares each index with the class index, so it needs no data-dependent access.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tofu.errors import TDLError
from tofu.tdl.describe import Case, tdl_op
from tofu.tdl.expr import IndexValue, TensorVar, ValueExpr, Var, eq, where


@dataclass(frozen=True)
class EmbeddingAttrs:
    input_dim: int
    output_dim: int


@tdl_op("Embedding", inputs=("data", "weight"), attrs=EmbeddingAttrs, cases=[
    Case(shapes=((5,), (7, 4)), attrs={"input_dim": 7, "output_dim": 4}, ints=((0, 7),)),
    Case(shapes=((2, 3), (6, 5)), attrs={"input_dim": 6, "output_dim": 5}, ints=((0, 6),)),
])
def embedding(data: TensorVar, weight: TensorVar, attrs: EmbeddingAttrs) -> Callable:
    """out[..., e] = weight[data[...], e]  (weight is (input_dim, output_dim))."""
    return lambda *o: weight[data[o[:-1]], o[-1]]


@dataclass(frozen=True)
class OneHotAttrs:
    depth: int
    on_value: float = 1.0
    off_value: float = 0.0


@tdl_op("one_hot", inputs=("indices",), attrs=OneHotAttrs, cases=[
    Case(shapes=((6,),), attrs={"depth": 4}, ints=((0, 4),)),
    Case(shapes=((2, 3),), attrs={"depth": 5, "on_value": 2.0, "off_value": -1.0}, ints=((0, 7),)),
])
def one_hot(indices: TensorVar, attrs: OneHotAttrs) -> Callable:
    """out[..., c] = on_value if indices[...] == c else off_value  (out-of-range indices give all off)."""
    return lambda *o: where(eq(indices[o[:-1]], IndexValue(o[-1])), attrs.on_value, attrs.off_value)


@dataclass(frozen=True)
class TakeAttrs:
    axis: int = 0
    mode: str = "clip"


@tdl_op("take", inputs=("a", "indices"), attrs=TakeAttrs, cases=[
    Case(shapes=((5, 3), (2, 4)), ints=((1, 5),)),
    Case(shapes=((5, 3), (4,)), ints=((1, 8),)),                    # indices past the end are clipped
    Case(shapes=((2, 6, 3), (4,)), attrs={"axis": 1}, ints=((1, 6),)),
])
def take(a: TensorVar, indices: TensorVar, attrs: TakeAttrs) -> Callable:
    """out[i..., j..., k...] = a[i..., indices[j...], k...]  (``axis`` of a replaced by the indices' dims)."""
    if attrs.mode == "wrap":
        raise TDLError("take: mode 'wrap' (indices modulo the extent) is not describable; use 'clip'")
    axis = attrs.axis % a.ndim
    n = indices.ndim

    def out(*o: Var) -> ValueExpr:
        return a[(*o[:axis], indices[o[axis:axis + n]], *o[axis + n:])]
    return out


@dataclass(frozen=True)
class PickAttrs:
    axis: int | None = -1
    keepdims: bool = False
    mode: str = "clip"


@tdl_op("pick", inputs=("data", "index"), attrs=PickAttrs, cases=[
    Case(shapes=((3, 4), (3,)), ints=((1, 4),)),
    Case(shapes=((2, 3, 4), (2, 4)), attrs={"axis": 1, "keepdims": True}, ints=((1, 3),)),
    Case(shapes=((4, 3), (3,)), attrs={"axis": 0}, ints=((1, 4),)),
])
def pick(data: TensorVar, index: TensorVar, attrs: PickAttrs) -> Callable:
    """out[i..., k...] = data[i..., index[i..., k...], k...]  (``axis`` removed, or kept with extent 1)."""
    if attrs.axis is None or attrs.mode == "wrap":
        raise TDLError("pick: only a given axis and mode 'clip' are describable")
    axis = attrs.axis % data.ndim

    def out(*o: Var) -> ValueExpr:
        rest = (*o[:axis], *o[axis + 1:]) if attrs.keepdims else o
        at = index[_with(rest, axis, 0) if index.ndim == data.ndim else rest]
        return data[_with(rest, axis, at)]
    return out


def _with(rest: tuple, axis: int, i) -> tuple:
    """``rest`` with ``i`` inserted at position ``axis``."""
    return (*rest[:axis], i, *rest[axis:])

"""TDL descriptions of the shape family: data movement without arithmetic.

Ops: Reshape, Flatten, transpose, SwapAxis, Concat, SliceChannel, slice_axis, slice, expand_dims, squeeze,
stack, tile, repeat. Each output element reads one input element; wherever a dimension maps onto a
dimension, it is indexed directly (affine), and only dimensions whose extents are regrouped (Reshape's
merged or split dims, tile, repeat) use ``//`` and ``%``.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tofu.errors import TDLError
from tofu.tdl.describe import Case, NoAttrs, tdl_op
from tofu.tdl.expr import IndexExpr, IndexValue, TensorVar, ValueExpr, Var, eq, lt, where

Shape = tuple[int, ...]


def _axis(axis: int, ndim: int, op: str) -> int:
    if not -ndim <= axis < ndim:
        raise TDLError(f"{op}: axis {axis} is out of range for rank {ndim}")
    return axis % ndim


def _ravel(idx: Sequence[IndexExpr], shape: Shape) -> IndexExpr:
    """Row-major flat index of ``idx`` in ``shape``."""
    flat = 0
    for i, n in zip(idx, shape):
        flat = flat * n + i
    return flat


def _unravel(flat: IndexExpr, shape: Shape) -> list[IndexExpr]:
    """Row-major multi-index of ``flat`` in ``shape`` (no ``%`` on the outermost, no ``//`` on the innermost)."""
    out = []
    for d, n in enumerate(shape):
        i = flat // math.prod(shape[d + 1:])
        out.append(i % n if d > 0 else i)
    return out


def _reshaped(in_shape: Shape, out_shape: Shape, o: Sequence[Var]) -> tuple[IndexExpr, ...]:
    """The input index of output element ``o`` of a row-major reshape. A leading and a trailing block of
    unchanged dimensions are indexed directly; only the dimensions in between go through a flat index."""
    p = 0
    while p < min(len(in_shape), len(out_shape)) and in_shape[p] == out_shape[p]:
        p += 1
    s = 0
    while (s < min(len(in_shape), len(out_shape)) - p
           and in_shape[len(in_shape) - 1 - s] == out_shape[len(out_shape) - 1 - s]):
        s += 1
    mid_in, mid_out = in_shape[p:len(in_shape) - s], out_shape[p:len(out_shape) - s]
    mid = _unravel(_ravel(o[p:len(out_shape) - s], mid_out), mid_in)
    return (*o[:p], *mid, *o[len(out_shape) - s:])


@tdl_op("Reshape", inputs=("data",), cases=[
    Case(shapes=((2, 3, 4),), attrs={"shape": (2, 12)}),
    Case(shapes=((6, 4),), attrs={"shape": (2, 3, 4)}),
    Case(shapes=((2, 3, 4),), attrs={"shape": (4, -1)}),
    Case(shapes=((2, 6, 2),), attrs={"shape": (0, 3, 2, 2)}),
])
def reshape(data: TensorVar, attrs: NoAttrs, *, out_shapes: Sequence[Shape]) -> Callable:
    """out[o] = data[unravel(ravel(o, out.shape), data.shape)]  (row-major; MXNet infers out.shape)."""
    return lambda *o: data[_reshaped(data.shape, out_shapes[0], o)]


@tdl_op("Flatten", inputs=("data",), cases=[
    Case(shapes=((2, 3, 4),)),
    Case(shapes=((3, 2, 2, 2),)),
    Case(shapes=((4, 5),)),
])
def flatten(data: TensorVar, attrs: NoAttrs) -> Callable:
    """out[b, j] = data[b, unravel(j, data.shape[1:])]  (collapses all axes but the first)."""
    return lambda b, j: data[(b, *_unravel(j, data.shape[1:]))]


def _permuted(x: TensorVar, perm: Sequence[int]) -> Callable:
    """out[o] = x[i] with i[perm[k]] = o[k]: output dim k is input dim perm[k]."""
    def out(*o: Var) -> ValueExpr:
        idx: list[IndexExpr] = [0] * x.ndim
        for k, d in enumerate(perm):
            idx[d] = o[k]
        return x[tuple(idx)]
    return out


@dataclass(frozen=True)
class TransposeAttrs:
    axes: tuple[int, ...] = ()


@tdl_op("transpose", inputs=("data",), attrs=TransposeAttrs, cases=[
    Case(shapes=((2, 3, 4),)),
    Case(shapes=((2, 3, 4),), attrs={"axes": (1, 0, 2)}),
    Case(shapes=((2, 3, 2, 2),), attrs={"axes": (0, 2, 3, 1)}),
])
def transpose(data: TensorVar, attrs: TransposeAttrs) -> Callable:
    """out[o_0, ..., o_n] = data[i] with i[axes[k]] = o_k  (default axes: reversed)."""
    axes = [_axis(a, data.ndim, "transpose") for a in attrs.axes] or list(reversed(range(data.ndim)))
    return _permuted(data, axes)


@dataclass(frozen=True)
class SwapAxisAttrs:
    dim1: int = 0
    dim2: int = 0


@tdl_op("SwapAxis", inputs=("data",), attrs=SwapAxisAttrs, cases=[
    Case(shapes=((2, 3, 4),), attrs={"dim1": 0, "dim2": 2}),
    Case(shapes=((2, 3, 4),), attrs={"dim1": 1, "dim2": 2}),
])
def swap_axis(data: TensorVar, attrs: SwapAxisAttrs) -> Callable:
    """out = data with dimensions dim1 and dim2 exchanged."""
    perm = list(range(data.ndim))
    a, b = _axis(attrs.dim1, data.ndim, "SwapAxis"), _axis(attrs.dim2, data.ndim, "SwapAxis")
    perm[a], perm[b] = perm[b], perm[a]
    return _permuted(data, perm)


def _replace(o: Sequence[IndexExpr], axis: int, i: IndexExpr) -> tuple[IndexExpr, ...]:
    return (*o[:axis], i, *o[axis + 1:])


@dataclass(frozen=True)
class ConcatAttrs:
    dim: int = 1


@tdl_op("Concat", inputs=("*data",), attrs=ConcatAttrs, cases=[
    Case(shapes=((2, 3), (2, 4)), attrs={"num_args": 2}),
    Case(shapes=((2, 3), (1, 3), (3, 3)), attrs={"num_args": 3, "dim": 0}),
    Case(shapes=((2, 2, 3), (2, 2, 1)), attrs={"num_args": 2, "dim": -1}),
])
def concat(data: tuple[TensorVar, ...], attrs: ConcatAttrs) -> Callable:
    """out[..., j, ...] = data_k[..., j - off_k, ...] where off_k <= j < off_k + n_k  (along ``dim``)."""
    axis = _axis(attrs.dim, data[0].ndim, "Concat")
    ends = [0]
    for x in data:
        ends.append(ends[-1] + x.shape[axis])

    def out(*o: Var) -> ValueExpr:
        j = o[axis]
        expr = data[-1].at(_replace(o, axis, j - ends[-2]), fill=0.0)
        for k in reversed(range(len(data) - 1)):
            expr = where(lt(IndexValue(j), ends[k + 1]), data[k].at(_replace(o, axis, j - ends[k]), fill=0.0), expr)
        return expr
    return out


@dataclass(frozen=True)
class SliceChannelAttrs:
    num_outputs: int
    axis: int = 1
    squeeze_axis: bool = False


@tdl_op("SliceChannel", inputs=("data",), attrs=SliceChannelAttrs, cases=[
    Case(shapes=((2, 4, 3),), attrs={"num_outputs": 2}),
    Case(shapes=((3, 2, 4),), attrs={"num_outputs": 3, "axis": 0, "squeeze_axis": True}),
    Case(shapes=((2, 6),), attrs={"num_outputs": 3, "axis": -1}),
])
def slice_channel(data: TensorVar, attrs: SliceChannelAttrs) -> tuple[Callable, ...]:
    """out_k[..., j, ...] = data[..., k * n + j, ...] with n = data.shape[axis] / num_outputs (squeeze_axis:
    the axis, then of extent 1, is dropped from every output)."""
    axis = _axis(attrs.axis, data.ndim, "SliceChannel")
    n = data.shape[axis] // attrs.num_outputs

    def part(k: int) -> Callable:
        if attrs.squeeze_axis:
            return lambda *o: data[(*o[:axis], k, *o[axis:])]
        return lambda *o: data[_replace(o, axis, k * n + o[axis])]
    return tuple(part(k) for k in range(attrs.num_outputs))


@dataclass(frozen=True)
class SliceAxisAttrs:
    axis: int
    begin: int
    end: int | None = None


@tdl_op("slice_axis", inputs=("data",), attrs=SliceAxisAttrs, cases=[
    Case(shapes=((3, 5),), attrs={"axis": 1, "begin": 1, "end": 4}),
    Case(shapes=((4, 2, 3),), attrs={"axis": 0, "begin": -3, "end": None}),
    Case(shapes=((2, 3, 5),), attrs={"axis": -1, "begin": 0, "end": -2}),
])
def slice_axis(data: TensorVar, attrs: SliceAxisAttrs) -> Callable:
    """out[..., j, ...] = data[..., begin + j, ...]  along ``axis`` (negative begin/end count from the end)."""
    axis = _axis(attrs.axis, data.ndim, "slice_axis")
    start = slice(attrs.begin, attrs.end).indices(data.shape[axis])[0]
    return lambda *o: data[_replace(o, axis, start + o[axis])]


@dataclass(frozen=True)
class SliceAttrs:
    begin: tuple
    end: tuple
    step: tuple = ()


@tdl_op("slice", inputs=("data",), attrs=SliceAttrs, cases=[
    Case(shapes=((4, 5),), attrs={"begin": (1, 0), "end": (3, 5)}),
    Case(shapes=((4, 6, 2),), attrs={"begin": (0, 1), "end": (None, 6), "step": (2, 2)}),
    Case(shapes=((5, 3),), attrs={"begin": (-1,), "end": (None,), "step": (-2,)}),
])
def slice_(data: TensorVar, attrs: SliceAttrs) -> Callable:
    """out[j_0, ...] = data[begin_0 + step_0 * j_0, ...]  (numpy slicing per leading dim; None = default)."""
    starts, steps = [], []
    for d, n in enumerate(data.shape):
        pick = lambda t: t[d] if d < len(t) else None
        start, _, step = slice(pick(attrs.begin), pick(attrs.end), pick(attrs.step)).indices(n)
        starts.append(start)
        steps.append(step)
    return lambda *o: data[tuple(b + s * j for b, s, j in zip(starts, steps, o))]


@dataclass(frozen=True)
class ExpandDimsAttrs:
    axis: int


@tdl_op("expand_dims", inputs=("data",), attrs=ExpandDimsAttrs, cases=[
    Case(shapes=((2, 3),), attrs={"axis": 1}),
    Case(shapes=((2, 3),), attrs={"axis": -1}),
    Case(shapes=((4,),), attrs={"axis": 0}),
])
def expand_dims(data: TensorVar, attrs: ExpandDimsAttrs) -> Callable:
    """out[..., 0, ...] = data[...]  (a new axis of extent 1 at ``axis``)."""
    axis = _axis(attrs.axis, data.ndim + 1, "expand_dims")
    return lambda *o: data[(*o[:axis], *o[axis + 1:])]


@dataclass(frozen=True)
class SqueezeAttrs:
    axis: tuple[int, ...] | None = None


@tdl_op("squeeze", inputs=("data",), attrs=SqueezeAttrs, cases=[
    Case(shapes=((2, 1, 3, 1),)),
    Case(shapes=((2, 1, 3, 1),), attrs={"axis": (1,)}),
    Case(shapes=((1, 1),)),
])
def squeeze(data: TensorVar, attrs: SqueezeAttrs) -> Callable:
    """out = data without its extent-1 axes (those in ``axis``, default all; all squeezed gives shape (1,))."""
    drop = ({_axis(a, data.ndim, "squeeze") for a in attrs.axis} if attrs.axis is not None
            else {d for d, n in enumerate(data.shape) if n == 1})
    kept = [d for d in range(data.ndim) if d not in drop]
    if not kept:
        return lambda o: data[(0,) * data.ndim]

    def out(*o: Var) -> ValueExpr:
        it = iter(o)
        return data[tuple(0 if d in drop else next(it) for d in range(data.ndim))]
    return out


@dataclass(frozen=True)
class StackAttrs:
    axis: int = 0


@tdl_op("stack", inputs=("*data",), attrs=StackAttrs, cases=[
    Case(shapes=((2, 3), (2, 3)), attrs={"num_args": 2}),
    Case(shapes=((2, 3), (2, 3), (2, 3)), attrs={"num_args": 3, "axis": -1}),
])
def stack(data: tuple[TensorVar, ...], attrs: StackAttrs) -> Callable:
    """out[..., k, ...] = data_k[...]  (a new axis at ``axis`` enumerates the inputs)."""
    axis = _axis(attrs.axis, data[0].ndim + 1, "stack")

    def out(*o: Var) -> ValueExpr:
        k, rest = o[axis], (*o[:axis], *o[axis + 1:])
        expr = data[-1][rest]
        for c in reversed(range(len(data) - 1)):
            expr = where(eq(IndexValue(k), c), data[c][rest], expr)
        return expr
    return out


@dataclass(frozen=True)
class TileAttrs:
    reps: tuple[int, ...]


@tdl_op("tile", inputs=("data",), attrs=TileAttrs, cases=[
    Case(shapes=((2, 3),), attrs={"reps": (2, 1)}),
    Case(shapes=((2, 3),), attrs={"reps": (2, 1, 2)}),
    Case(shapes=((2, 2, 3),), attrs={"reps": (3,)}),
])
def tile(data: TensorVar, attrs: TileAttrs) -> Callable:
    """out[o] = data[o % data.shape]  over the trailing dims (reps and data are right-aligned, like numpy)."""
    lead = max(len(attrs.reps) - data.ndim, 0)                  # output dims in front of data's
    reps = ((1,) * data.ndim + tuple(attrs.reps))[-data.ndim:]   # the reps of data's own dims

    def out(*o: Var) -> ValueExpr:
        return data[tuple(i % n if r != 1 else i for i, n, r in zip(o[lead:], data.shape, reps))]
    return out


@dataclass(frozen=True)
class RepeatAttrs:
    repeats: int
    axis: int | None = None


@tdl_op("repeat", inputs=("data",), attrs=RepeatAttrs, cases=[
    Case(shapes=((2, 3),), attrs={"repeats": 2, "axis": 1}),
    Case(shapes=((2, 3),), attrs={"repeats": 3, "axis": 0}),
    Case(shapes=((2, 3),), attrs={"repeats": 2}),
])
def repeat(data: TensorVar, attrs: RepeatAttrs) -> Callable:
    """out[..., j, ...] = data[..., j // repeats, ...]  along ``axis`` (None: of the flattened data)."""
    if attrs.axis is None:
        return lambda j: data[tuple(_unravel(j // attrs.repeats, data.shape))]
    axis = _axis(attrs.axis, data.ndim, "repeat")
    return lambda *o: data[_replace(o, axis, o[axis] // attrs.repeats)]

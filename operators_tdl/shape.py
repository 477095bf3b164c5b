"""TDL descriptions of the shape family: data movement without arithmetic.

Ops: Reshape, Flatten, transpose, SwapAxis, Concat, SliceChannel, _split_v2, slice_axis, slice, expand_dims, squeeze,
stack, tile, repeat, broadcast_to, broadcast_axis, broadcast_like, reshape_like, slice_like, reverse,
depth_to_space, space_to_depth, diag; and the numpy interface's (``npx.set_np()``): _np_reshape, _npx_reshape,
_np_transpose, _npi_concatenate, _npi_vstack, _np_squeeze, _npi_broadcast_to, _np_moveaxis, _np_roll, _np_diag,
_np_diagonal, _npi_tril, and under the legacy op's description _npi_stack, _npi_swapaxes, _npi_expand_dims,
_npi_flip. Each output element reads one input element; wherever a dimension maps onto a dimension, it is indexed
directly (affine), and only dimensions whose extents are regrouped (Reshape's merged or split dims, tile, repeat,
the block moves) use ``//`` and ``%``. The ``*_like`` ops take only the shape of their second input; its elements are
declared read (``uses``) along the axes it sizes, so that a worker's shard of it gives MXNet's kernel the shard's
extents.
"""
from __future__ import annotations

import math

from operators_tdl.elementwise import broadcast_read
from tofu.tdl.lang import *  # noqa: F403  (the DSL: tofu.tdl.lang.__all__)

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


def unravel(flat: IndexExpr, shape: Shape) -> list[IndexExpr]:
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
    mid = unravel(_ravel(o[p:len(out_shape) - s], mid_out), mid_in)
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
    return lambda b, j: data[(b, *unravel(j, data.shape[1:]))]


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


@tdl_op("SwapAxis", inputs=("data",), attrs=SwapAxisAttrs, aliases=("_npi_swapaxes",), cases=[
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


@tdl_op("Concat", inputs=("*data",), attrs=ConcatAttrs, aliases=("_rnn_param_concat",), cases=[
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
class SplitV2Attrs:
    indices: tuple[int, ...]
    axis: int = 0
    squeeze_axis: bool = False
    sections: int = 0


@tdl_op("_split_v2", inputs=("data",), attrs=SplitV2Attrs, cases=[
    Case(shapes=((2, 6, 2),), attrs={"indices": (), "sections": 3, "axis": 1}),
    Case(shapes=((2, 6, 2),), attrs={"indices": (0, 1, 3), "axis": 1}),
    Case(shapes=((3, 2, 4),), attrs={"indices": (0, 1, 2), "axis": 0, "squeeze_axis": True}),
    Case(shapes=((2, 6),), attrs={"indices": (), "sections": 2, "axis": -1}),
])
def split_v2(data: TensorVar, attrs: SplitV2Attrs) -> tuple[Callable, ...]:
    """out_k[..., j, ...] = data[..., s_k + j, ...], the sections starting at s_k: ``indices`` (MXNet's front end
    passes them with a leading 0), or ``sections`` equal parts; squeeze_axis drops the axis from sections of
    extent 1."""
    axis = _axis(attrs.axis, data.ndim, "_split_v2")
    n = data.shape[axis]
    if attrs.sections > 0:
        if n % attrs.sections:
            raise TDLError(f"_split_v2: {attrs.sections} sections do not divide extent {n}")
        starts = tuple(range(0, n, n // attrs.sections))
    else:
        starts = tuple(attrs.indices)
        if not starts or starts[0] != 0 or any(b <= a for a, b in zip(starts, starts[1:])) or starts[-1] >= n:
            raise TDLError(f"_split_v2: indices {starts} must rise from 0 inside extent {n}")
    ends = (*starts[1:], n)
    if attrs.squeeze_axis and any(b - a != 1 for a, b in zip(starts, ends)):
        raise TDLError("_split_v2: squeeze_axis needs every section of extent 1")

    def part(start: int) -> Callable:
        if attrs.squeeze_axis:
            return lambda *o: data[(*o[:axis], start, *o[axis:])]
        return lambda *o: data[_replace(o, axis, start + o[axis])]
    return tuple(part(a) for a in starts)


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


@tdl_op("expand_dims", inputs=("data",), attrs=ExpandDimsAttrs, aliases=("_npi_expand_dims",), cases=[
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


@tdl_op("stack", inputs=("*data",), attrs=StackAttrs, aliases=("_npi_stack",), cases=[
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
        return lambda j: data[tuple(unravel(j // attrs.repeats, data.shape))]
    axis = _axis(attrs.axis, data.ndim, "repeat")
    return lambda *o: data[_replace(o, axis, o[axis] // attrs.repeats)]


# ------------------------------------------------------------------------- broadcasting, reversal, blocks

@dataclass(frozen=True)
class BroadcastToAttrs:
    shape: tuple[int, ...] = ()


@tdl_op("broadcast_to", inputs=("data",), attrs=BroadcastToAttrs, cases=[
    Case(shapes=((1, 4),), attrs={"shape": (3, 4)}),
    Case(shapes=((2, 1, 1),), attrs={"shape": (2, 3, 5)}),
    Case(shapes=((1, 3, 1),), attrs={"shape": (4, 0, 2)}),          # 0 keeps the input's extent
])
def broadcast_to(data: TensorVar, attrs: BroadcastToAttrs) -> Callable:
    """out[i] = data[i with 0 on data's extent-1 dims]  (out.shape = the ``shape`` attribute, 0 = keep)."""
    return lambda *o: broadcast_read(data, o)


@dataclass(frozen=True)
class BroadcastAxisAttrs:
    axis: tuple[int, ...] = ()
    size: tuple[int, ...] = ()


@tdl_op("broadcast_axis", inputs=("data",), attrs=BroadcastAxisAttrs, cases=[
    Case(shapes=((3, 1),), attrs={"axis": 1, "size": 4}),
    Case(shapes=((2, 1, 1),), attrs={"axis": (1, 2), "size": (3, 5)}),
])
def broadcast_axis(data: TensorVar, attrs: BroadcastAxisAttrs) -> Callable:
    """out[i] = data[i with 0 on each listed ``axis``]  (those extent-1 axes grow to ``size``)."""
    axes = {_axis(a, data.ndim, "broadcast_axis") for a in attrs.axis}
    return lambda *o: data[tuple(0 if d in axes else v for d, v in enumerate(o))]


@dataclass(frozen=True)
class BroadcastLikeAttrs:
    lhs_axes: tuple[int, ...] | None = None
    rhs_axes: tuple[int, ...] | None = None


@tdl_op("broadcast_like", inputs=("lhs", "rhs"), attrs=BroadcastLikeAttrs, cases=[
    Case(shapes=((1, 4), (3, 4))),
    Case(shapes=((2, 1, 1), (2, 3, 5))),
    Case(shapes=((1, 3, 1), (5, 2)), attrs={"lhs_axes": (0, 2), "rhs_axes": (1, 0)}),
])
def broadcast_like(lhs: TensorVar, rhs: TensorVar, attrs: BroadcastLikeAttrs) -> Callable:
    """out[i] = lhs[i with 0 on lhs's extent-1 dims]; out.shape is rhs's (lhs_axes: lhs's axes take the extents
    of rhs_axes). Only rhs's shape matters: its elements are declared read (``uses``) along the axes it sizes."""
    if attrs.lhs_axes is None or attrs.rhs_axes is None:
        return lambda *o: uses(broadcast_read(lhs, o), rhs[o])
    pairs = {_axis(a, lhs.ndim, "broadcast_like"): _axis(b, rhs.ndim, "broadcast_like")
             for a, b in zip(attrs.lhs_axes, attrs.rhs_axes)}

    def out(*o: Var) -> ValueExpr:
        at_rhs: list[IndexExpr] = [0] * rhs.ndim
        for a, b in pairs.items():
            at_rhs[b] = o[a]
        return uses(lhs[tuple(0 if n == 1 else v for n, v in zip(lhs.shape, o))], rhs[tuple(at_rhs)])
    return out


@tdl_op("reshape_like", inputs=("lhs", "rhs"), cases=[
    Case(shapes=((2, 6), (3, 4))),
    Case(shapes=((6, 5), (2, 3, 5))),
])
def reshape_like(lhs: TensorVar, rhs: TensorVar, attrs: NoAttrs, *, out_shapes: Sequence[Shape]) -> Callable:
    """out[o] = lhs[unravel(ravel(o, rhs.shape), lhs.shape)]  (Reshape to rhs's shape; rhs's elements are declared
    read, ``uses``, for their positions)."""
    if tuple(out_shapes[0]) != rhs.shape:
        raise TDLError("reshape_like: only the whole of rhs's shape is described (lhs_begin ... rhs_end unset)")
    return lambda *o: uses(lhs[_reshaped(lhs.shape, out_shapes[0], o)], rhs[o])


@dataclass(frozen=True)
class SliceLikeAttrs:
    axes: tuple[int, ...] = ()


@tdl_op("slice_like", inputs=("data", "shape_like"), attrs=SliceLikeAttrs, cases=[
    Case(shapes=((3, 5), (2, 3))),
    Case(shapes=((2, 3, 5), (1, 2, 7)), attrs={"axes": (0, -2)}),
])
def slice_like(data: TensorVar, shape_like: TensorVar, attrs: SliceLikeAttrs) -> Callable:
    """out[o] = data[o]: the leading corner of data, as large as shape_like on ``axes`` (default all); shape_like's
    elements are declared read (``uses``) along those axes, for their extents."""
    axes = ({_axis(a, data.ndim, "slice_like") for a in attrs.axes} if attrs.axes else set(range(data.ndim)))
    return lambda *o: uses(data[o], shape_like[tuple(v if d in axes else 0 for d, v in enumerate(o))])


@dataclass(frozen=True)
class ReverseAttrs:
    axis: tuple[int, ...]


@tdl_op("reverse", inputs=("data",), attrs=ReverseAttrs, aliases=("_npi_flip",), cases=[
    Case(shapes=((3, 4),), attrs={"axis": 0}),
    Case(shapes=((2, 3, 5),), attrs={"axis": (0, 2)}),
])
def reverse(data: TensorVar, attrs: ReverseAttrs) -> Callable:
    """out[..., j, ...] = data[..., n - 1 - j, ...]  along each ``axis`` (n its extent)."""
    axes = {_axis(a, data.ndim, "reverse") for a in attrs.axis}
    return lambda *o: data[tuple(n - 1 - v if d in axes else v for d, (v, n) in enumerate(zip(o, data.shape)))]


@dataclass(frozen=True)
class BlockAttrs:
    block_size: int


@tdl_op("depth_to_space", inputs=("data",), attrs=BlockAttrs, cases=[
    Case(shapes=((2, 12, 2, 4),), attrs={"block_size": 2}),
    Case(shapes=((1, 9, 2, 3),), attrs={"block_size": 3}),
])
def depth_to_space(data: TensorVar, attrs: BlockAttrs) -> Callable:
    """out[n, c, h, w] = data[n, ((h % b) * b + w % b) * C' + c, h // b, w // b]  (b = block_size, C' = C / b^2:
    channel blocks move into b x b spatial tiles, depth outermost)."""
    b = attrs.block_size
    channels = data.shape[1] // (b * b)
    return lambda n, c, h, w: data[n, ((h % b) * b + w % b) * channels + c, h // b, w // b]


@tdl_op("space_to_depth", inputs=("data",), attrs=BlockAttrs, cases=[
    Case(shapes=((2, 2, 4, 6),), attrs={"block_size": 2}),
    Case(shapes=((1, 3, 3, 6),), attrs={"block_size": 3}),
])
def space_to_depth(data: TensorVar, attrs: BlockAttrs) -> Callable:
    """out[n, (i * b + j) * C + c, h, w] = data[n, c, h * b + i, w * b + j]  (b = block_size: each b x b
    spatial tile becomes b^2 channel blocks; the inverse of depth_to_space)."""
    b = attrs.block_size
    channels = data.shape[1]

    def out(n: Var, k: Var, h: Var, w: Var) -> ValueExpr:
        tile = k // channels
        return data[n, k % channels, h * b + tile // b, w * b + tile % b]
    return out


@dataclass(frozen=True)
class DiagAttrs:
    k: int = 0
    axis1: int = 0
    axis2: int = 1


@tdl_op("diag", inputs=("data",), attrs=DiagAttrs, cases=[
    Case(shapes=((3, 5),)),
    Case(shapes=((4, 3),), attrs={"k": -1}),
    Case(shapes=((2, 3, 5),), attrs={"k": 2, "axis1": 1, "axis2": 2}),
    Case(shapes=((4, 2, 3),), attrs={"k": -1, "axis1": 2, "axis2": 0}),
    Case(shapes=((2,),), attrs={"k": 1}),
    Case(shapes=((4,),), attrs={"k": -2}),
])
def diag(data: TensorVar, attrs: DiagAttrs) -> Callable:
    """1-D data: out[i, j] = data[min(i, j)] where j - i == k, else 0 (a square matrix of side n + |k|).
    Otherwise: out[..., d] = data[... with d + max(-k, 0) on axis1 and d + max(k, 0) on axis2], those two axes
    removed and the diagonal appended last."""
    k = attrs.k
    if data.ndim == 1:
        return lambda i, j: where(eq(IndexValue(j - i), k), data.at(i if k >= 0 else j, fill=0.0), 0.0)
    a1, a2 = _axis(attrs.axis1, data.ndim, "diag"), _axis(attrs.axis2, data.ndim, "diag")
    if a1 == a2:
        raise TDLError("diag: axis1 and axis2 must differ")
    rest = [d for d in range(data.ndim) if d not in (a1, a2)]

    def out(*o: Var) -> ValueExpr:
        *batch, d = o
        idx: list[IndexExpr] = [0] * data.ndim
        for dim, v in zip(rest, batch):
            idx[dim] = v
        idx[a1], idx[a2] = d + max(-k, 0), d + max(k, 0)
        return data[tuple(idx)]
    return out


# ------------------------------------------------------------------------ the numpy interface (npx.set_np)
# Gluon blocks on ``mx.np`` export these. They move data as their legacy twins do; where their attributes or
# their shapes differ (numpy's axis conventions, no 0 = "keep" extents), they have descriptions of their own.
# A 0-d result (numpy's scalar array) is not described: tofu's tensors have at least one dimension.

def _not_scalar(out_shapes: Sequence[Shape], op: str) -> None:
    if any(len(s) == 0 for s in out_shapes):
        raise TDLError(f"{op}: a 0-d (scalar) result is not described; keep a dimension (keepdims, an axis)")


@dataclass(frozen=True)
class NumpyReshapeAttrs:
    newshape: tuple[int, ...] = ()
    order: str = "C"
    reverse: bool = False


def _row_major(op: str, data: TensorVar, attrs: NumpyReshapeAttrs, out_shapes: Sequence[Shape]) -> Callable:
    if attrs.order != "C":
        raise TDLError(f"{op}: order '{attrs.order}' is not described (the row-major order 'C' is)")
    _not_scalar(out_shapes, op)
    return reshape(data, NoAttrs(), out_shapes=out_shapes)


@tdl_op("_np_reshape", inputs=("a",), attrs=NumpyReshapeAttrs, cases=[
    Case(shapes=((2, 3, 4),), attrs={"newshape": (2, 12)}),
    Case(shapes=((6, 4),), attrs={"newshape": (2, -1, 4)}),
    Case(shapes=((2, 6, 2),), attrs={"newshape": (4, 3, 2)}),
])
def np_reshape(a: TensorVar, attrs: NumpyReshapeAttrs, *, out_shapes: Sequence[Shape]) -> Callable:
    """out[o] = a[unravel(ravel(o, out.shape), a.shape)]  (row-major; -1 inferred; order 'C' only)."""
    return _row_major("_np_reshape", a, attrs, out_shapes)


@tdl_op("_npx_reshape", inputs=("a",), attrs=NumpyReshapeAttrs, cases=[
    Case(shapes=((2, 3, 4),), attrs={"newshape": (-2, -1)}),          # -2 copies a dimension
    Case(shapes=((2, 3, 4),), attrs={"newshape": (-5, -2)}),          # -5 merges two
    Case(shapes=((6, 4),), attrs={"newshape": (-6, 2, 3, -2)}),       # -6 splits one
    Case(shapes=((2, 1, 4),), attrs={"newshape": (-2, -3, -2)}),      # -3 drops an extent-1 dimension
])
def npx_reshape(a: TensorVar, attrs: NumpyReshapeAttrs, *, out_shapes: Sequence[Shape]) -> Callable:
    """out[o] = a[unravel(ravel(o, out.shape), a.shape)]  (row-major: the special values of ``newshape`` and
    ``reverse`` only say the output shape, which MXNet infers)."""
    return _row_major("_npx_reshape", a, attrs, out_shapes)


@dataclass(frozen=True)
class NumpyTransposeAttrs:
    axes: tuple[int, ...] | None = None


@tdl_op("_np_transpose", inputs=("a",), attrs=NumpyTransposeAttrs, cases=[
    Case(shapes=((2, 3, 4),)),
    Case(shapes=((2, 3, 4),), attrs={"axes": (1, 0, 2)}),
    Case(shapes=((2, 3, 2, 2),), attrs={"axes": (0, -2, 3, 1)}),
])
def np_transpose(a: TensorVar, attrs: NumpyTransposeAttrs) -> Callable:
    """out[o_0, ..., o_n] = a[i] with i[axes[k]] = o_k  (default axes: reversed)."""
    return transpose(a, TransposeAttrs(tuple(attrs.axes or ())))


@dataclass(frozen=True)
class NumpyConcatenateAttrs:
    axis: int = 0


@tdl_op("_npi_concatenate", inputs=("*data",), attrs=NumpyConcatenateAttrs, cases=[
    Case(shapes=((2, 3), (1, 3)), attrs={"num_args": 2, "axis": 0}),
    Case(shapes=((2, 2, 3), (2, 2, 1), (2, 2, 2)), attrs={"num_args": 3, "axis": -1}),
    Case(shapes=((2, 3), (4, 3)), attrs={"num_args": 2}),
])
def np_concatenate(data: tuple[TensorVar, ...], attrs: NumpyConcatenateAttrs) -> Callable:
    """out[..., j, ...] = data_k[..., j - off_k, ...] where off_k <= j < off_k + n_k  (along ``axis``)."""
    return concat(data, ConcatAttrs(attrs.axis))


@tdl_op("_np_squeeze", inputs=("a",), attrs=SqueezeAttrs, cases=[
    Case(shapes=((2, 1, 3, 1),)),
    Case(shapes=((2, 1, 3, 1),), attrs={"axis": (1,)}),
    Case(shapes=((1, 4),), attrs={"axis": (0,)}),
])
def np_squeeze(a: TensorVar, attrs: SqueezeAttrs, *, out_shapes: Sequence[Shape]) -> Callable:
    """out = a without its extent-1 axes (those in ``axis``, default all)."""
    _not_scalar(out_shapes, "_np_squeeze")
    return squeeze(a, attrs)


@tdl_op("_npi_broadcast_to", inputs=("array",), attrs=BroadcastToAttrs, cases=[
    Case(shapes=((1, 4),), attrs={"shape": (3, 4)}),
    Case(shapes=((3, 1),), attrs={"shape": (2, 3, 5)}),          # numpy prepends dimensions
    Case(shapes=((4,),), attrs={"shape": (2, 4)}),
])
def np_broadcast_to(array: TensorVar, attrs: BroadcastToAttrs) -> Callable:
    """out[i] = array[i right-aligned, 0 on array's extent-1 dims]  (out.shape = the ``shape`` attribute)."""
    return lambda *o: broadcast_read(array, o)


@dataclass(frozen=True)
class MoveAxisAttrs:
    source: tuple[int, ...]
    destination: tuple[int, ...]


@tdl_op("_np_moveaxis", inputs=("a",), attrs=MoveAxisAttrs, cases=[
    Case(shapes=((2, 3, 4),), attrs={"source": (0,), "destination": (-1,)}),
    Case(shapes=((2, 3, 4, 5),), attrs={"source": (1, 3), "destination": (0, 1)}),
])
def np_moveaxis(a: TensorVar, attrs: MoveAxisAttrs) -> Callable:
    """out = a with axes ``source`` moved to ``destination``, the others in their order."""
    if len(attrs.source) != len(attrs.destination):
        raise TDLError("_np_moveaxis: source and destination differ in length")
    src = [_axis(x, a.ndim, "_np_moveaxis") for x in attrs.source]
    dst = [_axis(x, a.ndim, "_np_moveaxis") for x in attrs.destination]
    rest = iter(d for d in range(a.ndim) if d not in src)
    by_dst = dict(zip(dst, src))
    return _permuted(a, [by_dst[k] if k in by_dst else next(rest) for k in range(a.ndim)])


@dataclass(frozen=True)
class VStackAttrs:
    num_args: int


@tdl_op("_npi_vstack", inputs=("*data",), attrs=VStackAttrs, cases=[
    Case(shapes=((2, 4), (1, 4)), attrs={"num_args": 2}),
    Case(shapes=((4,), (4,), (4,)), attrs={"num_args": 3}),             # vectors: stacked as rows
])
def np_vstack(data: tuple[TensorVar, ...], attrs: VStackAttrs) -> Callable:
    """out = the inputs concatenated along axis 0 (vectors stacked as the rows of a matrix)."""
    return stack(data, StackAttrs(0)) if data[0].ndim == 1 else concat(data, ConcatAttrs(0))


@dataclass(frozen=True)
class NumpyDiagonalAttrs:
    offset: int = 0
    axis1: int = 0
    axis2: int = 1


@tdl_op("_np_diagonal", inputs=("data",), attrs=NumpyDiagonalAttrs, cases=[
    Case(shapes=((3, 5),)),
    Case(shapes=((2, 3, 5),), attrs={"offset": 1, "axis1": 1, "axis2": 2}),
    Case(shapes=((4, 2, 3),), attrs={"offset": -1, "axis1": 2, "axis2": 0}),
])
def np_diagonal(data: TensorVar, attrs: NumpyDiagonalAttrs) -> Callable:
    """out[..., d] = data[... with d + max(-offset, 0) on axis1 and d + max(offset, 0) on axis2], the two axes
    removed and the diagonal appended last (numpy's diagonal)."""
    if data.ndim < 2:
        raise TDLError("_np_diagonal: data of one dimension has no diagonal (two or more are needed)")
    return diag(data, DiagAttrs(k=attrs.offset, axis1=attrs.axis1, axis2=attrs.axis2))


@dataclass(frozen=True)
class RollAttrs:
    shift: tuple[int, ...] | None = None
    axis: tuple[int, ...] | None = None


@tdl_op("_np_roll", inputs=("data",), attrs=RollAttrs, cases=[
    Case(shapes=((4, 3),), attrs={"shift": 1, "axis": 0}),
    Case(shapes=((2, 3, 5),), attrs={"shift": (-2, 7), "axis": (2, 1)}),
])
def np_roll(data: TensorVar, attrs: RollAttrs) -> Callable:
    """out[..., i, ...] = data[..., (i - shift) mod n, ...] along each listed axis (n its extent)."""
    if attrs.axis is None or attrs.shift is None:
        raise TDLError("_np_roll: a roll of the flattened array (no axis) is not described")
    shifts = attrs.shift * len(attrs.axis) if len(attrs.shift) == 1 else attrs.shift
    if len(shifts) != len(attrs.axis):
        raise TDLError(f"_np_roll: {len(attrs.shift)} shifts for {len(attrs.axis)} axes")
    total: dict[int, int] = {}
    for a, k in zip(attrs.axis, shifts):
        d = _axis(a, data.ndim, "_np_roll")
        total[d] = (total.get(d, 0) + k) % data.shape[d]
    return lambda *o: data[tuple((v + data.shape[d] - total[d]) % data.shape[d] if total.get(d) else v
                                 for d, v in enumerate(o))]


@dataclass(frozen=True)
class NumpyDiagAttrs:
    k: int = 0


@tdl_op("_np_diag", inputs=("data",), attrs=NumpyDiagAttrs, cases=[
    Case(shapes=((3, 5),)),
    Case(shapes=((4, 3),), attrs={"k": -1}),
    Case(shapes=((3,),), attrs={"k": 1}),
])
def np_diag(data: TensorVar, attrs: NumpyDiagAttrs) -> Callable:
    """A matrix's diagonal k, or a vector put on diagonal k of a square matrix (numpy's diag)."""
    if data.ndim > 2:
        raise TDLError(f"_np_diag: data of {data.ndim} dimensions (numpy's diag takes one or two)")
    return diag(data, DiagAttrs(k=attrs.k))


@dataclass(frozen=True)
class TrilAttrs:
    k: int = 0


@tdl_op("_npi_tril", inputs=("data",), attrs=TrilAttrs, cases=[
    Case(shapes=((4, 4),)),
    Case(shapes=((2, 3, 5),), attrs={"k": 1}),
    Case(shapes=((5, 3),), attrs={"k": -2}),
])
def np_tril(data: TensorVar, attrs: TrilAttrs) -> Callable:
    """out[..., i, j] = data[..., i, j] where j - i <= k, else 0  (the lower triangle of the last two axes)."""
    if data.ndim < 2:
        raise TDLError("_npi_tril: a vector (numpy broadcasts it to a matrix first) is not described")
    return lambda *o: where(le(IndexValue(o[-1] - o[-2]), attrs.k), data[o], 0.0)

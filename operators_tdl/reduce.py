"""TDL descriptions of MXNet's reductions over axes: sum, mean, max, min, prod, nansum, nanprod, norm, moments,
and the index reductions argmax, argmin, argmax_channel; the prefix sum _np_cumsum; the numpy interface's
_np_sum, _npi_mean, _np_max, _np_min, _np_prod, _npi_var, _npi_std, _npi_norm, _npi_argmax, _npi_argmin, _np_all,
_np_any (1 where every / some element is non-zero), _np_trace (of a stack of matrices) and the n-th difference
_npi_diff.

Each output element is one ``Sum``/``Max``/``Min``/``Prod`` over the reduced axes (a single reduction over all
of them, so that splitting any reduced axis is one partition-n-reduce). Kept axes are read with the output's
index variables; ``keepdims`` leaves the reduced axes in the output with extent 1 (their index is unused).

MXNet's axis convention (checked against MXNet 1.9.1): ``axis=None`` or ``axis=()`` reduces every axis (even
with ``exclude``) and, without keepdims, gives shape (1,); ``exclude=True`` reduces the axes *not* listed;
negative axes count from the end.

moments has two outputs, the mean and the (biased) variance, which reads the mean: its reduced axes are not
split (partition-n-reduce is derived for single-output operators; ``tofu ops --op moments`` says why), its kept
axes are.

argmax and argmin return a position, not a combination of values, so they are no partition-n-reduce: an
``Opaque`` numpy function takes each whole line of the reduced axis (which therefore cannot be split); every
other axis partitions. Ties give the first position, as in MXNet.
"""
from __future__ import annotations

import math

import numpy as np

from operators_tdl.shape import DiagAttrs, NumpyDiagonalAttrs, diag, unravel
from tofu.tdl.lang import *  # noqa: F403  (the DSL: tofu.tdl.lang.__all__)

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


def _reduced(data: TensorVar, axes: Sequence[int], keepdims: bool, reducer: Reducer, mean: bool,
             element: Callable[[ValueExpr], ValueExpr] = lambda v: v) -> Callable[..., ValueExpr]:
    """:func:`reduction`, divided by the number of reduced elements for a ``mean``."""
    out = reduction(data, axes, keepdims, reducer, element)
    if not mean:
        return out
    n = _count(data, axes)
    return lambda *o: out(*o) / n


REDUCE_CASES = [
    Case(shapes=((3, 4),)),                                                   # every axis -> shape (1,)
    Case(shapes=((2, 3, 4),), attrs={"axis": 1}),
    Case(shapes=((2, 3, 4),), attrs={"axis": (0, 2), "keepdims": True}),
    Case(shapes=((2, 3, 4),), attrs={"axis": -1, "exclude": True}),
    Case(shapes=((2, 3, 2, 2),), attrs={"axis": (1, -1), "exclude": True, "keepdims": True}),
]


def _reduce_op(op: str, reducer: Reducer, formula: str, *, mean: bool = False,
               element: Callable[[ValueExpr], ValueExpr] = lambda v: v) -> None:
    """Registers ``op`` (``reducer`` of ``element(data)`` over the reduced axes; divided by their size for
    ``mean``)."""
    def build(data: TensorVar, attrs: ReduceAttrs):
        return _reduced(data, reduced_axes(data.ndim, attrs.axis, attrs.exclude, op), attrs.keepdims, reducer, mean,
                        element)

    build.__name__ = build.__qualname__ = op
    build.__doc__ = f"out[o] = {formula} over the reduced axes k of data (axis, exclude, keepdims as MXNet)."
    tdl_op(op, inputs=("data",), attrs=ReduceAttrs, cases=REDUCE_CASES)(build)


# MXNet's name, its numpy interface's name, the reducer, its formula, whether it is a mean
REDUCTIONS = (("sum", "_np_sum", Sum, "sum_k data[o, k]", False),
              ("mean", "_npi_mean", Sum, "(sum_k data[o, k]) / |k|", True),
              ("max", "_np_max", Max, "max_k data[o, k]", False),
              ("min", "_np_min", Min, "min_k data[o, k]", False),
              ("prod", "_np_prod", Prod, "prod_k data[o, k]", False))
for _op, _, _reducer, _formula, _mean in REDUCTIONS:
    _reduce_op(_op, _reducer, _formula, mean=_mean)
_reduce_op("nansum", Sum, "sum_k data[o, k], NaN counted as 0,", element=lambda v: where(ne(v, v), 0.0, v))
_reduce_op("nanprod", Prod, "prod_k data[o, k], NaN counted as 1,", element=lambda v: where(ne(v, v), 1.0, v))


# The numpy interface's reductions (``npx.set_np()``; ``_np_amax`` and ``_np_product`` are MXNet's other names of
# ``_np_max`` and ``_np_prod``): numpy's axis convention (None reduces every axis, () none, no ``exclude``).
# Reducing every axis without keepdims gives numpy's 0-d array, which is not described; nor are ``initial`` and a
# ``dtype`` other than float32.

@dataclass(frozen=True)
class NumpyReduceAttrs:
    axis: tuple[int, ...] | None = None
    keepdims: bool = False
    dtype: str | None = None
    initial: float | None = None


NUMPY_REDUCE_CASES = [
    Case(shapes=((3, 4),), attrs={"keepdims": True}),                        # every axis, kept
    Case(shapes=((2, 3, 4),), attrs={"axis": 1}),
    Case(shapes=((2, 3, 4),), attrs={"axis": (0, -1), "keepdims": True}),
    Case(shapes=((2, 3, 2, 2),), attrs={"axis": (1, 3)}),
]


def _numpy_axes(op: str, a: TensorVar, attrs) -> tuple[int, ...]:
    """The axes a numpy reduction reduces (None: every axis; (): none), its described dtype and result rank
    checked."""
    if attrs.dtype not in (None, "None", "float32"):
        raise TDLError(f"{op}: dtype '{attrs.dtype}' is not described (float32 is)")
    axes = tuple(range(a.ndim)) if attrs.axis is None else reduced_axes(a.ndim, attrs.axis, False, op) \
        if attrs.axis else ()
    if len(axes) == a.ndim and not attrs.keepdims:
        raise TDLError(f"{op}: reducing every axis gives a 0-d (scalar) array, which is not described; "
                       f"keepdims=True keeps the dimensions")
    return axes


def _numpy_reduce_op(op: str, reducer: Reducer, formula: str, *, mean: bool = False) -> None:
    def build(a: TensorVar, attrs: NumpyReduceAttrs):
        if attrs.initial is not None:
            raise TDLError(f"{op}: the 'initial' attribute is not described")
        return _reduced(a, _numpy_axes(op, a, attrs), attrs.keepdims, reducer, mean)

    build.__name__ = build.__qualname__ = op
    build.__doc__ = f"out[o] = {formula} over the reduced axes k of a (numpy's axis and keepdims)."
    tdl_op(op, inputs=("a",), attrs=NumpyReduceAttrs, cases=NUMPY_REDUCE_CASES)(build)


for _, _op, _reducer, _formula, _mean in REDUCTIONS:
    _numpy_reduce_op(_op, _reducer, _formula.replace("data", "a"), mean=_mean)


@dataclass(frozen=True)
class NumpyVarAttrs:
    axis: tuple[int, ...] | None = None
    keepdims: bool = False
    ddof: int = 0
    dtype: str | None = None


def _numpy_var(op: str, a: TensorVar, attrs: NumpyVarAttrs, out_shapes) -> Callable[..., ValueExpr]:
    """The variance of ``a`` over numpy's axes: sum_k (a[o, k] - mean[o])^2 / (|k| - ddof)."""
    axes = _numpy_axes(op, a, attrs)
    n = _count(a, axes)
    if attrs.ddof >= n:
        raise TDLError(f"{op}: ddof {attrs.ddof} leaves no degree of freedom over {n} elements")
    total = reduction(a, axes, attrs.keepdims, Sum)
    mean = compute("mean", out_shapes[0], lambda *o: total(*o) / n)
    return lambda *o: reduction(a, axes, attrs.keepdims, Sum, lambda v: square(v - mean[o]))(*o) / (n - attrs.ddof)


VAR_CASES = [
    Case(shapes=((2, 3, 4),), attrs={"axis": 1}),
    Case(shapes=((2, 3, 4),), attrs={"axis": (0, 2), "keepdims": True, "ddof": 1}),
    Case(shapes=((3, 4),), attrs={"axis": -1}),
]


@tdl_op("_npi_var", inputs=("a",), attrs=NumpyVarAttrs, cases=VAR_CASES)
def np_var(a: TensorVar, attrs: NumpyVarAttrs, *, out_shapes):
    """out[o] = sum_k (a[o, k] - mean[o])^2 / (|k| - ddof), mean[o] = sum_k a[o, k] / |k|  (numpy's axes)."""
    return _numpy_var("_npi_var", a, attrs, out_shapes)


@tdl_op("_npi_std", inputs=("a",), attrs=NumpyVarAttrs, cases=VAR_CASES)
def np_std(a: TensorVar, attrs: NumpyVarAttrs, *, out_shapes):
    """out[o] = sqrt(_npi_var's out[o])."""
    var = _numpy_var("_npi_std", a, attrs, out_shapes)
    return lambda *o: sqrt(var(*o))


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


@dataclass(frozen=True)
class NumpyNormAttrs:
    ord: float = 2.0
    axis: tuple[int, ...] | None = None
    keepdims: bool = False
    flag: int = 0


@tdl_op("_npi_norm", inputs=("data",), attrs=NumpyNormAttrs, cases=[
    Case(shapes=((3, 4),), attrs={"axis": (1,), "keepdims": True, "flag": 1}),       # np.linalg.norm(x, axis=1)
    Case(shapes=((2, 3, 4),), attrs={"ord": 1.0, "axis": (1,)}),
    Case(shapes=((3, 4),), attrs={"axis": (0,)}),
])
def np_norm(data: TensorVar, attrs: NumpyNormAttrs):
    """out[o] = sqrt(sum_k data[o, k]^2) (ord 2) or sum_k |data[o, k]| (ord 1) over one axis k  (numpy's vector
    norms; the matrix norms of two axes are not described)."""
    if attrs.axis is None or len(attrs.axis) != 1:
        raise TDLError("_npi_norm: only a vector norm along one axis is described (a matrix norm of two axes, or "
                       "the norm of the flattened array, is not)")
    if attrs.ord not in (1.0, 2.0):
        raise TDLError(f"_npi_norm: ord {attrs.ord:g} is not described (1 and 2 are)")
    return norm(data, NormAttrs(int(attrs.ord), attrs.axis, attrs.keepdims))


@dataclass(frozen=True)
class MomentsAttrs:
    axes: tuple[int, ...] | None = None
    keepdims: bool = False


@tdl_op("moments", inputs=("data",), outputs=("mean", "var"), attrs=MomentsAttrs, cases=[
    Case(shapes=((2, 3, 4),), attrs={"axes": (1,)}),
    Case(shapes=((2, 3, 4),), attrs={"axes": (0, 2), "keepdims": True}),
    Case(shapes=((3, 4),), attrs={"axes": (-1,)}),
])
def moments(data: TensorVar, attrs: MomentsAttrs, *, out_shapes: Sequence[tuple[int, ...]]):
    """mean[o] = sum_k data[o, k] / |k|,  var[o] = sum_k (data[o, k] - mean[o])^2 / |k|  over the axes k."""
    if not attrs.axes:
        raise TDLError("moments: MXNet needs the axes to reduce (axes=...)")
    axes = reduced_axes(data.ndim, attrs.axes, False, "moments")
    n = _count(data, axes)
    total = reduction(data, axes, attrs.keepdims, Sum)
    mean = compute("mean", out_shapes[0], lambda *o: total(*o) / n)

    def var(*o: Var) -> ValueExpr:
        return reduction(data, axes, attrs.keepdims, Sum, lambda v: square(v - mean[o]))(*o) / n
    return (lambda *o: total(*o) / n), var


@dataclass(frozen=True)
class ArgReduceAttrs:
    axis: int | None = None
    keepdims: bool = False


def _first_max(a: np.ndarray) -> np.ndarray:
    return np.argmax(a, axis=-1)


def _first_min(a: np.ndarray) -> np.ndarray:
    return np.argmin(a, axis=-1)


def _position(data: TensorVar, axis: int | None, keepdims: bool, find: Opaque) -> Callable[..., ValueExpr]:
    """out[o] = find(data[o with ':' on ``axis``]): the position of the extreme of each line of ``axis`` (None:
    of the flattened data, in an output of shape (1,) or, keepdims, all ones)."""
    if axis is None:
        flat = Opaque(find.name, lambda a: find.fn(a.reshape(*a.shape[:len(a.shape) - data.ndim], -1)))
        return lambda *o: flat(data[(slice(None),) * data.ndim])[()]
    axis %= data.ndim

    def out(*o: Var) -> ValueExpr:
        rest = (*o[:axis], *o[axis + 1:]) if keepdims else o
        return find(data[(*rest[:axis], slice(None), *rest[axis:])])[()]
    return out


ARG_CASES = [
    Case(shapes=((3, 5),), attrs={"axis": 1}),
    Case(shapes=((2, 3, 4),), attrs={"axis": 0, "keepdims": True}),
    Case(shapes=((2, 3, 4),), attrs={"axis": -2}),
    Case(shapes=((3, 4),)),
]


@tdl_op("argmax", inputs=("data",), attrs=ArgReduceAttrs, cases=ARG_CASES)
def argmax(data: TensorVar, attrs: ArgReduceAttrs) -> Callable:
    """out[o] = the first position k of the largest data[o, k] along ``axis`` (None: in the flattened data)."""
    return _position(data, attrs.axis, attrs.keepdims, Opaque("argmax", _first_max))


@tdl_op("argmin", inputs=("data",), attrs=ArgReduceAttrs, cases=ARG_CASES)
def argmin(data: TensorVar, attrs: ArgReduceAttrs) -> Callable:
    """out[o] = the first position k of the smallest data[o, k] along ``axis`` (None: in the flattened data)."""
    return _position(data, attrs.axis, attrs.keepdims, Opaque("argmin", _first_min))


@tdl_op("argmax_channel", inputs=("data",), cases=[
    Case(shapes=((3, 5),)),
    Case(shapes=((2, 3, 4),)),
])
def argmax_channel(data: TensorVar, attrs: NoAttrs) -> Callable:
    """out[n, x..] = the first position c of the largest data[n, c, x..]  (argmax over axis 1)."""
    return _position(data, 1, False, Opaque("argmax", _first_max))


# The numpy interface's index reductions: an int axis or None (the flattened data), whose 0-d results (None
# without keepdims) are not described.

def _np_position_op(op: str, extreme: str, find: Callable[[np.ndarray], np.ndarray]) -> None:
    def build(data: TensorVar, attrs: ArgReduceAttrs) -> Callable:
        if attrs.axis is None and not attrs.keepdims:
            raise TDLError(f"{op}: no axis and no keepdims gives a 0-d (scalar) array, which is not described")
        return _position(data, attrs.axis, attrs.keepdims, Opaque(op.removeprefix("_npi_"), find))

    build.__name__ = build.__qualname__ = op
    build.__doc__ = (f"out[o] = the first position k of the {extreme} data[o, k] along ``axis`` (None, with keepdims: "
                     f"in the flattened data).")
    tdl_op(op, inputs=("data",), attrs=ArgReduceAttrs, cases=ARG_CASES[:3] + [
        Case(shapes=((3, 4),), attrs={"keepdims": True})])(build)


_np_position_op("_npi_argmax", "largest", _first_max)
_np_position_op("_npi_argmin", "smallest", _first_min)


@dataclass(frozen=True)
class TruthAttrs:
    axis: tuple[int, ...] | None = None
    keepdims: bool = False


TRUTH_CASES = [                             # the kept axes of 4 elements: 2 and 4 workers split them
    Case(shapes=((4, 3),), ints=((0, 2),), attrs={"axis": 1}),
    Case(shapes=((2, 4, 3),), ints=((0, 3),), attrs={"axis": (0, 2), "keepdims": True}),
    Case(shapes=((2, 5),), ints=((0, 4),), attrs={"keepdims": True}),             # every axis, kept
]


def _truth_op(op: str, test: Callable[..., np.ndarray], formula: str) -> None:
    """Registers ``op``: an ``Opaque`` test of each whole set of reduced elements. Not a partition-n-reduce:
    MXNet has no maximum or minimum of booleans to combine partial results with, so the reduced axes stay whole."""
    def build(data: TensorVar, attrs: TruthAttrs):
        axes = _numpy_axes(op, data, NumpyReduceAttrs(axis=attrs.axis, keepdims=attrs.keepdims))
        if not axes:
            return lambda *o: ne(data[o], 0.0)
        kept, last = [d for d in range(data.ndim) if d not in axes], tuple(range(-len(axes), 0))
        whole = Opaque(op.lstrip("_"), lambda a: test(a != 0, axis=last).astype(np.float32))

        def out(*o: Var) -> ValueExpr:
            at = iter(o[d] for d in kept) if attrs.keepdims else iter(o)
            return whole(data[tuple(slice(None) if d in axes else next(at) for d in range(data.ndim))])[()]
        return out

    build.__name__ = build.__qualname__ = op
    build.__doc__ = f"out[o] = 1 if {formula} data[o, k] != 0 over the reduced axes k, else 0 (numpy's axis, keepdims)."
    tdl_op(op, inputs=("data",), attrs=TruthAttrs, cases=TRUTH_CASES)(build)


_truth_op("_np_all", np.all, "every")
_truth_op("_np_any", np.any, "some")


@tdl_op("_np_trace", inputs=("data",), attrs=NumpyDiagonalAttrs, cases=[
    Case(shapes=((2, 3, 4),), attrs={"axis1": 1, "axis2": 2}),
    Case(shapes=((3, 2, 4),), attrs={"offset": 1, "axis1": 0, "axis2": 2}),
    Case(shapes=((4, 3, 2),), attrs={"offset": -2, "axis1": 0, "axis2": 1}),
])
def np_trace(data: TensorVar, attrs: NumpyDiagonalAttrs) -> Callable:
    """out[..] = sum_d diagonal[.., d], the diagonal ``offset`` of the plane (axis1, axis2) as ``_np_diagonal``
    takes it (a matrix's trace is a 0-d array, not described)."""
    if data.ndim < 3:
        raise TDLError(f"_np_trace: data of rank {data.ndim} gives a 0-d (scalar) array, which is not described "
                       f"(a stack of matrices, rank >= 3, is)")
    diagonal = diag(data, DiagAttrs(k=attrs.offset, axis1=attrs.axis1, axis2=attrs.axis2))
    a1, a2 = attrs.axis1 % data.ndim, attrs.axis2 % data.ndim
    n = min(data.shape[a1] - max(-attrs.offset, 0), data.shape[a2] - max(attrs.offset, 0))
    if n <= 0:
        raise TDLError(f"_np_trace: offset {attrs.offset} leaves no diagonal in a {data.shape[a1]} x "
                       f"{data.shape[a2]} plane")
    return lambda *o: Sum(lambda d: diagonal(*o, d), extents=(n,))


@dataclass(frozen=True)
class DiffAttrs:
    n: int = 1
    axis: int = -1


@tdl_op("_npi_diff", inputs=("a",), attrs=DiffAttrs, cases=[
    Case(shapes=((3, 5),)),
    Case(shapes=((4, 3, 2),), attrs={"n": 2, "axis": 0}),
    Case(shapes=((2, 6),), attrs={"n": 3, "axis": 1}),
])
def np_diff(a: TensorVar, attrs: DiffAttrs) -> Callable:
    """out[.., i, ..] = sum_{m=0}^{n} (-1)^(n-m) C(n, m) a[.., i + m, ..] along ``axis``: the n-th difference,
    n fewer elements there."""
    if not -a.ndim <= attrs.axis < a.ndim:
        raise TDLError(f"_npi_diff: axis {attrs.axis} is out of range for rank {a.ndim}")
    axis, n = attrs.axis % a.ndim, attrs.n
    if not 0 < n < a.shape[axis]:
        raise TDLError(f"_npi_diff: an order {n} difference along an axis of {a.shape[axis]} elements is not "
                       f"described (0 < n < {a.shape[axis]} is)")

    def out(*o: Var) -> ValueExpr:
        terms = [(-1) ** (n - m) * math.comb(n, m) * a[(*o[:axis], o[axis] + m, *o[axis + 1:])] for m in range(n + 1)]
        return sum(terms[1:], terms[0])
    return out


@dataclass(frozen=True)
class CumsumAttrs:
    axis: int | None = None
    dtype: str | None = None


@tdl_op("_np_cumsum", inputs=("a",), attrs=CumsumAttrs, cases=[
    Case(shapes=((3, 5),), attrs={"axis": 1}),
    Case(shapes=((4, 2, 3),), attrs={"axis": 0}),
    Case(shapes=((2, 4, 4),), attrs={"axis": 2}),
    Case(shapes=((2, 3),)),
])
def cumsum(a: TensorVar, attrs: CumsumAttrs) -> Callable:
    """out[.., i, ..] = sum_{k <= i} a[.., k, ..] along ``axis`` (None: of the flattened tensor, 1-D): a prefix
    sum, the other axes split, the summed one only as partial sums its kernel cannot make (each shard's prefix
    sum starts at its own first element)."""
    if attrs.dtype not in (None, "float32"):
        raise TDLError(f"_np_cumsum: dtype '{attrs.dtype}' is not described (float32 is)")
    if attrs.axis is None:
        if a.ndim != 1:
            flat = compute("flat", (math.prod(a.shape),),
                           lambda j: a[tuple(unravel(j, a.shape))])
            return lambda i: Sum(lambda k: where(le(IndexValue(k - i), 0), flat[k], 0.0), extents=(flat.shape[0],))
        axis = 0
    else:
        if attrs.axis < 0:
            raise TDLError(f"_np_cumsum: a negative axis ({attrs.axis}) is not described (MXNet 1.9.1's kernel "
                           f"fails on one)")
        if attrs.axis >= a.ndim:
            raise TDLError(f"_np_cumsum: axis {attrs.axis} is out of range for data of rank {a.ndim}")
        axis = attrs.axis
    n = a.shape[axis]
    return lambda *o: Sum(lambda k: where(le(IndexValue(k - o[axis]), 0), a[(*o[:axis], k, *o[axis + 1:])], 0.0),
                          extents=(n,))


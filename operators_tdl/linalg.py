"""TDL descriptions of the linear-algebra and sorting family: _linalg_gemm, _linalg_gemm2, _linalg_syrk,
_linalg_sumlogdiag, _linalg_extractdiag, _linalg_makediag, _linalg_potrf, _linalg_potri, _linalg_trmm,
_linalg_trsm, _linalg_inverse, _linalg_det, _linalg_slogdet, khatri_rao, sort, argsort, topk; the numpy
interface's _npi_solve, and _npi_cholesky under _linalg_potrf's description.

The batched matrix products and the log-determinant helper are plain reductions. Sorting is not
expressible as an index mapping, so sort, argsort and topk apply an ``Opaque`` numpy function to a whole line
of the sorted axis: that axis cannot be partitioned, every other (batch) axis can.
The factorizations' cases draw symmetric positive-definite matrices (``Case.spd``). Not described:
``_linalg_gelqf`` and ``_linalg_syevd`` (a factor is defined up to the signs of its rows, which MXNet's LAPACK
and numpy's need not choose alike), ``_linalg_extracttrian`` and ``_linalg_maketrian`` (a triangle packed into
a vector: the position of (i, j) is quadratic in i, not an affine index).
"""
from __future__ import annotations

import math

import numpy as np

from tofu.tdl.lang import *  # noqa: F403  (the DSL: tofu.tdl.lang.__all__)


@dataclass(frozen=True)
class Gemm2Attrs:
    transpose_a: bool = False
    transpose_b: bool = False
    alpha: float = 1.0
    axis: int = -2


@tdl_op("_linalg_gemm2", inputs=("A", "B"), attrs=Gemm2Attrs, cases=[
    Case(shapes=((3, 4), (4, 2))),
    Case(shapes=((2, 4, 3), (2, 2, 4)), attrs={"transpose_a": True, "transpose_b": True, "alpha": 0.5}),
    Case(shapes=((2, 3, 4), (2, 3, 2)), attrs={"transpose_a": True}),
])
def gemm2(a: TensorVar, b: TensorVar, attrs: Gemm2Attrs) -> Callable:
    """out[..., i, j] = alpha * sum_k op(A)[..., i, k] * op(B)[..., k, j]  (op: optional transpose)."""
    if attrs.axis != -2:
        raise TDLError("_linalg_gemm2: only the default row axis (-2) is described")

    def out(*o: Var) -> ValueExpr:
        *batch, i, j = o
        return attrs.alpha * Sum(lambda k: a[(*batch, k, i) if attrs.transpose_a else (*batch, i, k)]
                                 * b[(*batch, j, k) if attrs.transpose_b else (*batch, k, j)])
    return out


@dataclass(frozen=True)
class GemmAttrs:
    transpose_a: bool = False
    transpose_b: bool = False
    alpha: float = 1.0
    beta: float = 1.0
    axis: int = -2


@tdl_op("_linalg_gemm", inputs=("A", "B", "C"), attrs=GemmAttrs, cases=[
    Case(shapes=((3, 4), (4, 2), (3, 2))),
    Case(shapes=((2, 4, 3), (2, 2, 4), (2, 3, 2)), attrs={"transpose_a": True, "transpose_b": True, "alpha": 0.5,
                                                          "beta": -2.0}),
])
def gemm(a: TensorVar, b: TensorVar, c: TensorVar, attrs: GemmAttrs) -> Callable:
    """out[..., i, j] = alpha * sum_k op(A)[..., i, k] * op(B)[..., k, j] + beta * C[..., i, j]."""
    if attrs.axis != -2:
        raise TDLError("_linalg_gemm: only the default row axis (-2) is described")
    product = gemm2(a, b, Gemm2Attrs(attrs.transpose_a, attrs.transpose_b, attrs.alpha))
    return lambda *o: product(*o) + attrs.beta * c[o]


@dataclass(frozen=True)
class SyrkAttrs:
    transpose: bool = False
    alpha: float = 1.0


@tdl_op("_linalg_syrk", inputs=("A",), attrs=SyrkAttrs, cases=[
    Case(shapes=((3, 4),)),
    Case(shapes=((2, 4, 3),), attrs={"transpose": True, "alpha": 2.0}),
])
def syrk(a: TensorVar, attrs: SyrkAttrs) -> Callable:
    """out[..., i, j] = alpha * sum_k A[..., i, k] * A[..., j, k]  (transpose: A^T A instead of A A^T)."""
    def out(*o: Var) -> ValueExpr:
        *batch, i, j = o
        if attrs.transpose:
            return attrs.alpha * Sum(lambda k: a[(*batch, k, i)] * a[(*batch, k, j)])
        return attrs.alpha * Sum(lambda k: a[(*batch, i, k)] * a[(*batch, j, k)])
    return out


@tdl_op("_linalg_sumlogdiag", inputs=("A",), cases=[
    Case(shapes=((2, 3, 3),), positive=(0,)),
    Case(shapes=((2, 2, 4, 4),), positive=(0,)),
])
def sumlogdiag(a: TensorVar, attrs: NoAttrs) -> Callable:
    """out[...] = sum_i log A[..., i, i]."""
    return lambda *batch: Sum(lambda i: log(a[(*batch, i, i)]))


@dataclass(frozen=True)
class DiagAttrs:
    offset: int = 0


@tdl_op("_linalg_extractdiag", inputs=("A",), attrs=DiagAttrs, cases=[
    Case(shapes=((4, 4),)),
    Case(shapes=((2, 3, 3),), attrs={"offset": 1}),
    Case(shapes=((2, 4, 4),), attrs={"offset": -2}),
])
def extractdiag(a: TensorVar, attrs: DiagAttrs) -> Callable:
    """out[..., i] = A[..., i, i + offset] (offset >= 0) or A[..., i - offset, i] (offset < 0): the diagonal
    ``offset`` above (below, if negative) the main one of square matrices."""
    o = attrs.offset
    if o >= 0:
        return lambda *x: a[(*x[:-1], x[-1], x[-1] + o)]
    return lambda *x: a[(*x[:-1], x[-1] - o, x[-1])]


@tdl_op("_linalg_makediag", inputs=("A",), attrs=DiagAttrs, cases=[
    Case(shapes=((4,),)),
    Case(shapes=((2, 3),), attrs={"offset": 1}),
    Case(shapes=((2, 3),), attrs={"offset": -2}),
])
def makediag(a: TensorVar, attrs: DiagAttrs) -> Callable:
    """out[..., r, c] = A[..., min(r, c)] where c - r = offset, else 0: square matrices of n + |offset| rows
    with the vectors of A on the diagonal ``offset``."""
    o = attrs.offset

    def out(*x: Var) -> ValueExpr:
        *batch, r, c = x
        on = eq(IndexValue(c - r), float(o))
        return where(on, a.at((*batch, r if o >= 0 else c), fill=0.0), 0.0)
    return out


# ---------------------------------------------------------------------------- factorizations and solves
# A Cholesky factor, an inverse, a determinant or a triangular solve is a function of whole matrices: an
# ``Opaque`` numpy function of the last two axes, so the batch axes split and the matrix axes do not, but where a
# column (a row) of the result needs only the same column (row) of the right-hand side: a triangular product or
# solve from the left splits its columns, from the right its rows.


def _whole(a: TensorVar) -> Callable:
    """Every matrix of a stack, whole: a[..., :, :] at the batch point the caller's indices give."""
    return lambda batch: a[(*batch, slice(None), slice(None))]


def _cholesky(a: np.ndarray) -> np.ndarray:
    return np.linalg.cholesky(a.astype(np.float64)).astype(np.float32)


@tdl_op("_linalg_potrf", inputs=("A",), aliases=("_npi_cholesky",), cases=[
    Case(shapes=((4, 4),), spd=(0,)),
    Case(shapes=((2, 3, 3, 3),), spd=(0,)),
])
def potrf(a: TensorVar, attrs: NoAttrs) -> Callable:
    """out[..., i, j] = L[..., i, j], the lower-triangular Cholesky factor of A (A = L L^T; zero above the
    diagonal)."""
    whole, chol = _whole(a), Opaque("cholesky", _cholesky)
    return lambda *o: chol(whole(o[:-2]))[o[-2], o[-1]]


def _potri(l: np.ndarray) -> np.ndarray:
    low = np.tril(l.astype(np.float64))
    return np.linalg.inv(low @ np.swapaxes(low, -1, -2)).astype(np.float32)


@tdl_op("_linalg_potri", inputs=("A",), cases=[
    Case(shapes=((4, 4),), spd=(0,)),
    Case(shapes=((4, 2, 3, 3),), spd=(0,)),
])
def potri(a: TensorVar, attrs: NoAttrs) -> Callable:
    """out[..., i, j] = (L L^T)^-1[..., i, j] with L the lower triangle of A (a Cholesky factor: the inverse of
    the matrix it factors)."""
    whole, inv = _whole(a), Opaque("potri", _potri)
    return lambda *o: inv(whole(o[:-2]))[o[-2], o[-1]]


@dataclass(frozen=True)
class TriangularAttrs:
    transpose: bool = False
    rightside: bool = False
    lower: bool = True
    alpha: float = 1.0


def _triangle(a: np.ndarray, attrs: TriangularAttrs) -> np.ndarray:
    """op(A): A's lower (upper) triangle, transposed when ``attrs.transpose``, in float64."""
    t = np.tril(a.astype(np.float64)) if attrs.lower else np.triu(a.astype(np.float64))
    return np.swapaxes(t, -1, -2) if attrs.transpose else t


def _trmm(attrs: TriangularAttrs) -> Callable:
    """A column (left) or row (rightside) of B -> that column or row of alpha op(A) B (alpha B op(A))."""
    def fn(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        t, v = _triangle(a, attrs), b.astype(np.float64)[..., :, None]
        out = (np.swapaxes(t, -1, -2) if attrs.rightside else t) @ v         # a row times op(A): op(A)^T row
        return (attrs.alpha * out[..., 0]).astype(np.float32)
    return fn


def _trsm(attrs: TriangularAttrs) -> Callable:
    """A column (left) or row (rightside) of B -> that column or row of X, op(A) X = alpha B (X op(A) = alpha B)."""
    def fn(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        t, v = _triangle(a, attrs), attrs.alpha * b.astype(np.float64)[..., :, None]
        out = np.linalg.solve(np.swapaxes(t, -1, -2) if attrs.rightside else t, v)
        return out[..., 0].astype(np.float32)
    return fn


def _triangular(a: TensorVar, b: TensorVar, op: Opaque, rightside: bool) -> Callable:
    """out[..., i, j] = op(A[..., :, :], B[..., :, j])[i] (from the left), op(A[..., :, :], B[..., i, :])[j]
    (rightside)."""
    whole = _whole(a)

    def out(*o: Var) -> ValueExpr:
        *batch, i, j = o
        if rightside:
            return op(whole(batch), b[(*batch, i, slice(None))])[j]
        return op(whole(batch), b[(*batch, slice(None), j)])[i]
    return out


_TRIANGULAR_CASES = [
    Case(shapes=((3, 3), (3, 4)), spd=(0,)),
    Case(shapes=((2, 3, 3), (2, 3, 2)), spd=(0,), attrs={"transpose": True, "alpha": 0.5}),
    Case(shapes=((2, 3, 3), (2, 4, 3)), spd=(0,), attrs={"rightside": True, "lower": False}),
    Case(shapes=((3, 3), (2, 3)), spd=(0,), attrs={"rightside": True, "transpose": True, "alpha": -2.0}),
]


@tdl_op("_linalg_trmm", inputs=("A", "B"), attrs=TriangularAttrs, cases=_TRIANGULAR_CASES)
def trmm(a: TensorVar, b: TensorVar, attrs: TriangularAttrs) -> Callable:
    """out = alpha op(A) B, or alpha B op(A) (rightside); op(A) the lower (upper) triangle of A, transposed when
    ``transpose``."""
    return _triangular(a, b, Opaque("trmm", _trmm(attrs)), attrs.rightside)


@tdl_op("_linalg_trsm", inputs=("A", "B"), attrs=TriangularAttrs, cases=_TRIANGULAR_CASES)
def trsm(a: TensorVar, b: TensorVar, attrs: TriangularAttrs) -> Callable:
    """out = X with op(A) X = alpha B, or X op(A) = alpha B (rightside); op(A) as for _linalg_trmm."""
    return _triangular(a, b, Opaque("trsm", _trsm(attrs)), attrs.rightside)


def _inverse(a: np.ndarray) -> np.ndarray:
    return np.linalg.inv(a.astype(np.float64)).astype(np.float32)


def _det(a: np.ndarray) -> np.ndarray:
    return np.linalg.det(a.astype(np.float64))[..., None].astype(np.float32)


def _sign(a: np.ndarray) -> np.ndarray:
    return np.linalg.slogdet(a.astype(np.float64))[0][..., None].astype(np.float32)


def _logabsdet(a: np.ndarray) -> np.ndarray:
    return np.linalg.slogdet(a.astype(np.float64))[1][..., None].astype(np.float32)


@tdl_op("_linalg_inverse", inputs=("A",), cases=[
    Case(shapes=((4, 4),), spd=(0,)),
    Case(shapes=((2, 3, 3),)),
])
def inverse(a: TensorVar, attrs: NoAttrs) -> Callable:
    """out[..., i, j] = A^-1[..., i, j]."""
    whole, inv = _whole(a), Opaque("inverse", _inverse)
    return lambda *o: inv(whole(o[:-2]))[o[-2], o[-1]]


def _solve_column(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """A, a column of B -> that column of X, A X = B."""
    return np.linalg.solve(a.astype(np.float64), b.astype(np.float64)[..., :, None])[..., 0].astype(np.float32)


@tdl_op("_npi_solve", inputs=("A", "B"), cases=[
    Case(shapes=((3, 3), (3, 4)), spd=(0,)),
    Case(shapes=((2, 3, 3), (2, 3, 2))),
    Case(shapes=((2, 4, 4), (2, 4)), spd=(0,)),          # B a stack of vectors
])
def np_solve(a: TensorVar, b: TensorVar, attrs: NoAttrs) -> Callable:
    """out[..., i, j] = X[..., i, j] with A X = B (each column of B solved for alone); B of one rank less than A:
    out[..., i] = x[..., i] with A x = B[..., :]."""
    whole, solve = _whole(a), Opaque("solve", _solve_column)
    if b.ndim == a.ndim - 1:
        return lambda *o: solve(whole(o[:-1]), b[(*o[:-1], slice(None))])[o[-1]]
    if b.ndim != a.ndim:
        raise TDLError(f"_npi_solve: B of rank {b.ndim} against A of rank {a.ndim} (equal, or one less) is not "
                       f"described")
    return lambda *o: solve(whole(o[:-2]), b[(*o[:-2], slice(None), o[-1])])[o[-2]]


@tdl_op("_linalg_det", inputs=("A",), cases=[
    Case(shapes=((2, 3, 3),)),
    Case(shapes=((2, 2, 4, 4),), spd=(0,)),
])
def det(a: TensorVar, attrs: NoAttrs) -> Callable:
    """out[...] = det A[..., :, :]."""
    whole, fn = _whole(a), Opaque("det", _det)
    return lambda *batch: fn(whole(batch))[0]


@tdl_op("_linalg_slogdet", inputs=("A",), outputs=("sign", "logabsdet"), cases=[
    Case(shapes=((2, 3, 3),)),
    Case(shapes=((3, 4, 4),), spd=(0,)),
])
def slogdet(a: TensorVar, attrs: NoAttrs):
    """sign[...] = the sign of det A[..., :, :], logabsdet[...] = log |det A[..., :, :]|."""
    whole, sign, log_abs = _whole(a), Opaque("sign_det", _sign), Opaque("logabsdet", _logabsdet)
    return (lambda *batch: sign(whole(batch))[0], lambda *batch: log_abs(whole(batch))[0])


@dataclass(frozen=True)
class KhatriRaoAttrs:
    num_args: int


@tdl_op("khatri_rao", inputs=("*args",), attrs=KhatriRaoAttrs, cases=[
    Case(shapes=((2, 3), (3, 3)), attrs={"num_args": 2}),
    Case(shapes=((2, 4), (3, 4), (1, 4)), attrs={"num_args": 3}),
    Case(shapes=((5, 2),), attrs={"num_args": 1}),
])
def khatri_rao(args: tuple[TensorVar, ...], attrs: KhatriRaoAttrs) -> Callable:
    """out[(i_1, ..., i_n), r] = prod_k args[k][i_k, r]  (the column-wise Kronecker product; the row index runs
    over (i_1, ..., i_n) row-major, the first input outermost)."""
    rows = [a.shape[0] for a in args]

    def out(j: Var, r: Var) -> ValueExpr:
        value = None
        for k, a in enumerate(args):
            i = j // math.prod(rows[k + 1:])
            term = a[i % rows[k] if k > 0 else i, r]
            value = term if value is None else value * term
        return value
    return out


def _ascending(a: np.ndarray) -> np.ndarray:
    return np.sort(a, axis=-1)


def _descending(a: np.ndarray) -> np.ndarray:
    return np.flip(np.sort(a, axis=-1), axis=-1)


def _argascending(a: np.ndarray) -> np.ndarray:
    return np.argsort(a, axis=-1, kind="stable")


def _argdescending(a: np.ndarray) -> np.ndarray:
    return np.argsort(-a, axis=-1, kind="stable")


@dataclass(frozen=True)
class SortAttrs:
    axis: int | None = -1
    is_ascend: bool = True


def _along(x: TensorVar, attrs: SortAttrs, op: Opaque) -> Callable:
    """out[..., j, ...] = op(x[..., :, ...])[j]: ``op`` applied to each line of ``axis`` (None: to the
    flattened tensor, whose output is 1-D)."""
    if attrs.axis is None:
        flat = Opaque(op.name, lambda a: op.fn(a.reshape(*a.shape[:1], -1)))
        return lambda j: flat(x[(slice(None),) * x.ndim])[j]
    axis = attrs.axis % x.ndim

    def out(*o: Var) -> ValueExpr:
        return op(x[(*o[:axis], slice(None), *o[axis + 1:])])[o[axis]]
    return out


@tdl_op("sort", inputs=("data",), attrs=SortAttrs, cases=[
    Case(shapes=((3, 5),)),
    Case(shapes=((2, 4, 3),), attrs={"axis": 1, "is_ascend": False}),
    Case(shapes=((2, 3),), attrs={"axis": None}),
])
def sort(data: TensorVar, attrs: SortAttrs) -> Callable:
    """out[..., j, ...] = the j-th smallest (is_ascend) or largest of data[..., :, ...] along ``axis``."""
    return _along(data, attrs, Opaque("sort", _ascending if attrs.is_ascend else _descending))


@tdl_op("argsort", inputs=("data",), attrs=SortAttrs, cases=[
    Case(shapes=((3, 5),)),
    Case(shapes=((4, 2, 3),), attrs={"axis": 0, "is_ascend": False}),
])
def argsort(data: TensorVar, attrs: SortAttrs) -> Callable:
    """out[..., j, ...] = position along ``axis`` of the j-th smallest (is_ascend) or largest element."""
    return _along(data, attrs, Opaque("argsort", _argascending if attrs.is_ascend else _argdescending))


@dataclass(frozen=True)
class TopkAttrs:
    axis: int | None = -1
    k: int = 1
    ret_typ: str = "indices"
    is_ascend: bool = False
    dtype: str = "float32"


def _top(k: int, ascend: bool, ret_typ: str = "value") -> Callable[[np.ndarray], np.ndarray]:
    """Per line (the last axis): its k largest values (smallest: ``ascend``) in order, their positions
    (``indices``, as floats), or 1 at those positions and 0 elsewhere (``mask``)."""
    def fn(a: np.ndarray) -> np.ndarray:
        order = np.argsort(a if ascend else -a, axis=-1, kind="stable")[..., :k]
        if ret_typ == "indices":
            return order.astype(a.dtype)
        if ret_typ == "mask":
            mask = np.zeros_like(a)
            np.put_along_axis(mask, order, 1.0, axis=-1)
            return mask
        return np.take_along_axis(a, order, axis=-1)
    return fn


@tdl_op("topk", inputs=("data",), outputs=("output", "indices"), attrs=TopkAttrs, cases=[
    Case(shapes=((3, 5),), attrs={"k": 2, "ret_typ": "value"}),
    Case(shapes=((2, 4, 3),), attrs={"axis": 1, "k": 3, "ret_typ": "value"}),
    Case(shapes=((2, 3, 4),), attrs={"axis": 0, "k": 0, "ret_typ": "value", "is_ascend": True}),
    Case(shapes=((3, 5),), attrs={"k": 2, "ret_typ": "mask"}),
    Case(shapes=((2, 4, 3),), attrs={"axis": 1, "k": 3, "ret_typ": "mask", "is_ascend": True}),
    Case(shapes=((3, 5),), attrs={"k": 2}),
    Case(shapes=((4, 3, 2),), attrs={"axis": 0, "k": 3, "ret_typ": "indices", "is_ascend": True}),
    Case(shapes=((3, 5),), attrs={"k": 2, "ret_typ": "both"}),
    Case(shapes=((2, 4, 3),), attrs={"axis": 1, "k": 3, "ret_typ": "both", "is_ascend": True}),
])
def topk(data: TensorVar, attrs: TopkAttrs) -> Callable:
    """out[..., j, ...] = the j-th largest (is_ascend: smallest) of data[..., :, ...] along ``axis`` (k < 1:
    every element), ret_typ 'value'; its position on the axis, 'indices' (the default); 'mask': out has data's
    shape, 1 at the k largest of each line and 0 elsewhere; 'both': two outputs, the values and their
    positions. MXNet gives data a gradient through the values only (:func:`tofu.graph.gradients.gives_gradient`
    reads ret_typ; the positions' gradient, with 'both', is ignored: tofu.graph.ir.IGNORED_OUTPUT_GRADIENTS)."""
    if attrs.ret_typ not in ("value", "indices", "mask", "both"):
        raise TDLError(f"topk: ret_typ '{attrs.ret_typ}' is not one of value, indices, mask, both")
    if attrs.axis is None:
        raise TDLError("topk: axis None (the flattened tensor) is not described")
    n = data.shape[attrs.axis % data.ndim]
    k = attrs.k if 1 <= attrs.k <= n else n
    along = SortAttrs(attrs.axis)
    if attrs.ret_typ == "both":
        return (_along(data, along, Opaque("topk", _top(k, attrs.is_ascend, "value"))),
                _along(data, along, Opaque("topk_indices", _top(k, attrs.is_ascend, "indices"))))
    return _along(data, along, Opaque("topk", _top(k, attrs.is_ascend, attrs.ret_typ)))

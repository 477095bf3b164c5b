"""TDL descriptions of the lookup family: Embedding, one_hot, take, pick, gather_nd.

Embedding, take, pick and gather_nd read a tensor at an index that is itself read from an input (a
data-dependent access, ``weight[data[b, t], e]``): the looked-up dimension cannot be narrowed by partitioning
the output, every other dimension stays affine. An index read on its own as a subscript is an index into that
dimension (its valid values, [0, n - 1], are derived from the access). MXNet truncates a fractional index
toward zero; out-of-range indices are clipped, as MXNet's default mode does (take and pick also describe its
'wrap' mode: the index modulo the extent), except by gather_nd, whose forward counts a negative index from the
end (written in its description) and raises past either end; its backward does not count from the end, so a
trained graph's gather_nd indices are valid in [0, n - 1] only.
one_hot compares each index with the class index, so it needs no data-dependent access; it declares the
indices' valid values with ``valid=`` (an index outside them gives a row of off values).
"""
from __future__ import annotations

from tofu.tdl.lang import *  # noqa: F403  (the DSL: tofu.tdl.lang.__all__)


@dataclass(frozen=True)
class EmbeddingAttrs:
    input_dim: int
    output_dim: int


@tdl_op("Embedding", inputs=("data", "weight"), attrs=EmbeddingAttrs, cases=[
    Case(shapes=((5,), (7, 4)), attrs={"input_dim": 7, "output_dim": 4}, ints=((0, 7),)),
    Case(shapes=((2, 3), (6, 5)), attrs={"input_dim": 6, "output_dim": 5}, ints=((0, 6),)),
])
def embedding(data: TensorVar, weight: TensorVar, attrs: EmbeddingAttrs) -> Callable:
    """out[..., e] = Sum_v [v = r] weight[v, e],  r = clip(trunc(data[...]), 0, V - 1)  (weight is (V, output_dim)).

    The lookup weight[r, e] written as a one-hot contraction over the table's rows, so that a split of v is a
    partition-n-reduce: each worker looks up the rows it holds and gives zeros for the others (Megatron-LM's
    vocabulary-parallel embedding), run by :func:`embedding_rows` since MXNet's kernel clips instead. V is the
    table's own extent (a worker's piece of it after such a split). The cost model counts the one selected term
    (a lookup, :func:`tofu.sim.flops._lookup`), not V of them."""
    last = float(weight.shape[0] - 1)

    def out(*o: Var) -> ValueExpr:
        row = minimum(maximum(trunc(data.at(o[:-1], valid=(0, weight.shape[0] - 1))), 0.0), last)
        return Sum(lambda v: where(eq(row, IndexValue(v)), weight[v, o[-1]], 0.0))
    return out


@tdl_expansion("Embedding", partials=True)
def embedding_rows(pieces, shapes, attrs: EmbeddingAttrs, allreduce, origins):
    """Embedding on a piece of its table's rows (the vocabulary-parallel split of its contraction over v):
    worker w holds rows o_w .. o_w + c_w - 1 and computes its partial of the sum over v,

        out_w[..., e] = weight_w[r - o_w, e]  if o_w <= r < o_w + c_w,  else 0,   r = clip(trunc(data), 0, V - 1)

    with MXNet's Embedding on the shifted indices (it clips them to the piece; the rows it clipped are then
    multiplied by zero). V is ``attrs.input_dim`` (the whole table; a kernel step never rewrites it). The data
    carries no gradient (as MXNet's Embedding gives it none); the table's piece gets the rows it looked up.
    Nothing is exchanged: the partial outputs are summed as any partition-n-reduce's."""
    import mxnet as mx

    outs = []
    for (data, weight), (_, (rows, width)), (_, (first, _)) in zip(pieces, shapes, origins):
        r = mx.sym.floor(mx.sym.clip(mx.sym.BlockGrad(data), 0.0, float(attrs.input_dim - 1)))
        shifted = r - float(first) if first else r
        inside = (shifted >= 0.0) * (shifted < float(rows))
        looked = mx.sym.Embedding(shifted, weight, input_dim=rows, output_dim=width)
        outs.append([mx.sym.broadcast_mul(looked, mx.sym.expand_dims(inside, axis=-1))])
    return outs


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
    classes = (0, attrs.depth - 1)
    return lambda *o: where(eq(indices.at(o[:-1], valid=classes), IndexValue(o[-1])), attrs.on_value,
                            attrs.off_value)


@dataclass(frozen=True)
class TakeAttrs:
    axis: int = 0
    mode: str = "clip"


@tdl_op("take", inputs=("a", "indices"), attrs=TakeAttrs, cases=[
    Case(shapes=((5, 3), (2, 4)), ints=((1, 5),)),
    Case(shapes=((5, 3), (4,)), ints=((1, 8),)),                    # indices past the end are clipped
    Case(shapes=((2, 6, 3), (4,)), attrs={"axis": 1}, ints=((1, 6),)),
    Case(shapes=((5, 3), (2, 6)), attrs={"mode": "wrap"}, ints=((1, 12),), negative=(1,)),
    Case(shapes=((2, 3, 4), (5,)), attrs={"axis": -1, "mode": "wrap"}, ints=((1, 9),), negative=(1,)),
])
def take(a: TensorVar, indices: TensorVar, attrs: TakeAttrs) -> Callable:
    """out[i..., j..., k...] = a[i..., indices[j...], k...]  (``axis`` of a replaced by the indices' dims; mode
    'wrap' reads index i at i mod n, n the axis's extent)."""
    if attrs.mode not in ("clip", "wrap"):
        raise TDLError(f"take: mode '{attrs.mode}' is not one of MXNet's 'clip', 'wrap'")
    axis = attrs.axis % a.ndim
    n = indices.ndim

    def out(*o: Var) -> ValueExpr:
        i = indices[o[axis:axis + n]]
        return a[(*o[:axis], _wrap(i, a.shape[axis]) if attrs.mode == "wrap" else i, *o[axis + n:])]
    return out


def _wrap(i: ValueExpr, n: int) -> ValueExpr:
    """Index ``i`` taken modulo ``n`` into [0, n - 1], as MXNet's 'wrap' mode does: truncated to an integer
    first, then C's remainder, a negative one moved up by n."""
    t = trunc(i)
    r = t - trunc(t / n) * n
    return where(lt(r, 0.0), r + n, r)


@dataclass(frozen=True)
class PickAttrs:
    axis: int | None = -1
    keepdims: bool = False
    mode: str = "clip"


@tdl_op("pick", inputs=("data", "index"), attrs=PickAttrs, cases=[
    Case(shapes=((3, 4), (3,)), ints=((1, 4),)),
    Case(shapes=((2, 3, 4), (2, 4)), attrs={"axis": 1, "keepdims": True}, ints=((1, 3),)),
    Case(shapes=((4, 3), (3,)), attrs={"axis": 0}, ints=((1, 4),)),
    Case(shapes=((8, 4), (8,)), attrs={"mode": "wrap"}, ints=((1, 15),), negative=(1,)),
])
def pick(data: TensorVar, index: TensorVar, attrs: PickAttrs) -> Callable:
    """out[i..., k...] = data[i..., index[i..., k...], k...]  (``axis`` removed, or kept with extent 1; mode
    'wrap' reads index i at i mod n, n the axis's extent)."""
    if attrs.axis is None:
        raise TDLError("pick: only a given axis is describable (axis None picks from the flattened data)")
    if attrs.mode not in ("clip", "wrap"):
        raise TDLError(f"pick: mode '{attrs.mode}' is not one of MXNet's 'clip', 'wrap'")
    axis = attrs.axis % data.ndim

    def out(*o: Var) -> ValueExpr:
        rest = (*o[:axis], *o[axis + 1:]) if attrs.keepdims else o
        at = index[_with(rest, axis, 0) if index.ndim == data.ndim else rest]
        return data[_with(rest, axis, _wrap(at, data.shape[axis]) if attrs.mode == "wrap" else at)]
    return out


@tdl_op("gather_nd", inputs=("data", "indices"), cases=[
    Case(shapes=((3, 4), (2, 5)), ints=((1, 3),), negative=(1,)),            # negatives wrap
    Case(shapes=((4, 4, 2), (1, 2, 3)), ints=((1, 4),), negative=(1,)),
    Case(shapes=((3, 3, 5), (2, 4)), ints=((1, 3),)),
])
def gather_nd(data: TensorVar, indices: TensorVar, attrs: NoAttrs) -> Callable:
    """out[y.., x..] = data[indices[0, y..], .., indices[M-1, y..], x..]  (M = indices.shape[0]; an index i < 0
    reads i + n, n the extent it indexes)."""
    m = indices.shape[0]
    if m > data.ndim:
        raise TDLError(f"gather_nd: indices address {m} dimensions, data has {data.ndim}")
    ny = indices.ndim - 1

    def wrapped(d: int, ys: tuple) -> ValueExpr:
        """indices[d, ys..] as an index into dimension d of data: MXNet's forward counts negatives from the end
        (and raises outside [-n, n - 1]), but its backward (``_backward_gather_nd``, a scatter-add into the
        data's gradient) does not and writes outside the gradient (MXNet 1.9.1 on CPU, measured: ``double free or
        corruption`` after the backward of index -1), so a trained graph's indices are valid in [0, n - 1]."""
        n = data.shape[d]
        i = indices.at((d, *ys), valid=(0, n - 1))
        return where(lt(i, 0.0), i + n, i)

    def out(*o: Var) -> ValueExpr:
        ys, xs = o[:ny], o[ny:]
        return data[(*(wrapped(d, ys) for d in range(m)), *xs)]
    return out


def _with(rest: tuple, axis: int, i) -> tuple:
    """``rest`` with ``i`` inserted at position ``axis``."""
    return (*rest[:axis], i, *rest[axis:])

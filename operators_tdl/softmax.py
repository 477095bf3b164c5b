"""TDL descriptions of the softmax family: softmax, softmin, log_softmax, SoftmaxOutput, SoftmaxActivation,
softmax_cross_entropy; and the other loss heads: LinearRegressionOutput, MAERegressionOutput, SVMOutput,
LogisticRegressionOutput.

Every op is one helper, :func:`_softmax`: the row maximum and the row sum of exponentials are intermediate
``compute`` tensors (nested reductions over the softmax axes), and the output divides by (or, for the log
form, subtracts the log of) the row sum. Split along the softmax axis, the row maximum and row sum are exchanged
(all-reduced max, then sum); every op but softmax_cross_entropy declares an expansion that runs such shards with
MXNet operators (``tdl_expansion``); SoftmaxOutput's keeps MXNet's backward, local to each shard (the
vocabulary-parallel cross-entropy of Megatron-LM).
softmax_cross_entropy sums the log form over the batch: a batch split is a partition-n-reduce.
"""
from __future__ import annotations

import math

import numpy as np

from tofu.tdl.lang import *  # noqa: F403  (the DSL: tofu.tdl.lang.__all__)


def _reduce(reducer: Callable, n: int, body: Callable[[tuple[Var, ...]], ValueExpr]) -> ValueExpr:
    """``reducer`` of ``body(k1, ..., kn)`` over n variables, as nested one-variable reductions."""
    if n == 0:
        return body(())
    return reducer(lambda k: _reduce(reducer, n - 1, lambda ks: body((k, *ks))))


def _softmax(x: TensorVar, axes: Sequence[int], temperature: float = 1.0, log_form: bool = False,
             sign: float = 1.0, read: Callable | None = None) -> Callable:
    """out[i] = exp((z[i] - m) / T) / s  (or its log), where z = sign * x (sign -1: softmin), and m and s are the
    max of z and the sum of exponentials over ``axes`` of the row that holds i; ``read(i)``: how x[i] is read
    (default the access itself)."""
    axes = sorted(a % x.ndim for a in axes)
    kept = [d for d in range(x.ndim) if d not in axes]

    def full(outer: Sequence[Var], inner: Sequence[Var]) -> tuple:
        """Index of x from the kept-dims variables ``outer`` and the softmax-dims variables ``inner``."""
        idx, o, r = [], iter(outer), iter(inner)
        for d in range(x.ndim):
            idx.append(next(r) if d in axes else next(o))
        return tuple(idx)

    def z(i: Sequence) -> ValueExpr:
        value = x[tuple(i)] if read is None else read(tuple(i))
        return value if sign == 1.0 else sign * value

    shape = [x.shape[d] for d in kept]
    m = compute("rowmax", shape, lambda *o: _reduce(Max, len(axes), lambda ks: z(full(o, ks))))
    s = compute("rowsum", shape, lambda *o: _reduce(
        Sum, len(axes), lambda ks: exp((z(full(o, ks)) - m[o]) / temperature)))

    def out(*i) -> ValueExpr:
        row = tuple(i[d] for d in kept)
        shifted = (z(i) - m[row]) / temperature
        return shifted - log(s[row]) if log_form else exp(shifted) / s[row]
    return out


def _softmax_exchange(pieces, ndim: int, axes: Sequence[int], temperature: float, log_form: bool,
                      allreduce: Callable) -> list[list]:
    """The expansion shared by the softmax family, on shards of the softmax axes (the strategies that exchange
    ``rowmax`` and ``rowsum``), with MXNet operators: each worker takes the maximum of its shard per row,
    all-reduced with max into the row maximum m; then the sum of exp((x - m) / T) over its shard, all-reduced
    with sum into the row sum s; and each worker divides its exponentials by s (log form: subtracts log s).

    The row maximum only shifts the exponent for stability and the result does not depend on it, so its
    gradient is stopped (BlockGrad): no gradient flows through max, exactly as in the analytic derivative."""
    import mxnet as mx

    axes = tuple(sorted(a % ndim for a in axes))
    maxima = allreduce([mx.sym.BlockGrad(mx.sym.max(p[0], axis=axes, keepdims=True)) for p in pieces], "max")
    shifted = [mx.sym.broadcast_sub(p[0], m) / temperature for p, m in zip(pieces, maxima)]
    exps = [mx.sym.exp(z) for z in shifted]
    sums = allreduce([mx.sym.sum(e, axis=axes, keepdims=True) for e in exps], "sum")
    if log_form:
        return [[mx.sym.broadcast_sub(z, mx.sym.log(s))] for z, s in zip(shifted, sums)]
    return [[mx.sym.broadcast_div(e, s)] for e, s in zip(exps, sums)]


def _no_length(op: str, length) -> None:
    """MXNet's ``use_length`` form (a length input masks each row's tail) is not described."""
    if length is not None:
        raise TDLError(f"{op}: a length input (use_length=True, each row masked past its length) is not described")


@dataclass(frozen=True)
class SoftmaxAttrs:
    axis: int = -1
    temperature: float | None = None
    use_length: bool = False


def _masked_softmax(x: TensorVar, axis: int, length: TensorVar, temperature: float) -> Callable:
    """MXNet's softmax with ``use_length``: along ``axis``, row r keeps its first n = length[r] entries,
    out[i] = exp((x[i] - m) / T) / s where i's position j on the axis is < n, else 0, with m and s the max and the
    sum of exponentials over those n entries (a row of length 0 is all zeros). length has x's shape without the
    axis, integers in [0, n_axis] (MXNet reads past the row for others)."""
    axis %= x.ndim
    extent = x.shape[axis]
    if tuple(length.shape) != tuple(d for a, d in enumerate(x.shape) if a != axis):
        raise TDLError(f"softmax: length {tuple(length.shape)} for data {tuple(x.shape)} along axis {axis}; "
                       f"described: data's shape without the axis")
    shape = [d for a, d in enumerate(x.shape) if a != axis]

    def full(row: Sequence, j) -> tuple:
        return (*row[:axis], j, *row[axis:])

    def within(row: Sequence, j):
        return lt(IndexValue(j), length.at(tuple(row), valid=(0, extent)))

    m = compute("rowmax", shape, lambda *r: Max(lambda k: where(within(r, k), x[full(r, k)], NEG_INF)))
    s = compute("rowsum", shape, lambda *r: Sum(
        lambda k: where(within(r, k), exp((x[full(r, k)] - m[r]) / temperature), 0.0)))

    def out(*i) -> ValueExpr:
        row = (*i[:axis], *i[axis + 1:])
        return where(within(row, i[axis]), exp((x[i] - m[row]) / temperature) / s[row], 0.0)
    return out


@tdl_op("softmax", inputs=("data", "length?"), attrs=SoftmaxAttrs, cases=[
    Case(shapes=((4, 6),)),
    Case(shapes=((2, 5, 3),), attrs={"axis": 1, "temperature": 2.0}),
    Case(shapes=((3, 2, 4),), attrs={"axis": 0}),
    Case(shapes=((4, 6), (4,)), attrs={"use_length": True}, ints=((1, 7),), int32=(1,)),
    Case(shapes=((2, 5, 3), (2, 3)), attrs={"use_length": True, "axis": 1, "temperature": 0.5}, ints=((1, 6),),
         int32=(1,)),
])
def softmax(data: TensorVar, length: TensorVar | None, attrs: SoftmaxAttrs) -> Callable:
    """out[..., i, ...] = exp(x[..., i, ...] / T) / sum_k exp(x[..., k, ...] / T)  over ``axis``; with
    ``use_length``, each row's entries past its length are left out of both and give 0 (:func:`_masked_softmax`;
    the length must be an integer tensor, as MXNet's kernel requires)."""
    if length is not None:
        return _masked_softmax(data, attrs.axis, length, attrs.temperature or 1.0)
    return _softmax(data, [attrs.axis], attrs.temperature or 1.0)


def _softmax_refusal(attrs: SoftmaxAttrs, shapes: Sequence[Sequence[int]]) -> str | None:
    """The expansion does not mask rows by a length (use_length): the softmax axis of that form is not split."""
    return "a length input (use_length): the expansion masks no row" if len(shapes) > 1 else None


@tdl_expansion("softmax", refuses=_softmax_refusal)
def softmax_exchange(pieces, shapes, attrs: SoftmaxAttrs, allreduce):
    """softmax on shards of its axis: the row max and row sum all-reduced (see :func:`_softmax_exchange`)."""
    return _softmax_exchange(pieces, len(shapes[0][0]), [attrs.axis], attrs.temperature or 1.0, False, allreduce)


@tdl_op("softmin", inputs=("data", "length?"), attrs=SoftmaxAttrs, cases=[
    Case(shapes=((4, 6),)),
    Case(shapes=((2, 5, 3),), attrs={"axis": 1, "temperature": 2.0}),
])
def softmin(data: TensorVar, length: TensorVar | None, attrs: SoftmaxAttrs) -> Callable:
    """out[..., i, ...] = exp(-x[..., i, ...] / T) / sum_k exp(-x[..., k, ...] / T)  over ``axis``."""
    _no_length("softmin", length)
    return _softmax(data, [attrs.axis], attrs.temperature or 1.0, sign=-1.0)


@tdl_expansion("softmin")
def softmin_exchange(pieces, shapes, attrs: SoftmaxAttrs, allreduce):
    """softmin on shards of its axis: the softmax expansion (:func:`_softmax_exchange`) of the negated pieces."""
    import mxnet as mx

    negated = [[mx.sym.negative(p[0])] for p in pieces]
    return _softmax_exchange(negated, len(shapes[0][0]), [attrs.axis], attrs.temperature or 1.0, False, allreduce)


@tdl_op("log_softmax", inputs=("data", "length?"), attrs=SoftmaxAttrs, cases=[
    Case(shapes=((4, 6),)),
    Case(shapes=((2, 5, 3),), attrs={"axis": 1}),
    Case(shapes=((3, 4),), attrs={"axis": 0, "temperature": 0.5}),
])
def log_softmax(data: TensorVar, length: TensorVar | None, attrs: SoftmaxAttrs) -> Callable:
    """out[..., i, ...] = x[..., i, ...] / T - log sum_k exp(x[..., k, ...] / T)  over ``axis``."""
    _no_length("log_softmax", length)
    return _softmax(data, [attrs.axis], attrs.temperature or 1.0, log_form=True)


@tdl_expansion("log_softmax")
def log_softmax_exchange(pieces, shapes, attrs: SoftmaxAttrs, allreduce):
    """log_softmax on shards of its axis: (x - m) / T - log s, m and s all-reduced (:func:`_softmax_exchange`)."""
    return _softmax_exchange(pieces, len(shapes[0][0]), [attrs.axis], attrs.temperature or 1.0, True, allreduce)


@dataclass(frozen=True)
class SoftmaxOutputAttrs:
    multi_output: bool = False
    preserve_shape: bool = False
    # the backward's attributes (the forward does not read them): what the expansion can run
    grad_scale: float = 1.0
    normalization: str = "null"
    use_ignore: bool = False
    smooth_alpha: float = 0.0
    out_grad: bool = False


@tdl_op("SoftmaxOutput", inputs=("data", "label"), attrs=SoftmaxOutputAttrs, cases=[
    Case(shapes=((4, 5), (4,)), ints=((1, 5),)),
    Case(shapes=((2, 3, 4), (2, 4)), attrs={"multi_output": True}, ints=((1, 3),)),
    Case(shapes=((2, 3, 4), (2, 3)), attrs={"preserve_shape": True}, ints=((1, 4),)),
    Case(shapes=((2, 3, 2), (2, 3)), ints=((1, 6),)),
    Case(shapes=((4, 5), (4,)), attrs={"normalization": "batch"}, ints=((1, 5),)),
    Case(shapes=((2, 3, 4), (2, 4)), attrs={"multi_output": True, "normalization": "valid", "use_ignore": True},
         ints=((1, 3),)),
    # the three label shapes MXNet accepts for 4-D data: (n, h*w) (its default), (n, h, w), (n, 1, h, w)
    Case(shapes=((2, 3, 2, 3), (2, 6)), attrs={"multi_output": True}, ints=((1, 3),)),
    Case(shapes=((2, 3, 2, 3), (2, 2, 3)), attrs={"multi_output": True}, ints=((1, 3),)),
    Case(shapes=((2, 3, 2, 3), (2, 1, 2, 3)), attrs={"multi_output": True}, ints=((1, 3),)),
    Case(shapes=((2, 3, 2, 3), (2, 6)), attrs={"multi_output": True, "normalization": "valid", "use_ignore": True},
         ints=((1, 3),)),
])
def softmax_output(data: TensorVar, label: TensorVar, attrs: SoftmaxOutputAttrs) -> Callable:
    """Forward: softmax of data (n, c, ...) over c (multi_output), over the last axis (preserve_shape), else
    over all axes but the first (MXNet flattens to (n, -1)). The label (data's shape without the softmax axis;
    n alone in the 2-D case; under multi_output also (n, d1 ... dm) flattened, MXNet's default for data of rank 4
    and more, or (n, 1, d1, ..., dm)) is read by the gradient only: declared with ``uses``, its values class indices.

    Normalization 'batch' or 'valid': MXNet's backward divides the gradient by the batch, or by the labels not
    ignored in the whole tensor, a count every shard would take from its own piece (a batch split in two: twice
    the gradient). The description then reads data whole, through an opaque softmax: no dimension splits, and
    the op is computed whole (on the first worker, the loss read once). Under multi_output with 'null', MXNet's
    backward divides by the sample's extent d1 x ... x dm (a split of d1 in two: twice the gradient), so each
    sample is read whole: the batch alone splits. Data of rank 3 or more without either flag is flattened to
    (n, -1), and MXNet's backward reads the label (n, d1, ...) as its first n values in memory (sample r's class
    is label.flat[r], not label[r, 0]): a worker's piece of the label starts elsewhere, so nothing splits."""
    if attrs.multi_output:
        axes, label_dims = [1], _multi_output_label(data.shape, label.ndim)
    elif attrs.preserve_shape:
        axes, label_dims = [data.ndim - 1], lambda i: i[:-1]
    else:
        axes, label_dims = range(1, data.ndim), lambda i: i[:max(1, data.ndim - 1)]
    classes = math.prod(data.shape[a] for a in axes)
    spatial = math.prod(data.shape[2:]) if attrs.multi_output else 1
    flattened = not attrs.multi_output and not attrs.preserve_shape and data.ndim > 2
    if attrs.normalization == "null" and spatial == 1 and not flattened:
        out = _softmax(data, axes)
    elif attrs.normalization == "null" and not flattened:   # each sample read whole: its gradient is divided by its extent
        per_sample = Opaque("SoftmaxOutput", lambda a: _numpy_softmax(a, [a.ndim - data.ndim + 1]))
        rest = (slice(None),) * (data.ndim - 1)

        def out(*i):
            return per_sample(data[(i[0], *rest)])[i[1:]]
    else:
        whole = Opaque("SoftmaxOutput", lambda a: _numpy_softmax(a, [a.ndim - data.ndim + x for x in axes]))
        every = (slice(None),) * data.ndim

        def out(*i):
            return whole(data[every])[i]
    return lambda *i: uses(out(*i), label.at(label_dims(i), valid=(0, classes - 1)))


def _multi_output_label(shape: Sequence[int], rank: int) -> Callable:
    """The label's index of data element i under multi_output, for the three label shapes MXNet's shape
    inference accepts for data (n, c, d1, ...): (n, d1 ... dm) flattened, its default; (n, d1, ..., dm); and
    (n, 1, d1, ..., dm)."""
    ndim, rest = len(shape), tuple(shape[2:])
    if rank == ndim - 1:
        return lambda i: (i[0], *i[2:])
    if rank == ndim:
        return lambda i: (i[0], 0, *i[2:])
    if rank == 2:
        def flat(i):
            f = 0
            for v, n in zip(i[2:], rest):
                f = f * n + v
            return (i[0], f)
        return flat
    raise TDLError(f"SoftmaxOutput: a label of rank {rank} for multi_output data of shape {tuple(shape)}")


def _numpy_softmax(a: np.ndarray, axes: Sequence[int]) -> np.ndarray:
    e = np.exp(a - a.max(axis=tuple(axes), keepdims=True))
    return e / e.sum(axis=tuple(axes), keepdims=True)


def _softmax_output_refusal(attrs: SoftmaxOutputAttrs, shapes: Sequence[Sequence[int]]) -> str | None:
    """Why :func:`softmax_output_exchange` cannot run SoftmaxOutput with ``attrs`` on inputs of ``shapes``
    (None when it can): it runs the softmax over the last axis (2-D data, or preserve_shape) and MXNet's
    default backward, the gradient scaled by grad_scale alone."""
    ndim = len(shapes[0])
    if ndim != 2 and (attrs.multi_output or not attrs.preserve_shape):
        return f"data of rank {ndim}: the expansion splits the last axis only (2-D data, or preserve_shape)"
    if attrs.normalization != "null":
        return f"normalization '{attrs.normalization}' (the expansion runs 'null')"
    if attrs.use_ignore or attrs.smooth_alpha or attrs.out_grad:
        return "use_ignore, smooth_alpha or out_grad (the expansion runs none of them)"
    return None


@tdl_expansion("SoftmaxOutput", refuses=_softmax_output_refusal)
def softmax_output_exchange(pieces, shapes, attrs: SoftmaxOutputAttrs, allreduce, origins):
    """SoftmaxOutput on shards of its class axis (the last; Megatron-LM's vocabulary-parallel cross-entropy).

    Forward, the softmax expansion (:func:`_softmax_exchange`): worker w holds p_w = exp(x_w - m) / s, the row
    max m and the row sum of exponentials s all-reduced. Backward, MXNet's SoftmaxOutput, local to each worker
    and independent of the gradient arriving at the output (a loss): dx_w = (p_w - one_hot(label - o_w, c_w))
    * grad_scale, with o_w the first class of w's shard and c_w its width (a label outside the shard: a zero
    row). MXNet differentiates what it runs, so the output is built to have exactly that gradient:

        out_w = p_w + 0 * MakeLoss(x_w * (p_w - one_hot(label - o_w, c_w)) * grad_scale)

    with p_w computed from BlockGrad(x_w): its value is p_w and only MakeLoss passes a gradient, which ignores
    the one arriving and sends its input's factor to x_w. The statistics carry no gradient: the backward pass
    exchanges nothing (read off this symbol, ``tofu.graph.gradients.statistics_gradients``). Nor does the label,
    read through ``one_hot`` alone (its gradient is MXNet's zero): a label piece read from another device is not
    sent back, as the counts derive from this symbol (``tofu.graph.gradients.expansion_gradients``).

    Raises:
        TDLError: attributes or shapes it cannot run (:func:`_softmax_output_refusal`).
    """
    import mxnet as mx

    reason = _softmax_output_refusal(attrs, shapes[0])
    if reason is not None:
        raise TDLError(f"SoftmaxOutput: no expansion for {reason}")
    ndim = len(shapes[0][0])
    blocked = [[mx.sym.BlockGrad(p[0])] for p in pieces]
    probs = _softmax_exchange(blocked, ndim, [ndim - 1], 1.0, False, allreduce)
    outs = []
    for (x, label), (p,), shape, origin in zip(pieces, probs, shapes, origins):
        first, width = origin[0][-1], shape[0][-1]
        target = mx.sym.one_hot(label - first if first else label, depth=width)
        delta = (p - target) * attrs.grad_scale if attrs.grad_scale != 1.0 else p - target
        outs.append([p + mx.sym.MakeLoss(x * delta) * 0.0])
    return outs


@dataclass(frozen=True)
class SoftmaxActivationAttrs:
    mode: str = "instance"


@tdl_op("SoftmaxActivation", inputs=("data",), attrs=SoftmaxActivationAttrs, cases=[
    Case(shapes=((4, 6),)),
    Case(shapes=((2, 3, 4),)),
    Case(shapes=((2, 3, 4),), attrs={"mode": "channel"}),
    Case(shapes=((2, 3, 2, 2),), attrs={"mode": "channel"}),
])
def softmax_activation(data: TensorVar, attrs: SoftmaxActivationAttrs) -> Callable:
    """Softmax over the last axis (mode instance; MXNet 1.9 does not flatten N-d input) or over axis 1 of
    (n, c, ...) (mode channel). In mode instance on data of rank 3 or more, axis 1 is read whole (through an
    opaque identity of each column): MXNet's backward reduces over it, not over the last axis, so it never
    splits."""
    if attrs.mode not in ("instance", "channel"):
        raise TDLError(f"SoftmaxActivation: unknown mode '{attrs.mode}'")
    if attrs.mode == "channel" or data.ndim <= 2:
        return _softmax(data, [1] if attrs.mode == "channel" else [-1])
    # MXNet's backward sums over axis 1 (softmax_activation_exchange): a shard of axis 1 would sum over its own
    # rows only, so each element is read through an identity of its column along axis 1, which no split cuts
    column = Opaque("SoftmaxActivation", lambda a: a)
    return _softmax(data, [-1], read=lambda i: column(data[(i[0], slice(None), *i[2:])])[i[1]])


@tdl_expansion("SoftmaxActivation")
def softmax_activation_exchange(pieces, shapes, attrs: SoftmaxActivationAttrs, allreduce):
    """SoftmaxActivation on shards of its softmax axis (1 for mode channel, the last for instance): the row max
    and row sum all-reduced (see :func:`_softmax_exchange`).

    MXNet 1.9's backward always reduces over axis 1 (it views the input as (n, c, rest) in both modes), so for
    mode instance on input of rank > 2 it is not the derivative of its own forward (softmax over the last axis):
    dx = y * (dy - sum_axis1(y * dy)). To train as the unpartitioned graph does, the expansion reproduces it:
    out = y + (z - BlockGrad(z)) with y's own gradient stopped and z = y * (x - sum_axis1(y * x)) (y constant),
    whose forward value is exactly y and whose gradient is MXNet's. Axis 1 is whole on every worker (the shards
    split the last axis), so the sum is local."""
    import mxnet as mx

    if attrs.mode not in ("instance", "channel"):
        raise TDLError(f"SoftmaxActivation: unknown mode '{attrs.mode}'")
    ndim = len(shapes[0][0])
    axis = 1 if attrs.mode == "channel" else ndim - 1
    outs = _softmax_exchange(pieces, ndim, [axis], 1.0, False, allreduce)
    if axis == 1:
        return outs
    faithful = []
    for p, (y,) in zip(pieces, outs):
        y = mx.sym.BlockGrad(y)
        z = y * mx.sym.broadcast_sub(p[0], mx.sym.sum(y * p[0], axis=1, keepdims=True))
        faithful.append([y + (z - mx.sym.BlockGrad(z))])
    return faithful


@tdl_op("softmax_cross_entropy", inputs=("data", "label"), cases=[
    Case(shapes=((4, 5), (4,)), ints=((1, 5),)),
    Case(shapes=((6, 3), (6,)), ints=((1, 3),)),
])
def softmax_cross_entropy(data: TensorVar, label: TensorVar, attrs: NoAttrs) -> Callable:
    """out[0] = sum_b -log softmax(data[b, :])[label[b]]  (data (batch, classes); the loss summed over the batch)."""
    if data.ndim != 2:
        raise TDLError(f"softmax_cross_entropy: data of rank {data.ndim}; MXNet takes (batch, classes)")
    log_probs = _softmax(data, [1], log_form=True)
    return lambda o: Sum(lambda b: -log_probs(b, label[b]))


@dataclass(frozen=True)
class RegressionAttrs:
    grad_scale: float = 1.0     # the backward's (the forward does not read it)


def _regression_output(op: str, fn: Callable, form: str) -> None:
    """Registers ``op``, a regression loss head: out = ``form`` of data, element by element; MXNet's backward
    gives d data = grad_scale / n (out - label) (the absolute form: its sign), with n the elements of one sample
    (label.size / label.shape[0]). That count couples a sample's elements, so the description reads each sample
    whole, through an opaque function of its row: only the batch is split, and every shard's n is the whole
    op's. The label (data's shape, or (batch,) when a sample is one element) is read by the gradient only."""
    rows = Opaque(op, fn)

    def description(data: TensorVar, label: TensorVar, attrs: RegressionAttrs) -> Callable:
        if tuple(label.shape) == tuple(data.shape):
            def target(i):
                return label[i]
        elif label.ndim == 1 and label.shape[0] == data.shape[0] and math.prod(data.shape[1:]) == 1:
            def target(i):
                return label[i[0]]
        else:
            raise TDLError(f"{op}: label of shape {tuple(label.shape)} for data {tuple(data.shape)}; described: "
                           f"data's shape, or (batch,) for one element per sample")
        if data.ndim == 1:          # a sample is one element: nothing to couple
            return lambda i: uses(rows(data[i])[()], target((i,)))
        whole = (slice(None),) * (data.ndim - 1)
        return lambda *i: uses(rows(data[(i[0], *whole)])[i[1:]], target(i))

    description.__name__ = description.__qualname__ = op
    description.__doc__ = (f"out[i] = {form}, each sample read whole (MXNet's backward divides by its element "
                           f"count); the label (data's shape, or (batch,)) is read by the backward only.")
    tdl_op(op, inputs=("data", "label"), attrs=RegressionAttrs, cases=[
        Case(shapes=((4, 3), (4, 3))),
        Case(shapes=((4, 1), (4,))),
        Case(shapes=((2, 3, 2), (2, 3, 2)), attrs={"grad_scale": 2.0}),
    ])(description)


def _logistic(a):
    return 1.0 / (1.0 + np.exp(-a))


_regression_output("LinearRegressionOutput", lambda a: a, "data[i]")
_regression_output("MAERegressionOutput", lambda a: a, "data[i]")
_regression_output("LogisticRegressionOutput", _logistic, "sigmoid(data[i])")


@dataclass(frozen=True)
class SVMOutputAttrs:
    margin: float = 1.0                     # the backward's (the forward does not read them)
    regularization_coefficient: float = 1.0
    use_linear: bool = False


_SVM_ROWS = Opaque("SVMOutput", lambda a: a)


@tdl_op("SVMOutput", inputs=("data", "label"), attrs=SVMOutputAttrs, cases=[
    Case(shapes=((4, 3), (4,)), ints=((1, 3),)),
    Case(shapes=((6, 4), (6,)), ints=((1, 4),), attrs={"margin": 0.5, "use_linear": True}),
])
def svm_output(data: TensorVar, label: TensorVar, attrs: SVMOutputAttrs) -> Callable:
    """out[b, j] = data[b, j]; MXNet's backward gives each class j of sample b the gradient of the (squared,
    or with use_linear the linear) hinge loss of margin - data[b, label[b]] + data[b, j], which couples the
    sample's classes: each sample is read whole, through an opaque function of its row (only the batch splits);
    the label is read by the backward only."""
    if data.ndim != 2 or label.shape != (data.shape[0],):
        raise TDLError(f"SVMOutput: data {tuple(data.shape)} and label {tuple(label.shape)}; described: data (batch, "
                       f"classes) and label (batch,)")
    return lambda b, j: uses(_SVM_ROWS(data[b, :])[j], label.at((b,), valid=(0, data.shape[1] - 1)))

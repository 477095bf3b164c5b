"""TDL descriptions of the softmax family: softmax, log_softmax, SoftmaxOutput, SoftmaxActivation.

Every op is one helper, :func:`_softmax`: the row maximum and the row sum of exponentials are intermediate
``compute`` tensors (nested reductions over the softmax axes), and the output divides by (or, for the log
form, subtracts the log of) the row sum.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tofu.errors import TDLError
from tofu.tdl.describe import Case, tdl_op
from tofu.tdl.expr import Max, Sum, TensorVar, ValueExpr, Var, compute, exp, log, uses


def _reduce(reducer: Callable, n: int, body: Callable[[tuple[Var, ...]], ValueExpr]) -> ValueExpr:
    """``reducer`` of ``body(k1, ..., kn)`` over n variables, as nested one-variable reductions."""
    if n == 0:
        return body(())
    return reducer(lambda k: _reduce(reducer, n - 1, lambda ks: body((k, *ks))))


def _softmax(x: TensorVar, axes: Sequence[int], temperature: float = 1.0, log_form: bool = False) -> Callable:
    """out[i] = exp((x[i] - m) / T) / s  (or its log), where m and s are the max and the sum of
    exponentials over ``axes`` of the row that holds i."""
    axes = sorted(a % x.ndim for a in axes)
    kept = [d for d in range(x.ndim) if d not in axes]

    def full(outer: Sequence[Var], inner: Sequence[Var]) -> tuple:
        """Index of x from the kept-dims variables ``outer`` and the softmax-dims variables ``inner``."""
        idx, o, r = [], iter(outer), iter(inner)
        for d in range(x.ndim):
            idx.append(next(r) if d in axes else next(o))
        return tuple(idx)

    shape = [x.shape[d] for d in kept]
    m = compute("rowmax", shape, lambda *o: _reduce(Max, len(axes), lambda ks: x[full(o, ks)]))
    s = compute("rowsum", shape, lambda *o: _reduce(
        Sum, len(axes), lambda ks: exp((x[full(o, ks)] - m[o]) / temperature)))

    def out(*i: Var) -> ValueExpr:
        row = tuple(i[d] for d in kept)
        shifted = (x[i] - m[row]) / temperature
        return shifted - log(s[row]) if log_form else exp(shifted) / s[row]
    return out


@dataclass(frozen=True)
class SoftmaxAttrs:
    axis: int = -1
    temperature: float | None = None


@tdl_op("softmax", inputs=("data",), attrs=SoftmaxAttrs, cases=[
    Case(shapes=((4, 6),)),
    Case(shapes=((2, 5, 3),), attrs={"axis": 1, "temperature": 2.0}),
    Case(shapes=((3, 2, 4),), attrs={"axis": 0}),
])
def softmax(data: TensorVar, attrs: SoftmaxAttrs) -> Callable:
    """out[..., i, ...] = exp(x[..., i, ...] / T) / sum_k exp(x[..., k, ...] / T)  over ``axis``."""
    return _softmax(data, [attrs.axis], attrs.temperature or 1.0)


@tdl_op("log_softmax", inputs=("data",), attrs=SoftmaxAttrs, cases=[
    Case(shapes=((4, 6),)),
    Case(shapes=((2, 5, 3),), attrs={"axis": 1}),
    Case(shapes=((3, 4),), attrs={"axis": 0, "temperature": 0.5}),
])
def log_softmax(data: TensorVar, attrs: SoftmaxAttrs) -> Callable:
    """out[..., i, ...] = x[..., i, ...] / T - log sum_k exp(x[..., k, ...] / T)  over ``axis``."""
    return _softmax(data, [attrs.axis], attrs.temperature or 1.0, log_form=True)


@dataclass(frozen=True)
class SoftmaxOutputAttrs:
    multi_output: bool = False
    preserve_shape: bool = False


@tdl_op("SoftmaxOutput", inputs=("data", "label"), attrs=SoftmaxOutputAttrs, cases=[
    Case(shapes=((4, 5), (4,)), ints=((1, 5),)),
    Case(shapes=((2, 3, 4), (2, 4)), attrs={"multi_output": True}, ints=((1, 3),)),
    Case(shapes=((2, 3, 4), (2, 3)), attrs={"preserve_shape": True}, ints=((1, 4),)),
    Case(shapes=((2, 3, 2), (2, 3)), ints=((1, 6),)),
])
def softmax_output(data: TensorVar, label: TensorVar, attrs: SoftmaxOutputAttrs) -> Callable:
    """Forward: softmax of data (n, c, ...) over c (multi_output), over the last axis (preserve_shape), else
    over all axes but the first (MXNet flattens to (n, -1)). The label (data's shape without the softmax axis;
    n alone in the 2-D case) is read by the gradient only: declared with ``uses``."""
    if attrs.multi_output:
        out, label_dims = _softmax(data, [1]), lambda i: (i[0], *i[2:])
    elif attrs.preserve_shape:
        out, label_dims = _softmax(data, [-1]), lambda i: i[:-1]
    else:
        out, label_dims = _softmax(data, range(1, data.ndim)), lambda i: i[:max(1, data.ndim - 1)]
    return lambda *i: uses(out(*i), label[label_dims(i)])


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
    (n, c, ...) (mode channel)."""
    if attrs.mode not in ("instance", "channel"):
        raise TDLError(f"SoftmaxActivation: unknown mode '{attrs.mode}'")
    return _softmax(data, [1] if attrs.mode == "channel" else [-1])

"""TDL descriptions of MXNet's sequence family: SequenceMask, SequenceLast, SequenceReverse.

The data is time-major (T, B, ...) with ``axis=0``, or batch-major (B, T, ...) with ``axis=1``; the optional
``sequence_length`` input (B,) gives each sequence's length when ``use_sequence_length`` is set, else every
sequence is T long. The lengths are floats, which MXNet truncates to integers (checked against MXNet 1.9.1
with fractional lengths), so the descriptions read floor(length).

SequenceLast and SequenceReverse read data at a time index computed from the lengths (a data-dependent
access): the time axis of data is read whole, every other axis partitions.

Each description declares the lengths' valid values with ``valid=``: [0, T] for SequenceMask and
SequenceReverse, [1, T] for SequenceLast (T the time extent). Outside them MXNet 1.9.1 reads or writes out of
bounds (a negative length to SequenceMask aborts the process), so run-time inputs are drawn from and checked
against them.
"""
from __future__ import annotations

from tofu.tdl.lang import *  # noqa: F403  (the DSL: tofu.tdl.lang.__all__)


@dataclass(frozen=True)
class SequenceAttrs:
    use_sequence_length: bool = False
    value: float = 0.0
    axis: int = 0


def _lengths(sequence_length: TensorVar | None, attrs: SequenceAttrs, op: str) -> TensorVar | None:
    """The lengths input when it is used, None when every sequence is whole."""
    if attrs.use_sequence_length and sequence_length is None:
        raise TDLError(f"{op}: use_sequence_length needs the sequence_length input")
    return sequence_length if attrs.use_sequence_length else None


def _time_batch(attrs: SequenceAttrs, op: str, axes: tuple[int, ...] = (0, 1)) -> tuple[int, int]:
    """The positions of the time and batch axes in data."""
    if attrs.axis not in axes:
        raise TDLError(f"{op}: axis {attrs.axis} is not supported by MXNet (only {', '.join(map(str, axes))})")
    return (0, 1) if attrs.axis == 0 else (1, 0)


@tdl_op("SequenceMask", inputs=("data", "sequence_length?"), attrs=SequenceAttrs, cases=[
    Case(shapes=((5, 3, 2), (3,)), attrs={"use_sequence_length": True}, ints=((1, 6),)),
    Case(shapes=((3, 4), (3,)), attrs={"use_sequence_length": True, "axis": 1, "value": -2.0},
         uniform=((1, 0.0, 5.0),)),
    Case(shapes=((4, 3),)),
])
def sequence_mask(data: TensorVar, sequence_length: TensorVar | None, attrs: SequenceAttrs) -> Callable:
    """out[i] = data[i] if t < floor(sequence_length[b]) else value, t and b the time and batch positions of i."""
    lengths = _lengths(sequence_length, attrs, "SequenceMask")
    t_axis, b_axis = _time_batch(attrs, "SequenceMask")
    if lengths is None:
        return lambda *i: data[i]
    valid = (0, data.shape[t_axis])
    return lambda *i: where(lt(IndexValue(i[t_axis]), floor(lengths.at(i[b_axis], valid=valid))), data[i],
                            attrs.value)


@tdl_op("SequenceLast", inputs=("data", "sequence_length?"), attrs=SequenceAttrs, cases=[
    Case(shapes=((5, 3, 2), (3,)), attrs={"use_sequence_length": True}, uniform=((1, 1.0, 6.0),)),
    Case(shapes=((3, 4), (3,)), attrs={"use_sequence_length": True, "axis": 1}, uniform=((1, 1.0, 5.0),)),
    Case(shapes=((4, 3, 2),)),
])
def sequence_last(data: TensorVar, sequence_length: TensorVar | None, attrs: SequenceAttrs) -> Callable:
    """out[b, x..] = data[floor(sequence_length[b]) - 1 (or T - 1), b, x..]  (time axis ``axis``, removed)."""
    lengths = _lengths(sequence_length, attrs, "SequenceLast")
    t_axis, _ = _time_batch(attrs, "SequenceLast")

    def out(b: Var, *rest: Var) -> ValueExpr:
        steps = data.shape[t_axis]
        last = floor(lengths.at(b, valid=(1, steps))) - 1.0 if lengths is not None else steps - 1
        return data[(last, b, *rest) if t_axis == 0 else (b, last, *rest)]
    return out


@tdl_op("SequenceReverse", inputs=("data", "sequence_length?"), attrs=SequenceAttrs, cases=[
    Case(shapes=((5, 3, 2), (3,)), attrs={"use_sequence_length": True}, ints=((1, 6),)),
    Case(shapes=((4, 3), (3,)), attrs={"use_sequence_length": True}, uniform=((1, 0.0, 5.0),)),
    Case(shapes=((4, 3, 2),)),
])
def sequence_reverse(data: TensorVar, sequence_length: TensorVar | None, attrs: SequenceAttrs) -> Callable:
    """out[t, b, x..] = data[n - 1 - t, b, x..] if t < n else data[t, b, x..], n = floor(sequence_length[b])
    (or T: the whole time axis reversed)."""
    lengths = _lengths(sequence_length, attrs, "SequenceReverse")
    _time_batch(attrs, "SequenceReverse", axes=(0,))
    if lengths is None:
        steps = data.shape[0]
        return lambda t, b, *rest: data[(steps - 1 - t, b, *rest)]

    def out(t: Var, b: Var, *rest: Var) -> ValueExpr:
        n = floor(lengths.at(b, valid=(0, data.shape[0])))
        return where(lt(IndexValue(t), n), data[(n - 1.0 - IndexValue(t), b, *rest)], data[(t, b, *rest)])
    return out

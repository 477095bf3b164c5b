"""TDL descriptions of MXNet's sequence family: SequenceMask, SequenceLast, SequenceReverse, and CTCLoss.

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

import numpy as np

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


# ------------------------------------------------------------------------------------------------------------
# CTCLoss (connectionist temporal classification, the loss of speech and handwriting models): per sequence, the
# negative log of the probability, summed over every alignment of its T frames to its labels, of the labels
# given the softmax of its activations. A dynamic program over the whole sequence: an opaque function of one
# sequence's frames and labels, so the batch splits and the time and alphabet axes do not.

@dataclass(frozen=True)
class CTCLossAttrs:
    use_data_lengths: bool = False
    use_label_lengths: bool = False
    blank_label: str = "first"


def _ctc(x: np.ndarray, labels: np.ndarray, blank_first: bool) -> tuple[np.ndarray, np.ndarray]:
    """Per sequence n of ``x`` (N, T, C) and ``labels`` (N, L): its loss, and the loss's gradient with respect
    to the activations (softmax - the label posteriors, as MXNet's forward leaves it in its hidden output). A
    sequence's labels are those before its first padding value (0 when the blank is the first class, -1 when it
    is the last), computed in log space by the forward-backward recursion."""
    n_seq, steps, classes = x.shape
    blank, pad = (0, 0) if blank_first else (classes - 1, -1)
    z = x.astype(np.float64)
    logp = z - z.max(-1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
    loss, grad = np.zeros(n_seq), np.exp(logp)
    for n in range(n_seq):
        tokens = []
        for v in labels[n]:
            if int(v) == pad:
                break
            tokens.append(int(v))
        ext = [blank]
        for c in tokens:
            ext += [c, blank]
        s_len, lp = len(ext), logp[n][:, ext]                   # lp: (T, S)
        skip = np.array([s >= 2 and ext[s] != blank and ext[s] != ext[s - 2] for s in range(s_len)])
        alpha = np.full((steps, s_len), -np.inf)
        alpha[0, :2] = lp[0, :2]
        def later(v: np.ndarray, k: int) -> np.ndarray:       # v moved k places to the right
            return np.concatenate((np.full(k, -np.inf), v))[:s_len]

        def earlier(v: np.ndarray, k: int) -> np.ndarray:     # and to the left
            return np.concatenate((v, np.full(k, -np.inf)))[k:]

        for t in range(1, steps):
            prev = alpha[t - 1]
            a2 = np.where(skip, later(prev, 2), -np.inf)
            alpha[t] = np.logaddexp.reduce(np.stack([prev, later(prev, 1), a2]), axis=0) + lp[t]
        beta = np.full((steps, s_len), -np.inf)
        beta[-1, -2:] = lp[-1, -2:]
        skip_next = earlier(skip.astype(float), 2) == 1
        for t in range(steps - 2, -1, -1):
            nxt = beta[t + 1]
            b2 = np.where(skip_next, earlier(nxt, 2), -np.inf)
            beta[t] = np.logaddexp.reduce(np.stack([nxt, earlier(nxt, 1), b2]), axis=0) + lp[t]
        total = np.logaddexp.reduce(alpha[-1, -2:])
        loss[n] = -total
        post = alpha + beta - lp - total                          # log P(frame t at extended label s | labels)
        for s, c in enumerate(ext):
            grad[n, :, c] -= np.exp(post[:, s])
    return loss, grad


def _ctc_loss(blank_first: bool) -> Callable:
    return lambda x, labels: _ctc(x, labels, blank_first)[0][:, None].astype(np.float32)


def _ctc_grad(blank_first: bool) -> Callable:
    return lambda x, labels: _ctc(x, labels, blank_first)[1].astype(np.float32)


@tdl_op("CTCLoss", inputs=("data", "label", "data_lengths?", "label_lengths?"), outputs=("output", "grad"),
        attrs=CTCLossAttrs, aliases=("ctc_loss", "_contrib_CTCLoss", "_contrib_ctc_loss"), cases=[
            Case(shapes=((6, 4, 5), (4, 2)), ints=((1, 5),)),           # 0: the blank, and the padding
            Case(shapes=((7, 2, 4), (2, 3)), ints=((1, 3),), attrs={"blank_label": "last"}),
        ])
def ctc_loss(data: TensorVar, label: TensorVar, data_lengths: TensorVar | None, label_lengths: TensorVar | None,
             attrs: CTCLossAttrs):
    """output[n] = -log sum over the alignments of data[:, n, :]'s T frames to label[n, :] of the product of
    their softmax probabilities; grad[t, n, c] = that loss's gradient with respect to data[t, n, c] (MXNet's
    hidden output). data is (T, N, C), time-major; label (N, L), padded after the labels."""
    if attrs.use_data_lengths or attrs.use_label_lengths:
        raise TDLError("CTCLoss: per-sequence data or label lengths (use_data_lengths, use_label_lengths) are "
                       "not described")
    if attrs.blank_label not in ("first", "last"):
        raise TDLError(f"CTCLoss: blank_label '{attrs.blank_label}' is neither 'first' nor 'last'")
    first, classes = attrs.blank_label == "first", data.shape[-1]
    loss, grad = Opaque("ctc_loss", _ctc_loss(first)), Opaque("ctc_grad", _ctc_grad(first))
    # the labels: classes, the blank excluded, or the padding (0 is both when the blank is first)
    labels = (lambda n: label.at((n, slice(None)), valid=(0, classes - 1))) if first else \
        (lambda n: label.at((n, slice(None)), valid=(-1, classes - 2)))
    return (lambda n: loss(data[:, n, :], labels(n))[0],
            lambda t, n, c: grad(data[:, n, :], labels(n))[t, c])

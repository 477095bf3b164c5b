"""Values to train with: initial parameters, a synthetic batch, the loss of a step, and checkpoints.

Input: a :class:`~tofu.graph.ir.Graph`. Output: whole tensors by name (numpy), and checkpoint files in MXNet's
own ``.params`` format (``arg:NAME`` / ``aux:NAME`` keys, as ``mx.model.save_checkpoint`` writes them) holding
whole tensors, so a model trained partitioned loads unpartitioned and the reverse. A checkpoint's plan, when
there is one, is saved beside it (``NAME.plan.json``).

A synthetic batch gives every input that an operator reads as indices or lengths valid integers, derived from
the operators' TDL descriptions (:func:`index_uses`); ``NAME=int:LOW:HIGH`` (:func:`parse_input_option`) sets
an input's range, and :func:`check_inputs` refuses values that would drive a kernel out of bounds.
"""
from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tofu.errors import TofuError
from tofu.graph.ir import LOSS_OPS, Graph, Role


class CheckpointError(TofuError):
    """A checkpoint cannot be read, or does not fit the model."""


_NORMALIZATIONS = frozenset({"BatchNorm", "LayerNorm", "InstanceNorm", "GroupNorm"})   # input 1: the scale


class InitializerError(TofuError):
    """A variable declares an initializer (``__init__``) that cannot be read or that tofu does not draw."""


def initial_values(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """Parameters (uniform in +-sqrt(3 / fan-in); BatchNorm and LayerNorm scales 1, shifts and biases 0) and
    auxiliary states (moving means 0, moving variances 1), drawn reproducibly from ``seed``; a variable that
    declares its initializer (``mx.sym.var(name, init=...)``, as ``mx.rnn.LSTMCell`` does its forget bias) gets
    that one's values (:func:`declared_initial_value`).

    Raises:
        InitializerError: a declared initializer that cannot be read or is not one tofu draws.
    """
    rng = np.random.default_rng(seed)
    # a normalization's scale by its place in the op, whatever its name (BatchNorm under fix_gamma sets it to 1
    # in place on one device, and never reads it partitioned: both must start at 1)
    scales = {n.inputs[1] for n in graph.nodes if n.op in _NORMALIZATIONS and len(n.inputs) > 1}
    values = {}
    for t in graph.tensors:
        if t.producer is not None or t.role not in (Role.PARAM, Role.AUX):
            continue
        if t.init:
            values[t.name] = declared_initial_value(t.name, t.init, t.shape, rng)
        elif t.role is Role.AUX:
            values[t.name] = (np.ones if t.name.endswith("var") else np.zeros)(t.shape, np.float32)
        elif t.id in scales or t.name.endswith("gamma"):
            values[t.name] = np.ones(t.shape, np.float32)
        elif t.name.endswith(("beta", "bias")) or len(t.shape) == 1:
            values[t.name] = np.zeros(t.shape, np.float32)
        else:
            fan_in = int(np.prod(t.shape[1:]))
            bound = np.sqrt(3.0 / fan_in)
            values[t.name] = rng.uniform(-bound, bound, t.shape).astype(np.float32)
    return values


def declared_initial_value(name: str, init: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """The value MXNet's initializer ``init`` (its JSON, as ``Initializer.dumps`` writes it, or its bare name)
    gives a variable of ``shape``, drawn from ``rng`` where it is random (the same distribution as MXNet's, not the
    same numbers): the constants (``zero``, ``one``, ``constant``, ``bilinear``, ``lstmbias``), ``uniform``,
    ``normal``, ``xavier`` and ``msraprelu``, by the formulas of MXNet 1.9.1's ``mxnet/initializer.py``.

    Raises:
        InitializerError: ``init`` is not an initializer MXNet wrote, or names one of the others (orthogonal,
            load, mixed, ...): their values are to be loaded (``--load``).
    """
    try:        # MXNet's registry takes a JSON [name, kwargs] or a bare name (Gluon's export writes 'ones')
        doc = json.loads(init) if init.lstrip().startswith("[") else [init.strip(), {}]
        kind, kwargs = str(doc[0]).lower(), dict(doc[1])
    except (ValueError, TypeError, IndexError, KeyError):
        raise InitializerError(f"variable '{name}': its initializer '{init}' is not one MXNet wrote") from None
    try:
        if kind in ("zero", "zeros", "one", "ones"):
            return np.full(shape, 1.0 if kind.startswith("one") else 0.0, np.float32)
        if kind == "constant":
            return np.broadcast_to(np.asarray(kwargs.get("value", 0.0), np.float32), shape).copy()
        if kind == "uniform":
            scale = float(kwargs.get("scale", 0.07))
            return rng.uniform(-scale, scale, shape).astype(np.float32)
        if kind == "normal":
            return rng.normal(0.0, float(kwargs.get("sigma", 0.01)), shape).astype(np.float32)
        if kind in ("xavier", "msraprelu"):
            if len(shape) < 2:
                raise InitializerError(f"variable '{name}': MXNet's {kind} initializer needs at least 2 dimensions, "
                                       f"it has shape {list(shape)}")
            if kind == "xavier":
                gaussian = kwargs.get("rnd_type", "uniform") == "gaussian"
                magnitude = float(kwargs.get("magnitude", 3))
            else:               # MSRAPrelu: a gaussian Xavier of magnitude 2 / (1 + slope^2)
                gaussian, magnitude = True, 2.0 / (1 + float(kwargs.get("slope", 0.25)) ** 2)
            field = math.prod(shape[2:])
            fan_in, fan_out = shape[1] * field, shape[0] * field
            factor = {"avg": (fan_in + fan_out) / 2.0, "in": fan_in, "out": fan_out}[kwargs.get("factor_type", "avg")]
            scale = math.sqrt(magnitude / factor)
            value = rng.normal(0.0, scale, shape) if gaussian else rng.uniform(-scale, scale, shape)
            return value.astype(np.float32)
        if kind == "bilinear":      # UpSampling's bilinear kernel: per (row y, column x), separable in the two
            if len(shape) != 4:
                raise InitializerError(f"variable '{name}': MXNet's bilinear initializer needs 4 dimensions, it has "
                                       f"shape {list(shape)}")
            f = math.ceil(shape[3] / 2.0)
            c = (2 * f - 1 - f % 2) / (2.0 * f)
            x = 1 - np.abs(np.arange(shape[3]) / f - c)
            y = 1 - np.abs(np.arange(shape[2]) / f - c)
            return np.broadcast_to(np.outer(y, x), shape).astype(np.float32)
        if kind == "lstmbias":      # the forget gate's quarter (i, f, c, o: the second) at forget_bias, else 0
            value = np.zeros(shape, np.float32)
            n = shape[0] // 4
            value[n:2 * n] = float(kwargs.get("forget_bias", 1.0))
            return value
    except (ValueError, TypeError, KeyError) as e:
        raise InitializerError(f"variable '{name}': its initializer '{init}' cannot be applied: {e}") from None
    gluon = " (a Gluon constant: its value is in the exported .params)" if kind.startswith("constant_") else ""
    raise InitializerError(f"variable '{name}' declares the initializer '{doc[0]}'{gluon}, which tofu does not draw: "
                           f"give its values with --load")


class InputOptionError(TofuError):
    """An input option (``NAME=int:LOW:HIGH``) that cannot be parsed or names no input of the model."""


class InputValueError(TofuError):
    """Input values that an operator reads as indices or lengths lie outside their valid range."""


@dataclass(frozen=True)
class IntInput:
    """Values for one model input: integers drawn uniformly from ``[low, high]``, both included."""

    name: str
    low: int
    high: int


@dataclass(frozen=True)
class IndexUse:
    """The integers a model input must hold because an operator reads it as indices or lengths: ``[low, high]``,
    both included, and which node reads it so (the intersection when several do)."""

    low: int
    high: int
    reason: str          # "SequenceLast node 'last' reads it as an index or a length (its description's valid=)"


_INPUT_FORM = "expected NAME=int:LOW:HIGH, e.g. seq_len=int:1:20"


def parse_input_option(text: str) -> IntInput:
    """Parses ``NAME=int:LOW:HIGH``: input NAME gets integers drawn uniformly from LOW to HIGH, both included.

    >>> parse_input_option("seq_len=int:1:20")
    IntInput(name='seq_len', low=1, high=20)

    Raises:
        InputOptionError: not of that form, bounds that are not integers, or LOW > HIGH (one line).
    """
    name, eq, spec = text.partition("=")
    name = name.strip()
    if not eq or not name:
        raise InputOptionError(f"input option '{text}': no input name before '=' ({_INPUT_FORM})")
    parts = spec.split(":")
    if len(parts) != 3 or parts[0].strip() != "int":
        raise InputOptionError(f"input option '{text}': '{spec}' is not int:LOW:HIGH ({_INPUT_FORM})")
    try:
        low, high = int(parts[1]), int(parts[2])
    except ValueError:
        raise InputOptionError(f"input option '{text}': LOW and HIGH must be integers, got '{parts[1]}' and "
                               f"'{parts[2]}' ({_INPUT_FORM})") from None
    if low > high:
        raise InputOptionError(f"input option '{text}': LOW {low} is greater than HIGH {high}")
    return IntInput(name, low, high)


def synthetic_batch(graph: Graph, seed: int = 1, overrides: Sequence[IntInput] = ()) -> dict[str, np.ndarray]:
    """One batch of data and labels, drawn reproducibly from ``seed``: an input that an operator reads as
    indices or lengths (:func:`index_uses`: token ids, labels, sequence lengths, gather indices) gets integers
    uniform over its valid range, every other input standard normal values; ``overrides`` (from
    :func:`parse_input_option`) give an input integers from their own range instead. The batch is checked
    with :func:`check_inputs` before it is returned.

    Raises:
        InputOptionError: an override names no data or label input of ``graph``, or names one twice.
        InputValueError: an override's range leaves the valid range of an input read as indices or lengths.
    """
    inputs = [t for t in graph.tensors if t.producer is None and t.role in (Role.DATA, Role.LABEL)]
    given: dict[str, IntInput] = {}
    for o in overrides:
        if o.name in given:
            raise InputOptionError(f"input '{o.name}' is given twice")
        given[o.name] = o
    unknown = sorted(set(given) - {t.name for t in inputs})
    if unknown:
        raise InputOptionError(f"the model has no input '{unknown[0]}' (its inputs: "
                               f"{', '.join(t.name for t in inputs) or 'none'})")
    uses = index_uses(graph)
    for o in given.values():
        use = uses.get(o.name)
        if use is not None and not use.low <= o.low <= o.high <= use.high:
            raise InputValueError(f"input '{o.name}' given int:{o.low}:{o.high}, outside [{use.low}, {use.high}]: "
                                  f"{use.reason}")
    rng = np.random.default_rng(seed)
    batch = {}
    for t in inputs:
        r = given.get(t.name) or uses.get(t.name)
        if r is not None:
            batch[t.name] = rng.integers(r.low, r.high + 1, t.shape).astype(np.float32)
        else:
            batch[t.name] = rng.standard_normal(t.shape).astype(np.float32)
    check_inputs(graph, batch)
    return batch


def check_inputs(graph: Graph, batch: Mapping[str, np.ndarray]) -> None:
    """Refuses, before MXNet sees them, values that an operator would read as an index or a length outside its
    valid range (some kernels then read or write out of bounds: SequenceMask with a negative length aborts).

    Raises:
        InputValueError: the first such input, its offending value and which node reads it (one line).
    """
    for name, use in index_uses(graph).items():
        if name not in batch:
            continue
        values = np.asarray(batch[name])
        bad = ~((values >= use.low) & (values <= use.high))       # NaN is bad too
        if bad.any():
            at = tuple(int(i) for i in np.argwhere(bad)[0])
            raise InputValueError(f"input '{name}' holds {float(values[at]):g} at {list(at)}, outside "
                                  f"[{use.low}, {use.high}]: {use.reason}")


def index_uses(graph: Graph) -> dict[str, IndexUse]:
    """Per data or label input of ``graph`` that some operator reads as indices or lengths, the integers it
    must hold, derived from the operators' TDL descriptions (:func:`tofu.tdl.describe.index_ranges`): an index
    into a dimension of extent n holds [0, n - 1], a declared ``valid=(low, high)`` range holds [low, high]. The
    values are followed through operators that only move them (Reshape, Flatten, transpose, slices: every
    output of the description reads the input at affine indices); several readers intersect.

    Raises:
        InputValueError: two readers of one input want disjoint ranges (no valid value exists).
    """
    found: dict[str, IndexUse] = {}
    for t in graph.tensors:
        if t.producer is not None or t.role not in (Role.DATA, Role.LABEL):
            continue
        readers = list(dict.fromkeys((node.op, node.name, r) for node, _, r in _index_readers(graph, t.id)))
        if not readers:
            continue
        low, high = max(r.low for *_, r in readers), min(r.high for *_, r in readers)
        reasons = [f"{op} node '{name}' reads it as {r.reason}" + (f" in {r}" if len(readers) > 1 else "")
                   for op, name, r in readers]
        if low > high:
            raise InputValueError(f"input '{t.name}': no value is valid for all its readers: {'; '.join(reasons)}")
        found[t.name] = IndexUse(low, high, "; ".join(reasons))
    return found


def _index_readers(graph: Graph, tensor: int):
    """(node, input position, IndexRange) for every node that reads ``tensor``'s values as indices or lengths,
    directly or through operators that only move values."""
    from tofu.tdl.describe import describe, index_ranges

    frontier, seen = [tensor], set()
    while frontier:
        t = frontier.pop()
        if t in seen:
            continue
        seen.add(t)
        for n in graph.consumers(t):
            node = graph.nodes[n]
            try:
                desc = describe(node.op, node.attrs, [graph.tensors[i].shape for i in node.inputs],
                                [graph.tensors[o].shape for o in node.outputs], node=node.name)
            except TofuError:      # no description (a loss added for training): it reads no index
                continue
            ranges = index_ranges(desc)
            for p, i in enumerate(node.inputs):
                if i != t:
                    continue
                if p in ranges:
                    yield node, p, ranges[p]
                if _moves_values(desc, p):
                    frontier.extend(node.outputs)


def _moves_values(desc, p: int) -> bool:
    """Every output of ``desc`` is input ``p`` read at affine indices (its values, moved)."""
    from tofu.tdl.expr import Access, IndexExpr

    source = desc.inputs[p] if p < len(desc.inputs) else None
    return bool(desc.outputs) and all(
        isinstance(o.body, Access) and o.body.tensor is source and all(isinstance(i, IndexExpr) for i in o.body.index)
        for o in desc.outputs)


def loss(graph: Graph, outputs: Mapping[str, np.ndarray], batch: Mapping[str, np.ndarray]) -> float:
    """The loss of the graph's first loss head that has its label in ``batch`` (:func:`head_loss`); the mean of
    the first output for a graph without one."""
    for t in graph.heads:
        tensor = graph.tensors[t]
        node = graph.nodes[tensor.producer] if tensor.producer is not None else None
        if node is None or node.op not in LOSS_OPS:
            continue
        if node.op in ("MakeLoss", "make_loss"):
            return float(np.mean(outputs[tensor.name]))
        label = _label(graph, node.inputs[1], batch) if len(node.inputs) > 1 else None
        if label is not None:
            return head_loss(node.op, node.attrs, outputs[tensor.name], label)
    return float(np.mean(outputs[graph.tensors[graph.heads[0]].name]))


def _label(graph: Graph, t: int, batch: Mapping[str, np.ndarray]) -> np.ndarray | None:
    """Tensor t's values when they are a label fed as it is or reshaped (a label reshaped in the graph, as
    the zoo's language models feed theirs): the batch's label of its size, in its shape."""
    tensor = graph.tensors[t]
    if tensor.name in batch:
        return batch[tensor.name]
    size = int(np.prod(tensor.shape))
    found = [batch[u.name] for u in graph.by_role(Role.LABEL) if u.name in batch and batch[u.name].size == size]
    return found[0].reshape(tensor.shape) if len(found) == 1 else None


def head_loss(op: str, attrs: Mapping, out: np.ndarray, label: np.ndarray) -> float:
    """The loss a loss head's backward descends, from its forward output ``out`` and ``label``, in float64:

    * SoftmaxOutput: cross-entropy, mean over its rows: the classes along axis 1 (``multi_output``), the last axis
      (``preserve_shape``), else all axes but the first (MXNet's backward then takes the first n labels); with
      ``use_ignore``, rows labelled ``ignore_label`` left out;
    * LinearRegressionOutput / MAERegressionOutput: mean squared / absolute error over the elements;
    * LogisticRegressionOutput: binary cross-entropy of its probabilities, mean over the elements;
    * SVMOutput (``out`` is its data): the one-against-all hinge loss its backward descends, per sample the sum
      over classes j of max(0, margin - t_j data_j) (squared unless ``use_linear``), t_j = 1 for the label's class
      and -1 for the others, times ``regularization_coefficient``; mean over the samples."""
    out = np.asarray(out, dtype=np.float64)
    label = np.asarray(label, dtype=np.float64)
    if op == "SoftmaxOutput":
        if attrs.get("multi_output", False):
            probs, rows = np.moveaxis(out, 1, -1).reshape(-1, out.shape[1]), label.reshape(-1)
        elif attrs.get("preserve_shape", False):
            probs, rows = out.reshape(-1, out.shape[-1]), label.reshape(-1)
        else:
            probs, rows = out.reshape(out.shape[0], -1), label.reshape(-1)[:out.shape[0]]
        if attrs.get("use_ignore", False):
            keep = rows != float(attrs.get("ignore_label", -1.0))
            probs, rows = probs[keep], rows[keep]
        if not rows.size:
            return 0.0
        picked = probs[np.arange(rows.size), np.clip(rows.astype(np.int64), 0, probs.shape[1] - 1)]
        return float(-np.mean(np.log(picked + 1e-12)))
    label = label.reshape(out.shape) if op != "SVMOutput" else label.reshape(-1)
    if op == "LinearRegressionOutput":
        return float(np.mean((out - label) ** 2))
    if op == "MAERegressionOutput":
        return float(np.mean(np.abs(out - label)))
    if op == "LogisticRegressionOutput":
        p = np.clip(out, 1e-12, 1 - 1e-12)
        return float(-np.mean(label * np.log(p) + (1 - label) * np.log(1 - p)))
    if op == "SVMOutput":
        scores = out.reshape(out.shape[0], -1)
        sign = -np.ones_like(scores)
        sign[np.arange(scores.shape[0]), label.astype(np.int64)] = 1.0
        hinge = np.maximum(0.0, float(attrs.get("margin", 1.0)) - sign * scores)
        per = hinge if attrs.get("use_linear", False) else hinge ** 2
        return float(attrs.get("regularization_coefficient", 1.0) * np.mean(per.sum(axis=1)))
    raise ValueError(f"no loss formula for {op}")


def save_checkpoint(path: str | Path, graph: Graph, values: Mapping[str, np.ndarray], plan=None,
                    numpy_shapes: bool = False) -> None:
    """Writes the parameters and auxiliary states of ``graph`` (whole tensors) to ``path``, in MXNet's format,
    atomically (:func:`write_params`); with ``plan``, the plan beside it.

    Raises:
        CheckpointError: the file cannot be written (nothing at ``path`` has changed then).
    """
    write_params(path, checkpoint_arrays(graph, values), plan, numpy_shapes)


def write_params(path: str | Path, arrays: Mapping, plan=None, numpy_shapes: bool = False) -> None:
    """Writes MXNet ``arrays`` to ``path`` and ``plan`` to ``NAME.plan.json`` beside it, each atomically: a
    temporary file in the same directory, flushed to the disk, then renamed over the target (a reader sees the
    old file or the new one; a failure leaves no temporary file behind). ``numpy_shapes``: saved in MXNet's numpy
    shape semantics, the only ones a model of the numpy interface loads them in
    (:func:`tofu.graph.mxnet_import.numpy_semantics`).

    Raises:
        CheckpointError: a file cannot be written.
    """
    import mxnet as mx

    path = Path(path)
    if not path.parent.is_dir():
        raise CheckpointError(f"cannot write checkpoint '{path}': no directory '{path.parent}'")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with mx.util.np_shape(numpy_shapes):
            mx.nd.save(str(tmp), dict(arrays))
        _sync(tmp)
        os.replace(tmp, path)
        if plan is not None:
            plan.save(plan_path(path))           # atomic itself
    except (OSError, mx.base.MXNetError, TofuError) as e:
        tmp.unlink(missing_ok=True)
        raise CheckpointError(f"cannot write checkpoint '{path}': {str(e).splitlines()[0]}") from None


def _sync(path: Path) -> None:
    """Flushes ``path`` to the disk, so the rename never publishes a file whose bytes are still in flight."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def checkpoint_arrays(graph: Graph, values: Mapping[str, np.ndarray]) -> dict:
    """Every parameter and auxiliary state of ``graph`` as MXNet arrays under ``arg:NAME`` / ``aux:NAME``."""
    import mxnet as mx

    return {f"{'arg' if t.role is Role.PARAM else 'aux'}:{t.name}": mx.nd.array(values[t.name], dtype=t.dtype)
            for t in graph.tensors if t.producer is None and t.role in (Role.PARAM, Role.AUX)}


def plan_path(path: str | Path) -> Path:
    path = Path(path)
    return path.with_name(path.stem + ".plan.json")


def read_params(path: str | Path):
    """The arrays of an MXNet ``.params`` file, saved in MXNet's legacy shape semantics or in its numpy
    interface's (a Gluon ``export()`` under ``npx.set_np()``, which MXNet loads only in the semantics it was saved
    in).

    Raises:
        CheckpointError: not a ``.params`` file.
    """
    import mxnet as mx

    try:
        return mx.nd.load(str(path))
    except mx.base.MXNetError as e:
        if "saved in np shape semantics" not in str(e):
            raise CheckpointError(f"checkpoint '{path}' is not an MXNet .params file") from None
    try:
        with mx.util.np_shape(True):
            return mx.nd.load(str(path))
    except mx.base.MXNetError:
        raise CheckpointError(f"checkpoint '{path}' is not an MXNet .params file") from None


def load_checkpoint(path: str | Path, graph: Graph) -> dict[str, np.ndarray]:
    """Every parameter and auxiliary state of ``graph`` from an MXNet ``.params`` file (keys with or without
    MXNet's ``arg:`` / ``aux:`` prefixes).

    Raises:
        CheckpointError: unreadable, or a tensor of the model is missing or has another shape.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint '{path}' does not exist")
    loaded = read_params(path)
    if not isinstance(loaded, dict):
        raise CheckpointError(f"checkpoint '{path}' holds unnamed arrays; MXNet parameter files name them")
    # MXNet's own loaders read arg: and aux: keys and unprefixed names; a training checkpoint's mom: and tofu:
    # keys are its optimizer state (tofu.runtime.checkpoint)
    arrays = {k.split(":", 1)[1] if k.startswith(("arg:", "aux:")) else k: v for k, v in loaded.items()
              if not k.startswith(("mom:", "tofu:"))}
    wanted = {t.name for t in graph.tensors if t.producer is None and t.role in (Role.PARAM, Role.AUX)}
    extra = sorted(set(arrays) - wanted)
    if extra:
        raise CheckpointError(f"checkpoint '{path}' holds '{extra[0]}'" + (f" and {len(extra) - 1} more tensors"
                              if len(extra) > 1 else "") + f", which model '{graph.name}' does not have "
                              f"(a checkpoint of another model?)")
    values = {}
    for t in graph.tensors:
        if t.producer is None and t.role in (Role.PARAM, Role.AUX):
            if t.name not in arrays:
                raise CheckpointError(f"checkpoint '{path}' has no '{t.name}' (a {t.role.value} of "
                                      f"model '{graph.name}')")
            if tuple(arrays[t.name].shape) != t.shape:
                raise CheckpointError(f"checkpoint '{path}': '{t.name}' has shape {tuple(arrays[t.name].shape)}, "
                                      f"the model's is {t.shape}")
            values[t.name] = arrays[t.name].asnumpy()
            if not np.isfinite(values[t.name]).all():
                raise CheckpointError(f"checkpoint '{path}': '{t.name}' holds NaN or infinite values")
    return values

"""Values to train with: initial parameters, a synthetic batch, the loss of a step, and checkpoints.

Input: a :class:`~tofu.graph.ir.Graph`. Output: whole tensors by name (numpy), and checkpoint files in MXNet's
own ``.params`` format (``arg:NAME`` / ``aux:NAME`` keys, as ``mx.model.save_checkpoint`` writes them) holding
whole tensors, so a model trained partitioned loads unpartitioned and the reverse. A checkpoint's plan, when
there is one, is saved beside it (``NAME.plan.json``).
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from tofu.errors import TofuError
from tofu.graph.ir import Graph, Role


class CheckpointError(TofuError):
    """A checkpoint cannot be read, or does not fit the model."""


def initial_values(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """Parameters (uniform in +-sqrt(3 / fan-in); BatchNorm and LayerNorm scales 1, shifts and biases 0) and
    auxiliary states (moving means 0, moving variances 1), drawn reproducibly from ``seed``."""
    rng = np.random.default_rng(seed)
    values = {}
    for t in graph.tensors:
        if t.producer is not None or t.role not in (Role.PARAM, Role.AUX):
            continue
        if t.role is Role.AUX:
            values[t.name] = (np.ones if t.name.endswith("var") else np.zeros)(t.shape, np.float32)
        elif t.name.endswith("gamma"):
            values[t.name] = np.ones(t.shape, np.float32)
        elif t.name.endswith(("beta", "bias")) or len(t.shape) == 1:
            values[t.name] = np.zeros(t.shape, np.float32)
        else:
            fan_in = int(np.prod(t.shape[1:]))
            bound = np.sqrt(3.0 / fan_in)
            values[t.name] = rng.uniform(-bound, bound, t.shape).astype(np.float32)
    return values


def synthetic_batch(graph: Graph, seed: int = 1) -> dict[str, np.ndarray]:
    """One batch of data and labels: labels uniform over the classes of the loss they feed, token ids over the
    vocabulary of the Embedding reading them, other data standard normal."""
    rng = np.random.default_rng(seed)
    batch = {}
    for t in graph.tensors:
        if t.producer is not None or t.role not in (Role.DATA, Role.LABEL):
            continue
        high = _integer_range(graph, t.id)
        if high is not None:
            batch[t.name] = rng.integers(0, high, t.shape).astype(np.float32)
        else:
            batch[t.name] = rng.standard_normal(t.shape).astype(np.float32)
    return batch


def _integer_range(graph: Graph, tensor: int) -> int | None:
    """Classes or vocabulary size when ``tensor`` (through reshapes) feeds a loss's label or an Embedding."""
    frontier, seen = [tensor], set()
    while frontier:
        t = frontier.pop()
        if t in seen:
            continue
        seen.add(t)
        for n in graph.consumers(t):
            node = graph.nodes[n]
            if node.op == "Embedding" and node.inputs[0] == t:
                return int(node.attrs["input_dim"])
            if node.op in ("SoftmaxOutput", "softmax_cross_entropy") and len(node.inputs) > 1 and node.inputs[1] == t:
                return int(graph.tensors[node.inputs[0]].shape[-1])
            if node.op in ("Reshape", "reshape", "Flatten", "flatten", "expand_dims", "squeeze"):
                frontier.extend(node.outputs)
    return None


def loss(graph: Graph, outputs: Mapping[str, np.ndarray], batch: Mapping[str, np.ndarray]) -> float:
    """Cross-entropy of a softmax output against the labels (mean over rows); the mean of the first output for
    a graph without one."""
    labels = [batch[t.name] for t in graph.by_role(Role.LABEL) if t.name in batch]
    for t in graph.heads:
        tensor = graph.tensors[t]
        node = graph.nodes[tensor.producer] if tensor.producer is not None else None
        if node is not None and node.op == "SoftmaxOutput" and labels:
            probs = outputs[tensor.name].reshape(-1, tensor.shape[-1])
            label = labels[0].reshape(-1).astype(np.int64)
            if label.size == probs.shape[0]:
                return float(-np.mean(np.log(probs[np.arange(label.size), label] + 1e-12)))
    return float(np.mean(outputs[graph.tensors[graph.heads[0]].name]))


def save_checkpoint(path: str | Path, graph: Graph, values: Mapping[str, np.ndarray], plan=None) -> None:
    """Writes the parameters and auxiliary states of ``graph`` (whole tensors) to ``path``, in MXNet's format.

    Raises:
        CheckpointError: the file cannot be written.
    """
    import mxnet as mx

    path = Path(path)
    if not path.parent.is_dir():
        raise CheckpointError(f"cannot write checkpoint '{path}': no directory '{path.parent}'")
    arrays = checkpoint_arrays(graph, values)
    try:
        mx.nd.save(str(path), arrays)
        if plan is not None:
            plan.save(plan_path(path))
    except (OSError, mx.base.MXNetError) as e:
        raise CheckpointError(f"cannot write checkpoint '{path}': {str(e).splitlines()[0]}") from None


def checkpoint_arrays(graph: Graph, values: Mapping[str, np.ndarray]) -> dict:
    """Every parameter and auxiliary state of ``graph`` as MXNet arrays under ``arg:NAME`` / ``aux:NAME``."""
    import mxnet as mx

    return {f"{'arg' if t.role is Role.PARAM else 'aux'}:{t.name}": mx.nd.array(values[t.name], dtype=t.dtype)
            for t in graph.tensors if t.producer is None and t.role in (Role.PARAM, Role.AUX)}


def plan_path(path: str | Path) -> Path:
    path = Path(path)
    return path.with_name(path.stem + ".plan.json")


def load_checkpoint(path: str | Path, graph: Graph) -> dict[str, np.ndarray]:
    """Every parameter and auxiliary state of ``graph`` from an MXNet ``.params`` file (keys with or without
    MXNet's ``arg:`` / ``aux:`` prefixes).

    Raises:
        CheckpointError: unreadable, or a tensor of the model is missing or has another shape.
    """
    import mxnet as mx

    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint '{path}' does not exist")
    try:
        loaded = mx.nd.load(str(path))
    except mx.base.MXNetError:
        raise CheckpointError(f"checkpoint '{path}' is not an MXNet .params file") from None
    if not isinstance(loaded, dict):
        raise CheckpointError(f"checkpoint '{path}' holds unnamed arrays; MXNet parameter files name them")
    arrays = {k.split(":", 1)[1] if k.startswith(("arg:", "aux:")) else k: v for k, v in loaded.items()}
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
    return values

"""The graph IR: the one representation of a training graph that every later stage reads.

Input: nothing (built by :mod:`tofu.graph.mxnet_import`). Output: :class:`Graph`, an immutable value:
nodes (operators, in topological order) and tensor entries (every operator output and every variable),
with shapes, dtypes and roles. Variables are tensors without a producer, not nodes.
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from functools import cache, cached_property

import numpy as np

from tofu.graph.attrs import Attrs


@cache
def _itemsize(dtype: str) -> int:
    return np.dtype(dtype).itemsize


Shape = tuple[int, ...]


LOSS_OPS = frozenset({"SoftmaxOutput", "MakeLoss", "make_loss", "LinearRegressionOutput", "LogisticRegressionOutput",
                      "MAERegressionOutput", "SVMOutput"})
"""Operators whose backward injects the loss gradient (it ignores the gradient arriving at their output)."""

IGNORED_OUTPUT_GRADIENTS = {"BatchNorm": frozenset({1, 2}), "LayerNorm": frozenset({1, 2}),
                            "GroupNorm": frozenset({1, 2}), "topk": frozenset({1})}
"""Outputs whose gradient their op's backward ignores: the statistics that ``output_mean_var`` shows (mean, and
the inverse or plain standard deviation), topk's positions beside its values (``ret_typ='both'``). MXNet 1.9.1's
FGradient of these ops reads the gradient of output 0 alone, so a graph that reads them trains as if they were
under BlockGrad (tests/runtime/test_statistics_outputs.py); an op's expansion gives them so (tofu.registry)."""


class Role(enum.Enum):
    DATA = "data"            # a model input fed by the user (images, token ids)
    LABEL = "label"          # a training target
    PARAM = "param"          # a learned parameter (has a gradient and optimizer state)
    AUX = "aux"              # auxiliary state updated in the forward pass (BatchNorm moving stats)
    ACTIVATION = "activation"  # an operator output


@dataclass(frozen=True)
class TensorEntry:
    """One tensor of the graph: a variable or one output of a node."""

    id: int
    name: str
    shape: Shape
    dtype: str
    role: Role
    producer: int | None = None    # node id; None for variables
    output_index: int = 0
    lr_mult: float = 1.0           # a parameter's learning-rate multiplier (MXNet's ``__lr_mult__``)
    init: str = ""                 # the initializer a variable declares (MXNet's ``__init__``), or none

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * _itemsize(self.dtype)


@dataclass(frozen=True)
class Node:
    """One operator application.

    ``layer`` and ``step`` identify the model layer and the unrolled timestep the op belongs to (from the
    ``__tofu_layer__`` / ``__tofu_step__`` attributes the model builders set), so the search can group them.
    """

    id: int
    name: str
    op: str
    attrs: Attrs
    inputs: tuple[int, ...]         # tensor ids, in the operator's argument order
    outputs: tuple[int, ...]        # tensor ids, every output of the op (visible or not)
    layer: str | None = None
    step: int | None = None


@dataclass(frozen=True)
class Graph:
    """A forward training graph: nodes in topological order, tensors indexed by id."""

    name: str
    nodes: tuple[Node, ...]
    tensors: tuple[TensorEntry, ...]
    heads: tuple[int, ...]           # tensor ids of the graph outputs (losses)

    def tensor(self, key: int | str) -> TensorEntry:
        if isinstance(key, int):
            return self.tensors[key]
        return self.tensors[self._names[key]]

    @cached_property
    def _names(self) -> dict[str, int]:
        return {t.name: t.id for t in self.tensors}

    @cached_property
    def _consumers(self) -> tuple[tuple[int, ...], ...]:
        users: list[list[int]] = [[] for _ in self.tensors]
        for node in self.nodes:
            for t in dict.fromkeys(node.inputs):
                users[t].append(node.id)
        return tuple(tuple(u) for u in users)

    def consumers(self, tensor_id: int) -> tuple[int, ...]:
        """Ids of the nodes reading ``tensor_id`` (each once, in topological order)."""
        return self._consumers[tensor_id]

    @cached_property
    def with_gradient(self) -> frozenset[int]:
        """Ids of the tensors that get a gradient in training: parameters, and outputs of ops reading one that
        does (not data, labels, auxiliary states, nor what is computed from them alone, e.g. a label reshaped
        or an RNN's zero begin state; nor the outputs of loss ops, whose backward ignores their gradient, so
        MXNet never computes it; nor, for the same reason, the outputs of :data:`IGNORED_OUTPUT_GRADIENTS`, a
        normalization's statistics)."""
        found = {t.id for t in self.tensors if t.role is Role.PARAM}
        for node in self.nodes:
            if node.op not in LOSS_OPS and any(t in found for t in node.inputs):
                ignored = IGNORED_OUTPUT_GRADIENTS.get(node.op, ())
                found.update(t for o, t in enumerate(node.outputs) if o not in ignored)
        return frozenset(found)

    def node(self, node_id: int) -> Node:
        return self.nodes[node_id]

    def by_role(self, role: Role) -> tuple[TensorEntry, ...]:
        return tuple(t for t in self.tensors if t.role is role)

    def op_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for n in self.nodes:
            counts[n.op] = counts.get(n.op, 0) + 1
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

    @property
    def param_bytes(self) -> int:
        return sum(t.nbytes for t in self.by_role(Role.PARAM))

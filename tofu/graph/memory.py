r"""Training-memory estimate: :class:`~tofu.graph.ir.Graph` -> :class:`MemoryEstimate` (bytes on one device).

The model follows what MXNet's executor holds during one step of ``simple_bind`` + ``forward(is_train=True)``
+ ``backward()`` + optimizer update, category by category (|t| is the bytes of tensor t):

.. math::

    \text{params} = \sum_{p \in P} |p|, \qquad \text{grads} = \text{params} \quad (\texttt{grad\_req='write'}),
    \qquad \text{optimizer} = m \cdot \text{params}, \quad m = 1 \text{ (sgd\_mom)},\ 0 \text{ (sgd)}

    \text{aux} = \sum_{a \in A} |a|, \qquad
    \text{activations} = \sum_{d \in D \cup L} |d| + \text{pool}, \qquad
    \text{workspace} = \max_{v} w(v)

``pool`` is the size of the executor's static memory plan for every activation and activation gradient.
MXNet plans it once, at bind time, by walking the training schedule (the forward nodes in topological order,
then one backward step per node, in reverse order, for the nodes with an input that needs a gradient: a
parameter, or an activation computed from one) with reference counts: a buffer is freed after its last
use and a later request takes a free block of similar size (``[n/16, 16n]`` bytes, the smallest block of at
least ``n`` first; a smaller block grows to ``n``). The pool is the sum of every block's largest size, so it
is at least the peak of live bytes and more when sizes mix (the LSTM's gate and state tensors). This module
replays that walk. Rules per operator (:data:`RULES`, keyed by MXNet op name, read from the op type and
shapes only) say:

- *keeps*: which forward entries the op's backward reads (FullyConnected and Convolution their inputs, relu
  its output, sigmoid/tanh output and input, add nothing, ...); a kept entry lives until that backward step.
- *in-place*: an element-wise op writes its output over an input whose buffer has no other use left in the
  whole forward+backward graph (MXNet's ``FInplaceOption`` with storage ref count 1), and its backward writes
  the input gradient over the output gradient under the same condition; reshape-like ops alias their input
  (``FInplaceIdentity``). So ``Convolution -> BatchNorm -> relu`` keeps two buffers, not three.
- *hidden outputs* the import does not list but the backward reads (BatchNorm's saved mean and variance).
- *workspace* ``w(v)``: the temporary space the op asks MXNet's resource manager for: the im2col column
  buffer of one image for Convolution (``C_in * prod(kernel) * prod(out_spatial)`` elements, MXNet's CPU/GPU
  fallback path; cuDNN may choose a larger algorithm workspace), the flattened label for SoftmaxOutput.
  :func:`largest_workspace` evaluates it at any tensor shapes (one device's shards under a plan).

Gradients of activations: every consumer's backward writes its own contribution to an entry's gradient;
contributions stay alive until the producer's backward step, where they are summed in place into one
buffer (MXNet aggregates an entry's gradient when it reaches the producer). Backward outputs and heads:
the loss head's gradient is implicit (SoftmaxOutput ignores it); gradients of parameters are the fixed
``grads`` buffers, gradients of data and label are not computed (``grad_req='null'``).

Assumptions: the replayed order of requests and releases is MXNet's (outputs before inputs are freed,
gradient contributions summed at the producer); one temporary-space buffer serves every op (its size is the
largest request: an executor takes one buffer of the resource manager's pool per context and every op on
that context shares it, ``src/executor/attach_op_resource_pass.cc:46-73``; on CPU contexts all of them live
on cpu(0), see :func:`device0_temp_bytes`); unknown operators keep all their inputs and outputs, never work
in place and need no workspace. MKLDNN's weight-layout copies (CPU only) are not modelled;
:mod:`tofu.graph.memory_profile` measures with MKLDNN off. On the small models the estimate is within 3% of the
profiler's peak.
"""
from __future__ import annotations

import bisect
import logging
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields

import numpy as np

from tofu.graph.ir import Graph, Node, Role

log = logging.getLogger(__name__)

OPTIMIZER_STATES: dict[str, int] = {"sgd": 0, "sgd_mom": 1}
"""Optimizer -> buffers of optimizer state per parameter."""


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes one device holds while training, by category (see the module docstring)."""

    params: int
    grads: int
    optimizer: int
    aux: int
    activations: int
    workspace: int

    @property
    def total(self) -> int:
        return sum(getattr(self, f.name) for f in fields(self))

    def as_dict(self) -> dict[str, int]:
        """Every category in bytes, plus ``"total"``."""
        return {**{f.name: getattr(self, f.name) for f in fields(self)}, "total": self.total}


# ---------------------------------------------------------------------------------------------------------
# Per-operator rules: what the backward keeps, what works in place, hidden outputs, temporary space.

Shape = tuple[int, ...]
SizeFn = Callable[[Node, Graph], int]
WorkspaceFn = Callable[[Node, Graph, Sequence[Shape]], int]
"""Bytes of temporary space of one node with every tensor ``t`` at shape ``shapes[t]``."""


def _none(node: Node, graph: Graph, *shapes) -> int:
    return 0


@dataclass(frozen=True)
class MemoryRule:
    """How one operator uses memory in training (defaults: the conservative rule for unknown ops).

    Attributes:
        keeps_inputs: the backward reads the forward inputs.
        keeps_outputs: the backward reads the forward outputs.
        inplace: input positions whose buffer the (single) output may take when nothing else uses it;
            the backward then may also write the input gradient over the output gradient.
        identity: the output aliases input 0 (reshape-like ops), whatever else uses it.
        hidden: bytes of outputs the graph import does not list, kept for the backward.
        workspace: bytes of temporary space the op requests, at given tensor shapes.
    """

    keeps_inputs: bool = True
    keeps_outputs: bool = True
    inplace: tuple[int, ...] = ()
    identity: bool = False
    hidden: SizeFn = _none
    workspace: WorkspaceFn = _none


def _itemsize(graph: Graph, tensor_id: int) -> int:
    return np.dtype(graph.tensor(tensor_id).dtype).itemsize


def _batchnorm_saved_stats(node: Node, graph: Graph) -> int:
    """Saved mean and variance: two vectors of the normalized axis (``axis``, default 1)."""
    data = graph.tensor(node.inputs[0])
    return 2 * data.shape[int(node.attrs.get("axis", 1))] * _itemsize(graph, data.id)


def _im2col_one_image(node: Node, graph: Graph, shapes: Sequence[Shape]) -> int:
    """Column buffer of one image: ``C_in * prod(kernel)`` rows, ``prod(out_spatial)`` columns (MXNet 1.9.1
    ``src/operator/nn/convolution-inl.h:366``, ``col_buffer_size_``; with groups the same product)."""
    data, out = node.inputs[0], node.outputs[0]
    rows = shapes[data][1] * math.prod(node.attrs["kernel"])
    return rows * math.prod(shapes[out][2:]) * _itemsize(graph, data)


def _label_bytes(node: Node, graph: Graph, shapes: Sequence[Shape]) -> int:
    if len(node.inputs) < 2:
        return 0
    return math.prod(shapes[node.inputs[1]]) * _itemsize(graph, node.inputs[1])


_ELEMWISE_BINARY = MemoryRule(keeps_inputs=False, keeps_outputs=False, inplace=(0, 1))
_ELEMWISE_PRODUCT = MemoryRule(keeps_inputs=True, keeps_outputs=False, inplace=(0, 1))
_STRUCTURAL = MemoryRule(keeps_inputs=False, keeps_outputs=False)
_RESHAPE = MemoryRule(keeps_inputs=False, keeps_outputs=False, identity=True)

RULES: dict[str, MemoryRule] = {
    "FullyConnected": MemoryRule(keeps_inputs=True, keeps_outputs=False),
    "Convolution": MemoryRule(keeps_inputs=True, keeps_outputs=False, workspace=_im2col_one_image),
    "Deconvolution": MemoryRule(keeps_inputs=True, keeps_outputs=False),
    "BatchNorm": MemoryRule(keeps_inputs=True, keeps_outputs=False, hidden=_batchnorm_saved_stats),
    "Pooling": MemoryRule(keeps_inputs=True, keeps_outputs=True),
    "Embedding": MemoryRule(keeps_inputs=True, keeps_outputs=False),
    "SoftmaxOutput": MemoryRule(keeps_inputs=False, keeps_outputs=True, inplace=(0,), workspace=_label_bytes),
    "elemwise_add": _ELEMWISE_BINARY, "elemwise_sub": _ELEMWISE_BINARY,
    "_plus": _ELEMWISE_BINARY, "_Plus": _ELEMWISE_BINARY, "_minus": _ELEMWISE_BINARY,
    "elemwise_mul": _ELEMWISE_PRODUCT, "_mul": _ELEMWISE_PRODUCT, "_Mul": _ELEMWISE_PRODUCT,
    "SliceChannel": _STRUCTURAL, "split": _STRUCTURAL, "Concat": _STRUCTURAL, "concat": _STRUCTURAL,
    "_zeros": _STRUCTURAL, "zeros_like": _STRUCTURAL, "_copy": _STRUCTURAL,
    "Reshape": _RESHAPE, "reshape": _RESHAPE, "Flatten": _RESHAPE, "flatten": _RESHAPE,
}
"""MXNet op name -> :class:`MemoryRule` (Activation is resolved per ``act_type`` in :func:`rule_for`)."""

_ACTIVATION_RELU = MemoryRule(keeps_inputs=False, keeps_outputs=True, inplace=(0,))
_ACTIVATION_SMOOTH = MemoryRule(keeps_inputs=True, keeps_outputs=True, inplace=(0,))
_UNKNOWN = MemoryRule()


def rule_for(node: Node) -> MemoryRule:
    """The memory rule of one node; relu keeps only its output, sigmoid/tanh also their input (MXNet 1.9)."""
    if node.op == "Activation":
        return _ACTIVATION_RELU if node.attrs.get("act_type") == "relu" else _ACTIVATION_SMOOTH
    rule = RULES.get(node.op)
    if rule is None:
        log.debug("no memory rule for operator %s (node %s); keeping all its tensors", node.op, node.name)
        return _UNKNOWN
    return rule


# ---------------------------------------------------------------------------------------------------------
# The schedule simulation.

class _Buffers:
    """Reference-counted buffers drawn from a static pool the way MXNet's memory planner draws them.

    A request for ``n`` bytes takes the smallest free block of at least ``n`` and at most
    ``MATCH_RANGE * n`` bytes, else the largest free block of at least ``n / MATCH_RANGE`` bytes (which
    grows to ``n``), else a new block. Blocks are never returned to the system: the pool's size is the
    sum of every block's largest size (``pool_bytes``).
    """

    MATCH_RANGE = 16   # MXNet's NNVM_EXEC_MATCH_RANGE default

    def __init__(self) -> None:
        self.block_of: list[int] = []      # buffer -> pool block
        self.refs: list[int] = []          # buffer -> uses left
        self.block_bytes: list[int] = []   # block -> largest size it served
        self._free: list[tuple[int, int, int]] = []   # (size, release order, block), sorted
        self._released = 0

    def new(self, nbytes: int, refs: int) -> int:
        block = self._request(nbytes)
        self.block_of.append(block)
        self.refs.append(refs)
        return len(self.block_of) - 1

    def release(self, buf: int, count: int = 1) -> None:
        self.refs[buf] -= count
        if self.refs[buf] == 0:
            block = self.block_of[buf]
            self._released += 1
            bisect.insort(self._free, (self.block_bytes[block], self._released, block))

    @property
    def pool_bytes(self) -> int:
        return sum(self.block_bytes)

    def _request(self, nbytes: int) -> int:
        mid = bisect.bisect_left(self._free, (nbytes, -1, -1))
        end = bisect.bisect_right(self._free, (nbytes * self.MATCH_RANGE, math.inf, math.inf))
        begin = bisect.bisect_left(self._free, (nbytes // self.MATCH_RANGE, -1, -1))
        if mid < end:
            pick = mid
        elif mid > begin:
            pick = mid - 1
        else:
            self.block_bytes.append(nbytes)
            return len(self.block_bytes) - 1
        _, _, block = self._free.pop(pick)
        self.block_bytes[block] = max(self.block_bytes[block], nbytes)
        return block


def _needs_grad(graph: Graph) -> list[bool]:
    """Per tensor: is it a parameter or computed from one (so its gradient is part of backward)?"""
    needs = [t.role is Role.PARAM for t in graph.tensors]
    for node in graph.nodes:
        if any(needs[i] for i in node.inputs):
            for o in node.outputs:
                needs[o] = True
    return needs


def _planned_activation_bytes(graph: Graph) -> int:
    """Bytes of MXNet's static plan for activations and activation gradients (forward, then backward)."""
    rules = [rule_for(n) for n in graph.nodes]
    needs = _needs_grad(graph)
    has_backward = [any(needs[i] for i in n.inputs) for n in graph.nodes]
    planned = [t.role is Role.ACTIVATION for t in graph.tensors]   # variables live outside the plan

    # Uses of each forward entry over the whole training graph: forward consumers, the producer's and the
    # consumers' backward steps that read it, and the graph's heads (kept to the end).
    uses = [0] * len(graph.tensors)
    for node, rule, bwd in zip(graph.nodes, rules, has_backward):
        for i in dict.fromkeys(node.inputs):
            uses[i] += 1 + (bwd and rule.keeps_inputs)
        for o in node.outputs:
            uses[o] += bwd and rule.keeps_outputs
    for h in graph.heads:
        uses[h] += 1

    bufs = _Buffers()
    owner: dict[int, int] = {}            # planned tensor id -> buffer
    hidden: dict[int, int] = {}           # node id -> buffer of its hidden outputs
    for node, rule, bwd in zip(graph.nodes, rules, has_backward):
        taken: set[int] = set()
        fresh = []
        for o in node.outputs:
            out = graph.tensor(o)
            src = _alias_source(graph, node, rule, out.id, bufs, owner, planned, uses, taken)
            if src is None:
                owner[o] = bufs.new(out.nbytes, uses[o])
                fresh.append(o)
            elif planned[src]:
                owner[o] = owner[src]
                bufs.refs[owner[src]] += uses[o]
        if bwd and rule.hidden(node, graph):
            hidden[node.id] = bufs.new(rule.hidden(node, graph), 1)
        for i in dict.fromkeys(node.inputs):
            if i in owner:
                bufs.release(owner[i])
        for o in fresh:                             # outputs nothing reads are freed at once
            if uses[o] == 0:
                bufs.release(owner[o], 0)

    # Backward. grads[t]: buffers of the gradient contributions to activation t received so far.
    grads: dict[int, list[int]] = {}
    for node, rule, bwd in zip(reversed(graph.nodes), reversed(rules), reversed(has_backward)):
        if not bwd:
            continue
        ograds = []
        for o in node.outputs:
            parts = grads.pop(o, [])
            for extra in parts[1:]:                 # sum in place into the first contribution
                bufs.release(extra)
            if parts:
                ograds.append(parts[0])
        # The input gradient of an in-place op may take its output gradient's buffer.
        reusable = list(ograds) if rule.inplace or rule.identity else []
        for i in dict.fromkeys(node.inputs):
            if not (needs[i] and planned[i]):
                continue
            if reusable:
                buf = reusable.pop(0)
                bufs.refs[buf] += 1
            else:
                buf = bufs.new(graph.tensor(i).nbytes, 1)
            grads.setdefault(i, []).append(buf)
        for buf in ograds:
            bufs.release(buf)
        kept = (node.inputs if rule.keeps_inputs else ()) + (node.outputs if rule.keeps_outputs else ())
        for t in dict.fromkeys(kept):
            if t in owner:
                bufs.release(owner[t])
        if node.id in hidden:
            bufs.release(hidden[node.id])
    return bufs.pool_bytes


def _alias_source(graph: Graph, node: Node, rule: MemoryRule, out: int, bufs: _Buffers, owner: dict[int, int],
                  planned: list[bool], uses: list[int], taken: set[int]) -> int | None:
    """The input whose storage output ``out`` reuses (identity or in-place), or None for a new buffer."""
    if len(node.outputs) != 1 or not node.inputs:
        return None
    if rule.identity:
        return node.inputs[0]
    size = graph.tensor(out).size
    for k in rule.inplace:
        if k >= len(node.inputs) or k in taken:
            continue
        src = node.inputs[k]
        if (planned[src] and graph.tensor(src).size == size and bufs.refs[owner[src]] == 1
                and uses[out] > 0):
            taken.add(k)
            return src
    return None


def estimate_training_memory(graph: Graph, optimizer: str = "sgd_mom") -> MemoryEstimate:
    """Estimates the bytes one device needs to train ``graph`` (model in the module docstring).

    Args:
        graph: the forward graph (with its loss head) as imported.
        optimizer: ``"sgd_mom"`` (one momentum buffer per parameter) or ``"sgd"`` (no state).

    Returns:
        The estimate by category.

    Raises:
        ValueError: if the optimizer is not one of :data:`OPTIMIZER_STATES`.
    """
    if optimizer not in OPTIMIZER_STATES:
        raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZER_STATES)}, got {optimizer!r}")
    params = graph.param_bytes
    inputs = sum(t.nbytes for t in graph.tensors if t.role in (Role.DATA, Role.LABEL))
    return MemoryEstimate(
        params=params,
        grads=params,
        optimizer=OPTIMIZER_STATES[optimizer] * params,
        aux=sum(t.nbytes for t in graph.by_role(Role.AUX)),
        activations=inputs + _planned_activation_bytes(graph),
        workspace=largest_workspace(graph),
    )


def largest_workspace(graph: Graph, shapes: Sequence[Shape] | None = None) -> int:
    """The largest temporary space any op of ``graph`` requests, with tensor ``t`` at ``shapes[t]`` (default:
    its whole shape; under a plan, one device's shard shapes): the size of the temporary-space buffer one
    context's ops share (see the module docstring)."""
    shapes = [t.shape for t in graph.tensors] if shapes is None else shapes
    return max((rule_for(n).workspace(n, graph, shapes) for n in graph.nodes), default=0)


CPU_TEMP_COPIES = 4
"""MXNet's default number of copies of the CPU temporary-space pool (``MXNET_CPU_TEMP_COPY``,
``src/resource.cc:90``)."""


def cpu_temp_copies() -> int:
    """The copies of the CPU temporary-space pool this process's MXNet makes: ``MXNET_CPU_TEMP_COPY`` (MXNet reads
    it once, when its resource manager starts), else :data:`CPU_TEMP_COPIES`."""
    try:
        return max(1, int(os.environ.get("MXNET_CPU_TEMP_COPY", CPU_TEMP_COPIES)))
    except ValueError:
        return CPU_TEMP_COPIES


def device0_temp_bytes(workers: int, workspace: int, copies: int | None = None) -> int:
    """Bytes device 0 holds on CPU contexts beyond its own share: the other contexts' temporary space.

    MXNet 1.9.1 keeps one pool of ``copies`` temporary-space buffers for *every* CPU context, allocated on
    ``Context::CPU()``, i.e. cpu(0) (``src/resource.cc:101-102``; a CPU request ignores the context's device
    id, ``src/resource.cc:129-132``), while each GPU gets a pool of its own (``src/resource.cc:145-148``).
    An executor hands each context the next buffer round-robin (``src/resource.cc:283-291``) and all that
    context's ops share it (``src/executor/attach_op_resource_pass.cc:65-73``); a buffer grows to its largest
    request and is never shrunk (``src/resource.cc:67-73``). So with ``workers`` contexts whose ops each
    request at most ``workspace`` bytes, cpu(0) holds ``min(workers, copies)`` such buffers: its own, counted
    in its ``workspace``, and ``min(workers, copies) - 1`` more.
    """
    copies = cpu_temp_copies() if copies is None else copies
    return max(0, min(workers, copies) - 1) * workspace

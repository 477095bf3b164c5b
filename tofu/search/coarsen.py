"""Coarsening (PAPER.md, "Search"): ties tensors and ops that must share one partition.

Input: a :class:`~tofu.graph.ir.Graph`. Output: :class:`Coarsening`, a group id per tensor and per op.

1. A tensor and its gradient share a partition: implicit, the cost model charges both (cost.py).
2. Consecutive element-wise ops merge: a unary element-wise op (relu, sigmoid, dropout, scalar arithmetic;
   one input of the output's shape, every split reading exactly the worker's box) ties its input and output
   tensors and leaves the search, its split following theirs at no cost.
3. The unrolled timesteps of one RNN layer merge: ops of one layer at the same position of every step (the
   same name but for the step, the same operator, attributes and shapes) form one op group, and their
   inputs and outputs one tensor group per position (step t's input x_t with every other step's).
4. Parallel projections merge: ops with the same operator, attributes and shapes that read the same
   activation at the same position, all their other inputs being parameters (attention's q, k and v), form
   one op group, tied as timesteps are. They split alike, so each worker fetches the activation's piece
   once for all of them, as the runtime sends it (the cost model charges a tied group's read once).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from tofu.analysis.strategies import SplitDim, strategies
from tofu.analysis.views import runnable
from tofu.errors import TofuError
from tofu.graph.ir import Graph, Node, Role
from tofu.tdl.describe import describe

_STEP = re.compile(r"_t\d+(?=_|$)")


@dataclass(frozen=True)
class Coarsening:
    tensor_group: tuple[int, ...]        # per tensor id
    op_group: tuple[int, ...]            # per node id; -1: a merged element-wise op (follows its tensors)
    n_tensor_groups: int
    n_op_groups: int

    def stats(self, graph: Graph) -> dict[str, int]:
        return {"ops": len(graph.nodes), "tensors": len(graph.tensors), "op_groups": self.n_op_groups,
                "tensor_groups": self.n_tensor_groups,
                "merged_elementwise": sum(1 for g in self.op_group if g < 0)}


def coarsen(graph: Graph, elementwise: bool = True, timesteps: bool = True, siblings: bool = True) -> Coarsening:
    """Groups the graph's tensors and ops (each rule can be switched off, for measuring its effect)."""
    parent = list(range(len(graph.tensors)))

    def find(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    def union(a: int, b: int) -> None:
        ra, rb = find(a), find(b)
        if ra != rb and graph.tensors[ra].shape == graph.tensors[rb].shape:
            parent[max(ra, rb)] = min(ra, rb)

    merged = set()
    if elementwise:
        for node in graph.nodes:
            if is_elementwise(graph, node):
                merged.add(node.id)
                union(node.inputs[0], node.outputs[0])
    op_key: dict[tuple, int] = {}
    op_group = []
    for node in graph.nodes:
        if node.id in merged:
            op_group.append(-1)
            continue
        key: tuple = (node.id,)
        if timesteps and node.step is not None:
            key = (node.layer, _STEP.sub("_t*", node.name), _signature(graph, node))
        elif siblings and (shared := _shared_read(graph, node)) is not None:
            key = ("siblings", shared, _signature(graph, node))
        op_group.append(op_key.setdefault(key, len(op_key)))
    if timesteps or siblings:      # tie each later member's inputs and outputs to the first member's
        first_member: dict[int, Node] = {}
        for node in graph.nodes:
            g = op_group[node.id]
            if g < 0:
                continue
            if g in first_member:
                first = first_member[g]
                for a, b in zip(first.outputs + first.inputs, node.outputs + node.inputs):
                    union(a, b)
            else:
                first_member[g] = node
    roots = sorted({find(t.id) for t in graph.tensors})
    index = {r: i for i, r in enumerate(roots)}
    return Coarsening(tuple(index[find(t.id)] for t in graph.tensors), tuple(op_group), len(roots), len(op_key))


def _shared_read(graph: Graph, node: Node) -> tuple[int, int] | None:
    """(position, tensor) of the one activation ``node`` reads when every other input is a parameter."""
    activations = [(p, t) for p, t in enumerate(node.inputs) if graph.tensors[t].role is not Role.PARAM]
    return activations[0] if len(activations) == 1 and len(node.inputs) > 1 else None


def _signature(graph: Graph, node: Node) -> tuple:
    return (node.op, node.attrs, tuple(graph.tensors[t].shape for t in node.inputs),
            tuple(graph.tensors[t].shape for t in node.outputs))


def is_elementwise(graph: Graph, node: Node) -> bool:
    """One input of the output's shape, and every output split of the op reads exactly the worker's box and is
    runnable (MXNet's kernel on the shard equals the op: ``_contrib_div_sqrt_dim`` reads only the worker's box
    but its constant follows the last extent, so its last-axis split is refused and it is not merged)."""
    if len(node.inputs) != 1 or len(node.outputs) != 1:
        return False
    shape = graph.tensors[node.outputs[0]].shape
    if graph.tensors[node.inputs[0]].shape != shape:
        return False
    return _elementwise(node.op, node.attrs, shape)


@lru_cache(maxsize=1024)
def _elementwise(op, attrs, shape) -> bool:
    try:
        desc = describe(op, attrs, [shape], [shape])
    except TofuError:
        return False
    found = set()
    for s in strategies(desc, 2):
        if s.kind != "output" or s.exchanges or not isinstance(s.outputs[0], SplitDim):
            continue
        if all(ins[0] is not None and ins[0].bounds == outs[0].bounds and ins[0].pad == outs[0].pad
               for ins, outs in zip(s.input_regions, s.output_regions)) and runnable(op, attrs, desc, s):
            found.add(s.outputs[0].dim)
    return found == {d for d, n in enumerate(shape) if n % 2 == 0}

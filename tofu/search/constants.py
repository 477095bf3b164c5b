"""Constants of a training graph: the tensors that depend on no input, parameter, state or random draw.

Input: a :class:`~tofu.graph.ir.Graph`. Output: the ids of its constant tensors (the *constant cone*).

A tensor is constant when it is the output of an op whose inputs are all constant (an op without inputs, such
as ``_arange``, ``_zeros`` or ``_ones``, included), unless the op draws random numbers, is a loss, or
exchanges statistics through an expansion; variables (data, labels, parameters, auxiliary states) never are.
A GPT block's causal mask (``arange`` -> reshapes -> ``broadcast_greater`` -> scaling) and an RNN's zero
begin states are constant. A graph output is not (it is handed out as computed).

A constant is never sent between devices: each device that reads a region of it computes that region itself
(:mod:`tofu.rewrite.apply_plan` replays, on the reading device, the calls of the producing ops whose pieces
the region meets, their own constant inputs likewise), so the cost model charges 0 bytes for reading or
converting it (:mod:`tofu.search.cost`) and the recount of a plan's copies skips it (:mod:`tofu.search.copies`).
"""
from __future__ import annotations

from tofu import registry
from tofu.graph.ir import LOSS_OPS, Graph, Node

_RANDOM_PREFIXES = ("_random_", "_sample_", "random_", "sample_", "_npi_random", "_npi_bernoulli")
_RANDOM_OPS = frozenset({"Dropout", "_shuffle", "shuffle"})


def is_random(node: Node) -> bool:
    """Whether ``node`` draws random numbers (a sampler, Dropout, a randomized leaky ReLU)."""
    if node.op in _RANDOM_OPS or (node.op.startswith(_RANDOM_PREFIXES) and not node.op.startswith("_random_pdf_")):
        return True         # (a density of given samples draws nothing)
    return node.op == "LeakyReLU" and node.attrs.get("act_type") == "rrelu"


_CACHE: dict[int, tuple[Graph, frozenset[int]]] = {}


def constant_tensors(graph: Graph) -> frozenset[int]:
    """The ids of ``graph``'s constant tensors (see the module docstring), computed once per graph."""
    hit = _CACHE.get(id(graph))
    if hit is not None and hit[0] is graph:
        return hit[1]
    const: set[int] = set()
    heads = set(graph.heads)
    for node in graph.nodes:
        if (all(t in const for t in node.inputs) and node.op not in LOSS_OPS and not is_random(node)
                and not heads.intersection(node.outputs) and registry.expansion(node.op) is None):
            const.update(node.outputs)
    if len(_CACHE) > 64:
        _CACHE.clear()
    found = frozenset(const)
    _CACHE[id(graph)] = (graph, found)
    return found


def constant_nodes(graph: Graph) -> frozenset[int]:
    """The ids of the nodes whose outputs are constant (they run only where a reader needs them)."""
    const = constant_tensors(graph)
    return frozenset(n.id for n in graph.nodes if n.outputs and n.outputs[0] in const)

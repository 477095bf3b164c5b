"""Cost model (PAPER.md, "Search"; DESIGN.md, decisions): bytes moved per training iteration by one cut.

Input: the graph, its coarsening, every tensor's shape at this step of the recursion, the cut's width k.
Output: a :class:`~tofu.search.problem.CutProblem`.

Worker w holds H_w(t, d), the w-th of k equal slices of tensor t along its chosen dimension d (the whole
tensor if t is replicated). An op run with strategy s needs, on worker w, the region R_w(s, i) of input i
(tofu.analysis) and produces P_w(s, o) of output o. With |.| counting bytes and g(t) = 1 when t has a
gradient (parameters and what is computed from them; not data, labels, auxiliary states nor what is computed
from those alone, as a reshaped label or an RNN's zero begin state):

    fetch       sum_w |R_w(s, i) \\ H_w(i, d_i)|                            x (1 + g(i))
    replicated  2 (k - 1) / k sum_w |R_w(s, i)| g(i)   (the gradient parts of a replicated input all-reduced)
    convert     sum_w |P_w(s, o) \\ H_w(o, d_o)|   (output split along d')  x (1 + g(o))
    reduce      (k - 1) |o|                        (partial outputs)        x (1 + g(o))
    replicate   (k - 1) |o| g(o)                   (backward: all-gather of the output's gradient)
    exchange    2 (k - 1) |S|                      (all-reduce of a partial statistic S) x (1 + g(o))

Backward is the adjoint of forward: a fetched input region becomes a reduced gradient region, a
reduce-scatter of partial outputs becomes an all-gather of the output gradient, a conversion is converted
back. Tied ops (the timesteps of an RNN layer) that read the same tensor fetch it once per iteration (and
reduce its gradient once), as a worker keeps what it fetched. The costs depend on a strategy and one
tensor's choice each, so they are separable (problem.py). Strategies that cannot be run (by MXNet's kernel on
the shards, or by the op's declared expansion when the strategy exchanges statistics) are excluded: the
search finds them by checking what it chooses (``recursive._solve_runnable``) and passes them as
``excluded``; when every strategy of an op is excluded, each output split is computed whole on every worker.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from tofu.analysis.strategies import PartialSum, PartitionStrategy, Region, SplitDim, strategies
from tofu.analysis.views import NodeView, kernel_call, next_view, runnable  # noqa: F401 (re-exported)
from tofu.errors import SearchError, TofuError
from tofu.graph.ir import Graph, Node
from tofu.search.coarsen import Coarsening
from tofu.search.problem import CutProblem, OpGroup, TensorGroup
from tofu.tdl.describe import describe

Shape = tuple[int, ...]


@dataclass(frozen=True)
class CutIndex:
    """How a CutProblem maps back to the graph: the strategies of every op at this step."""

    node_strategies: tuple[tuple[PartitionStrategy, ...], ...]   # per node id (empty for merged ops)
    group_nodes: tuple[tuple[int, ...], ...]                     # per op group: its node ids


def choices(shape: Shape, k: int) -> tuple[int | None, ...]:
    """Dimensions a tensor can be split k ways along (None alone: it must be replicated)."""
    dims = tuple(d for d, n in enumerate(shape) if n % k == 0 and n >= k)
    return dims or (None,)


def build_cut(graph: Graph, coarse: Coarsening, shapes: Sequence[Shape], views: Sequence[NodeView], k: int,
              runnable_only: bool = True, excluded: frozenset = frozenset()) -> tuple[CutProblem, CutIndex]:
    """The one-cut problem of ``graph`` for ``k`` workers, tensors held at ``shapes``, ops seen as ``views``.

    ``excluded`` holds the :func:`strategy_key` of strategies found not runnable (see ``recursive.search``:
    runnability is checked on the strategies a solution chooses, and the cut solved again without the ones
    that fail, which gives the optimum over runnable strategies at a fraction of the checks).

    Raises:
        SearchError: some op cannot be split k ways at these shapes (no strategy applies).
    """
    members: dict[int, list[int]] = {}
    for t in graph.tensors:
        members.setdefault(coarse.tensor_group[t.id], []).append(t.id)
    tgroups = []
    for gid in range(coarse.n_tensor_groups):
        ids = members[gid]
        shape = tuple(shapes[ids[0]])
        tgroups.append(TensorGroup(gid, graph.tensors[ids[0]].name, choices(shape, k),
                                   sum(_nbytes(graph, t, shapes) for t in ids),
                                   tuple(graph.tensors[t].name for t in ids), shape))
    group_nodes: dict[int, list[int]] = {}
    for node in graph.nodes:
        if coarse.op_group[node.id] >= 0:
            group_nodes.setdefault(coarse.op_group[node.id], []).append(node.id)
    order = sorted(group_nodes, key=lambda g: group_nodes[g][0])
    node_strategies: list[tuple[PartitionStrategy, ...]] = [()] * len(graph.nodes)
    ops = []
    for new_id, g in enumerate(order):
        nodes = group_nodes[g]
        const = None
        terms: dict[int, np.ndarray] = {}
        fetched: set[tuple[int, int]] = set()
        names = kinds = produces = None
        for nid in nodes:
            node = graph.nodes[nid]
            options = node_options(graph, node, views[nid], k, runnable_only, excluded)
            node_strategies[nid] = tuple(o.strategy for o in options)
            if const is None:
                const = np.zeros(len(options))
                names = tuple(o.strategy.var for o in options)
                kinds = tuple(o.strategy.kind for o in options)
                produces = tuple(tuple((coarse.tensor_group[t], p.dim if isinstance(p, SplitDim) else None)
                                       for t, p in zip(node.outputs, o.strategy.outputs)) for o in options)
            elif tuple(o.strategy.var for o in options) != names:
                raise SearchError(f"tied ops of group '{graph.nodes[nodes[0]].name}' differ in strategies")
            n_inputs = len(views[nid].inputs)
            for s, o in enumerate(options):
                const[s] += o.const
                for p, (t, per_dim) in enumerate(o.terms):
                    if p < n_inputs and (t, s) in fetched:
                        continue        # a tied op reads the same tensor (an RNN weight): fetched once
                    if p < n_inputs:
                        fetched.add((t, s))
                    tg = coarse.tensor_group[t]
                    row = [per_dim[d] for d in tgroups[tg].choices]
                    terms.setdefault(tg, np.zeros((len(options), len(row))))[s] += row
        ops.append(OpGroup(new_id, graph.nodes[nodes[0]].name, names, kinds, tuple(float(c) for c in const),
                           tuple((t, tuple(tuple(float(v) for v in r) for r in table))
                                 for t, table in terms.items()),
                           produces, nodes[0]))
    problem = CutProblem(k, tuple(tgroups), tuple(ops))
    return problem, CutIndex(tuple(node_strategies), tuple(tuple(group_nodes[g]) for g in order))


def _nbytes(graph: Graph, t: int, shapes: Sequence[Shape]) -> int:
    return math.prod(shapes[t]) * np.dtype(graph.tensors[t].dtype).itemsize


@dataclass(frozen=True)
class Option:
    """One strategy of one op with its costs: a constant, and per touched tensor a cost per dimension
    (index ndim: replicated)."""

    strategy: PartitionStrategy
    const: float
    terms: tuple[tuple[int, dict], ...]


def strategy_key(view: NodeView, s: PartitionStrategy) -> tuple:
    return (view.op, view.attrs, view.in_shapes, view.out_shapes, s.k, s.var, s.kind)


def node_options(graph: Graph, node: Node, view: NodeView, k: int, runnable_only: bool = True,
                 excluded: frozenset = frozenset()) -> tuple[Option, ...]:
    """The strategies ``node`` (seen as ``view``) can use, with their costs; without the excluded ones, and
    when none is left, each output split computed whole on every worker (always runnable)."""
    ids = view.inputs + view.outputs
    grads = tuple(t in graph.with_gradient for t in ids)
    items = tuple(np.dtype(graph.tensors[t].dtype).itemsize for t in ids)
    try:
        found, whole = _costed(view.op, view.attrs, view.in_shapes, view.out_shapes, k, grads, items)
    except TofuError as e:
        raise SearchError(f"node '{node.name}' ({node.op}): {e}") from None
    costed = [c for c in found if not (runnable_only and strategy_key(view, c[0]) in excluded)] or whole
    if not costed:
        raise SearchError(f"node '{node.name}' ({node.op}) cannot be split {k} ways at input shapes "
                          f"{list(view.in_shapes)}: no dimension or strategy divides evenly")
    return tuple(Option(s, const, tuple((ids[p], per_dim) for p, per_dim in enumerate(tables)))
                 for s, const, tables in costed)


def build_runnable_cut(graph: Graph, coarse: Coarsening, shapes: Sequence[Shape], views: Sequence[NodeView],
                       k: int) -> tuple[CutProblem, CutIndex]:
    """:func:`build_cut` with every strategy checked for runnability first (for the reference solvers)."""
    excluded = set()
    for node in graph.nodes:
        if coarse.op_group[node.id] < 0:
            continue
        view = views[node.id]
        desc = describe(view.op, view.attrs, view.in_shapes, view.out_shapes)
        for o in node_options(graph, node, view, k, runnable_only=False):
            if not runnable(view.op, view.attrs, desc, o.strategy):
                excluded.add(strategy_key(view, o.strategy))
    return build_cut(graph, coarse, shapes, views, k, True, frozenset(excluded))


def runnable_options(graph: Graph, node: Node, view: NodeView, k: int) -> tuple[Option, ...]:
    """The options of ``node`` that MXNet can run, checked eagerly (the search checks lazily, with the same
    optimum; see ``recursive._solve_runnable``): when none can, each output split computed whole."""
    options = node_options(graph, node, view, k, runnable_only=False)
    desc = describe(view.op, view.attrs, view.in_shapes, view.out_shapes)
    kept = tuple(o for o in options if runnable(view.op, view.attrs, desc, o.strategy))
    if kept:
        return kept
    excluded = frozenset(strategy_key(view, o.strategy) for o in options)
    return node_options(graph, node, view, k, True, excluded)


@lru_cache(maxsize=65536)
def _costed(op, attrs, ins, outs, k, grads, items):
    """The strategies of one op signature with their costs (shared by all nodes of that signature), and the
    same output splits computed whole on every worker (the fallback when none of them can run)."""
    desc = describe(op, attrs, ins, outs)
    found = strategies(desc, k)
    whole = tuple(_computed_whole(s) for s in found if s.kind == "output")
    return _with_costs(found, ins, outs, k, grads, items), _with_costs(whole, ins, outs, k, grads, items)


def _with_costs(found, ins, outs, k, grads, items):
    result = []
    n_in = len(ins)
    for s in found:
        const = 0.0
        tables = []
        for i, shape in enumerate(ins):
            regions = [w[i] for w in s.input_regions]
            table = {d: _moved(regions, shape, d, k) * items[i] * (1 + grads[i]) for d in range(len(shape))}
            # replicated: reading is free, but the workers' gradient parts are all-reduced
            read = sum(r.size for r in regions if r is not None)
            table[None] = 2 * (k - 1) / k * read * items[i] * grads[i]
            tables.append(table)
        for o, (shape, placement) in enumerate(zip(outs, s.outputs)):
            g, size = grads[n_in + o], math.prod(shape) * items[n_in + o]
            gather = (k - 1) * size * (1 + g)        # every worker needs all of a replicated output
            if isinstance(placement, SplitDim):
                produced = [w[o] for w in s.output_regions]
                table = {d: _moved(produced, shape, d, k) * items[n_in + o] * (1 + g) for d in range(len(shape))}
                tables.append({**table, None: gather})
                continue
            partial = isinstance(placement, PartialSum)
            tables.append({**{d: 0.0 for d in range(len(shape))}, None: gather if partial else 0.0})
            const += (k - 1) * size * ((1 + g) if partial else g)
        for n in s.exchange_elements:          # all-reduce of each partial statistic, and of its gradient
            const += 2 * (k - 1) * n * items[n_in] * (1 + grads[n_in])
        result.append((s, const, tuple(tables)))
    return tuple(result)


def _moved(regions: Sequence[Region | None], shape: Shape, d: int | None, k: int) -> int:
    """Elements of the workers' regions that they do not hold when the tensor is split k ways along d
    (slice w is [w n / k, (w + 1) n / k) rounded down, so uneven extents split as evenly as they can)."""
    total = 0
    for w, r in enumerate(regions):
        if r is None:
            continue
        held = r.size
        if d is not None:
            a, b = r.bounds[d]
            lo, hi = w * shape[d] // k, (w + 1) * shape[d] // k - 1
            overlap = max(0, min(b, hi) - max(a, lo) + 1)
            held = r.size // (b - a + 1) * overlap
        total += r.size - held
    return total


def _computed_whole(s: PartitionStrategy) -> PartitionStrategy:
    """``s``'s output split, computed redundantly: each worker reads whole inputs and keeps its slice
    (MXNet's kernel runs unchanged; named ``var*``)."""
    whole = tuple(None if r is None else Region(tuple((0, n - 1) for n in shape), tuple((0, 0) for _ in shape))
                  for r, shape in zip(s.input_regions[0], s.input_shapes))
    return dataclasses.replace(s, var=s.var + "*", input_regions=tuple(whole for _ in range(s.k)))

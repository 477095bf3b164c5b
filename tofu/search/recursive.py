"""Recursive k-way partitioning (PAPER.md, "Search"): repeated one-cut searches on ever smaller problems.

Input: a Graph, the number of workers k and a one-cut solver. Output: the sequence of cuts.

For k = f_1 f_2 ... f_m (powers of two first, then the other prime factors ascending), step j cuts every
tensor f_j ways inside each of the F_j = f_1 ... f_{j-1} worker groups left by the earlier steps, all groups
making the same choice. After a cut every tensor is held cut along its chosen dimension and every op is its
shard (the attributes and shapes MXNet's kernel runs it with); the groups' shards have the same shapes but
lie at different places against what each group holds (and border groups of a halo split differ), so each
group keeps its own views and held boxes (kept by shard, with each group's origins as a row of an array:
:class:`~tofu.search.groups.Groups`) and step j's cost d_j sums over them. The total communication is

    total = sum_j d_j

which counts every worker's final pieces against its final held boxes (cost.py). A flat search is the
single step f_1 = k. Each step is optimal for itself given the earlier ones; the sequence need not be
optimal over all sequences (a cheap cut can force conversions at later cuts: docs/search.md).
"""
from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

from tofu.analysis.strategies import PartitionStrategy
from tofu.errors import SearchError
from tofu.graph.ir import Graph, Role
from tofu.search.coarsen import Coarsening, coarsen
from tofu.search.cost import (CutIndex, NodeView, build_cut, build_runnable_cut, choices, runnable,
                              signature_strategies, strategy_key)
from tofu.search.dp import solve_dp
from tofu.search.groups import Groups
from tofu.search.problem import CutProblem, CutSolution
from tofu.tdl.describe import describe

log = logging.getLogger(__name__)
Solver = Callable[[CutProblem], CutSolution]
Shape = tuple[int, ...]


def factorize(k: int) -> tuple[int, ...]:
    """``k`` as its prime factors, twos first: 8 -> (2, 2, 2), 12 -> (2, 2, 3).

    Raises:
        SearchError: k < 1.
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise SearchError(f"the number of workers must be a positive integer, got {k!r}")
    factors, n, p = [], k, 2
    while n > 1:
        while n % p == 0:
            factors.append(p)
            n //= p
        p += 1
    return tuple(factors)


@dataclass(frozen=True)
class CutStep:
    """One step of the recursion: its cut width, group multiplicity, problem, solution and what it means
    for every tensor (dimension split) and op (strategy split variable)."""

    factor: int
    groups: int
    problem: CutProblem
    solution: CutSolution
    tensor_dims: tuple[int | None, ...]      # per tensor id
    op_vars: tuple[str, ...]                 # per node id: the split index variable
    shapes: tuple[Shape, ...]                # per tensor id, held at this step (before the cut)
    strategies: tuple[PartitionStrategy | None, ...] = ()   # per node id (None: a merged element-wise op)
    views: tuple[NodeView, ...] = ()         # per node id: the op as the first group sees it
    kept_bytes: float = 0.0                  # forward bytes received for inputs kept for the backward pass

    @property
    def cost(self) -> float:
        return self.solution.cost


def search(graph: Graph, factors: tuple[int, ...], solver: Solver = solve_dp, coarse: Coarsening | None = None,
           runnable_only: bool = True, eager: bool = False, whole_params: bool = False,
           on_step: Callable[[tuple[CutStep, ...]], None] | None = None) -> tuple[CutStep, ...]:
    """Cuts ``graph`` successively ``factors[0]``, ``factors[1]``, ... ways, each cut solved by ``solver``
    (once per cut with ``eager``: every strategy checked for runnability before solving); ``whole_params``:
    parameters may also be held whole by each group's first worker (:func:`~tofu.search.cost.build_cut`);
    ``on_step`` is given the steps fixed so far after each cut (a later cut never changes an earlier one)."""
    coarse = coarse or coarsen(graph)
    shapes = [t.shape for t in graph.tensors]
    groups = Groups.whole(graph)
    steps = []
    for j, f in enumerate(factors):
        inputs = graph.by_role(Role.DATA)       # some input must split, or the cut is meaningless; the others
        if inputs and all(choices(shapes[t.id], f) == (None,) for t in inputs):     # (lengths) may be replicated
            t = max(inputs, key=lambda t: t.size)
            raise SearchError(f"{math.prod(factors)} workers are too many for input '{t.name}' of shape "
                              f"{t.shape}: at cut {j + 1} ({f}-way) no dimension of {shapes[t.id]} "
                              f"divides by {f}")
        if eager and runnable_only:
            problem, index = build_runnable_cut(graph, coarse, shapes, groups, f, whole_params)
            solution = solver(problem)
        else:
            problem, index, solution = _solve_runnable(graph, coarse, shapes, groups, f, solver, runnable_only,
                                                       factors[j + 1] if j + 1 < len(factors) else None,
                                                       whole_params)
        dims = tuple(problem.tensors[coarse.tensor_group[t.id]].choices[solution.x[coarse.tensor_group[t.id]]]
                     for t in graph.tensors)
        group_of = {nid: g for g, nodes in enumerate(index.group_nodes) for nid in nodes}
        chosen = tuple(index.node_strategies[n.id][solution.y[group_of[n.id]]] if n.id in group_of else None
                       for n in graph.nodes)
        op_vars, next_groups = _apply(graph, solution, index, dims, f, last=j == len(factors) - 1)
        log.info("step %d: %d-way cut in %d groups, %.3g bytes", j + 1, f, groups.count, solution.cost)
        steps.append(CutStep(f, groups.count, problem, solution, dims, op_vars, tuple(shapes), chosen,
                             groups.views(0), index.kept_bytes(solution.x, solution.y)))
        groups = next_groups
        shapes = [_cut(s, d, f) for s, d in zip(shapes, dims)]
        if on_step is not None:
            on_step(tuple(steps))
    return tuple(steps)


def _solve_runnable(graph, coarse, shapes, groups, f, solver, runnable_only, next_f=None, whole_params=False):
    """Solves one cut over the strategies MXNet can run. Checking runnability is costly (shape inference and
    a proof per worker), so only the chosen strategies are checked (on every group's view); failing ones are
    excluded and the cut solved again. The result is optimal over the runnable strategies: it is optimal
    over a superset and uses runnable strategies only. Statistics exchanges, which are cheap and so often
    chosen but need an expansion that runs the op's attributes, are checked up front: that costs a lookup.
    When a ``next_f``-way cut follows, a chosen exchange must also leave pieces that cut can split at all (a
    loss on 10 classes split in 5s has no strategy at a second 2-way cut of batch 1: the op is computed whole
    at this cut instead); that needs the pieces' analysis, so it is checked, as runnability, on the chosen ones
    only."""
    excluded: set = set()
    if runnable_only:
        seen = set()
        for node in graph.nodes:
            if coarse.op_group[node.id] < 0:
                continue
            for view in (c.shard for c in groups.classes[node.id]):
                sig = (view.op, view.attrs, view.in_shapes, view.out_shapes)
                if sig in seen:
                    continue
                seen.add(sig)
                for s in signature_strategies(*sig, f):
                    if s.exchanges and not runnable(view.op, view.attrs, _describe(view), s):
                        excluded.add(strategy_key(view, s))
    while True:
        problem, index = build_cut(graph, coarse, shapes, groups, f, runnable_only, frozenset(excluded), whole_params)
        solution = solver(problem)
        if not runnable_only:
            return problem, index, solution
        failing = set()
        checked: set[int] = set()      # a strategy is one value per op signature: every group shares it
        for g, nodes in enumerate(index.group_nodes):
            for c, strategies in zip(index.groups.classes[nodes[0]], index.class_strategies[nodes[0]]):
                s = strategies[solution.y[g]]
                if id(s) in checked:
                    continue
                checked.add(id(s))
                view = c.shard
                if not s.var.endswith("*") and not runnable(view.op, view.attrs, _describe(view), s):
                    # one of this op's strategies fails: check its others now rather than one re-solve each
                    failing |= {strategy_key(view, o) for o in strategies
                                if not runnable(view.op, view.attrs, _describe(view), o)}
                elif next_f and s.exchanges and not _splits_again(view, s, next_f):
                    failing |= {strategy_key(view, o) for o in strategies
                                if o.exchanges and not _splits_again(view, o, next_f)}
        if not failing:
            return problem, index, solution
        log.info("cut %d-way: %d chosen strategies cannot run (%s); solving again without them", f, len(failing),
                 ", ".join(sorted({f"{key[0]}:{key[5]}" for key in failing})))
        excluded |= failing


def _splits_again(view: NodeView, s: PartitionStrategy, f: int) -> bool:
    """Whether the first worker's pieces of ``view`` under ``s`` have a strategy for an ``f``-way cut."""
    ins = tuple(r.shape if r is not None else shape for r, shape in zip(s.input_regions[0], view.in_shapes))
    outs = tuple(r.shape for r in s.output_regions[0])
    return bool(signature_strategies(view.op, view.attrs, ins, outs, f))


def _describe(view: NodeView):
    return describe(view.op, view.attrs, view.in_shapes, view.out_shapes)


def total_cost(steps: tuple[CutStep, ...]) -> float:
    """sum_j d_j: each step's cost is already summed over its groups."""
    return sum(s.cost for s in steps)


def _cut(shape: Shape, d: int | None, f: int) -> Shape:
    if d is None:
        return shape
    return tuple(n // f if i == d else n for i, n in enumerate(shape))


def _apply(graph: Graph, solution: CutSolution, index: CutIndex, dims: tuple[int | None, ...], f: int,
           last: bool = False):
    """Each node's split variable, and (unless ``last``) the worker groups of the next step: member c of
    group G is group G f + c (the first step's groups vary slowest, as
    :func:`tofu.analysis.compose.coordinates` numbers workers), with its own views and held boxes."""
    group_of = {nid: g for g, nodes in enumerate(index.group_nodes) for nid in nodes}
    op_vars = []
    for node in graph.nodes:
        if node.id in group_of:
            op_vars.append(index.node_strategies[node.id][solution.y[group_of[node.id]]].var)
        else:
            d = dims[node.outputs[0]]
            op_vars.append(f"dim{d}" if d is not None else "replicate")
    if last:
        return tuple(op_vars), None
    # per node: its strategy's index, or (a merged element-wise op follows its tensors' split) None and the dim
    plan = [(solution.y[group_of[node.id]], None) if node.id in group_of else (None, dims[node.outputs[0]])
            for node in graph.nodes]
    return tuple(op_vars), index.groups.cut(index.class_strategies, plan, dims, f)

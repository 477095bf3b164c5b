"""Recursive k-way partitioning (PAPER.md, "Search"): repeated one-cut searches on ever smaller problems.

Input: a Graph, the number of workers k and a one-cut solver. Output: the sequence of cuts.

For k = f_1 f_2 ... f_m (powers of two first, then the other prime factors ascending), step j cuts every
tensor f_j ways inside each of the F_j = f_1 ... f_{j-1} identical worker groups left by the earlier steps.
After a cut the groups are identical, so the search continues on one of them: every tensor is held cut
along its chosen dimension, and every op is its shard (the attributes and shapes MXNet's kernel runs it
with, as worker 0 of the group sees them). The total communication is

    total = sum_j F_j d_j          (d_1 + 2 d_2 + 4 d_3 + ... for k = 2^m)

with d_j the optimal cost of step j's cut for one group. A flat search is the single step f_1 = k.
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
from tofu.search.cost import (CutIndex, NodeView, build_cut, build_runnable_cut, choices, next_view,
                              node_options, runnable, strategy_key)
from tofu.search.dp import solve_dp
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
    views: tuple[NodeView, ...] = ()         # per node id: the op as this step's groups see it

    @property
    def cost(self) -> float:
        return self.solution.cost


def search(graph: Graph, factors: tuple[int, ...], solver: Solver = solve_dp, coarse: Coarsening | None = None,
           runnable_only: bool = True, eager: bool = False) -> tuple[CutStep, ...]:
    """Cuts ``graph`` successively ``factors[0]``, ``factors[1]``, ... ways, each cut solved by ``solver``
    (once per cut with ``eager``: every strategy checked for runnability before solving)."""
    coarse = coarse or coarsen(graph)
    shapes = [t.shape for t in graph.tensors]
    views = [NodeView.of(graph, n) for n in graph.nodes]
    steps = []
    groups = 1
    for j, f in enumerate(factors):
        for t in graph.by_role(Role.DATA):       # the model's input must split, or the cut is meaningless
            if choices(shapes[t.id], f) == (None,):
                raise SearchError(f"{math.prod(factors)} workers are too many for input '{t.name}' of shape "
                                  f"{t.shape}: at cut {j + 1} ({f}-way) no dimension of {shapes[t.id]} "
                                  f"divides by {f}")
        if eager and runnable_only:
            problem, index = build_runnable_cut(graph, coarse, shapes, views, f)
            solution = solver(problem)
        else:
            problem, index, solution = _solve_runnable(graph, coarse, shapes, views, f, solver, runnable_only)
        dims = tuple(problem.tensors[coarse.tensor_group[t.id]].choices[solution.x[coarse.tensor_group[t.id]]]
                     for t in graph.tensors)
        group_of = {nid: g for g, nodes in enumerate(index.group_nodes) for nid in nodes}
        chosen = tuple(index.node_strategies[n.id][solution.y[group_of[n.id]]] if n.id in group_of else None
                       for n in graph.nodes)
        op_vars, next_views = _apply(graph, coarse, problem, solution, index, views, dims, f)
        log.info("step %d: %d-way cut, %d groups, %.3g bytes per group", j + 1, f, groups, solution.cost)
        steps.append(CutStep(f, groups, problem, solution, dims, op_vars, tuple(shapes), chosen, tuple(views)))
        views = next_views
        shapes = [_cut(s, d, f) for s, d in zip(shapes, dims)]
        groups *= f
    return tuple(steps)


def _solve_runnable(graph, coarse, shapes, views, f, solver, runnable_only):
    """Solves one cut over the strategies MXNet can run. Checking runnability is costly (shape inference and
    a proof per worker), so only the chosen strategies are checked; failing ones are excluded and the cut
    solved again. The result is optimal over the runnable strategies: it is optimal over a superset and uses
    runnable strategies only. Statistics exchanges, which are cheap and so often chosen but need an expansion
    (SoftmaxOutput has none), are checked up front: that costs a lookup, not a proof."""
    excluded: set = set()
    if runnable_only:
        seen = set()
        for node in graph.nodes:
            view = views[node.id]
            if coarse.op_group[node.id] < 0 or view in seen:
                continue
            seen.add(view)
            for o in node_options(graph, node, view, f, runnable_only=False):
                s = o.strategy
                if s.exchanges and not runnable(view.op, view.attrs, _describe(view), s):
                    excluded.add(strategy_key(view, s))
    while True:
        problem, index = build_cut(graph, coarse, shapes, views, f, runnable_only, frozenset(excluded))
        solution = solver(problem)
        if not runnable_only:
            return problem, index, solution
        failing = set()
        for g, nodes in enumerate(index.group_nodes):
            s = index.node_strategies[nodes[0]][solution.y[g]]
            view = views[nodes[0]]
            if not s.var.endswith("*") and not runnable(view.op, view.attrs, _describe(view), s):
                # one of this op's strategies fails: check its others now rather than one re-solve each
                failing |= {strategy_key(view, o) for o in index.node_strategies[nodes[0]]
                            if not runnable(view.op, view.attrs, _describe(view), o)}
        if not failing:
            return problem, index, solution
        log.info("cut %d-way: %d chosen strategies cannot run (%s); solving again without them", f, len(failing),
                 ", ".join(sorted({f"{key[0]}:{key[5]}" for key in failing})))
        excluded |= failing


def _describe(view: NodeView):
    return describe(view.op, view.attrs, view.in_shapes, view.out_shapes)


def total_cost(steps: tuple[CutStep, ...]) -> float:
    """sum_j F_j d_j."""
    return sum(s.groups * s.cost for s in steps)


def _cut(shape: Shape, d: int | None, f: int) -> Shape:
    if d is None:
        return shape
    return tuple(n // f if i == d else n for i, n in enumerate(shape))


def _apply(graph: Graph, coarse: Coarsening, problem: CutProblem, solution: CutSolution, index: CutIndex,
           views: list[NodeView], dims: tuple[int | None, ...], f: int):
    """Each node's split variable and its view for the next step."""
    op_vars, new_views = [], []
    group_of = {nid: g for g, nodes in enumerate(index.group_nodes) for nid in nodes}
    for node in graph.nodes:
        view = views[node.id]
        if node.id not in group_of:      # a merged element-wise op follows its tensors' split
            d = dims[node.outputs[0]]
            op_vars.append(f"dim{d}" if d is not None else "replicate")
            new_views.append(NodeView(view.op, view.attrs, tuple(_cut(s, d, f) for s in view.in_shapes),
                                      tuple(_cut(s, d, f) for s in view.out_shapes), view.inputs, view.outputs))
            continue
        s = index.node_strategies[node.id][solution.y[group_of[node.id]]]
        op_vars.append(s.var)
        new_views.append(next_view(view, s, f))
    return tuple(op_vars), new_views

"""Reference solvers on Tofu's cost model: enumeration and integer programs, to check the DP and the recursion.

Input: a :class:`~tofu.search.problem.CutProblem` (one cut), or a Graph and k (all k-way cut sequences).
Output: a :class:`~tofu.search.problem.CutSolution`, or a :class:`KWayOptimum`.

One cut (problem.py):  min_{x, y} cost(x, y) = sum_g [ const[g][y_g] + sum_t T_gt[y_g][x_t] ].

- :func:`brute_force` enumerates every x (the best y_g given x is per op, costs being separable).
- :func:`solve_ilp` solves it as a 0-1 program (formulation in its docstring).

All sequences of cuts, k = f_1 ... f_m (recursive.py): the recursion chooses, step after step, a cut of one
worker groups' problem, whose shapes, op views and held boxes follow from the earlier cuts, and pays sum_j d_j.

- :func:`brute_force_recursive` walks the whole tree of cut sequences (every assignment at every step).
- :func:`kway_problem` writes the same space as ONE cut problem over *sequences*, which any exact one-cut
  solver minimises (:func:`kway_ilp` with the ILP, or ``solve_dp``); see its docstring for why it is exact.
- :func:`replay` runs the recursion with given cuts forced, so its own ``total_cost`` prices them.
"""
from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.optimize import Bounds, LinearConstraint, milp

from tofu.analysis.strategies import SplitDim
from tofu.errors import SearchError
from tofu.graph.ir import Graph
from tofu.search.coarsen import Coarsening, coarsen
from tofu.analysis.compose import held_box
from tofu.search.cost import (GroupView, NodeView, build_cut, build_runnable_cut, choices, next_view, node_options,
                             not_runnable)
from tofu.search.problem import CutProblem, CutSolution, OpGroup, TensorGroup
from tofu.search.groups import slice_box
from tofu.search.recursive import CutStep, _cut, factorize, search

log = logging.getLogger(__name__)
Shape = tuple[int, ...]

BRUTE_FORCE_LIMIT = 2_000_000
RECURSIVE_LIMIT = 1_000_000


# ---------------------------------------------------------------------------------------------- one cut

def brute_force(p: CutProblem, limit: int = BRUTE_FORCE_LIMIT) -> CutSolution:
    """The minimum of ``p.cost`` by enumerating every choice of the tensor groups that some op touches.

    For each x, min_y cost(x, y) = sum_g min_s c_g(s; x) (separable), evaluated for all x at once as an
    array with one axis per touched tensor group. Untouched tensor groups cost nothing and take choice 0.
    Ties break towards the lexicographically smallest x, then the lowest strategy.

    Raises:
        SearchError: more than ``limit`` assignments, or an op group without strategies.
    """
    touched = sorted({t for g in p.ops for t in g.tensors()})
    sizes = tuple(len(p.tensors[t].choices) for t in touched)
    space = math.prod(sizes)
    if space > limit:
        raise SearchError(f"brute force: {space:.3g} assignments exceed the limit {limit:.3g}")
    axis = {t: i for i, t in enumerate(touched)}
    total = np.zeros(sizes)
    for g in p.ops:
        if not g.strategies:
            raise SearchError(f"op group '{g.name}' has no strategy for {p.k} workers")
        best = None
        for s in range(len(g.strategies)):
            c = np.full(sizes, g.const[s])
            for t, table in g.terms:
                shape = [1] * len(sizes)
                shape[axis[t]] = sizes[axis[t]]
                c = c + np.asarray(table[s], dtype=float).reshape(shape)
            best = c if best is None else np.minimum(best, c)
        total += best
    at = np.unravel_index(int(np.argmin(total)), sizes) if sizes else ()
    x = [0] * len(p.tensors)
    for t, c in zip(touched, at):
        x[t] = int(c)
    y = tuple(min(range(len(g.strategies)), key=lambda s: p.op_cost(g, s, x)) for g in p.ops)
    return CutSolution(tuple(x), y, p.cost(x, y))


def solve_ilp(p: CutProblem, time_limit: float | None = None, tight: bool = False,
              require_optimal: bool = False) -> CutSolution:
    """The minimum of ``p.cost`` as a 0-1 integer program (scipy's HiGHS ``milp``).

    With binary x_{t,c} (tensor group t takes choice c) and y_{g,s} (op group g takes strategy s), and one
    continuous z_{g,s,t,c} per entry of every aggregated table T_gt (terms on the same (g, t) summed):

        min   sum_{g,s} (const[g][s] + sum_t m_gts) y_{g,s} + sum_{g,t,s,c} (T_gt[s][c] - m_gts) z_{g,s,t,c}
        s.t.  sum_c x_{t,c} = 1                     for every t
              sum_s y_{g,s} = 1                     for every g
              z_{g,s,t,c} >= y_{g,s} + x_{t,c} - 1  for every entry with T_gt[s][c] > m_gts
              z >= 0,  x, y in {0, 1}

    where m_gts = min_c T_gt[s][c]. Since sum_c x_{t,c} = 1, T_gt[y_g][x_t] = m_gts y_{g,s} + sum_c (T - m)
    y_{g,s} x_{t,c} summed over s, and the product y x is linearised as in Alpa: a minimisation with
    coefficients T - m >= 0 sets z = max(0, y + x - 1) = y x for binary x, y. Entries equal to their row's
    minimum need no z, and a tensor group with one choice adds its table to y's coefficient directly.

    ``tight`` replaces the linking rows, for every (g, t) with more than one choice, by the marginals of
    the local polytope (z for every entry, objective T_gt[s][c] z_{g,s,t,c}):

              sum_c z_{g,s,t,c} = y_{g,s}  for every s,      sum_s z_{g,s,t,c} = x_{t,c}  for every c

    which force z = y x for binary x, y as well, and whose LP relaxation is much stronger (exact on trees).
    Both are exact.

    Args:
        p: the cut problem.
        time_limit: seconds for HiGHS; on expiry the best solution found is returned (a warning is logged).
        tight: use the marginal constraints instead of the linking inequalities.

    Returns:
        The solution, with ``cost`` recomputed by ``p.cost``.

    Raises:
        SearchError: an op group has no strategy, or HiGHS finds no solution in time.
    """
    xo, n = [], 0
    for t in p.tensors:
        xo.append(n)
        n += len(t.choices)
    yo = []
    for g in p.ops:
        if not g.strategies:
            raise SearchError(f"op group '{g.name}' has no strategy for {p.k} workers")
        yo.append(n)
        n += len(g.strategies)
    n_xy = n
    obj = [np.zeros(n_xy)]
    rows, cols, vals, lower, upper = [], [], [], [], []
    n_rows = 0

    def add(r: np.ndarray, c: np.ndarray, v: float) -> None:
        rows.append(r)
        cols.append(c)
        vals.append(np.full(len(r), v))

    for g in p.ops:
        ys = yo[g.id] + np.arange(len(g.strategies))
        obj[0][ys] += g.const
        for t, table in _aggregate(g).items():
            xs = xo[t] + np.arange(table.shape[1])
            if table.shape[1] == 1:
                obj[0][ys] += table[:, 0]
                continue
            if tight:
                s_idx, c_idx = np.indices(table.shape).reshape(2, -1)
                z = n + np.arange(table.size)
                obj.append(table.ravel())
                n_s, n_c = table.shape
                add(n_rows + s_idx, z, 1.0)
                add(n_rows + np.arange(n_s), ys, -1.0)
                add(n_rows + n_s + c_idx, z, 1.0)
                add(n_rows + n_s + np.arange(n_c), xs, -1.0)
                lower.append(np.zeros(n_s + n_c))
                upper.append(np.zeros(n_s + n_c))
            else:
                m = table.min(axis=1)
                obj[0][ys] += m
                excess = table - m[:, None]
                s_idx, c_idx = np.nonzero(excess > 0)
                z = n + np.arange(len(s_idx))
                obj.append(excess[s_idx, c_idx])
                r = n_rows + np.arange(len(s_idx))
                add(r, z, 1.0)
                add(r, ys[s_idx], -1.0)
                add(r, xs[c_idx], -1.0)
                lower.append(np.full(len(r), -1.0))
                upper.append(np.full(len(r), np.inf))
            n += len(z)
            n_rows += len(lower[-1])
    for offset, count in [(xo[t.id], len(t.choices)) for t in p.tensors] + \
                         [(yo[g.id], len(g.strategies)) for g in p.ops]:      # one-hot rows
        add(np.full(count, n_rows), offset + np.arange(count), 1.0)
        lower.append(np.ones(1))
        upper.append(np.ones(1))
        n_rows += 1
    a = sp.csr_array((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(n_rows, n))
    integrality = np.concatenate([np.ones(n_xy), np.zeros(n - n_xy)])
    options = {} if time_limit is None else {"time_limit": float(time_limit)}
    res = milp(np.concatenate(obj), constraints=LinearConstraint(a, np.concatenate(lower), np.concatenate(upper)),
               integrality=integrality, bounds=Bounds(0, 1), options=options)
    if res.x is None:
        raise SearchError(f"ILP: no solution ({res.message})")
    if res.status != 0:
        if require_optimal:
            raise SearchError(f"ILP time limit reached before proving optimality ({res.message})")
        log.warning("ILP stopped before proving optimality: %s", res.message)
    x = tuple(int(np.argmax(res.x[xo[t.id]:xo[t.id] + len(t.choices)])) for t in p.tensors)
    y = tuple(int(np.argmax(res.x[yo[g.id]:yo[g.id] + len(g.strategies)])) for g in p.ops)
    return CutSolution(x, y, p.cost(x, y))


def _aggregate(g: OpGroup) -> dict[int, np.ndarray]:
    """T_gt per tensor group, repeated terms summed."""
    out: dict[int, np.ndarray] = {}
    for t, table in g.terms:
        arr = np.asarray(table, dtype=float)
        out[t] = arr if t not in out else out[t] + arr
    return out


# ------------------------------------------------------------------------------------- sequences of cuts

@dataclass(frozen=True)
class KWayOptimum:
    """A sequence of cuts with its cost: per step, each tensor group's dimension and each op group's strategy
    index (into that step's options), the step's cost d_j (all its worker groups), and total = sum_j d_j."""

    factors: tuple[int, ...]
    total: float
    step_costs: tuple[float, ...]
    tensor_dims: tuple[tuple[int | None, ...], ...]     # [step][tensor group]
    op_strategies: tuple[tuple[int, ...], ...]          # [step][op group]


def recursive_sequences(steps: Sequence[CutStep], coarse: Coarsening) -> KWayOptimum:
    """The plan of :func:`tofu.search.recursive.search` in :class:`KWayOptimum` form."""
    first = {}
    for t, g in enumerate(coarse.tensor_group):
        first.setdefault(g, t)
    dims = tuple(tuple(s.tensor_dims[first[g]] for g in range(coarse.n_tensor_groups)) for s in steps)
    return KWayOptimum(tuple(s.factor for s in steps), float(sum(s.cost for s in steps)),
                       tuple(float(s.cost) for s in steps), dims, tuple(tuple(s.solution.y) for s in steps))


def brute_force_recursive(graph: Graph, k: int, coarse: Coarsening | None = None,
                          limit: int = RECURSIVE_LIMIT, runnable_only: bool = True,
                          step_optimal: bool = False) -> KWayOptimum:
    """The cheapest sequence of cuts of ``graph`` for k = f_1 ... f_m workers, by walking the recursion tree.

    A node of the tree is a state of :func:`tofu.search.recursive.search` before step j: every tensor's held
    shape, and every worker group's op views and held boxes. Its children are all assignments (x, y) of that
    step's :func:`~tofu.search.cost.build_cut` problem, each leading to the state the recursion would reach
    (tensors cut along x, ops seen through ``next_view`` of y by every member). With d_j(x, y) the step's
    cost (over all its groups),

        V_j(state) = min_{x, y} d_j(x, y) + V_{j+1}(next(state, x, y)),    V_{m+1} = 0,

    so V_1 = min over every sequence of sum_j d_j. Two exact reductions keep the tree small: at the last
    step V_m is the one-cut optimum (:func:`brute_force`); and an op group's strategies with the same next
    views for all its ops in every group lead to the same subtrees, so only the cheapest of them given x is
    expanded. Equal states are evaluated once (merged element-wise ops cost nothing, so their views are not
    carried). Steps where some op cannot be split are dead ends (infinite cost).

    With ``step_optimal``, only assignments that are optimal for their own step (d_j(x, y) equal to the
    step's minimum; costs are sums of whole bytes, so equality is exact) are expanded: the best plan that
    :func:`~tofu.search.recursive.search` can return under *some* tie-breaking of its one-cut solver.

    Raises:
        SearchError: the tree exceeds ``limit`` enumerated assignments, or no sequence is feasible.
    """
    factors = factorize(k)
    coarse = coarse or coarsen(graph)
    grouped = [n.id for n in graph.nodes if coarse.op_group[n.id] >= 0]
    memo: dict = {}
    budget = [limit]

    def value(j: int, shapes: tuple[Shape, ...], groups: tuple[GroupView, ...]):
        """(V_j, path) with path the (dims, strategies, d_j) of steps j..m."""
        key = (j, shapes, tuple((tuple(g.views[n] for n in grouped), g.held) for g in groups))
        if key in memo:
            return memo[key]
        f = factors[j]
        try:
            p, index = (build_runnable_cut(graph, coarse, shapes, groups, f) if runnable_only
                        else build_cut(graph, coarse, shapes, groups, f, False))
        except SearchError:
            memo[key] = (math.inf, ())
            return memo[key]
        touched = sorted({t for g in p.ops for t in g.tensors()})
        n_x = math.prod(len(p.tensors[t].choices) for t in touched)
        if j == len(factors) - 1:
            budget[0] -= n_x
            if budget[0] < 0:
                raise SearchError(f"brute_force_recursive: the tree exceeds {limit:.3g} assignments")
            sol = brute_force(p)
            memo[key] = (sol.cost, ((_dims(p, sol.x), sol.y, sol.cost),))
            return memo[key]
        classes = []                      # per op group: next views of its ops -> strategies leading there
        for g, nodes in enumerate(index.group_nodes):
            by_view: dict[tuple, list[int]] = {}
            for s in range(len(p.ops[g].strategies)):
                nxt = tuple(next_view(group.views[n], by_node[n][s], f, c)
                            for group, by_node in zip(groups, index.group_strategies)
                            for c in range(f) for n in nodes)
                by_view.setdefault(nxt, []).append(s)
            classes.append(list(by_view.items()))
        n_y = math.prod(len(c) for c in classes)
        budget[0] -= n_x * n_y
        if budget[0] < 0:
            raise SearchError(f"brute_force_recursive: the tree exceeds {limit:.3g} assignments")
        best = (math.inf, ())
        step_min = brute_force(p).cost if step_optimal else None
        for combo in itertools.product(*(range(len(p.tensors[t].choices)) for t in touched)):
            x = [0] * len(p.tensors)
            for t, c in zip(touched, combo):
                x[t] = c
            dims = _dims(p, x)
            tensor_dims = [dims[coarse.tensor_group[t]] for t in range(len(shapes))]
            nxt_shapes = tuple(_cut(s, d, f) for s, d in zip(shapes, tensor_dims))
            per_class = [[(min((p.op_cost(p.ops[g], s, x), s) for s in members), nv) for nv, members in cl]
                         for g, cl in enumerate(classes)]
            for pick in itertools.product(*per_class):
                d = sum(c for (c, _), _ in pick)
                if d >= best[0] or (step_optimal and d != step_min):
                    continue          # futures are >= 0
                nxt_groups = []
                for gi, group in enumerate(groups):
                    for c in range(f):
                        views = list(group.views)
                        for nodes, (_, nv) in zip(index.group_nodes, pick):
                            at = (gi * f + c) * len(nodes)
                            for n, v in zip(nodes, nv[at:at + len(nodes)]):
                                views[n] = v
                        held = tuple(slice_box(b, dd, f, c) for b, dd in zip(group.held, tensor_dims))
                        nxt_groups.append(GroupView(tuple(views), held))
                future, path = value(j + 1, nxt_shapes, tuple(nxt_groups))
                total = d + future
                if total < best[0]:
                    best = (total, ((dims, tuple(s for (_, s), _ in pick), d),) + path)
        memo[key] = best
        return best

    total, path = value(0, tuple(t.shape for t in graph.tensors), (GroupView.whole(graph),))
    if math.isinf(total):
        raise SearchError(f"no sequence of cuts splits '{graph.name}' {k} ways")
    return KWayOptimum(factors, total, tuple(d for _, _, d in path), tuple(dims for dims, _, _ in path),
                       tuple(tuple(y) for _, y, _ in path))


def _dims(p: CutProblem, x: Sequence[int]) -> tuple[int | None, ...]:
    return tuple(t.choices[c] for t, c in zip(p.tensors, x))


@dataclass(frozen=True)
class KWayProblem:
    """Every sequence of cuts of a graph as one :class:`CutProblem` (see :func:`kway_problem`).

    In ``problem``, a tensor group's choices are its dimension sequences (one dimension or None per step)
    and an op group's strategies its strategy sequences (split variables joined by '/'); ``op_sequences``
    gives each as strategy indices into the options of every step. ``step_const`` and ``step_tables``
    hold d_j alone, unweighted, per step: [step][op group] -> const per sequence, and -> {tensor group:
    table[op sequence][tensor sequence]}."""

    factors: tuple[int, ...]
    problem: CutProblem
    op_sequences: tuple[tuple[tuple[int, ...], ...], ...]
    step_const: tuple[tuple[np.ndarray, ...], ...]
    step_tables: tuple[tuple[dict[int, np.ndarray], ...], ...]

    def step_costs(self, x: Sequence[int], y: Sequence[int]) -> tuple[float, ...]:
        """d_j of every step for the sequences (x, y)."""
        return tuple(float(sum(const[g][y[g]] + sum(float(tb[y[g], x[t]]) for t, tb in tables[g].items())
                               for g in range(len(self.problem.ops))))
                     for const, tables in zip(self.step_const, self.step_tables))

    def decode(self, x: Sequence[int], y: Sequence[int]) -> KWayOptimum:
        d = self.step_costs(x, y)
        return KWayOptimum(self.factors, float(sum(d)), d,
                           tuple(tuple(t.choices[x[t.id]][j] for t in self.problem.tensors)
                                 for j in range(len(self.factors))),
                           tuple(tuple(self.op_sequences[g][y[g]][j] for g in range(len(self.problem.ops)))
                                 for j in range(len(self.factors))))

    def encode(self, plan: KWayOptimum) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The (x, y) of a sequence of cuts, e.g. :func:`recursive_sequences` of the recursive plan.

        Raises:
            SearchError: a dimension or strategy sequence of the plan is not in the problem.
        """
        try:
            x = tuple(t.choices.index(tuple(dims[t.id] for dims in plan.tensor_dims)) for t in self.problem.tensors)
            y = tuple(self.op_sequences[g].index(tuple(ys[g] for ys in plan.op_strategies))
                      for g in range(len(self.problem.ops)))
        except ValueError:
            raise SearchError("the plan's cuts are not sequences of this k-way problem") from None
        return x, y


def kway_problem(graph: Graph, k: int, coarse: Coarsening | None = None,
                 runnable_only: bool = True) -> KWayProblem:
    """All sequences of cuts of ``graph`` for k = f_1 ... f_m workers, written as one cut problem.

    Claim: step j's cost is separable per (op group g, tensor group t) *across steps*, with

        d_j = sum_g [ C_j(g; s_1..s_j) + sum_t T_j(g, t; s_1..s_j; c_1..c_j) ],

    where s_1..s_j are g's strategies and c_1..c_j t's dimensions at steps 1..j. Indeed in
    :func:`~tofu.search.cost.build_cut` an op's costs in every worker group come from the group's view of it,
    which only the op's own earlier strategies change (``next_view``), and from the boxes of its tensors
    that the group holds, which only each tensor's own earlier dimensions change. Merged element-wise ops
    cost nothing at every step. Hence, with a choice per tensor group being a dimension *sequence* sigma and
    a strategy per op group a strategy *sequence* tau (every sequence valid at each step's shapes and views;
    sequences through a step where the op cannot be split are left out),

        total(sigma, tau) = sum_j d_j = sum_g [ sum_j C_j(g; tau_g) + sum_t sum_j T_j(g, t; tau_g; sigma_t) ]

    has exactly the form of a one-cut problem, and any exact one-cut solver (``solve_dp``,
    :func:`solve_ilp`, :func:`brute_force`) gives the optimum over all sequences of cuts. Its size is the
    number of sequences: up to (choices)^m per tensor group and (strategies)^m per op group.

    Raises:
        SearchError: some op group has no feasible strategy sequence.
    """
    factors = factorize(k)
    m = len(factors)
    coarse = coarse or coarsen(graph)
    members: dict[int, list[int]] = {}
    for t in graph.tensors:
        members.setdefault(coarse.tensor_group[t.id], []).append(t.id)

    def dim_sequences(shape: Shape, j: int) -> list[tuple[int | None, ...]]:
        if j == m:
            return [()]
        return [(d,) + rest for d in choices(shape, factors[j])
                for rest in dim_sequences(_cut(shape, d, factors[j]), j + 1)]

    tseqs = []
    for gid in range(coarse.n_tensor_groups):
        ids = members[gid]
        tseqs.append(dim_sequences(graph.tensors[ids[0]].shape, 0))
    tensors = tuple(TensorGroup(gid, graph.tensors[members[gid][0]].name, tuple(tseqs[gid]),
                                sum(graph.tensors[t].nbytes for t in members[gid]),
                                tuple(graph.tensors[t].name for t in members[gid]),
                                graph.tensors[members[gid][0]].shape) for gid in range(coarse.n_tensor_groups))
    group_nodes: dict[int, list[int]] = {}
    for node in graph.nodes:
        if coarse.op_group[node.id] >= 0:
            group_nodes.setdefault(coarse.op_group[node.id], []).append(node.id)
    order = sorted(group_nodes, key=lambda g: group_nodes[g][0])
    ops, op_seqs, step_const, step_tables = [], [], [], []
    for new_id, g in enumerate(order):
        nodes = group_nodes[g]
        records = _op_sequences(graph, coarse, nodes, factors, runnable_only)
        if not records:
            raise SearchError(f"op group '{graph.nodes[nodes[0]].name}' cannot be split {k} ways by any "
                              f"sequence of cuts")
        touched = sorted({coarse.tensor_group[t] for n in nodes for t in graph.nodes[n].inputs +
                          graph.nodes[n].outputs})
        consts = [np.array([r.const[j] for r in records]) for j in range(m)]
        tables = [{t: np.zeros((len(records), len(tseqs[t]))) for t in touched} for _ in range(m)]
        for ri, r in enumerate(records):
            for j in range(m):
                for t, row in _sequence_terms(graph, coarse, nodes, factors, r, j, tseqs, touched,
                                              runnable_only).items():
                    tables[j][t][ri] = row
        tables = [{t: tb for t, tb in step.items() if tb.any()} for step in tables]
        terms = tuple((t, tuple(map(tuple, sum(tb[t] for tb in tables if t in tb).tolist())))
                      for t in touched if any(t in tb for tb in tables))
        ops.append(OpGroup(new_id, graph.nodes[nodes[0]].name, tuple("/".join(r.names) for r in records),
                           tuple("/".join(r.kinds) for r in records), tuple(float(c) for c in sum(consts)),
                           terms, tuple(r.produces for r in records), nodes[0]))
        op_seqs.append(tuple(r.seq for r in records))
        step_const.append(consts)
        step_tables.append(tables)
    problem = CutProblem(k, tensors, tuple(ops))
    return KWayProblem(factors, problem, tuple(op_seqs),
                       tuple(tuple(c[j] for c in step_const) for j in range(m)),
                       tuple(tuple(tb[j] for tb in step_tables) for j in range(m)))


@dataclass(frozen=True)
class _OpSequence:
    seq: tuple[int, ...]                              # strategy index per step
    names: tuple[str, ...]
    kinds: tuple[str, ...]
    const: tuple[float, ...]                          # per step, over all worker groups
    views: tuple[tuple[tuple[NodeView, ...], ...], ...]   # per step: per worker group, the views of the nodes
    produces: tuple[tuple[int, int | None], ...]      # step 1's


def _options(graph: Graph, nodes: Sequence[int], views: Sequence[NodeView], f: int, runnable_only: bool,
             held=None) -> list:
    """The options of the nodes of an op group seen as ``views``, MXNet-runnable ones only if asked."""
    out = []
    for n, v in zip(nodes, views):
        node = graph.nodes[n]
        excluded = not_runnable(graph, node, v, f) if runnable_only else frozenset()
        out.append(node_options(graph, node, v, f, runnable_only, excluded, held))
    return out


def _op_sequences(graph: Graph, coarse: Coarsening, nodes: Sequence[int], factors: tuple[int, ...],
                  runnable_only: bool) -> list[_OpSequence]:
    """Every feasible strategy sequence of one op group, with every worker group's views at every step."""
    out: list[_OpSequence] = []

    def expand(j: int, groups: tuple[tuple[NodeView, ...], ...], prefix: _OpSequence) -> None:
        if j == len(factors):
            out.append(prefix)
            return
        f = factors[j]
        try:
            per_group = [_options(graph, nodes, views, f, runnable_only) for views in groups]
        except SearchError:
            return                                    # a dead end: the op cannot be split here
        names = tuple(o.strategy.var for o in per_group[0][0])
        if any(tuple(o.strategy.var for o in opts) != names for opts in per_group[0]):
            raise SearchError(f"tied ops of group '{graph.nodes[nodes[0]].name}' differ in strategies")
        # a strategy some worker group lacks is not offered (as build_cut does)
        names = tuple(v for v in names if all(v in {o.strategy.var for o in options[0]} for options in per_group))
        per_group = [[[next(o for o in opts if o.strategy.var == v) for v in names] for opts in options]
                     for options in per_group]
        for s in range(len(names)):
            const = sum(opts[s].const for options in per_group for opts in options)
            produces = prefix.produces
            if j == 0:
                node = graph.nodes[nodes[0]]
                produces = tuple((coarse.tensor_group[t], p.dim if isinstance(p, SplitDim) else None)
                                 for t, p in zip(node.outputs, per_group[0][0][s].strategy.outputs))
            nxt = tuple(tuple(next_view(v, opts[s].strategy, f, c) for v, opts in zip(views, options))
                        for views, options in zip(groups, per_group) for c in range(f))
            expand(j + 1, nxt, _OpSequence(prefix.seq + (s,), prefix.names + (names[s],),
                                           prefix.kinds + (per_group[0][0][s].strategy.kind,),
                                           prefix.const + (const,), prefix.views + (groups,), produces))

    expand(0, (tuple(NodeView.of(graph, graph.nodes[n]) for n in nodes),), _OpSequence((), (), (), (), (), ()))
    return out


def _sequence_terms(graph: Graph, coarse: Coarsening, nodes: Sequence[int], factors: tuple[int, ...],
                    r: _OpSequence, j: int, tseqs, touched, runnable_only: bool) -> dict[int, np.ndarray]:
    """Step j's cost of op sequence ``r`` against every dimension sequence of each touched tensor group: the
    held boxes follow from the sequence's first j dimensions, one evaluation per distinct prefix."""
    f = factors[j]
    prefixes = {t: list(dict.fromkeys(seq[:j] for seq in tseqs[t])) for t in touched}
    rows = {t: np.zeros(len(tseqs[t])) for t in touched}
    for p in range(max(len(v) for v in prefixes.values())):
        pick = {t: prefixes[t][min(p, len(prefixes[t]) - 1)] for t in touched}
        for gi, views in enumerate(r.views[j]):
            held = tuple(held_box(t.shape, pick[coarse.tensor_group[t.id]], factors[:j], gi)
                         if coarse.tensor_group[t.id] in pick else tuple((0, n) for n in t.shape)
                         for t in graph.tensors)
            options = _options(graph, nodes, views, f, runnable_only, held)
            fetched = set()
            for n, opts in zip(nodes, options):
                o = next(o for o in opts if o.strategy.var == r.names[j])
                n_in = len(views[nodes.index(n)].inputs)
                for q, (t, per_dim) in enumerate(o.terms):
                    tg = coarse.tensor_group[t]
                    if p >= len(prefixes[tg]):
                        continue
                    if q < n_in:
                        if t in fetched:
                            continue        # a tied op reads the same tensor: fetched once
                        fetched.add(t)
                    for i, seq in enumerate(tseqs[tg]):
                        if seq[:j] == prefixes[tg][p]:
                            rows[tg][i] += per_dim[seq[j]]
    return rows


def kway_optimum(graph: Graph, k: int, solver: Callable[[CutProblem], CutSolution] = solve_ilp,
                 coarse: Coarsening | None = None) -> KWayOptimum:
    """The cheapest sequence of cuts, by solving :func:`kway_problem` with an exact one-cut ``solver``."""
    kp = kway_problem(graph, k, coarse)
    sol = solver(kp.problem)
    return kp.decode(sol.x, sol.y)


def kway_ilp(graph: Graph, k: int, time_limit: float | None = None,
             coarse: Coarsening | None = None) -> KWayOptimum:
    """The cheapest sequence of cuts for k workers as ONE integer program: :func:`solve_ilp` (local-polytope
    form, ``tight``) on :func:`kway_problem`; exact by its separability argument, which the tests check
    against :func:`brute_force_recursive` and by replaying the optimum through the recursion."""
    return kway_optimum(graph, k, lambda p: solve_ilp(p, time_limit, tight=True), coarse)


def replay(graph: Graph, plan: KWayOptimum, coarse: Coarsening | None = None) -> tuple[CutStep, ...]:
    """Runs :func:`tofu.search.recursive.search` with every step's cut forced to ``plan``'s: the recursion's
    own account (shapes, views, ``total_cost``) of a sequence of cuts found by another method.

    Raises:
        SearchError: a cut of the plan is not a choice of the recursion's problem at that step.
    """
    steps = iter(range(len(plan.factors)))

    def forced(p: CutProblem) -> CutSolution:
        j = next(steps)
        try:
            x = tuple(t.choices.index(plan.tensor_dims[j][t.id]) for t in p.tensors)
        except ValueError:
            raise SearchError(f"step {j + 1} of the plan splits a tensor along a dimension the recursion "
                              f"cannot split there") from None
        y = tuple(plan.op_strategies[j])
        p.check(x, y)
        return CutSolution(x, y, p.cost(x, y))

    return search(graph, plan.factors, forced, coarse, eager=True)

"""The exact one-cut DP (PAPER.md, "Search"; as in OptCNN/ICML'18, generalised to any graph).

Input: a :class:`~tofu.search.problem.CutProblem`. Output: an optimal :class:`CutSolution`.

Variable elimination along the op groups' topological order. After processing op groups 1..i, the
*frontier* F_i is the set of tensor groups touched by some processed group and by some unprocessed one
(tensors produced and still to be consumed: a ResNet shortcut stays in it across its block). With
C_i(a) the least cost of groups 1..i given the frontier's choices a,

    C_i(a') = min over (a, n, s) consistent with a' of  C_{i-1}(a) + cost_i(s; a, n)

where n are the choices of the tensor groups group i touches first and s its strategy. A tensor group that
group i touches first *and* last (a weight read by one op) is minimised out per strategy instead of being
enumerated. Costs are separable per tensor group (problem.py), so the recurrence is exact: the DP returns
the minimum of CutProblem.cost over all assignments. Ties break towards the lowest indices (deterministic).
"""
from __future__ import annotations

import itertools
import math
import operator

import numpy as np

from tofu.errors import SearchError
from tofu.search.problem import CutProblem, CutSolution


def solve_dp(p: CutProblem) -> CutSolution:
    """The minimum-cost assignment of ``p`` (exact).

    Raises:
        SearchError: an op group has no strategy.
    """
    n_ops = len(p.ops)
    if any(g.id != i for i, g in enumerate(p.ops)):
        raise SearchError("op groups must be numbered in their order")
    last = {}
    for i, g in enumerate(p.ops):
        if not g.strategies:
            raise SearchError(f"op group '{g.name}' has no strategy for {p.k} workers")
        for t in g.tensors():
            last[t] = i
    frontier: tuple[int, ...] = ()
    # a layer: its states (one row of frontier choices each, in order of first reach) and their least costs
    states = np.zeros((1, 0), dtype=np.int64)
    costs = np.zeros(1)
    history = []      # per op group: (frontier before, its states, persistent new, transient, combos, back)
    seen: set[int] = set()
    for i, g in enumerate(p.ops):
        touched = list(dict.fromkeys(g.tensors()))
        new = [t for t in touched if t not in seen]
        transient = [t for t in new if last[t] == i]
        persistent = [t for t in new if last[t] != i]
        n_s = len(g.strategies)
        agg: dict[int, tuple] = {}          # per tensor group: table[s][c], repeated terms summed
        for t, table in g.terms:
            agg[t] = table if t not in agg else tuple(tuple(a + b for a, b in zip(ra, rb))
                                                      for ra, rb in zip(agg[t], table))
        # per strategy: the constant plus the best total over the transient tensor groups
        base_s = [g.const[s] + sum(min(agg[t][s]) for t in transient) for s in range(n_s)]
        kept = [t for t in frontier + tuple(persistent) if last[t] > i]
        pos = {t: j for j, t in enumerate(frontier)}
        fixed = [(pos[t], agg[t]) for t in touched if t in pos]
        pers = [agg[t] for t in persistent]
        # where each kept tensor group's choice comes from: the old state or the enumerated combination
        source = [(0, pos[t]) if t in pos else (1, persistent.index(t)) for t in kept]
        ranges = [range(len(p.tensors[t].choices)) for t in persistent]
        # the persistent tensor groups' cost per combination and strategy does not depend on the state
        combos = [(combo, [sum(tb[s][ch] for tb, ch in zip(pers, combo)) for s in range(n_s)])
                  for combo in itertools.product(*ranges)]
        width = len(frontier)
        picks = [j if src == 0 else width + j for src, j in source]          # of state + combo
        expand = _expand if len(costs) * len(combos) * n_s >= _VECTOR_FROM else _loop
        nxt_states, nxt_costs, back = expand(states, costs, fixed, base_s, combos, picks,
                                             [len(p.tensors[t].choices) for t in kept])
        history.append((frontier, states, tuple(persistent), tuple(transient), combos, back))
        seen.update(new)
        frontier, states, costs = tuple(kept), nxt_states, nxt_costs
    # backtrack from the single empty frontier
    x = [0] * len(p.tensors)
    y = [0] * n_ops
    row = 0
    cost = float(costs[0])
    for i in range(n_ops - 1, -1, -1):
        frontier_before, before, persistent, transient, combos, (rows, combo_at, strategy_at) = history[i]
        s = int(strategy_at[row])
        y[i] = s
        for t, c in zip(persistent, combos[int(combo_at[row])][0]):
            x[t] = c
        g = p.ops[i]
        for t in transient:
            x[t] = min(range(len(p.tensors[t].choices)),
                       key=lambda c: sum(tb[s][c] for tt, tb in g.terms if tt == t))
        row = int(rows[row])
        for t, c in zip(frontier_before, before[row].tolist()):
            x[t] = c
    return CutSolution(tuple(x), tuple(y), cost)


def _loop(states, costs, fixed, base_s, combos, picks, sizes):
    """One layer of the recurrence, state by state (small layers): the next states in order of their first
    (state, combination) pair, each with its least cost (the first pair reaching it on ties) and where that
    came from (state row, combination, strategy)."""
    key_of = _picker(picks)
    strategies = range(len(base_s))
    nxt: dict[tuple[int, ...], float] = {}
    back: dict[tuple[int, ...], tuple] = {}
    for r, (state, base) in enumerate(zip(map(tuple, states.tolist()), costs.tolist())):
        fixed_cost = [base_s[s] + sum(tb[s][state[j]] for j, tb in fixed) for s in strategies]
        for c, (combo, extra) in enumerate(combos):
            cand = [a + b for a, b in zip(fixed_cost, extra)] if combo else fixed_cost
            best = min(cand)
            total = base + best
            key = key_of(state + combo)
            old = nxt.get(key)
            if old is None or total < old:
                nxt[key] = total
                back[key] = (r, c, cand.index(best))
    keys = list(nxt)
    rows, combo_at, strategy_at = zip(*(back[k] for k in keys))
    return (np.array(keys, dtype=np.int64).reshape(len(keys), len(picks)), np.array([nxt[k] for k in keys]),
            (rows, combo_at, strategy_at))


def _picker(indices: list[int]):
    """A function returning the tuple of its argument's items at ``indices``."""
    if not indices:
        return lambda row: ()
    if len(indices) == 1:
        i = indices[0]
        return lambda row: (row[i],)
    return operator.itemgetter(*indices)


_VECTOR_FROM = 256
"""Layers with at least this many (state, combination, strategy) triples are expanded with numpy."""


def _expand(states, costs, fixed, base_s, combos, picks, sizes):
    """One layer of the recurrence with numpy, equal to the loop in :func:`solve_dp` term for term: the same
    additions in the same order, the first least strategy, and per next state the first least (state,
    combination) pair in the loop's order, next states in order of their first pair."""
    base = costs
    acc = np.zeros((len(states), len(base_s)))
    for j, tb in fixed:
        acc = acc + np.asarray(tb, dtype=float)[:, states[:, j]].T
    fixed_cost = np.asarray(base_s, dtype=float) + acc                            # [state, s]
    combo_rows = np.array([c for c, _ in combos], dtype=np.int64).reshape(len(combos), len(combos[0][0]))
    extra = np.array([e for _, e in combos], dtype=float)                         # [combo, s]
    pair = fixed_cost[:, None, :] + extra[None, :, :]
    best_s = pair.argmin(axis=2).ravel()
    total = (base[:, None] + pair.min(axis=2)).ravel()                           # state-major, as the loop
    n_c = len(combos)
    rows = np.concatenate([np.repeat(states, n_c, axis=0), np.tile(combo_rows, (len(states), 1))], axis=1)
    keys = rows[:, picks]
    if math.prod(sizes) < 2 ** 62:      # the next state as one number, or its rank among the next states
        code = np.zeros(len(total), dtype=np.int64)
        for col, n in zip(keys.T, sizes):
            code = code * n + col
    else:
        code = np.unique(keys, axis=0, return_inverse=True)[1].ravel()
    order = np.lexsort((np.arange(len(total)), total, code))
    heads = order[np.r_[True, code[order][1:] != code[order][:-1]]]             # per code: least, then first
    first = np.unique(code, return_index=True)[1]                                # per code: its first pair
    heads = heads[np.argsort(first, kind="stable")]
    return keys[heads], total[heads], (heads // n_c, heads % n_c, best_s[heads])

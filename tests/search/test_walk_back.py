"""tofu.search.copies._Replay.walk_back, which symbols MXNet runs and which a gradient reaches, against its
definition walked symbol by symbol from the highest (symbols are numbered in a topological order), on the
replays of real plans."""
from __future__ import annotations

import numpy as np
import pytest

from tofu.api import load_graph
from tofu.models import ModelOptions
from tofu.search.algorithms import plan_graph
from tofu.search.copies import _Replay

CASES = [("mlp", 4, "tofu"), ("rnn-tiny", 4, "tofu"), ("gpt-tiny", 4, "megatron"), ("wresnet-tiny", 4, "spartan"),
         ("gpt-tiny", 2, "tofu")]


def replay(name: str, workers: int, algo: str) -> tuple[_Replay, list[int]]:
    """The replay of ``algo``'s plan and the graph outputs' symbols it walks back from."""
    graph = load_graph(name, ModelOptions(), {}, True)
    plan = plan_graph(graph, workers, algo, concurrent=False)
    node, tensor = {n.name: n.id for n in graph.nodes}, {t.name: t.id for t in graph.tensors}
    choices = [[None] * len(plan.steps) for _ in graph.nodes]
    dims = [[None] * len(plan.steps) for _ in graph.tensors]
    for j, step in enumerate(plan.steps):
        for name, choice in step.op_choices:
            choices[node[name]][j] = choice
        for name, d in step.tensor_dims:
            dims[tensor[name]][j] = d
    found = _Replay(graph, tuple(s.factor for s in plan.steps), dims, [tuple(c) for c in choices])
    roots: list[int] = []
    walk = found.walk_back
    found.walk_back = lambda seeds: roots.extend(seeds) or walk(seeds)
    found.run()
    del found.walk_back
    return found, roots


def reference(found: _Replay, roots: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """From the outputs (run, reached) down: a run symbol runs its inputs, and gives each a gradient when its
    edge's bit says so (bit 0 when a gradient reached the symbol, bit 1 when only zeros did)."""
    sym = found.sym
    live, reached = [False] * sym.n, [False] * sym.n
    for s in roots:
        live[s] = reached[s] = True
    ends, edges, codes = sym.ends[:sym.n].tolist(), sym.edges[:sym.m].tolist(), sym.codes[:sym.m].tolist()
    for s in reversed(range(sym.n)):
        if live[s]:
            for e in range(ends[s - 1] if s else 0, ends[s]):
                live[edges[e]] = True
                reached[edges[e]] |= bool(codes[e] & (1 if reached[s] else 2))
    return np.array(live), np.array(reached)


@pytest.mark.parametrize("name,workers,algo", CASES)
def test_the_searches_find_what_the_walk_finds(name, workers, algo):
    found, roots = replay(name, workers, algo)
    live, reached = found.walk_back(roots)
    want_live, want_reached = reference(found, roots)
    assert found.sym.n > 100 and want_live.sum() > 100
    assert (live == want_live).all() and (reached == want_reached).all()


def test_some_symbols_run_without_a_gradient():
    """The walk is not all or nothing: rnn-tiny's replay runs symbols that only MXNet's zeros reach."""
    found, roots = replay("rnn-tiny", 4, "tofu")
    live, reached = found.walk_back(roots)
    assert 0 < reached.sum() < live.sum()


def test_edges_that_pass_zeros_alone_are_walked_in_order():
    found, roots = replay("gpt-tiny", 2, "tofu")
    before = reference(found, roots)[1]
    codes = found.sym.codes[:found.sym.m]
    codes[codes == 3] = 2           # a backward that gives a gradient from zeros only (no MXNet op does)
    live, reached = found.walk_back(roots)
    want_live, want_reached = reference(found, roots)
    assert (reached != before).any()
    assert (live == want_live).all() and (reached == want_reached).all()

"""The worker groups held as view classes and rows of origins (tofu.search.groups) against the groups made one
by one, as the recursion made them before: every group's view of every op moved by ``next_view`` (or
``follow_view`` for a merged element-wise op) with its own strategies, and its held boxes sliced."""
from __future__ import annotations

import pytest

from tofu.analysis.views import follow_view, next_view
from tofu.api import ModelOptions, load_graph
from tofu.search.coarsen import coarsen
from tofu.search.cost import GroupView, build_cut
from tofu.search.dp import solve_dp
from tofu.search.groups import Groups, slice_box
from tofu.search.recursive import _apply, _cut, _solve_runnable, factorize


def _one_by_one(graph, index, solution, groups: Groups, dims, f) -> list[GroupView]:
    group_of = {nid: g for g, nodes in enumerate(index.group_nodes) for nid in nodes}
    out = []
    for g, by_node in enumerate(index.group_strategies):
        views, held = groups.views(g), groups.held(g)
        for c in range(f):
            moved = [next_view(v, by_node[n][solution.y[group_of[n]]], f, c) if n in group_of
                     else follow_view(v, dims[graph.nodes[n].outputs[0]], f, c) for n, v in enumerate(views)]
            out.append(GroupView(tuple(moved), tuple(slice_box(b, d, f, c) for b, d in zip(held, dims))))
    return out


@pytest.mark.parametrize("model,workers", [("mlp", 8), ("rnn-tiny", 4), ("wresnet-tiny", 8), ("wresnet-tiny", 12),
                                           ("gpt-tiny", 8)])
def test_cut_moves_every_group_as_one_by_one(model, workers):
    graph = load_graph(model, with_loss=True)
    coarse = coarsen(graph)
    factors = factorize(workers)
    shapes = [t.shape for t in graph.tensors]
    groups = Groups.whole(graph)
    compared = 0
    for j, f in enumerate(factors[:-1]):
        problem, index, solution = _solve_runnable(graph, coarse, shapes, groups, f, solve_dp, True, factors[j + 1])
        dims = tuple(problem.tensors[coarse.tensor_group[t.id]].choices[solution.x[coarse.tensor_group[t.id]]]
                     for t in graph.tensors)
        _, after = _apply(graph, solution, index, dims, f)
        expected = _one_by_one(graph, index, solution, index.groups, dims, f)
        assert after.count == len(expected)
        for g, group in enumerate(expected):
            assert after.views(g) == group.views
            assert after.held(g) == group.held
            compared += 1
        shapes = [_cut(s, d, f) for s, d in zip(shapes, dims)]
        # the same cut costed from the groups one by one: the same problem
        again, _ = build_cut(graph, coarse, shapes, expected, factors[j + 1], True, frozenset())
        assert again == build_cut(graph, coarse, shapes, after, factors[j + 1], True, frozenset())[0]
        groups = after
    assert compared >= 2 * len(factors) - 2


def test_classes_share_a_shard_and_round_trip():
    """Groups read back from their views one by one have the same views, held boxes and classes."""
    graph = load_graph("wresnet-tiny", with_loss=True)
    coarse = coarsen(graph)
    shapes = [t.shape for t in graph.tensors]
    groups = Groups.whole(graph)
    for f in (2, 2):
        problem, index, solution = _solve_runnable(graph, coarse, shapes, groups, f, solve_dp, True, 2)
        dims = tuple(problem.tensors[coarse.tensor_group[t.id]].choices[solution.x[coarse.tensor_group[t.id]]]
                     for t in graph.tensors)
        groups = _apply(graph, solution, index, dims, f)[1]
        shapes = [_cut(s, d, f) for s, d in zip(shapes, dims)]
    again = Groups.of_views(graph, shapes, [groups.views(g) for g in range(groups.count)],
                            [groups.held(g) for g in range(groups.count)])
    assert again.count == groups.count == 4
    for g in range(4):
        assert again.views(g) == groups.views(g) and again.held(g) == groups.held(g)
    for n in range(len(graph.nodes)):
        assert sorted(c.members.tolist() for c in again.classes[n]) == sorted(c.members.tolist()
                                                                             for c in groups.classes[n])
        for c in groups.classes[n]:
            assert all(c.view(r).in_shapes == c.shard.in_shapes for r in range(len(c.members)))
    # fewer classes than views: the groups share shards
    assert sum(len(c) for c in groups.classes) < groups.count * len(graph.nodes)


@pytest.mark.parametrize("model,batch,workers", [("wresnet-tiny", None, 8), ("wresnet-tiny", 2, 8), ("gpt-tiny", None, 8),
                                                 ("rnn-tiny", None, 8)])
def test_rows_made_in_python_or_numpy_cost_alike(model, batch, workers, monkeypatch):
    """A class's rows are made in Python for a few members and by numpy for more: the same cut either way (at
    batch 2 the last cut splits images, whose halos reach past the tensors' edges)."""
    from tofu.search import cost

    graph = load_graph(model, ModelOptions(batch=batch), with_loss=True)
    coarse = coarsen(graph)
    factors = factorize(workers)
    shapes = [t.shape for t in graph.tensors]
    groups = Groups.whole(graph)
    for j, f in enumerate(factors[:-1]):
        problem, index, solution = _solve_runnable(graph, coarse, shapes, groups, f, solve_dp, True, factors[j + 1])
        dims = tuple(problem.tensors[coarse.tensor_group[t.id]].choices[solution.x[coarse.tensor_group[t.id]]]
                     for t in graph.tensors)
        groups = _apply(graph, solution, index, dims, f)[1]
        shapes = [_cut(s, d, f) for s, d in zip(shapes, dims)]
    assert groups.count == workers // factors[-1] > 1
    made = []
    for few in (0, 10 ** 9):
        monkeypatch.setattr(cost, "_FEW", few)
        cost.clear_caches()
        made.append(build_cut(graph, coarse, shapes, groups, factors[-1], True, frozenset())[0])
    assert made[0] == made[1]


def test_the_whole_group_is_every_op_whole():
    """Before the first cut: one group, each op its whole view at the origin, each tensor held whole."""
    for model in ("mlp", "gpt-tiny"):
        graph = load_graph(model, with_loss=True)
        whole = Groups.whole(graph)
        one = GroupView.whole(graph)
        assert whole.count == 1 and whole.views(0) == one.views and whole.held(0) == one.held
        again = Groups.of_views(graph, [t.shape for t in graph.tensors], [one.views], [one.held])
        assert [[c.shard for c in x] for x in whole.classes] == [[c.shard for c in x] for x in again.classes]

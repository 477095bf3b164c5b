"""Per-worker composition of a plan's steps (tofu.analysis.compose) against brute force: the held boxes tile
every tensor, and every worker's composed call reads and writes what the chain of one-step strategies says,
checked by running MXNet's kernel on the composed pieces and reassembling the whole output in numpy."""
import itertools
import math

import numpy as np
import pytest

from tofu.analysis.compose import ChoiceKind, OpChoice, compose, coordinates, held_box
from tofu.analysis.strategies import strategies
from tofu.analysis.views import NodeView
from tofu.graph.attrs import Attrs
from tofu.graph.single_op import run_op


@pytest.mark.parametrize("factors", [(2,), (3,), (2, 2), (2, 3), (2, 2, 2), (3, 2)])
def test_coordinates_enumerate_every_worker_once(factors):
    seen = {coordinates(w, factors) for w in range(math.prod(factors))}
    assert seen == set(itertools.product(*(range(f) for f in factors)))


@pytest.mark.parametrize("factors,dims", [((2,), (0,)), ((2, 2), (0, 1)), ((2, 2), (1, 1)), ((2, 2), (None, 0)),
                                          ((2, 3), (1, 0)), ((2, 2, 2), (0, None, 1))])
def test_held_boxes_are_the_nested_slices(factors, dims):
    shape = (12, 12)
    k = math.prod(factors)
    cover = np.zeros(shape, int)
    for w in range(k):
        box = held_box(shape, dims, factors, w)
        # brute force: cut an index grid step by step as the docstring says
        idx = np.indices(shape)
        keep = np.ones(shape, bool)
        for d, f, c in zip(dims, factors, coordinates(w, factors)):
            if d is None:
                continue
            held = sorted(set(idx[d][keep].tolist()))
            part = np.array_split(np.array(held), f)[c]
            keep &= np.isin(idx[d], part)
        expected = tuple((int(idx[d][keep].min()), int(idx[d][keep].max()) + 1) for d in range(2))
        assert box == expected
        cover[tuple(slice(a, b) for a, b in box)] += 1
    replicas = math.prod(f for f, d in zip(factors, dims) if d is None)
    assert (cover == replicas).all()


def _conv_view(n=4, c=4, h=8, o=8):
    attrs = Attrs.of(kernel=(3, 3), pad=(1, 1), num_filter=o, no_bias=True)
    return NodeView("Convolution", attrs, ((n, c, h, h), (o, c, 3, 3)), ((n, o, h, h),), (0, 1), (2,))


def _choices(view, f):
    return [OpChoice.of(s) for s in strategies(view.describe(), f)]


def _run(view, choices, factors, arrays):
    """Every worker's composed call run by MXNet's kernel; outputs reassembled (partials summed)."""
    full = run_op(view.op, view.attrs, arrays)[0]
    got = np.zeros_like(full)
    seen = np.zeros(full.shape, int)
    for call in compose(view, choices, factors):
        pieces = []
        for p in call.inputs:
            piece = np.full([b - a for a, b in p.box], p.fill, np.float32)
            inner = tuple(slice(da - a, db - a) for (a, _), (da, db) in zip(p.box, p.data))
            piece[inner] = arrays[p.input][tuple(slice(a, b) for a, b in p.data)]
            pieces.append(np.zeros_like(piece) if p.zeroed else piece)
        out = run_op(view.op, call.attrs, pieces)[0]
        region = tuple(slice(a, b) for a, b in call.outputs[0].box)
        got[region] += out
        seen[region] += 1
    return full, got, seen


@pytest.mark.parametrize("first", range(4))
@pytest.mark.parametrize("second", range(4))
def test_two_steps_of_convolution_reassemble(first, second):
    """Any two strategies of a padded 3x3 convolution, composed over 2 x 2 workers, compute its output."""
    view = _conv_view()
    rng = np.random.default_rng(first * 4 + second)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in view.in_shapes]
    one = _choices(view, 2)
    if first >= len(one):
        pytest.fail(f"the convolution has {len(one)} strategies")
    c1 = one[first]
    # the second step's choices are the strategies of worker 0's view after the first
    from tofu.analysis.views import next_view
    s1 = next(s for s in strategies(view.describe(), 2) if OpChoice.of(s) == c1)
    two = _choices(next_view(view, s1, 2), 2)
    c2 = two[second % len(two)]
    full, got, seen = _run(view, [c1, c2], (2, 2), arrays)
    reduced = {c.kind for c in (c1, c2)} == {ChoiceKind.REDUCE}
    # every element is written by exactly the workers whose partials sum to it
    sums = seen.max()
    assert (seen == sums).all()
    if not reduced and ChoiceKind.REDUCE not in {c1.kind, c2.kind}:
        assert sums == 1
    np.testing.assert_allclose(got, full, rtol=1e-4, atol=1e-4)


def test_choice_json_round_trip_and_validation():
    for c in (OpChoice(ChoiceKind.OUTPUT, "b"), OpChoice(ChoiceKind.REDUCE, "ci"), OpChoice(ChoiceKind.WHOLE, "co"),
              OpChoice(ChoiceKind.FOLLOW, dim=1), OpChoice(ChoiceKind.FOLLOW)):
        assert OpChoice.from_json(c.to_json()) == c
    for bad in ({"kind": "output"}, {"kind": "follow", "dim": "x"}, {"kind": "sideways", "var": "b"},
                {"kind": "reduce", "var": "ci", "dim": 0}):
        with pytest.raises((ValueError, KeyError)):
            OpChoice.from_json(bad)


@pytest.mark.parametrize("picks", [(0, 0, 0), (0, 1, 2), (1, 2, 3), (3, 2, 1), (2, 0, 1)])
@pytest.mark.parametrize("factors", [(2, 2, 2), (2, 1, 2)])
def test_three_steps_of_convolution_reassemble(picks, factors):
    """Three steps composed (workers that share their first coordinates share the state after those steps):
    MXNet's kernel on every worker's pieces reassembles the whole output."""
    from tofu.analysis.views import next_view

    view = _conv_view(n=8, c=8, h=8, o=8)
    rng = np.random.default_rng(sum(picks))
    arrays = [rng.standard_normal(s).astype(np.float32) for s in view.in_shapes]
    chain, seen_view = [], view
    for pick, f in zip(picks, factors):
        found = strategies(seen_view.describe(), f)
        assert found, f"no strategy of {seen_view} over {f}"
        s = found[pick % len(found)]
        chain.append(OpChoice.of(s))
        seen_view = next_view(seen_view, s, f)
    full, got, seen = _run(view, chain, factors, arrays)
    assert (seen == seen.max()).all()
    np.testing.assert_allclose(got, full, rtol=1e-4, atol=1e-4)
    calls = compose(view, chain, factors)
    assert [c.worker for c in calls] == list(range(math.prod(factors)))


def _each_worker_alone(view, choices, factors):
    """Every worker's call advanced step by step on its own: no state, and no step worked out for another
    worker's group, shared with it."""
    from tofu.analysis.compose import _Group

    calls = []
    for w in range(math.prod(factors)):
        group = _Group(view)
        for j, (choice, f, c) in enumerate(zip(choices, factors, coordinates(w, factors))):
            if group.stopped:
                break
            group.advance(j, choice, f, c, w)
        calls.append(group.call(w))
    return tuple(calls)


@pytest.mark.parametrize("model,workers", [("wresnet-tiny", 8), ("rnn-tiny", 8), ("gpt-tiny", 8), ("mlp", 4)])
def test_groups_that_share_a_step_compose_as_each_worker_alone(model, workers):
    """compose works out what a step does to a view once for every group whose view it is: every op of a
    searched plan (follows, kernel splits, crops, statistics exchanges) gives each worker the call it gets
    advanced alone."""
    from tests.oracle import plan_tables
    from tofu.api import load_graph
    from tofu.search.algorithms import plan_graph

    graph = load_graph(model, with_loss=True)
    factors, _, _, choices = plan_tables(graph, plan_graph(graph, workers, "tofu"))
    assert len(factors) >= 2
    kinds = set()
    for node in graph.nodes:
        view = NodeView.of(graph, node)
        calls = compose(view, choices[node.id], factors)
        assert calls == _each_worker_alone(view, choices[node.id], factors), node.name
        kinds |= {c.kind for c in choices[node.id]}
        kinds |= {"exchange"} if calls[0].exchange_steps else set()
    assert {ChoiceKind.FOLLOW, ChoiceKind.OUTPUT} <= kinds
